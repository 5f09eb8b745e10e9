"""Conformance rules of ``schema/LAYOUT.md`` §14, checked against a live segment.

Theory of operation
-------------------
:data:`RULES` is the one rule table: each :class:`Rule` names the checklist
items it tests (``C16``, ...), has a name people read ("bound num_envs",
"heartbeat fresh"), a stage, an applicability test and a check function.
:func:`evaluate` walks the table in order and returns one
:class:`RuleResult` per rule instance; :func:`run_check` opens a segment and
evaluates it. Nothing here prints.

Stages, in table order:

``file``
    The file holds a whole header. If not, every later rule is skipped.
``header``
    The checks of :func:`~lucky_monitor.protocol.header.validate`, in its
    order (LAYOUT §5.1). validate() is run once; each header rule recognises
    the one error it would raise, so the rule that failed carries validate's
    own message. Rules before it pass, rules after it are skipped: a header
    that fails a bound cannot be trusted for anything later.
``live``
    Checks that read the mapped segment (pids, counters, rings, heartbeat).
    They run only on a valid header and do not stop each other.

Some rules have one instance per region or ring of the header; their name
holds ``{}``, filled with the instance.

The module is Qt-free; it imports the transport only inside :func:`run_check`
and the live checks, so importing it maps nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from ..protocol import header as hdr
from ..protocol.enums import EngineState
from ..protocol.errors import (
    BadMagic,
    HeaderError,
    IncompatibleLayout,
    RegionError,
    TruncatedSegment,
    UnsupportedVersion,
)
from ..protocol.header import HEADER_SIZE, Header, Region

__all__ = [
    "FAIL",
    "HEARTBEAT_LIMIT_S",
    "NA",
    "PASS",
    "RULES",
    "SKIPPED",
    "Rule",
    "RuleResult",
    "Subject",
    "evaluate",
    "heartbeat_age",
    "run_check",
]

PASS, FAIL, SKIPPED, NA = "pass", "fail", "skipped", "n/a"

#: A heartbeat older than this fails "heartbeat fresh" (LAYOUT §8.3 asks for >= 10 Hz).
HEARTBEAT_LIMIT_S = 1.0

Stage = Literal["file", "header", "live"]
Outcome = tuple[str, str]  # (status, detail)


@dataclass
class RuleResult:
    """One rule instance's outcome.

    Attributes
    ----------
    rule : str
        The rule's name, e.g. ``"bound num_envs"`` or ``"ring cmd_s2c positions"``.
    status : str
        :data:`PASS`, :data:`FAIL`, :data:`SKIPPED` or :data:`NA`.
    detail : str
        What was seen, or why the rule does not apply.
    ids : tuple of str
        The ``schema/LAYOUT.md`` checklist items the rule tests (``("C25",)``).
    """

    rule: str
    status: str
    detail: str = ""
    ids: tuple[str, ...] = ()


@dataclass
class Subject:
    """What the rules look at: the header bytes, validate's verdict and, for live rules, the segment.

    Attributes
    ----------
    header : Header
        The header as unpacked (not necessarily valid).
    raw : bytes
        The first :data:`~lucky_monitor.protocol.header.HEADER_SIZE` bytes.
    file_size : int
        Bytes in the file (the mapping a reader would make).
    error : HeaderError or None
        What reading or validating the header raised, if anything.
    seg : Segment or None
        The attached segment; set before the live rules run.
    image_wait_s : float
        How long ``image_seq`` may stay odd before "image_seq even" fails.
    truncated : bool
        The file is shorter than a header.
    name : str
        The segment's name ("" when not known: "segment name" is then n/a).
    file_mode : int or None
        The file's permission bits (``None`` where the platform has none: "file mode" is then n/a).
    """

    header: Header
    raw: bytes
    file_size: int
    error: HeaderError | None = None
    seg: Any = None
    image_wait_s: float = 0.25
    truncated: bool = False
    name: str = ""
    file_mode: int | None = None  # the file's permission bits (None: not known, e.g. on Windows)

    @cached_property
    def gap(self) -> tuple[int, int, int]:
        """``(client_pid, frame_seq, action_seq)`` read so that ``frame_seq`` did not move in between."""
        c = self.seg.read_counter
        f = c("frame_seq")
        a = c("action_seq")
        for _ in range(100):
            a = c("action_seq")
            f2 = c("frame_seq")
            if f2 == f:
                break
            f = f2
        return c("client_pid"), f, a


@dataclass(frozen=True)
class Rule:
    """One row of the rule table.

    Attributes
    ----------
    ids : tuple of str
        Checklist items of ``schema/LAYOUT.md`` §14 the rule tests.
    name : str
        Shown to people; ``{}`` is replaced by each instance (a region, a ring).
    stage : {"file", "header", "live"}
        When the rule runs (see the module notes).
    check : callable
        ``check(subject, instance) -> (status, detail)``. Header-stage checks
        return :data:`FAIL` only for the error validate() raised for them.
    applies : callable
        ``applies(header, instance) -> bool``; an inapplicable rule is :data:`NA`.
    instances : callable or None
        ``instances(header) -> names``; ``None`` for a rule with one instance.
    """

    ids: tuple[str, ...]
    name: str
    stage: Stage
    check: Callable[[Subject, str], Outcome]
    applies: Callable[[Header, str], bool] = lambda h, i: True
    instances: Callable[[Header], Sequence[str]] | None = None

    def expand(self, h: Header) -> list[tuple[str, str]]:
        """``(instance, display name)`` for each instance of this rule on header ``h``."""
        if self.instances is None:
            return [("", self.name)]
        # Regions are instances by their offset field; people read "region obs".
        return [(i, self.name.format(i.removesuffix("_offset"))) for i in self.instances(h)]


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def heartbeat_age(heartbeat_ns: int) -> float | None:
    """Seconds since the engine's last heartbeat, where the clocks are comparable.

    The engine writes CLOCK_MONOTONIC, which is what ``time.monotonic_ns`` reads
    on Linux; elsewhere the clocks differ and the age is not measurable.

    Parameters
    ----------
    heartbeat_ns
        The header's ``heartbeat_ns``; 0 (never beat) gives ``None``. A beat in the future gives a
        negative age (not this machine's clock).
    """
    if not heartbeat_ns or not sys.platform.startswith("linux"):
        return None
    return (time.monotonic_ns() - heartbeat_ns) / 1e9


def _inside(r: Region, limit: int) -> bool:
    return r.offset % hdr.REGION_ALIGN == 0 and r.offset >= HEADER_SIZE and r.end <= limit


def _limit(s: Subject) -> int:
    return s.header.segment_size or s.file_size


def _has_images(h: Header, _: str = "") -> bool:
    return h.image_offset != 0


def _has_tools(h: Header, _: str = "") -> bool:
    return h.tools_offset != 0


def _validated(
    rejects: Callable[[HeaderError, Subject, str], bool], detail: Callable[[Subject, str], str]
) -> Callable[[Subject, str], Outcome]:
    """A header-stage check: fail with validate()'s message when ``rejects`` recognises its error."""

    def check(s: Subject, instance: str) -> Outcome:
        if s.error is not None and rejects(s.error, s, instance):
            return FAIL, str(s.error)
        return PASS, detail(s, instance)

    return check


# ---------------------------------------------------------------------------
# Header rules (validate()'s order, LAYOUT §5.1)
# ---------------------------------------------------------------------------

_BOUND_DETAIL: dict[str, Callable[[Header], str]] = {
    "num_envs": lambda h: f"{h.num_envs} in 1..{hdr.MAX_ENVS}",
    "obs_size": lambda h: f"{h.obs_size} in 0..{hdr.MAX_VEC}",
    "act_size": lambda h: f"{h.act_size} in 0..{hdr.MAX_VEC}",
    "cmd_ring_size": lambda h: f"{h.cmd_ring_size}, a power of two in {hdr.MIN_RING}..{hdr.MAX_RING}",
    "image_width": lambda h: f"{h.image_width} in 1..{hdr.MAX_IMAGE_SIDE}",
    "image_height": lambda h: f"{h.image_height} in 1..{hdr.MAX_IMAGE_SIDE}",
    "image_channels": lambda h: f"{h.image_channels} in (1, 3, 4)",
    "image_format": lambda h: f"{h.image_format} matches image_channels",
    "mode": lambda h: f"{h.mode}",
    "gpu_obs_mode": lambda h: f"{h.gpu_obs_mode}",
    "sim_mode": lambda h: f"{h.sim_mode}",
    "engine_state": lambda h: f"{h.engine_state}",
    "frame_seq": lambda h: f"{h.frame_seq} < 2^63",
    "action_seq": lambda h: f"{h.action_seq} < 2^63",
    "tools_ring_size": lambda h: f"{h.tools_ring_size}, a power of two in {hdr.MIN_RING}..{hdr.MAX_RING}",
}
_IMAGE_FIELDS = ("image_width", "image_height", "image_channels", "image_format")
_SCALAR_BOUNDS = (
    "num_envs",
    "obs_size",
    "act_size",
    "cmd_ring_size",
    *_IMAGE_FIELDS,
    "mode",
    "gpu_obs_mode",
    "sim_mode",
    "engine_state",
    "frame_seq",
    "action_seq",
)


def _bound() -> Callable[[Subject, str], Outcome]:
    return _validated(lambda e, s, f: type(e) is HeaderError and e.field == f, lambda s, f: _BOUND_DETAIL[f](s.header))


def _file_holds_header(s: Subject, _: str) -> Outcome:
    if s.truncated:
        return FAIL, str(s.error)
    return PASS, f"{s.file_size} bytes >= {HEADER_SIZE}"


def _segment_size_detail(s: Subject, _: str) -> str:
    h = s.header
    if h.segment_size:
        return f"{h.segment_size} <= {s.file_size}"
    return f"not set: regions checked against the file size {s.file_size}"


def _region_rejects(e: HeaderError, s: Subject, name: str) -> bool:
    r = s.header.region(name)
    return isinstance(e, RegionError) and e.field == name and not _inside(r, _limit(s))


def _region_detail(s: Subject, name: str) -> str:
    r = s.header.region(name)
    return f"[{r.offset}, {r.end}) 64-byte aligned, after the header, inside {_limit(s)}"


def _region_names(h: Header) -> list[str]:
    return [r.name for r in h.regions()]


# ---------------------------------------------------------------------------
# Live rules
# ---------------------------------------------------------------------------


_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
#: The service bits the spec defines (LAYOUT §10.2): bits 8-31 of both masks are zero (C9).
_SERVICE_BITS = 0xFF


def _segment_name(s: Subject, _: str) -> Outcome:
    from ..transport.shm import MAX_NAME_CHARS

    name = s.name
    if not name:
        return NA, "name not known"
    default = f"LuckyEngine_{s.header.server_pid}"
    how = "the default LuckyEngine_<server_pid>" if name == default else f"an override (the default is {default})"
    bad = sorted(set(name) - _NAME_CHARS)
    if bad:
        return FAIL, f"{name!r}: {bad[0]!r} is outside [A-Za-z0-9_.-]"
    if len(name) > MAX_NAME_CHARS:
        return FAIL, f"{name}: {len(name)} characters, at most {MAX_NAME_CHARS} (macOS allows 31 bytes with the '/')"
    return PASS, f"{name}: {len(name)} characters, {how}"


def _services(s: Subject, _: str) -> Outcome:
    h = s.header
    if not h.session_id:
        return NA, "no extension block (session_id 0): no service masks"
    avail = h.services_available
    enabled = s.seg.read_counter("services_enabled")
    problems = []
    if avail & ~_SERVICE_BITS:
        problems.append(f"services_available has bits above 7 set (0x{avail & ~_SERVICE_BITS:x})")
    if enabled & ~_SERVICE_BITS:
        problems.append(f"services_enabled has bits above 7 set (0x{enabled & ~_SERVICE_BITS:x})")
    if enabled & ~avail & _SERVICE_BITS:
        problems.append(f"services_enabled has bits not in services_available (0x{enabled & ~avail & _SERVICE_BITS:x})")
    detail = f"services_available 0x{avail:02x}, services_enabled 0x{enabled:02x}"
    return (FAIL, detail + ": " + "; ".join(problems)) if problems else (PASS, detail + ", enabled within available")


def _reserved_zero(s: Subject, _: str) -> Outcome:
    bad = hdr.is_zero_reserved(s.raw)
    if bad:
        return FAIL, "non-zero bytes in " + ", ".join(f"{a}-{b}" for a, b in bad)
    return PASS, "pads and reserved areas are zero"


def _segment_size_matches(s: Subject, _: str) -> Outcome:
    h = s.header
    if not h.segment_size:
        return NA, "segment_size not set (no extension block)"
    ok = h.segment_size == s.file_size
    return (PASS if ok else FAIL), f"segment_size {h.segment_size}, file {s.file_size} bytes"


def _file_mode(s: Subject, _: str) -> Outcome:
    mode = s.file_mode
    if mode is None:
        return NA, "no permission bits on this platform"
    # Another user could read the trainer's observations (a group- or world-readable file) or, writable,
    # feed it actions: LAYOUT.md §2.1 creates the object 0600.
    return (PASS if mode == 0o600 else FAIL), f"mode {mode:04o}" + ("" if mode == 0o600 else ", expected 0600")


def _server_alive(s: Subject, _: str) -> Outcome:
    from ..transport.discovery import pid_alive

    pid = s.header.server_pid
    alive = pid_alive(pid)
    return (PASS if alive else FAIL), f"pid {pid} {'alive' if alive else 'is not running'}"


def _client_alive(s: Subject, _: str) -> Outcome:
    from ..transport.discovery import pid_alive

    client = s.gap[0]
    if client == 0:
        return PASS, "no trainer attached"
    ok = pid_alive(client)
    return (PASS if ok else FAIL), f"pid {client} {'alive' if ok else 'is not running'}"


def _lock_step(s: Subject, _: str) -> Outcome:
    client, f, a = s.gap
    if client == 0:
        return PASS, f"free-run (no trainer): frame_seq {f}, action_seq {a}"
    gap = f - a
    ok = gap in (0, 1)
    return (PASS if ok else FAIL), (
        f"frame_seq {f} - action_seq {a} = {gap}" + ("" if ok else ", must be 0 (engine's turn) or 1 (trainer's turn)")
    )


def _heartbeat(s: Subject, _: str) -> Outcome:
    h = s.header
    if not h.session_id:
        return NA, "no extension block (session_id 0): liveness from server_pid only"
    hb = s.seg.read_counter("heartbeat_ns")
    state = s.seg.read_counter("engine_state")
    if state == EngineState.INITIALISING and not hb:
        return NA, "engine initialising: heartbeat_ns may still be 0"
    if not hb:
        return FAIL, (
            f"heartbeat_ns is 0 with engine_state {EngineState.name_of(state)}: the engine must "
            "refresh it at least 10 times per second (LAYOUT 8.3)"
        )
    if state == EngineState.CLOSING:
        return NA, "engine closing: the heartbeat stops"
    age = heartbeat_age(hb)
    if age is None:
        return NA, "engine clock not comparable on this platform"
    if age < 0:  # read after the beat was written: only a clock other than this machine's gets here
        return FAIL, f"heartbeat_ns is {-age:.3f} s in the future: not this machine's CLOCK_MONOTONIC (LAYOUT 8.3)"
    ok = age < HEARTBEAT_LIMIT_S
    return (PASS if ok else FAIL), f"last beat {age:.3f} s ago (limit {HEARTBEAT_LIMIT_S:g} s)"


#: Looks at ``image_seq`` over the wait (one a millisecond) that may find it odd before C23's
#: "image_seq even" fails, when there are enough of them to judge by: an engine whose writes are a
#: memcpy inside its step is even at most of them; one that keeps the seqlock inverted (odd between
#: writes, even only while writing) is odd at nearly all, and a single look can land in a write.
ODD_SHARE_LIMIT = 0.9
ODD_SHARE_MIN_LOOKS = 20


def _image_seq_even(s: Subject, _: str) -> Outcome:
    deadline = time.monotonic() + s.image_wait_s
    seq = s.seg.read_counter("image_seq")
    looks, odd = 1, seq & 1
    while time.monotonic() < deadline:
        time.sleep(0.001)
        seq = s.seg.read_counter("image_seq")
        looks += 1
        odd += seq & 1
    if odd == looks:
        return FAIL, f"image_seq {seq} stayed odd for {s.image_wait_s:g} s"
    if looks >= ODD_SHARE_MIN_LOOKS and odd >= ODD_SHARE_LIMIT * looks:
        return FAIL, (
            f"image_seq odd at {odd} of {looks} looks over {s.image_wait_s:g} s: odd between writes "
            "(an inverted seqlock) or writes that never pause"
        )
    return PASS, f"image_seq {seq}" + (f"; odd at {odd} of {looks} looks (writes in progress)" if odd else "")


#: Seconds between two looks of "image_frame_seq at most frame_seq + 1" over the image wait. An engine
#: stepping thousands of times a second closes a breach within a millisecond of the image's publication
#: (frame_seq catches up with an image_frame_seq stored ahead): one look, or one a millisecond, missed it
#: in 12 of 12 runs of a --fast engine storing it 3 ahead.
FRAME_BOUND_LOOK_S = 0.0002


def _image_frame_bound(s: Subject, _: str) -> Outcome:
    """C23's bound: the images' frame is published with them or after them, never more than one frame later.

    ``image_frame_seq`` is read before ``frame_seq``: ``frame_seq`` only grows, so a reading in that
    order can only make an engine look more behind, never ahead. Looked at over the image wait (as
    "image_seq even" is), every :data:`FRAME_BOUND_LOOK_S`; the first breach fails the rule.
    """
    read = s.seg.read_counter
    deadline = time.monotonic() + s.image_wait_s
    looks = 0
    while True:
        image_frame = read("image_frame_seq")
        frame = read("frame_seq")
        looks += 1
        if image_frame > frame + 1:
            return FAIL, (
                f"image_frame_seq {image_frame} is {image_frame - frame} frames ahead of frame_seq {frame} "
                "(at most 1: the images belong to the frame being published or an earlier one, LAYOUT 8.1)"
            )
        if time.monotonic() >= deadline:
            break
        time.sleep(FRAME_BOUND_LOOK_S)
    detail = f"image_frame_seq {image_frame}, frame_seq {frame}"
    return PASS, detail + (f" ({looks} looks over {s.image_wait_s:g} s)" if looks > 1 else "")


def _ring_names(h: Header) -> list[str]:
    return ["cmd_s2c", "cmd_c2s"] + (["tools_c2s", "tools_s2c"] if h.tools_offset else [])


def _ring_positions(s: Subject, name: str) -> Outcome:
    p = s.seg.ring_positions()[name]
    problems = []
    if p.used > p.capacity:
        problems.append(f"used {p.used} > capacity {p.capacity}")
    if p.write_pos % 8 or p.read_pos % 8:
        problems.append("positions not multiples of 8")
    return (FAIL if problems else PASS), (
        f"write_pos {p.write_pos}, read_pos {p.read_pos}, used {p.used}/{p.capacity}"
        + (": " + "; ".join(problems) if problems else "")
    )


def _tools_owner(s: Subject, _: str) -> Outcome:
    from ..transport.discovery import pid_alive
    from ..transport.tools import tools_owner

    owner = tools_owner(s.seg)
    ok = owner == 0 or pid_alive(owner)
    return (PASS if ok else FAIL), ("free" if owner == 0 else f"pid {owner} {'alive' if ok else 'is not running'}")


# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------

#: Every rule, in the order it is checked and reported.
RULES: tuple[Rule, ...] = (
    Rule(("C16",), "file holds a header", "file", _file_holds_header),
    Rule(
        ("C16",),
        "magic",
        "header",
        _validated(lambda e, s, i: isinstance(e, BadMagic), lambda s, i: f"0x{s.header.magic:08X}"),
    ),
    Rule(
        ("C16",),
        "version",
        "header",
        _validated(lambda e, s, i: isinstance(e, UnsupportedVersion), lambda s, i: f"{s.header.version}"),
    ),
    Rule(
        ("C17",),
        "layout signature",
        "header",
        _validated(
            lambda e, s, i: isinstance(e, IncompatibleLayout),
            lambda s, i: "LRBC v1 (mode byte and zero padding at 16-19, offsets past the header)",
        ),
    ),
    Rule(
        ("C16",),
        "bound {}",
        "header",
        _bound(),
        applies=lambda h, f: f not in _IMAGE_FIELDS or _has_images(h),
        instances=lambda h: _SCALAR_BOUNDS,
    ),
    Rule(
        ("C15",),
        "tools_offset alignment",
        "header",
        _validated(
            lambda e, s, i: (
                isinstance(e, RegionError)
                and e.field == "tools_offset"
                and s.header.tools_offset % hdr.TOOLS_ALIGN != 0
            ),
            lambda s, i: f"{s.header.tools_offset} is a multiple of {hdr.TOOLS_ALIGN}",
        ),
        applies=_has_tools,
    ),
    Rule(("C16",), "bound {}", "header", _bound(), applies=_has_tools, instances=lambda h: ("tools_ring_size",)),
    Rule(
        ("C13",),
        "segment_size within the file",
        "header",
        _validated(lambda e, s, i: isinstance(e, TruncatedSegment), _segment_size_detail),
    ),
    Rule(
        ("C11", "C12", "C13"),
        "region {}",
        "header",
        _validated(_region_rejects, _region_detail),
        instances=_region_names,
    ),
    Rule(
        ("C14",),
        "regions do not overlap",
        "header",
        _validated(lambda e, s, i: isinstance(e, RegionError), lambda s, i: "no two regions overlap"),
    ),
    Rule(("C2",), "segment name", "live", _segment_name),
    Rule(("C9",), "service masks", "live", _services),
    Rule(("C10",), "reserved bytes zero", "live", _reserved_zero),
    Rule(("C5",), "segment_size matches the file", "live", _segment_size_matches),
    Rule(("C5",), "file mode 0600", "live", _file_mode),
    Rule(("C8",), "server pid alive", "live", _server_alive),
    Rule(("C18",), "client pid alive or 0", "live", _client_alive),
    Rule(("C20",), "lock-step gap", "live", _lock_step),
    Rule(("C25",), "heartbeat fresh", "live", _heartbeat),
    Rule(("C23",), "image_seq even", "live", _image_seq_even, applies=_has_images),
    Rule(("C23",), "image_frame_seq at most frame_seq + 1", "live", _image_frame_bound, applies=_has_images),
    Rule(("C26",), "ring {} positions", "live", _ring_positions, instances=_ring_names),
    Rule(("C36",), "tools owner 0 or alive", "live", _tools_owner, applies=_has_tools),
)

_NA_DETAIL = {
    "image_seq even": "no image region",
    "image_frame_seq at most frame_seq + 1": "no image region",
    "tools owner 0 or alive": "no tools channel",
}


def evaluate(subject: Subject, rules: Sequence[Rule] = RULES) -> list[RuleResult]:
    """Walk ``rules`` over ``subject``; one result per rule instance, in table order.

    A failed ``file`` or ``header`` rule skips every later rule. A header
    error no header rule recognises is reported as a final "header
    validation" failure, with every header rule skipped. Live rules run only
    when ``subject.seg`` is set and the header is valid.

    Parameters
    ----------
    subject
        What to check.
    rules
        The table (default :data:`RULES`).
    """
    h = subject.header
    rows = [(rule, inst, name) for rule in rules for inst, name in rule.expand(h)]
    out: list[RuleResult] = []
    stopped = subject.truncated  # the file rule reports it; everything after is skipped
    header_failed = False
    if subject.error is not None and not subject.truncated:
        # Does any header rule recognise the error? If not, skip them all and say so at the end.
        header_failed = not any(
            rule.stage == "header" and rule.applies(h, inst) and rule.check(subject, inst)[0] == FAIL
            for rule, inst, _ in rows
        )
    for rule, inst, name in rows:
        if rule.stage == "file":
            status, detail = rule.check(subject, inst)
        elif stopped or header_failed or (rule.stage == "live" and (subject.seg is None or subject.error)):
            status, detail = SKIPPED, ""
        elif not rule.applies(h, inst):
            status, detail = NA, _NA_DETAIL.get(name, "")
        else:
            status, detail = rule.check(subject, inst)
        out.append(RuleResult(name, status, detail, rule.ids))
        if status == FAIL and rule.stage in ("file", "header"):
            stopped = True
    if header_failed:
        out.append(RuleResult("header validation", FAIL, str(subject.error), ("C16",)))
    return out


def run_check(
    name: str, *, image_wait_s: float = 0.25, allow_other_user: bool = False
) -> tuple[list[RuleResult], HeaderError | None]:
    """Evaluate every conformance rule on segment ``name``.

    Parameters
    ----------
    name
        The segment name.
    image_wait_s
        How long ``image_seq`` may stay odd before "image_seq even" fails.
    allow_other_user
        Check a segment owned by another user too (refused by default, before
        any rule runs).

    Returns
    -------
    results : list of RuleResult
        In table order; after a failed header rule every later rule is ``skipped``.
    header_error : HeaderError or None
        The validation error, if the header is invalid.

    Raises
    ------
    InvalidSegmentName, SegmentNotFound, TransportError
        The segment cannot be opened at all.
    ForeignSegment
        It is owned by another user and ``allow_other_user`` is false.
    """
    from ..transport.shm import Segment, check_owner, peek_header, segment_mode, segment_owner

    try:
        check_owner(name, segment_owner(name), allow_other_user=allow_other_user)
        raw, size, _ = peek_header(name)
        mode = segment_mode(name)
    except TruncatedSegment as exc:
        blank = Header.unpack(bytes(HEADER_SIZE))
        return evaluate(Subject(blank, bytes(HEADER_SIZE), 0, exc, truncated=True)), exc
    subject = Subject(
        Header.unpack(raw), bytes(raw[:HEADER_SIZE]), size, image_wait_s=image_wait_s, name=name, file_mode=mode
    )
    try:
        hdr.validate(raw, mapped_size=size)
    except HeaderError as exc:
        subject.error = exc
        return evaluate(subject), exc
    with Segment.attach(name, allow_other_user=allow_other_user) as seg:
        subject.seg = seg
        return evaluate(subject), None
