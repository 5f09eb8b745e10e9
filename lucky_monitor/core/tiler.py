"""Tile a batch of per-env camera images into one preallocated RGB(A) grid.

Theory of operation
-------------------
The engine publishes ``num_envs`` images of ``height x width x channels`` uint8
each. The monitor shows them as one picture: tiles in row-major order (env 0
top-left, env ``columns`` starts the second tile row), separated by ``gap``
pixels of ``gap_value``, with no margin around the outside. The last tile row
may be partial; its empty slots hold the gap colour.

Per frame the work is one copy of the pixels. The grid buffer is allocated once per
geometry (env count, image size, columns, gap, output channels) and filled with
the gap colour at that moment; tiles only ever write tile pixels, so gaps keep
their colour for free. Two strided *views* do the layout:

* the destination: the grid seen as ``(rows, h, cols, w, C)`` with the row and
  tile strides of the grid (``as_strided`` over the grid itself, so the grid
  stays C-contiguous and a viewer can wrap it without a copy);
* the source: the images split ``(rows, cols, h, w, c)`` (splitting an axis is
  always a view) and transposed to ``(rows, h, cols, w, c)``, with the row
  flip applied as a negative-stride view (``[:, ::-1]``).

When source and grid pixels have the same channels in the same order (RGB
shown as is, RGBA shown with alpha), ``np.copyto(dst_view, src_view)`` moves
every byte once, ``w * c`` contiguous bytes at a time, with no temporary; the
partial last tile row is a second copy. Otherwise (BGR, R/B swapped, alpha
dropped, gray expanded to three channels) each output channel is copied from
its source channel by index views (``dst[..., 0] <- src[..., 2]`` for BGR),
tile row by tile row so a row block is still in cache for the next channel:
still no temporary, and 3-5x faster than one copy whose innermost loop is a
three-element channel axis.

Alpha: by default (``show_alpha=False``) alpha is dropped — the grid is RGB
and shows the stored colour channels as they are, without compositing. With
``show_alpha=True`` the grid is RGBA: alpha is carried as the fourth channel
(255 for sources without alpha, and for the gaps), and a viewer that honours
it blends the tiles over its background.

Coordinates: a grid pixel ``(x, y)`` is column ``x``, row ``y`` of
:attr:`Tiler.grid`, row 0 at the top. :meth:`Tiler.env_at` maps it to the env
and the pixel inside that env's *displayed* tile (after any row flip);
:meth:`Tiler.tile_origin` is its inverse.

This module is Qt-free.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from lucky_monitor.protocol.enums import ImageFormat
from lucky_monitor.protocol.errors import LuckyMonitorError

__all__ = [
    "MAX_GAP",
    "MAX_GRID_BYTES",
    "MAX_GRID_SIDE",
    "FrameMeta",
    "GridGeometry",
    "Tiler",
    "TilerError",
    "shrink_tiles",
    "source_format",
]

#: Largest grid side in pixels. Beyond it pyqtgraph switches to a
#: downsampling copy and Qt's scaled-draw paths lose precision.
MAX_GRID_SIDE = 32767
#: Largest grid buffer the tiler will allocate.
MAX_GRID_BYTES = 1 << 30
#: Largest gap between tiles, in pixels.
MAX_GAP = 64
#: Image side limit (same as the header's sane bound).
MAX_SIDE = 4096
#: Env count limit (same as the header's sane bound).
MAX_ENVS = 4096


class TilerError(LuckyMonitorError):
    """The tiler was given a geometry or a batch of images it cannot tile."""


def source_format(value: object) -> ImageFormat:
    """The :class:`~lucky_monitor.protocol.enums.ImageFormat` a ``src_format`` names.

    Parameters
    ----------
    value
        An :class:`ImageFormat`, or its label (``"auto"``, ``"rgb"``, ``"bgr"``,
        ``"rgba"``, ``"bgra"``, ``"gray"``).

    Raises
    ------
    TilerError
        ``value`` names no image format; the message lists the labels.
    """
    if isinstance(value, ImageFormat):
        return value
    if isinstance(value, str):
        try:
            return ImageFormat.from_label(value)
        except ValueError:
            pass
    raise TilerError(f"src_format: {value!r}, must be one of {', '.join(ImageFormat.labels())}")


def _check_int(name: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TilerError(f"{name}: {value!r} is not an integer")
    v = int(value)
    if not lo <= v <= hi:
        raise TilerError(f"{name}: {v}, must be {lo}..{hi}")
    return v


def _check_gap_value(value: object) -> tuple[int, int, int]:
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        v = _check_int("gap_value", value, 0, 255)
        return (v, v, v)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes) and len(value) == 3:
        r, g, b = (_check_int("gap_value", c, 0, 255) for c in value)
        return (r, g, b)
    raise TilerError(f"gap_value: {value!r}, must be an int 0..255 or an (r, g, b) triple")


@dataclass(frozen=True, slots=True)
class GridGeometry:
    """Where each env's tile sits in a grid: pure layout, no pixels.

    The coordinate system every view uses for the grid (labels, hover, the
    selection highlight), whatever resolution the pixels are shown at.
    ``columns_setting`` is the requested column count (``None``: automatic).
    """

    num_envs: int
    height: int
    width: int
    channels: int
    gap: int
    columns: int
    columns_setting: int | None = None
    out_channels: int = 3

    @property
    def rows(self) -> int:
        return -(-self.num_envs // self.columns)

    @property
    def grid_width(self) -> int:
        return self.columns * (self.width + self.gap) - self.gap

    @property
    def grid_height(self) -> int:
        return self.rows * (self.height + self.gap) - self.gap

    @property
    def shows_alpha(self) -> bool:
        return self.out_channels == 4

    def tile_origin(self, env: int) -> tuple[int, int]:
        """Top-left grid pixel ``(x0, y0)`` of ``env``'s tile.

        Raises
        ------
        TilerError
            ``env`` is not an integer in ``0..num_envs-1``.
        """
        row, col = divmod(_check_int("env", env, 0, self.num_envs - 1), self.columns)
        return col * (self.width + self.gap), row * (self.height + self.gap)

    def env_at(self, x: float, y: float) -> tuple[int, int, int] | None:
        """The env under grid pixel ``(x, y)`` and the pixel inside its tile.

        Parameters
        ----------
        x, y : float
            Grid coordinates (column, row; fractions are floored).

        Returns
        -------
        tuple of (int, int, int) or None
            ``(env, px, py)`` with ``px, py`` relative to the tile's top-left
            as displayed, or ``None`` over a gap, an empty slot or outside.
        """
        try:
            xf, yf = float(x), float(y)
        except (TypeError, ValueError):
            return None
        if not (math.isfinite(xf) and math.isfinite(yf)):
            return None
        xi, yi = math.floor(xf), math.floor(yf)
        if not (0 <= xi < self.grid_width and 0 <= yi < self.grid_height):
            return None
        col, px = divmod(xi, self.width + self.gap)
        row, py = divmod(yi, self.height + self.gap)
        if px >= self.width or py >= self.height:
            return None
        env = row * self.columns + col
        if env >= self.num_envs:
            return None
        return env, px, py

    def max_columns(self) -> int:
        """Largest column count whose full-resolution grid stays within :data:`MAX_GRID_SIDE` a side."""
        for cols in range(self.num_envs, 0, -1):
            rows = -(-self.num_envs // cols)
            if (
                cols * (self.width + self.gap) - self.gap <= MAX_GRID_SIDE
                and rows * (self.height + self.gap) - self.gap <= MAX_GRID_SIDE
            ):
                return cols
        return 1

    def tiles_in(self, x0: float, y0: float, x1: float, y1: float, margin: int = 1) -> tuple[int, int, int, int]:
        """Tile rows ``r0:r1`` and columns ``c0:c1`` that meet the grid rectangle ``(x0, y0)-(x1, y1)``.

        ``margin`` more tiles on each side, so a small pan shows no stale tile.
        A rectangle outside the grid gives an empty range.
        """
        cw, ch = self.width + self.gap, self.height + self.gap
        vals = [v if math.isfinite(v) else 0.0 for v in (x0, y0, x1, y1)]
        c0 = max(0, math.floor(min(vals[0], vals[2]) / cw) - margin)
        c1 = min(self.columns, math.floor(max(vals[0], vals[2]) / cw) + 1 + margin)
        r0 = max(0, math.floor(min(vals[1], vals[3]) / ch) - margin)
        r1 = min(self.rows, math.floor(max(vals[1], vals[3]) / ch) + 1 + margin)
        return r0, max(r0, r1), c0, max(c0, c1)


def _check_aspect(value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (1e-3 <= float(value) <= 1e3):
        raise TilerError(f"aspect: {value!r}, must be a view's width over height between 0.001 and 1000")
    return float(value)


class _Scratch:
    """Work arrays kept between calls: one buffer per name, grown when a call needs more, never shrunk.

    The downscale's temporaries are large (a whole grid's rows); allocating
    them afresh per frame costs more than the arithmetic (fresh pages fault
    in, measured 3x the work at 64 envs × 64×64). A frame asks for arrays of
    two or more shapes in turn (the full tile rows, then the last one; bands
    of different sizes), so each is a view of the one buffer, not an array of
    its own shape: a buffer kept per shape was reallocated at every call.
    """

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}

    def get(self, name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        dt = np.dtype(dtype)
        n = math.prod(shape) * dt.itemsize
        buf = self._arrays.get(name)
        if buf is None or buf.size < n:
            buf = np.empty(max(n, 1), np.uint8)
            self._arrays[name] = buf
        out: np.ndarray = buf[:n].view(dt).reshape(shape)
        return out


@functools.lru_cache(maxsize=256)
def _taps(n: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The two source positions :func:`_sample` averages for each of ``n`` outputs over ``size`` inputs (read-only).

    Cached: a frame is shrunk in bands (each band asks for the same taps), and
    computing them is a few numpy calls, as costly as a small band's gathers.
    """
    r = size / n
    d = max(1, round(r / 2))
    d -= 1 - d % 2  # odd: a one-pixel pattern's two phases are both in every sample pair
    if d > size - 1:
        d = 0  # a one-pixel source: both samples are that pixel
    a = np.minimum(np.floor(np.arange(n) * r + r / 4).astype(np.intp), size - 1 - d)
    b = a + d
    a.flags.writeable = False
    b.flags.writeable = False
    return a, b


@functools.lru_cache(maxsize=256)
def _channel_taps(n: int, size: int, c: int) -> np.ndarray:
    """:func:`_taps`' first positions for ``n`` outputs over ``size`` inputs, as indices of ``c``-channel items."""
    a, _ = _taps(n, size)
    idx = (a[:, None] * c + np.arange(c)).reshape(-1)
    idx.flags.writeable = False
    return idx


def _sample(block: np.ndarray, h: int, w: int, scratch: _Scratch | None = None) -> np.ndarray:
    """Downscale the last three axes ``(H, W, c)`` of ``block`` to ``(h, w, c)`` without aliasing.

    Any ``h <= H`` and ``w <= W``: the output is as large as the screen
    shows it, so drawing it is a blit, not another scaling. Output pixel
    ``i`` covers source rows ``[i * r, (i + 1) * r)`` with ``r = H / h`` (and
    so for columns). It is the mean of four source pixels in that
    footprint, at about a quarter in (``a``) and ``d`` further (``d``, the
    odd whole number nearest ``r / 2``) on each axis: the exact area
    average for ``r`` 2, a fixed sample otherwise, and for ``r`` under 2 the
    mean of two neighbours (a box filter, so a shrink by a few percent
    does not drop whole rows). The cost tracks output pixels, not source
    bytes (two gathers of whole rows, then one of pixel pairs' sums); a one-pixel
    stripe or checkerboard pattern shows as its mean colour instead of
    moiré, and a feature a quarter of the footprint wide still shows. The
    same size is a view.

    The result lives in ``scratch`` (when given) and is overwritten by the
    next call with the same scratch: copy it out before that.
    """
    big_h, big_w = block.shape[-3], block.shape[-2]
    if (h, w) == (big_h, big_w):
        return block
    ws = scratch if scratch is not None else _Scratch()
    # Rows first, as whole contiguous rows (cheap to gather), summed; then the two columns of those:
    # gray and RGBA pixels gathered as one item each (a void of their channels' 2-, 4- or 8-byte sums:
    # numpy's gather of a c-element inner axis measures 3-4x slower than a gather of c-channel items),
    # RGB ones by per-channel indices (below: a 6-byte item has no fast copy). np.take, not
    # block[..., idx, :, :], which hands back the gathered axis outermost in memory and makes every
    # later pass a strided one; mode="clip" (the indices are in range) so `out` is written directly.
    lead, c = block.shape[:-3], block.shape[-1]
    ra, rb = _taps(h, big_h)
    ca, cb = _taps(w, big_w)
    rows8 = ws.get("rows8", (*lead, h, big_w, c), np.uint8)
    rows = ws.get("rows", (*lead, h, big_w, c), np.uint16)
    np.take(block, ra, axis=-3, out=rows8, mode="clip")
    np.copyto(rows, rows8)
    np.take(block, rb, axis=-3, out=rows8, mode="clip")
    rows += rows8
    # Columns: each pixel plus the one d to its right, then one gather of those pair sums at the a
    # positions. The add runs over all rows as one contiguous array: a row's last d pixels are summed with
    # the next row's first (and the array's last d are left unset), but no tap reaches them (a <= W - 1 - d).
    # Row by row, numpy's per-row loop overhead cost 5x the arithmetic (115 us against 23 for 64 tiles).
    d = int(cb[0] - ca[0])
    flat = rows.reshape(-1)
    n = flat.size - d * c
    pairs = ws.get("pairs", (*lead, h, big_w * c), np.uint16)
    np.add(flat[:n], flat[d * c :], out=pairs.reshape(-1)[:n])
    if c == 3:
        # A 6-byte pixel is no machine word: numpy gathers such items with a generic copy each. Its three
        # 2-byte channels, by indices expanded per channel, go ~1.6x faster (the whole shrink ~0.86x).
        acc16 = ws.get("acc16", (*lead, h, w * c), np.uint16)
        np.take(pairs, _channel_taps(w, big_w, c), axis=-1, out=acc16, mode="clip")
    else:
        pixel = np.dtype((np.void, 2 * c))
        acc = ws.get("acc", (*lead, h, w), pixel)
        np.take(pairs.view(pixel), ca, axis=-1, out=acc, mode="clip")  # one item (2, 4 or 8 bytes) per pixel
        acc16 = acc.view(np.uint16)
    acc16 += 2
    acc16 >>= 2
    out8 = ws.get("out", (*lead, h, w, c), np.uint8)
    np.copyto(out8, acc16.reshape(*lead, h, w, c), casting="unsafe")
    return out8


_SHRINK_SCRATCH = _Scratch()

#: Source bytes shrunk per pass by :func:`shrink_tiles`: the work arrays of a pass (about 4x this) then
#: stay near the cache instead of streaming through memory. Measured at 4096 envs of 64x64 RGB shrunk
#: to 8x8: 3.4 ms in passes of 256 envs against 4.5 ms in one.
SHRINK_PASS_BYTES = 3 << 20


def shrink_tiles(block: np.ndarray, h: int, w: int) -> np.ndarray:
    """The downscale :meth:`Tiler.tile` applies, on its own: ``(..., H, W, c)`` to ``(..., h, w, c)``.

    For a caller that places the tiles itself, a chunk of envs at a time (the
    session's ``pread`` path, the image-sampling helper process); a batch
    ``(n, H, W, c)`` over :data:`SHRINK_PASS_BYTES` is shrunk in passes. The
    result is overwritten by the next call in this process: copy it out first.
    """
    if block.ndim != 4 or block.shape[-3:-1] == (h, w):
        return _sample(block, h, w, _SHRINK_SCRATCH)
    n, big_h, big_w, c = block.shape
    k = max(1, SHRINK_PASS_BYTES // max(1, big_h * big_w * c))
    if n <= k:
        return _sample(block, h, w, _SHRINK_SCRATCH)
    out = _SHRINK_SCRATCH.get("batch", (n, h, w, c), np.uint8)
    for a in range(0, n, k):
        out[a : a + k] = _sample(block[a : a + k], h, w, _SHRINK_SCRATCH)
    return out


class Tiler:
    """Copy ``(n, h, w, c)`` uint8 images into one preallocated tiled grid.

    Parameters
    ----------
    num_envs : int
        Number of images per batch, 1..4096.
    height, width : int
        Size of each image in pixels, 1..4096.
    channels : int
        Channels per source pixel: 1 (gray), 3 (RGB/BGR) or 4 (RGBA/BGRA).
    columns : int or None, optional
        Tiles per grid row. ``None`` (default) picks the count automatically:
        the grid closest to square in pixels (for square images,
        ``ceil(sqrt(n))``), or, with ``aspect``, the one whose tiles come out
        largest when the grid is fitted into a view of that shape.
    aspect : float or None, optional
        Width over height of the view the grid is shown in, for automatic
        columns (``None``: near-square). A wide dock then gets more, larger
        tiles per row instead of a square grid with empty margins.
    gap : int, optional
        Pixels between neighbouring tiles, 0..64. Default 2.
    gap_value : int or (int, int, int), optional
        Gap colour, gray level or RGB. Default 40.

    Raises
    ------
    TilerError
        A parameter is out of range, or the grid would exceed
        :data:`MAX_GRID_SIDE` pixels a side or :data:`MAX_GRID_BYTES` bytes.

    Attributes
    ----------
    grid : numpy.ndarray
        The output, ``(H, W, 3)`` uint8 RGB, or ``(H, W, 4)`` RGBA after a
        :meth:`tile` with ``show_alpha=True``. C-contiguous. The same array is
        reused by every :meth:`tile` call until the geometry changes.
    """

    def __init__(
        self,
        num_envs: int,
        height: int,
        width: int,
        channels: int,
        *,
        columns: int | None = None,
        gap: int = 2,
        gap_value: int | Sequence[int] = 40,
        allocate: bool = True,
        aspect: float | None = None,
    ) -> None:
        self._scratch = _Scratch()  # the downscale's work arrays, kept between frames
        self._allocate = allocate  # False: plan the layout only (see :attr:`geometry`); tile() is unavailable
        self.num_envs = _check_int("num_envs", num_envs, 1, MAX_ENVS)
        self.height = _check_int("height", height, 1, MAX_SIDE)
        self.width = _check_int("width", width, 1, MAX_SIDE)
        self.channels = _check_int("channels", channels, 1, 4)
        if self.channels == 2:
            raise TilerError("channels: 2, must be 1, 3 or 4")
        self.gap = _check_int("gap", gap, 0, MAX_GAP)
        self.gap_value = _check_gap_value(gap_value)
        self._columns_setting: int | None = None
        self._aspect = _check_aspect(aspect)
        self._out_channels = 3
        self._cols = 0
        self.grid: np.ndarray = np.empty((0, 0, 3), np.uint8)
        self._plan(columns, self._out_channels)

    # ------------------------------------------------------------------ geometry
    @property
    def columns(self) -> int:
        """Tiles per grid row (the value in force; see :attr:`columns_setting`).

        Setting it re-plans the geometry and reallocates the grid once; ``None``
        returns to the automatic near-square choice. Setting the value already
        in force keeps the grid.
        """
        return self._cols

    @columns.setter
    def columns(self, value: int | None) -> None:
        self._plan(value, self._out_channels)

    @property
    def columns_setting(self) -> int | None:
        """The requested column count, ``None`` when chosen automatically."""
        return self._columns_setting

    @property
    def aspect(self) -> float | None:
        """Width over height of the view automatic columns fit (``None``: near-square).

        Setting it re-plans an automatic layout (the grid is reallocated only
        when the column count changes); an explicit column count stays.
        """
        return self._aspect

    @aspect.setter
    def aspect(self, value: float | None) -> None:
        value = _check_aspect(value)
        if value != self._aspect:
            self._aspect = value
            if self._columns_setting is None:
                self._plan(None, self._out_channels)

    @property
    def rows(self) -> int:
        """Tile rows in the grid (the last may be partial)."""
        return self._rows

    @property
    def grid_width(self) -> int:
        """Grid width ``W`` in pixels."""
        return self._W

    @property
    def grid_height(self) -> int:
        """Grid height ``H`` in pixels."""
        return self._H

    @property
    def shows_alpha(self) -> bool:
        """Whether the current grid is RGBA (the last :meth:`tile` kept alpha)."""
        return self._out_channels == 4

    def _size(self, cols: int) -> tuple[int, int, int]:
        rows = -(-self.num_envs // cols)
        width = cols * (self.width + self.gap) - self.gap
        height = rows * (self.height + self.gap) - self.gap
        return rows, width, height

    def _fits(self, cols: int, out_channels: int) -> bool:
        _, width, height = self._size(cols)
        return width <= MAX_GRID_SIDE and height <= MAX_GRID_SIDE and width * height * out_channels <= MAX_GRID_BYTES

    def _auto_columns(self, out_channels: int) -> int:
        best: tuple[float, int, int] | None = None
        best_cols = 0
        aspect = self._aspect
        for cols in range(1, self.num_envs + 1):
            if not self._fits(cols, out_channels):
                continue
            rows, width, height = self._size(cols)
            if aspect is None:
                shape = round(abs(math.log(width / height)), 9)
            else:  # the fitted scale, min(view_w / width, view_h / height) for a view of height 1, negated
                shape = -round(min(aspect / width, 1.0 / height), 12)
            score = (shape, rows * cols - self.num_envs, -cols)
            if best is None or score < best:
                best, best_cols = score, cols
        if best is None:
            raise TilerError(
                f"grid: {self.num_envs} images of {self.width}x{self.height} do not fit in "
                f"{MAX_GRID_SIDE}x{MAX_GRID_SIDE} pixels and {MAX_GRID_BYTES} bytes"
            )
        return best_cols

    def max_columns(self) -> int:
        """Largest column count whose grid fits the size limits (at least 1 if any does)."""
        for cols in range(self.num_envs, 0, -1):
            if self._fits(cols, 3):
                return cols
        return 1

    def min_columns(self) -> int:
        """Smallest column count whose grid fits the size limits."""
        for cols in range(1, self.num_envs + 1):
            if self._fits(cols, 3):
                return cols
        return self.num_envs

    def _plan(self, columns: int | None, out_channels: int) -> None:
        """Choose the layout and allocate the grid (the only allocation).

        Keeps the grid when neither the column count in force nor the output
        channels change.
        """
        if columns is None:
            cols = self._auto_columns(out_channels)
        else:
            cols = _check_int("columns", columns, 1, self.num_envs)
            if not self._fits(cols, out_channels):
                _, width, height = self._size(cols)
                raise TilerError(
                    f"columns: {cols} gives a {width}x{height}x{out_channels} grid, over "
                    f"{MAX_GRID_SIDE} pixels a side or {MAX_GRID_BYTES} bytes"
                )
        self._columns_setting = columns if columns is None else cols
        if cols == self._cols and out_channels == self._out_channels and (self.grid.size or not self._allocate):
            return
        self._out_channels = out_channels
        rows, width, height = self._size(cols)
        self._cols, self._rows, self._W, self._H = cols, rows, width, height
        self._full_rows, self._rem = divmod(self.num_envs, cols)
        if not self._allocate:
            return

        grid = np.empty((height, width, out_channels), np.uint8)
        grid[..., :3] = self.gap_value
        if out_channels == 4:
            grid[..., 3] = 255
        self.grid = grid

        h, w, gap, c = self.height, self.width, self.gap, out_channels
        row_stride, px = width * c, c
        # (rows, h, cols, w, C) over the grid; only tile pixels are addressed.
        self._dst_full = as_strided(
            grid,
            shape=(self._full_rows, h, cols, w, c),
            strides=((h + gap) * row_stride, row_stride, (w + gap) * px, px, 1),
        )
        if self._rem:
            y0 = self._full_rows * (h + gap)
            # (h, rem, w, C): the partial last tile row.
            self._dst_last: np.ndarray | None = as_strided(
                grid[y0:],
                shape=(h, self._rem, w, c),
                strides=(row_stride, (w + gap) * px, px, 1),
            )
        else:
            self._dst_last = None

    # --------------------------------------------------------------- tiling
    def _source(self, images: object, step: int | None = 1) -> np.ndarray:
        if not isinstance(images, np.ndarray):
            raise TilerError(f"images: expected a numpy array, got {type(images).__name__}")
        if images.dtype != np.uint8:
            raise TilerError(f"images: dtype {images.dtype}, must be uint8")
        if images.ndim == 3 and self.channels == 1:
            images = images[..., np.newaxis]
        if step == 1:
            want = (self.num_envs, self.height, self.width, self.channels)
            if images.shape != want:
                raise TilerError(f"images: shape {images.shape}, expected {want}")
            return images
        ok = images.ndim == 4 and images.shape[0] == self.num_envs and images.shape[3] == self.channels
        if step is None:
            ok = ok and images.shape[1] >= self.height and images.shape[2] >= self.width
            how = "(images smaller than the tiles)"
        else:
            ok = ok and -(-images.shape[1] // step) == self.height and -(-images.shape[2] // step) == self.width
            how = f"at step {step}"
        if not ok:
            raise TilerError(f"images: shape {images.shape} does not give {self.height}x{self.width} tiles {how}")
        return images

    def _resolve_format(self, src_format: str | ImageFormat) -> ImageFormat:
        fmt = source_format(src_format)
        resolved = ImageFormat.resolve(fmt, self.channels)
        if resolved is None:  # a concrete format with another channel count (the tiler's are 1, 3 or 4)
            raise TilerError(f"src_format: {fmt.label} needs {fmt.channels} channels, images have {self.channels}")
        return resolved

    def _copy(self, src: np.ndarray, pairs: Sequence[tuple[int | slice, int | slice]]) -> None:
        """Copy ``src`` (n, h, w, c) into the tile views, channel by the ``(dst, src)`` pairs.

        One pair (same layout) is one 5-D copy. Several pairs (one per output
        channel) are done tile row by tile row, all channels of a tile row
        before the next, so each tile row's bytes are still in cache for the
        second and third channel; measured 2-3x faster than whole-grid
        channel passes when rows are flipped.
        """
        nf = self._full_rows * self._cols
        full = None
        if self._full_rows:
            # Splitting axis 0 is always a view; the transpose is a view too.
            full = src[:nf].reshape(self._full_rows, self._cols, *src.shape[1:]).transpose(0, 2, 1, 3, 4)
        last = src[nf:].transpose(1, 0, 2, 3) if self._dst_last is not None else None
        if len(pairs) == 1:
            dk, sk = pairs[0]
            if full is not None:
                np.copyto(self._dst_full[..., dk], full[..., sk])
            if last is not None and self._dst_last is not None:
                np.copyto(self._dst_last[..., dk], last[..., sk])
            return
        if full is not None:
            for r in range(self._full_rows):
                d, s = self._dst_full[r], full[r]
                for dk, sk in pairs:
                    np.copyto(d[..., dk], s[..., sk])
        if last is not None and self._dst_last is not None:
            for dk, sk in pairs:
                np.copyto(self._dst_last[..., dk], last[..., sk])

    def tile(
        self,
        images: np.ndarray,
        *,
        src_format: str | ImageFormat = "auto",
        flip_rows: bool = False,
        swap_rb: bool = False,
        show_alpha: bool = False,
        step: int | None = 1,
        region: tuple[int, int, int, int] | None = None,
    ) -> np.ndarray:
        """Copy one batch of images into :attr:`grid` and return it.

        Parameters
        ----------
        images : numpy.ndarray
            ``(num_envs, height, width, channels)`` uint8; for one channel,
            ``(num_envs, height, width)`` is accepted too. Any strides (a
            read-only view of a mapping is fine); it is only read.
        src_format : ImageFormat or its label, optional
            Channel order of the source (see :func:`source_format`). ``"auto"``
            picks by channel count.
        flip_rows : bool, optional
            Flip each image upside down (for rows stored bottom-up).
        swap_rb : bool, optional
            Swap red and blue after decoding ``src_format`` (a display toggle
            for a source whose declared order is wrong).
        show_alpha : bool, optional
            Keep alpha: the grid becomes ``(H, W, 4)`` RGBA (reallocated once on
            a change). Sources without alpha get 255. When False alpha is
            dropped, not composited.
        step : int or None, optional
            Source pixels per grid pixel on each axis: the tiles are the
            images' size divided by ``step`` (rounded up). ``None``: images
            of any size at least the tiles', shrunk to the tiles' size (the
            session makes tiles as large as the screen shows them). Either
            way a shrink is a fixed four-pixel sample per output pixel (see
            :func:`_sample`), never dropped pixels, so a fine pattern shows
            as its mean colour, not as moiré.
        region : (r0, r1, c0, c1), optional
            Copy only the tiles in tile rows ``r0:r1`` and columns ``c0:c1``
            (those on screen); the others keep what they held.

        Returns
        -------
        numpy.ndarray
            :attr:`grid` (the same object until the geometry changes).

        Raises
        ------
        TilerError
            Wrong type, dtype, shape or format for this tiler.

        Notes
        -----
        When source and grid pixels have the same channels in the same order
        (RGB shown as is, RGBA shown with alpha) the copy is one pass over all
        channels, contiguous ``width * channels`` bytes at a time. Otherwise
        (BGR, swapped, alpha dropped, gray expanded) it is one strided copy per
        output channel and tile row: numpy's iterator would otherwise run an
        inner loop three elements long, which measures 3-5x slower. Either way
        no temporary array is made.
        """
        src, pairs, same_size = self._prepare(images, src_format, flip_rows, swap_rb, show_alpha, step)
        if same_size and region is None:
            self._copy(src, pairs)
        else:
            self._copy_region(src, pairs, region or (0, self._rows, 0, self._cols))
        return self.grid

    def copies(
        self,
        images: np.ndarray,
        *,
        src_format: str | ImageFormat = "auto",
        flip_rows: bool = False,
        swap_rb: bool = False,
        show_alpha: bool = False,
        region: tuple[int, int, int, int] | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """The copies :meth:`tile` makes of a source of the tiles' size, as ``(destination, source)`` views.

        ``np.copyto(d, s)`` for each pair is :meth:`tile` with the same
        arguments (``step=None``), without checking them again: for a caller
        that tiles one buffer again and again (the session's mirror of the
        image region), the pairs stay right while that buffer, the options and
        this tiler's grid stay the same (a new grid comes with a new
        :attr:`grid` object). ``None`` where the images are larger than the
        tiles (a shrink is not a plain copy).

        Raises
        ------
        TilerError
            As :meth:`tile`.
        """
        src, pairs, same_size = self._prepare(images, src_format, flip_rows, swap_rb, show_alpha, None)
        if not same_size:
            return None
        return list(self._region_views(src, pairs, region or (0, self._rows, 0, self._cols)))

    def _prepare(
        self,
        images: np.ndarray,
        src_format: str | ImageFormat,
        flip_rows: bool,
        swap_rb: bool,
        show_alpha: bool,
        step: int | None,
    ) -> tuple[np.ndarray, list[tuple[int | slice, int | slice]], bool]:
        """Check a tiling's arguments and plan it: the source view, the channel pairs, whether it is same-size."""
        if not self._allocate:
            raise TilerError("this tiler plans a layout only; it has no grid to tile into")
        if step is not None:
            step = _check_int("step", step, 1, MAX_SIDE)
        src = self._source(images, step)
        same_size = src.shape[1:3] == (self.height, self.width)
        fmt = self._resolve_format(src_format)
        out_c = 4 if show_alpha else 3
        if out_c != self._out_channels:
            self._plan(self._columns_setting, out_c)
        if flip_rows:
            src = src[:, ::-1]

        pairs: list[tuple[int | slice, int | slice]]
        if fmt is ImageFormat.GRAY:
            pairs = [(0, 0), (1, 0), (2, 0)]  # alpha, if shown, stays at the 255 it was allocated with
        else:
            reverse = fmt.blue_first != bool(swap_rb)
            has_alpha = fmt.has_alpha
            if not reverse and self.channels == out_c:
                pairs = [(slice(None), slice(None))]  # same layout: one fused copy
            else:
                pairs = [(0, 2), (1, 1), (2, 0)] if reverse else [(0, 0), (1, 1), (2, 2)]
                if out_c == 4 and has_alpha:
                    pairs.append((3, 3))
        return src, pairs, same_size

    def _copy_region(
        self,
        src: np.ndarray,
        pairs: Sequence[tuple[int | slice, int | slice]],
        region: tuple[int, int, int, int],
    ) -> None:
        """Copy the tiles of ``region`` only, each shrunk to the tile size (see :meth:`tile`)."""
        for d, s in self._region_views(src, pairs, region):
            np.copyto(d, s)

    def _region_views(
        self,
        src: np.ndarray,
        pairs: Sequence[tuple[int | slice, int | slice]],
        region: tuple[int, int, int, int],
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(destination, source)`` views of the copies of ``region``'s tiles, shrunk first if need be.

        A shrunk block lives in the scratch until the next shrink: each pair is copied before the next
        is asked for.
        """
        r0, r1, c0, c1 = (int(v) for v in region)
        r0, c0 = max(0, r0), max(0, c0)
        r1, c1 = min(self._rows, r1), min(self._cols, c1)
        h, w, fr, cols = self.height, self.width, self._full_rows, self._cols
        if r0 < min(r1, fr) and c0 < c1:
            re = min(r1, fr)
            block = src[: fr * cols].reshape(fr, cols, *src.shape[1:])[r0:re, c0:c1]
            tiles = _sample(block, h, w, self._scratch).transpose(0, 2, 1, 3, 4)  # (rv, h, cv, w, c)
            dst = self._dst_full[r0:re, :, c0:c1]
            for dk, sk in pairs:
                yield dst[..., dk], tiles[..., sk]
        if self._dst_last is not None and r1 > fr:
            ce = min(c1, self._rem)
            if c0 < ce:
                tiles = _sample(src[fr * cols + c0 : fr * cols + ce], h, w, self._scratch).transpose(1, 0, 2, 3)
                dst = self._dst_last[:, c0:ce]
                for dk, sk in pairs:
                    yield dst[..., dk], tiles[..., sk]

    # ---------------------------------------------------------- coordinates
    def _check_env(self, env: int) -> int:
        return _check_int("env", env, 0, self.num_envs - 1)

    @property
    def geometry(self) -> GridGeometry:
        """The grid's layout as a value (changes with columns and alpha)."""
        return GridGeometry(
            self.num_envs,
            self.height,
            self.width,
            self.channels,
            self.gap,
            self._cols,
            self._columns_setting,
            self._out_channels,
        )

    def tile_origin(self, env: int) -> tuple[int, int]:
        """Top-left grid pixel ``(x0, y0)`` of ``env``'s tile (see :meth:`GridGeometry.tile_origin`)."""
        row, col = divmod(self._check_env(env), self._cols)
        return col * (self.width + self.gap), row * (self.height + self.gap)

    def env_at(self, x: float, y: float) -> tuple[int, int, int] | None:
        """The env under grid pixel ``(x, y)`` and the pixel inside its tile (see :meth:`GridGeometry.env_at`)."""
        return self.geometry.env_at(x, y)

    def tile_view(self, env: int) -> np.ndarray:
        """A writable view of ``env``'s tile inside :attr:`grid`, ``(h, w, C)``.

        Raises
        ------
        TilerError
            ``env`` is not an integer in ``0..num_envs-1``.
        """
        x0, y0 = self.tile_origin(env)
        return self.grid[y0 : y0 + self.height, x0 : x0 + self.width]


@dataclass(frozen=True, slots=True)
class FrameMeta:
    """What a viewer needs to know about one batch of images besides the pixels.

    Attributes
    ----------
    image_seq : int
        The header's ``image_seq`` the copy was taken at.
    image_frame_seq : int
        The header's ``image_frame_seq`` (the step the images belong to).
    torn : int
        Torn copies skipped so far (seqlock retries that failed).
    src_format : str
        An :class:`~lucky_monitor.protocol.enums.ImageFormat` label (``"auto"``
        picks by channel count); see :func:`source_format`.
    bottom_up : bool
        Rows are stored bottom-up (the header's image flag bit 0).
    """

    image_seq: int = 0
    image_frame_seq: int = 0
    torn: int = 0
    src_format: str = "auto"
    bottom_up: bool = False
