"""Faults of the segment itself: shrunk to 4096, 0 or half its size, replaced by one of another
geometry and channel count, unlinked while attached.

The monitor runs in its own process (:class:`tests.faults.support.Monitor`), holds the tools
channel, and is told to poll between the faults this test injects: a SIGBUS would show as its
exit status. Segments are made here, with this process as their (live) server, and this
process's own mapping is dropped before anything shrinks.
"""

from __future__ import annotations

import os
import secrets
import time

import pytest

from lucky_monitor.protocol.enums import EngineState, ImageFormat
from lucky_monitor.protocol.header import plan
from lucky_monitor.transport.shm import EngineSegment, platform_kind, shm_path
from tests.conftest import unique_segment_name
from tests.faults.support import Monitor, remove

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(platform_kind() != "dir", reason="truncates files under /dev/shm"),
]

GONE_STATES = {"engine exited", "incompatible", "searching"}


def make_segment(name: str, *, num_envs: int = 4, image: tuple[int, int, int] = (16, 12, 3), fmt: int = 0) -> int:
    """Create (or replace) segment ``name`` with images of value 50, a beating heartbeat; return its session id."""
    sid = secrets.randbits(63) | 1
    h = plan(num_envs=num_envs, obs_size=6, act_size=2, cmd_ring_size=4096, tools_ring_size=4096, image=image,
             image_format=fmt, server_pid=os.getpid(), session_id=sid)  # fmt: skip
    seg = EngineSegment.create(name, h, exist_ok=True)
    assert seg.images is not None
    seg.images[:] = 50
    seg.set("image_seq", 2)
    seg.set("heartbeat_ns", time.monotonic_ns())
    seg.set("engine_state", EngineState.RUNNING)
    seg.set("frame_seq", 1)
    seg.close()  # never touched again here: it is about to shrink
    return sid


@pytest.fixture
def monitor_on(subprocess_env):
    made: list[tuple[Monitor, str]] = []

    def start(name: str) -> Monitor:
        mon = Monitor(name, subprocess_env)
        made.append((mon, name))
        return mon

    yield start
    for mon, name in made:
        mon.kill()
        remove(name)


@pytest.mark.parametrize("shrink_to", ["4096", "0", "half"])
def test_segment_shrunk_between_polls_then_replaced_by_another_geometry(monitor_on, shrink_to: str) -> None:
    name = unique_segment_name("shrunk")
    path = shm_path(name)
    sid = make_segment(name)
    full = os.stat(path).st_size
    size = {"4096": 4096, "0": 0, "half": full // 2}[shrink_to]
    mon = monitor_on(name)
    first = mon.wait_for(lambda r: r["tools_ours"] and r["image_channels"] == 3, "attach, images, tools channel")
    assert first["session_id"] == sid and first["state"] == "free-running"

    os.truncate(path, size)
    shrunk = mon.tick("poll 1")
    assert shrunk["state"] == "engine exited", shrunk
    assert shrunk["reason"] == f"segment shrank to {size} bytes (needs {full})", shrunk
    assert not shrunk["tools_ours"] and shrunk["num_envs"] is None and shrunk["image_channels"] is None
    for _ in range(5):  # it polls on, never attached to what is left
        later = mon.tick("poll 5")
        assert later["state"] in GONE_STATES and later["num_envs"] is None, later

    # Replaced: another geometry (7 envs of 10x6) and channel count (RGBA).
    os.unlink(path)
    sid2 = make_segment(name, num_envs=7, image=(10, 6, 4), fmt=ImageFormat.RGBA)
    back = mon.wait_for(lambda r: r["session_id"] == sid2 and r["image_channels"] == 4, "the new segment's images")
    assert back["num_envs"] == 7 and back["image_shape"] == [6, 10, 4]
    assert back["state"] == "free-running" and back["generation"] > first["generation"]
    mon.wait_for(lambda r: r["tools_ours"], "the new tools channel")
    mon.close_cleanly()


def test_segment_unlinked_while_attached(monitor_on) -> None:
    name = unique_segment_name("unlinked")
    sid = make_segment(name)
    mon = monitor_on(name)
    first = mon.wait_for(lambda r: r["tools_ours"] and r["image_channels"] == 3, "attach")
    assert first["session_id"] == sid
    os.unlink(shm_path(name))
    gone = mon.tick("poll 1")
    assert gone["state"] == "engine exited" and gone["reason"] == "segment unlinked", gone
    assert not gone["tools_ours"] and gone["num_envs"] is None
    later = mon.tick("poll 20")
    assert later["state"] in GONE_STATES and later["num_envs"] is None, later
    sid2 = make_segment(name, num_envs=2, image=(8, 8, 1), fmt=ImageFormat.GRAY)
    back = mon.wait_for(lambda r: r["session_id"] == sid2 and r["image_channels"] is not None, "the successor")
    assert back["state"] == "free-running" and back["num_envs"] == 2 and back["image_shape"] == [8, 8, 1]
    mon.close_cleanly()
