"""A 3×5 bitmap font for digits, used to stamp env indices into camera images.

Glyphs are boolean arrays of shape ``(GLYPH_H, GLYPH_W)``; ``True`` is ink.
:func:`number_masks` builds the marker of many numbers at once (no loop over
the numbers), so a renderer can precompute one mask per env.
"""

from __future__ import annotations

import numpy as np

from .physics import SimError

GLYPH_W = 3
GLYPH_H = 5
#: columns between two glyphs (before scaling)
SPACING = 1

_ROWS: dict[str, tuple[str, str, str, str, str]] = {
    "0": ("###", "#.#", "#.#", "#.#", "###"),
    "1": (".#.", "##.", ".#.", ".#.", "###"),
    "2": ("###", "..#", "###", "#..", "###"),
    "3": ("###", "..#", ".##", "..#", "###"),
    "4": ("#.#", "#.#", "###", "..#", "..#"),
    "5": ("###", "#..", "###", "..#", "###"),
    "6": ("###", "#..", "###", "#.#", "###"),
    "7": ("###", "..#", ".#.", ".#.", ".#."),
    "8": ("###", "#.#", "###", "#.#", "###"),
    "9": ("###", "#.#", "###", "..#", "###"),
    " ": ("...", "...", "...", "...", "..."),
    "-": ("...", "...", "###", "...", "..."),
}

#: characters the font can draw, in atlas order
CHARS = "0123456789 -"
#: atlas index of the blank glyph
BLANK = CHARS.index(" ")

#: (len(CHARS), GLYPH_H, GLYPH_W) bool, read-only
ATLAS = np.array([[[c == "#" for c in row] for row in _ROWS[ch]] for ch in CHARS], dtype=bool)
ATLAS.setflags(write=False)


class FontError(SimError):
    """Text the font cannot draw, or an unusable scale."""


def text_size(n_chars: int, scale: int = 1) -> tuple[int, int]:
    """Pixel size of a line of ``n_chars`` glyphs.

    Parameters
    ----------
    n_chars : int
        Number of characters.
    scale : int
        Integer magnification (each font pixel becomes ``scale × scale``).

    Returns
    -------
    (height, width) : tuple of int
    """
    if n_chars <= 0:
        return (GLYPH_H * scale, 0)
    return (GLYPH_H * scale, (n_chars * (GLYPH_W + SPACING) - SPACING) * scale)


def render_text(text: str, scale: int = 1) -> np.ndarray:
    """Rasterise one line of text.

    Parameters
    ----------
    text : str
        Characters from :data:`CHARS`.
    scale : int
        Integer magnification, 1..64.

    Returns
    -------
    numpy.ndarray
        ``(GLYPH_H*scale, width)`` bool mask, see :func:`text_size`.

    Raises
    ------
    FontError
        On a character outside :data:`CHARS` or a bad scale.
    """
    bad = [c for c in text if c not in CHARS]
    if bad:
        raise FontError(f"cannot draw {bad[0]!r}; the font has {CHARS!r}")
    idx = np.array([CHARS.index(c) for c in text], dtype=np.intp).reshape(1, -1)
    return _compose(idx, scale)[0]


def number_masks(values: np.ndarray, n_digits: int | None = None, scale: int = 1) -> np.ndarray:
    """Rasterise many non-negative integers at once, left-aligned.

    Parameters
    ----------
    values : array_like of int
        Shape ``(n,)``, each ``>= 0``.
    n_digits : int, optional
        Field width in characters; defaults to the width of the largest value.
        Shorter numbers are padded with blanks on the right.
    scale : int
        Integer magnification, 1..64.

    Returns
    -------
    numpy.ndarray
        ``(n, GLYPH_H*scale, width)`` bool masks, all the same size.

    Raises
    ------
    FontError
        On a negative value, a value wider than ``n_digits`` or a bad scale.
    """
    v = np.asarray(values, dtype=np.int64).reshape(-1)
    if v.size and int(v.min()) < 0:
        raise FontError("number_masks draws non-negative integers only")
    widest = len(str(int(v.max()))) if v.size else 1
    nd = widest if n_digits is None else int(n_digits)
    if not 1 <= nd <= 19 or nd < widest:
        raise FontError(f"n_digits={n_digits} cannot hold {widest}-digit numbers")
    # digits[i, j] = j-th most significant digit of v[i]; blanks after its last digit
    lengths = np.ones_like(v)
    for p in range(1, nd):
        lengths += v >= 10**p
    j = np.arange(nd)
    power = lengths[:, None] - 1 - j[None, :]  # power of ten of column j
    digits = (v[:, None] // (10 ** np.maximum(power, 0))) % 10
    idx = np.where(power >= 0, digits, BLANK).astype(np.intp)
    return _compose(idx, scale)


def _compose(idx: np.ndarray, scale: int) -> np.ndarray:
    """Glyph indices ``(n, k)`` → masks ``(n, H*scale, (k*(W+S)-S)*scale)``."""
    if not 1 <= int(scale) <= 64:
        raise FontError(f"scale {scale} must be 1..64")
    n, k = idx.shape
    g = ATLAS[idx]  # (n, k, H, W)
    g = np.concatenate([g, np.zeros((n, k, GLYPH_H, SPACING), dtype=bool)], axis=3)
    m = g.transpose(0, 2, 1, 3).reshape(n, GLYPH_H, k * (GLYPH_W + SPACING))
    if k:
        m = m[:, :, : k * (GLYPH_W + SPACING) - SPACING]
    if scale > 1:
        m = np.repeat(np.repeat(m, scale, axis=1), scale, axis=2)
    return np.ascontiguousarray(m)
