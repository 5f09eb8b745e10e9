"""`lucky-monitor demo` starts engine and trainer, and leaves nothing behind however it ends."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from lucky_monitor.transport.shm import shm_path

pytestmark = pytest.mark.timeout(120)


def no_display_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}


def segment_from(output: str) -> str:
    m = re.search(r"serves (LuckyEngine_\d+)", output)
    assert m, output
    return m.group(1)


def test_headless_demo_runs_lockstep_and_cleans_up(subprocess_env):
    r = subprocess.run([sys.executable, "-m", "lucky_monitor", "demo", "--headless", "--quit-after", "4",
                        "--envs", "8", "--image", "16x16"],
                       capture_output=True, text=True, env=no_display_env(subprocess_env), timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    name = segment_from(r.stdout)
    assert re.search(r"lock-step with trainer pid \d+", r.stdout), r.stdout
    assert "demo stopped" in r.stdout
    assert not os.path.exists(shm_path(name))


def test_demo_without_display_falls_back_to_status_lines_and_ctrl_c_stops_it(subprocess_env):
    proc = subprocess.Popen([sys.executable, "-m", "lucky_monitor", "demo", "--envs", "4", "--image", "none"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=no_display_env(subprocess_env))
    lines = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "frames/s" in line:
                break
        assert any("no display" in x for x in lines) and any("status lines only" in x for x in lines), lines
        name = segment_from("".join(lines))
        assert os.path.exists(shm_path(name))
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, "".join(lines) + rest
    assert "demo stopped" in rest
    assert "Traceback" not in rest
    assert not os.path.exists(shm_path(name))


def test_demo_reports_a_bad_engine_option_in_one_line(subprocess_env):
    r = subprocess.run([sys.executable, "-m", "lucky_monitor", "demo", "--headless", "--envs", "0"],
                       capture_output=True, text=True, env=no_display_env(subprocess_env), timeout=60)
    assert r.returncode != 0
    assert "Traceback" not in r.stdout + r.stderr
    assert "envs" in r.stdout + r.stderr
