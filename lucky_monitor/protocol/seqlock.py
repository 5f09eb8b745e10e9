"""Torn-read detection for the image region and the hot arrays.

Theory of operation
-------------------
*Images* are guarded by a seqlock. The engine makes ``image_seq`` odd, writes
every env's image, sets ``image_frame_seq``, then makes ``image_seq`` even
again. A reader loads ``image_seq`` (s1); odd means a write is in progress, so
it skips. Otherwise it copies, loads ``image_seq`` again (s2) and keeps the
copy only if s1 == s2. A writer that never pauses could starve a reader, so
retries are capped: the caller keeps its last good frame and counts the torn
attempts.

*Hot data* (observations, rewards, dones, truncateds) is written by the engine
only during its lock-step turn, i.e. after the trainer set ``action_seq ==
frame_seq`` and before it bumps ``frame_seq``. A copy is consistent when
``frame_seq`` did not change across it and the engine did not hold the turn at
either end. In free-run (no trainer attached) only the ``frame_seq`` comparison
is available, which the result records.

On x86-64 an aligned 8-byte load is atomic and stores are not reordered with
other stores, so plain loads through a ``memoryview`` cast are sound here. This
module performs no I/O: the caller passes counter readers and copy callables.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_RETRIES = 3


@dataclass(frozen=True)
class SeqlockResult:
    """Outcome of one guarded copy.

    Attributes
    ----------
    ok : bool
        The copy is consistent (the destination holds one whole publication).
    seq : int
        The even ``image_seq`` the copy belongs to (valid when ``ok``).
    torn : int
        Attempts discarded because a write was in progress or overlapped.
    """

    ok: bool
    seq: int
    torn: int


def seqlock_read(
    read_seq: Callable[[], int],
    copy: Callable[[], object],
    *,
    max_retries: int = DEFAULT_RETRIES,
    spin_s: float = 0.003,
) -> SeqlockResult:
    """Run ``copy`` under the seqlock ``read_seq``.

    While the writer holds the lock (odd ``image_seq``) the reader re-reads
    the counter, without copying, for at most ``spin_s`` seconds. A copy that
    overlapped a write is discarded (``torn`` counts them) and retried at most
    ``max_retries`` times. On ``ok == False`` the destination holds garbage
    and the caller must keep showing its previous frame.
    """
    torn = 0
    deadline = time.perf_counter() + spin_s
    while True:
        s1 = read_seq()
        if s1 & 1:
            if time.perf_counter() < deadline:
                continue
            return SeqlockResult(False, 0, torn)
        copy()
        if read_seq() == s1:
            return SeqlockResult(True, s1, torn)
        torn += 1
        if torn > max_retries:
            return SeqlockResult(False, 0, torn)


@dataclass(frozen=True)
class HotReadResult:
    """Outcome of one copy of the hot arrays.

    ``checked`` is ``"lockstep"`` when both counters guarded the copy and
    ``"frame_seq"`` in free-run, where only ``frame_seq`` could be compared.
    ``"engine-step"``: nothing was copied (``ok`` False, nothing torn): the
    engine held the turn past the wait and was known to be inside its step.
    """

    ok: bool
    frame_seq: int
    action_seq: int
    torn: int
    checked: str


def hot_read(
    read_frame: Callable[[], int],
    read_action: Callable[[], int],
    copy: Callable[[], object],
    *,
    free_run: bool,
    max_retries: int = DEFAULT_RETRIES,
    spin_s: float = 0.0005,
    mid_step: Callable[[], bool] | None = None,
    pause: Callable[[], None] | None = None,
) -> HotReadResult:
    """Copy the hot arrays with ``copy`` and tell how well the copy is guarded.

    In lock-step the engine writes only while ``action_seq == frame_seq``; a
    copy that starts and ends in the trainer's turn of the same frame saw no
    engine write (``checked == "lockstep"``). While the engine holds the turn
    the reader spins on the two counters (no copying) for at most ``spin_s``
    seconds. An engine that keeps the turn longer (a realtime engine waiting
    for its next time slot holds it for most of the period) gets the same
    best-effort check as free-run: an unchanged ``frame_seq`` across the copy
    (``checked == "frame_seq"``), unless ``mid_step`` says the engine is
    inside its step: then the arrays may already hold the next frame's values,
    unpublished, and nothing is copied (LAYOUT §8.2: in the engine's turn, do
    not copy; ``checked == "engine-step"``). ``torn`` counts copies discarded
    because a check failed; they are retried at most ``max_retries`` times.
    ``pause`` is called at each turn of the spin (the monitor naps there:
    the engine and the trainer waiting for the same turn keep the core, and
    the wait costs no CPU), never during a copy.
    """
    torn = 0
    deadline = time.perf_counter() + spin_s
    f1 = a1 = 0
    checked = "frame_seq" if free_run else "lockstep"
    while True:
        f1, a1 = read_frame(), read_action()
        if checked == "lockstep" and a1 == f1 and f1 != 0:
            if time.perf_counter() < deadline:
                if pause is not None:
                    pause()
                continue  # the engine holds the turn and may be writing right now
            if mid_step is not None and mid_step():
                return HotReadResult(False, f1, a1, torn, "engine-step")
            checked = "frame_seq"
        copy()
        f2, a2 = read_frame(), read_action()
        if f2 == f1 and (checked == "frame_seq" or a2 != f2):
            return HotReadResult(True, f1, a1, torn, checked)
        torn += 1
        if torn > max_retries:
            return HotReadResult(False, f1, a1, torn, checked)


def engine_turn_read(
    read_frame: Callable[[], int],
    read_action: Callable[[], int],
    copy: Callable[[], object],
) -> HotReadResult:
    """Copy the trainer-written ``act`` region with ``copy``, only inside the engine's turn (one attempt).

    The trainer writes actions only in its own turn (``frame_seq - action_seq
    == 1``) and hands over by storing ``action_seq = frame_seq``; from then
    until the engine publishes the next frame the actions of frame
    ``action_seq`` are stable. A copy is consistent when both counters are
    equal (and non-zero) before it and unchanged after it. Outside the
    engine's turn nothing is copied (``ok`` False, ``torn`` 0): the caller
    tries again at a later poll, never spins. ``checked`` is ``"turn"``.
    """
    f1, a1 = read_frame(), read_action()
    if not (a1 == f1 and f1 != 0):
        return HotReadResult(False, f1, a1, 0, "turn")
    copy()
    f2, a2 = read_frame(), read_action()
    ok = f2 == f1 and a2 == a1
    return HotReadResult(ok, f1, a1, 0 if ok else 1, "turn")
