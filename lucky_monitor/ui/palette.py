"""The monitor's colours: the one place a colour of the window is written.

Python widgets (the application ``QPalette``, pyqtgraph, the status bar, the
image grid, the plots, the traffic table) import the constants below; QML reads
the same values through the :class:`Palette` singleton (``import
LuckyMonitor.Backend``), which ``Theme.qml`` forwards to the components. Every
constant is a ``"#rrggbb"`` string; :func:`rgba` adds an alpha for pyqtgraph.

A dark theme that stays readable from across a desk: status colours are
green (healthy), amber (waiting) and red (broken); grey is "nothing yet".
"""

from __future__ import annotations

from PySide6.QtCore import Property, QObject
from PySide6.QtGui import QColor
from PySide6.QtQml import QmlElement, QmlSingleton

__all__ = [
    "ACCENT",
    "ALTERNATE_BASE",
    "BAD",
    "BAND",
    "BRIGHT_TEXT",
    "CANVAS",
    "COLOURS",
    "CONTROL",
    "DARK",
    "DIM",
    "DISABLED_HIGHLIGHT",
    "DONES",
    "ENGINE",
    "ENV_COLOURS",
    "GOOD",
    "HIGHLIGHT",
    "LIGHT",
    "LINE",
    "MEAN",
    "MID",
    "MIDLIGHT",
    "SHADOW",
    "SURFACE",
    "TEXT",
    "TRAINER",
    "TRUNCATEDS",
    "WARN",
    "WINDOW",
    "Palette",
    "env_colour",
    "rgba",
]

QML_IMPORT_NAME = "LuckyMonitor.Backend"
QML_IMPORT_MAJOR_VERSION = 1

# --- surfaces, darkest first
SHADOW = "#000000"
CANVAS = "#0d1117"  # behind data: plots, the image grid
DARK = "#15171a"
WINDOW = "#1b1d21"  # the window, docks and QML panes
SURFACE = "#25282d"  # text fields, tables, lists
ALTERNATE_BASE = "#2c3036"  # alternate table rows
MID = "#2a2d33"
CONTROL = "#3a3f47"  # buttons, combo boxes, bars' empty part
LINE = "#3b4048"  # rules and borders
MIDLIGHT = "#464c54"
LIGHT = "#5a616b"

# --- text
TEXT = "#e9ebee"
DIM = "#9aa1ab"  # keys, hints, disabled text, "nothing yet"
BRIGHT_TEXT = "#ffffff"

# --- accents
ACCENT = "#5aa9ff"  # section titles, notices, links
HIGHLIGHT = "#2f6fbf"  # selected items
DISABLED_HIGHLIGHT = "#3a4a5e"
ENGINE = ACCENT  # the engine's share of a lock-step turn
TRAINER = "#c792ea"  # the trainer's share

# --- status
GOOD = "#4cd07d"
WARN = "#f5b935"
BAD = "#ff5f56"

# --- data series
BAND = "#5a8cff"  # reward band (percentile or min-max)
MEAN = "#f0f0f0"  # reward mean
DONES = "#ff7850"
TRUNCATEDS = "#78dc78"
#: Distinct colours of the selected envs, in selection order: each env's curve in the rewards plot, its
#: frame in the image grid and its dots in the Inspector, so a curve is told to the tile it comes from.
#: None near a data series' own colour (the band's blue, the mean's white, the dones' orange, the
#: truncateds' green): a selected env's curve is never read as a series.
ENV_COLOURS: tuple[str, ...] = (
    "#e6194b",  # red
    "#ffe119",  # yellow
    "#46f0f0",  # cyan
    "#f032e6",  # magenta
    "#d2a56e",  # tan
    "#fabebe",  # pink
    "#b39ddb",  # lavender
    "#bcbd22",  # olive
)

#: Every single colour above, by its QML name (the :class:`Palette` properties).
COLOURS: dict[str, str] = {
    "shadow": SHADOW,
    "canvas": CANVAS,
    "dark": DARK,
    "window": WINDOW,
    "surface": SURFACE,
    "alternateBase": ALTERNATE_BASE,
    "mid": MID,
    "control": CONTROL,
    "line": LINE,
    "midlight": MIDLIGHT,
    "light": LIGHT,
    "text": TEXT,
    "dim": DIM,
    "brightText": BRIGHT_TEXT,
    "accent": ACCENT,
    "highlight": HIGHLIGHT,
    "disabledHighlight": DISABLED_HIGHLIGHT,
    "engine": ENGINE,
    "trainer": TRAINER,
    "good": GOOD,
    "warn": WARN,
    "bad": BAD,
    "band": BAND,
    "mean": MEAN,
    "dones": DONES,
    "truncateds": TRUNCATEDS,
}


def rgba(colour: str, alpha: int = 255) -> tuple[int, int, int, int]:
    """``"#rrggbb"`` and an alpha as an ``(r, g, b, a)`` tuple of 0..255 (what pyqtgraph takes).

    Parameters
    ----------
    colour : str
        ``"#rrggbb"``.
    alpha : int
        0 (transparent) to 255 (opaque).

    Returns
    -------
    tuple of int
    """
    if len(colour) != 7 or colour[0] != "#":
        raise ValueError(f"expected #rrggbb, got {colour!r}")
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16), alpha


def env_colour(slot: int) -> str:
    """The colour of the ``slot``-th selected env (in selection order; the colours repeat after :data:`ENV_COLOURS`)."""
    return ENV_COLOURS[slot % len(ENV_COLOURS)]


def _colour(name: str) -> Property:
    value = QColor(COLOURS[name])

    def fget(self: QObject) -> QColor:
        return QColor(value)

    return Property(QColor, fget, constant=True)


@QmlElement
@QmlSingleton
class Palette(QObject):
    """The colours above as constant QML ``color`` properties (``Palette.good``...).

    ``Theme.qml`` forwards them to the LuckyMonitor components; QML never
    writes a colour of its own.
    """

    shadow = _colour("shadow")
    canvas = _colour("canvas")
    dark = _colour("dark")
    window = _colour("window")
    surface = _colour("surface")
    alternateBase = _colour("alternateBase")
    mid = _colour("mid")
    control = _colour("control")
    line = _colour("line")
    midlight = _colour("midlight")
    light = _colour("light")
    text = _colour("text")
    dim = _colour("dim")
    brightText = _colour("brightText")
    accent = _colour("accent")
    highlight = _colour("highlight")
    disabledHighlight = _colour("disabledHighlight")
    engine = _colour("engine")
    trainer = _colour("trainer")
    good = _colour("good")
    warn = _colour("warn")
    bad = _colour("bad")
    band = _colour("band")
    mean = _colour("mean")
    dones = _colour("dones")
    truncateds = _colour("truncateds")
