"""The monitor window: RpcPanel mirror, tiled image grid, plots, debug draw, command traffic.

One 60 Hz timer drives everything through :meth:`MainWindow.tick`:

* ``MonitorCore.poll()`` — counters, guarded copies. The image seqlock wraps
  the grid's fused copy-and-tile straight from the read-only mapping into the
  back buffer; only a consistent copy is presented (one ``setImage``);
* the history gets the new frame's rewards/dones/truncateds;
* the QML backend, the plots (15 Hz) and the traffic table (5 Hz) refresh
  from Qt-free state. Nothing in the 60 Hz path is per env.
"""

from __future__ import annotations

import contextlib
import os
import time

from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt

from ..core.history import History
from ..core.monitor import MonitorCore
from ..core.tiler import FrameMeta
from ..core.traffic import TrafficLog
from ..protocol.errors import LuckyMonitorError
from .backend import MonitorBackend, state_color
from .image_grid import ImageGridWidget
from .plots import PlotsPanel
from .qml_host import make_quick_widget
from .traffic_view import TrafficView

POLL_HZ = 60
PLOT_EVERY = 6  # ticks: plots refresh at 10 Hz (axis layout is their main cost) ...
PLOT_EVERY_MAX = 30  # ... and back off to 2 Hz when painting makes the poll late
TRAFFIC_EVERY = 12  # ticks: 5 Hz

class MainWindow(QtWidgets.QMainWindow):
    """The whole monitor. ``name=None`` follows the newest live segment.

    Parameters
    ----------
    name
        Segment to attach to, or ``None``.
    columns
        Image grid columns (``None``: near-square).
    settings
        Where window layout and options persist (default: the user's
        QSettings for lucky-monitor).
    """

    def __init__(self, name: str | None = None, *, columns: int | None = None,
                 settings: QtCore.QSettings | None = None) -> None:
        super().__init__()
        self.settings = settings or QtCore.QSettings("lucky-monitor", "lucky-monitor")
        self.setWindowTitle("lucky-monitor")
        self.resize(1600, 1000)
        self._meta = FrameMeta()
        self.core = MonitorCore(name, image_sink=self._image_sink)
        self.history = History(1)
        self.traffic_log: TrafficLog | None = None
        self._generation = -1
        self._ticks = 0
        self._paused = False
        self._last_title = ""
        self._tick_cost = 0.0
        self._plot_every = PLOT_EVERY
        self._since_plot = 0
        self._last_tick = 0.0
        self._gap_ema = 1.0 / POLL_HZ

        # --- centre: images over plots
        self.grid = ImageGridWidget()
        self.plots = PlotsPanel(self.history)
        self.grid.env_selected.connect(self._on_env_selected)
        split = QtWidgets.QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.grid)
        split.addWidget(self.plots)
        self.grid.setMinimumHeight(260)
        self.plots.setMinimumHeight(330)
        split.setChildrenCollapsible(False)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        split.setSizes([560, 440])
        self.splitter = split
        self.setCentralWidget(split)

        # --- QML: RpcPanel (left), debug draw (right)
        self.backend = MonitorBackend(self)
        self.panel = make_quick_widget(self.backend, "RpcPanel", self)
        self.panel.setMinimumWidth(340)
        self.draw_form = make_quick_widget(self.backend, "DebugDraw", self)
        self.draw_form.setMinimumWidth(320)
        self.traffic = TrafficView()
        self._dock("RPC panel", self.panel, Qt.DockWidgetArea.LeftDockWidgetArea)
        self._dock("Debug draw", self.draw_form, Qt.DockWidgetArea.RightDockWidgetArea)
        self._dock("Command traffic", self.traffic, Qt.DockWidgetArea.RightDockWidgetArea)

        # --- status bar: the state, large, in its colour
        self.state_label = QtWidgets.QLabel("searching")
        font = self.state_label.font()
        font.setPointSizeF(font.pointSizeF() * 1.3)
        font.setBold(True)
        self.state_label.setFont(font)
        self.rate_label = QtWidgets.QLabel("")
        self.statusBar().addWidget(self.state_label, 1)
        self.statusBar().addPermanentWidget(self.rate_label)

        self._make_actions()
        self._restore_settings(columns)

        self.timer = QtCore.QTimer(self)
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.setInterval(round(1000 / POLL_HZ))
        self.timer.timeout.connect(self.tick)
        self.timer.start()

    # ------------------------------------------------------------- layout
    def _dock(self, title: str, widget: QtWidgets.QWidget, area: Qt.DockWidgetArea) -> QtWidgets.QDockWidget:
        dock = QtWidgets.QDockWidget(title, self)
        dock.setObjectName(title.replace(" ", "_"))
        dock.setWidget(widget)
        dock.setFeatures(QtWidgets.QDockWidget.DockWidgetFeature.DockWidgetMovable
                         | QtWidgets.QDockWidget.DockWidgetFeature.DockWidgetFloatable)
        self.addDockWidget(area, dock)
        return dock

    def _make_actions(self) -> None:
        def act(text: str, keys: str | QtGui.QKeySequence.StandardKey, slot, checkable: bool = False) -> QtGui.QAction:
            a = QtGui.QAction(text, self)
            a.setShortcut(QtGui.QKeySequence(keys))
            a.setCheckable(checkable)
            a.triggered.connect(slot)
            self.addAction(a)
            return a

        self.pause_action = act("Pause display", "Space", self.set_paused, checkable=True)
        self.save_grid_action = act("Save grid PNG…", "Ctrl+S", self._save_grid_dialog)
        self.save_env_action = act("Save selected env PNG…", "Ctrl+Shift+S", self._save_env_dialog)
        self.csv_action = act("Export plot data CSV…", "Ctrl+E", self._export_csv_dialog)
        self.zoom_action = act("Reset zoom", "Ctrl+0", self.grid.reset_zoom)
        self.single_action = act("1:1 view of selected env", "Ctrl+1", self.grid.open_single_env_view)
        self.quit_action = act("Quit", "Ctrl+Q", self.close)
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        for a in (self.save_grid_action, self.save_env_action, self.csv_action, self.quit_action):
            file_menu.addAction(a)
        view_menu = menu.addMenu("&View")
        for a in (self.pause_action, self.zoom_action, self.single_action):
            view_menu.addAction(a)
        for dock in self.findChildren(QtWidgets.QDockWidget):
            view_menu.addAction(dock.toggleViewAction())

    def _restore_settings(self, columns: int | None) -> None:
        s = self.settings
        geo = s.value("window/geometry")
        if isinstance(geo, QtCore.QByteArray):
            self.restoreGeometry(geo)
        state = s.value("window/state")
        if isinstance(state, QtCore.QByteArray):
            self.restoreState(state)
        split = s.value("window/splitter")
        if isinstance(split, QtCore.QByteArray):
            self.splitter.restoreState(split)
        cols = columns if columns is not None else s.value("grid/columns", 0, type=int)
        self.grid.columns_spin.setValue(int(cols or 0))
        self._wanted_columns = int(cols or 0)
        seconds = s.value("plots/window_seconds", None)
        if seconds is not None:
            with contextlib.suppress(ValueError, TypeError, LuckyMonitorError):  # a stale setting is ignored
                self.plots.set_window_seconds(float(seconds))

    def _save_settings(self) -> None:
        s = self.settings
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/state", self.saveState())
        s.setValue("window/splitter", self.splitter.saveState())
        s.setValue("grid/columns", self.grid.columns_spin.value())
        s.setValue("plots/window_seconds", self.plots.window_seconds)
        s.sync()

    # -------------------------------------------------------------- frame
    def _image_sink(self, images) -> None:
        """Called by the core under the image seqlock: fused copy-and-tile into the back grid."""
        self.grid.copy_frame(images, self._meta)

    def _on_attach(self) -> None:
        core = self.core
        h = core.header
        assert h is not None
        self._generation = core.generation
        self._meta = FrameMeta(src_format=h.pixel_format, bottom_up=h.bottom_up)
        self.history = History(h.num_envs)
        self.plots.set_history(self.history)
        self.traffic_log = TrafficLog(core.segment)
        self.traffic.set_log(self.traffic_log)
        if self._wanted_columns and self.grid.columns_spin.value() != self._wanted_columns:
            self.grid.columns_spin.setValue(self._wanted_columns)
        if not h.has_images:
            self.grid.status_label.setText("this engine exports no image region")

    def tick(self) -> None:
        t0 = time.perf_counter()
        core = self.core
        frame = core.poll()
        if core.header is not None and core.generation != self._generation:
            self._on_attach()
        if frame is not None:
            if self.history.last_frame_seq is None or frame.frame_seq > self.history.last_frame_seq:
                self.history.append(frame.frame_seq, frame.t, frame.rewards, frame.dones, frame.truncateds)
            if frame.image_updated and not self._paused:
                c = core.counters
                self.grid.present(FrameMeta(image_seq=frame.image_seq, image_frame_seq=frame.image_frame_seq,
                                            torn=c.torn_images, src_format=self._meta.src_format,
                                            bottom_up=self._meta.bottom_up))
        self._ticks += 1
        if self._ticks % 2 == 0:
            self.backend.update(core)
        self._since_plot += 1
        if self._since_plot >= self._plot_every and not self._paused:
            self._since_plot = 0
            self.plots.update_view()
        if self._ticks % TRAFFIC_EVERY == 0 and self.traffic_log is not None and core.segment is not None:
            self.traffic_log.poll()
            if not self._paused:
                self.traffic.refresh()
        if self._ticks % 15 == 0:
            self._update_status()
        self._tick_cost = time.perf_counter() - t0
        self._adapt_plot_rate(t0)

    def _adapt_plot_rate(self, now: float) -> None:
        """Keep the poll near 60 Hz: when repaints make ticks late, refresh the plots less often.

        The data path (poll, history, images) runs every tick regardless; only
        the plots' repaint, by far the costliest paint, is thinned out.
        """
        if self._last_tick:
            self._gap_ema += 0.05 * ((now - self._last_tick) - self._gap_ema)
        self._last_tick = now
        nominal = 1.0 / POLL_HZ
        if self._gap_ema > 1.25 * nominal:
            self._plot_every = min(PLOT_EVERY_MAX, self._plot_every + 1)
        elif self._gap_ema < 1.1 * nominal:
            self._plot_every = max(PLOT_EVERY, self._plot_every - 1)

    def _update_status(self) -> None:
        st = self.core.status
        text = st.text + (f" — {st.reason}" if st.reason else "") + (f"   ({st.notice})" if st.notice else "")
        self.state_label.setText(text)
        self.state_label.setStyleSheet(f"color: {state_color(st.state)};")
        r = self.core.rates
        if self.core.header is not None:
            self.rate_label.setText(f"{r.frames_per_s:8.1f} frames/s   {r.images_per_s:5.1f} images/s   "
                                    f"poll {self._tick_cost * 1e3:4.1f} ms")
        title = f"lucky-monitor — {st.name or 'no segment'} — {st.state.value}"
        if self._paused:
            title += " (paused)"
        if title != self._last_title:
            self._last_title = title
            self.setWindowTitle(title)

    # ------------------------------------------------------------ actions
    def set_paused(self, paused: bool) -> None:
        """Freeze the display (images, plots, traffic); recording goes on."""
        self._paused = bool(paused)
        self.pause_action.setChecked(self._paused)
        self.plots.set_paused(self._paused)
        self._update_status()

    def _on_env_selected(self, env: int) -> None:
        mods = QtWidgets.QApplication.keyboardModifiers()
        current = list(self.history.selected)
        if mods & Qt.KeyboardModifier.ControlModifier:
            chosen = [e for e in current if e != env] + [env]
        else:
            chosen = [env]
        self.history.set_selected(chosen[-8:])

    def _ask_path(self, title: str, default: str, filt: str) -> str | None:
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, title, default, filt)
        return path or None

    def _default_name(self, suffix: str) -> str:
        name = self.core.status.name or "lucky-monitor"
        return os.path.join(os.getcwd(), f"{name}_{time.strftime('%Y%m%d-%H%M%S')}{suffix}")

    def _save_grid_dialog(self) -> None:
        path = self._ask_path("Save image grid", self._default_name("_grid.png"), "PNG (*.png)")
        if path:
            self.grid.save_grid_png(path)

    def _save_env_dialog(self) -> None:
        env = self.grid.selected_env
        if env is None:
            self.statusBar().showMessage("click an env tile first", 3000)
            return
        path = self._ask_path("Save env image", self._default_name(f"_env{env}.png"), "PNG (*.png)")
        if path:
            self.grid.save_env_png(env, path)

    def _export_csv_dialog(self) -> None:
        path = self._ask_path("Export plot data", self._default_name(".csv"), "CSV (*.csv)")
        if path:
            self.plots.export_csv(path)

    def save_screenshot(self, path: str) -> None:
        """Render the whole window (QML panels included) into a PNG."""
        self.tick()
        if not self.grab().save(path, "PNG"):
            raise OSError(f"could not write {path}")

    # ------------------------------------------------------------ closing
    def closeEvent(self, event: QtGui.QCloseEvent) -> None:
        self.timer.stop()
        self._save_settings()
        for quick in (self.panel, self.draw_form):  # unload QML before the backend it binds to goes away
            quick.setSource(QtCore.QUrl())
        self.backend.close()
        self.core.close()
        super().closeEvent(event)
