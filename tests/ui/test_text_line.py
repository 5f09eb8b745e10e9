"""TextLine: a new text repaints the line without re-laying out the window; elided, coloured, tooltipped."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest
from PySide6 import QtCore, QtGui, QtWidgets

from lucky_monitor.ui.text_line import TextLine


class LayoutRequests(QtCore.QObject):
    """Counts the layout requests a widget receives."""

    def __init__(self, widget: QtWidgets.QWidget) -> None:
        super().__init__()
        self.count = 0
        widget.installEventFilter(self)

    def eventFilter(self, obj, event):
        if event.type() == QtCore.QEvent.Type.LayoutRequest:
            self.count += 1
        return False


def window_with(qtbot, line: QtWidgets.QWidget) -> QtWidgets.QMainWindow:
    """A main window with a dock and a status bar, ``line`` nested two layouts deep in its central widget."""
    win = QtWidgets.QMainWindow()
    qtbot.addWidget(win)
    inner = QtWidgets.QWidget()
    row = QtWidgets.QHBoxLayout(inner)
    row.addWidget(line, 1)
    row.addWidget(QtWidgets.QLabel("beside"))
    central = QtWidgets.QWidget()
    col = QtWidgets.QVBoxLayout(central)
    col.addWidget(QtWidgets.QPushButton("above"))
    col.addWidget(inner)
    win.setCentralWidget(central)
    dock = QtWidgets.QDockWidget("dock")
    dock.setWidget(QtWidgets.QLabel("docked"))
    win.addDockWidget(QtCore.Qt.DockWidgetArea.RightDockWidgetArea, dock)
    win.statusBar().addWidget(QtWidgets.QLabel("status"))
    win.resize(640, 240)
    win.show()
    qtbot.waitExposed(win)
    return win


def settle() -> None:
    for _ in range(3):
        QtCore.QCoreApplication.sendPostedEvents()
        QtWidgets.QApplication.processEvents()


@pytest.mark.parametrize("kind", ["TextLine", "QLabel"])
def test_a_new_text_repaints_the_line_and_asks_for_room_only_when_wider(qtbot, kind) -> None:
    line = TextLine("image_seq 100") if kind == "TextLine" else QtWidgets.QLabel("image_seq 100")
    win = window_with(qtbot, line)
    settle()
    requests = LayoutRequests(win)
    for seq in range(101, 121):  # counters moving: the same width or narrower
        line.setText(f"image_seq {seq}")
        settle()
    line.setText("image_seq 9")
    settle()
    if kind == "QLabel":  # what the line is for: a label's every new text re-lays out the window
        assert requests.count >= 20
        return
    assert line.text() == "image_seq 9"
    assert requests.count == 0
    line.setText("image_seq 123456789012")  # wider than any text before: it asks for room once
    settle()
    assert requests.count == 1
    assert line.sizeHint().width() >= line.fontMetrics().horizontalAdvance("image_seq 123456789012")
    line.setText("image_seq 12345678901")  # a little narrower: the hint stays, no new layout
    settle()
    assert requests.count == 1
    line.setText("x")  # much narrower: the room goes back to the neighbours, once
    settle()
    assert requests.count == 2


def test_a_line_narrower_than_its_text_elides_it_and_its_tooltip_holds_the_whole(qtbot) -> None:
    line = TextLine(tooltip_is_text=True)
    qtbot.addWidget(line)
    text = "64 envs 64x64  image_seq 1000000000000000  image_frame_seq 500000000000000  torn copies skipped 3"
    line.setText(text)
    assert line.toolTip() == text and line.text() == text
    assert line.minimumSizeHint().width() == 0  # a long text never sets the window's minimum width
    line.resize(120, line.sizeHint().height())
    image = line.grab().toImage()
    ink = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())
    assert ink.any()  # something is drawn
    plain = TextLine()
    assert plain.toolTip() == ""
    plain.setText("no tooltip")
    assert plain.toolTip() == ""


def test_the_line_is_drawn_in_its_style_sheets_colour_and_font(qtbot) -> None:
    line = TextLine("WWWW")
    qtbot.addWidget(line)
    line.setStyleSheet("color: #ff0000; background: #000000;")
    line.setAttribute(QtCore.Qt.WidgetAttribute.WA_StyledBackground, True)
    line.resize(200, 30)
    line.show()
    qtbot.waitExposed(line)
    image = line.grab().toImage().convertToFormat(QtGui.QImage.Format.Format_RGB32)
    px = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine() // 4, 4)
    red = (px[..., 2] > 150) & (px[..., 1] < 80) & (px[..., 0] < 80)
    assert red.sum() > 20, "the text is drawn in the style sheet's colour"
    before = line.sizeHint().width()
    font = line.font()
    font.setPointSizeF(font.pointSizeF() * 2)
    line.setFont(font)
    assert line.sizeHint().width() > before  # a larger font: a wider hint for the same text


@pytest.mark.parametrize("point_size", [8.0, 9.0, 9.5, 10.3, 13.0])
def test_a_line_given_its_size_hint_shows_its_whole_text(qtbot, point_size) -> None:
    """The hint is the text's exact width rounded up: a whole-pixel advance rounded down cut the last letters.

    Seen under Xvfb: the status bar's budget line, laid out at its hint, read
    "over budget at the lowest rat…".
    """
    line = TextLine()
    qtbot.addWidget(line)
    font = line.font()
    font.setPointSizeF(point_size)
    line.setFont(font)
    texts = [
        "CPU 15 % of 10 % · images all · plots 0.5 Hz · panel 0.5 Hz · over budget at the lowest rates",
        "49.7 frames/s   49.7 images/s   poll  1.8 ms",
        "lock-step with trainer pid 22796",
        "iiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiii",
    ]
    for text in texts:
        line.setText(text)
        width = line.sizeHint().width() - line.contentsMargins().left() - line.contentsMargins().right()
        exact = QtGui.QFontMetricsF(line.font()).horizontalAdvance(text)
        assert exact <= width
        assert line.fontMetrics().elidedText(text, QtCore.Qt.TextElideMode.ElideRight, width) == text


def test_a_much_narrower_text_gives_the_room_back_a_slightly_narrower_one_does_not(qtbot) -> None:
    """Seen: after a fast phase ('2758.5 frames/s') the status bar's rate line kept its widest hint, and the
    budget line beside it elided for the rest of the session."""
    line = TextLine("engine 2758.5 frames/s · 2758.5 images/s")
    qtbot.addWidget(line)
    wide = line.sizeHint().width()
    line.setText("engine 2758.4 frames/s · 2758.9 images/s")
    assert line.sizeHint().width() == wide  # about as wide: no new layout
    line.setText("engine 49.7 frames/s")
    assert line.sizeHint().width() < 0.8 * wide
    assert line.sizeHint().width() == line.text_width()


def test_a_line_too_narrow_for_its_text_shows_the_first_shorter_form_that_fits(qtbot) -> None:
    line = TextLine(tooltip_is_text=True)
    qtbot.addWidget(line)
    forms = ("engine 49.7 frames/s and 49.7 images/s", "49.7 frames/s 49.7 images/s", "49.7 f/s")
    line.setText(*forms)
    assert line.text() == line.toolTip() == forms[0]
    metrics = QtGui.QFontMetricsF(line.font())
    hint = line.sizeHint()
    assert hint.width() >= metrics.horizontalAdvance(forms[0])  # room is asked for the whole text
    for form in forms:
        line.resize(int(metrics.horizontalAdvance(form)) + 1, hint.height())
        assert line.shown_text() == form
    line.resize(int(metrics.horizontalAdvance(forms[1])) - 2, hint.height())  # between two forms: the shorter
    assert line.shown_text() == forms[2]
    line.resize(int(metrics.horizontalAdvance(forms[2])) - 2, hint.height())
    assert line.shown_text().startswith("49") and line.shown_text().endswith("…")  # none fits: the shortest, elided
    line.setText(forms[0])  # the same text without shorter forms elides it
    line.resize(int(metrics.horizontalAdvance(forms[1])), hint.height())
    assert line.shown_text().startswith("engine") and line.shown_text().endswith("…")
