"""The inspector's costs, each against a numpy baseline measured in the same run.

Cases (one JSON line each on stdout):

``alarms``
    :meth:`lucky_monitor.core.inspector.AlarmScanner.check` of one frame:
    obs ``4096 x 100``, actions ``4096 x 12`` and rewards ``4096`` (float32,
    all finite and in range: the every-frame case), against the plain numpy
    way of asking the same question (``isnan(a).any()``, ``isinf(a).any()``,
    ``(abs(a) > threshold).any()`` per array) and against one bare
    ``np.copyto`` of the obs (one pass over the memory). Also the cost of a
    frame with one NaN in the obs (the path that locates and names it).
``stats``
    :func:`lucky_monitor.core.inspector.region_stats` of the obs (per-dim
    mean, std, min, max, the 256-row heatmap, 8 selected rows), against
    numpy's ``mean``/``std``/``min``/``max`` over axis 0 alone. The window
    refreshes these at 4 Hz at most.
``gpu`` (only with ``--gpu``)
    The same check and statistics on a cupy array on the GPU, with the
    device-to-host copy of the results; the device-to-device copy of the obs
    that the monitor makes each frame, and a device-to-host copy of the whole
    obs for comparison; and, from a child process, the time to start CUDA
    there and then to open a CUDA IPC handle of the obs buffer. Reports why
    it did not run when cupy or a device is missing.

Pairs are interleaved round by round so drift on a shared machine hits both
sides alike; figures are medians with p99. No time is asserted.

Usage::

    python benchmarks/inspector.py [--quick] [--envs N] [--obs K] [--gpu]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import emit, summarize_us
from lucky_monitor.core.inspector import DEFAULT_THRESHOLD, AlarmScanner, region_stats


def interleaved(cases: dict[str, Callable[[], object]], rounds: int, inner: int) -> dict[str, list[float]]:
    """Time each callable ``inner`` times per round, the order alternating each round."""
    names = list(cases)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names if r % 2 == 0 else reversed(names):
            f = cases[n]
            for _ in range(inner):
                t0 = time.perf_counter()
                f()
                out[n].append(time.perf_counter() - t0)
    return out


def data(envs: int, obs: int, act: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((envs, obs)).astype(np.float32),
        rng.uniform(-1, 1, (envs, act)).astype(np.float32),
        rng.standard_normal(envs).astype(np.float32),
    )


def case_alarms(args: argparse.Namespace) -> None:
    obs, act, rew = data(args.envs, args.obs, args.act)
    nan_obs = obs.copy()
    nan_obs[5, 3] = np.nan
    sc = AlarmScanner()
    thr = DEFAULT_THRESHOLD
    dst = np.empty_like(obs)

    def check() -> None:
        sc.check("obs", 1, obs)
        sc.check("actions", 1, act)
        sc.check("rewards", 1, rew)

    def check_nan() -> None:
        sc.check("obs", 1, nan_obs)
        sc.check("actions", 1, act)
        sc.check("rewards", 1, rew)
        sc.state()

    def naive() -> None:
        for a in (obs, act, rew):
            _ = bool(np.isnan(a).any()) or bool(np.isinf(a).any()) or bool((np.abs(a) > thr).any())

    t = interleaved(
        {"check": check, "naive": naive, "copy": lambda: np.copyto(dst, obs), "check_nan": check_nan},
        args.rounds,
        args.inner,
    )
    med = {k: float(np.median(v)) for k, v in t.items()}
    emit(
        {
            "case": "alarms",
            "envs": args.envs,
            "obs_size": args.obs,
            "act_size": args.act,
            **summarize_us(t["check"], "check"),
            **summarize_us(t["check_nan"], "check_one_nan"),
            **summarize_us(t["naive"], "baseline_numpy_isnan_isinf_abs"),
            **summarize_us(t["copy"], "baseline_copy_obs"),
            "check_vs_numpy_baseline": round(med["check"] / med["naive"], 3),
            "check_vs_copy": round(med["check"] / med["copy"], 3),
            "target_us": 200,
        }
    )


def case_stats(args: argparse.Namespace) -> None:
    obs, _, _ = data(args.envs, args.obs, args.act)
    sel = list(range(0, args.envs, max(1, args.envs // 8)))[:8]

    def ours() -> None:
        region_stats("obs", 1, obs, selected=sel)

    def numpy_only() -> None:
        obs.mean(axis=0, dtype=np.float64)
        obs.std(axis=0, dtype=np.float64)
        obs.min(axis=0)
        obs.max(axis=0)

    t = interleaved({"stats": ours, "numpy": numpy_only}, args.rounds, max(1, args.inner // 10))
    med = {k: float(np.median(v)) for k, v in t.items()}
    emit(
        {
            "case": "stats",
            "envs": args.envs,
            "obs_size": args.obs,
            **summarize_us(t["stats"], "region_stats"),
            **summarize_us(t["numpy"], "baseline_numpy_mean_std_min_max"),
            "ratio": round(med["stats"] / med["numpy"], 3),
        }
    )


CHILD = """
import sys, time
import cupy as cp
h = bytes.fromhex(sys.argv[1])
t0 = time.perf_counter()
cp.cuda.runtime.free(0)  # the first CUDA call: starts the context
t1 = time.perf_counter()
ptr = cp.cuda.runtime.ipcOpenMemHandle(h)
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
cp.cuda.runtime.ipcCloseMemHandle(ptr)
"""


def case_gpu(args: argparse.Namespace) -> None:
    from lucky_monitor.protocol.errors import GpuUnavailable
    from lucky_monitor.transport.cuda import cupy_module, export_handle

    try:
        cp = cupy_module()
    except GpuUnavailable as exc:
        emit({"case": "gpu", "skipped": str(exc)})
        return
    obs, act, rew = data(args.envs, args.obs, args.act)
    d_obs, d_act, d_rew = cp.asarray(obs), cp.asarray(act), cp.asarray(rew)
    sc = AlarmScanner()
    host = np.empty_like(obs)
    d_copy = cp.empty_like(d_obs)
    sel = list(range(8))

    def sync(f: Callable[[], object]) -> Callable[[], None]:
        def g() -> None:
            f()
            cp.cuda.runtime.deviceSynchronize()

        return g

    t = interleaved(
        {
            "check": sync(
                lambda: (sc.check("obs", 1, d_obs), sc.check("actions", 1, d_act), sc.check("rewards", 1, d_rew))
            ),
            "stats": sync(lambda: region_stats("obs", 1, d_obs, selected=sel, xp=cp)),
            "d2d": sync(lambda: cp.copyto(d_copy, d_obs)),
            "to_host": sync(lambda: d_obs.get(out=host)),
            "cpu_check": lambda: (sc.check("obs", 1, obs), sc.check("actions", 1, act), sc.check("rewards", 1, rew)),
        },
        args.rounds,
        max(1, args.inner // 10),
    )
    handle = export_handle(d_obs)
    inits, opens = [], []
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, handle.hex()], capture_output=True, text=True, check=True, timeout=120
        )
        init_s, open_s = (float(x) for x in out.stdout.split())
        inits.append(init_s)
        opens.append(open_s)
    emit(
        {
            "case": "gpu",
            "envs": args.envs,
            "obs_size": args.obs,
            "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
            **summarize_us(t["check"], "gpu_check"),
            **summarize_us(t["stats"], "gpu_region_stats"),
            **summarize_us(t["d2d"], "obs_copy_device_to_device"),
            **summarize_us(t["to_host"], "baseline_obs_to_host"),
            **summarize_us(t["cpu_check"], "baseline_cpu_check"),
            "child_cuda_init_ms": [round(x * 1e3, 1) for x in inits],
            "ipc_open_ms": [round(x * 1e3, 1) for x in opens],
        }
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds")
    p.add_argument("--envs", type=int, default=4096)
    p.add_argument("--obs", type=int, default=100)
    p.add_argument("--act", type=int, default=12)
    p.add_argument("--gpu", action="store_true", help="also the GPU case (needs cupy and a CUDA device)")
    args = p.parse_args()
    args.rounds, args.inner = (6, 50) if args.quick else (20, 200)
    case_alarms(args)
    case_stats(args)
    if args.gpu:
        case_gpu(args)


if __name__ == "__main__":
    main()
