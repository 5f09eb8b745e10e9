"""``lucky-monitor`` (no subcommand): open the monitor window."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import typing

from ..core.outputs import check_output_path as check_output_path  # re-exported: the window's checks use it
from ..core.session import validate_name
from ..protocol.errors import LuckyMonitorError


class DisplayError(LuckyMonitorError):
    exit_code = 2


XCB_PACKAGES = (
    "libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0 "
    "libxcb-xkb1 libxkbcommon-x11-0 libxcb-shape0 libxcb-randr0 libxcb-xfixes0"
)

_PROBE = "import sys\nfrom PySide6.QtGui import QGuiApplication\nQGuiApplication(sys.argv[:1])\n"


def check_display(screenshot: bool = False) -> None:
    """Fail with one clear message where Qt would abort the process.

    Qt calls ``abort()`` when it has no screen or when its platform plugin
    cannot load (on Linux the xcb plugin needs a few X libraries that minimal
    systems lack), so both are checked first: the second in a short-lived
    child process, only when the xcb plugin is about to be used.
    """
    if os.environ.get("QT_QPA_PLATFORM") or not sys.platform.startswith("linux"):
        return
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        if screenshot:
            os.environ["QT_QPA_PLATFORM"] = "offscreen"  # a picture needs no screen
            return
        raise DisplayError(
            "no display (DISPLAY/WAYLAND_DISPLAY unset); run under a desktop, use xvfb-run, "
            "or pass --screenshot FILE --quit-after S to render offscreen"
        )
    try:
        probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DisplayError(f"could not start Qt on this display: {exc}") from None
    if probe.returncode != 0:
        hint = next((ln for ln in probe.stderr.splitlines() if "qt.qpa" in ln or "could not" in ln.lower()), "")
        raise DisplayError(
            f"Qt cannot open a window on this display ({hint.strip() or 'platform plugin failed'}); "
            f"on Debian/Ubuntu: sudo apt-get install {XCB_PACKAGES}"
        )


def write_json_atomically(path: str, obj: object) -> None:
    """Write ``obj`` as JSON to ``path`` through a temporary file in the same directory."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def check_screenshot_path(path: str) -> None:
    """Refuse a ``--screenshot`` file that could not be written, before any window exists.

    Parameters
    ----------
    path
        The PNG to write.

    Raises
    ------
    UsageError
        ``path`` is a directory, or its directory is missing or not writable.
    """
    check_output_path(path, "--screenshot", "shot.png")


#: Qt messages that say nothing to a user: the offscreen platform (headless runs, ``--screenshot``)
#: has no window manager to take a window's size hints, and says so each time the layout sets them.
QUIET_QT_MESSAGES = frozenset({"This plugin does not support propagateSizeHints()"})


def _qt_message(mode: object, context: object, message: str) -> None:
    """Qt's messages on stderr as Qt prints them (category, then text), less :data:`QUIET_QT_MESSAGES`."""
    if message in QUIET_QT_MESSAGES:
        return
    category = getattr(context, "category", None)
    prefix = f"{category}: " if category and category != "default" else ""
    sys.stderr.write(f"{prefix}{message}\n")


def run_window(args: argparse.Namespace) -> int:
    name = args.shm or os.environ.get("LUCKY_SHM_NAME") or None
    if name is not None:
        validate_name(name)
    if args.screenshot:
        check_screenshot_path(args.screenshot)
    stats_path = getattr(args, "stats_json", None)
    if stats_path:
        check_output_path(stats_path, "--stats-json")
    check_display(bool(args.screenshot))

    # From here on Ctrl-C / SIGTERM only ask for the end: a KeyboardInterrupt raised inside a Qt
    # callback while the window and its QML load would be printed and lost, and the window
    # would then run on. The request is honoured as soon as the window exists.
    asked: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, _frame: asked.append(signum))
    old_term = signal.signal(signal.SIGTERM, lambda signum, _frame: asked.append(signum))
    try:
        return _run_window(args, name, stats_path, asked)
    finally:
        signal.signal(signal.SIGINT, old)
        signal.signal(signal.SIGTERM, old_term)


def quiet_gui_threads(environ: typing.MutableMapping[str, str] = os.environ) -> None:
    """Keep Qt's raster painting on the GUI thread unless asked not to.

    Qt's GUI thread pool splits large raster fills across worker threads; for
    the monitor's small repaints that buys nothing and costs hundreds of
    cross-core wake-ups a second on the cores the trainer is using. Qt
    disables the pool when ``QT_NO_GUI_THREADPOOL`` is set to any value, so
    the way back is ``LUCKY_GUI_THREADPOOL=1``. Must run before the
    QGuiApplication is made.
    """
    if environ.get("LUCKY_GUI_THREADPOOL", "") not in ("", "0"):
        return
    environ.setdefault("QT_NO_GUI_THREADPOOL", "1")


def _run_window(args: argparse.Namespace, name: str | None, stats_path: str | None, asked: list[int]) -> int:
    from PySide6 import QtCore, QtWidgets

    from lucky_monitor.core.budget import lower_priority
    from lucky_monitor.core.pacing import DEFAULT_YIELD_US

    from .main_window import MainWindow
    from .theme import apply_theme

    lower_priority(int(getattr(args, "nice", 10)))
    quiet_gui_threads()
    QtCore.qInstallMessageHandler(_qt_message)
    # instance() is typed as QCoreApplication; here it can only be a QApplication
    app = typing.cast(QtWidgets.QApplication | None, QtWidgets.QApplication.instance())
    app = app or QtWidgets.QApplication([sys.argv[0]])
    app.setApplicationName("lucky-monitor")
    apply_theme(app)
    one_off = args.columns is not None or bool(args.screenshot)  # a one-off run never overwrites saved layout
    budget = getattr(args, "cpu_budget", None)
    win = MainWindow(
        name,
        columns=args.columns,
        persist=not one_off,
        cpu_budget=10.0 if budget is None else float(budget),
        allow_other_user=bool(getattr(args, "allow_other_user", False)),
        fit_screen=not args.screenshot,  # a picture is not bounded by a screen (offscreen: a notional one)
        yield_us=float(getattr(args, "yield_us", DEFAULT_YIELD_US)),
    )
    win.show()
    result: dict[str, str | None] = {"error": None}

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

    def on_sigint(*_: object) -> None:
        # Python runs this between two bytecodes, possibly in the middle of a tick:
        # close from the event loop, never from inside the tick.
        QtCore.QTimer.singleShot(0, close_and_quit)

    def close_and_quit() -> None:
        win.close()  # unloads the QML before the backend goes, saves settings and --stats-json
        app.quit()  # even if another top-level window (the 1:1 view) is still open

    signal.signal(signal.SIGINT, on_sigint)
    signal.signal(signal.SIGTERM, on_sigint)  # the same orderly end: settings and --stats-json saved
    if asked:  # asked to stop while the window was being made
        QtCore.QTimer.singleShot(0, close_and_quit)
    try:
        app.exec()
    finally:
        win.close()
        if stats_path:
            try:
                write_json_atomically(stats_path, win.run_stats())
            except OSError as exc:
                result["error"] = result["error"] or f"--stats-json: {exc}"
        win.deleteLater()
        QtCore.QCoreApplication.sendPostedEvents(None, QtCore.QEvent.Type.DeferredDelete)
        app.processEvents()
    error = result["error"]
    if error:
        raise LuckyMonitorError(error if error.startswith("--") else f"screenshot: {error}")
    return 0
