"""The window's layout at common screen sizes: docks inside, plots tall enough, controls in view.

A window of a segment that does not exist (it searches, no engine needed) is
shown at each size; the QML panel is given a hand-made attached Tick so that
it holds what it holds beside a running engine.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6 import QtCore, QtWidgets
from PySide6.QtCore import QPointF
from PySide6.QtQuick import QQuickItem

from tests.ui.ticks import attached_tick

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def window_at(qtbot, tmp_path):
    from lucky_monitor.ui.main_window import MainWindow

    made = []

    def make(width: int, height: int):
        settings = QtCore.QSettings(str(tmp_path / f"layout{len(made)}.ini"), QtCore.QSettings.Format.IniFormat)
        win = MainWindow(f"lm-layout-test-none-{os.getpid()}", settings=settings, persist=False)
        win.timer.stop()  # the hand-made tick below stays on the panel
        qtbot.addWidget(win)
        win.resize(width, height)
        win.show()
        qtbot.waitExposed(win)
        win.backend.apply(attached_tick(t=1.0))
        for _ in range(5):
            QtWidgets.QApplication.processEvents()
        made.append(win)
        return win

    yield make
    for win in made:
        win.close()


@pytest.mark.parametrize("size", [(1280, 800), (1600, 1000), (1920, 1080)])
def test_docks_stay_inside_the_window(window_at, size) -> None:
    win = window_at(*size)
    assert (win.width(), win.height()) == size
    inside = win.rect()
    for dock in win.findChildren(QtWidgets.QDockWidget):
        assert dock.isVisible()
        if win.tabifiedDockWidgets(dock):  # a tab (the inspector beside the traffic): checked when it is raised
            dock.raise_()
            for _ in range(3):
                QtWidgets.QApplication.processEvents()
        assert inside.contains(dock.geometry()), (dock.windowTitle(), dock.geometry(), inside)
    assert inside.contains(win.centralWidget().geometry())
    win.findChild(QtWidgets.QDockWidget, "Command_traffic").raise_()
    QtWidgets.QApplication.processEvents()
    # The traffic table shows all its columns, with no horizontal scrolling.
    table = win.traffic.table
    assert table.horizontalScrollBar().maximum() == 0
    assert table.horizontalHeader().length() <= table.viewport().width()


@pytest.mark.parametrize("size", [(1280, 800), (1600, 1000)])
def test_sim_mode_selector_is_visible_without_scrolling(window_at, size) -> None:
    win = window_at(*size)
    root = win.panel.rootObject()
    combo = root.findChild(QQuickItem, "simMode")
    assert combo is not None and combo.isVisible()
    top = combo.mapToItem(root, QPointF(0, 0)).y()
    assert 0 <= top and top + combo.height() <= win.panel.height(), (top, combo.height(), win.panel.height())


def test_each_plot_is_at_least_120_px_high_at_1600_by_1000(window_at) -> None:
    win = window_at(1600, 1000)
    plots = win.plots
    boxes = [p.getViewBox().sceneBoundingRect() for p in (plots.reward_plot, plots.counts_plot, plots.raster_plot)]
    for rect in boxes:
        assert rect.height() >= 120, boxes
    assert len({(r.left(), r.width()) for r in boxes}) == 1  # one x axis: the boxes line up
