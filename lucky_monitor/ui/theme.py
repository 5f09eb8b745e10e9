"""A dark Fusion palette, readable from across a desk, shared by widgets and pyqtgraph."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6 import QtGui, QtWidgets

BG = "#0d1117"
PANEL = "#161b22"
TEXT = "#e6edf3"
MUTED = "#8b949e"
ACCENT = "#58a6ff"


def apply_theme(app: QtWidgets.QApplication) -> None:
    app.setStyle("Fusion")
    p = QtGui.QPalette()
    c = QtGui.QColor
    role = QtGui.QPalette.ColorRole
    p.setColor(role.Window, c(PANEL))
    p.setColor(role.WindowText, c(TEXT))
    p.setColor(role.Base, c(BG))
    p.setColor(role.AlternateBase, c("#1c2128"))
    p.setColor(role.ToolTipBase, c(PANEL))
    p.setColor(role.ToolTipText, c(TEXT))
    p.setColor(role.Text, c(TEXT))
    p.setColor(role.Button, c("#21262d"))
    p.setColor(role.ButtonText, c(TEXT))
    p.setColor(role.Highlight, c(ACCENT))
    p.setColor(role.HighlightedText, c(BG))
    p.setColor(role.PlaceholderText, c(MUTED))
    for r in (role.Text, role.ButtonText, role.WindowText):
        p.setColor(QtGui.QPalette.ColorGroup.Disabled, r, c(MUTED))
    app.setPalette(p)
    font = app.font()
    if font.pointSizeF() < 10:
        font.setPointSizeF(10)
        app.setFont(font)
    pg.setConfigOptions(background=BG, foreground=TEXT, antialias=False)
