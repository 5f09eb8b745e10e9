"""Hand-made :class:`Tick` and :class:`ImageFrame` values for view tests (no engine, no segment).

``tick(**changes)`` is a Tick of a session that has found nothing yet;
``attached_tick(header, **changes)`` one of a session attached to a segment
laid out by ``header`` (see :func:`lucky_monitor.protocol.header.plan`).
``image_frame(images, ...)`` tiles a batch the way the session does and wraps
the grid in an :class:`ImageFrame`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from lucky_monitor.core.monitor import Counters, LinkState, Rates
from lucky_monitor.core.session import (
    CommandsState,
    DisplayOptions,
    ImageFrame,
    LiveFields,
    Tick,
    ToolsState,
    TrafficStats,
)
from lucky_monitor.core.tiler import Tiler
from lucky_monitor.protocol import header as hdr
from lucky_monitor.protocol.enums import Service
from lucky_monitor.protocol.header import Header

__all__ = ["BASE_TICK", "attached_tick", "image_frame", "live_fields", "small_header", "tick"]

BASE_TICK = Tick(
    t=0.0,
    seq=1,
    generation=0,
    state=LinkState.SEARCHING,
    text="searching",
    reason=None,
    notice=None,
    name=None,
    selected=None,
    header=None,
    live=None,
    heartbeat_age_s=None,
    engine_alive=None,
    trainer_alive=None,
    rates=Rates(),
    counters=Counters(),
    reattached=0,
    frame=None,
    image=None,
    display_error=None,
    history=None,
    tools=ToolsState(),
    results=(),
    commands=CommandsState(),
    segments=(),
    segments_changed=False,
    traffic=(),
    traffic_stats=TrafficStats(),
    paused=False,
)


def tick(**changes: Any) -> Tick:
    """``BASE_TICK`` with ``changes`` (a searching session unless told otherwise)."""
    return dataclasses.replace(BASE_TICK, **changes)


def small_header(**plan_kw: Any) -> Header:
    """A valid header: 4 envs, 6 obs, 2 act, 64 KiB command rings, 16x16 RGB, 16 KiB tools rings."""
    kw: dict[str, Any] = {
        "num_envs": 4,
        "obs_size": 6,
        "act_size": 2,
        "cmd_ring_size": 64 * 1024,
        "image": (16, 16, 3),
        "tools_ring_size": 16 * 1024,
        "server_pid": 4242,
        "session_id": 0x1234_5678_9ABC_DEF0,
    }
    kw.update(plan_kw)
    return hdr.plan(**kw)


def live_fields(**changes: Any) -> LiveFields:
    """Live fields of a free-running engine at frame 10 with every service on."""
    base = LiveFields(
        client_pid=0,
        frame_seq=10,
        action_seq=10,
        image_seq=5,
        image_frame_seq=10,
        heartbeat_ns=1_000_000,
        services_enabled=Service.all_mask(),
        sim_mode=0,
        engine_state=1,
    )
    return dataclasses.replace(base, **changes)


def attached_tick(header: Header | None = None, **changes: Any) -> Tick:
    """A Tick of a session attached (generation 1) to ``header``'s segment, free-running."""
    h = small_header() if header is None else header
    base = tick(
        generation=1,
        state=LinkState.FREE_RUNNING,
        text="free-running",
        name="LuckyTestUI_hand",
        header=h,
        live=live_fields(services_enabled=h.services_enabled),
        heartbeat_age_s=0.1,
        engine_alive=True,
        trainer_alive=None,
        tools=ToolsState(
            exported=h.has_tools,
            ours=h.has_tools,
            owner_pid=777 if h.has_tools else 0,
            reason="" if h.has_tools else "engine exports no tools channel",
            ring_size=h.tools_ring_size,
        ),
    )
    return dataclasses.replace(base, **changes)


def image_frame(
    images: np.ndarray,
    *,
    src_format: str | None = None,
    bottom_up: bool = False,
    options: DisplayOptions = DisplayOptions(),  # noqa: B008 - frozen value
    image_seq: int = 1,
    image_frame_seq: int = 1,
    gap: int = 2,
    gap_value: int = 40,
) -> ImageFrame:
    """Tile ``images`` as the session does (header flags, then display options) into a read-only grid.

    ``src_format`` ``None`` picks by channel count, as ``Header.pixel_format`` resolves ``auto``.
    """
    n, h, w = images.shape[:3]
    c = images.shape[3] if images.ndim == 4 else 1
    if src_format is None:
        src_format = {1: "gray", 3: "rgb", 4: "rgba"}[c]
    t = Tiler(n, h, w, c, columns=options.columns, gap=gap, gap_value=gap_value, aspect=options.view_aspect)
    t.tile(
        images,
        src_format=src_format,
        flip_rows=bottom_up != options.flip_rows,
        swap_rb=options.swap_rb,
        show_alpha=options.show_alpha,
    )
    grid = t.grid.view()
    grid.flags.writeable = False  # the session hands out read-only views of its buffers
    return ImageFrame(
        grid=grid,
        layout=t.geometry,
        display_layout=t.geometry,
        step=1,
        scale=(1.0, 1.0),
        image_seq=image_seq,
        image_frame_seq=image_frame_seq,
        src_format=src_format,
        bottom_up=bottom_up,
        options=options,
        new=True,
    )


def pixel_reader(images: np.ndarray, frame: ImageFrame):
    """What the window hands the grid: exact stored bytes (here from ``images``), decoded for display."""
    from lucky_monitor.core.session import PixelReading

    def read(env: int, x: int, y: int) -> PixelReading:
        h = images.shape[1]
        row = h - 1 - y if frame.bottom_up != frame.options.flip_rows else y
        px = images[env, row, x]
        stored = tuple(int(v) for v in np.atleast_1d(px))
        return PixelReading.of(env, x, y, stored, frame.src_format, frame.options, row)

    return read
