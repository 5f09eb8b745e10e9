"""The one boundary every view reads: :class:`MonitorSession` and its :class:`Tick`.

Theory of operation
-------------------
A view (the window, ``lucky-monitor watch``, a test) calls
:meth:`MonitorSession.step` at its poll rate (60 Hz in the window). Each call

1. polls the link (:class:`~lucky_monitor.core.monitor.MonitorCore`): one
   validity check, every live header field read **once**, at most one
   guarded copy of the hot arrays and at most one seqlock-guarded fused
   copy-and-tile of the image region into the back grid;
2. on a new attach (or a detach) starts every per-session thing afresh:
   history, traffic taps, counters, tools channel, command results, grid
   geometry (from the header, so a segment recreated with another channel
   count is shown in its new geometry);
3. records the frame in the :class:`~lucky_monitor.core.history.History`,
   swaps the grid buffers when the image copy was consistent, taps the four
   command rings, collects command replies, sends a due repeated draw, and
   refreshes the segment list once a second;
3b. runs the inspector (``inspect=True``): checks the frame's obs and rewards,
   and the actions read in the engine's turn, for NaN, ±Inf and large values
   (:mod:`~lucky_monitor.core.inspector`), checks a sample of image tiles once
   a second (:mod:`~lucky_monitor.core.imagecheck`) and refreshes per-dim
   statistics at ``inspect_hz``; with GPU observations (``gpu_obs_mode = 1``)
   it copies the device buffer under the same guard and computes there;
4. returns a frozen :class:`Tick`: everything a view shows, read at one
   instant. Every string in it that can carry text from the segment (the
   state's text and reason, command results, the tools reason, segment
   names and errors, traffic errors) has passed through
   :func:`~lucky_monitor.core.text.safe_text`: bounded, control characters
   escaped; views show it as plain text. Arrays inside it are the session's own buffers, valid until the
   next ``step``; a view copies what it keeps.

Writes go only through session methods (:meth:`switch`,
:meth:`set_display`, :meth:`select`, :meth:`set_service`,
:meth:`set_sim_mode`, :meth:`draw`, :meth:`repeat`); their outcomes arrive
as :class:`CommandResult` values in a later tick. Views never see a
transport object.

This module is Qt-free.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..protocol.enums import ImageFormat, Service, SimMode
from ..protocol.errors import GpuUnavailable, LuckyMonitorError, ToolsChannelBusy, ToolsChannelUnavailable
from ..protocol.header import Header, LiveFields
from ..protocol.messages import (
    DrawReq,
    DrawResp,
    GetAgentSchemaReq,
    GetAgentSchemaResp,
    MethodId,
    SetServiceEnabledReq,
    SetServiceEnabledResp,
    SetSimulationModeReq,
    SetSimulationModeResp,
)
from ..protocol.seqlock import engine_turn_read, hot_read, seqlock_read
from ..transport.cuda import CudaObs
from ..transport.discovery import list_segments, pid_alive
from ..transport.sampler import ImageSampler, Sampled
from ..transport.shm import Segment, validate_name
from ..transport.tools import ToolsChannel, tools_owner
from ..transport.tools_agent import ToolsAgent, claim_tools
from . import drawing
from .commands import CommandClient, Reply
from .history import History
from .imagecheck import ImageChecker
from .inspector import DEFAULT_THRESHOLD, Alarm, AlarmScanner, AlarmState, InspectorFrame, dim_names, region_stats
from .monitor import INSPECT_MAX_BYTES, Counters, Frame, LinkState, MonitorCore, Rates
from .pacing import DEFAULT_YIELD_US, Yielder
from .text import ms_text, safe_text
from .tiler import GridGeometry, Tiler, TilerError, shrink_tiles
from .traffic import TapStats, TrafficEntry, TrafficLog

__all__ = [
    "Alarm",
    "AlarmState",
    "CommandResult",
    "CommandsState",
    "DisplayOptions",
    "FrameData",
    "GridDisplay",
    "ImageFrame",
    "InspectorFrame",
    "LinkState",
    "LiveFields",
    "MonitorSession",
    "PixelReading",
    "SegmentEntry",
    "Tick",
    "ToolsState",
    "TrafficStats",
    "ViewRequest",
    "validate_name",
]

DRAW_KINDS = ("line", "arrow", "velocity")
MAX_REPEAT_HZ = 60.0
#: Characters of a command result's text kept (an engine's error text is cut after this many).
RESULT_TEXT_MAX = 400


#: Seconds between refreshes of the inspector's statistics while no view shows them (see
#: :meth:`MonitorSession.want_statistics`).
UNSEEN_STATS_PERIOD_S = 5.0


# ---------------------------------------------------------------------------
# The values a Tick is made of
# ---------------------------------------------------------------------------


#: Bytes of the history's all-env raster ring: the rows it holds also seed a newly selected env's curve.
RASTER_BYTES = 16 << 20


def raster_rows(num_envs: int) -> int:
    """Rows of the history's all-env raster for ``num_envs``: 4096 (a minute at 60 Hz, the plots' default
    window) up to 1024 envs, fewer above within :data:`RASTER_BYTES` (1024 rows at 4096 envs), never under 600.

    A newly selected env's curve starts where these rows do: with 600 it covered the last 10-12 s of
    the 1-minute window.
    """
    return max(600, min(4096, RASTER_BYTES // (4 * max(1, int(num_envs)))))


@dataclass(frozen=True, slots=True)
class DisplayOptions:
    """How the image grid decodes and lays out tiles: plain values, no widget.

    ``columns`` ``None`` is automatic: the column count whose tiles come out
    largest in a view ``view_aspect`` wide per unit of height, or near-square
    when that is ``None`` (no view, or one not laid out yet); ``flip_rows``
    flips on top of the header's bottom-up flag; ``swap_rb`` swaps red and
    blue after decoding; ``show_alpha`` keeps alpha as a fourth channel.
    """

    columns: int | None = None
    flip_rows: bool = False
    swap_rb: bool = False
    show_alpha: bool = False
    view_aspect: float | None = None


@dataclass(frozen=True, slots=True)
class FrameData:
    """A new frame of hot data (views of the session's buffers, valid until the next step)."""

    frame_seq: int
    action_seq: int
    rewards: np.ndarray
    dones: np.ndarray
    truncateds: np.ndarray | None
    consistent: bool
    skipped: int
    obs: np.ndarray | None = None  # the observations (CPU region; None when the inspector is off)


@dataclass(frozen=True, slots=True)
class ImageFrame:
    """The grid as it should be shown now.

    ``grid`` is the front buffer (read-only view), ``layout`` its geometry
    (``env_at``, ``tile_origin``, ``columns``...); both are valid until the
    next step that brings a new image. ``new`` says whether this step copied
    a new batch (else it repeats the last one, e.g. after a geometry change).
    """

    grid: np.ndarray
    layout: GridGeometry
    display_layout: GridGeometry  # the tiles inside ``grid`` (as large as the screen shows them)
    step: float  # source pixels per display pixel (1.0: full size)
    scale: tuple[float, float]
    image_seq: int
    image_frame_seq: int
    src_format: str
    bottom_up: bool
    options: DisplayOptions
    new: bool
    #: The tiles (rows r0:r1, columns c0:c1 of ``display_layout``) this batch was copied into, ``None`` for all
    #: of them: a grid too large to copy whole is copied where the view is; the rest holds older tiles.
    region: tuple[int, int, int, int] | None = None

    def copied_part(self) -> tuple[int, int, int, int] | None:
        """The pixels of :attr:`grid` the batch was copied into, ``(y0, y1, x0, x1)``; ``None`` for all of it."""
        if self.region is None:
            return None
        r0, r1, c0, c1 = self.region
        g = self.display_layout
        h, w = self.grid.shape[:2]
        ph, pw = g.height + g.gap, g.width + g.gap
        y0, x0 = min(h, r0 * ph), min(w, c0 * pw)
        return y0, min(h, max(y0, r1 * ph - g.gap)), x0, min(w, max(x0, c1 * pw - g.gap))

    def shown_tile(self, env: int) -> np.ndarray:
        """``env``'s tile as it sits in :attr:`grid` (shrunk by :attr:`step`; tiles not in view are stale)."""
        g = self.display_layout
        x0, y0 = g.tile_origin(env)
        return self.grid[y0 : y0 + g.height, x0 : x0 + g.width]

    def display_rect(self) -> tuple[float, float, float, float]:
        """Where :attr:`grid` goes in grid coordinates: ``(0, 0, width, height)`` scaled by :attr:`scale`."""
        h, w = self.grid.shape[:2]
        return 0.0, 0.0, w * self.scale[0], h * self.scale[1]


@dataclass(frozen=True, slots=True)
class PixelReading:
    """One pixel read from the segment's image bytes (not from the display buffer)."""

    env: int
    x: int  # in the env's tile as displayed
    y: int
    format: str  # the source format label, e.g. "bgr"
    stored: tuple[int, ...]  # the channel values as the engine stored them
    shown: tuple[int, ...]  # the same pixel after the display options, RGB (RGBA when alpha is shown)
    row: int | None = None  # the row of the image as stored, where rows are shown flipped (else ``y``)

    @classmethod
    def of(
        cls,
        env: int,
        x: int,
        y: int,
        stored: tuple[int, ...],
        src_format: str,
        options: DisplayOptions,
        row: int | None = None,
    ) -> PixelReading:
        """Decode ``stored`` (the engine's channel values) as the grid shows them under ``options``."""
        fmt = ImageFormat.resolve(ImageFormat.from_label(src_format), len(stored)) or ImageFormat.RGB
        if fmt is ImageFormat.GRAY:
            rgb: tuple[int, ...] = (stored[0],) * 3
        else:
            rgb = stored[:3][::-1] if fmt.blue_first else stored[:3]
            if options.swap_rb:
                rgb = rgb[::-1]
        if options.show_alpha:
            rgb = (*rgb, stored[3] if fmt.has_alpha else 255)
        return cls(env, x, y, fmt.label, stored, rgb, None if row == y else row)


@dataclass(frozen=True, slots=True)
class ToolsState:
    """The tools channel as this session sees it.

    ``exported``: the engine exports one. ``ours``: this session holds it.
    ``owner_pid``: who holds it (0 free). ``reason``: why commands cannot be
    sent now ("" when ``ours``).
    """

    exported: bool = False
    ours: bool = False
    owner_pid: int = 0
    reason: str = "no segment attached"
    ring_size: int = 0

    @property
    def owner_text(self) -> str:
        if not self.exported:
            return "—"
        if self.ours:
            return f"this monitor (pid {self.owner_pid})"
        return f"pid {self.owner_pid}" if self.owner_pid else "free"


@dataclass(frozen=True, slots=True)
class CommandResult:
    """The outcome of one command sent through the session.

    ``kind`` is ``"service"``, ``"sim"``, ``"line"``, ``"arrow"``,
    ``"velocity"``, ``"clear"`` or ``"reply"`` (an unreadable reply on the
    tools ring, which no request claims); ``target`` the service bit or sim
    mode (0 for draws). ``status`` is ``"ok"`` or ``"error"``.
    """

    kind: str
    target: int
    status: str
    text: str
    rtt_s: float | None = None
    correlation_id: int = 0

    def __post_init__(self) -> None:
        # The text carries the engine's words (an error_message of up to half a ring): shown
        # bounded and as plain text, control characters escaped.
        object.__setattr__(self, "text", safe_text(self.text, RESULT_TEXT_MAX))

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True, slots=True)
class CommandsState:
    """Requests in flight and the repeat scheduler."""

    pending_services: frozenset[int] = frozenset()
    sim_pending: bool = False
    draw_pending: bool = False
    repeat_kind: str = ""
    repeat_hz: float = 0.0
    draws_answered: int = 0


@dataclass(frozen=True, slots=True)
class SegmentEntry:
    """One segment in the picker."""

    name: str
    server_pid: int
    alive: bool
    num_envs: int
    age_s: float | None  # since the engine's session began; None where unknown
    error: str | None
    server_alive: bool = False  # the pid lives (``alive`` also needs a fresh heartbeat)


@dataclass(frozen=True, slots=True)
class TrafficStats:
    """Per-ring tap counts of this attach, keyed ``"main c2s"`` ... ``"tools s2c"``."""

    messages: dict[str, int] = field(default_factory=dict)
    missed_bytes: dict[str, int] = field(default_factory=dict)
    corrupt: dict[str, int] = field(default_factory=dict)
    undecodable: dict[str, int] = field(default_factory=dict)
    last_problem: str | None = None
    total: int = 0

    @classmethod
    def of(cls, log: TrafficLog) -> TrafficStats:
        """The counts of ``log``'s taps right now, keyed ``"main c2s"`` ... ``"tools s2c"``."""
        stats: dict[tuple[str, str], TapStats] = log.stats
        key = {k: f"{k[0]} {k[1]}" for k in stats}
        problem = next((s.last_problem for s in stats.values() if s.last_problem), None)
        return cls(
            messages={key[k]: s.messages for k, s in stats.items()},
            missed_bytes={key[k]: s.missed_bytes for k, s in stats.items()},
            corrupt={key[k]: s.corrupt for k, s in stats.items()},
            undecodable={key[k]: s.undecodable for k, s in stats.items()},
            last_problem=problem,
            total=log.total,
        )

    @property
    def corrupt_total(self) -> int:
        return sum(self.corrupt.values())

    @property
    def missed_total(self) -> int:
        return sum(self.missed_bytes.values())


@dataclass(frozen=True, slots=True)
class Tick:
    """Everything a view shows, from one :meth:`MonitorSession.step`.

    Counters, rates, results and traffic belong to the current attach
    (``generation``): a new attach starts them afresh. ``header`` is ``None``
    while nothing is attached.
    """

    t: float
    seq: int
    generation: int
    state: LinkState
    text: str
    reason: str | None
    notice: str | None
    name: str | None  # the segment followed or attached
    selected: str | None  # what was asked for (None: the newest live one)
    header: Header | None
    live: LiveFields | None
    heartbeat_age_s: float | None
    engine_alive: bool | None  # None: not attached, and not known to be gone (False in "engine exited")
    trainer_alive: bool | None  # None: no trainer attached
    rates: Rates
    counters: Counters
    reattached: int
    frame: FrameData | None
    image: ImageFrame | None
    display_error: str | None
    history: History | None
    tools: ToolsState
    results: tuple[CommandResult, ...]
    commands: CommandsState
    segments: tuple[SegmentEntry, ...]
    segments_changed: bool
    traffic: tuple[TrafficEntry, ...]
    traffic_stats: TrafficStats
    paused: bool
    # The inspector and the alarms (core/inspector.py): alarms every frame, statistics at a bounded rate.
    # ``alarms.nonfinite_total`` is the per-region count behind ``lucky_nonfinite_total{region=...}``.
    alarms: AlarmState = field(default_factory=AlarmState)
    inspector: InspectorFrame | None = None

    @property
    def attached(self) -> bool:
        return self.header is not None

    @property
    def engine_share(self) -> float | None:
        """Share of lock-step polls in the engine's turn (``None``: no trainer or no samples)."""
        if self.live is None or self.live.client_pid == 0:
            return None
        return self.rates.engine_share


# ---------------------------------------------------------------------------
# Double-buffered grid
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ViewRequest:
    """What part of the grid a view shows and how large: plain values from the view.

    ``x0, y0, x1, y1`` are full-resolution grid coordinates (the
    :class:`~lucky_monitor.core.tiler.GridGeometry` of the Tick's image);
    ``screen_px`` is screen pixels per grid pixel (below 1: tiles are shown
    smaller than their pixels).
    """

    x0: float
    y0: float
    x1: float
    y1: float
    screen_px: float

    def display_tile(self, height: int, width: int, gap: int) -> tuple[int, int]:
        """A ``height × width`` tile's size in screen pixels, whole: the size of its display copy.

        At full size or larger (``screen_px >= 1``) that is the tile's own
        size (Qt scales it up); smaller, it is the tile's screen size, so
        that the display buffer is as large as the screen shows it and
        drawing it is a blit. Gaps shrink to one pixel.
        """
        sp = self.screen_px
        if not (sp > 0 and math.isfinite(sp)) or sp >= 1:
            return height, width
        gd = min(1, gap)
        th = min(height, max(1, round((height + gap) * sp) - gd))
        tw = min(width, max(1, round((width + gap) * sp) - gd))
        return th, tw


class GridDisplay:
    """The grid as shown: full-resolution layout, and two display buffers at the screen's size.

    Work per frame is bounded by the screen: only the tiles in view are
    copied, and when tiles are shown smaller than their pixels they are
    shrunk on the way to the size the screen shows them (a fixed four-pixel
    sample per output pixel, :meth:`Tiler.tile`), so the cost tracks output
    pixels, not segment bytes, and the window draws the buffer without
    scaling it again. A torn copy is never swapped in: the front buffer always holds the
    last good frame. Coordinates stay those of the full-resolution
    :attr:`geometry`; a display pixel covers :attr:`scale` grid pixels.
    """

    #: Below this many display bytes every tile is copied (cheaper than tracking the view, and no
    #: tile is ever stale); above it only the tiles in view are.
    FULL_COPY_BYTES = 4 << 20

    #: Source bytes tiled between two offers of the core (:meth:`finish`): about 0.2-0.3 ms of work. Each band
    #: has a fixed cost of its own (a dozen numpy calls, ~45 us): 256 envs of 64x64 RGB shrunk to 50x50 take
    #: 7.0 ms in 64 bands of 64 KiB, 5.5 ms in 32 of 128 KiB, 4.5 ms in one.
    TILE_BAND_BYTES = 128 << 10

    def __init__(
        self, n: int, h: int, w: int, c: int, *, gap: int = 2, gap_value: int | tuple[int, int, int] = 40
    ) -> None:
        self.shape = (n, h, w, c)
        self.gap = gap
        self.gap_value = gap_value
        self.tile = (h, w)  # display tile size
        self.front: Tiler | None = None
        self.back: Tiler | None = None
        self.has_frame = False
        #: The tiles (rows r0:r1, columns c0:c1) the front buffer's last tiling wrote; ``None``: all of them.
        self.front_region: tuple[int, int, int, int] | None = None
        self._back_region: tuple[int, int, int, int] | None = None
        self._plan = Tiler(n, h, w, c, gap=gap, allocate=False)
        self._geometry_key: tuple[int, int | None, bool] | None = None
        self._sampler: ImageSampler | None = None
        self._sampler_key: tuple[str, int, int] | None = None
        self._helper_cpu = 0.0
        self._geometry = self._plan.geometry
        self._layout = 0  # bumps at each configure: an answer to a request made before is dropped
        # What the sampling request in flight was for: segment key, layout, region, format, flip, swap_rb, show_alpha.
        self._in_flight: tuple[Any, int, tuple[int, int, int, int] | None, str, bool, bool, bool] | None = None
        # A copy read out under the image seqlock, not yet tiled: (source, format, flip, options, region).
        self._pending: tuple[np.ndarray, str, bool, DisplayOptions, tuple[int, int, int, int] | None] | None = None
        #: Offers the core between bands of tiling (the session's); ``None`` or inactive: one band.
        self.yielder: Yielder | None = None
        # Per back buffer (two alternate): (tiler, its grid, source, options, bands, each band's copy views).
        self._copy_plans: dict[int, tuple[Any, ...]] = {}

    @property
    def geometry(self) -> GridGeometry:
        plan, front = self._plan, self.front
        key = (plan.columns, plan.columns_setting, plan.shows_alpha if front is None else front.shows_alpha)
        if key != self._geometry_key:  # one value per layout: views compare it, and it is asked every tick
            self._geometry_key = key
            g = plan.geometry
            self._geometry = replace(g, out_channels=4 if key[2] else 3)
        return self._geometry

    @property
    def scale(self) -> tuple[float, float]:
        """Grid pixels per display pixel ``(sx, sy)``."""
        _, h, w, _ = self.shape
        assert self.front is not None
        f = self.front
        return (w + self.gap) / (f.width + f.gap), (h + self.gap) / (f.height + f.gap)

    @property
    def step(self) -> float:
        """Source pixels per display pixel (the larger of the two axes; 1.0 at full size)."""
        _, h, w, _ = self.shape
        return max(h / self.tile[0], w / self.tile[1])

    def configure(self, columns: int | None, tile: tuple[int, int] | None = None) -> str | None:
        """Plan the layout and (re)allocate both buffers; return why ``columns`` could not be used.

        ``tile``: the display tile size (``None``: keep the current one), at most the images' size.
        """
        n, h, w, c = self.shape
        err = None
        try:
            self._plan.columns = columns
        except TilerError as exc:
            if columns is None:
                raise
            err = str(exc)
            self._plan.columns = None
        if tile is not None:
            self.tile = (max(1, min(int(tile[0]), h)), max(1, min(int(tile[1]), w)))
        th, tw = self.tile
        gd = self.gap if (th, tw) == (h, w) else min(1, self.gap)
        cols = self._plan.columns
        alpha = self.front is not None and self.front.shows_alpha
        self.front = Tiler(n, th, tw, c, columns=cols, gap=gd, gap_value=self.gap_value)
        self.back = Tiler(n, th, tw, c, columns=cols, gap=gd, gap_value=self.gap_value)
        self._layout += 1
        self._copy_plans.clear()
        self.front_region = self._back_region = None
        if alpha:
            for t in (self.front, self.back):
                t._plan(cols, 4)
        self.has_frame = False
        return err

    def set_aspect(self, aspect: float | None) -> bool:
        """Plan automatic columns for a view ``aspect`` wide per unit of height; whether that changes them.

        Only the plan: :meth:`configure` lays the buffers out. An aspect the
        tiler refuses (a view of no size) counts as ``None``.
        """
        before = self._plan.columns
        try:
            self._plan.aspect = aspect
        except TilerError:
            self._plan.aspect = None
        return self._plan.columns != before

    def _spans(self, region: tuple[int, int, int, int] | None) -> list[tuple[int, int]]:
        """Env ranges ``[start, stop)`` of the tiles in ``region`` (all envs for ``None``), adjacent ones merged."""
        n = self.shape[0]
        if region is None:
            return [(0, n)]
        cols = self._plan.columns
        r0, r1, c0, c1 = region
        spans: list[tuple[int, int]] = []
        for r in range(max(0, r0), r1):
            start, stop = r * cols + max(0, c0), min(n, r * cols + c1)
            if start >= stop:
                continue
            if spans and spans[-1][1] == start:
                spans[-1] = (spans[-1][0], stop)
            else:
                spans.append((start, stop))
        return spans

    def _route(
        self, bottom_up: bool, o: DisplayOptions, view: ViewRequest | None
    ) -> tuple[tuple[int, int, int, int] | None, list[tuple[int, int]], bool, bool]:
        """``(region, spans, flip, shrink)`` of the next copy: the tiles in view, and whether they are shrunk first."""
        assert self.back is not None
        region = None
        b = self.back
        if view is not None and b.num_envs * b.height * b.width * b.channels > self.FULL_COPY_BYTES:
            region = self.geometry.tiles_in(view.x0, view.y0, view.x1, view.y1)
        flip = bottom_up != o.flip_rows
        spans = self._spans(region)
        _, h, w, c = self.shape
        shrink = self.tile != (h, w) and sum(e - s for s, e in spans) * h * w * c > self.SAMPLE_CHUNK_BYTES
        return region, spans, flip, shrink

    def copy(self, seg: Segment, src_format: str, bottom_up: bool, o: DisplayOptions, view: ViewRequest | None) -> None:
        """Read the tiles in view from ``seg``, here and now, for :meth:`finish` to tile into the back buffer.

        Called under the image seqlock: the guarded part is the read (above :attr:`SAMPLE_CHUNK_BYTES`
        of tiles to shrink, the read and shrink of each cache-sized chunk); the tiling waits until
        the seqlock said the read was consistent (see the class docstring).

        Raises
        ------
        SegmentGone
            A read came back short: the segment shrank while it was copied.
        """
        assert self.back is not None
        region, spans, flip, shrink = self._route(bottom_up, o, view)
        if not shrink:
            # The tiles in view, at their size, in one read; the tiler shrinks them into the grid itself
            # (no intermediate buffer of shrunk tiles: a frame touches fewer bytes) in finish(), after
            # the seqlock: the guarded part is the read alone.
            src = self._buffer("_mirror", self.shape)
            for start, stop in spans:
                seg.read_images(src, start, stop)
        else:
            src = self._buffer("_sampled", (self.shape[0], self.back.height, self.back.width, self.shape[3]))
            self._sample(seg, spans, flip, src)
            flip = False  # sampled from the flipped rows already
        self._pending = (src, src_format, flip, o, region)

    def finish(self) -> None:
        """Tile the copy :meth:`copy` read into the back buffer: call once the seqlock said it was consistent.

        While the :attr:`yielder` is active (the machine is saturated), a band of tile rows at a time
        (:attr:`TILE_BAND_BYTES` of source) with an offer of the core between bands, so tiling a frame is a
        series of short bursts of work; otherwise all at once. Nothing pending: nothing.

        Raises
        ------
        TilerError
            The tiler refused the source (a geometry it was not planned for).
        """
        pending, self._pending = self._pending, None
        if pending is not None:
            self._tile_banded(*pending)

    def discard(self) -> None:
        """Forget a copy that will not be tiled (its read was torn, or it was not wanted after all)."""
        self._pending = None

    def _tile_banded(
        self, src: np.ndarray, src_format: str, flip: bool, o: DisplayOptions, region: tuple[int, int, int, int] | None
    ) -> None:
        y = self.yielder
        offer = y is not None and y.active
        back = self.back
        assert back is not None
        self._back_region = region
        key = (src_format, flip, o.swap_rb, o.show_alpha, region)
        plan = self._copy_plans.get(id(back))
        if plan is None or plan[0] is not back or plan[1] is not back.grid or plan[2] is not src or plan[3] != key:
            # The same mirror buffer is tiled frame after frame into the same two grids: the views of
            # each band's copies are made once (the tiler checks the arguments then) and kept.
            copies: list[list[tuple[np.ndarray, np.ndarray]]] | None = []
            bands = self._bands(src, region)
            for band in bands:
                c = back.copies(
                    src, src_format=src_format, flip_rows=flip, swap_rb=o.swap_rb, show_alpha=o.show_alpha, region=band
                )
                if c is None or copies is None:
                    copies = None  # images to shrink into the tiles: tiled band by band each time
                    continue
                copies.append(c)
            plan = (back, back.grid, src, key, bands, copies)
            self._copy_plans[id(back)] = plan
        bands, copies = plan[4], plan[5]
        if copies is not None:
            copyto = np.copyto
            for i, band_copies in enumerate(copies):
                if i and offer and y is not None:
                    y()
                for d, s in band_copies:
                    copyto(d, s)
            return
        if not offer:  # nothing to offer the core to: bands would only cost their overhead
            self._tile(src, src_format, flip, o, region)
            return
        for i, band in enumerate(bands):
            if i and y is not None:
                y()
            self._tile(src, src_format, flip, o, band)

    def _bands(self, src: np.ndarray, region: tuple[int, int, int, int] | None) -> list[tuple[int, int, int, int]]:
        """``region`` (all tiles for ``None``) cut into bands of about :attr:`TILE_BAND_BYTES` of source."""
        g = self.geometry
        r0, r1, c0, c1 = region if region is not None else (0, g.rows, 0, g.columns)
        r0, r1, c0, c1 = max(0, r0), min(g.rows, r1), max(0, c0), min(g.columns, c1)
        per_tile = max(1, src.shape[1] * src.shape[2] * src.shape[3])
        tiles = max(1, self.TILE_BAND_BYTES // per_tile)  # per band: whole tile rows, or part of one
        row_band = max(1, tiles // max(1, c1 - c0))
        col_band = c1 - c0 if row_band > 1 else max(1, tiles)
        bands = [
            (a, min(r1, a + row_band), b, min(c1, b + col_band))
            for a in range(r0, r1, row_band)
            for b in range(c0, c1, col_band)
        ]
        return bands

    def _tile(
        self, src: np.ndarray, src_format: str, flip: bool, o: DisplayOptions, region: tuple[int, int, int, int] | None
    ) -> None:
        assert self.back is not None
        self.back.tile(
            src,
            src_format=src_format,
            flip_rows=flip,
            swap_rb=o.swap_rb,
            show_alpha=o.show_alpha,
            step=None,  # images of the tiles' size, or larger: shrunk into the tiles
            region=region,
        )

    def request(
        self, seg: Segment, src_format: str, bottom_up: bool, o: DisplayOptions, view: ViewRequest | None
    ) -> bool:
        """Start the sampling helper on the tiles in view if this copy is its; whether it is (or one is in flight).

        ``False``: copy here with :meth:`copy`, under the monitor's seqlock
        (tiles at full size, fewer than :attr:`SAMPLER_MIN_BYTES` to
        shrink, or no helper, or not attached yet). ``True``: the helper
        samples under the seqlock itself; :meth:`collect` tiles its answer
        into the back buffer at a later step, the tick never waits for it.

        Raises
        ------
        SegmentGone
            The helper is gone (the segment shrank under it).
        """
        if self._in_flight is not None:
            return True
        n, h, w, c = self.shape
        if n * h * w * c < self.SAMPLER_MIN_BYTES or self.tile == (h, w):
            return False  # never the helper's (the demo's 64 envs of 64x64 are 0.75 MiB)
        region, spans, flip, shrink = self._route(bottom_up, o, view)
        if not shrink or sum(e - s for s, e in spans) * h * w * c < self.SAMPLER_MIN_BYTES:
            return False
        sampler = self._sampler_for(seg)
        if sampler is None or not sampler.ready():
            return False
        assert self.back is not None
        sampler.submit(spans, flip, (self.shape[0], self.back.height, self.back.width, c))
        self._in_flight = (self._sampler_key, self._layout, region, src_format, flip, o.swap_rb, o.show_alpha)
        return True

    def collect(
        self, seg: Segment, src_format: str, bottom_up: bool, o: DisplayOptions, view: ViewRequest | None
    ) -> Sampled | None:
        """The helper's answer to the request in flight, tiled into the back buffer; ``None`` until it came.

        An answer to a request for another segment, layout, row order,
        colour options or tiles in view than now is dropped (``None``): the caller asks again. A
        torn one (``ok`` false) is returned untiled.

        Raises
        ------
        SegmentGone
            The helper died (the segment shrank under it) or stopped answering.
        TilerError
            The tiler refused the result.
        """
        asked, sampler = self._in_flight, self._sampler
        if asked is None or sampler is None:
            return None
        got = sampler.result()
        if got is None:
            return None
        self._in_flight = None
        key, layout, region, fmt, flip, swap_rb, show_alpha = asked
        now = ((seg.name, seg.inode, seg.session_id), self._layout, src_format, bottom_up != o.flip_rows)
        if (key, layout, fmt, flip, swap_rb, show_alpha) != (*now, o.swap_rb, o.show_alpha):
            return None
        if region != self._route(bottom_up, o, view)[0]:
            return None  # the view moved meanwhile: the tiles now in view were not all sampled
        if got.ok:
            self._tile_banded(got.images, src_format, False, o, region)  # the rows were flipped while sampled
        return got

    #: Below this many bytes of envs to shrink, they are copied out with ``pread`` and shrunk here: a
    #: copy that small costs less than a round trip to the sampling helper (which is then not even
    #: started). Measured at 16 envs of 256x256 RGB (3 MiB): 0.80 ms here against 0.61 ms of the
    #: monitor's wait plus the helper's own CPU; the demo's 64 envs of 64x64 are 0.75 MiB.
    SAMPLER_MIN_BYTES = 4 << 20

    #: Bytes of the image region read per ``pread`` on the downscaled path: a chunk that stays in
    #: the cache while it is sampled (measured: 256 envs of 64x64 RGB beat 64 and 1024). Tiles in
    #: view that fit in one chunk are read at once and shrunk by the tiler straight into the grid.
    SAMPLE_CHUNK_BYTES = 3 << 20

    def _sample(self, seg: Segment, spans: list[tuple[int, int]], flip: bool, out: np.ndarray) -> None:
        """Shrink the envs of ``spans`` to the display tile size into ``out`` (rows flipped first if ``flip``), here.

        A cache-sized chunk at a time is copied out with one ``pread`` (never
        loaded from the mapping), then shrunk by
        :func:`~lucky_monitor.core.tiler.shrink_tiles`. For
        :attr:`SAMPLER_MIN_BYTES` or more the sampling helper does this
        instead once it is up (:meth:`request`; it reads only the sampled
        pixels, from its own mapping: see
        :class:`~lucky_monitor.transport.sampler.ImageSampler` for why and
        the figures).
        """
        _, h, w, c = self.shape
        per = h * w * c
        k = max(1, self.SAMPLE_CHUNK_BYTES // per)
        chunk = self._buffer("_chunk", (k, h, w, c))
        th, tw = out.shape[1], out.shape[2]
        for start, stop in spans:
            for a in range(start, stop, k):
                e = min(stop, a + k)
                part = chunk[: e - a]
                seg.read_region(seg.header.image_offset + a * per, part)
                block = part[:, ::-1] if flip else part
                out[a:e] = shrink_tiles(block, th, tw)

    #: The sampling function the helper process imports (see :class:`~lucky_monitor.transport.sampler.ImageSampler`).
    SAMPLE_FUNCTION = "lucky_monitor.core.tiler:shrink_tiles"

    def _sampler_for(self, seg: Segment) -> ImageSampler | None:
        """The helper process that downscales ``seg``'s images (started on first use; ``None`` where unavailable)."""
        key = (seg.name, seg.inode, seg.session_id)
        if self._sampler_key != key:
            self.close()
            self._sampler_key = key
            n, h, w, c = self.shape
            try:
                self._sampler = ImageSampler.start(seg, self.SAMPLE_FUNCTION, n * h * w * c)
            except (OSError, ValueError, LuckyMonitorError):
                self._sampler = None  # sample in-process from pread copies
        return self._sampler

    def close(self) -> None:
        """Stop the sampling helper, if any (the grid is dropped, or its segment is)."""
        sampler, self._sampler = self._sampler, None
        self._sampler_key = None
        self._in_flight = None
        if sampler is not None:
            sampler.close()
            self._helper_cpu += sampler.cpu_s()

    def helper_cpu_s(self) -> float:
        """CPU seconds of this grid's sampling helpers so far (see :meth:`MonitorSession.helper_cpu_s`)."""
        return self._helper_cpu + (self._sampler.cpu_s() if self._sampler is not None else 0.0)

    def _buffer(self, attr: str, shape: tuple[int, ...]) -> np.ndarray:
        """A private ``uint8`` buffer of ``shape``, allocated once (``np.empty``: untouched pages cost nothing)."""
        buf: np.ndarray | None = getattr(self, attr, None)
        if buf is None or buf.shape != shape:
            buf = np.empty(shape, np.uint8)
            setattr(self, attr, buf)
        return buf

    def swap(self) -> None:
        self.front, self.back = self.back, self.front
        self.front_region = self._back_region
        self.has_frame = True


class _DeferredGrid:
    """The session's grid as the link's :class:`~lucky_monitor.core.monitor.DeferredImages` (the sampling helper)."""

    def __init__(self, session: MonitorSession) -> None:
        self._session = session

    def request(self, seg: Segment) -> bool:
        return self._session._request_copy(seg)

    def collect(self, seg: Segment) -> Sampled | None:
        return self._session._collect_copy(seg)


# ---------------------------------------------------------------------------
# The session
# ---------------------------------------------------------------------------


#: Seconds between reads of the tools reply ring while no request waits for an answer.
IDLE_COLLECT_S = 0.5


class MonitorSession:
    """Follow one segment (by name, or the newest live one) and describe it once per step.

    Parameters
    ----------
    name
        Segment name; ``None`` follows the newest live ``prefix*`` segment.
    prefix
        Name prefix for discovery.
    tools
        Claim the engine's tools channel to send commands (``False``: never
        write a byte anywhere, as ``watch`` does).
    images
        Copy and tile the image region (``False``: follow ``image_seq`` only).
    discover
        Refresh the segment list once a second (for a picker).
    traffic
        Tap the four command rings.
    history_capacity
        Frames kept by the history.
    command_timeout_s
        A request without a reply after this long is reported as timed out.
    tools_pid
        The pid written into the tools channel's owner word (default: this process).
    stall_after
        Seconds without a heartbeat before the link reads *stalled*.
    allow_other_user
        Attach to a segment owned by another user (and claim its tools
        channel); refused by default, with a reason naming the owner.
    clock
        Monotonic seconds, used when ``step`` is called without ``now``.
    inspect
        Run the inspector: copy the observations with each frame, read the
        actions in the engine's turn, check obs, actions and rewards for
        NaN, ±Inf and large values, the image region once a second, and
        refresh per-dim statistics at ``inspect_hz``.
    alarm_threshold
        A finite value beyond this magnitude raises a ``large`` alarm.
    inspect_hz
        Refreshes of the inspector's statistics per second at most.
    """

    SEGMENTS_PERIOD_S = 1.0
    CLAIM_RETRY_S = 1.0

    def __init__(
        self,
        name: str | None = None,
        *,
        prefix: str = "LuckyEngine_",
        tools: bool = True,
        images: bool = True,
        discover: bool = True,
        traffic: bool = True,
        history_capacity: int = 36000,
        command_timeout_s: float = 2.0,
        tools_pid: int | None = None,
        stall_after: float = 2.0,
        poll_hz: float = 60.0,
        allow_other_user: bool = False,
        clock: Callable[[], float] = time.monotonic,
        inspect: bool = True,
        alarm_threshold: float = DEFAULT_THRESHOLD,
        inspect_hz: float = 4.0,
        yield_us: float = DEFAULT_YIELD_US,
    ) -> None:
        self.clock = clock
        #: Offers the core to other processes after each ``yield_us`` of a step's work (0: never; see
        #: :class:`~lucky_monitor.core.pacing.Yielder`). The window offers it between its paints too.
        self.yielder = Yielder(yield_us)
        if not (inspect_hz > 0 and math.isfinite(inspect_hz)):
            raise ValueError(f"inspect_hz must be a positive number, got {inspect_hz!r}")
        self._inspect = bool(inspect)
        self._threshold = float(alarm_threshold)
        self._scanner = AlarmScanner(self._threshold)  # checks the threshold: a bad one raises here, once
        self._inspect_least_period = 1.0 / float(inspect_hz)
        self._inspect_period = self._inspect_least_period  # see set_statistics_rate
        self._link = MonitorCore(
            name,
            prefix=prefix,
            image_sink=self._sink if images else None,
            stall_after=stall_after,
            clock=clock,
            allow_other_user=allow_other_user,
        )
        self._link.copy_images = images
        if images:
            self._link.deferred_images = _DeferredGrid(self)
        self._link.copy_obs = self._inspect
        self._link.yielder = self.yielder
        self._link.on_attach = self._configure_grid
        self._link.poll_period = 1.0 / poll_hz
        self._want_tools = tools
        self._want_images = images
        self._want_discover = discover
        self._want_traffic = traffic
        self._history_capacity = history_capacity
        self._timeout = command_timeout_s
        self._tools_pid = os.getpid() if tools_pid is None else int(tools_pid)
        self._seq = 0
        self._generation = -1
        self._closed = False
        self._in_step = False
        self._close_after_step = False
        # per attach
        self._header: Header | None = None
        self.history: History | None = None
        self._traffic: TrafficLog | None = None
        self._grid: GridDisplay | None = None
        self._view: ViewRequest | None = None
        self._last_image: ImageFrame | None = None  # the image shown by the last Tick (its counters carry over)
        self._display = DisplayOptions()
        self._src_format = "auto"
        self._bottom_up = False
        self._copy_error: str | None = None  # why this step's image copy failed
        self._last_copy_error: str | None = None  # ... and the last copy's, until one succeeds
        self._display_error: str | None = None  # why the display options could not be applied
        self._paused = False
        # tools and commands
        self._chan: ToolsChannel | ToolsAgent | None = None
        self._helpers_cpu = 0.0  # CPU seconds of helper processes already stopped
        self._client: CommandClient | None = None
        self._tools = ToolsState()
        self._next_claim = 0.0
        self._pending: dict[int, tuple[str, int]] = {}
        self._results: list[CommandResult] = []
        self._commands_key: tuple[object, ...] | None = None
        self._image_key: tuple[object, ...] | None = None  # what the last ImageFrame showed (see _tick)
        self._commands = CommandsState()
        self._traffic_stats_of: tuple[TrafficLog | None, int] = (None, -1)
        self._traffic_stats_value = _NO_TRAFFIC
        self._last_draw: dict[str, DrawReq] = {}
        self._repeat: tuple[str, float] = ("", 0.0)
        self._repeat_next = 0.0
        self._repeat_cid: int | None = None
        self._draws_answered = 0
        self._next_idle_collect = 0.0  # see _service_tools
        self._lent = False  # the command client is lent out (lend_commands): step() leaves the replies alone
        # inspector and alarms (per attach)
        self._act: np.ndarray | None = None
        self._act_frame = -1
        self._obs: np.ndarray | None = None  # the newest consistent observations (host or device)
        self._obs_frame = -1
        self._checked_frame = -1
        self._obs_names: tuple[str, ...] = ()
        self._act_names: tuple[str, ...] = ()
        self._schema_asked = False
        self._names_wanted = False
        self._names_from_schema = False
        self._inspector: InspectorFrame | None = None
        self._inspect_key: tuple[int, int, tuple[int, ...]] | None = None
        self._next_inspect = 0.0
        self._want_stats = True  # a view shows the statistics (want_statistics)
        self._imgcheck: ImageChecker | None = None
        self._img_buf: np.ndarray | None = None
        self._ended: np.ndarray | None = None  # per env: an episode ended since its last image check
        self._gpu: CudaObs | None = None
        self._gpu_buf: Any = None
        self._gpu_note = ""
        # discovery
        self._segments: tuple[SegmentEntry, ...] = ()
        self._next_segments = 0.0
        self._segments_changed = False

    # ------------------------------------------------------------ reading
    @property
    def name(self) -> str | None:
        """The segment asked for (``None``: the newest live one)."""
        return self._link.name

    @property
    def prefix(self) -> str:
        return self._link.prefix

    @property
    def display(self) -> DisplayOptions:
        return self._display

    @property
    def closed(self) -> bool:
        return self._closed

    @classmethod
    def read_only(cls, name: str | None, *, allow_other_user: bool = False) -> MonitorSession:
        """A session that writes nothing anywhere and copies no display grid: for the terminal views.

        No tools channel, no display copies, no discovery, no traffic taps;
        ``snapshot()`` and ``read_pixel()`` still read exact bytes.
        """
        return cls(name, tools=False, images=False, discover=False, traffic=False, allow_other_user=allow_other_user)

    def step(self, now: float | None = None) -> Tick:
        """Poll once and describe the result.

        Never raises for anything the segment, the rings or the engine do.

        Parameters
        ----------
        now
            Monotonic seconds of this poll (default: the session's clock).
        """
        if now is None:
            now = self.clock()
        if self._closed:
            return self._tick(now, None, False, ())
        self._in_step = True
        self.yielder.begin()
        try:
            return self._step(now)
        finally:
            self._in_step = False
            if self._close_after_step:
                self.close()

    def _step(self, now: float) -> Tick:
        self._copy_error = None
        y = self.yielder
        frame = self._link.poll(now)
        if self._link.generation != self._generation:
            self._on_attach_changed(now)
        fd: FrameData | None = None
        new_image = False
        if frame is not None:
            hist = self.history
            # Only a consistent copy is a frame's values: after a failed one the buffers hold a torn mix.
            if (
                frame.hot_ok
                and frame.frame_seq > 0
                and (hist is not None and (hist.last_frame_seq is None or frame.frame_seq > hist.last_frame_seq))
            ):
                hist.append(frame.frame_seq, now, frame.rewards, frame.dones, frame.truncateds)
            fd = FrameData(
                frame.frame_seq,
                frame.action_seq,
                _ro(frame.rewards),
                _ro(frame.dones),
                None if frame.truncateds is None else _ro(frame.truncateds),
                frame.hot_ok,
                frame.frames_skipped,
                None if frame.obs is None or self._gpu_mode else _ro(frame.obs),
            )
            grid = self._grid
            if frame.image_updated and self._copy_error is None and grid is not None:
                try:
                    grid.finish()  # tiles what the guarded read copied, outside the seqlock
                except TilerError as exc:
                    self._copy_error = str(exc)
                else:
                    grid.swap()
                    new_image = True
        if self._grid is not None:
            self._grid.discard()  # a read that was torn (or refused) is never tiled later
        if self._copy_error is not None:
            self._last_copy_error = self._copy_error
        elif new_image:
            self._last_copy_error = None
        y()
        if self._inspect and self._header is not None and self._link.segment is not None:
            try:
                self._inspect_step(now, frame)
            except LuckyMonitorError:  # a read came back short: the segment shrank; the link says so next poll
                pass
            y()
        traffic: tuple[TrafficEntry, ...] = ()
        seg = self._link.segment
        if self._traffic is not None and self._link.live is not None and seg is not None:
            try:
                traffic = tuple(self._traffic.poll())
            except LuckyMonitorError:  # the segment shrank mid-poll: the link reports it at its next poll
                traffic = ()
            y()
        if self._want_tools:
            self._service_tools(now)
        elif self._tools.exported and now >= self._next_claim:
            self._probe_owner(now)
        self._segments_changed = False
        if self._want_discover and now >= self._next_segments:
            self._next_segments = now + self.SEGMENTS_PERIOD_S
            self._refresh_segments()
        img_seq = frame.image_seq if frame is not None else 0
        img_fseq = frame.image_frame_seq if frame is not None else 0
        return self._tick(now, fd, new_image, traffic, img_seq, img_fseq)

    # ------------------------------------------------------------ writing
    def switch(self, name: str | None) -> None:
        """Follow another segment (``None`` or ``""``: the newest live one)."""
        target = name or None
        if target == self._link.name:
            return
        self._link.switch(target)
        self._next_segments = 0.0

    def set_display(self, options: DisplayOptions) -> None:
        """Change decoding/layout; applies at the next step (the images are copied again)."""
        if options == self._display:
            return
        old, self._display = self._display, options
        self._display_error = None
        g = self._grid
        if g is not None:
            relaid = g.set_aspect(options.view_aspect)
            if options.columns != old.columns or (relaid and options.columns is None):
                err = g.configure(options.columns)
                if err is not None:
                    self._display_error = err
                    self._display = replace(options, columns=None)
        self._link.request_images()

    def set_view(self, view: ViewRequest | None) -> None:
        """What part of the grid the view shows, and how large (``None``: all of it, full size).

        Only the tiles in view are copied at the next step, downscaled when
        they are shown smaller than their pixels.
        """
        if view == self._view:
            return
        self._view = view
        g = self._grid
        if g is not None:
            _, h, w, _ = g.shape
            tile = (h, w) if view is None else view.display_tile(h, w, g.gap)
            if tile != g.tile:
                g.configure(self._display.columns if self._display_error is None else None, tile)
        self._link.request_images()

    def read_pixel(self, env: int, x: int, y: int) -> PixelReading | None:
        """The pixel at ``(x, y)`` of ``env``'s tile as displayed, read from the segment's bytes now.

        ``None`` when nothing is attached, the coordinates are outside the
        tile, the segment shrank, or the engine kept writing (a torn read is
        never reported). Read through the fd (``pread``), never the mapping.
        """
        seg, h = self._link.segment, self._header
        if seg is None or h is None or not h.image_offset or self._link.images_stuck:
            return None
        n, ih, iw, c = h.num_envs, h.image_height, h.image_width, h.image_channels
        if not (0 <= env < n and 0 <= x < iw and 0 <= y < ih):
            return None
        row = ih - 1 - y if self._bottom_up != self._display.flip_rows else y
        out = np.empty(c, np.uint8)
        at = h.image_offset + ((env * ih + row) * iw + x) * c
        try:
            r = seqlock_read(lambda: seg.read_counter("image_seq"), lambda: seg.read_region(at, out))
        except LuckyMonitorError:
            return None
        if not r.ok:
            return None
        return PixelReading.of(env, x, y, tuple(int(v) for v in out), self._src_format, self._display, row)

    def snapshot(
        self, env: int | None = None, *, columns: int | None = None, gap: int | None = None
    ) -> np.ndarray | None:
        """The grid (or one env's tile) at full resolution from the segment's bytes, as displayed.

        For saving: copied under the image seqlock into a buffer of its own,
        with the display options applied. ``None`` when there are no images,
        the engine never paused writing long enough for a consistent copy, or
        its image seqlock reads as stuck or inverted (no copy can be trusted).

        Parameters
        ----------
        env
            One env's image instead of the grid.
        columns
            Grid columns (default: the grid's as shown).
        gap
            Pixels between tiles (default: the grid's, 2).

        Raises
        ------
        TilerError
            ``columns`` or ``gap`` out of range for this segment's grid.
        """
        seg, h = self._link.segment, self._header
        if seg is None or h is None or not h.image_offset or self._link.images_stuck:
            return None
        n, ih, iw, c = h.num_envs, h.image_height, h.image_width, h.image_channels
        cols = columns if columns is not None else self._grid.geometry.columns if self._grid is not None else None
        if env is not None:
            if not 0 <= env < n:
                return None
            t = Tiler(1, ih, iw, c, columns=1, gap=0)
            src = np.empty((1, ih, iw, c), np.uint8)
            at = h.image_offset + env * h.image_bytes_per_env
        else:
            t = Tiler(n, ih, iw, c, columns=cols) if gap is None else Tiler(n, ih, iw, c, columns=cols, gap=gap)
            src = np.empty((n, ih, iw, c), np.uint8)
            at = h.image_offset
        o = self._display

        def copy() -> None:
            seg.read_region(at, src)  # the segment's exact bytes, through the fd
            t.tile(
                src,
                src_format=self._src_format,
                flip_rows=self._bottom_up != o.flip_rows,
                swap_rb=o.swap_rb,
                show_alpha=o.show_alpha,
            )

        try:
            r = seqlock_read(lambda: seg.read_counter("image_seq"), copy, max_retries=50)
        except LuckyMonitorError:  # the segment shrank: no snapshot
            return None
        return t.grid if r.ok else None

    def want_images(self, wanted: bool, share: float = 1.0) -> None:
        """Copy the image region at the next step only if ``wanted`` (a view presenting at a lower rate).

        The newest images are copied at the first step that wants them;
        ``image_seq`` and the image rate are followed either way. ``share``
        (0 < share ≤ 1): copy only that share of the images, evenly spread
        (image ``k``, ``image_seq // 2``, when :func:`.pacing.share_shows`
        says so); an image left out is never copied at a later step.
        """
        self._link.copy_images = self._want_images and not self._paused and bool(wanted)
        self._link.image_share = min(1.0, float(share)) if share > 0 else 1.0

    def want_statistics(self, wanted: bool) -> None:
        """Refresh the inspector's per-dim statistics at ``inspect_hz`` only if ``wanted`` (a view shows them).

        Unwanted, they are refreshed every :data:`UNSEEN_STATS_PERIOD_S`
        (the alarms' dim names come with them). Alarms, the action reads and
        the image checks go on either way; a view that comes back gets fresh
        statistics at the next step. At 4096 envs × 100 dims a refresh is a
        few milliseconds.
        """
        wanted = bool(wanted)
        if wanted and not self._want_stats:
            self._next_inspect = 0.0
        self._want_stats = wanted

    def set_statistics_rate(self, hz: float) -> None:
        """Refresh the wanted statistics at most ``hz`` times a second (never above ``inspect_hz``).

        A view under a CPU budget follows its refresh rates with it; the alarms
        and the image checks are not thinned. A rate that is not a positive
        number is refused with :class:`ValueError`.
        """
        if not (hz > 0 and math.isfinite(hz)):
            raise ValueError(f"statistics rate must be a positive number, got {hz!r}")
        self._inspect_period = max(self._inspect_least_period, 1.0 / float(hz))

    def set_paused(self, paused: bool) -> None:
        """Stop copying images while a view's display is paused (history and counters go on)."""
        self._paused = bool(paused)
        self._link.copy_images = self._want_images and not self._paused
        if not self._paused:
            self._link.request_images()

    def request_names(self) -> None:
        """Ask the engine (GetAgentSchema, over the tools channel) to name the inspector's dims.

        Sent once per attach, as soon as this session holds the tools channel;
        the names appear in a later Tick's ``inspector`` (indices until then,
        and for good when the engine does not answer or its blocks do not add
        up to the header's sizes).
        """
        self._names_wanted = True

    def select(self, envs: tuple[int, ...] | list[int]) -> None:
        """Envs whose rewards the history records individually (at most 8, newest last)."""
        if self.history is not None:
            ids = [e for e in envs if 0 <= int(e) < self.history.num_envs]
            self.history.set_selected(ids[-8:])

    def set_service(self, bit: int, enabled: bool) -> None:
        """Ask the engine to enable or disable service ``bit``."""
        if Service.get(bit) is None:
            self._results.append(CommandResult("service", bit, "error", f"error: no service bit {bit}"))
            return
        h = self._header
        if h is None or not (h.services_available >> bit & 1):
            self._results.append(CommandResult("service", bit, "error", "error: service not available"))
            return
        self._send(
            "service", bit, MethodId.SetServiceEnabledReq, SetServiceEnabledReq(service=bit, enabled=bool(enabled))
        )

    def set_sim_mode(self, mode: int) -> None:
        """Ask the engine for simulation mode ``mode`` (0 realtime, 1 deterministic, 2 fast)."""
        if SimMode.get(mode) is None:
            self._results.append(CommandResult("sim", mode, "error", f"error: simulation mode {mode} unknown"))
            return
        self._send("sim", mode, MethodId.SetSimulationModeReq, SetSimulationModeReq(mode=SimMode(mode)))

    def draw(self, kind: str, **values: Any) -> bool:
        """Send a debug draw built by :mod:`~lucky_monitor.core.drawing`; return whether it was sent.

        ``kind`` ``"line"`` takes ``start, end, rgba, clear``; ``"arrow"``
        ``origin, direction, rgba, scale, clear``; ``"velocity"`` ``origin,
        lin_vel_x, lin_vel_y, ang_vel_z, scale, clear``; ``"clear"`` nothing
        (and stops any repeat). Input the builder rejects becomes an error
        result; nothing is sent.
        """
        try:
            req = _build_draw(kind, values)
        except (LuckyMonitorError, ValueError, TypeError) as exc:
            self._results.append(CommandResult(kind, 0, "error", f"error: {exc}"))
            return False
        if kind == "clear":
            self._repeat = ("", 0.0)
        else:
            self._last_draw[kind] = req
        return self._send(kind, 0, MethodId.DrawReq, req) is not None

    def repeat(self, kind: str, hz: float) -> None:
        """Resend the last ``kind`` draw at ``hz`` (capped at 60); ``""`` or 0 stops.

        At most one repeated request is in flight.
        """
        if not kind or not (hz > 0 and math.isfinite(hz)):
            self._repeat = ("", 0.0)
            return
        if kind not in DRAW_KINDS:
            self._results.append(
                CommandResult(kind, 0, "error", f"error: cannot repeat {kind!r}; choose line, arrow or velocity")
            )
            return
        if kind not in self._last_draw:
            self._results.append(
                CommandResult(kind, 0, "error", f"error: nothing to repeat: send the {kind} once first")
            )
            return
        self._repeat_next = self.clock()
        self._repeat = (kind, min(float(hz), MAX_REPEAT_HZ))

    def lend_commands(self) -> CommandClient | None:
        """The claimed tools channel's command client, lent to a caller that sends and reads raw envelopes.

        For the live conformance probe (``core/probe.py``), which must see
        every reply as it comes (wrong ids, duplicates, undecodable bytes).
        From now on :meth:`step` leaves the tools s2c ring to the borrower;
        :meth:`close` still releases the channel. ``None`` while this session
        holds no channel (see ``Tick.tools.reason``).
        """
        if self._client is not None:
            self._lent = True
        return self._client

    def close(self) -> None:
        """Release the tools channel and unmap. Idempotent; safe from a signal handler during a step."""
        if self._in_step:
            self._close_after_step = True
            return
        if self._closed:
            return
        self._repeat = ("", 0.0)
        self._release("monitor closed")
        self._drop_grid()
        self._link.close()
        self._link._set(LinkState.SEARCHING, "monitor closed")
        self._traffic = None
        self._header = None
        self._grid = None
        self._close_gpu()
        self._tools = ToolsState(reason="monitor closed")
        self._closed = True

    # ------------------------------------------------------------ internals: attach
    def _on_attach_changed(self, now: float) -> None:
        self._generation = self._link.generation
        self._release("segment detached" if self._link.header is None else "re-attached")
        self._results.clear()
        self._draws_answered = 0
        h = self._link.header
        self._header = h
        self._reset_inspector(h, now)
        if h is None:
            self._traffic = None
            self._drop_grid()
            self._display_error = None
            self._tools = ToolsState()
            return
        self.history = History(h.num_envs, capacity=self._history_capacity, raster_capacity=raster_rows(h.num_envs))
        seg = self._link.segment
        self._traffic = TrafficLog(seg) if self._want_traffic and seg is not None else None
        if not h.has_tools:
            self._tools = ToolsState(False, reason="engine exports no tools channel")
        elif not self._want_tools:
            self._tools = ToolsState(True, reason="read-only session (sends nothing)", ring_size=h.tools_ring_size)
        else:
            self._tools = ToolsState(True, reason="tools channel not claimed yet", ring_size=h.tools_ring_size)
        self._next_claim = now
        self._next_segments = 0.0

    def _drop_grid(self) -> None:
        """Forget the grid and stop its sampling helper."""
        grid, self._grid = self._grid, None
        if grid is not None:
            grid.close()
            self._helpers_cpu += grid.helper_cpu_s()

    def helper_cpu_s(self) -> float:
        """CPU seconds the session's helper processes used so far (image sampler, tools channel).

        They do part of the monitor's work (see ``transport/sampler.py`` and
        ``transport/tools_agent.py``); a CPU budget or a report of the
        monitor's cost adds this to the process's own CPU time.
        """
        total = self._helpers_cpu + (self._grid.helper_cpu_s() if self._grid is not None else 0.0)
        chan = self._chan
        if isinstance(chan, ToolsAgent):
            total += chan.cpu_s()
        return total

    def _configure_grid(self, h: Header) -> None:
        """Called by the link on attach, before its first image copy: grids in the header's geometry."""
        self._drop_grid()
        self._display_error = None
        self._last_copy_error = None
        # How the stored pixels decode: snapshot() and read_pixel() need it with or without a grid.
        self._src_format = h.pixel_format
        self._bottom_up = h.bottom_up
        if not (h.has_images and self._want_images):
            return
        try:
            grid = GridDisplay(h.num_envs, h.image_height, h.image_width, h.image_channels)
            grid.yielder = self.yielder
            grid.set_aspect(self._display.view_aspect)
            h_, w_ = h.image_height, h.image_width
            tile = (h_, w_) if self._view is None else self._view.display_tile(h_, w_, grid.gap)
            err = grid.configure(self._display.columns, tile)
        except TilerError as exc:  # a grid too large to allocate: say so, show no images
            self._display_error = f"images not shown: {exc}"
            return
        self._grid = grid
        if err is not None:
            self._display_error = err
            self._display = replace(self._display, columns=None)

    def _sink(self, seg: Segment) -> None:
        """Under the image seqlock: copy-and-tile from ``seg`` into the back grid.

        Raises only ``SegmentGone`` (a read came back short: the link reports the segment lost).
        """
        if self._grid is None:
            self._copy_error = "no grid configured"
            return
        try:
            self._grid.copy(seg, self._src_format, self._bottom_up, self._display, self._view)
        except TilerError as exc:
            self._copy_error = str(exc)

    def _request_copy(self, seg: Segment) -> bool:
        """The link asks for a copy: started in the sampling helper? (see :meth:`GridDisplay.request`)."""
        g = self._grid
        return g is not None and g.request(seg, self._src_format, self._bottom_up, self._display, self._view)

    def _collect_copy(self, seg: Segment) -> Sampled | None:
        """The helper's answer, tiled into the back grid (see :meth:`GridDisplay.collect`)."""
        g = self._grid
        if g is None:
            return None
        try:
            return g.collect(seg, self._src_format, self._bottom_up, self._display, self._view)
        except TilerError as exc:
            self._copy_error = str(exc)
            return None

    # ------------------------------------------------------------ internals: inspector and alarms
    def _reset_inspector(self, h: Header | None, now: float) -> None:
        """A new attach (or a detach): alarms, statistics, names and the GPU view start afresh."""
        self._close_gpu()
        self._scanner = AlarmScanner(self._threshold)
        self._inspector = None
        self._inspect_key = None
        self._next_inspect = now
        self._act_frame = self._obs_frame = self._checked_frame = -1
        self._obs = None
        self._obs_names, self._act_names = (), ()
        self._schema_asked = False
        self._names_from_schema = False
        self._imgcheck = None
        self._img_buf = None
        self._ended = None
        self._act = None
        self._gpu_note = ""
        if h is None or not self._inspect:
            return
        if 4 * h.num_envs * h.act_size <= INSPECT_MAX_BYTES:
            self._act = np.zeros((h.num_envs, h.act_size), np.float32)
        self._obs_names = dim_names((), (), h.obs_size)
        self._act_names = dim_names((), (), h.act_size)
        if h.has_images and self._want_images:
            ic = ImageChecker(h.num_envs, h.image_width * h.image_height * h.image_channels)
            self._imgcheck = ic
            self._ended = np.zeros(h.num_envs, np.bool_)  # episodes ended since each env's last image check
            self._img_buf = np.empty((ic.count, h.image_height, h.image_width, h.image_channels), np.uint8)
        if h.gpu_obs_mode == 1 and 4 * h.num_envs * h.obs_size > INSPECT_MAX_BYTES:
            self._gpu_note = f"GPU observations not shown: over the inspector's {INSPECT_MAX_BYTES >> 20} MiB limit"
        elif h.gpu_obs_mode == 1:
            try:
                self._gpu = CudaObs(h)
                self._gpu_buf = self._gpu.empty()
                self._gpu_note = (
                    f"GPU (CUDA IPC, device {h.gpu_device_id}; handle opened in {self._gpu.open_s * 1e3:.0f} ms)"
                )
            except GpuUnavailable as exc:
                self._gpu_note = f"GPU observations not shown: {exc}"
            except Exception as exc:  # a CUDA runtime failure of any kind: said, never raised into a view
                self._gpu_note = f"GPU observations not shown: {type(exc).__name__}: {exc}"

    @property
    def _gpu_mode(self) -> bool:
        """The engine keeps the observations in CUDA memory (the CPU region is not theirs, LAYOUT §3.4)."""
        return self._header is not None and self._header.gpu_obs_mode == 1

    def _close_gpu(self) -> None:
        gpu, self._gpu, self._gpu_buf = self._gpu, None, None
        if gpu is not None:
            gpu.close()

    def _inspect_step(self, now: float, frame: Frame | None) -> None:
        """Check the new frame's values, read the actions in the engine's turn, refresh what is due."""
        seg = self._link.segment
        assert seg is not None
        scanner = self._scanner
        counter = seg.read_counter
        live = self._link.live
        if frame is not None and frame.obs is not None and frame.frame_seq > self._checked_frame:
            self._checked_frame = frame.frame_seq
            if frame.hot_ok:
                scanner.check("rewards", frame.frame_seq, frame.rewards)
                ended = self._ended
                if ended is not None and ended.shape == frame.dones.shape:
                    np.logical_or(ended, frame.dones, out=ended)
                    if frame.truncateds is not None:
                        np.logical_or(ended, frame.truncateds, out=ended)
                if not self._gpu_mode:
                    self._obs, self._obs_frame = frame.obs, frame.frame_seq
                    scanner.check("obs", frame.frame_seq, frame.obs)
            elif not self._gpu_mode:
                self._obs = None  # the buffer holds a torn copy now: never shown, never compared
        if self._gpu is not None and live is not None and live.frame_seq > max(self._obs_frame, 0):
            # Device -> device copy under the same guard as the CPU region, tried at each poll until one is
            # consistent: in lock-step only a copy made wholly in the trainer's turn counts.
            gpu, buf = self._gpu, self._gpu_buf
            free_run = live.client_pid == 0
            if not free_run and counter("action_seq") == counter("frame_seq"):
                return self._inspect_rest(now, seg, live)  # the engine's turn: it may be writing; next poll
            res = hot_read(
                lambda: counter("frame_seq"),
                lambda: counter("action_seq"),
                lambda: gpu.copy_into(buf),
                free_run=free_run,
                spin_s=0.0,
            )
            if res.ok and (free_run or res.checked == "lockstep"):
                self._obs, self._obs_frame = buf, res.frame_seq
                scanner.check("obs", res.frame_seq, buf)
            else:
                self._obs = None
        self._inspect_rest(now, seg, live)

    def _inspect_rest(self, now: float, seg: Any, live: LiveFields | None) -> None:
        """The actions (in the engine's turn), the image checks and the statistics when due."""
        scanner = self._scanner
        act = self._act
        h = self._header
        if live is not None and live.client_pid != 0 and act is not None and act.size and h is not None:
            if live.action_seq != self._act_frame:  # this poll's reading: a newer step is caught by the next
                at = h.act_offset
                seqs = (0, 0)

                def frame_seq() -> int:
                    nonlocal seqs
                    seqs = seg.read_seqs()  # action_seq comes with it, from the same pread
                    return int(seqs[0])

                r = engine_turn_read(frame_seq, lambda: seqs[1], lambda: seg.read_region(at, act))
                if r.ok:
                    self._act_frame = r.action_seq
                    scanner.check("actions", r.action_seq, act)
        if self._imgcheck is not None and self._imgcheck.due(now) and live is not None:
            self._check_images(now, seg)
        if now >= self._next_inspect:
            # Unseen statistics are refreshed rarely, not never: the alarms' dim names come with them.
            period = self._inspect_period if self._want_stats else max(self._inspect_period, UNSEEN_STATS_PERIOD_S)
            self._next_inspect = now + period
            self._refresh_inspector(live)

    def _check_images(self, now: float, seg: Any) -> None:
        ic, buf, h = self._imgcheck, self._img_buf, self._header
        assert ic is not None and buf is not None and h is not None
        if seg.images is None:
            return
        envs = ic.envs()
        counter = seg.read_counter
        got: dict[str, int] = {}
        per = h.image_bytes_per_env

        # The sample is a window of consecutive envs (wrapping past the last): a read per run, not per env.
        runs: list[tuple[int, int, int]] = []  # (first env, index in the sample, envs)
        for i, e in enumerate(envs.tolist()):
            if runs and runs[-1][0] + runs[-1][2] == e:
                runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
            else:
                runs.append((e, i, 1))

        def copy() -> None:
            for e, i, count in runs:  # through the fd, never the mapping
                seg.read_region(h.image_offset + e * per, buf[i : i + count])
            got["image_frame_seq"] = counter("image_frame_seq")

        # frame_seq before the image's frame: a monitor held up between the two reads (niced, on a busy
        # machine) then sees less lag than there is, never more, and raises no lag alarm for its own delay.
        frame_seq = counter("frame_seq")
        r = seqlock_read(lambda: counter("image_seq"), copy)
        if not r.ok:
            ic.retry(now)
            return
        obs_rows = None
        if self._obs is not None:
            rows = self._obs[envs]
            obs_rows = np.asarray(rows.get() if hasattr(rows, "get") else rows)
        live = self._link.live
        camera_on = True
        if live is not None and h.services_available >> Service.CAMERA & 1:
            camera_on = bool(live.services_enabled >> Service.CAMERA & 1)
        rates = self._link.rates
        ended = None
        if self._ended is not None:
            ended = self._ended[envs]
            self._ended[envs] = False
        result = ic.check(
            now,
            envs,
            buf[: len(envs)],
            image_seq=r.seq,
            image_frame_seq=got["image_frame_seq"],
            frame_seq=frame_seq,
            obs_rows=obs_rows,
            frames_per_s=rates.frames_per_s,
            images_per_s=rates.images_per_s,
            camera_on=camera_on,
            ended=ended,
        )
        first, last = (int(envs[0]), int(envs[-1])) if len(envs) else (0, -1)
        self._scanner.image(result.alarms, result.flags, f"{len(envs)} tiles checked (envs {first}–{last}) each second")

    def _refresh_inspector(self, live: LiveFields | None) -> None:
        h = self._header
        assert h is not None
        selected = tuple(self.history.selected) if self.history is not None else ()
        key = (self._obs_frame, self._act_frame, selected)
        if key == self._inspect_key:
            return
        self._inspect_key = key
        prev = self._inspector
        obs = prev.obs if prev is not None else None
        acts = prev.actions if prev is not None else None
        if self._obs is not None:
            xp: Any = np if self._gpu is None else self._gpu.cp
            obs = region_stats("obs", self._obs_frame, self._obs, names=self._obs_names, selected=selected, xp=xp)
        if self._act is not None and self._act_frame > 0:
            acts = region_stats("actions", self._act_frame, self._act, names=self._act_names, selected=selected)
        too_big = f"over the inspector's {INSPECT_MAX_BYTES >> 20} MiB limit: not inspected"
        if h.obs_size == 0:
            obs_note = "obs_size is 0: the engine publishes no observations"
        elif 4 * h.num_envs * h.obs_size > INSPECT_MAX_BYTES:
            obs_note = f"obs region of {4 * h.num_envs * h.obs_size >> 20} MiB {too_big}"
        elif h.gpu_obs_mode == 1:
            obs_note = self._gpu_note
        else:
            obs_note = "" if obs is not None else "waiting for a consistent frame"
        if h.act_size == 0:
            act_note = "act_size is 0: no actions"
        elif self._act is None:
            act_note = f"act region of {4 * h.num_envs * h.act_size >> 20} MiB {too_big}"
        elif live is not None and live.client_pid == 0:
            act_note = "no trainer attached: nobody writes actions" + (
                f" (last read: frame {acts.frame_seq})" if acts is not None else ""
            )
        elif acts is None:
            act_note = "waiting for the engine's turn (actions are read only then)"
        else:
            act_note = "read in the engine's turn"  # the frame is said before it (it said the number twice)
        seq = (prev.seq if prev is not None else 0) + 1
        names_from = "GetAgentSchema" if self._names_from_schema else "indices"
        self._inspector = InspectorFrame(seq, obs, acts, obs_note, act_note, names_from, self._gpu_note)

    def _take_schema(self, r: Reply) -> None:
        """GetAgentSchema's answer: the dims' names (indices stay when the blocks do not match the header)."""
        h = self._header
        payload = r.response.payload if r.response is not None else None
        if h is None or r.error is not None or not isinstance(payload, GetAgentSchemaResp):
            return
        obs = dim_names(payload.observation_names, payload.observation_sizes, h.obs_size)
        act = dim_names(payload.action_names, payload.action_sizes, h.act_size)
        self._names_from_schema = obs != dim_names((), (), h.obs_size) or act != dim_names((), (), h.act_size)
        self._obs_names, self._act_names = obs, act
        self._inspect_key = None  # re-label at the next refresh

    # ------------------------------------------------------------ internals: tools
    def _service_tools(self, now: float) -> None:
        seg = self._link.segment
        if self._client is not None:
            # Replies are read every tick while a request waits; otherwise (anything there then is
            # unsolicited: a corrupt ring, an undecodable reply) twice a second: each read is a round
            # trip to the tools helper process.
            if not self._lent and (self._pending or now >= self._next_idle_collect):
                self._next_idle_collect = now + IDLE_COLLECT_S
                if self._chan is not None and not self._chan.intact():
                    # Checked right before each touch, not every tick (a wait4 and an fstat): the segment
                    # shrank or the helper died, and a touch of the tools mapping would be a SIGBUS.
                    self._drop_channel("segment shrank")
                    return
                try:
                    self._collect()
                except LuckyMonitorError:  # the tools helper died (the segment shrank under it) or stopped answering
                    self._drop_channel("segment shrank")
                    return
        elif seg is not None and self._tools.exported and now >= self._next_claim:
            self._try_claim(now)
        if self._client is not None and self._inspect and self._names_wanted and not self._schema_asked:
            self._schema_asked = True  # once per attach, when a view asked: the dims' names for the inspector
            self._send("schema", 0, MethodId.GetAgentSchemaReq, GetAgentSchemaReq())
        self._run_repeat(now)

    def _probe_owner(self, now: float) -> None:
        """Read-only session: look at the owner word once a second (never claim)."""
        self._next_claim = now + self.CLAIM_RETRY_S
        seg = self._link.segment
        if seg is None:
            return
        try:
            if seg.still_valid() is not None:
                return
            owner = tools_owner(seg)
        except (LuckyMonitorError, OSError, ValueError):
            return
        self._tools = replace(self._tools, owner_pid=owner)

    def _try_claim(self, now: float) -> None:
        seg = self._link.segment
        assert seg is not None
        self._next_claim = now + self.CLAIM_RETRY_S
        ring = self._tools.ring_size
        try:
            if seg.still_valid() is not None:
                return  # gone: the link notices on its next poll
            owner = tools_owner(seg)
            if owner and owner != self._tools_pid and pid_alive(owner):
                raise ToolsChannelBusy(owner)
            chan = claim_tools(seg, pid=self._tools_pid)  # held by a helper process: a shrink never kills us
        except ToolsChannelBusy as exc:
            self._tools = ToolsState(True, False, exc.pid, str(exc), ring)
        except ToolsChannelUnavailable:
            self._next_claim = math.inf
            self._tools = ToolsState(False, reason="engine exports no tools channel")
        except (LuckyMonitorError, OSError, ValueError) as exc:
            self._tools = ToolsState(True, False, 0, f"tools channel: {exc}", ring)
        else:
            self._chan = chan
            self._client = CommandClient(chan, timeout_s=self._timeout, clock=self.clock)
            self._tools = ToolsState(True, True, self._tools_pid, "", ring)

    def _drop_channel(self, why: str) -> None:
        """Forget a channel whose mapping must not be touched again: fail what is in flight, write nothing."""
        chan = self._chan
        self._chan = None
        if chan is not None:
            chan.abandon()
            if isinstance(chan, ToolsAgent):
                self._helpers_cpu += chan.cpu_s()
        self._release(why)

    def _release(self, why: str) -> None:
        """Fail what is in flight, give the tools channel back, forget the client."""
        pending, self._pending = self._pending, {}
        for kind, target in pending.values():
            if kind == "schema":
                continue  # asked by the session itself: no result to show
            self._results.append(CommandResult(kind, target, "error", f"error: {why}"))
        self._repeat_cid = None
        chan, self._chan, self._client = self._chan, None, None
        self._lent = False
        if chan is not None:
            chan.release()
            if isinstance(chan, ToolsAgent):
                self._helpers_cpu += chan.cpu_s()
        self._next_claim = self.clock()
        if self._tools.exported:
            self._tools = replace(self._tools, ours=False, owner_pid=0, reason="tools channel not claimed yet")

    def _send(self, kind: str, target: int, method: MethodId, payload: object) -> int | None:
        if self._chan is not None and not self._chan.intact():
            self._drop_channel("segment shrank")
        if self._client is None:
            reason = self._tools.reason or "tools channel unavailable"
            self._results.append(CommandResult(kind, target, "error", f"error: {reason}"))
            return None
        try:
            cid = self._client.send(method, payload)
        except ToolsChannelBusy as exc:
            # The owner word no longer names this monitor (another process wrote it): nothing was sent, and
            # the channel is given up; the next claim says who holds it.
            self._results.append(CommandResult(kind, target, "error", f"error: {exc}"))
            self._release(str(exc))
            return None
        except (LuckyMonitorError, ValueError, OverflowError) as exc:
            self._results.append(CommandResult(kind, target, "error", f"error: {exc}"))
            return None
        self._pending[cid] = (kind, target)
        return cid

    def _collect(self) -> None:
        assert self._client is not None
        for r in self._client.poll():
            what = self._pending.pop(r.correlation_id, None)
            if what is None:
                if r.response is None and r.request_method == -1:
                    # A corrupt ring or an undecodable reply: no request claims it, so say it here.
                    self._results.append(CommandResult("reply", 0, "error", f"error: {r.error}"))
                continue
            kind, target = what
            if kind == "schema":
                self._take_schema(r)
                continue
            if r.correlation_id == self._repeat_cid:
                self._repeat_cid = None
            if kind not in ("service", "sim") and r.response is not None:
                self._draws_answered += 1
            self._results.append(_result(kind, target, r))

    def _run_repeat(self, now: float) -> None:
        kind, hz = self._repeat
        if not kind or self._client is None or self._repeat_cid is not None or now < self._repeat_next:
            return
        period = 1.0 / hz
        self._repeat_next = self._repeat_next + period if now - self._repeat_next < period else now + period
        self._repeat_cid = self._send(kind, 0, MethodId.DrawReq, self._last_draw[kind])

    # ------------------------------------------------------------ internals: segments
    def _refresh_segments(self) -> None:
        wall = time.time()
        rows = tuple(
            SegmentEntry(
                safe_text(i.name),
                i.server_pid,
                i.error is None and i.engine_live,  # a live pid with a frozen heartbeat is not live
                i.num_envs,
                None if i.started is None else max(0.0, wall - i.started),
                None if i.error is None else safe_text(i.error),
                i.server_alive,
            )
            for i in list_segments(self._link.prefix)
        )
        if [(r.name, r.alive, r.num_envs, r.error) for r in rows] != [
            (r.name, r.alive, r.num_envs, r.error) for r in self._segments
        ] or any(_age_bucket(a.age_s) != _age_bucket(b.age_s) for a, b in zip(rows, self._segments, strict=False)):
            self._segments_changed = True
        self._segments = rows

    # ------------------------------------------------------------ internals: the Tick
    def _tick(
        self,
        now: float,
        fd: FrameData | None,
        new_image: bool,
        traffic: tuple[TrafficEntry, ...],
        image_seq: int = 0,
        image_frame_seq: int = 0,
    ) -> Tick:
        self._seq += 1
        link = self._link
        st = link.status
        live = link.live  # one value per poll, read by the link
        image = None
        g = self._grid
        prev = self._last_image
        if (
            not new_image
            and prev is not None
            and g is not None
            and self._header is not None
            and self._image_key == (g.front, self._display, self._src_format, self._bottom_up)
        ):
            # Nothing new to show and nothing changed about how: the last frame, marked as not new.
            image = prev if not prev.new else replace(prev, new=False)
        elif g is not None and g.has_frame and g.front is not None and self._header is not None:
            self._image_key = (g.front, self._display, self._src_format, self._bottom_up)
            image = ImageFrame(
                grid=_ro(g.front.grid),
                layout=g.geometry,
                display_layout=g.front.geometry,
                step=g.step,
                scale=g.scale,
                image_seq=image_seq if new_image else (prev.image_seq if prev else 0),
                image_frame_seq=image_frame_seq if new_image else (prev.image_frame_seq if prev else 0),
                src_format=self._src_format,
                bottom_up=self._bottom_up,
                options=self._display,
                new=new_image,
                region=g.front_region,
            )
        self._last_image = image
        results: tuple[CommandResult, ...] = ()
        if self._results:
            results = tuple(
                r if r.text.isprintable() and len(r.text) <= 200 else replace(r, text=safe_text(r.text))
                for r in self._results
            )
            self._results = []
        tools = self._tools
        if not (tools.reason.isprintable() and len(tools.reason) <= 200):
            tools = replace(tools, reason=safe_text(tools.reason))
        # The same CommandsState object while nothing about the commands changed: a view can compare by identity.
        key = (tuple(self._pending.values()), self._repeat, self._draws_answered)
        if key != self._commands_key:
            self._commands_key = key
            pend = key[0]
            self._commands = CommandsState(
                pending_services=frozenset(t for k, t in pend if k == "service"),
                sim_pending=any(k == "sim" for k, _ in pend),
                draw_pending=any(k in (*DRAW_KINDS, "clear") for k, _ in pend),
                repeat_kind=self._repeat[0],
                repeat_hz=self._repeat[1],
                draws_answered=self._draws_answered,
            )
        commands = self._commands
        return Tick(
            t=now,
            seq=self._seq,
            generation=link.generation,
            state=st.state,
            text=safe_text(st.text),
            reason=None if st.reason is None else safe_text(st.reason),
            notice=None if st.notice is None else safe_text(st.notice),
            name=st.name,
            selected=link.name,
            header=self._header,
            live=live,
            heartbeat_age_s=link.heartbeat_age,
            # Detached from a dead engine's segment the link knows no pid, but the state says it is gone.
            engine_alive=False if st.state is LinkState.ENGINE_EXITED else link.engine_alive,
            trainer_alive=link.trainer_alive,
            rates=link.rates.copy(),
            counters=link.counters.copy(),
            reattached=link.reattached,
            frame=fd,
            image=image,
            display_error=self._last_copy_error or self._display_error,
            history=self.history if self._header is not None else None,
            tools=tools,
            results=results,
            commands=commands,
            segments=self._segments,
            segments_changed=self._segments_changed,
            traffic=traffic,
            traffic_stats=self._traffic_stats(),
            paused=self._paused,
            alarms=self._scanner.state(),
            inspector=self._inspector if self._header is not None else None,
        )

    def _traffic_stats(self) -> TrafficStats:
        """The taps' counts; the same object until the log changes (built once per change, not per poll)."""
        log = self._traffic
        if log is None:
            return _NO_TRAFFIC
        if log is not self._traffic_stats_of[0] or log.version != self._traffic_stats_of[1]:
            self._traffic_stats_of = (log, log.version)
            self._traffic_stats_value = TrafficStats.of(log)
        return self._traffic_stats_value


_NO_TRAFFIC = TrafficStats()


def _ro(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


def _age_bucket(age: float | None) -> int:
    if age is None:
        return -1
    return int(age) if age < 60 else int(age // 60) * 60


def _result(kind: str, target: int, r: Reply) -> CommandResult:
    if r.error is not None:
        return CommandResult(
            kind, target, "error", f"error: {r.error}", r.rtt_s if r.response else None, r.correlation_id
        )
    payload = r.response.payload if r.response is not None else None
    if kind in (*DRAW_KINDS, "clear"):
        if isinstance(payload, DrawResp) and not payload.success:
            return CommandResult(
                kind, target, "error", f"failed (engine: success = false) {ms_text(r.rtt_s)}", r.rtt_s, r.correlation_id
            )
        return CommandResult(kind, target, "ok", f"success {ms_text(r.rtt_s)}", r.rtt_s, r.correlation_id)
    if kind == "service" and not isinstance(payload, SetServiceEnabledResp):
        return CommandResult(
            kind, target, "error", f"error: unexpected reply {type(payload).__name__}", r.rtt_s, r.correlation_id
        )
    if kind == "sim" and not isinstance(payload, SetSimulationModeResp):
        return CommandResult(
            kind, target, "error", f"error: unexpected reply {type(payload).__name__}", r.rtt_s, r.correlation_id
        )
    return CommandResult(kind, target, "ok", f"ok {ms_text(r.rtt_s)}", r.rtt_s, r.correlation_id)


def _build_draw(kind: str, v: dict[str, Any]) -> DrawReq:
    clear = bool(v.get("clear", False))
    rgba = v.get("rgba", drawing.DEFAULT_COLOR)
    if kind == "line":
        return drawing.line_request(v["start"], v["end"], rgba, clear_previous=clear)
    if kind == "arrow":
        return drawing.arrow_request(v["origin"], v["direction"], rgba, scale=v.get("scale", 1.0), clear_previous=clear)
    if kind == "velocity":
        return drawing.velocity_request(
            v.get("origin", (0.0, 0.0, 0.0)),
            v["lin_vel_x"],
            v["lin_vel_y"],
            v["ang_vel_z"],
            scale=v.get("scale", 1.0),
            clear_previous=clear,
        )
    if kind == "clear":
        return drawing.clear_request()
    raise ValueError(f"unknown draw kind {kind!r}; choose line, arrow, velocity or clear")
