"""Envelope codec: round trips, an independent oracle (flatc's generated code), fuzzing."""

from __future__ import annotations

import dataclasses
import importlib
import math
import struct
import types
import typing
from enum import IntEnum
from pathlib import Path

import flatbuffers
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lucky_monitor.protocol import envelope as E
from lucky_monitor.protocol import messages as m
from lucky_monitor.protocol.envelope import (
    Envelope,
    EnvelopeHead,
    decode,
    encode,
    error_response,
    peek,
    peek_method,
    response_to,
)
from lucky_monitor.protocol.errors import EnvelopeError, LuckyMonitorError

GEN = "lucky_monitor._generated.hazel.rpc"
PAYLOADS = list(m.PAYLOAD_OF.items())
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def gen(name: str) -> types.ModuleType:
    return importlib.import_module(f"{GEN}.{name}")


def camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


# ---------------------------------------------------------------------------
# Strategies built from the dataclass annotations
# ---------------------------------------------------------------------------

F32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
_TAGGED = {
    "ubyte": st.integers(0, 2**8 - 1),
    "ushort": st.integers(0, 2**16 - 1),
    "uint": st.integers(0, 2**32 - 1),
    "ulong": st.integers(0, 2**64 - 1),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": st.integers(-(2**63), 2**63 - 1),
    "double": st.floats(allow_nan=False, allow_infinity=False),
}


def strategy(hint: typing.Any) -> st.SearchStrategy[typing.Any]:
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        base, tag = typing.get_args(hint)[:2]
        if isinstance(base, type) and issubclass(base, IntEnum):
            return st.sampled_from(list(base))
        return _TAGGED[tag]
    if hint is float:
        return F32
    if hint is bool:
        return st.booleans()
    if hint is str:
        return st.text(max_size=8)
    if origin is tuple:
        return st.lists(strategy(typing.get_args(hint)[0]), max_size=4).map(tuple)
    if origin in (types.UnionType, typing.Union):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return st.none() | strategy(inner)
    assert dataclasses.is_dataclass(hint), hint
    hints = typing.get_type_hints(hint, include_extras=True)
    return st.builds(hint, **{f.name: strategy(hints[f.name]) for f in dataclasses.fields(hint)})


def envelopes(cls: type, method: m.MethodId) -> st.SearchStrategy[Envelope]:
    return st.builds(
        Envelope,
        st.just(method),
        st.integers(0, 2**64 - 1),
        strategy(cls),
        st.text(max_size=8),
        st.one_of(st.just(0), st.integers(0, 2**64 - 1)),
    )


ANY_ENVELOPE = st.sampled_from(PAYLOADS).flatmap(lambda mc: envelopes(mc[1], mc[0]))


# ---------------------------------------------------------------------------
# An independent reader: flatc's generated accessors (trusted input only)
# ---------------------------------------------------------------------------


def gen_value(hint: typing.Any, value: typing.Any) -> typing.Any:
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        base = typing.get_args(hint)[0]
        return base(value) if isinstance(base, type) and issubclass(base, IntEnum) else value
    if hint is bool:
        return bool(value)
    if hint is str:
        return "" if value is None else value.decode("utf-8")
    if origin in (types.UnionType, typing.Union):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return None if value is None else gen_read(value, inner)
    if dataclasses.is_dataclass(hint):
        return gen_read(value, hint)
    return value


def gen_read(obj: typing.Any, cls: type) -> typing.Any:
    hints = typing.get_type_hints(cls, include_extras=True)
    kwargs = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        acc = getattr(obj, camel(f.name))
        if typing.get_origin(hint) is tuple:
            elem = typing.get_args(hint)[0]
            n = getattr(obj, camel(f.name) + "Length")()
            kwargs[f.name] = tuple(gen_value(elem, acc(j)) for j in range(n))
        else:
            kwargs[f.name] = gen_value(hint, acc())
    return cls(**kwargs)


def gen_decode(buf: bytes) -> Envelope:
    env = gen("Envelope").Envelope.GetRootAs(buf, 0)
    ptype = env.PayloadType()
    payload = None
    if ptype:
        names = {v: k for k, v in vars(gen("Payload").Payload).items() if not k.startswith("_")}
        name = names[ptype]
        table = env.Payload()
        obj = getattr(gen(name), name)()
        obj.Init(table.Bytes, table.Pos)
        payload = gen_read(obj, getattr(m, name))
    err = env.ErrorMessage()
    return Envelope(env.Method(), env.CorrelationId(), payload, "" if err is None else err.decode(), env.SentNs())


# ---------------------------------------------------------------------------
# Schema mirror
# ---------------------------------------------------------------------------


def test_method_ids_mirror_the_schema_exactly() -> None:
    generated = {k: v for k, v in vars(gen("MethodId").MethodId).items() if not k.startswith("_")}
    assert generated == {x.name: int(x) for x in m.MethodId}


def test_simulation_mode_mirrors_the_schema() -> None:
    generated = {k: v for k, v in vars(gen("SimulationMode").SimulationMode).items() if not k.startswith("_")}
    # The schema spells members Realtime, ...; Python spells them REALTIME, ...
    assert {k.upper(): v for k, v in generated.items()} == {x.name: int(x) for x in m.SimMode}


def test_every_method_has_its_own_payload_table() -> None:
    members = {k for k in vars(gen("Payload").Payload) if not k.startswith("_") and k != "NONE"}
    assert {cls.__name__ for cls in m.PAYLOAD_OF.values()} == members
    assert all(cls.__name__ == meth.name for meth, cls in m.PAYLOAD_OF.items())
    assert set(m.PAYLOAD_OF) == set(m.MethodId) - {m.MethodId.Unset}
    assert {v: k for k, v in m.METHOD_OF_PAYLOAD.items()} == m.PAYLOAD_OF


def test_every_schema_table_and_struct_has_a_dataclass() -> None:
    import lucky_monitor._generated.hazel.rpc as pkg

    modules = {p.stem for p in Path(pkg.__file__).parent.glob("*.py")} - {"__init__"}
    enums_and_root = {"MethodId", "Payload", "SimulationMode", "Envelope"}
    ours = {c.__name__ for c in (*m.TABLE_TYPES, *m.STRUCT_TYPES)}
    assert modules - enums_and_root == ours


@pytest.mark.parametrize(
    ("fields", "pattern"),
    [
        ([("services_enabled", m.U32), ("services_available", m.U32)], "no generated|slot"),
        ([("services_available", m.U64), ("services_enabled", m.U32)], "PrependUint64Slot in slot 0"),
        ([("services_available", m.U32)], "1 fields in messages.py"),
        (
            [("services_available", m.U32), ("services_enabled", tuple[float, ...])],
            "is a vector in messages.py but not in the schema",
        ),
    ],
)
def test_drift_between_dataclasses_and_schema_fails_at_import(fields: list, pattern: str) -> None:
    fake = dataclasses.make_dataclass(
        "GetServicesResp", [(n, t, dataclasses.field(default=() if t is tuple[float, ...] else 0)) for n, t in fields]
    )
    with pytest.raises(ImportError, match=pattern):
        E._build_table(fake, {}, set())
    wrong_struct = dataclasses.make_dataclass("Vec3", [(n, float, dataclasses.field(default=0.0)) for n in "zyx"])
    with pytest.raises(ImportError, match="fields"):
        E._build_struct(wrong_struct)


def test_service_and_response_tables() -> None:
    mm = m.MethodId
    assert m.SERVICE_OF_METHOD[mm.GetAgentSchemaReq] == m.Service.AGENT == 0
    assert m.SERVICE_OF_METHOD[mm.GetJointStateResp] == m.Service.MUJOCO == 1
    assert m.SERVICE_OF_METHOD[mm.TelemetryFrame] == m.Service.TELEMETRY == 3
    assert m.SERVICE_OF_METHOD[mm.SetSimulationModeReq] == m.Service.SCENE == 4
    assert m.SERVICE_OF_METHOD[mm.CameraImageFrame] == m.Service.CAMERA == 5
    assert m.SERVICE_OF_METHOD[mm.ViewportImageFrame] == m.Service.VIEWPORT == 6
    assert m.SERVICE_OF_METHOD[mm.DrawReq] == m.Service.DEBUG == 7
    assert m.SERVICE_OF_METHOD[mm.SetServiceEnabledReq] is None
    assert m.SERVICE_OF_METHOD[mm.Unset] is None
    assert set(m.SERVICE_OF_METHOD) == set(mm)
    assert m.TOOLS_METHODS == {mm.GetServicesReq, mm.GetServicesResp, mm.SetServiceEnabledReq, mm.SetServiceEnabledResp}
    assert m.PUSH_METHODS == {mm.TelemetryFrame, mm.CameraImageFrame, mm.ViewportImageFrame}
    for req, resp in m.RESPONSE_OF.items():
        assert resp == req + 1 and req & 1 and req.name.endswith("Req") and resp.name.endswith("Resp")
    requests = {x for x in mm if x.name.endswith("Req")}
    assert set(m.RESPONSE_OF) == requests
    assert set(mm) == {mm.Unset} | requests | set(m.RESPONSE_OF.values()) | m.PUSH_METHODS
    assert m.is_request(0x0101) and not m.is_request(0x0102) and not m.is_request(0x7777)
    assert m.method_name(0x0801) == "DrawReq" and m.method_name(0x7777) == "0x7777"


# ---------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "cls"), PAYLOADS, ids=[c.__name__ for _, c in PAYLOADS])
def test_round_trip_and_generated_reader_agree(method: m.MethodId, cls: type) -> None:
    @FAST
    @given(envelopes(cls, method))
    def check(env: Envelope) -> None:
        buf = encode(env)
        assert decode(buf) == env
        assert decode(memoryview(bytearray(buf))) == env
        assert gen_decode(buf) == env  # flatc's reader sees the same values
        assert peek_method(buf) == (method, env.correlation_id, env.error_message)
        assert peek(buf) == (method, env.correlation_id, env.error_message, env.sent_ns)

    check()


def test_default_payloads_round_trip_and_stay_small() -> None:
    for method, cls in PAYLOADS:
        env = Envelope(method, 1, cls())
        buf = encode(env)
        assert decode(buf) == env
        assert len(buf) <= 64, cls.__name__  # defaults are omitted


@FAST
@given(st.floats(allow_nan=False, min_value=-3.4e38, max_value=3.4e38), st.lists(st.floats(-1e30, 1e30), max_size=5))
def test_floats_come_back_rounded_to_float32(x: float, xs: list[float]) -> None:
    env = Envelope(m.MethodId.TelemetryFrame, 3, m.TelemetryFrame(values=(x, *xs)))
    got = decode(encode(env)).payload
    assert isinstance(got, m.TelemetryFrame)
    assert got.values == tuple(float(np.float32(v)) for v in (x, *xs))
    arrow = decode(encode(Envelope(m.MethodId.DrawReq, 0, m.DrawReq(arrows=(m.Arrow(scale=x),))))).payload
    assert arrow.arrows[0].scale == float(np.float32(x))


def test_infinities_and_nan_travel() -> None:
    env = Envelope(m.MethodId.TelemetryFrame, 1, m.TelemetryFrame(values=(math.inf, -math.inf, math.nan)))
    values = decode(encode(env)).payload.values
    assert values[:2] == (math.inf, -math.inf) and math.isnan(values[2])


def test_numpy_arrays_are_accepted_for_float_vectors() -> None:
    arr = np.linspace(-1, 1, 7, dtype=np.float32)
    env = Envelope(m.MethodId.SendControlReq, 9, m.SendControlReq(env_id=2, controls=arr))  # type: ignore[arg-type]
    got = decode(encode(env)).payload
    assert got.controls == tuple(float(v) for v in arr)


def test_large_legitimate_messages_decode() -> None:
    ents = tuple(
        m.EntityInfo(id=i + 1, name=f"entity-{i}", position=m.Vec3(i, 0, 1), rotation=m.Quat()) for i in range(3000)
    )
    env = Envelope(m.MethodId.ListEntitiesResp, 5, m.ListEntitiesResp(entities=ents, total=3000))
    assert decode(encode(env)) == env
    big = Envelope(m.MethodId.TelemetryFrame, 5, m.TelemetryFrame(values=tuple(float(i) for i in range(100_000))))
    assert decode(encode(big)) == big


def test_envelope_normalises_known_method_ints() -> None:
    assert Envelope(0x0801, 1).method is m.MethodId.DrawReq
    assert type(Envelope(0x7777, 1).method) is int
    assert Envelope(1, 1, None, "x").is_error and not Envelope(1, 1).is_error


# ---------------------------------------------------------------------------
# Oracle: buffers built by the official Builder through flatc's code
# ---------------------------------------------------------------------------


def finish_envelope(b: flatbuffers.Builder, method: int, corr: int, member: str | None, off: int | None) -> bytes:
    env = gen("Envelope")
    env.Start(b)
    if member is not None:
        env.AddPayload(b, off)
        env.AddPayloadType(b, getattr(gen("Payload").Payload, member))
    env.AddCorrelationId(b, corr)
    env.AddMethod(b, method)
    b.Finish(env.End(b))
    return bytes(b.Output())


def test_oracle_draw_req() -> None:
    b = flatbuffers.Builder(0)
    line_g, arrow_g, vc_g, draw_g = gen("Line"), gen("Arrow"), gen("VelocityCommand"), gen("DrawReq")
    vec3, color = gen("Vec3").CreateVec3, gen("Color").CreateColor
    lines = []
    for i in range(2):
        line_g.Start(b)
        line_g.AddColor(b, color(b, 1.0, 0.5, 0.25, 1.0))
        line_g.AddEnd(b, vec3(b, 4.0, 5.0, float(i)))
        line_g.AddStart(b, vec3(b, 1.0, 2.0, 3.0))
        lines.append(line_g.End(b))
    arrow_g.Start(b)
    arrow_g.AddScale(b, 2.5)
    arrow_g.AddOrigin(b, vec3(b, 0.0, 0.0, 1.0))
    arrow = arrow_g.End(b)
    vc_g.Start(b)
    vc_g.AddScale(b, 0.5)
    vc_g.AddAngVelZ(b, -0.75)
    vc_g.AddLinVelX(b, 1.25)
    vc = vc_g.End(b)
    draw_g.StartLinesVector(b, 2)
    for off in reversed(lines):
        b.PrependUOffsetTRelative(off)
    lines_vec = b.EndVector()
    draw_g.StartArrowsVector(b, 1)
    b.PrependUOffsetTRelative(arrow)
    arrows_vec = b.EndVector()
    draw_g.Start(b)
    draw_g.AddClearPrevious(b, True)
    draw_g.AddVelocityCommand(b, vc)
    draw_g.AddArrows(b, arrows_vec)
    draw_g.AddLines(b, lines_vec)
    buf = finish_envelope(b, 0x0801, 77, "DrawReq", draw_g.End(b))

    expected = m.DrawReq(
        lines=tuple(m.Line(m.Vec3(1, 2, 3), m.Vec3(4, 5, float(i)), m.Color(1.0, 0.5, 0.25, 1.0)) for i in range(2)),
        arrows=(m.Arrow(origin=m.Vec3(0, 0, 1), scale=2.5),),
        velocity_command=m.VelocityCommand(lin_vel_x=1.25, ang_vel_z=-0.75, scale=0.5),
        clear_previous=True,
    )
    got = decode(buf)
    assert got == Envelope(m.MethodId.DrawReq, 77, expected)
    assert decode(encode(got)) == got


def test_oracle_strings_vectors_and_forced_defaults() -> None:
    b = flatbuffers.Builder(0)
    b.ForceDefaults(True)  # a builder that writes every default must decode the same
    g = gen("GetAgentSchemaResp")
    names = [b.CreateString(s) for s in ("base_lin_vel", "joint_pos", "ünïcödé")]
    g.StartObservationNamesVector(b, 3)
    for off in reversed(names):
        b.PrependUOffsetTRelative(off)
    obs_names = b.EndVector()
    g.StartObservationSizesVector(b, 3)
    for v in reversed((3, 12, 0)):
        b.PrependUint32(v)
    obs_sizes = b.EndVector()
    low = b.CreateNumpyVector(np.array([-1.0, -0.5], dtype="<f4"))
    agent = b.CreateString("anymal")
    g.Start(b)
    g.AddActionLow(b, low)
    g.AddObservationSizes(b, obs_sizes)
    g.AddObservationNames(b, obs_names)
    g.AddControlDt(b, 0.02)
    g.AddNumEnvs(b, 4096)
    g.AddObservationSize(b, 15)
    g.AddActionSize(b, 0)
    g.AddAgentName(b, agent)
    buf = finish_envelope(b, 0x0102, 2**64 - 1, "GetAgentSchemaResp", g.End(b))
    got = decode(buf)
    assert got.method is m.MethodId.GetAgentSchemaResp and got.correlation_id == 2**64 - 1
    assert got.payload == m.GetAgentSchemaResp(
        agent_name="anymal",
        num_envs=4096,
        observation_size=15,
        observation_names=("base_lin_vel", "joint_pos", "ünïcödé"),
        observation_sizes=(3, 12, 0),
        action_low=(-1.0, -0.5),
        control_dt=float(np.float32(0.02)),
    )


def test_oracle_entities_enum_and_error_envelope() -> None:
    b = flatbuffers.Builder(0)
    ent = gen("EntityInfo")
    name = b.CreateString("robot/base")
    ent.Start(b)
    ent.AddParentId(b, 7)
    ent.AddRotation(b, gen("Quat").CreateQuat(b, 0.5, 0.5, 0.5, 0.5))
    ent.AddPosition(b, gen("Vec3").CreateVec3(b, 1.0, -2.0, 0.25))
    ent.AddName(b, name)
    ent.AddId(b, 2**63 + 5)
    e0 = ent.End(b)
    resp = gen("ListEntitiesResp")
    resp.StartEntitiesVector(b, 1)
    b.PrependUOffsetTRelative(e0)
    vec = b.EndVector()
    resp.Start(b)
    resp.AddTotal(b, 40)
    resp.AddEntities(b, vec)
    buf = finish_envelope(b, 0x0504, 12, "ListEntitiesResp", resp.End(b))
    expected = m.ListEntitiesResp(
        entities=(m.EntityInfo(2**63 + 5, "robot/base", m.Vec3(1, -2, 0.25), m.Quat(0.5, 0.5, 0.5, 0.5), None, 7),),
        total=40,
    )
    assert decode(buf) == Envelope(m.MethodId.ListEntitiesResp, 12, expected)

    b = flatbuffers.Builder(0)
    mode = gen("SetSimulationModeReq")
    mode.Start(b)
    mode.AddMode(b, gen("SimulationMode").SimulationMode.Fast)
    buf = finish_envelope(b, 0x050B, 3, "SetSimulationModeReq", mode.End(b))
    assert decode(buf).payload == m.SetSimulationModeReq(m.SimMode.FAST)

    b = flatbuffers.Builder(0)
    msg = b.CreateString("service Camera is disabled")
    env = gen("Envelope")
    env.Start(b)
    env.AddErrorMessage(b, msg)
    env.AddMethod(b, 0x0602)
    env.AddCorrelationId(b, 99)
    b.Finish(env.End(b))
    got = decode(bytes(b.Output()))
    assert got == Envelope(m.MethodId.ListCamerasResp, 99, None, "service Camera is disabled")
    assert got.is_error
    assert peek_method(bytes(b.Output())) == (m.MethodId.ListCamerasResp, 99, "service Camera is disabled")


def test_sent_ns_is_appended_last_and_optional() -> None:
    # An envelope from a producer built before sent_ns existed reads as "not stamped".
    old = _raw_envelope(m.MethodId.GetServicesReq, 0, with_table=False)
    assert decode(old).sent_ns == 0
    assert peek(old) == EnvelopeHead(m.MethodId.GetServicesReq, 5, "", 0)
    # Unstamped envelopes do not grow; a stamp costs one u64 slot and travels exactly.
    plain = encode(Envelope(m.MethodId.GetServicesReq, 5))
    stamped = encode(Envelope(m.MethodId.GetServicesReq, 5, sent_ns=2**64 - 1))
    assert len(plain) < len(stamped) <= len(plain) + 16
    assert decode(stamped).sent_ns == peek(stamped).sent_ns == 2**64 - 1
    # An older reader (the slot numbers it knows) still finds every other field.
    assert peek_method(stamped) == (m.MethodId.GetServicesReq, 5, "")


@pytest.mark.parametrize("bad", [-1, 2**64, 1.5, "1"])
def test_sent_ns_out_of_range_is_refused(bad: object) -> None:
    with pytest.raises(EnvelopeError, match="sent_ns"):
        encode(Envelope(m.MethodId.GetServicesReq, 5, sent_ns=bad))  # type: ignore[arg-type]


def test_sent_ns_field_outside_its_table_is_refused() -> None:
    b = flatbuffers.Builder(0)
    env = gen("Envelope")
    env.Start(b)
    env.AddMethod(b, m.MethodId.GetServicesReq)
    env.AddSentNs(b, 123)
    b.Finish(env.End(b))
    buf = bytearray(b.Output())
    assert peek(bytes(buf)).sent_ns == 123
    # Point the sent_ns vtable slot past the end of the table.
    (root,) = struct.unpack_from("<I", buf, 0)
    (soff,) = struct.unpack_from("<i", buf, root)
    vt = root - soff
    _vt_size, t_size = struct.unpack_from("<HH", buf, vt)
    struct.pack_into("<H", buf, vt + 4 + 2 * 5, t_size)
    with pytest.raises(EnvelopeError, match="sent_ns"):
        peek(bytes(buf))
    with pytest.raises(EnvelopeError, match="sent_ns"):
        decode(bytes(buf))


def test_unknown_trailing_fields_are_ignored() -> None:
    # A newer schema appended a field to GetServicesResp; this reader skips it.
    b = flatbuffers.Builder(0)
    b.StartObject(3)
    b.PrependUint32Slot(0, 0xFF, 0)
    b.PrependUint32Slot(1, 0x0F, 0)
    b.PrependFloat64Slot(2, 3.5, 0.0)
    buf = finish_envelope(b, 0xF002, 1, "GetServicesResp", b.EndObject())
    assert decode(buf).payload == m.GetServicesResp(services_available=0xFF, services_enabled=0x0F)


# ---------------------------------------------------------------------------
# Decode semantics for unexpected but well-formed envelopes
# ---------------------------------------------------------------------------


def _raw_envelope(method: int, ptype: int, with_table: bool = True) -> bytes:
    b = flatbuffers.Builder(0)
    table = None
    if with_table:
        b.StartObject(0)
        table = b.EndObject()
    env = gen("Envelope")
    env.Start(b)
    env.AddMethod(b, method)
    env.AddCorrelationId(b, 5)
    env.AddPayloadType(b, ptype)
    if table is not None:
        env.AddPayload(b, table)
    b.Finish(env.End(b))
    return bytes(b.Output())


def test_unknown_method_without_payload_keeps_the_raw_id() -> None:
    got = decode(encode(Envelope(0x0999, 8, None, "newer engine says no")))
    assert got.method == 0x0999 and type(got.method) is int and got.payload is None
    assert peek_method(encode(Envelope(0x0999, 8))) == (0x0999, 8, "")


def test_unknown_method_with_payload_is_refused() -> None:
    with pytest.raises(EnvelopeError, match="unknown method 0x0999"):
        decode(_raw_envelope(0x0999, 1))


def test_payload_must_match_the_method() -> None:
    draw = gen("Payload").Payload.DrawReq
    with pytest.raises(EnvelopeError, match="method GetJointStateReq carries DrawReq"):
        decode(_raw_envelope(0x0201, draw))
    assert decode(_raw_envelope(0x0801, draw)).payload == m.DrawReq()


def test_bad_union_type_and_missing_table() -> None:
    with pytest.raises(EnvelopeError, match="unknown payload type 200"):
        decode(_raw_envelope(0x0801, 200))
    with pytest.raises(EnvelopeError, match="no payload table"):
        decode(_raw_envelope(0x0801, gen("Payload").Payload.DrawReq, with_table=False))


def test_unknown_enum_value_is_refused() -> None:
    b = flatbuffers.Builder(0)
    g = gen("GetSimulationModeResp")
    g.Start(b)
    g.AddMode(b, 9)
    buf = finish_envelope(b, 0x050A, 1, "GetSimulationModeResp", g.End(b))
    with pytest.raises(EnvelopeError, match=r"payload\(GetSimulationModeResp\)\.mode: 9 is not a SimMode"):
        decode(buf)


# ---------------------------------------------------------------------------
# Hostile bytes
# ---------------------------------------------------------------------------


def _decode_or_error(buf: bytes) -> Envelope | None:
    try:
        return decode(buf)
    except EnvelopeError as exc:
        assert "unchecked read" not in str(exc)
        return None


def _peek_or_error(buf: bytes) -> None:
    try:
        peek_method(buf)
    except EnvelopeError as exc:
        assert "unchecked read" not in str(exc)


@pytest.mark.timeout(120)
@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_escape_envelope_error(buf: bytes) -> None:
    _decode_or_error(buf)
    _peek_or_error(buf)


@pytest.mark.timeout(120)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ANY_ENVELOPE, st.data())
def test_bit_flips_and_truncations(env: Envelope, data: st.DataObject) -> None:
    buf = bytearray(encode(env))
    cut = data.draw(st.integers(0, len(buf) - 1), label="truncate at")
    _decode_or_error(bytes(buf[:cut]))
    _peek_or_error(bytes(buf[:cut]))
    for _ in range(data.draw(st.integers(1, 4), label="flips")):
        bit = data.draw(st.integers(0, 8 * len(buf) - 1))
        buf[bit // 8] ^= 1 << (bit % 8)
    got = _decode_or_error(bytes(buf))
    _peek_or_error(bytes(buf))
    if got is not None:  # whatever survived is a well-formed envelope: it re-encodes
        encode(got)


@pytest.mark.timeout(120)
@settings(max_examples=300, deadline=None)
@given(ANY_ENVELOPE, st.data())
def test_overwritten_words(env: Envelope, data: st.DataObject) -> None:
    # Replace aligned 32-bit words with extreme values (offsets, lengths, counts).
    buf = bytearray(encode(env))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(buf) // 4 - 1)) * 4
        word = data.draw(st.sampled_from([0, 1, 3, 4, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFF, len(buf)]))
        struct.pack_into("<I", buf, at, word)
    _decode_or_error(bytes(buf))
    _peek_or_error(bytes(buf))


RICH = [
    Envelope(
        m.MethodId.GetAgentSchemaResp,
        0x0102030405060708,
        m.GetAgentSchemaResp("a", 2, 3, 1, ("o1", "o2"), (1, 2), ("act",), (1,), (-1.0,), (1.0,), 0.5),
        "err",
    ),
    Envelope(
        m.MethodId.DrawReq,
        9,
        m.DrawReq(
            (m.Line(m.Vec3(1, 2, 3), m.Vec3(), m.Color()), m.Line(end=m.Vec3(1, 1, 1))),
            (m.Arrow(m.Vec3(), m.Vec3(0, 0, 1), None, 2.0),),
            m.VelocityCommand(m.Vec3(1, 0, 0), 1.0, 2.0, 3.0, 4.0),
            True,
        ),
    ),
    Envelope(
        m.MethodId.ResetAgentReq,
        1,
        m.ResetAgentReq(
            "dog", (0, 5, 7), m.SimulationContract(3, 1000, True, m.FloatRange(0.5, 1.5), gravity=m.Vec3())
        ),
    ),
    Envelope(
        m.MethodId.ListEntitiesResp,
        2,
        m.ListEntitiesResp((m.EntityInfo(1, "x", m.Vec3(), m.Quat(), m.Vec3(1, 1, 1), 0), m.EntityInfo(2, "y")), 2),
    ),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env", RICH, ids=[e.method.name for e in RICH])
def test_every_bit_flip_and_extreme_word_of_rich_envelopes(env: Envelope) -> None:
    good = encode(env)
    assert decode(good) == env
    extremes = (0, 1, 2, 4, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFC, 0xFFFFFFFF, len(good), len(good) - 4)
    for at in range(len(good) - 3):  # every position, aligned or not
        for word in extremes:
            buf = bytearray(good)
            struct.pack_into("<I", buf, at, word)
            _decode_or_error(bytes(buf))
            _peek_or_error(bytes(buf))
    for bit in range(8 * len(good)):
        buf = bytearray(good)
        buf[bit // 8] ^= 1 << (bit % 8)
        _decode_or_error(bytes(buf))
    for cut in range(len(good)):
        _decode_or_error(good[:cut])
        _peek_or_error(good[:cut])


def test_specific_malformations_have_clear_messages() -> None:
    good = encode(Envelope(m.MethodId.GetAgentSchemaReq, 1, m.GetAgentSchemaReq(agent_name="abc")))
    cases = {
        b"": "too short",
        b"\x02\x00\x00\x00": "points into the root offset",
        b"\x00\x01\x00\x00" + bytes(8): "outside the 12-byte buffer",
        struct.pack("<Ii", 4, -100) + bytes(4): "vtable of the table at 4",
        struct.pack("<IHHi", 8, 3, 4, 4): "vtable at 4 has invalid size 3",
        struct.pack("<IHHi", 8, 4, 0, 4): "table at 8 claims 0 bytes",
        struct.pack("<IHHi", 8, 40, 4, 4): r"vtable at 4 \(40 bytes\) runs past",
        struct.pack("<IHHHi", 10, 6, 8, 7, 6) + bytes(4): r"method: field at \+7 \(2 bytes\) is outside",
    }
    for buf, msg in cases.items():
        with pytest.raises(EnvelopeError, match=msg):
            decode(buf)
    # corrupt the string length of agent_name to a huge value
    idx = good.index(b"abc") - 4
    bad = bytearray(good)
    struct.pack_into("<I", bad, idx, 0xFFFFFF)
    with pytest.raises(EnvelopeError, match=r"payload\(GetAgentSchemaReq\)\.agent_name: string at .* runs past"):
        decode(bytes(bad))
    bad = bytearray(good)
    bad[idx + 4] = 0xFF  # invalid UTF-8
    with pytest.raises(EnvelopeError, match="not valid UTF-8"):
        decode(bytes(bad))
    bad = bytearray(good)
    bad[idx + 7] = 0x41  # overwrite the NUL terminator
    with pytest.raises(EnvelopeError, match="not NUL-terminated"):
        decode(bytes(bad))
    assert issubclass(EnvelopeError, LuckyMonitorError)


def test_huge_vector_count_is_refused_without_allocating() -> None:
    env = Envelope(m.MethodId.TelemetryFrame, 1, m.TelemetryFrame(values=(1.0, 2.0)))
    buf = bytearray(encode(env))
    idx = buf.index(struct.pack("<ff", 1.0, 2.0)) - 4
    assert struct.unpack_from("<I", buf, idx)[0] == 2
    struct.pack_into("<I", buf, idx, 0xFFFFFFFF)
    with pytest.raises(EnvelopeError, match=r"values: vector at \d+ of 4294967295 x 4-byte elements runs past"):
        decode(bytes(buf))


@pytest.mark.timeout(60)
def test_shared_subobjects_cannot_amplify_work() -> None:
    # Legal FlatBuffers sharing, used hostilely: 20 000 vector entries all point
    # at one entity whose name is 4 KiB. Decoding naively would build 80 MB of
    # strings from an ~84 KB buffer; the work budget refuses it.
    b = flatbuffers.Builder(0)
    name = b.CreateString("x" * 4096)
    ent = gen("EntityInfo")
    ent.Start(b)
    ent.AddName(b, name)
    one = ent.End(b)
    resp = gen("ListEntitiesResp")
    resp.StartEntitiesVector(b, 20_000)
    for _ in range(20_000):
        b.PrependUOffsetTRelative(one)
    vec = b.EndVector()
    resp.Start(b)
    resp.AddEntities(b, vec)
    buf = finish_envelope(b, 0x0504, 1, "ListEntitiesResp", resp.End(b))
    with pytest.raises(EnvelopeError, match=r"entities\[\d+\]\.name: decoding needs more work"):
        decode(buf)
    # a little sharing (a reused short string) stays acceptable
    b = flatbuffers.Builder(0)
    name = b.CreateString("box")
    offs = []
    for _ in range(50):
        ent.Start(b)
        ent.AddName(b, name)
        ent.AddPosition(b, gen("Vec3").CreateVec3(b, 1.0, 2.0, 3.0))
        offs.append(ent.End(b))
    resp.StartEntitiesVector(b, len(offs))
    for off in reversed(offs):
        b.PrependUOffsetTRelative(off)
    vec = b.EndVector()
    resp.Start(b)
    resp.AddEntities(b, vec)
    got = decode(finish_envelope(b, 0x0504, 1, "ListEntitiesResp", resp.End(b)))
    assert got.payload.entities == (m.EntityInfo(name="box", position=m.Vec3(1, 2, 3)),) * 50


def test_depth_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = encode(Envelope(m.MethodId.DrawReq, 1, m.DrawReq(velocity_command=m.VelocityCommand(scale=1.0))))
    monkeypatch.setattr(E, "MAX_DEPTH", 1)
    with pytest.raises(EnvelopeError, match="nested deeper than 1"):
        decode(buf)


def test_decode_copies_its_input() -> None:
    buf = bytearray(encode(Envelope(m.MethodId.GetServicesResp, 4, m.GetServicesResp(3, 1))))
    view = memoryview(buf)
    got = decode(view)
    buf[:] = bytes(len(buf))
    assert got.payload == m.GetServicesResp(3, 1)
    with pytest.raises(TypeError):
        decode("not bytes")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Encoder validation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "pattern"),
    [
        (Envelope(0x10000, 1), r"method: 65536 is outside the ushort range"),
        (Envelope(-1, 1), r"method: -1 is outside"),
        (Envelope(m.MethodId.DrawReq, 2**64), r"correlation_id: 18446744073709551616 is outside the ulong"),
        (Envelope(m.MethodId.DrawReq, 1, m.DrawResp()), r"payload: method DrawReq carries DrawReq, got DrawResp"),
        (Envelope(0x0999, 1, m.DrawReq()), r"payload: method 0x0999 takes no payload"),
        (Envelope(m.MethodId.DrawReq, 1, None, 5), r"error_message: expected a str, got int"),  # type: ignore[arg-type]
        (Envelope(m.MethodId.DrawReq, 1, None, "\ud800"), r"error_message: not encodable as UTF-8"),
        (
            Envelope(m.MethodId.GetJointStateReq, 1, m.GetJointStateReq(env_id=-1)),
            r"payload\(GetJointStateReq\)\.env_id: -1 is outside the uint range",
        ),
        (
            Envelope(m.MethodId.GetJointStateReq, 1, m.GetJointStateReq(env_id=True)),
            r"env_id: expected an integer, got bool",
        ),
        (
            Envelope(m.MethodId.DrawReq, 1, m.DrawReq(lines=(m.Line(), m.Line(color=m.Color(r=1e39))))),
            r"payload\(DrawReq\)\.lines\[1\]\.color\.r: 1e\+39 is outside the float32 range",
        ),
        (
            Envelope(m.MethodId.DrawReq, 1, m.DrawReq(lines=(m.Arrow(),))),  # type: ignore[arg-type]
            r"lines\[0\]: expected Line, got Arrow",
        ),
        (
            Envelope(m.MethodId.DrawReq, 1, m.DrawReq(clear_previous=1)),  # type: ignore[arg-type]
            r"clear_previous: expected a bool, got int",
        ),
        (
            Envelope(m.MethodId.TelemetryFrame, 1, m.TelemetryFrame(values=(1.0, "2"))),  # type: ignore[arg-type]
            r"values\[1\]: expected a number, got str",
        ),
        (
            Envelope(m.MethodId.TelemetryFrame, 1, m.TelemetryFrame(values=(1.0, 4e38))),
            r"values: a value is outside the float32 range",
        ),
        (
            Envelope(m.MethodId.TelemetryFrame, 1, m.TelemetryFrame(values="abc")),  # type: ignore[arg-type]
            r"values: expected a sequence, got str",
        ),
        (
            Envelope(m.MethodId.ResetAgentReq, 1, m.ResetAgentReq(env_ids=(1, 2**32))),
            r"env_ids\[1\]: 4294967296 is outside the uint range",
        ),
        (
            Envelope(m.MethodId.GetTelemetrySchemaResp, 1, m.GetTelemetrySchemaResp(channel_names=("a", None))),  # type: ignore[arg-type]
            r"channel_names\[1\]: expected a str, got NoneType",
        ),
        (
            Envelope(m.MethodId.SetSimulationModeReq, 1, m.SetSimulationModeReq(mode=7)),  # type: ignore[arg-type]
            r"mode: 7 is not a SimMode value",
        ),
        (
            Envelope(m.MethodId.SetEntityReq, 1, m.SetEntityReq(position=(1, 2, 3))),  # type: ignore[arg-type]
            r"position: expected Vec3, got tuple",
        ),
    ],
)
def test_encode_refuses_bad_values_with_a_path(env: Envelope, pattern: str) -> None:
    with pytest.raises(EnvelopeError, match=pattern):
        encode(env)


def test_float32_boundary() -> None:
    fmax = float(np.finfo(np.float32).max)
    ok = Envelope(m.MethodId.DrawResp, 1)
    assert decode(encode(ok)) == ok
    for x in (fmax, -fmax, np.nextafter(E._F32_OVERFLOW, 0)):
        env = Envelope(m.MethodId.TelemetryFrame, 1, m.TelemetryFrame(values=(x,)))
        assert decode(encode(env)).payload.values == (float(np.float32(x)),)
        arrow = Envelope(m.MethodId.DrawReq, 1, m.DrawReq(arrows=(m.Arrow(scale=x),)))
        assert decode(encode(arrow)).payload.arrows[0].scale == float(np.float32(x))
    with pytest.raises(EnvelopeError):
        encode(Envelope(m.MethodId.DrawReq, 1, m.DrawReq(arrows=(m.Arrow(scale=E._F32_OVERFLOW),))))


# ---------------------------------------------------------------------------
# Responses
# ---------------------------------------------------------------------------


def test_response_helpers() -> None:
    req = Envelope(m.MethodId.GetServicesReq, 42, m.GetServicesReq())
    resp = response_to(req, m.GetServicesResp(0xFF, 0x7F))
    assert resp == Envelope(m.MethodId.GetServicesResp, 42, m.GetServicesResp(0xFF, 0x7F), "")
    assert decode(encode(resp)) == resp
    err = error_response(req, "tools busy")
    assert err == Envelope(m.MethodId.GetServicesResp, 42, None, "tools busy") and err.is_error
    assert decode(encode(err)) == err
    unknown = error_response(Envelope(0x0999, 3), "unknown method 0x0999")
    assert unknown.method == 0x0999 and unknown.correlation_id == 3
    with pytest.raises(EnvelopeError, match="GetServicesResp carries GetServicesResp, not DrawResp"):
        response_to(req, m.DrawResp())
    with pytest.raises(EnvelopeError, match="not a request"):
        response_to(Envelope(m.MethodId.TelemetryFrame, 1), None)
    with pytest.raises(EnvelopeError, match="non-empty"):
        error_response(req, "")
