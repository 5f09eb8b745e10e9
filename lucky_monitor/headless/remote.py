"""``lucky-monitor --remote [PORT]``: the full window inside a VNC server on 127.0.0.1, behind a password.

Theory of operation
-------------------
A headless node has no screen. This starts TigerVNC's ``Xvnc`` (Debian
``tigervnc-standalone-server``): an X server whose screen is served over VNC,
listening on ``127.0.0.1:PORT`` only (``-localhost -interface 127.0.0.1``;
``-nolisten tcp`` keeps the X server itself off the network) and asking for a
password (``-SecurityTypes VncAuth -rfbauth FILE``). The window is then the
ordinary ``lucky-monitor`` window, a child process on that X display (Qt's
``xcb`` platform): everything it shows, a VNC viewer shows.

Nobody can reach the port from another machine; the way in is an SSH tunnel,
which carries the VNC traffic encrypted (VNC itself does not)::

    ssh -L 5901:127.0.0.1:5901 user@node      # on your machine
    vncviewer 127.0.0.1::5901                 # then type the password

The password is ``$LUCKY_VNC_PASSWORD`` when set, else 8 random characters
printed once at start (VNC authentication uses at most 8). Its obfuscated
form (``vncpasswd -f``) is kept in a private directory (mode 0700) that is
removed at exit. Qt's own ``vnc`` platform plugin is not used: it has no
authentication and listens on every interface.

Ctrl-C or SIGTERM closes the window the orderly way (settings and
``--stats-json`` saved), then stops the VNC server; the exit status is the
window's.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import secrets
import select
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time

from ..core.argtypes import plain_number
from ..protocol.errors import BusyError, LuckyMonitorError, UnavailableError, UsageError

__all__ = ["DEFAULT_PORT", "VNC_PACKAGES", "find_vnc_server", "run_remote", "window_argv"]

#: The port ``--remote`` uses without a value (VNC display :1's).
DEFAULT_PORT = 5901
#: The Debian packages that provide ``Xvnc`` and ``vncpasswd``.
VNC_PACKAGES = "tigervnc-standalone-server tigervnc-tools"
#: The VNC screen (the window opens at 1600x1000 in it).
GEOMETRY = "1600x1000"
#: Seconds to wait for Xvnc to say it is ready.
START_TIMEOUT_S = 20.0


class VncError(LuckyMonitorError):
    """The VNC server could not be started or stopped working."""

    exit_code = UnavailableError.exit_code


def find_vnc_server() -> tuple[str, str]:
    """The paths of ``Xvnc`` and ``vncpasswd``.

    Raises
    ------
    UnavailableError
        Either is missing; the message names the Debian packages to install.
    """
    xvnc = shutil.which("Xvnc")
    passwd = shutil.which("vncpasswd") or shutil.which("tigervncpasswd")
    if xvnc is None or passwd is None:
        missing = "Xvnc" if xvnc is None else "vncpasswd"
        raise UnavailableError(
            f"--remote needs TigerVNC's {missing}, which is not installed; on Debian/Ubuntu: "
            f"sudo apt-get install {VNC_PACKAGES}"
        )
    return xvnc, passwd


def parse_port(text: str) -> int:
    """``--remote``'s PORT: 1..65535."""
    try:
        port = int(plain_number(text, int))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port in 1..65535")
    return port


def window_argv(args: argparse.Namespace) -> list[str]:
    """The window options of ``args`` as a command line for the child window."""
    out: list[str] = []
    for opt, key in (
        ("--shm", "shm"),
        ("--columns", "columns"),
        ("--cpu-budget", "cpu_budget"),
        ("--nice", "nice"),
        ("--yield-us", "yield_us"),
        ("--stats-json", "stats_json"),
        ("--screenshot", "screenshot"),
        ("--quit-after", "quit_after"),
    ):
        v = getattr(args, key, None)
        if v is not None:
            out += [opt, str(v)]
    if getattr(args, "allow_other_user", False):
        out.append("--allow-other-user")
    return out


def _check_port_free(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise BusyError(f"--remote {port}: port {port} on 127.0.0.1 is in use; give another PORT") from None
            raise UsageError(f"--remote {port}: {exc.strerror or exc}") from None


def _password() -> str:
    pw = os.environ.get("LUCKY_VNC_PASSWORD")
    if pw is not None:
        if not 6 <= len(pw) <= 8 or not pw.isprintable():
            raise UsageError("LUCKY_VNC_PASSWORD must be 6 to 8 printable characters (VNC uses at most 8)")
        return pw
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


def _wait_display(fd: int, proc: subprocess.Popen[bytes]) -> int:
    """The display number Xvnc writes to ``-displayfd`` once it accepts connections."""
    deadline = time.monotonic() + START_TIMEOUT_S
    buf = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            chunk = os.read(fd, 64)
            buf += chunk
            if b"\n" in buf or not chunk:
                break
        if proc.poll() is not None:
            break
    text = buf.decode(errors="replace").strip()
    if not text.isdigit():
        err = b""
        if proc.poll() is not None and proc.stderr is not None:
            err = proc.stderr.read() or b""
        lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
        why = lines[-1].strip() if lines else "it did not report a display in time"
        raise VncError(f"the VNC server did not start: {why}")
    return int(text)


def _stop(proc: subprocess.Popen[bytes], sig: int, wait_s: float) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_remote(args: argparse.Namespace) -> int:
    """Run the window inside a password-protected VNC server on 127.0.0.1:PORT until it closes or Ctrl-C."""
    port = int(args.remote)
    xvnc, vncpasswd = find_vnc_server()
    _check_port_free(port)
    password = _password()
    private = tempfile.mkdtemp(prefix="lucky-vnc-")  # 0700
    xproc: subprocess.Popen[bytes] | None = None
    window: subprocess.Popen[bytes] | None = None
    asked: list[int] = []
    old = {s: signal.signal(s, lambda signum, _f: asked.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        passfile = os.path.join(private, "passwd")
        made = subprocess.run([vncpasswd, "-f"], input=password.encode(), capture_output=True, timeout=10)
        if made.returncode != 0 or not made.stdout:
            raise VncError(f"vncpasswd -f failed: {made.stderr.decode(errors='replace').strip()}")
        fd = os.open(passfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(made.stdout)
        r, w = os.pipe()
        try:
            xproc = subprocess.Popen(
                [
                    xvnc,
                    "-displayfd", str(w),
                    "-rfbport", str(port),
                    "-localhost", "-interface", "127.0.0.1",
                    "-nolisten", "tcp",
                    "-SecurityTypes", "VncAuth",
                    "-rfbauth", passfile,
                    "-geometry", GEOMETRY,
                    "-depth", "24",
                    "-AlwaysShared",
                    "-desktop", "lucky-monitor",
                ],
                pass_fds=(w,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,  # Ctrl-C in the terminal reaches us, and we stop it in order
            )  # fmt: skip
            os.close(w)
            w = -1
            display = _wait_display(r, xproc)
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)
        env = dict(os.environ, DISPLAY=f":{display}", QT_QPA_PLATFORM="xcb")
        env.pop("WAYLAND_DISPLAY", None)
        host = socket.gethostname()
        print(
            f"lucky-monitor window on VNC 127.0.0.1:{port} (display :{display}), password: {password}\n"
            f"  It listens on 127.0.0.1 only. From your machine, tunnel the port over SSH and connect:\n"
            f"    ssh -N -L {port}:127.0.0.1:{port} USER@{host}\n"
            f"    vncviewer 127.0.0.1::{port}      (TigerVNC; other viewers: localhost:{port})\n"
            f"  Ctrl-C here closes the window and the VNC server.",
            flush=True,
        )
        window = subprocess.Popen(
            [sys.executable, "-m", "lucky_monitor", *window_argv(args)], env=env, start_new_session=True
        )
        while window.poll() is None:
            if asked:
                _stop(window, signal.SIGTERM, 20.0)  # the window's orderly end
                break
            if xproc.poll() is not None:
                _stop(window, signal.SIGTERM, 20.0)
                raise VncError(f"the VNC server exited (status {xproc.returncode}); the window was closed")
            time.sleep(0.1)
        code = window.wait()
        return 0 if asked and code in (0, -signal.SIGTERM) else code
    finally:
        if window is not None:
            _stop(window, signal.SIGTERM, 20.0)
        if xproc is not None:
            _stop(xproc, signal.SIGTERM, 10.0)
            if xproc.stderr is not None:
                xproc.stderr.close()
        shutil.rmtree(private, ignore_errors=True)
        for s, h in old.items():
            signal.signal(s, h)
