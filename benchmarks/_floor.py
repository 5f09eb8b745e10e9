"""The window's floor: the Qt-free session stepped at 60 Hz as the window steps it, with nothing drawn.

Run by ``monitor_cpu.py`` as a child beside the same engine and trainer as the
window cases::

    python benchmarks/_floor.py NAME SECONDS STATS_JSON (data|images)

It makes the session the window makes (``MonitorSession(name)``: tools
channel, discovery, traffic taps, inspector, display grid), lowers its
priority as the window does (nice 10) and calls ``session.step()`` on a 60 Hz
schedule for SECONDS. ``data``: no image is asked for (the data path alone:
poll, hot copy, history, inspector, traffic, tools); ``images``: every image
is asked for, copied and tiled into the display buffer (the window's image
path up to, not including, its conversion and paint). Writes the window's
``--stats-json`` keys (``RunStats``; ``images_presented`` counts images copied).
What the window cannot go under at the same rates: a window figure is read
against these.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lucky_monitor.core.budget import POLL_HZ, RunStats, lower_priority
from lucky_monitor.core.session import MonitorSession


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[3] not in ("data", "images"):
        print("usage: _floor.py NAME SECONDS STATS_JSON data|images", file=sys.stderr)
        return 2
    name, seconds, path, what = argv[0], float(argv[1]), argv[2], argv[3]
    lower_priority(10)
    session = MonitorSession(name)
    images = what == "images"

    def cpu_s() -> float:
        return time.process_time() + session.helper_cpu_s()

    period = 1.0 / POLL_HZ
    start = time.monotonic()
    stats = RunStats(start, cpu_s(), 0.0)
    due = start
    end = start + seconds
    try:
        while True:
            now = time.monotonic()
            if now >= end:
                break
            if now < due:
                time.sleep(due - now)
            due = max(due + period, time.monotonic() - period)  # a late tick does not bring a burst after it
            t0 = time.perf_counter()
            session.want_images(images)
            tick = session.step()
            image = tick.image
            if image is not None and image.new:
                stats.presented()
            stats.add_tick(tick, time.perf_counter() - t0)
        result = stats.result(time.monotonic(), cpu_s())
    finally:
        session.close()
    with open(path, "w", encoding="utf-8") as f:
        json.dump({**result, "floor": what}, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
