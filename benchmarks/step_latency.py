"""Step latency: LRBC shared-memory lock-step versus a gRPC round trip doing the same work.

For each configuration (num_envs, obs_size, act_size, image) this prints one
JSON line with the median and 99th percentile of a full trainer step:

* **shm** - the reference engine runs in its own process
  (``python -m lucky_monitor sim --fast --camera-fps 0 ...``, so images, when
  configured, are rendered every step) and this process is the trainer
  (:class:`~lucky_monitor.sim.trainer.SharedMemoryClient`), timing ``step()``:
  write actions, hand over, wait for the next frame.
* **grpc** - the baseline: a grpcio server in its own process on 127.0.0.1
  (ephemeral port) with one generic unary method using identity (bytes)
  serializers. Its handler does the same work as the engine's step
  (``CartPoleBatch.step`` + ``write_obs``, auto-reset, images rendered into a
  buffer when configured) and returns obs + rewards + dones + truncateds
  (+ images) as bytes; the client sends the actions as bytes. Same payloads
  both ways; the client wraps the reply in numpy views like the shm side.
* **shm_noop** - the transport alone: the same engine started with the hidden
  ``sim --noop-step`` option (``EngineConfig.noop_step``), whose step hands
  the frame back (reads the hand-over, publishes ``frame_seq + 1``) without
  physics, obs or images. The floor the shared-memory side sits on: its
  median is the hand-over's round trip between two processes.
* **compute** - the step's work alone in this process
  (:meth:`~lucky_monitor.sim.physics.CartPoleBatch.advance`, the call the
  engine makes: physics, rewards/dones/truncateds, auto-reset, obs; plus the
  render when images are configured), the other floor under both transports.

The four run side by side and are timed in ten interleaved blocks, so a
change in machine load during the run hits all of them alike (``load_average``
in each line tells how busy the machine was).

``speedup = grpc_median_us / shm_median_us``; ``shm_over_work_us =
shm_median_us - compute_median_us`` (what lock-step adds to the work) beside
``shm_noop_median_us`` (what a hand-over costs with no work at all). A final line reports the CPU
use of a demo-style run (realtime 50 Hz, 64 envs, 64x64 images): engine free-
running, then engine + reference trainer in lock-step.

Usage::

    python benchmarks/step_latency.py [--quick]

``--quick`` (300 timed steps per configuration) finishes well under two
minutes; the default takes 3000 steps (fewer, at least 300, for configurations
whose step takes long) and more configurations.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import child, emit, first_line, lucky, machine_facts, process_cpu_seconds, summarize_us

SERVICE, METHOD = "lrbc.bench.Stepper", "Step"
GRPC_OPTIONS = [("grpc.max_send_message_length", 256 << 20), ("grpc.max_receive_message_length", 256 << 20)]


@dataclass(frozen=True)
class Config:
    num_envs: int
    obs_size: int
    act_size: int
    image: tuple[int, int] | None = None  # width, height; 3 channels (RGB)

    @property
    def image_label(self) -> str | None:
        return f"{self.image[0]}x{self.image[1]}x3" if self.image else None

    @property
    def bytes_up(self) -> int:
        return self.num_envs * self.act_size * 4

    @property
    def bytes_down(self) -> int:
        n = self.num_envs
        img = n * self.image[0] * self.image[1] * 3 if self.image else 0
        return n * self.obs_size * 4 + n * 4 + 2 * n + img


QUICK = [Config(4096, 100, 12), Config(64, 16, 4, (64, 64))]
FULL = [*QUICK, Config(16, 16, 4), Config(1024, 48, 12), Config(256, 16, 4, (64, 64)), Config(4096, 100, 12, (32, 32))]


# ---------------------------------------------------------------------------- the step's work
class Work:
    """What the engine does per step, without the segment: physics, auto-reset, obs, images."""

    def __init__(self, cfg: Config) -> None:
        from lucky_monitor.sim.physics import CartPoleBatch
        from lucky_monitor.sim.render import Renderer

        n = cfg.num_envs
        self.sim = CartPoleBatch(n, cfg.obs_size, cfg.act_size, seed=0)
        self.actions = np.zeros((n, cfg.act_size), np.float32)
        self.obs = np.zeros((n, cfg.obs_size), np.float32)
        self.rewards = np.zeros(n, np.float32)
        self.dones = np.zeros(n, np.uint8)
        self.truncateds = np.zeros(n, np.uint8)
        self.renderer = Renderer(n, cfg.image[0], cfg.image[1], 3) if cfg.image else None
        self.images = np.zeros((n, cfg.image[1], cfg.image[0], 3), np.uint8) if cfg.image else None

    def step(self, actions: np.ndarray) -> None:
        sim = self.sim
        np.copyto(self.actions, actions)  # the engine copies the segment's actions the same way
        # exactly the engine's call (obs padding stays zero from the start, as in the segment)
        sim.advance(self.actions, self.obs, self.rewards, self.dones, self.truncateds, clear_tail=False)
        if self.renderer is not None:
            self.renderer.render(sim, self.images)

    def reply(self) -> bytes:
        parts = [self.obs, self.rewards, self.dones, self.truncateds]
        if self.images is not None:
            parts.append(self.images)
        return b"".join(parts)  # one copy, as a serializer would make


def action_batches(cfg: Config, k: int = 8) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 1, (cfg.num_envs, cfg.act_size)).astype(np.float32) for _ in range(k)]


# ---------------------------------------------------------------------------- children
def segment_name(tag: str) -> str:
    return f"LuckyEngine_{tag[:5]}_{secrets.token_hex(6)}"


def image_arg(cfg: Config) -> str:
    return f"{cfg.image[0]}x{cfg.image[1]}" if cfg.image else "none"


# ---------------------------------------------------------------------------- the four ways to step
Stepper = Callable[[np.ndarray], object]


@contextlib.contextmanager
def compute_side(cfg: Config) -> Iterator[Stepper]:
    """The step's work in this process: the floor under both transports."""
    yield Work(cfg).step


@contextlib.contextmanager
def shm_side(cfg: Config, *, noop: bool = False) -> Iterator[Stepper]:
    """The reference engine in a child process, this process as its trainer; ``noop``: the transport alone."""
    from lucky_monitor.sim.trainer import SharedMemoryClient

    name = segment_name("noop" if noop else "shm")
    argv = lucky(
        "sim",
        "--name",
        name,
        "--fast",
        "--camera-fps",
        "0",
        "--envs",
        str(cfg.num_envs),
        "--obs",
        str(cfg.obs_size),
        "--act",
        str(cfg.act_size),
        "--image",
        image_arg(cfg),
        *(["--noop-step"] if noop else []),
    )
    with child(argv) as engine:
        if first_line(engine) != name:
            raise SystemExit("engine announced another segment name")
        with SharedMemoryClient(name, timeout_s=60) as client:
            yield client.step


def serve_grpc(cfg: Config) -> None:
    """The baseline server (run in its own process by ``--serve-grpc``): print the port, serve until killed."""
    import grpc

    work = Work(cfg)
    expected = cfg.bytes_up

    def step(request: bytes, context: grpc.ServicerContext) -> bytes:
        if len(request) != expected:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"expected {expected} bytes of actions")
        work.step(np.frombuffer(request, np.float32).reshape(cfg.num_envs, cfg.act_size))
        return work.reply()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1), options=GRPC_OPTIONS)
    handler = grpc.method_handlers_generic_handler(SERVICE, {METHOD: grpc.unary_unary_rpc_method_handler(step)})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: server.stop(0))
    server.wait_for_termination()


@contextlib.contextmanager
def grpc_side(cfg: Config) -> Iterator[Stepper]:
    """The gRPC baseline server in a child process, this process as its client."""
    import grpc

    argv = [
        sys.executable,
        os.path.abspath(__file__),
        "--serve-grpc",
        "--envs",
        str(cfg.num_envs),
        "--obs",
        str(cfg.obs_size),
        "--act",
        str(cfg.act_size),
        "--image",
        image_arg(cfg),
    ]
    n, obs_n = cfg.num_envs, cfg.num_envs * cfg.obs_size
    with child(argv) as server:
        port = int(first_line(server))
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=GRPC_OPTIONS) as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
            call = channel.unary_unary(f"/{SERVICE}/{METHOD}")  # no serializers: bytes in, bytes out

            def step(a: np.ndarray) -> object:
                reply = call(a.tobytes())
                if len(reply) != cfg.bytes_down:
                    raise SystemExit(f"gRPC reply of {len(reply)} bytes, expected {cfg.bytes_down}")
                # the same numpy views the shm client hands out
                obs = np.frombuffer(reply, np.float32, obs_n).reshape(n, cfg.obs_size)
                rewards = np.frombuffer(reply, np.float32, n, obs_n * 4)
                flags = np.frombuffer(reply, np.uint8, 2 * n, obs_n * 4 + 4 * n)
                return obs, rewards, flags

            yield step


def measure(cfg: Config, steps: int, warmup: int, blocks: int) -> dict[str, list[float]]:
    """Time ``steps`` steps of each side, interleaved in ``blocks`` so load drift hits all four alike."""
    acts = action_batches(cfg)
    with (
        compute_side(cfg) as compute,
        shm_side(cfg) as shm,
        shm_side(cfg, noop=True) as noop,
        grpc_side(cfg) as rpc,
    ):
        sides = {"compute": compute, "shm": shm, "shm_noop": noop, "grpc": rpc}
        for fn in sides.values():
            for i in range(warmup):
                fn(acts[i % len(acts)])
        times: dict[str, list[float]] = {k: [] for k in sides}
        per_block = max(1, steps // blocks)
        for _ in range(blocks):
            for key, fn in sides.items():
                out = times[key]
                fn(acts[0])  # wake the side up (a waiting engine may be napping); not timed
                for i in range(per_block):
                    a = acts[i % len(acts)]
                    t0 = time.perf_counter()
                    fn(a)
                    out.append(time.perf_counter() - t0)
    return times


def steps_for(cfg: Config, wanted: int, budget_s: float) -> int:
    """``wanted`` steps, fewer for heavy configurations (at least 300) so each side takes about ``budget_s``."""
    work, acts = Work(cfg), action_batches(cfg)
    work.step(acts[0])
    t0 = time.perf_counter()
    for a in acts[:3]:
        work.step(a)
    per_step = (time.perf_counter() - t0) / 3
    return max(300, min(wanted, int(budget_s / max(per_step, 1e-6))))


# ---------------------------------------------------------------------------- demo-style CPU use
def bench_demo_cpu(seconds: float) -> dict[str, object]:
    """Engine CPU in the demo setting: realtime 50 Hz, 64 envs, 64x64 images; free-run, then with a trainer."""
    from lucky_monitor.transport.shm import Segment

    name = segment_name("demo")

    def measure(pids: list[int], seg: Segment) -> tuple[list[float | None], float]:
        c0 = [process_cpu_seconds(p) for p in pids]
        f0, t0 = seg.counter("frame_seq"), time.monotonic()
        time.sleep(seconds)
        c1 = [process_cpu_seconds(p) for p in pids]
        dt = time.monotonic() - t0
        rate = (seg.counter("frame_seq") - f0) / dt
        cpu = [None if a is None or b is None else round(100.0 * (b - a) / dt, 1) for a, b in zip(c0, c1, strict=True)]
        return cpu, round(rate, 1)

    with child(lucky("sim", "--name", name, "--envs", "64", "--image", "64x64", "--hz", "50")) as engine:
        first_line(engine)
        with Segment.attach(name) as seg:
            time.sleep(0.5)
            (eng_free,), rate_free = measure([engine.pid], seg)
            with child(lucky("train", "--shm", name, "--quiet")) as trainer:
                first_line(trainer)
                time.sleep(0.5)
                (eng_ls, tr_ls), rate_ls = measure([engine.pid, trainer.pid], seg)
    return {
        "scenario": "demo_cpu",
        "num_envs": 64,
        "image": "64x64x3",
        "hz": 50,
        "seconds": seconds,
        "engine_cpu_percent_free_run": eng_free,
        "frames_per_s_free_run": rate_free,
        "engine_cpu_percent_lock_step": eng_ls,
        "trainer_cpu_percent_lock_step": tr_ls,
        "frames_per_s_lock_step": rate_ls,
    }


# ---------------------------------------------------------------------------- main
def parse_config(args: argparse.Namespace) -> Config:
    image = None if args.image == "none" else tuple(int(v) for v in args.image.split("x"))
    return Config(args.envs, args.obs, args.act, image)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="300 timed steps, the two main configurations")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="timed steps per configuration (default: 300 quick; 3000 full, fewer for heavy ones)",
    )
    p.add_argument("--no-demo", action="store_true", help="skip the demo CPU measurement")
    p.add_argument("--serve-grpc", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--envs", type=int, default=4096, help=argparse.SUPPRESS)
    p.add_argument("--obs", type=int, default=100, help=argparse.SUPPRESS)
    p.add_argument("--act", type=int, default=12, help=argparse.SUPPRESS)
    p.add_argument("--image", default="none", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_grpc:
        serve_grpc(parse_config(args))
        return 0
    configs = QUICK if args.quick else FULL
    wanted = args.steps or (300 if args.quick else 3000)
    facts = machine_facts()
    for cfg in configs:
        steps = wanted if args.quick or args.steps else steps_for(cfg, wanted, budget_s=15.0)
        times = measure(cfg, steps, warmup=max(20, steps // 10), blocks=10)
        figures: dict[str, object] = {
            "benchmark": "step_latency",
            "mode": "quick" if args.quick else "full",
            "num_envs": cfg.num_envs,
            "obs_size": cfg.obs_size,
            "act_size": cfg.act_size,
            "image": cfg.image_label,
            "steps": len(times["shm"]),
            "bytes_up": cfg.bytes_up,
            "bytes_down": cfg.bytes_down,
            **summarize_us(times["shm"], "shm"),
            **summarize_us(times["shm_noop"], "shm_noop"),
            **summarize_us(times["grpc"], "grpc"),
            **summarize_us(times["compute"], "compute"),
        }
        shm, work = figures["shm_median_us"], figures["compute_median_us"]
        figures["speedup"] = round(figures["grpc_median_us"] / shm, 2)  # type: ignore[operator]
        figures["shm_over_work_us"] = round(shm - work, 1)  # type: ignore[operator]
        emit(figures, facts={**facts, "load_average": machine_facts()["load_average"]})
    if not args.no_demo:
        emit(
            {"benchmark": "step_latency", **bench_demo_cpu(3.0 if args.quick else 10.0)},
            facts={**facts, "load_average": machine_facts()["load_average"]},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
