"""The monitor's Qt-free heart: attach, poll, classify the link, copy new frames.

``MonitorCore.poll()`` is called at 60 Hz by the window (or by a test, or by a
headless loop). Each call does a bounded amount of work: a handful of counter
loads, at most one guarded copy of the hot arrays and at most one guarded copy
of the image region, into buffers allocated once per attach. It never writes a
byte of the segment.

It never loads a byte through the segment's mapping either: every read (live
fields, hot arrays, images) is a ``pread`` on the segment's descriptor
(:meth:`~lucky_monitor.transport.shm.Segment.pread_into`). A segment truncated
in the middle of a poll then gives a short read, reported as ``SegmentGone``
("segment shrank"), where a load from the mapping would be a ``SIGBUS`` that
kills the process.

Link states (``LinkState``) are what a researcher needs to read at a glance:
whether there is a segment at all, whether the engine lives, whether a trainer
drives it in lock-step and whose turn is holding things up.
"""

from __future__ import annotations

import collections
import enum
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..protocol.enums import EngineState, SimMode
from ..protocol.errors import ForeignSegment, HeaderError, LuckyMonitorError, TruncatedSegment
from ..protocol.header import LIVE_FIELDS, MAX_COUNT, OFFSET, Header, count_message
from ..protocol.seqlock import hot_read, seqlock_read
from ..transport.discovery import newest_live, pid_alive
from ..transport.shm import Live, ReadPlan, Segment, peek_header
from .pacing import Yielder, share_shows

_ENGINE_STATE_MAX = EngineState.max_value()
_SIM_MODE_MAX = SimMode.max_value()


class LinkState(enum.Enum):
    """Connection states, with the words the UI shows for them."""

    SEARCHING = "searching"
    INCOMPATIBLE = "incompatible"
    INITIALISING = "engine initialising"
    CONNECTED = "connected"
    WAITING_FOR_TRAINER = "waiting for trainer"
    ENGINE_STEPPING = "engine stepping"
    FREE_RUNNING = "free-running"
    PAUSED = "engine paused"
    STALLED = "stalled"
    VIOLATION = "lock-step violation"
    IMAGES_STUCK = "images stuck"
    TRAINER_LOST = "trainer exited"
    CLOSING = "engine closing"
    ENGINE_EXITED = "engine exited"

    @property
    def healthy(self) -> bool:
        return self in (
            LinkState.CONNECTED,
            LinkState.FREE_RUNNING,
            LinkState.ENGINE_STEPPING,
            LinkState.WAITING_FOR_TRAINER,
        )


@dataclass(frozen=True)
class Status:
    """What the status bar says right now."""

    state: LinkState
    text: str
    name: str | None = None
    reason: str | None = None
    notice: str | None = None  # transient: "segment recreated → reattached"


@dataclass
class Frame:
    """A new frame seen by :meth:`MonitorCore.poll`.

    The arrays are the core's own buffers, reused by the next poll: consume
    or copy them before polling again.
    """

    frame_seq: int
    action_seq: int
    t: float
    rewards: np.ndarray
    dones: np.ndarray
    truncateds: np.ndarray | None
    hot_ok: bool
    frames_skipped: int
    image_updated: bool = False
    image_seq: int = 0
    image_frame_seq: int = 0
    obs: np.ndarray | None = None  # the observations, copied with the rewards when ``copy_obs`` is on


@dataclass
class Rates:
    """Rates over the last second and the lock-step turn split of the polls.

    ``frames_per_s`` and ``images_per_s`` are ``None`` until a rate can be
    measured on the current attach (and again after a detach): a view shows
    "—" then, never the last value of a dead session.
    """

    frames_per_s: float | None = None
    images_per_s: float | None = None
    polls_engine_turn: int = 0
    polls_trainer_turn: int = 0
    polls_free_run: int = 0

    @property
    def engine_share(self) -> float | None:
        n = self.polls_engine_turn + self.polls_trainer_turn
        return self.polls_engine_turn / n if n else None

    def copy(self) -> Rates:
        """A snapshot (``dataclasses.replace`` does the same at several times the cost, every poll)."""
        return Rates(
            self.frames_per_s, self.images_per_s, self.polls_engine_turn, self.polls_trainer_turn, self.polls_free_run
        )


@dataclass
class Counters:
    """Counts of one attach; a new :class:`Counters` starts with every attach."""

    torn_images: int = 0
    torn_hot: int = 0
    images_copied: int = 0
    frames_seen: int = 0
    frames_skipped: int = 0
    late_polls: int = 0  # polls that came later than 1.5 poll periods after the previous one
    frames_skipped_late: int = 0  # of frames_skipped, those skipped while the poll was late (the monitor's doing)
    hot_deferred: int = 0  # new frames left to a later poll: the engine held the turn, inside its step

    def copy(self) -> Counters:
        """A snapshot (see :meth:`Rates.copy`)."""
        return Counters(
            self.torn_images,
            self.torn_hot,
            self.images_copied,
            self.frames_seen,
            self.frames_skipped,
            self.late_polls,
            self.frames_skipped_late,
            self.hot_deferred,
        )


#: Called under the image seqlock with the attached segment; copies what it needs through
#: :meth:`~lucky_monitor.transport.shm.Segment.read_images` (never from the mapping) and raises
#: :class:`~lucky_monitor.protocol.errors.SegmentGone` when a read comes back short.
ImageSink = Callable[[Segment], object]


class DeferredCopy(Protocol):
    """The answer to a deferred image copy: one the copier made under the image seqlock itself."""

    @property
    def ok(self) -> bool: ...  # consistent: the copy holds one whole publication
    @property
    def seq(self) -> int: ...  # its even ``image_seq``
    @property
    def frame_seq(self) -> int: ...  # ``image_frame_seq`` read under the same seqlock
    @property
    def torn(self) -> int: ...  # attempts discarded because the engine wrote meanwhile


class DeferredImages(Protocol):
    """An image copier that works while the monitor goes on (the sampling helper, see ``core.session``).

    ``request`` starts a copy of the current images and says whether it did
    (or one is still in flight); ``False`` and the poll copies through the
    :data:`ImageSink` under its own seqlock. ``collect`` never waits: it
    returns the answer to the request in flight once it came (the copy is
    then in the caller's buffers), ``None`` before, or when the answer no
    longer fits what is displayed. Both raise ``SegmentGone`` when the copier
    lost the segment.
    """

    def request(self, seg: Segment) -> bool: ...

    def collect(self, seg: Segment) -> DeferredCopy | None: ...


#: The inspector copies the obs (and act) region only up to this size: a header may describe 1 GiB of obs.
INSPECT_MAX_BYTES = 64 * 1024 * 1024
#: The whole image region is copied (one-shot readers: snapshot, record, check) only up to this size. A valid
#: header may describe 4096 envs of 4096x4096x4 (256 GiB); over this, no buffer is made and no image copied.
FULL_IMAGE_COPY_MAX_BYTES = 1 << 30


@dataclass
class _Attached:
    seg: Segment
    header: Header
    rewards: np.ndarray
    dones: np.ndarray
    truncateds: np.ndarray | None
    obs: np.ndarray | None = None
    last_frame: int = -1
    last_image_seq: int = -1
    last_heartbeat: int = -1
    heartbeat_changed_at: float = 0.0
    frame_changed_at: float = 0.0
    # The share of polls that found image_seq odd (a write in progress), averaged over about a second, and
    # whether it says the image seqlock is stuck or inverted (see MonitorCore._image_parity).
    odd_share: float = 0.0
    odd_share_at: float = 0.0
    images_stuck: bool = False
    server_alive: bool = True
    client_alive: bool = True
    pids_checked_at: float = -1e9
    validated_at: float = -1e9  # the last full Segment.still_valid (see MonitorCore._poll_attached)
    fixed_checked_at: float = -1e9  # the last comparison of the non-live header fields (C7)
    polled_frame: int = -1  # frame_seq as the previous poll read it
    hot_frame: int = -1  # the frame whose values the hot buffers hold (-1: none, or a torn copy)
    hot_action: int = 0
    client_pid: int = 0
    client_since: float = 0.0  # when client_pid last changed
    departed: tuple[int, float] | None = None  # (pid, when): a trainer found gone as its client_pid was cleared
    samples: collections.deque[tuple[float, int, int]] = field(default_factory=lambda: collections.deque(maxlen=256))
    turns: collections.deque[int] = field(default_factory=lambda: collections.deque(maxlen=120))
    hot_plan: ReadPlan | None = None  # the hot arrays' copy: one preadv where the layout allows
    seqs: tuple[int, int] = (0, 0)  # (frame_seq, action_seq) of the last combined read


class MonitorCore:
    """Attach to a segment (by name, or the newest live one) and follow it.

    Parameters
    ----------
    name
        Segment name. ``None`` follows the newest live ``prefix*`` segment.
    image_sink
        Called under the image seqlock with the attached segment; copies the
        pixels it needs into buffers the caller owns (the UI's tiler) through
        the segment's ``read_*`` methods. ``None`` copies the whole region
        into :attr:`images`.
    stall_after
        Seconds without a heartbeat change (or a frame, with a trainer
        attached) before the link is reported stalled.
    clock
        Monotonic seconds; injectable for tests.
    allow_other_user
        Attach to (and, following the newest, consider) segments owned by
        another user; refused by default.
    """

    RETRY_S = 0.5
    PID_CHECK_S = 0.5
    #: Longest time between two full validity checks of the attached segment while frames keep coming.
    VALIDATE_S = 0.25
    #: Seconds between comparisons of the non-live header fields with those at attach (one 4 KiB pread).
    FIXED_CHECK_S = 1.0
    NOTICE_S = 5.0
    #: Seconds "trainer exited" stays after the engine cleared a dead trainer's client_pid (then free-running).
    TRAINER_GONE_S = 10.0

    def __init__(
        self,
        name: str | None = None,
        *,
        prefix: str = "LuckyEngine_",
        image_sink: ImageSink | None = None,
        stall_after: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        allow_other_user: bool = False,
    ) -> None:
        self.name = name
        self.allow_other_user = allow_other_user
        self.prefix = prefix
        self.image_sink = image_sink
        self.deferred_images: DeferredImages | None = None  # tried before the sink; see DeferredImages
        self.stall_after = stall_after
        self.clock = clock
        self.counters = Counters()
        self.rates = Rates()
        self.images: np.ndarray | None = None
        self.generation = 0  # bumps on every attach and detach: geometry may have changed
        self.reattached = 0  # segments recreated under the followed name and re-attached
        self.live: Live | None = None  # the live fields read by the last poll (None when none was read)
        self.copy_images = True  # False: follow image_seq for rates but copy no pixels
        self.image_share = 1.0  # the share of images copied (image k when pacing.share_shows(k, share))
        self.copy_obs = False  # True: the guarded hot copy takes the observations too (the inspector's)
        self.yielder: Yielder | None = None  # offers the core between the poll's copies (see pacing.Yielder)
        self.on_attach: Callable[[Header], None] | None = None  # called before the first copy of an attach
        self.poll_period = 1.0 / 60.0
        self._force_images = False
        self._last_poll: float | None = None
        self._att: _Attached | None = None
        self._status = Status(LinkState.SEARCHING, self._searching_text(), name)
        self._next_try = 0.0
        self._notice: tuple[str, float] | None = None
        self._last_session: tuple[str, int] | None = None
        self._last_engine_pid = 0  # server_pid of the last attach (of segment _last_session[0])
        # The header of the first attach to _last_session: a later attach to the same session must find the
        # same non-live fields (C7); a self-consistent header rewritten under it had been attached at once.
        self._session_header: Header | None = None

    # ------------------------------------------------------------ accessors
    @property
    def status(self) -> Status:
        return self._status

    @property
    def segment(self) -> Segment | None:
        return self._att.seg if self._att else None

    @property
    def header(self) -> Header | None:
        return self._att.header if self._att else None

    def switch(self, name: str | None) -> None:
        """Follow another segment (``None``: the newest live one)."""
        self._detach()
        self.name = name
        self._last_session = None
        self._session_header = None
        self._next_try = 0.0
        self._set(LinkState.SEARCHING, self._searching_text())

    def close(self) -> None:
        self._detach()

    # ----------------------------------------------------------------- poll
    def poll(self, now: float | None = None) -> Frame | None:
        """Do one 60 Hz step; return a :class:`Frame` when a new frame arrived.

        Parameters
        ----------
        now
            Monotonic seconds of this poll (default: :attr:`clock`).
        """
        if now is None:
            now = self.clock()
        self.live = None
        if self._att is None:
            if now < self._next_try:
                self._refresh_notice(now)
                return None
            self._next_try = now + self.RETRY_S
            if not self._try_attach(now):
                return None
        try:
            return self._poll_attached(now)
        except (LuckyMonitorError, OSError, ValueError, KeyError) as exc:  # segment vanished or closed under us
            self._lost(self._why_lost() or f"segment lost: {exc}", now)
            return None

    def _why_lost(self) -> str | None:
        """After a failed read: the full check's words for it (shrank, unlinked, recreated), if it finds any."""
        att = self._att
        if att is None:
            return None
        try:
            return att.seg.still_valid()
        except (LuckyMonitorError, OSError, ValueError):
            return None

    # ------------------------------------------------------------ internals
    def _searching_text(self) -> str:
        return f"searching for {self.name}" if self.name else f"searching for {self.prefix}* segments"

    def _fixed_change(self, key: tuple[str, int], h: Header) -> str | None:
        """How ``h``'s non-live fields differ from the first attach's to the same session, or ``None``."""
        was = self._session_header
        if was is None or self._last_session != key or not h.session_id:
            return None
        for name in OFFSET:
            if name in LIVE_FIELDS:
                continue
            old, new = getattr(was, name), getattr(h, name)
            if old != new:
                shown = "" if isinstance(new, bytes) else f" ({old} -> {new})"
                return f"header field {name} differs from this session's first attach{shown}: only live fields change"
        return None

    def _set(self, state: LinkState, text: str, reason: str | None = None) -> None:
        notice = self._notice[0] if self._notice else None
        self._status = Status(state, text, self.name or (self._att.seg.name if self._att else None), reason, notice)

    def _refresh_notice(self, now: float) -> None:
        if self._notice and now - self._notice[1] > self.NOTICE_S:
            self._notice = None
            self._set(self._status.state, self._status.text, self._status.reason)

    def _try_attach(self, now: float) -> bool:
        name = self.name
        if name is None:
            info = newest_live(self.prefix, allow_other_user=self.allow_other_user)
            if info is None:
                self._set(LinkState.SEARCHING, self._searching_text())
                return False
            name = info.name
        try:
            seg = Segment.attach(name, allow_other_user=self.allow_other_user)
        except LuckyMonitorError as exc:
            left = None if isinstance(exc, ForeignSegment) else self._left_behind(name, exc)
            if left is not None:
                self._set(LinkState.ENGINE_EXITED, "engine exited", left)
            elif isinstance(exc, ForeignSegment):
                self._set(LinkState.INCOMPATIBLE, f"{name}: another user's segment", str(exc))
            elif isinstance(exc, HeaderError):
                self._set(LinkState.INCOMPATIBLE, f"{name}: incompatible", str(exc))
            else:
                self._set(LinkState.SEARCHING, self._searching_text(), str(exc))
            return False
        h = seg.header
        if not pid_alive(h.server_pid):
            # A stale segment (its engine died without unlinking): never attach to it, or every
            # poll would attach, find the pid dead and detach again. Look again every RETRY_S.
            seg.close()
            if self.name is None:
                self._set(LinkState.SEARCHING, self._searching_text())
            else:
                self._set(LinkState.ENGINE_EXITED, "engine exited", f"engine pid {h.server_pid} is gone")
            return False
        key = (seg.name, h.session_id)
        changed = self._fixed_change(key, h)
        if changed is not None:
            seg.close()
            self._set(LinkState.INCOMPATIBLE, f"{seg.name}: incompatible", changed)
            return False
        if self._last_session is not None and self._last_session[0] == seg.name and self._last_session != key:
            self.reattached += 1
            self._notice = (f"segment recreated → reattached (session {h.session_id:x})", now)
        if self._last_session != key:
            self._session_header = h
        self._last_session = key
        self._last_engine_pid = h.server_pid
        n = h.num_envs
        self._att = _Attached(
            seg=seg,
            header=h,
            rewards=np.zeros(n, np.float32),
            dones=np.zeros(n, np.uint8),
            truncateds=np.zeros(n, np.uint8) if seg.truncateds is not None else None,
            obs=np.zeros((n, h.obs_size), np.float32)
            if self.copy_obs and 4 * n * h.obs_size <= INSPECT_MAX_BYTES
            else None,
            heartbeat_changed_at=now - self._initial_heartbeat_age(seg),
            frame_changed_at=now,
            odd_share_at=now,
            last_heartbeat=seg.read_counter("heartbeat_ns"),
        )
        att = self._att
        parts = [(h.rewards_offset, att.rewards), (h.dones_offset, att.dones)]
        if att.truncateds is not None and h.truncateds_offset:
            parts.append((h.truncateds_offset, att.truncateds))
        if att.obs is not None:
            parts.append((h.obs_offset, att.obs))
        att.hot_plan = ReadPlan(parts)
        if seg.images is not None and self.image_sink is None and seg.images.nbytes <= FULL_IMAGE_COPY_MAX_BYTES:
            self.images = np.zeros(seg.images.shape, np.uint8)
        else:
            self.images = None
        self.generation += 1
        self.rates = Rates()
        self.counters = Counters()
        self._last_poll = None
        self._set(LinkState.CONNECTED, f"attached to {seg.name}")
        if self.on_attach is not None:
            self.on_attach(h)
        return True

    def _left_behind(self, name: str, exc: LuckyMonitorError) -> str | None:
        """Why ``name`` no longer attaches, if it is what the last attach's engine left behind when it died.

        An engine killed by a truncation (or killed while something else wrote over its header) leaves
        a file that fails the header check: that is the engine having exited, not a new, incompatible
        segment. It is the dead engine's while the file still holds its ``session_id`` or is too short
        to hold one; any other ``session_id`` is a new segment under the name, judged on its own.
        """
        last = self._last_session
        if last is None or last[0] != name or not self._last_engine_pid or pid_alive(self._last_engine_pid):
            return None
        try:
            raw = peek_header(name)[0]
        except TruncatedSegment:
            pass  # too short to hold a header: cut down from the dead engine's
        except LuckyMonitorError:
            return None
        else:
            if Header.unpack(raw).session_id != last[1]:
                return None
        return f"engine pid {self._last_engine_pid} is gone; the segment it left fails the header check ({exc})"

    def _initial_heartbeat_age(self, seg: Segment) -> float:
        """How old the heartbeat already is at attach, on the shared host clock (LAYOUT §8.3); 0 if unknown.

        A segment whose engine pid was reused by an unrelated process has a
        frozen heartbeat: judged only by change, it would read healthy for the
        first stall threshold after attach. Only with the real monotonic clock
        (a test may inject another).
        """
        if self.clock is not time.monotonic:
            return 0.0
        hb = seg.read_counter("heartbeat_ns")
        if not hb:
            return 0.0
        age = (time.monotonic_ns() - hb) / 1e9
        return age if 0.0 <= age < 86400.0 else 0.0

    def _detach(self) -> None:
        if self._att is not None:
            self._att.seg.close()
            self._att = None
            self.generation += 1
        self.rates = Rates()
        self.live = None

    def _lost(
        self, reason: str, now: float, state: LinkState = LinkState.ENGINE_EXITED, text: str = "engine exited"
    ) -> None:
        self._detach()
        self._next_try = now  # look for a successor at once (or attach the same name afresh)
        self._set(state, text, reason)

    def _copy_images(self, seg: Segment) -> None:
        assert self.images is not None
        seg.read_images(self.images)

    def _poll_attached(self, now: float) -> Frame | None:
        att = self._att
        assert att is not None
        seg = att.seg
        # Every live field, read once for this poll: what the views show is this one reading. The copy goes
        # through the fd, so a segment that shrank makes it fail (SegmentGone), never a SIGBUS.
        live = seg.read_live()
        # The full check (the name still leads to this file, the file still backs every region, the
        # session_id is unchanged) is three system calls. A poll whose frame_seq moved found the engine
        # writing this very mapping, so there it needs only the session_id, which came with the live
        # fields; the full check runs at every other poll and at least every VALIDATE_S.
        moved, att.polled_frame = live.frame_seq != att.polled_frame, live.frame_seq
        if not moved or now - att.validated_at >= self.VALIDATE_S:
            att.validated_at = now
            reason = seg.still_valid()
        else:
            reason = seg.session_changed()
        if reason is not None:
            self._lost(reason, now)
            return None
        if live.frame_seq >= MAX_COUNT or live.action_seq >= MAX_COUNT:
            # (a count past 2^63 is no frame counter: the history, the views and the exporters hold int64)
            field, v = ("frame_seq", live.frame_seq) if live.frame_seq >= MAX_COUNT else ("action_seq", live.action_seq)
            reason = str(HeaderError(field, count_message(v)))
            self._lost(reason, now, LinkState.INCOMPATIBLE, f"{seg.name}: incompatible")
            return None
        if live.engine_state > _ENGINE_STATE_MAX or live.sim_mode > _SIM_MODE_MAX:
            # The live fields the attach validated (rule 9) are held to the same ranges at every poll: a state
            # the protocol has no word for is not shown as some other state (unsigned: only too large fails).
            field, v, vocab = (
                ("engine_state", live.engine_state, EngineState)
                if live.engine_state > _ENGINE_STATE_MAX
                else ("sim_mode", live.sim_mode, SimMode)
            )
            reason = str(HeaderError(field, f"{v}, must be {vocab.describe()}"))  # the words a fresh attach says
            self._lost(reason, now, LinkState.INCOMPATIBLE, f"{seg.name}: incompatible")
            return None
        if now - att.fixed_checked_at >= self.FIXED_CHECK_S:
            # The attached view (sizes, offsets, format) holds while no non-live field changes (C7). One that
            # did makes every number read through it suspect: drop the attach; the next one validates afresh.
            att.fixed_checked_at = now
            changed = seg.fixed_fields_changed()
            if changed is not None:
                self._lost(changed, now, LinkState.INCOMPATIBLE, f"{seg.name}: incompatible")
                return None
        h = att.header
        counter = seg.read_counter
        if now - att.pids_checked_at >= self.PID_CHECK_S or live.client_pid != att.client_pid:
            # A trainer that leaves may be leaving because the engine died: look at once, so the state goes
            # straight to "engine exited" instead of showing free-running for up to PID_CHECK_S first.
            att.pids_checked_at = now
            att.server_alive = pid_alive(h.server_pid)
            att.client_alive = live.client_pid == 0 or pid_alive(live.client_pid)
            # A trainer found gone is said to have exited for TRAINER_GONE_S from then, also after the engine
            # cleared its client_pid: the engine does so within a step, so the poll that finds client_pid
            # cleared is usually the first to see the trainer gone (it read as a plain free run).
            gone = live.client_pid if live.client_pid != 0 and not att.client_alive else 0
            if not gone and live.client_pid == 0 and att.client_pid != 0 and not pid_alive(att.client_pid):
                gone = att.client_pid
            if gone and (att.departed is None or att.departed[0] != gone):
                att.departed = (gone, now)
            elif live.client_pid != 0 and att.client_alive:
                att.departed = None
        if not att.server_alive:
            self._lost(f"engine pid {h.server_pid} is gone", now)
            return None
        late = self._last_poll is not None and now - self._last_poll > 1.5 * self.poll_period
        if late:
            self.counters.late_polls += 1
        self._last_poll = now
        self.live = live
        frame_seq, action_seq, client_pid = live.frame_seq, live.action_seq, live.client_pid
        if live.heartbeat_ns != att.last_heartbeat:
            att.last_heartbeat = live.heartbeat_ns
            att.heartbeat_changed_at = now
        if client_pid != att.client_pid:
            att.client_pid = client_pid
            att.client_since = now
        free_run = client_pid == 0
        gap = frame_seq - action_seq
        if free_run:
            self.rates.polls_free_run += 1
        elif gap in (0, 1):
            att.turns.append(gap)
            eng = att.turns.count(0)
            self.rates.polls_engine_turn = eng
            self.rates.polls_trainer_turn = len(att.turns) - eng

        out: Frame | None = None
        if frame_seq != att.last_frame and frame_seq > 0:
            att.frame_changed_at = now
            # An engine that holds the turn for most polls (realtime, waiting for its next slot) is
            # idle, not writing: spinning for the trainer's turn would only burn the CPU it needs.
            share = self.rates.engine_share
            res = hot_read(
                lambda: self._read_seqs(att),
                lambda: att.seqs[1],  # read with frame_seq, in the same pread
                lambda: self._copy_hot(att),
                free_run=free_run,
                spin_s=0.0 if share is not None and share > 0.8 else 0.0005,
                mid_step=None if seg.images is None else lambda: self._mid_step(att),
                pause=self._nap,  # the core goes to the pair while the engine holds the turn
            )
            self.counters.torn_hot += res.torn
            if res.checked == "engine-step":
                # Nothing copied: the frame is taken at a later poll, and its skip counts then.
                self.counters.hot_deferred += 1
            else:
                skipped = max(0, frame_seq - att.last_frame - 1) if att.last_frame > 0 else 0
                att.last_frame = frame_seq
                # A failed copy leaves a torn mix in the buffers: no frame's values, never recorded as one.
                att.hot_frame, att.hot_action = (res.frame_seq, res.action_seq) if res.ok else (-1, 0)
                self.counters.frames_seen += 1
                self.counters.frames_skipped += skipped
                if late:
                    self.counters.frames_skipped_late += skipped
                out = Frame(res.frame_seq, res.action_seq, now, att.rewards, att.dones, att.truncateds, res.ok, skipped)
                out.obs = att.obs

        yielder = self.yielder
        if yielder is not None:
            yielder()  # between the hot copy and the image copy, never inside either
        image_seq = live.image_seq
        if seg.images is not None:
            self._image_parity(att, now, image_seq & 1)
        deferred = self.deferred_images if seg.images is not None else None
        if deferred is not None:  # a copy requested at an earlier poll, answered since: taken even if unwanted now
            got = deferred.collect(seg)
            if got is not None:
                self.counters.torn_images += got.torn
                if got.ok:
                    out = self._image_copied(out, att, now, got.seq, got.frame_seq)
        want_images = (
            self.copy_images
            and not att.images_stuck
            and (
                self._force_images
                or (
                    image_seq != att.last_image_seq
                    and (self.image_share >= 1.0 or share_shows(image_seq // 2, self.image_share))
                )
            )
        )  # an image left out of the share stays left out: a later poll does not copy it either
        if seg.images is not None and want_images and (deferred is None or not deferred.request(seg)):
            sink = self.image_sink or self._copy_images
            image_frame = [0]

            def copy() -> None:
                sink(seg)
                image_frame[0] = counter("image_frame_seq")  # after the copy, before the second image_seq (§8.1)

            r = seqlock_read(lambda: counter("image_seq"), copy)
            self.counters.torn_images += r.torn
            if r.ok:
                out = self._image_copied(out, att, now, r.seq, image_frame[0])
            if yielder is not None:
                yielder()

        sample = (now, frame_seq, image_seq // 2)
        if len(att.samples) > 1 and now - att.samples[-2][0] < 0.01:
            att.samples[-1] = sample  # polls closer than 10 ms apart share a slot: the window stays ~1 s
        else:
            att.samples.append(sample)
        self._update_rates(att, now)
        self._classify(att, now, frame_seq, action_seq, client_pid, live.engine_state)
        self._refresh_notice(now)
        return out

    #: The time constant (seconds) of the share of polls that find ``image_seq`` odd, and the shares at
    #: which the image seqlock counts as stuck or inverted, and as sound again.
    ODD_SHARE_TAU_S = 1.0
    ODD_SHARE_STUCK = 0.9
    ODD_SHARE_SOUND = 0.5

    def _image_parity(self, att: _Attached, now: float, odd: int) -> None:
        """Follow the share of polls that find an image write in progress; judge the image seqlock by it.

        A write is one memcpy of the region inside a step (§8.1), so most polls find ``image_seq`` even.
        An engine stuck inside a write finds it odd at every poll; one that keeps the seqlock inverted
        (odd between writes, even during them) at most: a poll that lands in a write then finds it even
        and its copy, though guarded, is taken mid-write. Past 90 % over about two seconds the seqlock
        is not trusted: no image is copied, and the hot read stops taking an odd ``image_seq`` for
        "the engine is inside its step" (it would defer nearly every frame); under 50 % it is again.
        """
        dt = now - att.odd_share_at
        att.odd_share_at = now
        if dt > 0:
            att.odd_share += (1.0 - math.exp(-dt / self.ODD_SHARE_TAU_S)) * (odd - att.odd_share)
        if att.images_stuck:
            att.images_stuck = att.odd_share > self.ODD_SHARE_SOUND
        else:
            att.images_stuck = att.odd_share >= self.ODD_SHARE_STUCK

    #: How long the hot read's wait for the trainer's turn sleeps between two looks at the counters. Beside
    #: ``sim --fast`` 256 envs + trainer a poll cost 0.57 ms of CPU napping 50 us (or 100 or 200) against
    #: 0.69 ms re-reading the counters with an offer of the core every 100 us (three sessions stepped in
    #: turn, 30 s; the naps' copies were torn a little more often, each retried).
    TURN_NAP_S = 50e-6

    def _nap(self) -> None:
        """One wait of the hot read's spin: sleep (the core is the pair's meanwhile), then work starts afresh."""
        time.sleep(self.TURN_NAP_S)
        if self.yielder is not None:
            self.yielder.begin()

    def _image_copied(self, out: Frame | None, att: _Attached, now: float, seq: int, frame_seq: int) -> Frame:
        """Record a consistent image copy (of ``image_seq`` ``seq``) in this poll's frame, made if need be."""
        self._force_images = False
        att.last_image_seq = seq
        self.counters.images_copied += 1
        if out is None:  # no hot copy this poll: the buffers still hold frame hot_frame's values (if any)
            ok = att.hot_frame > 0
            out = Frame(max(att.hot_frame, 0), att.hot_action, now, att.rewards, att.dones, att.truncateds, ok, 0)
            out.obs = att.obs
        out.image_updated = True
        out.image_seq = seq
        out.image_frame_seq = frame_seq
        return out

    def request_images(self) -> None:
        """Copy the image region at the next poll even if ``image_seq`` did not move."""
        self._force_images = True

    @property
    def images_stuck(self) -> bool:
        """Whether the attached segment's image seqlock reads as stuck or inverted (no copy of it is trusted)."""
        return self._att is not None and self._att.images_stuck

    @property
    def heartbeat_age(self) -> float | None:
        """Seconds since ``heartbeat_ns`` last changed, as of the last poll (``None`` detached)."""
        att = self._att
        if att is None or self._last_poll is None:
            return None
        return self._last_poll - att.heartbeat_changed_at

    @property
    def engine_alive(self) -> bool | None:
        return None if self._att is None else self._att.server_alive

    @property
    def trainer_alive(self) -> bool | None:
        """Whether the attached trainer's pid lives; ``None`` with no trainer attached."""
        att = self._att
        if att is None or not att.client_pid:
            return None
        return att.client_alive

    @staticmethod
    def _read_seqs(att: _Attached) -> int:
        att.seqs = att.seg.read_seqs()
        return att.seqs[0]

    @staticmethod
    def _mid_step(att: _Attached) -> bool:
        """Whether the engine, holding the turn, is inside its step: writing or done writing the next frame's images.

        It writes frame k + 1's images, under the image seqlock, before it
        publishes ``frame_seq = k + 1`` (LAYOUT §8.1), and its hot arrays
        before its images: while ``image_seq`` is odd or ``image_frame_seq``
        is ``frame_seq + 1``, the arrays hold the next frame's values. (A lead
        of more than one breaks §8.1 and says nothing: such an engine is read
        as before, best effort.)
        """
        image_seq, image_frame_seq = att.seg.read_image_seqs()
        if att.images_stuck:  # an odd image_seq says nothing about the step then (see _image_parity)
            return image_frame_seq == att.seqs[0] + 1
        return bool(image_seq & 1) or image_frame_seq == att.seqs[0] + 1

    @staticmethod
    def _copy_hot(att: _Attached) -> None:
        assert att.hot_plan is not None
        att.seg.read_plan(att.hot_plan)

    def _update_rates(self, att: _Attached, now: float) -> None:
        samples = att.samples
        while len(samples) > 2 and now - samples[0][0] > 1.0:
            samples.popleft()
        t0, f0, i0 = samples[0]
        dt = now - t0
        if dt > 0.2:
            self.rates.frames_per_s = max(0.0, (samples[-1][1] - f0) / dt)
            self.rates.images_per_s = max(0.0, (samples[-1][2] - i0) / dt)

    def _classify(
        self,
        att: _Attached,
        now: float,
        frame_seq: int,
        action_seq: int,
        client_pid: int,
        engine_state: int,
    ) -> None:
        hb_age = now - att.heartbeat_changed_at
        idle = now - att.frame_changed_at
        if engine_state == EngineState.CLOSING:
            self._set(LinkState.CLOSING, "engine closing")
        elif hb_age > self.stall_after:
            self._set(LinkState.STALLED, f"stalled for {hb_age:.0f} s", "no heartbeat from the engine")
        elif engine_state == EngineState.INITIALISING:
            self._set(LinkState.INITIALISING, "engine initialising")
        elif engine_state == EngineState.PAUSED:
            self._set(LinkState.PAUSED, "engine paused (not playing)")
        elif att.images_stuck:
            self._set(
                LinkState.IMAGES_STUCK,
                f"no consistent image: image_seq odd at {100 * att.odd_share:.0f} % of polls",
                "the engine is stuck inside an image write, keeps the image seqlock inverted, or writes images "
                "without a pause (LAYOUT 8.1); no image is copied meanwhile, the last good one stays",
            )
        elif client_pid == 0 and att.departed is not None and now - att.departed[1] < self.TRAINER_GONE_S:
            self._set(
                LinkState.TRAINER_LOST,
                f"trainer pid {att.departed[0]} exited",
                "the engine cleared its client_pid and free-runs",
            )
        elif client_pid == 0:
            text = "free-running, no trainer" if idle < self.stall_after else f"free-running, no frame for {idle:.0f} s"
            self._set(LinkState.FREE_RUNNING, text)
        elif not att.client_alive:
            self._set(LinkState.TRAINER_LOST, f"trainer pid {client_pid} exited")
        elif frame_seq - action_seq > 1 and now - att.client_since < self.stall_after:
            # Between the trainer's claim and its first step action_seq is still the free-run value.
            self._set(LinkState.WAITING_FOR_TRAINER, f"trainer pid {client_pid} attaching, first step pending")
        elif frame_seq - action_seq not in (0, 1):
            self._set(
                LinkState.VIOLATION,
                "lock-step violation",
                f"frame_seq - action_seq = {frame_seq - action_seq} (must be 0 or 1)",
            )
        elif idle < 0.5:
            self._set(LinkState.CONNECTED, f"lock-step with trainer pid {client_pid}")
        elif frame_seq - action_seq == 1:
            self._set(LinkState.WAITING_FOR_TRAINER, f"waiting for trainer for {idle:.1f} s")
        else:
            self._set(LinkState.ENGINE_STEPPING, f"engine stepping for {idle:.1f} s")
