"""Message values as their producers wrote them: decoded by the schema version each names.

A message's ``schema_version`` (MessageMetadata field 16, 8 bytes big-endian) names a
version of its topic's schema (:mod:`pulsarctl_py.schemas`). :class:`Values` decodes a
value with that version's definition and gives it as JSON (records as objects, bytes as
base64), by the schema type (pulsar-client ``SchemaType``; the encodings of
``org.apache.pulsar.client.impl.schema.*Schema`` of apache/pulsar 4.0.7):

* AVRO: Avro binary of the writer's schema, decoded by fastavro (logical types kept as
  their stored numbers and bytes, as Pulsar's generic records give them);
* JSON: JSON text (the definition is an Avro schema of its fields);
* PROTOBUF_NATIVE: protobuf binary of ``rootMessageTypeName`` in the definition's
  ``fileDescriptorSet``, read by the protobuf library (proto3 JSON mapping, field names
  as declared);
* PROTOBUF: protobuf binary; the definition is an Avro schema and the property
  ``__PARSING_INFO__`` gives the number and type of each top-level field, so nested
  messages stay bytes (their field numbers are stored nowhere) and enums numbers;
* KEY_VALUE: the key and value schemas from the definition (``KeyValue.encode``) and the
  ``key.schema.*``/``value.schema.*`` properties; INLINE: ``[len:i32 key][len:i32 value]``
  (-1 for null) in the payload, SEPARATED: the key in the message key (base64 in the
  metadata), the value in the payload; given as ``{"key": .., "value": ..}``;
* STRING: text in the ``__charset`` property's charset (UTF-8 by default);
* BOOLEAN (1 byte, not 0 is true), INT8, INT16, INT32, INT64, FLOAT, DOUBLE (big-endian);
  DATE, TIME, TIMESTAMP (int64 epoch ms, given as numbers); INSTANT (int64 seconds, int32
  nanos), LOCAL_DATE (int64 epoch day), LOCAL_TIME (int64 nano of day), LOCAL_DATE_TIME
  (int64 epoch day, int64 nano of day), given as ISO-8601 text as Java's ``toString``
  writes them;
* NONE, BYTES, AUTO: bytes, not decoded.

A value that does not decode raises :class:`ValueDecodeError` (a finding on the message
for the callers, never a crash); the raw bytes stay in the message. So does a value whose
decoded form would take more than its budget (:mod:`pulsarctl_py.value_bounds`: counted
before it is built). The libraries are imported when a decoder of their type is first
built.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import io
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pulsarctl_py import value_bounds
from pulsarctl_py.decoders import limits
from pulsarctl_py.decoders.schemas import (
    SchemaType,
    StoredSchema,
    parse_version,
    split_key_value,
)
from pulsarctl_py.errors import LedgerctlError

#: schema types whose values stay bytes
RAW_TYPES = frozenset({SchemaType.NONE, SchemaType.BYTES, SchemaType.AUTO})

#: how an exceeded budget says it can be raised
BUDGET_HINT = "(raise the maximum message size with --max-message-size to decode it)"


class ValueDecodeError(Exception):
    """A value that does not decode with its schema: the reason, one line."""


class SchemaDefinitionError(Exception):
    """A schema version whose definition cannot be used to decode values."""


Decoder = Callable[[bytes, "bytes | None"], Any]


def cost_of(decoder: Any, data: bytes | None) -> int:
    """What the value ``decoder`` last decoded takes, estimated (its ``cost`` when it
    counts, else a few times its bytes)."""
    n = 0 if data is None else len(data)
    cost = getattr(decoder, "cost", None)
    return cost if cost is not None else 64 + 2 * n


def too_large(exc: value_bounds.ValueTooLarge) -> ValueDecodeError:
    return ValueDecodeError(f"not decoded: {exc} {BUDGET_HINT}")


# -- JSON for decoded values --------------------------------------------------------------


def _b64(data: bytes | bytearray | memoryview) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def jsonable(value: Any) -> Any:
    """A decoded value as JSON can hold it: bytes as base64, other odd types as text."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return (
            value if value == value and value not in (float("inf"), float("-inf")) else str(value)
        )
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _b64(value)
    return str(value)


def _finite(value: float) -> Any:
    """A float as JSON holds it: NaN and the infinities as text (as :func:`jsonable`)."""
    return value if value - value == 0.0 else str(value)


def _nullable(fix: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else fix(value)


def avro_json_fixer(
    schema: Any, named: dict[str, Any], building: frozenset[str] = frozenset()
) -> Callable[[Any], Any] | None:
    """What turns fastavro's value of this (parsed) Avro schema into JSON, touching only
    the parts that need it: bytes and fixed become base64, a NaN or infinite float text.
    None when fastavro's value is JSON as it is (no bytes, fixed or floating point
    anywhere in the schema). Records are fixed in place, field by field; a union whose
    branches need different fixes, and a recursive record, take the generic walk
    (:func:`jsonable`). ``named``: the parsed schema's named types (fastavro's
    ``__named_schemas``, full names)."""
    if isinstance(schema, str):
        if schema == "bytes":
            return _b64
        if schema in ("float", "double"):
            return _finite
        if schema in ("null", "boolean", "int", "long", "string"):
            return None
        if schema in building or schema not in named:
            return jsonable  # recursive (or unknown): walk what comes
        return avro_json_fixer(named[schema], named, building)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        fixes = [avro_json_fixer(b, named, building) for b in branches]
        if all(f is None for f in fixes):
            return None
        if len(branches) == 1 and fixes[0] is not jsonable:
            return _nullable(fixes[0])  # type: ignore[arg-type]
        return jsonable  # which branch a value took is not known from fastavro's value
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "record" or kind == "error":
        inner = building | {str(schema.get("name"))}
        fields = []
        for f in schema.get("fields", []):
            fix = avro_json_fixer(f["type"], named, inner)
            if fix is not None:
                fields.append((f["name"], fix))
        if not fields:
            return None

        def fix_record(value: Any) -> Any:
            for name, fix in fields:
                value[name] = fix(value[name])
            return value

        return fix_record
    if kind == "enum":
        return None
    if kind == "fixed":
        return _b64
    if kind == "array":
        item = avro_json_fixer(schema["items"], named, building)
        return None if item is None else (lambda value: [item(v) for v in value])
    if kind == "map":
        entry = avro_json_fixer(schema["values"], named, building)
        return None if entry is None else (lambda value: {k: entry(v) for k, v in value.items()})
    if kind is not None:  # {"type": "string"}, {"type": {...}}
        return avro_json_fixer(kind, named, building)
    return jsonable


# -- Avro ---------------------------------------------------------------------------------


def _strip_logical(schema: Any) -> Any:
    """The Avro schema without logical types: values come as stored (Pulsar's generic
    records do the same: a timestamp-millis is a long)."""
    if isinstance(schema, dict):
        return {k: _strip_logical(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_strip_logical(v) for v in schema]
    return schema


def avro_schema(definition: bytes) -> Any:
    """The parsed Avro schema of a definition (JSON), logical types stripped."""
    try:
        doc = json.loads(definition)
    except ValueError as exc:
        raise SchemaDefinitionError(f"the definition is not JSON: {exc}") from None
    from fastavro import parse_schema

    try:
        return parse_schema(_strip_logical(doc))
    except Exception as exc:  # fastavro raises several types for bad schemas
        raise SchemaDefinitionError(f"not an Avro schema: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def avro_shape(writer: Any) -> value_bounds.AvroShape:
    """The writer schema compiled for the budget walk (SchemaDefinitionError if it cannot)."""
    try:
        return value_bounds.AvroShape(writer)
    except value_bounds.ValueTooLarge as exc:
        raise SchemaDefinitionError(str(exc)) from None
    except RecursionError:
        raise SchemaDefinitionError("the schema is nested too deep") from None


def avro_budget(shape: value_bounds.AvroShape, data: bytes) -> int:
    """The cost of decoding ``data``: walked when it could exceed the budget (then
    ValueDecodeError past it), else the shape's bound."""
    budget = limits.max_value_cost()
    if not shape.needs_walk(len(data), budget):
        return shape.estimate(len(data))
    try:
        return shape.cost(data, budget)
    except value_bounds.ValueTooLarge as exc:
        raise too_large(exc) from None
    except RecursionError:
        raise ValueDecodeError("not Avro of its schema: nested too deep") from None


def _avro_decoder(definition: bytes, reader: Any = None) -> Decoder:
    from fastavro import schemaless_reader

    writer = avro_schema(definition)
    fix = avro_json_fixer(
        writer, writer.get("__named_schemas", {}) if isinstance(writer, dict) else {}
    )
    shape = avro_shape(writer)
    # avro_budget inlined for the common case (AvroShape.needs_walk and .estimate): a
    # value without arrays or maps is never walked, nor one too short to exceed the budget
    repeats, walk_always = shape.repeats, shape.repeats and shape.unbounded
    base, ratio = shape.root.cost, shape.ratio

    def decode(data: bytes, _key: bytes | None = None) -> Any:
        bound = base + len(data) * ratio
        if walk_always or (repeats and bound > limits.max_value_cost()):
            decode.cost = avro_budget(shape, data)  # type: ignore[attr-defined]
        else:
            decode.cost = int(bound)  # type: ignore[attr-defined]
        fo = io.BytesIO(data)
        try:
            value = schemaless_reader(fo, writer, reader)
        except Exception as exc:  # truncated or malformed binary: several types
            raise ValueDecodeError(f"not Avro of its schema: {_one_line(exc)}") from None
        if fo.tell() != len(data):
            raise ValueDecodeError(
                f"not Avro of its schema: {len(data) - fo.tell()} bytes follow the record"
            )
        return value if fix is None else fix(value)

    return decode


# -- JSON ---------------------------------------------------------------------------------


def _json_decoder(_definition: bytes) -> Decoder:
    import orjson

    def decode(data: bytes, _key: bytes | None = None) -> Any:
        # no counts to declare: at most JSON_GROWTH times its bytes, within the budget
        decode.cost = 64 + value_bounds.JSON_GROWTH * len(data)  # type: ignore[attr-defined]
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ValueDecodeError(f"not JSON: {_one_line(exc)}") from None

    return decode


# -- protobuf -----------------------------------------------------------------------------


def _protobuf_native_decoder(definition: bytes) -> Decoder:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from google.protobuf.json_format import MessageToDict

    try:
        doc = json.loads(definition)
        fds_bytes = base64.b64decode(doc["fileDescriptorSet"], validate=True)
        root = doc["rootMessageTypeName"]
    except (ValueError, KeyError, TypeError) as exc:
        raise SchemaDefinitionError(
            f"not a PROTOBUF_NATIVE definition (fileDescriptorSet, rootMessageTypeName): {exc}"
        ) from None
    fds = descriptor_pb2.FileDescriptorSet()
    pool = descriptor_pool.DescriptorPool()
    try:
        fds.ParseFromString(fds_bytes)
        _add_files(pool, list(fds.file))
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(root))
    except Exception as exc:  # DecodeError, TypeError, KeyError from a bad descriptor set
        raise SchemaDefinitionError(
            f"the descriptor set cannot be used: {_one_line(exc)}"
        ) from None
    return _protobuf_reader(cls, MessageToDict)


def _add_files(pool: Any, files: list[Any]) -> None:
    """Add file descriptors in dependency order (a set need not list them so)."""
    pending = {f.name: f for f in files}
    added: set[str] = set()

    def add(name: str, depth: int = 0) -> None:
        if name in added or name not in pending or depth > 100:
            return
        for dep in pending[name].dependency:
            add(dep, depth + 1)
        pool.Add(pending[name])
        added.add(name)

    for name in list(pending):
        add(name)


def _protobuf_reader(cls: Any, to_dict: Any) -> Decoder:
    def decode(data: bytes, _key: bytes | None = None) -> Any:
        msg = cls()
        try:
            msg.ParseFromString(data)
        except Exception as exc:  # DecodeError, or a RuntimeError on deep recursion
            raise ValueDecodeError(f"not protobuf of its schema: {_one_line(exc)}") from None
        budget = limits.max_value_cost()
        cost = 64 + value_bounds.PROTOBUF_GROWTH * len(data)
        if cost > budget:  # counted before MessageToDict builds it
            try:
                cost = value_bounds.protobuf_cost(msg, budget)
            except value_bounds.ValueTooLarge as exc:
                raise too_large(exc) from None
        decode.cost = cost  # type: ignore[attr-defined]
        try:
            return to_dict(msg, preserving_proto_field_name=True)
        except Exception as exc:  # e.g. an enum number unknown to a closed enum
            raise ValueDecodeError(f"protobuf value not representable: {_one_line(exc)}") from None

    return decode


#: __PARSING_INFO__ field types -> FieldDescriptorProto types (nested messages as bytes)
_PB_TYPES = {
    "DOUBLE": 1,
    "FLOAT": 2,
    "INT64": 3,
    "UINT64": 4,
    "INT32": 5,
    "FIXED64": 6,
    "FIXED32": 7,
    "BOOL": 8,
    "STRING": 9,
    "GROUP": 12,
    "MESSAGE": 12,
    "BYTES": 12,
    "UINT32": 13,
    "ENUM": 5,
    "SFIXED32": 15,
    "SFIXED64": 16,
    "SINT32": 17,
    "SINT64": 18,
}


def _protobuf_decoder(definition: bytes, properties: dict[str, str]) -> Decoder:
    """PROTOBUF: a message of the top-level fields that ``__PARSING_INFO__`` lists
    (``ProtobufSchema.getParsingInfo``); without it the values cannot be read."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from google.protobuf.json_format import MessageToDict

    info = properties.get("__PARSING_INFO__")
    if not info:
        raise SchemaDefinitionError("a PROTOBUF schema without __PARSING_INFO__ lists no fields")
    try:
        fields = json.loads(info)
        file = descriptor_pb2.FileDescriptorProto(name="ledgerctl_protobuf.proto", package="x")
        file.syntax = "proto2"
        message = file.message_type.add(name="Value")
        for f in fields:
            kind = _PB_TYPES[str(f["type"]).upper()]
            label = 3 if str(f.get("label", "")).upper().endswith("REPEATED") else 1
            message.field.add(name=str(f["name"]), number=int(f["number"]), type=kind, label=label)
        pool = descriptor_pool.DescriptorPool()
        pool.Add(file)
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("x.Value"))
    except Exception as exc:  # ValueError, KeyError, TypeError from a bad list
        raise SchemaDefinitionError(f"__PARSING_INFO__ cannot be used: {_one_line(exc)}") from None
    return _protobuf_reader(cls, MessageToDict)


# -- primitives ---------------------------------------------------------------------------


def _fixed(fmt: str, what: str) -> Decoder:
    s = struct.Struct(fmt)

    def decode(data: bytes, _key: bytes | None = None) -> Any:
        if len(data) != s.size:
            raise ValueDecodeError(f"{what} takes {s.size} bytes, the value has {len(data)}")
        return jsonable(s.unpack(data)[0])

    return decode


def _boolean(data: bytes, _key: bytes | None = None) -> Any:
    if len(data) != 1:
        raise ValueDecodeError(f"BOOLEAN takes 1 byte, the value has {len(data)}")
    return data[0] != 0


_EPOCH = dt.date(1970, 1, 1)
_LONG = struct.Struct(">q")
_INSTANT = struct.Struct(">qi")
_TWO_LONGS = struct.Struct(">qq")
NANOS_PER_DAY = 86_400 * 10**9


def _fraction(nanos: int) -> str:
    """Java's ISO fraction: none, or 3, 6 or 9 digits."""
    if nanos == 0:
        return ""
    if nanos % 1_000_000 == 0:
        return f".{nanos // 1_000_000:03d}"
    if nanos % 1000 == 0:
        return f".{nanos // 1000:06d}"
    return f".{nanos:09d}"


def java_local_time(nano_of_day: int) -> str:
    """``LocalTime.toString``: HH:mm, HH:mm:ss, or with a 3, 6 or 9 digit fraction."""
    if not 0 <= nano_of_day < NANOS_PER_DAY:
        raise ValueDecodeError(f"nano of day {nano_of_day} is outside a day")
    seconds, nanos = divmod(nano_of_day, 10**9)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if s == 0 and nanos == 0:
        return f"{h:02d}:{m:02d}"
    return f"{h:02d}:{m:02d}:{s:02d}{_fraction(nanos)}"


def java_local_date(epoch_day: int) -> str:
    """``LocalDate.toString`` for the years Python's dates hold (1 to 9999)."""
    try:
        return (_EPOCH + dt.timedelta(days=epoch_day)).isoformat()
    except OverflowError:
        raise ValueDecodeError(f"epoch day {epoch_day} is outside years 1 to 9999") from None


def java_instant(seconds: int, nanos: int) -> str:
    """``Instant.toString`` (ISO-8601 UTC; seconds always, fraction by 3 digits)."""
    if not 0 <= nanos < 10**9:
        raise ValueDecodeError(f"nanos {nanos} of an INSTANT are outside 0 to 999999999")
    day, second_of_day = divmod(seconds, 86_400)
    date = java_local_date(day)
    h, rest = divmod(second_of_day, 3600)
    m, s = divmod(rest, 60)
    return f"{date}T{h:02d}:{m:02d}:{s:02d}{_fraction(nanos)}Z"


def _sized(s: struct.Struct, what: str, data: bytes) -> tuple[int, ...]:
    if len(data) != s.size:
        raise ValueDecodeError(f"{what} takes {s.size} bytes, the value has {len(data)}")
    return s.unpack(data)


def _instant(data: bytes, _key: bytes | None = None) -> Any:
    return java_instant(*_sized(_INSTANT, "INSTANT", data))


def _local_date(data: bytes, _key: bytes | None = None) -> Any:
    return java_local_date(_sized(_LONG, "LOCAL_DATE", data)[0])


def _local_time(data: bytes, _key: bytes | None = None) -> Any:
    return java_local_time(_sized(_LONG, "LOCAL_TIME", data)[0])


def _local_date_time(data: bytes, _key: bytes | None = None) -> Any:
    day, nanos = _sized(_TWO_LONGS, "LOCAL_DATE_TIME", data)
    time = java_local_time(nanos)
    return f"{java_local_date(day)}T{time}"


def _string_decoder(properties: dict[str, str]) -> Decoder:
    import codecs

    charset = properties.get("__charset") or "UTF-8"
    try:
        name = codecs.lookup(charset).name
    except LookupError:
        raise SchemaDefinitionError(f"unknown charset {charset!r}") from None

    def decode(data: bytes, _key: bytes | None = None) -> Any:
        try:
            return data.decode(name)
        except UnicodeDecodeError as exc:
            raise ValueDecodeError(
                f"not {charset} text: {exc.reason} at byte {exc.start}"
            ) from None

    return decode


_PRIMITIVES: dict[SchemaType, Decoder] = {
    SchemaType.BOOLEAN: _boolean,
    SchemaType.INT8: _fixed(">b", "INT8"),
    SchemaType.INT16: _fixed(">h", "INT16"),
    SchemaType.INT32: _fixed(">i", "INT32"),
    SchemaType.INT64: _fixed(">q", "INT64"),
    SchemaType.FLOAT: _fixed(">f", "FLOAT"),
    SchemaType.DOUBLE: _fixed(">d", "DOUBLE"),
    SchemaType.DATE: _fixed(">q", "DATE"),
    SchemaType.TIME: _fixed(">q", "TIME"),
    SchemaType.TIMESTAMP: _fixed(">q", "TIMESTAMP"),
    SchemaType.INSTANT: _instant,
    SchemaType.LOCAL_DATE: _local_date,
    SchemaType.LOCAL_TIME: _local_time,
    SchemaType.LOCAL_DATE_TIME: _local_date_time,
}


def _bytes_value(data: bytes, _key: bytes | None = None) -> Any:
    return _b64(data)


# -- KeyValue -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Part:
    """One side of a KeyValue schema (``KeyValueSchemaInfo.decodeSubSchemaInfo``)."""

    type: SchemaType
    definition: bytes
    properties: dict[str, str]


def key_value_parts(schema: StoredSchema) -> tuple[Part, Part, str]:
    """The key and value schemas of a KEY_VALUE version and its encoding."""
    try:
        key_def, value_def = split_key_value(schema.definition)
    except ValueError as exc:
        raise SchemaDefinitionError(f"not a KeyValue definition: {exc}") from None
    props = schema.properties
    parts = []
    for side, data in (("key", key_def), ("value", value_def)):
        name = props.get(f"{side}.schema.type") or "BYTES"
        kind = SchemaType.parse(name)
        if kind is None:
            raise SchemaDefinitionError(f"unknown {side} schema type {name!r}")
        raw = props.get(f"{side}.schema.properties")
        try:
            sub = json.loads(raw) if raw else {}
            if not isinstance(sub, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            raise SchemaDefinitionError(f"{side}.schema.properties: {exc}") from None
        parts.append(Part(kind, data or b"", {str(k): str(v) for k, v in sub.items()}))
    encoding = (props.get("kv.encoding.type") or "INLINE").upper()
    if encoding not in ("INLINE", "SEPARATED"):
        raise SchemaDefinitionError(f"unknown kv.encoding.type {encoding!r}")
    return parts[0], parts[1], encoding


def _key_value_decoder(schema: StoredSchema) -> Decoder:
    key_part, value_part, encoding = key_value_parts(schema)
    key_decode = build_part_decoder(key_part.type, key_part.definition, key_part.properties)
    value_decode = build_part_decoder(value_part.type, value_part.definition, value_part.properties)

    def side(decode: Decoder, data: bytes | None, what: str) -> Any:
        if data is None:
            return None
        try:
            return decode(data, None)
        except ValueDecodeError as exc:
            raise ValueDecodeError(f"the {what}: {exc}") from None

    def both(k: bytes | None, v: bytes | None) -> Any:
        out = {"key": side(key_decode, k, "key"), "value": side(value_decode, v, "value")}
        both.cost = cost_of(key_decode, k) + cost_of(value_decode, v)  # type: ignore[attr-defined]
        return out

    if encoding == "INLINE":

        def inline(data: bytes, _key: bytes | None = None) -> Any:
            try:
                k, v = split_key_value(data)
            except ValueError as exc:
                raise ValueDecodeError(f"not an INLINE KeyValue: {exc}") from None
            value = both(k, v)
            inline.cost = both.cost  # type: ignore[attr-defined]
            return value

        return inline

    def separated(data: bytes, key: bytes | None = None) -> Any:
        value = both(key, data)
        separated.cost = both.cost  # type: ignore[attr-defined]
        return value

    return separated


# -- building decoders --------------------------------------------------------------------


def build_part_decoder(kind: SchemaType, definition: bytes, properties: dict[str, str]) -> Decoder:
    """The decoder of one schema (a version, or one side of a KeyValue)."""
    if len(definition) > limits.max_frame():  # the entry that stores it is one frame
        raise SchemaDefinitionError(
            f"a definition of {len(definition)} bytes is larger than a schema entry can be "
            f"({limits.max_frame()} bytes) {BUDGET_HINT}"
        )
    if kind in RAW_TYPES or kind in (SchemaType.AUTO_CONSUME, SchemaType.AUTO_PUBLISH):
        return _bytes_value
    if kind is SchemaType.AVRO:
        return _avro_decoder(definition)
    if kind is SchemaType.JSON:
        return _json_decoder(definition)
    if kind is SchemaType.STRING:
        return _string_decoder(properties)
    if kind is SchemaType.PROTOBUF_NATIVE:
        return _protobuf_native_decoder(definition)
    if kind is SchemaType.PROTOBUF:
        return _protobuf_decoder(definition, properties)
    if kind is SchemaType.KEY_VALUE:
        raise SchemaDefinitionError("a KeyValue schema inside a KeyValue schema")
    return _PRIMITIVES[kind]


def build_decoder(schema: StoredSchema) -> Decoder | None:
    """The decoder of a version; None when its values stay bytes (NONE, BYTES, AUTO, or a
    deleted version). Raises SchemaDefinitionError when the definition cannot be used."""
    if schema.deleted or schema.type is None or schema.type in RAW_TYPES:
        return None
    if schema.type is SchemaType.KEY_VALUE:
        return _key_value_decoder(schema)
    return build_part_decoder(schema.type, schema.definition, schema.properties)


# -- per topic ----------------------------------------------------------------------------


@dataclass(slots=True)
class Decoded:
    """What became of one message's value."""

    schema_version: int | None
    schema_type: str | None
    value: Any = None
    decoded: bool = False
    #: why the value is not decoded, when it should have been (a finding)
    error: str | None = None
    #: why it is given as bytes, when that is no finding (no schema version...)
    note: str | None = None
    #: what the decoded value takes in memory, estimated (value_bounds)
    cost: int = 0


@dataclass(slots=True)
class Values:
    """Decode the values of one topic's messages with its schemas (picklable).

    ``any_version``: a schema that decodes every message whose version is not among
    ``schemas`` (or that names none): a schema given without a version (``decode
    --schema FILE`` of a SchemaInfo).
    """

    schemas: list[StoredSchema]
    latest: int | None = None
    any_version: StoredSchema | None = None
    _decoders: dict[int | None, tuple[Decoder | None, str | None]] = field(
        default_factory=dict, repr=False
    )
    #: the last schema_version seen and what it names (schema, decoder, why not)
    _last: tuple[Any, ...] | None = field(default=None, repr=False)
    #: what the values decoded since :meth:`take_held` take, estimated
    held: int = field(default=0, repr=False)

    def __getstate__(self) -> Any:
        return (self.schemas, self.latest, self.any_version)

    def __setstate__(self, state: Any) -> None:
        self.schemas, self.latest, self.any_version = state
        self._decoders = {}
        self._last = None
        self.held = 0

    def take_held(self) -> int:
        """The estimated memory of the values decoded since the last call (a writer that
        holds them counts it, as it counts the bytes it holds)."""
        held, self.held = self.held, 0
        return held

    def _decoded(self, version: int, kind: str, decoder: Decoder, value: Any, key: Any) -> Any:
        data = value if type(value) is bytes else bytes(value)
        got = decoder(data, key)
        cost = getattr(decoder, "cost", None)  # cost_of, inlined: it runs for every value
        if cost is None:
            cost = 64 + 2 * len(data)
        self.held += cost
        return Decoded(version, kind, got, True, None, None, cost)

    @classmethod
    def of(cls, topic_schemas: Any) -> Values:
        return cls(list(topic_schemas.versions), topic_schemas.latest)

    def schema(self, version: int) -> StoredSchema | None:
        for s in self.schemas:
            if s.version == version:
                return s
        return None

    def _decoder(self, version: int | None) -> tuple[Decoder | None, str | None]:
        """The decoder of a version (None: of ``any_version``), or why there is none."""
        found = self._decoders.get(version)
        if found is None:
            schema = self.any_version if version is None else self.schema(version)
            label = "the schema" if version is None else f"schema version {version}"
            if schema is None:
                found = (None, None)
            elif schema.problems and not schema.definition and schema.type is None:
                found = (
                    None,
                    "the schema version could not be read: " + "; ".join(schema.problems),
                )
            else:
                try:
                    found = (build_decoder(schema), None)
                except SchemaDefinitionError as exc:
                    found = (None, f"{label} cannot decode values: {exc}")
            self._decoders[version] = found
        return found

    def decode(
        self, schema_version: bytes | None, value: bytes | memoryview | None, key: bytes | None
    ) -> Decoded:
        """The value of a message with this ``schema_version`` (None: the field is absent)
        and, for SEPARATED KeyValues, this key's bytes."""
        last = self._last
        if last is not None and last[0] == schema_version and last[3] is not None:
            _, version, kind, decoder = last
            if value is None:
                return Decoded(version, kind, None, decoded=True)
            try:
                return self._decoded(version, kind, decoder, value, key)
            except ValueDecodeError:
                pass  # said below, the long way
        version = parse_version(schema_version) if schema_version else None
        schema = self.schema(version) if version is not None else None
        lookup: int | None = version
        if schema is None and self.any_version is not None:
            schema, lookup = self.any_version, None
        elif not schema_version:
            return Decoded(None, None, note="the message names no schema version: bytes")
        elif version is None:
            return Decoded(
                None,
                None,
                note=f"schema_version {bytes(schema_version).hex()} is no version number: bytes",
            )
        elif schema is None:
            return Decoded(
                version, None, note=f"schema version {version} is not in the schema storage: bytes"
            )
        decoder, why = self._decoder(lookup)
        kind = schema.type_name
        if why is not None:
            return Decoded(version, kind, error=why)
        if value is None:
            return Decoded(version, kind, None, decoded=decoder is not None)
        if decoder is None:
            note = "a deleted schema version: bytes" if schema.deleted else None
            return Decoded(version, kind, note=note)
        self._last = (
            None if schema_version is None else bytes(schema_version),
            version,
            kind,
            decoder,
        )
        named = "its schema" if lookup is None else f"schema version {version}"
        try:
            return self._decoded(version, kind, decoder, value, key)
        except ValueDecodeError as exc:
            return Decoded(version, kind, error=f"does not decode with {named} ({kind}): {exc}")
        except RecursionError:
            return Decoded(
                version, kind, error=f"does not decode with {named} ({kind}): nested too deep"
            )


def message_key_bytes(message: Any) -> bytes | None:
    """The key's bytes as a SEPARATED KeyValue stores them (``MessageImpl.getKeyBytes``)."""
    key = message.key
    if key is None:
        return None
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    if message.key_b64_encoded:
        try:
            return base64.b64decode(key)
        except ValueError:
            return key.encode("utf-8", "surrogateescape")
    return key.encode("utf-8", "surrogateescape")


# -- --where ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Where:
    """``PATH=VALUE`` (or ``!=``) on a decoded value: dot-separated field names."""

    path: tuple[str, ...]
    value: str
    negate: bool = False

    @classmethod
    def parse(cls, text: str) -> Where:
        negate = False
        if "!=" in text:
            path, _, value = text.partition("!=")
            negate = True
        else:
            path, sep, value = text.partition("=")
            if not sep:
                raise LedgerctlError(
                    f"--where {text!r}: give FIELD=VALUE or FIELD!=VALUE, for example order.id=42"
                )
        parts = tuple(p for p in path.strip().split("."))
        if not path.strip() or any(not p for p in parts):
            raise LedgerctlError(f"--where {text!r}: the field path is empty or has an empty part")
        return cls(parts, value.strip(), negate)

    def matches(self, decoded: Any) -> bool:
        found, value = _lookup(decoded, self.path)
        hit = found and _equal(value, self.value)
        return hit != self.negate


def _lookup(value: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    for name in path:
        if isinstance(value, dict) and name in value:
            value = value[name]
        elif isinstance(value, list) and name.isdigit() and int(name) < len(value):
            value = value[int(name)]
        else:
            return False, None
    return True, value


def _equal(actual: Any, text: str) -> bool:
    if isinstance(actual, bool):
        return text.lower() == ("true" if actual else "false")
    if actual is None:
        return text == "null"
    if isinstance(actual, (int, float)):
        try:
            return actual == (int(text) if isinstance(actual, int) else float(text))
        except ValueError:
            try:
                return float(actual) == float(text)
            except ValueError:
                return False
    if isinstance(actual, str):
        return actual == text
    try:
        return actual == json.loads(text)
    except ValueError:
        return False


# -- where the schemas come from ----------------------------------------------------------


def values_for(
    source: Any, topic: str | None, ledger_id: int | None = None, *, required: bool = False
) -> Values | None:
    """The schemas to decode a topic's values with (a ledger's: of the topic its metadata
    names); None when there are none and they were not ``required``."""
    from pulsarctl_py.schemas import read_topic_schemas

    if topic is None and ledger_id is not None and source.metadata is not None:
        view = source.ledger(ledger_id)
        md = view.metadata
        ml = md.pulsar().managed_ledger if md is not None else None
        if ml:
            from pulsarctl_py.stores.metadata import resolve_topic

            topic = resolve_topic(ml).full_name
    if topic is None or source.metadata is None:
        if required:
            raise LedgerctlError(
                "decoded values need the topic's schemas: give --topic, or a ledger of a "
                "topic, with a metadata store"
            )
        return None
    schemas = read_topic_schemas(source, topic, required=required)
    if schemas.absent:
        return None
    if schemas.problems and not schemas.versions:
        raise LedgerctlError(f"the schemas of {topic} cannot be read: {schemas.problems[0]}")
    return Values.of(schemas)
