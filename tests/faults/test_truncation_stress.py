"""Truncations at random moments of a tick never kill a monitor that steps as fast as it can.

The monitor runs in its own process, so a SIGBUS shows as its exit status
(death by signal) instead of killing the test run. It holds the tools channel,
sends a debug draw on every other step, and forces every read path on every
step: the hot arrays, the image region (1024 envs, shown at ``step`` 5, so
the downscaling path is the one copying), the ring taps and the tools ring.
It steps without pausing, so a truncation from this process lands at a random
moment of a step, most often inside a copy of the image region.

Each round the test publishes a fresh segment under the name (server pid:
this process), waits until the monitor has attached to it and claimed its
tools channel, waits a random 0-20 ms, and then, at random:

* shrinks the file to 0 bytes, to 4096 (the header alone), to half its size,
  or to just past the start of the tools region (``ftruncate``);
* opens it with ``O_TRUNC`` (same inode: the bytes are gone) and, half of the
  time, writes it back to its full size as zeros, as a hostile engine
  rewriting a segment in place would.

The monitor must survive every round, notice each one, and exit 0 at the end.
``LUCKY_STRESS_ROUNDS`` sets the number of rounds (default 200; the README's
figure comes from a longer run).
"""

from __future__ import annotations

import json
import os
import random
import secrets
import select
import signal
import subprocess
import sys
import time

import pytest

from lucky_monitor.protocol.header import plan
from lucky_monitor.transport.shm import EngineSegment, platform_kind, shm_path
from tests.conftest import unique_segment_name

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(platform_kind() != "dir", reason="truncates a file under /dev/shm"),
]

ROUNDS = int(os.environ.get("LUCKY_STRESS_ROUNDS", "200"))

MONITOR = r"""
import json, os, select, sys
from lucky_monitor.core.session import MonitorSession, ViewRequest

s = MonitorSession(sys.argv[1], discover=False, command_timeout_s=0.2)
s.CLAIM_RETRY_S = 0.0
s._link.RETRY_S = 0.0
s._link.PID_CHECK_S = 0.0
s.set_view(ViewRequest(0.0, 0.0, 1e6, 1e6, 0.2))  # tiles shown at a fifth of their size: step 5
steps = lost = sampled = 0
last = None
while True:
    if steps % 16 == 0 and select.select([sys.stdin], [], [], 0)[0]:
        break
    att = s._link._att
    if att is not None:
        att.last_frame = 0  # copy the hot arrays on every step
    s._link.request_images()  # and the image region
    t = s.step()
    steps += 1
    if steps % 2 == 0:
        s.draw("line", start=(0, 0, 0), end=(1, 1, 1))
    if t.image is not None and t.image.step > 1:
        sampled += 1
    sid = t.header.session_id if t.header is not None and t.live is not None else None
    now = (sid, t.tools.ours)
    if now != last:
        if last is not None and last[0] is not None and sid is None:
            lost += 1
        last = now
        print(json.dumps({"session_id": sid, "ours": t.tools.ours, "state": t.state.value}), flush=True)
s.close()
print(json.dumps({"steps": steps, "lost": lost, "sampled": sampled}), flush=True)
"""


def publish(name: str, rng: random.Random) -> tuple[int, int, int]:
    """A fresh segment under ``name`` (server: this process); our own mapping is dropped at once."""
    sid = secrets.randbits(63) | 1
    header = plan(num_envs=1024, obs_size=8, act_size=2, cmd_ring_size=4096, tools_ring_size=4096,
                  image=(40, 40, 3), server_pid=os.getpid(), session_id=sid)  # fmt: skip
    seg = EngineSegment.create(name, header, exist_ok=True)
    seg.set("frame_seq", 1)
    seg.set("image_seq", 2)
    seg.images[:] = rng.randrange(256)  # type: ignore[index]
    seg.close()  # never touched again here: it is about to shrink
    return sid, header.segment_size, header.tools_offset


def truncate(path: str, size: int, tools_at: int, rng: random.Random) -> str:
    kind = rng.choice(["0", "4096", "half", "tools", "o_trunc", "o_trunc_refill"])
    if kind.startswith("o_trunc"):
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)  # same inode, every byte gone
        try:
            if kind == "o_trunc_refill":
                os.ftruncate(fd, size)  # written back as zeros: a segment rewritten in place
        finally:
            os.close(fd)
    else:
        os.truncate(path, {"0": 0, "4096": 4096, "half": size // 2, "tools": tools_at + 8}[kind])
    return kind


def test_truncation_at_any_moment_of_a_tick_never_kills_the_monitor(subprocess_env) -> None:
    rng = random.Random(9)
    name = unique_segment_name("stress")
    path = shm_path(name)
    _, size, tools_at = publish(name, rng)
    mon = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-c", MONITOR, name],
        env=subprocess_env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert mon.stdin is not None and mon.stdout is not None

    pending = bytearray()

    def line(timeout: float = 10.0) -> dict[str, object]:
        """The monitor's next line (read unbuffered: ``select`` cannot see a text stream's buffer)."""
        assert mon.stdout is not None
        fd = mon.stdout.fileno()
        end = time.monotonic() + timeout
        while b"\n" not in pending and time.monotonic() < end:
            if select.select([fd], [], [], max(0.0, end - time.monotonic()))[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                pending.extend(chunk)
        text = ""
        if b"\n" in pending:
            i = pending.index(b"\n")
            text = pending[:i].decode()
            del pending[: i + 1]
        if not text:
            code = mon.poll()
            if code is None:
                pytest.fail(f"monitor silent for {timeout} s")
            died = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
            pytest.fail(f"monitor died ({died}): {mon.stderr.read()[-3000:]}")
        out: dict[str, object] = json.loads(text)
        return out

    kinds: dict[str, int] = {}
    t0 = time.monotonic()
    try:
        for _ in range(ROUNDS):
            sid, size, tools_at = publish(name, rng)
            while True:  # attached to this segment, tools channel held
                seen = line()
                if seen["session_id"] == sid and seen["ours"]:
                    break
            time.sleep(rng.uniform(0.0, 0.02))  # the monitor keeps stepping: land anywhere in a step
            kind = truncate(path, size, tools_at, rng)
            kinds[kind] = kinds.get(kind, 0) + 1
            assert mon.poll() is None, f"monitor died (exit {mon.returncode}) after a {kind} truncation"
        mon.stdin.write("stop\n")
        mon.stdin.flush()
        while "steps" not in (last := line(30.0)):
            pass
        assert mon.wait(timeout=30) == 0
    finally:
        if mon.poll() is None:
            mon.kill()
        mon.wait()
        for stream in (mon.stdin, mon.stdout, mon.stderr):
            if stream is not None:
                stream.close()
        if os.path.exists(path):
            os.unlink(path)
    elapsed = time.monotonic() - t0
    print(f"\n{ROUNDS} truncations {kinds} in {elapsed:.1f} s; monitor: {last}")
    assert len(kinds) == 6  # every kind of truncation was tried
    assert last["sampled"] and int(str(last["sampled"])) > ROUNDS  # the downscaling path was the one copying
    assert int(str(last["lost"])) >= ROUNDS - 1  # every truncation was noticed (the last may race the stop)
