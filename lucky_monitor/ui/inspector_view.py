"""The inspector dock: alarms, per-dim statistics, a heatmap and the selected envs' vectors.

A view of Ticks (:meth:`InspectorView.apply`): it reads ``tick.alarms`` and
``tick.inspector`` and repaints only what changed (the alarms when their
``version`` moves, at most every :data:`ALARM_PERIOD_S`; the statistics when
the inspector's ``seq`` does, at most at the session's inspector rate). It writes nothing but through the session:
:meth:`~lucky_monitor.core.session.MonitorSession.request_names` once, so
the engine names the dims.

Parts, top to bottom: the alarm counts (``lucky_nonfinite_total`` per region,
large values, image findings) and the list of recent alarms, newest first;
the region picker (obs or actions) with where the values come from; then
two tabs: *plots* (a box per dim: min–max, ±std and the mean; the
selected envs' values as dots, and the envs × dims heatmap: each column
scaled to its own range, bands of envs beyond 256 rows averaged, cells of a
band holding NaN/Inf in magenta) and *table* (the numbers, dim by dim).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt

from ..core.history import History
from ..core.inspector import REGIONS, AlarmState, RegionStats
from ..core.session import InspectorFrame, Tick
from . import palette as pal

__all__ = ["InspectorView", "heat_rgb"]

#: Rows of the table and alarms of the list at most (the rest are counted, not shown).
MAX_TABLE_DIMS = 512
MAX_LISTED = 200
#: Seconds between repaints of the alarm list at most (a NaN that persists raises an alarm every frame).
ALARM_PERIOD_S = 0.5
#: Dim names written under the plot's x axis up to this many dims (indices beyond).
MAX_TICK_NAMES = 24
LEFT_AXIS_PX = 52  # both plots' left axes: the X link lines their views up only when these match
#: The table's columns, the count of bad values beside the name (the dim's index is the row header, which stays in
#: view when the table scrolls sideways in a narrow column).
HEADERS = ("name", "NaN/Inf", "mean", "std", "min", "max")
BAD_RGB = (255, 0, 255)  # a band holding NaN/Inf
EMPTY_RGB = (60, 60, 60)  # no finite value at all
CONSTANT_RGB = (128, 128, 128)  # a dim with one value across envs: no range to colour


def _lut() -> np.ndarray:
    return pg.colormap.get("viridis").getLookupTable(0.0, 1.0, 256, alpha=False).astype(np.uint8)


_LUT: np.ndarray | None = None


def heat_rgb(stats: RegionStats) -> np.ndarray:
    """The heatmap as ``(rows, dims, 3)`` uint8: each dim scaled to its own range, bad cells magenta."""
    global _LUT
    if _LUT is None:
        _LUT = _lut()
    heat = stats.heat.astype(np.float64)
    with np.errstate(all="ignore"):
        finite = np.isfinite(heat)
        lo = np.where(finite, heat, np.inf).min(axis=0) if heat.size else np.zeros(0)
        hi = np.where(finite, heat, -np.inf).max(axis=0) if heat.size else np.zeros(0)
        span = np.where(hi > lo, hi - lo, 1.0)
        norm = np.where(finite, np.clip((heat - lo) / span, 0.0, 1.0), 0.0)
    rgb = _LUT[(norm * 255).astype(np.int64)]
    # A dim that never changes has no range: grey, not the colour of the lowest value (read as "all at minimum").
    rgb[:, ~(hi > lo)] = CONSTANT_RGB
    rgb[~finite] = EMPTY_RGB
    rgb[stats.heat_bad] = BAD_RGB
    return np.ascontiguousarray(rgb)


def _num(v: float) -> str:
    if not math.isfinite(v):
        return "—"
    return f"{v:.4g}"


class InspectorView(QtWidgets.QWidget):
    """The inspector, fed with Ticks. ``request_names`` is called once (a session method)."""

    def __init__(
        self, request_names: Callable[[], None] | None = None, parent: QtWidgets.QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self._request_names = request_names
        self._asked_generation: int | None = None
        self._alarm_version = -1
        self._next_alarms = -math.inf
        self._inspector_seq = -1
        self._generation: int | None = None
        self._region = "obs"
        self._frame: InspectorFrame | None = None
        self._history: History | None = None  # the last Tick's: the selected envs' colour slots
        self.repaints = 0  # statistics repaints so far (tests count them)
        self._stale = False  # statistics arrived while hidden: draw them when shown
        self._on_screen = True  # see set_on_screen

        # --- alarms
        self.counts_label = QtWidgets.QLabel("no alarms")
        self.counts_label.setTextFormat(Qt.TextFormat.PlainText)
        self.counts_label.setWordWrap(True)
        self.counts_label.setToolTip(
            "NaN and ±Inf values seen per region since the attach (lucky_nonfinite_total), values beyond the "
            "threshold, and image-region findings"
        )
        self.alarm_list = QtWidgets.QListWidget()
        # Lines wrap to the dock's width: in its narrow column a long one ("… frozen tile unchanged while its
        # obs changed") had been cut behind a sideways scroll bar.
        self.alarm_list.setWordWrap(True)
        self.alarm_list.setResizeMode(QtWidgets.QListView.ResizeMode.Adjust)
        self.alarm_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.alarm_list.setTextElideMode(Qt.TextElideMode.ElideNone)
        self.alarm_list.setMinimumHeight(90)
        self.alarm_list.setToolTip("recent alarms, newest first: frame_seq, region, env, dim (name), kind")

        # --- region and notes
        self.region_combo = QtWidgets.QComboBox()
        self.region_combo.addItems(["obs", "actions"])
        self.region_combo.setToolTip("which region's statistics are shown")
        self.region_combo.currentTextChanged.connect(self._on_region)
        self.note_label = QtWidgets.QLabel("")
        self.note_label.setTextFormat(Qt.TextFormat.PlainText)
        self.note_label.setWordWrap(True)
        self.note_label.setStyleSheet(f"color: {pal.DIM};")
        # Two lines kept: switching the region to actions (a longer note) moved the tabs under the pointer.
        self.note_label.setMinimumHeight(2 * self.note_label.fontMetrics().lineSpacing())

        # --- plots: per-dim statistics and the heatmap
        pg.setConfigOptions(antialias=False)
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.setBackground(pal.CANVAS)
        ci = self.graphics.ci
        self.dim_plot: pg.PlotItem = ci.addPlot(row=0, col=0)
        self._dim_title = ""
        self._shape: tuple[object, ...] | None = None  # the statistics' shape last laid out (see _plot)
        self._set_dim_title("none (click a tile)")
        self.dim_plot.showGrid(x=False, y=True, alpha=0.2)
        self.dim_plot.setMouseEnabled(x=True, y=False)
        self.dim_plot.hideButtons()
        # One box per dim (min–max light, ±std darker, the mean a white tick): a shape joining the dims
        # suggested values between them. The selected envs' values are dots in their tile colours.
        self.box_minmax = pg.BarGraphItem(
            x=[], y0=[], y1=[], width=0.8, brush=pg.mkBrush(pal.rgba(pal.BAND, 60)), pen=None
        )
        self.box_std = pg.BarGraphItem(
            x=[], y0=[], y1=[], width=0.8, brush=pg.mkBrush(pal.rgba(pal.BAND, 150)), pen=None
        )
        self.mean_ticks = pg.PlotDataItem(pen=pg.mkPen(pal.MEAN, width=2), connect="pairs")
        self.dots = pg.ScatterPlotItem(size=6, pen=None)
        for item in (self.box_minmax, self.box_std, self.mean_ticks, self.dots):
            self.dim_plot.addItem(item)
        self.heat_plot: pg.PlotItem = ci.addPlot(row=1, col=0)
        self.heat_plot.setTitle(
            "envs × dims, each dim to its own range<br>magenta: NaN/Inf · grey: constant", size="9pt"
        )
        self.heat_plot.invertY(True)
        self.heat_plot.setLabel("left", "env")
        self.heat_plot.setMouseEnabled(x=False, y=False)
        self.heat_plot.hideButtons()
        self.heat_image = pg.ImageItem(axisOrder="row-major")
        self.heat_plot.addItem(self.heat_image)
        self.heat_plot.setXLink(self.dim_plot)
        # An X link lines the two views up on screen: with left axes of different widths the heatmap's
        # view started further right and its first dims lay left of it, out of sight (dim 0 was never shown).
        for plot in (self.dim_plot, self.heat_plot):
            plot.getAxis("left").setWidth(LEFT_AXIS_PX)
        ci.layout.setRowStretchFactor(0, 1)
        ci.layout.setRowStretchFactor(1, 1)

        # --- table
        self.table = QtWidgets.QTableWidget(0, len(HEADERS))
        self.table.setHorizontalHeaderLabels(list(HEADERS))
        self.table.verticalHeader().setDefaultAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        # In a column as narrow as the RPC panel's: a dense font, every column as wide as its text (never a
        # number cut: the view scrolls sideways instead), each number's exact value in its cell's tooltip.
        # Sized only while the table is in front (see _fill_table).
        font = QtGui.QFont(self.table.font())
        font.setPointSizeF(max(font.pointSizeF() * 0.9, 8.0))
        self.table.setFont(font)
        self.table.verticalHeader().setDefaultSectionSize(QtGui.QFontMetrics(font).height() + 4)
        header = self.table.horizontalHeader()
        header.setStretchLastSection(True)
        header.setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.ResizeToContents)
        self.table.setWordWrap(False)
        self.table.setAlternatingRowColors(True)

        self.tabs = QtWidgets.QTabWidget()
        self.tabs.addTab(self.graphics, "plots")
        self.tabs.addTab(self.table, "table")
        self._table_stats: RegionStats | None = None  # filled only while its tab is in front
        self.tabs.currentChanged.connect(self._on_tab)

        # Top to bottom in a column as narrow as the RPC panel's: the counts; the alarm list (only while it
        # holds alarms: the plots get its room otherwise); the region and its note; the tabs.
        head = QtWidgets.QHBoxLayout()
        head.addWidget(QtWidgets.QLabel("region"))
        head.addWidget(self.region_combo)
        head.addStretch(1)
        bottom = QtWidgets.QWidget()
        bl = QtWidgets.QVBoxLayout(bottom)
        bl.setContentsMargins(0, 0, 0, 0)
        bl.addLayout(head)
        bl.addWidget(self.note_label)
        bl.addWidget(self.tabs, 1)
        self.splitter = QtWidgets.QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.alarm_list)
        self.splitter.addWidget(bottom)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([140, 560])
        self.alarm_list.setVisible(False)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.counts_label)
        layout.addWidget(self.splitter, 1)

    # ------------------------------------------------------------ input
    def apply(self, tick: Tick) -> None:
        """Show ``tick``'s alarms and inspector (repainting only what changed)."""
        if tick.generation != self._generation:
            self._generation = tick.generation
            self._alarm_version = -1
            self._next_alarms = -math.inf
            self._inspector_seq = -1
            self._frame = None
            self.alarm_list.clear()
            self.alarm_list.setVisible(False)
            self._show_stats()
        if (
            self._request_names is not None
            and tick.tools.ours
            and tick.inspector is not None
            and self._asked_generation != tick.generation
        ):
            self._asked_generation = tick.generation
            self._request_names()
        if tick.alarms.version != self._alarm_version and tick.t >= self._next_alarms:
            self._alarm_version = tick.alarms.version
            self._next_alarms = tick.t + ALARM_PERIOD_S
            self._show_alarms(tick.alarms, tick.inspector)
        self._history = tick.history  # the selected envs' colour slots (History.colour_slot)
        insp = tick.inspector
        seq = -1 if insp is None else insp.seq
        if seq != self._inspector_seq:
            self._inspector_seq = seq
            self._frame = insp
            if self._on_screen and self.isVisible():
                self._show_stats()
            else:  # hidden, or a dock tab behind another: drawn when it comes to the front
                self._stale = True
        elif insp is None and tick.header is None:
            self.note_label.setText(tick.text)

    def showEvent(self, event: QtGui.QShowEvent) -> None:
        super().showEvent(event)
        if self._stale and self._on_screen:
            self._show_stats()

    def set_on_screen(self, on_screen: bool) -> None:
        """Whether the view can be seen (a dock tab behind another is "visible" to Qt but not on screen).

        Connected to its dock's ``visibilityChanged``; statistics that arrive
        while it is off screen are drawn when it comes back.
        """
        self._on_screen = bool(on_screen)
        if self._on_screen and self._stale and self.isVisible():
            self._show_stats()

    def _on_region(self, region: str) -> None:
        self._region = region
        self._show_stats()

    # ------------------------------------------------------------ alarms
    def _show_alarms(self, alarms: AlarmState, insp: InspectorFrame | None) -> None:
        nf = alarms.nonfinite_total
        large = alarms.large_total
        img = {k: v for k, v in alarms.image_total.items() if v}
        parts = [f"NaN/Inf  obs {nf.get('obs', 0)} · actions {nf.get('actions', 0)} · rewards {nf.get('rewards', 0)}"]
        if any(large.values()):
            parts.append("large (|x| > " + f"{alarms.threshold:g}) " + " · ".join(f"{r} {large[r]}" for r in REGIONS))
        if img:
            parts.append("image  " + " · ".join(f"{k} {v}" for k, v in img.items()))
        if alarms.image_note:
            parts.append(alarms.image_note)
        total = sum(nf.values()) + sum(large.values()) + sum(img.values())
        self.counts_label.setText("\n".join(parts))
        self.counts_label.setStyleSheet(f"color: {pal.BAD if total else pal.TEXT};")
        names = {
            "obs": insp.obs.names if insp is not None and insp.obs is not None else (),
            "actions": insp.actions.names if insp is not None and insp.actions is not None else (),
        }
        self.alarm_list.setUpdatesEnabled(False)
        self.alarm_list.clear()
        for a in list(reversed(alarms.recent))[:MAX_LISTED]:
            item = QtWidgets.QListWidgetItem(a.text(names.get(a.region, ())))
            item.setForeground(QtGui.QColor(pal.BAD if a.kind in ("nan", "inf") else pal.WARN))
            self.alarm_list.addItem(item)
        self.alarm_list.setUpdatesEnabled(True)
        self.alarm_list.setVisible(self.alarm_list.count() > 0)

    @property
    def alarm_lines(self) -> list[str]:
        """The alarm list's lines, newest first (for tests and the README)."""
        return [self.alarm_list.item(i).text() for i in range(self.alarm_list.count())]

    # ------------------------------------------------------------ statistics
    def _show_stats(self) -> None:
        self._stale = False
        self.repaints += 1
        insp = self._frame
        stats = None
        note = "no segment attached"
        if insp is not None:
            stats = insp.obs if self._region == "obs" else insp.actions
            note = insp.obs_note if self._region == "obs" else insp.actions_note
            if stats is not None:
                src = f"frame {stats.frame_seq} · {stats.mean.shape[0]} dims · names: {insp.names_from}"
                note = f"{src} · {note}" if note else src
        self.note_label.setText(note)
        if stats is None:
            for box in (self.box_minmax, self.box_std):
                box.setOpts(x=[], y0=[], y1=[])
            self.mean_ticks.setData([], [])
            self.dots.setData([], [])
            self.heat_image.clear()
            self.table.setRowCount(0)
            self._table_stats = None
            self._shape = None
            return
        self._plot(stats)
        self._table_stats = stats
        if self.tabs.currentWidget() is self.table:
            self._fill_table(stats)

    def _colour_slots(self, envs: tuple[int, ...] | list[int]) -> list[int]:
        """Each env's colour slot in the selection now (its place in ``envs`` where it is no longer selected)."""
        h = self._history
        chosen = set(h.selected) if h is not None else set()
        return [h.colour_slot(e) if h is not None and e in chosen else i for i, e in enumerate(envs)]

    def _plot(self, s: RegionStats) -> None:
        d = s.dims
        x = np.arange(d, dtype=np.float64)
        ok = np.isfinite(s.mean)
        xs = x[ok]
        self.box_minmax.setOpts(x=xs, y0=s.min[ok], y1=s.max[ok], width=0.8)
        self.box_std.setOpts(x=xs, y0=(s.mean - s.std)[ok], y1=(s.mean + s.std)[ok], width=0.8)
        self.mean_ticks.setData(np.repeat(xs, 2) + np.tile([-0.4, 0.4], xs.shape[0]), np.repeat(s.mean[ok], 2))
        k = len(s.envs)
        step = 0.8 / max(1, k)
        dx: list[np.ndarray] = []
        dy: list[np.ndarray] = []
        brushes: list[QtGui.QBrush] = []
        slots = self._colour_slots(s.envs)
        for i in range(k):
            values = s.selected[i].astype(np.float64)
            shown = np.isfinite(values)
            dx.append(x[shown] - 0.4 + step * (i + 0.5))
            dy.append(values[shown])
            brushes += [pg.mkBrush(pal.env_colour(slots[i]))] * int(shown.sum())
        if k:
            self.dots.setData(x=np.concatenate(dx), y=np.concatenate(dy), brush=brushes)
        else:
            self.dots.setData([], [])
        # Axes, ranges and the heatmap's rectangle change with the shape only: set again, each re-lays out.
        longest = max((len(n) for n in s.names), default=1)
        width = self.dim_plot.getViewBox().width()
        # Names under the axis only where they fit side by side (else indices; the table has the names).
        named = d <= MAX_TICK_NAMES and d * (7 * longest + 12) <= width
        rgb = heat_rgb(s)
        rows = rgb.shape[0]
        shape = (d, s.names if named else None, rows, s.band)
        self.heat_image.setImage(rgb, autoLevels=False)
        if shape != self._shape:
            self._shape = shape
            self.dim_plot.getAxis("bottom").setTicks([[(i, s.names[i]) for i in range(d)]] if named else None)
            self.dim_plot.setXRange(-0.6, d - 0.4, padding=0)
            self.heat_plot.setYRange(0, rows * s.band, padding=0)
        self.heat_image.setRect(QtCore.QRectF(-0.5, 0, d, rows * s.band))
        # Each env named in its dots' colour (its frame's in the grid, its curve's in the plots).
        named = (f'<span style="color: {pal.env_colour(c)}">env {e}</span>' for c, e in zip(slots, s.envs, strict=True))
        self._set_dim_title(", ".join(named) if s.envs else "none (click a tile)")

    def _set_dim_title(self, dots: str) -> None:
        """The per-dim plot's title, in two short lines; set only when it changes (a new title re-lays out)."""
        title = f"per dim over envs: mean, ±std, min–max<br>dots: {dots}"
        if title != self._dim_title:
            self._dim_title = title
            self.dim_plot.setTitle(title, size="9pt")

    def _on_tab(self, _index: int) -> None:
        if self.tabs.currentWidget() is self.table and self._table_stats is not None:
            self._fill_table(self._table_stats)

    def _fill_table(self, s: RegionStats) -> None:
        """Set every cell, then tell the view once.

        Each cell's change had reached the view on its own, and the header, sizing its columns to their
        contents, measured the column again for each: 55 ms a refresh for 100 dims (1,000 changes).
        The model's signals are held while the cells are set, and one ``dataChanged`` covers them all.
        """
        d = min(s.dims, MAX_TABLE_DIMS)
        t = self.table
        t.setUpdatesEnabled(False)
        t.setRowCount(d)
        t.setVerticalHeaderLabels([str(i) for i in range(d)])
        model = t.model()
        held = model.blockSignals(True)
        try:
            self._set_cells(t, s, d)
        finally:
            model.blockSignals(held)
        if d:
            model.dataChanged.emit(model.index(0, 0), model.index(d - 1, len(HEADERS) - 1), [])
        t.setUpdatesEnabled(True)

    def _set_cells(self, t: QtWidgets.QTableWidget, s: RegionStats, d: int) -> None:
        for i in range(d):
            cells = (
                s.names[i],
                str(int(s.nonfinite[i])),
                _num(float(s.mean[i])),
                _num(float(s.std[i])),
                _num(float(s.min[i])),
                _num(float(s.max[i])),
            )
            for j, text in enumerate(cells):
                item = t.item(i, j)
                if item is None:
                    item = QtWidgets.QTableWidgetItem()
                    t.setItem(i, j, item)
                item.setText(text)
                if j >= 2:
                    item.setToolTip(f"{HEADERS[j]} of dim {i} ({s.names[i]}): {float(getattr(s, HEADERS[j])[i])!r}")
                elif j == 1:
                    item.setForeground(QtGui.QColor(pal.BAD if s.nonfinite[i] else pal.TEXT))
