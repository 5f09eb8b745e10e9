"""A segment that shrinks or vanishes never kills the monitor with SIGBUS once it can know.

Touching a mapping past the end of a shrunk file is a SIGBUS, which Python
cannot catch. Seen before: a monitor holding the tools channel reported
"segment shrank", then released the tools owner word by writing through the
tools mapping past the end of the file (5 of 5 tries). Here the monitor runs
in its own process (so that a SIGBUS shows as its exit status instead of
killing the test run), holds the tools channel and sends a debug draw on
every other poll. Between two of its polls the test truncates the segment's
file to a random size (or unlinks it, or both) and lets it poll on: it must
notice, drop the channel without a write, and carry on, 200 times.

A truncation landing inside a read or a tools write, at any moment of a
step, is ``test_truncation_stress.py``.
"""

from __future__ import annotations

import os
import random
import secrets
import subprocess
import sys

import pytest

from lucky_monitor.protocol.header import plan
from lucky_monitor.transport.shm import EngineSegment, platform_kind, shm_path
from tests.conftest import unique_segment_name

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(platform_kind() != "dir", reason="truncates a file under /dev/shm"),
]

MONITOR = r"""
import sys
from lucky_monitor.core.session import MonitorSession
s = MonitorSession(sys.argv[1], discover=False, command_timeout_s=0.2)
s.CLAIM_RETRY_S = 0.0
s._link.RETRY_S = 0.0
s._link.PID_CHECK_S = 0.0
n = 0
for line in sys.stdin:
    for _ in range(int(line)):
        t = s.step()
        n += 1
        if n % 2 == 0:
            s.draw("line", start=(0, 0, 0), end=(1, 1, 1))
    print(t.state.value, int(t.tools.ours), flush=True)
s.close()
print("closed", flush=True)
"""


def make_segment(name: str) -> tuple[int, int]:
    """Create the segment (server: this process; a tools channel) and drop our own mapping of it."""
    header = plan(num_envs=4, obs_size=6, act_size=2, cmd_ring_size=4096, tools_ring_size=4096, image=(8, 8, 3),
                  server_pid=os.getpid(), session_id=secrets.randbits(63) | 1)  # fmt: skip
    seg = EngineSegment.create(name, header, exist_ok=True)
    seg.close()  # never touched again here: it is about to shrink
    return header.segment_size, header.tools_offset


def test_a_shrinking_segment_whose_tools_channel_is_held_never_kills_the_monitor(subprocess_env) -> None:
    rng = random.Random(7)
    name = unique_segment_name("shrink")
    path = shm_path(name)
    mon = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-c", MONITOR, name],
        env=subprocess_env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert mon.stdin is not None and mon.stdout is not None

    def polls(n: int) -> str:
        mon.stdin.write(f"{n}\n")
        mon.stdin.flush()
        reply = mon.stdout.readline()
        if not reply:
            pytest.fail(f"monitor died (exit {mon.wait()}): {mon.stderr.read()[-3000:]}")
        return reply.strip()

    held = 0
    try:
        for _ in range(200):
            size, tools_at = make_segment(name)
            for _ in range(50):  # attach and claim
                if polls(2).endswith(" 1"):
                    held += 1
                    break
            os.truncate(path, rng.choice([0, 4096, size // 2, tools_at + 8, tools_at + 100]))
            if rng.random() < 0.3:
                os.unlink(path)
            state = polls(rng.randint(1, 6))  # must notice, and never touch what is gone
            assert not state.endswith(" 1"), state  # the channel is no longer held
            if os.path.exists(path) and rng.random() < 0.5:
                os.unlink(path)
        assert held >= 190, held
        mon.stdin.close()
        assert mon.stdout.readline().strip() == "closed"
        assert mon.wait(timeout=30) == 0
    finally:
        if mon.poll() is None:
            mon.kill()
        mon.wait()
        for stream in (mon.stdout, mon.stderr):
            if stream is not None:
                stream.close()
        if os.path.exists(path):
            os.unlink(path)
