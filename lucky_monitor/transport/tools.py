"""The tools channel: the one place a monitor writes to a segment.

Theory of operation
-------------------
The main command rings have exactly one producer each (engine, trainer), so a
monitor must never write into them. An engine that supports monitors exports
a *tools region* at ``tools_offset`` (a multiple of 65536, the Windows
allocation granularity, so it can be mapped on its own)::

    +0    u32 owner_pid     0 = free; the holder's pid otherwise
    +4    reserved (60 B)
    +64   tools c2s ring    monitor -> engine (write_pos u32, read_pos u32, data)
    +64+8+tools_ring_size   tools s2c ring, engine -> monitor

:meth:`ToolsChannel.claim` maps *only this region* writable (a second mapping
next to the monitor's read-only one) and takes ownership with a 32-bit
compare-and-swap on ``owner_pid``: ``0 -> pid`` or, if the holder's process
is dead, ``dead pid -> pid`` (a CAS from the value it observed, so two
monitors that both find the same dead holder cannot both win). The CAS is a
real locked ``cmpxchg`` from the ``atomics`` package, the same instruction as
the engine's ``Interlocked.CompareExchange``. A monitor that loses gets
:class:`~lucky_monitor.protocol.errors.ToolsChannelBusy` ("tools channel held
by pid N") and carries on read-only. :meth:`ToolsChannel.release` swaps
``pid -> 0`` only if the word still holds its pid.

The monitor is then the single producer of the tools c2s ring and the single
consumer of the tools s2c ring, which keeps both rings SPSC.
"""

from __future__ import annotations

import contextlib
import os
import struct
from typing import Any

import atomics

from ..protocol.errors import SegmentGone, ToolsChannelBusy, ToolsChannelUnavailable
from ..protocol.header import RING_HEADER, TOOLS_RING_BASE, tools_region_size, validate
from ..protocol.ring import RingReader, RingWriter
from .discovery import pid_alive
from .shm import Segment, _map, _open, check_owner

__all__ = ["ToolsChannel", "tools_owner"]

_CLAIM_TRIES = 64


def tools_owner(segment: Segment) -> int:
    """The pid that holds the tools channel of ``segment``, 0 if free (read-only look).

    Raises
    ------
    SegmentGone
        The file shrank below the owner word.
    ToolsChannelUnavailable
        The engine exports no tools channel.
    """
    off = segment.header.tools_offset
    if not off:
        raise ToolsChannelUnavailable(f"{segment.name}: the engine exports no tools channel (tools_offset = 0)")
    return int(struct.unpack("<I", segment.pread(off, 4))[0])  # through the fd: never a SIGBUS


class ToolsChannel:
    """A claimed tools channel: the writable tools mapping and its two rings.

    Obtain one with :meth:`claim`; give it back with :meth:`release` (or use
    it as a context manager). Releasing at exit is the caller's decision.

    Attributes
    ----------
    name : str
        Segment name.
    pid : int
        The pid written into ``owner_pid``.
    ring_size : int
        Data capacity of each tools ring.
    buf : memoryview
        The writable tools region (``tools_region_size`` bytes).
    """

    pid: int  # set by claim()

    def __init__(self) -> None:  # use claim()
        self._fd: int | None = None  # kept open: the file's size is checked before every touch
        self._need = 0  # bytes the file must have for the tools mapping to be backed
        self._mm: Any = None
        self._claimed = False
        self._own_segment: Segment | None = None
        self._c2s: RingWriter | None = None
        self._s2c: RingReader | None = None

    # ------------------------------------------------------------ claim
    @classmethod
    def claim(
        cls, name_or_segment: str | Segment, *, pid: int | None = None, allow_other_user: bool | None = None
    ) -> ToolsChannel:
        """Map the tools region writable and take ownership of it.

        Parameters
        ----------
        name_or_segment
            A segment name (attached read-only just for the header, closed on
            release) or an attached :class:`Segment`.
        pid
            The pid to register; default ``os.getpid()``.
        allow_other_user
            Claim the channel of a segment owned by another user (it writes
            into that user's engine). ``None``: as the given :class:`Segment`
            was attached; refuse for a name.

        Raises
        ------
        ToolsChannelUnavailable
            ``tools_offset`` is 0.
        ToolsChannelBusy
            A live process (possibly this one, through another channel
            object) holds the channel.
        ForeignSegment
            The segment is owned by another user and that is not allowed.
        SegmentGone
            The segment was replaced between attach and claim.
        SegmentNotFound, TransportError, HeaderError
            As :meth:`Segment.attach`.
        """
        me = os.getpid() if pid is None else int(pid)
        if not 0 < me <= 0xFFFFFFFF:
            raise ValueError(f"pid {me} does not fit the u32 owner word")
        chan = cls()
        if isinstance(name_or_segment, Segment):
            seg = name_or_segment
            allow = seg.allow_other_user if allow_other_user is None else allow_other_user
        else:
            allow = bool(allow_other_user)
            seg = Segment.attach(name_or_segment, allow_other_user=allow)
            chan._own_segment = seg
        try:
            chan._map(seg, allow)
            chan.pid = me
            chan._take(me)
        except BaseException:
            chan._unmap()
            raise
        return chan

    def _map(self, seg: Segment, allow_other_user: bool) -> None:
        h = seg.header
        self.name = seg.name
        self.header = h
        if not h.tools_offset:
            raise ToolsChannelUnavailable(f"{seg.name}: the engine exports no tools channel (tools_offset = 0)")
        opened = _open(seg.name, write=True)
        try:
            check_owner(seg.name, opened.uid, allow_other_user=allow_other_user)
            now = validate(opened.header_bytes, mapped_size=opened.size)
            if now.session_id != h.session_id or (now.tools_offset, now.tools_ring_size) != (
                h.tools_offset,
                h.tools_ring_size,
            ):
                raise SegmentGone(f"{seg.name}: segment recreated since attach")
            self.ring_size = h.tools_ring_size
            self._mm = _map(seg.name, opened, tools_region_size(h.tools_ring_size), write=True, offset=h.tools_offset)
            self._need = h.tools_offset + tools_region_size(h.tools_ring_size)
            if opened.fd is not None:
                self._fd, opened.fd = opened.fd, None
        finally:
            if opened.fd is not None:
                os.close(opened.fd)
        self.buf = memoryview(self._mm)

    def _owner_view(self) -> Any:
        return atomics.atomicview(buffer=self.buf[0:4], atype=atomics.UINT)

    def _take(self, me: int) -> None:
        with self._owner_view() as owner:
            seen = owner.load()
            for _ in range(_CLAIM_TRIES):
                if seen == me or (seen != 0 and pid_alive(seen)):
                    raise ToolsChannelBusy(seen)
                res = owner.cmpxchg_strong(expected=seen, desired=me)
                if res.success:
                    self._claimed = True
                    return
                seen = res.expected
        raise ToolsChannelBusy(seen)

    # ------------------------------------------------------------ state
    def intact(self) -> bool:
        """Whether the file behind the tools mapping still backs all of it (one ``fstat``).

        Touching a mapping past the end of a file that shrank is a SIGBUS,
        which Python cannot catch: check this right before every access, and
        once it is ``False`` only :meth:`abandon` the channel.
        """
        if self._mm is None:
            return False
        if self._fd is None:
            return True  # no file to check (Windows): a named mapping cannot shrink
        try:
            return os.fstat(self._fd).st_size >= self._need
        except OSError:
            return False

    @property
    def owner_pid(self) -> int:
        """Current value of the owner word (0 once released)."""
        if self._mm is None:
            return 0
        with self._owner_view() as owner:
            return owner.load()

    @property
    def claimed(self) -> bool:
        """True between a successful :meth:`claim` and :meth:`release`."""
        return self._claimed

    @property
    def c2s(self) -> RingWriter:
        """``RingWriter`` over the tools c2s ring (monitor -> engine)."""
        if self._c2s is None:
            self._require()
            self._c2s = RingWriter(self.buf, TOOLS_RING_BASE, self.ring_size)
        return self._c2s

    @property
    def s2c(self) -> RingReader:
        """``RingReader`` over the tools s2c ring (engine -> monitor)."""
        if self._s2c is None:
            self._require()
            self._s2c = RingReader(self.buf, TOOLS_RING_BASE + RING_HEADER + self.ring_size, self.ring_size)
        return self._s2c

    def _require(self) -> None:
        if not self._claimed:
            raise ToolsChannelUnavailable("tools channel released")

    # ------------------------------------------------------------ release
    def release(self) -> None:
        """Give the channel back (owner ``pid -> 0`` if still ours) and unmap. Idempotent.

        When the file no longer backs the mapping (the segment shrank) nothing
        is written: the owner word is gone with the file anyway.
        """
        if self._claimed and self._mm is not None and self.intact():
            self._claimed = False
            with contextlib.suppress(ValueError, BufferError), self._owner_view() as owner:
                owner.cmpxchg_strong(expected=self.pid, desired=0)
        self._claimed = False
        self._unmap()

    def abandon(self) -> None:
        """Unmap without touching the mapping (its file shrank or is gone). Idempotent."""
        self._claimed = False
        self._unmap()

    def _unmap(self) -> None:
        for ring in (self._c2s, self._s2c):
            if ring is not None:
                with contextlib.suppress(BufferError):
                    ring.release()
        self._c2s = self._s2c = None
        buf = getattr(self, "buf", None)
        if buf is not None:
            with contextlib.suppress(BufferError):
                buf.release()
        mm, self._mm = self._mm, None
        if mm is not None:
            with contextlib.suppress(BufferError):  # ring views still exported: unmapped when they die
                mm.close()
        seg, self._own_segment = self._own_segment, None
        if seg is not None:
            seg.close()
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> ToolsChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = f"held by pid {self.pid}" if self._claimed else "released"
        return f"<ToolsChannel {getattr(self, 'name', '?')!r} {state}>"
