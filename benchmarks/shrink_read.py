"""Shrinking the overview without touching a mapping: the ways to read the image region, timed side by side.

The monitor never loads from a mapping of the segment (a truncation under a
load is a SIGBUS). For the overview of many small tiles shown smaller than
their pixels this prints one JSON line per configuration with the median
time of one frame's shrink (all envs, to tiles ``--factor`` times smaller,
:func:`lucky_monitor.core.tiler.shrink_tiles`), read:

* ``mapping_ms`` - straight from a read-only mapping (what the monitor did
  before; the baseline: it reads only the sampled pixels);
* ``pread_chunks_ms`` - a 3 MiB chunk at a time copied with ``preadv``, then
  shrunk (the session's fallback path);
* ``preadv_sink_ms`` - only the sampled rows copied, the others sent into one
  small sink buffer (one iovec per run of rows), then shrunk;
* ``helper_ms`` - by :class:`~lucky_monitor.transport.sampler.ImageSampler`, the
  helper process that maps the segment (one request: the round trip plus its
  shrink, waited for here), which is what the session uses; the session does
  not wait for it, it collects the answer at a later poll.

Ratios are to ``mapping_ms``. Nothing is asserted.

Usage::

    python benchmarks/shrink_read.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import emit, machine_facts

CONFIGS = [(4096, 64, 64, 12), (256, 128, 128, 6), (16, 256, 256, 3)]  # envs, height, width, shrink factor


def median_ms(fn: Callable[[], object], reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1e3, 3)


def bench_one(n: int, h: int, w: int, factor: int, reps: int, quick: bool) -> None:
    """Time the four ways for one configuration and print its JSON line."""
    from lucky_monitor.core.tiler import shrink_tiles
    from lucky_monitor.protocol.header import plan
    from lucky_monitor.transport.sampler import ImageSampler
    from lucky_monitor.transport.shm import EngineSegment, Segment

    th, tw = -(-h // factor), -(-w // factor)
    name = f"LuckyEngine_shrink_{secrets.token_hex(5)}"
    header = plan(num_envs=n, obs_size=8, act_size=2, image=(w, h, 3), server_pid=os.getpid(), session_id=7)
    eng = EngineSegment.create(name, header)
    sampler = None
    try:
        eng.images[:] = np.random.default_rng(1).integers(0, 256, eng.images.shape, dtype=np.uint8)  # type: ignore[index]
        seg = Segment.attach(name)
        images = seg.images
        assert images is not None
        out = np.empty((n, th, tw, 3), np.uint8)
        per = h * w * 3
        k = max(1, (3 << 20) // per)
        chunk = np.empty((k, h, w, 3), np.uint8)

        def from_mapping() -> None:
            for a in range(0, n, k):
                out[a : a + k] = shrink_tiles(images[a : a + k], th, tw)

        def pread_chunks() -> None:
            for a in range(0, n, k):
                part = chunk[: min(k, n - a)]
                seg.read_region(header.image_offset + a * per, part)
                out[a : a + len(part)] = shrink_tiles(part, th, tw)

        # the rows shrink_tiles samples: those whose lighting alone changes its output
        rows_needed = []
        for r in range(h):
            probe = np.zeros((1, h, w, 3), np.uint8)
            probe[0, r] = 255
            if shrink_tiles(probe, th, tw).any():
                rows_needed.append(r)
        sink = bytearray(h * w * 3)
        compact = np.empty((n, h, w, 3), np.uint8)  # rows not needed stay unset
        cm = memoryview(compact).cast("B")
        row = w * 3
        iovs: list[memoryview] = []
        for e in range(n):
            prev = 0
            for r in rows_needed:
                if r > prev:
                    iovs.append(memoryview(sink)[: (r - prev) * row])
                at = (e * h + r) * row
                iovs.append(cm[at : at + row])
                prev = r + 1
            if prev < h:
                iovs.append(memoryview(sink)[: (h - prev) * row])
        fd = seg._fd
        assert fd is not None

        def preadv_sink() -> None:
            off = header.image_offset
            for i in range(0, len(iovs), 1024):
                off += os.preadv(fd, iovs[i : i + 1024], off)
            for a in range(0, n, k):
                out[a : a + k] = shrink_tiles(compact[a : a + k], th, tw)

        sampler = ImageSampler.start(seg, "lucky_monitor.core.tiler:shrink_tiles", n * h * w * 3)
        helper_ms = None
        if sampler is not None:
            end = time.monotonic() + 30
            while not sampler.ready() and time.monotonic() < end:
                time.sleep(0.01)
            s = sampler

            def round_trip() -> None:  # one request and its answer, waited for
                s.submit([(0, n)], False, (n, th, tw, 3))
                if s.result(wait_s=5.0) is None:
                    raise SystemExit("the sampling helper did not answer within 5 s")

            helper_ms = median_ms(round_trip, reps)
        base = median_ms(from_mapping, reps)
        figures = {
            "mapping_ms": base,
            "pread_chunks_ms": median_ms(pread_chunks, reps),
            "preadv_sink_ms": median_ms(preadv_sink, reps),
            "preadv_sink_iovecs": len(iovs),
            "helper_ms": helper_ms,
        }
        emit(
            {
                "benchmark": "shrink_read",
                "mode": "quick" if quick else "full",
                "num_envs": n,
                "image": f"{w}x{h}x3",
                "image_bytes": n * per,
                "shrink_factor": factor,
                **figures,
                "ratios_to_mapping": {
                    k2: round(v / base, 2) for k2, v in figures.items() if k2.endswith("_ms") and v is not None
                },
            },
            facts=machine_facts(),
        )
        seg.close()
    finally:
        if sampler is not None:
            sampler.close()
        eng.unlink()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="7 repetitions instead of 31")
    args = p.parse_args(argv)
    reps = 7 if args.quick else 31
    for n, h, w, factor in CONFIGS:
        bench_one(n, h, w, factor, reps, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
