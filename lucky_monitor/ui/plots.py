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
"""

from __future__ import annotations

import math
import os
import time

import numpy as np
import pyqtgraph as pg
from pyqtgraph.exporters import ImageExporter
from PySide6 import QtCore, QtGui, QtWidgets

from ..core.history import History, HistoryView, ring_count_since, ring_tail
from ..protocol.errors import LuckyMonitorError
from . import palette as pal

__all__ = [
    "BAND_MODES",
    "SELECTED_COLOURS",
    "WINDOW_CHOICES",
    "BandFill",
    "ExportError",
    "PlotsPanel",
    "RasterDisplay",
    "bin_starts",
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
#: Band modes: (key, label).
BAND_MODES: tuple[tuple[str, str], ...] = (("percentile", "p10–p90"), ("minmax", "min–max"))
#: Distinct colours of the selected envs' curves, in selection order.
SELECTED_COLOURS: tuple[str, ...] = pal.ENV_COLOURS
_SAMPLES_TEXT = "values are samples: {n} frames skipped, because {cause}"
_DEFAULT_CAUSE = "not every frame reaches the 60 Hz poll"
_MIN_RASTER_BINS = 64
_TITLE_SIZE = "9pt"


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


class RasterDisplay:
    """Env-binned copy of a history's raster ring, kept up to date row by row.

    Qt-free. :meth:`sync` reduces only the rows appended since the previous
    call (all of them after a :meth:`History.clear`, a new history or a new
    binning); :meth:`image` copies the rows of a time window.
    """

    def __init__(self) -> None:
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
            rcap = history.raster_capacity
            self._ring = np.zeros((rcap, bins), np.float32)
            self._seq = np.zeros(rcap, np.int64)
            self._t = np.zeros(rcap, np.float64)
            self._count = 0
            self.version += 1
            changed = True
        new = history.frames_seen - self._count
        if new <= 0:
            return changed
        seq, t, rows = history.raster_tail(new)
        taken = rows.shape[0]
        where = np.arange(history.frames_seen - taken, history.frames_seen) % self._ring.shape[0]
        self._ring[where] = reduce_bins(rows, self._starts, "mean", axis=1)
        self._seq[where] = seq
        self._t[where] = t
        self._count = history.frames_seen
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
        held = min(self._count, self._ring.shape[0])
        m = held
        if seconds is not None and held:
            newest = self._t[(self._count - 1) % self._ring.shape[0]]
            m = ring_count_since(self._t, held, self._count, newest - seconds)
        return ring_tail(self._ring, m, self._count), ring_tail(self._seq, m, self._count)


class BandFill(pg.FillBetweenItem):
    """Fill between two curves, rebuilt once per refresh from their data.

    pyqtgraph's own :class:`~pyqtgraph.FillBetweenItem` rebuilds its path on
    each curve's change signal (twice per refresh) and joins the two edges as
    ``QPolygonF`` objects, which costs milliseconds at a thousand points. This
    one builds the closed outline straight from the numpy data with
    :func:`pyqtgraph.arrayToQPath`, one subpath per run of finite values, when
    :meth:`updatePath` is called.
    """

    def curveChanged(self) -> None:
        """Ignore the curves' change signals; the owner calls :meth:`updatePath`."""

    def updatePath(self) -> None:
        """Rebuild the fill from the two curves' current data."""
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
        xs, ys, joins = [], [], []
        for a, b in runs:
            xs += [x[a:b], x[a:b][::-1]]
            ys += [high[a:b], low[a:b][::-1]]
            join = np.ones(2 * (b - a), dtype=bool)
            join[-1] = False
            joins.append(join)
        path = pg.arrayToQPath(np.concatenate(xs), np.concatenate(ys), connect=np.concatenate(joins))
        path.setFillRule(self.fillRule())
        self.setPath(path)


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

    def __init__(self, history: History, parent: QtWidgets.QWidget | None = None, *, min_points: int = 1000) -> None:
        super().__init__(parent)
        self._history = history
        self._min_points = max(int(min_points), 1)
        self._seconds: float = WINDOW_CHOICES[2][1]
        self._band = BAND_MODES[0][0]
        self._paused = False
        self._auto_levels = True
        self._last_key: tuple | None = None
        self._curve_key: tuple | None = None
        self._view: HistoryView | None = None
        self._raster = RasterDisplay()
        self._raster_shown: tuple | None = None
        self._raster_title = ""
        self._last_update_seconds = 0.0
        self._selected_curves: dict[int, pg.PlotDataItem] = {}
        self._build_plots()
        self._build_controls()
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(self._controls)
        layout.addWidget(self.samples_label)
        layout.addWidget(self.graphics, 1)

    # ----------------------------------------------------------------- build
    def _build_plots(self) -> None:
        self.graphics = pg.GraphicsLayoutWidget()
        ci = self.graphics.ci

        # Small titles and one frame_seq label (on the raster): the plots keep their height in a small window.
        self.reward_plot = ci.addPlot(row=0, col=0)
        self.reward_plot.setLabel("left", "reward")
        self.legend = self.reward_plot.addLegend(offset=(-10, 4), brush=(0, 0, 0, 150), colCount=4)
        band_pen = pg.mkPen(pal.rgba(pal.BAND, 140), width=1)
        self.band_low = pg.PlotDataItem(pen=band_pen)
        self.band_high = pg.PlotDataItem(pen=band_pen, name=BAND_MODES[0][1])
        self.band_fill = BandFill(self.band_low, self.band_high, brush=pal.rgba(pal.BAND, 70))
        self.reward_plot.addItem(self.band_fill)
        self.reward_plot.addItem(self.band_low)
        self.reward_plot.addItem(self.band_high)
        self.mean_curve = pg.PlotDataItem(pen=pg.mkPen(pal.MEAN, width=2), name="mean")
        self.reward_plot.addItem(self.mean_curve)

        self.counts_plot = ci.addPlot(row=1, col=0)
        self.counts_plot.setLabel("left", "envs ended")
        self.counts_plot.setXLink(self.reward_plot)
        self.counts_plot.addLegend(offset=(-10, 4), brush=(0, 0, 0, 150), colCount=2)
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

        self.raster_plot = ci.addPlot(row=2, col=0)
        self.raster_plot.setTitle("reward raster", size=_TITLE_SIZE)
        self.raster_plot.setLabel("left", "env")
        self.raster_plot.setLabel("bottom", "frame_seq")
        for plot in (self.reward_plot, self.counts_plot, self.raster_plot):
            for side in ("left", "bottom"):
                plot.getAxis(side).enableAutoSIPrefix(False)  # rewards read as rewards, not "x0.001"
        self.raster_image = pg.ImageItem(axisOrder="col-major")
        self.raster_plot.addItem(self.raster_image)
        self.colorbar = pg.ColorBarItem(colorMap=pg.colormap.get("viridis"), interactive=True, rounding=1e-6)
        self.colorbar.setImageItem(self.raster_image, insert_in=self.raster_plot)
        self.colorbar.sigLevelsChangeFinished.connect(self._levels_dragged)

        ci.layout.setRowStretchFactor(0, 3)
        ci.layout.setRowStretchFactor(1, 1)
        ci.layout.setRowStretchFactor(2, 2)
        # The panel reduces and clips the data itself (see the module notes). pyqtgraph's
        # clipToView would clip to the range of the previous frame, which lags one frame
        # behind new data on the linked counts plot, and auto-downsampling would tear the band.
        for item in (self.band_low, self.band_high, self.mean_curve, self.dones_curve, self.truncs_curve):
            item.setDownsampling(auto=False)
            item.setClipToView(False)

    def _build_controls(self) -> None:
        self._controls = QtWidgets.QHBoxLayout()
        self.window_box = QtWidgets.QComboBox()
        for label, seconds in WINDOW_CHOICES:
            self.window_box.addItem(label, seconds)
        self.window_box.setCurrentIndex(2)
        self.window_box.currentIndexChanged.connect(self._window_changed)
        self.pause_button = QtWidgets.QPushButton("Pause")
        self.pause_button.setCheckable(True)
        self.pause_button.toggled.connect(self.set_paused)
        self.band_box = QtWidgets.QComboBox()
        for key, label in BAND_MODES:
            self.band_box.addItem(label, key)
        self.band_box.currentIndexChanged.connect(self._band_changed)
        self.band_box.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.band_box.setMinimumContentsLength(7)
        self.auto_levels_box = QtWidgets.QCheckBox("auto")
        self.auto_levels_box.setToolTip("scale the raster's colours to the rewards in view")
        self.auto_levels_box.setChecked(True)
        self.auto_levels_box.toggled.connect(self._auto_levels_toggled)
        self.csv_button = QtWidgets.QPushButton("CSV…")
        self.csv_button.setToolTip("export the plotted series as CSV")
        self.csv_button.clicked.connect(self._export_csv_clicked)
        self.png_button = QtWidgets.QPushButton("PNG…")
        self.png_button.setToolTip("export the plots as a PNG image")
        self.png_button.clicked.connect(self._export_png_clicked)
        self.status_label = QtWidgets.QLabel("")
        self.samples_label = QtWidgets.QLabel("")
        self.samples_label.setWordWrap(True)
        self.samples_label.setStyleSheet(f"color: {pal.WARN};")
        self.samples_label.setVisible(False)
        for widget in (
            QtWidgets.QLabel("window"),
            self.window_box,
            self.pause_button,
            QtWidgets.QLabel("band"),
            self.band_box,
            self.auto_levels_box,
            self.csv_button,
            self.png_button,
        ):
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

    def _x_span(self) -> tuple[float, float] | None:
        box = self.reward_plot.getViewBox()
        if box.autoRangeEnabled()[0]:
            return None
        low, high = box.viewRange()[0]
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
        view = history.window(self._seconds, raster=False)
        self._view = view
        self._draw_curves(view, target, span)
        self._curve_key = curve_key
        self._draw_raster(history, bins)
        self._draw_samples(history)
        self._last_update_seconds = time.perf_counter() - started
        return True

    def _draw_curves(self, view: HistoryView, target: int, span: tuple[float, float] | None) -> None:
        x = view.frame_seq.astype(np.float64)
        first, last = 0, x.shape[0]
        if span is not None and last:
            first = max(int(np.searchsorted(x, span[0], side="left")) - 1, 0)
            last = min(int(np.searchsorted(x, span[1], side="right")) + 1, x.shape[0])
        part = slice(first, last)
        starts = bin_starts(last - first, target)
        xs = reduce_bins(x[part], starts, "mean")
        low_src, high_src = (view.p10, view.p90) if self._band == "percentile" else (view.min, view.max)
        self.mean_curve.setData(xs, reduce_bins(view.mean[part], starts, "mean"))
        self.band_low.setData(xs, reduce_bins(low_src[part], starts, "min"))
        self.band_high.setData(xs, reduce_bins(high_src[part], starts, "max"))
        self.band_fill.updatePath()
        self.dones_curve.setData(xs, reduce_bins(view.done_count[part], starts, "max"))
        self.truncs_curve.setData(xs, reduce_bins(view.trunc_count[part], starts, "max"))
        self._sync_selected_curves(tuple(view.selected))
        for env, series in view.selected.items():
            self._selected_curves[env].setData(xs, reduce_bins(series[part], starts, "mean"))

    def _sync_selected_curves(self, envs: tuple[int, ...]) -> None:
        if tuple(self._selected_curves) == envs:
            return
        for curve in self._selected_curves.values():
            self.legend.removeItem(curve)
            self.reward_plot.removeItem(curve)
        self._selected_curves = {}
        for slot, env in enumerate(envs):
            colour = SELECTED_COLOURS[slot % len(SELECTED_COLOURS)]
            curve = pg.PlotDataItem(pen=pg.mkPen(colour, width=1), name=f"env {env}")
            curve.setDownsampling(auto=False)
            curve.setClipToView(False)
            self.reward_plot.addItem(curve)
            self._selected_curves[env] = curve

    def _draw_raster(self, history: History, bins: int) -> None:
        self._raster.sync(history, bins)
        shown = (self._raster.version, self._seconds, self._auto_levels)
        if shown == self._raster_shown:
            return
        self._raster_shown = shown
        image, seq = self._raster.image(self._seconds)
        if image.shape[0] == 0:
            self.raster_image.clear()
            return
        if self._auto_levels:
            low = float(np.fmin.reduce(image, axis=None))
            high = float(np.fmax.reduce(image, axis=None))
            if not (math.isfinite(low) and math.isfinite(high)):
                low, high = 0.0, 1.0
            if high <= low:
                low, high = low - 0.5, high + 0.5
            self.colorbar.setLevels((low, high))
        self.raster_image.setImage(image, autoLevels=False, levels=self.colorbar.levels())
        x0 = float(seq[0]) - 0.5
        self.raster_image.setRect(QtCore.QRectF(x0, 0.0, float(seq[-1]) + 0.5 - x0, float(history.num_envs)))
        title = f"reward raster (last {image.shape[0]} frames"
        title += ")" if self._raster.group == 1 else f", {self._raster.group} envs per row)"
        if title != self._raster_title:  # setTitle re-lays out HTML: only on change
            self._raster_title = title
            self.raster_plot.setTitle(title, size=_TITLE_SIZE)

    def set_sampling_cause(self, cause: str) -> None:
        """Why frames are skipped, as the amber note says it (the window knows: engine or monitor)."""
        if cause != getattr(self, "_sampling_cause", ""):
            self._sampling_cause = cause
            self._draw_samples(self._history)

    def _draw_samples(self, history: History) -> None:
        sampled = history.sampled
        if sampled:
            cause = getattr(self, "_sampling_cause", "") or _DEFAULT_CAUSE
            self.samples_label.setText(_SAMPLES_TEXT.format(n=history.skipped_total, cause=cause))
        self.samples_label.setVisible(sampled)

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

    def _export_csv_clicked(self) -> None:
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Export CSV", "rewards.csv", "CSV files (*.csv)")
        if not path:
            return
        try:
            rows = self.export_csv(path)
        except LuckyMonitorError as exc:
            self.status_label.setText(str(exc))
        else:
            self.status_label.setText(f"wrote {rows} rows to {os.path.basename(path)}")

    def _export_png_clicked(self) -> None:
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Export PNG", "plots.png", "PNG images (*.png)")
        if not path:
            return
        try:
            self.export_png(path)
        except LuckyMonitorError as exc:
            self.status_label.setText(str(exc))
        else:
            self.status_label.setText(f"wrote {os.path.basename(path)}")
