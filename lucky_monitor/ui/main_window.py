"""The monitor window: RpcPanel mirror, tiled image grid, plots, debug draw, command traffic.

The window is a view of :class:`~lucky_monitor.core.session.Tick` values. One
60 Hz timer calls :meth:`MainWindow.tick`, which asks the session for one
Tick (``session.step()``: every read of the segment happens there, once) and
hands it to each part:

* the QML backend maps it to properties (:meth:`MonitorBackend.apply`);
* the image grid shows the session's front grid when a new consistent copy
  arrived (one ``setImage``, no copy);
* the plots read the session's history; the traffic table gets the tick's
  new entries;
* the status bar and the title say the same state and rates as the panel.

What is *painted* follows a CPU budget (:class:`~lucky_monitor.core.budget.CpuBudget`,
``cpu_budget`` % of one core, 0 for none): the window reads its process CPU
time every tick and the budget sets how often the grid presents a new image,
the plots refresh and the QML panels take live values; the status bar shows
the budget and the rates in force. The data path is never thinned: every tick
calls ``session.step()`` (poll, history, traffic taps), and an image held
back is presented at the next due tick. :class:`~lucky_monitor.core.budget.RunStats`
counts the run for ``--stats-json``.

User actions go back through session methods (display options, env
selection, pause, commands). Nothing in the 60 Hz path is per env.
"""

from __future__ import annotations

import contextlib
import os
import time
import typing
from collections.abc import Callable

from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt
from PySide6.QtQuickWidgets import QQuickWidget

from ..core.budget import CpuBudget, Rates, RunStats, machine_idle_s
from ..core.history import History
from ..core.pacing import DEFAULT_YIELD_US
from ..core.session import MonitorSession, Tick
from ..protocol.enums import Service
from ..protocol.errors import LuckyMonitorError
from . import palette as pal
from .backend import MonitorBackend, state_color
from .image_grid import GridCanvas, ImageGridWidget, LayoutKey
from .inspector_view import InspectorView
from .plots import PlotsPanel
from .qml_host import make_quick_widget
from .text_line import TextLine
from .traffic_view import TrafficView

POLL_HZ = 60
#: The window's tick while no segment is attached (searching, or its engine gone): nothing there moves faster
#: than the link's attach retry (``MonitorCore.RETRY_S``, 0.5 s) and the segment list's refresh (1 s). At 60 Hz a
#: window left searching took 2.9 % of a core; from the attach on it ticks at :data:`POLL_HZ` again.
DETACHED_HZ = 10
DEFAULT_CPU_BUDGET = 10.0  # % of one core
BUDGET_EVERY = 15  # ticks: the CPU clocks (the process, its helpers' /proc, the machine's idle) are read at 4 Hz
DUE_SLACK_S = 0.25 / POLL_HZ  # a tick this early still counts as on time (timer jitter)
#: The grid says its image is old once no image was published for this long, or for 4 of the engine's
#: last intervals between images if longer (a camera at 0.5 Hz is not "stale" between its images).
IMAGES_QUIET_S = 2.0
#: The traffic table, the grid's counter line and the status bar's figures refresh at the panels' rate
#: in force, at most this often (the taps and counters are read every tick whatever the rate).
DECOR_MAX_HZ = 5.0
ALARM_TIP = "alarms: NaN, ±Inf or large values, image-region findings (click: the inspector lists them)"
PLOTS_SHARE = 0.58  # of the centre's height, until the user moves the splitter (three plots >= 120 px at 1600x1000)
DEFAULT_SIZE = (1600, 1000)  # the window at a first start, where the screen has room for it
FRAME_BORDER = 4  # px each side: a window frame's border, before the window is shown and its frame known
#: The docks' layout version in the saved settings: a layout saved under another is set aside for the default
#: one (version 1: the Inspector moved beside the RPC panel; before, a tab below the debug-draw form).
DOCKS_VERSION = 1
STATE_ROOM = 0.45  # of the status bar's width kept for the state's text, at most (the counters give way first)
BUDGET_TIP = (
    "CPU of this window (% of one core) against its budget (--cpu-budget), and the refresh "
    "rates in force; every poll is still read and recorded"
)
LAYOUT_RESET_S = 15.0  # how long the status bar says that a saved layout was set aside
LAYOUT_RESET_TEXT = "saved layout did not fit this screen: default layout restored"


def window_room(available: QtCore.QRect, title_bar: int = 0) -> QtCore.QSize:
    """The largest window (without its frame) whose frame lies within a screen's ``available`` area.

    The frame is not known before the window is shown: it is taken as a
    title bar of ``title_bar`` px (the style's estimate, as Qt's own
    ``restoreGeometry`` takes it) and a border of :data:`FRAME_BORDER` px.
    """
    return QtCore.QSize(
        max(0, available.width() - 2 * FRAME_BORDER), max(0, available.height() - title_bar - 2 * FRAME_BORDER)
    )


def first_start_size(available: QtCore.QRect, title_bar: int = 0) -> QtCore.QSize:
    """The window's size at a first start: :data:`DEFAULT_SIZE`, less where the screen has less room."""
    return QtCore.QSize(*DEFAULT_SIZE).boundedTo(window_room(available, title_bar))


def layout_fits(
    available: QtCore.QRect, needed: QtCore.QSize, window: QtCore.QRect | None = None, title_bar: int = 0
) -> bool:
    """Whether a window whose layout needs ``needed`` (its minimum size) can be shown whole in ``available``.

    Parameters
    ----------
    available
        The screen's available geometry (without panels and docks of the desktop).
    needed
        The least size the window's layout allows (its docks, centre, menu and status bar).
    window
        Where the window was restored to, if it was (``None``: nowhere in particular, e.g. maximized);
        a window wholly off ``available`` does not fit.
    title_bar
        The frame's title bar, in px (see :func:`window_room`).
    """
    room = window_room(available, title_bar)
    if needed.width() > room.width() or needed.height() > room.height():
        return False
    return window is None or available.intersects(window)


class PaintPacer(QtCore.QObject):
    """Offers the core (``yielder()``) before each paint of the widgets it watches: one paint pass of the
    window then runs as a series of short bursts, one per widget, instead of one long one.

    Watched: the viewports of scroll areas (plots, tables, graphics views), QML widgets and the image
    canvas, found when :meth:`watch` is called; an event filter that passes every event on.
    """

    def __init__(self, yielder: Callable[[], None], parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self._yielder = yielder
        self.watched: list[QtWidgets.QWidget] = []

    def watch(self, root: QtWidgets.QWidget) -> None:
        found: list[QtWidgets.QWidget] = [a.viewport() for a in root.findChildren(QtWidgets.QAbstractScrollArea)]
        found += root.findChildren(QQuickWidget)
        found += root.findChildren(GridCanvas)
        for w in found:
            if w not in self.watched:
                w.installEventFilter(self)
                self.watched.append(w)

    def eventFilter(self, watched: QtCore.QObject, event: QtCore.QEvent) -> bool:
        if event.type() == QtCore.QEvent.Type.Paint:
            self._yielder()
        return False


class MainWindow(QtWidgets.QMainWindow):
    """The whole monitor. ``name=None`` follows the newest live segment.

    Parameters
    ----------
    name
        Segment to attach to, or ``None``.
    columns
        Image grid columns (``None``: automatic, the count that shows the tiles largest in the view).
    settings
        Where window layout and options persist (default: the user's
        QSettings for lucky-monitor).
    cpu_budget
        Share of one core (%) the window's painting may bring the process
        to; ``0``: no limit.
    allow_other_user
        Attach to a segment owned by another user (refused by default);
        passed to the session made here.
    fit_screen
        Size the window to its screen: a first start within the screen's
        room, and a saved layout that cannot fit the screen set aside for the
        default one (see :meth:`_restore_settings`). ``False`` for a
        ``--screenshot`` run, whose picture is not bounded by a screen.
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        columns: int | None = None,
        settings: QtCore.QSettings | None = None,
        persist: bool = True,
        session: MonitorSession | None = None,
        cpu_budget: float = DEFAULT_CPU_BUDGET,
        allow_other_user: bool = False,
        fit_screen: bool = True,
        yield_us: float = DEFAULT_YIELD_US,
    ) -> None:
        super().__init__()
        self.fit_screen = fit_screen
        self.settings = settings or QtCore.QSettings("lucky-monitor", "lucky-monitor")
        self.persist = persist  # False for one-off runs (--columns, --screenshot): nothing is saved
        self.setWindowTitle("lucky-monitor")
        self.resize(*DEFAULT_SIZE)  # then fitted to the screen, or the saved geometry (_restore_settings)
        self.session = session or MonitorSession(name, allow_other_user=allow_other_user, yield_us=yield_us)
        self.history = History(1)
        self.last_tick: Tick | None = None
        self._generation = -1
        self._detached_text: str | None = None  # the state text the grid shows while no segment is attached
        self._shown_state: tuple[object, ...] | None = None  # the state, its text and reason in the status bar
        self._ticks = 0
        self._paused = False
        self._last_title = ""
        self._tick_cost = 0.0
        self.budget = CpuBudget(cpu_budget)
        self.stats = RunStats(time.monotonic(), self._cpu_s(), cpu_budget)
        self._next_plot = 0.0
        self._next_image = 0.0
        self._next_decor = 0.0
        self._seen_image: object = None
        self._image_held = False  # a new image came while presentation was not due
        self._shown_meta: tuple[int, int, int] | None = None
        # The newest image count seen (image_seq // 2), when it changed, the gap before it (see _check_stale).
        self._image_count: int | None = None
        self._image_count_at = 0.0
        self._image_gap = 0.0
        self._shown_geometry: tuple[float, ...] | None = None
        self._layout_key = LayoutKey()
        self._panel_rates: Rates | None = None

        # --- centre: images over plots
        self.grid = ImageGridWidget()
        self.plots = PlotsPanel(self.history)
        # One pause: the plots' button pauses the whole display, as Space does (it froze the plots alone,
        # the grid and the traffic going on, and the status bar said nothing).
        self.plots.pause_button.toggled.connect(self.set_paused)
        self.plots.pause_button.setToolTip("pause the display (Space): images, plots, traffic; recording goes on")
        self.plots.ask_path = self._ask_path  # its CSV… and PNG… open where the window's saves do
        self.grid.env_selected.connect(self._on_env_selected)
        self.grid.display_changed.connect(self.session.set_display)
        self.grid.view_changed.connect(self.session.set_view)
        # A zoom, a pan or a resize repaints whole views: the budget leaves those seconds out (CpuBudget.interacting).
        self.grid.view_changed.connect(self._interacting)
        self.plots.interacted.connect(self._interacting)
        self.grid.pixel_reader = self.session.read_pixel
        self.grid.snapshot_source = self.session.snapshot
        split = QtWidgets.QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.grid)
        split.addWidget(self.plots)
        self.grid.setMinimumHeight(260)
        self.plots.setMinimumHeight(330)
        split.setChildrenCollapsible(False)
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 1)
        split.setSizes([440, 560])
        split.splitterMoved.connect(self._splitter_moved)
        self._auto_split = True  # the plots keep PLOTS_SHARE of the height until the user drags the splitter
        self._docks_sized = False
        self._notice = ""  # a status-bar message for the first show
        self.splitter = split
        split.splitterMoved.connect(self._interacting)
        self.setCentralWidget(split)

        # --- QML: RpcPanel (left), debug draw (right)
        self.backend = MonitorBackend(self.session, self)
        self.panel = make_quick_widget(self.backend, "RpcPanel", self)
        self.panel.setMinimumWidth(340)
        self.draw_form = make_quick_widget(self.backend, "DebugDraw", self)
        # The form's own width: a narrower dock would clip its fields.
        self.draw_form.setMinimumWidth(max(320, int(self.draw_form.rootObject().implicitWidth())))
        # ... and height: on a smaller window the traffic table below gives way, not the form's buttons
        self.draw_form.setMinimumHeight(int(self.draw_form.rootObject().implicitHeight()))
        self.traffic = TrafficView()
        panel_dock = self._dock("RPC panel", self.panel, Qt.DockWidgetArea.LeftDockWidgetArea)
        self._draw_dock = self._dock("Debug draw", self.draw_form, Qt.DockWidgetArea.RightDockWidgetArea)
        self._dock("Command traffic", self.traffic, Qt.DockWidgetArea.RightDockWidgetArea)
        # The inspector (alarms, per-dim statistics): a tab beside the RPC panel, where the column is as tall
        # as the window (below the debug-draw form its plots got ~30 px at 1280x800); an alarm also shows in
        # the status bar (click it to bring the inspector up).
        self.inspector = InspectorView(self.session.request_names)
        self.inspector_dock = self._dock("Inspector", self.inspector, Qt.DockWidgetArea.LeftDockWidgetArea)
        self.tabifyDockWidget(panel_dock, self.inspector_dock)
        self.inspector_dock.visibilityChanged.connect(self.inspector.set_on_screen)  # a tab behind: no drawing
        self.inspector_dock.visibilityChanged.connect(self.session.want_statistics)  # ... and no statistics
        panel_dock.raise_()

        # --- status bar: the state, large, in its colour
        # Plain text (reasons carry engine text: never markup). The status bar's lines are TextLines: a new
        # text repaints its line; a QLabel's would re-lay out the main window, its docks and status bar.
        self.state_label = TextLine("searching", tooltip_is_text=True)
        font = self.state_label.font()
        font.setPointSizeF(font.pointSizeF() * 1.3)
        font.setBold(True)
        self.state_label.setFont(font)
        self.rate_label = TextLine()
        self.budget_label = TextLine()
        self.budget_label.setToolTip(BUDGET_TIP)
        self.alarm_button = QtWidgets.QPushButton("")
        self.alarm_button.setFlat(True)
        self.alarm_button.setVisible(False)
        self.alarm_button.setToolTip(ALARM_TIP)
        self.alarm_button.setStyleSheet(f"color: {pal.BAD}; font-weight: bold;")
        self.alarm_button.clicked.connect(self.show_inspector)
        self._alarm_version = -1
        self._next_alarms = 0.0
        # The state takes what the counters leave: a TextLine's hint is the widest text it ever showed (a long
        # reason once), which would squeeze the rates and the budget to an ellipsis at 1280 px for good.
        self.state_label.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        self.statusBar().addWidget(self.state_label, 1)
        self.statusBar().addPermanentWidget(self.alarm_button)
        self.statusBar().addPermanentWidget(self.rate_label)
        self.statusBar().addPermanentWidget(self.budget_label)
        self.statusBar().messageChanged.connect(self._message_changed)

        self._make_actions()
        self._restore_settings(columns)
        # Between the widgets of one paint the core is offered to the engine and trainer (see pacing.Yielder).
        self.paint_pacer = PaintPacer(self.session.yielder, self)
        self.paint_pacer.watch(self)
        self.plots.offer = self.session.yielder
        self.traffic.model.offer = self.session.yielder

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
        # Closable, so that the View menu's dock entries work (Qt greys out the toggle action of a dock that is not)
        dock.setFeatures(
            QtWidgets.QDockWidget.DockWidgetFeature.DockWidgetMovable
            | QtWidgets.QDockWidget.DockWidgetFeature.DockWidgetFloatable
            | QtWidgets.QDockWidget.DockWidgetFeature.DockWidgetClosable
        )
        self.addDockWidget(area, dock)
        return dock

    def _splitter_moved(self, _pos: int, _index: int) -> None:
        self._auto_split = False

    def _interacting(self, *_: object) -> None:
        self.budget.interacting(time.monotonic())

    def resizeEvent(self, event: QtGui.QResizeEvent) -> None:
        """Default proportions until the user (or saved settings) chose others.

        The plots get :data:`PLOTS_SHARE` of the centre's height; the debug-draw
        dock its form's height, the traffic table the rest of the right column.
        """
        self._interacting()
        super().resizeEvent(event)
        if self._auto_split:
            total = self.splitter.height() - self.splitter.handleWidth()
            if total > 0:
                plots = max(round(total * PLOTS_SHARE), self.plots.minimumHeight())
                self.splitter.setSizes([total - plots, plots])

    def showEvent(self, event: QtGui.QShowEvent) -> None:
        super().showEvent(event)
        if not self._docks_sized:
            self._docks_sized = True
            QtCore.QTimer.singleShot(0, self._size_docks)
            # The first focus goes to the image view, not to the first control in the tab order: a
            # focused spin box blinks its cursor, repainting itself and the widgets under it twice a second.
            self.grid.graphics.setFocus(Qt.FocusReason.OtherFocusReason)
        if self._notice:  # shown now, not before: a message set on a hidden status bar leaves its widgets over it
            self.message(self._notice, round(LAYOUT_RESET_S * 1000))
            self._notice = ""

    def _size_docks(self) -> None:
        form = int(self.draw_form.rootObject().implicitHeight())
        self.resizeDocks([self._draw_dock], [form], Qt.Orientation.Vertical)

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
        """The saved layout and options; a layout that cannot fit this screen gives way to the default one.

        A saved dock layout can need more than a smaller screen has (the
        inspector split off below the traffic table needs about 880 px of
        height): then the window starts as at a first start (the default
        docks, :func:`first_start_size`, centred) and the status bar says so.
        The settings are left as they are; the layout in use is saved at exit,
        as always. Where even the default layout cannot fit, the saved one is
        kept.
        """
        s = self.settings
        default_state = self.saveState()  # the docks as built: a first start's layout
        default_needed = self._needed_size()
        geo = s.value("window/geometry")
        # Qt refuses a geometry saved on a screen of a much different width: that is a first start's geometry
        geometry_restored = isinstance(geo, QtCore.QByteArray) and self.restoreGeometry(geo)
        if not geometry_restored and self.fit_screen:
            # never below what the layout needs: a screen too small for it gets the least window (Qt would
            # enforce that anyway at show, with a warning on platforms that cannot take size hints)
            self.resize(first_start_size(self._available(), self._title_bar()).expandedTo(self._needed_size()))
        state = s.value("window/state")
        state_restored = isinstance(state, QtCore.QByteArray) and self.restoreState(state, DOCKS_VERSION)
        self._docks_sized = state_restored  # the saved dock sizes stand; else they are sized at show
        available, title_bar = self._available(), self._title_bar()
        shown_at = None if self.isMaximized() or self.isFullScreen() else self.geometry()
        if (
            self.fit_screen
            and (geometry_restored or state_restored)
            and not layout_fits(available, self._needed_size(), shown_at, title_bar)
            and layout_fits(available, default_needed, None, title_bar)
        ):
            self._restore_default_layout(default_state, available, title_bar)  # the plots' splitter too
        else:
            split = s.value("window/splitter")
            if isinstance(split, QtCore.QByteArray) and self.splitter.restoreState(split):
                self._auto_split = False
        self._restore_options(columns)

    def _restore_default_layout(
        self, default_state: QtCore.QByteArray, available: QtCore.QRect, title_bar: int
    ) -> None:
        """A first start's docks and size, centred on the screen; the status bar says why."""
        self.restoreState(default_state)
        self._docks_sized = False  # sized at show, as at a first start
        self.setWindowState(Qt.WindowState.WindowNoState)
        size = first_start_size(available, title_bar)
        self.resize(size)
        frame = size + QtCore.QSize(2 * FRAME_BORDER, title_bar + 2 * FRAME_BORDER)  # move() places the frame
        centre = Qt.AlignmentFlag.AlignCenter
        self.move(QtWidgets.QStyle.alignedRect(Qt.LayoutDirection.LeftToRight, centre, frame, available).topLeft())
        self._notice = LAYOUT_RESET_TEXT  # said once the window shows (see showEvent)

    def _needed_size(self) -> QtCore.QSize:
        """The least size the window's layout (its docks as they are now) allows."""
        return self.minimumSizeHint().expandedTo(self.minimumSize())

    def _available(self) -> QtCore.QRect:
        """The available geometry of the screen the window is on (where it was restored to, if it was)."""
        screen = QtGui.QGuiApplication.screenAt(self.geometry().center()) or self.screen()
        return screen.availableGeometry()

    def _title_bar(self) -> int:
        """The frame's title bar as Qt estimates it when it restores a geometry (the frame is unknown before show)."""
        return self.style().pixelMetric(QtWidgets.QStyle.PixelMetric.PM_TitleBarHeight, None, self)

    def _restore_options(self, columns: int | None) -> None:
        s = self.settings
        cols = columns if columns is not None else typing.cast(int, s.value("grid/columns", 0, type=int))
        self.grid.columns_spin.setValue(int(cols or 0))
        self._wanted_columns = int(cols or 0)
        seconds: typing.Any = s.value("plots/window_seconds", None)
        if seconds is not None:
            with contextlib.suppress(ValueError, TypeError, LuckyMonitorError):  # a stale setting is ignored
                self.plots.set_window_seconds(float(seconds))
        self.plots.set_log_counts(s.value("plots/log_counts", "false") in (True, "true"))

    def _save_settings(self) -> None:
        s = self.settings
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/state", self.saveState(DOCKS_VERSION))
        s.setValue("window/splitter", self.splitter.saveState())
        s.setValue("grid/columns", self.grid.columns_spin.value())
        s.setValue("plots/window_seconds", self.plots.window_seconds)
        s.setValue("plots/log_counts", self.plots.log_counts)
        s.sync()

    # -------------------------------------------------------------- frame
    def _on_attach(self, tick: Tick) -> None:
        """A new attach or a detach: per-session views start afresh."""
        self._generation = tick.generation
        self._alarm_version, self._next_alarms = -1, 0.0  # a new attach counts its alarms afresh
        self._shown_geometry = None  # the new attach's first image is shown at once
        self._shown_meta = None  # nor do the last attach's counters come back over the grid's message
        self._image_count = None
        h = tick.header
        if h is None and self.history.frames_seen:
            # The segment went (the engine exited, a fault): its curves and traffic stay until the next
            # attach, the curves leading up to an engine's death being what a researcher wants to read.
            last = self.history.last_frame_seq
            self.plots.set_held(f"{tick.text}: the plots hold the last attach's history, up to frame_seq {last}")
            self.traffic.set_held(True)
        else:
            # The envs selected before (an engine restarted under its name) stay selected where the new one has them.
            kept = tuple(e for e in self.grid.selection if h is not None and e < h.num_envs)
            self.history = tick.history or History(1)
            self.plots.set_history(self.history)
            self.plots.set_held(None)
            self.traffic.clear()
            self.session.select(kept)
            # (held, the selected envs' curves stay with the history)
            self.grid.set_selection(kept, {e: self.history.colour_slot(e) for e in kept})
            # The plots and the traffic footer show the new attach at once, not at their next refresh: for up to
            # 2 s after a reattach they showed the last attach's frames, and "no segment", beside a live grid.
            self._next_plot = self._next_decor = 0.0
        self._detached_text = tick.text if h is None else None
        if h is None:
            self.grid.clear_image(tick.text)
        elif not h.has_images:
            self.grid.clear_image("this engine exports no image region")
        else:
            self.grid.clear_image("waiting for the first image")
            if self._wanted_columns:
                self.session.set_display(self.grid.display_options())

    def tick(self) -> None:
        t0 = time.perf_counter()
        # Images are copied only when the grid will show them: the budget thins the copy with the paint.
        # A share rung copies (and so shows) only that share of the images, the session picks which.
        self.session.want_images(time.monotonic() + DUE_SLACK_S >= self._next_image, self.budget.rates.images_share)
        tick = self.session.step()  # every tick: the data path (hot arrays, history, traffic) is never thinned
        offer = self.session.yielder  # the core, offered at the seams of the tick's work (pacing.Yielder)
        offer()
        self.last_tick = tick
        if tick.generation != self._generation:
            self._on_attach(tick)
        elif tick.header is None and tick.text != self._detached_text:
            # Detached, the grid says the state as it is now: "engine exited" stayed under the image
            # area after the state had become "incompatible" (a shrunk segment of a stopped engine).
            self._detached_text = tick.text
            self.grid.clear_image(tick.text)
        rates = self.budget.rates
        if rates is not self._panel_rates:  # the panels' live-value period follows the budget's rung
            self._panel_rates = rates
            self.backend.LIVE_PERIOD_S = 1.0 / rates.panel_hz
            # The grid's counters line refreshes with the other panel texts (at most DECOR_MAX_HZ). Re-set 5
            # times a second by the images alone (the text measured, the line and the dock beneath it
            # repainted), it cost the window showing every image, panels at a refresh every 2 s, 0.1-0.9
            # points of a core (three alternating pairs, 30 s each).
            self.grid.META_PERIOD_S = max(1.0 / DECOR_MAX_HZ, 1.0 / rates.panel_hz)
            self.session.set_statistics_rate(rates.plots_hz)  # the inspector's plots follow the plots' rate
        self.backend.apply(tick)
        offer()
        now = tick.t
        # Recording goes on while paused: the table shows what came meanwhile once the view resumes.
        if tick.header is not None:  # detached, the table holds the last attach's entries and counts
            self.traffic.add(tick.traffic, tick.traffic_stats, tick.t)
        if not self._paused:
            image = tick.image
            # The session hands over the same ImageFrame while nothing changed: then only a held image is news.
            if image is not None and (image is not self._seen_image or self._image_held):
                self._seen_image = image
                self._image_held = self._image_held or image.new
                geometry = (*self._layout_key(image.layout), image.step)
                geometry_changed = self._shown_geometry != geometry
                if geometry_changed or (self._image_held and now + DUE_SLACK_S >= self._next_image):
                    self.grid.show_image(image, tick.counters.torn_images)
                    self._shown_meta = (image.image_seq, image.image_frame_seq, tick.counters.torn_images)
                    self._shown_geometry = geometry
                    if self._image_held:
                        self.stats.presented()
                    self._image_held = False
                    self._next_image = self._due(self._next_image, now, rates.images_hz)
                    offer()
            self._check_stale(tick)
            if tick.display_error:
                self.grid.status_label.setText(tick.display_error)
            self.inspector.apply(tick)  # repaints only when its alarms or statistics changed
            self._show_alarms(tick)
            offer()
        self._ticks += 1
        if now + DUE_SLACK_S >= self._next_plot and not self._paused:
            self._next_plot = self._due(self._next_plot, now, rates.plots_hz)
            self.plots.update_view()
            offer()
        decor = now + DUE_SLACK_S >= self._next_decor
        if decor:
            self._next_decor = self._due(self._next_decor, now, min(DECOR_MAX_HZ, rates.panel_hz))
            if not self._paused:
                self.traffic.refresh()
                if self._shown_meta is not None:  # the grid's counters, throttled per frame, catch up
                    self.grid.set_meta(*self._shown_meta)
        if self._ticks % BUDGET_EVERY == 0 and self._update_budget():
            self._update_status(tick)
        elif decor or (tick.state, tick.text, tick.reason) != self._shown_state:
            # The state line follows its text at once ("stalled for 9 s" in the panel beside "stalled for 7 s" in
            # the bar, at a panel refresh every 2 s); the rates and the budget line ride along.
            self._shown_state = (tick.state, tick.text, tick.reason)
            self._update_status(tick)
        self._tick_cost = time.perf_counter() - t0
        self.stats.add_tick(tick, self._tick_cost)
        interval = round(1000 / (POLL_HZ if tick.header is not None else DETACHED_HZ))
        if self.timer.interval() != interval:
            self.timer.setInterval(interval)

    def _check_stale(self, tick: Tick) -> None:
        """Tell the grid when its image is old: no image published for :data:`IMAGES_QUIET_S` (or longer gaps).

        With the Camera service switched off the grid kept its last images and
        looked live; the reason is named where the services mask gives it.
        """
        live, h = tick.live, tick.header
        if live is None or h is None or not h.has_images:
            return
        count = live.image_seq // 2
        if count != self._image_count:
            if self._image_count is not None:
                self._image_gap = tick.t - self._image_count_at
            self._image_count, self._image_count_at = count, tick.t
        age = tick.t - self._image_count_at
        note = None
        if self._image_count and age >= max(IMAGES_QUIET_S, 4 * self._image_gap):
            camera = live.services_enabled >> Service.CAMERA & 1
            note = f"no new image for {age:.0f} s" + ("" if camera else " (the Camera service is off)")
        if note != self.grid.stale_text:
            self.grid.set_stale(note)

    def _update_budget(self) -> bool:
        """Feed the budget a reading; whether the rates changed. The core is offered only on a saturated machine.

        With a core idle the kernel runs the window there and an offer is a system call for no one (and
        the image tiling in bands, an overhead of its own: 0.3 ms an image at the demo setting).
        """
        tick = self.last_tick
        images_per_s = tick.rates.images_per_s if tick is not None else None
        changed = self.budget.update(time.monotonic(), self._cpu_s(), machine_idle_s(), images_per_s)
        self.session.yielder.contended = self.budget.machine_busy
        return changed

    def _show_alarms(self, tick: Tick) -> None:
        a = tick.alarms
        if a.version == self._alarm_version or tick.t < self._next_alarms:
            return
        self._alarm_version = a.version
        self._next_alarms = tick.t + 0.5  # a NaN that persists raises an alarm every frame: 2 repaints a second
        self.grid.set_badges(a.image_flags)
        n = len(a.recent)
        self.alarm_button.setVisible(n > 0)
        if n:
            # Short, so the status bar fits at 1280 px; the newest alarm is the tooltip, the inspector lists them.
            self.alarm_button.setText(f"⚠ {n} alarm{'s' if n != 1 else ''}")
            self.alarm_button.setToolTip(f"newest: {a.recent[-1].text()}\n{ALARM_TIP}")

    def show_inspector(self) -> None:
        """Bring the inspector dock to the front."""
        self.inspector_dock.show()
        self.inspector_dock.raise_()

    @staticmethod
    def _due(last_due: float, now: float, hz: float) -> float:
        """The next time something refreshed at ``hz`` is due; at or above the poll rate, every tick.

        Kept on a grid of ``1/hz`` from the last due time (so 30 Hz on a
        60 Hz poll is every second tick, not every third), re-anchored at
        ``now`` when more than a period behind.
        """
        if hz >= POLL_HZ:
            return now
        period = 1.0 / hz
        nxt = last_due + period
        return nxt if nxt > now - period else now + period

    def _update_status(self, tick: Tick | None = None) -> None:
        tick = tick or self.last_tick
        if tick is None:
            return
        text = tick.text + (f" — {tick.reason}" if tick.reason else "") + (f"   ({tick.notice})" if tick.notice else "")
        self.state_label.setText(text)
        # The state is what the bar is for: it keeps room for its text (up to STATE_ROOM of the bar), and the
        # rates and the budget line give way first (elided, whole in their tooltips).
        want = min(self.state_label.text_width(), round(self.statusBar().width() * STATE_ROOM))
        if want != self.state_label.minimumWidth():
            self.state_label.setMinimumWidth(want)
        _set_style(self.state_label, f"color: {state_color(tick.state)};")
        if tick.header is not None:
            # The same rounding as the panel: both read this tick's rates.
            fps = "—" if tick.rates.frames_per_s is None else f"{tick.rates.frames_per_s:.1f}"
            ips = "—" if tick.rates.images_per_s is None else f"{tick.rates.images_per_s:.1f}"
            # The engine's rates (the budget line's "images N Hz" is what this window redraws); the poll's
            # own cost in the tooltip: at 1280 px the line has room for the rates only.
            self.rate_label.setText(
                f"engine {fps} frames/s · {ips} images/s",
                f"{fps} frames/s · {ips} images/s",
                f"{fps} fps · {ips} img/s",
            )
            self.rate_label.setToolTip(
                f"what the engine publishes: {fps} frames/s, {ips} images/s; "
                f"this window's last poll took {self._tick_cost * 1e3:.1f} ms"
            )
        else:
            self.rate_label.setText("")
            self.rate_label.setToolTip("")
        # Paused, the budget's rates are not what is shown: the status bar says the display is frozen instead.
        # With no segment there is nothing to paint at the rates: the window's own CPU and its budget only.
        if self._paused:
            budgets: tuple[str, ...] = ("display paused (Space resumes)",)
        else:
            budgets = self.budget.texts() if tick.header is not None else self.budget.texts()[-1:]
        budget = budgets[0]
        if budget != self.budget_label.text():
            self.budget_label.setText(*budgets)
            self.budget_label.setToolTip(f"{budget}\n\n{BUDGET_TIP}")
        _set_style(self.budget_label, "color: #e0a030;" if self.budget.over_budget or self._paused else "")
        title = f"lucky-monitor — {tick.name or 'no segment'} — {tick.state.value}"
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
        self.session.set_paused(self._paused)
        self._update_status()

    def _on_env_selected(self, env: int) -> None:
        mods = QtWidgets.QApplication.keyboardModifiers()
        current = list(self.history.selected)
        if mods & Qt.KeyboardModifier.ControlModifier:
            chosen = [e for e in current if e != env] + [env]
        else:
            chosen = [env]
        chosen = chosen[-8:]
        self.session.select(chosen)
        self.grid.set_selection(chosen, {e: self.history.colour_slot(e) for e in chosen})

    def _ask_path(self, title: str, default_name: str, filt: str) -> str | None:
        start = os.path.join(self._save_dir(), default_name)
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, title, start, filt)
        if path:
            self.settings.setValue("files/last_dir", os.path.dirname(path))
        return path or None

    def _save_dir(self) -> str:
        """Where save dialogs open: the last folder used, else the user's Pictures (or home) folder."""
        last = typing.cast(str, self.settings.value("files/last_dir", "", type=str))
        if last and os.path.isdir(last):
            return last
        loc = QtCore.QStandardPaths.StandardLocation.PicturesLocation
        pictures = QtCore.QStandardPaths.writableLocation(loc)
        return pictures if pictures and os.path.isdir(pictures) else os.path.expanduser("~")

    def _default_name(self, suffix: str) -> str:
        name = (self.last_tick.name if self.last_tick else None) or "lucky-monitor"
        return f"{name}_{time.strftime('%Y%m%d-%H%M%S')}{suffix}"

    def _saved(self, what: str, path: str, action) -> None:
        try:
            action(path)
        except (LuckyMonitorError, OSError) as exc:
            self.message(f"could not save {what}: {exc}", 8000)
            return
        self.message(f"{what} saved to {os.path.abspath(path)}", 8000)

    def _message_changed(self, text: str) -> None:
        if not text:  # the message is gone: so is its tooltip
            self.statusBar().setToolTip("")

    def message(self, text: str, ms: int) -> None:
        """A status-bar message for ``ms``, cut in the middle to fit left of the counters; whole in the tooltip.

        Qt draws a message up to the first permanent widget and clips it there
        (a saved file's path ran into the rates: "…/lucky-monitor_2026112").
        """
        bar = self.statusBar()
        shown = [w.x() for w in (self.alarm_button, self.rate_label, self.budget_label) if w.isVisible()]
        room = max(60, min(shown, default=bar.width()) - 14)
        bar.setToolTip(text)
        bar.showMessage(bar.fontMetrics().elidedText(text, Qt.TextElideMode.ElideMiddle, room), ms)

    def _save_grid_dialog(self) -> None:
        path = self._ask_path("Save image grid", self._default_name("_grid.png"), "PNG (*.png)")
        if path:
            self._saved("grid", path, self.grid.save_grid_png)

    def _save_env_dialog(self) -> None:
        env = self.grid.selected_env
        if env is None:
            self.message("click an env tile first", 3000)
            return
        path = self._ask_path("Save env image", self._default_name(f"_env{env}.png"), "PNG (*.png)")
        if path:
            self._saved(f"env {env} image", path, lambda p: self.grid.save_env_png(env, p))

    def _export_csv_dialog(self) -> None:
        path = self._ask_path("Export plot data", self._default_name(".csv"), "CSV (*.csv)")
        if path:
            self._saved("plot data", path, self.plots.export_csv)

    def save_screenshot(self, path: str) -> None:
        """Render the whole window (QML panels included) into a PNG."""
        self.tick()
        if not self.grab().save(path, "PNG"):
            raise OSError(f"could not write {path}")

    def _cpu_s(self) -> float:
        """This process's CPU seconds plus its session's helper processes' (their work is the window's)."""
        session = getattr(self, "session", None)
        return time.process_time() + (session.helper_cpu_s() if session is not None else 0.0)

    def run_stats(self) -> dict[str, typing.Any]:
        """What ``--stats-json`` writes: this window's run so far (see :class:`RunStats`)."""
        y = self.session.yielder
        return {
            **self.stats.result(time.monotonic(), self._cpu_s()),
            "yield_us": round(y.quantum_s * 1e6, 1),
            "yields": y.count,
            "rates": self.budget.rates.text(),
            "over_budget": self.budget.over_budget,
        }

    # ------------------------------------------------------------ closing
    def closeEvent(self, event: QtGui.QCloseEvent) -> None:
        self.timer.stop()
        if self.persist:
            self._save_settings()
        for quick in (self.panel, self.draw_form):  # unload QML before the backend it binds to goes away
            quick.setSource(QtCore.QUrl())
        self.session.close()
        super().closeEvent(event)


def _set_style(widget: QtWidgets.QWidget, sheet: str) -> None:
    """Set a style sheet only when it changes (each set re-polishes the widget)."""
    if widget.styleSheet() != sheet:
        widget.setStyleSheet(sheet)
