"""The window's CPU budget and run statistics, Qt-free.

:class:`CpuBudget` picks the refresh rates of what the window *paints* (the
image grid, the plots, the QML panels) so that the process stays under a
share of one core. It is fed readings of the process's CPU time and a clock
and answers with :class:`Rates`; it never touches the data path (the poll,
history, traffic taps), which the window runs on every tick whatever the
rates. The rates come from a fixed ladder, cheapest cuts first: the plots
(pyqtgraph's axis layout is the costliest paint) before the panels, the
panels before the images. The floor is the ladder's last rung.

How it decides:

* usage is ``Δcpu / Δwall`` over the readings of the last ``window_s``
  seconds taken *since the last change of rung* (readings from another rung
  say nothing about this one); no decision before ``settle_s`` of them;
* above the budget it steps down one rung (two over 1.5× the budget, three
  over 2.5×, so a window that starts far over settles within seconds):
  when one reading is over by more than ``tolerance`` (15 %: a jump, where
  a reading is noisy by about half a percent of a core), or the rung's mean
  CPU over its last ``mean_window_s`` (10 s; at least ``mean_min_s``, 3 s,
  of it) is over;
  it steps up one rung when that rung should fit: by what it cost when last
  measured over seconds (within ``memory_s``), or, between image rates, by
  what an image a second cost between two measured rungs (a rung's images a
  second at the camera's rate, :meth:`Rates.image_rate`), or by what it cost
  when measured briefly (a jump left it: those readings may be the jump's);
  with nothing to go by, below
  ``low × budget``. Otherwise nothing changes (hysteresis);
* a step up that has to be undone within ``backoff_window_s`` (the rung above
  was too costly after all) doubles the time it waits before it tries that
  again (``hold_up_s``, up to ``max_hold_s``); a step up that holds resets it. So a
  budget that sits between two rungs settles on the lower one instead of
  oscillating;
* at the floor and still above the budget, :attr:`CpuBudget.over_budget` is
  true: the budget cannot be met by painting less.

A budget of ``0`` means no limit: the top rung, always.

:class:`RunStats` accumulates what ``--stats-json`` writes from the Ticks
the window handled and the grid updates it presented.
"""

from __future__ import annotations

import math
import os
import random
from collections import deque
from dataclasses import dataclass
from typing import Any

from .session import Tick

__all__ = ["LADDER", "POLL_HZ", "CpuBudget", "Rates", "RunStats", "lower_priority", "machine_idle_s"]


def lower_priority(nice: int) -> int | None:
    """Run this process at Unix nice value ``nice`` or lower priority; return the value in force.

    Never raises the priority (a process already nicer stays so; raising needs
    privileges anyway). ``None`` where the platform has no nice values. On a
    machine the engine and trainer keep busy, the scheduler then gives them
    the CPU first: the window's budget bounds its average cost, this bounds
    who waits when both want the same core at once.
    """
    if not hasattr(os, "getpriority"):
        return None
    try:
        current = os.getpriority(os.PRIO_PROCESS, 0)
        if nice > current:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        return os.getpriority(os.PRIO_PROCESS, 0)
    except OSError:
        return None


def machine_idle_s() -> float | None:
    """The machine's idle CPU seconds since boot, all cores summed (Linux ``/proc/stat``); ``None`` elsewhere."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
        if fields[0] != "cpu":
            return None
        return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")  # idle + iowait
    except (OSError, ValueError, IndexError):
        return None


#: The window's poll rate: an image rate at or above it means "every new image".
POLL_HZ = 60.0


@dataclass(frozen=True, slots=True)
class Rates:
    """Refresh rates in force: image grid presentation, plots, QML panels' live values (Hz).

    ``images_share`` is the share of new images presented (evenly spread:
    19 of each 20 at 0.95), whatever the camera's rate; ``images_hz`` caps
    the image rate (at or above :data:`POLL_HZ`: no cap). The status text
    names the share only where nothing caps it.
    """

    images_hz: float
    plots_hz: float
    panel_hz: float
    images_share: float = 1.0

    @property
    def every_image(self) -> bool:
        """Whether every new image is presented."""
        return self.images_share >= 1.0 and self.images_hz >= POLL_HZ

    def image_rate(self, published_hz: float | None) -> float:
        """Images presented a second where ``published_hz`` are published (``None``: unknown).

        At most the poll rate: a camera faster than the poll is seen at the poll's rate.
        """
        seen = POLL_HZ if published_hz is None else min(POLL_HZ, max(0.0, published_hz))
        return min(self.images_share * seen, self.images_hz)

    def images_text(self) -> str:
        """``images 30 Hz``; a share of the images uncapped: ``images 95 %``; every one: ``images all``.

        (Every image read ``images 60 Hz``, the poll's rate, beside a 50 Hz camera.)
        """
        if self.every_image:
            return "images all"
        if self.images_hz >= POLL_HZ:
            return f"images {self.images_share * 100:g} %"
        return f"images {self.images_hz:g} Hz"

    def text(self) -> str:
        """``images 30 Hz · plots 5 Hz · panel 10 Hz``; a share of the images uncapped: ``images 95 %``."""
        return f"{self.images_text()} · plots {self.plots_hz:g} Hz · panel {self.panel_hz:g} Hz"


#: Rungs from the full rates to the floor (images ≥ 1 Hz, plots and panels ≥ 0.25 Hz). Every
#: image is shown as long as plots and panels can give way: they are cut to a refresh every
#: two seconds before the first image is skipped (the panels' rate also paces the traffic
#: table, whose repaint of a dock-high table is 5-7 ms). Then one image in 20 is skipped, then
#: one in 10, whatever the camera's rate (a cap in Hz above it would skip none, and one below
#: it would skip a share that depends on it: 45 Hz is one in 4 of a 60 Hz camera's images); the
#: image rate then steps down in small steps near a camera's usual rates (45, 40, 30, 25 Hz ...),
#: keeping the one-in-10 share, so the window settles on the highest rate that fits rather than
#: halving it, and no rung shows more images than the one above. The last two rungs are for a window that
#: is still over its budget at images 2 Hz, plots and panels 0.5 Hz: beside an engine and a
#: trainer that keep every core busy (where the budget is halved), painting plots and panels
#: every 4 s and an image a second cost a trainer stepping 256 envs 1.6 points fewer of its
#: steps than the rung above (A/B/A, six rounds: 0.970 against 0.954 of its steps alone).
LADDER: tuple[Rates, ...] = (
    Rates(60, 10, 10),
    Rates(60, 5, 10),
    Rates(60, 5, 5),
    Rates(60, 2, 5),
    Rates(60, 1, 5),
    Rates(60, 1, 2),
    Rates(60, 0.5, 1),
    Rates(60, 0.5, 0.5),
    Rates(60, 0.5, 0.5, 0.95),
    Rates(60, 0.5, 0.5, 0.9),
    Rates(45, 0.5, 0.5, 0.9),
    Rates(40, 0.5, 0.5, 0.9),
    Rates(30, 0.5, 0.5, 0.9),
    Rates(25, 0.5, 0.5, 0.9),
    Rates(20, 0.5, 0.5, 0.9),
    Rates(15, 0.5, 0.5, 0.9),
    Rates(10, 0.5, 0.5, 0.9),
    Rates(5, 0.5, 0.5, 0.9),
    Rates(2, 0.5, 0.5, 0.9),
    Rates(2, 0.25, 0.25, 0.9),
    Rates(1, 0.25, 0.25, 0.9),
)


class CpuBudget:
    """Refresh rates that keep a process under ``budget_pct`` % of one core.

    Parameters
    ----------
    budget_pct
        The share of one core the process may use; ``0`` for no limit.
    ladder
        Rates from the most to the least costly; the last is the floor.
    window_s, settle_s
        Usage is measured over at most ``window_s`` seconds of readings
        taken since the last change, and not before ``settle_s`` of them.
    low
        Step up only below ``low × budget`` (the hysteresis band).
    hold_up_s, max_hold_s, backoff_window_s
        Wait at least ``hold`` seconds after a step down before stepping up;
        ``hold`` starts at ``hold_up_s`` and doubles (up to ``max_hold_s``)
        each time a step up is undone within ``backoff_window_s``.

    Call :meth:`update` with readings (every tick is fine: it only appends
    to a short deque and decides at most once per ``settle_s``).
    """

    #: One reading steps down only above this many budgets: a jump (a reading of the process CPU over
    #: ~1.5 s varies by about half a percent of a core, and by up to one at 10 %) ...
    tolerance = 1.15
    #: ... else the rung's mean over its last :attr:`mean_window_s` (at least :attr:`mean_min_s` of it)
    #: above one budget. Readings taken 4 times a second over a 1.5 s window follow each other too
    #: closely to average: a mean of them stepped down from rungs whose cost fitted, one noisy reading
    #: at a time, until the window painted a third fewer images than its budget allowed.
    mean_window_s = 10.0
    mean_min_s = 3.0
    #: A rung measured within this many seconds is judged by what it cost then (see :meth:`_fits_above`) ...
    memory_s = 30.0
    #: ... and fits when that was at most this share of the budget. Measured longer ago at no more than
    #: ``retry`` budgets, it is tried again: a mean taken in a busy moment (the engine, trainer and window
    #: all starting at once) must not hold the window at a low rung for good; a rung far over is not.
    fit = 0.98
    retry = 1.25
    #: Costs measured in the window's first seconds (its first layouts and paints, the QML panels
    #: warming up, engine and trainer starting beside it) read 2-8 points high: at the end of this
    #: warm-up they count as measured long ago, so the rungs they ruled out are tried again at once
    #: instead of ``memory_s`` later, if within ``retry`` budgets plus :attr:`warmup_extra_pct`
    #: points (a rung read far beyond that, e.g. plots at 1 Hz and up at 26-40 %, is not tried: each
    #: try costs a second over the budget).
    warmup_s = 10.0
    warmup_extra_pct = 6.0
    #: Below this much idle CPU (in cores, over the last readings) the machine counts as saturated ...
    SATURATED_IDLE_CORES = 0.5
    #: ... and the budget in force is this share of the one asked for.
    SATURATED_SHARE = 0.5

    def __init__(
        self,
        budget_pct: float,
        *,
        ladder: tuple[Rates, ...] = LADDER,
        window_s: float = 1.5,
        settle_s: float = 0.5,
        low: float = 0.7,
        hold_up_s: float = 2.0,
        max_hold_s: float = 32.0,
        backoff_window_s: float = 4.0,
    ) -> None:
        if not budget_pct >= 0 or math.isinf(budget_pct):
            raise ValueError(f"budget_pct must be a finite number ≥ 0, not {budget_pct!r}")
        if not ladder:
            raise ValueError("ladder must have at least one rung")
        self.budget_pct = float(budget_pct)
        self.ladder = ladder
        self.window_s = window_s
        self.settle_s = settle_s
        self.low = low
        self.hold_up_s = hold_up_s
        self.max_hold_s = max_hold_s
        self.backoff_window_s = backoff_window_s
        self.level = 0
        self.usage_pct: float | None = None  # the last measured usage, % of one core
        self.over_budget = False
        self._readings: deque[tuple[float, float]] = deque()
        self._idle: deque[tuple[float, float]] = deque()  # (monotonic time, machine idle CPU seconds)
        self.machine_busy = False  # the machine had no idle core to spare at the last readings
        self.images_per_s: float | None = None  # images published a second, as last told
        self._changed_at: float | None = None
        self._last_up_at: float | None = None
        self._hold = hold_up_s
        self._measured: dict[int, tuple[float, float, bool]] = {}  # level -> (mean usage there, when, a full mean)
        self._started_at: float | None = None  # the first reading; None again once warm-up ended
        self._rung: deque[tuple[float, float]] = deque()  # (time, CPU seconds) since the rung began, ≤ mean_window_s
        self._interaction_until = -math.inf  # see interacting()

    #: How long after the last sign of user interaction its readings are left out (see :meth:`interacting`).
    INTERACTION_S = 1.0

    def interacting(self, now: float) -> None:
        """The user zooms, pans or resizes (``now``: the clock :meth:`update` is fed): readings until
        :attr:`INTERACTION_S` after this are neither judged against the budget nor kept as the rung's cost."""
        self._interaction_until = max(self._interaction_until, now + self.INTERACTION_S)

    @property
    def limited(self) -> bool:
        """Whether there is a budget at all (``budget_pct > 0``)."""
        return self.budget_pct > 0

    @property
    def rates(self) -> Rates:
        """The rates in force."""
        return self.ladder[self.level]

    @property
    def at_floor(self) -> bool:
        return self.level == len(self.ladder) - 1

    def update(self, now: float, cpu_s: float, idle_s: float | None = None, images_per_s: float | None = None) -> bool:
        """Take one reading (``now``: a monotonic clock; ``cpu_s``: process CPU seconds).

        ``images_per_s``: the images published a second (``None``: unknown),
        which says how many images a second each rung presents.

        ``idle_s``: the machine's idle CPU seconds so far, all cores (see
        :func:`machine_idle_s`; ``None``: unknown). While the machine has
        less than :attr:`SATURATED_IDLE_CORES` of a core idle, the budget in
        force is :attr:`SATURATED_SHARE` of the one asked for
        (:attr:`machine_busy`): on a machine the engine and trainer keep
        busy, every cycle the window takes is one they wait for.

        Returns
        -------
        bool
            Whether the rates changed.
        """
        if images_per_s is not None:
            self.images_per_s = images_per_s
        r = self._readings
        r.append((now, cpu_s))
        if idle_s is not None:
            self._idle.append((now, idle_s))
            while len(self._idle) > 2 and now - self._idle[1][0] >= self.window_s:
                self._idle.popleft()
        while len(r) > 2 and now - r[1][0] >= self.window_s:
            r.popleft()
        if self._changed_at is None:
            self._changed_at = self._started_at = now
        elif self._started_at is not None and now - self._started_at >= self.warmup_s:
            self._started_at = None  # warm-up over: what it measured counts as measured long ago
            old = {lv: (u, -math.inf, full) for lv, (u, _, full) in self._measured.items()}
            # A rung not measured (a jump skipped it, or the window never went so low) reads what the
            # nearest costlier rung measured read: it costs no more than that.
            last = None
            for lv in range(len(self.ladder)):
                last = old.get(lv, last)
                if last is not None:
                    old.setdefault(lv, last)
            self._measured = old
            # ... and the rung in force is measured afresh: a mean over warm-up seconds would step it down
            # (and then hold the window below it for memory_s) for what the first seconds cost.
            self._rung.clear()
        t0, c0 = r[0]
        span = now - t0
        if span < self.settle_s or span <= 0:
            return False
        self.usage_pct = 100.0 * (cpu_s - c0) / span
        if len(self._idle) >= 2 and self._idle[-1][0] - self._idle[0][0] >= self.settle_s:
            (ti, i0), (tj, i1) = self._idle[0], self._idle[-1]
            idle_cores = (i1 - i0) / (tj - ti)
            # Hysteresis: busy below the threshold, free again only above twice it.
            if self.machine_busy:
                self.machine_busy = idle_cores < 2 * self.SATURATED_IDLE_CORES
            else:
                self.machine_busy = idle_cores < self.SATURATED_IDLE_CORES
        if not self.limited:
            self.over_budget = False
            return False
        if now < self._interaction_until:
            # A zoom, a pan or a resize repaints the whole view: what the window costs meanwhile is the user's,
            # not the rung's. It is neither judged nor remembered (the window was held at
            # images 2 Hz for half a minute at 6 % of 10 % after a zoom and a pan, the rungs above measured
            # in the interaction's repaints), and the rung is measured afresh after it.
            self._readings.clear()
            self._readings.append((now, cpu_s))
            self._rung.clear()
            return False
        usage, budget = self.usage_pct, self.effective_pct
        rung = self._rung
        rung.append((now, cpu_s))
        while len(rung) > 2 and now - rung[1][0] >= self.mean_window_s:
            rung.popleft()
        rung_s = now - rung[0][0]
        # A rung's cost: its mean CPU over up to mean_window_s, once a reading's window long; else the reading.
        mean = 100.0 * (cpu_s - rung[0][1]) / rung_s if rung_s >= self.window_s else usage
        self._measured[self.level] = (mean, now, rung_s >= self.mean_min_s)
        # Over: one reading far over (a jump), or the rung's mean over once it spans mean_min_s.
        over = usage > self.tolerance * budget or (rung_s >= self.mean_min_s and mean > budget)
        self.over_budget = self.at_floor and usage > budget
        if self._last_up_at is not None and now - self._last_up_at > self.backoff_window_s:
            self._hold = self.hold_up_s  # the last step up held: be quick to step up again
            self._last_up_at = None
        if over and not self.at_floor:
            if self._last_up_at is not None:
                self._hold = min(self.max_hold_s, self._hold * 2)  # the step up did not fit: wait longer next time
                self._last_up_at = None
            steps = 1 if usage <= 1.5 * budget else 2 if usage <= 2.5 * budget else 3
            return self._move(min(len(self.ladder) - 1, self.level + steps), now)
        if self.level > 0 and now - self._changed_at >= self._hold and self._fits_above(mean, budget, now):
            self._last_up_at = now
            return self._move(self.level - 1, now)
        return False

    def _fits_above(self, usage: float, budget: float, now: float) -> bool:
        """Whether the rung above should fit the budget.

        Its usage as measured there within :attr:`memory_s`, over
        :attr:`mean_min_s` at least; else, on the images part of the ladder,
        this rung's usage plus what an image a second cost between two rungs
        measured within :attr:`memory_s` (the nearest measured over seconds
        first; usage grows about linearly with the image rate: a copy and a
        paint per image); else its usage measured briefly; else (nothing to
        go by) usage below ``low`` × budget. The first two let the window
        settle on the highest image rate that fits instead of one that leaves
        30 % of the budget unused. A rung left within a second or two by a
        jump was measured by the jump's readings: it does not hold the window
        below it for :attr:`memory_s` where the slope says it fits (a spike of
        three seconds had held the demo window at 20 Hz for 30 s).
        """
        recent = {lv: u for lv, (u, t, _) in self._measured.items() if now - t <= self.memory_s}
        # Rungs measured over mean_min_s at least. A rung left within seconds by a jump was measured by
        # the readings of that jump: where what an image a second costs says otherwise, that is believed.
        full = {lv: u for lv, (u, t, whole) in self._measured.items() if whole and now - t <= self.memory_s}
        above = self.level - 1
        if above in full:
            return full[above] <= self.fit * budget
        here, up = self.ladder[self.level], self.ladder[above]

        # Image rates as presented at the camera's rate: rungs that cap above it present the same images.
        def rate(lv: int) -> float:
            return self.ladder[lv].image_rate(self.images_per_s)

        same_rest = [
            lv
            for lv in recent
            if (self.ladder[lv].plots_hz, self.ladder[lv].panel_hz) == (here.plots_hz, here.panel_hz)
            and rate(lv) != rate(self.level)
        ]
        if (up.plots_hz, up.panel_hz) == (here.plots_hz, here.panel_hz) and same_rest:
            # The nearest rung measured over seconds, else the nearest measured at all.
            other = min(same_rest, key=lambda lv: (lv not in full, abs(lv - self.level)))
            per_hz = (recent[other] - usage) / (rate(other) - rate(self.level))
            if per_hz > 0:
                return usage + per_hz * (rate(above) - rate(self.level)) <= self.fit * budget
        if above in recent:  # measured briefly, and nothing else to go by
            return recent[above] <= self.fit * budget
        old = self._measured.get(above)
        warm = self.warmup_extra_pct if old is not None and old[1] == -math.inf else 0.0
        if old is not None and old[0] <= self.retry * budget + warm:
            # Measured over memory_s ago and not far over (a warm-up reading: not far over once what the
            # start added is taken off): that reading must not rule the rung out for good (a noisy mean, a
            # busy moment, the start). Try it again while this one leaves room; a try that does not fit is
            # undone within seconds, and then its new measurement holds for memory_s.
            return usage <= self.fit * budget
        return usage < self.low * budget

    def _move(self, level: int, now: float) -> bool:
        changed = level != self.level
        self.level = level
        self._changed_at = now
        last = self._readings[-1]
        self._readings.clear()
        self._readings.append(last)  # measure the new rung from here on
        self._rung.clear()
        self._rung.append(last)
        self.over_budget = False
        return changed

    @property
    def effective_pct(self) -> float:
        """The budget in force: :attr:`budget_pct`, or :attr:`SATURATED_SHARE` of it while the machine is busy."""
        return self.budget_pct * (self.SATURATED_SHARE if self.machine_busy else 1.0)

    def text(self) -> str:
        """The status line: ``CPU 8 % of 10 % · images 30 Hz · plots 5 Hz · panel 10 Hz``."""
        return self.texts()[0]

    def texts(self) -> tuple[str, ...]:
        """:meth:`text`, then the same in fewer words for a narrow status bar, longest first.

        ``CPU 8 % of 10 % · images 30 Hz`` (the rate a user checks first), then
        ``CPU 8 % of 10 %``; over budget each ends ``· over budget``.
        """
        usage = "—" if self.usage_pct is None else f"{self.usage_pct:.0f}"
        if self.over_budget and self.usage_pct is not None and round(self.usage_pct) <= self.effective_pct:
            usage = f"{self.usage_pct:.1f}"  # "5 % of 5 % · over budget" read as a contradiction
        cpu = f"CPU {usage} % of {self.effective_pct:g} %" if self.limited else f"CPU {usage} % (no budget)"
        head = cpu + (" (machine busy)" if self.limited and self.machine_busy else "")
        tail = " · over budget at the lowest rates" if self.over_budget else ""
        short_tail = " · over budget" if self.over_budget else ""
        return (
            f"{head} · {self.rates.text()}{tail}",
            f"{cpu} · {self.rates.images_text()}{short_tail}",
            f"{cpu}{short_tail}",
        )


def _percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class RunStats:
    """What the window did over a run, for ``--stats-json``.

    Feed every handled Tick to :meth:`add_tick` with the time the tick took,
    and call :meth:`presented` for each grid update shown. Counts of the
    segment (``frame_seq``, ``image_seq`` deltas; ``frames_seen``) are summed
    over attaches: each attach contributes what moved between its first and
    its last Tick.

    Parameters
    ----------
    start_wall, start_cpu
        The clock (monotonic) and process CPU seconds when the run began.
    budget_pct
        The CPU budget in force (written back as ``cpu_budget_pct``).
    poll_hz
        An attached tick later than 1.5 poll periods after the previous one is late.
    """

    #: Tick durations kept for the percentiles: each of the first this many ticks (18 minutes at 60 Hz),
    #: then a uniform sample of this many of all the run's (reservoir sampling, a fixed seed): a run of
    #: days keeps half a megabyte of them, not ~170 MB a day.
    TICK_SAMPLE = 1 << 16

    KEYS = (
        "ticks",
        "late_ticks",
        "frames_published",
        "frames_seen",
        "images_published",
        "images_presented",
        "tick_ms_p50",
        "tick_ms_p90",
        "cpu_s",
        "wall_s",
        "cpu_budget_pct",
        "tap_messages",
        "tap_missed_bytes",
        "tap_corrupt",
        "torn_hot",
        "torn_images",
    )

    def __init__(self, start_wall: float, start_cpu: float, budget_pct: float, poll_hz: float = POLL_HZ) -> None:
        self.start_wall = start_wall
        self.start_cpu = start_cpu
        self.budget_pct = budget_pct
        self.late_after = 1.5 / poll_hz
        self.ticks = 0
        self.late_ticks = 0
        self.images_presented = 0
        self.tick_ms: list[float] = []  # at most TICK_SAMPLE durations
        self._sampler = random.Random(0x7C)
        self._last_t: float | None = None
        # closed attaches' totals; the current attach's first and last values
        self._frames = self._images = self._seen = 0
        self._gen: int | None = None
        self._first: tuple[int, int] | None = None
        self._last: tuple[int, int] | None = None
        self._seen_now = 0
        # ring tap and torn-copy counts: closed attaches' totals, and the current attach's latest
        self._taps: dict[str, dict[str, int]] = {"messages": {}, "missed_bytes": {}, "corrupt": {}}
        self._taps_now: dict[str, dict[str, int]] = {"messages": {}, "missed_bytes": {}, "corrupt": {}}
        self._torn = [0, 0]
        self._torn_now = [0, 0]

    def add_tick(self, tick: Tick, tick_s: float) -> None:
        """Count one handled Tick that took ``tick_s`` seconds of the window's time."""
        self.ticks += 1
        if len(self.tick_ms) < self.TICK_SAMPLE:
            self.tick_ms.append(tick_s * 1e3)
        else:  # the k-th tick replaces a kept one with probability TICK_SAMPLE / k
            j = self._sampler.randrange(self.ticks)
            if j < self.TICK_SAMPLE:
                self.tick_ms[j] = tick_s * 1e3
        if self._last_t is not None and tick.t - self._last_t > self.late_after:
            self.late_ticks += 1
        # Detached, the window ticks slower on purpose (``DETACHED_HZ``): only attached ticks are held to the poll.
        self._last_t = tick.t if tick.header is not None else None
        if tick.generation != self._gen:
            self._close_attach()
            self._gen = tick.generation
        if tick.live is not None and tick.header is not None:
            seqs = (tick.live.frame_seq, tick.live.image_seq // 2)
            if self._first is None:
                self._first = seqs
            self._last = seqs
            self._seen_now = tick.counters.frames_seen
            ts = tick.traffic_stats
            self._taps_now = {"messages": ts.messages, "missed_bytes": ts.missed_bytes, "corrupt": ts.corrupt}
            self._torn_now = [tick.counters.torn_hot, tick.counters.torn_images]

    def presented(self) -> None:
        """One grid update shown."""
        self.images_presented += 1

    def _close_attach(self) -> None:
        if self._first is not None and self._last is not None:
            self._frames += max(0, self._last[0] - self._first[0])
            self._images += max(0, self._last[1] - self._first[1])
            self._seen += self._seen_now
            self._taps = _summed(self._taps, self._taps_now)
            self._torn = [a + b for a, b in zip(self._torn, self._torn_now, strict=True)]
        self._first = self._last = None
        self._seen_now = 0
        self._taps_now = {"messages": {}, "missed_bytes": {}, "corrupt": {}}
        self._torn_now = [0, 0]

    def result(self, now_wall: float, now_cpu: float) -> dict[str, Any]:
        """The ``--stats-json`` object (every key of :attr:`KEYS`, in that order)."""
        frames, images, seen = self._frames, self._images, self._seen
        if self._first is not None and self._last is not None:
            frames += max(0, self._last[0] - self._first[0])
            images += max(0, self._last[1] - self._first[1])
            seen += self._seen_now
        taps, torn = self._taps, self._torn
        if self._first is not None:
            taps = _summed(taps, self._taps_now)
            torn = [a + b for a, b in zip(torn, self._torn_now, strict=True)]
        p50, p90 = _percentile(self.tick_ms, 50), _percentile(self.tick_ms, 90)
        return {
            "ticks": self.ticks,
            "late_ticks": self.late_ticks,
            "frames_published": frames,
            "frames_seen": seen,
            "images_published": images,
            "images_presented": self.images_presented,
            "tick_ms_p50": None if p50 is None else round(p50, 3),
            "tick_ms_p90": None if p90 is None else round(p90, 3),
            "cpu_s": round(now_cpu - self.start_cpu, 3),
            "wall_s": round(now_wall - self.start_wall, 3),
            "cpu_budget_pct": self.budget_pct,
            # per ring ("main c2s" ...), summed over attaches: what the passive taps delivered and skipped
            "tap_messages": taps["messages"],
            "tap_missed_bytes": taps["missed_bytes"],
            "tap_corrupt": taps["corrupt"],
            "torn_hot": torn[0],
            "torn_images": torn[1],
        }


def _summed(a: dict[str, dict[str, int]], b: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Per-kind, per-ring sums of two sets of tap counts."""
    return {k: {r: a[k].get(r, 0) + b[k].get(r, 0) for r in {*a[k], *b[k]}} for k in a}
