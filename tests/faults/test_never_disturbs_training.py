"""A monitor never disturbs training: 30,000 lock-step steps with a monitor attached.

The engine (``lucky-monitor sim --fast``, images rendered every step) and a monitor session
(images copied, the four rings tapped, the tools channel held) run in their own processes;
the trainer runs here and checks every action echo and every frame number. The monitor's
``/proc/<pid>/maps`` shows the segment mapped read-only; the tools region is mapped writable
only by its tools helper process (``lucky_monitor.transport.tools_agent``).
"""

from __future__ import annotations

import os
import signal

import pytest

from lucky_monitor.protocol import messages as m
from lucky_monitor.protocol.header import tools_region_size
from lucky_monitor.sim.trainer import SharedMemoryClient
from lucky_monitor.transport.shm import Segment, platform_kind, shm_path
from tests.conftest import unique_segment_name
from tests.faults.support import Monitor, remove, sim
from tests.sim.test_lockstep import ECHO, drive

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(platform_kind() != "dir", reason="reads /proc/<pid>/maps"),
]

STEPS = 30_000
ENVS, OBS, ACT = 4, 16, 4
PAGE = os.sysconf("SC_PAGE_SIZE")


def segment_mappings(pid: int, path: str) -> list[tuple[int, int, str, int]]:
    """``(start, end, perms, file offset)`` of every mapping of ``path`` in process ``pid``."""
    out = []
    with open(f"/proc/{pid}/maps", encoding="ascii", errors="replace") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].strip().removesuffix(" (deleted)") == path:
                start, end = (int(x, 16) for x in parts[0].split("-"))
                out.append((start, end, parts[1], int(parts[2], 16)))
    return out


def children(pid: int) -> list[int]:
    """Pids of the live children of ``pid``."""
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f:
            out += [int(x) for x in f.read().split()]
    return out


def test_thirty_thousand_lock_step_steps_with_a_monitor_attached(subprocess_env) -> None:
    name = unique_segment_name("train")
    path = shm_path(name)
    eng = sim(name, subprocess_env, "--fast", "--envs", str(ENVS), "--obs", str(OBS), "--act", str(ACT),
              "--image", "16x16", "--camera-fps", "0")  # fmt: skip
    mon = None
    try:
        with Segment.attach(name) as seg:
            h = seg.header
        mon = Monitor(name, subprocess_env)
        rep = mon.wait_for(lambda r: r["tools_ours"] and r["image_channels"] == 3, "the monitor attached")

        maps = segment_mappings(mon.pid, path)
        assert maps, f"no mapping of {path} in the monitor"
        assert [x for x in maps if x[2] != "r--s"] == [], maps  # the monitor itself maps nothing writable
        assert any(off == 0 and e - s >= h.segment_size for s, e, _, off in maps), maps  # the whole segment, read-only
        # The tools region is mapped writable by the monitor's tools helper, and nothing else is.
        helpers = [pid for pid in children(mon.pid) if segment_mappings(pid, path)]
        assert len(helpers) == 1, helpers
        hmaps = segment_mappings(helpers[0], path)
        rw = [x for x in hmaps if x[2] != "r--s"]
        assert [(perms, off) for _, _, perms, off in rw] == [("rw-s", h.tools_offset)], hmaps
        (start, end, _, _) = rw[0]
        assert end - start == -(-tools_region_size(h.tools_ring_size) // PAGE) * PAGE

        mon.tick("free")  # it polls at 60 Hz from now on, on its own
        with SharedMemoryClient(name, timeout_s=30) as tr:
            tr.get_schema()  # some traffic on the main rings for the taps
            tr.reset(None, contract=m.SimulationContract(episode_length=37, randomize=True))
            f0 = tr.frame_seq
            ended, checked = drive(tr, STEPS, seed=29, echo=ECHO)
            # drive checked every frame: +1 each step, our hand-over stepped, every echo equal
            assert tr.frame_seq == f0 + STEPS + 1 and tr.steps == STEPS + 1
            assert checked > STEPS * ENVS * 0.9 and ended > 0
            rep = mon.tick("report")
            assert segment_mappings(mon.pid, path) == maps  # nothing remapped writable on the way
            assert segment_mappings(helpers[0], path) == hmaps
        assert rep["state"] in {"connected", "waiting for trainer", "engine stepping"}, rep
        assert rep["frames_seen"] > 50 and rep["images_copied"] > 50, rep
        assert rep["traffic_messages"]["main c2s"] >= 2 and rep["traffic_messages"]["main s2c"] >= 2, rep
        mon.close_cleanly()
    finally:
        if mon is not None:
            mon.kill()
        eng.signal(signal.SIGINT)
        try:
            eng.proc.wait(20)
        finally:
            eng.kill()
            remove(name)
