"""Seqlock and hot-read guards against a scripted writer."""

from __future__ import annotations

import numpy as np

from lucky_monitor.protocol.seqlock import hot_read, seqlock_read


class ScriptedCounter:
    """Returns the scripted values in turn, then repeats the last one."""

    def __init__(self, *values: int) -> None:
        self.values = list(values)
        self.reads = 0

    def __call__(self) -> int:
        v = self.values[min(self.reads, len(self.values) - 1)]
        self.reads += 1
        return v


def test_seqlock_stable_copy_is_ok():
    src, dst = np.arange(10, dtype=np.uint8), np.zeros(10, np.uint8)
    r = seqlock_read(ScriptedCounter(4, 4), lambda: np.copyto(dst, src))
    assert r.ok and r.seq == 4 and r.torn == 0
    assert (dst == src).all()


def test_seqlock_waits_out_a_write_without_copying():
    copies = []
    r = seqlock_read(ScriptedCounter(5, 5, 5, 6, 6), lambda: copies.append(1))
    assert r.ok and r.seq == 6 and r.torn == 0
    assert len(copies) == 1  # no copy was made while the writer held the lock


def test_seqlock_gives_up_on_a_writer_that_keeps_the_lock():
    copies = []
    r = seqlock_read(lambda: 7, lambda: copies.append(1), spin_s=0.001)
    assert not r.ok and copies == []


def test_seqlock_detects_overlapping_write():
    r = seqlock_read(ScriptedCounter(4, 6, 6, 6), lambda: None)
    assert r.ok and r.seq == 6 and r.torn == 1


def test_seqlock_caps_retries_against_a_writer_that_never_pauses():
    seq = iter(range(1, 10_000))
    calls = []
    r = seqlock_read(lambda: next(seq), lambda: calls.append(1), max_retries=3)
    assert not r.ok
    assert r.torn == 4
    assert len(calls) <= 4


def test_hot_read_consistent_in_trainers_turn():
    r = hot_read(ScriptedCounter(7, 7), ScriptedCounter(6, 6), lambda: None, free_run=False)
    assert r.ok and r.frame_seq == 7 and r.checked == "lockstep"


def test_hot_read_rejects_copy_overlapping_engine_turn():
    # Trainer's turn at start, trainer hands over during the copy (action == frame at the end).
    frames = ScriptedCounter(7, 7, 7)
    actions = ScriptedCounter(6, 7, 7)
    r = hot_read(frames, actions, lambda: None, free_run=False, max_retries=0, spin_s=0)
    assert not r.ok and r.torn == 1


def test_hot_read_falls_back_to_frame_check_when_the_engine_keeps_the_turn():
    # A realtime engine waiting for its time slot holds the turn for most of a period.
    copies = []
    r = hot_read(lambda: 9, lambda: 9, lambda: copies.append(1), free_run=False, spin_s=0.001)
    assert r.ok and r.checked == "frame_seq" and len(copies) == 1


def test_hot_read_waits_out_engine_turn():
    # Engine's turn for two reads, then the frame is published: trainer's turn.
    frames = ScriptedCounter(7, 7, 8, 8, 8)
    actions = ScriptedCounter(7, 7, 7, 7, 7)
    copies = []
    r = hot_read(frames, actions, lambda: copies.append(1), free_run=False, spin_s=1.0)
    assert r.ok and r.frame_seq == 8
    assert len(copies) == 1


def test_hot_read_free_run_checks_frame_only():
    r = hot_read(ScriptedCounter(3, 4, 4, 4), ScriptedCounter(0), lambda: None, free_run=True)
    assert r.ok and r.frame_seq == 4 and r.torn == 1 and r.checked == "frame_seq"
