"""The live conformance probe behind ``lucky-monitor check --live`` (``schema/CONFORMANCE.md``).

Theory of operation
-------------------
The read-only ``check`` (:mod:`.conformance`) looks at a segment; this probe
talks to the engine. It claims the tools channel through a
:class:`~lucky_monitor.core.session.MonitorSession` (so the claim, the busy
answer and the release are the window's own), borrows the session's command
client (:meth:`MonitorSession.lend_commands`) and then, one request at a time:

1. sends every request whose effect is read-only or reversible
   (:data:`REQUESTS`) and attributes whatever arrives on the tools s2c ring
   while it waits (at most ``deadline_s``) to that request: its correlation
   id, or an unknown id (a wrong id) when the request has no reply yet. An
   envelope with the id of a request already answered is a duplicate;
   pushes (method low byte >= 0x80) are only checked for ``sent_ns``;
2. sends an unknown method id and an undecodable envelope, each followed by a
   valid request the engine must still answer;
3. disables a service and sends one of its requests (an error envelope is
   due); disables Camera and Viewport and watches ``image_seq`` stand still,
   re-enables them and watches it move;
4. samples the live header fields and the four ring positions for
   ``seconds`` (about every half millisecond): heartbeat, image seqlock,
   ring positions, turn rule and lock-step progress;
5. restores what it changed (services, simulation mode) and closes the
   session, which releases the channel; then checks that the engine is as it
   was found.

Every step that needs an answer waits at most ``deadline_s``. After two
requests in a row without an answer the engine is taken as not answering:
the remaining requests are not sent and the rules they would feed read
``na`` with the reason, so a silent engine costs about ``2 * deadline_s +
seconds``. :func:`budget_s` is the bound on the whole run.

Each rule judges one thing: a request without an answer fails C37 and leaves
the rules about the answer's content ``na`` for that request; so a
misbehaving engine fails exactly the rule it breaks. The module is Qt-free
and prints nothing.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..protocol import messages as m
from ..protocol.enums import EngineState, Service, SimMode
from ..protocol.envelope import Envelope, decode, encode
from ..protocol.errors import (
    EnvelopeError,
    LuckyMonitorError,
    RingCorrupt,
    ToolsChannelBusy,
    ToolsChannelUnavailable,
    UnavailableError,
)
from ..transport.tools_agent import REPLY_TIMEOUT_S
from .conformance import FAIL, ODD_SHARE_LIMIT, ODD_SHARE_MIN_LOOKS, PASS, RuleResult
from .text import safe_text

if TYPE_CHECKING:
    from ..transport.shm import Segment
    from .commands import CommandClient

__all__ = [
    "HEARTBEAT_MIN_HZ",
    "IMAGE_HOLD_S",
    "LIVE_RULES",
    "NA",
    "ODD_LIMIT_S",
    "TURN_LIMIT_S",
    "budget_s",
    "run_live_probe",
]

NA = "na"

#: (checklist id, rule) of every live rule, in report order (``schema/LAYOUT.md`` §14).
LIVE_RULES: tuple[tuple[str, str], ...] = (
    ("C37", "tools requests answered on tools s2c within the deadline"),
    ("C32", "exactly one response per request, same correlation_id"),
    ("C39", "response method and payload match the request"),
    ("C40", "sent_ns stamped and non-decreasing"),
    ("C41", "unknown method id: error envelope echoing it, engine answers on"),
    ("C42", "undecodable request: no answer or an error envelope, engine answers on"),
    ("C34", "disabled service answers with an error envelope"),
    ("C35", "Camera and Viewport disabled stop image_seq, enabled resume it"),
    ("C25", "heartbeat refreshed >= 10 Hz and non-decreasing"),
    ("C23", "image_seq seqlock discipline, image_frame_seq <= frame_seq + 1"),
    ("C26", "ring positions multiples of 8, used <= cap - 8"),
    ("C7", "non-live header fields unchanged while probed"),
    ("C20", "turn rule with a trainer attached"),
    ("C43", "frame_seq advances by 1 on each trainer step"),
    ("C44", "engine left as found, tools channel released"),
)

#: Samples between two looks at the non-live header fields (C7): about every 10 ms.
FIXED_EVERY = 20
#: Seconds between two such looks while the probe waits inside a step (for an answer, for images to stop
#: with Camera off): a field rewritten for a second there had been seen by no look at all.
FIXED_LOOK_S = 0.01
#: A heartbeat refreshed less often than this fails C25 (LAYOUT §8.3).
HEARTBEAT_MIN_HZ = 10.0
#: ... and so does one that stands still for longer than this (probe clock).
HEARTBEAT_GAP_S = 1.0
#: ``image_seq`` odd for longer than this fails C23 (a writer stuck mid-publish).
ODD_LIMIT_S = 1.0
#: How long ``image_seq`` must stand still with Camera and Viewport disabled (C35).
IMAGE_HOLD_S = 1.0
#: The engine's turn (``action_seq == frame_seq``) must end within this (C43).
TURN_LIMIT_S = 1.0
#: After an undecodable request, how long the probe listens before the next request (C42).
QUIET_S = 0.3
#: The sampling period of the timed invariants.
SAMPLE_S = 0.0005
#: The unknown method id the probe sends (no group 0x7F exists; odd low byte: a request).
UNKNOWN_METHOD = 0x7F01
#: Bytes that are no envelope (the root offset points far outside them).
MALFORMED = b"\xf0\xff\xff\x7f" + b"\x00" * 12
#: A rule's detail is cut to this many characters (it may quote the engine's error messages).
DETAIL_MAX = 600
#: Requests that may wait on the deadline, at most: the plan sends 32 (13 requests, 3 around the
#: bad ones, 3 for a disabled service, 4 for Camera/Viewport, up to 9 to restore); a request past
#: this count is not sent, so the bound below holds by construction.
MAX_EXCHANGES = 40


#: How long the claim may wait on top of the deadline for the process that holds the tools channel to
#: start (a Python interpreter and its imports: seconds on a machine the engine, a trainer and a test
#: run keep busy). The helper's own limit to answer.
CLAIM_START_S = REPLY_TIMEOUT_S


def budget_s(seconds: float, deadline_s: float) -> float:
    """The bound on one probe's wall time (seconds).

    Every exchange at its deadline, the quiet window after the undecodable
    envelope, the Camera/Viewport hold, the claim wait and the two image
    waits (before disabling, after enabling; each at most ``max(deadline_s,
    2)``), the start of the tools helper process (:data:`CLAIM_START_S`), the
    timed window, and 1 s for the rest.
    """
    fixed = QUIET_S + IMAGE_HOLD_S + 3 * max(deadline_s, 2.0) + CLAIM_START_S + 1.0
    return seconds + MAX_EXCHANGES * deadline_s + fixed


# ---------------------------------------------------------------------------
# Exchanges
# ---------------------------------------------------------------------------


@dataclass
class Exchange:
    """One request the probe sent and what came back for it."""

    label: str
    method: int
    cid: int | None  # None: an undecodable envelope (no id to answer)
    sent_ns: int = 0
    replies: list[Envelope] = field(default_factory=list)
    wrong_ids: list[int] = field(default_factory=list)
    undecodable: list[str] = field(default_factory=list)
    duplicates: int = 0
    late: int = 0  # replies that came after the deadline (they do not make it answered)
    wait_s: float = 0.0
    timed_out: bool = False
    sent: bool = True  # False: not sent, the engine had stopped answering

    @property
    def answered(self) -> bool:
        return bool(self.replies or self.undecodable)

    @property
    def reply(self) -> Envelope | None:
        return self.replies[0] if self.replies else None


def _is_push(method: int) -> bool:
    return method != 0 and (method & 0xFF) >= 0x80 and method in m.PUSH_METHODS


class _Talker:
    """Sends requests one at a time over the borrowed client and attributes every reply."""

    def __init__(self, client: CommandClient, deadline_s: float, clock: Callable[[], float]) -> None:
        self.client = client
        self.deadline_s = deadline_s
        self.clock = clock
        self.exchanges: list[Exchange] = []
        self.by_cid: dict[int, Exchange] = {}
        self.current: Exchange | None = None
        self.strays: list[str] = []  # replies no request claims (outside any window)
        self.stamps: list[tuple[str, int]] = []  # (what, sent_ns) of every envelope, in arrival order
        self.corrupt: list[str] = []
        self.silent_in_a_row = 0
        self.gone: str | None = None  # why no request is sent any more
        #: Called while waiting for an answer (the probe looks at the non-live header fields there, C7).
        self.while_waiting: Callable[[], None] = lambda: None

    # ------------------------------------------------------------ receiving
    def _receive(self, item: bytes | RingCorrupt) -> None:
        cur = self.current
        if isinstance(item, RingCorrupt):
            self.corrupt.append(str(item))
            if cur is not None:
                cur.undecodable.append(f"tools s2c ring corrupt: {item}")
            return
        try:
            env = decode(item)
        except EnvelopeError as exc:
            if cur is not None:
                cur.undecodable.append(str(exc))
            else:
                self.strays.append(f"undecodable: {exc}")
            return
        method = int(env.method)
        what = f"{m.method_name(method)} (correlation_id 0x{env.correlation_id:X})"
        self.stamps.append((what, env.sent_ns))
        if _is_push(method):
            return
        target = self.by_cid.get(env.correlation_id)
        if target is not None:
            if target.timed_out:
                target.late += 1
            elif target.answered:
                target.duplicates += 1
            else:
                target.replies.append(env)
        elif cur is not None and not cur.answered:
            cur.replies.append(env)
            if cur.cid is not None:
                cur.wrong_ids.append(env.correlation_id)
        elif cur is not None and cur.cid is None:
            cur.replies.append(env)
        else:
            self.strays.append(what)

    def drain(self) -> None:
        for item in self.client.drain_raw():
            self._receive(item)

    # ------------------------------------------------------------ sending
    def send(self, label: str, method: int, payload: object | None = None) -> Exchange:
        """Send one request and wait (at most the deadline) for its reply."""
        ex = Exchange(label, method, None)
        self.exchanges.append(ex)
        if self.gone is None and len(self.exchanges) > MAX_EXCHANGES:
            self.gone = f"not sent: over the probe's {MAX_EXCHANGES} requests"
        if self.gone is not None:
            ex.sent = False
            return ex
        self.drain()  # late replies and duplicates belong to earlier requests
        ex.cid = self.client.next_id()
        ex.sent_ns = time.monotonic_ns()
        self.by_cid[ex.cid] = ex
        self.client.push_raw(encode(Envelope(method, ex.cid, payload, "", ex.sent_ns)))
        self._wait(ex, self.deadline_s, until_answered=True)
        if ex.answered:
            self.silent_in_a_row = 0
        else:
            ex.timed_out = True
            self.silent_in_a_row += 1
            if self.silent_in_a_row >= 2:
                self.gone = f"not sent: the engine answered none of the last {self.silent_in_a_row} requests"
        return ex

    def send_bytes(self, label: str, data: bytes, listen_s: float) -> Exchange:
        """Push ``data`` as is (no correlation id) and listen for ``listen_s``."""
        ex = Exchange(label, 0, None)
        self.exchanges.append(ex)
        if self.gone is not None:
            ex.sent = False
            return ex
        self.drain()
        self.client.push_raw(data)
        self._wait(ex, listen_s, until_answered=False)
        return ex

    def _wait(self, ex: Exchange, limit_s: float, *, until_answered: bool) -> None:
        t0 = self.clock()
        self.current = ex
        try:
            while True:
                self.drain()
                now = self.clock()
                if until_answered and ex.answered:
                    break
                if now - t0 >= limit_s:
                    break
                self.while_waiting()
                time.sleep(0.0005)
        finally:
            self.current = None
            ex.wait_s = self.clock() - t0


# ---------------------------------------------------------------------------
# The probe
# ---------------------------------------------------------------------------


@dataclass
class _Samples:
    """What the timed window saw (step 4)."""

    window_s: float = 0.0
    samples: int = 0
    states: set[int] = field(default_factory=set)
    hb_changes: int = 0
    hb_longest_s: float = 0.0
    hb_problem: str = ""
    img: str = ""
    img_publishes: int = 0
    img_looks: int = 0  # samples that read image_seq, and those that found it odd
    img_odd: int = 0
    rings: dict[str, str] = field(default_factory=dict)
    ring_max_used: dict[str, int] = field(default_factory=dict)
    turn_problem: str = ""
    turn_checked: int = 0
    steps_seen: int = 0
    step_problem: str = ""
    longest_turn_s: float = 0.0


class LiveProbe:
    """One run of the live probe on an attached segment and a borrowed command client.

    Use :func:`run_live_probe`; this class holds the state between steps.
    """

    def __init__(
        self,
        seg: Segment,
        client: CommandClient,
        *,
        seconds: float,
        deadline_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.seg = seg
        self.h = seg.header
        self.t = _Talker(client, deadline_s, clock)
        self.t.while_waiting = self.look_fixed
        self.seconds = seconds
        self.deadline_s = deadline_s
        self.clock = clock
        self.found_services = seg.read_counter("services_enabled")
        self.found_sim = seg.read_counter("sim_mode")
        self.requests: list[Exchange] = []
        self.unknown: tuple[Exchange, Exchange] | None = None
        self.malformed: tuple[Exchange, Exchange] | None = None
        self.disabled: tuple[str, str] = (NA, "")
        self.images: tuple[str, str] = (NA, "")
        self.samples = _Samples()
        self.restore_problems: list[str] = []
        self.fixed_problem: str | None = None  # the first non-live header field seen changed (C7)
        self.fixed_looks = 0
        self._fixed_at = -math.inf  # when look_fixed last looked (probe clock)
        # The last SetServiceEnabled sent per service bit: (on, exchange). Ctrl-C can land after a
        # request was pushed and before the engine applied it; restore() must not trust the live mask then.
        self.last_set: dict[int, tuple[bool, Exchange]] = {}

    # ------------------------------------------------------------ helpers
    def check_fixed(self) -> None:
        """Compare the non-live header fields with the attach's (one 4 KiB ``pread``); keep the first change."""
        self.fixed_looks += 1
        if self.fixed_problem is None:
            changed = self.seg.fixed_fields_changed()
            if changed is not None:
                self.fixed_problem = changed.replace("while attached", "while probed")

    def look_fixed(self) -> None:
        """:meth:`check_fixed` at most every :data:`FIXED_LOOK_S`: for the probe's waits."""
        now = self.clock()
        if now - self._fixed_at >= FIXED_LOOK_S:
            self._fixed_at = now
            self.check_fixed()

    def _available(self, bit: int) -> bool:
        return bool(self.h.services_available >> bit & 1)

    def _enabled(self, bit: int) -> bool:
        return bool(self.seg.read_counter("services_enabled") >> bit & 1)

    def _set_service(self, bit: int, on: bool) -> Exchange:
        self.last_set[bit] = (on, Exchange(f"SetServiceEnabled({Service(bit).label})", 0, None))
        ex = self.t.send(
            f"SetServiceEnabled({Service(bit).label}, {'on' if on else 'off'})",
            m.MethodId.SetServiceEnabledReq,
            m.SetServiceEnabledReq(service=bit, enabled=on),
        )
        self.requests.append(ex)
        self.last_set[bit] = (on, ex)
        return ex

    @staticmethod
    def _ok(ex: Exchange) -> bool:
        r = ex.reply
        return r is not None and not r.is_error

    # ------------------------------------------------------------ step 1
    def probe_requests(self) -> None:
        M = m.MethodId
        sim = self.found_sim if SimMode.get(self.found_sim) is not None else SimMode.REALTIME
        plan: list[tuple[str, m.MethodId, object]] = [
            ("GetServices", M.GetServicesReq, m.GetServicesReq()),
            ("GetAgentSchema", M.GetAgentSchemaReq, m.GetAgentSchemaReq()),
            ("GetMujocoInfo", M.GetMujocoInfoReq, m.GetMujocoInfoReq()),
            ("GetJointState", M.GetJointStateReq, m.GetJointStateReq(env_id=0)),
            ("GetTelemetrySchema", M.GetTelemetrySchemaReq, m.GetTelemetrySchemaReq()),
            ("GetSceneInfo", M.GetSceneInfoReq, m.GetSceneInfoReq()),
            ("ListEntities", M.ListEntitiesReq, m.ListEntitiesReq(limit=1)),
        ]
        for label, method, payload in plan:
            self.requests.append(self.t.send(label, method, payload))
        listed = self.requests[-1].reply
        first = 1
        if listed is not None and isinstance(listed.payload, m.ListEntitiesResp) and listed.payload.entities:
            first = int(listed.payload.entities[0].id)
        rest: list[tuple[str, m.MethodId, object]] = [
            ("GetEntity", M.GetEntityReq, m.GetEntityReq(id=first)),
            ("GetSimulationMode", M.GetSimulationModeReq, m.GetSimulationModeReq()),
            # The mode found: answered like any change, and nothing changes.
            ("SetSimulationMode", M.SetSimulationModeReq, m.SetSimulationModeReq(mode=SimMode(sim))),
            ("ListCameras", M.ListCamerasReq, m.ListCamerasReq()),
            ("GetViewportInfo", M.GetViewportInfoReq, m.GetViewportInfoReq()),
            # Nothing to draw, nothing cleared: the drawings stay as found (no request reads them back).
            ("Draw", M.DrawReq, m.DrawReq(clear_previous=False)),
        ]
        for label, method, payload in rest:
            self.requests.append(self.t.send(label, method, payload))

    # ------------------------------------------------------------ step 2
    def probe_bad_requests(self) -> None:
        t = self.t
        unknown = t.send(f"unknown method 0x{UNKNOWN_METHOD:04X}", UNKNOWN_METHOD)
        after = t.send("GetServices after the unknown method", m.MethodId.GetServicesReq, m.GetServicesReq())
        self.unknown = (unknown, after)
        bad = t.send_bytes(f"undecodable envelope ({len(MALFORMED)} bytes)", MALFORMED, min(QUIET_S, self.deadline_s))
        after2 = t.send("GetServices after the undecodable envelope", m.MethodId.GetServicesReq, m.GetServicesReq())
        self.malformed = (bad, after2)
        self.requests += [after, after2]

    # ------------------------------------------------------------ step 3
    _SERVICE_PROBES: tuple[tuple[int, str, m.MethodId, type], ...] = (
        (Service.SCENE, "GetSceneInfo", m.MethodId.GetSceneInfoReq, m.GetSceneInfoReq),
        (Service.TELEMETRY, "GetTelemetrySchema", m.MethodId.GetTelemetrySchemaReq, m.GetTelemetrySchemaReq),
        (Service.MUJOCO, "GetMujocoInfo", m.MethodId.GetMujocoInfoReq, m.GetMujocoInfoReq),
        (Service.DEBUG, "Draw", m.MethodId.DrawReq, m.DrawReq),
    )

    def probe_disabled_service(self) -> None:
        choice = next(((b, n, mid, cls) for b, n, mid, cls in self._SERVICE_PROBES if self._available(b)), None)
        if choice is None:
            self.disabled = (NA, "no service with a harmless request is available (Scene, Telemetry, MuJoCo, Debug)")
            return
        bit, name, mid, cls = choice
        label = Service(bit).label
        was_on = self._enabled(bit)
        if was_on:
            off = self._set_service(bit, False)
            if not off.answered:
                self.disabled = (NA, f"not run: SetServiceEnabled({label}, off) not answered (see C37)")
                return
            if not self._ok(off):
                self.disabled = (FAIL, f"SetServiceEnabled({label}, off) refused: {_err(off)}")
                return
        ex = self.t.send(f"{name} with {label} disabled", mid, cls())
        self.requests.append(ex)
        if was_on:
            self._set_service(bit, True)
        r = ex.reply
        if not ex.answered:
            self.disabled = (NA, f"not run: {name} with {label} disabled not answered (see C37)")
        elif r is None or not r.is_error:
            self.disabled = (FAIL, f"{name} with {label} disabled was served: {_describe(ex)}, not an error envelope")
        else:
            self.disabled = (PASS, f"{name} with {label} disabled: error envelope {r.error_message[:80]!r}")

    def probe_images(self) -> None:
        if not self.h.image_offset:
            self.images = (NA, "no image region")
            return
        bits = [b for b in (Service.CAMERA, Service.VIEWPORT) if self._available(b)]
        if not bits:
            self.images = (NA, "neither Camera nor Viewport is available")
            return
        names = " and ".join(Service(b).label for b in bits)
        c = self.seg.read_counter
        # First, are images being published at all (a stopped camera stream publishes none)?
        s_pre, f_pre, t_pre = c("image_seq"), c("frame_seq"), self.clock()
        limit = max(self.deadline_s, 2.0)
        while c("image_seq") == s_pre and self.clock() - t_pre < limit:
            self.look_fixed()
            time.sleep(0.002)
        if c("image_seq") == s_pre:
            f_now = c("frame_seq")
            self.images = (
                NA,
                f"image_seq stood at {s_pre} for {limit:g} s before anything was disabled (frame_seq {f_pre} -> "
                f"{f_now}): no images published to stop",
            )
            return
        for b in bits:
            ex = self._set_service(b, False)
            if not ex.answered:
                self.images = (NA, f"not run: SetServiceEnabled({Service(b).label}, off) not answered (see C37)")
                return
            if not self._ok(ex):
                self.images = (FAIL, f"SetServiceEnabled({Service(b).label}, off) refused: {_err(ex)}")
                return
        s0, f0 = c("image_seq"), c("frame_seq")
        t0 = self.clock()
        moved = None
        while self.clock() - t0 < IMAGE_HOLD_S:
            s = c("image_seq")
            if s != s0 and moved is None:
                moved = s
            self.look_fixed()
            time.sleep(0.005)
        f1 = c("frame_seq")
        for b in bits:
            self._set_service(b, True)
        s1 = c("image_seq")
        t1 = self.clock()
        while c("image_seq") == s1 and self.clock() - t1 < limit:
            self.look_fixed()
            time.sleep(0.002)
        s2, f2 = c("image_seq"), c("frame_seq")
        if moved is not None:
            self.images = (
                FAIL,
                f"image_seq moved from {s0} to {moved} within {IMAGE_HOLD_S:g} s of {names} disabled "
                f"(frame_seq {f0} -> {f1})",
            )
        elif s2 != s1:
            self.images = (
                PASS,
                f"image_seq stood at {s0} for {IMAGE_HOLD_S:g} s with {names} disabled (frame_seq {f0} -> {f1}); "
                f"moved to {s2} {self.clock() - t1:.3f} s after they were enabled",
            )
        elif f2 == f0:
            self.images = (NA, f"image_seq stood still, but so did frame_seq ({f0}): resume not observable")
        else:
            self.images = (
                FAIL,
                f"image_seq still {s1} {limit:g} s after {names} were enabled again (frame_seq {f1} -> {f2})",
            )

    # ------------------------------------------------------------ step 4
    def sample(self) -> None:
        from ..transport.discovery import pid_alive

        s = self.samples
        c = self.seg.read_counter
        cap_of = {}
        t0 = self.clock()
        hb_prev = c("heartbeat_ns")
        hb_change_at = t0
        img_prev = c("image_seq")
        odd_since: float | None = None
        even_seq, even_imf = -1, -1
        client_prev = -1
        attach_a: int | None = None  # action_seq when client_pid became non-zero
        alive = False
        turn_k: int | None = None
        turn_since = 0.0
        while True:
            now = self.clock()
            if now - t0 >= self.seconds:
                break
            s.samples += 1
            state = c("engine_state")
            s.states.add(state)
            # heartbeat
            hb = c("heartbeat_ns")
            if hb != hb_prev:
                if hb < hb_prev and not s.hb_problem:
                    s.hb_problem = f"heartbeat_ns went back from {hb_prev} to {hb}"
                s.hb_changes += 1
                s.hb_longest_s = max(s.hb_longest_s, now - hb_change_at)
                hb_change_at, hb_prev = now, hb
            # image seqlock: read image_seq, image_frame_seq, frame_seq, image_seq
            if self.h.image_offset:
                s1 = c("image_seq")
                imf = c("image_frame_seq")
                f = c("frame_seq")
                s2 = c("image_seq")
                if not s.img:
                    if s1 < img_prev:
                        s.img = f"image_seq went back from {img_prev} to {s1}"
                    elif imf > f + 1:
                        s.img = f"image_frame_seq {imf} > frame_seq {f} + 1"
                    elif s1 == s2 and not s1 & 1:
                        if s1 == even_seq and imf != even_imf:
                            s.img = f"image_frame_seq changed ({even_imf} -> {imf}) while image_seq stayed {s1} (even)"
                        even_seq, even_imf = s1, imf
                    s.img_looks += 1
                    s.img_odd += s1 & 1
                    if s1 & 1:
                        odd_since = now if odd_since is None else odd_since
                        if now - odd_since > ODD_LIMIT_S and not s.img:
                            s.img = f"image_seq stayed odd ({s1}) for more than {ODD_LIMIT_S:g} s"
                    else:
                        odd_since = None
                if s2 != img_prev:
                    s.img_publishes += (s2 - img_prev) // 2 if s2 > img_prev else 0
                    img_prev = s2
            # rings
            for name, p in self.seg.ring_positions().items():
                cap_of[name] = p.capacity
                s.ring_max_used[name] = max(s.ring_max_used.get(name, 0), p.used)
                if name in s.rings:
                    continue
                if p.write_pos % 8 or p.read_pos % 8:
                    s.rings[name] = f"{name}: write_pos {p.write_pos}, read_pos {p.read_pos} not multiples of 8"
                elif p.used > p.capacity - 8:
                    s.rings[name] = f"{name}: used {p.used} > capacity {p.capacity} - 8"
            # lock-step
            client = c("client_pid")
            f = c("frame_seq")
            a = c("action_seq")
            for _ in range(100):
                a = c("action_seq")
                f2 = c("frame_seq")
                if f2 == f:
                    break
                f = f2
            if client != client_prev:
                # A trainer attaching during the window: action_seq may lag until its first step (LAYOUT 6.2).
                attach_a = a if client_prev != -1 else None
                client_prev = client
                alive = client != 0 and pid_alive(client)
                turn_k = None
            if alive and state == EngineState.RUNNING:
                if attach_a is not None and a != attach_a:
                    attach_a = None  # the trainer's first step after attaching: the turn rule applies from here
                if attach_a is None:
                    s.turn_checked += 1
                    gap = f - a
                    if gap not in (0, 1) and not s.turn_problem:
                        s.turn_problem = f"frame_seq {f} - action_seq {a} = {gap} (trainer pid {client})"
                    if gap == 0:
                        if turn_k != f:
                            turn_k, turn_since = f, now
                        elif now - turn_since > TURN_LIMIT_S and not s.step_problem:
                            s.step_problem = (
                                f"the engine's turn at frame_seq {f} (action_seq {a}) lasted more than "
                                f"{TURN_LIMIT_S:g} s"
                            )
                    elif turn_k is not None and f > turn_k:
                        s.steps_seen += 1
                        s.longest_turn_s = max(s.longest_turn_s, now - turn_since)
                        turn_k = None
            else:
                turn_k = None
            if s.samples % FIXED_EVERY == 0:
                self.check_fixed()
            time.sleep(SAMPLE_S)
        self.check_fixed()
        end = self.clock()
        s.window_s = end - t0
        s.hb_longest_s = max(s.hb_longest_s, end - hb_change_at)

    # ------------------------------------------------------------ step 5
    def restore(self) -> None:
        for bit in Service:
            if not self._available(bit):
                continue
            want = bool(self.found_services >> bit & 1)
            last = self.last_set.get(bit)
            # A request the engine has not answered may still be applied after we read the mask (the
            # rings are FIFO, so sending the wanted state after it always wins).
            in_doubt = last is not None and last[1].sent and (last[0] != want or not last[1].answered)
            differs = self._enabled(bit) != want
            if differs or in_doubt:
                ex = self._set_service(bit, want)
                if differs and not self._ok(ex):  # otherwise the mask as found at the end says how it went
                    self.restore_problems.append(
                        f"SetServiceEnabled({Service(bit).label}, {'on' if want else 'off'}): {_err(ex)}"
                    )
        if self.seg.read_counter("sim_mode") != self.found_sim and SimMode.get(self.found_sim) is not None:
            ex = self.t.send(
                "SetSimulationMode (restore)",
                m.MethodId.SetSimulationModeReq,
                m.SetSimulationModeReq(mode=SimMode(self.found_sim)),
            )
            self.requests.append(ex)
            if not self._ok(ex):
                self.restore_problems.append(f"SetSimulationMode({self.found_sim}): {_err(ex)}")
        # Late replies and duplicates still count.
        time.sleep(0.05)
        self.t.drain()

    # ------------------------------------------------------------ rules
    def results(self, released: tuple[str, str]) -> list[RuleResult]:
        out = {
            "C37": self._rule_answered(),
            "C32": self._rule_one_response(),
            "C39": self._rule_payload(),
            "C40": self._rule_stamps(),
            "C41": self._rule_unknown(),
            "C42": self._rule_malformed(),
            "C34": self.disabled,
            "C35": self.images,
            "C25": self._rule_heartbeat(),
            "C23": self._rule_images(),
            "C26": self._rule_rings(),
            "C7": self._rule_fixed(),
            "C20": self._rule_turn(),
            "C43": self._rule_steps(),
            "C44": released,
        }
        # The engine's words (error messages) are in some details: plain text, bounded, escaped.
        return [RuleResult(name, out[rid][0], safe_text(out[rid][1], DETAIL_MAX), (rid,)) for rid, name in LIVE_RULES]

    def _valid_requests(self) -> list[Exchange]:
        return [e for e in self.requests if e.sent]

    def _rule_answered(self) -> tuple[str, str]:
        reqs = self.requests
        late = [e for e in reqs if e.sent and not e.answered]
        unsent = [e for e in reqs if not e.sent]
        sent = [e for e in reqs if e.sent and e.answered]
        slowest = max((e.wait_s for e in sent), default=0.0)
        if late or unsent:
            parts = [
                f"{e.label}: no response within {self.deadline_s:g} s" + (" (it came later)" if e.late else "")
                for e in late[:4]
            ]
            if unsent:
                parts.append(f"{len(unsent)} more {self.t.gone or 'not sent'}")
            return FAIL, "; ".join(parts)
        return PASS, (
            f"{len(sent)} requests of {len({e.method for e in sent})} types answered, "
            f"slowest {slowest * 1e3:.1f} ms (deadline {self.deadline_s:g} s)"
        )

    def _with_cid(self) -> list[Exchange]:
        return [e for e in self.t.exchanges if e.sent and e.cid is not None and e.answered]

    def _rule_one_response(self) -> tuple[str, str]:
        exs = self._with_cid()
        problems = []
        for e in exs:
            if e.wrong_ids:
                problems.append(
                    f"{e.label}: answered with correlation_id 0x{e.wrong_ids[0]:X}, sent 0x{(e.cid or 0):X}"
                )
            elif e.duplicates or len(e.replies) > 1:
                problems.append(f"{e.label}: {e.duplicates + len(e.replies)} responses")
        if self.t.strays:
            problems.append(f"{len(self.t.strays)} responses no request claims, first {self.t.strays[0]}")
        if problems:
            return FAIL, "; ".join(problems[:4])
        if not exs:
            return NA, "not run: no request was answered (see C37)"
        return PASS, f"{len(exs)} answered requests: one response each, correlation_id echoed"

    def _rule_payload(self) -> tuple[str, str]:
        exs = [e for e in self._valid_requests() if e.answered]
        problems = []
        for e in exs:
            want = m.RESPONSE_OF.get(m.MethodId(e.method))
            r = e.reply
            if r is None:
                problems.append(f"{e.label}: undecodable response: {e.undecodable[0]}")
            elif int(r.method) != int(want or 0):
                problems.append(f"{e.label}: answered as {m.method_name(int(r.method))}, expected {want and want.name}")
            elif not r.is_error and r.payload is None:
                problems.append(f"{e.label}: success with no payload (expected a {want and want.name} table)")
        if problems:
            return FAIL, "; ".join(problems[:4])
        if not exs:
            return NA, "not run: no request was answered (see C37)"
        errors = sum(1 for e in exs if e.reply is not None and e.reply.is_error)
        return PASS, f"{len(exs)} responses of the request's response method ({errors} error envelopes)"

    def _rule_stamps(self) -> tuple[str, str]:
        stamps = self.t.stamps
        if not stamps:
            return NA, "not run: nothing arrived on tools s2c (see C37)"
        for what, ns in stamps:
            if ns == 0:
                return FAIL, f"{what}: sent_ns 0 (not stamped)"
        for (w0, a), (w1, b) in itertools.pairwise(stamps):
            if b < a:
                return FAIL, f"{w1}: sent_ns {b} < {a} of the envelope before it ({w0})"
        for e in self._with_cid():
            r = e.reply
            if r is not None and 0 < r.sent_ns < e.sent_ns:
                return FAIL, f"{e.label}: response sent_ns {r.sent_ns} before the request's {e.sent_ns}"
        return PASS, f"{len(stamps)} envelopes stamped, non-decreasing, never before their request"

    def _rule_unknown(self) -> tuple[str, str]:
        if self.unknown is None:
            return NA, "not run"
        ex, after = self.unknown
        if not ex.sent:
            return NA, f"not run: {self.t.gone}"
        r = ex.reply
        if not ex.answered:
            return FAIL, f"{ex.label}: no response within {self.deadline_s:g} s (an error envelope is due)"
        if r is None:
            return FAIL, f"{ex.label}: undecodable response: {ex.undecodable[0]}"
        if int(r.method) != UNKNOWN_METHOD or not r.is_error:
            return (
                FAIL,
                f"{ex.label}: answered {_describe(ex)}; expected an error envelope with method 0x{UNKNOWN_METHOD:04X}",
            )
        if not self._ok(after):
            return FAIL, f"{after.label}: {_err(after)}"
        return PASS, f"error envelope {r.error_message[:80]!r}; the next request answered"

    def _rule_malformed(self) -> tuple[str, str]:
        if self.malformed is None:
            return NA, "not run"
        ex, after = self.malformed
        if not ex.sent:
            return NA, f"not run: {self.t.gone}"
        if ex.undecodable:
            return FAIL, f"{ex.label}: undecodable answer: {ex.undecodable[0]}"
        bad = [r for r in ex.replies if not r.is_error]
        if bad:
            r = bad[0]
            return FAIL, (
                f"{ex.label}: answered with a success envelope {m.method_name(int(r.method))} "
                f"(correlation_id 0x{r.correlation_id:X}); only an error envelope or nothing may answer it"
            )
        if not self._ok(after):
            return FAIL, f"{after.label}: {_err(after)}"
        said = f"{len(ex.replies)} error envelope(s)" if ex.replies else "no answer"
        return PASS, f"{said} within {ex.wait_s:.2f} s; the next request answered"

    def _rule_heartbeat(self) -> tuple[str, str]:
        s = self.samples
        if s.window_s <= 0:
            return NA, "not run"
        if not self.h.session_id:
            return NA, "no extension block (session_id 0): no heartbeat"
        if s.states & {EngineState.CLOSING, EngineState.INITIALISING}:
            return NA, f"engine_state {sorted(s.states)} during the window: the heartbeat rule is for states 1 and 2"
        if s.hb_problem:
            return FAIL, s.hb_problem
        rate = s.hb_changes / s.window_s
        detail = f"{s.hb_changes} refreshes in {s.window_s:.2f} s ({rate:.1f} Hz), longest still {s.hb_longest_s:.3f} s"
        if rate < HEARTBEAT_MIN_HZ or s.hb_longest_s > HEARTBEAT_GAP_S:
            return FAIL, detail + f"; needs >= {HEARTBEAT_MIN_HZ:g} Hz and no pause over {HEARTBEAT_GAP_S:g} s"
        return PASS, detail

    def _rule_images(self) -> tuple[str, str]:
        s = self.samples
        if not self.h.image_offset:
            return NA, "no image region"
        if s.img:
            return FAIL, s.img
        # Odd at nearly every sample without staying odd for a second: the seqlock kept inverted (odd between
        # writes, even only while writing); a sample now and then that lands in a write resets the run above.
        if s.img_looks >= ODD_SHARE_MIN_LOOKS and s.img_odd >= ODD_SHARE_LIMIT * s.img_looks:
            return FAIL, (
                f"image_seq stayed odd at {s.img_odd} of {s.img_looks} samples: odd between writes "
                "(an inverted seqlock) or writes that never pause"
            )
        return (
            PASS,
            f"{s.samples} samples, {s.img_publishes} publishes seen, image_frame_seq <= frame_seq + 1 throughout",
        )

    def _rule_rings(self) -> tuple[str, str]:
        s = self.samples
        if s.rings:
            return FAIL, "; ".join(s.rings.values())
        used = ", ".join(f"{k} {v}" for k, v in s.ring_max_used.items())
        return PASS, f"{s.samples} samples of {len(s.ring_max_used)} rings; most used bytes: {used}"

    def _rule_fixed(self) -> tuple[str, str]:
        if self.fixed_problem is not None:
            return FAIL, self.fixed_problem
        return PASS, f"every non-live field as at the start, looked at {self.fixed_looks} times over the probe"

    def _rule_turn(self) -> tuple[str, str]:
        s = self.samples
        if s.turn_problem:
            return FAIL, s.turn_problem
        if not s.turn_checked:
            return NA, "no trainer attached and stepping during the window (free-run: no turn)"
        return PASS, f"{s.turn_checked} samples with a trainer attached: frame_seq - action_seq in {{0, 1}}"

    def _rule_steps(self) -> tuple[str, str]:
        s = self.samples
        if s.step_problem:
            return FAIL, s.step_problem
        if not s.turn_checked:
            return NA, "no trainer attached and stepping during the window"
        if not s.steps_seen:
            return NA, "no engine turn observed ending (the trainer took no step in the window)"
        return PASS, (
            f"{s.steps_seen} engine turns seen ending with a new frame, longest {s.longest_turn_s * 1e3:.1f} ms "
            f"(limit {TURN_LIMIT_S:g} s)"
        )


def _err(ex: Exchange) -> str:
    if not ex.sent:
        return "not sent"
    if not ex.answered:
        return "no response"
    r = ex.reply
    if r is None:
        return f"undecodable response: {ex.undecodable[0]}"
    return f"engine says: {r.error_message[:120]}" if r.is_error else "ok"


def _describe(ex: Exchange) -> str:
    r = ex.reply
    if r is None:
        return "nothing"
    kind = "error" if r.is_error else "success"
    return f"{kind} {m.method_name(int(r.method))}"


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


def run_live_probe(
    name: str,
    *,
    seconds: float = 5.0,
    deadline_s: float = 1.0,
    allow_other_user: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> list[RuleResult]:
    """Probe the engine serving segment ``name``; one result per :data:`LIVE_RULES` row.

    Parameters
    ----------
    name
        The segment (its header already checked by :func:`~.conformance.run_check`).
    seconds
        How long the timed invariants are sampled.
    deadline_s
        How long each request may take to be answered.
    allow_other_user
        Probe a segment owned by another user.

    Raises
    ------
    ToolsChannelBusy
        Another live monitor holds the tools channel (nothing was sent).
    ToolsChannelUnavailable
        The engine exports no tools channel.
    UnavailableError
        The segment could not be attached, or went away during the probe.
    """
    from ..transport.discovery import pid_alive
    from ..transport.shm import Segment
    from ..transport.tools import tools_owner
    from .monitor import LinkState
    from .session import MonitorSession

    session = MonitorSession(
        name,
        tools=True,
        images=False,
        discover=False,
        traffic=False,
        history_capacity=16,
        command_timeout_s=deadline_s,
        allow_other_user=allow_other_user,
    )
    try:
        t_end = clock() + max(deadline_s, 2.0) + CLAIM_START_S
        tick = session.step()
        while not tick.tools.ours and clock() < t_end:
            if tick.attached and not tick.tools.exported:
                raise ToolsChannelUnavailable(f"{name}: {tick.tools.reason}")
            if tick.tools.owner_pid and not tick.tools.ours:
                raise ToolsChannelBusy(tick.tools.owner_pid)
            if tick.state is LinkState.ENGINE_EXITED:  # a dead engine's segment: no claim can come
                raise UnavailableError(f"{name}: engine exited ({tick.reason or 'its pid is gone'})")
            time.sleep(0.02)
            tick = session.step()
        client = session.lend_commands()
        if client is None:
            if tick.tools.owner_pid:
                raise ToolsChannelBusy(tick.tools.owner_pid)
            raise UnavailableError(f"{name}: could not claim the tools channel: {tick.tools.reason or tick.reason}")
        with Segment.attach(name, allow_other_user=allow_other_user) as seg:
            probe = LiveProbe(seg, client, seconds=seconds, deadline_s=deadline_s, clock=clock)
            try:
                for step in (probe.probe_requests, probe.probe_bad_requests, probe.probe_disabled_service):
                    step()
                    probe.check_fixed()
                probe.probe_images()
                probe.check_fixed()
                probe.sample()
            finally:
                gone = seg.still_valid()
                engine = seg.header.server_pid
                if gone is None and engine and not pid_alive(engine):
                    # Killed mid-probe: what it answered and sampled says nothing of the engine's conformance,
                    # and there is no engine left to restore anything in.
                    gone = f"engine exited (engine pid {engine} is gone)"
                if gone is None:
                    interrupted = isinstance(sys.exc_info()[1], KeyboardInterrupt)
                    try:
                        probe.restore()
                    except LuckyMonitorError:
                        if not interrupted:  # after Ctrl-C the interrupt is what ends the check (exit 130)
                            raise
            session.close()
            if gone is not None or seg.still_valid() is not None:
                raise UnavailableError(f"{name}: {gone or seg.still_valid()} during the live check")
            released = _as_found(probe, seg, tools_owner(seg), client.channel.pid)
            return probe.results(released)
    finally:
        session.close()


def _as_found(probe: LiveProbe, seg: Segment, owner: int, me: int) -> tuple[str, str]:
    problems = list(probe.restore_problems)
    now_services, now_sim = seg.read_counter("services_enabled"), seg.read_counter("sim_mode")
    if now_services != probe.found_services:
        problems.append(f"services_enabled 0x{now_services:02X}, found 0x{probe.found_services:02X}")
    if now_sim != probe.found_sim:
        problems.append(f"sim_mode {now_sim}, found {probe.found_sim}")
    if owner == me:
        problems.append(f"tools channel still held by this probe (pid {me})")
    if problems:
        return FAIL, "; ".join(problems)
    return PASS, (
        f"services_enabled 0x{now_services:02X} and sim_mode {SimMode.name_of(now_sim)} as found; "
        "drawings untouched (an empty draw without clear); tools channel released"
    )
