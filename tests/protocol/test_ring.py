"""Command ring: byte format, SPSC ordering, full/empty edges, corruption, passive tap, two processes."""

from __future__ import annotations

import array
import mmap
import multiprocessing
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lucky_monitor.protocol import ring as ring_mod
from lucky_monitor.protocol.errors import MessageTooLarge, RingCorrupt, RingError, RingFull
from lucky_monitor.protocol.header import RING_HEADER
from lucky_monitor.protocol.ring import (
    MARKER,
    RingReader,
    RingTap,
    RingWriter,
    TapResult,
    entry_size,
    init_ring,
    max_payload,
    ring_size_bytes,
)

OFF = 64  # ring offset inside the test buffer; bytes around it are guards
GUARD = 64
M32 = 0xFFFFFFFF
HYP = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- helpers
def make_buf(cap: int, start: int = 0, fill: int = 0xAB) -> bytearray:
    """Buffer with guard bytes, a ring at OFF with both positions at ``start``, data filled with ``fill``."""
    buf = bytearray([fill]) * (OFF + RING_HEADER + cap + GUARD)
    struct.pack_into("<II", buf, OFF, start & M32, start & M32)
    return buf


def positions(buf) -> tuple[int, int]:
    return struct.unpack_from("<II", buf, OFF)


def set_positions(buf, w: int, r: int) -> None:
    struct.pack_into("<II", buf, OFF, w & M32, r & M32)


def data_of(buf, cap: int) -> bytes:
    return bytes(buf[OFF + RING_HEADER : OFF + RING_HEADER + cap])


def guards_intact(buf, cap: int, fill: int = 0xAB) -> bool:
    end = OFF + RING_HEADER + cap
    return bytes(buf[:OFF]) == bytes([fill]) * OFF and bytes(buf[end:]) == bytes([fill]) * GUARD


def ref_decode(data: bytes, cap: int, r: int, w: int) -> list[bytes]:
    """Independent decoder straight from the spec text (no code shared with the module)."""
    out = []
    while r != w:
        idx = r % cap
        (n,) = struct.unpack("<I", data[idx : idx + 4])
        if n == 0xFFFFFFFF:
            r = (r + cap - idx) % 2**32
            continue
        out.append(data[idx + 4 : idx + 4 + n])
        r = (r + 4 + n + (-(4 + n)) % 8) % 2**32
    return out


def payload_for(i: int, size: int) -> bytes:
    """Payload of ``size`` bytes (>= 4) that names message ``i``."""
    head = struct.pack("<I", i)
    return head + bytes([(i * 31 + 7) & 0xFF]) * (size - 4)


def index_of(payload: bytes) -> int:
    return struct.unpack_from("<I", payload)[0]


# ---------------------------------------------------------------- constants, construction
def test_sizes():
    assert ring_mod.RING_HEADER is RING_HEADER == 8
    assert ring_size_bytes(512 * 1024) == 8 + 512 * 1024
    assert max_payload(64) == 24 and max_payload(512 * 1024) == 256 * 1024 - 8
    assert [entry_size(n) for n in (1, 4, 5, 12, 13)] == [8, 8, 16, 16, 24]
    assert entry_size(max_payload(1024)) == 512


@pytest.mark.parametrize(
    ("offset", "cap", "size"),
    [(OFF, 48, 4096), (OFF, 32, 4096), (OFF, 1 << 31, 4096), (OFF + 4, 64, 4096), (-8, 64, 4096), (OFF, 64, 100)],
)
def test_bad_geometry_is_a_ring_error(offset, cap, size):
    buf = bytearray(size)
    for cls in (RingWriter, RingReader, RingTap):
        with pytest.raises(RingError):
            cls(buf, offset, cap)


def test_writer_and_reader_refuse_read_only_buffers():
    ro = memoryview(bytes(OFF + 8 + 64))
    for cls in (RingWriter, RingReader):
        with pytest.raises(RingError, match="read-only"):
            cls(ro, OFF, 64)
    with pytest.raises(RingError, match="read-only"):
        init_ring(ro, OFF)
    RingTap(ro, OFF, 64)  # fine


def test_init_ring_zeroes_only_the_positions():
    buf = make_buf(64, start=123 * 8)
    init_ring(buf, OFF)
    assert positions(buf) == (0, 0)
    assert data_of(buf, 64) == b"\xab" * 64 and guards_intact(buf, 64)


# ---------------------------------------------------------------- byte format
def test_push_writes_the_spec_byte_format():
    cap = 64
    buf = make_buf(cap)
    w = RingWriter(buf, OFF, cap)
    w.push(b"abc")
    assert positions(buf) == (8, 0)
    d = data_of(buf, cap)
    assert struct.unpack_from("<I", d, 0) == (3,) and d[4:7] == b"abc" and d[7:8] == b"\0"
    w.push(b"wxyz")  # 4 + 4 = 8 bytes, no padding
    w.push(bytearray(b"12345"))  # 4 + 5 + 7 zero bytes
    d = data_of(buf, cap)
    assert d[8:16] == struct.pack("<I", 4) + b"wxyz"
    assert d[16:32] == struct.pack("<I", 5) + b"12345" + bytes(7)
    assert positions(buf) == (32, 0)
    assert d[32:] == b"\xab" * 32  # nothing written past the entries
    assert guards_intact(buf, cap)
    assert ref_decode(d, cap, 0, 32) == [b"abc", b"wxyz", b"12345"]


def test_wrap_marker_and_entry_at_index_zero():
    cap = 64
    buf = make_buf(cap, start=40)  # index 40: 24 bytes before the end
    w = RingWriter(buf, OFF, cap)
    w.push(b"Q" * 20)  # 4 + 20 = 24: fits the tail exactly, no marker
    assert positions(buf) == (64, 40)
    set_positions(buf, 40, 40)
    w.push(b"P" * 21)  # 32 bytes do not fit in 24: marker at 40, entry at 0
    d = data_of(buf, cap)
    assert struct.unpack_from("<I", d, 40) == (MARKER,)
    assert d[0:32] == struct.pack("<I", 21) + b"P" * 21 + bytes(7)
    assert d[44:64] == b"Q" * 20  # the skipped tail is not rewritten beyond the marker
    assert positions(buf) == (40 + 24 + 32, 40)
    assert guards_intact(buf, cap)
    assert ref_decode(d, cap, 40, 96) == [b"P" * 21]
    assert RingReader(buf, OFF, cap).drain() == [b"P" * 21]


def test_push_accepts_any_contiguous_buffer():
    cap = 256
    buf = make_buf(cap)
    w, r = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap)
    w.push(memoryview(b"xxhelloxx")[2:7])
    w.push(array.array("H", [1, 2, 3]))
    w.push(memoryview(bytearray(b"\x01\x02\x03\x04")).cast("I"))
    assert r.drain() == [b"hello", struct.pack("=HHH", 1, 2, 3), b"\x01\x02\x03\x04"]


def test_empty_and_too_large_payloads_write_nothing():
    cap = 64
    buf = make_buf(cap)
    w = RingWriter(buf, OFF, cap)
    before = bytes(buf)
    with pytest.raises(ValueError):
        w.push(b"")
    with pytest.raises(MessageTooLarge):
        w.push(b"x" * (max_payload(cap) + 1))
    assert bytes(buf) == before
    w.push(b"x" * max_payload(cap))  # the limit itself is accepted
    assert RingReader(buf, OFF, cap).pop() == b"x" * max_payload(cap)


# ---------------------------------------------------------------- full / empty
def test_full_at_exactly_capacity_minus_8():
    cap = 64
    buf = make_buf(cap)
    w, r = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap)
    assert r.pop() is None and r.drain() == [] and w.free == cap - 8 and w.used == 0
    w.push(b"a" * 20)  # 24
    w.push(b"b" * 20)  # 48
    w.push(b"c" * 4)  # 56 = capacity - 8
    assert w.used == cap - 8 and w.free == 0 and positions(buf) == (56, 0)
    before = bytes(buf)
    with pytest.raises(RingFull, match="ring full"):
        w.push(b"d")
    assert bytes(buf) == before  # nothing half-written, write_pos unchanged
    assert r.pop() == b"a" * 20
    w.push(b"d")  # index 56: 8 bytes fit the tail exactly, used 40
    assert w.used == 40
    assert r.drain() == [b"b" * 20, b"c" * 4, b"d"]
    assert r.pop() is None and w.used == 0


def test_full_counts_the_skipped_tail():
    cap = 64
    buf = make_buf(cap, start=48)  # 16 bytes to the end
    w = RingWriter(buf, OFF, cap)
    set_positions(buf, 48, 24)  # used 24, free 32
    before = bytes(buf)
    with pytest.raises(RingFull):
        w.push(b"z" * 20)  # 24 bytes, but 16 skipped + 24 = 40 > 32
    assert bytes(buf) == before
    w.push(b"z" * 12)  # 16 bytes: fits the tail
    assert positions(buf) == (64, 24)


def test_writer_refuses_corrupt_read_pos():
    cap = 64
    buf = make_buf(cap)
    set_positions(buf, 16, 16 + 128)  # read_pos ahead of write_pos
    before = bytes(buf)
    with pytest.raises(RingCorrupt):
        RingWriter(buf, OFF, cap).push(b"x")
    assert bytes(buf) == before


# ---------------------------------------------------------------- ordering
@HYP
@given(
    cap_log=st.integers(6, 10),
    start=st.one_of(st.just(2**32 - 64), st.just(2**32 - 8), st.integers(0, 2**29).map(lambda x: x * 8)),
    sizes=st.lists(st.integers(1, 504), min_size=1, max_size=300),
)
def test_many_wraps_nothing_lost_duplicated_or_reordered(cap_log, start, sizes):
    cap = 1 << cap_log
    buf = make_buf(cap, start)
    w, r = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap)
    sent, got = [], []
    for i, size in enumerate(sizes):
        p = bytes([i & 0xFF, (i >> 8) & 0xFF]) * (min(size, max_payload(cap)) // 2 + 1)
        p = p[: min(size, max_payload(cap))]
        try:
            w.push(p)
        except RingFull:
            got += r.drain()
            w.push(p)  # an empty ring takes any payload up to the limit
        sent.append(p)
        if i % 3 == 0:
            got += r.drain(max_messages=1)
    got += r.drain()
    assert got == sent
    assert w.used == 0 and guards_intact(buf, cap)


ops_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(4, 120)),
        st.tuples(st.just("pop"), st.just(0)),
        st.tuples(st.just("drain"), st.integers(0, 5)),
        st.tuples(st.just("tap"), st.integers(0, 5)),
    ),
    max_size=250,
)
start_strategy = st.one_of(st.just(2**32 - 64), st.just(2**32 - 256), st.integers(0, 2**29 - 1).map(lambda x: x * 8))


@HYP
@given(start=start_strategy, ops=ops_strategy)
def test_interleaved_producer_consumer_and_a_tap_that_sees_what_the_consumer_sees(start, ops):
    """The tap polls before every consumer step, so it sees exactly the consumer's sequence."""
    cap = 256
    buf = make_buf(cap, start)
    w, r, tap = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap), RingTap(buf, OFF, cap)
    model: list[bytes] = []  # pushed, not yet consumed
    consumed: list[bytes] = []
    tapped: list[bytes] = []

    def tap_poll(k: int | None = None) -> None:
        res = tap.poll(k)
        assert res.missed_bytes == 0 and res.corrupt is None
        tapped.extend(res.messages)

    n = 0
    for op, arg in ops:
        if op == "push":
            p = payload_for(n, arg)
            before = bytes(buf)
            try:
                w.push(p)
            except RingFull:
                wp, rp = positions(buf)
                idx, size = wp % cap, entry_size(arg)
                need = size if size <= cap - idx else cap - idx + size
                assert (wp - rp) % 2**32 + need > cap - 8  # refused only when it cannot fit
                assert bytes(buf) == before
                continue
            model.append(p)
            n += 1
        elif op == "tap":
            tap_poll(arg)
        else:
            tap_poll()
            if op == "pop":
                got = r.pop()
                assert got == (model.pop(0) if model else None)
                if got is not None:
                    consumed.append(got)
            else:
                got = r.drain(arg)
                assert got == model[: len(got)] and len(got) == min(arg, len(model))
                del model[: len(got)]
                consumed.extend(got)
    tap_poll()
    consumed += r.drain()
    assert consumed == [payload_for(i, len(p)) for i, p in enumerate(consumed)]
    assert tapped == consumed


@HYP
@given(start=start_strategy, ops=ops_strategy)
def test_a_lagging_tap_never_yields_wrong_or_reordered_data(start, ops):
    """Whatever the schedule: every tapped message is the true payload, in push order,
    consecutive unless the same poll reported missed bytes; a valid ring is never called corrupt;
    every byte the cursor passes is either in a delivered entry or counted as missed."""
    cap = 256
    buf = make_buf(cap, start)
    w, r, tap = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap), RingTap(buf, OFF, cap)
    pushed: list[bytes] = []
    spans: list[int] = []  # ring bytes each push took, wrap skip included
    last = -1
    gap_allowed = False
    missed_total = 0

    def check(res: TapResult, before: int) -> None:
        nonlocal last, gap_allowed, missed_total
        assert res.corrupt is None
        gap_allowed = gap_allowed or res.missed_bytes > 0  # missed bytes precede the messages
        for m in res.messages:
            k = index_of(m)
            assert k < len(pushed) and m == pushed[k]
            assert k == last + 1 or (gap_allowed and k > last)
            last, gap_allowed = k, False
        missed_total += res.missed_bytes
        assert res.missed_bytes % 8 == 0
        delivered = sum(spans[index_of(m)] for m in res.messages)
        assert (tap.cursor - before) & M32 == res.missed_bytes + delivered  # nothing hidden

    def push(size: int) -> None:
        p = payload_for(len(pushed), size)
        try:
            w0 = w.write_pos
            w.push(p)
        except RingFull:
            r.drain()
            w0 = w.write_pos
            w.push(p)
        pushed.append(p)
        spans.append((w.write_pos - w0) & M32)

    for op, arg in ops:
        if op == "push":
            push(arg)
        elif op == "pop":
            r.pop()
        elif op == "drain":
            r.drain(arg)
        else:
            c0 = tap.cursor
            check(tap.poll(arg or None), c0)
    # A quiet producer: one poll catches up, whatever the consumer did; nothing is held back.
    r.drain()
    c0 = tap.cursor
    check(tap.poll(), c0)
    assert tap.cursor == w.write_pos
    assert tap.poll() == TapResult([], 0, None)
    if missed_total == 0:
        assert last == len(pushed) - 1  # saw every message
    assert missed_total % 8 == 0


race_ops = st.lists(
    st.one_of(st.tuples(st.just("push"), st.integers(4, 120)), st.tuples(st.just("drain"), st.integers(0, 4))),
    max_size=8,
)
race_strategy = st.lists(
    st.tuples(race_ops, race_ops, race_ops, st.one_of(st.none(), st.integers(4, 120))),
    max_size=40,
)


@HYP
@given(start=start_strategy, rounds=race_strategy)
def test_a_tap_racing_producer_and_consumer_never_yields_overwritten_data(start, rounds):
    """Producer and consumer run between the tap's read of write_pos and its copy, during the copy
    (a push written but not yet published), and between the copy and the re-read; every delivered
    message is still the true payload, in order, and every skipped byte is counted."""
    cap = 256
    buf = make_buf(cap, start)
    w, r = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap)
    tap = RingTap(buf, OFF, cap)
    pushed: list[bytes] = []
    spans: list[int] = []
    real = ring_mod._snapshot
    last = -1
    gap_allowed = False

    def run(ops) -> None:
        for op, arg in ops:
            if op == "drain":
                r.drain(arg or None)
                continue
            p = payload_for(len(pushed), arg)
            w0 = w.write_pos
            try:
                w.push(p)
            except RingFull:
                continue
            pushed.append(p)
            spans.append((w.write_pos - w0) & M32)

    with pytest.MonkeyPatch.context() as monkeypatch:
        for setup, before, after, in_flight in rounds:
            run(setup)
            unpublished: int | None = None

            def racing_snapshot(src, dst, idx, n, before=before, after=after, in_flight=in_flight):
                nonlocal unpublished
                run(before)  # published after the tap read write_pos, before it copied
                if in_flight is not None:  # written but not published while the tap copies
                    wp = w.write_pos
                    n0 = len(pushed)
                    run([("push", in_flight)])
                    if len(pushed) > n0:
                        unpublished = w.write_pos
                        struct.pack_into("<I", buf, OFF, wp)
                real(src, dst, idx, n)
                if unpublished is None:
                    run(after)

            monkeypatch.setattr(ring_mod, "_snapshot", racing_snapshot)
            c0 = tap.cursor
            res = tap.poll()
            if unpublished is not None:
                struct.pack_into("<I", buf, OFF, unpublished)
            assert res.corrupt is None
            gap_allowed = gap_allowed or res.missed_bytes > 0
            for m in res.messages:
                k = index_of(m)
                assert k < len(pushed) and m == pushed[k]
                assert k == last + 1 or (gap_allowed and k > last)
                last, gap_allowed = k, False
            delivered = sum(spans[index_of(m)] for m in res.messages)
            assert (tap.cursor - c0) & M32 == res.missed_bytes + delivered
    r.drain()
    res = tap.poll()
    assert res.corrupt is None and tap.cursor == w.write_pos


# ---------------------------------------------------------------- tap specifics
def test_tap_starts_at_write_pos_or_at_a_given_position():
    cap = 256
    buf = make_buf(cap)
    w = RingWriter(buf, OFF, cap)
    w.push(b"old")
    late = RingTap(buf, OFF, cap)
    early = RingTap(buf, OFF, cap, start=0)
    w.push(b"new")
    assert late.poll().messages == [b"new"]
    assert early.poll(max_messages=1).messages == [b"old"]
    assert early.poll().messages == [b"new"]
    assert early.poll() == TapResult([], 0, None)
    assert early.cursor == late.cursor == positions(buf)[0]


def test_tap_that_falls_behind_by_more_than_capacity_reports_the_lap():
    cap = 256
    buf = make_buf(cap, start=2**32 - 128)
    w, r = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap)
    tap = RingTap(buf, OFF, cap)
    c0 = tap.cursor
    for i in range(40):  # 40 * 32 bytes: five laps
        w.push(payload_for(i, 28))
        assert r.pop() == payload_for(i, 28)
    wp = positions(buf)[0]
    res = tap.poll()
    assert res.messages == [] and res.corrupt is None
    assert res.missed_bytes == (wp - c0) & M32 == 40 * 32
    assert tap.cursor == wp
    w.push(b"after")
    assert tap.poll().messages == [b"after"]


def test_tap_lapped_while_copying_returns_nothing_overwritten(monkeypatch):
    """The producer laps the tap between its copy and its re-read of the positions."""
    cap = 256
    buf = make_buf(cap)
    w, r = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap)
    tap = RingTap(buf, OFF, cap)
    for i in range(4):
        w.push(payload_for(i, 28))
    real = ring_mod._snapshot

    def racing_snapshot(*args):
        real(*args)
        r.drain()  # the consumer takes everything, then the producer runs a lap
        for i in range(100, 112):
            w.push(payload_for(i, 60))
            r.drain()

    monkeypatch.setattr(ring_mod, "_snapshot", racing_snapshot)
    res = tap.poll()
    assert res.messages == [] and res.missed_bytes == positions(buf)[0] > cap and res.corrupt is None
    assert tap.cursor == positions(buf)[0]


def test_entries_at_or_past_read_pos_are_delivered_even_when_the_producer_ran_ahead(monkeypatch):
    """Consumer mid-way through the tap's copy, producer lapping the cursor meanwhile: what lies at
    or past read_pos cannot have been overwritten, so it is delivered; the rest is missed."""
    cap = 256
    buf = make_buf(cap)
    w, r = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap)
    tap = RingTap(buf, OFF, cap)
    msgs = [payload_for(i, 28) for i in range(6)]  # 6 * 32 bytes
    for p in msgs:
        w.push(p)
    real = ring_mod._snapshot

    def racing_snapshot(*args):
        real(*args)
        assert r.drain(3) == msgs[:3]  # read_pos 96
        w.push(payload_for(50, 60))  # 64 bytes into 192..256: overwrites nothing the consumer has not read
        w.push(payload_for(51, 28))  # 32 bytes at 256..288 = indices 0..32: overwrites message 0

    monkeypatch.setattr(ring_mod, "_snapshot", racing_snapshot)
    res = tap.poll()
    assert res == TapResult(msgs[3:], 96, None)
    assert tap.cursor == 192
    monkeypatch.setattr(ring_mod, "_snapshot", real)
    assert tap.poll().messages == [payload_for(50, 60), payload_for(51, 28)]


def _joint_state_envelopes(n: int, joints: int) -> list:
    from lucky_monitor.protocol import messages as m
    from lucky_monitor.protocol.envelope import Envelope

    return [
        Envelope(
            m.MethodId.GetJointStateResp,
            100 + i,
            m.GetJointStateResp(env_id=i, frame_seq=i, positions=(0.5,) * joints, velocities=(0.25,) * joints),
            sent_ns=10**12 + i,
        )
        for i in range(n)
    ]


def test_quiet_producer_after_a_drain_is_delivered_on_the_first_poll():
    """A burst the consumer already took shows on the tap's next poll, with no further push."""
    from lucky_monitor.protocol.envelope import decode, encode

    cap = 4096
    buf = make_buf(cap)
    w, r = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap)
    tap = RingTap(buf, OFF, cap)
    envs = _joint_state_envelopes(13, 2)
    for env in envs:
        w.push(encode(env))
    assert w.write_pos < cap // 2  # no push from here can reach back to the burst
    assert len(r.drain()) == 13 and w.used == 0
    res = tap.poll()
    assert res.missed_bytes == 0 and res.corrupt is None
    assert [decode(p) for p in res.messages] == envs
    assert all(tap.poll() == TapResult([], 0, None) for _ in range(100))


def test_tap_never_holds_a_drained_burst_back():
    """Regression: 13 envelopes pushed and drained on a 4 KiB ring, write_pos past the middle: the
    tap returned nothing for 100 polls, waiting for write_pos to move. Now the first poll accounts
    for every byte at once: delivered if provably intact, else reported as missed."""
    from lucky_monitor.protocol.envelope import decode, encode

    cap = 4096
    buf = make_buf(cap)
    w, r = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap)
    tap = RingTap(buf, OFF, cap)
    envs = _joint_state_envelopes(13, 12)
    spans = []
    for env in envs:
        w0 = w.write_pos
        w.push(encode(env))
        spans.append(w.write_pos - w0)
    assert w.write_pos > cap // 2  # a maximal wrapping push could overwrite the burst's first half
    assert len(r.drain()) == 13 and w.used == 0
    res = tap.poll()
    assert res.corrupt is None and tap.cursor == w.write_pos
    got = [decode(p) for p in res.messages]
    assert got == envs[len(envs) - len(got) :]  # whatever is delivered is the true tail of the burst
    assert res.missed_bytes + sum(spans[len(envs) - len(got) :]) == w.write_pos
    assert all(tap.poll() == TapResult([], 0, None) for _ in range(100))
    w.push(b"next")
    assert tap.poll() == TapResult([b"next"], 0, None)


@pytest.mark.parametrize("drained", [0, 2, 4])
def test_tap_behind_a_drained_consumer_delivers_when_no_push_can_reach_back(drained):
    cap = 256
    buf = make_buf(cap)
    w, r = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap)
    tap = RingTap(buf, OFF, cap)
    msgs = [payload_for(i, 28) for i in range(4)]  # write_pos 128: a maximal push reaches index 256 at most
    for p in msgs:
        w.push(p)
    r.drain(drained)
    assert tap.poll() == TapResult(msgs, 0, None)


def test_entries_a_push_in_flight_could_have_overwritten_are_missed_not_decoded():
    """Bytes written by a push whose write_pos is not stored yet are never returned as old messages,
    nor called corruption: they are counted as missed, and the tap does not wait."""
    cap = 256
    buf = make_buf(cap)
    w, r = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap)
    tap = RingTap(buf, OFF, cap)
    for i in range(4):  # 4 * 40 = 160 bytes: write_pos at index 160, past the middle
        w.push(payload_for(i, 36))
    assert r.drain() == [payload_for(i, 36) for i in range(4)]
    wp = positions(buf)[0]
    # A wrapping push in flight: marker at 160 and a 120-byte entry at index 0 are written,
    # write_pos is not yet stored. Its length word now sits where message 0's was.
    w.push(payload_for(99, 116))
    published = positions(buf)[0]
    set_positions(buf, wp, wp)
    res = tap.poll()
    assert res == TapResult([], wp, None)  # nothing decoded from the overwritten bytes
    assert tap.cursor == wp
    set_positions(buf, published, wp)  # the push is published
    assert tap.poll() == TapResult([payload_for(99, 116)], 0, None)
    w.push(b"next")
    assert tap.poll().messages == [b"next"]


def test_garbage_where_a_push_could_reach_is_missed_not_corrupt():
    cap = 256
    buf = make_buf(cap)
    w, r = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap)
    tap = RingTap(buf, OFF, cap)
    for i in range(4):
        w.push(payload_for(i, 36))
    r.drain()
    struct.pack_into("<I", buf, OFF + 8 + 80, 0)  # third entry's length := 0, as a racing push might leave it
    assert tap.poll() == TapResult([], 160, None) and tap.cursor == 160
    w.push(b"small")
    assert tap.poll().messages == [b"small"]


def test_corruption_past_read_pos_is_reported_at_once():
    cap = 256
    buf = make_buf(cap)
    w, r = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap)
    tap = RingTap(buf, OFF, cap)
    for i in range(4):
        w.push(payload_for(i, 36))
    r.drain(1)  # read_pos 40: entries 1.. cannot have been overwritten
    struct.pack_into("<I", buf, OFF + 8 + 80, 0)  # third entry's length := 0
    res = tap.poll()
    assert res.messages == [payload_for(1, 36)]
    assert "length 0" in res.corrupt and res.missed_bytes == 40 + (160 - 80)
    assert tap.cursor == 160


def test_negative_max_messages_is_a_caller_error():
    buf = make_buf(64)
    with pytest.raises(ValueError):
        RingReader(buf, OFF, 64).drain(-1)
    with pytest.raises(ValueError):
        RingTap(buf, OFF, 64).poll(-1)


def test_tap_ahead_of_the_consumer_never_waits():
    cap = 256
    buf = make_buf(cap)
    w = RingWriter(buf, OFF, cap)
    tap = RingTap(buf, OFF, cap)
    for i in range(5):  # no consumer: read_pos stays at 0
        w.push(payload_for(i, 36))
        assert tap.poll().messages == [payload_for(i, 36)]


@pytest.mark.parametrize(
    ("start", "missed", "why"),
    [(16 + 512, 0, "behind the tap cursor"), (16 - 512, 512, None), (3, 13, "not a multiple of 8")],
)
def test_tap_with_an_absurd_cursor_resynchronises(start, missed, why):
    cap = 256
    buf = make_buf(cap)
    w = RingWriter(buf, OFF, cap)
    w.push(b"0123456789")
    tap = RingTap(buf, OFF, cap, start=start)
    res = tap.poll()
    assert res.messages == [] and res.missed_bytes == missed
    assert (res.corrupt is None) if why is None else (why in res.corrupt)
    assert tap.cursor == 16
    w.push(b"ok")
    assert tap.poll().messages == [b"ok"]


def test_tap_on_read_only_buffers_never_writes():
    cap = 256
    buf = make_buf(cap)
    w = RingWriter(buf, OFF, cap)
    for i in range(6):
        w.push(payload_for(i, 20))
    ro = memoryview(bytes(buf))
    tap = RingTap(ro, OFF, cap, start=0)
    assert tap.poll(max_messages=2).messages == [payload_for(0, 20), payload_for(1, 20)]
    assert tap.poll().messages == [payload_for(i, 20) for i in range(2, 6)]
    tap.release()


def test_tap_on_a_read_only_mmap(tmp_path):
    cap = 1024
    buf = make_buf(cap)
    w = RingWriter(buf, OFF, cap)
    for i in range(10):
        w.push(payload_for(i, 50))
    w.release()
    path = tmp_path / "ring.bin"
    path.write_bytes(bytes(buf))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        tap = RingTap(mm, OFF, cap, start=0)
        assert tap.poll().messages == [payload_for(i, 50) for i in range(10)]
        tap.release()  # lets the map close


def test_tap_never_writes_a_byte_whatever_happens():
    cap = 256
    buf = make_buf(cap)
    w, r = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap)
    taps = [RingTap(buf, OFF, cap), RingTap(buf, OFF, cap, start=8), RingTap(buf, OFF, cap, start=5)]
    for i in range(30):
        w.push(payload_for(i, 4 + (i * 37) % 100))
        r.drain(1)
        snap = bytes(buf)
        for t in taps[: 1 + i % 3]:
            t.poll(i % 4)
        assert bytes(buf) == snap
    struct.pack_into("<I", buf, OFF + 8 + (positions(buf)[1] % cap), 0)  # corrupt an entry
    snap = bytes(buf)
    for t in taps:
        t.poll()
    assert bytes(buf) == snap


# ---------------------------------------------------------------- corruption
def corrupt_ring(cap: int, r: int, w: int, entries: list[tuple[int, bytes]]) -> bytearray:
    """Ring with positions (w, r) and raw byte patches at data indices."""
    buf = make_buf(cap, fill=0)
    set_positions(buf, w, r)
    for idx, raw in entries:
        buf[OFF + 8 + idx : OFF + 8 + idx + len(raw)] = raw
    return buf


def u32(v: int) -> bytes:
    return struct.pack("<I", v)


CAP = 256
CORRUPT_CASES = {
    "zero length": (0, 16, [(0, u32(0))], "length 0"),
    "huge length": (0, 16, [(0, u32(0x12345678))], "exceeds the largest payload"),
    "length past write_pos": (0, 16, [(0, u32(40))], "past write_pos"),
    "length past the data end": (224, 248, [(224, u32(100))], "past the end of the data area"),
    "marker before the middle": (64, 160, [(64, u32(MARKER))], "where any entry fits"),
    "marker without an entry": (200, 256, [(200, u32(MARKER))], "not followed by an entry"),
    "marker before a fitting entry": (200, 280, [(200, u32(MARKER)), (0, u32(8))], "fits there"),
    "marker to a marker": (200, 280, [(200, u32(MARKER)), (0, u32(MARKER))], "another marker"),
    "used above capacity": (0, CAP + 8, [(0, u32(4))], "exceed the capacity"),
    "read_pos ahead": (64, 32, [], "exceed the capacity"),
    "misaligned write_pos": (0, 12, [(0, u32(4))], "multiple of 8"),
    "misaligned read_pos": (4, 16, [(4, u32(4))], "multiple of 8"),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", list(CORRUPT_CASES))
@pytest.mark.parametrize("how", ["pop", "drain"])
def test_reader_resynchronises_then_raises(case, how):
    r0, w0, patches, why = CORRUPT_CASES[case]
    buf = corrupt_ring(CAP, r0, w0, patches)
    reader = RingReader(buf, OFF, CAP)
    with pytest.raises(RingCorrupt, match=why) as e:
        getattr(reader, how)()
    assert "resynchronised" in str(e.value)
    assert positions(buf) == (w0, w0)
    assert reader.pop() is None
    if w0 % 8 == 0:
        RingWriter(buf, OFF, CAP).push(b"fresh")
        assert reader.pop() == b"fresh"


@pytest.mark.parametrize("case", list(CORRUPT_CASES))
def test_tap_reports_corruption_without_raising(case):
    r0, w0, patches, why = CORRUPT_CASES[case]
    buf = corrupt_ring(CAP, r0, w0, patches)
    tap = RingTap(memoryview(bytes(buf)), OFF, CAP, start=r0)
    res = tap.poll()
    assert res.messages == []
    if case == "used above capacity":  # from the tap's cursor this is a lap
        assert res.missed_bytes == (w0 - r0) & M32 and res.corrupt is None
    elif case == "read_pos ahead":
        assert "behind the tap cursor" in res.corrupt
    else:
        assert why in res.corrupt and "resynchronised" in res.corrupt
    assert tap.cursor == w0


def test_drain_returns_good_messages_before_a_corrupt_one():
    cap = 256
    buf = make_buf(cap)
    w, r = RingWriter(buf, OFF, cap), RingReader(buf, OFF, cap)
    for p in (b"one", b"two", b"three"):
        w.push(p)
    struct.pack_into("<I", buf, OFF + 8 + 16, 0)  # the third entry's length := 0
    tap = RingTap(buf, OFF, cap, start=0)
    res = tap.poll()
    assert res.messages == [b"one", b"two"] and "length 0" in res.corrupt and res.missed_bytes == 16
    assert r.drain() == [b"one", b"two"]
    assert positions(buf) == (32, 16)
    with pytest.raises(RingCorrupt):
        r.drain()
    assert positions(buf) == (32, 32)
    w.push(b"four")
    assert r.drain() == [b"four"] and tap.poll().messages == [b"four"]


@pytest.mark.timeout(120)
@HYP
@given(
    cap_log=st.integers(6, 9),
    w=st.integers(0, M32),
    r=st.integers(0, M32),
    data=st.binary(min_size=512, max_size=512),
)
def test_random_rings_give_ring_corrupt_or_valid_messages(cap_log, w, r, data):
    cap = 1 << cap_log
    buf = make_buf(cap)
    buf[OFF + 8 : OFF + 8 + cap] = data[:cap]
    set_positions(buf, w, r)
    _exercise_hostile(buf, cap)


@pytest.mark.timeout(120)
@HYP
@given(
    sizes=st.lists(st.integers(1, 120), min_size=1, max_size=20),
    flips=st.lists(st.tuples(st.integers(0, 255), st.integers(0, 255)), min_size=1, max_size=6),
    start=start_strategy,
)
def test_valid_rings_with_flipped_bytes(sizes, flips, start):
    cap = 256
    buf = make_buf(cap, start)
    w = RingWriter(buf, OFF, cap)
    for i, s in enumerate(sizes):
        try:
            w.push(bytes([i]) * s)
        except RingFull:
            break
    for idx, val in flips:
        buf[OFF + 8 + idx] = val
    _exercise_hostile(buf, cap)


def _exercise_hostile(buf: bytearray, cap: int) -> None:
    ro = bytes(buf)
    tap = RingTap(memoryview(ro), OFF, cap, start=positions(buf)[1])
    for _ in range(3):
        res = tap.poll()
        assert isinstance(res, TapResult)
        assert all(1 <= len(m) <= max_payload(cap) for m in res.messages)
    reader = RingReader(buf, OFF, cap)
    steps = 0
    while True:  # bounded: every step advances read_pos or resynchronises
        steps += 1
        assert steps <= cap // 8 + 2
        try:
            m = reader.pop()
        except RingCorrupt:
            continue
        if m is None:
            break
        assert 1 <= len(m) <= max_payload(cap)
    assert reader.pop() is None and reader.drain() == []
    assert guards_intact(buf, cap)


# ---------------------------------------------------------------- release
def test_release_lets_an_mmap_close():
    cap = 256
    mm = mmap.mmap(-1, OFF + 8 + cap)
    w, r, t = RingWriter(mm, OFF, cap), RingReader(mm, OFF, cap), RingTap(mm, OFF, cap)
    w.push(b"x")
    assert r.pop() == b"x"
    with pytest.raises(BufferError):
        mm.close()
    for x in (w, r, t):
        x.release()
        x.release()
    mm.close()


# ---------------------------------------------------------------- two processes
N_CROSS = 20_000
CROSS_CAP = 4096


def cross_payload(i: int) -> bytes:
    return struct.pack("<I", i) * (1 + (i * 7919) % 60)


def _producer(mm: mmap.mmap, n: int) -> None:
    w = RingWriter(mm, OFF, CROSS_CAP)
    for i in range(n):
        p = cross_payload(i)
        while True:
            try:
                w.push(p)
                break
            except RingFull:
                time.sleep(0.0002)
    w.release()


@pytest.mark.timeout(120)
def test_cross_process_producer_consumer_and_tap():
    mm = mmap.mmap(-1, OFF + 8 + CROSS_CAP)
    init_ring(mm, OFF)
    struct.pack_into("<II", mm, OFF, 2**32 - 512, 2**32 - 512)  # cross the 2**32 wrap early
    mv = memoryview(mm)
    ro = mv.toreadonly()
    reader = RingReader(mm, OFF, CROSS_CAP)
    tap = RingTap(ro, OFF, CROSS_CAP)
    proc = multiprocessing.get_context("fork").Process(target=_producer, args=(mm, N_CROSS))
    proc.start()
    try:
        got: list[bytes] = []
        last_tapped, tapped, gap_allowed = -1, 0, False
        while len(got) < N_CROSS:
            res = tap.poll()
            assert res.corrupt is None
            gap_allowed = gap_allowed or res.missed_bytes > 0  # missed bytes precede the messages
            for m in res.messages:
                k = struct.unpack_from("<I", m)[0]
                assert m == cross_payload(k)
                assert k == last_tapped + 1 or (gap_allowed and k > last_tapped)
                last_tapped, gap_allowed = k, False
                tapped += 1
            batch = reader.drain()
            got += batch
            if not batch:
                if not proc.is_alive() and not reader.used:
                    pytest.fail(f"producer exited ({proc.exitcode}) after {len(got)} of {N_CROSS} messages")
                time.sleep(0.0002)
        proc.join(60)
        assert proc.exitcode == 0
        for i, m in enumerate(got):
            if m != cross_payload(i):
                pytest.fail(f"message {i} wrong: {m[:16]!r}")
        assert reader.pop() is None
        assert tapped > 0 and last_tapped <= N_CROSS - 1
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
        reader.release()
        tap.release()
        ro.release()
        mv.release()
        mm.close()
