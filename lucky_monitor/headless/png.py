"""A Qt-free PNG writer for 8-bit RGB and RGBA images (zlib + struct, no dependency).

Theory of operation: a PNG is the 8-byte signature and three chunks (IHDR,
one IDAT, IEND); each chunk is ``length, type, data, CRC-32(type + data)``.
The image data is every row prefixed with filter type 0 (none), deflated.
Filter 0 keeps the encoder one vectorised copy and one ``zlib.compress``; the
file is larger than an optimising encoder's but byte-exact.
"""

from __future__ import annotations

import os
import struct
import zlib

import numpy as np

__all__ = ["encode_png", "write_png"]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COLOR_TYPE = {1: 0, 3: 2, 4: 6}  # gray, RGB, RGBA


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(image: np.ndarray, level: int = 6) -> bytes:
    """The PNG file of ``image``: ``(H, W)`` gray, ``(H, W, 3)`` RGB or ``(H, W, 4)`` RGBA uint8, row 0 at the top.

    Raises
    ------
    ValueError
        Not a uint8 array of one of those shapes, or empty.
    """
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8:
        raise ValueError("a PNG needs a uint8 numpy array")
    a = image[..., np.newaxis] if image.ndim == 2 else image
    if a.ndim != 3 or a.shape[2] not in _COLOR_TYPE or a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"a PNG needs an (H, W), (H, W, 3) or (H, W, 4) array, not {image.shape}")
    h, w, c = a.shape
    raw = np.empty((h, 1 + w * c), np.uint8)
    raw[:, 0] = 0  # filter type: none
    raw[:, 1:] = a.reshape(h, w * c)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, _COLOR_TYPE[c], 0, 0, 0)
    return (
        _SIGNATURE + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw.tobytes(), level)) + _chunk(b"IEND", b"")
    )


def write_png(path: str | os.PathLike[str], image: np.ndarray) -> None:
    """Write ``image`` (see :func:`encode_png`) to ``path`` through a temporary file in the same directory.

    A reader never sees a half-written file: the PNG appears whole or not at all.
    """
    data = encode_png(image)
    target = os.fspath(path)
    tmp = f"{target}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
