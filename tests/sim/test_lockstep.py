"""Lock-step between the reference engine and the reference trainer, over thousands of steps.

The proof that the engine applied exactly the trainer's actions is the action
echo in the observations (``obs[:, sim.echo_slice]``). Envs that ended in a
step were reset before the observation was written, so their echo belongs to
the new episode (zero) and they are masked out with ``dones | truncateds``.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from lucky_monitor.protocol import messages as m
from lucky_monitor.sim.engine import EngineConfig, ReferenceEngine
from lucky_monitor.sim.physics import STATE_FEATURES
from lucky_monitor.sim.trainer import SharedMemoryClient
from lucky_monitor.transport.shm import Segment, platform_kind, shm_path

N_ENVS, OBS, ACT = 16, 16, 4
ECHO = slice(STATE_FEATURES, STATE_FEATURES + ACT)


def _name() -> str:
    return f"LuckyEngine_ls_{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def engine_thread(**kw: object) -> Iterator[ReferenceEngine]:
    cfg = EngineConfig(
        **{"name": _name(), "num_envs": N_ENVS, "obs_size": OBS, "act_size": ACT, "image": None, "sim_mode": 2, **kw}
    )  # type: ignore[arg-type]
    eng = ReferenceEngine(cfg)
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            eng.run(stop.is_set)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=loop, name="engine", daemon=True)
    t.start()
    try:
        yield eng
    finally:
        stop.set()
        t.join(10)
        eng.close()
    assert not t.is_alive()
    if errors:
        raise errors[0]


def drive(tr: SharedMemoryClient, steps: int, seed: int, echo: slice) -> tuple[int, int]:
    """Step ``steps`` times with random actions; check every frame. Return (ended env-steps, checked env-steps)."""
    rng = np.random.default_rng(seed)
    n, act = tr.num_envs, tr.act_size
    width = echo.stop - echo.start
    # draws beyond [-1, 1] check the clipping too; the echo shows the clipped action
    all_actions = rng.uniform(-1.25, 1.25, (steps, n, act)).astype(np.float32)
    seg = tr.seg
    prev = tr.step(np.zeros((n, act), np.float32)).frame_seq  # may still be a free-run frame
    ended_total = checked = 0
    for k in range(steps):
        a = all_actions[k]
        res = tr.step(a)
        assert res.frame_seq == prev + 1, f"step {k}: frame_seq {prev} -> {res.frame_seq}"
        assert seg.counter("action_seq") == prev  # the engine stepped on exactly our hand-over
        prev = res.frame_seq
        ended = (res.dones != 0) | (res.truncateds != 0)
        got = res.obs[~ended, echo]
        want = np.clip(a[~ended, :width], -1.0, 1.0)
        if not np.array_equal(got, want):
            bad = np.argwhere(got != want)[0]
            raise AssertionError(f"step {k}: env row {bad[0]} echo {got[tuple(bad)]} != action {want[tuple(bad)]}")
        # an env that ended was reset: its echo is the new episode's (zero)
        assert not res.obs[ended, echo].any()
        ended_total += int(ended.sum())
        checked += int((~ended).sum())
    return ended_total, checked


@pytest.mark.timeout(120)
def test_ten_thousand_steps_in_lock_step() -> None:
    steps = 10_000
    with engine_thread() as eng, SharedMemoryClient(eng.name, timeout_s=10) as tr:
        # short episodes, so plenty of envs end (truncate) on the way and must be masked
        tr.reset(None, contract=m.SimulationContract(episode_length=37, randomize=True))
        f0 = tr.frame_seq
        ended, checked = drive(tr, steps, seed=11, echo=eng.sim.echo_slice)
        assert tr.frame_seq == f0 + steps + 1
        assert ended >= steps * N_ENVS // 40  # every env truncates at least every 37 steps
        assert checked > steps * N_ENVS * 0.9
        assert tr.steps == steps + 1


@pytest.mark.timeout(120)
def test_lock_step_with_images_every_step() -> None:
    with engine_thread(image=(32, 24), camera_fps=0.0) as eng, SharedMemoryClient(eng.name, timeout_s=10) as tr:
        drive(tr, 500, seed=3, echo=eng.sim.echo_slice)
        with Segment.attach(eng.name) as seg:
            f = seg.counter("frame_seq")
            assert seg.counter("image_frame_seq") == f and seg.counter("image_seq") % 2 == 0


@pytest.mark.timeout(60)
def test_turn_rule_seen_by_a_reader() -> None:
    """While a trainer drives the engine, frame_seq - action_seq is always 0 or 1."""
    with engine_thread() as eng, SharedMemoryClient(eng.name, timeout_s=10) as tr, Segment.attach(eng.name) as mon:
        tr.step(np.zeros((N_ENVS, ACT), np.float32))
        gaps: set[int] = set()
        zeros = np.zeros((N_ENVS, ACT), np.float32)
        for _ in range(2000):
            tr.step(zeros)
            f = mon.counter("frame_seq")
            a = mon.counter("action_seq")
            f2 = mon.counter("frame_seq")
            if f == f2:  # both loads saw the same frame
                gaps.add(f - a)
        assert gaps <= {0, 1} and 1 in gaps


@pytest.mark.timeout(60)
def test_trainer_detach_returns_the_engine_to_free_run() -> None:
    with engine_thread(hz=200.0, sim_mode=1) as eng:
        tr = SharedMemoryClient(eng.name, timeout_s=10)
        for _ in range(10):
            tr.step(np.zeros((N_ENVS, ACT), np.float32))
        a = tr.seg.counter("action_seq")
        f = tr.frame_seq
        tr.close()
        with Segment.attach(eng.name) as seg:
            assert seg.counter("client_pid") == 0
            deadline_frames = f + 5
            for _ in range(2000):
                if seg.counter("frame_seq") >= deadline_frames:
                    break
                time.sleep(0.005)
            assert seg.counter("frame_seq") >= deadline_frames  # deterministic free-run at 200 Hz
            assert seg.counter("action_seq") == a
        # a new trainer takes over where the free-run is
        with SharedMemoryClient(eng.name, timeout_s=10) as tr2:
            drive(tr2, 200, seed=5, echo=eng.sim.echo_slice)


@pytest.mark.timeout(120)
def test_lock_step_across_processes(subprocess_env) -> None:
    """The engine in its own process (``lucky-monitor sim --fast``), the trainer here."""
    name = _name()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lucky_monitor",
            "sim",
            "--name",
            name,
            "--fast",
            "--envs",
            str(N_ENVS),
            "--obs",
            str(OBS),
            "--act",
            str(ACT),
            "--image",
            "none",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "engine did not announce its segment"
        assert proc.stdout.readline().strip() == name
        with SharedMemoryClient(name, timeout_s=10) as tr:
            _, checked = drive(tr, 3000, seed=23, echo=ECHO)
            assert checked > 0
    finally:
        proc.terminate()
        try:
            assert proc.wait(15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if platform_kind() == "dir" and os.path.exists(shm_path(name)):
                os.unlink(shm_path(name))
            proc.stdout.close()
            proc.stderr.close()
