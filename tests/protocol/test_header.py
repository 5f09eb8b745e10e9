"""Header layout, parsing and validation, against bytes packed independently here.

The table below is typed in from the protocol spec (offset, struct code); it
is deliberately not derived from ``lucky_monitor.protocol.header``.
"""

from __future__ import annotations

import inspect
import itertools
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lucky_monitor.protocol import header as H
from lucky_monitor.protocol.enums import EngineState, GpuObsMode, ImageFormat, Mode, Service, SimMode
from lucky_monitor.protocol.errors import (
    BadMagic,
    HeaderError,
    IncompatibleLayout,
    RegionError,
    TruncatedSegment,
    UnsupportedVersion,
)

SPEC: dict[str, tuple[int, str]] = {
    "magic": (0, "I"),
    "version": (4, "I"),
    "server_pid": (8, "I"),
    "client_pid": (12, "I"),
    "mode": (16, "B"),
    "num_envs": (20, "I"),
    "obs_size": (24, "I"),
    "act_size": (28, "I"),
    "frame_seq": (32, "Q"),
    "action_seq": (40, "Q"),
    "obs_offset": (48, "Q"),
    "act_offset": (56, "Q"),
    "rewards_offset": (64, "Q"),
    "dones_offset": (72, "Q"),
    "resets_offset": (80, "Q"),
    "cmd_s2c_offset": (88, "Q"),
    "cmd_c2s_offset": (96, "Q"),
    "cmd_ring_size": (104, "I"),
    "image_offset": (112, "Q"),
    "image_width": (120, "I"),
    "image_height": (124, "I"),
    "image_channels": (128, "I"),
    "gpu_available": (132, "B"),
    "gpu_obs_mode": (133, "B"),
    "gpu_obs_handle": (134, "64s"),
    "gpu_device_id": (200, "I"),
    "truncateds_offset": (256, "Q"),
    "segment_size": (264, "Q"),
    "session_id": (272, "Q"),
    "image_seq": (280, "Q"),
    "image_frame_seq": (288, "Q"),
    "heartbeat_ns": (296, "Q"),
    "image_format": (304, "I"),
    "image_flags": (308, "I"),
    "services_available": (312, "I"),
    "services_enabled": (316, "I"),
    "sim_mode": (320, "I"),
    "engine_state": (324, "I"),
    "tools_offset": (328, "Q"),
    "tools_ring_size": (336, "I"),
}

# A hand-made valid layout: 2 envs, 3 obs, 1 act, 256-byte rings, 4x2 RGB images,
# tools channel at 65536 with 256-byte rings.
VALID: dict[str, object] = {
    "magic": 0x4C524243,
    "version": 1,
    "server_pid": 4242,
    "client_pid": 4343,
    "mode": 1,
    "num_envs": 2,
    "obs_size": 3,
    "act_size": 1,
    "frame_seq": 17,
    "action_seq": 16,
    "obs_offset": 4096,
    "act_offset": 4160,
    "rewards_offset": 4224,
    "dones_offset": 4288,
    "resets_offset": 4416,
    "cmd_s2c_offset": 4480,
    "cmd_c2s_offset": 4800,
    "cmd_ring_size": 256,
    "image_offset": 5120,
    "image_width": 4,
    "image_height": 2,
    "image_channels": 3,
    "gpu_available": 1,
    "gpu_obs_mode": 1,
    "gpu_obs_handle": bytes(range(64)),
    "gpu_device_id": 3,
    "truncateds_offset": 4352,
    "segment_size": 69632,
    "session_id": 0x1234_5678_9ABC_DEF0,
    "image_seq": 8,
    "image_frame_seq": 16,
    "heartbeat_ns": 123_456_789_000,
    "image_format": 2,
    "image_flags": 1,
    "services_available": 0xFF,
    "services_enabled": 0x3F,
    "sim_mode": 1,
    "engine_state": 1,
    "tools_offset": 65536,
    "tools_ring_size": 256,
}
SIZE = 69632


def pack(values: dict[str, object] | None = None, **over: object) -> bytearray:
    """Pack a 4096-byte header with ``struct.pack_into`` at the spec offsets."""
    v = {**VALID, **(values or {}), **over}
    buf = bytearray(H.HEADER_SIZE)
    for name, (off, code) in SPEC.items():
        struct.pack_into("<" + code, buf, off, v[name])
    return buf


def test_spec_table_matches_module() -> None:
    assert {n: (H.OFFSET[n], H.CODE[n]) for n in H.OFFSET} == SPEC
    assert set(H.LIVE_FIELDS) <= set(SPEC)


def test_independent_bytes_parse_to_the_right_values() -> None:
    buf = pack()
    assert bytes(buf[0:4]) == bytes.fromhex("4342524c")  # "LRBC" most-significant byte first
    h = H.validate(buf, mapped_size=SIZE)
    for name, value in VALID.items():
        assert getattr(h, name) == value, name
    assert h.pixel_format == "bgr"
    assert h.bottom_up
    assert h.has_tools and h.has_images
    assert h.tools_c2s_offset == 65536 + 64
    assert h.tools_s2c_offset == 65536 + 64 + 8 + 256
    assert h.region("image_offset").size == 2 * 4 * 2 * 3
    assert Service.names_in(h.services_enabled) == ["Agent", "MuJoCo", "MujocoScene", "Telemetry", "Scene", "Camera"]
    assert h.pack() == bytes(buf)  # and back, byte for byte
    d = h.to_dict()
    assert list(d) == list(SPEC)
    assert d["gpu_obs_handle"] == bytes(range(64)).hex()


def test_reserved_bytes_are_reported() -> None:
    buf = pack()
    assert H.is_zero_reserved(buf) == []
    buf[1000] = 1
    buf[18] = 0  # still zero
    assert H.is_zero_reserved(buf) == [(340, 4096)]
    buf[205] = 7
    assert H.is_zero_reserved(buf) == [(204, 256), (340, 4096)]


PLANS = [
    {"num_envs": 1, "obs_size": 0, "act_size": 0},
    {"num_envs": 16, "obs_size": 48, "act_size": 12},
    {"num_envs": 4096, "obs_size": 7, "act_size": 3, "cmd_ring_size": 64, "tools_ring_size": None},
    {"num_envs": 3, "obs_size": 5, "act_size": 2, "image": (64, 48, 3), "image_format": 2},
    {"num_envs": 2, "obs_size": 5, "act_size": 2, "image": (33, 17, 4), "image_format": 4, "image_flags": 1},
    {"num_envs": 9, "obs_size": 5, "act_size": 2, "image": (8, 8, 1), "tools_ring_size": 1 << 20},
]


@pytest.mark.parametrize("kw", PLANS)
def test_plan_output_validates(kw: dict) -> None:
    h = H.plan(**kw)
    raw = h.pack()
    assert len(raw) == H.HEADER_SIZE
    assert H.is_zero_reserved(raw) == []
    assert H.validate(raw, mapped_size=h.segment_size) == h
    assert h.segment_size % 4096 == 0
    regions = sorted(h.regions(), key=lambda r: r.offset)
    for r in regions:
        assert r.offset % 64 == 0 and r.offset >= 4096 and r.end <= h.segment_size
    for a, b in itertools.pairwise(regions):
        assert a.end <= b.offset
    if h.tools_offset:
        assert h.tools_offset % 65536 == 0
    # One byte less than the header claims is refused.
    with pytest.raises(TruncatedSegment):
        H.validate(raw, mapped_size=h.segment_size - 1)


# (overrides, error type, field)
RULES: list[tuple[dict[str, object], type[HeaderError], str]] = [
    ({"magic": 0x4342524C}, BadMagic, "magic"),
    ({"magic": 0}, BadMagic, "magic"),
    ({"version": 2}, UnsupportedVersion, "version"),
    ({"version": 0}, UnsupportedVersion, "version"),
    ({"num_envs": 0}, HeaderError, "num_envs"),
    ({"num_envs": H.MAX_ENVS + 1}, HeaderError, "num_envs"),
    ({"obs_size": H.MAX_VEC + 1}, HeaderError, "obs_size"),
    ({"act_size": 0xFFFFFFFF}, HeaderError, "act_size"),
    ({"cmd_ring_size": 1000}, HeaderError, "cmd_ring_size"),
    ({"cmd_ring_size": 32}, HeaderError, "cmd_ring_size"),
    ({"cmd_ring_size": 0}, HeaderError, "cmd_ring_size"),
    ({"image_width": 0}, HeaderError, "image_width"),
    ({"image_width": H.MAX_IMAGE_SIDE + 1}, HeaderError, "image_width"),
    ({"image_height": 0}, HeaderError, "image_height"),
    ({"image_channels": 2}, HeaderError, "image_channels"),
    ({"image_format": 6}, HeaderError, "image_format"),
    ({"image_format": 4}, HeaderError, "image_format"),  # bgra needs 4 channels, image has 3
    ({"image_format": 5}, HeaderError, "image_format"),  # gray needs 1
    ({"gpu_obs_mode": 3}, HeaderError, "gpu_obs_mode"),
    ({"sim_mode": 3}, HeaderError, "sim_mode"),
    ({"engine_state": 4}, HeaderError, "engine_state"),
    ({"frame_seq": 2**63}, HeaderError, "frame_seq"),
    ({"action_seq": 2**64 - 1}, HeaderError, "action_seq"),
    ({"tools_offset": 65536 + 4096}, RegionError, "tools_offset"),
    ({"tools_ring_size": 100}, HeaderError, "tools_ring_size"),
    ({"tools_ring_size": 0}, HeaderError, "tools_ring_size"),
    ({"segment_size": SIZE + 4096}, TruncatedSegment, "segment_size"),
    ({"segment_size": 100}, TruncatedSegment, "segment_size"),
    ({"segment_size": 2**64 - 1}, TruncatedSegment, "segment_size"),
    ({"obs_offset": 4100}, RegionError, "obs_offset"),
    ({"rewards_offset": 4224 + 8}, RegionError, "rewards_offset"),
    ({"image_offset": 1024}, RegionError, "image_offset"),  # inside the header
    ({"image_offset": SIZE - 64, "image_width": 8}, RegionError, "image_offset"),  # runs past the end
    ({"truncateds_offset": 2**64 - 64}, RegionError, "truncateds_offset"),
    ({"tools_offset": 2 * 65536}, RegionError, "tools_offset"),  # past the end
    ({"cmd_c2s_offset": 4480}, RegionError, "cmd_c2s_offset"),  # overlaps cmd_s2c
    ({"dones_offset": 4416}, RegionError, "resets_offset"),  # overlaps resets
    ({"obs_size": H.MAX_VEC, "num_envs": H.MAX_ENVS}, RegionError, "obs_offset"),  # 1 GiB claim
    ({"mode": 2}, IncompatibleLayout, "mode"),
    ({"obs_offset": 64}, IncompatibleLayout, "obs_offset"),
]


@pytest.mark.parametrize(("over", "exc", "field"), RULES, ids=[f"{r[2]}-{i}" for i, r in enumerate(RULES)])
def test_each_rule_raises_its_error_naming_the_field(over: dict, exc: type[HeaderError], field: str) -> None:
    buf = pack(over)
    with pytest.raises(exc) as info:
        H.validate(buf, mapped_size=SIZE)
    assert info.value.field == field
    assert str(info.value).startswith(field + ":")
    assert type(info.value) is exc  # a plain bound gives HeaderError itself, not a subclass


def test_non_zero_pad_is_another_layout() -> None:
    buf = pack()
    buf[18] = 1
    with pytest.raises(IncompatibleLayout, match="prototype"):
        H.validate(buf, mapped_size=SIZE)


def test_short_buffers_and_mappings_are_truncated() -> None:
    with pytest.raises(TruncatedSegment):
        H.validate(b"")
    with pytest.raises(TruncatedSegment):
        H.validate(bytes(pack())[:4095])
    with pytest.raises(TruncatedSegment):
        H.validate(pack(), mapped_size=4095)
    with pytest.raises(TruncatedSegment):
        H.Header.unpack(b"LRBC")


def test_segment_size_zero_falls_back_to_the_mapping() -> None:
    buf = pack(segment_size=0)
    assert H.validate(buf, mapped_size=SIZE).segment_size == 0
    with pytest.raises(RegionError) as info:
        H.validate(buf, mapped_size=65536)  # the tools region lies past that
    assert info.value.field == "tools_offset"


def prototype_bytes(num_envs: int) -> bytearray:
    """The public prototype: same magic and version, num_envs u32 at 16, no mode, small header."""
    buf = bytearray(H.HEADER_SIZE)
    struct.pack_into("<IIII", buf, 0, 0x4C524243, 1, 4242, 0)
    struct.pack_into("<III", buf, 16, num_envs, 48, 12)  # num_envs, obs_size, act_size
    struct.pack_into("<QQ", buf, 32, 5, 4)  # frame_seq, action_seq
    head = 256
    obs = head
    act = obs + 4 * num_envs * 48
    rew = act + 4 * num_envs * 12
    struct.pack_into("<QQQQQ", buf, 48, obs, act, rew, rew + 4 * num_envs, rew + 5 * num_envs)
    return buf


@pytest.mark.parametrize("num_envs", [1, 64, 256, 4096])
def test_prototype_layout_is_incompatible_and_says_so(num_envs: int) -> None:
    buf = prototype_bytes(num_envs)
    with pytest.raises(IncompatibleLayout) as info:
        H.validate(buf, mapped_size=1 << 20)
    assert "prototype" in str(info.value)
    assert "LRBC v1" in str(info.value)


def test_huge_claims_do_not_allocate() -> None:
    cases = [
        pack(num_envs=H.MAX_ENVS, obs_size=H.MAX_VEC, act_size=H.MAX_VEC),
        pack(segment_size=2**64 - 1),
        pack(
            image_width=H.MAX_IMAGE_SIDE,
            image_height=H.MAX_IMAGE_SIDE,
            image_channels=4,
            image_format=0,
            num_envs=H.MAX_ENVS,
        ),
        pack(tools_ring_size=H.MAX_RING, cmd_ring_size=H.MAX_RING),
    ]
    tracemalloc.start()
    try:
        for buf in cases:
            with pytest.raises(HeaderError):
                H.validate(buf, mapped_size=SIZE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024


# ----------------------------------------------------------------------------- fuzz

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _outcome(buf: bytes | bytearray, mapped: int | None) -> None:
    try:
        h = H.validate(buf, mapped_size=mapped)
    except HeaderError as exc:
        assert exc.field
        return
    assert isinstance(h, H.Header)
    exercise(h)
    # A header that passed is internally consistent.
    limit = h.segment_size or (len(buf) if mapped is None else mapped)
    for r in h.regions():
        assert r.offset % 64 == 0 and H.HEADER_SIZE <= r.offset and r.end <= limit


@FUZZ
@given(data=st.binary(max_size=6000), mapped=st.one_of(st.none(), st.integers(0, 2**64)))
def test_fuzz_random_bytes(data: bytes, mapped: int | None) -> None:
    _outcome(data, mapped)


_FIELD_NAMES = sorted(SPEC)
_WIDTH = {"B": 8, "I": 32, "Q": 64}
_INTERESTING = st.sampled_from([0, 1, 7, 63, 64, 4095, 4096, 65536, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 1])


@st.composite
def mutated(draw: st.DrawFn) -> tuple[bytes, int | None]:
    buf = pack()
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["field", "bits", "truncate", "huge"]))
        if kind == "field":
            name = draw(st.sampled_from(_FIELD_NAMES))
            off, code = SPEC[name]
            if code == "64s":
                value = draw(st.binary(min_size=64, max_size=64))
            else:
                bits = _WIDTH[code]
                value = draw(st.one_of(st.integers(0, 2**bits - 1), _INTERESTING.filter(lambda v, b=bits: v < 2**b)))
            if len(buf) >= off + struct.calcsize(code):
                struct.pack_into("<" + code, buf, off, value)
        elif kind == "bits":
            for pos in draw(st.lists(st.integers(0, 8 * 512 - 1), min_size=1, max_size=8)):
                if pos // 8 < len(buf):
                    buf[pos // 8] ^= 1 << (pos % 8)
        elif kind == "truncate":
            buf = buf[: draw(st.integers(0, len(buf)))]
        else:
            name = draw(
                st.sampled_from(
                    [
                        "num_envs",
                        "obs_size",
                        "act_size",
                        "segment_size",
                        "cmd_ring_size",
                        "image_width",
                        "image_height",
                        "tools_ring_size",
                        "obs_offset",
                        "image_offset",
                    ]
                )
            )
            off, code = SPEC[name]
            if len(buf) >= off + struct.calcsize(code):
                struct.pack_into("<" + code, buf, off, 2 ** _WIDTH[code] - draw(st.integers(1, 4096)))
    mapped = draw(st.one_of(st.none(), st.just(SIZE), st.integers(0, 2**40)))
    return bytes(buf), mapped


@FUZZ
@given(case=mutated())
def test_fuzz_mutated_valid_header(case: tuple[bytes, int | None]) -> None:
    buf, mapped = case
    _outcome(buf, mapped)


# ---------------------------------------------------------------------------
# Every accessor of an accepted header works
# ---------------------------------------------------------------------------

#: Public methods of Header that take arguments, and how to call them.
_CALLS_WITH_ARGS = {"region", "unpack"}


def exercise(h: H.Header) -> None:
    """Call every public property and method of ``h``; none may raise."""
    names = [n for n in dir(H.Header) if not n.startswith("_")]
    fields = {f for f, _, _ in H.FIELDS}
    for name in names:
        if name in fields:
            continue
        attr = inspect.getattr_static(H.Header, name)
        if isinstance(attr, property):
            getattr(h, name)
        elif name in _CALLS_WITH_ARGS:
            continue
        else:
            assert callable(getattr(h, name)), name
            getattr(h, name)()
    for r in h.regions():
        assert h.region(r.name) == r
    assert H.Header.unpack(h.pack()) == h
    assert h.pixel_format in (*ImageFormat.labels(), H.NO_IMAGES)
    assert h.pixel_format != "auto"
    repr(h)


def test_exercise_knows_every_method_that_takes_arguments() -> None:
    for name in dir(H.Header):
        attr = inspect.getattr_static(H.Header, name)
        if name.startswith("_") or isinstance(attr, property) or not callable(attr):
            continue
        fn = getattr(H.Header, name)
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.name != "self" and p.default is inspect.Parameter.empty
        ]
        assert (name in _CALLS_WITH_ARGS) == bool(params), f"exercise() does not know how to call Header.{name}"


def test_pixel_format_without_an_image_region_never_raises() -> None:
    # image_format 6 is not a format, but with image_offset 0 nothing reads it.
    h = H.validate(pack(image_offset=0, image_format=6, image_channels=2), mapped_size=SIZE)
    assert h.pixel_format == H.NO_IMAGES == "none"
    assert h.resolved_image_format is None
    exercise(h)


def test_pixel_format_resolves_auto_by_channels() -> None:
    for channels, want in ((1, "gray"), (3, "rgb"), (4, "rgba")):
        h = H.plan(num_envs=1, obs_size=1, act_size=1, image=(2, 2, channels), image_format=0)
        assert H.validate(h.pack() + bytes(h.segment_size - H.HEADER_SIZE)).pixel_format == want
        assert h.resolved_image_format == ImageFormat.from_label(want)


def test_pixel_format_of_an_unvalidated_header_names_the_raw_value() -> None:
    h = H.Header.unpack(pack(image_format=6))
    assert h.pixel_format == "unknown (6)"
    assert H.Header.unpack(pack(image_format=0, image_channels=2)).pixel_format == "auto (2 channels)"


def test_unknown_image_format_with_an_image_region_is_refused() -> None:
    with pytest.raises(HeaderError, match=r"image_format: 6, must be 0 auto, 1 rgb, 2 bgr, 3 rgba, 4 bgra, 5 gray"):
        H.validate(pack(image_format=6), mapped_size=SIZE)


_U32 = st.integers(0, 2**32 - 1)


@st.composite
def planned_headers(draw: st.DrawFn) -> bytes:
    """A valid planned layout with the fields validate may or may not accept scrambled."""
    c = draw(st.sampled_from([1, 3, 4]))
    image = draw(st.one_of(st.none(), st.tuples(st.integers(1, 8), st.integers(1, 8), st.just(c))))
    h = H.plan(
        num_envs=draw(st.integers(1, 4)),
        obs_size=draw(st.integers(0, 4)),
        act_size=draw(st.integers(0, 4)),
        cmd_ring_size=64,
        image=image,
        tools_ring_size=draw(st.sampled_from([None, 64])),
        image_format=int(ImageFormat.for_channels(c) or 0) if image else 0,
    )
    buf = bytearray(h.pack())
    for name in draw(
        st.lists(
            st.sampled_from(
                [
                    "mode",
                    "image_format",
                    "image_channels",
                    "image_width",
                    "image_height",
                    "image_flags",
                    "gpu_available",
                    "gpu_obs_mode",
                    "sim_mode",
                    "engine_state",
                    "services_available",
                    "services_enabled",
                    "heartbeat_ns",
                    "session_id",
                ]
            ),
            max_size=5,
        )
    ):
        off, code = SPEC[name]
        small = st.integers(0, 8)
        value = draw(st.one_of(small, _U32) if code != "Q" else st.integers(0, 2**64 - 1))
        if code == "B":
            value &= 0xFF
        struct.pack_into("<" + code, buf, off, value)
    return bytes(buf) + bytes(h.segment_size - H.HEADER_SIZE)


@FUZZ
@given(buf=planned_headers())
def test_every_accessor_of_an_accepted_header_works(buf: bytes) -> None:
    try:
        h = H.validate(buf)
    except HeaderError as exc:
        assert exc.field
        return
    exercise(h)
    assert Mode.get(h.mode) is not None and GpuObsMode.get(h.gpu_obs_mode) is not None
    assert SimMode.get(h.sim_mode) is not None and EngineState.get(h.engine_state) is not None
    if h.has_images:
        assert h.resolved_image_format is not None
        assert h.resolved_image_format.channels == h.image_channels


def test_counts_just_under_2_63_pass() -> None:
    h = H.validate(pack({"frame_seq": 2**63 - 1, "action_seq": 2**63 - 2}), mapped_size=SIZE)
    assert (h.frame_seq, h.action_seq) == (2**63 - 1, 2**63 - 2)
