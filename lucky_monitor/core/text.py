"""Short texts for sizes, ages and durations, shared by the window and the CLI.

Every function takes ``None`` (or a value that is not a finite number) for
"unknown" and answers :data:`DASH`, so a readout never shows ``0.0 ms`` or
``nan`` for something nobody measured. None of them raises for any input.

Text that comes from a segment (an envelope's error string, a reason built
from what the engine wrote) passes through :func:`safe_text` before any view
shows it: bounded in length, every control or otherwise unprintable
character escaped, so it is shown as exactly the characters it is (views
show it as plain text, never as markup).
"""

from __future__ import annotations

import math

__all__ = ["DASH", "SAFE_TEXT_LIMIT", "age_text", "ago_text", "bytes_text", "ms_text", "safe_text"]

#: What a readout shows for a value that is unknown or not measured.
DASH = "—"

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")

#: The default bound of :func:`safe_text`, in characters.
SAFE_TEXT_LIMIT = 200
_ELLIPSIS = "…"
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    named = _NAMED_ESCAPES.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def safe_text(text: object, limit: int = SAFE_TEXT_LIMIT) -> str:
    """``text`` made fit for a view: unprintable characters escaped, at most ``limit`` characters.

    Control characters become ``\\n``, ``\\r``, ``\\t`` or ``\\xNN``; other
    characters Python does not call printable (line and paragraph separators,
    bidirectional overrides, unassigned code points) ``\\uNNNN``. A text longer
    than ``limit`` after escaping is cut, never inside an escape, and ends in
    ``…``. Cost is bounded by ``limit``, not by the length of ``text``.

    Parameters
    ----------
    text
        Any value; not a ``str`` is shown through ``str()`` (``None`` as ``""``).
    limit
        The most characters returned (at least 1).

    Returns
    -------
    str
    """
    if text is None:
        return ""
    s = text if isinstance(text, str) else str(text)
    limit = max(1, int(limit))
    if len(s) <= limit and s.isprintable():
        return s
    out: list[str] = []
    used = 0
    for ch in s[: limit + 1]:
        piece = ch if ch.isprintable() else _escape(ch)
        if used + len(piece) > limit:
            break
        out.append(piece)
        used += len(piece)
    else:  # every character fitted (more than ``limit`` of them would not)
        return "".join(out)
    while out and used + len(_ELLIPSIS) > limit:
        used -= len(out.pop())
    return "".join(out) + _ELLIPSIS


def _number(value: object) -> float | None:
    """``value`` as a finite float, or ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        f = float(value)
    except OverflowError:  # an int beyond the float range
        return None
    return f if math.isfinite(f) else None


def bytes_text(n: float | None) -> str:
    """``n`` bytes in binary units: ``"64 B"``, ``"512 KiB"``, ``"1.3 MiB"``.

    Whole multiples of a unit print without a decimal (``"64 KiB"``), other
    values with one. Beyond the largest unit the count of that unit grows.

    Parameters
    ----------
    n
        A byte count; ``None``, negative or not a finite number gives :data:`DASH`.

    Returns
    -------
    str
    """
    value = _number(n)
    if value is None or value < 0:
        return DASH
    for unit in _BYTE_UNITS:
        if value < 1024 or unit == _BYTE_UNITS[-1]:
            if unit == "B" or value == int(value):
                return f"{int(value)} {unit}"
            text = f"{value:.1f}"
            if float(text) >= 1024 and unit != _BYTE_UNITS[-1]:  # 1023.96 KiB rounds to "1024.0": say 1.0 MiB
                value /= 1024
                return f"{value:.1f} {_BYTE_UNITS[_BYTE_UNITS.index(unit) + 1]}"
            return f"{text} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def age_text(seconds: float | None) -> str:
    """A coarse age: ``"12 s"``, ``"3 min"``, ``"5 h"``, ``"2 d"`` (rounded down; negative counts as 0).

    Parameters
    ----------
    seconds
        The age; ``None`` or not a finite number gives :data:`DASH`.

    Returns
    -------
    str
    """
    s = _number(seconds)
    if s is None:
        return DASH
    s = max(0.0, s)
    if s < 60:
        return f"{int(s)} s"
    if s < 3600:
        return f"{int(s // 60)} min"
    if s < 86400:
        return f"{int(s // 3600)} h"
    return f"{int(s // 86400)} d"


def ago_text(now: float, then: float | None) -> str:
    """``"12 s ago"`` for an event at ``then`` seen at ``now`` (same clock).

    Parameters
    ----------
    now, then
        Times in seconds. ``then`` ``None`` or ``0`` (never happened, not
        recorded) gives :data:`DASH`.

    Returns
    -------
    str
    """
    if not then:
        return DASH
    age = age_text(now - then)
    return age if age == DASH else f"{age} ago"


def ms_text(seconds: float | None, decimals: int = 1) -> str:
    """A duration in milliseconds: ``ms_text(0.00081) == "0.8 ms"``.

    Parameters
    ----------
    seconds
        The duration; ``None`` (not measured) or not a finite number gives :data:`DASH`.
    decimals
        Digits after the decimal point.

    Returns
    -------
    str
    """
    s = _number(seconds)
    if s is None:
        return DASH
    return f"{s * 1e3:.{max(0, decimals)}f} ms"
