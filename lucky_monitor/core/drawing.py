"""Debug-draw requests, built from plain numbers or from CLI text.

The one place that turns user input into a ``DrawReq``: ``lucky-monitor draw``
and the window's debug-draw form both build through here, so the same input
gives the same request, or the same refusal.

One rule for out-of-range input: refuse it with a :class:`DrawInputError`
whose message names the field (or the option) and the value; never clamp,
never let the envelope encoder find out later. Refused are:

* anything that is not a real number (text, ``None``, ``bool``);
* non-finite numbers (``nan``, ``inf``);
* finite numbers a float32 cannot hold (``|x| > 3.4028235e38``; every float
  of a ``DrawReq`` travels as float32, see ``schema/hazel_rpc.fbs``);
* colour channels outside ``0..1`` (the schema's ``Color``: "each channel 0..1");
* a scale that is not ``> 0`` (a multiplier of drawn length; the engine reads
  an unset scale, 0, as 1, so 0 cannot mean "invisible", and a negative one
  would silently turn the arrow around).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import cast

from ..protocol.errors import UsageError
from ..protocol.messages import Arrow, Color, DrawReq, Line, Vec3, VelocityCommand
from .argtypes import plain_number

__all__ = [
    "DEFAULT_COLOR",
    "FLOAT32_MAX",
    "DrawInputError",
    "arrow_request",
    "clear_request",
    "color",
    "line_request",
    "number",
    "parse_color",
    "parse_numbers",
    "scale_value",
    "vec",
    "velocity_request",
]

#: Red, slightly desaturated, opaque: what the CLI and the form start with.
DEFAULT_COLOR = (1.0, 0.2, 0.2, 1.0)
#: The largest finite float32.
FLOAT32_MAX = 3.4028234663852886e38


class DrawInputError(UsageError):
    """A coordinate, colour or scale that cannot be sent; the message names the field (a usage error, exit 2)."""


def number(value: object, field: str) -> float:
    """``value`` as a float a ``DrawReq`` can carry, or :class:`DrawInputError`.

    Parameters
    ----------
    value
        A real number (``int``, ``float``, numpy scalars); not a ``bool``.
    field
        Named in the error message (``"start.x"``, ``"--scale"``).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy scalars are Real too
        raise DrawInputError(f"{field}: {value!r} is not a number")
    try:
        x = float(value)
    except OverflowError:  # an int beyond any float
        # int() takes any Real, but typeshed's numbers.Real matches none of its overloads
        digits = len(str(abs(int(value))))  # type: ignore[call-overload]
        raise DrawInputError(
            f"{field}: an integer of {digits} digits is outside the float32 range (±{FLOAT32_MAX:.7g})"
        ) from None
    if not math.isfinite(x):
        raise DrawInputError(f"{field}: {x} is not a finite number")
    if abs(x) > FLOAT32_MAX:
        raise DrawInputError(f"{field}: {x:g} is outside the float32 range (±{FLOAT32_MAX:.7g})")
    return x


def _numbers(values: object, counts: tuple[int, ...], field: str, names: str) -> tuple[float, ...]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        try:
            values = tuple(cast(Iterable[object], values))
        except TypeError:
            raise DrawInputError(f"{field}: expected {_counts(counts, names)}, got {values!r}") from None
    if len(values) not in counts:
        raise DrawInputError(f"{field}: expected {_counts(counts, names)}, got {len(values)}")
    return tuple(number(v, f"{field}.{n}") for v, n in zip(values, names, strict=False))


def _counts(counts: tuple[int, ...], names: str) -> str:
    if len(counts) == 1:
        return f"{counts[0]} numbers ({','.join(names[: counts[0]])})"
    return f"{' or '.join(map(str, counts))} numbers ({','.join(names[: counts[0]])}[,{names[counts[0]]}])"


def vec(values: Sequence[float], field: str = "vector") -> Vec3:
    """A :class:`Vec3` from three numbers, each checked by :func:`number`."""
    x, y, z = _numbers(values, (3,), field, "xyz")
    return Vec3(x, y, z)


def color(values: Sequence[float], field: str = "color") -> Color:
    """A :class:`Color` from ``r, g, b`` or ``r, g, b, a``, each in ``0..1`` (alpha defaults to 1)."""
    rgba = _numbers(values, (3, 4), field, "rgba")
    for v, n in zip(rgba, "rgba", strict=False):
        if not 0.0 <= v <= 1.0:
            raise DrawInputError(f"{field}.{n}: {v:g} is outside 0..1")
    r, g, b = rgba[:3]
    return Color(r, g, b, rgba[3] if len(rgba) == 4 else 1.0)


def scale_value(value: object, field: str = "scale") -> float:
    """A drawn-length multiplier: a number ``> 0``."""
    s = number(value, field)
    if not s > 0:
        raise DrawInputError(f"{field}: {s:g} is not greater than 0")
    return s


def parse_numbers(text: str, count: int, field: str) -> tuple[float, ...]:
    """``"1,2,3"`` → ``(1.0, 2.0, 3.0)``, each checked by :func:`number` under the name ``field``.

    Raises
    ------
    DrawInputError
        Wrong count, a part that is not a number, or a number out of range.
    """
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != count:
        raise DrawInputError(f"{field}: expected {count} comma-separated numbers, got {text!r}")
    out = []
    for p in parts:
        try:
            v = plain_number(p)
        except ValueError:
            raise DrawInputError(f"{field}: {p!r} in {text!r} is not a number") from None
        out.append(number(v, field))
    return tuple(out)


def parse_color(text: str, field: str = "--color") -> tuple[float, float, float, float]:
    """``"r,g,b"`` or ``"r,g,b,a"``, each in ``0..1``; alpha defaults to 1.

    Raises
    ------
    DrawInputError
        Not 3 or 4 numbers, or a channel outside ``0..1``; names ``field``.
    """
    parts = text.split(",")
    if len(parts) not in (3, 4):
        raise DrawInputError(f"{field}: expected 3 or 4 numbers (r,g,b[,a]), got {text!r}")
    c = color(parse_numbers(text, len(parts), field), field)
    return (c.r, c.g, c.b, c.a)


def line_request(
    start: Sequence[float], end: Sequence[float], rgba: Sequence[float] = DEFAULT_COLOR, clear_previous: bool = False
) -> DrawReq:
    """A ``DrawReq`` with one line from ``start`` to ``end``.

    Raises
    ------
    DrawInputError
        See the module notes; the message names ``start``, ``end`` or ``color``.
    """
    return DrawReq(
        lines=(Line(vec(start, "start"), vec(end, "end"), color(rgba)),), clear_previous=bool(clear_previous)
    )


def arrow_request(
    origin: Sequence[float],
    direction: Sequence[float],
    rgba: Sequence[float] = DEFAULT_COLOR,
    scale: float = 1.0,
    clear_previous: bool = False,
) -> DrawReq:
    """A ``DrawReq`` with one arrow from ``origin`` along ``direction * scale``.

    Raises
    ------
    DrawInputError
        See the module notes; the message names the field.
    """
    arrow = Arrow(vec(origin, "origin"), vec(direction, "direction"), color(rgba), scale_value(scale))
    return DrawReq(arrows=(arrow,), clear_previous=bool(clear_previous))


def velocity_request(
    origin: Sequence[float],
    lin_vel_x: float,
    lin_vel_y: float,
    ang_vel_z: float,
    scale: float = 1.0,
    clear_previous: bool = False,
) -> DrawReq:
    """A ``DrawReq`` with a velocity command drawn at ``origin``.

    Raises
    ------
    DrawInputError
        See the module notes; the message names the field.
    """
    cmd = VelocityCommand(
        vec(origin, "origin"),
        number(lin_vel_x, "lin_vel_x"),
        number(lin_vel_y, "lin_vel_y"),
        number(ang_vel_z, "ang_vel_z"),
        scale_value(scale),
    )
    return DrawReq(velocity_command=cmd, clear_previous=bool(clear_previous))


def clear_request() -> DrawReq:
    """A ``DrawReq`` that only removes everything drawn before."""
    return DrawReq(clear_previous=True)
