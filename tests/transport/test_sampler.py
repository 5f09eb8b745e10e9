"""The sampling helper's own seqlock: a sample overlapping a write is retried, never answered as consistent."""

from __future__ import annotations

import numpy as np

from lucky_monitor.core.tiler import shrink_tiles
from lucky_monitor.transport.sampler import _ANSWER, _sample_consistent


class _Counters:
    """Stands in for a segment's ``read_counter``: ``image_seq`` follows a script, one value per read."""

    def __init__(self, image_seqs: list[int]) -> None:
        self.image_seqs = image_seqs
        self.reads = 0

    def read_counter(self, field: str) -> int:
        if field == "image_frame_seq":
            return 77
        v = self.image_seqs[min(self.reads, len(self.image_seqs) - 1)]
        self.reads += 1
        return v


def _answer(seg: _Counters, images: np.ndarray, spans: list[tuple[int, int]], flip: bool = False):
    result = np.zeros((images.shape[0], 4, 4, 3), np.uint8)
    ok, seq, frame_seq, torn = _ANSWER.unpack(_sample_consistent(seg, images, result, shrink_tiles, spans, flip))
    return bool(ok), seq, frame_seq, torn, result


def test_a_consistent_sample_reports_its_image_seq_and_frame() -> None:
    images = np.random.default_rng(1).integers(0, 256, (6, 16, 16, 3), dtype=np.uint8)
    ok, seq, frame_seq, torn, result = _answer(_Counters([8, 8]), images, [(0, 2), (4, 6)], flip=True)
    assert (ok, seq, frame_seq, torn) == (True, 8, 77, 0)
    np.testing.assert_array_equal(result[:2], shrink_tiles(images[:2, ::-1], 4, 4))
    np.testing.assert_array_equal(result[4:], shrink_tiles(images[4:, ::-1], 4, 4))
    assert not result[2:4].any()  # envs outside the spans are not touched


def test_a_sample_overlapping_a_write_is_retried_and_a_writer_that_never_stops_gives_no_answer() -> None:
    images = np.zeros((2, 8, 8, 3), np.uint8)
    # moved during the first sample, stable for the second: consistent, one torn attempt
    assert _answer(_Counters([2, 4, 4, 4]), images, [(0, 2)])[:4] == (True, 4, 77, 1)
    # moved during every sample: never reported consistent
    ok, _, _, torn, _ = _answer(_Counters(list(range(2, 200, 2))), images, [(0, 2)])
    assert not ok and torn >= 3
    # the writer holds the lock (odd) past the spin: no sample taken
    ok, _, _, torn, _ = _answer(_Counters([5]), images, [(0, 2)])
    assert not ok and torn == 0
