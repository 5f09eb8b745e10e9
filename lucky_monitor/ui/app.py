"""``lucky-monitor`` (no subcommand): open the monitor window."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from ..protocol.errors import LuckyMonitorError
from ..transport.shm import validate_name


class DisplayError(LuckyMonitorError):
    exit_code = 2


def _check_display(screenshot: bool) -> None:
    """Fail with a clear message instead of Qt's abort when there is no screen."""
    if os.environ.get("QT_QPA_PLATFORM") or not sys.platform.startswith("linux"):
        return
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return
    if screenshot:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"  # a picture needs no screen
        return
    raise DisplayError("no display (DISPLAY/WAYLAND_DISPLAY unset); run under a desktop, use xvfb-run, "
                       "or pass --screenshot FILE --quit-after S to render offscreen")


def run_window(args: argparse.Namespace) -> int:
    name = args.shm or os.environ.get("LUCKY_SHM_NAME") or None
    if name is not None:
        validate_name(name)
    _check_display(bool(args.screenshot))

    from PySide6 import QtCore, QtWidgets

    from .main_window import MainWindow
    from .theme import apply_theme

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([sys.argv[0]])
    app.setApplicationName("lucky-monitor")
    apply_theme(app)
    win = MainWindow(name, columns=args.columns)
    win.show()
    result = {"error": None}

    def finish() -> None:
        if args.screenshot:
            try:
                win.save_screenshot(args.screenshot)
                print(f"screenshot saved to {args.screenshot}", flush=True)
            except OSError as exc:
                result["error"] = str(exc)
        win.close()
        app.quit()

    if args.quit_after:
        QtCore.QTimer.singleShot(int(args.quit_after * 1000), finish)
    old = signal.signal(signal.SIGINT, lambda *_: win.close() or app.quit())
    try:
        app.exec()
    finally:
        signal.signal(signal.SIGINT, old)
        win.close()
        win.deleteLater()
        QtCore.QCoreApplication.sendPostedEvents(None, QtCore.QEvent.Type.DeferredDelete)
        app.processEvents()
    if result["error"]:
        raise LuckyMonitorError(f"screenshot: {result['error']}")
    return 0
