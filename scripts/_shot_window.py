"""The monitor window for the screenshot scripts: a 1920x1080 window on NAME with throw-away settings.

``open_window(name)`` returns ``(win, run)``: the shown window and
``run(seconds)``, which turns the event loop for that long.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any


def open_window(name: str, *, size: tuple[int, int] = (1920, 1080)) -> tuple[Any, Callable[[float], None]]:
    from PySide6 import QtCore, QtWidgets

    from lucky_monitor.ui.main_window import MainWindow
    from lucky_monitor.ui.theme import apply_theme

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([sys.argv[0]])
    apply_theme(app)  # type: ignore[arg-type]
    ini = os.path.join(tempfile.mkdtemp(), "s.ini")
    win = MainWindow(name, settings=QtCore.QSettings(ini, QtCore.QSettings.Format.IniFormat), persist=False)
    win.resize(*size)
    win.show()

    def run(seconds: float) -> None:
        # The application's own event loop, as the window runs under `lucky-monitor`: turned by hand
        # (processEvents and a nap), the first layout gave the RPC panel 652 px of a 1920 px window.
        loop = QtCore.QEventLoop()
        QtCore.QTimer.singleShot(max(1, round(seconds * 1000)), loop.quit)
        loop.exec()

    return win, run
