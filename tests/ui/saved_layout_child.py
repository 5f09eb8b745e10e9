"""One start of the monitor window on a screen of a given size, for ``test_saved_layout.py``.

``python saved_layout_child.py SETTINGS_INI ACTION`` under
``QT_QPA_PLATFORM=offscreen:configfile=...`` (the offscreen platform with one
screen of the test's size; the platform is chosen once per process, hence a
child). The window searches for a segment that does not exist (no engine
needed), with its settings in SETTINGS_INI, as ``lucky-monitor`` opens it
(the theme applied first). ACTION, done once the window is shown:

* ``split``: the Inspector and the RPC panel split off from their tabs into docks of their own, below the
  command traffic (right): a column of four docks, taller than a 1280x800 screen;
* ``raise``: the Inspector's tab brought to the front;
* ``report``: nothing.

The window then closes, saving its layout as at any exit. One line of JSON
on stdout says how the window was shown (see :func:`report`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from PySide6 import QtCore, QtWidgets
from PySide6.QtCore import Qt


def _rect(r: QtCore.QRect) -> list[int]:
    return [r.x(), r.y(), r.width(), r.height()]


def report(win, saved_before: bytes, ini: Path) -> dict:
    panel = win.findChild(QtWidgets.QDockWidget, "RPC_panel")
    needed = win.minimumSizeHint().expandedTo(win.minimumSize())
    return {
        "available": _rect(win.screen().availableGeometry()),
        "frame": _rect(win.frameGeometry()),
        "needed": [needed.width(), needed.height()],
        "message": win.statusBar().currentMessage(),
        "state_label_visible": win.state_label.isVisible(),
        "inspector_tabbed": win.inspector_dock in win.tabifiedDockWidgets(panel),
        "inspector_area": win.dockWidgetArea(win.inspector_dock).name,
        "inspector_in_view": win.rect().intersects(win.inspector_dock.geometry()),  # a tab behind lies outside
        "settings_untouched_while_open": (ini.read_bytes() if ini.exists() else b"") == saved_before,
    }


def main() -> None:
    ini, action = Path(sys.argv[1]), sys.argv[2]
    from lucky_monitor.ui.main_window import MainWindow
    from lucky_monitor.ui.theme import apply_theme

    app = QtWidgets.QApplication([sys.argv[0]])
    apply_theme(app)
    saved_before = ini.read_bytes() if ini.exists() else b""
    settings = QtCore.QSettings(str(ini), QtCore.QSettings.Format.IniFormat)
    win = MainWindow(f"lm-saved-layout-test-none-{os.getpid()}", settings=settings)
    win.show()
    for _ in range(20):
        app.processEvents()
    if action == "split":
        panel = win.findChild(QtWidgets.QDockWidget, "RPC_panel")
        for dock in (win.inspector_dock, panel):
            win.removeDockWidget(dock)
            win.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock, Qt.Orientation.Vertical)
            dock.show()
    elif action == "raise":
        win.show_inspector()
    for _ in range(20):
        app.processEvents()
    result = report(win, saved_before, ini)
    win.close()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
