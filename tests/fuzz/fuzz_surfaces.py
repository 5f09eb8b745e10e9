"""Fuzzers for the protocol layer: header, header accessors, rings, envelopes.

Theory of operation
-------------------
Each surface is a :class:`Surface`: ``generate(rng)`` makes one input (a
JSON-serialisable :class:`dict`, so any input can be saved as a regression
file and replayed), ``run(case)`` feeds it to the code under test and returns
the outcome labels it saw (``"ok"``, ``"HeaderError"``, ``"reader:RingCorrupt"``
...). ``run`` raises :class:`Failure` when an invariant breaks; any other
exception escaping it is a failure too. Inputs are mostly *mutations of valid
inputs* (planned headers, rings filled by the real writer, envelopes from the
real encoder), because purely random bytes stop at the first check; a share is
random bytes, and a few are hand-crafted hostile shapes (huge claims, 64 KiB
strings, control characters, one sub-object shared by thousands of offsets).

:func:`fuzz` runs a surface for N inputs from one seeded ``random.Random``
and classifies every input:

* ok or a typed error of the module: counted in the outcome histogram;
* anything else (another exception, an invariant broken, more than
  ``time_limit`` seconds of CPU on one input: a ``SIGVTALRM`` timer armed per
  input, so a loop that never ends is caught, or more memory than the
  surface's bound for that input under ``tracemalloc``): a failure, kept with
  its input.

Nothing here uses hypothesis: the long mode (``benchmarks/fuzz.py``) runs a
million inputs per surface, which needs a few microseconds of overhead per
input, not hypothesis's milliseconds.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import json
import math
import random
import signal
import struct
import sys
import time
import tracemalloc
import typing
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any

import flatbuffers

from lucky_monitor.protocol import header as H
from lucky_monitor.protocol import messages as m
from lucky_monitor.protocol.enums import EngineState, GpuObsMode, ImageFormat, Mode, Service, SimMode
from lucky_monitor.protocol.envelope import Envelope, EnvelopeHead, decode, encode, peek, peek_method
from lucky_monitor.protocol.errors import (
    EnvelopeError,
    HeaderError,
    MessageTooLarge,
    RingCorrupt,
    RingError,
    RingFull,
)
from lucky_monitor.protocol.ring import MARKER, RingReader, RingTap, RingWriter, entry_size, max_payload

CORPUS = Path(__file__).resolve().parent / "corpus"
SURFACES = ("header", "accessors", "ring", "envelope")

Case = dict[str, Any]


class Failure(Exception):
    """An input broke an invariant (the message says which)."""


class Hang(BaseException):
    """Raised from the CPU timer: one input ran past the time limit.

    A ``BaseException`` so no ``except Exception`` in the code under test can
    swallow it.
    """


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Failure(what)


# ---------------------------------------------------------------------------
# Shared mutation helpers
# ---------------------------------------------------------------------------

_U32_EXTREMES = (0, 1, 2, 3, 4, 7, 8, 63, 64, 4095, 4096, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 8, 2**32 - 1)
_U64_EXTREMES = (*_U32_EXTREMES, 2**32, 2**40, 2**63 - 1, 2**63, 2**64 - 4096, 2**64 - 1)


def _flip_bits(rng: random.Random, buf: bytearray, lo: int = 0, hi: int | None = None) -> None:
    hi = len(buf) if hi is None else min(hi, len(buf))
    if hi <= lo:
        return
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(lo, hi)
        buf[i] ^= 1 << rng.randrange(8)


def _put_word(rng: random.Random, buf: bytearray, extremes: Iterable[int], aligned: bool) -> None:
    if len(buf) < 4:
        return
    at = rng.randrange(0, len(buf) - 3)
    if aligned:
        at &= ~3
    struct.pack_into("<I", buf, at, rng.choice([*extremes, len(buf), len(buf) - 4, rng.getrandbits(32)]) & 0xFFFFFFFF)


def _hex(b: bytes | bytearray) -> str:
    return bytes(b).hex()


# ---------------------------------------------------------------------------
# Header
# ---------------------------------------------------------------------------

_FIELD_NAMES = [name for name, _, _ in H.FIELDS]
_FIELD_SET = frozenset(_FIELD_NAMES)
_WIDTH = {"B": 8, "I": 32, "Q": 64}
_OFFSET_FIELDS = [n for n in _FIELD_NAMES if n.endswith("_offset")]
_SIZE_FIELDS = [
    "num_envs",
    "obs_size",
    "act_size",
    "cmd_ring_size",
    "image_width",
    "image_height",
    "image_channels",
    "segment_size",
    "tools_ring_size",
]


def _pow2(rng: random.Random, lo: int, hi: int) -> int:
    return 1 << rng.randint(lo.bit_length() - 1, hi.bit_length() - 1)


def _planned(rng: random.Random) -> H.Header:
    """A random but valid layout (``plan`` is the engine's own layout function)."""
    n = rng.choice([1, 2, 3, 7, 64, 256, H.MAX_ENVS, rng.randint(1, H.MAX_ENVS)])
    image = None
    fmt = 0
    if rng.random() < 0.6:
        c = rng.choice([1, 3, 4])
        side = rng.choice([1, 2, 64, 640, H.MAX_IMAGE_SIDE])
        image = (rng.choice([side, rng.randint(1, 256)]), rng.choice([side, rng.randint(1, 256)]), c)
        fmt = rng.choice([0, *(int(f) for f in ImageFormat if f.channels == c)])
    return H.plan(
        num_envs=n,
        obs_size=rng.choice([0, 1, 4, 100, rng.randint(0, 256), H.MAX_VEC]),
        act_size=rng.choice([0, 1, 12, rng.randint(0, 64)]),
        cmd_ring_size=_pow2(rng, H.MIN_RING, 1 << 20),
        image=image,
        image_format=fmt,
        image_flags=rng.choice([0, 1]),
        tools_ring_size=rng.choice([None, 64, 1 << 16, _pow2(rng, H.MIN_RING, 1 << 20)]),
        server_pid=rng.getrandbits(22),
        session_id=rng.getrandbits(64),
        mode=rng.choice([Mode.TRAINING, Mode.INFERENCE]),
        sim_mode=rng.choice(list(SimMode)),
    )


def _set_field(buf: bytearray, name: str, value: int | bytes) -> None:
    off = H.OFFSET[name]
    code = H.CODE[name]
    if len(buf) >= off + struct.calcsize("<" + code):
        if code != "64s":
            assert isinstance(value, int)
            value &= (1 << _WIDTH[code]) - 1
        struct.pack_into("<" + code, buf, off, value)


def _field_value(rng: random.Random, name: str, h: H.Header) -> int | bytes:
    code = H.CODE[name]
    if code == "64s":
        return rng.randbytes(64)
    bits = _WIDTH[code]
    old = getattr(h, name)
    r = rng.random()
    if r < 0.3:
        return rng.choice(_U64_EXTREMES if bits == 64 else _U32_EXTREMES)
    if r < 0.5:
        return old + rng.choice([-4096, -64, -8, -1, 1, 8, 64, 4096, 65536])
    if r < 0.6:  # near the top of the field: products and sums that overflow a u32/u64
        return (1 << bits) - rng.randint(1, 4096)
    if r < 0.75:  # another field's value: overlapping and aliased regions
        return getattr(h, rng.choice(_OFFSET_FIELDS + _SIZE_FIELDS))
    if r < 0.9:
        return rng.randint(0, 8)
    return rng.getrandbits(bits)


def _mutate_header(rng: random.Random, h: H.Header, buf: bytearray) -> tuple[bytearray, int | None]:
    mapped: int | None = h.segment_size
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        if op < 0.45:
            name = rng.choice(_FIELD_NAMES)
            _set_field(buf, name, _field_value(rng, name, h))
        elif op < 0.55:  # num_envs (and friends) near 2^32: every size product must stay exact
            _set_field(buf, rng.choice(["num_envs", "obs_size", "act_size"]), 2**32 - rng.randint(1, 64))
        elif op < 0.7:
            _flip_bits(rng, buf, 0, H._STRUCT.size if rng.random() < 0.8 else len(buf))
        elif op < 0.75 and len(buf) >= 20:  # the public prototype's u32 num_envs at offset 16
            struct.pack_into("<I", buf, 16, rng.choice([1, 4, 64, 4096, rng.getrandbits(32)]))
        elif op < 0.8 and len(buf) > H._STRUCT.size:  # a reserved byte
            buf[rng.randrange(H._STRUCT.size, len(buf))] = rng.randrange(1, 256)
        elif op < 0.9:
            del buf[rng.choice([0, 4, 16, 339, 340, 4095, rng.randrange(0, len(buf) + 1)]) :]
        else:
            mapped = rng.choice(
                [
                    None,
                    0,
                    H.HEADER_SIZE - 1,
                    H.HEADER_SIZE,
                    h.segment_size - rng.randint(1, 4096),
                    h.segment_size + rng.randint(1, 4096),
                    2**64 - 1,
                    rng.getrandbits(40),
                ]
            )
    return buf, mapped


def _header_case(rng: random.Random, *, biased: bool) -> Case:
    r = rng.random()
    if not biased and r < 0.1:
        data = rng.randbytes(rng.choice([0, 3, 339, 340, 4095, 4096, 4097, rng.randint(0, 6000)]))
        if len(data) >= 8 and rng.random() < 0.7:  # get past magic and version now and then
            data = struct.pack("<II", H.MAGIC, H.VERSION) + data[8:]
        mapped = rng.choice([None, 0, len(data), rng.getrandbits(rng.choice([12, 32, 64]))])
        return {"data": _hex(data), "mapped": mapped, "kind": rng.choice(["bytes", "bytearray", "memoryview"])}
    h = _planned(rng)
    buf = bytearray(h.pack())
    mapped: int | None = h.segment_size
    if biased:
        _mutate_accessor_fields(rng, h, buf)
        if rng.random() < 0.15:
            buf, mapped = _mutate_header(rng, h, buf)
    elif rng.random() < 0.9:
        buf, mapped = _mutate_header(rng, h, buf)
    return {"data": _hex(buf), "mapped": mapped, "kind": rng.choice(["bytes", "bytearray", "memoryview"])}


def _as_buffer(data: bytes, kind: str) -> Any:
    if kind == "bytearray":
        return bytearray(data)
    if kind == "memoryview":
        return memoryview(bytearray(data))
    return data


def _independent_accept_check(h: H.Header, buf: Any, mapped: int | None) -> None:
    """What an accepted header must satisfy, restated from ``schema/LAYOUT.md``."""
    raw = bytes(memoryview(buf)[: H._STRUCT.size])
    check(H.Header.unpack(raw) == h, "accepted header differs from its bytes")
    fields_only = bytearray(raw)  # pads and reserved bytes are not fields: validate ignores them, pack zeroes them
    for a, b in H.ZERO_RANGES:
        fields_only[a : min(b, len(raw))] = bytes(max(0, min(b, len(raw)) - a))
    check(h.pack()[: H._STRUCT.size] == fields_only, "pack() does not give the field bytes back")
    check(h.magic == H.MAGIC and h.version == H.VERSION, "accepted a wrong magic or version")
    check(1 <= h.num_envs <= H.MAX_ENVS, f"accepted num_envs {h.num_envs}")
    check(h.obs_size <= H.MAX_VEC and h.act_size <= H.MAX_VEC, "accepted obs/act size over the limit")
    for ring in ("cmd_ring_size",) + (("tools_ring_size",) if h.tools_offset else ()):
        v = getattr(h, ring)
        check(H.MIN_RING <= v <= H.MAX_RING and v & (v - 1) == 0, f"accepted {ring} {v}")
    check(Mode.get(h.mode) is not None and raw[17:20] == b"\0\0\0", "accepted a mode outside the list")
    for name, vocab in (("gpu_obs_mode", GpuObsMode), ("sim_mode", SimMode), ("engine_state", EngineState)):
        check(vocab.get(getattr(h, name)) is not None, f"accepted {name} {getattr(h, name)}")
    if h.image_offset:
        check(1 <= h.image_width <= H.MAX_IMAGE_SIDE and 1 <= h.image_height <= H.MAX_IMAGE_SIDE, "image side")
        fmt = ImageFormat.resolve(h.image_format, h.image_channels)
        check(fmt is not None and fmt.channels == h.image_channels, "accepted an image format that resolves to nothing")
    have = len(memoryview(buf)) if mapped is None else mapped
    check(have >= H.HEADER_SIZE, "accepted a truncated segment")
    limit = h.segment_size or have
    check(limit <= have and limit >= H.HEADER_SIZE, f"accepted segment_size {h.segment_size} for {have} mapped")
    check(h.tools_offset % H.TOOLS_ALIGN == 0, "tools region not 64 KiB aligned")
    spans = []
    for r in h.regions():
        check(r.offset % H.REGION_ALIGN == 0, f"{r.name} misaligned")
        check(H.HEADER_SIZE <= r.offset and r.end <= limit, f"{r.name} [{r.offset}, {r.end}) outside [4096, {limit})")
        if r.size:
            spans.append((r.offset, r.end))
    spans.sort()
    for (_, a_end), (b_start, _) in itertools.pairwise(spans):
        check(b_start >= a_end, "accepted overlapping regions")


def _header_error_ok(exc: HeaderError) -> str:
    check(exc.field in _FIELD_SET, f"{type(exc).__name__} names no header field: {exc.field!r}")
    check(bool(str(exc)), "empty error message")
    return type(exc).__name__


class HeaderSurface:
    """``validate`` on random, mutated and truncated headers."""

    name = "header"

    def generate(self, rng: random.Random) -> Case:
        return _header_case(rng, biased=False)

    def memory_bound(self, case: Case) -> int:
        return 64 * 1024

    def run(self, case: Case) -> list[str]:
        buf = _as_buffer(bytes.fromhex(case["data"]), case["kind"])
        mapped = case["mapped"]
        try:
            h = H.validate(buf, mapped_size=mapped)
        except HeaderError as exc:
            return [_header_error_ok(exc)]
        _independent_accept_check(h, buf, mapped)
        return ["ok"]


# ---------------------------------------------------------------------------
# Header accessors
# ---------------------------------------------------------------------------

#: Fields ``validate`` does not range-check (or checks only with an image region).
_FREE_FIELDS = [
    "server_pid",
    "client_pid",
    "frame_seq",
    "action_seq",
    "gpu_available",
    "gpu_obs_handle",
    "gpu_device_id",
    "session_id",
    "image_seq",
    "image_frame_seq",
    "heartbeat_ns",
    "image_flags",
    "services_available",
    "services_enabled",
]
_NO_IMAGE_FIELDS = ["image_width", "image_height", "image_channels", "image_format"]


def _mutate_accessor_fields(rng: random.Random, h: H.Header, buf: bytearray) -> None:
    """Scramble what an accepted header may hold: the free fields, and the image fields without images."""
    names = list(_FREE_FIELDS)
    if not h.image_offset:
        names += _NO_IMAGE_FIELDS
    for name in rng.sample(names, rng.randint(0, 6)):
        _set_field(buf, name, _field_value(rng, name, h))
    if rng.random() < 0.3:
        _set_field(buf, "segment_size", 0)  # an engine without the extension: the mapping is the limit
    if rng.random() < 0.3:
        for name, vocab in (("gpu_obs_mode", GpuObsMode), ("sim_mode", SimMode), ("engine_state", EngineState)):
            _set_field(buf, name, int(rng.choice(list(vocab))))
    if h.image_offset and rng.random() < 0.3:
        c = rng.choice([1, 3, 4])
        _set_field(buf, "image_channels", c)
        _set_field(buf, "image_format", rng.choice([0, *(int(f) for f in ImageFormat if f.channels == c)]))
        # keep the region inside the segment: shrink the image to 1x1
        _set_field(buf, "image_width", 1)
        _set_field(buf, "image_height", 1)


def _call_region(h: H.Header, regions: list[H.Region]) -> None:
    for r in regions:
        check(h.region(r.name) == r, f"region({r.name!r}) disagrees with regions()")
    try:
        h.region("no_such_region")
    except KeyError:
        pass
    else:
        raise Failure("region() of an unknown name did not raise KeyError")


#: Public methods of Header that take arguments: exercise() calls them itself.
ARG_METHODS = frozenset({"region", "unpack"})


def _public_members() -> tuple[list[str], list[str]]:
    props, methods = [], []
    for name in dir(H.Header):
        if name.startswith("_") or name in _FIELD_SET:
            continue
        attr = inspect.getattr_static(H.Header, name)
        if isinstance(attr, property):
            props.append(name)
        elif callable(getattr(H.Header, name)) and name not in ARG_METHODS:
            methods.append(name)
    return props, methods


_PROPS, _METHODS = _public_members()


def exercise(h: H.Header) -> None:
    """Call every public property and method of an accepted header, and check what they say."""
    for name in _PROPS:
        getattr(h, name)
    got = {name: getattr(h, name)() for name in _METHODS}
    _call_region(h, got["regions"])
    check(H.Header.unpack(got["pack"]) == h, "unpack(pack()) is not the header")
    json.dumps(got["to_dict"])
    check(h.pixel_format in (*ImageFormat.labels(), H.NO_IMAGES), f"pixel_format {h.pixel_format!r}")
    check(h.pixel_format != "auto", "pixel_format did not resolve auto")
    if h.has_images:
        fmt = h.resolved_image_format
        check(fmt is not None and fmt.channels == h.image_channels, "resolved_image_format disagrees with channels")
        check(h.image_bytes_per_env > 0, "image with no bytes")
    else:
        check(h.resolved_image_format is None and h.pixel_format == H.NO_IMAGES, "image format without images")
    check(isinstance(h.bottom_up, bool), "bottom_up is not a bool")
    if h.has_tools:
        tools = h.region("tools_offset")
        check(tools.offset < h.tools_c2s_offset < h.tools_s2c_offset < tools.end, "tools rings outside their region")
    # What the CLI and the window print for a header: the vocabularies' labels.
    for vocab, value in (
        (Mode, h.mode),
        (SimMode, h.sim_mode),
        (EngineState, h.engine_state),
        (GpuObsMode, h.gpu_obs_mode),
    ):
        check(not vocab.name_of(value).startswith("unknown"), f"accepted header with an unknown {vocab.__name__}")
    ImageFormat.name_of(h.image_format)
    Service.names_in(h.services_available)
    Service.names_in(h.services_enabled)
    repr(h)


class AccessorSurface:
    """Every public property and method of every header that ``validate`` accepted."""

    name = "accessors"

    def generate(self, rng: random.Random) -> Case:
        return _header_case(rng, biased=True)

    def memory_bound(self, case: Case) -> int:
        return 64 * 1024

    def run(self, case: Case) -> list[str]:
        buf = _as_buffer(bytes.fromhex(case["data"]), case["kind"])
        try:
            h = H.validate(buf, mapped_size=case["mapped"])
        except HeaderError as exc:
            return ["rejected:" + _header_error_ok(exc)]
        exercise(h)
        return ["accepted"]


# ---------------------------------------------------------------------------
# Rings
# ---------------------------------------------------------------------------

_M32 = 0xFFFFFFFF


def _ring_case(rng: random.Random) -> Case:
    cap = 1 << rng.choice([6, 6, 7, 8, 9, 10, 12, rng.randint(6, 16)])
    offset = rng.choice([0, 0, 8, 64])
    size = offset + 8 + cap
    maxp = max_payload(cap)
    expected: list[str] | None = None
    if rng.random() < 0.15:  # random bytes, positions included
        buf = bytearray(rng.randbytes(size))
        if rng.random() < 0.5:
            w = rng.choice([rng.getrandbits(32), rng.getrandbits(32) & ~7, 2**32 - 8])
            r = (w - rng.choice([0, 8, cap - 8, cap, cap + 8, 2**31, rng.randrange(0, 2 * cap)])) & _M32
            struct.pack_into("<II", buf, offset, w, r)
    else:  # a valid ring filled by the real writer, from a start near the 2^32 wrap or anywhere
        buf = bytearray(size)
        start = rng.choice([0, 2**32 - 8 * rng.randint(1, cap // 4), rng.getrandbits(32) & ~7])
        struct.pack_into("<II", buf, offset, start, start)
        wr = RingWriter(buf, offset, cap)
        rd = RingReader(buf, offset, cap)
        pending: list[bytes] = []
        for _ in range(rng.randint(0, 40)):
            if pending and rng.random() < 0.3:
                got = rd.pop()
                assert got == pending.pop(0)
                continue
            n = rng.choice([1, 4, 5, 8, maxp, rng.randint(1, maxp), rng.randint(1, 16)])
            payload = rng.randbytes(n)
            try:
                wr.push(payload)
            except RingFull:
                break
            pending.append(payload)
        wr.release()
        rd.release()
        expected = [p.hex() for p in pending]
        if rng.random() < 0.6:
            expected = None  # mutated: no oracle
            for _ in range(rng.randint(1, 3)):
                op = rng.random()
                w, r = struct.unpack_from("<II", buf, offset)
                if op < 0.3:
                    _flip_bits(rng, buf, offset + 8)
                elif op < 0.6:  # a length word at an entry boundary: zero, marker, too large, past the end
                    idx = (r + 8 * rng.randrange(0, max(1, ((w - r) & _M32) // 8 + 1))) & (cap - 8)
                    word = rng.choice([0, MARKER, maxp, maxp + 1, cap - 4, cap, 2**31, rng.getrandbits(32)])
                    struct.pack_into("<I", buf, offset + 8 + idx, word)
                elif op < 0.8:  # positions: used > capacity, unaligned, behind, near 2^32
                    which = rng.choice([0, 4])
                    base = w if which == 0 else r
                    v = rng.choice(
                        [
                            base + rng.choice([-8, 8, 1, 4, cap, cap + 8, -cap]),
                            base ^ (1 << rng.randrange(32)),
                            rng.getrandbits(32),
                            r + cap if which == 0 else w - cap - 8,
                        ]
                    )
                    struct.pack_into("<I", buf, offset + which, v & _M32)
                else:
                    _put_word(rng, buf, (0, MARKER, maxp, maxp + 1, cap), aligned=rng.random() < 0.7)
    w, r = struct.unpack_from("<II", buf, offset)
    start_choice = rng.random()
    tap_start: int | None
    if start_choice < 0.3:
        tap_start = None
    elif start_choice < 0.6:
        tap_start = r
    elif start_choice < 0.8:
        tap_start = (w - rng.choice([8, 16, cap // 2, cap, cap + 8, 2**31])) & _M32
    else:
        tap_start = rng.getrandbits(32)
    if rng.random() < 0.05:  # a buffer shorter than the ring claims: refused when the ring is opened
        del buf[rng.randrange(0, len(buf)) :]
    return {
        "data": _hex(buf),
        "offset": offset,
        "capacity": cap,
        "tap_start": tap_start,
        "max_messages": rng.choice([None, None, 0, 1, 3]),
        "push": rng.choice([0, 1, 7, 8, maxp, maxp + 1, rng.randint(1, maxp)]),
        "expected": expected,
    }


def _check_message(msg: bytes, cap: int, who: str) -> None:
    check(isinstance(msg, bytes), f"{who} returned {type(msg).__name__}, not bytes")
    check(1 <= len(msg) <= max_payload(cap), f"{who} returned a {len(msg)}-byte message from a {cap}-byte ring")


def _drain_reader(buf: bytearray, offset: int, cap: int, max_messages: int | None, out: list[str]) -> list[bytes]:
    """Pop (or drain) until empty; every step bounded, RingCorrupt leaves a clean ring."""
    rd = RingReader(buf, offset, cap)
    got: list[bytes] = []
    steps = 0
    try:
        while True:
            steps += 1
            check(steps <= cap // 8 + 2, "the reader kept returning messages past what the ring can hold")
            try:
                if max_messages is None:
                    batch = rd.drain()
                else:
                    one = rd.pop()
                    batch = [] if one is None else [one]
            except RingCorrupt:
                out.append("reader:RingCorrupt")
                check(rd.read_pos == rd.write_pos, "RingCorrupt without read_pos := write_pos")
                check(rd.pop() is None, "the pop after RingCorrupt did not start clean")
                break
            if not batch:
                out.append("reader:empty" if not got else "reader:messages")
                break
            for msg in batch:
                _check_message(msg, cap, "reader")
            got += batch
            check(sum(entry_size(len(x)) for x in got) <= cap, "the reader returned more bytes than the ring holds")
    finally:
        rd.release()
    return got


def _poll_tap(data: bytes, offset: int, cap: int, start: int | None, max_messages: int | None) -> tuple[Any, list[str]]:
    tap = RingTap(memoryview(data), offset, cap, start=start)
    labels: list[str] = []
    got: list[bytes] = []
    first = None
    try:
        for step in range(cap // 8 + 3):
            res = tap.poll(max_messages)
            if step == 0:
                first = res
            check(isinstance(res.missed_bytes, int) and 0 <= res.missed_bytes <= 2**31, "missed_bytes out of range")
            check(res.corrupt is None or isinstance(res.corrupt, str), "corrupt is not a str")
            for msg in res.messages:
                _check_message(msg, cap, "tap")
            if max_messages is not None:
                check(len(res.messages) <= max_messages, "the tap returned more than max_messages")
            got += res.messages
            if res.corrupt is not None:
                labels.append("tap:corrupt")
            elif res.missed_bytes:
                labels.append("tap:missed")
            if not res.messages and (res.corrupt is None and not res.missed_bytes):
                labels.append("tap:messages" if got else "tap:empty")
                return (first, got), labels
            if not res.messages and max_messages != 0:
                # Nothing delivered but something reported: the next poll of a static ring must be quiet.
                again = tap.poll(max_messages)
                check(not again.messages and not again.corrupt, "a static ring kept yielding after a resync")
                labels.append("tap:messages" if got else "tap:empty")
                return (first, got), labels
        raise Failure("the tap did not settle on a ring nobody writes")
    finally:
        tap.release()


class RingSurface:
    """RingReader, RingTap and RingWriter over random and mutated ring contents."""

    name = "ring"

    def generate(self, rng: random.Random) -> Case:
        return _ring_case(rng)

    def memory_bound(self, case: Case) -> int:
        return 64 * 1024 + 6 * case["capacity"]

    def run(self, case: Case) -> list[str]:
        data = bytes.fromhex(case["data"])
        offset, cap = case["offset"], case["capacity"]
        out: list[str] = []
        try:
            RingTap(memoryview(data), offset, cap).release()
        except RingError:
            check(offset + 8 + cap > len(data), "a ring inside its buffer was refused")
            return ["geometry:RingError"]
        w, r = struct.unpack_from("<II", data, offset)
        # The consumer, then a tap from the consumer's position: on a ring nobody writes
        # the tap must deliver exactly what the consumer takes.
        taken = _drain_reader(bytearray(data), offset, cap, None, out)
        (_, tapped), labels = _poll_tap(data, offset, cap, r, None)
        check(tapped == taken, f"tap from read_pos saw {len(tapped)} messages, the reader took {len(taken)}")
        if case["expected"] is not None:
            want = [bytes.fromhex(x) for x in case["expected"]]
            check(taken == want, "the reader did not return what the writer pushed")
        # The same with a message limit, and a tap from anywhere.
        if case["max_messages"] is not None:
            _drain_reader(bytearray(data), offset, cap, case["max_messages"], [])
        _, labels2 = _poll_tap(data, offset, cap, case["tap_start"], case["max_messages"])
        out += labels + labels2
        # The producer on the same bytes: a typed refusal or a push the consumer then sees.
        buf = bytearray(data)
        wr = RingWriter(buf, offset, cap)
        payload = bytes(range(256)) * (case["push"] // 256 + 1)
        payload = payload[: case["push"]]
        try:
            wr.push(payload)
        except (RingFull, RingCorrupt, MessageTooLarge) as exc:
            out.append("push:" + type(exc).__name__)
        except ValueError:
            check(not payload, "ValueError for a non-empty payload")
            out.append("push:empty")
        else:
            out.append("push:ok")
            check(0 < len(payload) <= max_payload(cap), "pushed a payload the ring must refuse")
            if case["expected"] is not None:
                got = _drain_reader(buf, offset, cap, None, [])
                want = [bytes.fromhex(x) for x in case["expected"]] + [payload]
                check(got == want, "after a push the reader did not see the pushed message last")
        finally:
            wr.release()
        check((w, r) == struct.unpack_from("<II", data, offset), "the input bytes changed")
        return out


# ---------------------------------------------------------------------------
# Envelopes
# ---------------------------------------------------------------------------

_CONTROL = "".join(chr(c) for c in range(32)) + "\x7f\u0085\u2028\u2029\u202e\u200b\ufeff"


def _text(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.3:
        return ""
    if r < 0.55:
        return "".join(rng.choice("abcxyz_-/ 0123") for _ in range(rng.randint(1, 12)))
    if r < 0.75:  # control characters, bidi overrides, NUL inside the string
        return "".join(rng.choice(_CONTROL) for _ in range(rng.randint(1, 40)))
    if r < 0.93:
        return "".join(chr(rng.choice([rng.randint(0x80, 0xD7FF), rng.randint(0xE000, 0x10FFFF)])) for _ in range(5))
    return rng.choice("a\x00\x1b") * rng.choice([4096, 65536])  # 64 KiB strings


_INT_RANGES = {
    "ubyte": (0, 2**8 - 1),
    "ushort": (0, 2**16 - 1),
    "uint": (0, 2**32 - 1),
    "ulong": (0, 2**64 - 1),
    "int": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}
_FLOATS = (0.0, -0.0, 1.0, -1.5, math.inf, -math.inf, math.nan, 3.4e38, 1e-45, 65504.0)


def _value(rng: random.Random, hint: Any, depth: int) -> Any:
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        base, tag = typing.get_args(hint)[:2]
        if isinstance(base, type) and issubclass(base, IntEnum):
            return rng.choice(list(base))
        if tag == "double":
            return rng.choice([*_FLOATS, 1e300, rng.uniform(-1e9, 1e9)])
        lo, hi = _INT_RANGES[tag]
        return rng.choice([lo, hi, 0, 1, rng.randint(lo, hi)])
    if hint is float:
        return rng.choice([*_FLOATS, rng.uniform(-1e6, 1e6)])
    if hint is bool:
        return rng.random() < 0.5
    if hint is str:
        return _text(rng)
    if origin is tuple:
        elem = typing.get_args(hint)[0]
        n = rng.choice([0, 0, 1, 2, 5, rng.randint(0, 12), 300 if rng.random() < 0.1 else 3])
        return tuple(_value(rng, elem, depth + 1) for _ in range(n))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return None if rng.random() < 0.3 else _value(rng, inner, depth + 1)
    assert dataclasses.is_dataclass(hint), hint
    hints = _HINTS.setdefault(hint, typing.get_type_hints(hint, include_extras=True))
    return hint(**{f.name: _value(rng, hints[f.name], depth + 1) for f in dataclasses.fields(hint)})


_HINTS: dict[Any, dict[str, Any]] = {}


def _random_envelope(rng: random.Random) -> Envelope:
    method, cls = rng.choice(list(m.PAYLOAD_OF.items()))
    r = rng.random()
    payload = None if r < 0.1 else _value(rng, cls, 0)
    if r < 0.05:  # an unknown method (an error response from a newer engine)
        method = rng.choice([0, 0xFFFF, 0x0F01, rng.randrange(0, 2**16)])
    return Envelope(
        method,
        rng.choice([0, 1, 2**64 - 1, rng.getrandbits(64)]),
        payload,
        _text(rng) if rng.random() < 0.3 else "",
        rng.choice([0, 0, 2**64 - 1, rng.getrandbits(64)]),
    )


def _gen(name: str) -> Any:
    return __import__(f"lucky_monitor._generated.hazel.rpc.{name}", fromlist=[name])


def _aliased_strings(n: int, text: str) -> bytes:
    """GetTelemetrySchemaResp whose ``n`` channel names all point at one string: work, not size."""
    b = flatbuffers.Builder(0)
    s = b.CreateString(text)
    g = _gen("GetTelemetrySchemaResp")
    g.StartChannelNamesVector(b, n)
    for _ in range(n):
        b.PrependUOffsetTRelative(s)
    vec = b.EndVector()
    g.Start(b)
    g.AddChannelNames(b, vec)
    return _finish(b, g.End(b), m.MethodId.GetTelemetrySchemaResp, "GetTelemetrySchemaResp")


def _aliased_tables(n: int) -> bytes:
    """ListEntitiesResp whose ``n`` entities are all one EntityInfo table."""
    b = flatbuffers.Builder(0)
    name = b.CreateString("e" * 200)
    e = _gen("EntityInfo")
    e.Start(b)
    e.AddName(b, name)
    e.AddId(b, 7)
    info = e.End(b)
    g = _gen("ListEntitiesResp")
    g.StartEntitiesVector(b, n)
    for _ in range(n):
        b.PrependUOffsetTRelative(info)
    vec = b.EndVector()
    g.Start(b)
    g.AddEntities(b, vec)
    return _finish(b, g.End(b), m.MethodId.ListEntitiesResp, "ListEntitiesResp")


def _finish(b: Any, payload: int, method: int, union_name: str) -> bytes:
    env = _gen("Envelope")
    union = getattr(_gen("Payload").Payload, union_name)
    env.Start(b)
    env.AddMethod(b, int(method))
    env.AddCorrelationId(b, 1)
    env.AddPayloadType(b, union)
    env.AddPayload(b, payload)
    b.Finish(env.End(b))
    return bytes(b.Output())


def crafted_envelopes() -> list[bytes]:
    """Hand-made hostile but well-formed FlatBuffers: shared sub-objects, deepest schema nesting."""
    deep = Envelope(
        m.MethodId.ResetAgentReq,
        3,
        m.ResetAgentReq(
            "x",
            (1,),
            m.SimulationContract(1, 2, True, m.FloatRange(0, 1), m.FloatRange(), m.FloatRange(), gravity=m.Vec3()),
        ),
    )
    return [
        _aliased_strings(10, "\x1b[2J" * 16),
        _aliased_strings(1000, "n" * 64),
        _aliased_strings(20000, "s" * 65536),
        _aliased_tables(100),
        _aliased_tables(20000),
        encode(deep),
        encode(Envelope(m.MethodId.GetSceneInfoResp, 1, m.GetSceneInfoResp(scene_name=_CONTROL * 1000))),
        encode(Envelope(m.MethodId.DrawResp, 2, None, "\x00" * 65536)),
    ]


class EnvelopePool:
    """Valid envelopes from the real encoder, built once per run (the encoder costs ~100 us)."""

    def __init__(self, rng: random.Random, size: int) -> None:
        self.items: list[bytes] = crafted_envelopes()
        while len(self.items) < size:
            self.items.append(encode(_random_envelope(rng)))


def _mutate_envelope(rng: random.Random, buf: bytearray, pool: list[bytes]) -> bytearray:
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        n = len(buf)
        if op < 0.25:
            _flip_bits(rng, buf)
        elif op < 0.5:
            _put_word(rng, buf, _U32_EXTREMES, aligned=rng.random() < 0.8)
        elif op < 0.6 and n >= 2:  # vtable entries and sizes are u16
            at = rng.randrange(0, n - 1)
            struct.pack_into(
                "<H", buf, at, rng.choice([0, 1, 2, 3, 4, 0xFFFF, 0x8000, n & 0xFFFF, rng.getrandbits(16)])
            )
        elif op < 0.7:
            del buf[rng.randrange(0, n + 1) :]
        elif op < 0.78:
            buf += rng.randbytes(rng.choice([1, 4, 8, 64]))
        elif op < 0.88 and n:  # splice a chunk of another envelope
            other = rng.choice(pool)
            a = rng.randrange(0, len(other))
            chunk = other[a : a + rng.randint(1, 64)]
            at = rng.randrange(0, n)
            buf[at : at + len(chunk)] = chunk
        elif n:  # duplicate or insert (shifts every offset after it)
            at = rng.randrange(0, n)
            buf[at:at] = buf[at : at + rng.choice([1, 4, 8, 16])] if rng.random() < 0.5 else bytes(4)
    return buf


def _same(a: Any, b: Any) -> bool:
    """Equal values, NaN equal to NaN and -0.0 to 0.0.

    A scalar field equal to its default is not written (FlatBuffers, like
    flatc's builders), and ``-0.0 == 0.0``: a decoded ``-0.0`` field comes
    back as ``0.0`` (``corpus/envelope/scalar_negative_zero``). Struct fields
    and vector elements keep the sign.
    """
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if dataclasses.is_dataclass(a):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return bool(a == b)


class EnvelopeSurface:
    """``decode``, ``peek`` and ``peek_method`` on random, mutated and crafted envelopes."""

    name = "envelope"

    def __init__(self, pool_size: int = 600, pool_seed: int = 0, reencode: bool = True) -> None:
        self._pool_size = pool_size
        self._pool_seed = pool_seed
        self._pool: list[bytes] | None = None
        self.reencode = reencode

    @property
    def pool(self) -> list[bytes]:
        if self._pool is None:
            self._pool = EnvelopePool(random.Random(self._pool_seed), self._pool_size).items
        return self._pool

    def generate(self, rng: random.Random) -> Case:
        r = rng.random()
        if r < 0.1:
            data = rng.randbytes(rng.choice([0, 1, 3, 4, 8, 12, rng.randint(0, 300), rng.randint(0, 4096)]))
        elif r < 0.2:
            data = rng.choice(self.pool)
        else:
            data = bytes(_mutate_envelope(rng, bytearray(rng.choice(self.pool)), self.pool))
        return {"data": _hex(data), "kind": rng.choice(["bytes", "bytes", "bytearray", "memoryview"])}

    def memory_bound(self, case: Case) -> int:
        return 256 * 1024 + 64 * (len(case["data"]) // 2)

    def run(self, case: Case) -> list[str]:
        raw = bytes.fromhex(case["data"])
        buf = _as_buffer(raw, case["kind"])
        out: list[str] = []
        try:
            env: Envelope | None = decode(buf)
        except EnvelopeError as exc:
            check("unchecked read" not in str(exc), f"the verifier missed a bad read: {exc}")
            env = None
            out.append("decode:EnvelopeError")
        try:
            head: EnvelopeHead | None = peek(buf)
        except EnvelopeError as exc:
            check("unchecked read" not in str(exc), f"peek missed a bad read: {exc}")
            check(env is None, "decode accepted what peek refused")
            head = None
            out.append("peek:EnvelopeError")
        try:
            three = peek_method(buf)
        except EnvelopeError:
            check(head is None, "peek_method refused what peek accepted")
        else:
            check(head is not None and three == tuple(head[:3]), "peek_method disagrees with peek")
        if head is not None:
            out.append("peek:ok")
            check(isinstance(head.method, m.MethodId) or 0 <= head.method < 2**16, "method out of range")
            check(0 <= head.correlation_id < 2**64 and 0 <= head.sent_ns < 2**64, "u64 out of range")
            check(isinstance(head.error_message, str), "error_message is not a str")
        if env is not None:
            out.append("decode:ok")
            check(head is not None, "peek refused what decode accepted")
            assert head is not None
            check(
                (env.method, env.correlation_id, env.error_message, env.sent_ns) == tuple(head),
                "decode and peek disagree",
            )
            expected = m.PAYLOAD_OF.get(env.method) if isinstance(env.method, m.MethodId) else None
            check(env.payload is None or type(env.payload) is expected, "payload does not match the method")
            if self.reencode:  # whatever decodes is a well-formed envelope: it re-encodes to the same value
                again = decode(encode(env))
                check(_same(again, env), "decode(encode(decoded)) differs from decoded")
        check(bytes(memoryview(buf)) == raw, "decode changed its input")
        return out


# ---------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------


def make_surface(name: str, **kw: Any) -> Any:
    return {
        "header": HeaderSurface,
        "accessors": AccessorSurface,
        "ring": RingSurface,
        "envelope": EnvelopeSurface,
    }[name](**kw)


@dataclass
class Report:
    surface: str
    seed: int
    inputs: int = 0
    seconds: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    failures: list[dict[str, Any]] = field(default_factory=list)
    max_input_s: float = 0.0
    max_alloc_bytes: int | None = None

    def figures(self) -> dict[str, Any]:
        return {
            "surface": self.surface,
            "seed": self.seed,
            "inputs": self.inputs,
            "seconds": round(self.seconds, 2),
            "inputs_per_s": round(self.inputs / self.seconds) if self.seconds else None,
            "outcomes": dict(sorted(self.outcomes.items())),
            "failures": len(self.failures),
            "max_input_ms": round(self.max_input_s * 1e3, 3),
            "max_alloc_bytes": self.max_alloc_bytes,
        }


def _on_timer(signum: int, frame: Any) -> None:
    raise Hang


def run_one(surface: Any, case: Case, time_limit: float, trace_memory: bool) -> tuple[list[str], str | None, int]:
    """Run one input; return (outcomes, failure reason or None, bytes allocated at peak)."""
    peak = 0
    if trace_memory:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
    signal.setitimer(signal.ITIMER_VIRTUAL, time_limit)
    try:
        outcomes = surface.run(case)
    except Hang:
        return [], f"hang: more than {time_limit} s of CPU on one input", 0
    except Failure as exc:
        return [], f"invariant: {exc}", 0
    except Exception as exc:  # anything the module did not mean to raise
        return [], f"unexpected {type(exc).__name__}: {exc}", 0
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    if trace_memory:
        peak = tracemalloc.get_traced_memory()[1] - base
        bound = surface.memory_bound(case)
        if peak > bound:
            return outcomes, f"allocation: {peak} bytes for one input, bound {bound}", peak
    return outcomes, None, peak


def fuzz(
    surface: Any,
    inputs: int,
    seed: int,
    *,
    time_limit: float = 2.0,
    trace_memory: bool = False,
    progress: Callable[[Report], None] | None = None,
) -> Report:
    """Run ``inputs`` generated inputs through ``surface``; never raises on a finding."""
    rng = random.Random(seed)
    report = Report(surface.name, seed)
    old = signal.signal(signal.SIGVTALRM, _on_timer)
    if trace_memory:
        tracemalloc.start()
    t0 = time.perf_counter()
    try:
        for i in range(inputs):
            case = surface.generate(rng)
            t = time.perf_counter()
            outcomes, why, peak = run_one(surface, case, time_limit, trace_memory)
            dt = time.perf_counter() - t
            report.max_input_s = max(report.max_input_s, dt)
            if trace_memory:
                report.max_alloc_bytes = max(report.max_alloc_bytes or 0, peak)
            report.outcomes.update(outcomes)
            if why is not None:
                report.failures.append({"index": i, "why": why, "case": case})
            report.inputs = i + 1
            if progress is not None and (i + 1) % 100_000 == 0:
                report.seconds = time.perf_counter() - t0
                progress(report)
    finally:
        report.seconds = time.perf_counter() - t0
        if trace_memory:
            tracemalloc.stop()
        signal.signal(signal.SIGVTALRM, old)
    return report


# ---------------------------------------------------------------------------
# Corpus
# ---------------------------------------------------------------------------


def corpus_files(surface: str) -> list[Path]:
    return sorted((CORPUS / surface).glob("*.json"))


def load_case(path: Path) -> Case:
    """A corpus file: ``{"note": why it is there, "case": the input}``."""
    return typing.cast(Case, json.loads(path.read_text(encoding="utf-8"))["case"])


def save_case(surface: str, name: str, note: str, case: Case, root: Path = CORPUS) -> Path:
    path = root / surface / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"note": note, "case": case}, indent=1) + "\n", encoding="utf-8")
    return path


if __name__ == "__main__":  # pragma: no cover - a quick smoke run: python tests/fuzz/fuzz_surfaces.py
    for s in SURFACES:
        print(json.dumps(fuzz(make_surface(s), 2000, 1).figures()), file=sys.stdout)
