"""The monitor window for the screenshot scripts: a 1920x1080 window on NAME with throw-away settings.

``open_window(name)`` returns ``(win, run)``: the shown window and
``run(seconds)``, which turns the event loop for that long.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any


def open_window(
    name: str, *, size: tuple[int, int] = (1920, 1080), nap_s: float = 0.002
) -> tuple[Any, Callable[[float], None]]:
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
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            app.processEvents()
            time.sleep(nap_s)

    return win, run
