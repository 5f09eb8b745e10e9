"""Downscale the image region in a helper process that maps the segment, so a shrink can only kill the helper.

Theory of operation
-------------------
The monitor never loads from a mapping of the segment (a file truncated under
a load is a ``SIGBUS`` that kills the process); it copies through ``pread``.
For one case that costs too much: the overview of thousands of small tiles
shown smaller than their pixels. Downscaling reads only the few rows and
columns it samples (at 4096 envs of 64x64 RGB shown 12 times smaller, about a
fifth of the 50 MB region), but ``pread`` can only copy contiguous ranges,
so it must copy all 50 MB: measured on the 2-core development machine, a
chunked ``pread`` plus the same sampling cost 5.8 ms against 3.0 ms for
sampling straight from a mapping; ``preadv`` with the unsampled rows sent
to one small sink buffer (98k iovecs) cost 10.4 ms; ``process_vm_readv`` on
the mapping (which returns ``EFAULT`` rather than faulting) 45 ms.

So :class:`ImageSampler` starts a helper process (a fresh interpreter) that
attaches to the same segment (same inode and ``session_id``, checked), maps
it read-only, and on each request runs the sampling function over the
requested env ranges of the mapped image region, writing the result into a
buffer the monitor created (a ``memfd``, shared with the helper and never
truncated by anyone else). The monitor reads the result from its own mapping
of that buffer. If the segment shrinks while the helper samples, the helper
dies of ``SIGBUS`` alone and the monitor reports ``SegmentGone`` ("segment
shrank"), as for a short ``pread``.

The monitor never waits for the helper. :meth:`ImageSampler.submit` sends a
request and returns; the helper samples on another core, under the image
seqlock itself (it reads ``image_seq`` before and after, retries a torn
sample, and reports the even ``image_seq`` and the ``image_frame_seq`` the
result belongs to, or that it found none consistent); the monitor picks the
answer up with :meth:`ImageSampler.result` at a later poll, usually the next
one (one poll of latency for the 3 ms the sampling of 4096 envs takes, which
the monitor's tick no longer waits for). One request is in flight at a time.
Where there is no ``memfd`` or ``/dev/shm`` file (macOS, Windows)
:func:`ImageSampler.start` returns ``None`` and the caller samples from
``pread`` copies in-process.
"""

from __future__ import annotations

import contextlib
import importlib
import mmap
import os
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..protocol.errors import LuckyMonitorError, SegmentGone
from ..protocol.seqlock import seqlock_read
from .shm import Segment, platform_kind
from .tools_agent import _end_helper, _read_frame, _Replies, _root, _write, process_cpu_s

__all__ = ["ImageSampler", "Sampled"]

#: Seconds the monitor waits for one answer before it gives up on the helper (kills it).
REPLY_TIMEOUT_S = 5.0
_REQ = struct.Struct("<IIII")  # flip, out height, out width, number of env ranges
_SPAN = struct.Struct("<II")
_ANSWER = struct.Struct("<BqqI")  # consistent, image_seq, image_frame_seq, torn attempts

_BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from lucky_monitor.transport.sampler import _serve; raise SystemExit(_serve(sys.argv[1:]))"
)


@dataclass(frozen=True)
class Sampled:
    """The helper's answer to one request (see :meth:`ImageSampler.result`).

    Attributes
    ----------
    ok
        The sample is consistent: taken wholly between two reads of the same even ``image_seq``.
    seq
        That ``image_seq`` (valid when ``ok``).
    frame_seq
        ``image_frame_seq`` read under the same seqlock (valid when ``ok``).
    torn
        Attempts the helper discarded because the engine wrote the images meanwhile.
    images
        The result, a view of the shared buffer valid until the next :meth:`ImageSampler.submit`.
    """

    ok: bool
    seq: int
    frame_seq: int
    torn: int
    images: np.ndarray


class ImageSampler:
    """A helper process that downscales the image region of one attached segment (see the module docstring).

    Use :meth:`start`; per frame :meth:`submit`, then :meth:`result` at later polls until it
    answers; :meth:`close` when detaching.
    """

    def __init__(self, seg: Segment, proc: subprocess.Popen[bytes], out_fd: int, out_size: int) -> None:
        self.name = seg.name
        self._proc: subprocess.Popen[bytes] | None = proc
        self._out_fd = out_fd
        self._out_mm = mmap.mmap(out_fd, out_size)
        self._out_size = out_size
        self._ready = False
        self._cpu = 0.0
        assert proc.stdout is not None
        self._replies = _Replies(proc.stdout.fileno())
        self._hello = 0  # the number of the request answered once the helper has attached
        # The request in flight: its number, the result's shape, when it was sent.
        self._pending: tuple[int, tuple[int, int, int, int], float] | None = None

    @classmethod
    def start(cls, seg: Segment, function: str, max_out_bytes: int) -> ImageSampler | None:
        """Start the helper for ``seg``; ``None`` where this platform cannot (no ``memfd``, no ``/dev/shm``).

        Parameters
        ----------
        seg
            The attached segment (it must have an image region).
        function
            ``"module:name"`` of the sampling function the helper imports:
            ``f(images, out_height, out_width) -> array`` over a
            ``(k, h, w, c)`` block of the mapped images.
        max_out_bytes
            Size of the result buffer (the largest result asked for).
        """
        if platform_kind() != "dir" or not hasattr(os, "memfd_create") or seg.header.image_offset == 0:
            return None
        out_fd = os.memfd_create("lucky-monitor-sampled", getattr(os, "MFD_CLOEXEC", 0))
        try:
            size = max(mmap.PAGESIZE, max_out_bytes)
            os.ftruncate(out_fd, size)
            h = seg.header
            args = [seg.name, str(seg.inode), str(seg._dev), str(h.session_id), function, str(out_fd)]
            args.append("1" if seg.allow_other_user else "0")
            proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, _root(), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                pass_fds=(out_fd,),
            )
            sampler = cls(seg, proc, out_fd, size)
        except BaseException:
            os.close(out_fd)
            raise
        try:
            sampler._hello = sampler._replies.next_number()
            _write(proc.stdin, b"H", b"", sampler._hello)  # type: ignore[arg-type]  # answered once attached
        except BaseException:
            sampler.close()
            raise
        return sampler

    def ready(self) -> bool:
        """Whether the helper has attached (never waits: the caller samples in-process until then).

        Raises
        ------
        SegmentGone
            The helper exited instead (the segment is gone or not the one attached).
        """
        if self._ready:
            return True
        if self._proc is None:
            raise SegmentGone(f"{self.name}: image sampler closed")
        try:
            reply = self._replies.wait(self._hello, 0.0)
        except (EOFError, OSError):
            self.close()
            raise SegmentGone(f"{self.name}: the image sampler could not attach") from None
        if reply is None:
            return False
        if reply[0] != b"K":
            self.close()
            raise SegmentGone(f"{self.name}: the image sampler could not attach")
        self._ready = True
        return True

    @property
    def pending(self) -> bool:
        """A request is in flight (sent, not yet answered)."""
        return self._pending is not None

    def _gone(self, why: str | None = None) -> SegmentGone:
        proc = self._proc
        code = None
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = proc.wait(timeout=0.2)
        self.close()
        if why is None:  # died of a signal (SIGBUS: the segment shrank under it), or hung up
            why = "segment shrank" if code is not None and code < 0 else "image sampler stopped answering"
        return SegmentGone(f"{self.name}: {why} (sampler exit {code})")

    def submit(self, spans: list[tuple[int, int]], flip: bool, shape: tuple[int, int, int, int]) -> None:
        """Ask the helper to shrink envs ``spans`` to ``shape[1:3]`` (rows flipped first if ``flip``); never waits.

        The helper samples under the image seqlock; :meth:`result` returns its answer.

        Raises
        ------
        ValueError
            The result would not fit the buffer, or a request is already in flight.
        SegmentGone
            The helper is gone.
        """
        n, th, tw, c = shape
        if n * th * tw * c > self._out_size:
            raise ValueError(f"a result of shape {shape} does not fit the {self._out_size}-byte buffer")
        if self._pending is not None:
            raise ValueError("a sampling request is already in flight")
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise SegmentGone(f"{self.name}: image sampler closed")
        req = _REQ.pack(int(flip), th, tw, len(spans)) + b"".join(_SPAN.pack(a, b) for a, b in spans)
        number = self._replies.next_number()
        try:
            _write(proc.stdin, b"S", req, number)  # type: ignore[arg-type]
        except OSError:
            raise self._gone() from None
        self._pending = (number, shape, time.monotonic())

    def result(self, wait_s: float = 0.0) -> Sampled | None:
        """The answer to the request in flight, if it came within ``wait_s`` seconds; ``None`` otherwise.

        ``None`` too when nothing is in flight.

        Raises
        ------
        SegmentGone
            The helper died (the segment shrank under it), refused (the
            segment is no longer the one attached), or did not answer for
            :data:`REPLY_TIMEOUT_S` (it is stopped).
        """
        pending = self._pending
        if pending is None:
            return None
        if self._proc is None:
            raise SegmentGone(f"{self.name}: image sampler closed")
        number, shape, sent = pending
        try:
            reply = self._replies.wait(number, max(0.0, wait_s))
        except (EOFError, OSError):
            self._pending = None
            raise self._gone() from None
        if reply is None:
            if time.monotonic() - sent > REPLY_TIMEOUT_S:
                self._pending = None
                raise self._gone("image sampler stopped answering")
            return None
        self._pending = None
        op, data = reply
        if op != b"K" or len(data) != _ANSWER.size:
            self.close()
            raise SegmentGone(f"{self.name}: {data.decode('utf-8', 'replace') if op == b'E' else 'bad sampler answer'}")
        ok, seq, frame_seq, torn = _ANSWER.unpack(data)
        n, th, tw, c = shape
        images = np.frombuffer(self._out_mm, np.uint8, n * th * tw * c).reshape(shape)
        return Sampled(bool(ok), seq, frame_seq, torn, images)

    def cpu_s(self) -> float:
        """CPU seconds the helper used so far (its last reading once closed): part of the monitor's cost."""
        if self._proc is not None:
            self._cpu = max(self._cpu, process_cpu_s(self._proc.pid))
        return self._cpu

    def close(self) -> None:
        """Stop the helper and drop the result buffer. Idempotent."""
        self.cpu_s()
        proc, self._proc = self._proc, None
        if proc is not None:
            _end_helper(proc, timeout=2)
        if self._out_fd >= 0:
            with contextlib.suppress(BufferError):
                self._out_mm.close()
            os.close(self._out_fd)
            self._out_fd = -1


def _serve(argv: list[str]) -> int:
    """The helper: attach read-only, check it is the monitor's segment, sample on request until end-of-file."""
    name, ino, dev, sid, function, out_fd, allow = argv
    out = sys.stdout.buffer
    infd = sys.stdin.fileno()
    module, _, attr = function.partition(":")
    fn: Any = getattr(importlib.import_module(module), attr)
    seg = Segment.attach(name, allow_other_user=allow == "1")
    if (seg.inode, seg._dev, seg.session_id) != (int(ino), int(dev), int(sid)) or seg.images is None:
        return 3  # not the monitor's segment: the monitor reads end-of-file and reports it gone
    images = seg.images
    fd = int(out_fd)
    out_mm = mmap.mmap(fd, os.fstat(fd).st_size)
    need = seg.header.segment_size or seg.size
    while True:
        frame = _read_frame(infd)
        if frame is None:
            return 0
        op, number, data = frame
        if op == b"H":
            _write(out, b"K", b"", number)
            continue
        flip, th, tw, count = _REQ.unpack_from(data)
        c = images.shape[3]
        result = np.frombuffer(out_mm, np.uint8, images.shape[0] * th * tw * c).reshape(-1, th, tw, c)
        spans = [_SPAN.unpack_from(data, _REQ.size + i * _SPAN.size) for i in range(count)]
        try:
            if os.fstat(seg._fd).st_size < need:  # type: ignore[arg-type]
                raise SegmentGone("segment shrank")
            answer = _sample_consistent(seg, images, result, fn, spans, bool(flip))
        except LuckyMonitorError as exc:  # a short read of the header: the segment shrank
            _write(out, b"E", str(exc).encode(), number)
            continue
        _write(out, b"K", answer, number)


def _sample_consistent(
    seg: Segment, images: np.ndarray, result: np.ndarray, fn: Any, spans: list[tuple[int, int]], flip: bool
) -> bytes:
    """Sample ``spans`` of the mapped ``images`` into ``result`` under the image seqlock; the packed answer."""
    th, tw = result.shape[1], result.shape[2]
    got = [0]

    def sample() -> None:
        for a, b in spans:
            block = images[a:b, ::-1] if flip else images[a:b]
            result[a:b] = fn(block, th, tw)
        got[0] = seg.read_counter("image_frame_seq")

    r = seqlock_read(lambda: seg.read_counter("image_seq"), sample)
    return _ANSWER.pack(r.ok, r.seq, got[0], r.torn)
