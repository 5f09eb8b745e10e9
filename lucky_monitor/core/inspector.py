"""Observation and action inspector, and the value alarms (NaN, ±Inf, |x| > threshold).

Theory of operation
-------------------
*Alarms.* Every frame the session reads (obs and rewards, from the guarded
hot copy) and every action vector it reads in the engine's turn is checked by
:meth:`AlarmScanner.check`. The common case costs two reductions and no
allocation: ``max`` and ``min`` of the whole array, which propagate NaN, so
``-threshold <= min`` and ``max <= threshold`` proves the array finite and in
range. Only when that fails are the offending elements located
(``flatnonzero`` of ``~(|x| <= threshold)``), classified (nan, inf, large)
and counted exactly per region; at most :data:`MAX_PER_SCAN` of them per
region and frame become :class:`Alarm` values, and the recent list keeps at
most :data:`MAX_ALARMS` distinct ``(region, env, dim, kind)`` keys (the
newest frame each was seen in), so a run that goes NaN everywhere costs a
bounded amount of memory and work. ``nonfinite_total`` (per region: NaN and
±Inf values seen, the Prometheus counter ``lucky_nonfinite_total{region}``)
and ``large_total`` count every offending value, including those not listed.

*Statistics.* :func:`region_stats` computes per-dim mean, std, min and max
over envs on a consistent copy, excluding non-finite values (their count per
dim is reported beside), a heatmap envs × dims whose rows are the means of
bands of consecutive envs (at most ``max_rows`` rows, as the reward raster
does), a flag per heat cell whose band holds a non-finite value, and the
selected envs' rows. It is written against the array's own module (numpy, or
cupy for observations in CUDA memory), so only the results cross to the host.

This module is Qt-free.
"""

from __future__ import annotations

import collections
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_THRESHOLD",
    "IMAGE_KINDS",
    "KINDS",
    "MAX_ALARMS",
    "MAX_PER_SCAN",
    "REGIONS",
    "Alarm",
    "AlarmScanner",
    "AlarmState",
    "InspectorFrame",
    "RegionStats",
    "dim_names",
    "region_stats",
]

#: Regions whose values are checked, as named in alarms and in ``lucky_nonfinite_total{region=...}``.
REGIONS = ("obs", "actions", "rewards")
#: Kinds of a value alarm.
KINDS = ("nan", "inf", "large")
#: Kinds of an image-region alarm (``region == "image"``).
IMAGE_KINDS = ("constant", "duplicate", "frozen", "lag")
DEFAULT_THRESHOLD = 1e6
#: Alarm values made per region per frame (the counts are exact regardless).
MAX_PER_SCAN = 16
#: Distinct ``(region, env, dim, kind)`` keys kept in the recent list.
MAX_ALARMS = 256
#: Heatmap rows at most (bands of envs beyond this).
MAX_HEAT_ROWS = 256


@dataclass(frozen=True, slots=True)
class Alarm:
    """One offending value, or one image-region finding.

    ``region`` is ``"obs"``, ``"actions"``, ``"rewards"`` or ``"image"``;
    ``env`` the env (``None`` for the image region's ``lag``); ``dim`` the
    element of the env's vector (``None`` for rewards and images); ``kind``
    one of :data:`KINDS` or :data:`IMAGE_KINDS`; ``frame_seq`` the frame the
    value belongs to (the newest frame it was seen in). ``detail`` is a short
    human text (``"same as env 3"``, ``"lag 40 frames, 4 explained"``).
    """

    region: str
    env: int | None
    dim: int | None
    kind: str
    frame_seq: int
    detail: str = ""

    @property
    def key(self) -> tuple[str, int | None, int | None, str]:
        return (self.region, self.env, self.dim, self.kind)

    def to_json(self) -> dict[str, Any]:
        """The object ``watch --json`` lists under ``alarms``."""
        return {"region": self.region, "env": self.env, "dim": self.dim, "kind": self.kind, "frame_seq": self.frame_seq}

    def text(self, names: Sequence[str] = ()) -> str:
        """One line for a view, e.g. ``frame 812  obs  env 5  dim 3 (pole_sin)  nan``."""
        where = "" if self.env is None else f"  env {self.env}"
        if self.dim is not None:
            name = names[self.dim] if self.dim < len(names) else ""
            where += f"  dim {self.dim}" + (f" ({name})" if name else "")
        extra = f"  {self.detail}" if self.detail else ""
        return f"frame {self.frame_seq}  {self.region}{where}  {self.kind}{extra}"


@dataclass(frozen=True, slots=True)
class AlarmState:
    """The alarms as of one Tick.

    ``recent``: distinct alarms, oldest first, each with the newest frame it
    was seen in (at most :data:`MAX_ALARMS`). ``new``: those raised by this
    step (bounded). ``nonfinite_total`` / ``large_total``: values seen per
    region of :data:`REGIONS` since the attach (``lucky_nonfinite_total``).
    ``image_total``: image findings per kind. ``image_flags``: env → the
    image kinds flagged at the last check (badges on the grid). ``version``
    moves whenever any of it changed.
    """

    recent: tuple[Alarm, ...] = ()
    new: tuple[Alarm, ...] = ()
    nonfinite_total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REGIONS, 0))
    large_total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REGIONS, 0))
    image_total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(IMAGE_KINDS, 0))
    image_flags: dict[int, tuple[str, ...]] = field(default_factory=dict)
    image_note: str = ""
    threshold: float = DEFAULT_THRESHOLD
    version: int = 0


class AlarmScanner:
    """Checks arrays for NaN, ±Inf and ``|x| > threshold``; keeps bounded alarms and exact counts.

    Parameters
    ----------
    threshold
        A finite value whose magnitude exceeds this is ``large``.
    keep
        Distinct alarm keys kept (oldest dropped first).
    per_scan
        Alarm values made per region per check.
    """

    def __init__(
        self, threshold: float = DEFAULT_THRESHOLD, *, keep: int = MAX_ALARMS, per_scan: int = MAX_PER_SCAN
    ) -> None:
        if not (threshold > 0 and math.isfinite(threshold)):
            raise ValueError(f"alarm threshold must be a positive finite number, got {threshold!r}")
        self.threshold = float(threshold)
        self.keep = max(1, int(keep))
        self.per_scan = max(1, int(per_scan))
        self.nonfinite_total = dict.fromkeys(REGIONS, 0)
        self.large_total = dict.fromkeys(REGIONS, 0)
        self.image_total = dict.fromkeys(IMAGE_KINDS, 0)
        self.image_flags: dict[int, tuple[str, ...]] = {}
        self.image_note = ""
        self._recent: collections.OrderedDict[tuple[str, int | None, int | None, str], Alarm] = (
            collections.OrderedDict()
        )
        self._new: list[Alarm] = []
        self._state: AlarmState | None = None
        self.version = 0

    def check(self, region: str, frame_seq: int, values: Any) -> int:
        """Check ``values`` (``(envs, dims)``, or ``(envs,)`` for rewards) of ``region``; return offending count.

        ``values`` may be a numpy or a cupy array; only the offending
        indices (at most ``per_scan`` of them) cross to the host.
        """
        if values.size == 0:
            return 0
        thr = self.threshold
        hi, lo = float(values.max()), float(values.min())  # NaN propagates through both
        if lo >= -thr and hi <= thr:
            return 0
        flat = values.reshape(-1)
        bad = ~(abs(flat) <= thr)  # True for NaN, ±Inf and large
        idx = bad.nonzero()[0]
        count = int(idx.size)
        if count == 0:
            return 0
        picked = flat[idx]
        n_nan = int((picked != picked).sum())
        n_inf = int((abs(picked) == math.inf).sum())
        self.nonfinite_total[region] += n_nan + n_inf
        self.large_total[region] += count - n_nan - n_inf
        first = _host(idx[: self.per_scan])
        first_vals = _host(picked[: self.per_scan])
        cols = 1 if values.ndim == 1 else int(values.shape[1])
        for i, v in zip(first.tolist(), first_vals.tolist(), strict=True):
            kind = "nan" if v != v else ("inf" if math.isinf(v) else "large")
            env, dim = divmod(int(i), cols)
            self._raise(Alarm(region, env, None if values.ndim == 1 else dim, kind, int(frame_seq)))
        return count

    def image(self, alarms: Sequence[Alarm], flags: dict[int, tuple[str, ...]], note: str = "") -> None:
        """Record one image-region check: its findings and the per-env badges."""
        for a in alarms:
            self.image_total[a.kind] = self.image_total.get(a.kind, 0) + 1
            self._raise(a)
        if flags != self.image_flags or note != self.image_note:
            self.image_flags = dict(flags)
            self.image_note = note
            self.version += 1

    def _raise(self, alarm: Alarm) -> None:
        recent = self._recent
        key = alarm.key
        if key in recent:
            del recent[key]
        recent[key] = alarm
        while len(recent) > self.keep:
            recent.popitem(last=False)
        if len(self._new) < self.keep:
            self._new.append(alarm)
        self.version += 1

    def state(self) -> AlarmState:
        """The alarms now; the ``new`` list starts afresh after this call (unchanged: the same value)."""
        cached = self._state
        if cached is not None and not self._new and cached.version == self.version:
            return cached
        new, self._new = tuple(self._new), []
        self._state = AlarmState(
            recent=tuple(self._recent.values()),
            new=new,
            nonfinite_total=dict(self.nonfinite_total),
            large_total=dict(self.large_total),
            image_total=dict(self.image_total),
            image_flags=dict(self.image_flags),
            image_note=self.image_note,
            threshold=self.threshold,
            version=self.version,
        )
        if new:
            self._state = replace(self._state, new=())  # the next Tick repeats the state without them
            return replace(self._state, new=new)
        return self._state


def _host(a: Any) -> np.ndarray:
    """A numpy array of ``a`` (a cupy array is copied to the host; numpy is returned as is)."""
    get = getattr(a, "get", None)
    return np.asarray(get() if callable(get) else a)


@dataclass(frozen=True, slots=True)
class RegionStats:
    """Per-dim statistics of one region (obs or actions) over envs, on the host.

    ``mean``, ``std``, ``min``, ``max`` are float64 per dim over the finite
    values (NaN where a dim has none); ``nonfinite`` counts the non-finite
    values per dim. ``heat`` is ``(rows, dims)`` float32: row r is the mean of
    envs ``r*band .. (r+1)*band - 1`` (NaN where none is finite);
    ``heat_bad`` marks cells whose band holds a non-finite value. ``selected``
    are the selected envs' rows (``(k, dims)``, float32, raw) for ``envs``.
    """

    region: str
    frame_seq: int
    names: tuple[str, ...]
    mean: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray
    nonfinite: np.ndarray
    heat: np.ndarray
    heat_bad: np.ndarray
    band: int
    envs: tuple[int, ...]
    selected: np.ndarray

    @property
    def dims(self) -> int:
        return int(self.mean.shape[0])


@dataclass(frozen=True, slots=True)
class InspectorFrame:
    """What the inspector shows, refreshed at a bounded rate (``seq`` moves with each refresh).

    ``obs`` / ``actions`` are ``None`` when not read yet; ``obs_note`` /
    ``actions_note`` say why (or where the values come from: ``"GPU (CUDA
    IPC, device 0)"``). ``names_from`` is ``"GetAgentSchema"`` when the
    engine named the dims, else ``"indices"``.
    """

    seq: int
    obs: RegionStats | None
    actions: RegionStats | None
    obs_note: str
    actions_note: str
    names_from: str
    gpu: str  # "" (CPU observations), or the GPU status line


def dim_names(names: Sequence[str], sizes: Sequence[int], total: int) -> tuple[str, ...]:
    """Per-dim names from GetAgentSchema's blocks (``names[i]`` of ``sizes[i]`` elements), or indices.

    A block of one element is named as is, a longer one ``name[k]``. When the
    blocks do not add up to ``total`` (or there are none) the dims are named by
    index: a wrong name is worse than none.
    """
    if not names or len(names) != len(sizes) or sum(int(s) for s in sizes) != total:
        return tuple(str(i) for i in range(total))
    out: list[str] = []
    for n, s in zip(names, sizes, strict=True):
        s = int(s)
        out.extend([n] if s == 1 else [f"{n}[{k}]" for k in range(s)])
    return tuple(out)


def region_stats(
    region: str,
    frame_seq: int,
    values: Any,
    *,
    names: Sequence[str] = (),
    selected: Sequence[int] = (),
    max_rows: int = MAX_HEAT_ROWS,
    xp: ModuleType = np,
) -> RegionStats:
    """Statistics of ``values`` (``(envs, dims)``, numpy or cupy: pass its module as ``xp``).

    Only per-dim vectors, the heatmap and the selected rows come back to the
    host.
    """
    n, d = int(values.shape[0]), int(values.shape[1])
    finite = xp.isfinite(values)
    all_finite = bool(finite.all())
    rows = max(1, min(n, int(max_rows)))
    band = -(-n // rows)
    rows = -(-n // band)
    if all_finite:
        # numpy takes x - mean in float64 here; cupy's std(dtype=float64) of float32 does not (on an H100 it
        # was 5e-9 off numpy's, relative), so on the device the statistics come from a float64 copy.
        v = values if xp is np else values.astype(xp.float64)
        mean, std = v.mean(axis=0, dtype=xp.float64), v.std(axis=0, dtype=xp.float64)
        vmin, vmax = values.min(axis=0).astype(xp.float64), values.max(axis=0).astype(xp.float64)
        nonfinite = xp.zeros(d, xp.int64)
        clean = values
    else:
        clean = xp.where(finite, values, xp.nan).astype(xp.float32)
        v64 = clean.astype(xp.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a dim with no finite value is NaN, by design
            mean, std = xp.nanmean(v64, axis=0), xp.nanstd(v64, axis=0)
            vmin, vmax = xp.nanmin(v64, axis=0), xp.nanmax(v64, axis=0)
        nonfinite = n - finite.sum(axis=0)
    if d == 0:
        heat = xp.zeros((rows, 0), xp.float32)
        bad = xp.zeros((rows, 0), bool)
    elif all_finite and rows * band == n:
        heat = values.reshape(rows, band, d).mean(axis=1, dtype=xp.float64).astype(xp.float32)
        bad = xp.zeros((rows, d), bool)
    else:
        padded = xp.full((rows * band, d), xp.nan, xp.float32)
        padded[:n] = clean
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            heat = xp.nanmean(padded.reshape(rows, band, d), axis=1).astype(xp.float32) if band > 1 else padded
        if all_finite:
            bad = xp.zeros((rows, d), bool)
        else:
            fpad = xp.ones((rows * band, d), bool)
            fpad[:n] = finite
            bad = ~fpad.reshape(rows, band, d).all(axis=1)
    envs = tuple(e for e in dict.fromkeys(int(e) for e in selected) if 0 <= e < n)
    sel = values[list(envs)] if envs else xp.zeros((0, d), xp.float32)
    return RegionStats(
        region=region,
        frame_seq=int(frame_seq),
        names=tuple(names) if len(names) == d else tuple(str(i) for i in range(d)),
        mean=_host(mean).astype(np.float64),
        std=_host(std).astype(np.float64),
        min=_host(vmin).astype(np.float64),
        max=_host(vmax).astype(np.float64),
        nonfinite=_host(nonfinite).astype(np.int64),
        heat=_host(heat).astype(np.float32, copy=False),
        heat_bad=_host(bad).astype(bool, copy=False),
        band=band,
        envs=envs,
        selected=_host(sel).astype(np.float32, copy=False),
    )
