"""Passive log of the command traffic on all four rings.

Four :class:`~lucky_monitor.protocol.ring.RingTap` objects follow the main
pair (trainer ↔ engine) and the tools pair (monitor ↔ engine) on the
read-only mapping: they keep their own cursors and never move a
``read_pos``. Each entry is decoded only as far as the envelope's method,
correlation id and error text; a request and its response are matched by
``(pair, correlation_id)`` to give a latency. Latencies are as seen by a
60 Hz poll, so they are upper bounds with ~17 ms resolution; the monitor's
own requests get exact round-trip times from :mod:`.commands`.

Work per poll is bounded (``max_per_ring`` entries per ring); a tap that
falls more than a ring's capacity behind reports the bytes it missed.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..protocol.envelope import peek_method
from ..protocol.errors import EnvelopeError
from ..protocol.messages import method_name
from ..protocol.ring import RingTap

DIRECTIONS = {
    ("main", "c2s"): "trainer → engine",
    ("main", "s2c"): "engine → trainer",
    ("tools", "c2s"): "monitor → engine",
    ("tools", "s2c"): "engine → monitor",
}


@dataclass(frozen=True)
class TrafficEntry:
    """One envelope seen on a ring."""

    t: float
    pair: str  # "main" or "tools"
    direction: str  # "c2s" or "s2c"
    method: str
    correlation_id: int
    size: int
    error: str | None
    latency_s: float | None  # on a response: time since its request was seen

    @property
    def arrow(self) -> str:
        return DIRECTIONS[(self.pair, self.direction)]


@dataclass
class TapStats:
    messages: int = 0
    missed_bytes: int = 0
    corrupt: int = 0
    last_problem: str | None = None


class TrafficLog:
    """Tap every ring of a segment and keep the newest ``capacity`` entries.

    Parameters
    ----------
    segment
        An attached read-only :class:`~lucky_monitor.transport.shm.Segment`.
    """

    def __init__(self, segment, *, capacity: int = 5000, max_per_ring: int = 2000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        h = segment.header
        buf = segment.buf
        self.clock = clock
        self.max_per_ring = max_per_ring
        self.entries: collections.deque[TrafficEntry] = collections.deque(maxlen=capacity)
        self.taps: dict[tuple[str, str], RingTap] = {
            ("main", "c2s"): RingTap(buf, h.cmd_c2s_offset, h.cmd_ring_size),
            ("main", "s2c"): RingTap(buf, h.cmd_s2c_offset, h.cmd_ring_size),
        }
        if h.tools_offset:
            self.taps[("tools", "c2s")] = RingTap(buf, h.tools_c2s_offset, h.tools_ring_size)
            self.taps[("tools", "s2c")] = RingTap(buf, h.tools_s2c_offset, h.tools_ring_size)
        self.stats = {k: TapStats() for k in self.taps}
        self._requests: dict[tuple[str, int], float] = {}
        self.total = 0

    def poll(self) -> list[TrafficEntry]:
        """Read what is new on every ring; return the new entries."""
        now = self.clock()
        new: list[TrafficEntry] = []
        for key, tap in self.taps.items():
            res = tap.poll(self.max_per_ring)
            st = self.stats[key]
            if res.missed_bytes:
                st.missed_bytes += res.missed_bytes
                st.last_problem = f"lapped: missed {res.missed_bytes} bytes"
            if res.corrupt:
                st.corrupt += 1
                st.last_problem = res.corrupt
            for raw in res.messages:
                new.append(self._entry(now, key, raw))
            st.messages += len(res.messages)
        if len(self._requests) > 10_000:  # responses that never came: forget the oldest
            for k in list(self._requests)[:5000]:
                del self._requests[k]
        self.entries.extend(new)
        self.total += len(new)
        return new

    def _entry(self, now: float, key: tuple[str, str], raw: bytes) -> TrafficEntry:
        pair, direction = key
        try:
            method, cid, err = peek_method(raw)
        except EnvelopeError as exc:
            return TrafficEntry(now, pair, direction, "?", 0, len(raw), f"undecodable: {exc}", None)
        latency = None
        if direction == "c2s":
            self._requests[(pair, cid)] = now
        else:
            t0 = self._requests.pop((pair, cid), None)
            latency = None if t0 is None else now - t0
        return TrafficEntry(now, pair, direction, method_name(method), cid, len(raw), err or None, latency)

    def filtered(self, text: str = "", entries: Iterable[TrafficEntry] | None = None) -> list[TrafficEntry]:
        """Entries whose method name contains ``text`` (case-insensitive)."""
        src = self.entries if entries is None else entries
        if not text:
            return list(src)
        needle = text.lower()
        return [e for e in src if needle in e.method.lower()]

    def methods(self) -> list[str]:
        return sorted({e.method for e in self.entries})
