"""The benchmarks' own arithmetic (the benchmarks themselves run by hand, not in CI)."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

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
