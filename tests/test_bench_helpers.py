"""The benchmarks' own arithmetic (the benchmarks themselves run by hand, not in CI)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

from tests.conftest import unique_segment_name

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "monitor_cpu.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_monitor_cpu", _PATH)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_each_b_phase_is_compared_with_the_a_phases_around_it():
    mod = _load()
    # the machine slows down steadily: a ratio of medians would blame part of it on the monitor
    a = [1000.0, 900.0, 800.0]
    b = [855.0, 765.0]
    assert mod.paired_ratios(a, b) == pytest.approx([0.9, 0.9])
    with pytest.raises(ValueError):
        mod.paired_ratios([1000.0], [900.0])


def test_the_floor_steps_the_window_s_session_and_writes_its_stats(tmp_path, subprocess_env):
    """``_floor.py``: the data path alone copies no image; with images, every image it saw is copied."""
    floor = _PATH.parent / "_floor.py"
    name = unique_segment_name("floor")
    eng = subprocess.Popen(
        [sys.executable, "-m", "lucky_monitor", "sim", "--name", name, "--envs", "4", "--image", "8x8"],
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env,
    )
    try:
        assert eng.stdout is not None and eng.stdout.readline().strip() == name
        got = {}
        for what in ("data", "images"):
            out = tmp_path / f"{what}.json"
            r = subprocess.run(
                [sys.executable, str(floor), name, "1.5", str(out), what],
                capture_output=True,
                text=True,
                env=dict(subprocess_env, HOME=str(tmp_path)),
                timeout=60,
            )
            assert r.returncode == 0, r.stderr
            got[what] = json.loads(out.read_text())
        for what, s in got.items():
            assert s["floor"] == what
            assert s["ticks"] >= 30 and s["cpu_s"] > 0 and s["wall_s"] >= 1.4
            assert s["frames_published"] > 0 and s["frames_seen"] > 0
        assert got["data"]["images_presented"] == 0
        assert 0 < got["images"]["images_presented"] <= got["images"]["images_published"]
        bad = subprocess.run(
            [sys.executable, str(floor), name], capture_output=True, text=True, env=subprocess_env, timeout=60
        )
        assert bad.returncode == 2 and "usage" in bad.stderr
    finally:
        eng.terminate()
        eng.wait(10)
        assert eng.stdout is not None
        eng.stdout.close()


@pytest.mark.parametrize("script", ["shots_4096.py", "shot_inspector.py"])
def test_the_screenshot_scripts_answer_help_without_running(script: str, tmp_path) -> None:
    """Seen: `--help` was taken as the output folder; the script started an engine and wrote into ./--help/."""
    path = pathlib.Path(__file__).resolve().parents[1] / "scripts" / script
    done = subprocess.run(
        [sys.executable, str(path), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.startswith("usage:"), done.stderr
    assert list(tmp_path.iterdir()) == []
