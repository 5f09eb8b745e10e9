"""Find segments and tell whether the processes behind them live.

Theory of operation
-------------------
On Linux every segment is a file in ``/dev/shm``; :func:`list_segments` scans
that directory for names starting with the prefix and reads each header with
``pread`` (a copy, never a mapping, so a truncated or hostile file cannot
``SIGBUS`` us). A file that fails to open or validate is still listed, with
``error`` set. Liveness comes from the pids in the header: ``server_pid`` (the
engine) and ``client_pid`` (the trainer, 0 = none).

A live pid alone does not prove a live engine: the engine may have died and
its pid been reused by an unrelated process, while the segment's heartbeat
stays frozen. ``engine_live`` therefore needs both the pid alive and a fresh
``heartbeat_ns`` (CLOCK_MONOTONIC of this machine, so its age is
``time.monotonic_ns() - heartbeat_ns``, read once): at most
:data:`HEARTBEAT_FRESH_S` old. A heartbeat of 0 (never beat) or one in the
future is unknown, hence not live. :func:`newest_live` follows only
``engine_live`` segments.

POSIX shared memory on macOS and named mappings on Windows cannot be listed;
there the only candidate is the name in ``LUCKY_SHM_NAME``, if set.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import time
from dataclasses import dataclass

from ..protocol.errors import LuckyMonitorError, SegmentNotFound
from ..protocol.header import validate
from .shm import NAME_RE, SHM_DIR, peek_header, platform_kind, shm_path

__all__ = ["HEARTBEAT_FRESH_S", "SegmentInfo", "heartbeat_age_s", "list_segments", "newest_live", "pid_alive"]

DEFAULT_PREFIX = "LuckyEngine_"
#: A heartbeat at most this old is fresh (the engine beats at least 10 times a second; the
#: monitor reads *stalled* after the same 2 s).
HEARTBEAT_FRESH_S = 2.0


@dataclass(frozen=True)
class SegmentInfo:
    """One segment found by :func:`list_segments`.

    Attributes
    ----------
    name, path : str
        Segment name and OS-level name.
    size : int
        Object size in bytes (0 if unknown).
    mtime : float
        Modification time, seconds since the epoch (0.0 if unknown).
    server_pid, client_pid : int
        From the header (0 when it could not be read).
    server_alive, client_alive : bool
        Whether those processes exist (``client_alive`` is False for pid 0).
    num_envs, session_id : int
        From the header.
    error : str or None
        Why the header could not be read or validated; ``None`` if it is valid.
    started : float or None
        When the engine's session began, seconds since the epoch: the start
        time of the engine process (``server_pid``), where the OS tells it
        (Linux ``/proc``); ``None`` otherwise. A segment's mtime is not its
        age: every write through the mapping moves it.
    owner_uid : int or None
        The file's owner (``None`` where unknown). Attaching to another
        user's segment needs ``--allow-other-user``.
    heartbeat_age_s : float or None
        Seconds since the engine's last ``heartbeat_ns``, read when listed;
        ``None`` when unknown (a heartbeat of 0 or in the future, an invalid
        header, a platform whose clock is not the engine's).
    engine_live : bool
        The engine lives: ``server_alive`` *and* a heartbeat at most
        :data:`HEARTBEAT_FRESH_S` old. A live pid with a frozen heartbeat
        (a pid reused by an unrelated process) is not live.
    """

    name: str
    path: str
    size: int
    mtime: float
    server_pid: int
    server_alive: bool
    client_pid: int
    client_alive: bool
    num_envs: int
    session_id: int
    error: str | None
    started: float | None = None
    owner_uid: int | None = None
    heartbeat_age_s: float | None = None
    engine_live: bool = False


def heartbeat_age_s(heartbeat_ns: int) -> float | None:
    """Seconds since ``heartbeat_ns`` (CLOCK_MONOTONIC of this machine), read once.

    ``None`` when unknown: a heartbeat of 0 (never beat), one in the future,
    or a platform whose ``time.monotonic_ns`` is not CLOCK_MONOTONIC (not Linux).
    """
    if not heartbeat_ns or not sys.platform.startswith("linux"):
        return None
    age_ns = time.monotonic_ns() - heartbeat_ns
    if age_ns < 0:
        return None
    return age_ns / 1e9


def _pid_alive_windows(pid: int) -> bool:
    import ctypes
    from ctypes import wintypes

    k32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    k32.OpenProcess.restype = wintypes.HANDLE
    k32.OpenProcess.argtypes = [wintypes.DWORD, wintypes.BOOL, wintypes.DWORD]
    k32.GetExitCodeProcess.argtypes = [wintypes.HANDLE, ctypes.POINTER(wintypes.DWORD)]
    k32.CloseHandle.argtypes = [wintypes.HANDLE]
    process_query_limited_information, still_active, error_access_denied = 0x1000, 259, 5
    handle = k32.OpenProcess(process_query_limited_information, False, pid)
    if not handle:
        return ctypes.get_last_error() == error_access_denied  # type: ignore[attr-defined]
    try:
        code = wintypes.DWORD()
        if not k32.GetExitCodeProcess(handle, ctypes.byref(code)):
            return True
        return code.value == still_active
    finally:
        k32.CloseHandle(handle)


def _zombie(pid: int) -> bool:
    """True if /proc says ``pid`` is a zombie or dead (Linux only; False elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read(512)
    except OSError:
        return False
    # "pid (comm) S ..." where comm may itself contain ") ": the state follows the last ')'.
    rest = data[data.rfind(b")") + 1 :].split()
    return bool(rest) and rest[0] in (b"Z", b"X", b"x")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie.

    ``os.kill(pid, 0)`` semantics: no such process -> dead, permission denied
    -> alive. On Linux a zombie (exited, not yet reaped) counts as dead. On
    Windows ``OpenProcess``/``GetExitCodeProcess`` are used instead, since
    ``os.kill`` there would terminate the process.

    Parameters
    ----------
    pid
        Process id; 0, negative or too large values are never alive.
    """
    if not 0 < pid <= 0x7FFFFFFF:
        return False
    if sys.platform == "win32":
        return _pid_alive_windows(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except OSError as exc:
        return exc.errno == errno.EPERM
    return not _zombie(pid)


def _boot_time() -> float | None:
    try:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started, in seconds since the epoch; ``None`` where unknown.

    Linux only (``/proc/<pid>/stat`` field 22 plus the boot time); elsewhere,
    for a pid that does not exist, or on any read error, ``None``.
    """
    if not 0 < pid <= 0x7FFFFFFF or not sys.platform.startswith("linux"):
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks = int(fields[19])  # field 22 counted from 1, minus pid and comm
        boot = _boot_time()
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    if boot is None or hz <= 0:
        return None
    return boot + ticks / hz


def _info(name: str, path: str) -> SegmentInfo | None:
    """Describe segment ``name``; ``None`` if it vanished meanwhile."""
    size, mtime = 0, 0.0
    uid: int | None = None
    if platform_kind() == "dir":
        with contextlib.suppress(OSError):
            uid = os.stat(path, follow_symlinks=False).st_uid
    try:
        raw, size, mtime = peek_header(name)
        h = validate(raw, mapped_size=size)
    except SegmentNotFound:
        return None
    except LuckyMonitorError as exc:
        if not size and platform_kind() == "dir":
            with contextlib.suppress(OSError):
                st = os.stat(path, follow_symlinks=False)
                size, mtime = st.st_size, st.st_mtime
        return SegmentInfo(name, path, size, mtime, 0, False, 0, False, 0, 0, str(exc), owner_uid=uid)
    server_alive = pid_alive(h.server_pid)
    age = heartbeat_age_s(h.heartbeat_ns)
    return SegmentInfo(
        name=name,
        path=path,
        size=size,
        mtime=mtime,
        server_pid=h.server_pid,
        server_alive=server_alive,
        client_pid=h.client_pid,
        client_alive=pid_alive(h.client_pid),
        num_envs=h.num_envs,
        session_id=h.session_id,
        error=None,
        started=process_start_time(h.server_pid),
        owner_uid=uid,
        heartbeat_age_s=age,
        engine_live=server_alive and age is not None and age <= HEARTBEAT_FRESH_S,
    )


def list_segments(prefix: str = DEFAULT_PREFIX) -> list[SegmentInfo]:
    """Every segment whose name starts with ``prefix``, newest first.

    Never raises for a bad segment: its ``error`` field says what is wrong.
    Returns an empty list when nothing can be listed.
    """
    kind = platform_kind()
    found: list[SegmentInfo] = []
    if kind == "dir":
        try:
            entries = list(os.scandir(SHM_DIR))
        except OSError:
            return []
        for e in entries:
            if not e.name.startswith(prefix):
                continue
            if not NAME_RE.fullmatch(e.name):
                found.append(
                    SegmentInfo(
                        e.name,
                        e.path,
                        0,
                        0.0,
                        0,
                        False,
                        0,
                        False,
                        0,
                        0,
                        "name has characters outside A-Z a-z 0-9 _ . -",
                    )
                )
                continue
            info = _info(e.name, e.path)
            if info is not None:
                found.append(info)
    else:
        name = os.environ.get("LUCKY_SHM_NAME", "")
        if name.startswith(prefix) and NAME_RE.fullmatch(name):
            info = _info(name, shm_path(name))
            if info is not None:
                found.append(info)
    # Newest engine session first; segments of one engine process by their last write.
    found.sort(key=lambda i: (i.started if i.started is not None else i.mtime, i.mtime, i.name), reverse=True)
    return found


def newest_live(prefix: str = DEFAULT_PREFIX, *, allow_other_user: bool = False) -> SegmentInfo | None:
    """The newest valid segment whose engine is live (``engine_live``), or ``None``.

    Parameters
    ----------
    prefix
        Name prefix.
    allow_other_user
        Consider segments owned by other users too (default: only this user's,
        the ones an attach would accept).
    """
    me = os.geteuid() if hasattr(os, "geteuid") else None
    for info in list_segments(prefix):
        if info.error is not None or not info.engine_live:
            continue
        if not allow_other_user and me is not None and info.owner_uid is not None and info.owner_uid != me:
            continue
        return info
    return None
