"""Pulsar's schema storage: the index in the metadata store and the schema ledgers' entries.

Where a topic's schemas are (``BookkeeperSchemaStorage``, ``SchemaRegistryServiceImpl``
of apache/pulsar pulsar-broker, ``TopicName.getSchemaName``; docs/schemas.md):

    /schemas/<tenant>/<namespace>/<URL-encoded local name of the partitioned topic>
        = SchemaLocator {1 info: IndexEntry (the latest), 2 index: IndexEntry* (oldest first)}
    IndexEntry = {1 version: int64, 2 position: {1 ledgerId, 2 entryId}, 3 hash: SHA-256}
    schema ledger entry (BookKeeper digest of managedLedgerDigestType, password "")
        = SchemaEntry {2 schema_data: bytes, 5 index: IndexEntry* (the index before it)}
    schema_data = SchemaInfo {1 schema_id, 2 user, 3 type (client type + 1), 4 schema,
                              5 timestamp ms, 6 deleted, 7 props: {1 key, 2 value}*}

The topic's domain is not part of the path: persistent and non-persistent topics of the
same name share their schemas, and so do a partitioned topic's partitions. A message names
its schema by ``MessageMetadata.schema_version``: the version as 8 bytes big-endian
(``LongSchemaVersion``; ``versionFromBytes`` reads the first 8 bytes). A deleted schema
is a version of type NONE with ``deleted`` set and an empty definition.

Everything here is pure: bytes in, records out, problems named, nothing raised for bad
bytes but :class:`CorruptEntryError` from the parse functions.
"""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass, field
from typing import Any

from pulsarctl_py.proto import schema_storage_pb2 as sspb

from .errors import CorruptEntryError
from .protos import parse_proto

SCHEMA_ROOT = "/schemas"
VERSION = struct.Struct(">q")


class SchemaType(enum.IntEnum):
    """The client's schema types (pulsar-client-api ``SchemaType``), by their values.

    The schema storage keeps each as its value plus one (negative ones as NONE).
    """

    NONE = 0
    STRING = 1
    JSON = 2
    PROTOBUF = 3
    AVRO = 4
    BOOLEAN = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FLOAT = 10
    DOUBLE = 11
    DATE = 12
    TIME = 13
    TIMESTAMP = 14
    KEY_VALUE = 15
    INSTANT = 16
    LOCAL_DATE = 17
    LOCAL_TIME = 18
    LOCAL_DATE_TIME = 19
    PROTOBUF_NATIVE = 20
    BYTES = -1
    AUTO = -2
    AUTO_CONSUME = -3
    AUTO_PUBLISH = -4

    @classmethod
    def from_stored(cls, value: int) -> SchemaType | None:
        """The client type of a stored ``SchemaInfo.type`` (``convertToDomainType``)."""
        try:
            return cls(value - 1)
        except ValueError:
            return None

    @classmethod
    def parse(cls, name: str) -> SchemaType | None:
        """A type by its client name (``KEY_VALUE``), as KeyValue properties spell it."""
        try:
            return cls[name.strip().upper()]
        except KeyError:
            return None


def schema_id(tenant: str, namespace: str, encoded_local_name: str) -> str:
    """``TopicName.getSchemaName``: tenant/namespace/encoded local name (no domain; the
    partitioned topic's name for a partition)."""
    return f"{tenant}/{namespace}/{encoded_local_name}"


def locator_path(schema_name: str) -> str:
    return f"{SCHEMA_ROOT}/{schema_name}"


def version_bytes(version: int) -> bytes:
    """A schema version as a message's ``schema_version`` carries it."""
    return VERSION.pack(version)


def parse_version(data: bytes | None) -> int | None:
    """The version a message's ``schema_version`` names; None when it has fewer than 8
    bytes (``versionFromBytes`` reads the first 8 bytes as a long)."""
    if data is None or len(data) < VERSION.size:
        return None
    return VERSION.unpack_from(data, 0)[0]


@dataclass(slots=True)
class IndexEntry:
    """One version in the index: where its schema entry is stored."""

    version: int | None
    ledger_id: int | None
    entry_id: int | None
    hash: bytes

    @classmethod
    def of(cls, msg: sspb.IndexEntry) -> IndexEntry:
        pos = msg.position if msg.HasField("position") else None
        return cls(
            msg.version if msg.HasField("version") else None,
            pos.ledgerId if pos is not None and pos.HasField("ledgerId") else None,
            pos.entryId if pos is not None and pos.HasField("entryId") else None,
            msg.hash,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "ledger_id": self.ledger_id,
            "entry_id": self.entry_id,
            "hash": self.hash.hex(),
        }


@dataclass(slots=True)
class Locator:
    """A topic's schema index as the metadata store holds it."""

    latest: IndexEntry | None
    index: list[IndexEntry]
    problems: list[str] = field(default_factory=list)


def parse_locator(data: bytes | memoryview) -> Locator:
    """Decode the metadata store's value; raises CorruptEntryError when it is no protobuf."""
    msg, missing = parse_proto(sspb.SchemaLocator, bytes(data), "schema-locator", 0)
    problems = [f"the schema index lacks {m}" for m in missing]
    if not msg.HasField("info"):
        problems.append("the schema index names no latest version (info)")
    index = [IndexEntry.of(e) for e in msg.index]
    problems += _index_problems(index)
    return Locator(IndexEntry.of(msg.info) if msg.HasField("info") else None, index, problems)


def _index_problems(index: list[IndexEntry]) -> list[str]:
    problems = []
    previous: int | None = None
    for e in index:
        if e.version is None or e.ledger_id is None or e.entry_id is None:
            problems.append(f"an index entry lacks its version or position: {e.to_json()}")
            continue
        if previous is not None and e.version <= previous:
            problems.append(f"version {e.version} follows version {previous} in the index")
        previous = e.version
    return problems


@dataclass(slots=True)
class StoredSchema:
    """One schema version as the broker stored it (SchemaInfo) and what is known of it."""

    version: int
    type: SchemaType | None
    stored_type: int | None  # SchemaInfo.type as stored
    definition: bytes
    properties: dict[str, str]
    deleted: bool
    timestamp: int | None
    user: str | None
    schema_id: str | None
    ledger_id: int | None = None
    entry_id: int | None = None
    hash: bytes = b""
    problems: list[str] = field(default_factory=list)

    @property
    def type_name(self) -> str:
        if self.type is not None:
            return self.type.name
        return "UNKNOWN" if self.stored_type is None else f"UNKNOWN({self.stored_type})"

    def definition_text(self) -> str | None:
        """The definition as text when it is UTF-8 (Avro, JSON, KeyValue parts aside)."""
        try:
            return self.definition.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def to_json(self, with_definition: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": self.version,
            "type": self.type_name,
            "deleted": self.deleted,
            "timestamp": self.timestamp,
            "user": self.user,
            "schema_id": self.schema_id,
            "properties": dict(self.properties),
            "ledger_id": self.ledger_id,
            "entry_id": self.entry_id,
            "hash": self.hash.hex(),
            "problems": list(self.problems),
        }
        if with_definition:
            import base64

            out.update(definition_json(self))
            out["definition_base64"] = base64.b64encode(self.definition).decode("ascii")
        return out


def definition_json(schema: StoredSchema) -> dict[str, Any]:
    """The definition for JSON: parsed when it is JSON text (Avro, JSON, PROTOBUF and
    PROTOBUF_NATIVE definitions are), the two parts of a KeyValue, else base64."""
    import base64

    data = schema.definition
    if schema.type is SchemaType.KEY_VALUE:
        try:
            key, value = split_key_value(data)
        except ValueError as exc:
            return {
                "definition_base64": base64.b64encode(data).decode(),
                "definition_error": str(exc),
            }
        return {
            "definition": {
                "key": _maybe_json(key),
                "value": _maybe_json(value),
            }
        }
    return {"definition": _maybe_json(data)}


def _maybe_json(data: bytes | None) -> Any:
    import base64

    if data is None:
        return None
    if not data:
        return ""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}
    try:
        return json.loads(text)
    except ValueError:
        return text


KV_LENGTH = struct.Struct(">i")


def split_key_value(data: bytes | memoryview) -> tuple[bytes | None, bytes | None]:
    """``KeyValue.decode``'s layout: [len:i32 key][len:i32 value], -1 for null.

    Used both for a KeyValue schema's definition and for an INLINE value. Raises
    ValueError when the lengths do not fit the bytes.
    """
    mv = memoryview(data)
    parts: list[bytes | None] = []
    pos = 0
    for what in ("key", "value"):
        if pos + 4 > len(mv):
            raise ValueError(f"the {what} length is cut off at byte {pos} of {len(mv)}")
        (n,) = KV_LENGTH.unpack_from(mv, pos)
        pos += 4
        if n == -1:
            parts.append(None)
            continue
        if n < 0 or pos + n > len(mv):
            raise ValueError(
                f"the {what} length {n} at byte {pos - 4} does not fit {len(mv)} bytes"
            )
        parts.append(bytes(mv[pos : pos + n]))
        pos += n
    if pos != len(mv):
        raise ValueError(f"{len(mv) - pos} bytes follow the value")
    return parts[0], parts[1]


def parse_schema_entry(data: bytes | memoryview, version: int) -> StoredSchema:
    """One schema ledger entry's payload (after the BookKeeper header) as the version it
    stores; raises CorruptEntryError when it is no SchemaEntry or its data no SchemaInfo."""
    entry, missing = parse_proto(sspb.SchemaEntry, bytes(data), "schema-entry", 0)
    problems = [f"the schema entry lacks {m}" for m in missing]
    info, missing = parse_proto(sspb.SchemaInfo, entry.schema_data, "schema-info", 0)
    problems += [f"the schema info lacks {m}" for m in missing]
    return schema_from_info(info, version, problems)


def schema_from_info(
    info: sspb.SchemaInfo, version: int, problems: list[str] | None = None
) -> StoredSchema:
    problems = list(problems or [])
    stored = info.type if info.HasField("type") else None
    kind = SchemaType.from_stored(stored) if stored is not None else None
    if stored is not None and kind is None:
        problems.append(f"unknown schema type {stored}")
    props: dict[str, str] = {}
    for kv in info.props:
        props[kv.key] = kv.value  # a repeated key: the last wins, as in the broker's map
    return StoredSchema(
        version=version,
        type=kind,
        stored_type=stored,
        definition=bytes(info.schema),
        properties=props,
        deleted=info.deleted,
        timestamp=info.timestamp if info.HasField("timestamp") else None,
        user=info.user if info.HasField("user") else None,
        schema_id=info.schema_id if info.HasField("schema_id") else None,
        problems=problems,
    )


def build_schema_info(schema: StoredSchema) -> bytes:
    """SchemaInfo bytes for a version (tests, the demo): the inverse of schema_from_info."""
    info = sspb.SchemaInfo(
        schema_id=schema.schema_id or "",
        user=schema.user or "",
        type=(schema.type.value + 1) if schema.type is not None and schema.type >= 0 else 1,
        schema=schema.definition,
        timestamp=schema.timestamp or 0,
        deleted=schema.deleted,
    )
    for k, v in schema.properties.items():
        info.props.add(key=k, value=v)
    return info.SerializeToString()


def build_locator(index: list[IndexEntry]) -> bytes:
    """A SchemaLocator naming ``index[-1]`` as the latest (what the broker writes)."""
    msg = sspb.SchemaLocator()
    for e in index:
        item = msg.index.add(version=e.version, hash=e.hash)
        item.position.ledgerId = e.ledger_id
        item.position.entryId = e.entry_id
    msg.info.CopyFrom(msg.index[-1])
    return msg.SerializeToString()


def build_schema_entry(schema_data: bytes, index: list[IndexEntry]) -> bytes:
    msg = sspb.SchemaEntry(schema_data=schema_data)
    for e in index:
        item = msg.index.add(version=e.version, hash=e.hash)
        item.position.ledgerId = e.ledger_id
        item.position.entryId = e.entry_id
    return msg.SerializeToString()


__all__ = [
    "SCHEMA_ROOT",
    "CorruptEntryError",
    "IndexEntry",
    "Locator",
    "SchemaType",
    "StoredSchema",
    "build_locator",
    "build_schema_entry",
    "build_schema_info",
    "locator_path",
    "parse_locator",
    "parse_schema_entry",
    "parse_version",
    "schema_id",
    "split_key_value",
    "version_bytes",
]
