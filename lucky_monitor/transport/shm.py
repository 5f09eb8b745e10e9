"""Open and map LRBC segments: read-only attach, engine-side create, trainer attach.

Theory of operation
-------------------
A segment is one shared-memory object named ``LuckyEngine_<pid>`` (or any
name matching ``[A-Za-z0-9_.-]{1,200}``). On Linux it is the file
``/dev/shm/<name>``; on macOS (and other POSIX systems without ``/dev/shm``)
a POSIX shared-memory object opened with ``shm_open``; on Windows a named
file mapping. Only this module creates mappings of a segment (the tools
channel in :mod:`.tools` maps its own region through the helpers here).

*Monitors* attach read-only (:class:`Segment`): ``open(O_RDONLY)`` plus
``mmap(ACCESS_READ)``, so no byte of the segment can be written through any
view, and nothing is ever unlinked on exit. (``multiprocessing.shared_memory``
is not used: it cannot map read-only and its resource tracker unlinks the
engine's segment when a reader exits.)

Attach order, chosen so a hostile or half-written file can never crash the
reader:

1. ``fstat`` the object; refuse anything that is not a regular file/object or
   is smaller than the 4096-byte header (``TruncatedSegment``).
2. Copy the header out (``pread`` where the object is a file, else a copy from
   a header-sized mapping) and :func:`~lucky_monitor.protocol.header.validate`
   it against the size just measured, before any view exists.
3. Map exactly the validated size and build the numpy views and the cached
   counter casts.

The hot counters live in the header page. After attach the file can still be
truncated, unlinked or replaced by another engine under the same name; touching
a page past the end of a truncated file raises ``SIGBUS`` and kills the
process. :meth:`Segment.still_valid` therefore re-checks the file (path still
names the same inode, size still covers ``segment_size``, ``session_id``
unchanged) without touching any region, and the monitor calls it on every poll
before it reads a region. An engine never shrinks a live segment, so the
remaining window between that check and the copy only matters for a hostile
writer.

*Engines* create segments with :meth:`EngineSegment.create`. On Linux the file
is filled under a hidden temporary name and then linked to its real name, so a
reader never sees a half-initialised header; elsewhere the magic is written
last. :meth:`EngineSegment.unlink` announces ``engine_state = 3`` (closing)
before removing the name.

Platform notes: the Linux code path is the one exercised by the test suite.
The macOS (``_posixshmem.shm_open``) and Windows (named file mapping through
``mmap`` with ``tagname``) paths implement the same interface but cannot be
tested on Linux. On Windows a name is never unlinked while any process holds a
handle, so a restarted engine re-opens the same mapping and the change is seen
only through ``session_id``.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import mmap
import os
import re
import secrets
import stat
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Self

import atomics
import numpy as np

from ..protocol import header as hdr
from ..protocol.enums import EngineState
from ..protocol.errors import (
    ForeignSegment,
    InvalidSegmentName,
    SegmentExists,
    SegmentGone,
    SegmentNotFound,
    SegmentTooLarge,
    TransportError,
    TruncatedSegment,
)
from ..protocol.header import HEADER_SIZE, LIVE_FIELDS, Header
from ..protocol.ring import init_ring

__all__ = [
    "MAX_NAME_CHARS",
    "MAX_SEGMENT_BYTES",
    "EngineSegment",
    "InvalidSegmentName",
    "Live",
    "ReadPlan",
    "RingPositions",
    "Segment",
    "SegmentExists",
    "SegmentTooLarge",
    "TrainerSegment",
    "check_owner",
    "check_segment_size",
    "peek_header",
    "platform_kind",
    "segment_owner",
    "shm_free_bytes",
    "shm_path",
    "validate_name",
]

NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,200}")
#: The longest name an engine may give its segment (LAYOUT §1.1, C2: macOS' 31-byte POSIX limit with the
#: leading "/"). Readers accept up to 200 characters (whatever a file system holds); engines stay within 30.
MAX_NAME_CHARS = 30
SHM_DIR = "/dev/shm"  # noqa: S108 - the POSIX shared-memory directory, not a temp dir
#: The largest segment :meth:`EngineSegment.create` makes: 4 GiB. Shared memory is RAM, and the
#: reference engine keeps a private copy of the image region besides; a configuration past this
#: is refused before anything is allocated or created (README, "Exit codes": 2).
MAX_SEGMENT_BYTES = 4 << 30


@functools.cache
def platform_kind() -> str:
    """Which shared-memory flavour this platform uses (decided once per process).

    Returns
    -------
    str
        ``"dir"`` (a directory of files, ``/dev/shm``), ``"posix"``
        (``shm_open`` without a listable directory, e.g. macOS) or ``"win32"``.
    """
    if sys.platform == "win32":
        return "win32"
    if sys.platform.startswith("linux") and os.path.isdir(SHM_DIR):
        return "dir"
    return "posix"


def validate_name(name: object) -> str:
    """Return ``name`` if it is a valid segment name, else raise :class:`InvalidSegmentName`.

    The message says what is wrong with the name: its type, its length, the
    first character outside ``A-Z a-z 0-9 _ . -``, or that it is ``.``/``..``.
    """
    shown = repr(name)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    if not isinstance(name, str):
        problem = f"a segment name is a string, not {type(name).__name__}"
    elif not name:
        problem = "it is empty"
    elif len(name) > 200:
        problem = f"{len(name)} characters, at most 200"
    elif name in (".", ".."):
        problem = f"{name!r} names a directory, not a segment"
    elif not NAME_RE.fullmatch(name):
        bad = next(c for c in name if not NAME_RE.fullmatch(c))
        problem = f"{bad!r} is not allowed; use A-Z a-z 0-9 _ . -"
    else:
        return name
    raise InvalidSegmentName(f"invalid segment name {shown}: {problem}")


def _size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def shm_free_bytes() -> int | None:
    """Bytes an unprivileged process may still allocate in the shared-memory filesystem.

    Returns
    -------
    int or None
        The free space of ``/dev/shm`` on Linux; ``None`` where it cannot be
        known (macOS and Windows keep shared memory elsewhere).
    """
    if platform_kind() != "dir":
        return None
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def check_segment_size(size: int, *, shrink: str = "", limit: int = MAX_SEGMENT_BYTES) -> None:
    """Refuse a segment of ``size`` bytes over ``limit`` or over the free shared memory.

    Call it before allocating anything for the segment: nothing is created here.

    Parameters
    ----------
    size
        The whole segment in bytes (``Header.segment_size`` of the plan).
    shrink
        What the caller can change to make it smaller, appended to the message
        (e.g. ``"--envs, --image, --obs or --act"``).
    limit
        The limit; :data:`MAX_SEGMENT_BYTES` unless a caller knows better.

    Raises
    ------
    SegmentTooLarge
        ``size`` is over ``limit`` or over :func:`shm_free_bytes`.
    """
    tail = f"; make it smaller with {shrink}" if shrink else ""
    if size > limit:
        raise SegmentTooLarge(
            f"the segment would be {_size_text(size)} ({size} bytes), over the {_size_text(limit)} limit{tail}"
        )
    free = shm_free_bytes()
    if free is not None and size > free:
        raise SegmentTooLarge(
            f"the segment would be {_size_text(size)} ({size} bytes), more than the {_size_text(free)} "
            f"free in {SHM_DIR}{tail}"
        )


def shm_path(name: str) -> str:
    """The OS-level name of segment ``name``.

    Parameters
    ----------
    name
        Segment name, e.g. ``"LuckyEngine_1234"``.

    Returns
    -------
    str
        ``/dev/shm/<name>`` on Linux, ``/<name>`` (the ``shm_open`` name) on
        other POSIX systems, ``<name>`` (the file-mapping name) on Windows.

    Raises
    ------
    InvalidSegmentName
        The name contains a character outside ``[A-Za-z0-9_.-]``, is empty,
        longer than 200 characters, or is ``.``/``..``.
    """
    validate_name(name)
    kind = platform_kind()
    if kind == "dir":
        return os.path.join(SHM_DIR, name)
    if kind == "posix":
        return "/" + name
    return name


# --------------------------------------------------------------------------- OS layer


def _os_error(exc: OSError, name: str, what: str) -> TransportError:
    """Translate an ``OSError`` from opening/mapping ``name`` into a typed error."""
    if isinstance(exc, FileNotFoundError):
        return SegmentNotFound(f"no segment named {name!r}")
    if isinstance(exc, PermissionError):
        return TransportError(f"{what} {name!r}: permission denied")
    if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link planted under the name
        return TransportError(f"{what} {name!r}: it is a symbolic link, and segments are never opened through one")
    return TransportError(f"{what} {name!r}: {exc.strerror or exc}")


@dataclass
class _Opened:
    """A freshly opened segment object (nothing mapped yet except on Windows)."""

    fd: int | None
    size: int
    ino: int
    dev: int
    mtime: float
    header_bytes: bytes
    uid: int | None = None  # the object's owner; None where the platform has none (Windows)
    mode: int | None = None  # the object's permission bits (0o600 as LAYOUT.md §2.1 creates it); None on Windows


def check_owner(name: str, uid: int | None, *, allow_other_user: bool) -> None:
    """Refuse a segment owned by another user unless ``allow_other_user``.

    Another user's segment can feed this process anything, and the tools
    channel writes into it; the monitor attaches to it only when asked to.

    Raises
    ------
    ForeignSegment
        ``uid`` is not this process's effective uid and ``allow_other_user`` is false.
    """
    if uid is None or allow_other_user or not hasattr(os, "geteuid"):
        return
    me = os.geteuid()
    if uid != me:
        raise ForeignSegment(name, uid, me)


def _fstat_regular(fd: int, name: str) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise TransportError(f"{name!r} is not a shared-memory segment (not a regular file)")
    return st


def _read_header_fd(fd: int, size: int) -> bytes:
    """Copy the header out of ``fd``; never touches a mapping, so never SIGBUS."""
    want = min(size, HEADER_SIZE)
    if platform_kind() == "dir":
        data = os.pread(fd, want, 0)
    else:  # POSIX shm objects cannot be read(2) on macOS: copy through a mapping
        with mmap.mmap(fd, want, access=mmap.ACCESS_READ) as mm:
            data = bytes(mm[:want])
    return data


def _open_posix(name: str, *, write: bool) -> _Opened:
    flags = (os.O_RDWR if write else os.O_RDONLY) | getattr(os, "O_CLOEXEC", 0)
    kind = platform_kind()
    try:
        if kind == "dir":
            # O_NONBLOCK: a FIFO planted under the name must not hang us.
            fd = os.open(shm_path(name), flags | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        else:
            import _posixshmem  # type: ignore[import-not-found]

            fd = _posixshmem.shm_open(shm_path(name), flags, mode=0o600)
    except OSError as exc:
        raise _os_error(exc, name, "cannot open segment") from None
    try:
        st = _fstat_regular(fd, name)
        if st.st_size < HEADER_SIZE:
            raise TruncatedSegment(
                "segment_size", f"segment is {st.st_size} bytes, smaller than the {HEADER_SIZE}-byte header"
            )
        data = _read_header_fd(fd, st.st_size)
        if len(data) < HEADER_SIZE:  # shrank between fstat and read
            raise TruncatedSegment("segment_size", f"only {len(data)} header bytes could be read")
        return _Opened(fd, st.st_size, st.st_ino, st.st_dev, st.st_mtime, data, st.st_uid, st.st_mode & 0o7777)
    except OSError as exc:
        os.close(fd)
        raise _os_error(exc, name, "cannot read segment") from None
    except BaseException:
        os.close(fd)
        raise


# Windows -------------------------------------------------------------------


def _win_mapping_size(name: str, *, write: bool) -> int:
    """Size of the existing named mapping ``name`` (page-rounded); raise if absent.

    Uses ``OpenFileMappingW`` so that a missing name is reported instead of
    being silently created by ``mmap(-1, ..., tagname=name)``.
    """
    import ctypes
    from ctypes import wintypes

    k32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    k32.OpenFileMappingW.restype = wintypes.HANDLE
    k32.OpenFileMappingW.argtypes = [wintypes.DWORD, wintypes.BOOL, wintypes.LPCWSTR]
    k32.MapViewOfFile.restype = ctypes.c_void_p
    k32.MapViewOfFile.argtypes = [wintypes.HANDLE, wintypes.DWORD, wintypes.DWORD, wintypes.DWORD, ctypes.c_size_t]
    k32.UnmapViewOfFile.argtypes = [ctypes.c_void_p]
    k32.CloseHandle.argtypes = [wintypes.HANDLE]

    class MBI(ctypes.Structure):
        _fields_ = [
            ("BaseAddress", ctypes.c_void_p),
            ("AllocationBase", ctypes.c_void_p),
            ("AllocationProtect", wintypes.DWORD),
            ("PartitionId", wintypes.WORD),
            ("RegionSize", ctypes.c_size_t),
            ("State", wintypes.DWORD),
            ("Protect", wintypes.DWORD),
            ("Type", wintypes.DWORD),
        ]

    k32.VirtualQuery.argtypes = [ctypes.c_void_p, ctypes.POINTER(MBI), ctypes.c_size_t]
    k32.VirtualQuery.restype = ctypes.c_size_t
    file_map_read, file_map_write = 0x0004, 0x0002
    access = file_map_read | (file_map_write if write else 0)
    handle = k32.OpenFileMappingW(access, False, name)
    if not handle:
        err = ctypes.get_last_error()  # type: ignore[attr-defined]
        if err == 2:  # ERROR_FILE_NOT_FOUND
            raise SegmentNotFound(f"no segment named {name!r}")
        if err == 5:  # ERROR_ACCESS_DENIED
            raise TransportError(f"cannot open segment {name!r}: permission denied")
        raise TransportError(f"cannot open segment {name!r}: Windows error {err}")
    try:
        addr = k32.MapViewOfFile(handle, file_map_read, 0, 0, 0)
        if not addr:
            raise TransportError(f"cannot map segment {name!r}: Windows error {ctypes.get_last_error()}")  # type: ignore[attr-defined]
        try:
            info = MBI()
            if not k32.VirtualQuery(addr, ctypes.byref(info), ctypes.sizeof(info)):
                raise TransportError(f"cannot size segment {name!r}")
            return int(info.RegionSize)
        finally:
            k32.UnmapViewOfFile(addr)
    finally:
        k32.CloseHandle(handle)


def _open_win(name: str, *, write: bool) -> _Opened:
    size = _win_mapping_size(name, write=write)
    if size < HEADER_SIZE:
        raise TruncatedSegment("segment_size", f"segment is {size} bytes, smaller than the {HEADER_SIZE}-byte header")
    try:
        with mmap.mmap(-1, HEADER_SIZE, tagname=name, access=mmap.ACCESS_READ) as mm:  # type: ignore[call-arg]
            data = bytes(mm[:HEADER_SIZE])
    except OSError as exc:
        raise _os_error(exc, name, "cannot map segment") from None
    return _Opened(None, size, 0, 0, 0.0, data)


def _open(name: str, *, write: bool = False) -> _Opened:
    validate_name(name)
    if platform_kind() == "win32":
        return _open_win(name, write=write)
    return _open_posix(name, write=write)


def _map(name: str, opened: _Opened, length: int, *, write: bool, offset: int = 0) -> mmap.mmap:
    """Map ``length`` bytes of an opened segment starting at ``offset``."""
    access = mmap.ACCESS_WRITE if write else mmap.ACCESS_READ
    try:
        if opened.fd is None:
            return mmap.mmap(-1, length, tagname=name, access=access, offset=offset)  # type: ignore[call-arg]
        return mmap.mmap(opened.fd, length, access=access, offset=offset)
    except (OSError, ValueError) as exc:
        raise TransportError(f"cannot map segment {name!r}: {exc}") from None


def _opened(name: str) -> _Opened:
    """What opening segment ``name`` found (its descriptor closed again): for the one-look queries below."""
    opened = _open(name)
    if opened.fd is not None:
        os.close(opened.fd)
    return opened


def segment_owner(name: str) -> int | None:
    """The uid that owns segment ``name`` (``None`` where the platform has none).

    Raises
    ------
    InvalidSegmentName, SegmentNotFound, TransportError, TruncatedSegment
        As :meth:`Segment.attach` (the object is opened the same way).
    """
    return _opened(name).uid


def segment_mode(name: str) -> int | None:
    """The permission bits of segment ``name`` (``0o600`` as an engine creates it; ``None`` on Windows).

    Raises
    ------
    InvalidSegmentName, SegmentNotFound, TransportError, TruncatedSegment
        As :meth:`Segment.attach` (the object is opened the same way).
    """
    return _opened(name).mode


def peek_header(name: str) -> tuple[bytes, int, float]:
    """Copy a segment's header without validating it.

    Parameters
    ----------
    name
        Segment name.

    Returns
    -------
    header_bytes : bytes
        The first :data:`~lucky_monitor.protocol.header.HEADER_SIZE` bytes.
    size : int
        Size of the object in bytes (page-rounded on Windows).
    mtime : float
        Modification time (seconds since the epoch; 0.0 where unknown).

    Raises
    ------
    InvalidSegmentName, SegmentNotFound, TransportError, TruncatedSegment
    """
    opened = _opened(name)
    return opened.header_bytes, opened.size, opened.mtime


# ------------------------------------------------------------------------ views


Live = hdr.LiveFields  # all live header fields read at (nearly) one instant
_U32 = struct.Struct("<I")
#: ``pread`` works on the segment's descriptor (Linux ``/dev/shm`` files); elsewhere copies go through the mapping.
_PREAD_OK = platform_kind() == "dir" and hasattr(os, "preadv")


def _live_struct() -> struct.Struct:
    """One struct over the header's first bytes that unpacks exactly :data:`LIVE_FIELDS`, in order."""
    fields = tuple(sorted(((f, hdr.OFFSET[f], hdr.CODE[f]) for f in LIVE_FIELDS), key=lambda x: x[1]))
    if [f for f, _, _ in fields] != list(LIVE_FIELDS):  # pragma: no cover - a layout edit would trip this
        raise AssertionError("LIVE_FIELDS must be listed in offset order")
    return hdr.struct_for(fields)


_LIVE_STRUCT = _live_struct()
_LIVE_ONE = {f: (hdr.OFFSET[f], struct.Struct("<" + hdr.CODE[f])) for f in LIVE_FIELDS}
_SEQS_OFFSET = hdr.OFFSET["frame_seq"]
assert hdr.OFFSET["action_seq"] == _SEQS_OFFSET + 8 and hdr.CODE["frame_seq"] == hdr.CODE["action_seq"] == "Q"
_SEQS_STRUCT = struct.Struct("<QQ")
_IMAGE_SEQS_OFFSET = hdr.OFFSET["image_seq"]
assert hdr.OFFSET["image_frame_seq"] == _IMAGE_SEQS_OFFSET + 8
assert hdr.CODE["image_seq"] == hdr.CODE["image_frame_seq"] == "Q"
_SESSION_OFFSET = hdr.OFFSET["session_id"]
_SESSION_STRUCT = struct.Struct("<" + hdr.CODE["session_id"])
#: The non-live header fields (LAYOUT §2.1, C7): name, its struct (little-endian) and offset.
_FIXED_FIELDS = tuple(
    (name, struct.Struct("<" + hdr.CODE[name]), hdr.OFFSET[name]) for name in hdr.OFFSET if name not in LIVE_FIELDS
)
#: Fixed fields a change of which is told in hex, as the header check tells them.
_HEX_FIELDS = frozenset({"magic"})
# read_live's one copy carries the session_id too (Segment.session_changed reads it from there)
assert _SESSION_OFFSET + _SESSION_STRUCT.size <= _LIVE_STRUCT.size


class ReadPlan:
    """Regions of a segment to copy into arrays together, as few ``preadv`` calls as the layout allows.

    Regions closer than ``max_gap`` bytes share one call: the bytes between
    them land in a scratch buffer (``preadv`` fills a list of buffers from one
    contiguous range of the file). A poll that copies the rewards, dones,
    truncateds and observations makes one system call instead of four.

    Parameters
    ----------
    parts
        ``(offset, out)`` pairs: ``out`` a writable C-contiguous array filled
        from the segment at ``offset``. Regions must not overlap.
    max_gap
        Bytes of unwanted data one call may read between two regions.
    """

    def __init__(self, parts: Sequence[tuple[int, np.ndarray]], max_gap: int = 16384) -> None:
        todo = sorted(((int(o), a) for o, a in parts if a.nbytes), key=lambda p: p[0])
        for (o1, a1), (o2, _) in itertools.pairwise(todo):
            if o1 + a1.nbytes > o2:
                raise ValueError(f"regions at {o1} and {o2} overlap")
        gaps = [o2 - (o1 + a1.nbytes) for (o1, a1), (o2, _) in itertools.pairwise(todo)]
        self._sink = bytearray(max((g for g in gaps if g <= max_gap), default=0))
        sink = memoryview(self._sink)
        #: ``(start, buffers, total bytes, parts)`` per ``preadv`` call.
        self.groups: list[tuple[int, list[memoryview], int, list[tuple[int, np.ndarray]]]] = []
        for i, (offset, out) in enumerate(todo):
            view = memoryview(out).cast("B")  # type: ignore[arg-type]  # ndarray is a buffer
            if i and gaps[i - 1] <= max_gap:
                start, iov, total, members = self.groups[-1]
                if gaps[i - 1]:
                    iov.append(sink[: gaps[i - 1]])
                iov.append(view)
                members.append((offset, out))
                self.groups[-1] = (start, iov, total + gaps[i - 1] + out.nbytes, members)
            else:
                self.groups.append((offset, [view], out.nbytes, [(offset, out)]))


@dataclass(frozen=True)
class RingPositions:
    """The two position words of one command ring, as read just now."""

    name: str
    offset: int
    capacity: int
    write_pos: int
    read_pos: int

    @property
    def used(self) -> int:
        """Bytes between the consumer and the producer, modulo 2**32."""
        return (self.write_pos - self.read_pos) & 0xFFFFFFFF


class _Mapped:
    """Common state of a mapped segment: views, counters, close()."""

    name: str
    path: str
    header: Header
    size: int
    inode: int
    session_id: int
    buf: memoryview
    obs: np.ndarray
    act: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    truncateds: np.ndarray | None
    resets: np.ndarray
    images: np.ndarray | None
    #: attached with ``allow_other_user`` (a tools claim through this segment inherits it)
    allow_other_user: bool = False
    #: the object's owner at attach (``None`` where the platform has none)
    owner_uid: int | None = None

    def _setup(self, name: str, opened: _Opened, h: Header, mm: mmap.mmap) -> None:
        self.name = name
        self.path = shm_path(name)
        self.header = h
        self.size = len(mm)
        self.inode = opened.ino
        self._dev = opened.dev
        self.session_id = h.session_id
        self._fd = opened.fd
        self._mm: mmap.mmap | None = mm
        self._closed = False
        self._need = h.segment_size or self.size
        self.buf = memoryview(mm)
        self._live_buf = bytearray(_LIVE_STRUCT.size)
        self._seq_buf = bytearray(_SEQS_STRUCT.size)
        self._img_seq_buf = bytearray(_SEQS_STRUCT.size)
        self._sid_buf = bytearray(_SESSION_STRUCT.size)
        self._header_buf = bytearray(HEADER_SIZE)
        self._live_sid: int | None = None  # session_id as copied by the last read_live
        self._ctr: dict[str, memoryview] = {}
        for f in LIVE_FIELDS:
            off, code = hdr.OFFSET[f], hdr.CODE[f]
            # typeshed overloads memoryview.cast on literal format strings; code is one of them
            self._ctr[f] = self.buf[off : off + struct.calcsize(code)].cast(code)  # type: ignore[call-overload]
        n = h.num_envs

        def arr(field: str, dtype: str, count: int, shape: tuple[int, ...]) -> np.ndarray:
            return np.frombuffer(mm, dtype=dtype, count=count, offset=getattr(h, field)).reshape(shape)

        self.obs = arr("obs_offset", "<f4", n * h.obs_size, (n, h.obs_size))
        self.act = arr("act_offset", "<f4", n * h.act_size, (n, h.act_size))
        self.rewards = arr("rewards_offset", "<f4", n, (n,))
        self.dones = arr("dones_offset", "u1", n, (n,))
        self.resets = arr("resets_offset", "u1", n, (n,))
        self.truncateds = arr("truncateds_offset", "u1", n, (n,)) if h.truncateds_offset else None
        self.images = (
            arr("image_offset", "u1", n * h.image_bytes_per_env, (n, h.image_height, h.image_width, h.image_channels))
            if h.image_offset
            else None
        )

    # ------------------------------------------------------------ copies through the fd
    def pread_into(self, offset: int, out: Any) -> bool:
        """Copy ``len(out)`` bytes of the segment at ``offset`` into ``out``, never through the mapping.

        On Linux this is ``preadv`` on the segment's file descriptor: if the
        file shrank (``ftruncate``, or ``O_TRUNC`` on the same inode) the read
        comes back short instead of the ``SIGBUS`` a load from the mapping
        past the end of the file would be. Where there is no readable
        descriptor (Windows, whose named mappings cannot shrink, and
        POSIX objects that refuse ``read(2)``) it copies from the mapping after
        an ``fstat`` check.

        Parameters
        ----------
        offset
            Byte offset in the segment.
        out
            A writable C-contiguous buffer (``bytearray``, ``numpy`` array).

        Returns
        -------
        bool
            ``True`` if every byte was copied; ``False`` if the file no longer
            holds them (``out`` then holds garbage) or the segment is closed.
        """
        if self._closed:
            return False
        mv = memoryview(out).cast("B")
        n = mv.nbytes
        if n == 0:
            return True
        if offset < 0 or offset + n > self.size:
            raise ValueError(f"read of {n} bytes at {offset} is outside the {self.size}-byte segment")
        if self._fd is None or not _PREAD_OK:
            if not self.backed():
                return False
            mv[:] = self.buf[offset : offset + n]
            return True
        done = 0
        while done < n:  # a regular file returns less only at its end (or past 2 GiB per call)
            try:
                got = os.preadv(self._fd, [mv[done:]], offset + done)
            except OSError:
                return False
            if got <= 0:
                return False
            done += got
        return True

    def pread(self, offset: int, n: int) -> bytes:
        """``n`` bytes at ``offset``, copied through the fd (see :meth:`pread_into`).

        Raises
        ------
        SegmentGone
            The file no longer holds them (it shrank) or the segment is closed.
        """
        out = bytearray(n)
        if not self.pread_into(offset, out):
            raise SegmentGone(f"{self.name}: segment shrank (a {n}-byte read at offset {offset} came back short)")
        return bytes(out)

    def read_live(self) -> Live:
        """All live fields from one copy of the header's first bytes (one ``pread``, never a mapping).

        Raises
        ------
        SegmentGone
            The file no longer holds the header.
        """
        buf = self._live_buf
        if not self.pread_into(0, buf):
            raise SegmentGone(f"{self.name}: segment shrank below its header")
        (self._live_sid,) = _SESSION_STRUCT.unpack_from(buf, _SESSION_OFFSET)  # inside the same bytes
        return Live(*_LIVE_STRUCT.unpack_from(buf))

    def fixed_fields_changed(self) -> str | None:
        """Whether a non-live header field differs from what it was at attach (LAYOUT §2.1, rule C7).

        One ``pread`` of the header through the fd. Only the live fields may change after creation;
        an engine (or anything else) that rewrites another one has made the attached view of the
        segment wrong: the caller drops the attach, and a new one validates the header afresh.

        Returns
        -------
        str or None
            ``None`` if every fixed field is as attached; otherwise which one changed, and how.
        """
        buf = self._header_buf
        if not self.pread_into(0, buf):
            return "segment shrank below its header"
        h = self.header
        for name, st, off in _FIXED_FIELDS:
            (now,) = st.unpack_from(buf, off)
            was = getattr(h, name)
            if now != was:
                if isinstance(now, bytes):
                    return f"header field {name} changed while attached"
                if name in _HEX_FIELDS:  # as the header check words them ("magic: 0x62726167, expected …")
                    return f"header field {name} changed while attached (0x{was:08X} -> 0x{now:08X})"
                return f"header field {name} changed while attached ({was} -> {now})"
        return None

    def session_changed(self) -> str | None:
        """Whether the ``session_id`` copied by the last :meth:`read_live` differs from the attached one.

        No system call: the id lies inside the bytes :meth:`read_live` copies.
        A cheaper, narrower check than :meth:`still_valid` for a poll that
        found the engine writing this mapping (see ``MonitorCore``).

        Returns
        -------
        str or None
            ``None`` if it is the same session (or nothing was read yet);
            otherwise the reason, worded as :meth:`still_valid` words it.
        """
        sid = self._live_sid
        if sid is None or sid == self.session_id:
            return None
        return f"session_id changed ({self.session_id:x} -> {sid:x}): segment recreated"

    def read_counter(self, field: str) -> int:
        """One live field, copied through the fd (see :meth:`pread_into`).

        Raises
        ------
        KeyError
            ``field`` is not a live field.
        SegmentGone
            The file no longer holds the header.
        """
        off, st = _LIVE_ONE[field]
        return int(st.unpack(self.pread(off, st.size))[0])

    def read_region(self, offset: int, out: np.ndarray) -> None:
        """Fill ``out`` from the segment at ``offset`` (see :meth:`pread_into`).

        Raises
        ------
        SegmentGone
            The file no longer holds those bytes (it shrank) or the segment is closed.
        """
        if not self.pread_into(offset, out):
            raise SegmentGone(
                f"{self.name}: segment shrank (a {out.nbytes}-byte read at offset {offset} came back short)"
            )

    def read_plan(self, plan: ReadPlan) -> None:
        """Fill every array of ``plan`` (see :class:`ReadPlan`): one ``preadv`` per group of nearby regions.

        Raises
        ------
        SegmentGone
            The file no longer holds those bytes (it shrank) or the segment is closed.
        ValueError
            A region lies outside the segment.
        """
        for start, iov, total, parts in plan.groups:
            if start + total > self.size:
                raise ValueError(f"read of {total} bytes at {start} is outside the {self.size}-byte segment")
            if self._closed or self._fd is None or not _PREAD_OK:
                for offset, out in parts:
                    self.read_region(offset, out)
                continue
            try:
                got = os.preadv(self._fd, iov, start)
            except OSError:
                got = -1
            if got != total:  # short (the file shrank, or a partial read): region by region, which tells which
                for offset, out in parts:
                    self.read_region(offset, out)

    def read_image_seqs(self) -> tuple[int, int]:
        """``(image_seq, image_frame_seq)`` from one ``pread`` of the 16 bytes that hold both.

        Raises
        ------
        SegmentGone
            The file no longer holds the header.
        """
        return self._read_pair(_IMAGE_SEQS_OFFSET, self._img_seq_buf)

    def read_seqs(self) -> tuple[int, int]:
        """``(frame_seq, action_seq)`` from one ``pread`` of the 16 bytes that hold both.

        Raises
        ------
        SegmentGone
            The file no longer holds the header.
        """
        return self._read_pair(_SEQS_OFFSET, self._seq_buf)

    def _read_pair(self, offset: int, buf: bytearray) -> tuple[int, int]:
        """Two adjacent u64 header fields at ``offset``, copied by one ``pread`` into ``buf``."""
        if not self.pread_into(offset, buf):
            raise SegmentGone(f"{self.name}: segment shrank below its header")
        return _SEQS_STRUCT.unpack_from(buf)  # type: ignore[return-value]

    def read_images(self, out: np.ndarray, start: int = 0, stop: int | None = None) -> None:
        """Copy the images of envs ``start:stop`` into ``out[start:stop]`` (one ``pread``: they are contiguous).

        Parameters
        ----------
        out
            C-contiguous ``uint8`` ``(num_envs, height, width, channels)``.
        start, stop
            Env range (default: all).

        Raises
        ------
        SegmentGone
            The file no longer holds the images (it shrank) or the segment is closed.
        ValueError
            No image region, or ``out`` has another shape.
        """
        h = self.header
        n = h.num_envs
        if not h.image_offset:
            raise ValueError(f"{self.name}: no image region")
        if out.shape[0] != n or out.nbytes != n * h.image_bytes_per_env or not out.flags.c_contiguous:
            raise ValueError(f"images: out must be a C-contiguous array of {n * h.image_bytes_per_env} bytes")
        stop = n if stop is None else stop
        if not 0 <= start <= stop <= n:
            raise ValueError(f"env range {start}:{stop} outside 0:{n}")
        per = h.image_bytes_per_env
        self.read_region(h.image_offset + start * per, out[start:stop])

    def ring_source(self, offset: int, capacity: int) -> _PreadRing:
        """A :class:`~lucky_monitor.protocol.ring.RingSource` over the ring at ``offset``, read through the fd.

        For a :class:`~lucky_monitor.protocol.ring.RingTap` that must never
        load from the mapping; its reads raise ``SegmentGone`` once the file shrank.
        """
        return _PreadRing(self, offset, capacity)

    # ------------------------------------------------------------ counters
    def counter(self, field: str) -> int:
        """Read one live header field now (one aligned load).

        Parameters
        ----------
        field
            One of :data:`~lucky_monitor.protocol.header.LIVE_FIELDS`.

        Raises
        ------
        KeyError
            ``field`` is not a live field.
        """
        return self._ctr[field][0]

    def live(self) -> Live:
        """All live fields, read one after another."""
        c = self._ctr
        return Live(*(c[f][0] for f in LIVE_FIELDS))

    def ring_positions(self) -> dict[str, RingPositions]:
        """Positions of every command ring: ``cmd_s2c``, ``cmd_c2s`` and, with a tools channel,
        ``tools_c2s`` and ``tools_s2c``.

        Each ring's ``read_pos`` is read, then ``write_pos``, then ``read_pos``
        again until two reads agree (at most a few tries), so ``used`` is not
        inflated by a consumer that moved in between. Copied through the fd
        (:meth:`pread`), never loaded from the mapping.

        Raises
        ------
        SegmentGone
            The file shrank below a ring.
        """
        h = self.header
        rings = [("cmd_s2c", h.cmd_s2c_offset, h.cmd_ring_size), ("cmd_c2s", h.cmd_c2s_offset, h.cmd_ring_size)]
        if h.tools_offset:
            rings += [
                ("tools_c2s", h.tools_c2s_offset, h.tools_ring_size),
                ("tools_s2c", h.tools_s2c_offset, h.tools_ring_size),
            ]
        out = {}

        def u32(at: int) -> int:
            return int(_U32.unpack(self.pread(at, 4))[0])

        for name, off, cap in rings:
            r0 = u32(off + 4)
            for _ in range(8):
                w = u32(off)
                r1 = u32(off + 4)
                if r1 == r0:
                    break
                r0 = r1
            out[name] = RingPositions(name, off, cap, w, r0)
        return out

    # ------------------------------------------------------------ validity
    def _file_check(self) -> str | None:
        kind = platform_kind()
        try:
            if kind == "dir":
                st = os.stat(self.path, follow_symlinks=False)  # a symbolic link is never the segment
                if (st.st_ino, st.st_dev) != (self.inode, self._dev):
                    return "segment recreated (the name now points to a new file)"
            elif kind == "posix":
                import _posixshmem  # type: ignore[import-not-found]

                fd = _posixshmem.shm_open(self.path, os.O_RDONLY, mode=0o600)
                try:
                    st = os.fstat(fd)
                finally:
                    os.close(fd)
                if st.st_ino and self.inode and (st.st_ino, st.st_dev) != (self.inode, self._dev):
                    return "segment recreated (the name now points to a new object)"
        except FileNotFoundError:
            return "segment unlinked"
        except OSError as exc:
            return f"segment no longer accessible: {exc.strerror or exc}"
        if self._fd is not None:
            try:
                size = os.fstat(self._fd).st_size
            except OSError as exc:
                return f"segment no longer accessible: {exc.strerror or exc}"
            if size < self._need:
                return f"segment shrank to {size} bytes (needs {self._need})"
        return None

    def backed(self) -> bool:
        """Whether the file still backs every byte this segment needs (one ``fstat``; cheap).

        A narrower, faster check than :meth:`still_valid` for right before a
        read of a region: reading a mapping past the end of a shrunk file is a
        SIGBUS.
        """
        if self._closed:
            return False
        if self._fd is None:
            return True
        try:
            return os.fstat(self._fd).st_size >= self._need
        except OSError:
            return False

    def still_valid(self) -> str | None:
        """Check, without touching any region, that the mapping still shows the live segment.

        Call this before every read of a region (the monitor does, every poll).

        Returns
        -------
        str or None
            ``None`` if the segment is intact; otherwise why not:
            ``"segment unlinked"``, ``"segment recreated ..."``, ``"segment
            shrank ..."``, ``"session_id changed ..."`` or ``"segment closed"``.
        """
        if self._closed:
            return "segment closed"
        reason = self._file_check()
        if reason is not None:
            return reason
        # Through the fd like every other read: the file may shrink between the size check and
        # this read, and a load from the mapping then would be a SIGBUS (the stress test found it).
        buf = self._sid_buf
        if not self.pread_into(_SESSION_OFFSET, buf):
            return "segment shrank below its header"
        (sid,) = _SESSION_STRUCT.unpack_from(buf)
        if sid != self.session_id:
            return f"session_id changed ({self.session_id:x} -> {sid:x}): segment recreated"
        return None

    def check(self) -> None:
        """Raise :class:`~lucky_monitor.protocol.errors.SegmentGone` if :meth:`still_valid` fails."""
        reason = self.still_valid()
        if reason is not None:
            raise SegmentGone(f"{self.name}: {reason}")

    # ------------------------------------------------------------ lifetime
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Drop every view and unmap. Idempotent.

        Arrays handed out earlier keep the mapping alive (and valid to read)
        until they are garbage collected; the mapping goes away with the last.
        """
        if getattr(self, "_closed", True):
            return
        self._closed = True
        for v in self._ctr.values():
            with contextlib.suppress(BufferError):
                v.release()
        self._ctr = {}
        self.obs = self.act = self.rewards = self.dones = self.resets = None  # type: ignore[assignment]
        self.truncateds = self.images = None
        with contextlib.suppress(BufferError):
            self.buf.release()
        mm, self._mm = self._mm, None
        if mm is not None:
            with contextlib.suppress(BufferError):  # exported arrays: unmapped when they die
                mm.close()
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.size} bytes"
        return f"<{type(self).__name__} {self.name!r} session {self.session_id:x} {state}>"


class _PreadRing:
    """A ring's positions and data, read through :meth:`_Mapped.pread_into` (see :meth:`_Mapped.ring_source`)."""

    def __init__(self, seg: _Mapped, offset: int, capacity: int) -> None:
        self._seg = seg
        self._off = offset
        self._cap = capacity
        self._word = bytearray(4)

    def load(self, word: int) -> int:
        at = self._off + 4 * word
        if not self._seg.pread_into(at, self._word):
            raise SegmentGone(f"{self._seg.name}: segment shrank (ring position at offset {at} unreadable)")
        return int(_U32.unpack(self._word)[0])

    def fill(self, dst: memoryview, idx: int, n: int) -> None:
        base = self._off + 8
        end = idx + n
        parts = [(idx, min(end, self._cap))]
        if end > self._cap:
            parts.append((0, end - self._cap))
        for a, b in parts:
            if not self._seg.pread_into(base + a, dst[a:b]):
                raise SegmentGone(f"{self._seg.name}: segment shrank (ring data at offset {base + a} unreadable)")


def _attach(obj: _Mapped, name: str, *, write: bool, allow_other_user: bool = False) -> None:
    """Open, check the owner, validate, map: the common attach path (see the module docstring)."""
    opened = _open(name, write=write)
    try:
        check_owner(name, opened.uid, allow_other_user=allow_other_user)
        h = hdr.validate(opened.header_bytes, mapped_size=opened.size)
        length = h.segment_size or opened.size
        mm = _map(name, opened, length, write=write)
    except BaseException:
        if opened.fd is not None:
            os.close(opened.fd)
        raise
    obj._setup(name, opened, h, mm)
    obj.allow_other_user = allow_other_user
    obj.owner_uid = opened.uid


class Segment(_Mapped):
    """A segment attached read-only; every view refuses writes.

    Attributes
    ----------
    name, path : str
        Segment name and its OS-level name (see :func:`shm_path`).
    header : Header
        The header as validated at attach (live fields are a snapshot).
    size : int
        Bytes mapped.
    inode : int
        Inode of the object at attach (0 where the platform has none).
    session_id : int
        ``session_id`` at attach.
    buf : memoryview
        The whole mapping, read-only.
    obs, act, rewards, dones, resets : numpy.ndarray
        Read-only zero-copy views: ``obs`` and ``act`` are ``float32``
        ``(num_envs, obs_size/act_size)``, ``rewards`` is ``float32``,
        ``dones``/``resets`` are ``uint8`` ``(num_envs,)``.
    truncateds : numpy.ndarray or None
        ``uint8`` ``(num_envs,)``, ``None`` without a truncateds region.
    images : numpy.ndarray or None
        ``uint8`` ``(num_envs, height, width, channels)``, ``None`` without images.

    Notes
    -----
    Call :meth:`still_valid` before reading a region after any pause: a
    truncated file would otherwise kill the process with ``SIGBUS``. The
    counters (:meth:`counter`, :meth:`live`) live in the header page and are
    safe whenever the file still holds 4096 bytes.
    """

    @classmethod
    def attach(cls, name: str, *, allow_other_user: bool = False) -> Segment:
        """Attach to segment ``name`` read-only.

        Parameters
        ----------
        name
            Segment name.
        allow_other_user
            Attach to a segment owned by another user too (default: refuse it).

        Raises
        ------
        InvalidSegmentName
            Bad name.
        SegmentNotFound
            No segment of that name.
        ForeignSegment
            Owned by another user and ``allow_other_user`` is false.
        TransportError
            Permission denied, a symbolic link, not a regular file, or mapping failed.
        HeaderError
            The header fails validation (its subclasses name the rule).
        """
        seg = cls.__new__(cls)
        _attach(seg, name, write=False, allow_other_user=allow_other_user)
        return seg


class _Writable(_Mapped):
    """Stores into live fields, for the sides that own them (engine, trainer)."""

    def set(self, field: str, value: int) -> None:
        """Store ``value`` into live field ``field`` (one aligned store).

        Raises
        ------
        KeyError
            ``field`` is not one of :data:`~lucky_monitor.protocol.header.LIVE_FIELDS`.
        """
        self._ctr[field][0] = value

    def cas(self, field: str, expected: int, desired: int) -> bool:
        """Atomically replace live field ``field`` by ``desired`` if it holds ``expected``.

        A locked compare-and-swap (``atomics``), e.g. for the trainer claiming
        ``client_pid``. Returns whether the swap happened.

        Raises
        ------
        KeyError
            ``field`` is not one of :data:`~lucky_monitor.protocol.header.LIVE_FIELDS`.
        """
        if field not in self._ctr:
            raise KeyError(field)
        off = hdr.OFFSET[field]
        width = struct.calcsize(hdr.CODE[field])
        with atomics.atomicview(buffer=self.buf[off : off + width], atype=atomics.UINT) as word:
            return bool(word.cmpxchg_strong(expected=expected, desired=desired).success)


class TrainerSegment(_Writable):
    """A segment attached read-write, as the trainer side does.

    Same views as :class:`Segment`, all writable, plus :meth:`set` for live
    fields (the trainer writes ``client_pid`` and ``action_seq``). A monitor
    never uses this class.
    """

    @classmethod
    def attach(cls, name: str, *, allow_other_user: bool = False) -> TrainerSegment:
        """Attach to segment ``name`` read-write (takes and raises like :meth:`Segment.attach`)."""
        seg = cls.__new__(cls)
        _attach(seg, name, write=True, allow_other_user=allow_other_user)
        return seg


class EngineSegment(_Writable):
    """The engine side: creates, owns and finally unlinks a segment.

    All views are writable. Use as a context manager to unlink on exit.
    """

    @classmethod
    def create(cls, name: str, header: Header, *, exist_ok: bool = False) -> EngineSegment:
        """Create segment ``name`` laid out by ``header`` and publish it.

        Parameters
        ----------
        name
            Segment name.
        header
            A header that passes :func:`~lucky_monitor.protocol.header.validate`
            (e.g. from :func:`~lucky_monitor.protocol.header.plan`). The file
            size is ``header.segment_size`` or, if that is 0, the end of the
            last region rounded up to 4096.
        exist_ok
            Replace an existing segment of that name (readers of the old one
            see it as recreated) instead of raising :class:`SegmentExists`.

        Raises
        ------
        SegmentTooLarge
            The segment is over :data:`MAX_SEGMENT_BYTES` or the free shared
            memory (checked before anything is created).
        SegmentExists
            A segment of that name exists and ``exist_ok`` is false.

        Notes
        -----
        Every region is zero, which is an empty ring and a zero counter.
        """
        validate_name(name)
        size = header.segment_size or max([HEADER_SIZE, *(r.end for r in header.regions())])
        size = (size + 4095) // 4096 * 4096
        hdr.validate(header.pack(), mapped_size=size)
        check_segment_size(size)
        seg = cls.__new__(cls)
        kind = platform_kind()
        opened: tuple[int | None, mmap.mmap]
        if kind == "dir":
            opened = _create_dir(name, header, size, exist_ok=exist_ok)
        elif kind == "posix":
            opened = _create_posix(name, header, size, exist_ok=exist_ok)
        else:
            opened = _create_win(name, header, size, exist_ok=exist_ok)
        fd, mm = opened
        ino = dev = 0
        if fd is not None:
            st = os.fstat(fd)
            ino, dev = st.st_ino, st.st_dev
        seg._setup(name, _Opened(fd, size, ino, dev, 0.0, b""), header, mm)
        seg._unlinked = False
        return seg

    def unlink(self) -> None:
        """Announce closing (``engine_state`` = ``EngineState.CLOSING``), remove the name, unmap. Idempotent."""
        if getattr(self, "_unlinked", True):
            self.close()
            return
        self._unlinked = True
        if not self._closed and self._mm is not None and self._header_mapped():
            self.set("engine_state", EngineState.CLOSING)
        kind = platform_kind()
        try:
            if kind == "dir":
                st = os.stat(self.path)
                if (st.st_ino, st.st_dev) == (self.inode, self._dev):  # never remove a successor
                    os.unlink(self.path)
            elif kind == "posix":
                import _posixshmem  # type: ignore[import-not-found]

                _posixshmem.shm_unlink(self.path)
        except FileNotFoundError:
            pass
        finally:
            self.close()

    def _header_mapped(self) -> bool:
        """Whether the header page is still backed by the file (a store would not SIGBUS)."""
        if self._fd is None:
            return True
        try:
            return os.fstat(self._fd).st_size >= HEADER_SIZE
        except OSError:
            return False

    def __exit__(self, *exc: object) -> None:
        self.unlink()


def _fill(mm: mmap.mmap, header: Header) -> None:
    """Write the header, empty rings, and finally the magic into a fresh mapping."""
    raw = header.pack()
    mm[4:HEADER_SIZE] = raw[4:]
    offsets = [header.cmd_s2c_offset, header.cmd_c2s_offset]
    if header.tools_offset:
        offsets += [header.tools_c2s_offset, header.tools_s2c_offset]
        mm[header.tools_offset : header.tools_offset + 4] = bytes(4)  # owner_pid: free
    for off in offsets:
        init_ring(mm, off)
    mm[0:4] = raw[0:4]


def _create_dir(name: str, header: Header, size: int, *, exist_ok: bool) -> tuple[int, mmap.mmap]:
    path = shm_path(name)
    if not exist_ok and os.path.lexists(path):
        raise SegmentExists(f"segment {name!r} already exists")
    tmp = os.path.join(SHM_DIR, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    flags = os.O_CREAT | os.O_EXCL | os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(tmp, flags, 0o600)
    except OSError as exc:
        raise _os_error(exc, name, "cannot create segment") from None
    mm = None
    try:
        os.fchmod(fd, 0o600)  # exactly owner read/write, whatever the umask
        os.ftruncate(fd, size)
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE)
        _fill(mm, header)
        if exist_ok:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # atomic publish; fails if the name appeared meanwhile
            except FileExistsError:
                raise SegmentExists(f"segment {name!r} already exists") from None
            os.unlink(tmp)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if mm is not None:
            mm.close()
        os.close(fd)
        if isinstance(exc, OSError):
            raise _os_error(exc, name, "cannot create segment") from None
        raise
    return fd, mm


def _create_posix(name: str, header: Header, size: int, *, exist_ok: bool) -> tuple[int, mmap.mmap]:
    import _posixshmem  # type: ignore[import-not-found]

    path = shm_path(name)
    if exist_ok:
        with contextlib.suppress(FileNotFoundError):
            _posixshmem.shm_unlink(path)
    try:
        fd = _posixshmem.shm_open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    except FileExistsError:
        raise SegmentExists(f"segment {name!r} already exists") from None
    except OSError as exc:
        raise _os_error(exc, name, "cannot create segment") from None
    try:
        os.ftruncate(fd, size)
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE)
        _fill(mm, header)
    except BaseException:
        with contextlib.suppress(OSError):
            _posixshmem.shm_unlink(path)
        os.close(fd)
        raise
    return fd, mm


def _create_win(name: str, header: Header, size: int, *, exist_ok: bool) -> tuple[None, mmap.mmap]:
    try:
        _win_mapping_size(name, write=False)
    except SegmentNotFound:
        pass
    else:
        if not exist_ok:
            raise SegmentExists(f"segment {name!r} already exists")
    try:
        mm = mmap.mmap(-1, size, tagname=name, access=mmap.ACCESS_WRITE)  # type: ignore[call-arg]
    except OSError as exc:
        raise _os_error(exc, name, "cannot create segment") from None
    mm[0:4] = bytes(4)
    _fill(mm, header)
    return None, mm
