"""Passive log of the command traffic on all four rings.

Four :class:`~lucky_monitor.protocol.ring.RingTap` objects follow the main
pair (trainer ↔ engine) and the tools pair (monitor ↔ engine) on the
read-only mapping: they keep their own cursors and never move a
``read_pos``. Each entry is decoded only as far as the envelope's method,
correlation id, error text and ``sent_ns`` stamp
(:func:`~lucky_monitor.protocol.envelope.peek`).

Latency. A request and its response are matched by ``(pair,
correlation_id)``; the response's latency is ``response.sent_ns −
request.sent_ns``: both stamps come from the producers' monotonic clock (the
``heartbeat_ns`` clock) at push time, so the figure is exact whatever the
poll rate. When either stamp is 0 (a producer that does not stamp), or the
request was never seen (the tap started after it, or missed it), the latency
is unknown: ``None``, with the reason in :attr:`TrafficEntry.unknown_latency`.
It is never replaced by the time between two polls.

Problems are counted as they happen, per ring, in :attr:`TrafficLog.stats`,
whether or not a valid message arrived in the same poll: bytes the tap
missed (lapped, or not provably intact), ring corruption (also logged as an
error row, so it shows in the table), and envelopes that do not decode.
:attr:`TrafficLog.version` changes whenever an entry or a count changes.

Work per poll is bounded (``max_per_ring`` entries per ring).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..protocol.envelope import peek
from ..protocol.errors import EnvelopeError
from ..protocol.messages import PUSH_METHODS, is_request, method_name
from ..protocol.ring import RingTap
from .text import safe_text

__all__ = ["CORRUPT_METHOD", "DIRECTIONS", "TapStats", "TrafficEntry", "TrafficLog"]

DIRECTIONS = {
    ("main", "c2s"): "trainer → engine",
    ("main", "s2c"): "engine → trainer",
    ("tools", "c2s"): "monitor → engine",
    ("tools", "s2c"): "engine → monitor",
}

#: ``method`` of the row logged for a ring-corruption event (not an envelope).
CORRUPT_METHOD = "(ring corrupt)"

_UNSTAMPED_RESPONSE = "response not stamped (sent_ns = 0)"
_UNSTAMPED_REQUEST = "request not stamped (sent_ns = 0)"
_UNSEEN_REQUEST = "request not seen by the tap"
_REVERSED = "response stamped before its request"


@dataclass(frozen=True)
class TrafficEntry:
    """One envelope (or one ring-corruption event) seen on a ring.

    Attributes
    ----------
    t : float
        The log's clock when the poll saw it (seconds).
    pair : str
        ``"main"`` or ``"tools"``.
    direction : str
        ``"c2s"`` or ``"s2c"``.
    method : str
        Schema name of the method, ``"?"`` when undecodable,
        :data:`CORRUPT_METHOD` for a corruption event.
    correlation_id : int
        The envelope's correlation id (0 when undecodable).
    size : int
        Payload bytes (for a corruption event: the bytes skipped).
    error : str or None
        The envelope's error text, or why it could not be read: plain text,
        bounded and escaped by :func:`~lucky_monitor.core.text.safe_text`.
    latency_s : float or None
        On a response: ``response.sent_ns − request.sent_ns`` in seconds;
        ``None`` when not a response or unknown.
    sent_ns : int
        The producer's push time (``heartbeat_ns`` clock); 0 = not stamped.
    unknown_latency : str or None
        On a response whose latency is unknown: why. ``None`` otherwise.
    """

    t: float
    pair: str
    direction: str
    method: str
    correlation_id: int
    size: int
    error: str | None
    latency_s: float | None
    sent_ns: int = 0
    unknown_latency: str | None = None

    @property
    def arrow(self) -> str:
        """Who sent it to whom, e.g. ``"engine → monitor"``."""
        return DIRECTIONS[(self.pair, self.direction)]


@dataclass
class TapStats:
    """Counters of one ring's tap, updated by every :meth:`TrafficLog.poll`.

    Attributes
    ----------
    messages : int
        Ring entries delivered (decodable or not).
    missed_bytes : int
        Ring bytes skipped: overwritten before the tap read them, not provably
        intact, or after a corrupt entry.
    corrupt : int
        Ring-corruption events (the tap resynchronised).
    undecodable : int
        Entries whose envelope did not decode.
    last_problem : str or None
        The latest of the above, in words.
    """

    messages: int = 0
    missed_bytes: int = 0
    corrupt: int = 0
    undecodable: int = 0
    last_problem: str | None = None


class TrafficLog:
    """Tap every ring of a segment and keep the newest ``capacity`` entries.

    Parameters
    ----------
    segment
        An attached read-only segment: its rings are read through
        ``segment.ring_source`` (``pread``, never the mapping; a read that
        comes back short raises ``SegmentGone`` from :meth:`poll`). An object
        with only ``header`` and ``buf`` is tapped through ``buf``.
    capacity : int
        Entries kept.
    max_per_ring : int
        Entries read from one ring per poll, at most.
    clock : callable
        Monotonic seconds, for :attr:`TrafficEntry.t`.
    """

    def __init__(
        self,
        segment: Any,
        *,
        capacity: int = 5000,
        max_per_ring: int = 2000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        h = segment.header
        buf = getattr(segment, "buf", None)
        ring_source = getattr(segment, "ring_source", None)  # an attached Segment: read through its fd

        def tap(offset: int, size: int) -> RingTap:
            if ring_source is not None:
                return RingTap(None, offset, size, source=ring_source(offset, size))
            return RingTap(buf, offset, size)

        self.clock = clock
        self.max_per_ring = max_per_ring
        self.entries: collections.deque[TrafficEntry] = collections.deque(maxlen=capacity)
        self.taps: dict[tuple[str, str], RingTap] = {
            ("main", "c2s"): tap(h.cmd_c2s_offset, h.cmd_ring_size),
            ("main", "s2c"): tap(h.cmd_s2c_offset, h.cmd_ring_size),
        }
        if h.tools_offset:
            self.taps[("tools", "c2s")] = tap(h.tools_c2s_offset, h.tools_ring_size)
            self.taps[("tools", "s2c")] = tap(h.tools_s2c_offset, h.tools_ring_size)
        #: Per ring, keyed like :data:`DIRECTIONS`; readable at any time.
        self.stats: dict[tuple[str, str], TapStats] = {k: TapStats() for k in self.taps}
        self._requests: dict[tuple[str, int], int] = {}  # (pair, correlation id) -> request sent_ns
        #: Entries logged since creation (the deque keeps only the newest).
        self.total = 0
        #: Changes whenever an entry is logged or a counter in :attr:`stats` changes.
        self.version = 0

    def poll(self) -> list[TrafficEntry]:
        """Read what is new on every ring and update :attr:`stats`.

        Returns
        -------
        list of TrafficEntry
            The entries logged by this poll (ring-corruption rows included).
        """
        now = self.clock()
        new: list[TrafficEntry] = []
        changed = False
        for key, tap in self.taps.items():
            res = tap.poll(self.max_per_ring)
            st = self.stats[key]
            if res.missed_bytes and not res.corrupt:
                st.last_problem = f"missed {res.missed_bytes} bytes (overwritten, or not provably intact)"
            st.missed_bytes += res.missed_bytes
            for raw in res.messages:
                new.append(self._entry(now, key, raw, st))
            st.messages += len(res.messages)
            if res.corrupt:
                st.corrupt += 1
                st.last_problem = res.corrupt
                new.append(
                    TrafficEntry(now, key[0], key[1], CORRUPT_METHOD, 0, res.missed_bytes, safe_text(res.corrupt), None)
                )
            changed = changed or bool(res.messages or res.missed_bytes or res.corrupt)
        if len(self._requests) > 10_000:  # responses that never came: forget the oldest
            for k in list(self._requests)[:5000]:
                del self._requests[k]
        self.entries.extend(new)
        self.total += len(new)
        if changed:
            self.version += 1
        return new

    def _entry(self, now: float, key: tuple[str, str], raw: bytes, st: TapStats) -> TrafficEntry:
        pair, direction = key
        try:
            head = peek(raw)
        except EnvelopeError as exc:
            st.undecodable += 1
            st.last_problem = safe_text(f"undecodable envelope: {exc}")
            return TrafficEntry(now, pair, direction, "?", 0, len(raw), safe_text(f"undecodable: {exc}"), None)
        method, cid, sent = head.method, head.correlation_id, head.sent_ns
        latency: float | None = None
        why: str | None = None
        if direction == "c2s":
            self._requests[(pair, cid)] = sent
        elif not is_request(method) and method not in PUSH_METHODS:  # a response
            req = self._requests.pop((pair, cid), None)
            if req is None:
                why = _UNSEEN_REQUEST
            elif not sent:
                why = _UNSTAMPED_RESPONSE
            elif not req:
                why = _UNSTAMPED_REQUEST
            elif sent < req:
                why = _REVERSED
            else:
                latency = (sent - req) / 1e9
        error = safe_text(head.error_message) if head.error_message else None  # the engine's words: bounded, escaped
        return TrafficEntry(
            now, pair, direction, safe_text(method_name(method)), cid, len(raw), error, latency, sent, why
        )

    def filtered(self, text: str = "", entries: Iterable[TrafficEntry] | None = None) -> list[TrafficEntry]:
        """Entries whose method name contains ``text`` (case-insensitive)."""
        src = self.entries if entries is None else entries
        if not text:
            return list(src)
        needle = text.lower()
        return [e for e in src if needle in e.method.lower()]

    def methods(self) -> list[str]:
        """Sorted method names seen in the kept entries."""
        return sorted({e.method for e in self.entries})
