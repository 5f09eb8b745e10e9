"""History: values against brute-force numpy, rings, windows, bounded memory, CSV."""

from __future__ import annotations

import csv
import datetime
import io
import math
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from lucky_monitor.core.history import (
    MAX_SELECTED,
    SAMPLED_MEMORY,
    History,
    HistoryError,
    ring_count_since,
    ring_tail,
)
from lucky_monitor.protocol.errors import LuckyMonitorError


def frames(n: int, count: int, seed: int = 0):
    """Synthetic per-frame arrays: rewards f32, dones u8, truncateds bool."""
    rng = np.random.default_rng(seed)
    rewards = (rng.standard_normal((count, n)) * rng.uniform(0.1, 10)).astype(np.float32)
    dones = (rng.random((count, n)) < 0.2).astype(np.uint8)
    truncs = rng.random((count, n)) < 0.1
    return rewards, dones, truncs


def brute_stats(rewards: np.ndarray) -> dict[str, float]:
    values = rewards.astype(np.float64)
    values = values[np.isfinite(values)]  # NaN and ±Inf left out (the alarms count them)
    if values.size == 0:
        return dict.fromkeys(("mean", "min", "max", "p10", "p90"), math.nan)
    return {
        "mean": float(values.mean()),
        "min": float(values.min()),
        "max": float(values.max()),
        "p10": float(np.percentile(values, 10)),
        "p90": float(np.percentile(values, 90)),
    }


@pytest.mark.parametrize("n", [1, 2, 3, 10, 11, 257, 4096])
def test_statistics_match_brute_force(n: int) -> None:
    count = 20
    rewards, dones, truncs = frames(n, count, seed=n)
    history = History(n, capacity=64, raster_capacity=8)
    for k in range(count):
        history.append(k + 1, 0.5 * k, rewards[k], dones[k], truncs[k] if k % 2 else None)
    view = history.window(None)
    assert len(view) == count
    for k in range(count):
        expected = brute_stats(rewards[k])
        for name, value in expected.items():
            assert getattr(view, name)[k] == pytest.approx(value, rel=1e-12, abs=1e-12), (name, k)
        assert view.done_count[k] == np.count_nonzero(dones[k])
        assert view.trunc_count[k] == (np.count_nonzero(truncs[k]) if k % 2 else 0)
    np.testing.assert_array_equal(view.frame_seq, np.arange(1, count + 1))
    np.testing.assert_array_equal(view.t, 0.5 * np.arange(count))


@pytest.mark.parametrize(("capacity", "raster_capacity"), [(1, 1), (5, 3), (7, 40), (100, 2), (100, 100)])
def test_statistics_are_right_however_reads_and_appends_interleave(capacity: int, raster_capacity: int) -> None:
    # Statistics are written in batches from the raster rows: a read in the middle of a batch, a batch
    # larger than either ring, and rows with NaN among them must all give each frame its own numbers.
    rng = np.random.default_rng(capacity * 1000 + raster_capacity)
    n = 9
    history = History(n, capacity=capacity, raster_capacity=raster_capacity)
    expected: list[dict[str, float]] = []
    for k in range(150):
        row = rng.standard_normal(n).astype(np.float32)
        if k % 11 == 3:
            row[rng.integers(0, n, 3)] = np.nan
        if k % 37 == 5:
            row[:] = np.nan
        if k % 13 == 7:  # seen: +Inf beside -Inf made numpy warn on stderr, and the frame's mean NaN
            row[1], row[4] = np.inf, -np.inf
        if k % 29 == 9:
            row[2] = np.inf
        history.append(k + 1, float(k), row, np.zeros(n, np.uint8))
        expected.append(brute_stats(row))
        if rng.random() < 0.15:
            view = history.window(None)
            held = expected[-len(view) :]
            for j, want in enumerate(held):
                for name, value in want.items():
                    got = getattr(view, name)[j]
                    assert (math.isnan(got) and math.isnan(value)) or got == pytest.approx(value, rel=1e-12), (k, j)


def test_input_dtypes_are_converted() -> None:
    history = History(4, capacity=8)
    history.append(1, 0.0, np.array([1, 2, 3, 4], dtype=np.int16), np.array([True, False, True, True]))
    history.append(2, 0.0, np.array([0.5, 1.5, -2.0, 8.0]), np.array([0, 0, 0, 3], np.uint8), np.ones(4, np.uint8))
    view = history.window()
    assert view.mean.tolist() == [2.5, 2.0]
    assert view.done_count.tolist() == [3, 1]
    assert view.trunc_count.tolist() == [0, 4]
    np.testing.assert_array_equal(view.raster[1], np.array([0.5, 1.5, -2.0, 8.0], np.float32))


def test_nan_rewards_are_left_out_of_statistics() -> None:
    history = History(5, capacity=8)
    row = np.array([np.nan, 1.0, 2.0, np.nan, 7.0], np.float32)
    history.append(1, 0.0, row, np.zeros(5, np.uint8))
    history.append(2, 0.1, np.full(5, np.nan, np.float32), np.zeros(5, np.uint8))
    history.append(3, 0.2, np.arange(5, dtype=np.float32), np.zeros(5, np.uint8))
    view = history.window()
    expected = brute_stats(row)
    for name, value in expected.items():
        assert getattr(view, name)[0] == pytest.approx(value)
        assert math.isnan(getattr(view, name)[1])
        assert getattr(view, name)[2] == pytest.approx(brute_stats(np.arange(5.0))[name])
    assert np.isnan(view.raster[0, 0]) and view.raster[0, 4] == 7.0


def test_gaps_are_counted_and_sampled_flag_follows_recent_appends() -> None:
    history = History(3, capacity=1000)
    zeros = np.zeros(3, np.float32)
    flags = np.zeros(3, np.uint8)
    seqs = [5, 6, 7, 10, 11, 20]
    for k, seq in enumerate(seqs):
        history.append(seq, k / 60, zeros, flags)
    view = history.window()
    assert view.skipped.tolist() == [0, 0, 0, 2, 0, 8]
    assert history.skipped_total == 10
    assert history.frames_seen == len(seqs)
    assert history.sampled
    seq = seqs[-1]
    for k in range(SAMPLED_MEMORY - 1):
        seq += 1
        history.append(seq, 1 + k / 60, zeros, flags)
    assert history.sampled  # the skip is still among the last SAMPLED_MEMORY appends
    history.append(seq + 1, 10.0, zeros, flags)
    assert not history.sampled
    assert history.skipped_total == 10


def test_no_gaps_is_not_sampled() -> None:
    history = History(2, capacity=10)
    for k in range(30):
        history.append(k + 1, k, np.zeros(2, np.float32), np.zeros(2, np.uint8))
    assert not history.sampled
    assert history.skipped_total == 0


def test_ring_wraparound_keeps_the_newest() -> None:
    n = 6
    rewards, dones, truncs = frames(n, 23, seed=3)
    history = History(n, capacity=5, raster_capacity=3)
    for k in range(23):
        history.append(100 + 2 * k, float(k), rewards[k], dones[k], truncs[k])
    view = history.window()
    np.testing.assert_array_equal(view.frame_seq, 100 + 2 * np.arange(18, 23))
    np.testing.assert_array_equal(view.t, np.arange(18.0, 23.0))
    np.testing.assert_array_equal(view.max, rewards[18:].max(axis=1).astype(np.float64))
    np.testing.assert_array_equal(view.done_count, np.count_nonzero(dones[18:], axis=1))
    np.testing.assert_array_equal(view.raster, rewards[20:])
    np.testing.assert_array_equal(view.raster_frame_seq, 100 + 2 * np.arange(20, 23))
    np.testing.assert_array_equal(view.raster_t, np.arange(20.0, 23.0))
    assert len(history) == 5
    assert history.frames_seen == 23


@pytest.mark.parametrize("capacity", [1, 4, 7, 50])
def test_window_is_chronological_and_matches_a_reference_model(capacity: int) -> None:
    rng = np.random.default_rng(capacity)
    n = 3
    history = History(n, capacity=capacity, raster_capacity=max(1, capacity // 2))
    appended: list[tuple[int, float, np.ndarray]] = []
    seq, t = 0, 0.0
    for _ in range(3 * capacity + 5):
        seq += int(rng.integers(1, 4))
        t += float(rng.choice([0.0, 0.25, 1.0]))
        row = rng.standard_normal(n).astype(np.float32)
        history.append(seq, t, row, np.zeros(n, np.uint8))
        appended.append((seq, t, row))
        for seconds in (None, 0.0, 0.25, 1.0, 2.5, 1e9):
            view = history.window(seconds)
            held = appended[-capacity:]
            raster_held = appended[-history.raster_capacity :]
            if seconds is not None:
                held = [e for e in held if e[1] >= t - seconds]
                raster_held = [e for e in raster_held if e[1] >= t - seconds]
            assert view.frame_seq.tolist() == [e[0] for e in held]
            assert view.t.tolist() == [e[1] for e in held]
            assert view.raster_frame_seq.tolist() == [e[0] for e in raster_held]
            np.testing.assert_array_equal(view.raster, np.array([e[2] for e in raster_held]).reshape(-1, n))
            for array in (view.frame_seq, view.mean, view.raster, view.done_count):
                assert array.flags.c_contiguous and array.flags.owndata


def test_window_copies_do_not_alias_the_rings() -> None:
    history = History(2, capacity=4, raster_capacity=2)
    history.append(1, 0.0, np.array([1.0, 2.0], np.float32), np.zeros(2, np.uint8))
    view = history.window()
    view.mean[:] = 99
    view.raster[:] = 99
    again = history.window()
    assert again.mean[0] == 1.5 and again.raster[0, 1] == 2.0


def test_ring_helpers() -> None:
    ring = np.arange(5) * 10
    # entries 0..11 written; ring holds entries 7..11 at 7%5=2 .. 11%5=1
    for k in range(12):
        ring[k % 5] = k
    assert ring_tail(ring, 5, 12).tolist() == [7, 8, 9, 10, 11]
    assert ring_tail(ring, 2, 12).tolist() == [10, 11]
    assert ring_tail(ring, 0, 12).tolist() == []
    assert ring_count_since(ring.astype(float), 5, 12, 9.0) == 3
    assert ring_count_since(ring.astype(float), 5, 12, 100.0) == 0
    assert ring_count_since(ring.astype(float), 5, 12, -1.0) == 5
    block = np.stack([ring, ring + 100])
    assert ring_tail(block, 3, 12, axis=1).tolist() == [[9, 10, 11], [109, 110, 111]]


def test_memory_is_bounded() -> None:
    n = 64
    history = History(n, capacity=200, raster_capacity=50)
    history.set_selected([1, 2, 3])
    rewards, dones, truncs = frames(n, 16, seed=9)
    size = history.nbytes
    for k in range(300):
        history.append(k + 1, k, rewards[k % 16], dones[k % 16], truncs[k % 16])
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for k in range(300, 1300):
            history.append(k + 1, k, rewards[k % 16], dones[k % 16], truncs[k % 16])
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 16 * 1024
    assert history.nbytes == size
    assert len(history) == 200
    view = history.window()
    assert len(view) == 200 and view.raster.shape == (50, n)
    assert all(series.shape == (200,) for series in view.selected.values())


def test_selected_series_are_full_resolution_and_backfilled_from_the_raster() -> None:
    n = 10
    rewards, dones, _ = frames(n, 40, seed=4)
    history = History(n, capacity=30, raster_capacity=6)
    for k in range(20):
        history.append(k + 1, k, rewards[k], dones[k])
    history.set_selected([7, 2])
    assert history.selected == (7, 2)
    view = history.window()
    # The raster still held the last 6 frames: those are back-filled, older entries are NaN.
    for env in (7, 2):
        series = view.selected[env]
        assert series.dtype == np.float32 and series.shape == (20,)
        assert np.isnan(series[:14]).all()
        np.testing.assert_array_equal(series[14:], rewards[14:20, env])
    for k in range(20, 40):
        history.append(k + 1, k, rewards[k], dones[k])
    history.set_selected([2, 5])  # 2 keeps its series, 5 is new
    view = history.window()
    assert list(view.selected) == [2, 5]
    np.testing.assert_array_equal(view.selected[2][4:], rewards[14:40, 2])
    assert np.isnan(view.selected[2][:4]).all()
    np.testing.assert_array_equal(view.selected[5][-6:], rewards[34:40, 5])
    assert np.isnan(view.selected[5][:-6]).all()
    history.set_selected([])
    assert history.window().selected == {}


def test_selection_is_validated() -> None:
    history = History(10)
    with pytest.raises(HistoryError):
        history.set_selected(range(MAX_SELECTED + 1))
    with pytest.raises(HistoryError):
        history.set_selected([10])
    with pytest.raises(HistoryError):
        history.set_selected([-1])
    with pytest.raises(HistoryError):
        history.set_selected([1.5])  # type: ignore[list-item]
    with pytest.raises(HistoryError):
        history.set_selected([True])
    with pytest.raises(HistoryError):
        history.set_selected(5)  # type: ignore[arg-type]
    with pytest.raises(HistoryError):
        history.set_selected(iter(range(10**12)))  # refused without consuming it all
    history.set_selected([3, 3, np.int64(4), 3])
    assert history.selected == (3, 4)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_envs": 0},
        {"num_envs": 4097},
        {"num_envs": True},
        {"num_envs": 2.0},
        {"num_envs": 4, "capacity": 0},
        {"num_envs": 4, "capacity": 1 << 40},
        {"num_envs": 4, "raster_capacity": 0},
        {"num_envs": 4096, "raster_capacity": 1 << 20},
        {"num_envs": "8"},
    ],
)
def test_bad_sizes_are_typed_errors(kwargs: dict) -> None:
    with pytest.raises(HistoryError):
        History(**kwargs)


def test_bad_frames_are_typed_errors_and_record_nothing() -> None:
    history = History(3, capacity=8)
    ok = np.zeros(3, np.float32)
    flags = np.zeros(3, np.uint8)
    history.append(5, 1.0, ok, flags)
    bad_calls = [
        (5, 2.0, ok, flags, None),  # frame_seq repeats
        (4, 2.0, ok, flags, None),  # frame_seq goes back
        (6, 0.5, ok, flags, None),  # t goes back
        (6, math.nan, ok, flags, None),
        (6, math.inf, ok, flags, None),
        (6, "soon", ok, flags, None),
        (True, 2.0, ok, flags, None),
        (6.0, 2.0, ok, flags, None),
        (-1, 2.0, ok, flags, None),
        (1 << 64, 2.0, ok, flags, None),
        (6, 2.0, np.zeros(4, np.float32), flags, None),
        (6, 2.0, np.zeros((3, 1), np.float32), flags, None),
        (6, 2.0, np.array(["a", "b", "c"]), flags, None),
        (6, 2.0, ok, np.zeros(2, np.uint8), None),
        (6, 2.0, ok, flags, np.zeros(5, np.uint8)),
        (6, 2.0, ok, flags, np.array([None, None, None], dtype=object)),
    ]
    for call in bad_calls:
        with pytest.raises(HistoryError):
            history.append(*call)
    assert history.frames_seen == 1
    assert history.last_frame_seq == 5
    history.append(6, 1.0, ok, flags)  # same t is fine
    assert history.frames_seen == 2
    assert issubclass(HistoryError, LuckyMonitorError)


@pytest.mark.parametrize("seconds", [-1.0, math.nan, "10", True])
def test_bad_window_is_a_typed_error(seconds: object) -> None:
    history = History(2)
    with pytest.raises(HistoryError):
        history.window(seconds)  # type: ignore[arg-type]


def test_clear_starts_a_new_session() -> None:
    history = History(2, capacity=4)
    history.set_selected([1])
    for k in range(6):
        history.append(10 + 3 * k, k, np.full(2, k, np.float32), np.ones(2, np.uint8))
    generation = history.generation
    history.clear()
    assert history.generation != generation
    assert history.frames_seen == 0 and history.skipped_total == 0 and len(history) == 0
    assert history.last_frame_seq is None and not history.sampled
    assert len(history.window()) == 0 and history.window().raster.shape == (0, 2)
    history.append(1, 0.0, np.array([4.0, 5.0], np.float32), np.zeros(2, np.uint8))
    view = history.window()
    assert view.frame_seq.tolist() == [1] and view.skipped.tolist() == [0]
    assert view.selected[1].tolist() == [5.0]


def test_raster_tail() -> None:
    history = History(2, capacity=10, raster_capacity=4)
    for k in range(7):
        history.append(k + 1, k, np.array([k, -k], np.float32), np.zeros(2, np.uint8))
    seq, t, rows = history.raster_tail(2)
    assert seq.tolist() == [6, 7] and t.tolist() == [5.0, 6.0]
    assert rows.tolist() == [[5.0, -5.0], [6.0, -6.0]]
    seq, _, rows = history.raster_tail(100)
    assert seq.tolist() == [4, 5, 6, 7] and rows.shape == (4, 2)
    assert history.raster_tail(0)[2].shape == (0, 2)
    with pytest.raises(HistoryError):
        history.raster_tail(-1)


def read_csv(text: str) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(io.StringIO(text)))
    return rows[0], rows[1:]


def test_csv_parses_back_exactly(tmp_path) -> None:
    n = 20
    rewards, dones, truncs = frames(n, 50, seed=8)
    rewards[3, :] = np.nan
    history = History(n, capacity=40, raster_capacity=10)
    for k in range(50):
        history.append(2 * k + 1, k / 7, rewards[k], dones[k], truncs[k])
    history.set_selected([4, 0])
    buffer = io.StringIO()
    assert history.to_csv(buffer, wall_offset=1.8e9) == 40
    header, rows = read_csv(buffer.getvalue())
    assert header == [
        "frame_seq", "t_monotonic_s", "wall_time", "mean", "min", "max", "p10", "p90", "dones", "truncateds",
        "env_4", "env_0",
    ]  # fmt: skip
    view = history.window()
    assert len(rows) == 40
    # wall_time is the same instant as UTC ISO 8601 with milliseconds
    for row in rows:
        wall = datetime.datetime.fromisoformat(row[2].replace("Z", "+00:00"))
        assert abs(wall.timestamp() - (float(row[1]) + 1.8e9)) < 1e-3
    rows = [row[:2] + row[3:] for row in rows]
    table = np.array([[float(cell) for cell in row] for row in rows])
    for column, values in enumerate(
        (view.frame_seq, view.t, view.mean, view.min, view.max, view.p10, view.p90, view.done_count, view.trunc_count)
    ):
        np.testing.assert_array_equal(table[:, column], values.astype(np.float64))
    assert all(row[0].isdigit() and row[7].isdigit() for row in rows)
    np.testing.assert_array_equal(table[:, 9], view.selected[4].astype(np.float64))
    np.testing.assert_array_equal(table[:, 10], view.selected[0].astype(np.float64))

    path = tmp_path / "history.csv"
    assert history.to_csv(path, seconds=2.0) == len(history.window(2.0))
    header2, rows2 = read_csv(path.read_text(encoding="utf-8"))
    assert header2 == header
    assert [int(row[0]) for row in rows2] == history.window(2.0).frame_seq.tolist()


def test_csv_errors_are_typed(tmp_path) -> None:
    history = History(2)
    with pytest.raises(HistoryError):
        history.to_csv(tmp_path / "missing-dir" / "x.csv")
    with pytest.raises(HistoryError):
        history.to_csv(tmp_path)  # a directory
    with pytest.raises(HistoryError):
        history.to_csv(tmp_path / "x.csv", seconds=-3)


def test_empty_history_csv_has_only_a_header() -> None:
    buffer = io.StringIO()
    assert History(3).to_csv(buffer) == 0
    assert buffer.getvalue() == "frame_seq,t_monotonic_s,wall_time,mean,min,max,p10,p90,dones,truncateds\n"


def test_history_module_does_not_import_qt() -> None:
    code = (
        "import sys, lucky_monitor.core.history\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6', 'pyqtgraph')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_selected_envs_colour_slot_sticks_while_it_stays_selected() -> None:
    """Seen: colours dealt by place in the selection changed every curve's colour when a selected env was
    Ctrl-clicked again (it becomes the last), and a double-click that left one env gave it the first colour."""
    h = History(16)
    h.set_selected([5, 0, 9])
    assert [h.colour_slot(e) for e in (5, 0, 9)] == [0, 1, 2]
    h.set_selected([0, 9, 5])  # 5 again: now the last, the primary
    assert [h.colour_slot(e) for e in (5, 0, 9)] == [0, 1, 2]
    h.set_selected([9])  # the double-click's first click
    assert h.colour_slot(9) == 2
    h.set_selected([9, 4, 7])  # new envs take the lowest free slots
    assert [h.colour_slot(e) for e in (9, 4, 7)] == [2, 0, 1]
    h.set_selected(range(8))
    assert sorted(h.colour_slot(e) for e in range(8)) == list(range(8))  # eight envs, eight colours
