"""Segment discovery and process liveness."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from lucky_monitor.protocol.header import OFFSET
from lucky_monitor.transport.discovery import (
    HEARTBEAT_FRESH_S,
    SegmentInfo,
    heartbeat_age_s,
    list_segments,
    newest_live,
    pid_alive,
)
from lucky_monitor.transport.shm import platform_kind, shm_path
from tests.conftest import dead_pid

pytestmark = pytest.mark.skipif(platform_kind() != "dir", reason="segments are listable only under /dev/shm")


def beat(seg, age_s: float = 0.0) -> None:
    """Stamp ``heartbeat_ns`` as an engine does, ``age_s`` seconds in the past."""
    seg.set("heartbeat_ns", time.monotonic_ns() - int(age_s * 1e9))


@pytest.fixture
def prefix() -> str:
    return f"LuckyEngine_d{uuid.uuid4().hex[:8]}_"


def test_pid_alive_basics() -> None:
    assert pid_alive(os.getpid())
    assert pid_alive(os.getppid())
    assert pid_alive(1)  # init: alive even where signalling it is not permitted
    for pid in (0, -1, 2**31, 2**32 - 1, 2**40):
        assert not pid_alive(pid)
    assert not pid_alive(dead_pid())


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="zombie state comes from /proc")
def test_zombie_counts_as_dead() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        state = b""
        for _ in range(10_000):  # bounded: wait until the child has exited but is not reaped
            with open(f"/proc/{p.pid}/stat", "rb") as f:
                data = f.read()
            state = data[data.rfind(b")") + 2 :][:1]
            if state == b"Z":
                break
            time.sleep(0.001)
        assert state == b"Z"
        assert not pid_alive(p.pid)
    finally:
        p.wait()


def test_list_marks_live_and_dead_and_reports_bad_files(segment_factory, prefix: str) -> None:
    live = segment_factory(prefix + "live")
    beat(live)
    live.set("client_pid", os.getpid())
    gone = dead_pid()
    stale = segment_factory(prefix + "stale", server_pid=gone)
    bad_name = prefix + "corrupt"
    with open(shm_path(bad_name), "wb") as f:
        f.write(b"\x00" * 8192)
    tiny_name = prefix + "tiny"
    with open(shm_path(tiny_name), "wb") as f:
        f.write(b"LRBC")
    try:
        infos = {i.name: i for i in list_segments(prefix)}
        assert set(infos) == {live.name, stale.name, bad_name, tiny_name}
        li = infos[live.name]
        assert isinstance(li, SegmentInfo)
        assert li.error is None and li.server_alive and li.server_pid == os.getpid()
        assert li.engine_live and 0 <= li.heartbeat_age_s < HEARTBEAT_FRESH_S and li.owner_uid == os.geteuid()
        assert li.client_pid == os.getpid() and li.client_alive
        assert li.num_envs == live.header.num_envs and li.session_id == live.header.session_id
        assert li.size == live.header.segment_size and li.path == live.path and li.mtime > 0
        st = infos[stale.name]
        assert st.error is None and st.server_pid == gone and not st.server_alive and not st.client_alive
        assert not st.engine_live and st.heartbeat_age_s is None  # never beat
        assert not infos[bad_name].engine_live and infos[bad_name].heartbeat_age_s is None
        assert "magic" in infos[bad_name].error and infos[bad_name].size == 8192
        assert "segment_size" in infos[tiny_name].error
        assert newest_live(prefix).name == live.name
    finally:
        os.unlink(shm_path(bad_name))
        os.unlink(shm_path(tiny_name))


def test_newest_first(segment_factory, prefix: str) -> None:
    older = segment_factory(prefix + "a")
    newer = segment_factory(prefix + "b")
    beat(older)
    beat(newer)
    now = time.time()
    os.utime(older.path, (now, now - 100))
    os.utime(newer.path, (now, now - 50))
    assert [i.name for i in list_segments(prefix)] == [newer.name, older.name]
    assert newest_live(prefix).name == newer.name
    os.utime(older.path, (now, now))
    assert [i.name for i in list_segments(prefix)] == [older.name, newer.name]
    # A newer segment whose engine is gone is skipped.
    off = OFFSET["server_pid"]
    older.buf[off : off + 4] = dead_pid().to_bytes(4, "little")
    os.utime(older.path, (now, now))
    assert newest_live(prefix).name == newer.name


def test_nothing_found(prefix: str) -> None:
    assert list_segments(prefix) == []
    assert newest_live(prefix) is None


def test_a_reused_pid_with_a_frozen_heartbeat_is_not_live(segment_factory, prefix: str) -> None:
    """The engine died and its pid now names an unrelated live process: the heartbeat says so."""
    # Alive, certainly not an engine of this segment, and started after this test process (a reused
    # pid names a newer process), so the listing's newest-first order is not a tie of start times.
    time.sleep(0.03)  # a clock tick (start times count in ticks of 10 ms)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _frozen_heartbeat_case(segment_factory, prefix, sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()


def _frozen_heartbeat_case(segment_factory, prefix: str, unrelated: int) -> None:
    frozen = segment_factory(prefix + "reused", server_pid=unrelated)
    beat(frozen, age_s=10.0)
    (info,) = list_segments(prefix)
    assert info.server_pid == unrelated and info.server_alive  # the pid alone would say "live"
    assert not info.engine_live
    assert info.heartbeat_age_s == pytest.approx(10.0, abs=1.0)
    assert newest_live(prefix) is None  # never followed as the newest live engine
    # An older segment with a beating engine is followed instead.
    live = segment_factory(prefix + "live")
    beat(live)
    now = time.time()
    os.utime(live.path, (now, now - 100))
    os.utime(frozen.path, (now, now))
    assert list_segments(prefix)[0].name == frozen.name  # newest first ...
    assert newest_live(prefix).name == live.name  # ... but not live


def test_a_heartbeat_of_zero_or_from_the_future_is_unknown(segment_factory, prefix: str) -> None:
    seg = segment_factory(prefix + "x")
    (info,) = list_segments(prefix)
    assert info.server_alive and info.heartbeat_age_s is None and not info.engine_live
    seg.set("heartbeat_ns", time.monotonic_ns() + 60 * 10**9)
    (info,) = list_segments(prefix)
    assert info.heartbeat_age_s is None and not info.engine_live
    assert heartbeat_age_s(0) is None
    assert heartbeat_age_s(time.monotonic_ns() - 3 * 10**9) == pytest.approx(3.0, abs=0.5)


def test_newest_live_skips_another_users_segment_unless_allowed(segment_factory, prefix: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    seg = segment_factory(prefix + "theirs")
    beat(seg)
    os.chown(seg.path, 12345, 12345)
    (info,) = list_segments(prefix)
    assert info.owner_uid == 12345 and info.engine_live  # listed, with its owner
    assert newest_live(prefix) is None
    assert newest_live(prefix, allow_other_user=True).name == seg.name
