"""The reference trainer: ``SharedMemoryClient``, the shape the luckyrobots client takes.

Theory of operation
-------------------
The trainer attaches read-write and claims ``client_pid`` by compare-and-swap
(0 → its pid, or a dead pid → its pid). From then on the engine waits for it:

* ``step(actions)``: wait for the trainer's turn (``frame_seq - action_seq ==
  1``, or more right after attaching), write actions and reset flags, set
  ``action_seq = frame_seq`` (hand the turn to the engine), then wait for
  ``frame_seq`` to advance and return numpy views of the new data. Waiting
  spins (``sched_yield``) for a short while, then naps, and gives up with
  :class:`EngineDied` when the engine's pid is gone, its heartbeat stops, or
  ``timeout_s`` passes.
* Requests (``get_schema``, ``reset`` with a contract, anything else) travel
  as envelopes on the main c2s ring; responses come back on the main s2c
  ring with the same correlation id. Unsolicited stream frames that arrive
  meanwhile are kept in :attr:`pushes`.
* ``close()`` releases ``client_pid`` (pid → 0) so the engine free-runs again.
* GPU observations (``gpu_obs_mode = 1``, LAYOUT §3.4): :attr:`obs_cuda` is
  the engine's device buffer as a cupy array (``torch.from_dlpack`` takes it
  without a copy), opened once from the header's IPC handle; ``step`` and
  ``observe`` then return the observations copied from the device, since the
  CPU region does not hold them.

The first step after attaching may return a frame the engine produced while
it was still free-running; from the second step on, every frame is the result
of exactly the actions the trainer wrote.
"""

from __future__ import annotations

import collections
import os
import time
import typing
from dataclasses import dataclass

import numpy as np

from ..protocol import messages as m
from ..protocol.enums import EngineState, GpuObsMode, SimMode
from ..protocol.envelope import Envelope, decode, encode
from ..protocol.errors import BusyError, CommandTimeout, EngineDied, EnvelopeError, RemoteError
from ..protocol.ring import RingReader, RingWriter
from ..transport.cuda import CudaObs
from ..transport.discovery import pid_alive
from ..transport.shm import TrainerSegment

#: spin-yield this long while waiting for a frame before napping (deterministic/fast engines) ...
SPIN_S = 0.002
#: ... and for a realtime engine, whose frames come on its clock anyway: spinning would only burn CPU
SPIN_REALTIME_S = 0.0002
#: naps between polls after the spin: short for deterministic/fast, longer for realtime
NAP_S, NAP_REALTIME_S = 0.0002, 0.001


class TrainerBusy(BusyError):
    """Another live trainer holds ``client_pid``."""


@dataclass
class StepResult:
    """Views into the segment, valid until the next :meth:`SharedMemoryClient.step`."""

    obs: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    truncateds: np.ndarray | None
    frame_seq: int


class SharedMemoryClient:
    """Drive an engine in lock-step over its LRBC segment.

    Parameters
    ----------
    name
        Segment name (``LuckyEngine_<pid>``).
    timeout_s
        How long a step or a request may wait before :class:`EngineDied` /
        :class:`CommandTimeout`.
    """

    def __init__(self, name: str, *, timeout_s: float = 5.0, allow_other_user: bool = False) -> None:
        self.timeout_s = timeout_s
        self.seg = TrainerSegment.attach(name, allow_other_user=allow_other_user)
        h = self.seg.header
        self.header = h
        self.num_envs, self.obs_size, self.act_size = h.num_envs, h.obs_size, h.act_size
        self._requests = RingWriter(self.seg.buf, h.cmd_c2s_offset, h.cmd_ring_size)
        self._responses = RingReader(self.seg.buf, h.cmd_s2c_offset, h.cmd_ring_size)
        self._next_cid = (os.getpid() << 32) | 1
        self.pushes: collections.deque[Envelope] = collections.deque(maxlen=1024)
        self.steps = 0
        self.pid = os.getpid()
        self._cuda: CudaObs | None = None
        self._claim()

    # ----------------------------------------------------------- lifecycle
    def _claim(self) -> None:
        seg = self.seg
        for _ in range(3):
            cur = seg.counter("client_pid")
            if cur == self.pid:
                return
            if cur != 0 and pid_alive(cur):
                seg.close()
                raise TrainerBusy(f"trainer pid {cur} is already attached to {seg.name}")
            if seg.cas("client_pid", cur, self.pid):
                return
        seg.close()
        raise TrainerBusy(f"could not claim client_pid of {seg.name}")

    def close(self) -> None:
        """Release ``client_pid`` and unmap. Idempotent."""
        if self.seg.closed:
            return
        if self._cuda is not None:
            self._cuda.close()
            self._cuda = None
        try:
            self.seg.cas("client_pid", self.pid, 0)
        finally:
            self.seg.close()

    def __enter__(self) -> SharedMemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- step
    @property
    def frame_seq(self) -> int:
        return self.seg.counter("frame_seq")

    @property
    def gpu_obs(self) -> bool:
        """The engine keeps the observations in CUDA memory (``gpu_obs_mode = 1``)."""
        return self.header.gpu_obs_mode == GpuObsMode.CUDA_IPC

    @property
    def obs_cuda(self) -> typing.Any:
        """The engine's observations on the GPU: a cupy ``float32[num_envs, obs_size]`` (opened on first use).

        Valid while this client is open; it changes with every step. Raises
        :class:`~lucky_monitor.protocol.errors.GpuUnavailable` when the engine
        exports none, or cupy or the device is missing.
        """
        if self._cuda is None:
            self._cuda = CudaObs(self.header)
        return self._cuda.array

    def observe(self) -> StepResult:
        """The current data without stepping (views; with GPU observations, ``obs`` is a host copy)."""
        s = self.seg
        obs = self.obs_cuda.get() if self.gpu_obs else s.obs
        return StepResult(obs, s.rewards, s.dones, s.truncateds, s.counter("frame_seq"))

    def step(self, actions: np.ndarray, reset: np.ndarray | None = None) -> StepResult:
        """Write ``actions`` (``(num_envs, act_size)``), hand over, wait for the next frame.

        ``reset`` is an optional boolean mask of envs the engine resets before
        stepping (the reset flags).
        """
        seg = self.seg
        actions = np.asarray(actions, np.float32)
        if actions.shape != (self.num_envs, self.act_size):
            raise ValueError(f"actions must have shape {(self.num_envs, self.act_size)}, got {actions.shape}")
        frame = self._wait(lambda f, a: f != a, "its turn")
        np.copyto(seg.act, actions)
        if reset is not None:
            seg.resets[np.asarray(reset, bool)] = 1
        seg.set("action_seq", frame)
        self._wait(lambda f, a: f > frame, f"frame {frame + 1}")
        self.steps += 1
        return self.observe()

    def _wait(self, ready, what: str) -> int:
        seg = self.seg
        counter = seg.counter
        t0 = time.perf_counter()
        next_check = t0 + 0.25
        spin, nap = (SPIN_S, NAP_S) if counter("sim_mode") != SimMode.REALTIME else (SPIN_REALTIME_S, NAP_REALTIME_S)
        while True:
            f = counter("frame_seq")
            if ready(f, counter("action_seq")):
                return f
            now = time.perf_counter()
            if now - t0 < spin:
                os.sched_yield()
                continue
            if now >= next_check:
                next_check = now + 0.25
                self._check_engine(now - t0, what)
            time.sleep(nap)

    def _check_engine(self, waited: float, what: str) -> None:
        seg = self.seg
        reason = seg.still_valid()
        if reason is not None:
            raise EngineDied(f"engine gone while waiting for {what}: {reason}")
        if not pid_alive(self.header.server_pid):
            raise EngineDied(f"engine pid {self.header.server_pid} died while the trainer waited for {what}")
        if seg.counter("engine_state") == EngineState.CLOSING:
            raise EngineDied("engine is closing")
        hb_age = (time.monotonic_ns() - seg.counter("heartbeat_ns")) / 1e9
        if hb_age > self.timeout_s:
            raise EngineDied(f"engine heartbeat stopped {hb_age:.1f} s ago")
        if waited > self.timeout_s:
            raise EngineDied(f"no {what} within {self.timeout_s:g} s (engine alive but not stepping)")

    # ------------------------------------------------------------ requests
    def request(self, method: m.MethodId, payload: object | None = None) -> Envelope:
        """Send one request on the main ring and wait for its response."""
        cid = self._next_cid
        self._next_cid += 1
        # sent_ns: the heartbeat's clock at the push, so a tap sees the exact round trip.
        self._requests.push(encode(Envelope(method, cid, payload, "", time.monotonic_ns())))
        t0 = time.perf_counter()
        while True:
            raw = self._responses.pop()
            if raw is None:
                waited = time.perf_counter() - t0
                if waited > self.timeout_s:
                    raise CommandTimeout(f"{m.method_name(method)}: no response within {self.timeout_s:g} s")
                if waited > 0.25:
                    self._check_engine(0.0, f"the response to {m.method_name(method)}")
                time.sleep(0.0002)
                continue
            try:
                env = decode(raw)
            except EnvelopeError:
                continue
            if env.correlation_id != cid:
                self.pushes.append(env)
                continue
            if env.error_message:
                raise RemoteError(f"{m.method_name(method)}: {env.error_message}")
            return env

    def get_schema(self) -> m.GetAgentSchemaResp:
        """The agent's observation/action layout."""
        return typing.cast(
            m.GetAgentSchemaResp, self.request(m.MethodId.GetAgentSchemaReq, m.GetAgentSchemaReq()).payload
        )

    def service_enabled(self, method: m.MethodId) -> bool:
        """Whether the engine offers ``method`` now: its service is available and enabled (LAYOUT §10.2)."""
        bit = m.SERVICE_OF_METHOD.get(method)
        if bit is None:
            return True
        return bool(self.header.services_available >> bit & 1 and self.seg.counter("services_enabled") >> bit & 1)

    def reset(self, env_ids=None, contract: m.SimulationContract | None = None) -> None:
        """Reset ``env_ids`` (all if ``None``) at the next step.

        Without a contract this sets the reset flags; with one it sends
        ResetAgent so the engine changes its randomisation first.
        """
        if contract is None:
            if env_ids is None:
                self.seg.resets[:] = 1
            else:
                self.seg.resets[np.asarray(env_ids, np.int64)] = 1
            return
        ids = () if env_ids is None else tuple(int(i) for i in env_ids)
        self.request(m.MethodId.ResetAgentReq, m.ResetAgentReq(env_ids=ids, contract=contract))


class PDPolicy:
    """Energy-pumping swing-up plus a PD balance near upright, vectorised.

    ``E = ½θ̇² + w²(cos θ − 1)`` is the pole's energy per unit inertia
    (``w² = 3g/2L`` for a 0.6 m rod), zero at rest upright. Far from upright
    the cart is pushed against ``cos θ · θ̇`` in proportion to the missing
    energy; within ``cos θ > 0.8`` a PD law on angle and cart position holds
    the pole. It swings ~95 % of envs up within a few seconds, so the reward
    plots show real dynamics (swing-up, balance, resets) rather than noise.
    """

    W2 = 24.5

    def __init__(self, act_size: int) -> None:
        self.act_size = act_size

    #: The observations the policy reads: the reference engine's cart-pole (x, ẋ, cos θ, sin θ, θ̇).
    OBS_NEEDED = 5

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x, xd, c, s, thd = (obs[:, i] for i in range(self.OBS_NEEDED))
        th = np.arctan2(s, c)  # 0 = upright
        energy = 0.5 * thd**2 + self.W2 * (c - 1.0)
        swing = np.clip(0.3 * energy * np.sign(c * thd + 1e-9), -1, 1) - 0.3 * x - 0.3 * xd
        balance = 5.0 * th + 0.8 * thd + 0.3 * x + 0.5 * xd
        out = np.zeros((obs.shape[0], self.act_size), np.float32)
        out[:, 0] = np.clip(np.where(c > 0.8, balance, swing), -1, 1)
        return out


class RandomPolicy:
    def __init__(self, act_size: int, seed: int = 0) -> None:
        self.act_size = act_size
        self.rng = np.random.default_rng(seed)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return self.rng.uniform(-1, 1, (obs.shape[0], self.act_size)).astype(np.float32)
