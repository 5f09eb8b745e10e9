"""Command messages as plain Python values, mirroring ``schema/hazel_rpc.fbs``.

Theory of operation
-------------------
Every table and struct of the schema has a frozen dataclass here with the
same name and the same fields *in the same order* (the order is the
FlatBuffers slot order; :mod:`lucky_monitor.protocol.envelope` relies on it
and checks it against the generated code when it is imported). The rest of the program
builds and inspects messages only through these classes; the FlatBuffers
bytes are the envelope codec's business.

Field annotations carry the wire type: ``float`` is a float32, ``F64`` a
float64, ``U32``/``U64`` unsigned integers, ``bool`` a FlatBuffers bool,
``str`` a string, ``tuple[X, ...]`` a vector of ``X``, a struct or table class
an inline struct or a sub-table, ``X | None`` a struct or sub-table that may
be absent. Defaults are the schema defaults: 0, false, "", empty, absent.
Vectors are tuples so that messages stay hashable and immutable.

Floats travel as float32: a value that is not float32-representable comes
back rounded (``numpy.float32(x)``), and a finite value beyond the float32
range is refused by the encoder.

Method ids follow the schema's numbering: the high byte is the service group
(service bit + 1; ``0xF0`` for the always-on tools methods), odd low bytes are
requests, request + 1 is its response, low bytes from ``0x80`` are pushes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Annotated

from .enums import Service, SimMode

# ---------------------------------------------------------------------------
# Wire types (annotation metadata read by the envelope codec)
# ---------------------------------------------------------------------------

U8 = Annotated[int, "ubyte"]
U16 = Annotated[int, "ushort"]
U32 = Annotated[int, "uint"]
U64 = Annotated[int, "ulong"]
I32 = Annotated[int, "int"]
I64 = Annotated[int, "long"]
F64 = Annotated[float, "double"]


#: ``sim_mode`` on the wire: the schema's ``SimulationMode`` enum (``uint``),
#: which is :class:`~lucky_monitor.protocol.enums.SimMode`.
SimModeU32 = Annotated[SimMode, "uint"]


class MethodId(IntEnum):
    """What an envelope is; names and values are exactly the schema's."""

    Unset = 0

    GetAgentSchemaReq = 0x0101
    GetAgentSchemaResp = 0x0102
    ResetAgentReq = 0x0103
    ResetAgentResp = 0x0104

    GetJointStateReq = 0x0201
    GetJointStateResp = 0x0202
    SendControlReq = 0x0203
    SendControlResp = 0x0204
    GetMujocoInfoReq = 0x0205
    GetMujocoInfoResp = 0x0206

    GetTelemetrySchemaReq = 0x0401
    GetTelemetrySchemaResp = 0x0402
    StreamTelemetryReq = 0x0403
    StreamTelemetryResp = 0x0404
    TelemetryFrame = 0x0480

    GetSceneInfoReq = 0x0501
    GetSceneInfoResp = 0x0502
    ListEntitiesReq = 0x0503
    ListEntitiesResp = 0x0504
    GetEntityReq = 0x0505
    GetEntityResp = 0x0506
    SetEntityReq = 0x0507
    SetEntityResp = 0x0508
    GetSimulationModeReq = 0x0509
    GetSimulationModeResp = 0x050A
    SetSimulationModeReq = 0x050B
    SetSimulationModeResp = 0x050C

    ListCamerasReq = 0x0601
    ListCamerasResp = 0x0602
    StreamCameraReq = 0x0603
    StreamCameraResp = 0x0604
    CameraImageFrame = 0x0680

    GetViewportInfoReq = 0x0701
    GetViewportInfoResp = 0x0702
    StreamViewportReq = 0x0703
    StreamViewportResp = 0x0704
    ViewportImageFrame = 0x0780

    DrawReq = 0x0801
    DrawResp = 0x0802

    GetServicesReq = 0xF001
    GetServicesResp = 0xF002
    SetServiceEnabledReq = 0xF003
    SetServiceEnabledResp = 0xF004


# ---------------------------------------------------------------------------
# Structs (inline, fixed size; every field is a float32)
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Vec3:
    """A point or direction, metres."""

    x: float = 0.0
    y: float = 0.0
    z: float = 0.0


@dataclass(frozen=True, slots=True)
class Quat:
    """A unit quaternion, scalar first; the default is the identity."""

    w: float = 1.0
    x: float = 0.0
    y: float = 0.0
    z: float = 0.0


@dataclass(frozen=True, slots=True)
class Color:
    """A linear RGBA colour, channels 0..1."""

    r: float = 0.0
    g: float = 0.0
    b: float = 0.0
    a: float = 1.0


@dataclass(frozen=True, slots=True)
class FloatRange:
    """A closed interval sampled uniformly; ``min == max`` is a fixed value."""

    min: float = 0.0
    max: float = 0.0


# ---------------------------------------------------------------------------
# Agent service
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetAgentSchemaReq:
    """Ask for an agent's observation/action layout (``""`` = default agent)."""

    agent_name: str = ""


@dataclass(frozen=True, slots=True)
class GetAgentSchemaResp:
    """Layout of one agent's vectors; block sizes add up to the vector sizes."""

    agent_name: str = ""
    num_envs: U32 = 0
    observation_size: U32 = 0
    action_size: U32 = 0
    observation_names: tuple[str, ...] = ()
    observation_sizes: tuple[U32, ...] = ()
    action_names: tuple[str, ...] = ()
    action_sizes: tuple[U32, ...] = ()
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    control_dt: float = 0.0


@dataclass(frozen=True, slots=True)
class SimulationContract:
    """Domain randomisation and episode settings; absent ranges keep the current setting."""

    seed: U64 = 0
    episode_length: U32 = 0
    randomize: bool = False
    friction_scale: FloatRange | None = None
    mass_scale: FloatRange | None = None
    motor_strength_scale: FloatRange | None = None
    joint_position_noise: FloatRange | None = None
    push_interval: FloatRange | None = None
    push_velocity: FloatRange | None = None
    observation_noise_scale: float = 0.0
    action_noise_scale: float = 0.0
    gravity: Vec3 | None = None


@dataclass(frozen=True, slots=True)
class ResetAgentReq:
    """Reset ``env_ids`` (empty = all), optionally under a new contract."""

    agent_name: str = ""
    env_ids: tuple[U32, ...] = ()
    contract: SimulationContract | None = None


@dataclass(frozen=True, slots=True)
class ResetAgentResp:
    """Outcome of a reset and the seed now in force."""

    success: bool = False
    seed: U64 = 0


# ---------------------------------------------------------------------------
# MuJoCo service
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetJointStateReq:
    """Ask for qpos/qvel of one environment."""

    env_id: U32 = 0


@dataclass(frozen=True, slots=True)
class GetJointStateResp:
    """qpos (``positions``) and qvel (``velocities``) of one environment."""

    env_id: U32 = 0
    frame_seq: U64 = 0
    positions: tuple[float, ...] = ()
    velocities: tuple[float, ...] = ()
    sim_time: F64 = 0.0


@dataclass(frozen=True, slots=True)
class SendControlReq:
    """Write ctrl (nu floats) of one environment, applied at the next step."""

    env_id: U32 = 0
    controls: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class SendControlResp:
    """Whether the controls were accepted."""

    success: bool = False


@dataclass(frozen=True, slots=True)
class GetMujocoInfoReq:
    """Ask for the MuJoCo model's dimensions."""


@dataclass(frozen=True, slots=True)
class GetMujocoInfoResp:
    """Dimensions of the MuJoCo model."""

    model_name: str = ""
    nq: U32 = 0
    nv: U32 = 0
    nu: U32 = 0
    timestep: float = 0.0
    joint_names: tuple[str, ...] = ()
    actuator_names: tuple[str, ...] = ()


# ---------------------------------------------------------------------------
# Telemetry service
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetTelemetrySchemaReq:
    """Ask for the telemetry channel list."""


@dataclass(frozen=True, slots=True)
class GetTelemetrySchemaResp:
    """Channel names (and optional units) in TelemetryFrame value order."""

    channel_names: tuple[str, ...] = ()
    channel_units: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamTelemetryReq:
    """Start/replace (``stop=False``) or stop the telemetry stream."""

    env_id: U32 = 0
    decimation: U32 = 0
    stop: bool = False


@dataclass(frozen=True, slots=True)
class StreamTelemetryResp:
    """Whether a stream now runs, and its values per frame."""

    streaming: bool = False
    num_channels: U32 = 0


@dataclass(frozen=True, slots=True)
class TelemetryFrame:
    """One pushed telemetry sample; ``values`` in schema channel order."""

    frame_seq: U64 = 0
    env_id: U32 = 0
    values: tuple[float, ...] = ()


# ---------------------------------------------------------------------------
# Scene service
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetSceneInfoReq:
    """Ask for scene facts."""


@dataclass(frozen=True, slots=True)
class GetSceneInfoResp:
    """Scene name, size, timestep, clock and simulation mode."""

    scene_name: str = ""
    entity_count: U32 = 0
    timestep: float = 0.0
    sim_time: F64 = 0.0
    mode: SimModeU32 = SimMode.REALTIME


@dataclass(frozen=True, slots=True)
class EntityInfo:
    """One scene entity and its world transform (``parent_id`` 0 = root)."""

    id: U64 = 0
    name: str = ""
    position: Vec3 | None = None
    rotation: Quat | None = None
    scale: Vec3 | None = None
    parent_id: U64 = 0


@dataclass(frozen=True, slots=True)
class ListEntitiesReq:
    """List entities whose name contains ``name_filter``, paged."""

    name_filter: str = ""
    offset: U32 = 0
    limit: U32 = 0


@dataclass(frozen=True, slots=True)
class ListEntitiesResp:
    """One page of entities and the total number matching."""

    entities: tuple[EntityInfo, ...] = ()
    total: U32 = 0


@dataclass(frozen=True, slots=True)
class GetEntityReq:
    """Look an entity up by ``id``, or by exact ``name`` when ``id`` is 0."""

    id: U64 = 0
    name: str = ""


@dataclass(frozen=True, slots=True)
class GetEntityResp:
    """The entity found."""

    entity: EntityInfo | None = None


@dataclass(frozen=True, slots=True)
class SetEntityReq:
    """Move an entity; ``None`` position/rotation/scale are left unchanged."""

    id: U64 = 0
    name: str = ""
    position: Vec3 | None = None
    rotation: Quat | None = None
    scale: Vec3 | None = None


@dataclass(frozen=True, slots=True)
class SetEntityResp:
    """The entity after the change."""

    entity: EntityInfo | None = None


@dataclass(frozen=True, slots=True)
class GetSimulationModeReq:
    """Ask for the simulation mode."""


@dataclass(frozen=True, slots=True)
class GetSimulationModeResp:
    """The simulation mode in force."""

    mode: SimModeU32 = SimMode.REALTIME


@dataclass(frozen=True, slots=True)
class SetSimulationModeReq:
    """Switch the simulation mode."""

    mode: SimModeU32 = SimMode.REALTIME


@dataclass(frozen=True, slots=True)
class SetSimulationModeResp:
    """The simulation mode now in force."""

    mode: SimModeU32 = SimMode.REALTIME


# ---------------------------------------------------------------------------
# Camera service
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListCamerasReq:
    """Ask for the cameras of the scene."""


@dataclass(frozen=True, slots=True)
class CameraInfo:
    """One camera: name, resolution, vertical field of view (degrees)."""

    name: str = ""
    width: U32 = 0
    height: U32 = 0
    fov_y: float = 0.0


@dataclass(frozen=True, slots=True)
class ListCamerasResp:
    """The cameras of the scene."""

    cameras: tuple[CameraInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamCameraReq:
    """Start/replace (``stop=False``) or stop streaming one camera."""

    camera_name: str = ""
    fps: float = 0.0
    stop: bool = False


@dataclass(frozen=True, slots=True)
class StreamCameraResp:
    """Whether the camera now streams, and its image size."""

    streaming: bool = False
    width: U32 = 0
    height: U32 = 0


@dataclass(frozen=True, slots=True)
class CameraImageFrame:
    """Metadata of a camera image published in the image region."""

    camera_name: str = ""
    frame_seq: U64 = 0
    env_id: U32 = 0
    width: U32 = 0
    height: U32 = 0
    channels: U32 = 0


# ---------------------------------------------------------------------------
# Viewport service
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetViewportInfoReq:
    """Ask for the viewport's name and size."""


@dataclass(frozen=True, slots=True)
class GetViewportInfoResp:
    """The viewport's name and size."""

    name: str = ""
    width: U32 = 0
    height: U32 = 0


@dataclass(frozen=True, slots=True)
class StreamViewportReq:
    """Start/replace (``stop=False``) or stop the viewport stream."""

    fps: float = 0.0
    stop: bool = False


@dataclass(frozen=True, slots=True)
class StreamViewportResp:
    """Whether the viewport now streams, and its image size."""

    streaming: bool = False
    width: U32 = 0
    height: U32 = 0


@dataclass(frozen=True, slots=True)
class ViewportImageFrame:
    """Metadata of a viewport image published in the image region."""

    frame_seq: U64 = 0
    width: U32 = 0
    height: U32 = 0
    channels: U32 = 0


# ---------------------------------------------------------------------------
# Debug service (mirrors debug.proto)
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Line:
    """A line segment from ``start`` to ``end``."""

    start: Vec3 | None = None
    end: Vec3 | None = None
    color: Color | None = None


@dataclass(frozen=True, slots=True)
class Arrow:
    """An arrow at ``origin`` along ``direction``, length times ``scale``."""

    origin: Vec3 | None = None
    direction: Vec3 | None = None
    color: Color | None = None
    scale: float = 0.0


@dataclass(frozen=True, slots=True)
class VelocityCommand:
    """A commanded base velocity drawn at ``origin``."""

    origin: Vec3 | None = None
    lin_vel_x: float = 0.0
    lin_vel_y: float = 0.0
    ang_vel_z: float = 0.0
    scale: float = 0.0


@dataclass(frozen=True, slots=True)
class DrawReq:
    """Debug primitives to draw; ``clear_previous`` erases earlier ones first."""

    lines: tuple[Line, ...] = ()
    arrows: tuple[Arrow, ...] = ()
    velocity_command: VelocityCommand | None = None
    clear_previous: bool = False


@dataclass(frozen=True, slots=True)
class DrawResp:
    """Whether the primitives were accepted."""

    success: bool = False


# ---------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetServicesReq:
    """Ask for the services bitmasks."""


@dataclass(frozen=True, slots=True)
class GetServicesResp:
    """Services the engine has and services currently enabled (bitmasks)."""

    services_available: U32 = 0
    services_enabled: U32 = 0


@dataclass(frozen=True, slots=True)
class SetServiceEnabledReq:
    """Enable or disable the service with bit index ``service``."""

    service: U32 = 0
    enabled: bool = False


@dataclass(frozen=True, slots=True)
class SetServiceEnabledResp:
    """The ``services_enabled`` bitmask after the change."""

    services_enabled: U32 = 0


# ---------------------------------------------------------------------------
# Tables of the protocol
# ---------------------------------------------------------------------------

#: Struct classes (fixed-size, inline).
STRUCT_TYPES: tuple[type, ...] = (Vec3, Quat, Color, FloatRange)

#: Tables used only inside other tables (never an envelope payload).
NESTED_TABLE_TYPES: tuple[type, ...] = (SimulationContract, EntityInfo, CameraInfo, Line, Arrow, VelocityCommand)

#: MethodId -> payload dataclass (one per method; ``Unset`` has none).
PAYLOAD_OF: dict[MethodId, type] = {m: globals()[m.name] for m in MethodId if m is not MethodId.Unset}

#: Payload dataclass -> MethodId (the inverse of :data:`PAYLOAD_OF`).
METHOD_OF_PAYLOAD: dict[type, MethodId] = {cls: m for m, cls in PAYLOAD_OF.items()}

#: Every table class: payloads in MethodId order, then nested tables.
TABLE_TYPES: tuple[type, ...] = (*PAYLOAD_OF.values(), *NESTED_TABLE_TYPES)

_TOOLS_GROUP = 0xF0


def _service_bit(method: MethodId) -> int | None:
    group = method >> 8
    if 1 <= group <= len(Service):
        return group - 1
    return None


#: MethodId -> service bit index; ``None`` for methods no service bit gates
#: (the tools methods and ``Unset``).
SERVICE_OF_METHOD: dict[MethodId, int | None] = {m: _service_bit(m) for m in MethodId}

#: Request MethodId -> its response MethodId.
RESPONSE_OF: dict[MethodId, MethodId] = {
    m: MethodId[m.name[: -len("Req")] + "Resp"] for m in MethodId if m.name.endswith("Req")
}

#: Methods the engine pushes on its own (stream frames).
PUSH_METHODS: frozenset[MethodId] = frozenset(m for m in MethodId if m is not MethodId.Unset and (m & 0xFF) >= 0x80)

#: Tools-channel methods (always served, no service bit).
TOOLS_METHODS: frozenset[MethodId] = frozenset(m for m in MethodId if (m >> 8) == _TOOLS_GROUP)


_REQUEST_VALUES = frozenset(int(m) for m in RESPONSE_OF)


def is_request(method: int) -> bool:
    """Return True when ``method`` is a known request id.

    Parameters
    ----------
    method : int
        A method id, known or not.

    Returns
    -------
    bool
    """
    return method in _REQUEST_VALUES


def method_name(method: int) -> str:
    """Return the schema name of ``method``, or ``"0x1234"`` for an unknown id.

    Parameters
    ----------
    method : int
        A method id, known or not.

    Returns
    -------
    str
    """
    try:
        return MethodId(method).name
    except ValueError:
        return f"0x{method:04X}" if method >= 0 else str(method)
