"""Process-level behaviour: kills, signals and the command line of ``sim`` / ``train``.

Every child is started with ``sys.executable -m lucky_monitor``, reaped in a
``finally`` and its segment unlinked if a SIGKILL left it behind.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from lucky_monitor.core.monitor import LinkState, MonitorCore
from lucky_monitor.protocol.enums import Service
from lucky_monitor.protocol.errors import EngineDied
from lucky_monitor.protocol.messages import MethodId
from lucky_monitor.sim import engine as engine_mod
from lucky_monitor.sim.engine import EngineConfig, ReferenceEngine
from lucky_monitor.sim.run import choose_policy
from lucky_monitor.sim.trainer import PDPolicy, RandomPolicy, SharedMemoryClient, TrainerBusy
from lucky_monitor.transport.shm import Segment, platform_kind, shm_path

pytestmark = pytest.mark.skipif(platform_kind() != "dir", reason="needs /dev/shm to check unlinking")


def _name() -> str:
    return f"LuckyEngine_proc_{uuid.uuid4().hex[:12]}"


def _unlink(name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(shm_path(name))


def _readline(proc: subprocess.Popen, timeout: float = 30.0) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "child printed nothing"
    return proc.stdout.readline().strip()


@contextlib.contextmanager
def child(args: list[str], env: dict[str, str], name: str | None = None) -> Iterator[subprocess.Popen]:
    """``python -m lucky_monitor ARGS`` as a child; killed, reaped and its segment removed at the end."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "lucky_monitor", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        proc.stdout.close()
        proc.stderr.close()
        if name is not None:
            _unlink(name)


@contextlib.contextmanager
def engine_thread(**kw: object) -> Iterator[ReferenceEngine]:
    eng = ReferenceEngine(EngineConfig(**{"name": _name(), "num_envs": 8, "image": None, **kw}))  # type: ignore[arg-type]
    stop = threading.Event()
    t = threading.Thread(target=eng.run, args=(stop.is_set,), name="engine", daemon=True)
    t.start()
    try:
        yield eng
    finally:
        stop.set()
        t.join(10)
        eng.close()


def _sim_args(name: str, *extra: str) -> list[str]:
    return ["sim", "--name", name, "--envs", "4", "--image", "none", *extra]


# ---------------------------------------------------------------------------- engine killed
@pytest.mark.timeout(60)
def test_sigkill_of_the_engine_makes_the_trainer_raise_engine_died(subprocess_env) -> None:
    name = _name()
    timeout_s = 1.0
    with child(_sim_args(name, "--fast"), subprocess_env, name) as engine:
        assert _readline(engine) == name
        tr = SharedMemoryClient(name, timeout_s=timeout_s)
        try:
            zeros = np.zeros((tr.num_envs, tr.act_size), np.float32)
            for _ in range(50):
                tr.step(zeros)
            os.kill(engine.pid, signal.SIGKILL)
            t0 = time.monotonic()
            with pytest.raises(EngineDied) as info:
                for _ in range(100_000):
                    tr.step(zeros)
            waited = time.monotonic() - t0
        finally:
            tr.close()
        assert engine.wait(10) == -signal.SIGKILL
    assert str(engine.pid) in str(info.value) or "heartbeat" in str(info.value)
    # generous: detection is due within the timeout (plus the 0.25 s check period); never a hang
    assert waited < timeout_s + 2.0, f"EngineDied after {waited:.2f} s"


@pytest.mark.timeout(60)
def test_trainer_process_exits_cleanly_when_the_engine_dies(subprocess_env) -> None:
    name = _name()
    with child(_sim_args(name, "--fast"), subprocess_env, name) as engine:
        assert _readline(engine) == name
        with child(["train", "--shm", name, "--quiet", "--timeout", "1"], subprocess_env) as trainer:
            assert "attached" in _readline(trainer)
            os.kill(engine.pid, signal.SIGKILL)
            engine.wait(10)
            assert trainer.wait(20) != 0
            err = trainer.stderr.read()
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lucky-monitor: error:") and "engine" in lines[0]


# ---------------------------------------------------------------------------- trainer killed
@pytest.mark.timeout(60)
def test_sigkill_of_the_trainer_returns_the_engine_to_free_run(subprocess_env) -> None:
    with engine_thread(sim_mode=1, hz=100.0) as eng, Segment.attach(eng.name) as seg:
        with child(["train", "--shm", eng.name, "--quiet"], subprocess_env) as trainer:
            assert f"trainer pid {trainer.pid} attached" in _readline(trainer)
            a0 = seg.counter("action_seq")
            deadline = time.monotonic() + 20
            while seg.counter("action_seq") < a0 + 50 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert seg.counter("client_pid") == trainer.pid
            assert seg.counter("action_seq") >= a0 + 50  # lock-step is running
            with pytest.raises(TrainerBusy, match=str(trainer.pid)):
                SharedMemoryClient(eng.name)  # one trainer at a time
            trainer.kill()
            trainer.wait(10)
            t0 = time.monotonic()
            while seg.counter("client_pid") != 0 and time.monotonic() - t0 < 10:
                time.sleep(0.01)
            detach_s = time.monotonic() - t0
        assert seg.counter("client_pid") == 0, "engine did not clear the dead trainer's pid"
        assert detach_s < 5.0, f"took {detach_s:.2f} s"  # generous; the engine checks every 0.25 s
        assert eng.clients_detached == 1
        # free-running: frame_seq moves on, action_seq stays where the dead trainer left it
        a, f = seg.counter("action_seq"), seg.counter("frame_seq")
        deadline = time.monotonic() + 10
        while seg.counter("frame_seq") < f + 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seg.counter("frame_seq") >= f + 5 and seg.counter("action_seq") == a
        core = MonitorCore(eng.name)
        try:
            states = set()
            for _ in range(5):
                core.poll()
                states.add(core.status.state)
                time.sleep(0.02)
            assert core.status.state is LinkState.FREE_RUNNING, states
        finally:
            core.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("sig", "how"), [(signal.SIGINT, "Ctrl-C (SIGINT)"), (signal.SIGTERM, "SIGTERM")])
def test_a_stopped_trainer_says_it_was_stopped_not_done(subprocess_env, sig: signal.Signals, how: str) -> None:
    with engine_thread(sim_mode=1, hz=100.0) as eng, Segment.attach(eng.name) as seg:
        with child(["train", "--shm", eng.name, "--quiet"], subprocess_env) as trainer:
            assert "attached" in _readline(trainer)
            # action_seq holds the free-run value until the trainer's first step, which may jump
            # it forward: count from the first value the trainer wrote.
            start = seg.counter("action_seq")
            deadline = time.monotonic() + 20
            while seg.counter("action_seq") == start and time.monotonic() < deadline:
                time.sleep(0.005)
            a0 = seg.counter("action_seq")
            while seg.counter("action_seq") < a0 + 20 and time.monotonic() < deadline:
                time.sleep(0.01)
            trainer.send_signal(sig)
            assert trainer.wait(15) == 0
            last = trainer.stdout.read().strip().splitlines()[-1]
            assert trainer.stderr.read() == ""
    steps = int(last.rsplit(" ", 2)[-2])
    assert last == f"trainer stopped by {how} after {steps} steps" and steps >= 19, last
    assert "done" not in last


# ---------------------------------------------------------------------------- sim on signals
@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sim_prints_its_name_serves_and_cleans_up_on_signal(subprocess_env, sig: signal.Signals) -> None:
    name = _name()
    with child(_sim_args(name, "--hz", "100"), subprocess_env, name) as engine:
        assert _readline(engine) == name
        seg = Segment.attach(name)
        try:
            assert seg.header.server_pid == engine.pid
            f = seg.counter("frame_seq")
            deadline = time.monotonic() + 10
            while seg.counter("frame_seq") < f + 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert seg.counter("frame_seq") >= f + 3 and seg.counter("engine_state") == 1
            engine.send_signal(sig)
            assert engine.wait(15) == 0
            assert not os.path.exists(shm_path(name))
            assert seg.counter("engine_state") == 3  # announced before the unlink; the old mapping stays valid
            assert seg.still_valid() is not None
        finally:
            seg.close()
        assert engine.stderr.read() == ""


@pytest.mark.timeout(60)
def test_sim_default_name_is_luckyengine_pid(subprocess_env) -> None:
    env = {k: v for k, v in subprocess_env.items() if k != "LUCKY_SHM_NAME"}
    with child(["sim", "--envs", "2", "--image", "none"], env) as engine:
        try:
            name = _readline(engine)
            assert name == f"LuckyEngine_{engine.pid}"
            assert os.path.exists(shm_path(name))
            engine.terminate()
            assert engine.wait(15) == 0
            assert not os.path.exists(shm_path(name))
        finally:
            _unlink(f"LuckyEngine_{engine.pid}")


@pytest.mark.timeout(60)
def test_sim_env_var_names_the_segment(subprocess_env) -> None:
    name = _name()
    env = {**subprocess_env, "LUCKY_SHM_NAME": name}
    with child(["sim", "--envs", "2", "--image", "none", "--steps", "5", "--fast"], env, name) as engine:
        assert _readline(engine) == name
        assert engine.wait(15) == 0  # --steps: stops by itself, and unlinks
        assert not os.path.exists(shm_path(name))


# ---------------------------------------------------------------------------- command-line errors
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "argv",
    [
        ["sim", "--envs", "0"],
        ["sim", "--envs", "5000"],
        ["sim", "--image", "10"],
        ["sim", "--image", "64x64x3", "--format", "gray"],
        ["sim", "--hz", "-1"],
        ["sim", "--hz", "nan"],
        ["sim", "--camera-fps", "-1"],
        ["sim", "--obs", "3"],
        ["sim", "--name", "bad/name"],
        ["train", "--shm", "LuckyEngine_missing_segment_xyz"],
        ["train", "--shm", "bad/name"],
    ],
    ids=lambda a: " ".join(a),
)
def test_bad_arguments_one_line_nonzero_no_traceback(subprocess_env, argv: list[str]) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "lucky_monitor", *argv],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=30,
        check=False,
    )
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lucky-monitor: error:"), res.stderr
    assert res.stdout == ""


@pytest.mark.timeout(60)
def test_sim_refuses_a_name_held_by_a_live_engine(subprocess_env) -> None:
    name = _name()
    with child(_sim_args(name), subprocess_env, name) as first:
        assert _readline(first) == name
        res = subprocess.run(
            [sys.executable, "-m", "lucky_monitor", *_sim_args(name)],
            capture_output=True,
            text=True,
            env=subprocess_env,
            timeout=30,
            check=False,
        )
        assert res.returncode != 0 and "already exists" in res.stderr and "Traceback" not in res.stderr
        assert first.poll() is None


@pytest.mark.timeout(60)
def test_sim_replaces_a_killed_engines_leftover(subprocess_env) -> None:
    name = _name()
    with child(_sim_args(name), subprocess_env, None) as second:
        assert _readline(second) == name
        second.kill()
        second.wait(10)
    assert os.path.exists(shm_path(name))  # SIGKILL leaves the segment behind
    with child(_sim_args(name), subprocess_env, name) as third:
        assert _readline(third) == name
        with Segment.attach(name) as seg:
            assert seg.header.server_pid == third.pid


# ---------------------------------------------------------------------------- an engine with fewer services
def test_choose_policy_steps_an_engine_without_the_cart_pole_s_observations_at_random() -> None:
    policy, note = choose_policy("pd", obs_size=4, act_size=2)
    assert isinstance(policy, RandomPolicy) and note is not None and "random" in note
    assert policy(np.zeros((3, 4), np.float32)).shape == (3, 2)
    policy, note = choose_policy("pd", obs_size=PDPolicy.OBS_NEEDED, act_size=1)
    assert isinstance(policy, PDPolicy) and note is None
    policy, note = choose_policy("random", obs_size=1, act_size=1)
    assert isinstance(policy, RandomPolicy) and note is None


def _train_ok(name: str, steps: int, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``lucky-monitor train --steps STEPS`` to the end: exit 0, no traceback."""
    r = subprocess.run(
        [sys.executable, "-m", "lucky_monitor", "train", "--shm", name, "--steps", str(steps)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    return r


@pytest.mark.timeout(90)
def test_the_trainer_steps_an_engine_whose_agent_and_mujoco_services_are_off(subprocess_env) -> None:
    """Every service is optional (LAYOUT §10.2): the trainer takes the sizes from the header and asks for no joints."""
    with engine_thread(num_envs=4, hz=200.0) as eng:
        mask = eng.seg.counter("services_enabled") & ~(1 << Service.AGENT | 1 << Service.MUJOCO)
        eng.seg.set("services_enabled", mask)
        r = _train_ok(eng.name, 300, subprocess_env)
        assert "the Agent service is off: sizes from the header" in r.stdout
        assert "4 envs" in r.stdout and "trainer done after 300 steps" in r.stdout
        assert "env 0 q" not in r.stdout  # GetJointState (MuJoCo) never asked
        assert eng.message_counts()["main c2s"] == 0  # no request at all on the main ring


@pytest.mark.timeout(90)
def test_the_trainer_goes_on_stepping_when_the_engine_refuses_its_optional_requests(subprocess_env) -> None:
    with engine_thread(num_envs=4, hz=200.0) as eng:

        def refuse(pair: object, req: object) -> object:
            raise engine_mod._Refused("request not supported by this engine")

        eng._handlers[MethodId.GetAgentSchemaReq] = refuse
        eng._handlers[MethodId.GetJointStateReq] = refuse
        r = _train_ok(eng.name, 600, subprocess_env)
        assert "GetAgentSchemaReq: request not supported by this engine; sizes from the header" in r.stdout
        assert r.stdout.count("GetJointStateReq: request not supported by this engine; not asked again") == 1
        assert "trainer done after 600 steps" in r.stdout
