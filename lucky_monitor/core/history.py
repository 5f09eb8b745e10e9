"""Bounded, Qt-free time series of what the monitor saw, one entry per new frame.

Theory of operation
-------------------
The poller hands :meth:`History.append` the views of one frame's ``rewards``,
``dones`` and ``truncateds`` (one value per env) each time it sees a new
``frame_seq``. Every append does a fixed amount of vectorised numpy work, O(n)
in the number of envs, and writes into arrays allocated once in the
constructor:

* a scalar ring of ``capacity`` entries: ``frame_seq``, poll time ``t``,
  reward mean, min, max, 10th and 90th percentile (``np.partition`` on a
  preallocated scratch copy, linear interpolation as ``np.percentile``), done
  count, truncated count, and the number of frames skipped since the previous
  append (``frame_seq`` gap minus one);
* a raster ring of ``raster_capacity`` rows holding every env's reward, with
  its own ``frame_seq`` and ``t`` axes;
* full-resolution reward rings for up to :data:`MAX_SELECTED` selected envs,
  aligned with the scalar ring. Newly selected envs are back-filled from the
  raster where it still holds their values, and are NaN before that.

The monitor polls at a fixed rate; an engine that steps faster publishes
frames the monitor never sees. Those gaps are counted, never invented: the
series are samples of the run, and :attr:`History.sampled` says so while
recent appends skipped frames.

NaN rewards are left out of the statistics of their frame (a frame of only NaN
gives NaN statistics) and kept as NaN in the raster and the selected series.

:meth:`History.window` copies the last ``seconds`` of every ring into
contiguous chronological arrays; nothing a caller holds aliases the rings.
``frame_seq`` must increase and ``t`` must not decrease from one append to the
next; an engine that recreated its segment starts a new session, and the
feeder calls :meth:`History.clear` first.
"""

from __future__ import annotations

import csv
import datetime
import itertools
import math
import numbers
import operator
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

from ..protocol.errors import LuckyMonitorError
from ..protocol.header import MAX_ENVS

__all__ = [
    "MAX_CAPACITY",
    "MAX_RASTER_CAPACITY",
    "MAX_SELECTED",
    "SAMPLED_MEMORY",
    "History",
    "HistoryError",
    "HistoryView",
    "ring_count_since",
    "ring_tail",
]

#: Most envs whose full-resolution reward series are kept.
MAX_SELECTED = 8
#: Largest scalar ring accepted (about 100 MiB with eight selected envs).
MAX_CAPACITY = 1 << 20
#: Largest raster ring accepted (256 MiB at :data:`MAX_ENVS` envs).
MAX_RASTER_CAPACITY = 1 << 14
#: :attr:`History.sampled` stays true for this many appends after one that skipped frames.
SAMPLED_MEMORY = 120

#: Appends whose statistics (mean, min, max, p10, p90) are computed together, or fewer at a read.
STATS_BATCH = 32

_NUMERIC_KINDS = frozenset("biuf")
_MAX_SELECTION_ITEMS = 64


def _iso(epoch: float) -> str:
    """``2026-11-22T20:41:05.123Z`` (UTC, milliseconds); ``""`` for a time that cannot be shown."""
    try:
        return datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
    except (OverflowError, OSError, ValueError):
        return ""


class HistoryError(LuckyMonitorError):
    """A history was given an argument or a frame it cannot take."""


@dataclass(frozen=True, eq=False)
class HistoryView:
    """Chronological copies of the last part of a :class:`History`.

    Every array is a contiguous copy the caller owns. The scalar series share
    one axis (``frame_seq``/``t``); the raster has its own (``raster_frame_seq``
    / ``raster_t``) because it keeps fewer rows.

    Attributes
    ----------
    frame_seq : numpy.ndarray
        int64, the engine frame of each entry, increasing.
    t : numpy.ndarray
        float64, poll time of each entry in seconds (the feeder's clock).
    mean, min, max, p10, p90 : numpy.ndarray
        float64 reward statistics over the envs of each entry.
    done_count, trunc_count : numpy.ndarray
        int32 number of envs done / truncated in each entry.
    skipped : numpy.ndarray
        int64 frames skipped just before each entry (0 for the first one).
    selected : dict[int, numpy.ndarray]
        float32 reward series of each selected env, aligned with ``frame_seq``;
        NaN where the env was not selected yet and the raster no longer held it.
    raster : numpy.ndarray
        float32 ``(frames, envs)`` rewards of every env; ``(0, envs)`` when the
        window was taken without the raster.
    raster_frame_seq : numpy.ndarray
        int64 frame of each raster row.
    raster_t : numpy.ndarray
        float64 poll time of each raster row.
    num_envs : int
        Envs per frame.
    """

    frame_seq: np.ndarray
    t: np.ndarray
    mean: np.ndarray
    min: np.ndarray
    max: np.ndarray
    p10: np.ndarray
    p90: np.ndarray
    done_count: np.ndarray
    trunc_count: np.ndarray
    skipped: np.ndarray
    selected: dict[int, np.ndarray] = field(default_factory=dict)
    raster: np.ndarray = field(default_factory=lambda: np.empty((0, 0), np.float32))
    raster_frame_seq: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    raster_t: np.ndarray = field(default_factory=lambda: np.empty(0, np.float64))
    num_envs: int = 0

    def __len__(self) -> int:
        return int(self.frame_seq.shape[0])


def _positive_int(name: str, value: Any, upper: int) -> int:
    if isinstance(value, bool):
        raise HistoryError(f"{name} must be an integer, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise HistoryError(f"{name} must be an integer, got {type(value).__name__}") from None
    if not 1 <= number <= upper:
        raise HistoryError(f"{name} must be in 1..{upper}, got {number}")
    return number


def ring_tail(ring: np.ndarray, m: int, count: int, axis: int = 0) -> np.ndarray:
    """Copy the newest ``m`` entries of a ring, oldest first, as one contiguous array.

    Parameters
    ----------
    ring : numpy.ndarray
        Ring storage; entry ``k`` (0-based, in write order) lives at ``k % cap``
        along ``axis``.
    m : int
        Entries wanted, at most ``min(count, cap)``.
    count : int
        Entries ever written.
    axis : int, optional
        The ring axis.

    Returns
    -------
    numpy.ndarray
        A new array with ``m`` entries along ``axis``.
    """
    cap = ring.shape[axis]
    end = count % cap
    index: list[slice] = [slice(None)] * ring.ndim
    if m <= end:
        index[axis] = slice(end - m, end)
        return ring[tuple(index)].copy()
    older = list(index)
    older[axis] = slice(cap - (m - end), cap)
    index[axis] = slice(0, end)
    return np.concatenate((ring[tuple(older)], ring[tuple(index)]), axis=axis)


def ring_count_since(t_ring: np.ndarray, held: int, count: int, cutoff: float) -> int:
    """Count the newest entries of a time ring with ``t >= cutoff``.

    Parameters
    ----------
    t_ring : numpy.ndarray
        Non-decreasing (in write order) times, laid out as for :func:`ring_tail`.
    held : int
        Entries held, ``min(count, cap)``.
    count : int
        Entries ever written.
    cutoff : float
        Oldest time kept.

    Returns
    -------
    int
        How many of the newest entries are at or after ``cutoff``.
    """
    cap: int = t_ring.shape[0]
    end = count % cap
    if count <= cap:
        return held - int(np.searchsorted(t_ring[:held], cutoff, side="left"))
    newer_first = int(np.searchsorted(t_ring[:end], cutoff, side="left"))
    if newer_first > 0:
        return end - newer_first
    older_first = int(np.searchsorted(t_ring[end:], cutoff, side="left"))
    return end + (cap - end - older_first)


class History:
    """Ring-buffered reward statistics, counts, raster and selected env series.

    Parameters
    ----------
    num_envs : int
        Envs per frame, 1 to ``MAX_ENVS``.
    capacity : int, optional
        Entries of the scalar and selected-env rings (36000: ten minutes at
        60 Hz), at most :data:`MAX_CAPACITY`.
    raster_capacity : int, optional
        Rows of the all-env raster ring, at most :data:`MAX_RASTER_CAPACITY`.

    Raises
    ------
    HistoryError
        If a size is not an integer in its range.
    """

    def __init__(self, num_envs: int, capacity: int = 36000, raster_capacity: int = 600) -> None:
        n = _positive_int("num_envs", num_envs, MAX_ENVS)
        cap = _positive_int("capacity", capacity, MAX_CAPACITY)
        rcap = _positive_int("raster_capacity", raster_capacity, MAX_RASTER_CAPACITY)
        self._n = n
        self._cap = cap
        self._rcap = rcap
        self._seq = np.zeros(cap, np.int64)
        self._t = np.zeros(cap, np.float64)
        self._mean = np.zeros(cap, np.float64)
        self._min = np.zeros(cap, np.float64)
        self._max = np.zeros(cap, np.float64)
        self._p10 = np.zeros(cap, np.float64)
        self._p90 = np.zeros(cap, np.float64)
        self._dones = np.zeros(cap, np.int32)
        self._truncs = np.zeros(cap, np.int32)
        self._skipped = np.zeros(cap, np.int64)
        self._sel = np.full((MAX_SELECTED, cap), np.nan, np.float32)
        self._raster = np.zeros((rcap, n), np.float32)
        self._raster_seq = np.zeros(rcap, np.int64)
        self._raster_t = np.zeros(rcap, np.float64)
        #: appends whose statistics may wait (see :meth:`_flush_stats`): their rows are still in the raster
        #: and their slots in the scalar rings are distinct
        self._stats_batch = min(STATS_BATCH, rcap, cap)
        self._sel_ids = np.zeros(0, np.intp)
        self._colour_slots: dict[int, int] = {}  # selected env -> its colour slot (see set_selected)
        # Partition points for min, p10, p90 and max with all n values finite.
        self._kth, self._interp = self._plan_percentiles(n)
        self._generation = 0
        self._reset_counters()

    # ------------------------------------------------------------------ state
    def _reset_counters(self) -> None:
        self._count = 0
        self._stats_done = 0  # appends below this index have their statistics written
        self._skipped_total = 0
        self._last_seq: int | None = None
        self._last_t = -math.inf
        self._last_skip_count = 0

    @staticmethod
    def _plan_percentiles(m: int) -> tuple[list[int], tuple[tuple[int, int, float], ...]]:
        interp = []
        for q in (0.1, 0.9):
            pos = q * (m - 1)
            lo = math.floor(pos)
            hi = min(lo + 1, m - 1)
            interp.append((lo, hi, pos - lo))
        kth = sorted({0, m - 1, *(i for lo, hi, _ in interp for i in (lo, hi))})
        return kth, tuple(interp)

    @property
    def num_envs(self) -> int:
        """Envs per frame."""
        return self._n

    @property
    def capacity(self) -> int:
        """Entries the scalar and selected-env rings hold."""
        return self._cap

    @property
    def raster_capacity(self) -> int:
        """Rows the raster ring holds."""
        return self._rcap

    @property
    def frames_seen(self) -> int:
        """Appends since construction or the last :meth:`clear`."""
        return self._count

    @property
    def skipped_total(self) -> int:
        """Frames the engine published that were never appended, since the last :meth:`clear`."""
        return self._skipped_total

    @property
    def sampled(self) -> bool:
        """True while one of the last :data:`SAMPLED_MEMORY` appends skipped frames.

        The engine then steps faster than the poll, and every series holds
        samples of the run rather than every frame.
        """
        return self._last_skip_count > 0 and self._count - self._last_skip_count < SAMPLED_MEMORY

    @property
    def generation(self) -> int:
        """Changes on every :meth:`clear`, so a viewer knows its cached copies are stale."""
        return self._generation

    @property
    def last_frame_seq(self) -> int | None:
        """``frame_seq`` of the newest entry, or None when empty."""
        return self._last_seq

    @property
    def selected(self) -> tuple[int, ...]:
        """Envs whose full-resolution reward series are kept, in selection order."""
        return tuple(int(i) for i in self._sel_ids)

    @property
    def nbytes(self) -> int:
        """Bytes of all the preallocated storage; constant for the life of the history."""
        arrays = (
            self._seq,
            self._t,
            self._mean,
            self._min,
            self._max,
            self._p10,
            self._p90,
            self._dones,
            self._truncs,
            self._skipped,
            self._sel,
            self._raster,
            self._raster_seq,
            self._raster_t,
        )
        return sum(a.nbytes for a in arrays)

    def __len__(self) -> int:
        """Entries currently held by the scalar ring."""
        return min(self._count, self._cap)

    # --------------------------------------------------------------- writing
    def _check_vector(self, name: str, value: Any) -> np.ndarray:
        arr = value if type(value) is np.ndarray else np.asarray(value)
        if arr.shape != (self._n,):
            raise HistoryError(f"{name} must have shape ({self._n},), got {arr.shape}")
        if arr.dtype.kind not in _NUMERIC_KINDS:
            raise HistoryError(f"{name} must be numeric, got dtype {arr.dtype}")
        return arr

    def append(
        self,
        frame_seq: int,
        t: float,
        rewards: np.ndarray,
        dones: np.ndarray,
        truncateds: np.ndarray | None = None,
    ) -> None:
        """Record one frame.

        Parameters
        ----------
        frame_seq : int
            The frame's ``frame_seq``; greater than the previous append's.
        t : float
            Poll time in seconds, finite and not less than the previous append's.
        rewards : numpy.ndarray
            ``(num_envs,)`` rewards (any real dtype; stored as float32).
        dones : numpy.ndarray
            ``(num_envs,)`` done flags (uint8 or bool; nonzero counts as done).
        truncateds : numpy.ndarray or None, optional
            ``(num_envs,)`` truncated flags, or None when the engine has none.

        Raises
        ------
        HistoryError
            On a wrong shape or dtype, a ``frame_seq`` that does not increase or
            a ``t`` that goes back. Nothing is recorded then.
        """
        if type(frame_seq) is int:  # the session's case (60 times a second): no further look at the type
            seq = frame_seq
        elif isinstance(frame_seq, bool):
            raise HistoryError(f"frame_seq must be an integer, got {frame_seq!r}")
        else:
            try:
                seq = operator.index(frame_seq)
            except TypeError:
                raise HistoryError(f"frame_seq must be an integer, got {type(frame_seq).__name__}") from None
        if seq < 0 or seq >= 1 << 63:
            raise HistoryError(f"frame_seq out of range: {seq}")
        if self._last_seq is not None and seq <= self._last_seq:
            raise HistoryError(
                f"frame_seq {seq} does not follow {self._last_seq}; clear() the history for a new session"
            )
        if type(t) is not float and (not isinstance(t, numbers.Real) or isinstance(t, bool)):
            raise HistoryError(f"t must be a real number, got {type(t).__name__}")
        when = float(t)
        if not math.isfinite(when) or when < self._last_t:
            raise HistoryError(f"t must be finite and not go back, got {when} after {self._last_t}")
        rew = self._check_vector("rewards", rewards)
        don = self._check_vector("dones", dones)
        tru = None if truncateds is None else self._check_vector("truncateds", truncateds)

        skipped = 0 if self._last_seq is None else seq - self._last_seq - 1
        i = self._count % self._cap
        r = self._count % self._rcap
        row = self._raster[r]
        row[...] = rew
        self._raster_seq[r] = seq
        self._raster_t[r] = when

        self._seq[i] = seq
        self._t[i] = when
        self._dones[i] = np.count_nonzero(don)
        self._truncs[i] = 0 if tru is None else np.count_nonzero(tru)
        self._skipped[i] = skipped
        k = self._sel_ids.shape[0]
        if k:
            self._sel[:k, i] = row[self._sel_ids]

        self._count += 1
        if self._count - self._stats_done >= self._stats_batch:
            self._flush_stats()
        self._last_seq = seq
        self._last_t = when
        if skipped:
            self._skipped_total += skipped
            self._last_skip_count = self._count

    def _flush_stats(self) -> None:
        """Write the statistics of the appends that have none yet, from their raster rows, all at once.

        Per frame, numpy's per-call overhead is most of the cost of five
        numbers over a few hundred envs: the rows wait (at most
        ``_stats_batch``, never more than the raster holds) and are reduced
        together here, before the next read or when the batch is full.
        """
        done, count = self._stats_done, self._count
        if count <= done:
            return
        appends = np.arange(done, count)
        rows = self._raster[appends % self._rcap]  # a copy: partitioned in place below
        ring = appends % self._cap
        self._stats_done = count
        with np.errstate(invalid="ignore", over="ignore"):  # +Inf and -Inf in one row: a NaN mean, said below
            means = rows.mean(axis=1, dtype=np.float64)
        with_bad = ~np.isfinite(means)  # a NaN or an Inf among the rewards (an overflow needs 1e308s)
        if with_bad.any():
            for j in np.flatnonzero(with_bad):
                self._write_stats(int(ring[j]), rows[j])
            keep = ~with_bad
            rows, means, ring = rows[keep], means[keep], ring[keep]
            if rows.shape[0] == 0:
                return
        rows.partition(self._kth, axis=1)
        self._mean[ring] = means
        self._min[ring] = rows[:, 0]
        self._max[ring] = rows[:, -1]
        for stat, (lo, hi, frac) in zip((self._p10, self._p90), self._interp, strict=True):
            a = rows[:, lo].astype(np.float64)
            stat[ring] = a + (rows[:, hi].astype(np.float64) - a) * frac if frac else a

    def _write_stats(self, i: int, row: np.ndarray) -> None:
        """One frame's statistics where a reward is NaN or ±Inf: over the finite values (the alarms count the rest)."""
        values = row[np.isfinite(row)]
        if values.shape[0] == 0:
            for ring in (self._mean, self._min, self._max, self._p10, self._p90):
                ring[i] = np.nan
            return
        mean = float(values.mean(dtype=np.float64))
        kth, interp = self._plan_percentiles(values.shape[0])
        values.partition(kth)
        self._mean[i] = mean
        self._min[i] = values[0]
        self._max[i] = values[-1]
        for ring, (lo, hi, frac) in zip((self._p10, self._p90), interp, strict=True):
            a = float(values[lo])
            b = float(values[hi])
            ring[i] = a + (b - a) * frac if frac else a

    def set_selected(self, env_ids: Iterable[int]) -> None:
        """Choose the envs whose full-resolution reward series are kept.

        Envs that stay selected keep their series; a newly selected env gets
        the values the raster still holds and NaN before them.

        Parameters
        ----------
        env_ids : iterable of int
            At most :data:`MAX_SELECTED` distinct env indices (duplicates are
            dropped, order kept).

        Raises
        ------
        HistoryError
            On a non-integer, an index out of range or too many envs.
        """
        if isinstance(env_ids, str | bytes):
            raise HistoryError("env_ids must be an iterable of integers")
        try:
            iterator = iter(env_ids)
        except TypeError:
            raise HistoryError("env_ids must be an iterable of integers") from None
        # Duplicates are allowed but bounded: a huge iterable is refused, never consumed whole.
        items = list(itertools.islice(iterator, _MAX_SELECTION_ITEMS + 1))
        if len(items) > _MAX_SELECTION_ITEMS:
            raise HistoryError(f"at most {MAX_SELECTED} envs can be selected")
        ids: list[int] = []
        for item in items:
            if isinstance(item, bool):
                raise HistoryError(f"env id must be an integer, got {item!r}")
            try:
                env = operator.index(item)
            except TypeError:
                raise HistoryError(f"env id must be an integer, got {type(item).__name__}") from None
            if not 0 <= env < self._n:
                raise HistoryError(f"env id {env} out of range 0..{self._n - 1}")
            if env not in ids:
                ids.append(env)
        if len(ids) > MAX_SELECTED:
            raise HistoryError(f"at most {MAX_SELECTED} envs can be selected, got {len(ids)}")

        old = {int(env): slot for slot, env in enumerate(self._sel_ids)}
        kept = self._sel[: len(old)].copy()
        held = min(self._count, self._cap, self._rcap)
        appends = np.arange(self._count - held, self._count)
        for slot, env in enumerate(ids):
            if env in old:
                self._sel[slot] = kept[old[env]]
            else:
                self._sel[slot] = np.nan
                if held:
                    self._sel[slot, appends % self._cap] = self._raster[appends % self._rcap, env]
        self._sel[len(ids) :] = np.nan
        self._sel_ids = np.asarray(ids, dtype=np.intp)
        # Colour slots stick to their envs while they stay selected; a newly selected env takes the lowest
        # free one. By place in the selection, a Ctrl-click on a selected env (it becomes the last) re-dealt
        # every colour, and a double-click that left one env gave it the first.
        slots = {env: slot for env, slot in self._colour_slots.items() if env in ids}
        for env in ids:
            if env not in slots:
                used = set(slots.values())
                slots[env] = next(c for c in itertools.count() if c not in used)
        self._colour_slots = slots

    def colour_slot(self, env: int) -> int:
        """The colour slot of selected env ``env`` (0 for an env not selected): kept while it stays selected.

        Views colour an env's curve, frame and dots by it (``palette.env_colour``).
        """
        return self._colour_slots.get(int(env), 0)

    def clear(self) -> None:
        """Forget every entry (the selection stays); :attr:`generation` changes."""
        self._reset_counters()
        self._sel[...] = np.nan
        self._generation += 1

    # --------------------------------------------------------------- reading
    def _held_since(self, seconds: float | None, t_ring: np.ndarray, held: int) -> int:
        if seconds is None or held == 0:
            return held
        return ring_count_since(t_ring, held, self._count, self._last_t - seconds)

    @staticmethod
    def _check_seconds(seconds: Any) -> float | None:
        if seconds is None:
            return None
        if not isinstance(seconds, numbers.Real) or isinstance(seconds, bool):
            raise HistoryError(f"seconds must be a real number or None, got {type(seconds).__name__}")
        value = float(seconds)
        if math.isnan(value) or value < 0:
            raise HistoryError(f"seconds must be >= 0, got {value}")
        return value

    def window(self, seconds: float | None = None, *, raster: bool = True) -> HistoryView:
        """Copy the entries of the last ``seconds`` (by ``t``), oldest first.

        Parameters
        ----------
        seconds : float or None, optional
            Keep entries with ``t >= t_newest - seconds``; None keeps all held.
        raster : bool, optional
            Also copy the raster rows of that window (``raster_capacity`` x
            ``num_envs`` floats at most). A viewer that keeps its own reduced
            raster passes False and reads rows with :meth:`raster_tail`.

        Returns
        -------
        HistoryView

        Raises
        ------
        HistoryError
            If ``seconds`` is negative or not a number.
        """
        secs = self._check_seconds(seconds)
        self._flush_stats()
        count = self._count
        m = self._held_since(secs, self._t, min(count, self._cap))
        k = self._sel_ids.shape[0]
        sel_block = ring_tail(self._sel[:k], m, count, axis=1) if k else None
        selected = (
            {}
            if sel_block is None
            else {int(env): np.ascontiguousarray(sel_block[slot]) for slot, env in enumerate(self._sel_ids)}
        )
        if raster:
            rm = self._held_since(secs, self._raster_t, min(count, self._rcap))
            raster_rows = ring_tail(self._raster, rm, count)
            raster_seq = ring_tail(self._raster_seq, rm, count)
            raster_t = ring_tail(self._raster_t, rm, count)
        else:
            raster_rows = np.empty((0, self._n), np.float32)
            raster_seq = np.empty(0, np.int64)
            raster_t = np.empty(0, np.float64)
        return HistoryView(
            frame_seq=ring_tail(self._seq, m, count),
            t=ring_tail(self._t, m, count),
            mean=ring_tail(self._mean, m, count),
            min=ring_tail(self._min, m, count),
            max=ring_tail(self._max, m, count),
            p10=ring_tail(self._p10, m, count),
            p90=ring_tail(self._p90, m, count),
            done_count=ring_tail(self._dones, m, count),
            trunc_count=ring_tail(self._truncs, m, count),
            skipped=ring_tail(self._skipped, m, count),
            selected=selected,
            raster=raster_rows,
            raster_frame_seq=raster_seq,
            raster_t=raster_t,
            num_envs=self._n,
        )

    def raster_tail(self, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Copy the newest raster rows, oldest first.

        Parameters
        ----------
        rows : int
            How many rows are wanted; fewer come back when fewer are held.

        Returns
        -------
        frame_seq : numpy.ndarray
            int64 frame of each row.
        t : numpy.ndarray
            float64 poll time of each row.
        raster : numpy.ndarray
            float32 ``(rows, num_envs)`` rewards.

        Raises
        ------
        HistoryError
            If ``rows`` is not a non-negative integer.
        """
        if isinstance(rows, bool):
            raise HistoryError(f"rows must be an integer, got {rows!r}")
        try:
            wanted = operator.index(rows)
        except TypeError:
            raise HistoryError(f"rows must be an integer, got {type(rows).__name__}") from None
        if wanted < 0:
            raise HistoryError(f"rows must be >= 0, got {wanted}")
        m = min(wanted, self._count, self._rcap)
        return (
            ring_tail(self._raster_seq, m, self._count),
            ring_tail(self._raster_t, m, self._count),
            ring_tail(self._raster, m, self._count),
        )

    def to_csv(
        self,
        path_or_file: str | os.PathLike[str] | TextIO,
        seconds: float | None = None,
        *,
        wall_offset: float | None = None,
    ) -> int:
        """Write the scalar series (and selected envs) as CSV, oldest first.

        Columns: ``frame_seq,t_monotonic_s,wall_time,mean,min,max,p10,p90,dones,truncateds``
        then ``env_<id>`` for each selected env. ``t_monotonic_s`` is the poll
        time on the monotonic clock the history was fed with; ``wall_time`` the
        same instant as UTC ISO 8601 with milliseconds. Floats are written so
        that they parse back to the same float64 (``nan`` where missing).

        Parameters
        ----------
        path_or_file : str, os.PathLike or text file
            Where to write; a path is created or truncated.
        seconds : float or None, optional
            Limit to the last ``seconds`` as in :meth:`window`.
        wall_offset : float or None, optional
            ``time.time() - time.monotonic()``: added to ``t`` to give wall time
            (default: measured now, right for a history fed with ``time.monotonic``).

        Returns
        -------
        int
            Data rows written.

        Raises
        ------
        HistoryError
            If ``seconds`` is invalid or the file cannot be written.
        """
        view = self.window(seconds, raster=False)
        offset = time.time() - time.monotonic() if wall_offset is None else float(wall_offset)
        header = ["frame_seq", "t_monotonic_s", "wall_time", "mean", "min", "max", "p10", "p90", "dones", "truncateds"]
        header += [f"env_{env}" for env in view.selected]
        wall = [_iso(t + offset) for t in view.t.tolist()]
        columns = [
            view.frame_seq.tolist(),
            view.t.tolist(),
            wall,
            view.mean.tolist(),
            view.min.tolist(),
            view.max.tolist(),
            view.p10.tolist(),
            view.p90.tolist(),
            view.done_count.tolist(),
            view.trunc_count.tolist(),
        ]
        columns += [series.astype(np.float64).tolist() for series in view.selected.values()]

        def write(handle: TextIO) -> None:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(zip(*columns, strict=True))

        try:
            if hasattr(path_or_file, "write"):
                write(path_or_file)  # type: ignore[arg-type]
            else:
                with open(path_or_file, "w", newline="", encoding="utf-8") as handle:
                    write(handle)
        except (OSError, TypeError, ValueError) as exc:
            raise HistoryError(f"cannot write CSV: {exc}") from exc
        return len(view)
