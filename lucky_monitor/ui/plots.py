"""Reward, done/truncated and raster plots of a :class:`~lucky_monitor.core.history.History`.

The panel draws statistics, never one curve per env: a mean curve with a
p10-p90 (or min-max) band, up to eight selected envs overlaid, done and
truncated counts per frame, and an env x time raster image.

Its cost per refresh is bounded by the screen, not by the run:

* Curves get at most about one point per horizontal pixel of the plot
  (never fewer than ``min_points``): the panel reduces the window itself, by
  bins of consecutive entries (mean for lines, lowest p10/min and highest
  p90/max for the band, highest count for dones/truncateds). pyqtgraph's own
  ``autoDownsample`` is off, because it would thin the two band edges
  independently and tear the fill between them. When the user zooms, only the
  visible span (plus one entry either side) is reduced; that is the panel's
  clip-to-view, done on the data so that the newest entry is never clipped
  by the range of the previous refresh.
* The raster keeps its own env-binned copy of the history's raster ring:
  when there are more envs than vertical pixels, envs are averaged in
  contiguous groups, and each refresh reduces only the rows appended since the
  last one. The image is re-uploaded only when a row was added or the window,
  the binning or the colour levels changed.
* :meth:`PlotsPanel.update_view` does nothing when the history has not
  changed since the last refresh, or while the panel is paused.
* Axes keep their layout: the left axes have one fixed width (so the three
  view boxes line up on the shared ``frame_seq`` axis and a longer tick label
  never re-lays out the plots), and the panel sets the visible ranges itself,
  only when the data leaves them or shrinks well inside them (see
  :func:`follow_range`), instead of letting every refresh auto-range.

Where the monitor saw no frames for a while (the engine paused, the monitor
busy or detached) the curves break: :func:`gap_starts` finds the entries that
follow such a gap and the panel inserts a NaN point there; the raster leaves
those columns empty.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyqtgraph as pg
from pyqtgraph.exporters import ImageExporter
from PySide6 import QtCore, QtGui, QtWidgets

from ..core.history import History, HistoryView, ring_count_since, ring_tail
from ..core.pacing import no_offer
from ..protocol.errors import LuckyMonitorError
from . import palette as pal
from .text_line import TextLine

__all__ = [
    "BAND_MODES",
    "WINDOW_CHOICES",
    "BandFill",
    "ExportError",
    "PlotsPanel",
    "RasterDisplay",
    "align_raster",
    "bin_starts",
    "break_gaps",
    "follow_range",
    "gap_starts",
    "reduce_bins",
]

#: Time-window choices offered by the panel: (label, seconds).
WINDOW_CHOICES: tuple[tuple[str, float], ...] = (
    ("10 s", 10.0),
    ("30 s", 30.0),
    ("1 min", 60.0),
    ("5 min", 300.0),
    ("10 min", 600.0),
)
#: Rows of the raster's reduced ring (envs binned to the plot's height): a whole minute at 60 Hz, where the
#: history keeps fewer rows of every env above 1024 envs (see ``session.raster_rows``).
RASTER_DISPLAY_ROWS = 4096
#: Legend entries a row at most (fewer where the plot is narrower).
LEGEND_MAX_COLUMNS = 6
#: Band modes: (key, label).
BAND_MODES: tuple[tuple[str, str], ...] = (("percentile", "p10–p90"), ("minmax", "min–max"))
_SAMPLES_TEXT = "values are samples: {n} frame{s} skipped in this window ({cause})"
_SAMPLES_TIP = (
    "{n} frame{s} skipped in the window shown, because {cause}: the curves and the raster are samples "
    "of the run, not every frame"
)
_RUG_TIP = (
    '. The amber ticks under "envs ended" mark where: a frame not seen may have ended envs that the plot cannot show'
)
#: The causes the note names, short (the line) and whole (its tooltip): judged from the window's own frame
#: rate against the poll's.
ENGINE_FASTER = ("engine faster than the poll", "the engine steps faster than the 60 Hz poll")
POLLS_LATE = ("late polls", "the monitor's polls came late (the engine is slower than the poll)")
#: The poll's rate: an engine whose frames come faster outruns it (frames are skipped whatever the monitor does).
_POLL_HZ = 60.0
_MIN_RASTER_BINS = 64
_TITLE_SIZE = "9pt"
#: The raster's title while it holds no sample.
_RASTER_EMPTY = "reward raster · no samples yet"
#: A step between two entries this many times the typical one is a gap (the curves break there).
GAP_FACTOR = 4.0
#: Steps shorter than this (seconds) are never a gap, however regular the sampling.
GAP_MIN_SECONDS = 0.25
#: Headroom left past the newest entry when the x range moves on (share of the span).
X_HEADROOM = 0.08
#: The y range is refitted when the data leaves it or fills less than this share of it.
Y_MIN_FILL = 0.5
#: Margin added on both sides of the data when the y range is refitted (share of the data span).
Y_MARGIN = 0.08


class ExportError(LuckyMonitorError):
    """The plots could not be written to an image file."""


def bin_starts(count: int, target: int) -> np.ndarray | None:
    """Start indices of at most ``target`` equal bins over ``count`` entries.

    Parameters
    ----------
    count : int
        Entries to reduce.
    target : int
        Most bins wanted (at least 1).

    Returns
    -------
    numpy.ndarray or None
        ``intp`` start of each bin, or None when ``count <= target`` and no
        reduction is needed.
    """
    target = max(int(target), 1)
    if count <= target:
        return None
    size = math.ceil(count / target)
    return np.arange(0, count, size, dtype=np.intp)


def reduce_bins(values: np.ndarray, starts: np.ndarray | None, how: str, axis: int = 0) -> np.ndarray:
    """Reduce consecutive bins of ``values`` along ``axis``.

    Parameters
    ----------
    values : numpy.ndarray
        Data to reduce.
    starts : numpy.ndarray or None
        Bin starts from :func:`bin_starts`; None returns ``values`` unchanged.
    how : {"mean", "min", "max"}
        The reduction; ``mean`` is NaN for a bin holding a NaN.
    axis : int, optional
        Axis to reduce.

    Returns
    -------
    numpy.ndarray
        One value per bin along ``axis`` (float64 for ``mean``).
    """
    if starts is None:
        return values
    if how == "mean":
        sums = np.add.reduceat(values, starts, axis=axis, dtype=np.float64)
        sizes = np.diff(np.append(starts, values.shape[axis])).astype(np.float64)
        shape = [1] * values.ndim
        shape[axis] = sizes.shape[0]
        return sums / sizes.reshape(shape)
    if how == "min":
        return np.minimum.reduceat(values, starts, axis=axis)
    if how == "max":
        return np.maximum.reduceat(values, starts, axis=axis)
    raise ValueError(f"unknown reduction {how!r}")


def gap_starts(frame_seq: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Indices of the entries that follow a stretch where the monitor saw no frames.

    An entry starts a gap when the step to it from the previous entry is
    :data:`GAP_FACTOR` times the typical (median) step or more, in
    ``frame_seq`` (frames skipped: the monitor was busy or the engine ran
    ahead) or in time (the engine paused, the monitor detached), and the time
    step is at least :data:`GAP_MIN_SECONDS`.

    Parameters
    ----------
    frame_seq : numpy.ndarray
        Increasing ``frame_seq`` of the entries.
    t : numpy.ndarray
        Their poll times (seconds, non-decreasing).

    Returns
    -------
    numpy.ndarray
        ``intp`` indices ``i >= 1``, ascending.
    """
    if frame_seq.shape[0] < 3:
        return np.empty(0, np.intp)
    d_seq = np.diff(frame_seq).astype(np.float64)
    d_t = np.diff(t).astype(np.float64)
    typical_seq = float(np.median(d_seq))
    typical_t = float(np.median(d_t))
    far = (d_seq >= GAP_FACTOR * max(typical_seq, 1.0)) | (d_t >= GAP_FACTOR * typical_t)
    far &= d_t >= GAP_MIN_SECONDS
    return (np.flatnonzero(far) + 1).astype(np.intp)


def break_gaps(x: np.ndarray, columns: list[np.ndarray], starts: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Insert one NaN point before each gap so that the curves break there.

    The inserted point's x is the middle of the gap (x stays finite and
    increasing); every column gets NaN.

    Returns
    -------
    x : numpy.ndarray
        float64, ``len(starts)`` longer.
    columns : list of numpy.ndarray
        float64, likewise.
    """
    if starts.shape[0] == 0:
        return x, columns
    mid = (x[starts - 1] + x[starts]) / 2.0
    x_out = np.insert(x.astype(np.float64), starts, mid)
    return x_out, [np.insert(c.astype(np.float64), starts, np.nan) for c in columns]


def align_raster(
    frame_seq: np.ndarray, rows: np.ndarray, max_columns: int, gaps: np.ndarray | None = None
) -> tuple[np.ndarray, float, float]:
    """Lay raster rows out on a uniform ``frame_seq`` axis.

    Column ``c`` covers ``step`` frames from ``frame_seq[0] + c * step``
    (``step`` = 1 when the span fits in ``max_columns``) and shows the newest
    row at or before the column's last frame (sample and hold), so the image
    lines up with curves drawn against ``frame_seq`` however irregular the
    sampling. Columns inside a gap (after the row before an entry listed in
    ``gaps``) are NaN, which draws as transparent.

    Parameters
    ----------
    frame_seq : numpy.ndarray
        Increasing ``frame_seq`` of each row.
    rows : numpy.ndarray
        ``(len(frame_seq), bins)`` values.
    max_columns : int
        Most columns wanted (the plot's width in pixels).
    gaps : numpy.ndarray or None, optional
        Row indices that follow a gap (see :func:`gap_starts`).

    Returns
    -------
    image : numpy.ndarray
        float32 ``(columns, bins)``; ``rows`` itself when the rows are one
        frame apart and fit.
    x0, x1 : float
        The image's left and right edges in ``frame_seq`` (frame centres
        ± 0.5).
    """
    first, last = int(frame_seq[0]), int(frame_seq[-1])
    span = last - first + 1
    x0 = first - 0.5
    if span == frame_seq.shape[0] and span <= max_columns:
        return rows, x0, last + 0.5
    step = max(1, math.ceil(span / max(int(max_columns), 1)))
    columns = math.ceil(span / step)
    ends = first + (np.arange(columns, dtype=np.int64) + 1) * step - 1
    held = np.searchsorted(frame_seq, ends, side="right") - 1
    image = rows[held].astype(np.float32, copy=False)
    if gaps is not None and gaps.shape[0]:
        after = np.zeros(frame_seq.shape[0] + 1, bool)
        after[gaps - 1] = True  # the row before a gap: columns past it are empty
        starts = first + np.arange(columns, dtype=np.int64) * step
        empty = after[held] & (starts > frame_seq[held])
        image[empty] = np.nan  # a fancy-indexed copy: rows are untouched
    return image, x0, x0 + columns * step


def follow_range(
    current: tuple[float, float] | None, low: float, high: float, *, floor: float | None = None
) -> tuple[float, float] | None:
    """A new y range for data spanning ``low``…``high``, or None to keep ``current``.

    The range moves only when the data leaves it or fills less than
    :data:`Y_MIN_FILL` of it, so a plot whose values wobble inside its range
    keeps its axis (no new tick labels, no re-layout).

    Parameters
    ----------
    current : tuple of float or None
        The range shown now (None: none set yet).
    low, high : float
        The data's extent (NaN when there is none).
    floor : float or None, optional
        A lower bound the range never goes below (0 for counts).
    """
    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    if current is not None:
        lo, hi = current
        if lo <= low and high <= hi and (high - low) >= Y_MIN_FILL * (hi - lo):
            return None
    span = high - low
    margin = Y_MARGIN * span if span > 0 else max(abs(high) * 0.1, 0.5)
    new_low, new_high = low - margin, high + margin
    if floor is not None:
        new_low = max(new_low, floor)
        new_high = max(new_high, floor + 1.0)
    if current is not None and current == (new_low, new_high):
        return None
    return (new_low, new_high)


class LegendSample(pg.ItemSample):
    """A legend swatch: a line for a curve, a filled box under its line for an area.

    pyqtgraph's draws a filled curve as a triangle crossed by its line, which read
    as a marker of its own beside "dones". An item may name the fill its swatch
    shows (``legend_fill``, a brush colour), for an area drawn by another item
    (the reward band's fill lies between two curves).
    """

    def paint(self, p: QtGui.QPainter, *args: Any) -> None:
        item = self.item
        if not item.isVisible():
            super().paint(p, *args)  # pyqtgraph's crossed-out eye
            return
        opts = item.opts
        pen = pg.mkPen(opts["pen"])
        fill = getattr(item, "legend_fill", None)
        if fill is None and opts.get("fillLevel") is not None and opts.get("fillBrush") is not None:
            fill = opts["fillBrush"]
        if fill is not None:
            p.setPen(QtCore.Qt.PenStyle.NoPen)
            p.setBrush(pg.mkBrush(fill))
            p.drawRect(QtCore.QRectF(2, 7, 16, 9))
            p.setPen(pen)
            p.drawLine(QtCore.QPointF(2, 7), QtCore.QPointF(18, 7))
        else:
            p.setPen(pen)
            p.drawLine(QtCore.QPointF(2, 11), QtCore.QPointF(18, 11))


class LegendRow(pg.LegendItem):
    """A legend laid out as its own row of the plot layout, above its plot (never over the data)."""

    #: Pixels between the axis and the first swatch: a swatch at the axis' own line read as drawn over it.
    GAP_PX = 6

    def __init__(self, columns: int, indent: float) -> None:
        super().__init__(colCount=columns, horSpacing=12, verSpacing=-6, labelTextSize="8pt", sampleType=LegendSample)
        self.setSizePolicy(QtWidgets.QSizePolicy.Policy.Fixed, QtWidgets.QSizePolicy.Policy.Fixed)
        # Starts where the data does, right of the axis, with a gap.
        self.layout.setContentsMargins(indent + self.GAP_PX, 0, 0, 0)

    def updateSize(self) -> None:
        """Ask the owning layout for room instead of resizing in place."""
        self.updateGeometry()


class RasterDisplay:
    """Env-binned copy of a history's raster ring, kept up to date row by row.

    Qt-free. :meth:`sync` reduces only the rows appended since the previous
    call (all of them after a :meth:`History.clear`, a new history or a new
    binning); :meth:`image` copies the rows of a time window.

    ``rows``: the reduced ring's length (``None``: the history's
    ``raster_capacity``). Longer than the history's own ring can be (1024
    rows of every env at 4096 envs), it keeps the reduced rows of a whole plot window (a minute
    at 50 Hz is 3000 polls) as long as :meth:`sync` runs before the history's
    ring laps; where it did not (a long pause), the rows held restart from
    what the history still has, never with a hole inside them.
    """

    def __init__(self, rows: int | None = None) -> None:
        self._rows = rows
        self._held = 0  # rows of the ring holding consecutive samples, the newest last
        self._key: tuple[int, ...] | None = None
        self._history: History | None = None
        self._group = 1
        self._starts: np.ndarray | None = None
        self._ring = np.zeros((0, 0), np.float32)
        self._seq = np.zeros(0, np.int64)
        self._t = np.zeros(0, np.float64)
        self._count = 0
        self.version = 0

    @property
    def group(self) -> int:
        """Envs averaged into one displayed row of the image (1: no binning)."""
        return self._group

    @property
    def bins(self) -> int:
        """Displayed env rows."""
        return int(self._ring.shape[1])

    def sync(self, history: History, max_bins: int) -> bool:
        """Bring the reduced ring up to date with ``history``.

        Parameters
        ----------
        history : History
            The source.
        max_bins : int
            Most env rows to display (the raster's height in pixels).

        Returns
        -------
        bool
            True when the reduced ring changed.
        """
        n = history.num_envs
        group = math.ceil(n / max(int(max_bins), 1))
        key = (id(history), history.generation, n, history.raster_capacity, group)
        changed = False
        if key != self._key or history is not self._history:
            self._key = key
            self._history = history
            self._group = group
            self._starts = starts = None if group == 1 else np.arange(0, n, group, dtype=np.intp)
            bins = n if starts is None else starts.shape[0]
            rcap = history.raster_capacity if self._rows is None else max(int(self._rows), history.raster_capacity)
            self._ring = np.zeros((rcap, bins), np.float32)
            self._seq = np.zeros(rcap, np.int64)
            self._t = np.zeros(rcap, np.float64)
            self._count = 0
            self._held = 0
            self.version += 1
            changed = True
        new = history.frames_seen - self._count
        if new <= 0:
            return changed
        seq, t, rows = history.raster_tail(new)
        taken = rows.shape[0]
        ring = self._ring.shape[0]
        where = np.arange(history.frames_seen - taken, history.frames_seen) % ring
        self._ring[where] = reduce_bins(rows, self._starts, "mean", axis=1)
        self._seq[where] = seq
        self._t[where] = t
        self._count = history.frames_seen
        # Rows the history no longer had were never reduced: what is held starts after them.
        self._held = min(ring, taken if taken < new else self._held + taken)
        self.version += 1
        return True

    def image(self, seconds: float | None) -> tuple[np.ndarray, np.ndarray]:
        """Copy the reduced rows of the last ``seconds``, oldest first.

        Returns
        -------
        image : numpy.ndarray
            float32 ``(frames, bins)``.
        frame_seq : numpy.ndarray
            int64 frame of each row.
        """
        rows, seq, _ = self.window(seconds)
        return rows, seq

    def window(self, seconds: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Like :meth:`image`, plus the poll time of each row (float64 seconds)."""
        held = self._held
        m = held
        if seconds is not None and held:
            newest = self._t[(self._count - 1) % self._ring.shape[0]]
            m = ring_count_since(self._t, held, self._count, newest - seconds)
        return (
            ring_tail(self._ring, m, self._count),
            ring_tail(self._seq, m, self._count),
            ring_tail(self._t, m, self._count),
        )


class BandFill(pg.FillBetweenItem):
    """Fill between two curves, rebuilt once per refresh from their data.

    pyqtgraph's own :class:`~pyqtgraph.FillBetweenItem` rebuilds its path on
    each curve's change signal (twice per refresh) and joins the two edges as
    ``QPolygonF`` objects, which costs milliseconds at a thousand points. This
    one builds the closed outline straight from the numpy data with
    :func:`pyqtgraph.arrayToQPath`, one subpath per run of finite values, when
    :meth:`updatePath` is called.

    It paints the outline in pieces of at most :attr:`PIECE` bins, calling
    :attr:`offer` between them: Qt's rasteriser fills one outline of 1,100
    points (a band one point per pixel across a wide plot) in 2 ms, the same
    outline in nine pieces in 1.1 ms, and the pieces give the same pixels
    (neighbours share the vertical edge between them, and a pixel belongs to
    the piece its centre falls in).
    """

    #: Bins per painted piece: a fill's cost grows faster than its outline's length past a few hundred points.
    PIECE = 128

    def __init__(self, *args: object, **kwargs: object) -> None:
        #: Called between two pieces of the fill's paint (the panel offers the CPU core there).
        self.offer: Callable[[], None] = no_offer
        self._pieces: list[QtGui.QPainterPath] = []
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def pieces(self) -> list[QtGui.QPainterPath]:
        """The closed outlines :meth:`paint` fills, in order; together they make :meth:`path`."""
        return list(self._pieces)

    def paint(
        self,
        painter: QtGui.QPainter,
        option: QtWidgets.QStyleOptionGraphicsItem,
        widget: QtWidgets.QWidget | None = None,
    ) -> None:
        """Fill the band piece by piece (no outline: the two curves draw the band's edges)."""
        if self.pen().style() != QtCore.Qt.PenStyle.NoPen:
            super().paint(painter, option, widget)  # an outlined fill would show the pieces' joins
            return
        painter.setPen(QtCore.Qt.PenStyle.NoPen)
        painter.setBrush(self.brush())
        for i, piece in enumerate(self._pieces):
            if i:
                self.offer()
            painter.drawPath(piece)

    def curveChanged(self) -> None:
        """Ignore the curves' change signals; the owner calls :meth:`updatePath`."""

    def updatePath(self) -> None:
        """Rebuild the fill from the two curves' current data."""
        self._pieces = []
        if not self.curves:
            self.setPath(QtGui.QPainterPath())
            return
        x, low = self.curves[0].getData()
        x_high, high = self.curves[1].getData()
        if x is None or x_high is None or low is None or high is None or x.shape != x_high.shape or x.shape[0] < 2:
            self.setPath(QtGui.QPainterPath())
            return
        finite = np.isfinite(x) & np.isfinite(low) & np.isfinite(high)
        if finite.all():
            runs = [(0, x.shape[0])]
        else:
            edges = np.flatnonzero(np.diff(np.concatenate(([False], finite, [False])).astype(np.int8)))
            runs = [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True) if b - a >= 2]
        if not runs:
            self.setPath(QtGui.QPainterPath())
            return
        path = QtGui.QPainterPath()
        path.setFillRule(self.fillRule())
        step = max(int(self.PIECE), 1)
        for a, b in runs:
            for first in range(a, b - 1, step):
                end = min(first + step, b - 1) + 1  # a piece's last bin is the next one's first: no seam
                join = np.ones(2 * (end - first), dtype=bool)
                join[-1] = False
                xs, lo, hi = x[first:end], low[first:end], high[first:end]
                piece = pg.arrayToQPath(np.concatenate((xs, xs[::-1])), np.concatenate((hi, lo[::-1])), connect=join)
                piece.setFillRule(self.fillRule())
                self._pieces.append(piece)
                path.addPath(piece)
        self.setPath(path)


#: Scene items whose paint costs enough to be worth an offer of the core before it (measured at 256 envs,
#: one plot refresh: the band fill 1.7 ms, a curve 0.2-0.4 ms, an image 0.4 ms, an axis 0.1 ms, a text 0.04 ms);
#: the rest (view boxes, layouts, rectangles, labels) paint in microseconds.
PAINT_SEAM_TYPES: tuple[type, ...] = (
    pg.PlotCurveItem,
    pg.FillBetweenItem,
    pg.AxisItem,
    pg.ImageItem,
    pg.InfiniteLine,
    pg.LinearRegionItem,
    pg.ScatterPlotItem,
    QtWidgets.QGraphicsTextItem,
)


class SkipRug(pg.GraphicsObject):
    """Short amber ticks along the bottom of a plot, one at each place where frames were skipped.

    For the counts plot: a frame the monitor did not see may have ended envs, and a step curve
    drawn across it reads as "none ended". Positions are ``frame_seq`` values; ticks are drawn
    at a fixed screen size, one per device pixel column however many skips fall into it.
    """

    HEIGHT_PX = 6

    def __init__(self, colour: str) -> None:
        super().__init__()
        self._x = np.empty(0, np.float64)
        self._pen = QtGui.QPen(QtGui.QColor(colour), 1.0)
        self._pen.setCosmetic(True)
        #: ticks drawn by the last paint (diagnostics)
        self.last_drawn = 0

    def set_positions(self, x: np.ndarray) -> None:
        """Tick at each of ``x`` (``frame_seq``; any order)."""
        x = np.asarray(x, np.float64)
        if x.shape == self._x.shape and np.array_equal(x, self._x):
            return
        self.prepareGeometryChange()
        self._x = x
        self.update()

    @property
    def positions(self) -> np.ndarray:
        return self._x

    def viewRangeChanged(self) -> None:
        self.prepareGeometryChange()  # the bounding rect spans the view's height

    def boundingRect(self) -> QtCore.QRectF:
        vb = self.getViewBox()
        if not self._x.shape[0] or vb is None:
            return QtCore.QRectF()
        (_, _), (y0, y1) = vb.viewRange()
        x0, x1 = float(self._x.min()), float(self._x.max())
        return QtCore.QRectF(x0 - 1.0, y0, x1 - x0 + 2.0, y1 - y0)

    def paint(self, painter: QtGui.QPainter, *args: Any) -> None:
        self.last_drawn = 0
        vb = self.getViewBox()
        if not self._x.shape[0] or vb is None:
            return
        (vx0, vx1), (y0, _) = vb.viewRange()
        tr = painter.worldTransform()
        if vx1 <= vx0:
            return
        shown = self._x[(self._x >= vx0) & (self._x <= vx1)]
        if not shown.shape[0]:
            return
        left = tr.map(QtCore.QPointF(vx0, y0))
        right = tr.map(QtCore.QPointF(vx1, y0))
        scale = (right.x() - left.x()) / (vx1 - vx0)
        columns = np.unique(np.round(left.x() + (shown - vx0) * scale))
        bottom = left.y()
        painter.save()
        painter.resetTransform()
        painter.setPen(self._pen)
        painter.drawLines([QtCore.QLineF(x, bottom, x, bottom - self.HEIGHT_PX) for x in columns.tolist()])
        painter.restore()
        self.last_drawn = int(columns.shape[0])


def log_count(counts: np.ndarray) -> np.ndarray:
    """Where a count is drawn on the log counts axis: ``log10(1 + count)`` (0 stays at 0, 9 is at 1)."""
    return np.log10(1.0 + counts)


class CountAxis(pg.AxisItem):
    """An axis of whole counts (envs ended): no tick between two integers, however short the range.

    With :attr:`log` set, the plot's values are :func:`log_count` of the counts: ticks at 0 and
    at whole decades (1, 10, 100 ...), with 2 and 5 of each decade between where there is room,
    labelled with the counts.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log = False

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:
        levels = [(float(sp), float(off)) for sp, off in super().tickSpacing(minVal, maxVal, size) if sp >= 1]
        return levels or [(1.0, 0.0)]

    def _label_px(self) -> float:
        """Screen pixels a tick label needs along the axis (its font's height, and a little air)."""
        font = self.style.get("tickFont") or self.font()
        return QtGui.QFontMetricsF(font).height() + 2.0

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:
        if not self.log:
            return super().tickValues(minVal, maxVal, size)
        low, high = min(minVal, maxVal), max(minVal, maxVal)
        if not (math.isfinite(low) and math.isfinite(high)) or high <= low or size <= 0:
            return []
        decades = range(int(min(high, 12.0)) + 2)  # counts are at most 2^32: past that is someone's zoom
        px = size / (high - low)  # screen pixels per unit of log10(1 + count)
        room = self._label_px() / px
        kept: list[float] = []

        def take(counts: list[float]) -> list[float]:
            """Those of ``counts`` in view whose labels stay clear of the ones kept so far, taken in that order."""
            taken = []
            for v in (float(x) for x in log_count(np.asarray(counts))):
                if low <= v <= high and all(abs(v - k) >= room for k in kept):
                    kept.append(v)
                    taken.append(v)
            return sorted(taken)

        # The decades first, then 0 where its label has room (on a short axis 0 and 1 are a few pixels apart).
        levels: list[tuple[float, list[float]]] = [(1.0, take([10.0**k for k in decades] + [0.0]))]
        between = take([m * 10.0**k for k in decades for m in (2.0, 5.0)])
        if between:
            levels.append((0.5, between))
        return levels

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        if not self.log:
            return super().tickStrings(values, scale, spacing)
        return [f"{round(10.0**v - 1.0):d}" for v in values]


def seam_paints(scene: QtWidgets.QGraphicsScene, offer: Callable[[], Callable[[], None]]) -> int:
    """Make each costly item of ``scene`` call ``offer()()`` before it paints; the number of items newly seamed.

    A plot refresh is one paint of the whole view, several milliseconds of
    work the event loop cannot split; with these seams the window offers the
    core between the items (see ``core.pacing.Yielder``). ``offer`` is asked
    for the offering function at each paint, so the owner can set it later.
    Items already seamed are left as they are; an instance attribute
    ``paint`` overrides the virtual for Qt as for Python.
    """
    added = 0
    for item in scene.items():
        if not isinstance(item, PAINT_SEAM_TYPES) or getattr(item, "_lucky_seamed", False):
            continue
        paint = type(item).paint

        def seamed(painter: QtGui.QPainter, *rest: object, item: QtWidgets.QGraphicsItem = item, paint=paint) -> None:
            offer()()
            paint(item, painter, *rest)

        item.paint = seamed  # type: ignore[method-assign, assignment]
        item._lucky_seamed = True  # type: ignore[attr-defined]
        added += 1
    return added


class PlotsPanel(QtWidgets.QWidget):
    """Reward statistics, done/truncated counts and reward raster of a history.

    Parameters
    ----------
    history : History
        What to show; the panel only reads it.
    parent : QWidget or None, optional
        Qt parent.
    min_points : int, optional
        Curves are reduced to about one point per horizontal pixel but never
        below this many points.

    Notes
    -----
    The owner calls :meth:`update_view` from its poll timer; the panel never
    polls by itself.
    """

    #: The user zoomed or panned a plot (its whole view repaints: the window's CPU budget leaves that out).
    interacted = QtCore.Signal()

    def __init__(self, history: History, parent: QtWidgets.QWidget | None = None, *, min_points: int = 1000) -> None:
        super().__init__(parent)
        #: Called between the parts of a redraw: the window offers the CPU core there (core.pacing.Yielder).
        self.offer: Callable[[], None] = no_offer
        self._history = history
        self._min_points = max(int(min_points), 1)
        self._seconds: float = WINDOW_CHOICES[2][1]
        self._band = BAND_MODES[0][0]
        self._paused = False
        self._auto_levels = True
        self._last_key: tuple | None = None
        self._curve_key: tuple | None = None
        self._view: HistoryView | None = None
        self._raster = RasterDisplay(RASTER_DISPLAY_ROWS)
        self._raster_shown: tuple | None = None
        self._raster_title = _RASTER_EMPTY
        self._last_update_seconds = 0.0
        #: ``(title, default file name, filter) -> path or None``: the save dialog the CSV… and PNG… buttons use
        #: (the window sets its own, which opens in the last folder used); ``None``: Qt's, in the working directory.
        self.ask_path: Callable[[str, str, str], str | None] | None = None
        self._selected_curves: dict[int, pg.PlotDataItem] = {}
        self._curve_slots: tuple[int, ...] = ()  # the colour slot of each selected curve (History.colour_slot)
        self._held_text: str | None = None
        self._samples_note: tuple[str, str] | None = None  # the skipped-frames note: (line, tooltip)
        self._build_plots()
        self._build_controls()
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(self._controls)
        layout.addWidget(self.samples_label)
        layout.addWidget(self.graphics, 1)
        self._seam_paints()

    def _seam_paints(self) -> None:
        """The core is offered (:attr:`offer`) before each costly item's paint (see :func:`seam_paints`)."""
        seam_paints(self.graphics.scene(), lambda: self.offer)

    # ----------------------------------------------------------------- build
    def _build_plots(self) -> None:
        self.graphics = pg.GraphicsLayoutWidget()
        ci = self.graphics.ci
        ci.setContentsMargins(2, 2, 2, 2)
        ci.layout.setVerticalSpacing(0)
        tick_font = QtGui.QFont(self.font())
        tick_font.setPointSizeF(8.0)
        metrics = QtGui.QFontMetrics(tick_font)
        # One fixed width for the three left axes: the view boxes line up on the shared
        # frame_seq axis, and a wider tick label never re-lays out the plots.
        axis_width = metrics.horizontalAdvance("-88888.8") + metrics.height() + 10

        # Rows: legend, reward plot, legend, counts plot, raster plot (+ its colour bar in column 1).
        # Legends are rows of their own, above their plot: never over the data.
        self._legend_indent = axis_width
        self._legend_room = -1.0  # the room (see _legend_width) the legend was last fitted to
        self.legend = LegendRow(LEGEND_MAX_COLUMNS, axis_width)
        self.counts_legend = LegendRow(LEGEND_MAX_COLUMNS, axis_width)
        ci.addItem(self.legend, row=0, col=0)
        self.reward_plot = ci.addPlot(row=1, col=0)
        ci.addItem(self.counts_legend, row=2, col=0)
        for legend in (self.legend, self.counts_legend):
            ci.layout.setAlignment(legend, QtCore.Qt.AlignmentFlag.AlignLeft | QtCore.Qt.AlignmentFlag.AlignVCenter)
        self.count_axis = CountAxis(orientation="left")
        self.counts_plot = ci.addPlot(row=3, col=0, axisItems={"left": self.count_axis})
        self.raster_plot = ci.addPlot(row=4, col=0)
        self.reward_plot.setLabel("left", "reward")
        self.counts_plot.setLabel("left", "envs ended")
        self.raster_plot.setLabel("left", "env")
        self.raster_plot.setLabel("bottom", "frame_seq")
        self.raster_plot.setTitle(_RASTER_EMPTY, size=_TITLE_SIZE)
        # One x axis, frame_seq, shown once under the raster; the panel sets the ranges (see follow_range).
        for plot in (self.reward_plot, self.counts_plot, self.raster_plot):
            if plot is not self.reward_plot:
                plot.setXLink(self.reward_plot)
            if plot is not self.raster_plot:
                plot.hideAxis("bottom")
            for side in ("left", "bottom"):
                axis = plot.getAxis(side)
                axis.enableAutoSIPrefix(False)  # rewards read as rewards, not "x0.001"
                axis.setStyle(tickFont=tick_font, autoExpandTextSpace=False)
            plot.getAxis("left").setWidth(axis_width)
            plot.getAxis("bottom").setHeight(metrics.height() * 2 + 8)
            plot.getViewBox().disableAutoRange()
        self._owned: dict[tuple[int, int], tuple[float, float] | None] = {}
        for box in self._boxes():
            self._owned[(id(box), 1)] = None
            box.sigRangeChangedManually.connect(lambda mask, box=box: self._user_moved(box, mask))
        self._owned[(id(self.reward_plot.getViewBox()), 0)] = None

        band_pen = pg.mkPen(pal.rgba(pal.BAND, 140), width=1)
        self.band_low = pg.PlotDataItem(pen=band_pen)
        self.band_high = pg.PlotDataItem(pen=band_pen, name=BAND_MODES[0][1])
        self.band_high.legend_fill = pal.rgba(pal.BAND, 70)  # its legend swatch: the band's area, not a line
        self.band_fill = BandFill(self.band_low, self.band_high, brush=pal.rgba(pal.BAND, 70))
        self.band_fill.offer = lambda: self.offer()  # the panel's offer, whatever the window sets it to later
        self.reward_plot.addItem(self.band_fill)
        self.reward_plot.addItem(self.band_low)
        self.reward_plot.addItem(self.band_high)
        self.mean_curve = pg.PlotDataItem(pen=pg.mkPen(pal.MEAN, width=2), name="mean")
        self.reward_plot.addItem(self.mean_curve)
        self.legend.addItem(self.band_high, BAND_MODES[0][1])
        self.legend.addItem(self.mean_curve, "mean")

        self.dones_curve = pg.PlotDataItem(
            pen=pg.mkPen(pal.DONES, width=1),
            brush=pal.rgba(pal.DONES, 90),
            fillLevel=0,
            stepMode="right",
            name="dones",
        )
        self.truncs_curve = pg.PlotDataItem(pen=pg.mkPen(pal.TRUNCATEDS, width=1), stepMode="right", name="truncateds")
        self.counts_plot.addItem(self.dones_curve)
        self.counts_plot.addItem(self.truncs_curve)
        # The dones' bars over the truncateds' line: a truncation spike a frame or two from a done (in one
        # pixel column) had hidden the done; drawn over it, the done's bar shows and the taller spike still does.
        self.dones_curve.setZValue(1)
        self.counts_legend.addItem(self.dones_curve, "dones")
        self.counts_legend.addItem(self.truncs_curve, "truncateds")
        #: where the poll missed frames, while that is the exception (late polls): their envs ended are unknown
        self.skip_rug = SkipRug(pal.WARN)
        self.counts_plot.addItem(self.skip_rug, ignoreBounds=True)

        self.raster_image = pg.ImageItem(axisOrder="col-major")
        self.raster_plot.addItem(self.raster_image)
        self.colorbar = pg.ColorBarItem(colorMap=pg.colormap.get("viridis"), interactive=True, rounding=1e-6, width=14)
        self.colorbar.setImageItem(self.raster_image)
        self.colorbar.axis.setStyle(tickFont=tick_font, autoExpandTextSpace=False)
        self.colorbar.axis.setWidth(metrics.horizontalAdvance("-8888.88") + 8)
        # The bar spans the raster's view box only: room for the raster's title above, its axis below.
        self.colorbar.layout.setContentsMargins(0, metrics.height() + 8, 0, metrics.height() * 2 + 8)
        ci.addItem(self.colorbar, row=4, col=1)
        self.colorbar.sigLevelsChangeFinished.connect(self._levels_dragged)
        self.colorbar.sigLevelsChanged.connect(lambda _bar: self._label_colorbar())

        for row, stretch in ((1, 5), (3, 5), (4, 8)):
            ci.layout.setRowStretchFactor(row, stretch)
        # The panel reduces and clips the data itself (see the module notes). pyqtgraph's
        # clipToView would clip to the range of the previous frame, which lags one frame
        # behind new data on the linked counts plot, and auto-downsampling would tear the band.
        for item in (self.band_low, self.band_high, self.mean_curve, self.dones_curve, self.truncs_curve):
            item.setDownsampling(auto=False)
            item.setClipToView(False)

    def _boxes(self) -> tuple[pg.ViewBox, ...]:
        return tuple(plot.getViewBox() for plot in (self.reward_plot, self.counts_plot, self.raster_plot))

    def _build_controls(self) -> None:
        self._controls = QtWidgets.QHBoxLayout()
        self._controls.setSpacing(4)
        self.window_box = QtWidgets.QComboBox()
        self.window_box.setToolTip("time window shown")
        for label, seconds in WINDOW_CHOICES:
            self.window_box.addItem(label, seconds)
        self.window_box.setCurrentIndex(2)
        self.window_box.currentIndexChanged.connect(self._window_changed)
        self.pause_button = QtWidgets.QToolButton()
        self.pause_button.setText("Pause")
        self.pause_button.setToolTip("freeze the plots (the history keeps recording)")
        self.pause_button.setCheckable(True)
        self.pause_button.toggled.connect(self.set_paused)
        self.band_box = QtWidgets.QComboBox()
        self.band_box.setToolTip("band drawn around the mean reward")
        for key, label in BAND_MODES:
            self.band_box.addItem(label, key)
        self.band_box.currentIndexChanged.connect(self._band_changed)
        self.band_box.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.auto_levels_box = QtWidgets.QCheckBox("auto colours")
        self.auto_levels_box.setToolTip("scale the raster's colours to the rewards in view")
        self.auto_levels_box.setChecked(True)
        self.auto_levels_box.toggled.connect(self._auto_levels_toggled)
        self.log_counts_box = QtWidgets.QCheckBox("log")
        self.log_counts_box.setToolTip(
            "envs ended on a log scale (0, 1, 10, 100 …): a truncation spike of thousands beside a few dones"
        )
        self.log_counts_box.toggled.connect(self.set_log_counts)
        self.csv_button = QtWidgets.QToolButton()
        self.csv_button.setText("CSV…")
        self.csv_button.setToolTip("export the plotted series as CSV")
        self.csv_button.clicked.connect(self._export_csv_clicked)
        self.png_button = QtWidgets.QToolButton()
        self.png_button.setText("PNG…")
        self.png_button.setToolTip("export the plots as a PNG image")
        self.png_button.clicked.connect(self._export_png_clicked)
        self.status_label = TextLine(tooltip_is_text=True)
        # One line, its room kept while hidden: the note coming and going never re-lays out the plots.
        self.samples_label = TextLine()
        self.samples_label.setStyleSheet(f"color: {pal.WARN};")
        policy = self.samples_label.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        self.samples_label.setSizePolicy(policy)
        self.samples_label.setVisible(False)
        for widget in (
            self.window_box,
            self.pause_button,
            self.band_box,
            self.auto_levels_box,
            self.log_counts_box,
            self.csv_button,
            self.png_button,
        ):
            widget.setSizePolicy(QtWidgets.QSizePolicy.Policy.Fixed, QtWidgets.QSizePolicy.Policy.Fixed)
            self._controls.addWidget(widget)
        self._controls.addWidget(self.status_label, 1)

    # ------------------------------------------------------------ properties
    @property
    def history(self) -> History:
        """The history shown."""
        return self._history

    def set_history(self, history: History) -> None:
        """Show another history (a new session); the next refresh redraws everything."""
        self._history = history
        self._last_key = None
        self._curve_key = None
        self._view = None

    @property
    def window_seconds(self) -> float:
        """The time window shown, in seconds."""
        return self._seconds

    def set_window_seconds(self, seconds: float) -> None:
        """Show the last ``seconds``; must be one of :data:`WINDOW_CHOICES`.

        Raises
        ------
        ValueError
            If ``seconds`` is not one of the choices.
        """
        for index, (_, choice) in enumerate(WINDOW_CHOICES):
            if choice == seconds:
                self.window_box.setCurrentIndex(index)
                return
        raise ValueError(f"window must be one of {[s for _, s in WINDOW_CHOICES]}, got {seconds!r}")

    @property
    def band_mode(self) -> str:
        """``"percentile"`` (p10-p90 band) or ``"minmax"``."""
        return self._band

    def set_band_mode(self, mode: str) -> None:
        """Choose the band drawn around the mean.

        Raises
        ------
        ValueError
            If ``mode`` is not a key of :data:`BAND_MODES`.
        """
        for index, (key, _) in enumerate(BAND_MODES):
            if key == mode:
                self.band_box.setCurrentIndex(index)
                return
        raise ValueError(f"band mode must be one of {[k for k, _ in BAND_MODES]}, got {mode!r}")

    @property
    def log_counts(self) -> bool:
        """Whether the envs-ended plot is drawn on a log scale (:func:`log_count`)."""
        return self.count_axis.log

    def set_log_counts(self, on: bool) -> None:
        """Draw the envs-ended plot on a log scale (``True``) or a linear one; its y range goes back to the panel."""
        on = bool(on)
        if self.log_counts_box.isChecked() != on:
            self.log_counts_box.setChecked(on)  # re-enters through toggled
            return
        if on == self.count_axis.log:
            return
        self.count_axis.log = on
        # (the axis is about 90 px high at 1280x800: "envs ended (log)" was cut there)
        self.counts_plot.setLabel("left", "ended (log)" if on else "envs ended")
        box = self.counts_plot.getViewBox()
        self._owned[(id(box), 1)] = None  # a range zoomed on the other scale means nothing on this one
        self.count_axis.picture = None
        self.count_axis.update()
        self._curve_key = None
        self._last_key = None
        if self._view is not None:
            self._draw_curves(self._view, self._curve_target(), self._x_span())
        # Fitted to the new scale now, also while paused (a paused redraw leaves the ranges alone).
        highs = [
            float(np.nanmax(y))
            for y in (self.dones_curve.getData()[1], self.truncs_curve.getData()[1])
            if y is not None and np.isfinite(y).any()
        ]
        if highs:
            self._follow_y(box, 0.0, max(highs), floor=0.0)

    @property
    def paused(self) -> bool:
        """True while the display is frozen (the history keeps recording)."""
        return self._paused

    def set_paused(self, paused: bool) -> None:
        """Freeze or unfreeze the display."""
        paused = bool(paused)
        if self.pause_button.isChecked() != paused:
            self.pause_button.setChecked(paused)  # re-enters through toggled
            return
        self._paused = paused
        self.pause_button.setText("Resume" if paused else "Pause")
        if not paused:
            self._last_key = None
            self.update_view()

    @property
    def last_update_seconds(self) -> float:
        """Duration of the last :meth:`update_view` that redrew something."""
        return self._last_update_seconds

    # -------------------------------------------------------------- refresh
    def _curve_target(self) -> int:
        width = int(self.reward_plot.getViewBox().width())
        return max(width, self._min_points)

    def _raster_bins(self) -> int:
        height = int(self.raster_plot.getViewBox().height())
        return max(height, _MIN_RASTER_BINS)

    # ---------------------------------------------------------------- ranges
    def _following(self, box: pg.ViewBox, axis: int) -> bool:
        """True while the panel owns this range: the user has not zoomed or panned it.

        The "A" button (pyqtgraph's auto-range) hands the range back to the panel.
        """
        key = (id(box), axis)
        if box.autoRangeEnabled()[axis]:
            box.enableAutoRange(axis=axis, enable=False)
            self._owned[key] = None
            return True
        if key not in self._owned:
            return False
        owned = self._owned[key]
        if owned is None:
            return True
        low, high = box.viewRange()[axis]
        tol = 1e-9 * max(abs(owned[1] - owned[0]), 1.0)
        if abs(low - owned[0]) <= tol and abs(high - owned[1]) <= tol:
            return True
        del self._owned[key]  # the user moved it: theirs until they press "A"
        return False

    def _x_following(self) -> bool:
        """The shared x range: owned through the reward box, which the other two follow."""
        master = self.reward_plot.getViewBox()
        boxes = self._boxes()
        if any(box.autoRangeEnabled()[0] for box in boxes):
            for box in boxes:
                box.enableAutoRange(axis=0, enable=False)
            self._owned[(id(master), 0)] = None
            return True
        return self._following(master, 0)

    def _user_moved(self, box: pg.ViewBox, mask: object) -> None:
        """A mouse zoom or pan: that range (x is shared) is the user's until they press "A"."""
        self.interacted.emit()
        flags = mask if isinstance(mask, list | tuple) else (True, True)
        if flags[0]:
            self._owned.pop((id(self.reward_plot.getViewBox()), 0), None)
        if len(flags) > 1 and flags[1]:
            self._owned.pop((id(box), 1), None)

    def _set_range(self, box: pg.ViewBox, axis: int, wanted: tuple[float, float]) -> None:
        if axis == 0:
            box.setXRange(*wanted, padding=0)
        else:
            box.setYRange(*wanted, padding=0)
        low, high = box.viewRange()[axis]
        self._owned[(id(box), axis)] = (float(low), float(high))

    def _follow_x(self, view: HistoryView) -> None:
        if not len(view) or not self._x_following():
            return
        x0, x1 = float(view.frame_seq[0]), float(view.frame_seq[-1])
        box = self.reward_plot.getViewBox()
        current = self._owned.get((id(box), 0))
        if current is not None:
            lo, hi = current
            if lo <= x0 - 0.5 and x1 + 0.5 <= hi and (x1 - x0 + 1) >= Y_MIN_FILL * (hi - lo):
                return
        self._set_range(box, 0, (x0 - 0.5, x1 + 0.5 + X_HEADROOM * max(x1 - x0, 10.0)))

    def _follow_y(self, box: pg.ViewBox, low: float, high: float, floor: float | None = None) -> None:
        if not self._following(box, 1):
            return
        wanted = follow_range(self._owned.get((id(box), 1)), low, high, floor=floor)
        if wanted is not None:
            self._set_range(box, 1, wanted)

    def _x_span(self) -> tuple[float, float] | None:
        if self._x_following():
            return None
        low, high = self.reward_plot.getViewBox().viewRange()[0]
        return (float(low), float(high))

    def update_view(self) -> bool:
        """Redraw from the history if it changed since the last redraw.

        Returns
        -------
        bool
            True when something was redrawn; False while paused or unchanged.
        """
        started = time.perf_counter()
        target = self._curve_target()
        span = self._x_span()
        curve_key = (target, span)
        history = self._history
        if self._paused:
            if self._view is not None and curve_key != self._curve_key:
                self._draw_curves(self._view, target, span)
                self._curve_key = curve_key
                self._last_update_seconds = time.perf_counter() - started
                return True
            return False
        bins = self._raster_bins()
        key = (
            id(history),
            history.generation,
            history.frames_seen,
            history.selected,
            self._seconds,
            self._band,
            self._auto_levels,
            bins,
            curve_key,
        )
        if key == self._last_key:
            return False
        self._last_key = key
        offer = self.offer
        view = history.window(self._seconds, raster=False)
        self._view = view
        self._follow_x(view)
        offer()
        self._draw_curves(view, target, span)
        self._curve_key = curve_key
        offer()
        if self.graphics.isVisible() and self._legend_width() != self._legend_room:  # a new width since the last fit
            self._fit_legend()
        self._draw_raster(history, bins, target)
        offer()
        self._draw_samples(view)
        # pyqtgraph applies a view box's new range when it paints, and the items that follow it then ask for
        # another paint: applied now, one refresh is one paint of the view, not two (the second ~20 ms later).
        for box in self._boxes():
            box.prepareForPaint()
        self._last_update_seconds = time.perf_counter() - started
        return True

    def _draw_curves(self, view: HistoryView, target: int, span: tuple[float, float] | None) -> None:
        x = view.frame_seq.astype(np.float64)
        first, last = 0, x.shape[0]
        if span is not None and last:
            first = max(int(np.searchsorted(x, span[0], side="left")) - 1, 0)
            last = min(int(np.searchsorted(x, span[1], side="right")) + 1, x.shape[0])
        part = slice(first, last)
        low_src, high_src = (view.p10, view.p90) if self._band == "percentile" else (view.min, view.max)
        envs = tuple(view.selected)
        series = [view.mean, low_src, high_src, view.done_count, view.trunc_count]
        series += [view.selected[env] for env in envs]
        columns = [c[part] for c in series]
        xs = x[part]
        gaps = gap_starts(view.frame_seq[part], view.t[part])
        xs, columns = break_gaps(xs, columns, gaps)
        starts = bin_starts(xs.shape[0], target)
        xs = reduce_bins(xs, starts, "mean")
        mean = reduce_bins(columns[0], starts, "mean")
        low = reduce_bins(columns[1], starts, "min")
        high = reduce_bins(columns[2], starts, "max")
        dones = reduce_bins(columns[3], starts, "max")
        truncs = reduce_bins(columns[4], starts, "max")
        if self.count_axis.log:
            dones, truncs = log_count(dones), log_count(truncs)
        offer = self.offer  # between the curves: each setData is 0.1-0.3 ms of Python at a thousand points
        offer()
        self.mean_curve.setData(xs, mean, connect="finite")
        offer()
        self.band_low.setData(xs, low, connect="finite")
        offer()
        self.band_high.setData(xs, high, connect="finite")
        offer()
        self.band_fill.updatePath()
        offer()
        self.dones_curve.setData(xs, dones, connect="finite")
        offer()
        self.truncs_curve.setData(xs, truncs, connect="finite")
        self._sync_selected_curves(envs)
        extent = [low, high, mean]
        for env, values in zip(envs, columns[5:], strict=True):
            offer()
            reduced = reduce_bins(values, starts, "mean")
            self._selected_curves[env].setData(xs, reduced, connect="finite")
            extent.append(reduced)
        if self._paused or not xs.shape[0]:
            return
        with np.errstate(all="ignore"):
            y_low = min(float(np.fmin.reduce(e)) if e.shape[0] else math.nan for e in extent)
            y_high = max(float(np.fmax.reduce(e)) if e.shape[0] else math.nan for e in extent)
            count_high = max(float(np.fmax.reduce(dones)), float(np.fmax.reduce(truncs)))
        self._follow_y(self.reward_plot.getViewBox(), y_low, y_high)
        self._follow_y(self.counts_plot.getViewBox(), 0.0, count_high, floor=0.0)

    def _sync_selected_curves(self, envs: tuple[int, ...]) -> None:
        history = self._history
        slots = tuple(history.colour_slot(env) if history is not None else i for i, env in enumerate(envs))
        if (tuple(self._selected_curves), self._curve_slots) == (envs, slots):
            return
        for curve in self._selected_curves.values():
            self.reward_plot.removeItem(curve)
        self._selected_curves = {}
        self._curve_slots = slots
        for env, slot in zip(envs, slots, strict=True):
            colour = pal.env_colour(slot)
            curve = pg.PlotDataItem(pen=pg.mkPen(colour, width=1), name=f"env {env}")
            curve.setDownsampling(auto=False)
            curve.setClipToView(False)
            self.reward_plot.addItem(curve)
            self._selected_curves[env] = curve
        self._fit_legend(force=True)
        self._seam_paints()

    def _legend_entries(self) -> list[tuple[pg.PlotDataItem, str]]:
        band = dict(BAND_MODES)[self._band]
        entries = [(self.band_high, band), (self.mean_curve, "mean")]
        return entries + [(curve, f"env {env}") for env, curve in self._selected_curves.items()]

    def _fit_legend(self, force: bool = False) -> None:
        """As many reward-legend entries a row as the plot's width holds.

        A row wider than the plot widened the layout's column: at 1280x800
        three selected envs pushed the raster's colour bar, and its labels,
        out of the dock. The legend is built anew when its column count changes.
        """
        entries = self._legend_entries()
        shown = self.graphics.isVisible()
        self._legend_room = self._legend_width()
        room = self._legend_room if shown else self.reward_plot.width()  # hidden: the view has no width yet
        if room <= 0:  # not laid out yet: a resize or a refresh brings it back
            room = math.inf
        columns = LEGEND_MAX_COLUMNS
        while True:  # the most columns whose row fits (the legend's own layout measures it)
            legend = LegendRow(columns, self._legend_indent)
            for item, text in entries:
                legend.addItem(item, text)
            width = legend.layout.effectiveSizeHint(QtCore.Qt.SizeHint.PreferredSize).width()
            if width <= room or columns == 1:
                break
            legend.clear()
            columns -= 1
        if not force and columns == self.legend.columnCount:
            legend.clear()
            return
        ci = self.graphics.ci
        ci.removeItem(self.legend)
        self.legend.clear()
        self.legend = legend
        ci.addItem(self.legend, row=0, col=0)
        ci.layout.setAlignment(self.legend, QtCore.Qt.AlignmentFlag.AlignLeft | QtCore.Qt.AlignmentFlag.AlignVCenter)
        if self.graphics.isVisible():
            # The view set the layout's geometry at its last resize, clamped to the old legend's width: again.
            self.graphics.ci.setGeometry(self.graphics.range)

    def _legend_width(self) -> float:
        """The room the reward legend's row has: the view's width less the colour bar's column.

        Not the reward plot's own width: a legend row wider than that holds the layout's column at its width,
        so the plot never narrows again for a refit to see (the colour bar went out of view instead).
        """
        bar = self.colorbar.effectiveSizeHint(QtCore.Qt.SizeHint.PreferredSize).width()
        return float(self.graphics.viewport().width()) - bar - self.graphics.ci.layout.horizontalSpacing()

    def resizeEvent(self, event: QtGui.QResizeEvent) -> None:
        super().resizeEvent(event)
        QtCore.QTimer.singleShot(0, self, self._fit_legend)  # once the plots have their new width (dropped if gone)

    def _draw_raster(self, history: History, bins: int, columns: int) -> None:
        self._raster.sync(history, bins)
        shown = (self._raster.version, self._seconds, self._auto_levels, columns)
        if shown == self._raster_shown:
            return
        self._raster_shown = shown
        rows, seq, t = self._raster.window(self._seconds)
        raster_box = self.raster_plot.getViewBox()
        if self._following(raster_box, 1):
            wanted = (0.0, float(history.num_envs))
            if self._owned.get((id(raster_box), 1)) != wanted:
                self._set_range(raster_box, 1, wanted)
        if rows.shape[0] == 0:
            self.raster_image.clear()
            if self._raster_title != _RASTER_EMPTY:  # no samples (a new attach, a detach): the title says so
                self._raster_title = _RASTER_EMPTY
                self.raster_plot.setTitle(_RASTER_EMPTY, size=_TITLE_SIZE)
            return
        image, x0, x1 = align_raster(seq, rows, columns, gap_starts(seq, t))
        if self._auto_levels:
            low = float(np.fmin.reduce(image, axis=None))
            high = float(np.fmax.reduce(image, axis=None))
            if not (math.isfinite(low) and math.isfinite(high)):
                low, high = 0.0, 1.0
            if high <= low:
                low, high = low - 0.5, high + 0.5
            self.colorbar.setLevels((low, high))
        self._label_colorbar()
        self.raster_image.setImage(image, autoLevels=False, levels=self.colorbar.levels())
        self.raster_image.setRect(QtCore.QRectF(x0, 0.0, x1 - x0, float(history.num_envs)))
        title = f"reward raster · last {rows.shape[0]} samples"
        if self._raster.group > 1:
            title += f" · {self._raster.group} envs per row"
        if title != self._raster_title:  # setTitle re-lays out HTML: only on change
            self._raster_title = title
            self.raster_plot.setTitle(title, size=_TITLE_SIZE)

    def _label_colorbar(self) -> None:
        """Three labels on the colour bar (low, middle, high): legible however short the raster is."""
        low, high = (float(v) for v in self.colorbar.levels())
        if (low, high) == getattr(self, "_colorbar_labelled", None):
            return
        self._colorbar_labelled = (low, high)
        ticks = [(v, f"{v:.3g}") for v in (low, (low + high) / 2, high)]
        self.colorbar.axis.setTicks([ticks, []])

    def _draw_samples(self, view: HistoryView | None) -> None:
        """The amber note: frames skipped in the shown window, and why.

        The cause is judged from the window itself: an engine whose frames
        came faster than the 60 Hz poll outran it; slower, a frame could be
        missed only where polls came later than a frame period.
        """
        n = 0 if view is None else int(view.skipped.sum())
        self._samples_note = None
        rug = np.empty(0, np.float64)
        if view is not None and n:
            seq, t = view.frame_seq, view.t
            span = float(t[-1] - t[0]) if t.shape[0] > 1 else 0.0
            rate = float(seq[-1] - seq[0]) / span if span > 0 else math.inf
            faster = rate > _POLL_HZ
            short, whole = ENGINE_FASTER if faster else POLLS_LATE
            plural = "" if n == 1 else "s"
            self._samples_note = (
                _SAMPLES_TEXT.format(n=n, s=plural, cause=short),
                _SAMPLES_TIP.format(n=n, s=plural, cause=whole) + ("" if faster else _RUG_TIP),
            )
            if not faster:  # (an engine faster than the poll skips frames at every poll: no place is special)
                at = np.flatnonzero(view.skipped)
                rug = seq[at].astype(np.float64) - (view.skipped[at] + 1) / 2.0  # the middle of each skipped run
        self.skip_rug.set_positions(rug)
        self._show_note()

    def set_held(self, text: str | None) -> None:
        """Say the plots hold a history that no longer grows (the segment was detached); ``None``: they follow one.

        ``text`` takes the note's line, the skipped-frames note moves to its
        tooltip. Seen: an engine that died took its curves with it, the very
        curves a researcher wanted to read.
        """
        self._held_text = text
        self._show_note()

    @property
    def held_text(self) -> str | None:
        """What :meth:`set_held` said, or ``None`` while the plots follow a live history."""
        return self._held_text

    def _show_note(self) -> None:
        held, note = self._held_text, self._samples_note
        if held is not None:
            self.samples_label.setText(held)
            self.samples_label.setToolTip(held + (f"\n\n{note[1]}" if note is not None else ""))
        elif note is not None:
            self.samples_label.setText(note[0])
            self.samples_label.setToolTip(note[1])
        self.samples_label.setVisible(held is not None or note is not None)

    # ---------------------------------------------------------------- export
    def export_csv(self, path: str | os.PathLike[str]) -> int:
        """Write the shown window's series as CSV (see :meth:`History.to_csv`).

        Returns
        -------
        int
            Data rows written.

        Raises
        ------
        HistoryError
            If the file cannot be written.
        """
        return self._history.to_csv(path, seconds=self._seconds)

    def export_png(self, path: str | os.PathLike[str]) -> None:
        """Render the three plots (as currently displayed) into a PNG file.

        Raises
        ------
        ExportError
            If the plots have no size yet or the file cannot be written.
        """
        layout = self.graphics.ci
        rect = layout.boundingRect()
        if rect.width() < 1 or rect.height() < 1:
            raise ExportError("the plots have no size yet; show the panel first")
        exporter = ImageExporter(layout)
        exporter.parameters()["width"] = int(rect.width())
        image = exporter.export(toBytes=True)
        if image is None or image.isNull() or not image.save(os.fspath(path), "PNG"):
            raise ExportError(f"cannot write PNG to {os.fspath(path)!r}")

    # ------------------------------------------------------------- handlers
    def _window_changed(self, index: int) -> None:
        self._seconds = float(WINDOW_CHOICES[index][1])

    def _band_changed(self, index: int) -> None:
        key, label = BAND_MODES[index]
        self._band = key
        sample = self.legend.getLabel(self.band_high)
        if sample is not None:
            sample.setText(label)
        if self._paused and self._view is not None:
            self._draw_curves(self._view, self._curve_target(), self._x_span())

    def _auto_levels_toggled(self, checked: bool) -> None:
        self._auto_levels = bool(checked)

    def _levels_dragged(self, _bar: object) -> None:
        self.auto_levels_box.setChecked(False)

    def _ask_path(self, title: str, default_name: str, filt: str) -> str | None:
        """The file to write: the window's dialog (its last folder) when it set :attr:`ask_path`, else Qt's."""
        if self.ask_path is not None:
            return self.ask_path(title, default_name, filt)
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, title, default_name, filt)
        return path or None

    def _export_csv_clicked(self) -> None:
        path = self._ask_path("Export CSV", "rewards.csv", "CSV files (*.csv)")
        if not path:
            return
        try:
            rows = self.export_csv(path)
        except LuckyMonitorError as exc:
            self.status_label.setText(str(exc))
        else:
            name = os.path.basename(path)  # whole in the tooltip; shorter forms where the toolbar is narrow
            self.status_label.setText(f"wrote {rows} rows to {name}", f"wrote {rows} rows", "✓ CSV")
            self.status_label.setToolTip(f"wrote {rows} rows to {path}")

    def _export_png_clicked(self) -> None:
        path = self._ask_path("Export PNG", "plots.png", "PNG images (*.png)")
        if not path:
            return
        try:
            self.export_png(path)
        except LuckyMonitorError as exc:
            self.status_label.setText(str(exc))
        else:
            self.status_label.setText(f"wrote {os.path.basename(path)}", "wrote PNG", "✓ PNG")
            self.status_label.setToolTip(f"wrote {path}")
