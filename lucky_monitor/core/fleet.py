"""Many segments at once: one read-only session per segment, and a value of figures per segment.

Theory of operation
-------------------
A :class:`Fleet` follows either the segments it is given by name, or every
live segment it discovers (a listing of ``prefix*`` segments once a second;
a segment whose engine is live is followed from then on, and forgotten when
its file is gone). Each segment has its own
:class:`~lucky_monitor.core.session.MonitorSession` that never writes
(``tools=False``), taps no ring and keeps no grid worth the name: its image
view is one pixel a tile, and it copies the image region once a second only,
so the torn-copy count stays a real seqlock figure at a negligible cost.

:meth:`Fleet.step` steps every session once and refreshes each segment's
:class:`SegmentStats`; :attr:`Fleet.stats` is a tuple replaced whole on every
step, so another thread (an HTTP server answering a scrape) reads one
consistent set without a lock. Nothing here knows about Prometheus: the
exporter maps these values onto metric names.

This module is Qt-free.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from ..transport.discovery import DEFAULT_PREFIX, list_segments
from .monitor import LinkState
from .session import MonitorSession, Tick, ViewRequest

__all__ = ["Fleet", "SegmentStats"]


@dataclass(frozen=True, slots=True)
class SegmentStats:
    """One segment's figures as of its session's last step. ``None``: not known now.

    ``done_fraction`` is dones per env per frame seen over the last whole
    :attr:`Fleet.WINDOW_S` (a sample where frames are skipped: ``frames_skipped``
    counts those); reward figures are of the newest frame seen (NaN and ±Inf
    rewards left out). ``stalled_s`` is the heartbeat's age while the link
    reads *stalled*, else 0. Counts are of the current attach (they restart
    at 0 on a new attach, as a Prometheus counter may).
    """

    segment: str
    attached: bool
    state: str
    reason: str | None = None  # why the state is what it is, where the link says (e.g. "engine pid 12 is gone")
    frame_seq: int | None = None
    frames_per_s: float | None = None
    images_per_s: float | None = None
    reward_mean: float | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    done_fraction: float | None = None
    engine_alive: bool = False
    trainer_alive: bool = False
    stalled_s: float = 0.0
    torn_images: int = 0
    frames_skipped: int = 0
    engine_turn_share: float | None = None


class _Follower:
    """One segment's session and the running figures :class:`SegmentStats` needs."""

    def __init__(self, name: str, allow_other_user: bool, poll_hz: float, clock: Callable[[], float]) -> None:
        self.name = name
        self.session = MonitorSession(
            name,
            tools=False,
            images=True,
            discover=False,
            traffic=False,
            history_capacity=2,
            poll_hz=poll_hz,
            allow_other_user=allow_other_user,
            clock=clock,
        )
        # One display pixel per tile (the step is capped at the image's side): the grid stays tiny.
        self.session.set_view(ViewRequest(0.0, 0.0, 1.0, 1.0, 1.0 / 65536))
        self.next_image_probe = 0.0
        self.generation = -1
        self.reward: tuple[float | None, float | None, float | None] = (None, None, None)
        self.window_start: float | None = None
        self.window_dones = 0
        self.window_env_frames = 0
        self.done_fraction: float | None = None

    def step(self, now: float, image_period: float) -> SegmentStats:
        probe = now >= self.next_image_probe
        if probe:
            self.next_image_probe = now + image_period
        self.session.want_images(probe)
        tick = self.session.step(now)
        if tick.generation != self.generation:
            self.generation = tick.generation
            self.reward = (None, None, None)
            self.window_start, self.window_dones, self.window_env_frames = None, 0, 0
            self.done_fraction = None
        f = tick.frame
        if f is not None and f.rewards.size:
            r = f.rewards
            finite = r[np.isfinite(r)]
            if finite.size:
                self.reward = (float(finite.mean()), float(finite.min()), float(finite.max()))
            self.window_dones += int(np.count_nonzero(f.dones))
            self.window_env_frames += int(f.dones.size)
        if self.window_start is None:
            self.window_start = now
        elif now - self.window_start >= Fleet.WINDOW_S:
            self.done_fraction = self.window_dones / self.window_env_frames if self.window_env_frames else None
            self.window_start, self.window_dones, self.window_env_frames = now, 0, 0
        return self.stats(tick)

    def stats(self, tick: Tick) -> SegmentStats:
        live = tick.live
        h = tick.header
        attached = h is not None
        images = h is not None and h.has_images
        stalled = tick.state is LinkState.STALLED and tick.heartbeat_age_s is not None
        return SegmentStats(
            segment=self.name,
            attached=attached,
            state=tick.state.value,
            reason=tick.reason,
            frame_seq=None if live is None else live.frame_seq,
            frames_per_s=_finite(tick.rates.frames_per_s),
            images_per_s=_finite(tick.rates.images_per_s) if images else None,
            reward_mean=self.reward[0] if attached else None,
            reward_min=self.reward[1] if attached else None,
            reward_max=self.reward[2] if attached else None,
            done_fraction=self.done_fraction if attached else None,
            engine_alive=bool(tick.engine_alive),
            trainer_alive=bool(tick.trainer_alive),
            stalled_s=float(tick.heartbeat_age_s or 0.0) if stalled else 0.0,
            torn_images=tick.counters.torn_images if attached else 0,
            frames_skipped=tick.counters.frames_skipped if attached else 0,
            engine_turn_share=_finite(tick.engine_share),
        )

    def close(self) -> None:
        self.session.close()


def _finite(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


class Fleet:
    """Follow many segments read-only; :attr:`stats` holds each one's latest :class:`SegmentStats`.

    Parameters
    ----------
    names
        Follow exactly these segments (an absent one reads not attached);
        empty or ``None``: every live ``prefix*`` segment, found as they appear.
    prefix
        Name prefix for discovery.
    allow_other_user
        Follow segments owned by another user too.
    poll_hz
        Steps a second the caller intends (the sessions' late-poll threshold).
    image_period_s
        Seconds between two copies of a segment's image region (the torn-copy probe).
    clock
        Monotonic seconds.
    """

    #: Seconds between two listings of the segments (discovery).
    DISCOVER_S = 1.0
    #: Seconds the done fraction is measured over.
    WINDOW_S = 1.0

    def __init__(
        self,
        names: Iterable[str] | None = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        allow_other_user: bool = False,
        poll_hz: float = 30.0,
        image_period_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.prefix = prefix
        self.allow_other_user = allow_other_user
        self.poll_hz = poll_hz
        self.image_period_s = image_period_s
        self.clock = clock
        fixed = list(dict.fromkeys(names or ()))
        self.discover = not fixed
        self._followers: dict[str, _Follower] = {}
        for n in fixed:
            self._followers[n] = _Follower(n, allow_other_user, poll_hz, clock)
        self._next_discovery = 0.0
        self.stats: tuple[SegmentStats, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The segments followed now."""
        return tuple(self._followers)

    def step(self, now: float | None = None) -> tuple[SegmentStats, ...]:
        """Discover (once a second), step every session once, publish and return the new :attr:`stats`."""
        if now is None:
            now = self.clock()
        if self.discover and now >= self._next_discovery:
            self._next_discovery = now + self.DISCOVER_S
            self._rediscover()
        self.stats = tuple(f.step(now, self.image_period_s) for f in self._followers.values())
        return self.stats

    def _rediscover(self) -> None:
        infos = list_segments(self.prefix)
        present = {i.name for i in infos}
        for name in [n for n in self._followers if n not in present]:  # its file is gone
            self._followers.pop(name).close()
        uid = _my_uid()
        for i in infos:
            if i.name in self._followers or i.error is not None or not i.engine_live:
                continue
            if not self.allow_other_user and uid is not None and i.owner_uid not in (None, uid):
                continue
            self._followers[i.name] = _Follower(i.name, self.allow_other_user, self.poll_hz, self.clock)

    def close(self) -> None:
        """Close every session."""
        for f in self._followers.values():
            f.close()
        self._followers.clear()
        self.stats = ()


def _my_uid() -> int | None:
    import os

    getuid = getattr(os, "getuid", None)
    return None if getuid is None else int(getuid())
