"""TrafficLog on a hand-made segment (no engine, no Qt): exact latency from stamps, problem counts."""

from __future__ import annotations

import struct

import pytest

from lucky_monitor.core.traffic import CORRUPT_METHOD, TrafficLog
from lucky_monitor.protocol import messages as m
from lucky_monitor.protocol.envelope import Envelope, encode
from lucky_monitor.protocol.ring import RingWriter

pytestmark = pytest.mark.timeout(60)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def seg(segment_factory):
    return segment_factory()


def writers(seg) -> dict[tuple[str, str], RingWriter]:
    h = seg.header
    return {
        ("main", "c2s"): RingWriter(seg.buf, h.cmd_c2s_offset, h.cmd_ring_size),
        ("main", "s2c"): RingWriter(seg.buf, h.cmd_s2c_offset, h.cmd_ring_size),
        ("tools", "c2s"): RingWriter(seg.buf, h.tools_c2s_offset, h.tools_ring_size),
        ("tools", "s2c"): RingWriter(seg.buf, h.tools_s2c_offset, h.tools_ring_size),
    }


def req(cid: int, sent_ns: int) -> bytes:
    return encode(Envelope(m.MethodId.GetJointStateReq, cid, m.GetJointStateReq(env_id=1), sent_ns=sent_ns))


def resp(cid: int, sent_ns: int, error: str = "") -> bytes:
    return encode(Envelope(m.MethodId.GetJointStateResp, cid, None, error, sent_ns))


def test_latency_is_the_difference_of_the_stamps_whatever_the_poll_timing(seg) -> None:
    clock = Clock()
    log = TrafficLog(seg, clock=clock)
    w = writers(seg)
    w["main", "c2s"].push(req(7, 5_000_000_000))
    log.poll()
    clock.t += 0.5  # the monitor saw the response half a second later ...
    w["main", "s2c"].push(resp(7, 5_002_500_000))  # ... but it was sent 2.5 ms after the request
    (entry,) = log.poll()
    assert entry.method == "GetJointStateResp" and entry.correlation_id == 7
    assert entry.latency_s == pytest.approx(0.0025, abs=1e-12)
    assert entry.sent_ns == 5_002_500_000 and entry.unknown_latency is None
    # both in one poll: still exact
    w["tools", "c2s"].push(req(8, 10**12))
    w["tools", "s2c"].push(resp(8, 10**12 + 1234, "no such env"))
    new = log.poll()
    (r,) = [e for e in new if e.direction == "s2c"]
    assert r.latency_s == pytest.approx(1234e-9) and r.error == "no such env"
    (q,) = [e for e in new if e.direction == "c2s"]
    assert q.latency_s is None and q.unknown_latency is None and q.sent_ns == 10**12


@pytest.mark.parametrize(
    ("req_ns", "resp_ns", "seen", "why"),
    [
        (0, 2_000, True, "request not stamped"),
        (1_000, 0, True, "response not stamped"),
        (0, 0, True, "response not stamped"),
        (1_000, 2_000, False, "request not seen"),
        (3_000, 2_000, True, "stamped before its request"),
    ],
)
def test_latency_is_unknown_never_zero_when_a_stamp_is_missing(seg, req_ns, resp_ns, seen, why) -> None:
    clock = Clock()
    log = TrafficLog(seg, clock=clock)
    w = writers(seg)
    if seen:
        w["main", "c2s"].push(req(9, req_ns))
    log.poll()
    clock.t += 0.25
    w["main", "s2c"].push(resp(9, resp_ns))
    (entry,) = log.poll()
    assert entry.latency_s is None
    assert why in entry.unknown_latency


def test_pushes_have_no_latency_and_no_unknown_note(seg) -> None:
    log = TrafficLog(seg)
    frame = Envelope(m.MethodId.TelemetryFrame, 3, m.TelemetryFrame(values=(1.0,)), sent_ns=42)
    writers(seg)["main", "s2c"].push(encode(frame))
    (entry,) = log.poll()
    assert entry.method == "TelemetryFrame" and entry.latency_s is None and entry.unknown_latency is None


def test_ring_corruption_counts_rise_with_no_valid_message(seg) -> None:
    """Garbage in a ring shows in the counts (and as an error row) on the poll that meets it."""
    log = TrafficLog(seg)
    h = seg.header
    base = h.tools_s2c_offset
    v0 = log.version
    # An entry of length 0 (never valid), published by moving write_pos by 16 bytes.
    struct.pack_into("<I", seg.buf, base + 8, 0)
    struct.pack_into("<I", seg.buf, base, 16)
    new = log.poll()
    st = log.stats["tools", "s2c"]
    assert st.corrupt == 1 and st.missed_bytes == 16 and st.messages == 0
    assert "length 0" in st.last_problem
    assert [(e.method, e.error is not None) for e in new] == [(CORRUPT_METHOD, True)]
    assert log.version > v0
    # A write_pos that cannot be right: counted again, still nothing valid.
    struct.pack_into("<I", seg.buf, base, 16 + 4)
    log.poll()
    assert st.corrupt == 2 and st.messages == 0
    # Quiet ring: nothing changes, the version stays.
    v = log.version
    assert log.poll() == [] and log.version == v
    other = [s for k, s in log.stats.items() if k != ("tools", "s2c")]
    assert all(s.corrupt == s.missed_bytes == s.messages == 0 for s in other)


def test_a_lap_counts_missed_bytes_with_no_valid_message(seg) -> None:
    log = TrafficLog(seg)
    h = seg.header
    base = h.cmd_c2s_offset
    struct.pack_into("<II", seg.buf, base, 2 * h.cmd_ring_size, 2 * h.cmd_ring_size)  # two laps, nothing readable
    assert log.poll() == []
    st = log.stats["main", "c2s"]
    assert st.missed_bytes == 2 * h.cmd_ring_size and st.corrupt == 0 and st.messages == 0
    assert "missed" in st.last_problem


def test_undecodable_envelopes_are_counted(seg) -> None:
    log = TrafficLog(seg)
    writers(seg)["tools", "c2s"].push(b"\x01\x02\x03 not a flatbuffer")
    (entry,) = log.poll()
    assert entry.method == "?" and entry.error.startswith("undecodable")
    st = log.stats["tools", "c2s"]
    assert st.undecodable == 1 and st.messages == 1 and st.corrupt == 0


def test_a_64_kib_error_with_control_characters_is_logged_bounded_and_escaped(segment_factory) -> None:
    seg = segment_factory(cmd_ring_size=256 * 1024)
    hostile = ("\x1b[2J\r\nengine\x00says\u202e" * 4096)[: 64 * 1024]
    log = TrafficLog(seg, clock=Clock())
    w = writers(seg)
    w["main", "c2s"].push(req(9, 10))
    w["main", "s2c"].push(resp(9, 20, hostile))
    entries = log.poll()
    (entry,) = [e for e in entries if e.direction == "s2c"]
    assert len(entry.error) <= 200 and entry.error.isprintable() and entry.error.endswith("…")
    assert entry.error.startswith("\\x1b[2J\\r\\nengine\\x00says\\u202e")
    assert entry.method == "GetJointStateResp" and entry.latency_s == pytest.approx(10e-9)
