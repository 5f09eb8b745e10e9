"""The tools channel held by a helper process, so that a segment that shrinks can never kill the monitor.

Theory of operation
-------------------
The tools channel is the one place a monitor writes to a segment, and its
writes need the mapping: the owner word is claimed with a locked
compare-and-swap and each ring position is published with one aligned 4-byte
store, which neither ``pwrite`` (it may copy byte by byte, so the engine could
see a torn position, and it would grow a shrunk file) nor ``process_vm_writev``
can promise. A store to a mapping past the end of a file that shrank is a
``SIGBUS``, which Python cannot catch, and an ``fstat`` check before each
store leaves a window of a few microseconds; a stress test (truncations at
random moments, ``tests/faults/test_truncation_stress.py``) found it within a
few rounds, in a push landing just after its check.

So the monitor does not map the tools region itself. :meth:`ToolsAgent.claim`
starts a small helper process (:func:`_serve`, a fresh interpreter)
that attaches to the same segment (checking it is the same inode and
``session_id``), claims the channel in the monitor's name (``owner_pid`` is
the monitor's pid, so liveness checks by other monitors are unchanged) and
then serves requests on a pipe: push a payload on the c2s ring, pop one from
the s2c ring, read the owner word, release. It re-checks the file size before
every touch, as :class:`~lucky_monitor.transport.tools.ToolsChannel` does; if a
truncation still lands inside a touch, the helper dies of ``SIGBUS`` *alone*:
the monitor reads end-of-file on the pipe and reports ``SegmentGone`` ("the
segment shrank"), exactly as for a shrink seen by ``fstat``. When the monitor
exits (even by ``SIGKILL``) the helper sees end-of-file and releases the
channel, so the owner word is freed sooner than a dead holder's would be.

Each request is one pipe round trip (~50 us); the session makes one or two
per 60 Hz tick. :class:`ToolsAgent` has the interface of
:class:`~lucky_monitor.transport.tools.ToolsChannel` that
:class:`~lucky_monitor.core.commands.CommandClient` and the session use
(``c2s.push``, ``s2c.pop``, ``intact``, ``owner_pid``, ``release``,
``abandon``). Where there is no ``/dev/shm`` file to check (macOS, Windows)
:func:`claim_tools` returns an in-process ``ToolsChannel``.

Wire format, both directions: one op byte, a u32 request number, a u32
length, that many bytes. A reply carries its request's number, and the
monitor reads replies through a buffer kept between calls (:class:`_Replies`):
a call interrupted between its request and its reply (a Ctrl-C while a live
check restores the services it turned off) leaves at most a reply that the
next call recognises as not its own and skips, and part of a frame that the
next call completes, so the calls after it are answered in step.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import struct
import subprocess
import sys
import time
from typing import Any, BinaryIO

from ..protocol.errors import (
    LuckyMonitorError,
    MessageTooLarge,
    RingCorrupt,
    RingFull,
    SegmentGone,
    ToolsChannelBusy,
    ToolsChannelUnavailable,
    TransportError,
)
from ..protocol.header import tools_region_size
from .shm import Segment, platform_kind

__all__ = ["ToolsAgent", "claim_tools"]

_FRAME = struct.Struct("<cII")  # op, request number, length
#: Seconds the monitor waits for one answer before it gives up on the helper (kills it).
REPLY_TIMEOUT_S = 5.0
#: Errors carried over the pipe by name; anything else arrives as ``TransportError``.
_ERRORS: dict[str, type[Exception]] = {
    "RingFull": RingFull,
    "MessageTooLarge": MessageTooLarge,
    "RingCorrupt": RingCorrupt,
    "SegmentGone": SegmentGone,
    "ToolsChannelUnavailable": ToolsChannelUnavailable,
    "ValueError": ValueError,
}


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds process ``pid`` used so far (Linux ``/proc``; 0.0 where unknown)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _write(stream: BinaryIO, op: bytes, data: bytes = b"", number: int = 0) -> None:
    stream.write(_FRAME.pack(op, number, len(data)) + data)
    stream.flush()


def _read_exact(fd: int, n: int) -> bytes | None:
    """``n`` bytes from ``fd`` (blocking: the helpers' side); ``None`` at end-of-file."""
    out = bytearray()
    while len(out) < n:
        chunk = os.read(fd, n - len(out))
        if not chunk:
            return None
        out += chunk
    return bytes(out)


class _Replies:
    """The monitor's reader of a helper's answers: whole frames, kept in step across interrupted calls.

    Bytes read are kept in a buffer across calls, so a call interrupted in
    the middle of a frame leaves nothing half-read for the next; each call
    takes its request's number and skips replies to earlier ones.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buf = bytearray()
        self._number = 0

    def next_number(self) -> int:
        """The number of the next request (one request in flight at a time)."""
        self._number = (self._number + 1) & 0xFFFFFFFF
        return self._number

    def wait(self, number: int, timeout: float) -> tuple[bytes, bytes] | None:
        """The reply to request ``number`` if it is complete within ``timeout`` s, else ``None``.

        Raises
        ------
        EOFError
            The helper closed its end (it exited).
        """
        deadline = time.monotonic() + timeout
        buf = self._buf
        while True:
            while len(buf) >= _FRAME.size:
                op, got, n = _FRAME.unpack_from(buf)
                if len(buf) < _FRAME.size + n:
                    break
                data = bytes(buf[_FRAME.size : _FRAME.size + n])
                del buf[: _FRAME.size + n]
                if got == number:
                    return op, data
                # the reply to an interrupted call: skipped
            left = deadline - time.monotonic()
            if not select.select([self.fd], [], [], max(0.0, left))[0]:
                return None
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise EOFError
            buf += chunk


def _end_helper(proc: subprocess.Popen[bytes], *, timeout: float) -> None:
    """Close a helper's pipes (its end-of-file: it exits) and reap it, killing it after ``timeout`` s."""
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _read_frame(fd: int) -> tuple[bytes, int, bytes] | None:
    """One request ``(op, number, data)`` (blocking: the helpers' side); ``None`` at end-of-file."""
    head = _read_exact(fd, _FRAME.size)
    if head is None:
        return None
    op, number, n = _FRAME.unpack(head)
    data = _read_exact(fd, n) if n else b""
    return None if data is None else (op, number, data)


class _C2S:
    def __init__(self, agent: ToolsAgent) -> None:
        self._agent = agent

    def push(self, payload: bytes | bytearray | memoryview) -> None:
        """Append one entry to the tools c2s ring (see :meth:`~lucky_monitor.protocol.ring.RingWriter.push`)."""
        self._agent._call(b"P", bytes(payload))


class _S2C:
    def __init__(self, agent: ToolsAgent) -> None:
        self._agent = agent

    def pop(self) -> bytes | None:
        """Take the oldest reply, ``None`` when there is none (as ``RingReader.pop``)."""
        op, data = self._agent._call(b"G")
        return data if op == b"K" else None


class ToolsAgent:
    """A tools channel claimed and served by a helper process (see the module docstring).

    Attributes
    ----------
    name : str
        Segment name.
    pid : int
        The pid written into ``owner_pid`` (the monitor's).
    ring_size : int
        Data capacity of each tools ring.
    """

    name: str
    pid: int
    ring_size: int

    def __init__(self) -> None:  # use claim()
        self._proc: subprocess.Popen[bytes] | None = None
        self._fd: int | None = None  # a duplicate of the segment's descriptor, for fstat
        self._need = 0
        self._claimed = False
        self._cpu = 0.0
        self._replies: _Replies | None = None
        self.c2s = _C2S(self)
        self.s2c = _S2C(self)

    @classmethod
    def claim(cls, seg: Segment, *, pid: int | None = None, allow_other_user: bool | None = None) -> ToolsAgent:
        """Start the helper and claim the tools channel of ``seg`` through it.

        Raises
        ------
        ToolsChannelUnavailable
            ``tools_offset`` is 0.
        ToolsChannelBusy
            A live process holds the channel.
        SegmentGone
            The segment was replaced or shrank since ``seg`` was attached.
        TransportError
            The helper could not be started or did not answer.
        """
        me = os.getpid() if pid is None else int(pid)
        if not 0 < me <= 0xFFFFFFFF:
            raise ValueError(f"pid {me} does not fit the u32 owner word")
        h = seg.header
        if not h.tools_offset:
            raise ToolsChannelUnavailable(f"{seg.name}: the engine exports no tools channel (tools_offset = 0)")
        allow = seg.allow_other_user if allow_other_user is None else bool(allow_other_user)
        agent = cls()
        agent.name = seg.name
        agent.pid = me
        agent.ring_size = h.tools_ring_size
        agent._need = h.tools_offset + tools_region_size(h.tools_ring_size)
        fd = getattr(seg, "_fd", None)
        agent._fd = os.dup(fd) if fd is not None else None
        args = [seg.name, str(seg.inode), str(seg._dev), str(h.session_id), str(me), "1" if allow else "0"]
        try:
            agent._proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, _root(), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            assert agent._proc.stdout is not None
            agent._replies = _Replies(agent._proc.stdout.fileno())
            agent._call(b"C")
        except BaseException:
            agent.abandon()
            raise
        agent._claimed = True
        return agent

    # ------------------------------------------------------------ requests
    def _call(self, op: bytes, data: bytes = b"") -> tuple[bytes, bytes]:
        proc, replies = self._proc, self._replies
        if proc is None or proc.stdin is None or replies is None:
            raise ToolsChannelUnavailable("tools channel released")
        number = replies.next_number()
        try:
            _write(proc.stdin, op, data, number)  # type: ignore[arg-type]
        except (BrokenPipeError, OSError):
            self._gone()
        try:
            reply = replies.wait(number, REPLY_TIMEOUT_S)
        except (EOFError, OSError):
            reply = None
        if reply is None:
            self._gone()
        assert reply is not None
        rop, rdata = reply
        if rop == b"E":
            kind, _, text = rdata.decode("utf-8", "replace").partition(":")
            if kind == "ToolsChannelBusy":
                raise ToolsChannelBusy(int(text))
            raise _ERRORS.get(kind, TransportError)(text)
        return rop, rdata

    def _gone(self) -> None:
        """The helper died (a SIGBUS of its own, most likely: the segment shrank) or stopped answering."""
        proc = self._proc
        code = None
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = proc.wait(timeout=0.2)
        self.abandon()
        why = "segment shrank" if code is not None and code < 0 else "tools helper stopped answering"
        raise SegmentGone(f"{getattr(self, 'name', '?')}: {why} (tools helper exit {code})")

    # ------------------------------------------------------------ state
    def intact(self) -> bool:
        """Whether the helper lives and the file still backs the tools region (one ``fstat``)."""
        if self._proc is None or self._proc.poll() is not None:
            return False
        if self._fd is None:
            return True
        try:
            return os.fstat(self._fd).st_size >= self._need
        except OSError:
            return False

    def cpu_s(self) -> float:
        """CPU seconds the helper used so far (its last reading once stopped): part of the monitor's cost."""
        if self._proc is not None:
            self._cpu = max(self._cpu, process_cpu_s(self._proc.pid))
        return self._cpu

    @property
    def owner_pid(self) -> int:
        """Current value of the owner word (0 once released)."""
        if self._proc is None:
            return 0
        return int(self._call(b"O")[1] or b"0")

    @property
    def claimed(self) -> bool:
        return self._claimed

    # ------------------------------------------------------------ release
    def release(self) -> None:
        """Give the channel back (the helper swaps ``pid -> 0`` if the file still backs it) and stop it. Idempotent."""
        proc = self._proc
        if proc is not None and proc.poll() is None and self._claimed:
            with contextlib.suppress(LuckyMonitorError, ValueError):
                self._call(b"R")
        self._stop()

    def abandon(self) -> None:
        """Stop the helper without another touch of the segment. Idempotent."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()  # not a release: the segment is known gone
        self._stop()

    def _stop(self) -> None:
        self._claimed = False
        self.cpu_s()
        proc, self._proc = self._proc, None
        if proc is not None:
            _end_helper(proc, timeout=5)
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> ToolsAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = f"held by pid {self.pid}" if self._claimed else "released"
        return f"<ToolsAgent {getattr(self, 'name', '?')!r} {state}>"


#: The helper's command line: import this copy of the package, then serve.
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from lucky_monitor.transport.tools_agent import _serve; raise SystemExit(_serve(sys.argv[1:]))"
)


def _root() -> str:
    """The directory holding the ``lucky_monitor`` package (so the helper imports this copy)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def claim_tools(seg: Segment, *, pid: int | None = None, allow_other_user: bool | None = None) -> Any:
    """Claim the tools channel of ``seg``: through a helper process where the segment is a file that can shrink.

    Returns a :class:`ToolsAgent` on Linux (``/dev/shm``), else an in-process
    :class:`~lucky_monitor.transport.tools.ToolsChannel`; both raise as
    :meth:`ToolsAgent.claim`.
    """
    if platform_kind() == "dir":
        return ToolsAgent.claim(seg, pid=pid, allow_other_user=allow_other_user)
    from .tools import ToolsChannel

    return ToolsChannel.claim(seg, pid=pid, allow_other_user=allow_other_user)


# ---------------------------------------------------------------------------- the helper


def _serve(argv: list[str]) -> int:
    """The helper's loop: attach, check it is the monitor's segment, claim, answer until end-of-file."""
    from .tools import ToolsChannel

    name, ino, dev, sid, pid, allow = argv
    # The monitor ends this helper by closing its stdin. A Ctrl-C in the terminal reaches the whole
    # process group: the monitor then still needs the channel to restore what it changed (check --live).
    with contextlib.suppress(AttributeError, ValueError, OSError):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = sys.stdout.buffer
    infd = sys.stdin.fileno()
    chan: ToolsChannel | None = None

    number = 0  # of the request being answered

    def reply(op: bytes, data: bytes = b"") -> None:
        _write(out, op, data, number)

    def error(exc: BaseException) -> None:
        kind = type(exc).__name__
        text = str(exc.pid) if isinstance(exc, ToolsChannelBusy) else str(exc)
        reply(b"E", f"{kind}:{text}".encode())

    try:
        while True:
            frame = _read_frame(infd)
            if frame is None:
                break  # the monitor is gone: release below
            op, number, data = frame
            try:
                if op == b"C":
                    seg = Segment.attach(name, allow_other_user=allow == "1")
                    if (seg.inode, seg._dev, seg.session_id) != (int(ino), int(dev), int(sid)):
                        seg.close()
                        raise SegmentGone(f"{name}: segment recreated since attach")
                    chan = ToolsChannel.claim(seg, pid=int(pid))
                    seg.close()  # the channel keeps its own descriptor and mapping
                    reply(b"K")
                    continue
                if chan is None:
                    raise ToolsChannelUnavailable("tools channel not claimed")
                if not chan.intact():  # never touch a mapping the file no longer backs
                    raise SegmentGone(f"{name}: segment shrank")
                if op == b"P":
                    # One producer on tools c2s (LAYOUT 12): a channel whose owner word no longer holds this
                    # monitor's pid was taken, and is not written to (it had been, beside the taker's writes).
                    owner = chan.owner_pid
                    if owner != chan.pid:
                        raise ToolsChannelBusy(owner)
                    chan.c2s.push(data)
                    reply(b"K")
                elif op == b"G":
                    raw = chan.s2c.pop()
                    if raw is None:
                        reply(b"N")
                    else:
                        reply(b"K", raw)
                elif op == b"O":
                    reply(b"K", str(chan.owner_pid).encode())
                elif op == b"R":
                    chan.release()
                    chan = None
                    reply(b"K")
                    return 0
                else:
                    raise ValueError(f"unknown request {op!r}")
            except (LuckyMonitorError, ValueError, OSError) as exc:
                error(exc)
    except BrokenPipeError:
        pass
    finally:
        if chan is not None:
            if chan.intact():
                chan.release()
            else:
                chan.abandon()
    return 0
