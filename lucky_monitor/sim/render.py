"""Vectorised per-env camera images of a :class:`~lucky_monitor.sim.physics.CartPoleBatch`.

Theory of operation
-------------------
Every env gets its own image drawn from its own state, all envs at once: numpy
broadcasting over a ``(k, h, w)`` scratch buffer of ``uint32`` RGBX pixels
(so every fill and scatter stores one word per pixel), ``k`` envs per chunk so
temporaries stay bounded (about :data:`CHUNK_PIXELS` pixels) whatever the
number of envs. No Python loop runs over envs or pixels; loops run over chunks
and over a handful of primitives.

Drawing order, per chunk:

1. the camera's static background (shared by all envs) and a band at the top
   tinted with the env's own colour (hue from the env index, golden-ratio
   spaced, stable across resets);
2. the scene: cart box (column mask broadcast over the cart's fixed rows),
   pole (points sampled along each env's segment, stamped with a small disc
   and scattered with fancy indexing), pole tip disc. The pole's colour comes
   from ``params.hue``, drawn per episode, so a reset is visible;
3. the debug-draw overlay (see :meth:`Renderer.set_debug`);
4. the orientation cues, always on top: a pure red bar on the left edge and
   the env index in white digits on a dark box in the top-left corner. A
   vertical flip moves the tinted band to the bottom, a horizontal flip
   mirrors the digits and moves the red bar right, a channel swap turns the
   red bar blue.

Both cameras are fixed (they follow nothing), so a world point projects to
the same pixel in every env's image and the debug overlay is rasterised once
per change, not per frame or per env:

* ``"front"``: side view of the track; world ``x`` to the right, ``z`` up,
  ``y`` ignored. The hinge sits at ``z = 0``; the pole tip at
  ``(x + L sin θ, L cos θ)``.
* ``"top"``: overhead view; world ``x`` to the right, ``y`` up the image,
  ``z`` ignored. The pole appears as its shadow along the track and the tip
  as a disc whose radius grows with the tip's height.

:meth:`Renderer.project` gives the (sub-pixel) position of a world point in
the top-down picture: pixel ``(row, col)`` has its centre at ``(py, px) =
(row, col)``. Finally each chunk is converted into the requested channel order
(``rgb``, ``bgr``, ``rgba``, ``bgra``, ``gray``) and row order (``bottom_up``
stores the bottom row of the picture first) while copying into ``out``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..protocol.enums import ImageFormat
from ..protocol.header import MAX_ENVS, MAX_IMAGE_SIDE
from . import font
from .physics import X_LIMIT, CartPoleBatch, SimError

CAMERAS = ("front", "top")
#: pixels per chunk of envs rendered together (bounds the temporaries)
CHUNK_PIXELS = 1 << 18
#: most debug lines + arrows kept; older ones are dropped first
MAX_DEBUG_PRIMITIVES = 8192
#: world coordinates of debug primitives are clamped to ±this many metres
MAX_DEBUG_COORD = 1.0e6

VIEW_HALF_X = X_LIMIT + 1.0  # metres either side of x = 0
FRONT_Z_SPAN = 2.4  # metres of z the front view must show
FRONT_Z_CENTRE = -0.1
TOP_Y_SPAN = 2.4
CART_HALF_W = 0.25
CART_HALF_H = 0.1  # front view: z in [-0.1, 0.1]
CART_HALF_Y = 0.2  # top view: y in [-0.2, 0.2]
TRACK_HALF_Y = 0.1


def pack_rgb(rgb: Any) -> np.ndarray:
    """Pack uint8 RGB ``(..., 3)`` into the scratch buffer's native ``uint32`` RGBX pixels (X = 255)."""
    rgb = np.asarray(rgb, np.uint8)
    a = np.empty((*rgb.shape[:-1], 4), np.uint8)
    a[..., :3] = rgb
    a[..., 3] = 255
    return a.view(np.uint32)[..., 0]


_SKY = np.array([120, 190, 240], np.float64)
_GREY = pack_rgb([228, 228, 228])
_GROUND = pack_rgb([120, 86, 50])
_FLOOR = pack_rgb([206, 216, 200])
_GRID = pack_rgb([186, 196, 180])
_RAIL = pack_rgb([90, 90, 90])
_STOP = pack_rgb([35, 35, 35])
_TRACK_TOP = pack_rgb([150, 150, 150])
_CART = pack_rgb([50, 55, 72])
_RED = pack_rgb([255, 0, 0])
_INK = pack_rgb([255, 255, 255])
_INK_BOX = pack_rgb([20, 20, 20])
_VEL_COLOR = (1.0, 0.55, 0.0, 1.0)
_YAW_COLOR = (0.0, 0.8, 1.0, 1.0)
_GOLDEN = 0.6180339887498949


def hsv_to_rgb(h: np.ndarray, s: float, v: float) -> np.ndarray:
    """Vectorised HSV → RGB.

    Parameters
    ----------
    h : numpy.ndarray
        Hues in [0, 1), shape ``(n,)``.
    s, v : float
        Saturation and value in [0, 1].

    Returns
    -------
    numpy.ndarray
        ``(n, 3)`` uint8 RGB.
    """
    h = np.mod(np.nan_to_num(np.asarray(h, dtype=np.float64)), 1.0) * 6.0
    i = np.floor(h).astype(np.intp) % 6
    f = h - np.floor(h)
    p = v * (1.0 - s)
    q = v * (1.0 - s * f)
    t = v * (1.0 - s * (1.0 - f))
    vv = np.full_like(f, v)
    pp = np.full_like(f, p)
    table = np.stack(
        [
            np.stack([vv, t, pp], -1),
            np.stack([q, vv, pp], -1),
            np.stack([pp, vv, t], -1),
            np.stack([pp, q, vv], -1),
            np.stack([t, pp, vv], -1),
            np.stack([vv, pp, q], -1),
        ]
    )  # (6, n, 3)
    rgb = table[i, np.arange(h.size)]
    return np.rint(rgb * 255.0).astype(np.uint8)


def env_colors(num_envs: int) -> np.ndarray:
    """The per-env identity colour (``(n, 3)`` uint8), golden-ratio spaced hues."""
    return hsv_to_rgb(np.mod(np.arange(num_envs) * _GOLDEN, 1.0), 0.6, 1.0)


# ---------------------------------------------------------------------------- debug primitives
@dataclass(frozen=True)
class DebugLine:
    """Internal form of a debug line: world endpoints and RGBA colour (floats 0–1)."""

    start: tuple[float, float, float]
    end: tuple[float, float, float]
    color: tuple[float, float, float, float]


@dataclass(frozen=True)
class DebugArrow:
    """Internal form of a debug arrow: shaft from ``origin`` to ``origin + direction*scale``."""

    origin: tuple[float, float, float]
    direction: tuple[float, float, float]
    color: tuple[float, float, float, float]
    scale: float


@dataclass(frozen=True)
class DebugVelocity:
    """Internal form of a velocity command."""

    origin: tuple[float, float, float]
    lin_vel_x: float
    lin_vel_y: float
    ang_vel_z: float
    scale: float


def _num(value: Any, what: str) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise SimError(f"debug draw: {what} is not a number: {value!r}") from exc
    if not math.isfinite(f):
        raise SimError(f"debug draw: {what} is not finite: {f}")
    return min(max(f, -MAX_DEBUG_COORD), MAX_DEBUG_COORD)


def _seq(value: Any, lengths: tuple[int, ...], what: str) -> tuple[Any, ...]:
    if isinstance(value, str | bytes) or not hasattr(value, "__len__") or len(value) not in lengths:
        raise SimError(f"debug draw: {what} must have attributes or be a sequence of length {lengths}: {value!r}")
    return tuple(value)


def _vec3(v: Any, what: str) -> tuple[float, float, float]:
    if v is None:
        return (0.0, 0.0, 0.0)
    if hasattr(v, "x"):
        try:
            comps = (v.x, v.y, v.z)
        except AttributeError as exc:
            raise SimError(f"debug draw: {what} lacks x/y/z") from exc
    else:
        comps = _seq(v, (3,), what)
    return (_num(comps[0], what + ".x"), _num(comps[1], what + ".y"), _num(comps[2], what + ".z"))


def _color(c: Any, what: str) -> tuple[float, float, float, float]:
    if c is None:
        return (1.0, 1.0, 1.0, 1.0)
    if hasattr(c, "r"):
        try:
            comps = (c.r, c.g, c.b, c.a)
        except AttributeError as exc:
            raise SimError(f"debug draw: {what} lacks r/g/b/a") from exc
    else:
        comps = _seq(c, (3, 4), what)
        if len(comps) == 3:
            comps = (*comps, 1.0)
    r, g, b, a = (min(max(_num(x, what), 0.0), 1.0) for x in comps)
    return (r, g, b, a)


def _scale(v: Any, what: str) -> float:
    f = _num(v, what)
    return 1.0 if f == 0.0 else f  # an unset proto3 float reads 0: treat as 1


def _fields(obj: Any, names: tuple[str, ...], n_required: int, what: str) -> tuple[Any, ...]:
    if hasattr(obj, names[0]):
        try:
            return tuple(getattr(obj, n) if i < n_required else getattr(obj, n, 1.0) for i, n in enumerate(names))
        except AttributeError as exc:
            raise SimError(f"debug draw: {what} lacks one of {names}") from exc
    vals = _seq(obj, tuple(range(n_required, len(names) + 1)), what)
    return vals + (1.0,) * (len(names) - len(vals))


def to_line(obj: Any) -> DebugLine:
    """Normalise a line: an object with ``start``, ``end``, ``color`` or a tuple in that order.

    Raises
    ------
    SimError
        On a malformed or non-finite line.
    """
    if isinstance(obj, DebugLine):
        return obj
    s, e, c = _fields(obj, ("start", "end", "color"), 3, "line")
    return DebugLine(_vec3(s, "line.start"), _vec3(e, "line.end"), _color(c, "line.color"))


def to_arrow(obj: Any) -> DebugArrow:
    """Normalise an arrow: ``origin``, ``direction``, ``color``, ``scale`` (tuple: scale optional).

    Raises
    ------
    SimError
        On a malformed or non-finite arrow.
    """
    if isinstance(obj, DebugArrow):
        return obj
    o, d, c, sc = _fields(obj, ("origin", "direction", "color", "scale"), 3, "arrow")
    return DebugArrow(
        _vec3(o, "arrow.origin"), _vec3(d, "arrow.direction"), _color(c, "arrow.color"), _scale(sc, "arrow.scale")
    )


def to_velocity(obj: Any) -> DebugVelocity:
    """Normalise a velocity command: ``origin, lin_vel_x, lin_vel_y, ang_vel_z, scale``.

    Raises
    ------
    SimError
        On a malformed or non-finite command.
    """
    if isinstance(obj, DebugVelocity):
        return obj
    o, vx, vy, wz, sc = _fields(obj, ("origin", "lin_vel_x", "lin_vel_y", "ang_vel_z", "scale"), 4, "velocity")
    return DebugVelocity(
        _vec3(o, "velocity.origin"),
        _num(vx, "lin_vel_x"),
        _num(vy, "lin_vel_y"),
        _num(wz, "ang_vel_z"),
        _scale(sc, "velocity.scale"),
    )


@dataclass
class _Overlay:
    idx: np.ndarray  # flat pixel indices (top-down picture), sorted
    rgb: np.ndarray  # (m,) packed uint32 RGBX, used when opaque
    alpha: np.ndarray  # (m, 1) float32
    premult: np.ndarray  # (m, 3) float32, 255 * rgb * alpha
    opaque: bool


def _clip_segments(seg: np.ndarray, xmin: float, xmax: float, ymin: float, ymax: float) -> np.ndarray:
    """Liang–Barsky clip of ``(m, 4)`` segments ``[x0, y0, x1, y1]``; rejected rows become NaN."""
    x0, y0, x1, y1 = seg.T
    dx = x1 - x0
    dy = y1 - y0
    t0 = np.zeros(len(seg))
    t1 = np.ones(len(seg))
    keep = np.ones(len(seg), dtype=bool)
    for p, q in ((-dx, x0 - xmin), (dx, xmax - x0), (-dy, y0 - ymin), (dy, ymax - y0)):
        zero = p == 0.0
        keep &= ~(zero & (q < 0.0))
        r = q / np.where(zero, 1.0, p)
        t0 = np.where(~zero & (p < 0.0), np.maximum(t0, r), t0)
        t1 = np.where(~zero & (p > 0.0), np.minimum(t1, r), t1)
    keep &= t0 <= t1
    out = np.stack([x0 + t0 * dx, y0 + t0 * dy, x0 + t1 * dx, y0 + t1 * dy], axis=1)
    out[~keep] = np.nan
    return out


def _disc_offsets(r: int) -> tuple[np.ndarray, np.ndarray]:
    """Row/column offsets of a filled disc of radius ``r`` (a 3×3 square for r = 1)."""
    d = np.arange(-r, r + 1)
    dy, dx = np.meshgrid(d, d, indexing="ij")
    m = dy * dy + dx * dx <= r * r + r
    return dy[m], dx[m]


def _to_int(a: np.ndarray) -> np.ndarray:
    """Round sub-pixel coordinates to ints; non-finite or huge values land far off-image."""
    a = np.clip(a, -1.0e6, 1.0e6)
    np.copyto(a, -1.0e6, where=np.isnan(a))
    np.rint(a, out=a)
    return a.astype(np.intp)


class Renderer:
    """Camera images of every env of a :class:`CartPoleBatch`.

    Parameters
    ----------
    num_envs : int
        1..MAX_ENVS; must match the batch handed to :meth:`render`.
    width, height : int
        Image size in pixels, 1..MAX_IMAGE_SIDE.
    channels : int
        1, 3 or 4; must match ``fmt``.
    fmt : {"rgb", "bgr", "rgba", "bgra", "gray"}, optional
        Channel order of the bytes written; defaults by channels (1 gray, 3 rgb, 4 rgba).
    bottom_up : bool
        Store the bottom row of the picture first.

    Raises
    ------
    SimError
        On sizes out of range or a format that does not match ``channels``.

    Attributes
    ----------
    camera : str
        The view, one of :data:`CAMERAS`; assigning another name raises :class:`SimError`.
    debug_dropped : int
        Debug primitives dropped so far because more than :data:`MAX_DEBUG_PRIMITIVES` accumulated.
    """

    cameras = CAMERAS

    def __init__(
        self,
        num_envs: int,
        width: int,
        height: int,
        channels: int,
        *,
        fmt: str | None = None,
        bottom_up: bool = False,
    ) -> None:
        for name, v, hi in (
            ("num_envs", num_envs, MAX_ENVS),
            ("width", width, MAX_IMAGE_SIDE),
            ("height", height, MAX_IMAGE_SIDE),
        ):
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or not 1 <= int(v) <= hi:
                raise SimError(f"{name}: {v!r}, must be an integer in 1..{hi}")
        if isinstance(channels, bool) or not isinstance(channels, int | np.integer):
            raise SimError(f"channels: {channels!r}, must be 1, 3 or 4")
        concrete = [f.label for f in ImageFormat if f is not ImageFormat.AUTO]
        if fmt is None:
            fmt = getattr(ImageFormat.for_channels(int(channels)), "label", None)
        fmt_enum = ImageFormat.from_label(fmt) if isinstance(fmt, str) and fmt in concrete else None
        if fmt_enum is None:
            raise SimError(f"image format {fmt!r} unknown or no default for {channels} channels; use {concrete}")
        if fmt_enum.channels != channels:
            raise SimError(f"image format {fmt!r} has {fmt_enum.channels} channels, not {channels}")
        self.num_envs = n = int(num_envs)
        self.width = w = int(width)
        self.height = h = int(height)
        self.channels = int(channels)
        self.fmt = fmt
        self._format = fmt_enum
        self.bottom_up = bool(bottom_up)
        self._camera = "front"
        self.debug_dropped = 0

        self._chunk = max(1, min(n, CHUNK_PIXELS // (w * h)))
        # RGBX scratch; its uint32 view makes every fill and scatter a one-word store
        self._scratch = np.empty((self._chunk, h, w, 4), np.uint8)
        self._scratch32 = self._scratch.view(np.uint32)[..., 0]
        self._gray = np.empty((self._chunk, h, w), np.uint16) if fmt_enum is ImageFormat.GRAY else None
        self._cols = np.arange(w, dtype=np.float64)

        # screen-space bands and cues
        self._band_top = min(h, max(2, round(0.18 * h)))
        self._band_bottom = max(self._band_top, h - max(2, round(0.12 * h)))
        self._red_w = min(w, max(2, round(w / 32)))
        self._band_color = pack_rgb(np.rint(0.55 * _SKY + 0.45 * env_colors(n)))
        scale = 1 + min(w, h) // 100
        marks = font.number_masks(np.arange(n), scale=scale)
        mh, mw = marks.shape[1:]
        pad = scale
        box_h, box_w = min(h, mh + 2 * pad), min(w, mw + 2 * pad)
        self._mark_box = (box_h, box_w)
        self._marks = np.zeros((n, box_h, box_w), bool)
        th, tw = max(0, min(mh, box_h - pad)), max(0, min(mw, box_w - pad))
        self._marks[:, pad : pad + th, pad : pad + tw] = marks[:, :th, :tw]

        self._pole_r = 1
        self._pole_off = _disc_offsets(self._pole_r)
        self._line_r = max(1, round(min(w, h) / 128))
        self._backgrounds: dict[str, np.ndarray] = {}
        self._lines: list[DebugLine] = []
        self._arrows: list[DebugArrow] = []
        self._order: list[tuple[int, int]] = []  # (kind 0 line / 1 arrow, index) in draw order
        self._velocity: DebugVelocity | None = None
        self._overlay: _Overlay | None = None
        self._overlay_dirty = False

    # ------------------------------------------------------------------ camera
    @property
    def camera(self) -> str:
        """The current view, one of :data:`CAMERAS`."""
        return self._camera

    @camera.setter
    def camera(self, name: str) -> None:
        if name not in CAMERAS:
            raise SimError(f"camera {name!r} unknown; cameras are {list(CAMERAS)}")
        if name != self._camera:
            self._camera = name
            self._overlay_dirty = True

    @property
    def pixels_per_metre(self) -> float:
        """Scale of the current camera."""
        w, h = self.width, self.height
        span = FRONT_Z_SPAN if self._camera == "front" else TOP_Y_SPAN
        return min(w / (2.0 * VIEW_HALF_X), h / span)

    def project(self, x: Any, z: Any, *, y: Any = 0.0) -> tuple[Any, Any]:
        """World → sub-pixel coordinates of the top-down picture, current camera.

        Parameters
        ----------
        x, z : float or numpy.ndarray
            World coordinates (metres); the top camera ignores ``z``.
        y : float or numpy.ndarray
            World ``y``; the front camera ignores it.

        Returns
        -------
        (px, py) : float or numpy.ndarray
            Column and row; pixel ``(row, col)`` covers ``[row ± 0.5] × [col ± 0.5]``.
        """
        s = self.pixels_per_metre
        px = (self.width - 1) / 2.0 + np.multiply(x, s)
        if self._camera == "front":
            py = (self.height - 1) / 2.0 - np.multiply(np.subtract(z, FRONT_Z_CENTRE), s)
        else:
            py = (self.height - 1) / 2.0 - np.multiply(y, s)
        return px, py

    # ------------------------------------------------------------------ debug draw
    def set_debug(
        self,
        lines: Iterable[Any] | None = (),
        arrows: Iterable[Any] | None = (),
        velocity_command: Any = None,
        clear_previous: bool = False,
    ) -> None:
        """Add debug-draw primitives, drawn in every env's image until cleared.

        Parameters
        ----------
        lines : iterable
            Each an object with ``start``, ``end``, ``color`` (like ``protocol.messages.Line``)
            or a tuple ``(start, end, color)``.
        arrows : iterable
            Each an object with ``origin``, ``direction``, ``color``, ``scale`` or a tuple
            ``(origin, direction, color[, scale])``.
        velocity_command : object or tuple, optional
            ``origin, lin_vel_x, lin_vel_y, ang_vel_z, scale``; replaces the previous one.
            Drawn as an orange arrow from ``origin`` along ``(lin_vel_x, lin_vel_y, 0) * scale``
            and a cyan arc (counter-clockwise on screen for positive ``ang_vel_z``) of
            ``ang_vel_z * scale`` radians.
        clear_previous : bool
            Discard everything drawn before (including the velocity command) first.

        Raises
        ------
        SimError
            On a malformed primitive; nothing is changed then.

        Notes
        -----
        A vector is an object with ``x, y, z`` or a 3-sequence; a colour an object with
        ``r, g, b, a`` or a 3/4-sequence of floats 0–1 (clipped). A missing (None) vector is
        the origin, a missing colour opaque white, a scale of 0 means 1 (an unset proto3
        float). Coordinates must be finite and are clamped to ±MAX_DEBUG_COORD. Where
        primitives overlap, the one drawn last wins (no blending between primitives);
        its alpha blends it over the scene.
        """
        try:
            new_lines = [to_line(o) for o in (() if lines is None else lines)]
            new_arrows = [to_arrow(o) for o in (() if arrows is None else arrows)]
        except TypeError as exc:  # not iterable
            raise SimError(f"debug draw: lines and arrows must be iterables: {exc}") from exc
        vel = None if velocity_command is None else to_velocity(velocity_command)
        if clear_previous:
            self._lines, self._arrows, self._order, self._velocity = [], [], [], None
        base_l, base_a = len(self._lines), len(self._arrows)
        self._lines.extend(new_lines)
        self._arrows.extend(new_arrows)
        self._order.extend((0, base_l + i) for i in range(len(new_lines)))
        self._order.extend((1, base_a + i) for i in range(len(new_arrows)))
        if vel is not None:
            self._velocity = vel
        excess = len(self._order) - MAX_DEBUG_PRIMITIVES
        if excess > 0:
            self.debug_dropped += excess
            keep = self._order[excess:]
            self._lines = [self._lines[i] for k, i in keep if k == 0]
            self._arrows = [self._arrows[i] for k, i in keep if k == 1]
            nl = na = 0
            order = []
            for k, _ in keep:
                order.append((k, nl if k == 0 else na))
                nl += k == 0
                na += k == 1
            self._order = order
        self._overlay_dirty = True

    def clear_debug(self) -> None:
        """Remove every debug primitive."""
        self.set_debug((), (), None, clear_previous=True)

    @property
    def debug_count(self) -> int:
        """Number of debug lines and arrows currently drawn (the velocity command not included)."""
        return len(self._order)

    def _screen_segments(self) -> tuple[np.ndarray, np.ndarray]:
        """Debug primitives as screen segments ``(m, 4)`` and colours ``(m, 4)``, in draw order."""
        segs: list[np.ndarray] = []
        cols: list[np.ndarray] = []

        def proj(p: np.ndarray) -> np.ndarray:
            px, py = self.project(p[:, 0], p[:, 2], y=p[:, 1])
            return np.stack([px, py], axis=1)

        def arrow_segs(p0: np.ndarray, p1: np.ndarray) -> np.ndarray:
            # shaft plus two head strokes, computed on screen; (m, 3, 4)
            d = p1 - p0
            length = np.hypot(d[:, 0], d[:, 1])
            u = d / np.where(length > 0.0, length, 1.0)[:, None]
            head = np.minimum(np.maximum(3.0, 0.25 * length), 0.6 * length)[:, None]
            out = np.empty((len(p0), 3, 4))
            out[:, 0, :2], out[:, 0, 2:] = p0, p1
            for j, ang in ((1, math.radians(155.0)), (2, -math.radians(155.0))):
                c, s = math.cos(ang), math.sin(ang)
                rot = np.stack([u[:, 0] * c - u[:, 1] * s, u[:, 0] * s + u[:, 1] * c], axis=1)
                out[:, j, :2], out[:, j, 2:] = p1, p1 + head * rot
            return out

        if self._order:
            kinds = np.array([k for k, _ in self._order])
            index = np.array([i for _, i in self._order])
            n = len(self._order)
            seg = np.full((n, 3, 4), np.nan)
            col = np.zeros((n, 4))
            if self._lines:
                la = np.array([(*ln.start, *ln.end) for ln in self._lines], np.float64)
                lc = np.array([ln.color for ln in self._lines], np.float64)
                m = kinds == 0
                seg[m, 0, :2] = proj(la[index[m], :3])
                seg[m, 0, 2:] = proj(la[index[m], 3:])
                col[m] = lc[index[m]]
            if self._arrows:
                aa = np.array([(*a.origin, *a.direction, a.scale) for a in self._arrows], np.float64)
                ac = np.array([a.color for a in self._arrows], np.float64)
                m = kinds == 1
                sel = aa[index[m]]
                seg[m] = arrow_segs(proj(sel[:, :3]), proj(sel[:, :3] + sel[:, 3:6] * sel[:, 6:7]))
                col[m] = ac[index[m]]
            segs.append(seg.reshape(-1, 4))
            cols.append(np.repeat(col, 3, axis=0))
        v = self._velocity
        if v is not None:
            o = np.array([v.origin])
            tip = o + np.array([[v.lin_vel_x, v.lin_vel_y, 0.0]]) * v.scale
            segs.append(arrow_segs(proj(o), proj(tip)).reshape(-1, 4))
            cols.append(np.tile(_VEL_COLOR, (3, 1)))
            sweep = max(-1.9 * math.pi, min(1.9 * math.pi, v.ang_vel_z * v.scale))
            if abs(sweep) > 1e-3:
                c = proj(o)[0]
                radius = max(3.0, 0.35 * self.pixels_per_metre)
                k = max(2, math.ceil(abs(sweep) / math.radians(10.0)))
                ang = np.linspace(0.0, sweep, k + 1)
                pts = np.stack([c[0] + radius * np.cos(ang), c[1] - radius * np.sin(ang)], axis=1)
                tangent = np.sign(sweep) * np.array([-math.sin(sweep), -math.cos(sweep)])
                head = arrow_segs(pts[-1:] - tangent * radius, pts[-1:])[0, 1:]
                arc = np.concatenate([np.concatenate([pts[:-1], pts[1:]], axis=1), head])
                segs.append(arc)
                cols.append(np.tile(_YAW_COLOR, (len(arc), 1)))
        if not segs:
            return np.zeros((0, 4)), np.zeros((0, 4))
        return np.concatenate(segs), np.concatenate(cols)

    def _build_overlay(self) -> None:
        self._overlay_dirty = False
        self._overlay = None
        seg, col = self._screen_segments()
        visible = np.isfinite(seg).all(axis=1) & (col[:, 3] > 0.0)
        seg, col = seg[visible], col[visible]
        if not len(seg):
            return
        w, h, r = self.width, self.height, self._line_r
        seg = _clip_segments(seg, -r - 1.0, w + r, -r - 1.0, h + r)
        ok = np.isfinite(seg).all(axis=1)
        order = np.flatnonzero(ok)  # draw rank of each kept segment (a later rank wins)
        seg = seg[ok]
        if not len(seg):
            return
        length = np.hypot(seg[:, 2] - seg[:, 0], seg[:, 3] - seg[:, 1])
        counts = np.ceil(length * 2.0).astype(np.intp) + 1  # sample every <= 0.5 px
        d = np.arange(-r, r + 1)
        oy, ox = (a.ravel() for a in np.meshgrid(d, d, indexing="ij"))  # square stamp
        winner = np.full(h * w, -1, np.int64)
        budget = max(1, (1 << 20) // len(oy))
        ends = np.cumsum(counts)
        start = 0
        while start < len(seg):
            stop = max(start + 1, int(np.searchsorted(ends, ends[start] - counts[start] + budget, side="right")))
            cnt = counts[start:stop]
            sid = np.repeat(np.arange(start, stop), cnt)
            first = np.cumsum(cnt) - cnt
            t = (np.arange(sid.size) - np.repeat(first, cnt)) / np.maximum(np.repeat(cnt, cnt) - 1, 1)
            s = seg[sid]
            py = _to_int(s[:, 1] + t * (s[:, 3] - s[:, 1]))[:, None] + oy
            px = _to_int(s[:, 0] + t * (s[:, 2] - s[:, 0]))[:, None] + ox
            valid = (py >= 0) & (py < h) & (px >= 0) & (px < w)
            np.maximum.at(winner, (py * w + px)[valid], np.broadcast_to(order[sid][:, None], py.shape)[valid])
            start = stop
        idx = np.flatnonzero(winner >= 0)
        if not idx.size:
            return
        c = col[winner[idx]]
        alpha = c[:, 3:4].astype(np.float32)
        self._overlay = _Overlay(
            idx=idx,
            rgb=pack_rgb(np.rint(c[:, :3] * 255.0)),
            alpha=alpha,
            premult=(c[:, :3] * 255.0 * c[:, 3:4]).astype(np.float32),
            opaque=bool((alpha >= 1.0).all()),
        )

    # ------------------------------------------------------------------ drawing
    def _background(self) -> np.ndarray:
        bg = self._backgrounds.get(self._camera)
        if bg is not None:
            return bg
        w, h = self.width, self.height
        s = self.pixels_per_metre
        rows = np.arange(h)[:, None]
        cols = np.arange(w)[None, :]
        bg = np.empty((h, w), np.uint32)
        if self._camera == "front":
            bg[:] = _GREY
            x0, _ = self.project(-X_LIMIT, 0.0)
            x1, y0 = self.project(X_LIMIT, 0.0)
            t = max(1, round(0.03 * s))
            rail = (np.abs(rows - y0) <= t / 2.0) & (cols >= x0) & (cols <= x1)
            bg[rail] = _RAIL
            stop_h = max(1.5, 0.15 * s)
            for xs in (x0, x1):
                bg[(np.abs(rows - y0) <= stop_h) & (np.abs(cols - xs) <= max(0.5, t / 2.0))] = _STOP
        else:
            bg[:] = _FLOOR
            for gx in np.arange(-VIEW_HALF_X, VIEW_HALF_X + 1e-9, 0.5):
                px, _ = self.project(gx, 0.0)
                bg[:, int(np.clip(np.rint(px), 0, w - 1))] = _GRID
            x0, y0 = self.project(-X_LIMIT, 0.0, y=TRACK_HALF_Y)
            x1, y1 = self.project(X_LIMIT, 0.0, y=-TRACK_HALF_Y)
            bg[(rows >= y0) & (rows <= y1) & (cols >= x0) & (cols <= x1)] = _TRACK_TOP
            for xs in (x0, x1):
                bg[(rows >= y0 - 1) & (rows <= y1 + 1) & (np.abs(cols - xs) <= 0.5)] = _STOP
        bg[self._band_bottom :] = _GROUND
        bg.setflags(write=False)
        self._backgrounds[self._camera] = bg
        return bg

    def _stamp(
        self,
        flat: np.ndarray,
        py: np.ndarray,
        px: np.ndarray,
        color: np.ndarray,
        offsets: tuple[np.ndarray, np.ndarray],
    ) -> None:
        """Scatter ``color[e]`` at integer ``(py[e, j] + dy, px[e, j] + dx)`` of env ``e``."""
        k = py.shape[0]
        h, w = self.height, self.width
        oy, ox = offsets
        yy = (py[:, :, None] + oy).reshape(k, -1)
        xx = (px[:, :, None] + ox).reshape(k, -1)
        valid = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
        env = np.broadcast_to(np.arange(k)[:, None], yy.shape)[valid]
        flat[(env * h + yy[valid]) * w + xx[valid]] = color[env]

    def _draw_scene(self, sim: CartPoleBatch, e0: int, buf: np.ndarray) -> None:
        k, h, w = buf.shape[:3]
        sl = slice(e0, e0 + k)
        s = self.pixels_per_metre
        x = sim.x[sl]
        theta = sim.theta[sl]
        length = sim.params.pole_length[sl]
        pole_rgb = pack_rgb(hsv_to_rgb(sim.params.hue[sl], 0.85, 0.85))
        flat = buf.reshape(-1)
        cx, _ = self.project(x, 0.0)
        half_w = CART_HALF_W * s
        colmask = np.abs(self._cols[None, :] - cx[:, None]) <= half_w  # (k, w); NaN → False
        front = self._camera == "front"
        if front:
            _, r0 = self.project(0.0, CART_HALF_H)
            _, r1 = self.project(0.0, -CART_HALF_H)
        else:
            _, r0 = self.project(0.0, 0.0, y=CART_HALF_Y)
            _, r1 = self.project(0.0, 0.0, y=-CART_HALF_Y)
        r0, r1 = max(0, math.ceil(r0 - 0.5)), min(h, math.floor(r1 + 0.5) + 1)
        if r1 > r0:
            np.copyto(buf[:, r0:r1], _CART, where=colmask[:, None, :])

        tip_x = x + length * np.sin(theta)
        tip_z = length * np.cos(theta)
        hx, hy = self.project(x, 0.0)
        tx, ty = self.project(tip_x, tip_z if front else 0.0)
        hy = np.broadcast_to(hy, hx.shape)
        ty = np.broadcast_to(ty, hx.shape)
        # samples every half pixel along each env's own pole (so an env's pixels never depend on
        # the other envs); the longest pole in the batch sets the count, shorter ones repeat their tip
        lmax = float(np.nan_to_num(sim.params.pole_length.max(), nan=0.0)) * s
        n_samp = max(2, int(min(math.ceil(2.0 * lmax) + 1, 4 * (w + h))))
        seg_len = np.hypot(tx - hx, ty - hy)
        step = np.where(seg_len > 0.0, 0.5 / seg_len, 1.0)
        t = np.minimum(np.arange(n_samp)[None, :] * step[:, None], 1.0)
        py = _to_int(hy[:, None] + t * (ty - hy)[:, None])
        px = _to_int(hx[:, None] + t * (tx - hx)[:, None])
        self._stamp(flat, py, px, pole_rgb, self._pole_off)

        # tip disc: fixed radius in front; in top its radius grows with the tip's height
        rmax = max(2, round(0.1 * s))
        dy, dx = _disc_offsets(rmax)
        if front:
            rad = np.full(k, max(2.0, 0.06 * s))
        else:
            frac = np.clip(np.nan_to_num(tip_z / np.maximum(length, 1e-9)), -1.0, 1.0)
            rad = 1.0 + (rmax - 1.0) * (frac + 1.0) / 2.0
        inside = (dy * dy + dx * dx)[None, :] <= (rad * rad + rad)[:, None]  # (k, K)
        ty_i = _to_int(ty)[:, None] + np.where(inside, dy, -(1 << 30))
        tx_i = _to_int(tx)[:, None] + dx
        self._stamp(flat, ty_i, tx_i, pole_rgb, (np.zeros(1, np.intp), np.zeros(1, np.intp)))

    def _composite_overlay(self, buf32: np.ndarray, buf8: np.ndarray) -> None:
        ov = self._overlay
        if ov is None:
            return
        k = buf32.shape[0]
        if ov.opaque:
            buf32.reshape(k, -1)[:, ov.idx] = ov.rgb
        else:
            flat = buf8.reshape(k, -1, 4)
            src = flat[:, ov.idx, :3].astype(np.float32)
            src *= 1.0 - ov.alpha
            src += ov.premult
            src += 0.5
            flat[:, ov.idx, :3] = src.astype(np.uint8)

    def _draw_cues(self, e0: int, buf: np.ndarray) -> None:
        k = buf.shape[0]
        if self._band_bottom > self._band_top:
            buf[:, self._band_top : self._band_bottom, : self._red_w] = _RED
        bh, bw = self._mark_box
        box = buf[:, :bh, :bw]
        box[:] = _INK_BOX
        np.copyto(box, _INK, where=self._marks[e0 : e0 + k])

    def _emit(self, buf: np.ndarray, out: np.ndarray) -> None:
        src = buf[:, ::-1] if self.bottom_up else buf
        fmt = self._format
        # one strided copy per channel: much faster than copying 3-byte pixels
        if fmt is ImageFormat.RGBA:
            out[:] = src  # X is always 255
        elif fmt is not ImageFormat.GRAY:
            order = (2, 1, 0) if fmt.blue_first else (0, 1, 2)
            for dst, c in enumerate(order):
                out[..., dst] = src[..., c]
            if fmt is ImageFormat.BGRA:
                out[..., 3] = 255
        else:
            assert self._gray is not None  # allocated for GRAY
            g = self._gray[: buf.shape[0]]
            np.multiply(src[..., 0], 77, out=g, dtype=np.uint16)
            g += src[..., 1].astype(np.uint16) * 150
            g += src[..., 2].astype(np.uint16) * 29
            g += 128
            g >>= 8
            out[..., 0] = g

    def render(self, sim: CartPoleBatch, out: np.ndarray) -> None:
        """Draw every env's image from its state into ``out``.

        Parameters
        ----------
        sim : CartPoleBatch
            The batch; ``sim.num_envs`` must equal ``num_envs``.
        out : numpy.ndarray, uint8, shape (num_envs, height, width, channels)
            Destination (may be strided), written in :attr:`fmt` channel order and
            :attr:`bottom_up` row order.

        Raises
        ------
        SimError
            On a batch of another size or a wrong/read-only ``out``.
        """
        n = self.num_envs
        if getattr(sim, "num_envs", None) != n:
            raise SimError(f"renderer is for {n} envs, batch has {getattr(sim, 'num_envs', None)}")
        shape = (n, self.height, self.width, self.channels)
        if not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != np.uint8:
            raise SimError(f"image buffer must be uint8 of shape {shape}")
        if not out.flags.writeable:
            raise SimError("image buffer is read-only")
        if self._overlay_dirty:
            self._build_overlay()
        bg = self._background()
        for e0 in range(0, n, self._chunk):
            k = min(self._chunk, n - e0)
            buf = self._scratch32[:k]
            buf[:] = bg
            buf[:, : self._band_top] = self._band_color[e0 : e0 + k, None, None]
            with np.errstate(invalid="ignore", over="ignore"):  # a NaN/inf state draws nothing
                self._draw_scene(sim, e0, buf)
            self._composite_overlay(buf, self._scratch[:k])
            self._draw_cues(e0, buf)
            self._emit(self._scratch[:k], out[e0 : e0 + k])
