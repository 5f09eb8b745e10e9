"""Process-level runners behind ``lucky-monitor sim``, ``train`` and ``demo`` (Qt-free parts).

Each runner installs SIGINT/SIGTERM handlers that only set a flag, so the
loops end cleanly: the engine announces ``engine_state = 3`` and unlinks its
segment, the trainer releases ``client_pid``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import typing
from collections.abc import Callable

import numpy as np

from ..core.argtypes import plain_float, plain_int
from ..core.outputs import check_output_path
from ..protocol import messages as m
from ..protocol.enums import ImageFormat, SimMode
from ..protocol.errors import CommandTimeout, RemoteError, UsageError
from ..protocol.header import MAX_ENVS, MAX_IMAGE_SIDE, MAX_VEC
from .engine import FORMATS, MISBEHAVIOURS, EngineConfig, ReferenceEngine, plan_segment
from .physics import MIN_OBS_SIZE
from .trainer import PDPolicy, RandomPolicy, SharedMemoryClient

#: ``--hz`` range: a step every 10 s at the slowest (slower than 1 Hz fails C43's 1 s probe, by design).
MIN_HZ = 0.1
MAX_HZ = 100_000.0

__all__ = ["StopFlag", "UsageError", "config_from_args", "run_sim", "run_train", "spawn", "stop_children"]


class StopFlag:
    """Set by SIGINT/SIGTERM; restores the previous handlers on :meth:`restore`.

    Attributes
    ----------
    stop : bool
        A signal arrived.
    signum : int or None
        The first signal that arrived.
    """

    def __init__(self) -> None:
        self.stop = False
        self.signum: int | None = None
        self._old: dict[int, object] = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handler)

    def _handler(self, signum: int, frame: object) -> None:
        if self.signum is None:
            self.signum = signum
        self.stop = True

    def describe(self) -> str:
        """How the run was stopped, in words: ``"Ctrl-C (SIGINT)"``, ``"SIGTERM"``; ``""`` if not."""
        if self.signum is None:
            return ""
        if self.signum == signal.SIGINT:
            return "Ctrl-C (SIGINT)"
        return signal.Signals(self.signum).name

    def __call__(self) -> bool:
        return self.stop

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)  # type: ignore[arg-type]


def parse_image(text: str, fmt: str) -> tuple[int, int] | None:
    """``WxH`` or ``WxHxC`` (C must agree with the format) or ``none``."""
    if text.lower() in ("none", "off", "0"):
        return None
    mt = re.fullmatch(r"([0-9]{1,5})x([0-9]{1,5})(?:x([0-9]))?", text.strip().lower())  # ASCII digits only
    if not mt:
        raise UsageError(f"--image {text!r}: expected WxH or WxHxC, e.g. 64x64 or 64x64x3, or 'none'")
    w, h = int(mt[1]), int(mt[2])
    if not (1 <= w <= MAX_IMAGE_SIDE and 1 <= h <= MAX_IMAGE_SIDE):
        raise UsageError(f"--image {text!r}: width and height must be 1..{MAX_IMAGE_SIDE}")
    need = ImageFormat.from_label(fmt).channels
    if mt[3] is not None and int(mt[3]) != need:
        raise UsageError(
            f"--image {text!r}: {mt[3]} channel{'s' * (int(mt[3]) != 1)} contradicts --format {fmt} "
            f"({need} channel{'s' * (need != 1)})"
        )
    return w, h


def format_for_channels(channels: int) -> str:
    fmt = ImageFormat.for_channels(channels)
    if fmt is None:
        raise KeyError(channels)
    return fmt.label


def add_sim_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", help="segment name, at most 30 characters (default LuckyEngine_<pid>, or $LUCKY_SHM_NAME)")
    p.add_argument("--envs", type=plain_int, default=64, help=f"number of envs (1..{MAX_ENVS}, default 64)")
    p.add_argument(
        "--obs", type=plain_int, default=16, help=f"floats per observation ({MIN_OBS_SIZE}..{MAX_VEC}, default 16)"
    )
    p.add_argument("--act", type=plain_int, default=4, help=f"floats per action (1..{MAX_VEC}, default 4)")
    p.add_argument("--image", default="64x64", help="per-env image WxH[xC], or 'none' (default 64x64)")
    p.add_argument(
        "--format",
        choices=sorted(FORMATS),
        default=None,
        help="channel order in the image region (default rgb, or by C of --image)",
    )
    p.add_argument("--bottom-up", action="store_true", help="store image rows bottom-up (image_flags bit 0)")
    rate = p.add_mutually_exclusive_group()
    rate.add_argument(
        "--hz",
        type=plain_float,
        default=50.0,
        help=f"steps per second in realtime/free-run, {MIN_HZ:g} to {MAX_HZ:g} (default 50)",
    )
    rate.add_argument("--fast", action="store_true", help="start in fast mode: never wait for the clock")
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="start in deterministic mode: step as soon as the trainer hands over",
    )
    p.add_argument("--seed", type=plain_int, default=0, help="randomisation seed (default 0)")
    p.add_argument(
        "--camera-fps", type=plain_float, default=60.0, help="image publications per second (0 = every step)"
    )
    p.add_argument("--no-tools", action="store_true", help="export no tools channel (monitors stay read-only)")
    p.add_argument(
        "--gpu-obs",
        action="store_true",
        help="observations in CUDA memory, shared by an IPC handle in the header (needs lucky-monitor[gpu])",
    )
    p.add_argument("--gpu-device", type=plain_int, default=0, help="CUDA device of --gpu-obs (default 0)")
    p.add_argument(
        "--steps", type=plain_int, default=None, help="stop after this many steps (default: run until signalled)"
    )


def add_sim_stats_argument(p: argparse.ArgumentParser) -> None:
    """``sim --stats-json PATH``: at exit, the engine's own counts (``benchmarks/soak.py`` compares the tap's)."""
    p.add_argument(
        "--stats-json",
        metavar="PATH",
        default=None,
        help="at exit, write the steps and the ring entries taken and written (one JSON object) to PATH",
    )


def add_noop_step_argument(p: argparse.ArgumentParser) -> None:
    """``sim --noop-step`` (hidden): steps publish a frame without physics, obs or images.

    For ``benchmarks/step_latency.py``, which times the transport alone with it.
    """
    p.add_argument("--noop-step", action="store_true", help=argparse.SUPPRESS)


def add_misbehave_argument(p: argparse.ArgumentParser) -> None:
    """``sim --misbehave KIND`` (hidden, repeatable; tests only): the engine breaks one conformance rule.

    The kinds are :data:`~lucky_monitor.sim.engine.MISBEHAVIOURS`; ``tests/core/test_probe.py``
    shows each one failing its rule of ``lucky-monitor check --live``.
    """
    p.add_argument("--misbehave", action="append", default=[], metavar="KIND", help=argparse.SUPPRESS)


def _check_range(option: str, value: int, low: int, high: int, what: str) -> None:
    if not low <= value <= high:
        raise UsageError(f"{option} {value}: {what} must be {low}..{high}")


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    """The engine configuration of ``sim`` options, every value checked.

    The segment it asks for is planned and its size checked too, so a
    configuration that returns can be created (as far as can be known before).

    Raises
    ------
    UsageError
        An option is out of range; the message names the option.
    SegmentTooLarge
        The segment would be over the size limit or the free shared memory.
    """
    fmt = args.format
    if fmt is None:
        mt = re.fullmatch(r"[0-9]+x[0-9]+x([0-9])", args.image.strip().lower())
        fmt = format_for_channels(int(mt[1])) if mt and int(mt[1]) in (1, 3, 4) else "rgb"
    _check_range("--envs", args.envs, 1, MAX_ENVS, "the number of envs")
    _check_range("--obs", args.obs, MIN_OBS_SIZE, MAX_VEC, "floats per observation")
    _check_range("--act", args.act, 1, MAX_VEC, "floats per action")
    _check_range("--seed", args.seed, 0, 2**64 - 1, "the seed")
    if args.steps is not None and args.steps < 0:
        raise UsageError(f"--steps {args.steps}: must be 0 or more")
    if not MIN_HZ <= args.hz <= MAX_HZ:
        raise UsageError(f"--hz {args.hz:g}: steps per second must be {MIN_HZ:g} to {MAX_HZ:g}")
    bad = sorted(set(getattr(args, "misbehave", ())) - set(MISBEHAVIOURS))
    if bad:
        raise UsageError(f"--misbehave {bad[0]}: unknown; choose from {', '.join(MISBEHAVIOURS)}")
    if not (args.camera_fps >= 0 and math.isfinite(args.camera_fps)):
        raise UsageError(
            f"--camera-fps {args.camera_fps:g}: must be 0 (every step) or a positive number of images a second"
        )
    mode = SimMode.FAST if args.fast else (SimMode.DETERMINISTIC if args.deterministic else SimMode.REALTIME)
    cfg = EngineConfig(
        name=args.name or os.environ.get("LUCKY_SHM_NAME") or None,
        num_envs=args.envs,
        obs_size=args.obs,
        act_size=args.act,
        image=parse_image(args.image, fmt),
        fmt=fmt,
        bottom_up=args.bottom_up,
        hz=args.hz,
        sim_mode=mode,
        seed=args.seed,
        camera_fps=args.camera_fps,
        tools_ring_size=0 if args.no_tools else 64 * 1024,
        noop_step=getattr(args, "noop_step", False),
        misbehave=frozenset(getattr(args, "misbehave", ())),
        gpu_obs=bool(getattr(args, "gpu_obs", False)),
        gpu_device=int(getattr(args, "gpu_device", 0)),
    )
    if cfg.gpu_obs:
        _check_range("--gpu-device", cfg.gpu_device, 0, 2**32 - 1, "the CUDA device id")
    plan_segment(cfg)  # the size check, before anything is allocated
    return cfg


def run_sim(args: argparse.Namespace, *, announce: Callable[[str], None] | None = None) -> int:
    """``lucky-monitor sim``: create the segment, print its name, serve until signalled."""
    cfg = config_from_args(args)
    stats_path = getattr(args, "stats_json", None)
    if stats_path is not None:  # refused before the segment exists
        check_output_path(stats_path, "--stats-json", "sim.json")
    flag = StopFlag()
    die_with_parent()
    try:
        engine = ReferenceEngine(cfg)
        try:
            (announce or (lambda s: print(s, flush=True)))(engine.name)
            engine.run(flag, max_steps=args.steps)
        finally:
            if stats_path is not None:
                _write_stats(stats_path, engine)
            engine.close()
    finally:
        flag.restore()
    return 0


def _write_stats(path: str, engine: ReferenceEngine) -> None:
    """``sim --stats-json``: steps, frames and the ring entries taken and written (``message_counts``)."""
    out = {
        "steps": engine.steps,
        "frame_seq": engine.seg.counter("frame_seq"),
        "image_seq": engine.seg.counter("image_seq"),
        "messages": engine.message_counts(),
        "dropped_pushes": {p.name: p.dropped_pushes for p in engine.pairs},
    }
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out, f)
        f.write("\n")
    os.replace(tmp, path)


def choose_policy(name: str, obs_size: int, act_size: int, seed: int = 0) -> tuple[PDPolicy | RandomPolicy, str | None]:
    """The trainer's policy ``name`` for an engine of these sizes, and a note when another one steps instead.

    ``pd`` reads the reference cart-pole's observations; an engine with fewer (any engine may be
    certified with this trainer) is stepped with ``random``.
    """
    if name == "pd" and obs_size < PDPolicy.OBS_NEEDED:
        note = (
            f"policy pd reads the reference cart-pole's {PDPolicy.OBS_NEEDED} observations and this engine "
            f"has {obs_size}: stepping with --policy random instead"
        )
        return RandomPolicy(act_size, seed), note
    return (PDPolicy(act_size) if name == "pd" else RandomPolicy(act_size, seed)), None


def run_train(args: argparse.Namespace) -> int:
    """``lucky-monitor train``: step the engine with a policy, print progress once a second."""
    flag = StopFlag()
    die_with_parent()
    try:
        client = SharedMemoryClient(
            args.shm, timeout_s=args.timeout, allow_other_user=getattr(args, "allow_other_user", False)
        )
        try:
            sizes = f"{client.num_envs} envs, obs {client.obs_size}, act {client.act_size}"
            if client.service_enabled(m.MethodId.GetAgentSchemaReq):
                try:
                    schema = client.get_schema()
                except (RemoteError, CommandTimeout) as exc:  # every service is optional (LAYOUT §10.2)
                    sizes += f" ({exc}; sizes from the header)"
                else:
                    sizes = f"{schema.num_envs} envs, obs {schema.observation_size}, act {schema.action_size}"
            else:
                sizes += " (the Agent service is off: sizes from the header)"
            print(f"trainer pid {os.getpid()} attached to {args.shm}: {sizes}", flush=True)
            policy, note = choose_policy(args.policy, client.obs_size, client.act_size, args.seed)
            if note:
                print(note, flush=True)
            ask_joints = True
            obs = client.observe().obs
            t_report = time.monotonic()
            steps_at_report = 0
            ret = np.zeros(client.num_envs)
            while not flag() and (args.steps is None or client.steps < args.steps):
                res = client.step(policy(obs))
                obs = res.obs
                ret += res.rewards
                now = time.monotonic()
                if now - t_report >= 1.0:
                    # Once a second, like a real training loop's logging: read one env's
                    # joint state over the command ring (traffic a monitor can see), where the engine offers it.
                    q = ""
                    if ask_joints and client.service_enabled(m.MethodId.GetJointStateReq):
                        try:
                            joints = typing.cast(
                                m.GetJointStateResp,
                                client.request(m.MethodId.GetJointStateReq, m.GetJointStateReq(env_id=0)).payload,
                            )
                        except (RemoteError, CommandTimeout) as exc:
                            ask_joints = False  # an engine without it: stepping is what the trainer is for
                            print(f"{exc}; not asked again", flush=True)
                        else:
                            q = f"  env 0 q {', '.join(f'{v:+.2f}' for v in joints.positions)}"
                    if not args.quiet:
                        rate = (client.steps - steps_at_report) / (now - t_report)
                        print(
                            f"step {client.steps}  {rate:7.0f} steps/s  mean reward {float(res.rewards.mean()):+.3f}  "
                            f"dones {int(res.dones.sum())}{q}",
                            flush=True,
                        )
                    t_report, steps_at_report = now, client.steps
            if flag():
                print(f"trainer stopped by {flag.describe()} after {client.steps} steps", flush=True)
            else:
                print(f"trainer done after {client.steps} steps", flush=True)
        finally:
            client.close()
    finally:
        flag.restore()
    return 0


PARENT_ENV = "LUCKY_MONITOR_PARENT_PID"


def spawn(args: list[str]) -> subprocess.Popen:
    """Start ``python -m lucky_monitor ARGS`` as a child in its own process group.

    The child is told its parent's pid (``LUCKY_MONITOR_PARENT_PID``) and asks
    the kernel for SIGTERM when that parent dies (:func:`die_with_parent`), so
    even a parent killed outright leaves no engine or trainer behind.
    """
    env = dict(os.environ, **{PARENT_ENV: str(os.getpid())})
    return subprocess.Popen(
        [sys.executable, "-m", "lucky_monitor", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    )


def die_with_parent() -> None:
    """In a child started by :func:`spawn`: get SIGTERM when the parent dies (Linux).

    Elsewhere, or when not started by :func:`spawn`, this does nothing.
    """
    want = os.environ.get(PARENT_ENV)
    if not want or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    if str(os.getppid()) != want:  # the parent is already gone
        os.kill(os.getpid(), signal.SIGTERM)


def stop_children(children: list[subprocess.Popen], timeout: float = 5.0) -> None:
    """Stop children one after another, in the given order: SIGTERM, wait, then SIGKILL."""
    for c in children:
        if c.poll() is None:
            c.send_signal(signal.SIGTERM)
        try:
            c.wait(timeout)
        except subprocess.TimeoutExpired:
            c.kill()
            c.wait()
