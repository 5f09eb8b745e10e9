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
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "lucky_monitor",
            "demo",
            "--headless",
            "--quit-after",
            "4",
            "--envs",
            "8",
            "--image",
            "16x16",
        ],
        capture_output=True,
        text=True,
        env=no_display_env(subprocess_env),
        timeout=90,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    name = segment_from(r.stdout)
    assert re.search(r"lock-step with trainer pid \d+", r.stdout), r.stdout
    assert "demo stopped" in r.stdout
    assert not os.path.exists(shm_path(name))


def test_demo_without_display_falls_back_to_status_lines_and_ctrl_c_stops_it(subprocess_env):
    proc = subprocess.Popen(
        [sys.executable, "-m", "lucky_monitor", "demo", "--envs", "4", "--image", "none"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=no_display_env(subprocess_env),
    )
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


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["--envs", "0"], "--envs 0: the number of envs must be 1..4096"),
        (["--obs", "0"], "--obs 0: floats per observation must be"),
        (["--envs", "4096", "--image", "4096x4096"], "over the 4.0 GiB limit"),
    ],
    ids=["envs", "obs", "size"],
)
def test_demo_reports_a_bad_engine_option_in_one_line(subprocess_env, argv, text):
    before = set(os.listdir("/dev/shm"))
    r = subprocess.run(
        [sys.executable, "-m", "lucky_monitor", "demo", "--headless", *argv],
        capture_output=True,
        text=True,
        env=no_display_env(subprocess_env),
        timeout=60,
    )
    assert r.returncode == 2  # usage (README, "Exit codes")
    assert r.stdout == ""  # no "demo stopped", no engine started
    assert r.stderr.count("lucky-monitor: error:") == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("lucky-monitor: error: ") and text in r.stderr, r.stderr
    assert set(os.listdir("/dev/shm")) == before


def test_demo_reports_an_engine_that_fails_at_start_with_its_error_and_code(subprocess_env):
    with subprocess.Popen(
        [sys.executable, "-m", "lucky_monitor", "sim", "--envs", "2", "--image", "none"],
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env,
    ) as first:
        try:
            name = first.stdout.readline().strip()
            r = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "lucky_monitor",
                    "demo",
                    "--headless",
                    "--name",
                    name,
                    "--envs",
                    "2",
                    "--image",
                    "none",
                ],
                capture_output=True,
                text=True,
                env=no_display_env(subprocess_env),
                timeout=60,
            )
        finally:
            first.send_signal(signal.SIGINT)
            first.wait(15)
    assert r.returncode == 4  # busy: a live engine serves that name
    assert r.stdout == ""
    assert r.stderr.strip() == f"lucky-monitor: error: the reference engine failed: segment {name!r} already exists"


def test_demo_reaps_a_dead_child_at_once_and_says_so(subprocess_env):
    proc = subprocess.Popen(
        [sys.executable, "-m", "lucky_monitor", "demo", "--headless", "--envs", "2", "--image", "none"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=no_display_env(subprocess_env),
    )
    lines: list[str] = []

    def read_until(pattern: str) -> re.Match[str]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            m = re.search(pattern, line)
            if m:
                return m
        raise AssertionError("".join(lines))

    try:
        engine_pid = int(read_until(r"engine pid (\d+) serves")[1])
        trainer_pid = int(read_until(r"trainer pid (\d+) drives")[1])
        os.kill(engine_pid, signal.SIGKILL)
        read_until(rf"\[demo\] the engine \(pid {engine_pid}\) exited with signal SIGKILL")
        read_until(rf"\[demo\] the trainer \(pid {trainer_pid}\) exited with code 5: engine")
        for pid in (engine_pid, trainer_pid):  # reaped, not zombies
            deadline = time.monotonic() + 5
            while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not os.path.exists(f"/proc/{pid}"), f"pid {pid} not reaped"
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    out = "".join(lines) + rest
    assert proc.returncode == 0, out
    assert out.count("exited with") == 2, out  # once each, and nothing more at the demo's own stop
    assert "Traceback" not in out
