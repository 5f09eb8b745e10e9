"""The inspector dock, the alarm indicator and the grid's badges (offscreen)."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6 import QtCore, QtGui, QtWidgets

from lucky_monitor.core.inspector import AlarmScanner, region_stats
from lucky_monitor.core.session import InspectorFrame
from lucky_monitor.transport.shm import platform_kind
from lucky_monitor.ui import palette as pal
from tests.ui.ticks import attached_tick, small_header

pytestmark = pytest.mark.timeout(120)


def test_heatmap_scales_each_dim_to_its_range_and_marks_nan_bands_magenta() -> None:
    from lucky_monitor.ui.inspector_view import BAD_RGB, CONSTANT_RGB, heat_rgb

    a = np.zeros((4, 3), np.float32)
    a[:, 0] = [0, 1, 2, 3]
    a[:, 1] = [1e6, 2e6, 3e6, 4e6]  # another scale: the same colours
    a[2, 2] = np.nan
    rgb = heat_rgb(region_stats("obs", 1, a))
    assert rgb.shape == (4, 3, 3) and rgb.dtype == np.uint8
    np.testing.assert_array_equal(rgb[:, 0], rgb[:, 1])
    assert tuple(rgb[2, 2]) == BAD_RGB and tuple(rgb[0, 2]) != BAD_RGB
    assert not np.array_equal(rgb[0, 0], rgb[3, 0])
    b = np.zeros((4, 2), np.float32)
    b[:, 0] = [0, 1, 2, 3]  # b[:, 1] never changes: grey, not the lowest value's colour
    rgb = heat_rgb(region_stats("obs", 1, b))
    assert {tuple(c) for c in rgb[:, 1]} == {CONSTANT_RGB} and tuple(rgb[0, 0]) != CONSTANT_RGB


def frame_with(stats_seq: int, obs: np.ndarray) -> InspectorFrame:
    st = region_stats("obs", stats_seq, obs, names=tuple(f"d{i}" for i in range(obs.shape[1])), selected=[1, 2])
    return InspectorFrame(stats_seq, st, None, "", "no trainer attached: nobody writes actions", "GetAgentSchema", "")


def test_view_of_hand_made_ticks_lists_alarms_newest_first_and_repaints_only_on_change(qtbot) -> None:
    from lucky_monitor.ui.inspector_view import InspectorView

    asked: list[int] = []
    view = InspectorView(lambda: asked.append(1))
    qtbot.addWidget(view)
    view.resize(420, 700)
    view.show()
    sc = AlarmScanner()
    obs = np.ones((8, 4), np.float32)
    obs[5, 3] = np.nan
    sc.check("obs", 10, obs)
    rew = np.zeros(8, np.float32)
    rew[7] = np.inf
    sc.check("rewards", 11, rew)
    h = small_header()
    base = attached_tick(h)
    tick = dataclasses.replace(base, alarms=sc.state(), inspector=frame_with(1, obs))
    view.apply(tick)
    assert view.alarm_lines == ["frame 11  rewards  env 7  inf", "frame 10  obs  env 5  dim 3 (d3)  nan"]
    assert "obs 1" in view.counts_label.text() and "rewards 1" in view.counts_label.text()
    assert view.table.rowCount() == 0  # the plots' tab is in front: the table is filled when it comes forward
    view.tabs.setCurrentWidget(view.table)
    assert view.table.rowCount() == 4 and view.table.item(3, 0).text() == "d3" and view.table.item(3, 1).text() == "1"
    assert view.table.verticalHeaderItem(3).text() == "3"  # the dim's index stays in view when the table scrolls
    assert view.table.horizontalHeaderItem(1).text() == "NaN/Inf"  # the bad count beside the name, never off screen
    assert view.table.item(3, 2).toolTip() == "mean of dim 3 (d3): 1.0"  # the exact value
    metrics = view.table.fontMetrics()  # every cell whole: a number cut in the middle read "0.…91"
    for col in range(6):
        widest = max(metrics.horizontalAdvance(view.table.item(r, col).text()) for r in range(4))
        assert view.table.columnWidth(col) >= widest, col
    assert "names: GetAgentSchema" in view.note_label.text()
    # Two lines kept for the note: the actions' longer one moved the tabs under the pointer.
    assert view.note_label.minimumHeight() >= 2 * view.note_label.fontMetrics().lineSpacing()
    n = view.repaints
    for _ in range(5):
        view.apply(dataclasses.replace(tick, alarms=sc.state()))
    assert view.repaints == n  # nothing changed: nothing repainted
    view.apply(dataclasses.replace(tick, inspector=frame_with(2, obs)))
    assert view.repaints == n + 1
    view.hide()  # a tab behind another: new statistics wait until it is shown
    view.apply(dataclasses.replace(tick, inspector=frame_with(3, obs)))
    view.apply(dataclasses.replace(tick, inspector=frame_with(4, obs)))
    assert view.repaints == n + 1
    view.show()
    assert view.repaints == n + 2
    view.set_on_screen(False)  # its dock tab went behind another: still "visible" to Qt, not drawn
    view.apply(dataclasses.replace(tick, inspector=frame_with(5, obs)))
    assert view.repaints == n + 2
    view.set_on_screen(True)
    assert view.repaints == n + 3
    view.region_combo.setCurrentText("actions")
    assert "no trainer" in view.note_label.text() and view.table.rowCount() == 0
    assert tick.tools.ours and asked == [1]  # asked once per attach, as the session holds the tools channel


linux = pytest.mark.skipif(platform_kind() != "dir", reason="segments are exercised on Linux")


@linux
def test_window_shows_the_nan_and_inf_alarms_and_badges_a_constant_tile(qtbot, segment_factory, tmp_path) -> None:
    from lucky_monitor.ui.main_window import MainWindow

    seg = segment_factory(num_envs=8, obs_size=6, act_size=2, image=(8, 6, 3))
    seg.set("engine_state", 1)
    seg.obs[:] = 0.5
    seg.obs[5, 3] = np.nan
    seg.rewards[:] = 1.0
    seg.rewards[7] = np.inf
    images = np.random.default_rng(0).integers(0, 256, (8, 6, 8, 3), dtype=np.uint8)
    images[0] = 0  # env 0's camera renders nothing
    seg.set("image_seq", 1)
    np.copyto(seg.images, images)
    seg.set("image_frame_seq", 1)
    seg.set("image_seq", 2)
    seg.set("heartbeat_ns", time.monotonic_ns())
    seg.set("frame_seq", 1)
    beat = QtCore.QTimer()
    beat.timeout.connect(lambda: seg.set("heartbeat_ns", time.monotonic_ns()))
    beat.start(20)
    settings = QtCore.QSettings(str(tmp_path / "s.ini"), QtCore.QSettings.Format.IniFormat)
    win = MainWindow(seg.name, settings=settings, persist=False)
    qtbot.addWidget(win)
    win.resize(1400, 900)
    win.show()
    qtbot.waitExposed(win)
    try:
        qtbot.waitUntil(lambda: len(win.inspector.alarm_lines) >= 3, timeout=10000)
        lines = win.inspector.alarm_lines
        assert any(line.endswith("obs  env 5  dim 3 (3)  nan") for line in lines), lines
        assert any(line.endswith("rewards  env 7  inf") for line in lines), lines
        assert any("image  env 0  constant" in line for line in lines), lines
        assert win.alarm_button.isVisible() and "alarm" in win.alarm_button.text()
        assert win.grid.badges.shown == {0: ("constant",)}
        # The inspector's tab is behind the RPC panel: alarms came all the same (above), statistics do not.
        panel = win.findChild(QtWidgets.QDockWidget, "RPC_panel")
        assert win.inspector_dock in win.tabifiedDockWidgets(panel)
        assert win.session._want_stats is False
        stale = win.last_tick.inspector
        qtbot.wait(600)  # over two periods of the 4 Hz statistics
        assert win.last_tick.inspector is stale
        win.show_inspector()
        assert win.inspector.isVisible()
        assert win.session._want_stats is True
        seg.set("frame_seq", 2)
        qtbot.waitUntil(lambda: win.last_tick.inspector is not stale, timeout=5000)  # fresh ones at once
        # In the left column, as tall as the window: its two plots get room (below the debug-draw form: ~30 px).
        assert win.inspector_dock.height() > 0.7 * win.height()
        assert win.inspector.dim_plot.getViewBox().height() >= 120
        assert win.inspector.heat_plot.getViewBox().height() >= 120
        # The statistics follow the plots' rate in force (the budget's rung), at most the session's 4 Hz.
        assert win.session._inspect_period == pytest.approx(max(0.25, 1 / win.budget.rates.plots_hz))
    finally:
        beat.stop()
        win.close()


def test_the_heatmap_shows_every_dim_under_the_per_dim_plot(qtbot) -> None:
    """Seen: the heatmap's first dim lay left of its view (the X link lines views up on screen, and the
    heatmap's left axis, labelled up to 60 envs, was wider than the per-dim plot's)."""
    from lucky_monitor.ui.inspector_view import InspectorView

    view = InspectorView()
    qtbot.addWidget(view)
    view.resize(340, 720)
    view.show()
    qtbot.waitExposed(view)
    obs = np.random.default_rng(3).normal(0, 1, (64, 16)).astype(np.float32)
    view.apply(dataclasses.replace(attached_tick(small_header()), inspector=frame_with(1, obs)))
    for _ in range(5):
        QtWidgets.QApplication.processEvents()
    heat_box, dim_box = view.heat_plot.getViewBox(), view.dim_plot.getViewBox()
    heat_rect = heat_box.sceneBoundingRect()
    for d in (0, 15):  # each end column's centre, on screen inside the heatmap's view, under the same dim above
        heat_x = heat_box.mapViewToScene(QtCore.QPointF(d, 1)).x()
        dim_x = dim_box.mapViewToScene(QtCore.QPointF(d, 0)).x()
        assert heat_rect.left() < heat_x < heat_rect.right(), (d, heat_x, heat_rect)
        assert abs(heat_x - dim_x) < 1.0
    low, high = heat_box.viewRange()[0]
    assert low <= -0.5 and high >= 15.5  # both end columns whole


def test_each_dim_is_a_box_and_the_selected_envs_are_dots(qtbot) -> None:
    """A band joining the dims suggested values between them; one box per dim does not."""
    from lucky_monitor.ui.inspector_view import InspectorView

    view = InspectorView()
    qtbot.addWidget(view)
    view.show()  # statistics are drawn while the view can be seen
    obs = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    obs[:, 2] = np.nan  # a dim with no finite value: no box
    view.apply(dataclasses.replace(attached_tick(small_header()), inspector=frame_with(1, obs)))
    x = view.box_minmax.opts["x"]
    assert list(x) == [0, 1, 3]
    np.testing.assert_array_equal(view.box_minmax.opts["y0"], obs[:, [0, 1, 3]].min(axis=0))
    np.testing.assert_array_equal(view.box_minmax.opts["y1"], obs[:, [0, 1, 3]].max(axis=0))
    tx, ty = view.mean_ticks.getData()
    assert len(tx) == 6 and tx[0] == pytest.approx(-0.4) and tx[1] == pytest.approx(0.4)
    np.testing.assert_allclose(ty[::2], obs[:, [0, 1, 3]].mean(axis=0))
    dots = view.dots.data
    assert len(dots) == 2 * 3  # envs 1 and 2 (frame_with selects them), three finite dims each
    np.testing.assert_allclose(sorted(dots["y"][:3]), obs[1, [0, 1, 3]])
    # each env named in its dots' colour (the grid frames it, and the plots draw its curve, in the same one)
    label = QtGui.QTextDocument()
    label.setHtml(view.dim_plot.titleLabel.text)
    assert "dots: env 1, env 2" in label.toPlainText()
    colours = {}
    block = label.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            if frag.text().startswith("env "):
                colours[frag.text()] = frag.charFormat().foreground().color().name()
            it += 1
        block = block.next()
    assert colours == {"env 1": pal.env_colour(0).lower(), "env 2": pal.env_colour(1).lower()}
    assert [pg.mkBrush(pal.env_colour(0)).color().name()] * 3 == [b.color().name() for b in dots["brush"][:3]]


def test_a_long_alarm_wraps_in_a_narrow_dock_instead_of_scrolling_sideways(qtbot) -> None:
    """Seen at 1920x1080, the Inspector docked left: "frame 924  image  env 1572  frozen  tile unchange…" behind a
    sideways scroll bar."""
    from lucky_monitor.core.inspector import Alarm, AlarmState
    from lucky_monitor.ui.inspector_view import InspectorView

    view = InspectorView(lambda: None)
    qtbot.addWidget(view)
    view.resize(240, 700)
    view.show()
    qtbot.waitExposed(view)
    alarm = Alarm("image", 1572, None, "frozen", 924, "tile unchanged while its obs changed")
    state = AlarmState(recent=(alarm,), image_total={"frozen": 1})
    view.apply(dataclasses.replace(attached_tick(small_header()), alarms=state))
    QtWidgets.QApplication.processEvents()
    lst = view.alarm_list
    assert view.alarm_lines == ["frame 924  image  env 1572  frozen  tile unchanged while its obs changed"]
    assert not lst.horizontalScrollBar().isVisible()
    rect = lst.visualItemRect(lst.item(0))
    assert rect.width() <= lst.viewport().width() and rect.height() > lst.fontMetrics().height() * 1.5  # wrapped


def test_the_table_is_told_of_a_refresh_once_and_still_fits_and_shows_the_new_numbers(qtbot) -> None:
    # 100 dims: each of the 1,000 cell changes had reached the view, and the header, sizing its columns to their
    # contents, measured the column again for each (55 ms a refresh beside a 4096-env engine).
    from lucky_monitor.ui.inspector_view import InspectorView

    view = InspectorView(lambda: None)
    qtbot.addWidget(view)
    view.resize(420, 700)
    view.show()
    view.tabs.setCurrentWidget(view.table)
    base = attached_tick(small_header())
    changes: list[int] = []
    view.table.model().dataChanged.connect(lambda *_: changes.append(1))
    obs = np.ones((8, 100), np.float32)
    view.apply(dataclasses.replace(base, inspector=frame_with(1, obs)))
    assert view.table.rowCount() == 100 and len(changes) == 1
    obs[:, 7] = np.linspace(-123456.7, 98765.4, 8)  # longer numbers in every column of dim 7
    view.apply(dataclasses.replace(base, inspector=frame_with(2, obs)))
    assert len(changes) == 2
    QtWidgets.QApplication.processEvents()
    assert view.table.item(7, 2).text() == f"{float(obs[:, 7].mean()):.4g}"
    assert view.table.item(7, 4).text() == "-1.235e+05" and view.table.item(7, 5).text() == "9.877e+04"
    metrics = view.table.fontMetrics()
    for col in range(6):  # the columns grew to the new numbers: none cut
        widest = max(metrics.horizontalAdvance(view.table.item(r, col).text()) for r in range(100))
        assert view.table.columnWidth(col) >= widest, col
