"""LRBC v1 segment header: byte layout, parse, validation, region layout.

Theory of operation
-------------------
The engine creates the segment and writes the whole 4096-byte header once,
before any reader can attach; afterwards only the *live* fields change:
``client_pid`` and ``action_seq`` (written by the trainer), ``frame_seq``,
``image_seq``, ``image_frame_seq``, ``heartbeat_ns``, ``services_enabled``,
``sim_mode`` and ``engine_state`` (written by the engine). Every other field
is fixed for the life of the segment, so a reader parses and validates the
header once, then reads live counters through 8-byte aligned loads (see
:data:`LIVE_FIELDS`). A new ``session_id`` under the same name means the
engine recreated the segment: the reader must re-validate from scratch.

All integers are little-endian. Offsets in the table below are the normative
ones of ``schema/LAYOUT.md``; this module is the only place that spells them.

Validation never trusts a size the header claims before checking it against
the mapped length, and uses Python integers (no overflow) for every product,
so a hostile header can neither make a reader allocate nor crash it.
"""

from __future__ import annotations

import dataclasses
import itertools
import struct
from dataclasses import dataclass
from typing import Any

from .enums import EngineState, GpuObsMode, ImageFormat, Mode, Service, SimMode
from .errors import (
    BadMagic,
    HeaderError,
    IncompatibleLayout,
    RegionError,
    TruncatedSegment,
    UnsupportedVersion,
)

HEADER_SIZE = 4096
MAGIC = 0x4C524243  # "LRBC" most-significant byte first; 43 42 52 4C in memory
VERSION = 1
REGION_ALIGN = 64
TOOLS_ALIGN = 65536
RING_HEADER = 8  # write_pos u32, read_pos u32
TOOLS_RING_BASE = 64  # tools c2s ring starts 64 bytes into the tools region

# Sane bounds. A header outside them is refused, whatever the mapping holds.
MAX_ENVS = 4096
MAX_VEC = 1 << 16  # floats per env for obs / act
MAX_IMAGE_SIDE = 4096
MIN_RING = 64
MAX_RING = 1 << 30
#: ``frame_seq`` and ``action_seq`` stay below this: a count every reader may hold in a signed 64-bit integer
#: (at a million frames a second, 292,000 years of them).
MAX_COUNT = 1 << 63

#: (name, offset, struct code) for every header field, in layout order.
FIELDS: tuple[tuple[str, int, str], ...] = (
    ("magic", 0, "I"),
    ("version", 4, "I"),
    ("server_pid", 8, "I"),
    ("client_pid", 12, "I"),
    ("mode", 16, "B"),
    ("num_envs", 20, "I"),
    ("obs_size", 24, "I"),
    ("act_size", 28, "I"),
    ("frame_seq", 32, "Q"),
    ("action_seq", 40, "Q"),
    ("obs_offset", 48, "Q"),
    ("act_offset", 56, "Q"),
    ("rewards_offset", 64, "Q"),
    ("dones_offset", 72, "Q"),
    ("resets_offset", 80, "Q"),
    ("cmd_s2c_offset", 88, "Q"),
    ("cmd_c2s_offset", 96, "Q"),
    ("cmd_ring_size", 104, "I"),
    ("image_offset", 112, "Q"),
    ("image_width", 120, "I"),
    ("image_height", 124, "I"),
    ("image_channels", 128, "I"),
    ("gpu_available", 132, "B"),
    ("gpu_obs_mode", 133, "B"),
    ("gpu_obs_handle", 134, "64s"),
    ("gpu_device_id", 200, "I"),
    # extension block
    ("truncateds_offset", 256, "Q"),
    ("segment_size", 264, "Q"),
    ("session_id", 272, "Q"),
    ("image_seq", 280, "Q"),
    ("image_frame_seq", 288, "Q"),
    ("heartbeat_ns", 296, "Q"),
    ("image_format", 304, "I"),
    ("image_flags", 308, "I"),
    ("services_available", 312, "I"),
    ("services_enabled", 316, "I"),
    ("sim_mode", 320, "I"),
    ("engine_state", 324, "I"),
    ("tools_offset", 328, "Q"),
    ("tools_ring_size", 336, "I"),
)

OFFSET: dict[str, int] = {name: off for name, off, _ in FIELDS}
CODE: dict[str, str] = {name: code for name, _, code in FIELDS}

#: Bytes that must be zero in a header of this layout (pads and reserved areas).
ZERO_RANGES: tuple[tuple[int, int], ...] = ((17, 20), (108, 112), (198, 200), (204, 256), (340, 4096))

#: Fields that change while the segment lives. All are 8-byte aligned u64 or
#: 4-byte aligned u32, so a single aligned load reads them untorn on x86-64.
LIVE_FIELDS = (
    "client_pid",
    "frame_seq",
    "action_seq",
    "image_seq",
    "image_frame_seq",
    "heartbeat_ns",
    "services_enabled",
    "sim_mode",
    "engine_state",
)


@dataclass(frozen=True, slots=True)
class LiveFields:
    """All live header fields read at (nearly) one instant: one aligned load each, not atomic as a set."""

    client_pid: int
    frame_seq: int
    action_seq: int
    image_seq: int
    image_frame_seq: int
    heartbeat_ns: int
    services_enabled: int
    sim_mode: int
    engine_state: int

    @property
    def turn(self) -> str:
        """``"trainer"``, ``"engine"``, ``"free-run"`` or ``"violation"``."""
        if self.client_pid == 0:
            return "free-run"
        gap = self.frame_seq - self.action_seq
        return {1: "trainer", 0: "engine"}.get(gap, "violation")


assert tuple(LiveFields.__dataclass_fields__) == LIVE_FIELDS


def struct_for(fields: tuple[tuple[str, int, str], ...]) -> struct.Struct:
    """One little-endian struct over ``(name, offset, code)`` fields in offset order, padding the gaps."""
    fmt, pos = "<", 0
    for _, off, code in fields:
        if off > pos:
            fmt += f"{off - pos}x"
        fmt += code
        pos = off + struct.calcsize("<" + code)
    return struct.Struct(fmt)


_STRUCT = struct_for(FIELDS)
assert _STRUCT.size == 340  # layout self-check at import

IMAGE_FLAG_BOTTOM_UP = 1

#: ``Header.pixel_format`` of a segment without an image region.
NO_IMAGES = "none"


@dataclass(frozen=True)
class Region:
    """One contiguous region of the segment."""

    name: str  # the header field that holds its offset
    offset: int
    size: int

    @property
    def end(self) -> int:
        return self.offset + self.size


@dataclass(frozen=True)
class Header:
    """Every field of the header, as read at one instant.

    Field names are the spec's. ``gpu_obs_handle`` is the raw 64 bytes.
    """

    magic: int
    version: int
    server_pid: int
    client_pid: int
    mode: int
    num_envs: int
    obs_size: int
    act_size: int
    frame_seq: int
    action_seq: int
    obs_offset: int
    act_offset: int
    rewards_offset: int
    dones_offset: int
    resets_offset: int
    cmd_s2c_offset: int
    cmd_c2s_offset: int
    cmd_ring_size: int
    image_offset: int
    image_width: int
    image_height: int
    image_channels: int
    gpu_available: int
    gpu_obs_mode: int
    gpu_obs_handle: bytes
    gpu_device_id: int
    truncateds_offset: int
    segment_size: int
    session_id: int
    image_seq: int
    image_frame_seq: int
    heartbeat_ns: int
    image_format: int
    image_flags: int
    services_available: int
    services_enabled: int
    sim_mode: int
    engine_state: int
    tools_offset: int
    tools_ring_size: int

    # ------------------------------------------------------------------ parse
    @classmethod
    def unpack(cls, buf: Any) -> Header:
        """Decode the fields from ``buf`` (any buffer of >= 340 bytes). No checks."""
        if len(memoryview(buf)) < _STRUCT.size:
            raise TruncatedSegment("segment_size", f"only {len(memoryview(buf))} bytes, a header needs {HEADER_SIZE}")
        return cls(*_STRUCT.unpack_from(buf, 0))

    def pack(self) -> bytes:
        """Encode to exactly :data:`HEADER_SIZE` bytes (reserved bytes zero)."""
        raw = _STRUCT.pack(*dataclasses.astuple(self))
        return raw + bytes(HEADER_SIZE - len(raw))

    def to_dict(self) -> dict[str, Any]:
        """Field name -> value, ``gpu_obs_handle`` as lowercase hex."""
        d = dataclasses.asdict(self)
        d["gpu_obs_handle"] = self.gpu_obs_handle.hex()
        return d

    # ------------------------------------------------------------ derived
    @property
    def has_images(self) -> bool:
        return self.image_offset != 0

    @property
    def image_bytes_per_env(self) -> int:
        return self.image_width * self.image_height * self.image_channels

    @property
    def resolved_image_format(self) -> ImageFormat | None:
        """The concrete channel order of the images (``auto`` resolved by channel count).

        ``None`` when there is no image region, or when ``image_format`` and
        ``image_channels`` do not name a concrete format (which
        :func:`validate` refuses for a segment with images).
        """
        if not self.has_images:
            return None
        return ImageFormat.resolve(self.image_format, self.image_channels)

    @property
    def pixel_format(self) -> str:
        """``rgb``, ``bgr``, ``rgba``, ``bgra`` or ``gray``, resolving ``auto``.

        :data:`NO_IMAGES` (``"none"``) without an image region. Never raises:
        for a header :func:`validate` would refuse it describes the raw value
        (``"unknown (6)"``, or ``"auto (2 channels)"``).
        """
        if not self.has_images:
            return NO_IMAGES
        fmt = self.resolved_image_format
        if fmt is not None:
            return fmt.label
        if self.image_format == ImageFormat.AUTO:
            return f"auto ({self.image_channels} channels)"
        return ImageFormat.name_of(self.image_format)

    @property
    def bottom_up(self) -> bool:
        return bool(self.image_flags & IMAGE_FLAG_BOTTOM_UP)

    @property
    def has_tools(self) -> bool:
        return self.tools_offset != 0

    def regions(self) -> list[Region]:
        """All regions the header declares, in the header's order.

        Sizes are exact Python integers computed from the header's fields;
        call :func:`validate` before trusting them.
        """
        n = self.num_envs
        out = [
            Region("obs_offset", self.obs_offset, 4 * n * self.obs_size),
            Region("act_offset", self.act_offset, 4 * n * self.act_size),
            Region("rewards_offset", self.rewards_offset, 4 * n),
            Region("dones_offset", self.dones_offset, n),
            Region("resets_offset", self.resets_offset, n),
            Region("cmd_s2c_offset", self.cmd_s2c_offset, RING_HEADER + self.cmd_ring_size),
            Region("cmd_c2s_offset", self.cmd_c2s_offset, RING_HEADER + self.cmd_ring_size),
        ]
        if self.image_offset:
            out.append(Region("image_offset", self.image_offset, n * self.image_bytes_per_env))
        if self.truncateds_offset:
            out.append(Region("truncateds_offset", self.truncateds_offset, n))
        if self.tools_offset:
            out.append(Region("tools_offset", self.tools_offset, tools_region_size(self.tools_ring_size)))
        return out

    def region(self, name: str) -> Region:
        for r in self.regions():
            if r.name == name:
                return r
        raise KeyError(name)

    # ----------------------------------------------------------- tools ring
    @property
    def tools_c2s_offset(self) -> int:
        return self.tools_offset + TOOLS_RING_BASE

    @property
    def tools_s2c_offset(self) -> int:
        return self.tools_offset + TOOLS_RING_BASE + RING_HEADER + self.tools_ring_size


def tools_region_size(ring_size: int) -> int:
    """Bytes of a tools region: owner block plus two rings."""
    return TOOLS_RING_BASE + 2 * (RING_HEADER + ring_size)


def _is_pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def _check_prototype(buf: Any, h: Header) -> None:
    """Raise :class:`IncompatibleLayout` if the bytes cannot be this layout.

    The public prototype keeps ``num_envs`` as a u32 at offset 16 (our
    ``mode`` byte plus three pad bytes) and has no image region. So a mode
    outside {0, 1}, or non-zero pad bytes 17-19, or offsets that point into
    the header, mean another layout wrote this segment.
    """
    mv = memoryview(buf)
    pad = bytes(mv[17:20])
    proto_envs = struct.unpack_from("<I", buf, 16)[0]
    hint = (
        f"looks like the public prototype layout (num_envs={proto_envs} at offset 16); "
        "lucky-monitor reads only the LRBC v1 layout of schema/LAYOUT.md"
    )
    if Mode.get(h.mode) is None or pad != b"\0\0\0":
        raise IncompatibleLayout("mode", f"byte 16-19 hold {proto_envs}, not a mode 0/1 plus zero padding: {hint}")
    for name in (
        "obs_offset",
        "act_offset",
        "rewards_offset",
        "dones_offset",
        "resets_offset",
        "cmd_s2c_offset",
        "cmd_c2s_offset",
    ):
        off = getattr(h, name)
        if off < HEADER_SIZE:
            raise IncompatibleLayout(name, f"{off} points inside the {HEADER_SIZE}-byte header: {hint}")


def count_message(value: int) -> str:
    """What :func:`validate` says of a ``frame_seq`` or ``action_seq`` at or above :data:`MAX_COUNT`."""
    return f"{value}, must be below 2^63 (a count a signed 64-bit integer holds)"


def validate(buf: Any, mapped_size: int | None = None) -> Header:
    """Parse and check a header; return it or raise one specific error.

    Parameters
    ----------
    buf
        At least the first :data:`HEADER_SIZE` bytes of the segment.
    mapped_size
        Bytes actually mapped/present. Defaults to ``len(buf)``.

    Raises
    ------
    TruncatedSegment, BadMagic, UnsupportedVersion, IncompatibleLayout,
    RegionError, HeaderError
        Each names the field and the numbers involved.
    """
    have = len(memoryview(buf)) if mapped_size is None else mapped_size
    if have < HEADER_SIZE or len(memoryview(buf)) < HEADER_SIZE:
        raise TruncatedSegment("segment_size", f"segment is {have} bytes, smaller than the {HEADER_SIZE}-byte header")
    h = Header.unpack(buf)
    if h.magic != MAGIC:
        raise BadMagic("magic", f"0x{h.magic:08X}, expected 0x{MAGIC:08X} ('LRBC')")
    if h.version != VERSION:
        raise UnsupportedVersion("version", f"{h.version}, this reader knows version {VERSION}")
    _check_prototype(buf, h)

    if not 1 <= h.num_envs <= MAX_ENVS:
        raise HeaderError("num_envs", f"{h.num_envs}, must be 1..{MAX_ENVS}")
    for name in ("obs_size", "act_size"):
        v = getattr(h, name)
        if not 0 <= v <= MAX_VEC:
            raise HeaderError(name, f"{v} floats per env, must be 0..{MAX_VEC}")
    if not _is_pow2(h.cmd_ring_size) or not MIN_RING <= h.cmd_ring_size <= MAX_RING:
        raise HeaderError("cmd_ring_size", f"{h.cmd_ring_size}, must be a power of two in {MIN_RING}..{MAX_RING}")
    if h.image_offset:
        if not 1 <= h.image_width <= MAX_IMAGE_SIDE:
            raise HeaderError("image_width", f"{h.image_width}, must be 1..{MAX_IMAGE_SIDE}")
        if not 1 <= h.image_height <= MAX_IMAGE_SIDE:
            raise HeaderError("image_height", f"{h.image_height}, must be 1..{MAX_IMAGE_SIDE}")
        if h.image_channels not in (1, 3, 4):
            raise HeaderError("image_channels", f"{h.image_channels}, must be 1, 3 or 4")
        fmt = ImageFormat.get(h.image_format)
        if fmt is None:
            raise HeaderError("image_format", f"{h.image_format}, must be {ImageFormat.describe()}")
        if fmt.channels is not None and fmt.channels != h.image_channels:
            raise HeaderError(
                "image_format", f"{fmt.label} needs {fmt.channels} channels, image_channels is {h.image_channels}"
            )
    # Without an image region image_format, image_channels and the image sizes
    # describe nothing; they are not checked (LAYOUT 3.2: image_offset 0 = no images).
    for name, vocab in (("gpu_obs_mode", GpuObsMode), ("sim_mode", SimMode), ("engine_state", EngineState)):
        v = getattr(h, name)
        if vocab.get(v) is None:
            raise HeaderError(name, f"{v}, must be {vocab.describe()}")
    for name in ("frame_seq", "action_seq"):
        v = getattr(h, name)
        if v >= MAX_COUNT:
            raise HeaderError(name, count_message(v))
    if h.tools_offset:
        if h.tools_offset % TOOLS_ALIGN:
            raise RegionError("tools_offset", f"{h.tools_offset} is not a multiple of {TOOLS_ALIGN}")
        if not _is_pow2(h.tools_ring_size) or not MIN_RING <= h.tools_ring_size <= MAX_RING:
            raise HeaderError(
                "tools_ring_size", f"{h.tools_ring_size}, must be a power of two in {MIN_RING}..{MAX_RING}"
            )

    # The size we check regions against: the header's claim, which must fit in
    # what is mapped; or, from an engine without the extension, the mapping.
    if h.segment_size:
        if h.segment_size > have:
            raise TruncatedSegment("segment_size", f"header claims {h.segment_size} bytes but only {have} are mapped")
        if h.segment_size < HEADER_SIZE:
            raise TruncatedSegment("segment_size", f"{h.segment_size} is smaller than the header")
        limit = h.segment_size
    else:
        limit = have

    regions = h.regions()
    for r in regions:
        if r.offset % REGION_ALIGN:
            raise RegionError(r.name, f"{r.offset} is not {REGION_ALIGN}-byte aligned")
        if r.offset < HEADER_SIZE:
            raise RegionError(r.name, f"{r.offset} lies inside the {HEADER_SIZE}-byte header")
        if r.end > limit:
            raise RegionError(
                r.name, f"region [{r.offset}, {r.end}) of {r.size} bytes runs past the segment end {limit}"
            )
    ordered = sorted((r for r in regions if r.size), key=lambda r: r.offset)
    for a, b in itertools.pairwise(ordered):
        if b.offset < a.end:
            raise RegionError(b.name, f"region at {b.offset} overlaps {a.name} [{a.offset}, {a.end})")
    return h


def is_zero_reserved(buf: Any) -> list[tuple[int, int]]:
    """Return the (start, end) pad/reserved ranges that hold non-zero bytes."""
    mv = memoryview(buf)
    return [(a, b) for a, b in ZERO_RANGES if any(mv[a:b])]


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def plan(
    *,
    num_envs: int,
    obs_size: int,
    act_size: int,
    cmd_ring_size: int = 512 * 1024,
    image: tuple[int, int, int] | None = None,
    image_format: int = ImageFormat.AUTO,
    image_flags: int = 0,
    tools_ring_size: int | None = 64 * 1024,
    server_pid: int = 0,
    session_id: int = 1,
    mode: int = Mode.TRAINING,
    services_available: int | None = None,
    services_enabled: int | None = None,
    sim_mode: int = SimMode.REALTIME,
) -> Header:
    """Lay out a new segment; return its header (counters at zero).

    ``image`` is ``(width, height, channels)`` or ``None``. ``tools_ring_size``
    ``None`` exports no tools channel. ``services_available`` ``None`` means
    every :class:`Service`. The result always passes :func:`validate`.
    """
    if services_available is None:
        services_available = Service.all_mask()
    off = HEADER_SIZE

    def take(size: int, align: int = REGION_ALIGN) -> int:
        nonlocal off
        start = _align(off, align)
        off = start + size
        return start

    n = num_envs
    obs_o = take(4 * n * obs_size)
    act_o = take(4 * n * act_size)
    rew_o = take(4 * n)
    done_o = take(n)
    trunc_o = take(n)
    reset_o = take(n)
    s2c_o = take(RING_HEADER + cmd_ring_size)
    c2s_o = take(RING_HEADER + cmd_ring_size)
    if image is not None:
        w, hgt, c = image
        img_o = take(n * w * hgt * c)
    else:
        w = hgt = c = 0
        img_o = 0
    if tools_ring_size:
        tools_o = take(tools_region_size(tools_ring_size), TOOLS_ALIGN)
    else:
        tools_o, tools_ring_size = 0, 0
    total = _align(off, 4096)
    return Header(
        magic=MAGIC,
        version=VERSION,
        server_pid=server_pid,
        client_pid=0,
        mode=int(mode),
        num_envs=n,
        obs_size=obs_size,
        act_size=act_size,
        frame_seq=0,
        action_seq=0,
        obs_offset=obs_o,
        act_offset=act_o,
        rewards_offset=rew_o,
        dones_offset=done_o,
        resets_offset=reset_o,
        cmd_s2c_offset=s2c_o,
        cmd_c2s_offset=c2s_o,
        cmd_ring_size=cmd_ring_size,
        image_offset=img_o,
        image_width=w,
        image_height=hgt,
        image_channels=c,
        gpu_available=0,
        gpu_obs_mode=int(GpuObsMode.CPU),
        gpu_obs_handle=bytes(64),
        gpu_device_id=0,
        truncateds_offset=trunc_o,
        segment_size=total,
        session_id=session_id,
        image_seq=0,
        image_frame_seq=0,
        heartbeat_ns=0,
        image_format=int(image_format),
        image_flags=image_flags,
        services_available=services_available,
        services_enabled=services_available if services_enabled is None else services_enabled,
        sim_mode=int(sim_mode),
        engine_state=int(EngineState.INITIALISING),
        tools_offset=tools_o,
        tools_ring_size=tools_ring_size,
    )
