"""``lucky-monitor --remote``: the real window in a real VNC server, reached by a real VNC client.

vncdotool (a VNC client in Python) connects with the password and captures
the screen; the picture is checked for colours the window is known to show,
in the right channel order. The port must refuse connections on every
non-loopback address of this machine, and the wrong password must be refused.
Skipped, with the reason, where TigerVNC is not installed.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from lucky_monitor.cli import main
from lucky_monitor.headless import remote
from lucky_monitor.protocol.errors import UnavailableError
from lucky_monitor.transport.shm import platform_kind

pytestmark = pytest.mark.timeout(150)

PASSWORD = "Lk7pQ2xz"


def _vnc_missing() -> str | None:
    try:
        remote.find_vnc_server()
    except UnavailableError as exc:
        return str(exc)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _other_addresses() -> list[str]:
    """This machine's non-loopback IPv4 addresses (hostname resolution and the default route's source)."""
    found: set[str] = set()
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.add(str(info[4][0]))
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # UDP connect sends nothing: it only picks the source address
        found.add(s.getsockname()[0])
    return sorted(a for a in found if not a.startswith("127.") and a != "0.0.0.0")


def _capture(port: int, password: str, path) -> subprocess.CompletedProcess[str]:
    code = "import sys; from vncdotool.command import vncdo; sys.argv[0] = 'vncdo'; vncdo()"
    return subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code, "-s", f"127.0.0.1::{port}", "-p", password, "capture", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_window_under_vnc_gets_every_window_option_it_was_given() -> None:
    from lucky_monitor.cli import build_parser

    args = build_parser().parse_args(
        ["--remote", "--shm", "LuckyEngine_1", "--cpu-budget", "5", "--nice", "19", "--yield-us", "50"]
    )
    argv = remote.window_argv(args)
    for opt, value in (("--cpu-budget", "5.0"), ("--nice", "19"), ("--yield-us", "50.0"), ("--shm", "LuckyEngine_1")):
        assert argv[argv.index(opt) + 1] == value


def test_missing_vnc_server_names_the_package(monkeypatch, capsys) -> None:
    monkeypatch.setattr(remote.shutil, "which", lambda name: None)
    assert main(["--remote"]) == 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "apt-get install tigervnc-standalone-server tigervnc-tools" in err


def test_port_is_checked_and_in_use_is_busy(monkeypatch, capsys) -> None:
    assert main(["--remote", "70000"]) == 2
    if _vnc_missing():
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert main(["--remote", str(s.getsockname()[1])]) == 4
    assert "in use" in capsys.readouterr().err


@pytest.mark.skipif(platform_kind() != "dir", reason="the reference engine's segments are exercised on Linux")
@pytest.mark.skipif(_vnc_missing() is not None, reason=str(_vnc_missing()))
def test_window_over_vnc_on_loopback_only_with_a_password(tmp_path, subprocess_env) -> None:
    py = [sys.executable, "-m", "lucky_monitor"]
    sim = subprocess.Popen(
        [*py, "sim", "--envs", "4", "--image", "128x96", "--hz", "20"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=subprocess_env,
    )
    port = _free_port()
    env = dict(subprocess_env, LUCKY_VNC_PASSWORD=PASSWORD)
    env.pop("QT_QPA_PLATFORM", None)
    env.pop("DISPLAY", None)
    win = None
    try:
        assert sim.stdout is not None
        name = sim.stdout.readline().strip()
        win = subprocess.Popen(
            [*py, "--remote", str(port), "--shm", name, "--cpu-budget", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert win.stdout is not None
        banner = win.stdout.readline()
        assert f"127.0.0.1:{port}" in banner and f"password: {PASSWORD}" in banner, banner
        rest = [win.stdout.readline() for _ in range(4)]
        assert any(f"ssh -N -L {port}:127.0.0.1:{port}" in ln for ln in rest), rest
        # Listening on loopback only: every other address of this machine refuses the port.
        others = _other_addresses()
        for addr in others:
            with pytest.raises(OSError), socket.create_connection((addr, port), timeout=2):
                pass
        # A wrong password is refused.
        bad = _capture(port, "wrong-pw", tmp_path / "bad.png")
        assert bad.returncode != 0 and "Authentication failure" in bad.stderr, bad.stderr
        assert not (tmp_path / "bad.png").exists()
        # The window takes a few seconds to show its first images: capture until it does.
        from PIL import Image

        canvas = (0x0D, 0x11, 0x17)  # palette.CANVAS behind the image grid and plots
        deadline = time.monotonic() + 60
        while True:
            shot = tmp_path / "shot.png"
            r = _capture(port, PASSWORD, shot)
            assert r.returncode == 0, r.stderr
            with Image.open(shot) as im:
                px = np.asarray(im.convert("RGB"))
            colours, counts = np.unique(px.reshape(-1, 3), axis=0, return_counts=True)
            count = {tuple(int(v) for v in c): int(n) for c, n in zip(colours, counts, strict=True)}
            red = count.get((255, 0, 0), 0)
            if red > 500 or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert px.shape == (1000, 1600, 3)
        # the canvas colour as Qt paints it, not with red and blue swapped
        assert count.get(canvas, 0) > 20000, sorted(count.items(), key=lambda kv: -kv[1])[:5]
        assert count.get(canvas[::-1], 0) < count[canvas] / 100
        # each tile's red bar (the reference engine's orientation cue) is pure red, not blue
        assert red > 500 and count.get((0, 0, 255), 0) < red / 10
        if not others:
            pytest.skip("checked everything but the other addresses: this machine has no non-loopback IPv4 address")
    finally:
        for p in (win, sim):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for p in (win, sim):
            if p is not None:
                for s in (p.stdout, p.stderr):
                    if s is not None:
                        s.close()
    assert win is not None and win.returncode == 0
