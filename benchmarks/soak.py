"""Soak: the monitor window beside a fast engine and a trainer for minutes; memory and losses over time.

The reference engine runs ``--fast`` with 256 envs and 64x64 RGB images, the
reference trainer steps it in lock-step as fast as it can, and the real window
(``python -m lucky_monitor --shm NAME --stats-json F --quit-after S``,
offscreen, settings in a temporary HOME) follows it. Every ``--every`` seconds
the window's resident memory (``VmRSS`` from ``/proc``) is sampled. At the end
one JSON line reports:

* ``rss_mib`` - the samples while the window runs (the window and the helper processes it
  starts: the image sampler and the tools agent); ``rss_growth_pct_after_first_minute``
  - growth of the largest later sample over the first one taken after one minute
  (target < 5 %);
* from the window's ``--stats-json``: frames published vs seen, images
  published vs presented, late ticks, tick p50/p90, torn copies (hot arrays,
  images), its CPU;
* the tap against the engine's own count, per ring (``"main c2s"`` ...):
  ``engine_messages`` (entries the reference engine took off a request ring or
  wrote on a response ring, from ``sim --stats-json``), ``tap_messages``
  (entries the window's passive taps delivered), ``tap_lost`` (the
  difference), ``tap_missed_bytes``, and ``nothing_lost_by_tap``. So that both
  count the same span, the trainer starts only once the window holds the tools
  channel (it has attached, taps running), stops ``min(10 s, M/4)`` before the
  window quits, and the engine stops half that before (writing its counts);
  the window sees the rings up to then;
* the engine's and trainer's CPU over the run, and the machine's load average.

Usage::

    python benchmarks/soak.py [--minutes M] [--every S]

The default is 30 minutes with a sample every 30 s; ``--minutes 3 --every 10``
is a quick look.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import child, emit, first_line, lucky, machine_facts, offscreen_platform, process_cpu_seconds


def descendants(pid: int) -> list[int]:
    """The pids of ``pid``'s children, their children, ... (Linux ``/proc/<pid>/task/*/children``)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children", encoding="ascii") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, ValueError):
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def tree_rss_mib(pid: int) -> float | None:
    """Resident memory of ``pid`` and every process it started (the window and its helpers), MiB."""
    own = rss_mib(pid)
    if own is None:
        return None
    return round(own + sum(rss_mib(k) or 0.0 for k in descendants(pid)), 1)


def rss_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024.0, 1)
    except (OSError, ValueError):
        pass
    return None


def read_json(path: str) -> dict[str, Any]:
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        out: dict[str, Any] = json.load(f)
    return out


def wait_for_owner(name: str, pid: int, timeout: float) -> bool:
    """Wait until ``pid`` holds the tools channel of segment ``name`` (the window has attached)."""
    from lucky_monitor.protocol.errors import LuckyMonitorError
    from lucky_monitor.transport.shm import Segment
    from lucky_monitor.transport.tools import tools_owner

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with Segment.attach(name) as seg:
                if tools_owner(seg) == pid:
                    return True
        except LuckyMonitorError:
            pass
        time.sleep(0.1)
    return False


def tap_comparison(engine: dict[str, Any], stats: dict[str, Any]) -> dict[str, Any]:
    """Per ring: what the engine took and wrote, what the window's tap saw, and the difference."""
    wrote: dict[str, int] = engine.get("messages") or {}
    seen: dict[str, int] = stats.get("tap_messages") or {}
    missed: dict[str, int] = stats.get("tap_missed_bytes") or {}
    rings = sorted({*wrote, *seen})
    lost = {r: wrote.get(r, 0) - seen.get(r, 0) for r in rings}
    return {
        "engine_messages": wrote,
        "tap_messages": seen,
        "tap_lost": lost,
        "tap_missed_bytes": missed,
        "tap_corrupt": stats.get("tap_corrupt"),
        "engine_dropped_pushes": engine.get("dropped_pushes"),
        "nothing_lost_by_tap": bool(wrote) and all(v == 0 for v in lost.values()) and not any(missed.values()),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="length of the soak (default 30)")
    p.add_argument("--every", type=float, default=30.0, help="seconds between memory samples (default 30)")
    args = p.parse_args(argv)
    seconds = args.minutes * 60.0
    facts = machine_facts()
    name = f"LuckyEngine_soak_{secrets.token_hex(6)}"
    tail = min(10.0, seconds / 4)  # the trainer stops this long before the window, the engine half as long
    with tempfile.TemporaryDirectory(prefix="soak_") as work:
        stats_path = os.path.join(work, "stats.json")
        engine_path = os.path.join(work, "engine.json")
        env = {**os.environ, "QT_QPA_PLATFORM": offscreen_platform(work), "HOME": work, "XDG_CONFIG_HOME": work}
        sim_argv = lucky(
            "sim", "--name", name, "--envs", "256", "--image", "64x64", "--fast", "--stats-json", engine_path
        )
        with child(sim_argv, stderr_path=os.path.join(work, "sim.err")) as sim:
            if first_line(sim) != name:
                raise SystemExit("the engine announced another segment")
            win_argv = lucky("--shm", name, "--stats-json", stats_path, "--quit-after", str(seconds))
            with child(win_argv, env=env, stderr_path=os.path.join(work, "window.err")) as win:
                t0 = time.monotonic()
                # The taps start at attach: start the trainer once the window holds the tools channel
                # (it claims right after attaching), so the tap can see every message the engine counts.
                attached = wait_for_owner(name, win.pid, timeout=60.0)
                train_argv = lucky("train", "--shm", name, "--quiet")
                with child(train_argv, stderr_path=os.path.join(work, "train.err")) as trainer:
                    t_train = time.monotonic() - t0
                    cpu0 = {k: process_cpu_seconds(pr.pid) for k, pr in (("engine", sim), ("trainer", trainer))}
                    cpu1: dict[str, float | None] = {}
                    samples: list[tuple[float, float | None]] = []
                    stopped: dict[str, float] = {}
                    next_sample = 0.0
                    while win.poll() is None and time.monotonic() - t0 < seconds + 60:
                        now = time.monotonic() - t0
                        if now >= next_sample:
                            samples.append((round(now, 1), tree_rss_mib(win.pid)))
                            next_sample = now + args.every
                        if "trainer" not in stopped and now >= seconds - tail:
                            cpu1 = {k: process_cpu_seconds(pr.pid) for k, pr in (("engine", sim), ("trainer", trainer))}
                            trainer.send_signal(signal.SIGINT)
                            trainer.wait(timeout=30)
                            stopped["trainer"] = now
                        if "engine" not in stopped and now >= seconds - tail / 2:
                            sim.send_signal(signal.SIGINT)  # it writes its counts as it exits
                            sim.wait(timeout=30)
                            stopped["engine"] = now
                        time.sleep(0.2)
                    wall = stopped.get("trainer", time.monotonic() - t0) - t_train
                    win.wait(timeout=60)
        stats = read_json(stats_path)
        engine = read_json(engine_path)
    # Samples while the window runs (not the one taken as it closes), and the growth from the
    # first sample after one minute to the largest one after it.
    valid = [(t, r) for t, r in samples if r is not None and t < seconds - 1.0]
    after = [r for t, r in valid if t >= 60.0]
    growth = round(100.0 * (max(after) - after[0]) / after[0], 2) if len(after) >= 2 else None

    def pct(key: str) -> float | None:
        a, b = cpu0.get(key), cpu1.get(key)
        return None if a is None or b is None else round(100.0 * (b - a) / wall, 1)

    emit(
        {
            "benchmark": "soak",
            "minutes": args.minutes,
            "setting": "sim --fast --envs 256 --image 64x64 + train; window offscreen, default budget",
            "rss_mib": valid,
            "rss_growth_pct_after_first_minute": growth,
            "target": "rss growth < 5 % after the first minute; nothing lost by the tap",
            "window_exit": win.returncode,
            "frames_published": stats.get("frames_published"),
            "frames_seen": stats.get("frames_seen"),
            "images_published": stats.get("images_published"),
            "images_presented": stats.get("images_presented"),
            "late_ticks": stats.get("late_ticks"),
            "torn_hot": stats.get("torn_hot"),
            "torn_images": stats.get("torn_images"),
            "window_attached_before_trainer": attached,
            **tap_comparison(engine, stats),
            "ticks": stats.get("ticks"),
            "tick_ms_p50": stats.get("tick_ms_p50"),
            "tick_ms_p90": stats.get("tick_ms_p90"),
            "monitor_cpu_pct": round(100.0 * stats["cpu_s"] / stats["wall_s"], 1) if stats.get("wall_s") else None,
            "engine_cpu_pct": pct("engine"),
            "trainer_cpu_pct": pct("trainer"),
        },
        facts={**facts, "load_average": machine_facts()["load_average"]},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
