"""Pacing: a fixed-rate loop for the terminal views, and giving the core back between short bursts of work.

:class:`Yielder` is how the monitor stays out of a lock-step pair's way. An
engine and a trainer that wait for each other by spinning on
``sched_yield`` keep every core busy, and neither ever *wakes up*: the
scheduler has no reason to take a core from a process that holds it, and
on a kernel that checks at its 250 Hz tick a monitor holds it for up to
4 ms at a time. Whenever that process is the one whose turn just came, the
pair waits for the monitor's whole burst. A monitor that calls
``sched_yield`` itself after each ~100 µs of work hands the core back at
once; its work then fills the moments when one side of the pair only
spins. The CPU it uses is the same; what the trainer pays is not (see the
README's *The window's CPU budget*).

:func:`paced` yields the monotonic time at each due step, ``hz`` times a
second (a step that ran late re-anchors the schedule instead of bursting),
until ``seconds`` have passed or SIGINT/SIGTERM arrived. The signal handlers
it installs only ask for the end; the previous ones are restored when the
loop ends, however it ends.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator

__all__ = ["DEFAULT_YIELD_US", "Yielder", "no_offer", "paced", "sched_yield", "share_shows"]

#: Work between two offers of the core, in microseconds, unless told otherwise (``--yield-us``).
DEFAULT_YIELD_US = 100.0


def share_shows(index: int, share: float) -> bool:
    """Whether the image of number ``index`` (``image_seq // 2``) is among the ``share`` presented.

    Evenly spread and stateless: image ``k`` is shown when ``⌊k·share⌋``
    (in thousandths, exact) moved from image ``k - 1``'s, so any run of
    images shows ``share`` of them to within one.
    """
    if share >= 1.0:
        return True
    milli = round(share * 1000)
    return index * milli // 1000 != (index - 1) * milli // 1000


def sched_yield() -> None:
    """``sched_yield(2)`` where the platform has it: let any other runnable process have this core first."""
    if _SCHED_YIELD is not None:
        _SCHED_YIELD()


_SCHED_YIELD: Callable[[], None] | None = getattr(os, "sched_yield", None)


def no_offer() -> None:
    """The offer of a view on its own (no window around it): the core goes to nobody."""


class Yielder:
    """Offer the core to other runnable processes after every ``quantum_us`` of work (see the module docstring).

    Call :meth:`begin` where a burst of work starts (a tick's start, after
    the event loop's wait) and the instance itself at the seams of that work:
    between the phases of a poll, between the widgets of a paint. A call
    less than ``quantum_us`` after the last offer costs one clock read; a
    later one calls ``yield_`` (``sched_yield``: returns at once when nothing
    else wants the core). ``quantum_us`` ``0`` turns it off. ``count`` is
    the number of offers made.

    :attr:`contended` says whether other processes want the cores at all;
    while it is false no offer is made (a caller that knows the machine has
    idle cores clears it: the kernel then runs this process on one of them,
    and an offer would only cost a system call). Callers that split work into
    pieces only to offer the core in between ask :attr:`active` first.

    Never called inside a seqlock-guarded copy: a copy stretched by a yield
    is likelier to be torn.
    """

    __slots__ = ("_clock", "_since", "_yield", "contended", "count", "quantum_s")

    def __init__(
        self,
        quantum_us: float = DEFAULT_YIELD_US,
        *,
        clock: Callable[[], float] = time.perf_counter,
        yield_: Callable[[], None] = sched_yield,
    ) -> None:
        if not (quantum_us >= 0 and quantum_us < float("inf")):
            raise ValueError(f"quantum_us must be 0 (off) or a positive number of microseconds, got {quantum_us!r}")
        self.quantum_s = quantum_us / 1e6
        self._clock = clock
        self._yield = yield_
        self._since = clock()
        self.count = 0
        self.contended = True  # until told otherwise: the machine may be saturated

    @property
    def enabled(self) -> bool:
        return self.quantum_s > 0

    @property
    def active(self) -> bool:
        """Whether a call may offer the core: offers are on and other processes want the cores."""
        return self.quantum_s > 0 and self.contended

    def begin(self) -> None:
        """A burst of work starts now (the process was asleep until now): the quantum counts from here."""
        self._since = self._clock()

    def __call__(self) -> None:
        """Offer the core if at least one quantum of work has passed since the last offer (or :meth:`begin`)."""
        q = self.quantum_s
        if q > 0 and self.contended and self._clock() - self._since >= q:
            self._yield()
            self.count += 1
            self._since = self._clock()


#: The longest single sleep of :func:`paced`: how late it notices its end or a signal at a slow rate.
MAX_NAP_S = 0.1


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
            if next_t - time.monotonic() <= 0:
                next_t = time.monotonic()  # behind: the next step now, no burst to catch up
                continue
            # Sleep to the next step, but not past the end, and in naps: a slow rate (export --poll-hz 0.1)
            # had overrun --seconds 0.5 by 10 s, and a Ctrl-C waited for the whole period.
            while not stop["now"]:
                wake = next_t if t_end is None else min(next_t, t_end)
                left = wake - time.monotonic()
                if left <= 0:
                    break
                time.sleep(min(left, MAX_NAP_S))
    finally:
        for s, h in old.items():
            signal.signal(s, h)
