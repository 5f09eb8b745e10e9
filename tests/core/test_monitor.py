"""MonitorCore against the reference engine and hand-made segments (no Qt)."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from lucky_monitor.core.commands import CommandClient
from lucky_monitor.core.monitor import LinkState, MonitorCore
from lucky_monitor.core.traffic import TrafficLog
from lucky_monitor.protocol import header as hdr
from lucky_monitor.protocol import messages as m
from lucky_monitor.protocol.errors import CommandTimeout
from lucky_monitor.sim.engine import EngineConfig, ReferenceEngine
from lucky_monitor.sim.trainer import SharedMemoryClient
from lucky_monitor.transport.shm import EngineSegment, Segment
from lucky_monitor.transport.tools import ToolsChannel
from tests.conftest import unique_segment_name

pytestmark = pytest.mark.timeout(60)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def engine():
    eng = ReferenceEngine(
        EngineConfig(
            name=unique_segment_name("core"),
            num_envs=8,
            obs_size=10,
            act_size=2,
            image=(16, 12),
            sim_mode=2,
            camera_fps=0,
        )
    )
    yield eng
    eng.close()


def test_searching_when_nothing_is_there():
    core = MonitorCore(unique_segment_name("absent"))
    assert core.poll() is None
    assert core.status.state is LinkState.SEARCHING
    assert "searching for" in core.status.text


def test_a_share_of_the_images_is_copied_and_an_image_left_out_stays_out(engine):
    from lucky_monitor.core.pacing import share_shows

    core = MonitorCore(engine.name)
    engine.tick()
    core.poll()
    core.image_share = 0.9
    copied = []
    for _ in range(40):
        engine.tick()  # a new image each step (camera_fps=0)
        for _ in range(2):  # the second poll sees no new image: a left-out one must not be copied late
            f = core.poll()
            if f is not None and f.image_updated:
                copied.append(f.image_seq // 2)
    published = range(engine.seg.counter("image_seq") // 2 - 39, engine.seg.counter("image_seq") // 2 + 1)
    assert copied == [k for k in published if share_shows(k, 0.9)]
    assert len(copied) == 36  # nine in ten
    core.image_share = 1.0
    engine.tick()
    f = core.poll()
    assert f.image_updated and np.array_equal(core.images, engine.seg.images)


def test_attach_copy_and_free_run(engine):
    core = MonitorCore(engine.name)
    engine.tick()
    f = core.poll()
    assert core.status.state is LinkState.FREE_RUNNING
    assert f is not None and f.hot_ok
    np.testing.assert_array_equal(f.rewards, engine.seg.rewards)
    assert f.image_updated and np.array_equal(core.images, engine.seg.images)
    for _ in range(5):
        engine.tick()
    f = core.poll()
    assert f.frame_seq == engine.seg.counter("frame_seq")
    assert f.frames_skipped == 4  # five steps, one poll: four frames never seen
    assert core.counters.frames_skipped == 4


def test_frames_skipped_while_a_poll_came_late_are_the_monitors_doing(engine):
    """Skips on an on-time poll: the engine outran the poll. Skips on a late poll: the monitor was busy."""
    clock = Clock()
    core = MonitorCore(engine.name, clock=clock)
    engine.tick()
    core.poll()
    for _ in range(3):
        engine.tick()
    clock.t += 1 / 60  # on time: three frames in one poll period
    core.poll()
    assert (core.counters.frames_skipped, core.counters.late_polls, core.counters.frames_skipped_late) == (2, 0, 0)
    for _ in range(8):
        engine.tick()
    clock.t += 0.2  # a poll 200 ms late (the window was busy starting): its skips are the monitor's
    core.poll()
    assert (core.counters.frames_skipped, core.counters.late_polls, core.counters.frames_skipped_late) == (9, 1, 7)
    assert core.counters.copy() == core.counters


def test_lockstep_turns_and_trainer_states(engine):
    clock = Clock()
    core = MonitorCore(engine.name, clock=clock)
    core.poll()
    client = SharedMemoryClient(engine.name)
    try:
        # Trainer attached, its turn, frames flowing: connected.
        frame = client.frame_seq
        client.seg.set("action_seq", frame)  # hand the turn over by hand
        engine.tick()
        clock.t += 0.1
        core.poll()
        assert core.status.state is LinkState.CONNECTED
        # The trainer sits on its turn: after 0.5 s the monitor says who holds things up.
        clock.t += 2.0
        engine._heartbeat(force=True)
        core.poll()
        assert core.status.state is LinkState.WAITING_FOR_TRAINER
        assert core.rates.polls_trainer_turn >= 1
        # The engine holds its turn for a long time: engine stepping.
        client.seg.set("action_seq", client.frame_seq)
        clock.t += 2.0
        engine._heartbeat(force=True)
        core.poll()
        assert core.status.state is LinkState.ENGINE_STEPPING
        assert core.rates.polls_engine_turn >= 1
    finally:
        client.close()


def test_attach_transient_then_violation_then_stall(segment_factory):
    seg = segment_factory(num_envs=2, obs_size=2, act_size=1)
    clock = Clock()
    seg.set("engine_state", 1)
    seg.set("frame_seq", 10)
    seg.set("action_seq", 3)
    seg.set("client_pid", os.getpid())
    seg.set("heartbeat_ns", 1)
    core = MonitorCore(seg.name, clock=clock)
    core.poll()
    # Right after a trainer claimed client_pid, action_seq still holds the free-run value.
    assert core.status.state is LinkState.WAITING_FOR_TRAINER
    assert "attaching" in core.status.text
    clock.t += 1.5
    seg.set("heartbeat_ns", 2)
    core.poll()
    clock.t += 1.0
    seg.set("heartbeat_ns", 3)
    core.poll()
    assert core.status.state is LinkState.VIOLATION
    assert "frame_seq - action_seq = 7" in core.status.reason
    clock.t += 5
    core.poll()
    assert core.status.state is LinkState.STALLED
    assert core.status.text == "stalled for 5 s"


def test_image_seq_odd_at_most_polls_reads_images_stuck_and_copies_nothing(segment_factory):
    """An engine stuck inside an image write, or one keeping the seqlock inverted (even only while it writes),
    gives no trustworthy copy: with the heartbeat going, once ~90 % of polls over about two seconds find
    image_seq odd the state says so (it read free-running), no image is copied, and an odd image_seq no longer
    stops the hot copy; under 50 % it is sound again."""
    seg = segment_factory(num_envs=2, obs_size=2, act_size=1, image=(4, 4, 3))
    clock = Clock()
    seg.set("engine_state", 1)
    seg.set("frame_seq", 5)
    seg.set("image_seq", 4)
    core = MonitorCore(seg.name, clock=clock)
    beat = iter(range(1, 100000))

    def poll(dt: float, image_seq: int | None = None) -> None:
        clock.t += dt
        if image_seq is not None:
            seg.set("image_seq", image_seq)
        seg.set("heartbeat_ns", next(beat))
        core.poll()

    poll(0.0)
    assert core.status.state is LinkState.FREE_RUNNING
    for _ in range(60):  # a write takes a moment: an odd image_seq at some polls is nothing
        poll(1 / 60, 5 if _ % 3 == 0 else 6)
    assert core.status.state is LinkState.FREE_RUNNING
    for _ in range(90):  # stuck inside a write: odd at every poll, for 1.5 s: not yet
        poll(1 / 60, 7)
    assert core.status.state is LinkState.FREE_RUNNING
    for k in range(120):  # inverted: odd but at one poll in twenty, where a write is under way
        poll(1 / 60, 9 + 2 * k if k % 20 else 8 + 2 * k)
    assert core.status.state is LinkState.IMAGES_STUCK and not core.status.state.healthy
    assert core.status.text.startswith("no consistent image: image_seq odd at ") and "% of polls" in core.status.text
    assert "inverted" in core.status.reason
    copied = core.counters.images_copied
    core.copy_images = True
    for k in range(30):
        poll(1 / 60, 300 + 2 * k if k % 10 == 0 else 301 + 2 * k)  # even now and then: never copied meanwhile
    assert core.counters.images_copied == copied and core.status.state is LinkState.IMAGES_STUCK
    for _ in range(60):  # sound again: even at every poll
        poll(1 / 60, 400)
    assert core.status.state is LinkState.FREE_RUNNING
    seg.set("image_seq", 401)
    for _ in range(5):
        poll(1.0)  # the heartbeat stops too: stalled comes first
    clock.t += 5.0
    core.poll()
    assert core.status.state is LinkState.STALLED


def test_a_trainer_leaving_because_the_engine_died_reads_engine_exited_at_once(segment_factory):
    """The reference trainer clears client_pid when its engine dies: that poll looks at the engine's pid
    too, so the state does not show free-running (engine alive) for up to PID_CHECK_S first."""
    import subprocess
    import sys

    engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        seg = segment_factory(num_envs=2, obs_size=2, act_size=1, server_pid=engine.pid)
        seg.set("engine_state", 1)
        seg.set("heartbeat_ns", 1)
        seg.set("client_pid", trainer.pid)
        seg.set("frame_seq", 4)
        seg.set("action_seq", 4)
        clock = Clock()
        core = MonitorCore(seg.name, clock=clock)
        core.poll()
        assert core.status.state is not LinkState.FREE_RUNNING and core.engine_alive
        engine.kill()
        engine.wait()
        seg.set("client_pid", 0)
        clock.t += 0.02  # well inside PID_CHECK_S
        seg.set("heartbeat_ns", 2)
        core.poll()
        assert core.status.state is LinkState.ENGINE_EXITED, core.status
    finally:
        for p in (engine, trainer):
            p.kill()
            p.wait()


@pytest.mark.parametrize("cut", [100, 0, "rewritten"])
def test_a_dead_engines_segment_cut_or_overwritten_reads_engine_exited_not_incompatible(segment_factory, cut):
    """A truncation that kills the engine leaves a file that fails the header check: still 'engine exited'
    (it read incompatible 16 ms later). A new session_id under the name is a new segment, judged on its own."""
    import subprocess
    import sys

    from lucky_monitor.transport.shm import shm_path

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        seg = segment_factory(num_envs=2, obs_size=2, act_size=1, server_pid=child.pid)
        seg.set("engine_state", 1)
        seg.set("heartbeat_ns", 1)
        clock = Clock()
        core = MonitorCore(seg.name, clock=clock)
        core.poll()
        assert core.status.state is LinkState.FREE_RUNNING
    finally:
        child.kill()
        child.wait()
    path = shm_path(seg.name)
    if cut == "rewritten":
        with open(path, "r+b") as f:
            f.seek(hdr.OFFSET["num_envs"])
            f.write(struct.pack("<I", 0))  # the header no longer passes; the session_id is the dead engine's
    else:
        os.truncate(path, cut)
    for _ in range(6):
        clock.t += 0.3
        core.poll()
    assert core.status.state is LinkState.ENGINE_EXITED, core.status
    assert f"engine pid {child.pid} is gone" in core.status.reason
    if cut == "rewritten":
        with open(path, "r+b") as f:  # another session_id: a new segment with a bad header
            f.seek(hdr.OFFSET["session_id"])
            f.write(struct.pack("<Q", 12345))
        clock.t += 0.6
        core.poll()
        assert core.status.state is LinkState.INCOMPATIBLE and "num_envs" in core.status.reason


def test_incompatible_header_gives_the_reason(segment_factory):
    seg = segment_factory(num_envs=2, obs_size=2, act_size=1)
    seg.buf[hdr.OFFSET["version"] : hdr.OFFSET["version"] + 4] = (7).to_bytes(4, "little")
    core = MonitorCore(seg.name)
    core.poll()
    assert core.status.state is LinkState.INCOMPATIBLE
    assert "version: 7" in core.status.reason


def test_engine_exit_and_reattach(engine):
    name = engine.name
    clock = Clock()
    core = MonitorCore(name, clock=clock)
    core.poll()
    first = core.header.session_id
    engine.close()
    clock.t += 1
    core.poll()
    assert core.status.state is LinkState.ENGINE_EXITED
    eng2 = ReferenceEngine(EngineConfig(name=name, num_envs=3, obs_size=8, act_size=1, image=None))
    try:
        clock.t += 1
        core.poll()
        assert core.header.session_id != first
        assert core.header.num_envs == 3
        assert core.reattached == 1
        assert "reattached" in core.status.notice
        assert core.images is None
    finally:
        eng2.close()


def test_monitor_never_writes_the_segment(engine):
    before = bytes(engine.seg.buf)
    core = MonitorCore(engine.name)
    for _ in range(20):
        core.poll()
    log = TrafficLog(core.segment)
    log.poll()
    assert bytes(engine.seg.buf) == before


def test_command_client_and_traffic_tap(engine):
    core = MonitorCore(engine.name)
    core.poll()
    log = TrafficLog(core.segment)
    with ToolsChannel.claim(engine.name) as ch:
        client = CommandClient(ch, timeout_s=2.0)
        cid = client.send(m.MethodId.GetServicesReq, m.GetServicesReq())
        engine.serve_commands()
        replies = client.poll()
        assert [r.correlation_id for r in replies] == [cid]
        assert replies[0].ok and replies[0].response.payload.services_enabled == m.Service.all_mask()
        client.send(
            m.MethodId.SetServiceEnabledReq, m.SetServiceEnabledReq(service=int(m.Service.DEBUG), enabled=False)
        )
        client.send(m.MethodId.DrawReq, m.DrawReq(clear_previous=True))
        engine.serve_commands()
        replies = client.poll()
        assert replies[0].ok and replies[1].error == "service Debug is disabled"
        entries = log.poll()
        methods = [(e.pair, e.direction, e.method) for e in entries]
        assert ("tools", "c2s", "GetServicesReq") in methods
        assert ("tools", "s2c", "DrawResp") in methods
        draw_resp = next(e for e in entries if e.method == "DrawResp")
        assert draw_resp.error == "service Debug is disabled" and draw_resp.latency_s is not None
        assert [e.method for e in log.filtered("draw")] == ["DrawReq", "DrawResp"]
        # Nobody serves: a clear timeout, never a hang.
        with pytest.raises(CommandTimeout):
            client.request(m.MethodId.GetServicesReq, m.GetServicesReq(), timeout_s=0.2)


def test_a_reply_that_arrives_while_the_ring_is_drained_is_timed_when_it_is_in_hand(engine):
    """Seen: `draw` printed 'round trip 0.00 ms': the clock was read before the reply ring was popped."""
    clock = Clock()
    with ToolsChannel.claim(engine.name) as ch:
        client = CommandClient(ch, timeout_s=2.0, clock=clock)
        cid = client.send(m.MethodId.GetServicesReq, m.GetServicesReq())
        pop = ch.s2c.pop

        def late_pop():  # the engine answers 7 ms after the send, just as the poll looks at the ring
            clock.t += 0.007
            engine.serve_commands()
            return pop()

        ch.s2c.pop = late_pop
        (reply,) = client.poll()
        assert reply.correlation_id == cid and reply.ok
        assert reply.rtt_s == pytest.approx(0.007)


def test_traffic_tap_survives_garbage(engine):
    core = MonitorCore(engine.name)
    core.poll()
    log = TrafficLog(core.segment)
    with ToolsChannel.claim(engine.name) as ch:
        ch.c2s.push(b"\x01\x02\x03 not a flatbuffer")
        entries = log.poll()
        assert entries[0].method == "?" and entries[0].error.startswith("undecodable")
        engine.serve_commands()  # the engine counts it and goes on
    engine.tick()
    assert core.poll() is not None


def test_segment_views_are_read_only_for_the_monitor(engine):
    with Segment.attach(engine.name) as seg:
        with pytest.raises(ValueError):
            seg.rewards[0] = 1.0


def test_auto_follows_the_newest_live_segment():
    prefix = f"LuckyAutoTest{os.getpid()}_"
    clock = Clock()
    core = MonitorCore(None, prefix=prefix, clock=clock)
    core.poll()
    assert core.status.state is LinkState.SEARCHING and prefix in core.status.text
    older = ReferenceEngine(EngineConfig(name=prefix + "a", num_envs=2, obs_size=8, act_size=1, image=None))
    try:
        os.utime(older.seg.path, (1, 1))  # make it clearly the older one
        newer = ReferenceEngine(EngineConfig(name=prefix + "b", num_envs=3, obs_size=8, act_size=1, image=None))
        try:
            clock.t += 1  # past the search's retry delay
            core.poll()
            assert core.segment is not None and core.segment.name == prefix + "b"
            assert core.header.num_envs == 3
        finally:
            newer.close()
        clock.t += 1
        core.poll()  # the followed engine is gone ...
        core.poll()  # ... so the next live one is taken
        assert core.segment is not None and core.segment.name == prefix + "a"
    finally:
        older.close()
        core.close()


# ---------------------------------------------------------------- the validity check's cadence


def _running(seg) -> None:
    seg.set("engine_state", 1)
    seg.set("heartbeat_ns", 1)


def _attached_at_frame_1(segment_factory) -> tuple[EngineSegment, Clock, MonitorCore]:
    """A hand-made running segment at frame 1, and a core on a test clock that has polled it once."""
    seg = segment_factory()
    clock = Clock()
    core = MonitorCore(seg.name, clock=clock)
    _running(seg)
    seg.set("frame_seq", 1)
    core.poll()
    return seg, clock, core


def _count_full_checks(monkeypatch, clock: Clock) -> list[float]:
    calls: list[float] = []
    full = Segment.still_valid

    def counted(self: Segment) -> str | None:
        calls.append(clock.t)
        return full(self)

    monkeypatch.setattr(Segment, "still_valid", counted)
    return calls


def test_polls_that_find_new_frames_check_the_name_and_size_four_times_a_second(segment_factory, monkeypatch):
    """The full check is three system calls; a poll whose frame_seq moved needs only the session_id."""
    seg, clock, core = _attached_at_frame_1(segment_factory)
    assert core.status.state is LinkState.FREE_RUNNING
    calls = _count_full_checks(monkeypatch, clock)
    for i in range(2, 62):  # one second at 60 Hz, a new frame at every poll
        seg.set("frame_seq", i)
        clock.t += 1 / 60
        assert core.poll() is not None
    assert 3 <= len(calls) <= 5, calls  # every VALIDATE_S (0.25 s)
    calls.clear()
    for _ in range(30):  # no new frame: nothing shows the mapping is still the engine's, so every poll checks
        clock.t += 1 / 60
        core.poll()
    assert len(calls) == 30
    assert core.status.state is LinkState.FREE_RUNNING


def test_a_name_unlinked_while_frames_keep_coming_is_noticed_within_the_validate_period(segment_factory):
    seg, clock, core = _attached_at_frame_1(segment_factory)
    os.unlink(seg.path)
    polls = 0
    assert core.status.state is LinkState.FREE_RUNNING
    while core.status.state is LinkState.FREE_RUNNING and polls < 100:
        seg.set("frame_seq", polls + 2)  # the orphaned mapping is still written: only the name is gone
        clock.t += 1 / 60
        core.poll()
        polls += 1
    assert core.status.state is LinkState.ENGINE_EXITED
    assert core.status.reason == "segment unlinked"
    assert polls <= round(MonitorCore.VALIDATE_S * 60) + 1


def test_a_recreated_segment_is_noticed_at_the_first_poll_by_its_session_id(segment_factory):
    seg, clock, core = _attached_at_frame_1(segment_factory)
    clock.t += 1 / 60
    seg.set("frame_seq", 2)
    core.poll()  # the full check was just made: the next poll with a new frame takes the short one
    assert core.status.state is LinkState.FREE_RUNNING
    old = seg.session_id
    # same file, a new session: what a recreate in place leaves
    struct.pack_into("<Q", seg.buf, hdr.OFFSET["session_id"], old ^ 0x5A5A)
    seg.set("frame_seq", 3)
    clock.t += 1 / 60
    core.poll()
    assert core.status.state is LinkState.ENGINE_EXITED
    assert core.status.reason == f"session_id changed ({old:x} -> {old ^ 0x5A5A:x}): segment recreated"


@pytest.mark.skipif(not hasattr(os, "truncate") or not os.path.isdir("/dev/shm"), reason="truncates a /dev/shm file")
def test_a_shrink_found_by_a_failed_read_is_reported_in_the_full_checks_words(segment_factory):
    """Between two full checks a shrink surfaces as a short read; the reason still says what happened."""
    seg, clock, core = _attached_at_frame_1(segment_factory)
    full = seg.size
    seg.set("frame_seq", 2)
    os.truncate(seg.path, 4096)  # the header stays, the hot arrays go; this process never writes again
    clock.t += 1 / 60
    assert core.poll() is None
    assert core.status.state is LinkState.ENGINE_EXITED
    assert core.status.reason == f"segment shrank to 4096 bytes (needs {full})"


# ---------------------------------------------------------------- the hot copy in the engine's turn


def _engine_turn(seg, frame: int, rewards: float, image_frame: int) -> None:
    """Frame ``frame`` published, the trainer's actions in (the engine's turn); ``rewards`` in the array now."""
    seg.set("client_pid", os.getpid())
    seg.set("frame_seq", frame)
    seg.set("action_seq", frame)
    seg.rewards[:] = rewards
    seg.set("image_seq", 2 * image_frame)
    seg.set("image_frame_seq", image_frame)


def test_in_the_engines_turn_inside_its_step_nothing_is_copied_until_it_publishes(segment_factory):
    """LAYOUT §8.2: an engine that holds the turn while it writes the next frame is not copied from.

    The engine writes frame k + 1's arrays, then its images, then publishes: with
    ``image_frame_seq`` ahead of ``frame_seq`` the arrays hold k + 1's values under k's number.
    """
    seg = segment_factory(num_envs=4, obs_size=2, act_size=1, image=(8, 6, 3))
    _running(seg)
    clock = Clock()
    core = MonitorCore(seg.name, clock=clock)
    _engine_turn(seg, 5, 5.0, image_frame=5)  # the engine idles in its turn (realtime, before its slot)
    f = core.poll()
    assert f is not None and f.frame_seq == 5 and f.hot_ok
    np.testing.assert_array_equal(f.rewards, 5.0)  # the best-effort copy of an idle engine's turn

    _engine_turn(seg, 6, 7.0, image_frame=7)  # frame 7's arrays and images written, not yet published
    clock.t += 1 / 60
    f = core.poll()
    assert f is None or not f.hot_ok or f.frame_seq != 6, f
    if f is not None:  # the image copy of this poll carries the last values taken, under their own frame
        assert f.frame_seq == 5
        np.testing.assert_array_equal(f.rewards, 5.0)
    assert core.counters.hot_deferred == 1 and core.counters.frames_seen == 1

    seg.set("image_seq", 2 * 7 + 1)  # ... or writing them: the same
    clock.t += 1 / 60
    f = core.poll()
    assert core.counters.hot_deferred == 2 and core.counters.frames_seen == 1

    seg.set("image_seq", 2 * 7)
    seg.set("frame_seq", 7)  # published: the trainer's turn
    clock.t += 1 / 60
    f = core.poll()
    assert f is not None and f.frame_seq == 7 and f.hot_ok and f.frames_skipped == 1  # frame 6 never seen
    np.testing.assert_array_equal(f.rewards, 7.0)
    assert core.counters.frames_seen == 2 and core.counters.frames_skipped == 1

    _engine_turn(seg, 8, 8.0, image_frame=1 << 40)  # a lead beyond one breaks C23 and says nothing
    clock.t += 1 / 60
    f = core.poll()
    assert f is not None and f.frame_seq == 8 and f.hot_ok  # read best effort, never deferred for ever
    assert core.counters.hot_deferred == 2


def test_the_hot_reads_wait_for_the_trainers_turn_sleeps_between_looks(segment_factory, monkeypatch):
    """While the engine holds the turn the poll naps between two reads of the counters: the wait costs no CPU.

    Re-reading the counters with an offer of the core every 100 us took 0.69 ms of CPU a poll beside a
    busy pair, napping 0.57 ms. The quantum of work counts afresh after a nap (the core was given away).
    """
    from lucky_monitor.core import monitor as monitor_mod
    from lucky_monitor.core.pacing import Yielder

    seg = segment_factory(num_envs=4, obs_size=2, act_size=1, image=(8, 6, 3))
    _running(seg)
    naps: list[float] = []
    monkeypatch.setattr(monitor_mod.time, "sleep", naps.append)
    yclock = Clock()
    offers: list[float] = []
    clock = Clock()
    core = MonitorCore(seg.name, clock=clock)
    core.yielder = Yielder(100, clock=yclock, yield_=lambda: offers.append(yclock.t))
    for frame in range(1, 4):  # a lock-step pair seen mostly in the trainer's turn: the engine's turns are short
        _engine_turn(seg, frame, 1.0, image_frame=frame)
        seg.set("action_seq", frame - 1)
        clock.t += 1 / 60
        core.poll()
    assert naps == []
    _engine_turn(seg, 6, 7.0, image_frame=7)  # inside the engine's step: waited for, then left to a later poll
    clock.t += 1 / 60
    yclock.t = 1.0  # a quantum of work long past: the next offer is due, unless a nap restarted the count
    core.poll()
    assert core.counters.hot_deferred == 1
    assert naps and set(naps) == {MonitorCore.TURN_NAP_S}
    assert offers == []  # after a nap the work starts afresh: no offer right behind it


def test_a_failed_hot_copy_is_never_recorded_as_a_frame(engine, monkeypatch):
    """After the retries fail the buffers hold a torn mix: shown as not ok, never put in the history."""
    from lucky_monitor.core import monitor as monitor_mod
    from lucky_monitor.core.session import MonitorSession
    from lucky_monitor.protocol.seqlock import HotReadResult

    s = MonitorSession(engine.name)
    engine.tick()
    s.step()
    hist = s.history
    assert hist is not None and hist.last_frame_seq == engine.seg.counter("frame_seq")
    last = hist.last_frame_seq
    monkeypatch.setattr(monitor_mod, "hot_read", lambda *a, **k: HotReadResult(False, last + 1, 0, 4, "frame_seq"))
    engine.tick()
    tick = s.step()
    assert tick.frame is not None and not tick.frame.consistent
    assert hist.last_frame_seq == last
    s.close()


def test_the_images_frame_is_read_under_the_image_seqlock(segment_factory, monkeypatch):
    """LAYOUT §8.1: ``image_frame_seq`` is loaded after the copy and before the second ``image_seq``.

    An engine that starts its next publication right after the monitor's second load stores the next
    ``image_frame_seq`` before the monitor could read it afterwards: the copy, consistent, is frame 5's.
    """
    seg = segment_factory(num_envs=4, obs_size=2, act_size=1, image=(8, 6, 3))
    _running(seg)
    _engine_turn(seg, 5, 5.0, image_frame=5)
    seg.set("action_seq", 4)  # the trainer's turn
    core = MonitorCore(seg.name, clock=Clock())
    core.poll()  # attached
    seg.set("image_seq", 2 * 6)  # a new publication of frame 5's images (frame 5 re-rendered)
    real = Segment.read_counter
    loads: list[str] = []

    def read_counter(self, field: str) -> int:
        value = real(self, field)
        loads.append(field)
        if field == "image_seq" and loads.count("image_seq") == 2:  # the engine begins its next write now
            seg.set("image_seq", 2 * 6 + 1)
            seg.set("image_frame_seq", 6)
        return value

    monkeypatch.setattr(Segment, "read_counter", read_counter)
    core.clock.t += 1 / 60
    f = core.poll()
    assert f is not None and f.image_updated and f.image_seq == 12
    assert f.image_frame_seq == 5, "the frame of the images copied, not of the write that began after"
