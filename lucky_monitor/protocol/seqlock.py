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
) -> SeqlockResult:
    """Run ``copy`` under the seqlock ``read_seq``; retry at most ``max_retries`` times.

    ``copy`` must write into a buffer the caller owns; on ``ok == False`` that
    buffer holds garbage and the caller must keep showing its previous frame.
    """
    torn = 0
    for _ in range(max_retries + 1):
        s1 = read_seq()
        if s1 & 1:
            torn += 1
            continue
        copy()
        if read_seq() == s1:
            return SeqlockResult(True, s1, torn)
        torn += 1
    return SeqlockResult(False, 0, torn)


@dataclass(frozen=True)
class HotReadResult:
    """Outcome of one copy of the hot arrays.

    ``checked`` is ``"lockstep"`` when both counters guarded the copy and
    ``"frame_seq"`` in free-run, where only ``frame_seq`` could be compared.
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
    spin_s: float = 0.002,
) -> HotReadResult:
    """Copy the hot arrays with ``copy`` and tell whether the copy is whole.

    In lock-step the engine writes only while ``action_seq == frame_seq``; a
    copy that starts and ends in the trainer's turn of the same frame saw no
    engine write. While the engine holds the turn the reader spins on the two
    counters (no copying) for at most ``spin_s`` seconds waiting for the
    trainer's turn; a copy that overlaps an engine write is retried at most
    ``max_retries`` times. In free-run only an unchanged ``frame_seq`` is
    checked.
    """
    torn = 0
    checked = "frame_seq" if free_run else "lockstep"
    deadline = time.perf_counter() + spin_s
    f1 = a1 = 0
    attempts = 0
    while attempts <= max_retries:
        f1, a1 = read_frame(), read_action()
        if not free_run and a1 == f1 and f1 != 0:
            # The engine holds the turn and may be writing right now.
            if time.perf_counter() < deadline:
                continue
            return HotReadResult(False, f1, a1, torn + 1, checked)
        attempts += 1
        copy()
        f2, a2 = read_frame(), read_action()
        if f2 == f1 and (free_run or a2 != f2):
            return HotReadResult(True, f1, a1, torn, checked)
        torn += 1
    return HotReadResult(False, f1, a1, torn, checked)
