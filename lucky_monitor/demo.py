"""``lucky-monitor demo``: reference engine + reference trainer + the monitor window.

The engine and the trainer run as child processes in their own process
groups (so a Ctrl-C in the terminal reaches only this process, which then
stops them in order). Until the window exists, and for the whole run with
``--headless`` or without a display, one status line per second goes to the
terminal. On any exit the children are stopped and no segment is left
behind. A child that exits on its own is reaped at once (no zombie) and
reported in one line.

The options are checked here, before any child starts, so a bad value
gives the one error line ``sim`` would give and nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import signal
import subprocess
import threading
import time

from .core.session import MonitorSession, Tick
from .protocol.errors import EXIT_CODES, EXIT_FAILED, EXIT_UNAVAILABLE, LuckyMonitorError, UsageError
from .sim.run import StopFlag, config_from_args, spawn, stop_children
from .transport.shm import shm_path

ERROR_PREFIX = "lucky-monitor: error: "


class DemoError(LuckyMonitorError):
    """A child of the demo failed to start.

    Parameters
    ----------
    message
        What went wrong, without the ``lucky-monitor: error:`` prefix.
    exit_code
        The exit code to end the demo with (the child's own where it is one of
        :data:`~lucky_monitor.protocol.errors.EXIT_CODES`).
    """

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def exit_text(code: int) -> str:
    """A child's return code in words: ``"code 5"`` or ``"signal SIGKILL"``."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


class _Child:
    """A spawned child: its output forwarded, and reaped the moment it exits.

    A thread reads the child's output until it closes (so the pipe never
    fills), then waits for the child, which reaps it at once. If the demo has
    announced the child (:attr:`running`) and is not stopping, one line says
    which child exited and how.
    """

    def __init__(self, what: str, popen: subprocess.Popen[str], *, echo: bool, stopping: threading.Event) -> None:
        self.what = what
        self.popen = popen
        self.lines: queue.Queue[str] = queue.Queue()
        self.last_line = ""
        self.running = False
        self._echo = echo
        self._stopping = stopping
        self._thread = threading.Thread(target=self._pump, name=f"demo-{what}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.popen.stdout is not None
        prefix = "sim" if self.what == "engine" else "train"
        for raw in self.popen.stdout:
            line = raw.rstrip("\n")
            self.lines.put(line)
            if line.strip():
                self.last_line = line.strip()
            if self._echo:
                print(f"[{prefix}] {line.rstrip()}", flush=True)
        code = self.popen.wait()
        if self.running and not self._stopping.is_set():
            said = self.last_line
            detail = f": {said.removeprefix(ERROR_PREFIX)}" if code and said.startswith(ERROR_PREFIX) else ""
            print(f"[demo] the {self.what} (pid {self.popen.pid}) exited with {exit_text(code)}{detail}", flush=True)

    def failure(self, first_line: str) -> DemoError:
        """The error of a child that exited before it was ready, from its own output."""
        self._thread.join(5)  # all its output read, and the child reaped
        rest = [first_line] + [self.lines.get_nowait() for _ in range(self.lines.qsize())]
        errors = [ln.removeprefix(ERROR_PREFIX) for ln in rest if ln.startswith(ERROR_PREFIX)]
        text = " ".join(errors or [ln.strip() for ln in rest if ln.strip()])[-300:] or "no output"
        code = self.popen.returncode
        return DemoError(
            f"the reference {self.what} failed: {text}", code if code in EXIT_CODES and code else EXIT_FAILED
        )


def sim_argv(args: argparse.Namespace) -> list[str]:
    """The ``sim`` arguments equivalent to the demo's parsed options."""
    out = [
        "sim",
        "--envs",
        str(args.envs),
        "--obs",
        str(args.obs),
        "--act",
        str(args.act),
        "--image",
        args.image,
        "--seed",
        str(args.seed),
        "--camera-fps",
        str(args.camera_fps),
    ]
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


def status_line(tick: Tick) -> str:
    """One terminal line for a Tick: segment, state, rates and the lock-step turn split."""
    text = f"{tick.name or '-'}  {tick.text}"
    if tick.reason:
        text += f" ({tick.reason})"
    if tick.header is not None:
        r = tick.rates
        fps = "—" if r.frames_per_s is None else f"{r.frames_per_s:.1f}"
        ips = "—" if r.images_per_s is None else f"{r.images_per_s:.1f}"
        text += f"  {fps:>7} frames/s  {ips:>5} images/s"
        share = tick.engine_share
        if share is not None:
            text += f"  turn: engine {share:4.0%} / trainer {1 - share:4.0%}"
    return text


def check_demo_args(args: argparse.Namespace) -> None:
    """Every check that can fail before a child starts: sim options, segment size, window options.

    Raises
    ------
    UsageError
        An option is out of range or contradicts another (as ``sim`` would say).
    SegmentTooLarge
        The segment would be over the size limit or the free shared memory.
    """
    config_from_args(args)
    if args.screenshot and not args.quit_after:
        raise UsageError("--screenshot needs --quit-after SECONDS")
    if args.headless:
        for option, value in (("--screenshot", args.screenshot), ("--stats-json", getattr(args, "stats_json", None))):
            if value:
                raise UsageError(f"{option} describes the window, and --headless opens none")
    if args.screenshot and not args.headless:
        from .ui.app import check_screenshot_path  # Qt-free until a window opens

        check_screenshot_path(args.screenshot)
    if getattr(args, "stats_json", None) and not args.headless:
        from .ui.app import check_output_path

        check_output_path(args.stats_json, "--stats-json")


def run_demo(args: argparse.Namespace) -> int:
    check_demo_args(args)
    stopping = threading.Event()
    flag = StopFlag()
    children: list[_Child] = []
    name = None
    try:
        sim = _Child("engine", spawn(sim_argv(args)), echo=False, stopping=stopping)
        children.append(sim)
        try:
            name = sim.lines.get(timeout=20)
        except queue.Empty:
            raise DemoError("the reference engine did not start within 20 s", EXIT_UNAVAILABLE) from None
        if sim.popen.poll() is not None or not name.startswith(("LuckyEngine", args.name or "LuckyEngine")):
            failed, name = name, None
            raise sim.failure(failed)
        sim.running = True
        print(f"engine pid {sim.popen.pid} serves {name}", flush=True)
        if not args.no_trainer:
            trainer = _Child(
                "trainer",
                spawn(["train", "--shm", name, "--policy", args.policy, "--quiet"]),
                echo=True,
                stopping=stopping,
            )
            trainer.running = True
            children.append(trainer)
            print(f"trainer pid {trainer.popen.pid} drives it in lock-step ({args.policy} policy)", flush=True)

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
        stopping.set()
        flag.restore()
        stop_children([c.popen for c in children[::-1]])  # the trainer first, so it never sees its engine vanish
        if name:
            with contextlib.suppress(FileNotFoundError, ValueError, LuckyMonitorError):
                # The engine unlinks on SIGTERM; if it could not (killed), remove its stale file.
                os.unlink(shm_path(name))
            print("demo stopped; engine and trainer exited, segment removed", flush=True)


def _status_loop(name: str, flag: StopFlag, quit_after: float | None) -> int:
    session = MonitorSession(name, tools=False, images=False, discover=False, traffic=False)
    t_end = None if quit_after is None else time.monotonic() + quit_after
    next_line = 0.0
    try:
        while not flag():
            now = time.monotonic()
            tick = session.step(now)
            if now >= next_line:
                print(status_line(tick), flush=True)
                next_line = now + 1.0
            if t_end is not None and now >= t_end:
                break
            time.sleep(1 / 60)
    finally:
        session.close()
    return 0
