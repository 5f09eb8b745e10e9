"""Read-only attach, zero-copy views, engine-side create/unlink, and staleness detection."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from lucky_monitor.protocol.errors import (
    BadMagic,
    HeaderError,
    LuckyMonitorError,
    SegmentGone,
    SegmentNotFound,
    TransportError,
    TruncatedSegment,
)
from lucky_monitor.protocol.header import HEADER_SIZE, LIVE_FIELDS, OFFSET
from lucky_monitor.transport.shm import (
    InvalidSegmentName,
    Live,
    ReadPlan,
    Segment,
    SegmentExists,
    TrainerSegment,
    peek_header,
    platform_kind,
    shm_path,
)

pytestmark = pytest.mark.skipif(platform_kind() != "dir", reason="segments are files under /dev/shm only on Linux")

REGION_VIEWS = {
    "obs": "obs_offset",
    "act": "act_offset",
    "rewards": "rewards_offset",
    "dones": "dones_offset",
    "truncateds": "truncateds_offset",
    "resets": "resets_offset",
    "images": "image_offset",
}


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture
def engine(segment_factory):
    eng = segment_factory(num_envs=3, obs_size=5, act_size=2, image=(6, 4, 3))
    eng.obs[:] = np.arange(15, dtype=np.float32).reshape(3, 5)
    eng.act[:] = -1.5
    eng.rewards[:] = [0.5, 1.5, 2.5]
    eng.dones[:] = [0, 1, 0]
    eng.truncateds[:] = [1, 0, 0]
    eng.resets[:] = [0, 0, 1]
    eng.images[:] = np.arange(eng.images.size, dtype=np.uint64).reshape(eng.images.shape) % 251
    eng.set("frame_seq", 7)
    eng.set("action_seq", 6)
    eng.set("heartbeat_ns", 123456789)
    return eng


def test_views_are_zero_copy_into_the_mapping(engine) -> None:
    with Segment.attach(engine.name) as seg:
        base_arr = np.frombuffer(seg.buf, np.uint8)
        base = base_arr.ctypes.data
        for attr, field in REGION_VIEWS.items():
            view = getattr(seg, attr)
            assert view is not None, attr
            assert view.ctypes.data == base + getattr(seg.header, field), attr
            assert not view.flags.owndata
        # And they show what the engine wrote, live.
        np.testing.assert_array_equal(seg.obs, engine.obs)
        np.testing.assert_array_equal(seg.images, engine.images)
        engine.rewards[1] = 42.0
        assert seg.rewards[1] == 42.0
        assert seg.obs.shape == (3, 5) and seg.obs.dtype == np.float32
        assert seg.images.shape == (3, 4, 6, 3) and seg.images.dtype == np.uint8
        assert seg.dones.dtype == np.uint8 and seg.truncateds.shape == (3,)
        del base_arr


def test_writes_through_any_view_raise_and_change_nothing(engine) -> None:
    before = digest(engine.path)
    with Segment.attach(engine.name) as seg:
        for attr in REGION_VIEWS:
            view = getattr(seg, attr)
            with pytest.raises(ValueError, match="read-only"):
                view[...] = 1
            with pytest.raises(ValueError):
                view.flags.writeable = True
        with pytest.raises(TypeError):
            seg.buf[0] = 0
        with pytest.raises(TypeError):
            seg.buf[OFFSET["frame_seq"] : OFFSET["frame_seq"] + 8] = bytes(8)
        assert not hasattr(seg, "set")
    assert digest(engine.path) == before


def test_counters_and_live_read_the_header_live(engine) -> None:
    with Segment.attach(engine.name) as seg:
        assert seg.counter("frame_seq") == 7
        engine.set("frame_seq", 2**64 - 2)
        engine.set("client_pid", 4321)
        assert seg.counter("frame_seq") == 2**64 - 2
        live = seg.live()
        assert isinstance(live, Live)
        assert live.client_pid == 4321 and live.action_seq == 6 and live.heartbeat_ns == 123456789
        assert set(live.__dataclass_fields__) == set(LIVE_FIELDS)
        assert seg.header.frame_seq == 7  # the snapshot does not move
        with pytest.raises(KeyError):
            seg.counter("num_envs")
        assert seg.size == engine.header.segment_size
        assert seg.session_id == engine.header.session_id
        assert seg.path == shm_path(engine.name) == os.path.join("/dev/shm", engine.name)
        assert seg.inode == os.stat(seg.path).st_ino


def test_read_plan_fills_every_region_in_one_call_per_group(engine) -> None:
    h = engine.header
    rewards, dones = np.zeros(3, np.float32), np.zeros(3, np.uint8)
    truncs, obs = np.zeros(3, np.uint8), np.zeros((3, 5), np.float32)
    parts = [(h.truncateds_offset, truncs), (h.rewards_offset, rewards), (h.obs_offset, obs), (h.dones_offset, dones)]
    with Segment.attach(engine.name) as seg:
        plan = ReadPlan(parts)
        assert len(plan.groups) == 1  # the hot arrays lie within a few KiB: one preadv
        seg.read_plan(plan)
        np.testing.assert_array_equal(rewards, [0.5, 1.5, 2.5])
        np.testing.assert_array_equal(dones, [0, 1, 0])
        np.testing.assert_array_equal(truncs, [1, 0, 0])
        np.testing.assert_array_equal(obs, np.arange(15, dtype=np.float32).reshape(3, 5))
        engine.rewards[:] = [9.0, 8.0, 7.0]
        seg.read_plan(plan)  # the plan is kept and read again each poll
        np.testing.assert_array_equal(rewards, [9.0, 8.0, 7.0])
        apart = ReadPlan(parts, max_gap=0)  # no bytes between regions allowed: a call per region
        assert len(apart.groups) == 4
        rewards[:] = 0
        seg.read_plan(apart)
        np.testing.assert_array_equal(rewards, [9.0, 8.0, 7.0])
        assert seg.read_seqs() == (7, 6)
        engine.set("frame_seq", 2**64 - 1)
        assert seg.read_seqs() == (2**64 - 1, 6)
        os.truncate(engine.path, h.rewards_offset + 4)  # rewards cut short: the read says so, no SIGBUS
        with pytest.raises(SegmentGone):
            seg.read_plan(plan)
    with pytest.raises(ValueError, match="overlap"):
        ReadPlan([(4096, np.zeros(8, np.uint8)), (4100, np.zeros(8, np.uint8))])


def run_script(script: str, name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter with the segment ``name`` as its argument (a SIGBUS kills only it)."""
    return subprocess.run(
        [sys.executable, "-c", script, name], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_reader_subprocess_leaves_the_segment_alone(engine, subprocess_env) -> None:
    before = digest(engine.path)
    script = textwrap.dedent(
        """
        import sys
        from lucky_monitor.transport.shm import Segment
        seg = Segment.attach(sys.argv[1])
        print(float(seg.obs.sum()), seg.counter("frame_seq"), seg.still_valid())
        # exit without closing: nothing may unlink or modify the segment
        """
    )
    out = run_script(script, engine.name, subprocess_env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(float(np.arange(15).sum())), "7", "None"]
    assert os.path.exists(engine.path)
    assert digest(engine.path) == before
    with Segment.attach(engine.name) as seg:
        assert seg.still_valid() is None


def test_truncated_file_is_detected_not_sigbus(engine) -> None:
    seg = Segment.attach(engine.name)
    try:
        assert seg.still_valid() is None
        os.truncate(engine.path, HEADER_SIZE)
        reason = seg.still_valid()
        assert reason is not None and "shrank" in reason
        assert seg.counter("frame_seq") == 7  # the header page is still there
        with pytest.raises(TruncatedSegment) as info:
            Segment.attach(engine.name)
        assert info.value.field == "segment_size"
        os.truncate(engine.path, 100)
        assert "shrank" in seg.still_valid()
        with pytest.raises(TruncatedSegment):
            Segment.attach(engine.name)
        os.truncate(engine.path, 0)
        with pytest.raises(TruncatedSegment):
            Segment.attach(engine.name)
        with pytest.raises(TruncatedSegment):
            peek_header(engine.name)
    finally:
        seg.close()


def test_a_file_emptied_right_after_the_size_check_is_reported_not_a_sigbus(engine, subprocess_env) -> None:
    # The truncation lands between still_valid's fstat and its session_id read: that read goes
    # through the fd (a short read) instead of a load from the mapping (a SIGBUS). In a child
    # process, so that a SIGBUS shows as its exit status.
    script = textwrap.dedent(
        """
        import os, sys
        from lucky_monitor.transport.shm import Segment
        seg = Segment.attach(sys.argv[1])
        check = seg._file_check

        def check_then_truncate():
            reason = check()
            os.truncate(seg.path, 0)
            return reason

        seg._file_check = check_then_truncate
        print(seg.still_valid())
        """
    )
    out = run_script(script, engine.name, subprocess_env)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-2000:]}"
    assert out.stdout.strip() == "segment shrank below its header"


def test_unlink_is_detected_and_old_mapping_stays_readable(engine) -> None:
    seg = Segment.attach(engine.name)
    try:
        engine_path = engine.path
        engine.unlink()
        assert not os.path.exists(engine_path)
        assert seg.still_valid() == "segment unlinked"
        assert seg.counter("engine_state") == 3  # announced before the unlink
        assert seg.obs[2, 4] == 14.0
        engine.unlink()  # idempotent
    finally:
        seg.close()


def test_recreate_under_the_same_name_is_detected(segment_factory) -> None:
    first = segment_factory()
    seg = Segment.attach(first.name)
    try:
        first.unlink()
        second = segment_factory(first.name)
        reason = seg.still_valid()
        assert reason is not None and "recreated" in reason
        with Segment.attach(second.name) as fresh:
            assert fresh.session_id == second.header.session_id != seg.session_id
            assert fresh.still_valid() is None
            third = segment_factory(first.name, exist_ok=True)  # atomic replace of a live name
            assert "recreated" in fresh.still_valid()
        second.unlink()  # must not remove its successor's file
        with Segment.attach(third.name) as newest:
            assert newest.still_valid() is None
            assert newest.session_id == third.header.session_id
    finally:
        seg.close()


def test_session_id_change_is_detected(engine) -> None:
    with Segment.attach(engine.name) as seg:
        off = OFFSET["session_id"]
        engine.buf[off : off + 8] = (seg.session_id ^ 0xFF).to_bytes(8, "little")
        assert "session_id changed" in seg.still_valid()


def test_close_is_idempotent_and_survives_exported_arrays(engine) -> None:
    seg = Segment.attach(engine.name)
    kept = seg.obs
    mv_slice = seg.buf[0:16]
    seg.close()
    seg.close()
    assert seg.closed
    assert seg.still_valid() == "segment closed"
    assert seg.obs is None and seg.images is None
    assert kept[1, 0] == 5.0  # the mapping lives as long as the array does
    mv_slice.release()
    with Segment.attach(engine.name):
        pass


@pytest.mark.parametrize("name", ["", "a/b", "../etc/passwd", ".", "..", "x" * 201, "with space", "ümlaut", "a\0b"])
def test_bad_names_are_typed_errors(name: str) -> None:
    with pytest.raises(InvalidSegmentName) as info:
        Segment.attach(name)
    assert isinstance(info.value, SegmentNotFound)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, LuckyMonitorError)
    with pytest.raises(InvalidSegmentName):
        shm_path(name)


def test_missing_segment(shm_name: str) -> None:
    with pytest.raises(SegmentNotFound, match="no segment named"):
        Segment.attach(shm_name)


def test_corrupt_header_file(shm_name: str) -> None:
    with open(shm_path(shm_name), "wb") as f:
        f.write(os.urandom(8192))
    with pytest.raises(BadMagic):
        Segment.attach(shm_name)
    with open(shm_path(shm_name), "wb") as f:
        f.write(b"LRBC" * 2048)
    with pytest.raises(HeaderError):
        Segment.attach(shm_name)


def test_directory_and_fifo_are_refused_without_hanging(shm_name: str) -> None:
    path = shm_path(shm_name)
    os.mkdir(path)
    try:
        with pytest.raises(TransportError, match="not a"):
            Segment.attach(shm_name)
    finally:
        os.rmdir(path)
    os.mkfifo(path)
    with pytest.raises(TransportError, match="not a"):
        Segment.attach(shm_name)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores file permissions")
def test_permission_denied(engine) -> None:
    os.chmod(engine.path, 0)
    try:
        with pytest.raises(TransportError, match="permission denied"):
            Segment.attach(engine.name)
    finally:
        os.chmod(engine.path, 0o600)


def test_create_refuses_an_existing_name_and_publishes_atomically(segment_factory) -> None:
    eng = segment_factory()
    st = os.stat(eng.path)
    assert st.st_mode & 0o777 == 0o600
    assert st.st_size == eng.header.segment_size
    with pytest.raises(SegmentExists):
        segment_factory(eng.name)
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f".{eng.name}.")]  # no staging file left
    with Segment.attach(eng.name) as seg:
        assert seg.header == eng.header


def test_no_tools_no_images_no_truncateds(segment_factory) -> None:
    eng = segment_factory(tools_ring_size=None)
    off = OFFSET["truncateds_offset"]
    eng.buf[off : off + 8] = bytes(8)
    with Segment.attach(eng.name) as seg:
        assert seg.images is None and seg.truncateds is None
        assert set(seg.ring_positions()) == {"cmd_s2c", "cmd_c2s"}


def test_ring_positions(engine) -> None:
    h = engine.header
    engine.buf[h.cmd_c2s_offset : h.cmd_c2s_offset + 8] = (64).to_bytes(4, "little") + (16).to_bytes(4, "little")
    with Segment.attach(engine.name) as seg:
        pos = seg.ring_positions()
        assert set(pos) == {"cmd_s2c", "cmd_c2s", "tools_c2s", "tools_s2c"}
        c2s = pos["cmd_c2s"]
        assert (c2s.write_pos, c2s.read_pos, c2s.used, c2s.capacity) == (64, 16, 48, h.cmd_ring_size)
        assert pos["tools_s2c"].offset == h.tools_s2c_offset


def test_trainer_attach_writes_what_the_monitor_sees(engine) -> None:
    with TrainerSegment.attach(engine.name) as tr, Segment.attach(engine.name) as mon:
        tr.act[:] = 0.25
        tr.resets[0] = 1
        tr.set("client_pid", os.getpid())
        tr.set("action_seq", 7)
        assert mon.live().action_seq == 7 and mon.counter("client_pid") == os.getpid()
        assert float(mon.act.sum()) == pytest.approx(0.25 * 6)
        assert engine.resets[0] == 1


def test_trainer_cas_claims_client_pid_once(engine) -> None:
    with TrainerSegment.attach(engine.name) as a, TrainerSegment.attach(engine.name) as b:
        assert a.cas("client_pid", 0, 111)
        assert not b.cas("client_pid", 0, 222)
        assert engine.counter("client_pid") == 111
        assert b.cas("client_pid", 111, 222)
        assert engine.cas("frame_seq", 7, 2**64 - 1) and engine.counter("frame_seq") == 2**64 - 1
        with pytest.raises(KeyError):
            a.cas("num_envs", 3, 4)


def test_a_fixed_field_rewritten_while_attached_is_named_with_both_values(engine) -> None:
    """The magic in hex, as the header check words it (it read 1280459331 -> 1651663207)."""
    with Segment.attach(engine.name) as seg:
        assert seg.fixed_fields_changed() is None
        engine.buf[OFFSET["num_envs"] : OFFSET["num_envs"] + 4] = (5000).to_bytes(4, "little")
        assert seg.fixed_fields_changed() == "header field num_envs changed while attached (3 -> 5000)"
        engine.buf[OFFSET["num_envs"] : OFFSET["num_envs"] + 4] = (3).to_bytes(4, "little")
        engine.buf[0:4] = b"garb"
        assert seg.fixed_fields_changed() == "header field magic changed while attached (0x4C524243 -> 0x62726167)"
