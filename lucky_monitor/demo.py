"""``lucky-monitor demo``: reference engine + reference trainer + the monitor window.

The engine and the trainer run as child processes in their own process
groups (so a Ctrl-C in the terminal reaches only this process, which then
stops them in order). Until the window exists, and for the whole run with
``--headless`` or without a display, one status line per second goes to the
terminal. On any exit the children are stopped and no segment is left
behind.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import threading
import time

from .core.monitor import MonitorCore
from .protocol.errors import LuckyMonitorError
from .sim.run import StopFlag, spawn, stop_children
from .transport.shm import shm_path


class DemoError(LuckyMonitorError):
    pass


def sim_argv(args: argparse.Namespace) -> list[str]:
    """The ``sim`` arguments equivalent to the demo's parsed options."""
    out = ["sim", "--envs", str(args.envs), "--obs", str(args.obs), "--act", str(args.act),
           "--image", args.image, "--seed", str(args.seed), "--camera-fps", str(args.camera_fps)]
    if args.name:
        out += ["--name", args.name]
    if args.format:
        out += ["--format", args.format]
    if args.bottom_up:
        out.append("--bottom-up")
    if args.fast:
        out.append("--fast")
    else:
        out += ["--hz", str(args.hz)]
    if args.deterministic:
        out.append("--deterministic")
    if args.no_tools:
        out.append("--no-tools")
    return out


def _pump(child, prefix: str, lines: queue.Queue[str], echo: bool) -> None:
    """Forward a child's output (so its pipe never fills), first lines also to a queue."""
    assert child.stdout is not None
    for line in child.stdout:
        lines.put(line.rstrip("\n"))
        if echo:
            print(f"[{prefix}] {line.rstrip()}", flush=True)


def status_line(core: MonitorCore) -> str:
    st = core.status
    r = core.rates
    text = f"{st.name or '-'}  {st.text}"
    if st.reason:
        text += f" ({st.reason})"
    if core.header is not None:
        text += f"  {r.frames_per_s:7.1f} frames/s  {r.images_per_s:5.1f} images/s"
        share = r.engine_share
        if share is not None:
            text += f"  turn: engine {share:4.0%} / trainer {1 - share:4.0%}"
    return text


def run_demo(args: argparse.Namespace) -> int:
    flag = StopFlag()
    children = []
    name = None
    try:
        sim = spawn(sim_argv(args))
        children.append(sim)
        sim_lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_pump, args=(sim, "sim", sim_lines, False), daemon=True).start()
        try:
            name = sim_lines.get(timeout=20)
        except queue.Empty:
            raise DemoError("the reference engine did not start within 20 s") from None
        if sim.poll() is not None or not name.startswith(("LuckyEngine", args.name or "LuckyEngine")):
            rest = [name] + [sim_lines.get_nowait() for _ in range(sim_lines.qsize())]
            raise DemoError(f"the reference engine failed: {' '.join(rest)[-300:]}")
        print(f"engine pid {sim.pid} serves {name}", flush=True)
        if not args.no_trainer:
            trainer = spawn(["train", "--shm", name, "--policy", args.policy, "--quiet"])
            children.append(trainer)
            threading.Thread(target=_pump, args=(trainer, "train", queue.Queue(), True), daemon=True).start()
            print(f"trainer pid {trainer.pid} drives it in lock-step ({args.policy} policy)", flush=True)

        from .ui.app import DisplayError, check_display, run_window

        if args.headless:
            return _status_loop(name, flag, args.quit_after)
        try:
            check_display(bool(args.screenshot))
        except DisplayError as exc:
            print(f"{exc}\nno window: status lines only", flush=True)
            return _status_loop(name, flag, args.quit_after)
        print("opening the monitor window", flush=True)
        flag.restore()  # the window installs its own Ctrl-C handling

        args.shm = name
        return run_window(args)
    finally:
        flag.restore()
        stop_children(children[::-1])  # the trainer first, so it never sees its engine vanish
        if name:
            with contextlib.suppress(FileNotFoundError, ValueError, LuckyMonitorError):
                # The engine unlinks on SIGTERM; if it could not (killed), remove its stale file.
                os.unlink(shm_path(name))
        print("demo stopped; engine and trainer exited, segment removed", flush=True)


def _status_loop(name: str, flag: StopFlag, quit_after: float | None) -> int:
    core = MonitorCore(name)
    t_end = None if quit_after is None else time.monotonic() + quit_after
    next_line = 0.0
    try:
        while not flag():
            core.poll()
            now = time.monotonic()
            if now >= next_line:
                print(status_line(core), flush=True)
                next_line = now + 1.0
            if t_end is not None and now >= t_end:
                break
            time.sleep(1 / 60)
    finally:
        core.close()
    return 0
