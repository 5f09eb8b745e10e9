"""The tools channel: atomic claim, takeover from a dead holder, rings over a writable side mapping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lucky_monitor.protocol.errors import ToolsChannelBusy, ToolsChannelUnavailable
from lucky_monitor.protocol.header import tools_region_size
from lucky_monitor.protocol.ring import RingReader, RingWriter
from lucky_monitor.transport.shm import Segment, platform_kind
from lucky_monitor.transport.tools import ToolsChannel, tools_owner
from tests.conftest import dead_pid

pytestmark = pytest.mark.skipif(platform_kind() != "dir", reason="exercised on Linux")


def owner_word(engine) -> int:
    off = engine.header.tools_offset
    return int.from_bytes(engine.buf[off : off + 4], "little")


def set_owner(engine, pid: int) -> None:
    off = engine.header.tools_offset
    engine.buf[off : off + 4] = pid.to_bytes(4, "little")


def test_claim_release_and_busy(segment_factory) -> None:
    eng = segment_factory()
    with Segment.attach(eng.name) as seg:
        assert tools_owner(seg) == 0
        chan = ToolsChannel.claim(seg)
        try:
            assert chan.claimed and chan.owner_pid == os.getpid() == owner_word(eng) == tools_owner(seg)
            assert len(chan.buf) == tools_region_size(eng.header.tools_ring_size)
            with pytest.raises(ToolsChannelBusy, match=f"tools channel held by pid {os.getpid()}") as info:
                ToolsChannel.claim(eng.name)
            assert info.value.pid == os.getpid()
        finally:
            chan.release()
        assert owner_word(eng) == 0 and not chan.claimed and chan.owner_pid == 0
        chan.release()  # idempotent
        with ToolsChannel.claim(eng.name) as again:  # by name this time
            assert tools_owner(seg) == again.pid == os.getpid()
        assert tools_owner(seg) == 0
        with pytest.raises(ToolsChannelUnavailable):
            _ = chan.c2s


def test_live_other_holder_is_respected(segment_factory) -> None:
    eng = segment_factory()
    holder = os.getppid()  # a live process that is not us
    set_owner(eng, holder)
    with pytest.raises(ToolsChannelBusy) as info:
        ToolsChannel.claim(eng.name)
    assert info.value.pid == holder
    assert str(info.value) == f"tools channel held by pid {holder}"
    assert owner_word(eng) == holder


def test_dead_holder_is_taken_over(segment_factory) -> None:
    eng = segment_factory()
    set_owner(eng, dead_pid())
    with ToolsChannel.claim(eng.name) as chan:
        assert owner_word(eng) == os.getpid() == chan.owner_pid


def test_release_leaves_a_successor_alone(segment_factory) -> None:
    eng = segment_factory()
    chan = ToolsChannel.claim(eng.name)
    set_owner(eng, os.getppid())  # someone decided we were dead and took over
    chan.release()
    assert owner_word(eng) == os.getppid()


def test_no_tools_channel(segment_factory) -> None:
    eng = segment_factory(tools_ring_size=None)
    with Segment.attach(eng.name) as seg:
        with pytest.raises(ToolsChannelUnavailable):
            tools_owner(seg)
        with pytest.raises(ToolsChannelUnavailable):
            ToolsChannel.claim(seg)
    with pytest.raises(ToolsChannelUnavailable):
        ToolsChannel.claim(eng.name)


def test_rings_reach_the_engine_and_back(segment_factory) -> None:
    eng = segment_factory(tools_ring_size=1024)
    h = eng.header
    engine_in = RingReader(eng.buf, h.tools_c2s_offset, h.tools_ring_size)
    engine_out = RingWriter(eng.buf, h.tools_s2c_offset, h.tools_ring_size)
    try:
        with ToolsChannel.claim(eng.name) as chan:
            chan.c2s.push(b"request-1")
            chan.c2s.push(b"request-2")
            assert engine_in.drain() == [b"request-1", b"request-2"]
            assert chan.s2c.pop() is None
            engine_out.push(b"response")
            assert chan.s2c.pop() == b"response"
            # The main rings stay untouched.
            for off in (h.cmd_s2c_offset, h.cmd_c2s_offset):
                assert bytes(eng.buf[off : off + 8]) == bytes(8)
    finally:
        engine_in.release()
        engine_out.release()


CLAIMER = textwrap.dedent(
    """
    import os, sys, time
    from lucky_monitor.protocol.errors import ToolsChannelBusy
    from lucky_monitor.transport.tools import ToolsChannel
    name, barrier, hold = sys.argv[1], sys.argv[2], sys.argv[3] == "hold"
    print("ready", flush=True)
    for _ in range(600_000):  # bounded wait for the start signal
        if os.path.exists(barrier):
            break
        time.sleep(0.0001)
    try:
        chan = ToolsChannel.claim(name)
    except ToolsChannelBusy as exc:
        print("busy", exc.pid, exc, flush=True)
    else:
        print("won", os.getpid(), flush=True)
    if hold:
        time.sleep(600)   # killed by the test
    else:
        sys.stdin.read()  # keep the claim until the test closes stdin
    """
)


def spawn(name: str, barrier: Path, env: dict[str, str], hold: bool = False) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CLAIMER, name, str(barrier), "hold" if hold else "stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.parametrize("round_", range(3))
def test_two_processes_racing_exactly_one_wins(segment_factory, tmp_path: Path, subprocess_env, round_: int) -> None:
    eng = segment_factory()
    barrier = tmp_path / "go"
    procs = [spawn(eng.name, barrier, subprocess_env) for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        barrier.touch()
        lines = [p.stdout.readline().split() for p in procs]
        winners = [(p, ln) for p, ln in zip(procs, lines, strict=True) if ln and ln[0] == "won"]
        losers = [(p, ln) for p, ln in zip(procs, lines, strict=True) if ln and ln[0] == "busy"]
        assert len(winners) == 1 and len(losers) == 1, lines
        win_pid = winners[0][0].pid
        assert int(winners[0][1][1]) == win_pid
        assert losers[0][1][1:] == [str(win_pid), "tools", "channel", "held", "by", "pid", str(win_pid)]
        assert owner_word(eng) == win_pid
    finally:
        for p in procs:
            p.stdin.close()
        for p in procs:
            p.wait(timeout=60)
            p.stdout.close()
            p.stderr.close()
    # The winner exited without releasing: its claim is dead and can be taken over.
    with ToolsChannel.claim(eng.name) as chan:
        assert chan.owner_pid == os.getpid()


def test_claim_of_a_killed_monitor_is_taken_over(segment_factory, tmp_path: Path, subprocess_env) -> None:
    eng = segment_factory()
    barrier = tmp_path / "go"
    barrier.touch()
    p = spawn(eng.name, barrier, subprocess_env, hold=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        assert p.stdout.readline().split()[0] == "won"
        assert owner_word(eng) == p.pid
        with pytest.raises(ToolsChannelBusy, match=f"held by pid {p.pid}"):
            ToolsChannel.claim(eng.name)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=60)
        p.stdin.close()
        p.stdout.close()
        p.stderr.close()
    assert owner_word(eng) == p.pid  # still "held" by the dead process
    with ToolsChannel.claim(eng.name) as chan:
        assert chan.owner_pid == os.getpid()


# ---------------------------------------------------------------------------
# The tools helper's pipe stays in step when a call is interrupted
# ---------------------------------------------------------------------------


def test_a_call_interrupted_before_its_reply_leaves_the_next_calls_answered_in_step(segment_factory) -> None:
    from lucky_monitor.transport import tools_agent

    eng = segment_factory(tools_ring_size=1024)
    engine_in = RingReader(eng.buf, eng.header.tools_c2s_offset, eng.header.tools_ring_size)
    with Segment.attach(eng.name) as seg:
        agent = tools_agent.ToolsAgent.claim(seg)
        try:
            replies = agent._replies
            assert replies is not None
            real_wait = replies.wait

            def interrupted(number: int, timeout: float):
                replies.wait = real_wait  # type: ignore[method-assign]
                raise KeyboardInterrupt  # a Ctrl-C after the request went out, before its reply was read

            replies.wait = interrupted  # type: ignore[method-assign]
            with pytest.raises(KeyboardInterrupt):
                agent.c2s.push(b"sent-before-ctrl-c")
            # The push's reply ("K", no data) is still in the pipe; read as the next call's
            # answer it would say the owner word is 0.
            assert agent.owner_pid == os.getpid()
            agent.c2s.push(b"after")
            assert engine_in.drain() == [b"sent-before-ctrl-c", b"after"]
            assert agent.s2c.pop() is None
        finally:
            agent.release()
            engine_in.release()
    assert owner_word(eng) == 0


def test_replies_are_read_whole_across_calls_and_replies_to_other_requests_are_skipped() -> None:
    from lucky_monitor.transport.tools_agent import _FRAME, _Replies

    r, w = os.pipe()
    try:
        replies = _Replies(r)
        first, second = replies.next_number(), replies.next_number()
        stale = _FRAME.pack(b"K", first, 3) + b"old"
        mine = _FRAME.pack(b"K", second, 5) + b"hello"
        os.write(w, stale + mine[:6])  # the reply to an earlier request, then part of this one's
        assert replies.wait(second, 0.0) is None
        os.write(w, mine[6:])
        assert replies.wait(second, 0.0) == (b"K", b"hello")
        os.close(w)
        w = -1
        with pytest.raises(EOFError):
            replies.wait(replies.next_number(), 0.0)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
