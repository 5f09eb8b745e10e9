"""FlatBuffers envelope codec: :class:`Envelope` <-> bytes, with a verifier.

Theory of operation
-------------------
Every command-ring entry carries one FlatBuffer whose root table is
``hazel.rpc.Envelope`` (``schema/hazel_rpc.fbs``): a ``method`` id, the
``correlation_id`` a response echoes, a ``payload`` union holding the table
named like the method, an ``error_message`` (non-empty = error response) and
``sent_ns``, the producer's monotonic clock when it pushed the entry (the
``heartbeat_ns`` clock; 0 = not stamped).

Byte layout the reader relies on (all little-endian)::

    buf[0:4]      u32 root offset -> root table T
    T + 0         i32 soffset; the table's vtable is at T - soffset
    vtable + 0    u16 vtable size, u16 table (inline) size,
                  then one u16 per field slot: offset of the field inside T, 0 = absent
    offset field  u32, relative to its own position, forward only
    string        u32 length, bytes, NUL
    vector        u32 count, count elements (scalars/structs inline, tables/strings as offsets)

Writing. :func:`encode` builds with the official ``flatbuffers.Builder``
through the flatc-generated builder functions (this module is the only
importer of ``lucky_monitor._generated``). The dataclasses of
:mod:`~lucky_monitor.protocol.messages` declare the fields in slot order with
their wire types; at import this module calls every generated ``Add``,
``Start…Vector`` and ``Create…`` function on a recording stand-in for the
builder and compares the slot numbers, wire types and sizes the generated
code uses with those the dataclasses declare, so the hand-written reader
below cannot silently drift from the schema (it fails at import instead).
Values are checked before they reach the builder: wrong types, integers out
of range and finite floats beyond float32 raise :class:`EnvelopeError`.

Reading. The FlatBuffers Python runtime trusts its input (no verifier), so
:func:`decode` never calls the generated accessors: it copies the input once
(a live ring cannot change under it) and walks it with its own reader, which
checks every read before doing it:

* root offset, table and vtable positions inside the buffer; vtable size even
  and >= 4; table size >= 4; every present field inside its table;
* every offset non-zero and landing inside the buffer (offsets are unsigned
  and relative, so each hop moves forward: no cycles);
* vector ``count * element size`` and string ``length + NUL`` inside the
  buffer, strings NUL-terminated and valid UTF-8;
* the union type a known member that matches the method;
* nesting depth at most :data:`MAX_DEPTH`, and a work budget of
  ``WORK_PER_BYTE * len(buf) + WORK_SLACK`` units (one per byte of every
  table, vector and string visited): a crafted buffer whose offsets share one
  large sub-object many times is refused instead of decoding to something
  far larger than itself.

Any violation raises :class:`~lucky_monitor.protocol.errors.EnvelopeError`
naming the path (``payload(DrawReq).lines[3].color: ...``). Fields the
schema gained later (beyond the known vtable slots) are ignored.

Unknown methods. An envelope whose method id is not in
:class:`~lucky_monitor.protocol.messages.MethodId` decodes, with the raw
``int`` as ``method`` and ``payload=None``, only when its payload type is
NONE (an error response of a newer engine still shows). With a payload it is
an :class:`EnvelopeError`, as is any payload whose table does not match the
method. A known method may come without payload (error responses).
"""

from __future__ import annotations

import importlib
import inspect
import math
import operator
import struct
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass
from dataclasses import fields as dc_fields
from enum import IntEnum
from typing import Any, Final

import flatbuffers
import numpy as np

from . import messages
from .errors import EnvelopeError
from .messages import METHOD_OF_PAYLOAD, PAYLOAD_OF, RESPONSE_OF, MethodId, method_name

__all__ = [
    "MAX_DEPTH",
    "WORK_PER_BYTE",
    "WORK_SLACK",
    "Envelope",
    "EnvelopeHead",
    "decode",
    "encode",
    "error_response",
    "peek",
    "peek_method",
    "response_to",
]

#: Deepest table nesting accepted (the schema itself nests at most 3 deep).
MAX_DEPTH: Final = 8
#: Work units a buffer may cost per byte, plus a constant allowance.
WORK_PER_BYTE: Final = 2
WORK_SLACK: Final = 1024

_GENERATED = "lucky_monitor._generated.hazel.rpc"
# The smallest double that rounds to infinity as a float32.
_F32_OVERFLOW = float(2**128 - 2**103)

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")
_VT_HEAD = struct.Struct("<HH")


# ---------------------------------------------------------------------------
# Public value type
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Envelope:
    """One command-ring message.

    Parameters
    ----------
    method : MethodId or int
        What the envelope is. A known id is normalised to :class:`MethodId`;
        an unknown one stays an ``int``.
    correlation_id : int
        u64 chosen by the requester; responses and stream pushes echo it.
    payload : object or None
        The dataclass of :mod:`~lucky_monitor.protocol.messages` named like
        the method (``messages.PAYLOAD_OF[method]``), or ``None`` (error
        responses, unknown methods).
    error_message : str
        Non-empty marks an error response.
    sent_ns : int
        u64: the producer's monotonic clock in ns (the clock of the header's
        ``heartbeat_ns``) when it pushed the entry; 0 = not stamped. Two
        stamps from one host give an exact request -> response latency.
    """

    method: MethodId | int
    correlation_id: int
    payload: object | None = None
    error_message: str = ""
    sent_ns: int = 0

    def __post_init__(self) -> None:
        method = self.method
        if type(method) is int and method in _KNOWN_METHODS:
            object.__setattr__(self, "method", MethodId(method))

    @property
    def is_error(self) -> bool:
        """True when this is an error response (non-empty ``error_message``)."""
        return bool(self.error_message)


_KNOWN_METHODS = frozenset(int(m) for m in MethodId)
_PAYLOAD_BY_VALUE: dict[int, type] = {int(m): cls for m, cls in PAYLOAD_OF.items()}


# ---------------------------------------------------------------------------
# Errors with a path
# ---------------------------------------------------------------------------


class _Bad(Exception):
    """Internal: a violation, with the path collected while unwinding."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.where: list[str] = []

    def at(self, segment: str) -> _Bad:
        self.where.append(segment)
        return self

    def render(self) -> str:
        path = ""
        for seg in reversed(self.where):
            path += seg if seg.startswith("[") or not path else "." + seg
        return f"{path}: {self.message}" if path else self.message


# ---------------------------------------------------------------------------
# Schema description, derived from messages.py and checked against flatc's code
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Scalar:
    tag: str  # schema type name
    code: str  # struct format character
    size: int
    prepend: str  # Builder method the generated Add function must call
    lo: int | float
    hi: int | float
    dtype: str  # numpy dtype for vectors

    @property
    def one(self) -> struct.Struct:
        return _ONE[self.code]


_SCALARS: dict[str, _Scalar] = {
    s.tag: s
    for s in (
        _Scalar("bool", "B", 1, "PrependBoolSlot", 0, 1, "u1"),
        _Scalar("ubyte", "B", 1, "PrependUint8Slot", 0, 2**8 - 1, "u1"),
        _Scalar("ushort", "H", 2, "PrependUint16Slot", 0, 2**16 - 1, "<u2"),
        _Scalar("uint", "I", 4, "PrependUint32Slot", 0, 2**32 - 1, "<u4"),
        _Scalar("ulong", "Q", 8, "PrependUint64Slot", 0, 2**64 - 1, "<u8"),
        _Scalar("int", "i", 4, "PrependInt32Slot", -(2**31), 2**31 - 1, "<i4"),
        _Scalar("long", "q", 8, "PrependInt64Slot", -(2**63), 2**63 - 1, "<i8"),
        _Scalar("float", "f", 4, "PrependFloat32Slot", -math.inf, math.inf, "<f4"),
        _Scalar("double", "d", 8, "PrependFloat64Slot", -math.inf, math.inf, "<f8"),
    )
}

_ONE = {code: struct.Struct("<" + code) for code in "BHIQiqfd"}

# field kinds
_SCALAR, _STRUCT, _STRING, _TABLE, _VEC_SCALAR, _VEC_STRING, _VEC_STRUCT, _VEC_TABLE = range(8)
_VECTOR_KINDS = frozenset({_VEC_SCALAR, _VEC_STRING, _VEC_STRUCT, _VEC_TABLE})
_OFFSET_KINDS = frozenset({_STRING, _TABLE, *_VECTOR_KINDS})
_VECTOR_ELEM_SIZE_OFFSET = 4


@dataclass(frozen=True)
class _StructDesc:
    cls: type
    names: tuple[str, ...]
    layout: struct.Struct
    create: Callable[..., int]


@dataclass(frozen=True)
class _Field:
    name: str
    slot: int
    kind: int
    default: Any
    scalar: _Scalar | None = None
    enum: type[IntEnum] | None = None
    struct: _StructDesc | None = None
    table: type | None = None
    add: Callable[..., Any] | None = None
    start_vector: Callable[..., Any] | None = None


@dataclass(frozen=True)
class _TableDesc:
    cls: type
    fields: tuple[_Field, ...]
    start: Callable[..., Any]
    end: Callable[..., int]


class _Probe:
    """Stands in for ``flatbuffers.Builder``: records the calls made on it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Callable[..., int]:
        def record(*args: Any) -> int:
            self.calls.append((name, args))
            return 0

        return record


def _probe(fn: Callable[..., Any], *args: Any) -> list[tuple[str, tuple[Any, ...]]]:
    probe = _Probe()
    fn(probe, *args)
    return probe.calls


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _gen(name: str) -> types.ModuleType:
    return importlib.import_module(f"{_GENERATED}.{name}")


def _drift(msg: str) -> ImportError:
    return ImportError(
        f"lucky_monitor.protocol.messages disagrees with the generated FlatBuffers code: {msg} "
        "(fix messages.py or run scripts/gen_flatbuffers.py)"
    )


def _scalar_of(hint: Any) -> tuple[_Scalar, type[IntEnum] | None] | None:
    if typing.get_origin(hint) is typing.Annotated:
        base, tag = typing.get_args(hint)[:2]
        enum = base if isinstance(base, type) and issubclass(base, IntEnum) else None
        return _SCALARS[tag], enum
    if hint is bool:
        return _SCALARS["bool"], None
    if hint is float:
        return _SCALARS["float"], None
    return None


def _build_struct(cls: type) -> _StructDesc:
    names = tuple(f.name for f in dc_fields(cls))
    hints = typing.get_type_hints(cls, include_extras=True)
    if any(hints[n] is not float for n in names):
        raise _drift(f"struct {cls.__name__} may only hold float fields")
    create = getattr(_gen(cls.__name__), f"Create{cls.__name__}")
    params = tuple(inspect.signature(create).parameters)[1:]
    if params != names:
        raise _drift(f"struct {cls.__name__} has fields {names}, the schema {params}")
    calls = _probe(create, *([0.0] * len(names)))
    size = 4 * len(names)
    if calls[0] != ("Prep", (4, size)) or [c[0] for c in calls[1:]] != ["PrependFloat32"] * len(names) + ["Offset"]:
        raise _drift(f"struct {cls.__name__} is not {len(names)} float32 fields")
    return _StructDesc(cls, names, struct.Struct(f"<{len(names)}f"), create)


def _build_table(cls: type, structs: dict[type, _StructDesc], tables: set[type]) -> _TableDesc:
    name = cls.__name__
    mod = _gen(name)
    hints = typing.get_type_hints(cls, include_extras=True)
    out: list[_Field] = []
    for slot, f in enumerate(dc_fields(cls)):
        hint = hints[f.name]
        if f.default is MISSING:
            raise _drift(f"{name}.{f.name} needs a default (the schema's)")
        default = f.default
        camel = _camel(f.name)
        try:
            add = getattr(mod, f"Add{camel}")
        except AttributeError:
            raise _drift(f"{name}.{f.name} has no generated Add{camel}") from None
        start_vector = getattr(mod, f"Start{camel}Vector", None)
        sc = _scalar_of(hint)
        origin = typing.get_origin(hint)
        if sc is not None:
            fld = _Field(f.name, slot, _SCALAR, default, scalar=sc[0], enum=sc[1], add=add)
        elif hint is str:
            fld = _Field(f.name, slot, _STRING, default, add=add)
        elif origin is tuple:
            elem, ellipsis = typing.get_args(hint)
            if ellipsis is not Ellipsis:
                raise _drift(f"{name}.{f.name}: vectors are tuple[X, ...]")
            esc = _scalar_of(elem)
            if esc is not None:
                fld = _Field(f.name, slot, _VEC_SCALAR, default, scalar=esc[0], add=add, start_vector=start_vector)
            elif elem is str:
                fld = _Field(f.name, slot, _VEC_STRING, default, add=add, start_vector=start_vector)
            elif elem in structs:
                sd = structs[elem]
                fld = _Field(f.name, slot, _VEC_STRUCT, default, struct=sd, add=add, start_vector=start_vector)
            elif elem in tables:
                fld = _Field(f.name, slot, _VEC_TABLE, default, table=elem, add=add, start_vector=start_vector)
            else:
                raise _drift(f"{name}.{f.name}: unsupported vector element {elem!r}")
        elif origin in (types.UnionType, typing.Union):
            inner = [a for a in typing.get_args(hint) if a is not type(None)]
            if len(inner) != 1:
                raise _drift(f"{name}.{f.name}: optional fields are `X | None = None`")
            if inner[0] in structs:
                fld = _Field(f.name, slot, _STRUCT, None, struct=structs[inner[0]], add=add)
            elif inner[0] in tables:
                fld = _Field(f.name, slot, _TABLE, None, table=inner[0], add=add)
            else:
                raise _drift(f"{name}.{f.name}: unsupported type {hint!r}")
        else:
            raise _drift(f"{name}.{f.name}: unsupported type {hint!r}")
        if fld.kind in _VECTOR_KINDS and start_vector is None:
            raise _drift(f"{name}.{f.name} is a vector in messages.py but not in the schema")
        if not _is_schema_default(fld):
            raise _drift(f"{name}.{f.name} defaults to {default!r}; the schema default is 0, false, '', () or None")
        _check_field(name, fld)
        out.append(fld)
    start = mod.Start
    n_slots = _probe(start)
    if n_slots != [("StartObject", (len(out),))]:
        raise _drift(f"{name} has {len(out)} fields in messages.py, the schema says {n_slots}")
    return _TableDesc(cls, tuple(out), start, mod.End)


def _is_schema_default(fld: _Field) -> bool:
    d: object = fld.default
    if fld.kind == _SCALAR:
        return d == 0 and (type(d) in (bool, int, float) or fld.enum is not None)
    if fld.kind == _STRING:
        return d == ""
    if fld.kind in _VECTOR_KINDS:
        return d == ()
    return d is None


def _check_field(table: str, fld: _Field) -> None:
    """Compare one declared field with what the generated Add function does."""
    assert fld.add is not None
    calls = _probe(fld.add, 0)
    if fld.kind == _SCALAR:
        assert fld.scalar is not None
        expected = fld.scalar.prepend
    elif fld.kind == _STRUCT:
        expected = "PrependStructSlot"
    else:
        expected = "PrependUOffsetTRelativeSlot"
    if len(calls) != 1 or calls[0][0] != expected or calls[0][1][0] != fld.slot:
        raise _drift(f"{table}.{fld.name}: declared {expected} in slot {fld.slot}, generated code does {calls}")
    if fld.kind in _VECTOR_KINDS:
        assert fld.start_vector is not None
        vcalls = _probe(fld.start_vector, 0)
        if fld.kind == _VEC_SCALAR:
            assert fld.scalar is not None
            size = fld.scalar.size
        elif fld.kind == _VEC_STRUCT:
            assert fld.struct is not None
            size = fld.struct.layout.size
        else:
            size = _VECTOR_ELEM_SIZE_OFFSET
        if not vcalls or vcalls[0][0] != "StartVector" or vcalls[0][1][0] != size:
            raise _drift(f"{table}.{fld.name}: declared {size}-byte elements, generated code does {vcalls}")


def _build_schema() -> tuple[dict[type, _TableDesc], dict[type, int], tuple[type | None, ...]]:
    structs = {cls: _build_struct(cls) for cls in messages.STRUCT_TYPES}
    table_set = set(messages.TABLE_TYPES)
    tables = {cls: _build_table(cls, structs, table_set) for cls in messages.TABLE_TYPES}

    gen_methods = {k: v for k, v in vars(_gen("MethodId").MethodId).items() if not k.startswith("_")}
    ours = {m.name: int(m) for m in MethodId}
    if gen_methods != ours:
        diff = sorted(set(gen_methods.items()) ^ set(ours.items()))
        raise _drift(f"MethodId differs: {diff}")

    members = {k: v for k, v in vars(_gen("Payload").Payload).items() if not k.startswith("_") and k != "NONE"}
    names = {cls.__name__ for cls in PAYLOAD_OF.values()}
    if set(members) != names:
        raise _drift(f"Payload union members differ: {sorted(set(members) ^ names)}")
    union: list[type | None] = [None] * (max(members.values()) + 1)
    index: dict[type, int] = {}
    for cls in PAYLOAD_OF.values():
        union[members[cls.__name__]] = cls
        index[cls] = members[cls.__name__]

    env = _gen("Envelope")
    layout = [
        (env.AddMethod, "PrependUint16Slot", 0),
        (env.AddCorrelationId, "PrependUint64Slot", 1),
        (env.AddPayloadType, "PrependUint8Slot", 2),
        (env.AddPayload, "PrependUOffsetTRelativeSlot", 3),
        (env.AddErrorMessage, "PrependUOffsetTRelativeSlot", 4),
        (env.AddSentNs, "PrependUint64Slot", 5),
    ]
    for fn, prepend, slot in layout:
        calls = _probe(fn, 0)
        if len(calls) != 1 or calls[0][0] != prepend or calls[0][1][0] != slot:
            raise _drift(f"Envelope: {fn.__name__} does {calls}, expected {prepend} in slot {slot}")
    if _probe(env.Start) != [("StartObject", (6,))]:
        raise _drift("Envelope must have exactly 6 slots")
    return tables, index, tuple(union)


_TABLES, _UNION_INDEX, _UNION = _build_schema()
_ENV = _gen("Envelope")

_ENV_METHOD, _ENV_CORRELATION, _ENV_PAYLOAD_TYPE, _ENV_PAYLOAD, _ENV_ERROR, _ENV_SENT = range(6)


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------


def _int(value: Any, sc: _Scalar) -> int:
    if isinstance(value, bool | np.bool_):
        raise _Bad(f"expected an integer, got {type(value).__name__}")
    try:
        x = operator.index(value)
    except TypeError:
        raise _Bad(f"expected an integer, got {type(value).__name__}") from None
    if not sc.lo <= x <= sc.hi:
        raise _Bad(f"{x} is outside the {sc.tag} range {sc.lo}..{sc.hi}")
    return x


def _number(value: Any, sc: _Scalar) -> float:
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        raise _Bad(f"expected a number, got {type(value).__name__}")
    try:
        x = float(value)
    except OverflowError:
        raise _Bad(f"{value} is outside the {sc.tag} range") from None
    if sc.tag == "float" and abs(x) >= _F32_OVERFLOW and math.isfinite(x):
        raise _Bad(f"{x!r} is outside the float32 range")
    return x


def _scalar_value(value: Any, sc: _Scalar, enum: type[IntEnum] | None) -> Any:
    if sc.tag == "bool":
        if not isinstance(value, bool | np.bool_):
            raise _Bad(f"expected a bool, got {type(value).__name__}")
        return bool(value)
    if sc.tag in ("float", "double"):
        return _number(value, sc)
    x = _int(value, sc)
    if enum is not None and x not in enum._value2member_map_:
        raise _Bad(f"{x} is not a {enum.__name__} value")
    return x


def _utf8(value: Any) -> bytes:
    if not isinstance(value, str):
        raise _Bad(f"expected a str, got {type(value).__name__}")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _Bad(f"not encodable as UTF-8 ({exc.reason})") from None


def _sequence(value: Any) -> Sequence[Any] | np.ndarray:
    if isinstance(value, str | bytes | bytearray) or not isinstance(value, Sequence | np.ndarray):
        raise _Bad(f"expected a sequence, got {type(value).__name__}")
    return value


def _numeric_array(value: Any, sc: _Scalar) -> np.ndarray:
    seq = _sequence(value)
    if sc.tag in ("float", "double"):
        if isinstance(seq, np.ndarray):
            if seq.ndim != 1 or seq.dtype.kind not in "fiu":
                raise _Bad(f"expected a 1-D numeric array, got {seq.ndim}-D {seq.dtype}")
        elif not all(type(v) is float for v in seq):
            for i, v in enumerate(seq):
                if isinstance(v, bool | np.bool_) or not isinstance(v, int | float | np.integer | np.floating):
                    raise _Bad(f"expected a number, got {type(v).__name__}").at(f"[{i}]")
        try:
            arr = np.asarray(seq, dtype=np.float64)
        except OverflowError:
            raise _Bad(f"a value is outside the {sc.tag} range") from None
        if sc.tag == "double":
            return arr.astype("<f8")
        if (np.abs(arr[np.isfinite(arr)]) >= _F32_OVERFLOW).any():
            raise _Bad("a value is outside the float32 range")
        return arr.astype("<f4")
    if sc.tag == "bool":
        items = [_scalar_value(v, sc, None) for v in seq]
        return np.array(items, dtype=np.bool_)
    items = []
    for i, v in enumerate(seq):
        try:
            items.append(_int(v, sc))
        except _Bad as exc:
            raise exc.at(f"[{i}]") from None
    return np.array(items, dtype=sc.dtype)


def _encode_offsets(b: flatbuffers.Builder, fld: _Field, value: Any) -> int | None:
    """Build the out-of-line object of one field; None when it is absent."""
    kind = fld.kind
    if kind == _STRING:
        data = _utf8(value)
        return b.CreateString(data) if data else None
    if kind == _TABLE:
        if value is None:
            return None
        assert fld.table is not None
        return _encode_table(b, value, _TABLES[fld.table])
    if kind == _VEC_SCALAR:
        assert fld.scalar is not None
        arr = _numeric_array(value, fld.scalar)
        return b.CreateNumpyVector(arr) if arr.size else None
    seq = _sequence(value)
    if not len(seq):
        return None
    assert fld.start_vector is not None
    if kind == _VEC_STRUCT:
        assert fld.struct is not None
        rows = [_struct_values(item, fld.struct, i) for i, item in enumerate(seq)]
        fld.start_vector(b, len(rows))
        for row in reversed(rows):
            fld.struct.create(b, *row)
        return typing.cast(int, b.EndVector())
    offsets: list[int] = []
    for i, item in enumerate(seq):
        try:
            if kind == _VEC_STRING:
                offsets.append(b.CreateString(_utf8(item)))
            else:
                assert fld.table is not None
                offsets.append(_encode_table(b, item, _TABLES[fld.table]))
        except _Bad as exc:
            raise exc.at(f"[{i}]") from None
    fld.start_vector(b, len(offsets))
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return typing.cast(int, b.EndVector())


def _struct_values(value: Any, desc: _StructDesc, index: int | None = None) -> list[float]:
    try:
        if type(value) is not desc.cls:
            raise _Bad(f"expected {desc.cls.__name__}, got {type(value).__name__}")
        out = []
        for name in desc.names:
            try:
                out.append(_number(getattr(value, name), _SCALARS["float"]))
            except _Bad as exc:
                raise exc.at(name) from None
    except _Bad as exc:
        if index is not None:
            exc.at(f"[{index}]")
        raise
    return out


def _encode_table(b: flatbuffers.Builder, obj: Any, desc: _TableDesc) -> int:
    if type(obj) is not desc.cls:
        raise _Bad(f"expected {desc.cls.__name__}, got {type(obj).__name__}")
    values = [getattr(obj, fld.name) for fld in desc.fields]
    offsets: list[int | None] = [None] * len(values)
    for i, fld in enumerate(desc.fields):
        if fld.kind in _OFFSET_KINDS:
            try:
                offsets[i] = _encode_offsets(b, fld, values[i])
            except _Bad as exc:
                raise exc.at(fld.name) from None
    desc.start(b)
    for i, fld in enumerate(desc.fields):
        assert fld.add is not None
        try:
            if fld.kind == _SCALAR:
                assert fld.scalar is not None
                fld.add(b, _scalar_value(values[i], fld.scalar, fld.enum))
            elif fld.kind == _STRUCT:
                if values[i] is not None:
                    assert fld.struct is not None
                    fld.add(b, fld.struct.create(b, *_struct_values(values[i], fld.struct)))
            elif offsets[i] is not None:
                fld.add(b, offsets[i])
        except _Bad as exc:
            raise exc.at(fld.name) from None
    return desc.end(b)


def encode(env: Envelope) -> bytes:
    """Serialise an envelope to one FlatBuffer.

    Parameters
    ----------
    env : Envelope
        ``method`` must fit a u16, ``correlation_id`` and ``sent_ns`` a u64;
        ``payload`` must be ``None`` or an instance of
        ``messages.PAYLOAD_OF[method]``. ``sent_ns == 0`` is not written (the
        schema default), so an unstamped envelope keeps its old size.

    Returns
    -------
    bytes
        The FlatBuffer (no size prefix, no file identifier).

    Raises
    ------
    EnvelopeError
        A value does not fit the schema (wrong type, out of range, payload
        not matching the method); the message names the field.
    """
    if not isinstance(env, Envelope):
        raise TypeError(f"encode() takes an Envelope, not {type(env).__name__}")
    b = flatbuffers.Builder(256)
    try:
        try:
            method = _int(env.method, _SCALARS["ushort"])
        except _Bad as exc:
            raise exc.at("method") from None
        try:
            correlation = _int(env.correlation_id, _SCALARS["ulong"])
        except _Bad as exc:
            raise exc.at("correlation_id") from None
        try:
            sent = _int(env.sent_ns, _SCALARS["ulong"])
        except _Bad as exc:
            raise exc.at("sent_ns") from None
        payload = env.payload
        payload_off = None
        if payload is not None:
            expected = _PAYLOAD_BY_VALUE.get(method)
            if expected is None:
                raise _Bad(f"method {method_name(method)} takes no payload").at("payload")
            if type(payload) is not expected:
                raise _Bad(
                    f"method {method_name(method)} carries {expected.__name__}, got {type(payload).__name__}"
                ).at("payload")
            try:
                payload_off = _encode_table(b, payload, _TABLES[expected])
            except _Bad as exc:
                raise exc.at(f"payload({expected.__name__})") from None
        try:
            err = _utf8(env.error_message)
        except _Bad as exc:
            raise exc.at("error_message") from None
        err_off = b.CreateString(err) if err else None
        _ENV.Start(b)
        _ENV.AddMethod(b, method)
        _ENV.AddCorrelationId(b, correlation)
        if sent:
            _ENV.AddSentNs(b, sent)
        if payload_off is not None:
            _ENV.AddPayloadType(b, _UNION_INDEX[type(payload)])
            _ENV.AddPayload(b, payload_off)
        if err_off is not None:
            _ENV.AddErrorMessage(b, err_off)
        b.Finish(_ENV.End(b))
    except _Bad as exc:
        raise EnvelopeError(f"cannot encode envelope: {exc.render()}") from None
    return bytes(b.Output())


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------

_Tab = tuple[int, int, int, int]  # table pos, vtable pos, vtable size, table size


class _Reader:
    """Bounds-checked reads over one immutable buffer, with a work budget."""

    __slots__ = ("budget", "buf", "size")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.size = len(buf)
        self.budget = WORK_PER_BYTE * self.size + WORK_SLACK

    def spend(self, units: int) -> None:
        self.budget -= units
        if self.budget < 0:
            raise _Bad(
                f"decoding needs more work than a {self.size}-byte buffer allows (sub-objects shared or overlapping)"
            )

    def root(self) -> _Tab:
        if self.size < 4:
            raise _Bad(f"{self.size}-byte buffer is too short for a FlatBuffer")
        (off,) = _U32.unpack_from(self.buf, 0)
        if off < 4:
            raise _Bad(f"root offset {off} points into the root offset itself")
        return self.table(off, 0)

    def table(self, pos: int, depth: int) -> _Tab:
        if depth > MAX_DEPTH:
            raise _Bad(f"tables nested deeper than {MAX_DEPTH}")
        size = self.size
        if pos + 4 > size:
            raise _Bad(f"table at {pos} is outside the {size}-byte buffer")
        (soff,) = _I32.unpack_from(self.buf, pos)
        vt = pos - soff
        if vt < 0 or vt + 4 > size:
            raise _Bad(f"vtable of the table at {pos} would be at {vt}, outside the {size}-byte buffer")
        vt_size, t_size = _VT_HEAD.unpack_from(self.buf, vt)
        if vt_size < 4 or vt_size & 1:
            raise _Bad(f"vtable at {vt} has invalid size {vt_size}")
        if vt + vt_size > size:
            raise _Bad(f"vtable at {vt} ({vt_size} bytes) runs past the {size}-byte buffer")
        if t_size < 4 or pos + t_size > size:
            raise _Bad(f"table at {pos} claims {t_size} bytes; the buffer has {size}")
        self.spend(t_size)
        return pos, vt, vt_size, t_size

    def field(self, tab: _Tab, slot: int, width: int) -> int:
        """Absolute position of a field's inline bytes, or -1 when absent."""
        pos, vt, vt_size, t_size = tab
        entry = 4 + 2 * slot
        if entry + 2 > vt_size:
            return -1
        off: int
        (off,) = _U16.unpack_from(self.buf, vt + entry)
        if off == 0:
            return -1
        if off < 4 or off + width > t_size:
            raise _Bad(f"field at +{off} ({width} bytes) is outside its {t_size}-byte table")
        return pos + off

    def target(self, at: int) -> int:
        """Follow the u32 offset stored at ``at``."""
        rel: int
        (rel,) = _U32.unpack_from(self.buf, at)
        if rel == 0:
            raise _Bad(f"zero offset at {at}")
        dest = at + rel
        if dest + 4 > self.size:
            raise _Bad(f"offset at {at} points to {dest}, outside the {self.size}-byte buffer")
        return dest

    def string(self, pos: int) -> str:
        (length,) = _U32.unpack_from(self.buf, pos)
        end = pos + 4 + length
        if end + 1 > self.size:
            raise _Bad(f"string at {pos} of {length} bytes runs past the {self.size}-byte buffer")
        if self.buf[end] != 0:
            raise _Bad(f"string at {pos} is not NUL-terminated")
        self.spend(length + 5)
        try:
            return self.buf[pos + 4 : end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Bad(f"string at {pos} is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None

    def vector(self, pos: int, elem_size: int) -> tuple[int, int]:
        (count,) = _U32.unpack_from(self.buf, pos)
        start = pos + 4
        if count * elem_size > self.size - start:
            raise _Bad(f"vector at {pos} of {count} x {elem_size}-byte elements runs past the {self.size}-byte buffer")
        self.spend(4 + count * elem_size)
        return start, count


def _decode_field(r: _Reader, tab: _Tab, fld: _Field, depth: int) -> Any:
    kind = fld.kind
    if kind == _SCALAR:
        sc = fld.scalar
        assert sc is not None
        at = r.field(tab, fld.slot, sc.size)
        if at < 0:
            return fld.default
        (value,) = sc.one.unpack_from(r.buf, at)
        if sc.tag == "bool":
            return value != 0
        if fld.enum is not None:
            try:
                return fld.enum(value)
            except ValueError:
                raise _Bad(f"{value} is not a {fld.enum.__name__} value") from None
        return value
    if kind == _STRUCT:
        sd = fld.struct
        assert sd is not None
        at = r.field(tab, fld.slot, sd.layout.size)
        return None if at < 0 else sd.cls(*sd.layout.unpack_from(r.buf, at))
    at = r.field(tab, fld.slot, 4)
    if at < 0:
        return fld.default
    dest = r.target(at)
    if kind == _STRING:
        return r.string(dest)
    if kind == _TABLE:
        assert fld.table is not None
        return _decode_table(r, dest, _TABLES[fld.table], depth + 1)
    if kind == _VEC_SCALAR:
        sc = fld.scalar
        assert sc is not None
        start, count = r.vector(dest, sc.size)
        values = struct.unpack_from(f"<{count}{sc.code}", r.buf, start)
        return tuple(v != 0 for v in values) if sc.tag == "bool" else values
    if kind == _VEC_STRUCT:
        sd = fld.struct
        assert sd is not None
        start, count = r.vector(dest, sd.layout.size)
        n = sd.layout.size
        return tuple(sd.cls(*sd.layout.unpack_from(r.buf, start + i * n)) for i in range(count))
    start, count = r.vector(dest, 4)
    out = []
    for i in range(count):
        try:
            elem = r.target(start + 4 * i)
            if kind == _VEC_STRING:
                out.append(r.string(elem))
            else:
                assert fld.table is not None
                out.append(_decode_table(r, elem, _TABLES[fld.table], depth + 1))
        except _Bad as exc:
            raise exc.at(f"[{i}]") from None
    return tuple(out)


def _decode_table(r: _Reader, pos: int, desc: _TableDesc, depth: int) -> Any:
    tab = r.table(pos, depth)
    kwargs = {}
    for fld in desc.fields:
        try:
            kwargs[fld.name] = _decode_field(r, tab, fld, depth)
        except _Bad as exc:
            raise exc.at(fld.name) from None
    return desc.cls(**kwargs)


def _as_bytes(buf: bytes | bytearray | memoryview) -> bytes:
    if isinstance(buf, bytes):
        return buf
    if isinstance(buf, bytearray | memoryview):
        try:
            return bytes(buf)
        except (TypeError, ValueError, BufferError) as exc:
            raise EnvelopeError(f"cannot decode envelope: unreadable buffer ({exc})") from None
    raise TypeError(f"expected bytes, bytearray or memoryview, not {type(buf).__name__}")


def _header(r: _Reader) -> tuple[_Tab, int, int, str, int]:
    tab = r.root()
    where = "method"
    try:
        at = r.field(tab, _ENV_METHOD, 2)
        method = _U16.unpack_from(r.buf, at)[0] if at >= 0 else 0
        where = "correlation_id"
        at = r.field(tab, _ENV_CORRELATION, 8)
        correlation = _U64.unpack_from(r.buf, at)[0] if at >= 0 else 0
        where = "error_message"
        at = r.field(tab, _ENV_ERROR, 4)
        error = r.string(r.target(at)) if at >= 0 else ""
        where = "sent_ns"
        at = r.field(tab, _ENV_SENT, 8)
        sent = _U64.unpack_from(r.buf, at)[0] if at >= 0 else 0
    except _Bad as exc:
        raise exc.at(where) from None
    return tab, method, correlation, error, sent


def _known(method: int) -> MethodId | int:
    return MethodId(method) if method in _KNOWN_METHODS else method


def decode(buf: bytes | bytearray | memoryview) -> Envelope:
    """Verify and decode one FlatBuffer envelope.

    Parameters
    ----------
    buf : bytes, bytearray or memoryview
        The ring entry's payload. It is copied once before reading.

    Returns
    -------
    Envelope
        With ``method`` a :class:`MethodId` (or the raw ``int`` of an unknown
        method whose payload is NONE) and ``payload`` a messages dataclass or
        ``None``.

    Raises
    ------
    EnvelopeError
        The bytes are not a valid envelope of this schema; the message says
        where and why.
    """
    r = _Reader(_as_bytes(buf))
    try:
        tab, method, correlation, error, sent = _header(r)
        try:
            at = r.field(tab, _ENV_PAYLOAD_TYPE, 1)
        except _Bad as exc:
            raise exc.at("payload_type") from None
        ptype = r.buf[at] if at >= 0 else 0
        payload = None
        if ptype != 0:
            cls = _UNION[ptype] if ptype < len(_UNION) else None
            if cls is None:
                raise _Bad(f"unknown payload type {ptype}").at("payload")
            expected = _PAYLOAD_BY_VALUE.get(method)
            if expected is None:
                raise _Bad(f"unknown method {method_name(method)} with a {cls.__name__} payload").at("method")
            if expected is not cls:
                raise _Bad(f"method {method_name(method)} carries {cls.__name__}, expected {expected.__name__}").at(
                    "payload"
                )
            try:
                at = r.field(tab, _ENV_PAYLOAD, 4)
                if at < 0:
                    raise _Bad(f"payload type {cls.__name__} but no payload table")
                payload = _decode_table(r, r.target(at), _TABLES[cls], 1)
            except _Bad as exc:
                raise exc.at(f"payload({cls.__name__})") from None
    except _Bad as exc:
        raise EnvelopeError(f"cannot decode envelope: {exc.render()}") from None
    except struct.error as exc:  # a read the checks above should have refused
        raise EnvelopeError(f"cannot decode envelope: unchecked read ({exc})") from None
    return Envelope(_known(method), correlation, payload, error, sent)


class EnvelopeHead(typing.NamedTuple):
    """The envelope fields a traffic log needs, read without the payload.

    Attributes
    ----------
    method : MethodId or int
        A :class:`MethodId` when known, else the raw ``int``.
    correlation_id : int
        The u64 a response echoes.
    error_message : str
        Non-empty marks an error response.
    sent_ns : int
        The producer's monotonic push time in ns; 0 = not stamped.
    """

    method: MethodId | int
    correlation_id: int
    error_message: str
    sent_ns: int


def peek(buf: bytes | bytearray | memoryview) -> EnvelopeHead:
    """Read ``method``, ``correlation_id``, ``error_message`` and ``sent_ns`` only.

    Cheaper than :func:`decode` (the payload is neither verified nor built),
    still bounds-checked; for traffic logs.

    Parameters
    ----------
    buf : bytes, bytearray or memoryview
        The ring entry's payload.

    Returns
    -------
    EnvelopeHead
        The four fields; absent ones read as the schema default (0 or ``""``).

    Raises
    ------
    EnvelopeError
        The envelope table itself is malformed.
    """
    r = _Reader(_as_bytes(buf))
    try:
        _tab, method, correlation, error, sent = _header(r)
    except _Bad as exc:
        raise EnvelopeError(f"cannot decode envelope: {exc.render()}") from None
    except struct.error as exc:
        raise EnvelopeError(f"cannot decode envelope: unchecked read ({exc})") from None
    return EnvelopeHead(_known(method), correlation, error, sent)


def peek_method(buf: bytes | bytearray | memoryview) -> tuple[MethodId | int, int, str]:
    """Read only ``method``, ``correlation_id`` and ``error_message``.

    The first three fields of :func:`peek`, kept for callers that unpack
    three values.

    Parameters
    ----------
    buf : bytes, bytearray or memoryview
        The ring entry's payload.

    Returns
    -------
    tuple
        ``(method, correlation_id, error_message)``; ``method`` is a
        :class:`MethodId` when known, else the raw ``int``.

    Raises
    ------
    EnvelopeError
        The envelope table itself is malformed.
    """
    head = peek(buf)
    return head.method, head.correlation_id, head.error_message


# ---------------------------------------------------------------------------
# Responses
# ---------------------------------------------------------------------------


def response_to(req: Envelope, payload: object | None) -> Envelope:
    """Build the successful response to ``req``.

    Parameters
    ----------
    req : Envelope
        A request (its method is a key of ``messages.RESPONSE_OF``).
    payload : object or None
        The response dataclass (``messages.PAYLOAD_OF[RESPONSE_OF[req.method]]``).

    Returns
    -------
    Envelope
        Response method, the request's correlation id, ``payload``.

    Raises
    ------
    EnvelopeError
        ``req`` is not a request or ``payload`` is the wrong message.
    """
    resp = _response_method(req)
    if payload is not None and METHOD_OF_PAYLOAD.get(type(payload)) is not resp:
        raise EnvelopeError(f"{resp.name} carries {PAYLOAD_OF[resp].__name__}, not {type(payload).__name__}")
    return Envelope(resp, req.correlation_id, payload, "")


def error_response(req: Envelope, msg: str) -> Envelope:
    """Build an error response to ``req``.

    Parameters
    ----------
    req : Envelope
        The request being refused. For a request of an unknown method the
        response echoes that method id.
    msg : str
        Non-empty, human-readable reason.

    Returns
    -------
    Envelope
        Response method, the request's correlation id, no payload, ``msg``.

    Raises
    ------
    EnvelopeError
        ``msg`` is empty, or ``req`` is a known method that is not a request.
    """
    if not isinstance(msg, str) or not msg:
        raise EnvelopeError("an error response needs a non-empty message")
    method: MethodId | int = req.method
    if method in _KNOWN_METHODS:
        method = _response_method(req)
    return Envelope(method, req.correlation_id, None, msg)


def _response_method(req: Envelope) -> MethodId:
    try:
        return RESPONSE_OF[MethodId(req.method)]
    except (ValueError, KeyError):
        raise EnvelopeError(f"{method_name(int(req.method))} is not a request") from None
