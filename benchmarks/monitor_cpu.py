"""Monitor CPU beside a running engine and trainer, and what a monitor costs the trainer.

Two parts, each printing one JSON line per case:

``window`` (one line per display mode and case): the real window
(``python -m lucky_monitor --shm NAME --stats-json F --quit-after S``, settings
in a temporary HOME) following the reference engine and trainer at the demo
setting (``sim --envs 64 --image 64x64``, 50 Hz realtime; ``train --shm
NAME``). Modes: ``offscreen`` (``QT_QPA_PLATFORM=offscreen``, one 1920x1080 screen) and ``xvfb``
(a private ``Xvfb`` display started here; skipped with a note when ``Xvfb``
is not on PATH). Cases, taking turns with the same engine and trainer:

* ``budget`` - the window as shipped (``--cpu-budget 10``);
* ``no_budget`` - ``--cpu-budget 0``: full refresh rates;
* ``no_budget_gl_panels`` - ``--cpu-budget 0`` with the QML panels forced onto
  the OpenGL scene graph (``QSG_RHI_BACKEND=opengl``), i.e. the window before
  it chose Qt Quick's software renderer where GL is software.

And the window's floor, mode ``headless`` (``_floor.py``, no display, no Qt):
the session the window makes, stepped at 60 Hz at the window's nice value with
nothing drawn - ``floor_data``: no image asked for (the data path alone: poll,
hot copy, history, inspector, traffic, tools); ``floor_images``: every image
copied and tiled into the display buffer (``images_presented`` counts them).
The window cannot go under ``floor_data``, nor show every image for less than
``floor_images`` plus the conversion and paint of each; taken in turns with
the window cases, so all see the same load.

Figures come from the window's ``--stats-json``: ``monitor_cpu_pct`` =
``cpu_s / wall_s`` (% of one core, the process's CPU from its first tick to
exit; ``monitor_cpu_pct_steady`` the same from ``/proc`` leaving out the first
``--warmup`` seconds and the last), ``images_presented_ratio`` = ``images_presented / images_published``,
``late_ticks``, ``tick_ms_p50/p90``. ``engine_cpu_pct``, ``trainer_cpu_pct``
and (under Xvfb) ``xserver_cpu_pct`` are read from ``/proc`` over the same
seconds, for context. Targets: monitor ≤ 10 % of a core, images presented
≥ 95 % of published.

``trainer_ab`` (one line): trainer steps/s with and without a monitor
attached. The engine runs ``--fast`` (256 envs × 64×64 RGB), the trainer
steps as fast as it can; phases A (no monitor) and B (a monitor window,
offscreen, shipped defaults, started for the phase and stopped after it)
alternate A/B/A/.../B/A in one run. A phase's steps/s is ``Δframe_seq / Δt``
read from the segment; in B the window's first ``--settle`` seconds (8, also
with ``--quick``: start-up, i.e. imports and first layouts, about 1.2 s of
CPU, then the CPU budget stepping down from its top rung; measured from 5 s
the B windows read 13.5-17.5 % of a core where from 8 s they read 8.2-8.6 %)
are not measured: a monitor runs for hours, its steady cost is what the
trainer pays. ``paired_ratios``: each B
over the mean of the two A phases around it; ``ratio`` is their median
(``ratio_of_medians`` is median B / median A). The machine's load average is
reported before and after. ``--synthetic`` adds, after each B and the A that
follows it, a phase C with a plain process that wakes at 60 Hz (nice 10, like
the window) and burns the CPU share the window just used, then one more A:
``synthetic_ratio`` (median of C over its bracketing A phases) is what any
load of the window's size costs this trainer, the baseline ``ratio`` is read
against.

Usage::

    python benchmarks/monitor_cpu.py [--quick] [--only window|trainer_ab] [--modes offscreen,xvfb]
                                     [--cases budget,no_budget,no_budget_gl_panels,floor_data,floor_images]
                                     [--repeats N]

``--quick``: 12 s per window case and 6 s phases (about 4 minutes in all);
the default is 20 s and 10 s; four B phases either way (``--pairs``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import child, emit, first_line, load_average, lucky, machine_facts, offscreen_platform, process_cpu_seconds

CASES: dict[str, tuple[list[str], dict[str, str]]] = {
    "budget": (["--cpu-budget", "10"], {}),
    "no_budget": (["--cpu-budget", "0"], {}),
    "no_budget_gl_panels": (["--cpu-budget", "0"], {"QSG_RHI_BACKEND": "opengl"}),
}
#: The window's floor (``_floor.py``): the Qt-free session stepped at 60 Hz, nothing drawn; no display.
FLOOR_CASES = {"floor_data": "data", "floor_images": "images"}
DEFAULT_CASES = ("budget", "no_budget", "no_budget_gl_panels", "floor_data", "floor_images")


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()[-2000:]
    except OSError:
        return ""


def clean_env(home: str, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "HOME": home,
        "XDG_CONFIG_HOME": os.path.join(home, ".config"),
        "XDG_CACHE_HOME": os.path.join(home, ".cache"),
        "XDG_DATA_HOME": os.path.join(home, ".local", "share"),
    }
    for k in ("LUCKY_SHM_NAME", "QT_QUICK_BACKEND", "QSG_RHI_BACKEND", "DISPLAY", "QT_QPA_PLATFORM"):
        env.pop(k, None)
    env.update(extra)
    return env


@contextlib.contextmanager
def xvfb(workdir: str) -> Iterator[tuple[str, subprocess.Popen] | None]:
    """A private Xvfb display ``(":N", process)``, or ``None`` when Xvfb is not installed."""
    exe = shutil.which("Xvfb")
    if exe is None:
        yield None
        return
    n = next(
        n
        for n in range(90, 200)
        if not os.path.exists(f"/tmp/.X11-unix/X{n}") and not os.path.exists(f"/tmp/.X{n}-lock")
    )
    log = open(os.path.join(workdir, "xvfb.log"), "w", encoding="utf-8")  # closed in finally
    proc = subprocess.Popen([exe, f":{n}", "-screen", "0", "1920x1080x24", "-nolisten", "tcp"], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(f"/tmp/.X11-unix/X{n}"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"Xvfb :{n} did not start: {read_text(log.name)}")
            time.sleep(0.05)
        yield f":{n}", proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def run_window(
    name: str,
    workdir: str,
    label: str,
    seconds: float,
    warmup: float,
    args: list[str],
    env: dict[str, str],
    others: dict[str, int],
    floor: str | None = None,
) -> dict[str, Any]:
    """One monitor run; its ``--stats-json`` plus the CPU of ``others`` (pid by name) over the same seconds.

    ``floor`` (``"data"`` or ``"images"``): run the window's floor, ``_floor.py``, instead of the window.
    """
    home = tempfile.mkdtemp(prefix=f"home_{label}_", dir=workdir)
    stats_path = os.path.join(home, "stats.json")
    err_path = os.path.join(home, "monitor.stderr")
    if floor is not None:  # the Qt-free session in place of the window (``_floor.py``)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_floor.py")
        argv = [sys.executable, script, name, f"{seconds:g}", stats_path, floor]
    else:
        argv = lucky("--shm", name, "--stats-json", stats_path, "--quit-after", f"{seconds:g}", *args)
    before = {k: process_cpu_seconds(pid) for k, pid in others.items()}
    t0 = time.monotonic()
    with child(argv, env=clean_env(home, **env), stderr_path=err_path) as mon:
        # the steady state: /proc CPU from `warmup` s after start to 1 s before the window quits
        time.sleep(warmup)
        s0, st0 = process_cpu_seconds(mon.pid), time.monotonic()
        time.sleep(max(1.0, seconds - warmup - 1.0))
        s1, st1 = process_cpu_seconds(mon.pid), time.monotonic()
        try:
            rc = mon.wait(seconds + 60)
        except subprocess.TimeoutExpired:
            rc = None
    wall = time.monotonic() - t0
    after = {k: process_cpu_seconds(pid) for k, pid in others.items()}
    try:
        with open(stats_path, encoding="utf-8") as f:
            stats = json.load(f)
    except (OSError, ValueError):
        raise SystemExit(f"monitor ({label}) wrote no stats (exit {rc}): {read_text(err_path)}") from None
    out: dict[str, Any] = {
        "monitor_cpu_pct": round(100.0 * stats["cpu_s"] / stats["wall_s"], 1) if stats["wall_s"] else None,
        "images_presented_ratio": round(stats["images_presented"] / stats["images_published"], 3)
        if stats["images_published"]
        else None,
        "frames_seen_ratio": round(stats["frames_seen"] / stats["frames_published"], 3)
        if stats["frames_published"]
        else None,
        "monitor_cpu_pct_steady": None if s0 is None or s1 is None else round(100.0 * (s1 - s0) / (st1 - st0), 1),
    }
    for k in others:
        b, a = before[k], after[k]
        out[f"{k}_cpu_pct"] = None if a is None or b is None else round(100.0 * (a - b) / wall, 1)
    out["monitor_exit_code"] = rc
    out["stats"] = stats
    return out


def bench_window(args: argparse.Namespace, workdir: str, facts: dict[str, Any]) -> None:
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for case in cases:
        if case not in CASES and case not in FLOOR_CASES:
            raise SystemExit(f"unknown case {case!r} ({', '.join(DEFAULT_CASES)})")
    name = f"LuckyEngine_cpu_{secrets.token_hex(6)}"
    engine_argv = lucky("sim", "--name", name, "--envs", "64", "--image", "64x64")
    with (
        child(engine_argv, stderr_path=os.path.join(workdir, "engine.stderr")) as eng,
        contextlib.ExitStack() as stack,
    ):
        if first_line(eng) != name:
            raise SystemExit("engine announced another segment name")
        trainer = stack.enter_context(
            child(lucky("train", "--shm", name, "--quiet"), stderr_path=os.path.join(workdir, "trainer.stderr"))
        )
        time.sleep(1.0)
        displays: dict[str, tuple[dict[str, str], dict[str, int]] | None] = {}
        for mode in modes:
            if mode == "offscreen":
                displays[mode] = ({"QT_QPA_PLATFORM": offscreen_platform(workdir)}, {})
            elif mode == "xvfb":
                x = stack.enter_context(xvfb(workdir))
                displays[mode] = (
                    None if x is None else ({"DISPLAY": x[0], "QT_QPA_PLATFORM": "xcb"}, {"xserver": x[1].pid})
                )
            else:
                raise SystemExit(f"unknown mode {mode!r} (offscreen, xvfb)")
        for mode in modes:
            if displays[mode] is None:
                emit(
                    {"benchmark": "monitor_cpu", "part": "window", "mode": mode, "skipped": "Xvfb is not on PATH"},
                    facts=facts,
                )
        results: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for _ in range(args.repeats):  # cases and modes take turns, so they see the same load
            for case in cases:
                if case in FLOOR_CASES:
                    others = {"engine": eng.pid, "trainer": trainer.pid}
                    r = run_window(name, workdir, case, args.seconds, args.warmup, [], {}, others, FLOOR_CASES[case])
                    results.setdefault(("headless", case), []).append(r)
                    continue
                case_args, case_env = CASES[case]
                for mode in modes:
                    d = displays[mode]
                    if d is None:
                        continue
                    env, extra = d
                    others = {"engine": eng.pid, "trainer": trainer.pid, **extra}
                    r = run_window(
                        name,
                        workdir,
                        f"{mode}_{case}",
                        args.seconds,
                        args.warmup,
                        case_args,
                        {**env, **case_env},
                        others,
                    )
                    results.setdefault((mode, case), []).append(r)
        for (mode, case), runs in results.items():
            r = runs[-1] if len(runs) == 1 else median_run(runs)
            emit(
                {
                    "benchmark": "monitor_cpu",
                    "part": "window",
                    "mode": mode,
                    "case": case,
                    "monitor_cpu_pct": r["monitor_cpu_pct"],
                    "monitor_cpu_pct_steady": r["monitor_cpu_pct_steady"],
                    "images_presented_ratio": r["images_presented_ratio"],
                    "frames_seen_ratio": r["frames_seen_ratio"],
                    "late_ticks": r["stats"]["late_ticks"],
                    "ticks": r["stats"]["ticks"],
                    "tick_ms_p50": r["stats"]["tick_ms_p50"],
                    "tick_ms_p90": r["stats"]["tick_ms_p90"],
                    "rates_at_exit": r["stats"].get("rates"),
                    "over_budget_at_exit": r["stats"].get("over_budget"),
                    **{k: v for k, v in r.items() if k.endswith("_cpu_pct") and k != "monitor_cpu_pct"},
                    "runs": len(runs),
                    "monitor_cpu_pct_runs": [x["monitor_cpu_pct"] for x in runs],
                    "monitor_cpu_pct_steady_runs": [x["monitor_cpu_pct_steady"] for x in runs],
                    "images_presented_ratio_runs": [x["images_presented_ratio"] for x in runs],
                    "seconds": args.seconds,
                    "stats": r["stats"],
                    "setting": "sim --envs 64 --image 64x64 (50 Hz realtime) + train",
                    **(
                        {"floor": FLOOR_CASES[case]}
                        if case in FLOOR_CASES
                        else {"targets": {"monitor_cpu_pct": "<= 10", "images_presented_ratio": ">= 0.95"}}
                    ),
                },
                facts={**facts, "load_average": load_average()},
            )


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(runs, key=lambda r: r["monitor_cpu_pct"] or 0.0)
    return ordered[len(ordered) // 2]


def paired_ratios(a_rates: list[float], b_rates: list[float]) -> list[float]:
    """Each B phase's steps/s over the mean of the A phases just before and after it.

    The phases run A B A B ... A, so ``len(a_rates) == len(b_rates) + 1``; pairing
    each B with the A phases that bracket it cancels a slow drift of the
    machine's speed (other tenants, clock) that a ratio of medians keeps.
    """
    if len(a_rates) != len(b_rates) + 1:
        raise ValueError("A phases must bracket every B phase")
    return [b / ((a_rates[i] + a_rates[i + 1]) / 2) for i, b in enumerate(b_rates) if a_rates[i] + a_rates[i + 1] > 0]


#: The calibration load of ``--synthetic``: wakes at 60 Hz (the window's poll rate), at the
#: window's default niceness, and burns ``argv[1]`` ms of CPU per wake-up.
SYNTHETIC_LOAD = """
import os, sys, time
from lucky_monitor.core.pacing import paced
os.nice(10)
burn = float(sys.argv[1]) / 1000.0
for _ in paced(60.0):
    t = time.perf_counter()
    while time.perf_counter() - t < burn:
        pass
"""


def bench_trainer_ab(args: argparse.Namespace, workdir: str, facts: dict[str, Any]) -> None:
    from lucky_monitor.transport.shm import Segment

    name = f"LuckyEngine_ab_{secrets.token_hex(6)}"
    engine_argv = lucky("sim", "--name", name, "--envs", "256", "--image", "64x64", "--fast")
    load_before = load_average()
    phases: dict[str, list[float]] = {"A": [], "B": []}
    monitor_cpu: list[float] = []
    synthetic: dict[str, list[float]] = {"A": [], "C": [], "cpu": []}
    with child(engine_argv, stderr_path=os.path.join(workdir, "ab_engine.stderr")) as eng:
        if first_line(eng) != name:
            raise SystemExit("engine announced another segment name")
        with (
            child(lucky("train", "--shm", name, "--quiet"), stderr_path=os.path.join(workdir, "ab_trainer.stderr")),
            Segment.attach(name) as seg,
        ):
            time.sleep(args.warmup)

            def rate(seconds: float) -> float:
                f0, t0 = seg.counter("frame_seq"), time.monotonic()
                time.sleep(seconds)
                return (seg.counter("frame_seq") - f0) / (time.monotonic() - t0)

            def rate_beside(pid: int) -> tuple[float, float | None]:
                """A phase's steps/s, and the CPU share (% of a core) process ``pid`` took meanwhile."""
                c0, t0 = process_cpu_seconds(pid), time.monotonic()
                steps = rate(args.phase)
                c1, t1 = process_cpu_seconds(pid), time.monotonic()
                share = None if c0 is None or c1 is None else round(100.0 * (c1 - c0) / (t1 - t0), 1)
                return steps, share

            phases["A"].append(rate(args.phase))
            for i in range(args.pairs):
                home = tempfile.mkdtemp(prefix=f"home_ab{i}_", dir=workdir)
                stats_path = os.path.join(home, "stats.json")
                mon_argv = [
                    *args.monitor_wrap.split(),
                    *lucky("--shm", name, "--stats-json", stats_path, *args.monitor_args.split()),
                ]
                env = clean_env(home, QT_QPA_PLATFORM=offscreen_platform(workdir))
                with child(mon_argv, env=env, stderr_path=os.path.join(home, "monitor.stderr")) as mon:
                    time.sleep(args.settle)
                    steps, share = rate_beside(mon.pid)
                    phases["B"].append(steps)
                    if mon.poll() is not None:
                        raise SystemExit(
                            f"monitor exited during phase B: {read_text(os.path.join(home, 'monitor.stderr'))}"
                        )
                    if share is not None:
                        monitor_cpu.append(share)
                time.sleep(1.0)  # the monitor's exit settles before the next A
                phases["A"].append(rate(args.phase))
                if args.synthetic and monitor_cpu:
                    # The same CPU share as the window just took, as a plain 60 Hz load: what any
                    # process of that size costs this trainer here (the B/A pairs' baseline).
                    burn_ms = monitor_cpu[-1] / 100.0 / 60.0 * 1000.0
                    with child([sys.executable, "-c", SYNTHETIC_LOAD, f"{burn_ms:.4f}"]) as load:
                        time.sleep(1.0)
                        steps, share = rate_beside(load.pid)
                        synthetic["C"].append(steps)
                        if share is not None:
                            synthetic["cpu"].append(share)
                    time.sleep(0.5)
                    synthetic["A"].append(rate(args.phase))
    a, b = statistics.median(phases["A"]), statistics.median(phases["B"])
    pairs = paired_ratios(phases["A"], phases["B"])
    row: dict[str, Any] = {
        "benchmark": "monitor_cpu",
        "part": "trainer_ab",
        "setting": "sim --fast --envs 256 --image 64x64 + train; B: + monitor window (offscreen, default budget)",
        "steps_per_s_without": round(a, 1),
        "steps_per_s_with": round(b, 1),
        "ratio": round(statistics.median(pairs), 3) if pairs else None,
        "paired_ratios": [round(r, 3) for r in pairs],
        "ratio_of_medians": round(b / a, 3) if a else None,
        "phases_steps_per_s": {k: [round(x, 1) for x in v] for k, v in phases.items()},
        "monitor_cpu_pct_in_b": monitor_cpu,
        "phase_s": args.phase,
        "settle_s": args.settle,
        "pairs": args.pairs,
        "load_average_before": load_before,
        "target": "ratio >= 0.95",
    }
    if args.synthetic:
        # Each C is bracketed by the A after the B before it and the A after the C.
        c_pairs = [
            r for i, c in enumerate(synthetic["C"]) for r in paired_ratios([phases["A"][i + 1], synthetic["A"][i]], [c])
        ]
        row["synthetic_ratio"] = round(statistics.median(c_pairs), 3) if c_pairs else None
        row["synthetic_paired_ratios"] = [round(r, 3) for r in c_pairs]
        row["synthetic_cpu_pct"] = synthetic["cpu"]
        row["synthetic_steps_per_s"] = {
            "A": [round(x, 1) for x in synthetic["A"]],
            "C": [round(x, 1) for x in synthetic["C"]],
        }
    emit(row, facts={**facts, "load_average": load_average()})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="12 s per window case, 6 s phases")
    p.add_argument("--only", choices=("window", "trainer_ab"), default=None, help="run one part only")
    p.add_argument("--modes", default="offscreen,xvfb", help="window display modes (default offscreen,xvfb)")
    p.add_argument("--seconds", type=float, default=None, help="seconds per window run")
    p.add_argument("--cases", default=",".join(DEFAULT_CASES), help=f"window cases (default {','.join(DEFAULT_CASES)})")
    p.add_argument("--repeats", type=int, default=1, help="window runs per case and mode (median reported)")
    p.add_argument("--pairs", type=int, default=4, help="B phases of the trainer comparison (one more A brackets them)")
    p.add_argument("--phase", type=float, default=None, help="seconds measured per A or B phase")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring (start-up)")
    p.add_argument(
        "--settle",
        type=float,
        default=None,
        help="seconds a B phase's window runs before it is measured (start-up, the budget stepping down; default 8)",
    )
    p.add_argument("--monitor-args", default="", help="extra options of the B phases' monitor window, e.g. '--nice 0'")
    p.add_argument(
        "--monitor-wrap", default="", help="a command the B phases' monitor runs under, e.g. 'chrt --idle 0'"
    )
    p.add_argument(
        "--synthetic",
        action="store_true",
        help="after each B, a phase with a plain 60 Hz load of the window's measured CPU share (a baseline)",
    )
    args = p.parse_args(argv)
    args.seconds = args.seconds or (12.0 if args.quick else 20.0)
    args.phase = args.phase or (6.0 if args.quick else 10.0)
    args.settle = args.settle if args.settle is not None else 8.0
    facts = machine_facts()
    with tempfile.TemporaryDirectory(prefix="monitor_cpu_") as workdir:
        if args.only in (None, "window"):
            bench_window(args, workdir, facts)
        if args.only in (None, "trainer_ab"):
            bench_trainer_ab(args, workdir, facts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
