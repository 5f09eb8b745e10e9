"""Faults of the processes around a monitor: engine and trainer killed or stopped, a reused pid,
a second monitor, a flooded ring. Each case asserts what the session shows.

The session runs in this process (none of these faults can make a read of the mapping fault:
the segment's file keeps its size); engines and trainers that get signals run in their own.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from lucky_monitor.core.monitor import LinkState
from lucky_monitor.core.session import MonitorSession, Tick
from lucky_monitor.protocol.enums import EngineState
from lucky_monitor.protocol.envelope import Envelope, encode
from lucky_monitor.protocol.errors import RingFull
from lucky_monitor.protocol.messages import MethodId
from lucky_monitor.protocol.ring import RingReader
from lucky_monitor.sim.engine import EngineConfig, ReferenceEngine
from lucky_monitor.transport.shm import platform_kind
from tests.conftest import unique_segment_name
from tests.faults.support import Child, Monitor, remove, sim, wait

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(platform_kind() != "dir", reason="signals and /dev/shm segments are exercised on Linux"),
]

PY = sys.executable


def config(name: str | None = None, **kw: object) -> EngineConfig:
    base: dict[str, object] = {
        "num_envs": 4,
        "obs_size": 8,
        "act_size": 2,
        "image": None,
        "sim_mode": 2,
        "cmd_ring_size": 4096,
        "tools_ring_size": 16 * 1024,
    }
    base.update(kw)
    return EngineConfig(name=name or unique_segment_name("fault"), **base)  # type: ignore[arg-type]


@pytest.fixture
def engines():
    made: list[ReferenceEngine] = []
    yield made
    for eng in made:
        eng.close()


@pytest.fixture
def children():
    made: list[Child] = []
    yield made
    for c in made:
        c.kill()


# ---------------------------------------------------------------------------
# Engine SIGKILL in the middle of an image write
# ---------------------------------------------------------------------------

#: An engine that writes images under the seqlock on command: ``frame V`` publishes one batch of
#: value V; ``churn`` rewrites the images as fast as it can; ``stick V`` opens the seqlock (odd),
#: writes half a batch and never closes it. The heartbeat beats throughout.
IMAGE_WRITER = r"""
import os, secrets, select, sys, time
from lucky_monitor.protocol.enums import EngineState
from lucky_monitor.protocol.header import plan
from lucky_monitor.transport.shm import EngineSegment

h = plan(num_envs=64, obs_size=4, act_size=1, cmd_ring_size=4096, image=(64, 64, 3),
         server_pid=os.getpid(), session_id=secrets.randbits(63) | 1)
seg = EngineSegment.create(sys.argv[1], h)
seg.set("heartbeat_ns", time.monotonic_ns())
seg.set("engine_state", EngineState.RUNNING)
seg.set("frame_seq", 1)
seq = 0

def write(value, half=False):
    global seq
    seg.set("image_seq", seq + 1)
    if half:
        seg.images[:32] = value
        return
    seg.images[:] = value
    seq += 2
    seg.set("image_seq", seq)

print("ready", flush=True)
churn, fill = False, 0
while True:
    seg.set("heartbeat_ns", time.monotonic_ns())
    ready, _, _ = select.select([sys.stdin], [], [], 0 if churn else 0.02)
    if ready:
        cmd, *arg = sys.stdin.readline().split()
        churn = False
        if cmd == "frame":
            write(int(arg[0]))
            print(seq, flush=True)
        elif cmd == "churn":
            churn = True
            print("churning", flush=True)
        elif cmd == "stick":
            write(int(arg[0]), half=True)
            print("stuck", flush=True)
    if churn:
        fill = (fill + 1) % 200
        write(fill)
"""


def test_engine_killed_mid_image_write_keeps_the_last_good_frame(subprocess_env, children) -> None:
    name = unique_segment_name("torn")
    eng = Child([PY, "-c", IMAGE_WRITER, name], subprocess_env)
    children.append(eng)
    try:
        assert eng.readline() == "ready"
        s = MonitorSession(name, discover=False, tools=False, stall_after=30.0)
        seq = int(eng.ask("frame 7"))
        t = wait(s, lambda t: t.image is not None and t.image.image_seq == seq, "the first frame")
        assert t.image is not None and (t.image.shown_tile(0) == 7).all()
        # A writer that never pauses: copies that overlap a write are discarded and counted.
        assert eng.ask("churn") == "churning"
        wait(s, lambda t: t.counters.torn_images > 0, "a torn copy")
        seq = int(eng.ask("frame 9"))
        good = wait(s, lambda t: t.image is not None and t.image.image_seq == seq, "the last good frame")
        # The engine dies inside a write: image_seq stays odd, half the batch is new bytes.
        assert eng.ask("stick 200") == "stuck"
        for _ in range(20):
            t = s.step()
            assert t.image is not None and t.image.image_seq == seq and not t.image.new
            assert (t.image.shown_tile(0) == 9).all() and (t.image.shown_tile(63) == 9).all()
            assert t.state is LinkState.FREE_RUNNING and t.display_error is None
        eng.signal(signal.SIGKILL)
        eng.proc.wait()
        dead = wait(s, lambda t: t.state is LinkState.ENGINE_EXITED, "engine exited")
        assert dead.reason == f"engine pid {eng.pid} is gone"
        assert dead.counters.torn_images >= good.counters.torn_images > 0
        assert dead.image is None and dead.header is None
        s.close()
    finally:
        remove(name)


# ---------------------------------------------------------------------------
# Engine SIGSTOP longer than the stall threshold, then SIGCONT
# ---------------------------------------------------------------------------


def test_engine_stopped_then_continued_is_stalled_then_healthy_on_the_same_attach(subprocess_env, children) -> None:
    name = unique_segment_name("stop")
    eng = sim(name, subprocess_env, "--envs", "4", "--obs", "8", "--act", "2", "--image", "16x16", "--hz", "100")
    children.append(eng)
    try:
        s = MonitorSession(name, discover=False, stall_after=1.0)
        t = wait(s, lambda t: t.state is LinkState.FREE_RUNNING and t.counters.frames_seen > 10, "free-running")
        gen, before = t.generation, t.counters.frames_seen
        eng.signal(signal.SIGSTOP)
        seen: list[Tick] = []
        stalled = wait(
            s,
            lambda t: t.state is LinkState.STALLED and (t.heartbeat_age_s or 0) >= 2.0,
            "stalled for 2 s",
            seen=seen,
        )
        assert re.fullmatch(r"stalled for \d+ s", stalled.text), stalled.text
        assert int(stalled.text.split()[2]) >= 2 and stalled.reason == "no heartbeat from the engine"
        assert {x.state for x in seen} <= {LinkState.FREE_RUNNING, LinkState.STALLED}
        assert stalled.engine_alive is True and stalled.generation == gen
        eng.signal(signal.SIGCONT)
        back = wait(
            s,
            lambda t: t.state is LinkState.FREE_RUNNING and t.counters.frames_seen > stalled.counters.frames_seen + 10,
            "healthy again",
        )
        # The same attach goes on: counters continue, nothing was reattached.
        assert back.generation == gen and back.reattached == 0
        assert back.counters.frames_seen > before + 10 and back.rates.frames_per_s
        s.close()
    finally:
        eng.signal(signal.SIGCONT)
        eng.signal(signal.SIGINT)
        eng.proc.wait(20)
        remove(name)


# ---------------------------------------------------------------------------
# Trainer SIGSTOP mid-turn, then SIGKILL
# ---------------------------------------------------------------------------

TRAINER = r"""
import sys
import numpy as np
from lucky_monitor.sim.trainer import SharedMemoryClient
tr = SharedMemoryClient(sys.argv[1], timeout_s=60)
print("attached", flush=True)
zeros = np.zeros((tr.num_envs, tr.act_size), np.float32)
while True:
    tr.step(zeros)
"""


def test_trainer_stopped_then_killed(engines, subprocess_env, children) -> None:
    eng = ReferenceEngine(config())
    engines.append(eng)
    tr = Child([PY, "-c", TRAINER, eng.name], subprocess_env)
    children.append(tr)
    assert tr.readline() == "attached"
    s = MonitorSession(eng.name, discover=False, tools=False, stall_after=10.0)
    on = wait(
        s,
        lambda t: t.state is LinkState.CONNECTED and t.live is not None and t.live.client_pid == tr.pid,
        "lock-step",
        engines=engines,
    )
    assert on.text == f"lock-step with trainer pid {tr.pid}" and on.trainer_alive is True
    wait(s, lambda t: t.counters.frames_seen > 50, "frames", engines=engines)

    # SIGSTOP wherever the trainer is: the engine finishes its turn, then waits for the trainer.
    tr.signal(signal.SIGSTOP)
    waiting = wait(
        s,
        lambda t: t.state is LinkState.WAITING_FOR_TRAINER and t.text.startswith("waiting for trainer for"),
        "waiting for trainer",
        engines=engines,
    )
    assert waiting.live is not None and waiting.live.turn == "trainer"
    frame = waiting.live.frame_seq
    for _ in range(20):
        eng.tick()
        t = s.step()
        assert t.live is not None and t.live.frame_seq == frame  # nothing steps without the trainer
    tr.signal(signal.SIGCONT)
    resumed = wait(
        s,
        lambda t: t.state is LinkState.CONNECTED and t.live is not None and t.live.frame_seq > frame + 20,
        "lock-step again",
        engines=engines,
    )
    assert resumed.generation == waiting.generation

    # SIGKILL (reaped): before the engine notices, the monitor says the trainer exited ...
    tr.signal(signal.SIGKILL)
    tr.proc.wait()
    lost = wait(s, lambda t: t.state is LinkState.TRAINER_LOST, "trainer exited")
    assert lost.text == f"trainer pid {tr.pid} exited" and lost.trainer_alive is False
    # ... then the engine clears client_pid and free-runs.
    free = wait(
        s,
        lambda t: t.state is LinkState.FREE_RUNNING and t.live is not None and t.live.frame_seq > frame + 50,
        "free-running",
        engines=engines,
    )
    assert free.live is not None and free.live.client_pid == 0 and free.trainer_alive is None
    assert eng.clients_detached == 1
    s.close()


# ---------------------------------------------------------------------------
# server_pid reused by an unrelated live process, heartbeat frozen
# ---------------------------------------------------------------------------


def test_reused_server_pid_with_a_frozen_heartbeat_is_stalled_not_healthy(segment_factory) -> None:
    # The engine died long ago; its pid now belongs to an unrelated live process. The pid alone
    # says "alive"; the heartbeat, which never changes, must make the session say stalled.
    # At attach the session takes the heartbeat's age on the shared host clock (LAYOUT 8.3), so
    # it is stalled from the first tick; after that it detects change, and nothing changes.
    other = subprocess.Popen([PY, "-c", "import time; time.sleep(120)"])
    try:
        seg = segment_factory(server_pid=other.pid)
        seg.set("heartbeat_ns", time.monotonic_ns() - 30_000_000_000)  # last beat 30 s ago
        seg.set("engine_state", EngineState.RUNNING)
        seg.set("frame_seq", 5)
        stall = 1.0
        s = MonitorSession(seg.name, discover=False, tools=False, stall_after=stall)
        first = wait(s, lambda t: t.attached, "attached")
        seen: list[Tick] = []
        stalled = wait(s, lambda t: t.state is LinkState.STALLED, "stalled", seen=seen)
        assert stalled.text.startswith("stalled for ") and stalled.reason == "no heartbeat from the engine"
        assert first.state is LinkState.STALLED  # never healthy, not even right after the attach
        later: list[Tick] = []
        wait(s, lambda t: t.t - stalled.t >= 2 * stall, "two more thresholds", seen=later)
        assert not [t for t in later if t.state.healthy], sorted({t.state.value for t in later})
        assert all(t.state is LinkState.STALLED and t.engine_alive is True for t in later)
        assert {t.state for t in [first, *seen]} <= {LinkState.FREE_RUNNING, LinkState.STALLED}
        s.close()
    finally:
        other.kill()
        other.wait()


# ---------------------------------------------------------------------------
# Two monitors: the tools channel is busy, then taken over after SIGKILL of its holder
# ---------------------------------------------------------------------------


def test_second_monitor_sees_the_holder_then_takes_over_after_its_sigkill(engines, subprocess_env, children) -> None:
    eng = ReferenceEngine(config(image=(8, 8)))  # an image region to draw into
    engines.append(eng)
    holder = Monitor(eng.name, subprocess_env)
    children.append(holder)
    rep = holder.wait_for(lambda r: r["tools_ours"], "the holder's claim")
    assert rep["tools_owner"] == holder.pid
    holder.tick("free")  # it keeps polling on its own
    s = MonitorSession(eng.name, discover=False)
    s.CLAIM_RETRY_S = 0.05
    busy = wait(s, lambda t: t.tools.owner_pid == holder.pid, "the holder seen", engines=engines)
    assert busy.tools.reason == f"tools channel held by pid {holder.pid}" and not busy.tools.ours
    assert busy.tools.owner_text == f"pid {holder.pid}"
    assert s.draw("line", start=(0, 0, 0), end=(1, 1, 1)) is False
    refused = s.step()
    assert [r.text for r in refused.results] == [f"error: tools channel held by pid {holder.pid}"]

    holder.signal(signal.SIGKILL)
    holder.proc.wait()
    ours = wait(s, lambda t: t.tools.ours, "the channel taken over", engines=engines)
    assert ours.tools.owner_pid == os.getpid() and ours.tools.reason == ""
    assert s.draw("line", start=(0, 0, 0), end=(1, 1, 1)) is True
    done = wait(s, lambda t: any(r.kind == "line" for r in t.results), "the draw answered", engines=engines)
    assert [r.status for r in done.results if r.kind == "line"] == ["ok"], done.results
    s.close()


# ---------------------------------------------------------------------------
# The engine flooding a ring
# ---------------------------------------------------------------------------


def test_a_flooded_ring_is_reported_as_missed_bytes_and_nothing_hangs(engines) -> None:
    eng = ReferenceEngine(config())
    engines.append(eng)
    h = eng.header
    writer = eng.pairs[0].responses  # the engine's own producer of main s2c
    consumer = RingReader(eng.seg.buf, h.cmd_s2c_offset, h.cmd_ring_size)  # the trainer's side
    s = MonitorSession(eng.name, discover=False, tools=False)
    wait(s, lambda t: t.state is LinkState.FREE_RUNNING, "attached", engines=engines)
    cid = 0

    def push(n: int) -> None:
        nonlocal cid
        for _ in range(n):
            cid += 1
            payload = encode(Envelope(MethodId.GetAgentSchemaResp, cid, None, "flood " + "x" * (cid % 200)))
            try:
                writer.push(payload)
            except RingFull:
                consumer.drain()
                writer.push(payload)
        consumer.drain()

    ticks = []
    for _ in range(10):
        push(3)  # a trickle the tap sees whole
        eng.tick()
        ticks.append(s.step())
        push(400)  # ~30 ring capacities between two polls: the tap is lapped
        eng.tick()
        ticks.append(s.step())
    last = ticks[-1].traffic_stats
    assert last.missed_bytes["main s2c"] > 10 * 4096 and last.messages["main s2c"] >= 30
    counts = [t.traffic_stats.messages["main s2c"] for t in ticks]
    assert counts == sorted(counts) and counts[-1] > counts[0]
    assert all(t.state is LinkState.FREE_RUNNING for t in ticks)
    assert last.corrupt_total == 0 and last.undecodable.get("main s2c", 0) == 0
    s.close()


def test_an_inverted_image_seqlock_in_lock_step_reads_images_stuck_and_frames_still_flow(
    engines, subprocess_env, children
) -> None:
    """An engine whose image_seq is odd between writes (even only while it writes): no copy of its images can
    be trusted, and an odd image_seq no longer means "inside its step" to the hot read, or nearly every frame
    would be deferred (5 a second were seen of 50)."""
    eng = ReferenceEngine(config(image=(16, 16), camera_fps=0, misbehave=frozenset({"image-seqlock-inverted"})))
    engines.append(eng)
    tr = Child([PY, "-c", TRAINER, eng.name], subprocess_env)
    children.append(tr)
    assert tr.readline() == "attached"
    s = MonitorSession(eng.name, discover=False, tools=False, stall_after=10.0)
    stuck = wait(s, lambda t: t.state is LinkState.IMAGES_STUCK, "images stuck", engines=engines)
    assert stuck.text.startswith("no consistent image: image_seq odd at ") and stuck.live is not None
    assert stuck.live.client_pid == tr.pid
    copied, seen, frame = stuck.counters.images_copied, stuck.counters.frames_seen, stuck.live.frame_seq
    end = time.monotonic() + 2.0
    last = stuck
    while time.monotonic() < end:
        last = wait(s, lambda t: True, "a step", engines=engines)
        assert last.state is LinkState.IMAGES_STUCK, (last.state, last.text)
    assert last.live is not None and last.live.frame_seq - frame > 20
    assert last.counters.frames_seen - seen >= 0.5 * (last.live.frame_seq - frame)  # frames flow
    assert last.counters.images_copied == copied  # and no image is copied meanwhile
    s.close()
