"""One line of plain text that changes often without re-laying out the window.

A ``QLabel`` whose text changes asks for a new layout, and Qt passes that
request up through every parent layout to the window: a counter in the grid's
status line re-laid out the main window, its docks, status bar and splitter,
five times a second (0.4-0.6 ms each with the demo running beside it, and a
geometry animation object made and deleted per dock each time). A
:class:`TextLine` repaints itself for a new text and asks for room only when a
text is wider than its size hint, or much narrower (below :data:`SHRINK_BELOW`
of it: the room goes back to its neighbours); a line narrower than its text
shows the first of its shorter forms that fits (if it was given any, see
:meth:`TextLine.setText`), or else elides the shortest at the right (the whole
text is then in the tooltip, if the line was made with ``tooltip_is_text``).
"""

from __future__ import annotations

import math

from PySide6 import QtCore, QtGui, QtWidgets

__all__ = ["SHRINK_BELOW", "TextLine"]

#: A text narrower than this share of the size hint shrinks the hint to it (small changes never re-lay out).
SHRINK_BELOW = 0.8


class TextLine(QtWidgets.QWidget):
    """A single line of plain text, drawn in the palette's window-text colour (a style sheet's ``color``).

    Parameters
    ----------
    text
        The first text.
    parent
        The parent widget.
    tooltip_is_text
        Keep the tooltip equal to the text (for lines that may be cut).
    """

    def __init__(self, text: str = "", parent: QtWidgets.QWidget | None = None, *, tooltip_is_text: bool = False):
        super().__init__(parent)
        self._text = ""
        self._shorter: tuple[str, ...] = ()
        self._width = 0  # the size hint's width: the widest text since the hint last shrank
        self._tooltip_is_text = tooltip_is_text
        self.setSizePolicy(QtWidgets.QSizePolicy.Policy.Preferred, QtWidgets.QSizePolicy.Policy.Fixed)
        self.setText(text)

    def text(self) -> str:
        """The whole text (not the shorter or elided one on screen)."""
        return self._text

    def shown_text(self) -> str:
        """The text as drawn at the line's present width: whole, a shorter form, or elided."""
        width = self.contentsRect().width()
        metrics = QtGui.QFontMetricsF(self.font())
        for candidate in (self._text, *self._shorter):
            if metrics.horizontalAdvance(candidate) <= width:
                return candidate
        last = self._shorter[-1] if self._shorter else self._text
        return metrics.elidedText(last, QtCore.Qt.TextElideMode.ElideRight, width)

    def setText(self, text: str, *shorter: str) -> None:
        """Show ``text``: a repaint of this line; a new layout only for a text wider than any before.

        ``shorter``: the same content in fewer words, longest first. Where the
        line is narrower than ``text`` it shows the first of them that fits
        whole (a readout beside the grid's counters had cut them to "64 envs
        64x64  image_seq 2534  i…"); where none does, the last, elided. The
        size hint and the tooltip are ``text``'s.
        """
        text = str(text)
        short = tuple(str(v) for v in shorter)
        if text == self._text and short == self._shorter:
            return
        self._text = text
        self._shorter = short
        if self._tooltip_is_text:
            self.setToolTip(text)
        width = self._advance(text)
        # Wider asks for room; much narrower gives it back (a hint that kept the widest text ever, "2758.5
        # frames/s" in a fast phase, made the line's neighbours elide after it had shrunk back).
        if width > self._width or width < SHRINK_BELOW * self._width:
            self._width = width
            self.updateGeometry()
        self.update()

    def text_width(self) -> int:
        """The room the current text needs (margins included), whatever the size hint (the widest text so far)."""
        m = self.contentsMargins()
        return self._advance(self._text) + m.left() + m.right() if self._text else 0

    def _advance(self, text: str) -> int:
        """The room ``text`` needs, in whole pixels rounded up.

        ``QFontMetrics.horizontalAdvance`` rounds a text's width to the nearest
        pixel, while the elision in :meth:`paintEvent` compares the exact one:
        a line given its rounded-down width cut its own last word ("over budget
        at the lowest rat…" under Xvfb's fonts).
        """
        return math.ceil(QtGui.QFontMetricsF(self.font()).horizontalAdvance(text)) + 1

    def sizeHint(self) -> QtCore.QSize:
        m = self.contentsMargins()
        return QtCore.QSize(self._width + m.left() + m.right(), self.fontMetrics().height() + m.top() + m.bottom())

    def minimumSizeHint(self) -> QtCore.QSize:
        m = self.contentsMargins()
        return QtCore.QSize(0, self.fontMetrics().height() + m.top() + m.bottom())

    def changeEvent(self, event: QtCore.QEvent) -> None:
        if event.type() == QtCore.QEvent.Type.FontChange:  # a new font: the width of the text in it
            self._width = self._advance(self._text)
            self.updateGeometry()
        super().changeEvent(event)

    def paintEvent(self, event: QtGui.QPaintEvent) -> None:
        if not self._text:
            return
        painter = QtGui.QPainter(self)
        rect = self.contentsRect()
        text = self.shown_text()
        painter.setPen(self.palette().color(QtGui.QPalette.ColorRole.WindowText))
        align = QtCore.Qt.AlignmentFlag.AlignLeft | QtCore.Qt.AlignmentFlag.AlignVCenter
        painter.drawText(rect, int(align), text)
