"""``type=`` functions for argparse options: a number in a range, or seconds in a range.

The command line's subcommands (``lucky_monitor.cli`` and the headless ones)
check their numbers with these, so a bad value is argparse's one-line usage
error naming the option, before any segment is looked up.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

__all__ = ["in_range", "name_prefix", "plain_float", "plain_int", "plain_number", "ranged", "seconds_between"]

_INT_RE = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)", re.IGNORECASE
)


def plain_number(text: str, kind: type[float] | type[int] = float) -> float:
    """``text`` as a ``kind``, written the usual way: ASCII digits, a point, an exponent; spaces around it.

    Python's ``int()`` and ``float()`` also take digit-group underscores and other scripts' digits:
    ``draw line --start 1_0,0,0`` had drawn from x = 10. Raises ``ValueError`` for anything else.
    """
    t = text.strip()
    if not (_INT_RE if kind is int else _FLOAT_RE).fullmatch(t):
        raise ValueError(f"{text!r} is not a plain number")
    return kind(t)


def plain_int(text: str) -> int:
    """A ``type=`` for a whole number written the plain way (:func:`plain_number`); the range is the caller's."""
    try:
        return int(plain_number(text, int))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def plain_float(text: str) -> float:
    """A ``type=`` for a number written the plain way (:func:`plain_number`); the range is the caller's."""
    try:
        return plain_number(text, float)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def in_range(text: str, kind: type[float] | type[int], low: float, high: float, what: str) -> float:
    """``text`` as a ``kind`` from ``low`` to ``high``; otherwise argparse's error, ``what`` naming the range."""
    try:
        v = plain_number(text, kind)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole number' if kind is int else 'number'}") from None
    if not low <= v <= high:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{text!r} must be {what}")
    return v


def seconds_between(low: float, high: float) -> Callable[[str], float]:
    """A ``type=`` for seconds from ``low`` to ``high`` (a tiny or huge value means nothing sensible)."""

    def parse(text: str) -> float:
        return in_range(text, float, low, high, f"seconds, {low:g} to {high:g}")

    return parse


def ranged(kind: type[int] | type[float], low: float, high: float, what: str) -> Callable[[str], float]:
    """A ``type=`` for a ``kind`` from ``low`` to ``high``; ``what`` names the range in the error."""

    def parse(text: str) -> float:
        v = in_range(text, kind, low, high, what)
        return int(v) if kind is int else v

    return parse


_PREFIX_RE = re.compile(r"[A-Za-z0-9_.-]{0,200}")


def name_prefix(text: str) -> str:
    """A ``type=`` for a segment-name prefix: the characters a name may hold (``A-Z a-z 0-9 _ . -``), or empty.

    ``list --prefix ../`` had answered ``no ../* segments`` where every
    command refuses a ``/`` in a name.
    """
    if not _PREFIX_RE.fullmatch(text):
        bad = next((c for c in text if not _PREFIX_RE.fullmatch(c)), None)
        why = f"{bad!r} is not allowed; use A-Z a-z 0-9 _ . -" if bad is not None else "at most 200 characters"
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: {why}")
    return text
