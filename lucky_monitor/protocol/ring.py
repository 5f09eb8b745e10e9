"""LRBC command rings: single-producer single-consumer byte rings, plus a passive tap.

Theory of operation
-------------------
A ring at ``offset`` is ``write_pos: u32`` (+0), ``read_pos: u32`` (+4) and
``capacity`` data bytes (+8), capacity a power of two. Positions are
free-running byte counters that wrap at 2**32; the data index is
``pos % capacity``; both always advance by multiples of 8. The ring is empty
when the positions are equal and holds ``(write_pos - read_pos) mod 2**32``
bytes otherwise. The producer alone writes ``write_pos`` and the data; the
consumer alone writes ``read_pos``.

An entry is ``length: u32`` (payload bytes, >= 1), the payload, then zero
padding to the next multiple of 8, so an entry of ``n`` payload bytes takes
``(n + 11) & ~7`` bytes. An entry never wraps: when it does not fit between
its index and the end of the data, the producer writes the marker
``0xFFFFFFFF`` at the index and the entry at index 0, and ``write_pos``
advances over the skipped tail as well. The producer keeps the used bytes at
most ``capacity - 8`` and refuses payloads above ``capacity/2 - 8``; hence an
entry is at most ``capacity/2`` bytes and a marker can only sit past the
middle of the data.

Ordering: the producer reads ``read_pos``, writes the entry bytes, then
stores ``write_pos``; the consumer reads ``write_pos``, copies the entries,
then stores ``read_pos``. On x86-64 aligned 4-byte loads and stores through a
``memoryview`` cast are atomic and stores are not reordered with stores, which
is all this needs. A full ring raises :class:`RingFull` before a byte is
written.

Corruption (a length of 0 or above the largest payload, an entry running past
the end of the data or past ``write_pos``, a marker where any entry fits or
not followed by an entry, used bytes above capacity, positions not multiples
of 8) makes the consumer set ``read_pos := write_pos`` and raise
:class:`RingCorrupt`: the next pop works again, nothing loops. Every decode
step advances by at least 8 bytes and stops at ``write_pos``, so a hostile
ring costs at most ``capacity / 8`` steps and allocates at most what it holds.

A tap (:class:`RingTap`) reads a ring it does not own and never writes a byte.
It keeps its own cursor ``c`` (always an entry boundary) and, each poll:

1. loads ``write_pos`` (w1) and copies the data of ``[c, w1)`` into a private
   buffer laid out like the ring, so nothing it decodes can change under it;
2. re-reads ``read_pos`` (r2), then ``write_pos`` (w2);
3. decides which copied bytes are provably intact. A position ``p`` is
   intact if ``p >= r2``: the producer writes only below
   ``read_pos + capacity - 8`` (as it read ``read_pos``, which only grows), so
   only positions below r2 can have been overwritten while the tap copied.
   It is also intact if ``p + capacity`` lies beyond the furthest position
   the push that may be in flight at w2 can reach: the largest entry
   (``capacity/2`` bytes), after a wrap skip when it would not fit before the
   end of the data. Every earlier push is published, so it ended before w2;
4. decodes the private copy from the first entry whose position and framing
   are proven: ``c`` itself when every copied byte is intact, else r2 (an
   entry boundary: the consumer's own position) when r2 lies in the copy,
   else nothing (``w1`` is the next known boundary). The bytes skipped are
   reported as missed, never decoded; entries are delivered at once, never
   held back waiting for the producer.

Bytes that could have been overwritten always form a prefix of the copy, so
a result is: missed bytes, then messages in push order. A producer that ran
more than a capacity past the cursor (seen at w1 or w2, with nothing
deliverable) is a lap: the tap reports ``w - c`` missed bytes and moves to
``w``. A corrupt entry among intact bytes is real corruption: reported, and
the tap resynchronises to w2. An entry whose bytes are intact but whose
start is only known through possibly overwritten length words is *not*
intact: following overwritten lengths could land mid-entry.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import MessageTooLarge, RingCorrupt, RingError, RingFull
from .header import MAX_RING, MIN_RING, RING_HEADER

__all__ = [
    "MARKER",
    "RING_HEADER",
    "RingReader",
    "RingSource",
    "RingTap",
    "RingWriter",
    "TapResult",
    "entry_size",
    "init_ring",
    "max_payload",
    "ring_size_bytes",
]

#: Wrap marker: "the rest of the data area is skipped, the entry is at index 0".
MARKER = 0xFFFFFFFF

_M32 = 0xFFFFFFFF
_HALF32 = 1 << 31
_U32 = struct.Struct("<I")
_ZEROS = bytes(8)


def ring_size_bytes(capacity: int) -> int:
    """Bytes a ring of ``capacity`` data bytes occupies: the 8 position bytes plus the data."""
    return RING_HEADER + capacity


def max_payload(capacity: int) -> int:
    """Largest payload a ring of ``capacity`` data bytes accepts: ``capacity // 2 - 8``."""
    return capacity // 2 - 8


def entry_size(payload_len: int) -> int:
    """Bytes one entry of ``payload_len`` payload bytes occupies (length word + payload + padding)."""
    return (payload_len + 11) & ~7


def init_ring(buf: Any, offset: int) -> None:
    """Zero ``write_pos`` and ``read_pos`` of the ring at ``offset`` (the creator does this once).

    Parameters
    ----------
    buf
        Writable buffer (``mmap``, ``bytearray``, ``memoryview``) holding the ring.
    offset
        Byte offset of the ring's ``write_pos`` in ``buf``.
    """
    with memoryview(buf) as mv, mv.cast("B") as b:
        if b.readonly:
            raise RingError(f"ring at offset {offset}: buffer is read-only")
        if offset < 0 or offset + RING_HEADER > len(b):
            raise RingError(f"ring at offset {offset}: outside the {len(b)}-byte buffer")
        b[offset : offset + RING_HEADER] = _ZEROS


class _Ring:
    """Views shared by the three roles: the position pair and the data area."""

    def _geometry(self, offset: int, capacity: int) -> None:
        if capacity < MIN_RING or capacity > MAX_RING or capacity & (capacity - 1):
            raise RingError(f"ring capacity {capacity} must be a power of two in {MIN_RING}..{MAX_RING}")
        if offset < 0 or offset % 8:
            raise RingError(f"ring offset {offset} must be a non-negative multiple of 8")
        if sys.byteorder != "little":  # pragma: no cover - every supported host is little-endian
            raise RingError("LRBC rings need a little-endian host")
        self.offset = offset
        self.capacity = capacity
        self._mask = capacity - 1
        self._maxp = max_payload(capacity)

    def __init__(self, buf: Any, offset: int, capacity: int, *, writable: bool) -> None:
        self._geometry(offset, capacity)
        outer = memoryview(buf)
        mv = outer.cast("B") if outer.format != "B" or outer.ndim != 1 else outer
        end = offset + RING_HEADER + capacity
        if end > len(mv):
            raise RingError(
                f"ring at offset {offset} with capacity {capacity} ends at {end}, past the {len(mv)}-byte buffer"
            )
        if writable and mv.readonly:
            raise RingError(f"ring at offset {offset}: buffer is read-only")
        self._views = (outer, mv)
        self._pos = mv[offset : offset + RING_HEADER].cast("I")  # [0] write_pos, [1] read_pos
        self._data = mv[offset + RING_HEADER : end]

    @property
    def write_pos(self) -> int:
        """``write_pos`` as stored now."""
        return self._pos[0]

    @property
    def read_pos(self) -> int:
        """``read_pos`` as stored now."""
        return self._pos[1]

    @property
    def used(self) -> int:
        """Bytes between ``read_pos`` and ``write_pos`` now (above capacity only if corrupt)."""
        pos = self._pos
        return (pos[0] - pos[1]) & _M32

    def release(self) -> None:
        """Drop the views into the buffer, so an ``mmap`` under them can be closed. Idempotent."""
        self._data.release()
        self._pos.release()
        for mv in self._views:
            mv.release()

    def _where(self) -> str:
        return f"ring at offset {self.offset} (capacity {self.capacity})"


class _Bad(Exception):
    """Internal: the entry at ``rel`` bytes past the start position cannot be right."""

    def __init__(self, reason: str, rel: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.rel = rel


def _decode(data: memoryview, capacity: int, start: int, rel: int, avail: int) -> tuple[bytes, int]:
    """Copy out the entry ``rel`` bytes after position ``start``; return it and the next ``rel``.

    ``avail`` is how many bytes after ``start`` the producer has published
    (``rel < avail``, both multiples of 8). Raises :class:`_Bad` on any
    inconsistency; reads only inside ``data``.
    """
    idx = (start + rel) & (capacity - 1)
    length = _U32.unpack_from(data, idx)[0]
    skipped = marker_idx = 0
    if length == MARKER:
        skipped = capacity - idx
        if idx <= capacity >> 1:
            raise _Bad(f"wrap marker at index {idx}, where any entry fits (a marker can only follow the middle)", rel)
        if rel + skipped >= avail:
            raise _Bad(f"wrap marker at index {idx} is not followed by an entry before write_pos", rel)
        length = _U32.unpack_from(data, 0)[0]
        if length == MARKER:
            raise _Bad(f"wrap marker at index {idx} leads to another marker at index 0", rel)
        marker_idx, idx = idx, 0
    if length == 0:
        raise _Bad(f"entry length 0 at index {idx}", rel)
    if length > capacity // 2 - 8:
        raise _Bad(f"entry length {length} at index {idx} exceeds the largest payload {capacity // 2 - 8}", rel)
    size = (length + 11) & ~7
    if idx + size > capacity:
        raise _Bad(f"entry of {size} bytes at index {idx} runs past the end of the data area", rel)
    if rel + skipped + size > avail:
        raise _Bad(f"entry of {size} bytes at index {idx} runs past write_pos", rel)
    if skipped and size <= skipped:
        raise _Bad(f"wrap marker at index {marker_idx}, but the {size}-byte entry after it fits there", rel)
    return data[idx + 4 : idx + 4 + length].tobytes(), rel + skipped + size


def _limit(max_messages: int | None) -> int:
    if max_messages is None:
        return _HALF32  # more entries than any ring holds
    if max_messages < 0:
        raise ValueError(f"max_messages must be >= 0, got {max_messages}")
    return max_messages


class RingWriter(_Ring):
    """Producer side of a ring: owns ``write_pos``.

    Parameters
    ----------
    buf
        Writable buffer holding the ring (``mmap``, ``bytearray``, ``memoryview``).
    offset
        Byte offset of the ring's ``write_pos`` in ``buf`` (a multiple of 8).
    capacity
        Data bytes of the ring, a power of two.

    Raises
    ------
    RingError
        Bad capacity or offset, ring outside the buffer, read-only buffer.
    """

    def __init__(self, buf: Any, offset: int, capacity: int) -> None:
        super().__init__(buf, offset, capacity, writable=True)

    @property
    def free(self) -> int:
        """Bytes the producer may still add (wrap skips included), 0 when full or corrupt."""
        return max(0, self.capacity - 8 - self.used)

    def push(self, payload: bytes | bytearray | memoryview) -> None:
        """Append one entry, publishing it with a single store of ``write_pos``.

        Parameters
        ----------
        payload
            The message, 1 .. ``capacity // 2 - 8`` bytes (any C-contiguous buffer).

        Raises
        ------
        ValueError
            ``payload`` is empty.
        MessageTooLarge
            ``payload`` is larger than ``capacity // 2 - 8`` bytes.
        RingFull
            The entry does not fit now; nothing was written.
        RingCorrupt
            The consumer's ``read_pos`` cannot be right; nothing was written.
        """
        if not isinstance(payload, bytes | bytearray):
            payload = memoryview(payload).cast("B")
        n = len(payload)
        if n == 0:
            raise ValueError("a ring entry needs at least one payload byte")
        if n > self._maxp:
            raise MessageTooLarge(f"payload of {n} bytes exceeds the ring's limit of {self._maxp} bytes")
        pos = self._pos
        w = pos[0]
        r = pos[1]
        used = (w - r) & _M32
        if used > self.capacity or (w | r) & 7:
            raise RingCorrupt(f"{self._where()}: write_pos {w}, read_pos {r} cannot be right; nothing written")
        cap = self.capacity
        idx = w & self._mask
        size = (n + 11) & ~7
        tail = cap - idx
        need = size if size <= tail else tail + size
        if used + need > cap - 8:
            raise RingFull(
                f"ring full: {self._where()} needs {need} bytes for a {n}-byte payload, {max(0, cap - 8 - used)} free"
            )
        data = self._data
        if size > tail:
            _U32.pack_into(data, idx, MARKER)
            idx = 0
        _U32.pack_into(data, idx, n)
        end = idx + 4 + n
        data[idx + 4 : end] = payload
        if end < idx + size:
            data[end : idx + size] = _ZEROS[: idx + size - end]
        pos[0] = (w + need) & _M32


class RingReader(_Ring):
    """Consumer side of a ring: owns ``read_pos``.

    Parameters
    ----------
    buf
        Writable buffer holding the ring (the consumer stores ``read_pos``).
    offset
        Byte offset of the ring's ``write_pos`` in ``buf`` (a multiple of 8).
    capacity
        Data bytes of the ring, a power of two.

    Raises
    ------
    RingError
        Bad capacity or offset, ring outside the buffer, read-only buffer.
    """

    def __init__(self, buf: Any, offset: int, capacity: int) -> None:
        super().__init__(buf, offset, capacity, writable=True)

    def _resync(self, w: int, reason: str) -> RingCorrupt:
        self._pos[1] = w
        return RingCorrupt(f"{self._where()}: {reason}; read_pos resynchronised to write_pos {w}")

    def _window(self) -> tuple[int, int, int]:
        """``(write_pos, read_pos, used)`` after the position checks."""
        pos = self._pos
        w = pos[0]
        r = pos[1]
        used = (w - r) & _M32
        if used > self.capacity:
            raise self._resync(w, f"used bytes {used} (write_pos {w}, read_pos {r}) exceed the capacity")
        if (w | r) & 7:
            raise self._resync(w, f"write_pos {w} or read_pos {r} is not a multiple of 8")
        return w, r, used

    def pop(self) -> bytes | None:
        """Take the oldest message, or ``None`` when the ring is empty.

        Raises
        ------
        RingCorrupt
            The ring cannot be right; ``read_pos`` was set to ``write_pos``
            first, so the next call starts clean.
        """
        pos = self._pos
        if pos[0] == pos[1]:
            return None
        w, r, used = self._window()
        try:
            payload, step = _decode(self._data, self.capacity, r, 0, used)
        except _Bad as bad:
            raise self._resync(w, f"at read_pos {(r + bad.rel) & _M32}: {bad.reason}") from None
        pos[1] = (r + step) & _M32
        return payload

    def drain(self, max_messages: int | None = None) -> list[bytes]:
        """Take up to ``max_messages`` messages (all published ones by default), oldest first.

        ``read_pos`` is stored once, after the copies. If a corrupt entry
        follows good ones, the good ones are returned and ``read_pos`` stops
        at the bad entry, so the next call raises :class:`RingCorrupt`.

        Raises
        ------
        RingCorrupt
            The first entry (or the positions) cannot be right; ``read_pos``
            was set to ``write_pos`` first.
        ValueError
            ``max_messages`` is negative.
        """
        limit = _limit(max_messages)
        pos = self._pos
        out: list[bytes] = []
        if pos[0] == pos[1] or limit == 0:
            return out
        w, r, used = self._window()
        data, cap = self._data, self.capacity
        rel = 0
        while rel < used and len(out) < limit:
            try:
                payload, rel = _decode(data, cap, r, rel, used)
            except _Bad as bad:
                if out:
                    break
                raise self._resync(w, f"at read_pos {(r + bad.rel) & _M32}: {bad.reason}") from None
            out.append(payload)
        pos[1] = (r + rel) & _M32
        return out


@dataclass(frozen=True)
class TapResult:
    """What one :meth:`RingTap.poll` found.

    Attributes
    ----------
    messages : list of bytes
        Payloads, oldest first, each a private copy, none of them possibly
        overwritten.
    missed_bytes : int
        Ring bytes skipped without decoding: overwritten by a producer that
        lapped the tap, copied but not provably intact (they precede
        ``messages``), or from a corrupt entry up to ``write_pos`` (after
        ``messages``).
    corrupt : str or None
        Why the tap resynchronised, when the ring (not a lap) was at fault.
    """

    messages: list[bytes] = field(default_factory=list)
    missed_bytes: int = 0
    corrupt: str | None = None


def _snapshot(src: memoryview, dst: memoryview, idx: int, n: int) -> None:
    """Copy ``n`` ring bytes starting at data index ``idx`` into ``dst`` at the same indices (wrapping)."""
    cap = len(src)
    end = idx + n
    if end <= cap:
        dst[idx:end] = src[idx:end]
    else:
        dst[idx:cap] = src[idx:cap]
        dst[: end - cap] = src[: end - cap]


class RingSource(Protocol):
    """Where a :class:`RingTap` reads a ring from when it is not a buffer it may load from directly.

    A monitor reads a segment through ``pread`` on its descriptor rather than
    through the mapping (a load from a mapping of a file that shrank is a
    ``SIGBUS``); the transport layer implements this over that descriptor.
    Each call reads the segment *now*, so the tap keeps its order of loads.
    Either method may raise (e.g. the segment shrank); the tap lets it through.
    """

    def load(self, word: int) -> int:
        """The ring's ``write_pos`` (``word`` 0) or ``read_pos`` (``word`` 1), loaded now."""
        ...

    def fill(self, dst: memoryview, idx: int, n: int) -> None:
        """Copy ``n`` data bytes from data index ``idx`` (wrapping at the capacity) into ``dst`` at the same indices."""
        ...


class RingTap(_Ring):
    """Passive reader of a ring it does not own; never writes a byte.

    Parameters
    ----------
    buf
        Buffer holding the ring; read-only is fine (``mmap`` with
        ``ACCESS_READ``, ``memoryview(bytes)``).
    offset
        Byte offset of the ring's ``write_pos`` in ``buf`` (a multiple of 8).
    capacity
        Data bytes of the ring, a power of two.
    start
        Initial cursor. Default: the current ``write_pos`` (only new traffic).
        The ring's ``read_pos`` also shows what the consumer has not taken yet.
    source
        Read the positions and data through this :class:`RingSource` instead
        of loading them from ``buf`` (which is then ignored and may be ``None``).

    Raises
    ------
    RingError
        Bad capacity or offset, ring outside the buffer.
    """

    def __init__(
        self, buf: Any, offset: int, capacity: int, start: int | None = None, *, source: RingSource | None = None
    ) -> None:
        if source is None:
            super().__init__(buf, offset, capacity, writable=False)
            pos, data = self._pos, self._data
            self._load: Callable[[int], int] = pos.__getitem__

            def fill(dst: memoryview, idx: int, n: int) -> None:
                _snapshot(data, dst, idx, n)

            self._fill: Callable[[memoryview, int, int], None] = fill
        else:
            self._geometry(offset, capacity)  # no views: positions and data come from the source
            self._load = source.load
            self._fill = source.fill
        self._source = source
        self._cursor = self._load(0) if start is None else start & _M32
        self._copy: memoryview | None = None  # private image of the data area, made on first use

    @property
    def cursor(self) -> int:
        """Position of the next entry the tap will decode."""
        return self._cursor

    @property
    def write_pos(self) -> int:
        """``write_pos`` as stored now."""
        return self._load(0)

    @property
    def read_pos(self) -> int:
        """``read_pos`` as stored now."""
        return self._load(1)

    @property
    def used(self) -> int:
        """Bytes between ``read_pos`` and ``write_pos`` now (above capacity only if corrupt)."""
        return (self._load(0) - self._load(1)) & _M32

    def release(self) -> None:
        """Drop the views into the buffer (none with a source). Idempotent."""
        if self._source is None:
            super().release()

    def poll(self, max_messages: int | None = None) -> TapResult:
        """Return what was published since the last poll (at most ``max_messages`` entries).

        Never raises on ring contents and never waits: entries the producer
        cannot have overwritten are returned now, bytes it could have
        overwritten are counted in ``missed_bytes`` (see the module
        docstring), laps and corruption are reported in the result.

        Raises
        ------
        ValueError
            ``max_messages`` is negative.
        """
        limit = _limit(max_messages)
        if limit == 0:
            return TapResult()
        load = self._load
        c = self._cursor
        w = load(0)
        if w == c:
            return TapResult()
        avail = (w - c) & _M32
        cap = self.capacity
        if avail > cap or (w | c) & 7:
            return self._jump(c, w)
        copy = self._copy
        if copy is None:
            copy = self._copy = memoryview(bytearray(cap))
        self._fill(copy, c & self._mask, avail)
        r2 = load(1)
        w2 = load(0)
        ahead = (w2 - c) & _M32
        if ahead < avail or ahead > _HALF32 or w2 & 7:
            return self._jump(c, w2)
        skip = self._unproven(c, w2, r2, avail)
        if skip == avail and ahead > cap:
            return self._jump(c, w2)  # lapped, and nothing in the copy is provably intact
        out: list[bytes] = []
        rel = skip
        while rel < avail and len(out) < limit:
            try:
                payload, rel = _decode(copy, cap, c, rel, avail)
            except _Bad as bad:
                at = (c + bad.rel) & _M32
                self._cursor = w2
                return TapResult(
                    out,
                    skip + ((w2 - at) & _M32),
                    f"{self._where()}: at position {at}: {bad.reason}; tap resynchronised to write_pos {w2}",
                )
            out.append(payload)
        self._cursor = (c + rel) & _M32
        return TapResult(out, skip, None)

    def _unproven(self, c: int, w2: int, r2: int, avail: int) -> int:
        """Bytes after ``c`` to skip: up to the first entry boundary from which every copied byte is intact."""
        cap = self.capacity
        half = cap >> 1
        tail = cap - (w2 & self._mask)
        reach = half if tail >= half else tail + half  # the largest in-flight push, wrap skip included
        if ((w2 - c) & _M32) + reach <= cap:
            return 0  # no push that may be in flight at w2 reaches back to c
        if (w2 - r2) & _M32 > cap or r2 & 7:
            return avail  # read_pos cannot be right: write_pos is the next boundary known
        rb = (r2 - c) & _M32
        if rb > _HALF32:
            return 0  # the consumer is behind the cursor: nothing copied lies below r2
        return min(rb, avail)

    def _jump(self, c: int, w: int) -> TapResult:
        """Resynchronise to ``w`` when the distance from the cursor cannot be decoded."""
        self._cursor = w
        d = (w - c) & _M32
        if w & 7:
            return TapResult([], 0, f"{self._where()}: write_pos {w} is not a multiple of 8; tap resynchronised")
        if c & 7:
            return TapResult(
                [], d if d <= _HALF32 else 0, f"{self._where()}: tap cursor {c} is not a multiple of 8; resynchronised"
            )
        if self.capacity < d <= _HALF32:
            return TapResult([], d, None)  # lapped: the producer overwrote what the tap had not read
        if d > _HALF32:
            return TapResult([], 0, f"{self._where()}: write_pos {w} is behind the tap cursor {c}; tap resynchronised")
        return TapResult([], 0, f"{self._where()}: write_pos moved backwards to {w} during a read; tap resynchronised")
