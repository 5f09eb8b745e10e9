"""Monitor frame cost: what one new camera frame costs the monitor window, next to a bare copy.

For each configuration (num_envs x width x height, RGB) the reference engine
runs in its own process, free-running at 60 Hz and publishing images every step
(``python -m lucky_monitor sim --hz 60 --camera-fps 0``). This prints one JSON
line with:

* ``frame_ms`` / ``frame_p90_ms`` - median and 90th percentile cost of handling
  one new frame in the real :class:`~lucky_monitor.ui.main_window.MainWindow`
  (1600x1000, shown, offscreen platform, its timer stopped and driven from
  here): ``win.session.step()`` (counters, hot copy, the seqlock-guarded fused
  copy-and-tile into the grid's back buffer) + ``win.grid.present(meta)`` (one
  ``setImage``) + ``win.grid.graphics.viewport().repaint()`` (the grid drawn
  now, synchronously). Each sample starts right after the engine published a
  new image (``image_seq`` moved to a new even value).
  ``frame_parts_median_ms`` splits it into ``poll`` (which includes the
  copy-and-tile), ``present`` and ``repaint``. Where the sampling helper
  shrinks the images (4 MiB or more of tiles shown smaller than their
  pixels: the 4096-env row), the poll tiles the helper's answer to the
  request made at the previous step and sends the next request; the helper
  samples meanwhile, and ``helper_ms_per_image`` is the helpers' CPU per frame
  (``frame_ms + helper_ms_per_image`` is then the frame's whole CPU cost).
* ``tick_ms`` / ``tick_p90_ms`` - ``win.tick()`` + the same repaint: the whole
  60 Hz tick (history, traffic taps, and whatever the CPU budget's rates make
  due that tick: plots, panels, the traffic table and status figures) on a
  new frame.
* ``bare_grid_ms`` - the same poll-free steps on a bare ``ImageGridWidget``
  (1200x600, shown): ``seqlock_read`` around ``copy_frame`` + ``present`` +
  repaint, to separate the grid from the window around it.
* ``copy_ms`` - ``np.copyto(dst, seg.images)`` of the whole image region from
  the same mapping, in the same run, also on freshly published frames.
  ``ratio = frame_ms / copy_ms``.
* ``helpers_cpu_pct`` - CPU of the monitor's helper processes over the same
  window (the image sampler and the tools-channel helper,
  ``lucky_monitor/transport/sampler.py`` and ``tools_agent.py``): add it to
  ``cpu_pct`` for the monitor's whole cost.
* ``cpu_pct`` - CPU of the real monitor (``python -m lucky_monitor --shm NAME
  --quit-after S``, offscreen, settings in a temporary HOME) following the
  60 Hz engine: ``/proc/<pid>/stat`` utime+stime between t=4 s after start and
  the end of the window, divided by wall time. ``engine_cpu_pct`` is the
  engine's over the same window, ``images_per_s`` the image rate it achieved.

The four kinds of samples take turns frame by frame, so they see the same
engine load. A frame whose guarded copy failed (torn past the retries, or the
writer held the lock past the spin) is not a sample: ``missed`` counts them
per kind and ``frame_failed_ms`` is the median cost of such a failed attempt
in the window. The first frames (attach, first layout, first paint) are
discarded. Nothing is asserted: the 60 Hz budget line (``budget_ms``, half of
a 16.7 ms tick) is reported next to the figure.

Usage::

    python benchmarks/monitor_frame.py [--quick]

``--quick`` (40 samples of each kind, a 4 s CPU window) finishes in about a
minute; the default takes 400 samples and an 8 s window.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (
    child,
    emit,
    first_line,
    lucky,
    machine_facts,
    offscreen_platform,
    percentile,
    process_cpu_seconds,
)

BUDGET_MS = 1000.0 / 60.0 / 2.0
CPU_START_S = 4.0
WHAT = (
    "frame_ms: win.session.step() + win.grid.show_image(tick.image) + win.grid.graphics.viewport().repaint() "
    "in the real MainWindow (timer stopped), timed from a freshly published image; "
    "tick_ms: win.tick() + the same repaint; bare_grid_ms: seqlock_read(copy_frame) + present + "
    "repaint on a bare ImageGridWidget; copy_ms: np.copyto(dst, seg.images)"
)


@dataclass(frozen=True)
class Config:
    num_envs: int
    width: int
    height: int
    channels: int = 3


CONFIGS = [Config(64, 64, 64), Config(16, 256, 256), Config(256, 128, 128), Config(4096, 64, 64)]


# ---------------------------------------------------------------------------- children
def engine_argv(cfg: Config, name: str) -> list[str]:
    return lucky(
        "sim",
        "--name",
        name,
        "--envs",
        str(cfg.num_envs),
        "--image",
        f"{cfg.width}x{cfg.height}x{cfg.channels}",
        "--hz",
        "60",
        "--camera-fps",
        "0",
    )


# ---------------------------------------------------------------------------- in-process frame cost
def wait_new_image(counter: Callable[[str], int], last: int, timeout: float = 5.0) -> int:
    """Sleep-poll until ``image_seq`` is even and differs from ``last``; return it."""
    deadline = time.monotonic() + timeout
    while True:
        seq = counter("image_seq")
        if seq != last and not seq & 1:
            return seq
        if time.monotonic() > deadline:
            raise SystemExit(f"no new image within {timeout} s (image_seq stuck at {seq})")
        time.sleep(0.0002)


def summary_ms(samples: list[float], prefix: str) -> dict[str, float | None]:
    if not samples:
        return {f"{prefix}_ms": None, f"{prefix}_p90_ms": None}
    ms = [s * 1e3 for s in samples]
    return {f"{prefix}_ms": round(percentile(ms, 50), 3), f"{prefix}_p90_ms": round(percentile(ms, 90), 3)}


def bench_frames(app: Any, cfg: Config, name: str, workdir: str, samples: int, warmup: int) -> dict[str, Any]:
    """Time frame handling in a real MainWindow, a bare grid and a bare copy, taking turns."""
    from PySide6 import QtCore

    from lucky_monitor.core.tiler import FrameMeta
    from lucky_monitor.protocol.seqlock import seqlock_read
    from lucky_monitor.transport.shm import Segment
    from lucky_monitor.ui.image_grid import ImageGridWidget
    from lucky_monitor.ui.main_window import MainWindow

    ini = os.path.join(workdir, f"settings_{cfg.num_envs}_{cfg.width}x{cfg.height}.ini")
    settings = QtCore.QSettings(ini, QtCore.QSettings.Format.IniFormat)
    seg = Segment.attach(name)
    win = bare = None
    try:
        win = MainWindow(name, settings=settings)
        win.timer.stop()
        win.resize(1600, 1000)
        win.show()
        bare = ImageGridWidget()
        bare.resize(1200, 600)
        bare.show()
        app.processEvents()
        counter = seg.counter
        images = seg.images
        if images is None:
            raise SystemExit("engine exports no image region")
        dst = np.empty_like(images)
        meta = FrameMeta(src_format="rgb")
        win_port, bare_port = win.grid.graphics.viewport(), bare.graphics.viewport()

        parts: dict[str, list[float]] = {"poll": [], "present": [], "repaint": []}
        perf = time.perf_counter

        def frame_step() -> bool:
            t0 = perf()
            tick = win.session.step()
            t1 = perf()
            if tick.image is None or not tick.image.new:
                return False
            win.grid.show_image(tick.image, tick.counters.torn_images)
            t2 = perf()
            win_port.repaint()
            t3 = perf()
            parts["poll"].append(t1 - t0)
            parts["present"].append(t2 - t1)
            parts["repaint"].append(t3 - t2)
            return True

        def tick_step() -> bool:
            win.tick()
            win_port.repaint()
            return win.last_tick is not None and win.last_tick.image is not None and win.last_tick.image.new

        def bare_step() -> bool:
            r = seqlock_read(lambda: counter("image_seq"), lambda: bare.copy_frame(images, meta))
            if not r.ok:
                return False
            bare.present(meta)
            bare_port.repaint()
            return True

        def copy_step() -> bool:
            np.copyto(dst, images)
            return True

        kinds: list[tuple[str, Callable[[], bool]]] = [
            ("frame", frame_step),
            ("copy", copy_step),
            ("tick", tick_step),
            ("bare_grid", bare_step),
        ]
        times: dict[str, list[float]] = {k: [] for k, _ in kinds}
        missed = dict.fromkeys(times, 0)
        failed: list[float] = []
        last = counter("image_seq")
        # warm-up: the window attaches (first tick), lays out and paints; the bare grid plans its tiler
        for _ in range(warmup):
            last = wait_new_image(counter, last)
            tick_step()
            last = wait_new_image(counter, last)
            bare_step()
            app.processEvents()
        if win.last_tick is None or win.last_tick.header is None or win.grid.tiler is None:
            state = win.last_tick.text if win.last_tick else "no tick"
            raise SystemExit(f"the window did not attach to {name}: {state}")
        for v in parts.values():
            v.clear()
        seq0, t0 = counter("image_seq"), time.monotonic()
        helper0 = win.session.helper_cpu_s()
        for i in range(samples * len(kinds)):
            kind, step = kinds[i % len(kinds)]
            last = wait_new_image(counter, last)
            ts = perf()
            ok = step()
            te = perf()
            if ok:
                times[kind].append(te - ts)
            else:
                missed[kind] += 1
                if kind == "frame":
                    failed.append(te - ts)
            last = max(last, counter("image_seq") & ~1)  # a frame handled late does not count as new
            app.processEvents()  # outside the timed region: the rest of the window's pending events
        dt = time.monotonic() - t0
        helper_s = win.session.helper_cpu_s() - helper0
        answered = len(times["frame"]) + len(times["tick"])
        grid = win.grid.tiler
        port = win_port.size()
        out: dict[str, Any] = {
            **summary_ms(times["frame"], "frame"),
            **summary_ms(times["copy"], "copy"),
            **summary_ms(times["tick"], "tick"),
            **summary_ms(times["bare_grid"], "bare_grid"),
            "helper_ms_per_image": round(helper_s * 1e3 / answered, 3) if answered else None,
            "frame_failed_ms": round(percentile(failed, 50) * 1e3, 3) if failed else None,
            "frame_parts_median_ms": {k: round(percentile(v, 50) * 1e3, 3) if v else None for k, v in parts.items()},
            "samples": {k: len(v) for k, v in times.items()},
            "missed": missed,
            "images_per_s_during_timing": round((counter("image_seq") - seq0) / 2 / dt, 1),
            "torn_images": win.last_tick.counters.torn_images if win.last_tick else 0,
            "grid_px": [grid.grid_width, grid.grid_height],
            "display_px": list(win.last_tick.image.grid.shape[1::-1])
            if win.last_tick and win.last_tick.image
            else None,
            "display_step": win.last_tick.image.step if win.last_tick and win.last_tick.image else None,
            "grid_viewport_px": [port.width(), port.height()],
        }
        return out
    finally:
        if bare is not None:
            bare.close()
            bare.deleteLater()
        if win is not None:
            win.close()
            win.deleteLater()
        QtCore.QCoreApplication.sendPostedEvents(None, QtCore.QEvent.Type.DeferredDelete)
        app.processEvents()
        seg.close()


# ---------------------------------------------------------------------------- monitor process CPU
def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()[-2000:]
    except OSError:
        return ""


def helpers_cpu(pid: int) -> dict[int, float]:
    """CPU seconds so far of each live child process of ``pid`` (Linux ``/proc``)."""
    out: dict[int, float] = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            continue
        for kid in kids:
            cpu = process_cpu_seconds(kid)
            if cpu is not None:
                out[kid] = cpu
    return out


def bench_cpu(engine: subprocess.Popen, name: str, workdir: str, window_s: float) -> dict[str, Any]:
    """CPU of the real monitor process following the engine, from t=CPU_START_S for ``window_s`` seconds."""
    from lucky_monitor.transport.shm import Segment

    home = tempfile.mkdtemp(prefix="home_", dir=workdir)
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": offscreen_platform(workdir),  # a 1920x1080 screen: the window starts at 1600x1000
        "HOME": home,
        "XDG_CONFIG_HOME": os.path.join(home, ".config"),
        "XDG_CACHE_HOME": os.path.join(home, ".cache"),
        "XDG_DATA_HOME": os.path.join(home, ".local", "share"),
    }
    env.pop("LUCKY_SHM_NAME", None)
    quit_after = CPU_START_S + window_s + 1.0
    err_path = os.path.join(home, "monitor.stderr")
    with (
        Segment.attach(name) as seg,
        child(lucky("--shm", name, "--quit-after", f"{quit_after:g}"), env=env, stderr_path=err_path) as mon,
    ):
        start = time.monotonic()
        time.sleep(CPU_START_S)
        if mon.poll() is not None:
            raise SystemExit(f"monitor exited early ({mon.returncode}): {read_text(err_path)}")
        h0 = helpers_cpu(mon.pid)
        m0, e0, s0, t0 = (
            process_cpu_seconds(mon.pid),
            process_cpu_seconds(engine.pid),
            seg.counter("image_seq"),
            time.monotonic(),
        )
        time.sleep(window_s)
        m1, e1, s1, t1 = (
            process_cpu_seconds(mon.pid),
            process_cpu_seconds(engine.pid),
            seg.counter("image_seq"),
            time.monotonic(),
        )
        h1 = helpers_cpu(mon.pid)
        alive = mon.poll() is None
        try:
            rc = mon.wait(quit_after + 30 - (time.monotonic() - start))
        except subprocess.TimeoutExpired:
            rc = None
    wall = t1 - t0

    def pct(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round(100.0 * (b - a) / wall, 1)

    return {
        "cpu_pct": pct(m0, m1) if alive else None,
        # the monitor's helper processes (image sampler, tools channel): their CPU is the monitor's too
        "helpers_cpu_pct": pct(0.0, sum(c - h0.get(p, 0.0) for p, c in h1.items())) if alive else None,
        "engine_cpu_pct": pct(e0, e1),
        "images_per_s": round((s1 - s0) / 2 / wall, 1),
        "cpu_window_s": round(wall, 2),
        "monitor_exit_code": rc,
    }


# ---------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="40 samples of each kind, 4 s CPU window")
    p.add_argument("--samples", type=int, default=None, help="timed frames of each kind per configuration")
    args = p.parse_args(argv)
    samples = args.samples or (40 if args.quick else 400)
    warmup = 15 if args.quick else 30
    window_s = 4.0 if args.quick else 8.0

    os.environ["QT_QPA_PLATFORM"] = "offscreen"  # before Qt is imported
    from PySide6 import QtWidgets

    from lucky_monitor.ui.theme import apply_theme

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([sys.argv[0]])
    app.setApplicationName("lucky-monitor-bench")
    apply_theme(app)
    facts = machine_facts()
    with tempfile.TemporaryDirectory(prefix="monitor_frame_") as workdir:
        for cfg in CONFIGS:
            name = f"LuckyEngine_frame_{secrets.token_hex(6)}"
            with child(engine_argv(cfg, name), stderr_path=os.path.join(workdir, f"engine_{name}.stderr")) as eng:
                if first_line(eng) != name:
                    raise SystemExit("engine announced another segment name")
                frames = bench_frames(app, cfg, name, workdir, samples, warmup)
                cpu = bench_cpu(eng, name, workdir, window_s)
            ratio = (
                round(frames["frame_ms"] / frames["copy_ms"], 1)
                if frames["frame_ms"] is not None and frames["copy_ms"]
                else None
            )
            emit(
                {
                    "benchmark": "monitor_frame",
                    "mode": "quick" if args.quick else "full",
                    "num_envs": cfg.num_envs,
                    "image_width": cfg.width,
                    "image_height": cfg.height,
                    "channels": cfg.channels,
                    "image_bytes": cfg.num_envs * cfg.width * cfg.height * cfg.channels,
                    "frame_ms": frames.pop("frame_ms"),
                    "frame_p90_ms": frames.pop("frame_p90_ms"),
                    "copy_ms": frames.pop("copy_ms"),
                    "ratio": ratio,
                    "cpu_pct": cpu.pop("cpu_pct"),
                    "budget_ms": round(BUDGET_MS, 2),
                    **frames,
                    **cpu,
                    "engine_hz": 60,
                    "what": WHAT,
                },
                facts={**facts, "load_average": machine_facts()["load_average"]},
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
