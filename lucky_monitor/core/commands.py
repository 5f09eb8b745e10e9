"""Requests from the monitor to the engine over the tools channel.

The monitor never writes into the main rings (they have exactly one producer
each). It claims the tools channel (:class:`~lucky_monitor.transport.tools.ToolsChannel`),
pushes request envelopes on its c2s ring and reads responses from its s2c
ring, matching them by ``correlation_id``. :meth:`CommandClient.poll` is
non-blocking and cheap enough for the 60 Hz timer; :meth:`CommandClient.request`
blocks (CLI use) with a timeout.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..protocol.envelope import Envelope, decode, encode
from ..protocol.errors import CommandTimeout, EnvelopeError, RemoteError, RingCorrupt, SegmentGone
from ..protocol.messages import MethodId, method_name

if TYPE_CHECKING:
    from ..transport.tools import ToolsChannel
    from ..transport.tools_agent import ToolsAgent


@dataclass(frozen=True)
class Reply:
    """The outcome of one request.

    ``response`` is ``None`` when the request timed out or the reply could not
    be decoded; ``error`` then says why. ``rtt_s`` is the time from push to
    the poll that found the reply.
    """

    request_method: int
    correlation_id: int
    response: Envelope | None
    rtt_s: float
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None


class CommandClient:
    """Correlated request/response over a claimed tools channel.

    Parameters
    ----------
    channel
        A claimed ``ToolsChannel`` or ``ToolsAgent`` (``c2s`` writer, ``s2c`` reader).
    timeout_s
        Pending requests older than this are reported as timed out.
    """

    def __init__(
        self,
        channel: ToolsChannel | ToolsAgent,
        *,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.channel = channel
        self.timeout_s = timeout_s
        self.clock = clock
        # High 16 bits: our pid, so ids of two monitors never collide in a traffic log.
        self._next_id = ((os.getpid() & 0xFFFF) << 32) | 1
        self._pending: dict[int, tuple[int, float]] = {}
        self._next_idle_poll = -math.inf
        self.corrupt_events = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def send(self, method: MethodId | int, payload: object | None = None) -> int:
        """Encode and push one request; return its correlation id.

        Raises ``RingFull`` / ``MessageTooLarge`` from the ring; nothing is
        half-written.
        """
        cid = self._next_id
        self._next_id += 1
        # sent_ns: the engine's heartbeat clock (CLOCK_MONOTONIC / QPC) at the push.
        data = encode(Envelope(method=method, correlation_id=cid, payload=payload, sent_ns=time.monotonic_ns()))
        self.channel.c2s.push(data)
        self._pending[cid] = (int(method), self.clock())
        return cid

    def next_id(self) -> int:
        """Take a fresh correlation id (for a caller that encodes its own envelopes)."""
        cid = self._next_id
        self._next_id += 1
        return cid

    def push_raw(self, data: bytes) -> None:
        """Push ``data`` as one tools c2s entry, as is: any bytes, a valid envelope or not.

        For the live conformance probe, which also sends what no requester
        should (an undecodable envelope). Nothing is tracked as pending.

        Raises
        ------
        SegmentGone
            The file no longer backs the tools mapping (nothing is touched).
        RingFull, MessageTooLarge
            From the ring; nothing is half-written.
        """
        if not self.channel.intact():
            raise SegmentGone("segment shrank or is gone: the tools channel cannot be used")
        self.channel.c2s.push(data)

    def drain_raw(self) -> list[bytes | RingCorrupt]:
        """Every entry on the tools s2c ring now, undecoded, in order; a corrupt ring as its error.

        For a caller that matches replies itself; it bypasses :meth:`poll`
        (which keeps only the replies to pending requests).

        Raises
        ------
        SegmentGone
            The file no longer backs the tools mapping (nothing is touched).
        """
        out: list[bytes | RingCorrupt] = []
        for _ in range(4096):  # bounded: a ring of at most 2**30 bytes holds fewer 8-byte entries per drain
            if not self.channel.intact():
                raise SegmentGone("segment shrank or is gone: the tools channel cannot be used")
            try:
                raw = self.channel.s2c.pop()
            except RingCorrupt as exc:
                self.corrupt_events += 1
                out.append(exc)
                continue
            if raw is None:
                break
            out.append(bytes(raw))
        return out

    #: With no request in flight, look at the reply ring this often (a reply nobody waits for is
    #: only logged; through a :class:`~lucky_monitor.transport.tools_agent.ToolsAgent` each look
    #: is a pipe round trip).
    IDLE_POLL_S = 0.25

    def poll(self) -> list[Reply]:
        """Collect every reply that has arrived and every request that timed out."""
        now = self.clock()
        out: list[Reply] = []
        if not self._pending and now < self._next_idle_poll:
            return out
        self._next_idle_poll = now + self.IDLE_POLL_S
        while True:
            try:
                raw = self.channel.s2c.pop()
            except RingCorrupt as exc:
                self.corrupt_events += 1
                out.append(Reply(-1, 0, None, 0.0, f"response ring corrupt: {exc}"))
                continue
            if raw is None:
                break
            try:
                env = decode(raw)
            except EnvelopeError as exc:
                self.corrupt_events += 1
                out.append(Reply(-1, 0, None, 0.0, f"undecodable response: {exc}"))
                continue
            sent = self._pending.pop(env.correlation_id, None)
            if sent is None:
                continue  # a reply to a request we already timed out
            # Timed when it is in hand: one that arrived after `now` was read (during this drain) is not a
            # round trip of almost nothing.
            rtt = max(now, self.clock()) - sent[1]
            out.append(Reply(sent[0], env.correlation_id, env, rtt, env.error_message or None))
        for cid, (method, t0) in list(self._pending.items()):
            if now - t0 > self.timeout_s:
                del self._pending[cid]
                out.append(Reply(method, cid, None, now - t0, f"no reply within {self.timeout_s:g} s"))
        return out

    def request(
        self, method: MethodId | int, payload: object | None = None, *, timeout_s: float | None = None
    ) -> tuple[Envelope, float]:
        """Send and wait for the reply; return ``(response, rtt_s)``.

        Raises
        ------
        CommandTimeout
            No reply in time (the engine is stopped, or not serving tools).
        RemoteError
            The engine answered with an error envelope.
        """
        timeout = self.timeout_s if timeout_s is None else timeout_s
        cid = self.send(method, payload)
        deadline = self.clock() + timeout
        while True:
            for r in self.poll():
                if r.correlation_id == cid:
                    if r.response is None:
                        raise CommandTimeout(f"{method_name(int(method))}: {r.error}")
                    if r.error:
                        raise RemoteError(f"{method_name(int(method))}: engine says: {r.error}")
                    return r.response, r.rtt_s
            if self.clock() > deadline:
                self._pending.pop(cid, None)
                raise CommandTimeout(f"{method_name(int(method))}: no reply within {timeout:g} s")
            time.sleep(0.0005)
