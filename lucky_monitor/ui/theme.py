"""Apply the monitor's palette (:mod:`lucky_monitor.ui.palette`) to the widgets and pyqtgraph.

The roles match those ``DarkPane.qml`` gives the QML views, so widgets and
QML controls look alike.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6 import QtGui, QtWidgets

from . import palette as pal


def apply_theme(app: QtWidgets.QApplication) -> None:
    """The Fusion style with the dark palette, a readable font size, and pyqtgraph's colours."""
    app.setStyle("Fusion")
    p = QtGui.QPalette()
    c = QtGui.QColor
    role = QtGui.QPalette.ColorRole
    roles = {
        role.Window: pal.WINDOW,
        role.WindowText: pal.TEXT,
        role.Base: pal.SURFACE,
        role.AlternateBase: pal.ALTERNATE_BASE,
        role.Text: pal.TEXT,
        role.Button: pal.CONTROL,
        role.ButtonText: pal.TEXT,
        role.BrightText: pal.BRIGHT_TEXT,
        role.Highlight: pal.HIGHLIGHT,
        role.HighlightedText: pal.BRIGHT_TEXT,
        role.Light: pal.LIGHT,
        role.Midlight: pal.MIDLIGHT,
        role.Mid: pal.MID,
        role.Dark: pal.DARK,
        role.Shadow: pal.SHADOW,
        role.PlaceholderText: pal.DIM,
        role.ToolTipBase: pal.CONTROL,
        role.ToolTipText: pal.TEXT,
        role.Link: pal.ACCENT,
    }
    for r, colour in roles.items():
        p.setColor(r, c(colour))
    disabled = QtGui.QPalette.ColorGroup.Disabled
    for r in (role.Text, role.ButtonText, role.WindowText):
        p.setColor(disabled, r, c(pal.DIM))
    p.setColor(disabled, role.Highlight, c(pal.DISABLED_HIGHLIGHT))
    p.setColor(disabled, role.Button, c(pal.SURFACE))
    app.setPalette(p)
    font = app.font()
    if font.pointSizeF() < 10:
        font.setPointSizeF(10)
        app.setFont(font)
    pg.setConfigOptions(background=pal.CANVAS, foreground=pal.TEXT, antialias=False)
