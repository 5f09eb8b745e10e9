"""``check --live``: how long the probe takes, what it costs, and how close it comes to its stated bound.

For each case this prints one JSON line:

* **free_run** - the reference engine (64 envs, 64x64 images, realtime 50 Hz)
  with no trainer;
* **lock_step** - the same engine stepped by the reference trainer;
* **silent** - a valid segment whose writer never serves the tools ring (the
  probe stops sending after two unanswered requests).

Figures: ``wall_s`` (median of ``--repeat`` runs of ``check NAME --live``, in
this process through ``cli.main``), ``overhead_s = wall_s - seconds`` (what the
probe adds to the sampling window), ``budget_s`` (the bound the probe states)
and ``wall_over_budget``; ``probe_cpu_pct`` (this process's CPU share while
probing). The baseline, measured in the same run on the same segment, is the
read-only ``check NAME`` (``readonly_wall_s``, and ``live_over_readonly``), and,
for the engine, its CPU share over a window of the same length with no probe
(``engine_cpu_idle_pct``) beside its share while probed
(``engine_cpu_probed_pct``).

Usage::

    python benchmarks/check_live.py [--seconds S] [--deadline D] [--repeat N]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import child, emit, first_line, lucky, process_cpu_seconds

from lucky_monitor.cli import main
from lucky_monitor.transport.shm import Segment, shm_path

_SILENT = """
import os, sys, time
from lucky_monitor.protocol.header import plan
from lucky_monitor.transport.shm import EngineSegment
h = plan(num_envs=4, obs_size=6, act_size=2, cmd_ring_size=4096, tools_ring_size=4096,
         server_pid=os.getpid(), session_id=7)
seg = EngineSegment.create(sys.argv[1], h)
seg.set("heartbeat_ns", time.monotonic_ns())
seg.set("engine_state", 1)
seg.set("frame_seq", 1)
print(sys.argv[1], flush=True)
time.sleep(3600)
"""


def _run(argv: list[str]) -> tuple[int, str, float, float]:
    out = io.StringIO()
    cpu0, t0 = time.process_time(), time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    return code, out.getvalue(), time.monotonic() - t0, time.process_time() - cpu0


@contextlib.contextmanager
def _segment(kind: str) -> Iterator[tuple[str, int]]:
    name = f"LuckyEngine_live_{uuid.uuid4().hex[:12]}"
    try:
        if kind == "silent":
            with child([sys.executable, "-c", _SILENT, name]) as writer:
                first_line(writer)
                yield name, writer.pid
            return
        with child(lucky("sim", "--name", name, "--envs", "64", "--image", "64x64")) as eng:
            first_line(eng)
            if kind == "free_run":
                yield name, eng.pid
                return
            with child(lucky("train", "--shm", name, "--quiet")), Segment.attach(name) as seg:
                t_end = time.monotonic() + 60
                while not seg.counter("action_seq"):
                    if time.monotonic() > t_end:
                        raise SystemExit("the trainer never stepped")
                    time.sleep(0.02)
                yield name, eng.pid
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(shm_path(name))


def measure(kind: str, seconds: float, deadline: float, repeat: int) -> dict[str, object]:
    live = ["check", "--live", "--seconds", f"{seconds:g}", "--deadline", f"{deadline:g}", "--json"]
    with _segment(kind) as (name, pid):
        time.sleep(1.0)  # past start-up
        ro = [_run(["check", name, "--json"])[2] for _ in range(repeat)]
        walls, cpus, idle, probed, codes = [], [], [], [], []
        report: dict[str, object] = {}
        for _ in range(repeat):
            c0 = process_cpu_seconds(pid) or 0.0
            time.sleep(seconds + 2.5)  # an idle window about as long as a probe
            c1 = process_cpu_seconds(pid) or 0.0
            idle.append(100 * (c1 - c0) / (seconds + 2.5))
            code, out, wall, cpu = _run([*live[:1], name, *live[1:]])
            c2 = process_cpu_seconds(pid) or 0.0
            probed.append(100 * (c2 - c1) / wall)
            walls.append(wall)
            cpus.append(100 * cpu / wall)
            codes.append(code)
            report = json.loads(out)
    wall = statistics.median(walls)
    budget = float(report["budget_s"])  # type: ignore[arg-type]
    return {
        "bench": "check_live",
        "case": kind,
        "seconds": seconds,
        "deadline_s": deadline,
        "repeat": repeat,
        "exit_codes": codes,
        "counts": report.get("counts"),
        "wall_s": round(wall, 3),
        "overhead_s": round(wall - seconds, 3),
        "budget_s": budget,
        "wall_over_budget": round(wall / budget, 3),
        "readonly_wall_s": round(statistics.median(ro), 4),
        "live_over_readonly": round(wall / statistics.median(ro), 1),
        "probe_cpu_pct": round(statistics.median(cpus), 1),
        "engine_cpu_idle_pct": round(statistics.median(idle), 1),
        "engine_cpu_probed_pct": round(statistics.median(probed), 1),
    }


def main_() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--deadline", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for kind in ("free_run", "lock_step", "silent"):
        emit(measure(kind, args.seconds, args.deadline, args.repeat))


if __name__ == "__main__":
    main_()
