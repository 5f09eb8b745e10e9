"""The reference engine: the engine side of LRBC v1, exactly as ``schema/LAYOUT.md`` says.

Theory of operation
-------------------
``ReferenceEngine`` creates the segment (every extension field filled), runs
``CartPoleBatch`` for ``num_envs`` envs and renders one camera image per env.
One thread does everything, in :meth:`ReferenceEngine.tick`:

1. refresh ``heartbeat_ns`` (every 50 ms at most, so at least 10x/s even idle);
2. serve the main c2s ring (trainer requests) and the tools c2s ring (monitor
   requests); answer on the matching s2c ring with the same correlation id,
   every response and stream push stamped with ``sent_ns`` (the heartbeat's
   clock) as it is pushed;
3. if a trainer is attached (``client_pid != 0``) and ``action_seq ==
   frame_seq`` it is the engine's turn: read actions, apply and clear reset
   flags, step, write obs/rewards/dones/truncateds, render images under the
   seqlock, then publish ``frame_seq + 1``. Otherwise wait (spin briefly, then
   nap) for the trainer's turn to end;
4. with no trainer (or a dead one, whose ``client_pid`` the engine clears by
   compare-and-swap) the engine free-runs at ``hz`` (or flat out in fast mode).

Envs that end (done or truncated) are reset in the same step: the published
observation is the first of the new episode, and ``dones``/``truncateds`` say
the previous one ended (the usual vector-env auto-reset).

Simulation modes: *realtime* paces steps to ``hz`` even under a trainer;
*deterministic* steps as soon as the trainer hands over (free-run still at
``hz``); *fast* never waits for the clock.
"""

from __future__ import annotations

import os
import secrets
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..protocol import header as hdr
from ..protocol import messages as m
from ..protocol.enums import EngineState, GpuObsMode, ImageFormat, Service, SimMode
from ..protocol.envelope import Envelope, decode, encode, error_response
from ..protocol.errors import EnvelopeError, LuckyMonitorError, RingCorrupt, RingFull, UsageError
from ..protocol.ring import RingReader, RingWriter, max_payload
from ..transport.cuda import DeviceObs
from ..transport.discovery import pid_alive
from ..transport.shm import MAX_NAME_CHARS, EngineSegment, SegmentExists, check_segment_size, peek_header
from .physics import CartPoleBatch, Contract
from .render import CAMERAS, Renderer

#: ``--format`` names: every concrete image format ("auto" is the CLI's default, resolved before here).
FORMATS = tuple(f.label for f in ImageFormat if f is not ImageFormat.AUTO)
HEARTBEAT_NS = 50_000_000
#: while waiting for the trainer, spin-yield this long after a step before napping: realtime
#: (the demo must stay cool; its pace comes from the clock anyway) ...
SPIN_S = 0.0003
#: ... and deterministic/fast, where the hand-over latency is the point: a policy that thinks for
#: a few milliseconds must not find the engine asleep (a nap costs ~0.5 ms per step)
SPIN_FAST_S = 0.005
NAP_S = 0.0005

#: Test-only misbehaviours (``lucky-monitor sim --misbehave KIND``, a hidden option; never for real
#: use). Each breaks one rule of ``lucky-monitor check --live`` (the id in brackets, see
#: ``schema/CONFORMANCE.md``) so the tests can show that rule failing with a reason.
MISBEHAVIOURS: dict[str, str] = {
    "wrong-correlation-id": "tools responses carry another correlation id than the request's [C32]",
    "drop-response": "GetSceneInfo on the tools channel is never answered [C37]",
    "wrong-response-method": "GetMujocoInfo on the tools channel is answered as GetSceneInfoResp [C39]",
    "unstamped": "tools responses carry sent_ns = 0 [C40]",
    "unknown-silent": "a request of an unknown method id is not answered [C41]",
    "malformed-reply": "an undecodable request is answered with a success envelope [C42]",
    "ignore-disabled": "requests of a disabled service are served as if it were enabled [C34]",
    "images-ignore-disabled": "images are published with the Camera service disabled [C35]",
    "heartbeat-stops": "heartbeat_ns is written once at creation, never refreshed [C25]",
    "image-frame-ahead": "image_frame_seq is stored 3 frames ahead of the frame it belongs to [C23]",
    "image-seqlock-inverted": "image_seq is odd between image writes and even during them [C23]",
    "ring-unaligned": "the main s2c write_pos is moved by 4 bytes at start (not a multiple of 8) [C26]",
    "ignore-trainer": "with a trainer attached the engine steps flat out without waiting for it [C20]",
    "stall-step": "with a trainer attached, after 5 steps the engine never ends its turn [C43]",
    "sticky-disable": "re-enabling the Scene service is refused [C44]",
    "format-flip": "image_format, a non-live field, flips between rgb and bgr every second [C7]",
}


@dataclass
class EngineConfig:
    """Everything ``lucky-monitor sim`` can set."""

    name: str | None = None
    num_envs: int = 64
    obs_size: int = 16
    act_size: int = 4
    image: tuple[int, int] | None = (64, 64)  # width, height
    fmt: str = "rgb"
    bottom_up: bool = False
    hz: float = 50.0
    sim_mode: int = SimMode.REALTIME
    seed: int = 0
    cmd_ring_size: int = 512 * 1024
    tools_ring_size: int = 64 * 1024
    camera_fps: float = 60.0  # 0 = render every frame
    #: benchmarks only: a step hands the frame back without physics, obs or images (the transport alone)
    noop_step: bool = False
    #: tests only: names of :data:`MISBEHAVIOURS` the engine acts out (a conforming engine has none)
    misbehave: frozenset[str] = frozenset()
    #: observations in CUDA memory, shared by an IPC handle in the header (LAYOUT §3.4; needs cupy)
    gpu_obs: bool = False
    gpu_device: int = 0

    @property
    def channels(self) -> int:
        channels = ImageFormat.from_label(self.fmt).channels
        assert channels is not None, self.fmt
        return channels


#: what ``lucky-monitor sim`` can change to make its segment smaller (named by a size error)
SHRINK_OPTIONS = "--envs, --image, --obs or --act"


def plan_segment(cfg: EngineConfig, *, server_pid: int = 0, session_id: int = 1) -> hdr.Header:
    """The header of the segment ``cfg`` asks for, after checking its total size.

    Nothing is allocated or created: this is the check that runs before both.

    Parameters
    ----------
    cfg
        The engine configuration (``fmt`` must be one of :data:`FORMATS`).
    server_pid, session_id
        Written into the header as given.

    Returns
    -------
    Header
        The plan of :func:`lucky_monitor.protocol.header.plan`.

    Raises
    ------
    SegmentTooLarge
        The segment is over :data:`~lucky_monitor.transport.shm.MAX_SEGMENT_BYTES`
        or the free shared memory; the message names the size, the limit and
        the options that shrink it.
    """
    fmt_code = ImageFormat.from_label(cfg.fmt)
    image = (cfg.image[0], cfg.image[1], cfg.channels) if cfg.image else None
    header = hdr.plan(
        num_envs=cfg.num_envs,
        obs_size=cfg.obs_size,
        act_size=cfg.act_size,
        cmd_ring_size=cfg.cmd_ring_size,
        image=image,
        image_format=fmt_code if image else ImageFormat.AUTO,
        image_flags=hdr.IMAGE_FLAG_BOTTOM_UP if (image and cfg.bottom_up) else 0,
        tools_ring_size=cfg.tools_ring_size or None,
        server_pid=server_pid,
        session_id=session_id,
        sim_mode=cfg.sim_mode,
        # No image region, no cameras: Camera and Viewport are not offered (they had been, and a panel showed
        # a Camera toggle that could change nothing).
        services_available=None if image else Service.all_mask() & ~(Service.CAMERA.bit | Service.VIEWPORT.bit),
    )
    check_segment_size(header.segment_size, shrink=SHRINK_OPTIONS)
    return header


class _Refused(Exception):
    """A request the engine answers with an error envelope."""


def _stamped(env: Envelope) -> bytes:
    """Encode ``env`` for a push now, ``sent_ns`` from the ``heartbeat_ns`` clock (LAYOUT §10.1)."""
    return encode(replace(env, sent_ns=time.monotonic_ns()))


class _Pair:
    """One request ring and its response ring, plus telemetry-stream state."""

    def __init__(self, name: str, requests: RingReader, responses: RingWriter) -> None:
        self.name = name
        self.requests = requests
        self.responses = responses
        self.telemetry: tuple[int, int, int] | None = None  # (env, decimation, correlation id)
        self.camera: int | None = None  # correlation id of the StreamCameraReq whose pushes this pair gets
        self.corrupt = 0
        self.dropped_pushes = 0
        self.received = 0  # entries taken off the request ring (a monitor's tap should see each)
        self.sent = 0  # entries pushed on the response ring: responses and stream frames
        self.backlog: Envelope | None = None  # a response waiting for room on the full response ring


class ReferenceEngine:
    """Create a segment and serve it. Use :meth:`run` or call :meth:`tick` yourself.

    Parameters
    ----------
    cfg
        The configuration; ``cfg.name`` defaults to ``LuckyEngine_<pid>``.
    exist_ok
        Replace a segment of the same name (tests of recreation use this).
    """

    def __init__(self, cfg: EngineConfig, *, exist_ok: bool = False) -> None:
        if cfg.fmt not in FORMATS:
            raise LuckyMonitorError(f"unknown image format {cfg.fmt!r}; choose one of {', '.join(FORMATS)}")
        if SimMode.get(cfg.sim_mode) is None:
            raise LuckyMonitorError(f"sim_mode must be {SimMode.describe()}, got {cfg.sim_mode}")
        if not cfg.hz > 0:
            raise LuckyMonitorError(f"hz must be positive, got {cfg.hz}")
        unknown = sorted(set(cfg.misbehave) - set(MISBEHAVIOURS))
        if unknown:
            raise LuckyMonitorError(f"unknown misbehaviour {unknown[0]!r}; choose from {', '.join(MISBEHAVIOURS)}")
        self._mis = frozenset(cfg.misbehave)
        self._created_at = time.monotonic()
        self.cfg = cfg
        self.name = cfg.name or f"LuckyEngine_{os.getpid()}"
        if len(self.name) > MAX_NAME_CHARS:  # a reader accepts longer names; an engine may not use them
            raise UsageError(
                f"segment name {self.name!r} is {len(self.name)} characters; an engine's name has at most "
                f"{MAX_NAME_CHARS} (LAYOUT §1.1, C2: macOS allows 31 bytes with the '/')"
            )
        channels = cfg.channels
        image = (cfg.image[0], cfg.image[1], channels) if cfg.image else None
        # The size check comes first: no per-env buffer is allocated for a segment that is refused.
        header = plan_segment(cfg, server_pid=os.getpid(), session_id=secrets.randbits(64) | 1)
        self.gpu: DeviceObs | None = None
        if cfg.gpu_obs:
            # The device buffer and its handle exist before the header is written: the handle is constant.
            self.gpu = DeviceObs(cfg.num_envs, cfg.obs_size, cfg.gpu_device)
            header = replace(
                header,
                gpu_available=1,
                gpu_obs_mode=GpuObsMode.CUDA_IPC,
                gpu_obs_handle=self.gpu.handle,
                gpu_device_id=cfg.gpu_device,
            )
        # The physics and renderer validate their own arguments before the segment exists.
        self.sim = CartPoleBatch(cfg.num_envs, cfg.obs_size, cfg.act_size, seed=cfg.seed)
        self.renderer = (
            Renderer(cfg.num_envs, image[0], image[1], image[2], fmt=cfg.fmt, bottom_up=cfg.bottom_up)
            if image
            else None
        )
        try:
            self.seg = EngineSegment.create(self.name, header, exist_ok=exist_ok)
        except SegmentExists:
            if not _leftover(self.name):
                raise
            # A crashed engine's segment (its server_pid is dead): replace it, once.
            self.seg = EngineSegment.create(self.name, header, exist_ok=True)
        self.header = header
        # Where the physics writes observations: the segment's obs region, or (GPU observations) a private
        # host buffer copied to the device before each publish; the CPU region then stays zero (LAYOUT §3.4).
        self._obs_out = self.seg.obs if self.gpu is None else np.zeros_like(self.seg.obs)
        h, buf = header, self.seg.buf
        self.pairs = [
            _Pair(
                "main",
                RingReader(buf, h.cmd_c2s_offset, h.cmd_ring_size),
                RingWriter(buf, h.cmd_s2c_offset, h.cmd_ring_size),
            ),
        ]
        if h.tools_offset:
            self.pairs.append(
                _Pair(
                    "tools",
                    RingReader(buf, h.tools_c2s_offset, h.tools_ring_size),
                    RingWriter(buf, h.tools_s2c_offset, h.tools_ring_size),
                )
            )
        self.steps = 0
        self._trainer_steps = 0
        self.images_published = 0
        self.requests_served = 0
        self.clients_detached = 0
        self.handler_errors = 0
        self.camera_fps = cfg.camera_fps
        self._controls: dict[int, np.ndarray] = {}
        self._pending_reset = np.zeros(cfg.num_envs, bool)
        self._actions = np.zeros((cfg.num_envs, cfg.act_size), np.float32)
        self._hb_last = 0
        self._next_tick = time.monotonic()
        self._last_render = -1e9
        self._client_checked: tuple[int, float] = (0, 0.0)
        self._idle_since = time.perf_counter()
        self._current_cid = 0
        self._image_buf: np.ndarray | None = None
        self._handlers: dict[m.MethodId, Callable[[_Pair, Any], object]] = self._make_handlers()
        try:
            self._publish_initial()
        except BaseException:
            self.seg.unlink()  # an engine that failed to start leaves no segment behind
            raise

    # ------------------------------------------------------------ lifecycle
    def _publish_initial(self) -> None:
        seg = self.seg
        self.sim.write_obs(self._obs_out)
        if self.gpu is not None:
            self.gpu.write(self._obs_out)
        seg.rewards[:] = 0
        seg.dones[:] = 0
        if seg.truncateds is not None:
            seg.truncateds[:] = 0
        self._render(1, force=True)
        self._heartbeat(force=True)
        seg.set("engine_state", EngineState.RUNNING)  # header and counters complete (LAYOUT 2.1 step 6) ...
        seg.set("frame_seq", 1)  # ... then the first observation (step 7); action_seq stays 0
        if "ring-unaligned" in self._mis:
            struct.pack_into("<I", seg.buf, self.header.cmd_s2c_offset, 4)

    def close(self) -> None:
        """Announce closing (``engine_state`` = ``EngineState.CLOSING``) and unlink the segment. Idempotent."""
        self.seg.unlink()

    def __enter__(self) -> ReferenceEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, should_stop: Callable[[], bool], *, max_steps: int | None = None) -> None:
        """Serve until ``should_stop()`` is true (checked every few ms) or ``max_steps`` steps."""
        while not should_stop():
            self.tick()
            if max_steps is not None and self.steps >= max_steps:
                return

    # ------------------------------------------------------------ properties
    @property
    def sim_mode(self) -> int:
        return self.seg.counter("sim_mode")

    def service_enabled(self, bit: int) -> bool:
        return bool(self.seg.counter("services_enabled") >> bit & 1)

    # ------------------------------------------------------------------ tick
    def tick(self) -> bool:
        """One iteration of the engine loop; return True if a frame was published.

        Never blocks for more than a few milliseconds.
        """
        seg = self.seg
        if "format-flip" in self._mis and self.header.image_offset and self.header.image_channels == 3:
            flipped = int(time.monotonic() - self._created_at) % 2
            fmt = ImageFormat.BGR if flipped else ImageFormat.RGB
            struct.pack_into("<I", seg.buf, hdr.OFFSET["image_format"], fmt)
        self._heartbeat()
        self.serve_commands()
        client = self._client()
        mode = seg.counter("sim_mode")
        if client and "ignore-trainer" in self._mis:
            self._step(None)
            return True
        if client:
            if "stall-step" in self._mis and self._trainer_steps >= 5:
                self._wait(0.0)
                return False
            if seg.counter("action_seq") != seg.counter("frame_seq"):
                self._wait(SPIN_S if mode == SimMode.REALTIME else SPIN_FAST_S)
                return False
            if mode == SimMode.REALTIME and not self._due():
                return False
            self._step(seg.act)
            self._trainer_steps += 1
            return True
        if mode == 2 or self._due():
            self._step(None)
            return True
        return False

    def _due(self) -> bool:
        """Realtime pacing: True when the next step's time slot has come (else nap a little)."""
        now = time.monotonic()
        period = 1.0 / self.cfg.hz
        if now >= self._next_tick:
            # The next slot on the grid (a step a little late keeps the rate at hz), unless that would come
            # within half a period: then the grid starts again from now. It had allowed a slot of catch-up: two
            # frames 1 ms apart after a trainer's pause, where LAYOUT 7 says at most one step per period.
            self._next_tick += period
            if self._next_tick - now < period / 2:
                self._next_tick = now + period
            return True
        time.sleep(min(self._next_tick - now, 0.002))
        return False

    def _wait(self, spin_s: float) -> None:
        """The trainer's turn: spin-yield for ``spin_s`` after the last step (low latency), then nap (low CPU)."""
        if time.perf_counter() - self._idle_since < spin_s and hasattr(os, "sched_yield"):
            os.sched_yield()
        else:
            time.sleep(NAP_S)

    def _heartbeat(self, force: bool = False) -> None:
        now = time.monotonic_ns()
        if "heartbeat-stops" in self._mis and not force:
            return
        if force or now - self._hb_last >= HEARTBEAT_NS:
            self._hb_last = now
            self.seg.set("heartbeat_ns", now)

    def _client(self) -> int:
        """The attached trainer's pid; a dead one is detached (CAS pid -> 0)."""
        seg = self.seg
        pid = seg.counter("client_pid")
        if pid == 0:
            return 0
        checked_pid, at = self._client_checked
        now = time.monotonic()
        if checked_pid != pid or now - at > 0.25:
            self._client_checked = (pid, now)
            if not pid_alive(pid):
                if seg.cas("client_pid", pid, 0):
                    self.clients_detached += 1
                    self._next_tick = now
                return 0
        return pid

    # ------------------------------------------------------------------ step
    def _step(self, actions: np.ndarray | None) -> None:
        seg, sim = self.seg, self.sim
        frame = seg.counter("frame_seq")
        if actions is None:  # free-run: a gentle per-env exploration force keeps the picture alive
            t = frame * sim.dt
            phase = np.arange(sim.num_envs) * 0.37
            self._actions[:, 0] = 0.6 * np.sin(1.3 * t + phase)
            if sim.act_size > 1:
                self._actions[:, 1:] = 0
        else:
            np.copyto(self._actions, actions)
        for env, ctrl in self._controls.items():
            k = min(len(ctrl), sim.act_size)
            self._actions[env, :k] = ctrl[:k]
        self._controls.clear()
        if seg.resets.any() or self._pending_reset.any():
            flags = seg.resets != 0
            sim.reset(flags | self._pending_reset)
            seg.resets[flags] = 0
            self._pending_reset[:] = False
        if not self.cfg.noop_step:
            # the padding columns of obs stay zero from the first write
            sim.advance(self._actions, self._obs_out, seg.rewards, seg.dones, seg.truncateds, clear_tail=False)
            if self.gpu is not None:
                self.gpu.write(self._obs_out)  # synchronised: the device holds frame k+1 before it is published
            self._render(frame + 1)
        self.steps += 1
        seg.set("frame_seq", frame + 1)
        self._idle_since = time.perf_counter()
        self._push_telemetry(frame + 1)

    def _render(self, frame: int, force: bool = False) -> None:
        seg = self.seg
        if self.renderer is None or seg.images is None:
            return
        if not force and not self.service_enabled(Service.CAMERA) and "images-ignore-disabled" not in self._mis:
            return
        now = time.monotonic()
        if not force and (
            self.camera_fps < 0  # stream stopped
            or (self.camera_fps > 0 and now - self._last_render < 1.0 / self.camera_fps)
        ):
            return
        self._last_render = now
        if self._image_buf is None:
            self._image_buf = np.empty_like(seg.images)
        # Render privately, then hold the seqlock only for one copy: readers
        # then see image_seq odd for ~a memcpy, not for the whole render.
        self.renderer.render(self.sim, self._image_buf)
        seq = seg.counter("image_seq")
        if "image-seqlock-inverted" in self._mis and not seq & 1:
            seq += 1  # from an odd start, +1 and +1 leave it even while writing, odd between writes
        seg.set("image_seq", seq + 1)  # odd: writing
        np.copyto(seg.images, self._image_buf)
        image_frame = frame + (3 if "image-frame-ahead" in self._mis else 0)
        seg.set("image_frame_seq", image_frame)
        seg.set("image_seq", seq + 2)  # even: stable
        self.images_published += 1
        self._push_camera(image_frame)

    def _push_camera(self, image_frame: int) -> None:
        """One ``CameraImageFrame`` per published image to each pair streaming the camera (metadata only)."""
        renderer = self.renderer
        streaming = [p for p in self.pairs if p.camera is not None]
        if not streaming or renderer is None:
            return
        w, h = self.cfg.image or (0, 0)
        frame = m.CameraImageFrame(
            camera_name=renderer.camera, frame_seq=image_frame, env_id=0, width=w, height=h, channels=self.cfg.channels
        )
        for pair in streaming:
            assert pair.camera is not None
            self._push(pair, Envelope(m.MethodId.CameraImageFrame, pair.camera, frame, ""))

    def render_now(self) -> None:
        """Re-render the images for the current frame (used after a debug draw while idle)."""
        self._render(self.seg.counter("frame_seq"), force=True)

    # -------------------------------------------------------------- commands
    def message_counts(self) -> dict[str, int]:
        """Ring entries this engine took and wrote, keyed like a monitor's tap counts (``"main c2s"`` ...).

        ``c2s``: requests taken off the ring; ``s2c``: responses and stream
        frames pushed (a stream frame dropped on a full ring is not counted).
        A passive tap that lost nothing reports the same numbers.
        """
        out = {}
        for pair in self.pairs:
            out[f"{pair.name} c2s"] = pair.received
            out[f"{pair.name} s2c"] = pair.sent
        return out

    def serve_commands(self, max_per_ring: int = 64) -> int:
        """Answer up to ``max_per_ring`` requests on each request ring."""
        served = 0
        for pair in self.pairs:
            if pair.backlog is not None and not self._flush(pair):
                continue  # response ring still full: consume no further requests from this pair
            for _ in range(max_per_ring):
                try:
                    raw = pair.requests.pop()
                except RingCorrupt:
                    pair.corrupt += 1  # the reader has resynchronised; carry on
                    continue
                if raw is None:
                    break
                pair.received += 1
                served += 1
                self._answer(pair, raw)
                if pair.backlog is not None:
                    break
        self.requests_served += served
        return served

    @staticmethod
    def _flush(pair: _Pair) -> bool:
        """Try to send the response held back by a full ring; True once it is out."""
        assert pair.backlog is not None  # the callers check
        try:
            pair.responses.push(_stamped(pair.backlog))
        except RingFull:
            return False
        pair.sent += 1
        pair.backlog = None
        return True

    def _answer(self, pair: _Pair, raw: bytes) -> None:
        try:
            req = decode(raw)
        except EnvelopeError:
            pair.corrupt += 1  # no correlation id to answer to; the requester times out
            if "malformed-reply" in self._mis and pair.name == "tools":
                self._reply(pair, Envelope(m.MethodId.GetServicesResp, 0, m.GetServicesResp(), ""))
            return
        method = req.method
        try:
            mid = m.MethodId(method)
        except ValueError:
            if "unknown-silent" in self._mis:
                return
            # An unknown method's error echoes its id (LAYOUT §10).
            self._reply(pair, error_response(req, f"unknown method 0x{int(method):04X}"))
            return
        if pair.name == "tools" and self._misbehave_answer(pair, mid, req):
            return
        resp_id = m.RESPONSE_OF.get(mid)
        if resp_id is None:
            self._reply(pair, Envelope(m.MethodId.Unset, req.correlation_id, None, f"{mid.name} is not a request"))
            return
        try:
            if mid in m.TOOLS_METHODS and pair.name != "tools":
                raise _Refused(f"{mid.name} is served on the tools channel only")
            bit = m.SERVICE_OF_METHOD.get(mid)
            if bit is not None and not self.service_enabled(bit) and "ignore-disabled" not in self._mis:
                offered = self.header.services_available >> bit & 1
                raise _Refused(f"service {Service(bit).label} is {'disabled' if offered else 'not available'}")
            handler = self._handlers.get(mid)
            if handler is None:
                raise _Refused(f"{mid.name} is not implemented by the reference engine")
            self._current_cid = req.correlation_id
            # An absent payload is the all-defaults table (FlatBuffers' absent = default).
            body = req.payload if req.payload is not None else m.PAYLOAD_OF[mid]()
            payload = handler(pair, body)
            self._reply(pair, Envelope(resp_id, req.correlation_id, payload, ""))
        except _Refused as exc:
            self._reply(pair, Envelope(resp_id, req.correlation_id, None, str(exc)))
        except LuckyMonitorError as exc:
            self._reply(pair, Envelope(resp_id, req.correlation_id, None, str(exc)))
        except Exception as exc:  # a request must never take the engine down
            self.handler_errors += 1
            self._reply(pair, Envelope(resp_id, req.correlation_id, None, f"internal error: {exc!r}"))

    def _misbehave_answer(self, pair: _Pair, mid: m.MethodId, req: Envelope) -> bool:
        """Tests only: act out a request-level misbehaviour; True when the request is dealt with."""
        if "drop-response" in self._mis and mid is m.MethodId.GetSceneInfoReq:
            return True
        if "wrong-response-method" in self._mis and mid is m.MethodId.GetMujocoInfoReq:
            payload = self._get_scene_info(pair, m.GetSceneInfoReq())
            self._reply(pair, Envelope(m.MethodId.GetSceneInfoResp, req.correlation_id, payload, ""))
            return True
        if "sticky-disable" in self._mis and mid is m.MethodId.SetServiceEnabledReq:
            body = req.payload
            if isinstance(body, m.SetServiceEnabledReq) and body.enabled and body.service == Service.SCENE:
                msg = "the Scene service cannot be enabled again"
                self._reply(pair, Envelope(m.MethodId.SetServiceEnabledResp, req.correlation_id, None, msg))
                return True
        return False

    def _reply(self, pair: _Pair, env: Envelope) -> None:
        """Send a response; if the ring is full, hold it back (never drop it, never block the loop)."""
        if pair.name == "tools" and "wrong-correlation-id" in self._mis:
            env = replace(env, correlation_id=env.correlation_id ^ 0x5A5A0000)
        data = _stamped(env) if "unstamped" not in self._mis or pair.name != "tools" else encode(env)
        if len(data) > max_payload(pair.responses.capacity):
            env = Envelope(env.method, env.correlation_id, None, "response too large for the ring")
            data = _stamped(env)
        try:
            pair.responses.push(data)
            pair.sent += 1
        except RingFull:
            pair.backlog = env  # retried every tick (stamped again when it goes out); no requests read meanwhile

    def _push(self, pair: _Pair, env: Envelope) -> None:
        """Unsolicited stream frames are droppable: a full ring loses the frame, not the engine."""
        try:
            pair.responses.push(_stamped(env))
            pair.sent += 1
        except RingFull:
            pair.dropped_pushes += 1

    def _push_telemetry(self, frame: int) -> None:
        if not self.service_enabled(Service.TELEMETRY):
            return
        for pair in self.pairs:
            if pair.telemetry is None:
                continue
            env, dec, cid = pair.telemetry
            if frame % max(dec, 1):
                continue
            values = self._telemetry_values(env)
            self._push(
                pair,
                Envelope(
                    m.MethodId.TelemetryFrame, cid, m.TelemetryFrame(frame_seq=frame, env_id=env, values=values), ""
                ),
            )

    TELEMETRY_CHANNELS = ("x", "x_dot", "theta", "theta_dot", "reward", "force")
    TELEMETRY_UNITS = ("m", "m/s", "rad", "rad/s", "", "")

    def _telemetry_values(self, env: int) -> tuple[float, ...]:
        s = self.sim
        return (
            float(s.x[env]),
            float(s.x_dot[env]),
            float(s.theta[env]),
            float(s.theta_dot[env]),
            float(s.rewards[env]),
            float(self._actions[env, 0]),
        )

    def _env(self, env_id: int) -> int:
        if not 0 <= env_id < self.sim.num_envs:
            raise _Refused(f"env_id {env_id} out of range 0..{self.sim.num_envs - 1}")
        return int(env_id)

    def _make_handlers(self) -> dict[m.MethodId, Callable[[_Pair, Any], object]]:
        M = m.MethodId
        return {
            M.GetAgentSchemaReq: self._get_agent_schema,
            M.ResetAgentReq: self._reset_agent,
            M.GetJointStateReq: self._get_joint_state,
            M.SendControlReq: self._send_control,
            M.GetMujocoInfoReq: self._get_mujoco_info,
            M.GetTelemetrySchemaReq: lambda p, r: m.GetTelemetrySchemaResp(
                channel_names=self.TELEMETRY_CHANNELS, channel_units=self.TELEMETRY_UNITS
            ),
            M.StreamTelemetryReq: self._stream_telemetry,
            M.GetSceneInfoReq: self._get_scene_info,
            M.ListEntitiesReq: self._list_entities,
            M.GetEntityReq: self._get_entity,
            M.GetSimulationModeReq: lambda p, r: m.GetSimulationModeResp(mode=SimMode(self.sim_mode)),
            M.SetSimulationModeReq: self._set_simulation_mode,
            M.ListCamerasReq: self._list_cameras,
            M.StreamCameraReq: self._stream_camera,
            M.GetViewportInfoReq: lambda p, r: m.GetViewportInfoResp(
                name="Viewport",
                width=self.cfg.image[0] if self.cfg.image else 0,
                height=self.cfg.image[1] if self.cfg.image else 0,
            ),
            M.DrawReq: self._draw,
            M.GetServicesReq: lambda p, r: m.GetServicesResp(
                services_available=self.header.services_available, services_enabled=self.seg.counter("services_enabled")
            ),
            M.SetServiceEnabledReq: self._set_service_enabled,
        }

    # ------------------------------------------------------------- handlers
    def _get_agent_schema(self, pair: _Pair, req: m.GetAgentSchemaReq) -> m.GetAgentSchemaResp:
        s = self.sim
        n_echo = s.echo_slice.stop - s.echo_slice.start
        n_extra = s.extra_slice.stop - s.extra_slice.start
        obs_names = ["cart_pos", "cart_vel", "pole_cos", "pole_sin", "pole_ang_vel", "action_echo"]
        obs_sizes = [1, 1, 1, 1, 1, n_echo]
        if n_extra:
            obs_names.append("extra")
            obs_sizes.append(n_extra)
        rest = s.obs_size - sum(obs_sizes)
        if rest:
            obs_names.append("padding")
            obs_sizes.append(rest)
        act_names = ["cart_force"] + (["unused"] if s.act_size > 1 else [])
        act_sizes = [1] + ([s.act_size - 1] if s.act_size > 1 else [])
        return m.GetAgentSchemaResp(
            agent_name="cartpole",
            num_envs=s.num_envs,
            observation_size=s.obs_size,
            action_size=s.act_size,
            observation_names=tuple(obs_names),
            observation_sizes=tuple(obs_sizes),
            action_names=tuple(act_names),
            action_sizes=tuple(act_sizes),
            action_low=(-1.0,) * s.act_size,
            action_high=(1.0,) * s.act_size,
            control_dt=s.dt,
        )

    def _reset_agent(self, pair: _Pair, req: m.ResetAgentReq) -> m.ResetAgentResp:
        s = self.sim
        ids = [self._env(int(i)) for i in req.env_ids] if req.env_ids else list(range(s.num_envs))
        seed = 0
        if req.contract is not None:
            try:
                contract = Contract.from_message(req.contract, s.contract)
            except LuckyMonitorError as exc:
                raise _Refused(f"contract rejected: {exc}") from None
            s.set_contract(contract)
            seed = contract.seed or 0
        # Applied at the start of the next step, like reset flags: the engine
        # never writes observations during the trainer's turn.
        self._pending_reset[ids] = True
        return m.ResetAgentResp(success=True, seed=seed)

    def _get_joint_state(self, pair: _Pair, req: m.GetJointStateReq) -> m.GetJointStateResp:
        env = self._env(req.env_id)
        q, v = self.sim.joint_state(env)
        frame = self.seg.counter("frame_seq")
        return m.GetJointStateResp(
            env_id=env,
            frame_seq=frame,
            positions=tuple(map(float, q)),
            velocities=tuple(map(float, v)),
            sim_time=float(self.sim.t[env] * self.sim.dt),
        )

    def _send_control(self, pair: _Pair, req: m.SendControlReq) -> m.SendControlResp:
        env = self._env(req.env_id)
        if not req.controls:
            raise _Refused("controls is empty")
        self._controls[env] = np.clip(np.asarray(req.controls, np.float32), -1, 1)
        return m.SendControlResp(success=True)

    def _get_mujoco_info(self, pair: _Pair, req: object) -> m.GetMujocoInfoResp:
        info = self.sim.info
        return m.GetMujocoInfoResp(
            model_name="cartpole",
            nq=info.nq,
            nv=info.nv,
            nu=info.nu,
            timestep=info.timestep,
            joint_names=("slider", "hinge"),
            actuator_names=("cart_force",),
        )

    def _stream_telemetry(self, pair: _Pair, req: m.StreamTelemetryReq) -> m.StreamTelemetryResp:
        if req.stop:
            pair.telemetry = None
            return m.StreamTelemetryResp(streaming=False, num_channels=len(self.TELEMETRY_CHANNELS))
        env = self._env(req.env_id)
        # Pushes echo the correlation id of the request that started the stream.
        pair.telemetry = (env, max(1, req.decimation), self._current_cid)
        return m.StreamTelemetryResp(streaming=True, num_channels=len(self.TELEMETRY_CHANNELS))

    def _get_scene_info(self, pair: _Pair, req: object) -> m.GetSceneInfoResp:
        return m.GetSceneInfoResp(
            scene_name="cartpole_swingup",
            entity_count=2 * self.sim.num_envs,
            timestep=self.sim.dt,
            sim_time=float(self.steps * self.sim.dt),
            mode=SimMode(self.sim_mode),
        )

    def _entity(self, eid: int) -> m.EntityInfo:
        s = self.sim
        env, part = divmod(eid - 1, 2)
        if part == 0:
            return m.EntityInfo(
                id=eid,
                name=f"env{env}/cart",
                position=m.Vec3(float(s.x[env]), 0.0, 0.0),
                rotation=m.Quat(1.0, 0.0, 0.0, 0.0),
                scale=m.Vec3(1.0, 1.0, 1.0),
                parent_id=0,
            )
        half = float(s.theta[env]) / 2
        return m.EntityInfo(
            id=eid,
            name=f"env{env}/pole",
            position=m.Vec3(float(s.x[env]), 0.0, 0.0),
            rotation=m.Quat(float(np.cos(half)), 0.0, float(np.sin(half)), 0.0),
            scale=m.Vec3(1.0, 1.0, float(s.params.pole_length[env])),
            parent_id=eid - 1,
        )

    def _list_entities(self, pair: _Pair, req: m.ListEntitiesReq) -> m.ListEntitiesResp:
        total_ids = range(1, 2 * self.sim.num_envs + 1)
        names = [(i, f"env{(i - 1) // 2}/{'cart' if i % 2 else 'pole'}") for i in total_ids]
        match = [i for i, n in names if req.name_filter in n]
        limit = req.limit or 100
        page = match[req.offset : req.offset + min(limit, 1000)]
        return m.ListEntitiesResp(entities=tuple(self._entity(i) for i in page), total=len(match))

    def _get_entity(self, pair: _Pair, req: m.GetEntityReq) -> m.GetEntityResp:
        eid = req.id
        if eid == 0 and req.name:
            env_s, _, part = req.name.partition("/")
            try:
                env = int(env_s.removeprefix("env"))
            except ValueError:
                raise _Refused(f"no entity named {req.name!r}") from None
            if part not in ("cart", "pole"):
                raise _Refused(f"no entity named {req.name!r}")
            eid = 2 * self._env(env) + (1 if part == "cart" else 2)
        if not 1 <= eid <= 2 * self.sim.num_envs:
            raise _Refused(f"no entity with id {eid}")
        return m.GetEntityResp(entity=self._entity(eid))

    def _set_simulation_mode(self, pair: _Pair, req: m.SetSimulationModeReq) -> m.SetSimulationModeResp:
        mode = int(req.mode)
        if SimMode.get(mode) is None:
            raise _Refused(f"simulation mode {mode} unknown ({SimMode.describe()})")
        self.seg.set("sim_mode", mode)
        self._next_tick = time.monotonic()
        return m.SetSimulationModeResp(mode=SimMode(mode))

    def _list_cameras(self, pair: _Pair, req: object) -> m.ListCamerasResp:
        if self.renderer is None:
            return m.ListCamerasResp(cameras=())
        w, h = self.cfg.image or (0, 0)
        return m.ListCamerasResp(cameras=tuple(m.CameraInfo(name=c, width=w, height=h, fov_y=60.0) for c in CAMERAS))

    def _stream_camera(self, pair: _Pair, req: m.StreamCameraReq) -> m.StreamCameraResp:
        if self.renderer is None:
            raise _Refused("this engine has no image region")
        if req.stop:
            self.camera_fps = -1.0  # never due
            for p in self.pairs:
                p.camera = None
            return m.StreamCameraResp(streaming=False)
        if req.camera_name:
            if req.camera_name not in CAMERAS:
                raise _Refused(f"camera {req.camera_name!r} unknown; cameras are {', '.join(CAMERAS)}")
            self.renderer.camera = req.camera_name
        self.camera_fps = float(req.fps)  # the schema: 0 = every step
        self.render_now()
        # Pushes start with the next image, after this response: each echoes this request's correlation id.
        pair.camera = self._current_cid
        w, h = self.cfg.image or (0, 0)
        return m.StreamCameraResp(streaming=True, width=w, height=h)

    def _draw(self, pair: _Pair, req: m.DrawReq) -> m.DrawResp:
        if self.renderer is None:
            raise _Refused("this engine has no image region to draw into")
        self.renderer.set_debug(req.lines, req.arrows, req.velocity_command, req.clear_previous)
        if self.service_enabled(Service.CAMERA) and self.camera_fps >= 0:
            self.render_now()  # visible at once, even while paused or waiting for a trainer
        return m.DrawResp(success=True)

    def _set_service_enabled(self, pair: _Pair, req: m.SetServiceEnabledReq) -> m.SetServiceEnabledResp:
        bit = int(req.service)
        if Service.get(bit) is None or not self.header.services_available >> bit & 1:
            raise _Refused(f"service bit {bit} is not available")
        mask = self.seg.counter("services_enabled")
        mask = mask | (1 << bit) if req.enabled else mask & ~(1 << bit)
        self.seg.set("services_enabled", mask)
        return m.SetServiceEnabledResp(services_enabled=mask)


def _leftover(name: str) -> bool:
    """Whether segment ``name`` is a crashed engine's leftover: a valid magic and a dead ``server_pid``."""
    try:
        raw, _, _ = peek_header(name)
    except LuckyMonitorError:
        return False
    if len(raw) < hdr.HEADER_SIZE:
        return False
    h = hdr.Header.unpack(raw)
    return h.magic == hdr.MAGIC and h.server_pid != 0 and not pid_alive(h.server_pid)
