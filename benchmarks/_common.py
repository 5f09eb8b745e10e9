"""Helpers shared by the benchmark scripts: machine facts, process CPU time, JSON-line output.

Every benchmark prints one JSON object per line: its own figures merged with
:func:`machine_facts`, so a number is never read without the machine it came from.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import select
import signal
import statistics
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = ["emit", "load_average", "machine_facts", "percentile", "process_cpu_seconds", "summarize_us"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def load_average() -> list[float] | None:
    """The 1/5/15-minute load averages, or ``None`` where the OS has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def machine_facts() -> dict[str, Any]:
    """CPU model, logical cores, Python/numpy versions, platform and current load."""
    try:
        import numpy

        numpy_version: str | None = numpy.__version__
    except ImportError:  # pragma: no cover - every benchmark here needs numpy anyway
        numpy_version = None
    affinity = getattr(os, "sched_getaffinity", None)
    return {
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(affinity(0)) if affinity else os.cpu_count(),
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "numpy": numpy_version,
        "platform": platform.platform(),
        "load_average": load_average(),
    }


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds used so far by process ``pid`` (Linux ``/proc``), else ``None``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the command name may contain spaces
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation."""
    xs = sorted(values)
    if not xs:
        raise ValueError("percentile of no values")
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize_us(seconds: Iterable[float], prefix: str) -> dict[str, float]:
    """``{prefix}_median_us``, ``{prefix}_p99_us``, ``{prefix}_mean_us`` of durations given in seconds."""
    xs = [s * 1e6 for s in seconds]
    return {
        f"{prefix}_median_us": round(statistics.median(xs), 1),
        f"{prefix}_p99_us": round(percentile(xs, 99), 1),
        f"{prefix}_mean_us": round(statistics.fmean(xs), 1),
    }


def emit(figures: Mapping[str, Any], *, facts: Mapping[str, Any] | None = None) -> None:
    """Print ``figures`` plus the machine facts as one JSON line and flush."""
    obj = {**figures, **(machine_facts() if facts is None else facts)}
    sys.stdout.write(json.dumps(obj, sort_keys=False) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------- child processes
def lucky(*args: str) -> list[str]:
    return [sys.executable, "-m", "lucky_monitor", *args]


@contextlib.contextmanager
def child(
    argv: list[str], env: dict[str, str] | None = None, stderr_path: str | None = None
) -> Iterator[subprocess.Popen]:
    """A child process with stdout piped, stderr to a file; SIGTERM then kill on exit."""
    err = open(stderr_path or os.devnull, "w", encoding="utf-8")  # closed in finally
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    except BaseException:
        err.close()
        raise
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()
        err.close()


def first_line(proc: subprocess.Popen, timeout: float = 60.0) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline().strip() if ready else ""
    if not line:
        proc.kill()
        raise SystemExit(f"child {proc.args!r} printed nothing on stdout")
    return line


def offscreen_platform(workdir: str) -> str:
    """``QT_QPA_PLATFORM`` for the offscreen plugin with one 1920x1080 screen, the Xvfb mode's screen.

    The window sizes itself to its screen (a first start within the screen's
    room); the plugin's own screen is 800x800, which would measure a smaller
    window offscreen than under Xvfb.
    """
    path = os.path.join(workdir, "offscreen.json")
    screens = [{"name": "screen", "x": 0, "y": 0, "width": 1920, "height": 1080, "logicalDpi": 96}]
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"screens": screens}, f)
    return f"offscreen:configfile={path}"
