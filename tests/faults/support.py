"""Helpers of the fault suite: child processes driven line by line, and waiting for states.

A monitor that could die of SIGBUS (a segment that shrinks under it) runs in
its own process, :data:`MONITOR`, so that a crash shows as its exit status
instead of killing the test run. It answers every command on stdin with one
JSON line describing its latest :class:`~lucky_monitor.core.session.Tick`:

* ``poll N``: step N times, then report (a fault injected between two
  commands lands between two polls);
* ``run S``: step at ~60 Hz for S seconds, then report;
* ``free``: step at ~60 Hz until the next command (answered at once);
* ``report``: report the latest tick without stepping;
* ``draw``: send one debug line through the tools channel, then report;
* EOF: close the session, print ``closed``, exit 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from lucky_monitor.core.session import MonitorSession, Tick
from lucky_monitor.sim.engine import ReferenceEngine
from lucky_monitor.transport.shm import shm_path

MONITOR = r"""
import json, select, sys, time
from lucky_monitor.core.session import MonitorSession

opts = json.loads(sys.argv[1])
s = MonitorSession(opts["name"], discover=False, stall_after=opts.get("stall_after", 60.0),
                   command_timeout_s=1.0, tools=opts.get("tools", True))
s.CLAIM_RETRY_S = 0.05
s._link.RETRY_S = 0.05
s._link.PID_CHECK_S = 0.1
t = s.step()

def report(t):
    h = t.header
    ts = t.traffic_stats
    out = {
        "pid": __import__("os").getpid(), "state": t.state.value, "text": t.text, "reason": t.reason,
        "generation": t.generation, "session_id": h.session_id if h else None,
        "num_envs": h.num_envs if h else None,
        "image_shape": [h.image_height, h.image_width, h.image_channels] if h and h.has_images else None,
        "image_channels": t.image.layout.channels if t.image else None,
        "image_seq": t.image.image_seq if t.image else None,
        "frames_seen": t.counters.frames_seen, "images_copied": t.counters.images_copied,
        "torn_images": t.counters.torn_images,
        "tools_ours": t.tools.ours, "tools_owner": t.tools.owner_pid, "tools_reason": t.tools.reason,
        "traffic_total": ts.total, "traffic_messages": ts.messages, "results": [r.text for r in t.results],
    }
    print(json.dumps(out), flush=True)

def run(seconds):
    global t
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = s.step()
        time.sleep(1 / 60)

free = False
while True:
    if free:
        ready, _, _ = select.select([sys.stdin], [], [], 1 / 60)
        if not ready:
            t = s.step()
            continue
    line = sys.stdin.readline()
    if not line:
        break
    cmd, *arg = line.split()
    free = False
    if cmd == "poll":
        for _ in range(int(arg[0])):
            t = s.step()
    elif cmd == "run":
        run(float(arg[0]))
    elif cmd == "free":
        free = True
    elif cmd == "draw":
        s.draw("line", start=(0, 0, 0), end=(1, 1, 1))
    report(t)
s.close()
print("closed", flush=True)
"""


class Child:
    """A child process spoken to in lines: ``ask`` writes one line and reads one back."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.pid = self.proc.pid

    def readline(self, timeout: float = 30.0) -> str:
        out = self.proc.stdout
        assert out is not None
        ready, _, _ = select.select([out], [], [], timeout)
        line = out.readline() if ready else ""
        if not line:
            raise AssertionError(f"child {self.pid} said nothing (exit {self.proc.poll()}): {self.stderr_tail()}")
        return line.strip()

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def ask(self, line: str, timeout: float = 30.0) -> str:
        self.send(line)
        return self.readline(timeout)

    def stderr_tail(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read()[-3000:]

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def finish(self, timeout: float = 20.0) -> int:
        """Close stdin and wait; returns the exit status."""
        with contextlib.suppress(BrokenPipeError, OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


class Monitor(Child):
    """:data:`MONITOR` in its own process; :meth:`tick` returns its report as a dict."""

    def __init__(self, name: str, env: dict[str, str], **opts: Any) -> None:
        super().__init__([sys.executable, "-X", "faulthandler", "-c", MONITOR, json.dumps({"name": name, **opts})], env)

    def tick(self, cmd: str = "report", timeout: float = 30.0) -> dict[str, Any]:
        line = self.ask(cmd, timeout)
        try:
            rep: dict[str, Any] = json.loads(line)
        except ValueError:
            raise AssertionError(f"monitor said {line!r}") from None
        return rep

    def wait_for(self, until: Callable[[dict[str, Any]], bool], what: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            rep = self.tick("poll 3")
            if until(rep):
                return rep
            if time.monotonic() > deadline:
                raise AssertionError(f"monitor gave up waiting for {what}: {rep}")
            time.sleep(0.02)

    def close_cleanly(self) -> None:
        assert self.finish() == 0, self.stderr_tail()


def wait(
    session: MonitorSession,
    until: Callable[[Tick], bool],
    what: str,
    *,
    engines: Iterable[ReferenceEngine] = (),
    timeout: float = 30.0,
    seen: list[Tick] | None = None,
) -> Tick:
    """Step ``engines`` and ``session`` alternately until ``until(tick)``; keep every tick in ``seen``."""
    engines = list(engines)
    deadline = time.monotonic() + timeout
    while True:
        for eng in engines:
            if not eng.seg.closed:
                eng.tick()
        tick = session.step()
        if seen is not None:
            seen.append(tick)
        if until(tick):
            return tick
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}: {tick.state} {tick.text!r} {tick.reason!r}")
        if not engines:
            time.sleep(0.005)


def sim(name: str, env: dict[str, str], *args: str) -> Child:
    """``lucky-monitor sim --name NAME ARGS``, started and announced."""
    child = Child([sys.executable, "-m", "lucky_monitor", "sim", "--name", name, *args], env)
    try:
        assert child.readline(60) == name
    except BaseException:
        child.kill()
        raise
    return child


def remove(name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(shm_path(name))
