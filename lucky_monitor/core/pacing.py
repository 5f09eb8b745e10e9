"""A fixed-rate loop for the terminal views (``watch``, ``export``) that ends on Ctrl-C or SIGTERM.

:func:`paced` yields the monotonic time at each due step, ``hz`` times a
second (a step that ran late re-anchors the schedule instead of bursting),
until ``seconds`` have passed or SIGINT/SIGTERM arrived. The signal handlers
it installs only ask for the end; the previous ones are restored when the
loop ends, however it ends.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

__all__ = ["paced"]


def paced(hz: float, seconds: float | None = None) -> Iterator[float]:
    """Yield ``time.monotonic()`` at ``hz`` steps a second until ``seconds`` pass or SIGINT/SIGTERM."""
    stop = {"now": False}

    def on_signal(*_: object) -> None:
        stop["now"] = True

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    period = 1.0 / hz
    t_end = None if seconds is None else time.monotonic() + seconds
    try:
        next_t = time.monotonic()
        while not stop["now"]:
            now = time.monotonic()
            if t_end is not None and now >= t_end:
                break
            yield now
            next_t += period
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_t = time.monotonic()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
