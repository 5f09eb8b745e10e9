"""Tests of the reference engine: resets, images, debug draw, services, every handler.

Most tests drive :meth:`ReferenceEngine.tick` / :meth:`ReferenceEngine.serve_commands`
interleaved with the trainer's or the monitor's side in one thread, so they are
deterministic; the tests that use :class:`SharedMemoryClient` (whose ``step``
blocks) run the engine loop in a background thread.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from lucky_monitor.cli import main as cli_main
from lucky_monitor.core.commands import CommandClient
from lucky_monitor.protocol import header as hdr
from lucky_monitor.protocol import messages as m
from lucky_monitor.protocol.envelope import Envelope, decode, encode, peek
from lucky_monitor.protocol.errors import LuckyMonitorError, RemoteError, ToolsChannelUnavailable
from lucky_monitor.protocol.header import HEADER_SIZE, Header
from lucky_monitor.protocol.messages import MethodId
from lucky_monitor.protocol.ring import RingReader, RingTap, RingWriter
from lucky_monitor.sim.engine import EngineConfig, ReferenceEngine
from lucky_monitor.sim.physics import STATE_FEATURES
from lucky_monitor.sim.render import CAMERAS, Renderer
from lucky_monitor.sim.trainer import SharedMemoryClient
from lucky_monitor.transport.shm import Segment, SegmentExists, TrainerSegment, shm_path
from lucky_monitor.transport.tools import ToolsChannel

pytestmark = pytest.mark.timeout(60)

N_ENVS, OBS, ACT = 8, 16, 4
W, H = 48, 36
ECHO = slice(STATE_FEATURES, STATE_FEATURES + ACT)
TIME_COL = ECHO.stop  # extras follow the echo: time fraction, pole length, pole mass, cart mass, friction
POLE_LENGTH_COL, POLE_MASS_COL, CART_MASS_COL, FRICTION_COL = TIME_COL + 1, TIME_COL + 2, TIME_COL + 3, TIME_COL + 4


def _name() -> str:
    return f"LuckyEngine_eng_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def make_engine() -> Iterator[Callable[..., ReferenceEngine]]:
    """``make(**config) -> ReferenceEngine``: small, fast mode, images every step; always closed."""
    made: list[ReferenceEngine] = []

    def make(**kw: object) -> ReferenceEngine:
        cfg = {
            "name": _name(),
            "num_envs": N_ENVS,
            "obs_size": OBS,
            "act_size": ACT,
            "image": (W, H),
            "sim_mode": 2,
            "camera_fps": 0.0,
            **kw,
        }
        eng = ReferenceEngine(EngineConfig(**cfg))  # type: ignore[arg-type]
        made.append(eng)
        return eng

    yield make
    for eng in made:
        eng.close()


@contextlib.contextmanager
def serving(engine: ReferenceEngine) -> Iterator[None]:
    """Run the engine loop in a background thread for the duration of the block."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            engine.run(stop.is_set)
        except BaseException as exc:  # surfaced in the test thread
            errors.append(exc)

    t = threading.Thread(target=loop, name="engine", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(10)
    assert not t.is_alive(), "engine loop did not stop"
    if errors:
        raise errors[0]


class Tools:
    """A monitor's tools channel, answered by ticking the engine's command service in between."""

    def __init__(self, engine: ReferenceEngine) -> None:
        self.engine = engine
        self.seg = Segment.attach(engine.name)
        self.chan = ToolsChannel.claim(self.seg)
        self.client = CommandClient(self.chan, timeout_s=30.0)

    def ask(self, method: MethodId | int, payload: object | None = None) -> Envelope:
        """Send one request, let the engine serve it, return the response envelope."""
        cid = self.client.send(method, payload)
        for _ in range(5):
            self.engine.serve_commands()
            for r in self.client.poll():
                if r.correlation_id == cid:
                    assert r.response is not None, r.error
                    return r.response
        raise AssertionError(f"no response to {method!r}")

    def ok(self, method: MethodId, payload: object | None = None) -> object:
        env = self.ask(method, payload)
        assert env.error_message == "", env.error_message
        assert env.method == m.RESPONSE_OF[method]
        assert type(env.payload) is m.PAYLOAD_OF[m.RESPONSE_OF[method]]
        return env.payload

    def refused(self, method: MethodId | int, payload: object | None = None) -> str:
        env = self.ask(method, payload)
        assert env.error_message, f"{method!r} was not refused"
        assert env.payload is None
        return env.error_message

    def pushes(self) -> list[Envelope]:
        """Every envelope waiting on the tools s2c ring (stream frames), decoded."""
        out = []
        while (raw := self.chan.s2c.pop()) is not None:
            out.append(decode(raw))
        return out

    def close(self) -> None:
        self.chan.release()
        self.seg.close()


@pytest.fixture
def tools_for() -> Iterator[Callable[[ReferenceEngine], Tools]]:
    opened: list[Tools] = []

    def make(engine: ReferenceEngine) -> Tools:
        t = Tools(engine)
        opened.append(t)
        return t

    yield make
    for t in opened:
        t.close()


class Hand:
    """The trainer's half of lock-step done by hand, so the test can tick the engine in between."""

    def __init__(self, name: str) -> None:
        self.seg = TrainerSegment.attach(name)
        assert self.seg.cas("client_pid", 0, os.getpid())

    def give(self, actions: np.ndarray, reset: np.ndarray | None = None) -> int:
        seg = self.seg
        f = seg.counter("frame_seq")
        assert f != seg.counter("action_seq"), "not the trainer's turn"
        seg.act[:] = actions
        if reset is not None:
            seg.resets[reset] = 1
        seg.set("action_seq", f)
        return f

    def close(self) -> None:
        self.seg.cas("client_pid", os.getpid(), 0)
        self.seg.close()


def step_once(engine: ReferenceEngine) -> None:
    """Tick until the engine publishes one frame (fast mode: the first tick)."""
    for _ in range(1000):
        if engine.tick():
            return
    raise AssertionError("engine did not step")


def reference_renderer(engine: ReferenceEngine) -> tuple[Renderer, np.ndarray]:
    cfg = engine.cfg
    assert cfg.image is not None
    r = Renderer(cfg.num_envs, cfg.image[0], cfg.image[1], cfg.channels, fmt=cfg.fmt, bottom_up=cfg.bottom_up)
    r.camera = engine.renderer.camera
    return r, np.zeros(engine.seg.images.shape, np.uint8)


# ---------------------------------------------------------------------------- segment and first frame
def test_initial_publication(make_engine) -> None:
    eng = make_engine()
    with Segment.attach(eng.name) as seg:
        h = seg.header
        assert (h.num_envs, h.obs_size, h.act_size) == (N_ENVS, OBS, ACT)
        assert (h.image_width, h.image_height, h.image_channels) == (W, H, 3)
        assert h.server_pid == os.getpid() and h.session_id != 0
        live = seg.live()
        assert (live.frame_seq, live.action_seq, live.client_pid) == (1, 0, 0)
        assert live.engine_state == 1 and live.sim_mode == 2 and live.heartbeat_ns > 0
        assert live.image_seq == 2 and live.image_frame_seq == 1  # one stable image frame for frame 1
        assert live.services_enabled == h.services_available == m.Service.all_mask()
        # the first observation is already there: every env hanging down, time 0
        assert np.all(seg.obs[:, 2] < -0.5) and np.all(seg.obs[:, TIME_COL] == 0)


def test_close_announces_state_3_and_unlinks(make_engine) -> None:
    eng = make_engine()
    seg = Segment.attach(eng.name)
    try:
        eng.close()
        assert seg.counter("engine_state") == 3
        assert seg.still_valid() is not None
        eng.close()  # idempotent
    finally:
        seg.close()


def test_free_run_without_trainer(make_engine) -> None:
    eng = make_engine(image=None)
    for k in range(1, 6):
        step_once(eng)
        assert eng.seg.counter("frame_seq") == 1 + k
    assert eng.seg.counter("action_seq") == 0
    # free-run applies the engine's own exploration force, echoed like any action
    assert np.any(eng.seg.obs[:, ECHO.start] != 0)


def test_replaces_a_crashed_engines_leftover_but_not_a_live_one(make_engine, segment_factory) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = child.pid
    name = _name()
    old = segment_factory(name, server_pid=dead)
    eng = make_engine(name=name)
    assert old.still_valid() is not None  # the leftover was replaced
    with Segment.attach(name) as seg:
        assert seg.header.server_pid == os.getpid() and seg.session_id == eng.seg.session_id
    live_name = _name()
    segment_factory(live_name)  # server_pid = this (live) process
    with pytest.raises(SegmentExists):
        make_engine(name=live_name)


# ---------------------------------------------------------------------------- lock-step by hand
def test_engine_waits_for_the_trainer_and_applies_its_actions(make_engine) -> None:
    eng = make_engine(image=None)
    hand = Hand(eng.name)
    try:
        seg = eng.seg
        f = seg.counter("frame_seq")
        assert not eng.tick() and not eng.tick()  # attached: the trainer's turn, nothing moves
        assert seg.counter("frame_seq") == f
        rng = np.random.default_rng(1)
        for _ in range(20):
            a = rng.uniform(-1.5, 1.5, (N_ENVS, ACT)).astype(np.float32)
            k = hand.give(a)
            step_once(eng)
            assert seg.counter("frame_seq") == k + 1 and seg.counter("action_seq") == k
            ended = (seg.dones != 0) | (seg.truncateds != 0)
            np.testing.assert_array_equal(seg.obs[~ended, ECHO], np.clip(a, -1, 1)[~ended])
            assert not eng.tick()  # the engine steps exactly once per hand-over
    finally:
        hand.close()
    assert seg.counter("client_pid") == 0
    f = seg.counter("frame_seq")
    step_once(eng)  # detached: free-run again, action_seq frozen
    assert seg.counter("frame_seq") == f + 1 and seg.counter("action_seq") == f - 1


def test_noop_step_hands_frames_back_without_touching_the_data(make_engine) -> None:
    # the benchmarks' transport-only engine: lock-step as usual, no physics, obs or images
    eng = make_engine(noop_step=True)
    hand = Hand(eng.name)
    try:
        seg = eng.seg
        obs, rewards, image_seq = seg.obs.copy(), seg.rewards.copy(), seg.counter("image_seq")
        for _ in range(5):
            k = hand.give(np.ones((N_ENVS, ACT), np.float32))
            step_once(eng)
            assert seg.counter("frame_seq") == k + 1 and seg.counter("action_seq") == k
        np.testing.assert_array_equal(seg.obs, obs)
        np.testing.assert_array_equal(seg.rewards, rewards)
        assert seg.counter("image_seq") == image_seq and eng.sim.t.max() == 0
    finally:
        hand.close()


def test_sim_noop_step_option_reaches_the_engine_config() -> None:
    import argparse

    from lucky_monitor.sim.run import add_noop_step_argument, add_sim_arguments, config_from_args

    p = argparse.ArgumentParser()
    add_sim_arguments(p)
    add_noop_step_argument(p)
    assert config_from_args(p.parse_args(["--noop-step", "--image", "none"])).noop_step
    assert not config_from_args(p.parse_args(["--image", "none"])).noop_step
    assert "--noop-step" not in p.format_help()  # hidden: a benchmark's tool


def test_reset_flags_by_hand_are_applied_and_cleared(make_engine) -> None:
    eng = make_engine(image=None)
    hand = Hand(eng.name)
    try:
        zeros = np.zeros((N_ENVS, ACT), np.float32)
        for _ in range(10):
            hand.give(zeros)
            step_once(eng)
        mask = np.zeros(N_ENVS, bool)
        mask[[2, 5]] = True
        hand.give(zeros, reset=mask)
        step_once(eng)
        t = np.rint(eng.seg.obs[:, TIME_COL] * 500).astype(int)
        np.testing.assert_array_equal(t, np.where(mask, 1, 11))
        assert not eng.seg.resets.any()
    finally:
        hand.close()


# ---------------------------------------------------------------------------- resets through the trainer
def test_trainer_reset_mask_starts_fresh_episodes(make_engine) -> None:
    eng = make_engine(image=None)
    with serving(eng), SharedMemoryClient(eng.name, timeout_s=10) as tr:
        zeros = np.zeros((N_ENVS, ACT), np.float32)
        tr.step(zeros)  # the first step may still be a free-run frame
        # start every env afresh (free-run left them anywhere): without force none ends for a while
        start = np.rint(tr.step(zeros, reset=np.ones(N_ENVS, bool)).obs[:, TIME_COL] * 500).astype(int)
        np.testing.assert_array_equal(start, 1)
        for _ in range(14):
            tr.step(zeros)
        mask = np.zeros(N_ENVS, bool)
        mask[[0, 3, 7]] = True
        before = tr.observe().obs.copy()
        res = tr.step(zeros, reset=mask)
        t = np.rint(res.obs[:, TIME_COL] * 500).astype(int)
        np.testing.assert_array_equal(t[mask], 1)  # one step into a new episode
        np.testing.assert_array_equal(t[~mask], start[~mask] + 15)
        # fresh episodes start at the centre of the track at rest, with new parameters
        assert np.all(np.abs(res.obs[mask, 0]) < 0.05)
        assert np.all(res.obs[mask, POLE_LENGTH_COL] != before[mask, POLE_LENGTH_COL])
        np.testing.assert_array_equal(res.obs[~mask, POLE_LENGTH_COL], before[~mask, POLE_LENGTH_COL])
        assert not tr.seg.resets.any()  # the engine cleared the flags it applied
        tr.reset([1])  # flags without a contract: applied at the next step
        res = tr.step(zeros)
        assert round(float(res.obs[1, TIME_COL]) * 500) == 1


def test_reset_agent_contract_changes_the_randomisation(make_engine) -> None:
    eng = make_engine(image=None)
    with serving(eng), SharedMemoryClient(eng.name, timeout_s=10) as tr:
        zeros = np.zeros((N_ENVS, ACT), np.float32)
        tr.step(zeros)
        before = tr.step(zeros).obs.copy()
        default = eng.sim.contract
        assert np.all(
            (before[:, CART_MASS_COL] >= default.cart_mass_range[0] - 1e-6)
            & (before[:, CART_MASS_COL] <= default.cart_mass_range[1] + 1e-6)
        )
        # mass_scale x3, randomize off: reset envs get the middle of the scaled ranges
        contract = m.SimulationContract(mass_scale=m.FloatRange(3.0, 3.0), randomize=False)
        tr.reset([1, 4], contract=contract)
        res = tr.step(zeros)
        obs = res.obs
        # An env whose episode ended in this step was auto-reset, under the new contract: leave it out.
        ended = res.dones.astype(bool) | (res.truncateds.astype(bool) if res.truncateds is not None else False)
        sel = np.zeros(N_ENVS, bool)
        sel[[1, 4]] = True
        np.testing.assert_allclose(obs[sel, CART_MASS_COL], 3.0, rtol=1e-6)  # (0.8*3 + 1.2*3) / 2
        np.testing.assert_allclose(obs[sel, POLE_MASS_COL], 0.375, rtol=1e-6)  # (0.05*3 + 0.2*3) / 2
        np.testing.assert_allclose(obs[sel, POLE_LENGTH_COL], 0.6, rtol=1e-6)
        kept = ~sel & ~ended
        np.testing.assert_array_equal(obs[kept, CART_MASS_COL], before[kept, CART_MASS_COL])
        np.testing.assert_array_equal(np.rint(obs[sel, TIME_COL] * 500), 1)
        # randomize on, mass_scale 3..4: every env reset draws from [2.4, 4.8]
        tr.reset(None, contract=m.SimulationContract(mass_scale=m.FloatRange(3.0, 4.0), randomize=True, seed=7))
        obs = tr.step(zeros).obs
        assert np.all((obs[:, CART_MASS_COL] >= 2.4) & (obs[:, CART_MASS_COL] <= 4.8))
        assert len(np.unique(obs[:, CART_MASS_COL])) > 1

        # episode_length 7: every env truncates on the 7th step of its new episode, then again 7 later
        tr.reset(None, contract=m.SimulationContract(episode_length=7))
        truncated_at = []
        for k in range(1, 16):
            res = tr.step(zeros)
            if res.truncateds.any():
                assert res.truncateds.all()
                truncated_at.append(k)
                np.testing.assert_array_equal(res.obs[:, TIME_COL], 0)  # auto-reset: the new episode's t = 0
        assert truncated_at == [7, 14]
        with pytest.raises(RemoteError, match="contract"):
            tr.reset([0], contract=m.SimulationContract(mass_scale=m.FloatRange(-1.0, 2.0), randomize=True))
        with pytest.raises(RemoteError, match="env_id"):
            tr.reset([N_ENVS], contract=m.SimulationContract())


def test_main_ring_requests(make_engine) -> None:
    eng = make_engine(image=None)
    with serving(eng), SharedMemoryClient(eng.name, timeout_s=10) as tr:
        schema = tr.get_schema()
        assert (schema.num_envs, schema.observation_size, schema.action_size) == (N_ENVS, OBS, ACT)
        assert sum(schema.observation_sizes) == OBS and sum(schema.action_sizes) == ACT
        assert len(schema.observation_names) == len(schema.observation_sizes)
        assert schema.control_dt == pytest.approx(0.02)
        with pytest.raises(RemoteError, match="tools channel only"):
            tr.request(MethodId.GetServicesReq, m.GetServicesReq())
        info = tr.request(MethodId.GetMujocoInfoReq, m.GetMujocoInfoReq()).payload
        assert info.nq == 2


def test_every_producer_stamps_sent_ns_from_the_heartbeat_clock(make_engine, tools_for) -> None:
    """Trainer and monitor requests and engine responses carry sent_ns; a tap gets exact latencies."""
    eng = make_engine(image=None)
    tools = tools_for(eng)
    with Segment.attach(eng.name) as seg:
        h = seg.header
        taps = {
            ("main", "c2s"): RingTap(seg.buf, h.cmd_c2s_offset, h.cmd_ring_size),
            ("main", "s2c"): RingTap(seg.buf, h.cmd_s2c_offset, h.cmd_ring_size),
            ("tools", "c2s"): RingTap(seg.buf, h.tools_c2s_offset, h.tools_ring_size),
            ("tools", "s2c"): RingTap(seg.buf, h.tools_s2c_offset, h.tools_ring_size),
        }
        before = time.monotonic_ns()
        tools.client.send(MethodId.GetServicesReq, m.GetServicesReq())
        eng.serve_commands()
        with serving(eng), SharedMemoryClient(eng.name, timeout_s=10) as tr:
            tr.get_schema()
        after = time.monotonic_ns()
        assert after - 10**9 < eng.seg.counter("heartbeat_ns") <= after  # the same clock
        heads = {key: [peek(raw) for raw in tap.poll().messages] for key, tap in taps.items()}
    for key, got in heads.items():
        assert got, key
        assert all(before <= x.sent_ns <= after for x in got), (key, got)
    for pair in ("main", "tools"):
        sent = {x.correlation_id: x.sent_ns for x in heads[(pair, "c2s")]}
        for resp in heads[(pair, "s2c")]:
            assert resp.sent_ns >= sent[resp.correlation_id]


# ---------------------------------------------------------------------------- images
@pytest.mark.parametrize(("fmt", "bottom_up"), [("rgb", False), ("bgr", True), ("gray", False), ("rgba", True)])
def test_images_match_a_second_renderer(make_engine, fmt: str, bottom_up: bool) -> None:
    eng = make_engine(fmt=fmt, bottom_up=bottom_up)
    ref, buf = reference_renderer(eng)
    seg = eng.seg
    hand = None
    for k in range(8):
        if k == 4:
            hand = Hand(eng.name)  # the second half in lock-step with random actions
        if hand is not None:
            hand.give(np.random.default_rng(k).uniform(-1, 1, (N_ENVS, ACT)).astype(np.float32))
        step_once(eng)
        ref.render(eng.sim, buf)
        np.testing.assert_array_equal(seg.images, buf)
        f = seg.counter("frame_seq")
        assert seg.counter("image_frame_seq") == f
        assert seg.counter("image_seq") == 2 * f  # even: stable; one publication per frame
    assert hand is not None
    hand.close()


def test_camera_fps_limits_image_publications(make_engine) -> None:
    eng = make_engine(camera_fps=1.0, image=(16, 16))
    seq = eng.seg.counter("image_seq")
    for _ in range(20):
        step_once(eng)
    # 20 fast steps take far less than the 1 s between publications (at most one more)
    assert eng.seg.counter("image_seq") - seq <= 2


def test_debug_draw_changes_projected_pixels_and_clear_removes_them(make_engine, tools_for) -> None:
    eng = make_engine(image=(64, 48))
    step_once(eng)
    tools = tools_for(eng)
    seg = eng.seg
    ref, buf = reference_renderer(eng)
    xs = np.linspace(-1.2, 1.2, 7)
    px, py = eng.renderer.project(xs, 0.9)
    rows, cols = np.rint(py).astype(int), np.rint(px).astype(int)
    green = np.array([0, 255, 0], np.uint8)
    before = seg.images[:, rows, cols].copy()
    assert not np.all(before == green)
    f, s = seg.counter("frame_seq"), seg.counter("image_seq")

    line = m.Line(start=m.Vec3(-1.5, 0.0, 0.9), end=m.Vec3(1.5, 0.0, 0.9), color=m.Color(0.0, 1.0, 0.0, 1.0))
    assert tools.ok(MethodId.DrawReq, m.DrawReq(lines=(line,))).success
    # visible at once, without a step: images re-rendered for the same frame
    assert seg.counter("frame_seq") == f and seg.counter("image_seq") == s + 2
    assert np.all(seg.images[:, rows, cols] == green)
    ref.set_debug([line])
    ref.render(eng.sim, buf)
    np.testing.assert_array_equal(seg.images, buf)
    step_once(eng)  # and it stays across steps
    assert np.all(seg.images[:, rows, cols] == green)

    arrow = m.Arrow(origin=m.Vec3(0.0, 0.0, -0.6), direction=m.Vec3(1.0, 0.0, 0.0), color=m.Color(0, 0, 1, 1), scale=1)
    assert tools.ok(MethodId.DrawReq, m.DrawReq(arrows=(arrow,), clear_previous=True)).success
    assert not np.any(np.all(seg.images[:, rows, cols] == green, axis=-1))  # the line is gone
    ax, ay = eng.renderer.project(0.5, -0.6)
    assert np.all(seg.images[:, round(ay), round(ax)] == [0, 0, 255])
    assert tools.ok(MethodId.DrawReq, m.DrawReq(clear_previous=True)).success
    ref.clear_debug()
    ref.render(eng.sim, buf)
    np.testing.assert_array_equal(seg.images, buf)


def test_stream_camera_switches_camera_and_stops(make_engine, tools_for) -> None:
    eng = make_engine()
    tools = tools_for(eng)
    seg = eng.seg
    step_once(eng)
    front = seg.images.copy()
    cams = tools.ok(MethodId.ListCamerasReq, m.ListCamerasReq()).cameras
    assert tuple(c.name for c in cams) == CAMERAS and all((c.width, c.height) == (W, H) for c in cams)
    resp = tools.ok(MethodId.StreamCameraReq, m.StreamCameraReq(camera_name="top"))
    assert resp.streaming and (resp.width, resp.height) == (W, H)
    assert not np.array_equal(seg.images, front)
    ref, buf = reference_renderer(eng)
    assert ref.camera == "top"
    step_once(eng)
    ref.render(eng.sim, buf)
    np.testing.assert_array_equal(seg.images, buf)
    assert "unknown" in tools.refused(MethodId.StreamCameraReq, m.StreamCameraReq(camera_name="nope"))

    assert not tools.ok(MethodId.StreamCameraReq, m.StreamCameraReq(stop=True)).streaming
    s = seg.counter("image_seq")
    for _ in range(5):
        step_once(eng)
    assert seg.counter("image_seq") == s  # stopped: frames advance, images do not
    assert tools.ok(MethodId.DrawReq, m.DrawReq(lines=(m.Line(m.Vec3(-1, 0, 0), m.Vec3(1, 0, 0)),))).success
    assert seg.counter("image_seq") == s  # a draw is kept for later, not published while stopped
    assert tools.ok(MethodId.StreamCameraReq, m.StreamCameraReq(camera_name="front")).streaming
    step_once(eng)
    step_once(eng)
    assert seg.counter("image_seq") >= s + 4
    assert seg.counter("image_frame_seq") == seg.counter("frame_seq")


def test_stream_camera_pushes_one_image_frame_per_published_image(make_engine, tools_for) -> None:
    """LAYOUT §10.1 streams: after the StreamCameraResp, one CameraImageFrame per image, echoing the request's id."""
    eng = make_engine()
    tools = tools_for(eng)
    seg = eng.seg
    step_once(eng)
    assert tools.pushes() == []  # no stream asked for: no pushes
    cid = tools.client.send(MethodId.StreamCameraReq, m.StreamCameraReq(camera_name="top"))
    eng.serve_commands()
    (resp,) = tools.pushes()  # the response first; the image its handler rendered is not pushed
    assert resp.method == MethodId.StreamCameraResp and resp.correlation_id == cid and resp.payload.streaming
    for _ in range(3):
        before = seg.counter("image_seq")
        step_once(eng)
        assert seg.counter("image_seq") == before + 2
        (push,) = tools.pushes()
        assert push.method == MethodId.CameraImageFrame and push.correlation_id == cid
        p = push.payload
        assert p.camera_name == "top" and p.frame_seq == seg.counter("image_frame_seq") == seg.counter("frame_seq")
        assert (p.width, p.height, p.channels, p.env_id) == (W, H, 3, 0)
    tools.ok(MethodId.SetServiceEnabledReq, m.SetServiceEnabledReq(service=m.Service.CAMERA, enabled=False))
    step_once(eng)
    assert [e.method for e in tools.pushes()] == []  # no image, no push
    tools.ok(MethodId.SetServiceEnabledReq, m.SetServiceEnabledReq(service=m.Service.CAMERA, enabled=True))
    step_once(eng)
    assert [e.method for e in tools.pushes()] == [MethodId.CameraImageFrame]
    assert not tools.ok(MethodId.StreamCameraReq, m.StreamCameraReq(stop=True)).streaming
    step_once(eng)
    assert tools.pushes() == []


# ---------------------------------------------------------------------------- services
def test_disabling_camera_stops_images_and_refuses_its_requests(make_engine, tools_for) -> None:
    eng = make_engine()
    tools = tools_for(eng)
    seg = eng.seg
    svc = tools.ok(MethodId.GetServicesReq, m.GetServicesReq())
    assert svc.services_available == svc.services_enabled == seg.counter("services_enabled") == m.Service.all_mask()

    resp = tools.ok(MethodId.SetServiceEnabledReq, m.SetServiceEnabledReq(service=m.Service.CAMERA, enabled=False))
    assert resp.services_enabled == m.Service.all_mask() & ~(1 << m.Service.CAMERA)
    assert seg.counter("services_enabled") == resp.services_enabled
    f, s, fs = seg.counter("frame_seq"), seg.counter("image_seq"), seg.counter("image_frame_seq")
    for _ in range(5):
        step_once(eng)
    assert seg.counter("frame_seq") == f + 5  # the hot path never stops
    assert (seg.counter("image_seq"), seg.counter("image_frame_seq")) == (s, fs)
    assert "disabled" in tools.refused(MethodId.ListCamerasReq, m.ListCamerasReq())
    assert "disabled" in tools.refused(MethodId.StreamCameraReq, m.StreamCameraReq(camera_name="top"))
    # a draw is accepted (Debug is on) but no image changes while Camera is off
    assert tools.ok(MethodId.DrawReq, m.DrawReq(lines=(m.Line(m.Vec3(-1, 0, 0), m.Vec3(1, 0, 0)),))).success
    assert seg.counter("image_seq") == s

    resp = tools.ok(MethodId.SetServiceEnabledReq, m.SetServiceEnabledReq(service=m.Service.CAMERA, enabled=True))
    assert resp.services_enabled == m.Service.all_mask() == seg.counter("services_enabled")
    step_once(eng)
    assert seg.counter("image_seq") == s + 2 and seg.counter("image_frame_seq") == f + 6
    assert tools.ok(MethodId.ListCamerasReq, m.ListCamerasReq()).cameras


def test_other_services_disable_and_refuse(make_engine, tools_for) -> None:
    eng = make_engine(image=None)
    tools = tools_for(eng)
    for bit, method, payload in [
        (m.Service.MUJOCO, MethodId.GetMujocoInfoReq, m.GetMujocoInfoReq()),
        (m.Service.SCENE, MethodId.GetSceneInfoReq, m.GetSceneInfoReq()),
        (m.Service.TELEMETRY, MethodId.GetTelemetrySchemaReq, m.GetTelemetrySchemaReq()),
        (m.Service.DEBUG, MethodId.DrawReq, m.DrawReq()),
        (m.Service.AGENT, MethodId.GetAgentSchemaReq, m.GetAgentSchemaReq()),
    ]:
        tools.ok(MethodId.SetServiceEnabledReq, m.SetServiceEnabledReq(service=bit, enabled=False))
        msg = tools.refused(method, payload)
        assert m.Service(bit).label in msg and "disabled" in msg
        tools.ok(MethodId.SetServiceEnabledReq, m.SetServiceEnabledReq(service=bit, enabled=True))
    assert "not available" in tools.refused(MethodId.SetServiceEnabledReq, m.SetServiceEnabledReq(service=12))
    assert eng.seg.counter("services_enabled") == eng.header.services_available
    # no image region, no cameras: Camera and Viewport are not offered (they had been, a toggle that did nothing)
    assert eng.header.services_available == m.Service.all_mask() & ~(m.Service.CAMERA.bit | m.Service.VIEWPORT.bit)
    for bit in (m.Service.CAMERA, m.Service.VIEWPORT):
        msg = tools.refused(MethodId.SetServiceEnabledReq, m.SetServiceEnabledReq(service=bit, enabled=False))
        assert "not available" in msg, msg


def test_error_envelopes_for_unknown_and_non_request_methods(make_engine, tools_for) -> None:
    eng = make_engine(image=None)
    tools = tools_for(eng)
    env = tools.ask(0x0999)
    assert "unknown method" in env.error_message and env.payload is None
    assert env.method == 0x0999  # an unknown id is echoed (LAYOUT §10)
    env = tools.ask(0x05FF)  # unknown id inside a known service group
    assert env.error_message and env.payload is None
    env = tools.ask(MethodId.DrawResp, m.DrawResp(success=True))
    assert "not a request" in env.error_message
    env = tools.ask(MethodId.TelemetryFrame, m.TelemetryFrame())
    assert env.error_message
    # SetEntity is in the schema but the reference engine does not implement it: still one answer
    env = tools.ask(MethodId.SetEntityReq, m.SetEntityReq(id=1))
    assert env.method == MethodId.SetEntityResp and "not implemented" in env.error_message
    tools.ok(MethodId.GetSceneInfoReq, m.GetSceneInfoReq())  # and the engine carries on


def test_garbage_on_the_tools_ring_is_counted_and_survived(make_engine, tools_for) -> None:
    eng = make_engine(image=(16, 16))
    tools = tools_for(eng)
    tools_pair = eng.pairs[1]
    assert tools_pair.name == "tools"
    c2s = tools.chan.c2s
    # 1. undecodable payloads: no answer (nothing to correlate), counted, next request served
    for junk in (b"\x00", b"garbage!" * 9, bytes(range(256)), b"\xff" * 40):
        c2s.push(junk)
    eng.serve_commands()
    assert tools_pair.corrupt == 4
    assert tools.chan.s2c.pop() is None
    assert tools.ok(MethodId.GetServicesReq, m.GetServicesReq()).services_enabled == m.Service.all_mask()
    # 2. a corrupt ring (length 0 entry): the engine resynchronises and counts it
    buf, base = tools.chan.buf, 64
    w = int(np.frombuffer(buf, np.uint32, 1, base)[0])
    data = base + 8
    cap = tools.chan.ring_size
    buf[data + w % cap : data + w % cap + 8] = bytes(8)
    np.frombuffer(buf, np.uint32, 1, base)[0] = w + 8
    eng.serve_commands()
    assert tools_pair.corrupt == 5
    # 3. random bytes and bit-flipped valid requests: always one answer or a count, never an exception
    rng = np.random.default_rng(5)
    valid = [
        encode(Envelope(MethodId.DrawReq, 7, m.DrawReq(lines=(m.Line(m.Vec3(0, 0, 0), m.Vec3(1, 1, 1)),)))),
        encode(Envelope(MethodId.ListEntitiesReq, 8, m.ListEntitiesReq(name_filter="env", limit=3))),
        encode(Envelope(MethodId.ResetAgentReq, 9, m.ResetAgentReq(contract=m.SimulationContract(seed=3)))),
        encode(Envelope(MethodId.StreamCameraReq, 10, m.StreamCameraReq(camera_name="top", fps=30))),
    ]
    for i in range(300):
        if i % 3 == 0:
            raw = rng.integers(0, 256, int(rng.integers(1, 200)), dtype=np.uint8).tobytes()
        else:
            b = bytearray(valid[i % len(valid)])
            for _ in range(int(rng.integers(1, 4))):
                b[int(rng.integers(len(b)))] ^= 1 << int(rng.integers(8))
            raw = bytes(b)
        c2s.push(raw)
        before = (tools_pair.corrupt, eng.requests_served)
        eng.serve_commands()
        answers = [e for e in tools.pushes() if e.method not in m.PUSH_METHODS]
        assert len(answers) + (tools_pair.corrupt - before[0]) == 1, (i, raw)
        assert eng.requests_served == before[1] + 1
        step_once(eng)
        tools.pushes()  # stream frames a mutated request may have started
    assert tools.ok(MethodId.GetServicesReq, m.GetServicesReq())
    assert eng.handler_errors == 0  # every refusal was a deliberate one


def test_requests_without_payload_get_the_defaults(make_engine, tools_for) -> None:
    eng = make_engine()
    tools = tools_for(eng)
    for method in sorted(m.RESPONSE_OF):
        if method in (MethodId.SetEntityReq,):
            continue
        env = tools.ask(method, None)
        assert env.correlation_id != 0 and env.method == m.RESPONSE_OF[method]
    assert eng.handler_errors == 0
    # the defaults mean: env 0, entity 0 (refused), realtime mode, camera stream on the default camera ...
    assert eng.seg.counter("sim_mode") == 0


def test_a_full_response_ring_never_stalls_the_engine_and_loses_nothing(make_engine, tools_for) -> None:
    eng = make_engine(image=None, tools_ring_size=4096)
    tools = tools_for(eng)
    req = m.ListEntitiesReq(limit=5)
    sent = [tools.client.send(MethodId.ListEntitiesReq, req) for _ in range(40)]  # responses >> 4 KiB
    f = eng.seg.counter("frame_seq")
    for _ in range(5):
        step_once(eng)  # nobody reads the responses meanwhile
    assert eng.seg.counter("frame_seq") == f + 5
    # back-pressure: the engine keeps the response that did not fit and consumes no further requests
    assert tools.chan.c2s.used > 0
    got: list[int] = []
    for _ in range(200):
        eng.serve_commands()
        got += [r.correlation_id for r in tools.client.poll() if r.response is not None]
        if len(got) == len(sent):
            break
    assert got == sent  # every request answered exactly once, in order
    assert eng.pairs[1].dropped_pushes == 0
    assert eng.pairs[1].backlog is None


# ---------------------------------------------------------------------------- handlers
def test_mujoco_handlers(make_engine, tools_for) -> None:
    eng = make_engine(image=None)
    tools = tools_for(eng)
    for _ in range(3):
        step_once(eng)
    info = tools.ok(MethodId.GetMujocoInfoReq, m.GetMujocoInfoReq())
    assert (info.model_name, info.nq, info.nv, info.nu) == ("cartpole", 2, 2, 1)
    assert info.timestep == pytest.approx(0.02) and info.joint_names == ("slider", "hinge")
    assert info.actuator_names == ("cart_force",)
    js = tools.ok(MethodId.GetJointStateReq, m.GetJointStateReq(env_id=3))
    sim = eng.sim
    assert js.env_id == 3 and js.frame_seq == eng.seg.counter("frame_seq")
    np.testing.assert_allclose(js.positions, [sim.x[3], sim.theta[3]], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(js.velocities, [sim.x_dot[3], sim.theta_dot[3]], rtol=1e-6, atol=1e-7)
    assert js.sim_time == pytest.approx(sim.t[3] * sim.dt)
    assert "out of range" in tools.refused(MethodId.GetJointStateReq, m.GetJointStateReq(env_id=N_ENVS))
    # SendControl overrides one env's action for the next step (seen in the echo)
    assert tools.ok(MethodId.SendControlReq, m.SendControlReq(env_id=2, controls=(0.5, -2.0))).success
    step_once(eng)
    np.testing.assert_allclose(eng.seg.obs[2, ECHO.start : ECHO.start + 2], [0.5, -1.0])
    assert "empty" in tools.refused(MethodId.SendControlReq, m.SendControlReq(env_id=1))


def test_scene_handlers(make_engine, tools_for) -> None:
    eng = make_engine(image=None)
    tools = tools_for(eng)
    step_once(eng)
    info = tools.ok(MethodId.GetSceneInfoReq, m.GetSceneInfoReq())
    assert info.entity_count == 2 * N_ENVS and info.mode == m.SimMode.FAST
    assert info.timestep == pytest.approx(0.02) and info.sim_time == pytest.approx(0.02)
    everything = tools.ok(MethodId.ListEntitiesReq, m.ListEntitiesReq())
    assert everything.total == 2 * N_ENVS and len(everything.entities) == 2 * N_ENVS
    assert [e.id for e in everything.entities] == list(range(1, 2 * N_ENVS + 1))
    some = tools.ok(MethodId.ListEntitiesReq, m.ListEntitiesReq(name_filter="env1/"))
    assert [e.name for e in some.entities] == ["env1/cart", "env1/pole"] and some.total == 2
    page = tools.ok(MethodId.ListEntitiesReq, m.ListEntitiesReq(name_filter="pole", offset=2, limit=3))
    assert page.total == N_ENVS and [e.name for e in page.entities] == ["env2/pole", "env3/pole", "env4/pole"]

    pole = tools.ok(MethodId.GetEntityReq, m.GetEntityReq(name="env3/pole")).entity
    assert (pole.id, pole.name, pole.parent_id) == (8, "env3/pole", 7)
    assert pole.scale.z == pytest.approx(eng.sim.params.pole_length[3], rel=1e-6)
    assert pole.position.x == pytest.approx(eng.sim.x[3], rel=1e-5, abs=1e-7)
    cart = tools.ok(MethodId.GetEntityReq, m.GetEntityReq(id=7)).entity
    assert cart.name == "env3/cart"
    for bad in (
        m.GetEntityReq(name="env3/wheel"),
        m.GetEntityReq(name="envX/cart"),
        m.GetEntityReq(name=f"env{N_ENVS}/cart"),
        m.GetEntityReq(id=2 * N_ENVS + 1),
        m.GetEntityReq(),
    ):
        tools.refused(MethodId.GetEntityReq, bad)


def test_simulation_mode_handlers_change_the_header(make_engine, tools_for) -> None:
    eng = make_engine(image=None)
    tools = tools_for(eng)
    assert tools.ok(MethodId.GetSimulationModeReq, m.GetSimulationModeReq()).mode == m.SimMode.FAST
    for mode in (m.SimMode.REALTIME, m.SimMode.DETERMINISTIC, m.SimMode.FAST):
        assert tools.ok(MethodId.SetSimulationModeReq, m.SetSimulationModeReq(mode=mode)).mode == mode
        assert eng.seg.counter("sim_mode") == int(mode) == eng.sim_mode
        assert tools.ok(MethodId.GetSimulationModeReq, m.GetSimulationModeReq()).mode == mode


def test_simulation_mode_changes_stepping(make_engine, tools_for) -> None:
    """Fast free-runs flat out; realtime and deterministic free-run at ``hz`` (counted per tick, no clock)."""
    eng = make_engine(image=None, hz=1.0, sim_mode=0)
    tools = tools_for(eng)
    step_once(eng)  # realtime: the first slot is due at once
    stepped = sum(eng.tick() for _ in range(20))  # each idle tick naps <= 2 ms; the next slot is 1 s away
    assert stepped <= 1
    tools.ok(MethodId.SetSimulationModeReq, m.SetSimulationModeReq(mode=m.SimMode.FAST))
    assert sum(eng.tick() for _ in range(20)) == 20
    tools.ok(MethodId.SetSimulationModeReq, m.SetSimulationModeReq(mode=m.SimMode.DETERMINISTIC))
    stepped = sum(eng.tick() for _ in range(20))
    assert 1 <= stepped <= 2  # the slot restarts on a mode change, then 1 s to the next

    # rates over the same short window: realtime about hz, fast far above it
    def rate(mode: m.SimMode, window: float = 0.5) -> float:
        tools.ok(MethodId.SetSimulationModeReq, m.SetSimulationModeReq(mode=mode))
        f0, t0 = eng.seg.counter("frame_seq"), time.monotonic()
        while time.monotonic() - t0 < window:
            eng.tick()
        return (eng.seg.counter("frame_seq") - f0) / (time.monotonic() - t0)

    eng.cfg.hz = 20.0
    realtime = rate(m.SimMode.REALTIME)
    fast = rate(m.SimMode.FAST)
    assert realtime <= 20.0 + 1 / 0.5  # pacing never runs ahead
    assert realtime >= 4.0  # generous: a loaded machine still steps
    assert fast > 10 * realtime


def test_realtime_never_steps_twice_in_a_period_after_a_pause(make_engine) -> None:
    """Seen: right after a trainer's pause the engine published two frames 1 ms apart (one slot of catch-up)."""
    eng = make_engine(image=None, hz=50.0, sim_mode=0)
    step_once(eng)
    for pause in (0.005, 0.03, 0.3):  # under a period, over one, many
        time.sleep(pause)
        times = []
        t_end = time.monotonic() + 0.2
        while time.monotonic() < t_end:
            if eng.tick():
                times.append(time.monotonic())
        gaps = np.diff(times)
        assert len(times) >= 3 and gaps.min() > 0.5 / 50.0, (pause, gaps)


def test_realtime_paces_lock_step_deterministic_does_not(make_engine) -> None:
    eng = make_engine(image=None, hz=1.0, sim_mode=0)
    step_once(eng)
    hand = Hand(eng.name)
    try:
        hand.give(np.zeros((N_ENVS, ACT), np.float32))
        assert sum(eng.tick() for _ in range(20)) == 0  # handed over, but the 1 Hz slot is not due
        eng.seg.set("sim_mode", 1)
        assert eng.tick()  # deterministic: steps as soon as the trainer hands over
    finally:
        hand.close()


def test_camera_viewport_and_telemetry_handlers(make_engine, tools_for) -> None:
    eng = make_engine()
    tools = tools_for(eng)
    vp = tools.ok(MethodId.GetViewportInfoReq, m.GetViewportInfoReq())
    assert (vp.name, vp.width, vp.height) == ("Viewport", W, H)
    schema = tools.ok(MethodId.GetTelemetrySchemaReq, m.GetTelemetrySchemaReq())
    assert len(schema.channel_names) == len(schema.channel_units) == 6
    assert schema.channel_names[:4] == ("x", "x_dot", "theta", "theta_dot")

    cid = tools.client.send(MethodId.StreamTelemetryReq, m.StreamTelemetryReq(env_id=5, decimation=2))
    eng.serve_commands()
    (resp,) = tools.pushes()
    assert resp.method == MethodId.StreamTelemetryResp and resp.correlation_id == cid
    assert resp.payload.streaming and resp.payload.num_channels == 6
    frames = []
    for _ in range(6):
        step_once(eng)
        got = tools.pushes()
        for env in got:
            assert env.method == MethodId.TelemetryFrame and env.correlation_id == cid
            p = env.payload
            assert p.env_id == 5 and p.frame_seq == eng.seg.counter("frame_seq")
            np.testing.assert_allclose(
                p.values[:4],
                [eng.sim.x[5], eng.sim.x_dot[5], eng.sim.theta[5], eng.sim.theta_dot[5]],
                rtol=1e-5,
                atol=1e-6,
            )
            assert p.values[4] == pytest.approx(float(eng.seg.rewards[5]), abs=1e-6)
            frames.append(p.frame_seq)
    assert len(frames) == 3 and all(f % 2 == 0 for f in frames) and np.all(np.diff(frames) == 2)
    # disabling Telemetry stops the pushes; re-enabling resumes them
    tools.ok(MethodId.SetServiceEnabledReq, m.SetServiceEnabledReq(service=m.Service.TELEMETRY, enabled=False))
    for _ in range(4):
        step_once(eng)
    assert tools.pushes() == []
    tools.ok(MethodId.SetServiceEnabledReq, m.SetServiceEnabledReq(service=m.Service.TELEMETRY, enabled=True))
    step_once(eng)
    step_once(eng)
    assert len(tools.pushes()) == 1
    assert not tools.ok(MethodId.StreamTelemetryReq, m.StreamTelemetryReq(stop=True)).streaming
    for _ in range(4):
        step_once(eng)
    assert tools.pushes() == []
    tools.refused(MethodId.StreamTelemetryReq, m.StreamTelemetryReq(env_id=N_ENVS))


def test_no_image_region_handlers(make_engine, tools_for) -> None:
    eng = make_engine(image=None)
    tools = tools_for(eng)
    # no image region: the Camera and Viewport services are not offered, so their requests are refused as such
    assert "not available" in tools.refused(MethodId.ListCamerasReq, m.ListCamerasReq())
    assert "not available" in tools.refused(MethodId.StreamCameraReq, m.StreamCameraReq(camera_name="top"))
    assert "not available" in tools.refused(MethodId.GetViewportInfoReq, m.GetViewportInfoReq())
    assert tools.refused(MethodId.DrawReq, m.DrawReq())
    with Segment.attach(eng.name) as seg:
        assert seg.images is None and seg.counter("image_seq") == 0


def test_heartbeat_and_commands_continue_while_waiting_for_the_trainer(make_engine, tools_for) -> None:
    eng = make_engine(image=None)
    tools = tools_for(eng)
    hand = Hand(eng.name)
    try:
        hb = eng.seg.counter("heartbeat_ns")
        deadline = time.monotonic() + 5
        while eng.seg.counter("heartbeat_ns") == hb and time.monotonic() < deadline:
            assert not eng.tick()
        assert eng.seg.counter("heartbeat_ns") > hb
        assert tools.ok(MethodId.GetMujocoInfoReq, m.GetMujocoInfoReq()).nq == 2
    finally:
        hand.close()


def test_engine_without_tools_channel(make_engine) -> None:
    eng = make_engine(image=None, tools_ring_size=0)
    assert [p.name for p in eng.pairs] == ["main"]
    with Segment.attach(eng.name) as seg:
        assert seg.header.tools_offset == 0
        with pytest.raises(ToolsChannelUnavailable):
            ToolsChannel.claim(seg)
    step_once(eng)


def test_bad_configuration_is_a_typed_error(make_engine) -> None:
    for kw in (
        {"fmt": "yuv"},
        {"sim_mode": 5},
        {"hz": 0.0},
        {"hz": float("nan")},
        {"num_envs": 0},
        {"obs_size": 3},
        {"name": "bad/name"},
    ):
        with pytest.raises(LuckyMonitorError):
            make_engine(**kw)


def test_engine_segment_passes_header_validation(make_engine) -> None:
    eng = make_engine(bottom_up=True, fmt="bgra")
    with Segment.attach(eng.name) as seg:
        raw = bytes(seg.buf[:HEADER_SIZE])
        h = hdr.validate(raw, mapped_size=seg.size)
        assert h.bottom_up and h.image_channels == 4 and h.pixel_format == "bgra"
        assert Header.unpack(raw).segment_size == seg.size


def test_ring_helpers_see_the_same_ring_as_the_engine(make_engine) -> None:
    """The trainer's main-ring writer and the engine's reader agree (raw request round trip)."""
    eng = make_engine(image=None)
    with TrainerSegment.attach(eng.name) as seg:
        h = seg.header
        RingWriter(seg.buf, h.cmd_c2s_offset, h.cmd_ring_size).push(
            encode(Envelope(MethodId.GetSceneInfoReq, 42, m.GetSceneInfoReq()))
        )
        eng.serve_commands()
        raw = RingReader(seg.buf, h.cmd_s2c_offset, h.cmd_ring_size).pop()
        assert raw is not None
        env = decode(raw)
        assert env.method == MethodId.GetSceneInfoResp and env.correlation_id == 42


# ---------------------------------------------------------------------------- the draw and train subcommands
def test_draw_subcommand_draws_and_clears(make_engine, capsys) -> None:
    eng = make_engine(image=(64, 48))
    px, py = eng.renderer.project(np.linspace(-1.0, 1.0, 5), 0.9)
    rows, cols = np.rint(py).astype(int), np.rint(px).astype(int)
    # (a value starting with "-" needs the "=" form: argparse takes "-1.5,0,0.9" for an option)
    argv = ["draw", eng.name, "line", "--from=-1.5,0,0.9", "--to", "1.5,0,0.9", "--color", "0,1,0"]
    with serving(eng):
        assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("success (round trip")
    assert np.all(eng.seg.images[:, rows, cols] == [0, 255, 0])  # engine stopped: images are stable
    with serving(eng):
        assert cli_main(["draw", eng.name, "clear"]) == 0
    assert not np.any(np.all(eng.seg.images[:, rows, cols] == [0, 255, 0], axis=-1))
    with serving(eng):
        assert cli_main(["draw", eng.name, "arrow", "--origin", "0,0,0.5", "--direction", "1,0,0", "--clear"]) == 0
        assert cli_main(["draw", eng.name, "velocity", "--vel", "1,0,0.5"]) == 0
    assert eng.renderer.debug_count == 1
    capsys.readouterr()


def test_draw_subcommand_errors_are_one_line(make_engine, capsys) -> None:
    eng = make_engine(image=(16, 16))
    assert cli_main(["draw", eng.name, "line", "--from", "1,2", "--to", "0,0,0"]) == 2
    assert cli_main(["draw", eng.name, "line", "--from", "0,0,0", "--to", "1,1,1", "--color", "2,0,0"]) == 2
    assert cli_main(["draw", _name(), "clear"]) != 0  # no such segment
    with Segment.attach(eng.name) as seg, ToolsChannel.claim(seg, pid=os.getppid()):
        assert cli_main(["draw", eng.name, "clear"]) != 0  # the tools channel is held by a live process
    # nobody serves: the request times out with one line, not a hang
    assert cli_main(["draw", "--timeout", "0.2", eng.name, "clear"]) != 0
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 5 and all(ln.startswith("lucky-monitor: error:") for ln in lines), err
    assert "held by pid" in lines[3] and "Traceback" not in err


def test_train_subcommand_steps_and_detaches(make_engine, capsys) -> None:
    eng = make_engine(image=None, sim_mode=1)
    with serving(eng):
        f = eng.seg.counter("frame_seq")
        assert cli_main(["train", "--shm", eng.name, "--steps", "25", "--policy", "random", "--quiet"]) == 0
        assert eng.seg.counter("client_pid") == 0
        assert eng.seg.counter("frame_seq") >= f + 25
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"trainer pid {os.getpid()} attached to {eng.name}: {N_ENVS} envs")
    assert out[-1] == "trainer done after 25 steps"


def test_the_reference_engine_names_its_segment_with_at_most_30_characters(capsys) -> None:
    """LAYOUT §1.1 (C2): 30 characters keep macOS' 31-byte POSIX limit; nothing is created for a longer name."""
    name = "LuckyEngine_" + "n" * 19  # 31 characters
    with pytest.raises(LuckyMonitorError, match="31 characters; an engine's name has at most 30"):
        ReferenceEngine(EngineConfig(name=name, num_envs=1, image=None))
    assert not os.path.exists(shm_path(name))
    assert cli_main(["sim", "--name", name, "--envs", "1", "--image", "none"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "at most 30" in err and "Traceback" not in err
    assert not os.path.exists(shm_path(name))
