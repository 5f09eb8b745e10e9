"""Hostile values written by an engine: a header that cannot be, 64 KiB strings with control
characters in envelopes on the tools ring, ring lengths past the end of the data.

Each case asserts what the session shows; none may raise out of ``step`` or hang.
"""

from __future__ import annotations

import struct

import pytest

from lucky_monitor.core.monitor import LinkState
from lucky_monitor.core.session import MonitorSession
from lucky_monitor.protocol.envelope import Envelope, decode, encode
from lucky_monitor.protocol.header import FIELDS
from lucky_monitor.protocol.messages import MethodId
from lucky_monitor.sim.engine import EngineConfig, ReferenceEngine
from lucky_monitor.transport.shm import platform_kind
from tests.conftest import unique_segment_name
from tests.faults.support import wait

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(platform_kind() != "dir", reason="segments are exercised on Linux"),
]

#: What a command result may hold at most (the session bounds engine text to this).
MAX_RESULT_TEXT = 1024

HOSTILE = "\x1b[2J\x1b]0;owned\x07\x00\r" + "A" * 65536 + "\n\t\u202e\u0085end"


def engine(**kw: object) -> ReferenceEngine:
    base: dict[str, object] = {
        "num_envs": 4,
        "obs_size": 8,
        "act_size": 2,
        "image": (8, 8),
        "sim_mode": 2,
        "cmd_ring_size": 4096,
        "tools_ring_size": 256 * 1024,  # room for a 64 KiB string
    }
    base.update(kw)
    return ReferenceEngine(EngineConfig(name=unique_segment_name("hostile"), **base))  # type: ignore[arg-type]


@pytest.fixture
def engines():
    made: list[ReferenceEngine] = []
    yield made
    for eng in made:
        eng.close()


def field_offset(name: str) -> int:
    return next(off for f, off, _ in FIELDS if f == name)


@pytest.mark.parametrize("num_envs", [2**32 - 1, 2**32 - 4096, 2**31])
def test_num_envs_near_two_to_the_32_is_incompatible_with_a_reason(segment_factory, num_envs: int) -> None:
    seg = segment_factory(image=(8, 8, 3))
    struct.pack_into("<I", seg.buf, field_offset("num_envs"), num_envs)
    s = MonitorSession(seg.name, discover=False, tools=False)
    for _ in range(5):
        t = s.step()
    assert t.state is LinkState.INCOMPATIBLE and not t.attached
    assert t.reason is not None and "num_envs" in t.reason and str(num_envs) in t.reason
    s.close()


def pending_request(eng: ReferenceEngine) -> int:
    """Take the monitor's request off the tools ring, as the engine would; return its correlation id."""
    raw = eng.pairs[1].requests.pop()
    assert raw is not None
    return decode(raw).correlation_id


def test_a_64_kib_error_string_with_control_characters_gives_a_bounded_plain_result(engines) -> None:
    eng = engine()
    engines.append(eng)
    s = MonitorSession(eng.name, discover=False)
    wait(s, lambda t: t.tools.ours, "the tools channel", engines=engines)
    assert s.draw("line", start=(0, 0, 0), end=(1, 1, 1))
    cid = pending_request(eng)
    eng.pairs[1].responses.push(encode(Envelope(MethodId.DrawResp, cid, None, HOSTILE)))
    t = s.step()
    (res,) = [r for r in t.results if r.kind == "line"]
    assert res.status == "error" and res.text.startswith("error: ")
    assert len(res.text) <= MAX_RESULT_TEXT
    assert res.text.isprintable(), res.text[:80]  # control characters are shown escaped, never raw
    assert "\\x1b[2J" in res.text and "AAAA" in res.text
    # The channel still works: the next request gets its answer.
    assert s.set_sim_mode(2) is None
    ok = wait(s, lambda t: any(r.kind == "sim" for r in t.results), "the next answer", engines=engines)
    assert [r.status for r in ok.results if r.kind == "sim"] == ["ok"]
    assert ok.traffic_stats.corrupt_total == 0
    s.close()


def test_a_64_kib_unsolicited_reply_is_dropped_and_an_undecodable_one_is_a_bounded_error(engines) -> None:
    eng = engine()
    engines.append(eng)
    s = MonitorSession(eng.name, discover=False)
    wait(s, lambda t: t.tools.ours, "the tools channel", engines=engines)
    out = eng.pairs[1].responses
    out.push(encode(Envelope(MethodId.DrawResp, 12345, None, HOSTILE)))  # answers nothing we asked
    out.push(b"\x1b\x00\x07" * 21000)  # 63 KB that are no envelope
    t = s.step()
    assert [r.kind for r in t.results] == ["reply"]
    (res,) = t.results
    assert res.status == "error" and "undecodable" in res.text
    assert len(res.text) <= MAX_RESULT_TEXT and res.text.isprintable()
    assert t.traffic_stats.undecodable["tools s2c"] == 1
    s.close()


def corrupt_length(buf: memoryview, ring_offset: int, capacity: int, length: int) -> None:
    """As a producer gone wrong: an entry whose length runs past the end of the data, published."""
    w, _ = struct.unpack_from("<II", buf, ring_offset)
    struct.pack_into("<I", buf, ring_offset + 8 + w % capacity, length)
    struct.pack_into("<I", buf, ring_offset, (w + 16) % 2**32)


@pytest.mark.parametrize("length", [2**32 - 1 - 1, 4096 * 4, 4096 - 4])
def test_ring_lengths_past_the_end_are_counted_as_corrupt(engines, length: int) -> None:
    eng = engine()
    engines.append(eng)
    h = eng.header
    s = MonitorSession(eng.name, discover=False)
    wait(s, lambda t: t.tools.ours, "the tools channel", engines=engines)
    # main s2c: only the tap reads it here; tools s2c: the monitor's own reply reader too
    corrupt_length(eng.seg.buf, h.cmd_s2c_offset, h.cmd_ring_size, length)
    corrupt_length(eng.seg.buf, h.tools_s2c_offset, h.tools_ring_size, length * 64 % 2**32 or 2**31)
    t = s.step()
    assert t.traffic_stats.corrupt["main s2c"] == 1 and t.traffic_stats.corrupt["tools s2c"] == 1
    replies = [r for r in t.results if r.kind == "reply"]
    assert len(replies) == 1 and "response ring corrupt" in replies[0].text
    assert t.state is LinkState.FREE_RUNNING
    # Both readers resynchronised: later traffic is read again, nothing more counted as corrupt.
    assert s.set_sim_mode(2) is None
    ok = wait(s, lambda t: any(r.kind == "sim" for r in t.results), "an answer after the corruption", engines=engines)
    assert [r.status for r in ok.results if r.kind == "sim"] == ["ok"]
    assert ok.traffic_stats.corrupt_total == 2 and ok.traffic_stats.messages["tools s2c"] >= 1
    s.close()
