"""The Yielder: the core is offered after each quantum of work, never more often, never with the quantum 0."""

from __future__ import annotations

import time

import pytest

from lucky_monitor.core.pacing import DEFAULT_YIELD_US, Yielder
from lucky_monitor.protocol.seqlock import hot_read


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def make(quantum_us: float) -> tuple[Yielder, Clock, list[float]]:
    clock, offers = Clock(), []
    return Yielder(quantum_us, clock=clock, yield_=lambda: offers.append(clock.t)), clock, offers


def test_the_core_is_offered_once_a_quantum_of_work_has_passed() -> None:
    y, clock, offers = make(100)
    clock.t = 50e-6
    y()  # 50 µs of work: not yet
    assert offers == []
    clock.t = 100e-6
    y()
    assert offers == [100e-6] and y.count == 1
    clock.t = 150e-6
    y()  # the quantum counts from the last offer
    assert offers == [100e-6]
    clock.t = 260e-6
    y()
    assert offers == [100e-6, 260e-6] and y.count == 2


def test_begin_starts_the_quantum_after_a_wait() -> None:
    y, clock, offers = make(100)
    clock.t = 1.0  # the process slept in its event loop: that was no work
    y.begin()
    clock.t = 1.0 + 40e-6
    y()
    assert offers == []
    clock.t = 1.0 + 120e-6
    y()
    assert len(offers) == 1


def test_quantum_zero_never_offers_and_a_spin_follows_the_quantum() -> None:
    y, clock, offers = make(0)
    for k in range(10):
        clock.t = k * 1e-3
        y()
        y()
    assert offers == [] and not y.enabled
    y, clock, offers = make(100)
    for k in range(10):  # a spin polling a counter every 30 µs offers the core every fourth turn
        clock.t = k * 30e-6
        y()
    assert len(offers) == 2


def test_no_offer_while_the_machine_has_idle_cores() -> None:
    """Told the cores are not contended, it offers nothing (a system call for no one); told again, it does."""
    y, clock, offers = make(100)
    assert y.active
    y.contended = False
    assert not y.active and y.enabled
    for k in range(1, 10):
        clock.t = k * 1e-3
        y()
    assert offers == []
    y.contended = True
    clock.t = 1.0
    y()
    assert len(offers) == 1


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan")])
def test_a_bad_quantum_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="quantum_us"):
        Yielder(bad)


def test_the_default_is_a_real_yield_that_returns() -> None:
    y = Yielder(DEFAULT_YIELD_US)
    y.quantum_s = 1e-9
    y()
    assert y.count == 1


def test_hot_read_pauses_while_the_engine_holds_the_turn_and_never_during_a_copy() -> None:
    """The spin calls ``pause`` at each turn of its loop; the copy and its check run with no pause between."""
    events: list[str] = []
    frame, action = 5, 5  # the engine's turn: action_seq == frame_seq
    turns = {"n": 0}

    def read_frame() -> int:
        return frame

    def read_action() -> int:
        nonlocal action
        turns["n"] += 1
        if turns["n"] == 4:
            action = frame - 1  # the engine published frame 5: the trainer's turn, which it has not answered yet
        return action

    def pause() -> None:
        events.append("pause")

    def copy() -> None:
        events.append("copy")

    res = hot_read(read_frame, read_action, copy, free_run=False, spin_s=1.0, pause=pause)
    assert res.ok and res.checked == "lockstep"
    assert events == ["pause", "pause", "pause", "copy"]


def test_paced_ends_on_time_at_a_slow_rate() -> None:
    # export --poll-hz 0.1 --seconds 0.5 had run 10.5 s: the sleep to the next step went past the end.
    from lucky_monitor.core.pacing import paced

    t0 = time.monotonic()
    steps = list(paced(0.1, 0.5))
    assert len(steps) == 1
    assert time.monotonic() - t0 < 2.0
