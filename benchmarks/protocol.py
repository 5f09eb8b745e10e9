"""Micro-benchmarks of the protocol layer, each against a baseline measured in the same run.

Cases (one JSON line each on stdout):

``header_parse``
    :func:`lucky_monitor.protocol.header.validate` of a planned 4096-byte
    header, per call, against a bare ``struct.Struct.unpack_from`` of the same
    340 field bytes.
``seqlock_copy``
    :func:`lucky_monitor.protocol.seqlock.seqlock_read` guarding an
    ``np.copyto`` of the whole image region (64 envs x 128x128x3, 3 MiB) of a
    real segment, created engine-side and attached read-only, against the bare
    ``np.copyto``. Nothing writes the segment meanwhile, so this is the
    uncontended cost of the guard.
``ring_raw`` / ``ring_envelope``
    Messages per second through a 512 KiB command ring in one process
    (``RingWriter.push`` of a batch, then ``RingReader.pop`` of it), for
    128-byte and 4 KiB payloads; the envelope variant encodes a ``DrawReq``
    envelope per message before the push and decodes it after the pop, so the
    figure includes the codec. Baseline: ``collections.deque`` append/popleft
    of the same ``bytes`` objects. The envelope variant also reports the codec
    alone (encode + decode, no ring).

Measured pairs are interleaved round by round (A, B, B, A, ...) so drift in a
shared machine hits both sides alike; figures are medians with p10/p90. No
timing is ever asserted: the numbers are for reading, not for passing.

Usage::

    python benchmarks/protocol.py [--quick] [--case NAME ...]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import secrets
import statistics
import struct
import sys
import time
import timeit
from collections.abc import Callable
from typing import Any

import numpy as np

from lucky_monitor.protocol import envelope, header, messages
from lucky_monitor.protocol.ring import RingReader, RingWriter, init_ring, ring_size_bytes
from lucky_monitor.protocol.seqlock import seqlock_read
from lucky_monitor.transport.shm import EngineSegment, Segment

CASES = ("header_parse", "seqlock_copy", "ring_raw", "ring_envelope")
RING_CAPACITY = 512 * 1024
PAYLOAD_SIZES = (128, 4096)
NUM_ENVS, IMAGE = 64, (128, 128, 3)  # 64 * 128 * 128 * 3 = 3,145,728 bytes


# --------------------------------------------------------------------------- machine facts


def machine_facts() -> dict[str, Any]:
    """CPU model, core counts, Python and library versions of this host.

    Returns
    -------
    dict
        ``cpu_model`` (from ``/proc/cpuinfo`` where there is one),
        ``logical_cores``, ``usable_cores`` (this process's CPU affinity),
        ``python``, ``numpy``, ``flatbuffers``, ``platform`` and ``loadavg``
        (1/5/15 min, ``None`` where unknown).
    """
    model = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware", "cpu model"):
                    model = value.strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    try:
        import flatbuffers

        fb_version = getattr(flatbuffers, "__version__", None)
    except ImportError:  # pragma: no cover - a dependency of the package
        fb_version = None
    return {
        "cpu_model": model or platform.processor() or None,
        "logical_cores": os.cpu_count(),
        "usable_cores": usable,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "numpy": np.__version__,
        "flatbuffers": fb_version,
        "platform": platform.platform(),
        "loadavg": load,
    }


# --------------------------------------------------------------------------- timing helpers


def _stats(samples: list[float], digits: int = 3) -> dict[str, float]:
    """Median, p10 and p90 of ``samples``, rounded."""
    q = statistics.quantiles(samples, n=10, method="inclusive") if len(samples) > 1 else samples * 9
    return {
        "median": round(statistics.median(samples), digits),
        "p10": round(q[0], digits),
        "p90": round(q[-1], digits),
    }


def _calibrate(timer: timeit.Timer, target_s: float) -> int:
    """Smallest call count (a power of four) whose loop takes at least ``target_s``."""
    number = 1
    while True:
        if timer.timeit(number) >= target_s or number >= 10**7:
            return number
        number *= 4


def _interleaved(a: Callable[[], float], b: Callable[[], float], rounds: int) -> tuple[list[float], list[float]]:
    """Run ``a`` and ``b`` ``rounds`` times each, alternating which goes first; collect their results."""
    out_a: list[float] = []
    out_b: list[float] = []
    for i in range(rounds):
        if i % 2:
            out_b.append(b())
            out_a.append(a())
        else:
            out_a.append(a())
            out_b.append(b())
    return out_a, out_b


def _emit(record: dict[str, Any], facts: dict[str, Any], quick: bool) -> None:
    record = {"bench": "protocol", **record, "quick": quick, "machine": facts}
    print(json.dumps(record), flush=True)


# --------------------------------------------------------------------------- cases


def _plan() -> header.Header:
    return header.plan(num_envs=NUM_ENVS, obs_size=48, act_size=12, image=IMAGE, server_pid=os.getpid())


def bench_header_parse(quick: bool) -> dict[str, Any]:
    """``header.validate`` per call vs a bare ``unpack_from`` of the 340 field bytes."""
    h = _plan()
    buf = h.pack()
    size = h.segment_size
    header.validate(buf, size)  # must pass: a benchmark of the error path would mislead
    fmt, pos = "<", 0
    for _, off, code in header.FIELDS:
        fmt += f"{off - pos}x" if off > pos else ""
        fmt += code
        pos = off + struct.calcsize("<" + code)
    raw = struct.Struct(fmt)
    if raw.size != 340 or raw.unpack_from(buf, 0)[0] != header.MAGIC:
        raise RuntimeError(f"baseline struct does not match the header layout ({raw.size} bytes)")

    t_val = timeit.Timer("validate(buf, size)", globals={"validate": header.validate, "buf": buf, "size": size})
    t_raw = timeit.Timer("unpack_from(buf, 0)", globals={"unpack_from": raw.unpack_from, "buf": buf})
    target = 0.002 if quick else 0.01
    n_val, n_raw = _calibrate(t_val, target), _calibrate(t_raw, target)
    rounds = 21 if quick else 61
    val, base = _interleaved(
        lambda: t_val.timeit(n_val) / n_val * 1e9, lambda: t_raw.timeit(n_raw) / n_raw * 1e9, rounds
    )
    sv, sb = _stats(val, 1), _stats(base, 1)
    return {
        "case": "header_parse",
        "what": "header.validate(buf, segment_size) of a plan()'d 4096-byte header",
        "ns_per_call": sv,
        "calls_per_repeat": n_val,
        "repeats": rounds,
        "baseline": {
            "what": "struct.Struct.unpack_from of the same 340 field bytes",
            "ns_per_call": sb,
            "calls_per_repeat": n_raw,
        },
        "ratio": round(sv["median"] / sb["median"], 2),
    }


def bench_seqlock_copy(quick: bool) -> dict[str, Any]:
    """Seqlock-guarded copy of the image region of a real segment vs a bare copy."""
    name = f"lmbench_protocol_{os.getpid()}_{secrets.token_hex(4)}"
    engine = EngineSegment.create(name, _plan())
    reader: Segment | None = None
    try:
        if engine.images is None:
            raise RuntimeError("planned segment has no image region")
        engine.images[...] = np.random.default_rng(1).integers(0, 256, engine.images.shape, dtype=np.uint8)
        engine.set("image_seq", 2)
        reader = Segment.attach(name)
        src = reader.images
        if src is None:
            raise RuntimeError("planned segment has no image region")
        nbytes = src.nbytes
        dst = np.empty_like(src)

        def read_seq() -> int:
            return reader.counter("image_seq")

        def copy() -> None:
            np.copyto(dst, src)

        torn = 0

        def guarded() -> float:
            nonlocal torn
            t0 = time.perf_counter_ns()
            res = seqlock_read(read_seq, copy)
            t1 = time.perf_counter_ns()
            torn += res.torn
            if not res.ok:
                raise RuntimeError(f"seqlock read failed on an idle segment ({res})")
            return (t1 - t0) / 1e3

        def bare() -> float:
            t0 = time.perf_counter_ns()
            np.copyto(dst, src)
            return (time.perf_counter_ns() - t0) / 1e3

        for _ in range(5):  # fault the pages in on both sides
            bare()
            guarded()
        if not np.array_equal(dst, engine.images):
            raise RuntimeError("copy through the read-only mapping differs from what the engine wrote")
        rounds = 400 if quick else 3000
        g, b = _interleaved(guarded, bare, rounds)
        sg, sb = _stats(g), _stats(b)
        return {
            "case": "seqlock_copy",
            "what": "seqlock_read(image_seq, np.copyto(dst, seg.images)) through a read-only attach",
            "bytes": nbytes,
            "shape": list(src.shape),
            "writer": "idle",
            "us_per_copy": sg,
            "gb_per_s": round(nbytes / sg["median"] / 1e3, 2),
            "torn": torn,
            "repeats": rounds,
            "baseline": {
                "what": "bare np.copyto(dst, seg.images)",
                "us_per_copy": sb,
                "gb_per_s": round(nbytes / sb["median"] / 1e3, 2),
            },
            "ratio": round(sg["median"] / sb["median"], 3),
        }
    finally:
        if reader is not None:
            reader.close()
        engine.unlink()


def _draw_envelope(target: int) -> tuple[envelope.Envelope, int]:
    """A DrawReq envelope with the fewest lines that encodes to at least ``target`` bytes."""
    n = 0
    while True:
        lines = tuple(
            messages.Line(
                messages.Vec3(float(i), 0.5, 1.0),
                messages.Vec3(1.0, float(i), 2.0),
                messages.Color(1.0, 0.25, 0.125, 1.0),
            )
            for i in range(n)
        )
        env = envelope.Envelope(messages.MethodId.DrawReq, 1000 + n, messages.DrawReq(lines=lines))
        size = len(envelope.encode(env))
        if size >= target:
            return env, n
        n += max(1, (target - size) // 64)


def _ring_pair(
    payloads: list[bytes],
    produce: Callable[[RingWriter], None],
    consume: Callable[[RingReader], None],
    rounds: int,
) -> tuple[list[float], list[float]]:
    """Per-message seconds of one push+pop batch through a ring vs a deque, interleaved."""
    ring = bytearray(ring_size_bytes(RING_CAPACITY))
    init_ring(ring, 0)
    w, r = RingWriter(ring, 0, RING_CAPACITY), RingReader(ring, 0, RING_CAPACITY)
    k = len(payloads)
    dq: collections.deque[bytes] = collections.deque()
    dq_reps = 16  # a deque batch is so short that one alone would mostly time the clock

    def through_ring() -> float:
        t0 = time.perf_counter()
        produce(w)
        consume(r)
        return (time.perf_counter() - t0) / k

    def through_deque() -> float:
        append, popleft = dq.append, dq.popleft
        t0 = time.perf_counter()
        for _ in range(dq_reps):
            for p in payloads:
                append(p)
            for _ in range(k):
                popleft()
        return (time.perf_counter() - t0) / (k * dq_reps)

    try:
        through_ring()  # warm-up, and proof the round trip is lossless
        produce(w)
        got = [r.pop() for _ in range(k)]
        if r.pop() is not None or len(got) != k:
            raise RuntimeError("ring lost or duplicated messages")
        return _interleaved(through_ring, through_deque, rounds)
    finally:
        w.release()
        r.release()


def _rate(per_msg_s: list[float], nbytes: int) -> dict[str, Any]:
    msgs = [1.0 / s for s in per_msg_s]
    st = _stats(msgs, 0)
    return {"msgs_per_s": st, "mb_per_s": round(st["median"] * nbytes / 1e6, 1)}


def bench_ring_raw(quick: bool, size: int) -> dict[str, Any]:
    """Raw payloads of ``size`` bytes through the ring vs a deque."""
    rng = np.random.default_rng(size)
    k = 64
    payloads = [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for _ in range(k)]

    def produce(w: RingWriter) -> None:
        push = w.push
        for p in payloads:
            push(p)

    def consume(r: RingReader) -> None:
        pop = r.pop
        for _ in range(k):
            pop()

    rounds = 150 if quick else 1500
    ring_t, dq_t = _ring_pair(payloads, produce, consume, rounds)
    ring, base = _rate(ring_t, size), _rate(dq_t, size)
    return {
        "case": "ring_raw",
        "payload_bytes": size,
        "what": f"RingWriter.push x{k} then RingReader.pop x{k}, bytearray ring of {RING_CAPACITY} bytes",
        **ring,
        "batch": k,
        "repeats": rounds,
        "baseline": {"what": "collections.deque append/popleft of the same bytes objects", **base},
        "ratio": round(base["msgs_per_s"]["median"] / ring["msgs_per_s"]["median"], 2),
        "ratio_means": "baseline rate / ring rate (how many times slower the ring is)",
    }


def bench_ring_envelope(quick: bool, size: int) -> dict[str, Any]:
    """DrawReq envelopes of about ``size`` bytes: encode+push, pop+decode, vs a deque."""
    env, n_lines = _draw_envelope(size)
    encoded = envelope.encode(env)
    if envelope.decode(encoded) != env:
        raise RuntimeError("envelope does not round-trip")
    k = 64 if size <= 1024 else 16
    envs = [env] * k
    payloads = [envelope.encode(e) for e in envs]
    encode, decode = envelope.encode, envelope.decode

    def produce(w: RingWriter) -> None:
        push = w.push
        for e in envs:
            push(encode(e))

    def consume(r: RingReader) -> None:
        pop = r.pop
        for _ in range(k):
            decode(pop())  # type: ignore[arg-type]

    def codec_only() -> float:
        t0 = time.perf_counter()
        for e in envs:
            decode(encode(e))
        return (time.perf_counter() - t0) / k

    rounds = (20 if size <= 1024 else 6) if quick else (100 if size <= 1024 else 30)
    ring_t, dq_t = _ring_pair(payloads, produce, consume, rounds)
    codec_t = [codec_only() for _ in range(rounds)]
    ring, base, codec = _rate(ring_t, len(encoded)), _rate(dq_t, len(encoded)), _rate(codec_t, len(encoded))
    return {
        "case": "ring_envelope",
        "payload_bytes": size,
        "envelope_bytes": len(encoded),
        "draw_lines": n_lines,
        "what": f"encode+push x{k} then pop+decode x{k} of a DrawReq envelope, ring of {RING_CAPACITY} bytes",
        **ring,
        "codec_only": {"what": "envelope.encode + envelope.decode, no ring", **codec},
        "batch": k,
        "repeats": rounds,
        "baseline": {"what": "collections.deque append/popleft of the same encoded bytes objects", **base},
        "ratio": round(base["msgs_per_s"]["median"] / ring["msgs_per_s"]["median"], 1),
        "ratio_means": "baseline rate / ring rate (how many times slower the ring is)",
    }


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """Run the selected cases and print one JSON line per case."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats; the whole run takes well under 30 s")
    ap.add_argument("--case", action="append", choices=CASES, help="run only this case (repeatable)")
    args = ap.parse_args(argv)
    selected = args.case or list(CASES)
    facts = machine_facts()
    for case in CASES:
        if case not in selected:
            continue
        if case == "header_parse":
            _emit(bench_header_parse(args.quick), facts, args.quick)
        elif case == "seqlock_copy":
            _emit(bench_seqlock_copy(args.quick), facts, args.quick)
        elif case == "ring_raw":
            for size in PAYLOAD_SIZES:
                _emit(bench_ring_raw(args.quick, size), facts, args.quick)
        else:
            for size in PAYLOAD_SIZES:
                _emit(bench_ring_envelope(args.quick, size), facts, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
