"""The inspector's statistics and the value and image alarms (Qt-free).

Statistics are compared with numpy's own functions on the same data; the
alarms are driven by hand-written segments (the engine side written here,
byte by byte) so each finding has exactly one cause.
"""

from __future__ import annotations

import io
import json
import math
import time

import numpy as np
import pytest

from lucky_monitor.core.imagecheck import MIN_FRAMES, ImageChecker
from lucky_monitor.core.inspector import MAX_ALARMS, AlarmScanner, dim_names, region_stats
from lucky_monitor.core.session import MonitorSession, Tick
from lucky_monitor.protocol.seqlock import engine_turn_read
from lucky_monitor.transport.shm import platform_kind
from lucky_monitor.watch import Watcher

linux = pytest.mark.skipif(platform_kind() != "dir", reason="segments are exercised on Linux")


# ---------------------------------------------------------------- statistics
@pytest.mark.parametrize(("envs", "dims"), [(1, 1), (7, 3), (300, 5), (4096, 100)])
def test_statistics_equal_numpys_on_the_same_data(envs: int, dims: int) -> None:
    rng = np.random.default_rng(envs * 31 + dims)
    a = (rng.standard_normal((envs, dims)) * rng.uniform(0.1, 1e3, dims)).astype(np.float32)
    st = region_stats("obs", 9, a, selected=[envs - 1, 0, envs - 1, envs + 5])
    np.testing.assert_allclose(st.mean, a.astype(np.float64).mean(axis=0), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(st.std, a.astype(np.float64).std(axis=0), rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(st.min, a.min(axis=0))
    np.testing.assert_array_equal(st.max, a.max(axis=0))
    assert st.nonfinite.tolist() == [0] * dims and st.frame_seq == 9
    # selected rows, de-duplicated and bounded to existing envs
    assert st.envs == ((envs - 1, 0) if envs > 1 else (0,))
    np.testing.assert_array_equal(st.selected, a[list(st.envs)])
    # heatmap rows: bands of consecutive envs, at most 256 rows
    assert st.heat.shape == (-(-envs // st.band), dims) and st.heat.shape[0] <= 256
    for r in (0, st.heat.shape[0] - 1):
        band = a[r * st.band : (r + 1) * st.band].astype(np.float64)
        np.testing.assert_allclose(st.heat[r], band.mean(axis=0), rtol=1e-5, atol=1e-3)
    assert not st.heat_bad.any()
    assert st.names == tuple(str(i) for i in range(dims))


def test_statistics_with_nan_and_inf_exclude_them_and_count_them_per_dim() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((600, 4)).astype(np.float32)
    a[5, 3] = np.nan
    a[7, 3] = np.inf
    a[:, 1] = np.nan  # a dim with no finite value at all
    a[599, 0] = -np.inf
    st = region_stats("obs", 1, a, names=("a", "b", "c", "d"))
    clean = np.where(np.isfinite(a), a, np.nan).astype(np.float64)
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        want_mean = np.nanmean(clean, axis=0)
    np.testing.assert_allclose(st.mean[[0, 2, 3]], want_mean[[0, 2, 3]], rtol=1e-9)
    np.testing.assert_allclose(st.std[[0, 2, 3]], np.nanstd(clean[:, [0, 2, 3]], axis=0), rtol=1e-9)
    np.testing.assert_array_equal(st.min[[0, 2, 3]], np.nanmin(clean[:, [0, 2, 3]], axis=0))
    np.testing.assert_array_equal(st.max[[0, 2, 3]], np.nanmax(clean[:, [0, 2, 3]], axis=0))
    assert np.isnan(st.mean[1]) and np.isnan(st.min[1])
    assert st.nonfinite.tolist() == [1, 600, 0, 2]
    band = st.band
    assert st.heat_bad[5 // band, 3] and st.heat_bad[599 // band, 0] and st.heat_bad[:, 1].all()
    assert not st.heat_bad[:, 2].any()
    assert st.names == ("a", "b", "c", "d")


def test_dims_are_named_from_the_schema_blocks_or_by_index() -> None:
    assert dim_names(("x", "echo", "pad"), (1, 2, 1), 4) == ("x", "echo[0]", "echo[1]", "pad")
    assert dim_names(("x", "y"), (1, 2), 4) == ("0", "1", "2", "3")  # blocks do not add up: indices
    assert dim_names((), (), 2) == ("0", "1")


# ---------------------------------------------------------------- value alarms
def test_nan_inf_and_large_values_are_named_by_region_env_dim_and_frame() -> None:
    sc = AlarmScanner(threshold=1e6)
    obs = np.zeros((8, 5), np.float32)
    obs[5, 3] = np.nan
    obs[2, 0] = -2e6
    rew = np.zeros(8, np.float32)
    rew[7] = np.inf
    assert sc.check("obs", 41, obs) == 2
    assert sc.check("rewards", 41, rew) == 1
    assert sc.check("actions", 40, np.ones((8, 2), np.float32)) == 0
    st = sc.state()
    got = sorted((a.region, a.env, a.dim, a.kind, a.frame_seq) for a in st.new)
    assert got == [("obs", 2, 0, "large", 41), ("obs", 5, 3, "nan", 41), ("rewards", 7, None, "inf", 41)]
    assert st.nonfinite_total == {"obs": 1, "actions": 0, "rewards": 1}
    assert st.large_total == {"obs": 1, "actions": 0, "rewards": 0}
    assert {"region": "rewards", "env": 7, "dim": None, "kind": "inf", "frame_seq": 41} in [
        a.to_json() for a in st.recent
    ]
    again = sc.state()
    assert again.new == () and again.recent == st.recent  # "new" is reported once
    # the same value seen again is one entry in the recent list, with the newest frame
    sc.check("obs", 42, obs)
    st2 = sc.state()
    assert [a.frame_seq for a in st2.recent if a.key == ("obs", 5, 3, "nan")] == [42]
    assert st2.nonfinite_total["obs"] == 2  # the counter counts every value seen


def test_the_alarm_list_is_bounded_and_the_counts_exact_when_everything_is_nan() -> None:
    sc = AlarmScanner()
    a = np.full((4096, 100), np.nan, np.float32)
    for f in range(1, 200):
        sc.check("obs", f, a)
    st = sc.state()
    assert len(st.recent) <= MAX_ALARMS and len(st.new) <= MAX_ALARMS
    assert st.nonfinite_total["obs"] == 4096 * 100 * 199


def test_a_bad_threshold_is_refused() -> None:
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="threshold"):
            AlarmScanner(bad)


def test_actions_are_copied_only_inside_the_engines_turn() -> None:
    counters = {"f": 5, "a": 4}  # the trainer's turn: actions are being written
    copies: list[int] = []
    r = engine_turn_read(lambda: counters["f"], lambda: counters["a"], lambda: copies.append(1))
    assert not r.ok and copies == []
    counters["a"] = 5  # handed over: the engine's turn
    r = engine_turn_read(lambda: counters["f"], lambda: counters["a"], lambda: copies.append(1))
    assert r.ok and r.action_seq == 5 and copies == [1]

    def engine_publishes_during_the_copy() -> None:
        counters["f"] = 6

    r = engine_turn_read(lambda: counters["f"], lambda: counters["a"], engine_publishes_during_the_copy)
    assert not r.ok and r.torn == 1


# ---------------------------------------------------------------- image checks (unit)
def tiles(n: int, h: int = 6, w: int = 5, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, h, w, 3), dtype=np.uint8)


def test_image_checker_finds_constant_duplicate_frozen_and_lag() -> None:
    ic = ImageChecker(6, 6 * 5 * 3)
    envs = ic.envs()
    assert envs.tolist() == [0, 1, 2, 3, 4, 5]
    t = tiles(6)
    t[0] = 17  # constant
    t[2] = t[1]  # duplicate pair
    obs = np.arange(6 * 3, dtype=np.float32).reshape(6, 3)
    r1 = ic.check(0.0, envs, t, image_seq=2, image_frame_seq=10, frame_seq=10, obs_rows=obs)
    kinds = {(a.kind, a.env) for a in r1.alarms}
    assert ("constant", 0) in kinds and ("duplicate", 2) in kinds
    assert r1.flags[1] == ("duplicate",) and r1.flags[2] == ("duplicate",) and r1.flags[0] == ("constant",)
    assert not ic.due(0.5) and ic.due(1.0)
    t2 = tiles(6, seed=1)
    t2[3] = t[3]  # env 3's picture did not change ...
    obs2 = obs + np.random.default_rng(7).uniform(0.5, 1.5, obs.shape).astype(np.float32)  # every env moves ...
    obs2[3] += 5.0  # ... env 3 more than most
    r2 = ic.check(1.0, envs, t2, image_seq=4, image_frame_seq=40, frame_seq=40, obs_rows=obs2)
    assert [(a.kind, a.env) for a in r2.alarms] == [("frozen", 3)]
    assert r2.flags == {3: ("frozen",)}
    # the camera rate explains 2 x 50/10 + 2 = 12 frames of lag; 40 is more
    r3 = ic.check(
        2.0,
        envs,
        t2 + 1,
        image_seq=6,
        image_frame_seq=40,
        frame_seq=80,
        obs_rows=obs2,
        frames_per_s=50,
        images_per_s=10,
    )
    assert [(a.kind, a.env, a.frame_seq) for a in r3.alarms] == [("lag", None, 80)]
    r4 = ic.check(
        3.0,
        envs,
        t2 + 2,
        image_seq=8,
        image_frame_seq=74,
        frame_seq=80,
        obs_rows=obs2,
        frames_per_s=50,
        images_per_s=10,
    )
    assert r4.alarms == ()
    r5 = ic.check(4.0, envs, t2 + 3, image_seq=8, image_frame_seq=0, frame_seq=900, frames_per_s=50, camera_on=False)
    assert r5.alarms == ()  # Camera off: images are not expected


def test_tiles_with_one_checksum_are_duplicates_only_when_their_bytes_are(monkeypatch) -> None:
    import lucky_monitor.core.imagecheck as imagecheck

    monkeypatch.setattr(imagecheck.zlib, "crc32", lambda data: 7)  # every tile collides
    ic = ImageChecker(5, 6 * 5 * 3)
    t = tiles(5)
    t[3] = t[1]
    r = ic.check(0.0, ic.envs(), t, image_seq=2, image_frame_seq=1, frame_seq=1)
    assert sorted((a.kind, a.env, a.detail) for a in r.alarms) == [("duplicate", 3, "same as env 1")]
    assert r.flags == {1: ("duplicate",), 3: ("duplicate",)}


def test_image_checker_samples_a_bounded_window_that_covers_every_env_twice() -> None:
    ic = ImageChecker(4096, 64 * 64 * 3, sample=64)
    seen: list[int] = []
    for k in range(128):
        e = ic.envs()
        assert len(e) == 64
        seen.extend(e.tolist())
        ic.check(float(k), e, np.zeros((64, 1, 1, 1), np.uint8), image_seq=0, image_frame_seq=0, frame_seq=0)
    counts = np.bincount(seen, minlength=4096)
    assert counts.min() == 2 and counts.max() == 2
    big = ImageChecker(16, 4096 * 4096 * 4)  # 64 MiB tiles: one per check
    assert big.count == 1


# ---------------------------------------------------------------- the session, against hand-written segments
def publish(seg, frame: int) -> None:
    seg.set("heartbeat_ns", time.monotonic_ns())
    seg.set("frame_seq", frame)


def step_until(s: MonitorSession, seg, until, what: str, frame: int, timeout: float = 10.0) -> tuple[Tick, int]:
    deadline = time.monotonic() + timeout
    while True:
        seg.set("heartbeat_ns", time.monotonic_ns())
        tick = s.step()
        if until(tick):
            return tick, frame
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}: {tick.state} {tick.text!r}")
        time.sleep(0.005)


@linux
def test_nan_in_obs_and_inf_in_rewards_reach_the_tick_and_watch_json(segment_factory) -> None:
    seg = segment_factory(num_envs=8, obs_size=6, act_size=2)
    seg.set("engine_state", 1)
    seg.obs[:] = 0.5
    seg.obs[5, 3] = np.nan
    seg.rewards[:] = 1.0
    seg.rewards[7] = np.inf
    seg.rewards[6] = -np.inf  # beside +Inf: numpy warned on stderr, and watch said "reward —"
    seg.rewards[0] = 3.0
    publish(seg, 1)
    s = MonitorSession(seg.name, tools=False, images=False, discover=False, traffic=False)
    out = io.StringIO()
    w = Watcher(out, json_lines=True, interval=0.05)
    try:
        tick, _ = step_until(s, seg, lambda t: len(t.alarms.recent) >= 2, "both alarms", 1)
        for _ in range(20):
            w.feed(tick)
            tick = s.step(tick.t + 0.02)
        w.feed(tick)
    finally:
        s.close()
    keys = {(a.region, a.env, a.dim, a.kind, a.frame_seq) for a in tick.alarms.recent}
    assert keys == {("obs", 5, 3, "nan", 1), ("rewards", 7, None, "inf", 1), ("rewards", 6, None, "inf", 1)}
    assert tick.alarms.nonfinite_total == {"obs": 1, "actions": 0, "rewards": 2}  # frame 1 checked once
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    listed = [a for rec in lines for a in rec["alarms"]]
    assert {"region": "obs", "env": 5, "dim": 3, "kind": "nan", "frame_seq": 1} in listed
    assert {"region": "rewards", "env": 7, "dim": None, "kind": "inf", "frame_seq": 1} in listed
    # the reward figures are over the finite rewards, as export's and the plots' are
    last = lines[-1]
    assert (last["reward_mean"], last["reward_min"], last["reward_max"]) == (1.333, 1.0, 3.0), last
    assert all(
        rec["nonfinite_total"] is None or set(rec["nonfinite_total"]) == {"obs", "actions", "rewards"} for rec in lines
    )
    # statistics exclude the NaN and equal numpy's
    insp = tick.inspector
    assert insp is not None and insp.obs is not None and insp.names_from == "indices"
    np.testing.assert_array_equal(insp.obs.nonfinite, [0, 0, 0, 1, 0, 0])
    np.testing.assert_allclose(insp.obs.mean, 0.5)
    assert insp.actions is None and "no trainer" in insp.actions_note


@linux
def test_actions_are_read_in_the_engines_turn_and_checked(segment_factory) -> None:
    seg = segment_factory(num_envs=4, obs_size=3, act_size=2)
    seg.set("engine_state", 1)
    seg.set("client_pid", seg.header.server_pid)  # a live "trainer" (this process)
    publish(seg, 3)
    seg.act[:] = 0.25
    seg.act[1, 1] = -np.inf
    seg.set("action_seq", 2)  # the trainer's turn: actions not yet complete
    s = MonitorSession(seg.name, tools=False, images=False, discover=False, traffic=False)
    try:
        for _ in range(5):
            tick = s.step()
        assert not any(a.region == "actions" for a in tick.alarms.recent)
        seg.set("action_seq", 3)  # handed over: the engine's turn
        tick, _ = step_until(s, seg, lambda t: any(a.region == "actions" for a in t.alarms.recent), "actions", 3)
        tick = s.step(tick.t + 1.0)
    finally:
        s.close()
    assert [(a.env, a.dim, a.kind, a.frame_seq) for a in tick.alarms.recent if a.region == "actions"] == [
        (1, 1, "inf", 3)
    ]
    assert tick.inspector is not None and tick.inspector.actions is not None
    assert tick.inspector.actions.frame_seq == 3 and "engine's turn" in tick.inspector.actions_note
    np.testing.assert_array_equal(tick.inspector.actions.nonfinite, [0, 1])


def write_images(seg, images: np.ndarray, frame: int) -> None:
    seq = seg.counter("image_seq")
    seg.set("image_seq", seq + 1)
    np.copyto(seg.images, images)
    seg.set("image_frame_seq", frame)
    seg.set("image_seq", seq + 2)


@linux
def test_constant_duplicate_and_frozen_tiles_raise_the_three_image_alarms(segment_factory) -> None:
    seg = segment_factory(num_envs=6, obs_size=3, act_size=1, image=(8, 6, 3))
    seg.set("engine_state", 1)
    rng = np.random.default_rng(3)
    clock = [100.0]
    s = MonitorSession(seg.name, tools=False, discover=False, traffic=False, clock=lambda: clock[0])

    def frame(k: int) -> np.ndarray:
        imgs = rng.integers(0, 256, (6, 6, 8, 3), dtype=np.uint8)
        imgs[0] = 0  # env 0: the camera renders nothing
        imgs[4] = imgs[2]  # env 4 shows env 2's picture
        imgs[5] = 77 + np.arange(8, dtype=np.uint8)[None, :, None]  # env 5: the same picture every frame
        return imgs

    try:
        for k in range(1, 5):
            seg.obs[:] = rng.standard_normal((6, 3)).astype(np.float32)  # every env's obs changes ...
            seg.obs[5] += 10 * k  # ... env 5's by more than any other
            write_images(seg, frame(k), 30 * k)  # half a second and more apart at 50 Hz (MIN_FRAMES)
            publish(seg, 30 * k)
            tick = s.step()
            clock[0] += 0.6
            tick = s.step()
            clock[0] += 0.6
    finally:
        s.close()
    found = {(a.kind, a.env) for a in tick.alarms.recent if a.region == "image"}
    assert ("constant", 0) in found
    assert ("duplicate", 4) in found
    assert ("frozen", 5) in found
    assert not any(e in (1, 3) for _, e in found)  # healthy tiles raise nothing
    flags = tick.alarms.image_flags
    assert "constant" in flags[0] and "duplicate" in flags[2] and "duplicate" in flags[4] and "frozen" in flags[5]
    assert all(a.to_json()["region"] == "image" and a.dim is None for a in tick.alarms.recent)


@linux
def test_a_monitor_held_up_during_its_image_check_raises_no_lag_alarm(segment_factory, monkeypatch) -> None:
    """Forty frames, each with its image, pass while the monitor is held up (niced, on a busy machine) at the
    moment it reads ``frame_seq`` for the lag check: the camera kept up, so no lag alarm. A real lag (the
    images stop while the frames go on) still raises one."""
    import lucky_monitor.core.session as session_mod

    seg = segment_factory(num_envs=4, obs_size=3, act_size=1, image=(8, 6, 3))
    seg.set("engine_state", 1)
    rng = np.random.default_rng(8)
    clock = [100.0]
    frame = [0]
    s = MonitorSession(seg.name, tools=False, discover=False, traffic=False, clock=lambda: clock[0])

    def engine_step(images: bool = True) -> None:
        frame[0] += 1
        seg.obs[:] = rng.standard_normal((4, 3)).astype(np.float32)
        if images:
            write_images(seg, rng.integers(0, 256, (4, 6, 8, 3), dtype=np.uint8), frame[0])
        publish(seg, frame[0])

    held = [False]
    check_images = session_mod.MonitorSession._check_images

    def check_while_held(self, now, segment):  # the monitor's own reads during the check
        read_counter = segment.read_counter

        def late_read(field: str) -> int:
            if field == "frame_seq" and held[0]:
                held[0] = False
                for _ in range(40):
                    engine_step()
            return read_counter(field)

        segment.read_counter = late_read
        try:
            return check_images(self, now, segment)
        finally:
            segment.read_counter = read_counter

    monkeypatch.setattr(session_mod.MonitorSession, "_check_images", check_while_held)
    try:
        for k in range(12):  # 50 frames/s and 50 images/s, as the link measures them
            for _ in range(10):
                engine_step()
            held[0] = k >= 4
            s.step()
            clock[0] += 0.2
        tick = s.step()
        assert tick.rates.images_per_s and tick.rates.frames_per_s
        assert [a for a in tick.alarms.recent if a.kind == "lag"] == []
        for _ in range(20):  # the camera stops: frames only (two seconds of them are explained)
            for _ in range(10):
                engine_step(images=False)
            s.step()
            clock[0] += 0.2
        tick = s.step()
    finally:
        s.close()
    assert [a.kind for a in tick.alarms.recent if a.region == "image"] == ["lag"]


@linux
def test_dims_are_named_by_the_engines_agent_schema_when_a_view_asks() -> None:
    from lucky_monitor.sim.engine import EngineConfig, ReferenceEngine
    from tests.conftest import unique_segment_name

    eng = ReferenceEngine(
        EngineConfig(
            name=unique_segment_name("insp"), num_envs=4, obs_size=9, act_size=2, image=None, sim_mode=2, hz=200
        )
    )
    s = MonitorSession(eng.name, discover=False, traffic=False, inspect_hz=50)
    try:
        s.request_names()
        deadline = time.monotonic() + 20
        while True:
            eng.tick()
            tick = s.step()
            insp = tick.inspector
            if insp is not None and insp.names_from == "GetAgentSchema" and insp.obs is not None:
                break
            assert time.monotonic() < deadline, "no names"
    finally:
        s.close()
        eng.close()
    assert insp.obs.names[:6] == ("cart_pos", "cart_vel", "pole_cos", "pole_sin", "pole_ang_vel", "action_echo[0]")
    assert len(insp.obs.names) == 9
    assert tick.results == ()  # the session's own request shows no command result


def test_a_still_scene_whose_clock_runs_is_not_frozen_a_stuck_camera_on_a_moving_env_is() -> None:
    ic = ImageChecker(6, 6 * 5 * 3)
    envs = ic.envs()
    rng = np.random.default_rng(5)
    obs = rng.standard_normal((6, 4))
    obs[:, 3] = 0.1  # an episode clock every env shares
    t = tiles(6)
    ic.check(0.0, envs, t, image_seq=2, image_frame_seq=1, frame_seq=1, obs_rows=obs)
    obs2 = obs.copy()
    obs2[:, 3] += 0.1  # the clock runs for everyone
    obs2[[0, 1, 2, 5], :3] += rng.uniform(0.5, 1.5, (4, 3))  # envs 0, 1, 2 and 5 move ...
    obs2[5, :3] += 5.0  # ... env 5 the most
    t2 = tiles(6, seed=9)
    t2[4] = t[4]  # env 4 stands still: only its clock moved
    t2[5] = t[5]  # env 5 moved, its picture did not
    r = ic.check(1.0, envs, t2, image_seq=4, image_frame_seq=50, frame_seq=50, obs_rows=obs2)
    assert [(a.kind, a.env) for a in r.alarms] == [("frozen", 5)]
    # with no moving tiles to compare with, nothing is called frozen
    r = ic.check(2.0, envs, t2, image_seq=6, image_frame_seq=100, frame_seq=100, obs_rows=obs2 + 1)
    assert r.alarms == ()


@linux
def test_an_obs_region_over_the_limit_is_not_copied_and_the_inspector_says_so(segment_factory, monkeypatch) -> None:
    import lucky_monitor.core.monitor as monitor_mod
    import lucky_monitor.core.session as session_mod

    monkeypatch.setattr(monitor_mod, "INSPECT_MAX_BYTES", 1024)
    monkeypatch.setattr(session_mod, "INSPECT_MAX_BYTES", 1024)
    seg = segment_factory(num_envs=64, obs_size=8, act_size=1)  # 2 KiB of obs: over the (patched) limit
    seg.set("engine_state", 1)
    seg.obs[:] = np.nan
    publish(seg, 1)
    s = MonitorSession(seg.name, tools=False, images=False, discover=False, traffic=False)
    try:
        tick, _ = step_until(s, seg, lambda t: t.inspector is not None, "the inspector", 1)
    finally:
        s.close()
    assert tick.inspector.obs is None and "limit: not inspected" in tick.inspector.obs_note
    assert tick.frame is None or tick.frame.obs is None
    assert tick.alarms.nonfinite_total["obs"] == 0  # not read, so not checked


def first_check(
    n: int, dims: int, seed: int
) -> tuple[ImageChecker, np.ndarray, np.ndarray, np.ndarray, np.random.Generator]:
    """A checker over ``n`` envs after its first check: (checker, envs, obs, tiles, rng)."""
    ic = ImageChecker(n, 6 * 5 * 3)
    envs = ic.envs()
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n, dims))
    t = tiles(n)
    ic.check(0.0, envs, t, image_seq=2, image_frame_seq=1, frame_seq=1, obs_rows=obs)
    return ic, envs, obs, t, rng


def test_an_env_whose_episode_ended_is_not_judged_frozen_by_its_reset_jump() -> None:
    """A reset moves the observation far while the picture may look the same: not a stuck camera."""

    def run(ended: np.ndarray | None) -> list[tuple[str, int | None]]:
        ic, envs, obs, t, rng = first_check(6, 4, seed=11)
        obs2 = obs + rng.uniform(0.5, 1.5, obs.shape)  # every env moves ...
        obs2[2] += 40.0  # ... env 2 jumps: its episode was reset (the clock back to 0, the cart re-centred)
        t2 = tiles(6, seed=4)
        t2[2] = t[2]  # and the new episode starts where the old one stood: the same pixels
        r = ic.check(1.0, envs, t2, image_seq=4, image_frame_seq=50, frame_seq=50, obs_rows=obs2, ended=ended)
        return [(a.kind, a.env) for a in r.alarms]

    assert run(None) == [("frozen", 2)]  # without the done flag it reads as a stuck camera
    assert run(np.array([False, False, True, False, False, False])) == []


def test_motion_is_scaled_by_the_other_envs_and_still_tiles_near_the_old_bar_are_not_frozen() -> None:
    """An env that moved a little more than most (here 2.5x) while its pixels stayed: not frozen (the bar is 4x)."""
    ic, envs, obs, t, _ = first_check(8, 3, seed=2)
    obs2 = obs + 1.0  # every env moves by 1 in every dim ...
    obs2[6] = obs[6] + 2.5  # ... env 6 by 2.5: a sway under a pixel while its velocities changed sign
    t2 = tiles(8, seed=3)
    t2[6] = t[6]
    r = ic.check(1.0, envs, t2, image_seq=4, image_frame_seq=50, frame_seq=50, obs_rows=obs2)
    assert r.alarms == ()
    obs3 = obs2 + 1.0
    obs3[6] = obs2[6] + 6.0  # a camera stuck on an env that moves six times as much as the others
    t3 = tiles(8, seed=5)
    t3[6] = t[6]
    r = ic.check(2.0, envs, t3, image_seq=6, image_frame_seq=100, frame_seq=100, obs_rows=obs3)
    assert [(a.kind, a.env) for a in r.alarms] == [("frozen", 6)]


@linux
def test_statistics_follow_the_rate_a_view_sets_never_above_inspect_hz(segment_factory) -> None:
    """A window under its CPU budget thins the inspector's refreshes with its plots (the alarms are not thinned)."""
    seg = segment_factory(num_envs=8, obs_size=6, act_size=2)
    seg.set("engine_state", 1)
    seg.obs[:] = 0.5
    publish(seg, 1)
    s = MonitorSession(seg.name, tools=False, images=False, discover=False, traffic=False, inspect_hz=4.0)
    try:
        tick, _ = step_until(s, seg, lambda t: t.inspector is not None and t.inspector.obs is not None, "stats", 1)

        frames = iter(range(2, 10**6))

        def refreshes(seconds: float, start: float) -> tuple[int, float]:
            seqs = set()
            t = start
            for _ in range(round(seconds * 60)):
                t += 1 / 60
                frame = next(frames)
                seg.obs[:] = 0.5 + frame  # new values every frame: a refresh always has news
                publish(seg, frame)
                tick = s.step(t)
                assert tick.inspector is not None
                seqs.add(tick.inspector.seq)
            return len(seqs), t

        fast, t = refreshes(10.0, tick.t)
        s.set_statistics_rate(0.5)
        _, t = refreshes(2.0, t)  # the refresh planned at the old rate comes first
        slow, t = refreshes(10.0, t)
        s.set_statistics_rate(100.0)  # above inspect_hz: inspect_hz
        capped, _ = refreshes(10.0, t)
        for bad in (0.0, -1.0, math.nan, math.inf):
            with pytest.raises(ValueError, match="statistics rate"):
                s.set_statistics_rate(bad)
    finally:
        s.close()
    assert 38 <= fast <= 42, fast
    assert 4 <= slow <= 6, slow
    assert 38 <= capped <= 42, capped


def test_sightings_fewer_than_min_frames_apart_are_not_compared_the_older_one_is_kept() -> None:
    """Seen at 4096 envs, the engine at 5 frames a second: a balanced pole in two consecutive sample windows,
    5 frames apart, its velocities changed several times as much as the others' while its pixels stayed."""

    def second(frames: int, ended: bool = False) -> tuple[ImageChecker, list[tuple[str, int | None]]]:
        ic, envs, obs, t, rng = first_check(6, 4, seed=11)
        obs2 = obs + rng.uniform(0.5, 1.5, obs.shape)
        obs2[2] += 40.0
        t2 = tiles(6, seed=4)
        t2[2] = t[2]
        flags = np.array([False, False, ended, False, False, False])
        r = ic.check(
            1.0, envs, t2, image_seq=4, image_frame_seq=1 + frames, frame_seq=1 + frames, obs_rows=obs2, ended=flags
        )
        return ic, [(a.kind, a.env) for a in r.alarms]

    assert second(MIN_FRAMES)[1] == [("frozen", 2)]  # far enough apart: judged (as a stuck camera)
    ic, found = second(5)
    assert found == []  # 5 frames: not judged ...
    envs = ic.envs()
    obs, t = np.random.default_rng(11).standard_normal((6, 4)), tiles(6)  # the first check's sighting
    obs3 = obs + np.random.default_rng(3).uniform(0.5, 1.5, obs.shape)
    obs3[2] += 40.0
    t3 = tiles(6, seed=8)
    t3[2] = t[2]
    r = ic.check(2.0, envs, t3, image_seq=6, image_frame_seq=1 + MIN_FRAMES, frame_seq=1 + MIN_FRAMES, obs_rows=obs3)
    assert [(a.kind, a.env) for a in r.alarms] == [("frozen", 2)]  # ... but later, against the older sighting

    # an episode end seen at the sighting that came too soon still counts when the older one is compared
    ic, found = second(5, ended=True)
    assert found == []
    r = ic.check(2.0, envs, t3, image_seq=6, image_frame_seq=1 + MIN_FRAMES, frame_seq=1 + MIN_FRAMES, obs_rows=obs3)
    assert r.alarms == ()
