"""Debug-draw requests, built from plain numbers or from CLI text.

Shared by ``lucky-monitor draw`` and the window's debug-draw form, so both send
exactly the same ``DrawReq`` for the same input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..protocol.errors import LuckyMonitorError
from ..protocol.messages import Arrow, Color, DrawReq, Line, Vec3, VelocityCommand

DEFAULT_COLOR = (1.0, 0.2, 0.2, 1.0)


class DrawInputError(LuckyMonitorError):
    """A coordinate, colour or scale that cannot be sent."""

    exit_code = 2


def _finite(values: Sequence[float], what: str) -> tuple[float, ...]:
    out = tuple(float(v) for v in values)
    if not all(math.isfinite(v) for v in out):
        raise DrawInputError(f"{what}: every number must be finite, got {','.join(map(str, out))}")
    return out


def parse_numbers(text: str, count: int, what: str) -> tuple[float, ...]:
    """``"1,2,3"`` → ``(1.0, 2.0, 3.0)``; a clear error for anything else."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != count:
        raise DrawInputError(f"{what}: expected {count} comma-separated numbers, got {text!r}")
    try:
        return _finite([float(p) for p in parts], what)
    except ValueError:
        raise DrawInputError(f"{what}: {text!r} is not {count} numbers") from None


def parse_color(text: str) -> tuple[float, float, float, float]:
    """``r,g,b`` or ``r,g,b,a``, each 0..1."""
    parts = text.split(",")
    if len(parts) == 3:
        text += ",1"
    rgba = parse_numbers(text, 4, "--color")
    if not all(0.0 <= v <= 1.0 for v in rgba):
        raise DrawInputError(f"--color: components must be within 0..1, got {text!r}")
    return rgba  # type: ignore[return-value]


def vec(v: Sequence[float], what: str = "vector") -> Vec3:
    x, y, z = _finite(v, what)
    return Vec3(x, y, z)


def color(c: Sequence[float]) -> Color:
    r, g, b, a = _finite(c, "color")
    return Color(r, g, b, a)


def line_request(start: Sequence[float], end: Sequence[float], rgba: Sequence[float] = DEFAULT_COLOR,
                 clear_previous: bool = False) -> DrawReq:
    return DrawReq(lines=(Line(vec(start, "from"), vec(end, "to"), color(rgba)),), clear_previous=clear_previous)


def arrow_request(origin: Sequence[float], direction: Sequence[float], rgba: Sequence[float] = DEFAULT_COLOR,
                  scale: float = 1.0, clear_previous: bool = False) -> DrawReq:
    (scale,) = _finite([scale], "scale")
    return DrawReq(arrows=(Arrow(vec(origin, "origin"), vec(direction, "direction"), color(rgba), scale),),
                   clear_previous=clear_previous)


def velocity_request(origin: Sequence[float], lin_vel_x: float, lin_vel_y: float, ang_vel_z: float,
                     scale: float = 1.0, clear_previous: bool = False) -> DrawReq:
    vx, vy, wz, s = _finite([lin_vel_x, lin_vel_y, ang_vel_z, scale], "velocity")
    return DrawReq(velocity_command=VelocityCommand(vec(origin, "origin"), vx, vy, wz, s),
                   clear_previous=clear_previous)


def clear_request() -> DrawReq:
    return DrawReq(clear_previous=True)
