"""Headless views: what the exporter pays per segment, and what an exact snapshot costs, next to baselines.

In-process reference engines (``ReferenceEngine``, free-running, stepped here
between polls so every poll sees a new frame and a new image) serve as the
segments. One JSON line with:

* ``fleet_step_us_per_segment`` - one :meth:`Fleet.step` (what ``lucky-monitor
  export`` does ``--poll-hz`` times a second) divided by the number of
  segments, over ``--segments`` engines of ``--envs`` envs; the image probe
  (one seqlock copy of the region at one pixel a tile) runs once a second, as
  in the exporter. Baseline in the same run: ``session_step_us`` - a bare
  read-only :class:`MonitorSession` step with no images (``lucky-monitor
  watch``'s) on the same engines. ``fleet_ratio`` is the first over the second.
  ``export_cpu_pct_at_30hz`` is what that cost means for the exporter's
  default 30 polls a second.
* ``snapshot_ms`` - :meth:`MonitorSession.snapshot` of the whole grid (one
  seqlock-guarded copy and tile, format decoded, rows flipped for a bottom-up
  BGR engine); baseline ``copy_ms`` - ``np.copyto`` of the image region alone.
  ``snapshot_ratio`` = ``snapshot_ms / copy_ms``. ``png_ms`` and ``png_mb_s``:
  the Qt-free PNG encoder on that grid.

Nothing is asserted. Usage::

    python benchmarks/headless.py [--segments 8] [--envs 256] [--image 64x64] [--polls 400]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import emit
from lucky_monitor.core.fleet import Fleet
from lucky_monitor.core.session import MonitorSession
from lucky_monitor.headless.png import encode_png
from lucky_monitor.sim.engine import EngineConfig, ReferenceEngine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--segments", type=int, default=8)
    ap.add_argument("--envs", type=int, default=256)
    ap.add_argument("--image", default="64x64")
    ap.add_argument("--polls", type=int, default=400)
    a = ap.parse_args()
    w, h = (int(v) for v in a.image.split("x"))
    engines = [
        ReferenceEngine(
            EngineConfig(
                name=f"LuckyEngine_hl_{uuid.uuid4().hex[:12]}",
                num_envs=a.envs,
                image=(w, h),
                fmt="bgr",
                bottom_up=True,
                camera_fps=0,
                sim_mode=2,
            )
        )
        for _ in range(a.segments)
    ]
    names = [e.name for e in engines]
    fleet = Fleet(names)
    bare = [MonitorSession(n, tools=False, images=False, discover=False, traffic=False) for n in names]
    try:
        for e in engines:
            e.tick()
        fleet.step()
        for s in bare:
            s.step()
        fleet_s: list[float] = []
        bare_s: list[float] = []
        t_sim = time.monotonic()
        for k in range(a.polls):
            for e in engines:
                e.tick()
            # alternate which goes first, so neither always sees the engines' writes fresh in cache
            order = (0, 1) if k % 2 == 0 else (1, 0)
            for which in order:
                if which == 0:
                    t0 = time.perf_counter()
                    fleet.step(t_sim + k / 30)
                    fleet_s.append(time.perf_counter() - t0)
                else:
                    t0 = time.perf_counter()
                    for s in bare:
                        s.step(t_sim + k / 30)
                    bare_s.append(time.perf_counter() - t0)
        assert all(st.attached for st in fleet.stats)
        per_fleet = statistics.median(fleet_s) / a.segments * 1e6
        per_bare = statistics.median(bare_s) / a.segments * 1e6
        # snapshot vs a bare copy of the region, alternating
        sess = bare[0]
        snap_s: list[float] = []
        copy_s: list[float] = []
        img = engines[0].seg.images
        dst = np.empty_like(img)
        grid = None
        for _ in range(30):
            engines[0].tick()
            t0 = time.perf_counter()
            grid = sess.snapshot(columns=None, gap=0)
            snap_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            np.copyto(dst, img)
            copy_s.append(time.perf_counter() - t0)
        assert grid is not None
        png_s = []
        for _ in range(5):
            t0 = time.perf_counter()
            data = encode_png(grid)
            png_s.append(time.perf_counter() - t0)
        snap_ms, copy_ms, png_ms = (statistics.median(x) * 1e3 for x in (snap_s, copy_s, png_s))
        emit(
            {
                "benchmark": "headless",
                "segments": a.segments,
                "num_envs": a.envs,
                "image": f"{w}x{h}x3 bgr bottom-up",
                "polls": a.polls,
                "fleet_step_us_per_segment": round(per_fleet, 1),
                "session_step_us": round(per_bare, 1),
                "fleet_ratio": round(per_fleet / per_bare, 2),
                "export_cpu_pct_at_30hz": round(per_fleet * a.segments * 30 / 1e4, 2),
                "grid": f"{grid.shape[1]}x{grid.shape[0]}",
                "snapshot_ms": round(snap_ms, 2),
                "copy_ms": round(copy_ms, 2),
                "snapshot_ratio": round(snap_ms / copy_ms, 2),
                "png_ms": round(png_ms, 1),
                "png_bytes": len(data),
                "png_mb_s": round(grid.nbytes / 1e6 / (png_ms / 1e3), 1),
            }
        )
    finally:
        fleet.close()
        for s in bare:
            s.close()
        for e in engines:
            e.close()


if __name__ == "__main__":
    main()
