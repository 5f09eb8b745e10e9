"""GPU observations over CUDA IPC (``sim --gpu-obs``, ``obs_cuda``, the monitor's GPU statistics).

Tests marked ``gpu`` need cupy and a CUDA device and are skipped without
them (CI has none). The others check what happens where there is no GPU:
one clear line from ``sim --gpu-obs``, and a monitor that says why it shows
no observations instead of showing the CPU region's zeros.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from lucky_monitor.core.session import MonitorSession
from lucky_monitor.protocol.enums import GpuObsMode
from lucky_monitor.protocol.errors import EXIT_UNAVAILABLE, GpuUnavailable
from lucky_monitor.transport.cuda import cupy_module
from lucky_monitor.transport.shm import platform_kind
from tests.conftest import unique_segment_name


def _gpu_reason() -> str | None:
    try:
        cupy_module()
    except GpuUnavailable as exc:
        return str(exc)
    return None


GPU_REASON = _gpu_reason()
needs_gpu = pytest.mark.skipif(GPU_REASON is not None, reason=f"no GPU here: {GPU_REASON}")
linux = pytest.mark.skipif(platform_kind() != "dir", reason="segments are exercised on Linux")
pytestmark = pytest.mark.timeout(120)


@pytest.mark.skipif(GPU_REASON is None, reason="cupy and a device are present: the engine would start")
def test_sim_gpu_obs_without_a_gpu_is_one_line_and_exit_5(subprocess_env) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "lucky_monitor", "sim", "--gpu-obs", "--envs", "2", "--steps", "1"],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=60,
    )
    assert r.returncode == EXIT_UNAVAILABLE
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lucky-monitor: error: ") and "Traceback" not in r.stderr
    assert "gpu" in lines[0].lower()


@linux
@pytest.mark.skipif(GPU_REASON is None, reason="cupy and a device are present")
def test_without_cupy_the_monitor_says_why_and_never_reads_the_cpu_region_as_obs(segment_factory) -> None:
    import dataclasses

    seg = segment_factory(num_envs=4, obs_size=3, act_size=1)
    # The header of a --gpu-obs engine (the handle is never opened here: no cupy).
    seg.buf[132] = 1  # gpu_available
    seg.buf[133] = GpuObsMode.CUDA_IPC
    seg.buf[134:198] = bytes(range(64))
    seg.set("engine_state", 1)
    seg.obs[:] = np.nan  # not observations in this mode: must raise nothing
    seg.rewards[2] = np.inf
    seg.set("heartbeat_ns", time.monotonic_ns())
    seg.set("frame_seq", 1)
    s = MonitorSession(seg.name, tools=False, images=False, discover=False, traffic=False)
    try:
        deadline = time.monotonic() + 10
        while True:
            seg.set("heartbeat_ns", time.monotonic_ns())
            tick = s.step()
            if tick.inspector is not None and tick.alarms.recent:
                break
            assert time.monotonic() < deadline
    finally:
        s.close()
    assert tick.header is not None and tick.header.gpu_obs_mode == 1
    insp = tick.inspector
    assert insp.obs is None and insp.obs_note.startswith("GPU observations not shown: ") and "cupy" in insp.obs_note
    assert [dataclasses.astuple(a)[:4] for a in tick.alarms.recent] == [("rewards", 2, None, "inf")]
    assert tick.frame is not None and tick.frame.obs is None


SIM = (sys.executable, "-m", "lucky_monitor", "sim")
MONITOR = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    from lucky_monitor.core.session import MonitorSession
    name, frame = sys.argv[1], int(sys.argv[2])
    s = MonitorSession(name, tools=False, images=False, discover=False, traffic=False, inspect_hz=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        t = s.step()
        o = t.inspector.obs if t.inspector is not None else None
        if o is not None and o.frame_seq == frame:
            print(json.dumps({"mean": o.mean.tolist(), "std": o.std.tolist(), "min": o.min.tolist(),
                              "max": o.max.tolist(), "gpu": t.inspector.gpu}))
            break
        time.sleep(0.005)
    s.close()
    """
)


@pytest.mark.gpu
@needs_gpu
@linux
def test_engine_gpu_obs_trainer_and_monitor_agree(subprocess_env) -> None:
    from lucky_monitor.sim.trainer import SharedMemoryClient

    name = unique_segment_name("gpu")
    eng = subprocess.Popen(
        [*SIM, "--name", name, "--gpu-obs", "--deterministic", "--envs", "256", "--obs", "24", "--image", "none"],
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env,
    )
    try:
        assert eng.stdout is not None and eng.stdout.readline().strip() == name
        with SharedMemoryClient(name, timeout_s=30) as tr:
            assert tr.gpu_obs and tr.header.gpu_available == 1
            assert not tr.seg.obs.any()  # the CPU region holds no observations in this mode (LAYOUT §3.4)
            rng = np.random.default_rng(0)
            for _ in range(20):
                res = tr.step(rng.uniform(-1, 1, (tr.num_envs, tr.act_size)).astype(np.float32))
            frame = res.frame_seq
            want = tr.obs_cuda.get()  # the trainer's turn now: the engine waits, the device buffer is stable
            np.testing.assert_array_equal(res.obs, want)
            assert np.abs(want).sum() > 0
            mon = subprocess.run(
                [sys.executable, "-c", MONITOR, name, str(frame)],
                capture_output=True,
                text=True,
                env=subprocess_env,
                timeout=90,
                check=True,
            )
            got = json.loads(mon.stdout)
        w64 = want.astype(np.float64)
        np.testing.assert_allclose(got["mean"], w64.mean(axis=0), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(got["std"], w64.std(axis=0), rtol=1e-9, atol=1e-9)
        np.testing.assert_array_equal(got["min"], want.min(axis=0))
        np.testing.assert_array_equal(got["max"], want.max(axis=0))
        assert got["gpu"].startswith("GPU (CUDA IPC, device 0")
    finally:
        eng.terminate()
        eng.wait(20)
        eng.stdout.close()  # else a ResourceWarning, an error under filterwarnings = error


def _stats_fields(st) -> dict[str, object]:
    return {f: getattr(st, f) for f in ("mean", "std", "min", "max", "nonfinite", "heat", "heat_bad", "selected")}


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize(
    ("envs", "dims", "poison"),
    [(4096, 100, False), (1001, 7, True), (3, 5, True)],
    ids=["finite-4096x100", "nonfinite-1001x7-padded", "nonfinite-3x5"],
)
def test_gpu_statistics_and_alarms_equal_numpy(envs: int, dims: int, poison: bool) -> None:
    """region_stats and AlarmScanner.check on a cupy array give what they give on the same numpy array."""
    from lucky_monitor.core.inspector import AlarmScanner, region_stats

    cp = cupy_module()
    rng = np.random.default_rng(7)
    a = rng.standard_normal((envs, dims)).astype(np.float32)
    if poison:
        a[1, 0] = np.nan
        a[2, 1] = np.inf
        a[0, 2] = -np.inf
        a[envs - 1, 3] = 3e7  # large, finite
        a[:, dims - 1] = np.nan  # a dim with no finite value at all
    sel = [0, 2, envs - 1, envs + 5]  # the last is out of range: dropped on both
    host = region_stats("obs", 9, a, selected=sel)
    dev = region_stats("obs", 9, cp.asarray(a), selected=sel, xp=cp)
    assert (dev.band, dev.envs, dev.names, dev.frame_seq) == (host.band, host.envs, host.names, host.frame_seq)
    for name, want in _stats_fields(host).items():
        got = getattr(dev, name)
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape, name
        if name in ("nonfinite", "heat_bad", "selected", "min", "max"):
            np.testing.assert_array_equal(got, want, err_msg=name)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5 if name == "heat" else 1e-9, atol=1e-9, err_msg=name)
    if poison:
        assert np.isnan(dev.mean[dims - 1]) and dev.nonfinite[dims - 1] == envs
        assert dev.nonfinite[:3].tolist() == [1, 1, 1]
    acts = rng.uniform(-1, 1, (envs, 2)).astype(np.float32)
    rew = rng.standard_normal(envs).astype(np.float32)
    if poison:
        rew[envs // 2] = -np.inf
    sc_host, sc_dev = AlarmScanner(), AlarmScanner()
    for region, arr in (("obs", a), ("actions", acts), ("rewards", rew)):
        assert sc_dev.check(region, 9, cp.asarray(arr)) == sc_host.check(region, 9, arr)
    s_host, s_dev = sc_host.state(), sc_dev.state()
    assert s_dev.recent == s_host.recent and s_dev.new == s_host.new
    assert s_dev.nonfinite_total == s_host.nonfinite_total and s_dev.large_total == s_host.large_total
    if poison:
        assert s_dev.nonfinite_total == {"obs": envs + 3, "actions": 0, "rewards": 1}
        assert s_dev.large_total == {"obs": 1, "actions": 0, "rewards": 0}
    else:
        assert s_dev.recent == ()
