"""Schemas given in a file (``decode --schema FILE``): the JSON Pulsar's tools print.

Accepted, one document per file (``pulsarctl_py.schemas`` reads the schema storage itself):

* what ``pulsar-admin schemas get TOPIC`` prints: ``{"version": N, "schemaInfo": INFO}``
  (``SchemaInfoWithVersion.toString``, ``SchemaUtils.jsonifySchemaInfoWithVersion`` of
  apache/pulsar pulsar-common);
* a SchemaInfo alone, as ``pulsar-admin schemas get TOPIC --version V`` prints it
  (``SchemaUtils.jsonifySchemaInfo``) or as ``pulsar-admin schemas upload`` takes it
  (``PostSchemaPayload``): ``{"name", "schema", "type", "timestamp", "properties"}``. It
  names no version: it decodes every message, whatever version the message names;
* the admin REST API's ``GetSchemaResponse`` (``GET /admin/v2/schemas/T/N/TOPIC/schema``):
  ``{"version", "type", "timestamp", "data", "properties"}``, and every version at once
  (``.../schemas``: ``{"getSchemaResponses": [...]}``) or a JSON list of any of the above.

``INFO["schema"]`` is the definition as those tools print it: the parsed JSON of an AVRO,
JSON or PROTOBUF definition (or its text), the text of a PROTOBUF_NATIVE one, base64 of a
primitive's (empty) bytes, and for KEY_VALUE ``{"key": INFO, "value": INFO}``
(``SchemaUtils.ByteArrayToStringAdapter``). The REST form's KEY_VALUE ``data`` is
``{"key": definition JSON or "", "value": ...}`` (``convertKeyValueSchemaInfoDataToString``),
turned back into the stored layout as ``convertKeyValueDataStringToSchemaInfoSchema`` does.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

from pulsarctl_py.decoders.schemas import SchemaType, StoredSchema
from pulsarctl_py.errors import LedgerctlError

#: the largest schema file read (definitions are KiB; a descriptor set may be MiB)
MAX_SCHEMA_FILE = 16 << 20
_KV_LENGTH = struct.Struct(">i")


class SchemaFileError(LedgerctlError):
    """A schema file that is none of the accepted forms (exit 2)."""


def read_schema_file(path: str | os.PathLike[str]) -> list[tuple[int | None, StoredSchema]]:
    """The schema versions a file holds: (version or None for "any", the schema)."""
    from pulsarctl_py.decode import read_capped

    data = read_capped(path, MAX_SCHEMA_FILE, "schema file")
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise SchemaFileError(f"{os.fspath(path)}: not JSON ({exc})") from None
    return parse_schema_document(doc, os.fspath(path))


def parse_schema_document(doc: Any, where: str = "schema") -> list[tuple[int | None, StoredSchema]]:
    """The versions of one parsed document (see the module docstring)."""
    if isinstance(doc, dict) and isinstance(doc.get("getSchemaResponses"), list):
        doc = doc["getSchemaResponses"]
    items = doc if isinstance(doc, list) else [doc]
    if not items:
        raise SchemaFileError(f"{where}: an empty list of schemas")
    out = []
    seen: set[int | None] = set()
    for n, item in enumerate(items):
        at = where if len(items) == 1 else f"{where}[{n}]"
        version, schema = _one(item, at)
        if version in seen:
            named = "no version" if version is None else f"version {version}"
            raise SchemaFileError(f"{at}: {named} is given twice")
        seen.add(version)
        out.append((version, schema))
    return out


def _one(item: Any, where: str) -> tuple[int | None, StoredSchema]:
    if not isinstance(item, dict):
        raise SchemaFileError(f"{where}: a schema is a JSON object, not {type(item).__name__}")
    version = item.get("version")
    if version is not None and (
        isinstance(version, bool) or not isinstance(version, int) or version < 0
    ):
        raise SchemaFileError(f"{where}: version {version!r} is not a version number")
    if "schemaInfo" in item:
        info = item["schemaInfo"]
        if not isinstance(info, dict):
            raise SchemaFileError(f"{where}: schemaInfo is not an object")
        return version, _from_info(info, version, where)
    if "data" in item and "type" in item:  # the REST API's GetSchemaResponse
        return version, _from_rest(item, version, where)
    if "type" in item and "schema" in item:
        return version, _from_info(item, version, where)
    raise SchemaFileError(
        f"{where}: not a schema as pulsar-admin prints it (version and schemaInfo), a "
        "SchemaInfo (type and schema) or the REST API's answer (type and data)"
    )


def _type(value: Any, where: str) -> SchemaType:
    kind = SchemaType.parse(value) if isinstance(value, str) else None
    if kind is None:
        raise SchemaFileError(f"{where}: unknown schema type {value!r}")
    return kind


def _properties(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SchemaFileError(f"{where}: properties is not an object")
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}


def _text(value: Any) -> bytes:
    """A definition as printed: text as it is, parsed JSON as compact JSON text."""
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _schema(
    kind: SchemaType,
    definition: bytes,
    properties: dict[str, str],
    version: int | None,
    info: dict[str, Any],
) -> StoredSchema:
    timestamp = info.get("timestamp")
    name = info.get("name")
    return StoredSchema(
        version=-1 if version is None else version,
        type=kind,
        stored_type=kind.value + 1 if kind.value >= 0 else 1,
        definition=definition,
        properties=properties,
        deleted=False,
        timestamp=timestamp if isinstance(timestamp, int) else None,
        user=None,
        schema_id=name if isinstance(name, str) else None,
    )


def _from_info(info: dict[str, Any], version: int | None, where: str) -> StoredSchema:
    kind = _type(info.get("type"), where)
    props = _properties(info.get("properties"), where)
    raw = info.get("schema")
    if kind is SchemaType.KEY_VALUE:
        definition = _key_value_from_infos(raw, props, where)
    elif kind in (
        SchemaType.AVRO,
        SchemaType.JSON,
        SchemaType.PROTOBUF,
        SchemaType.PROTOBUF_NATIVE,
    ):
        definition = _text(raw)
    else:
        definition = b""  # primitives: the printed base64 of empty bytes
    return _schema(kind, definition, props, version, info)


def _key_value_from_infos(raw: Any, props: dict[str, str], where: str) -> bytes:
    """A KEY_VALUE definition from ``{"key": INFO, "value": INFO}``; the properties the
    sub-schemas need (``key.schema.type``...) are taken from them where missing."""
    if isinstance(raw, str):  # getSchemaDefinition's text of the same object
        try:
            raw = json.loads(raw)
        except ValueError:
            pass
    if not isinstance(raw, dict) or not isinstance(raw.get("key"), dict):
        raise SchemaFileError(f'{where}: a KEY_VALUE schema is {{"key": .., "value": ..}}')
    parts = []
    for side in ("key", "value"):
        sub = raw.get(side)
        if not isinstance(sub, dict):
            raise SchemaFileError(f"{where}: the KEY_VALUE {side} schema is not an object")
        sub_schema = _from_info(sub, None, f"{where}.{side}")
        assert sub_schema.type is not None
        props.setdefault(f"{side}.schema.type", sub_schema.type.name)
        props.setdefault(f"{side}.schema.properties", json.dumps(sub_schema.properties))
        if isinstance(sub.get("name"), str):
            props.setdefault(f"{side}.schema.name", sub["name"])
        parts.append(sub_schema.definition)
    return _key_value_bytes(parts[0], parts[1])


def _key_value_bytes(key: bytes, value: bytes) -> bytes:
    """``KeyValue.encode`` of two definitions (KeyValueSchemaInfo.encodeKeyValueSchemaInfo)."""
    return _KV_LENGTH.pack(len(key)) + key + _KV_LENGTH.pack(len(value)) + value


def _from_rest(item: dict[str, Any], version: int | None, where: str) -> StoredSchema:
    kind = _type(item.get("type"), where)
    props = _properties(item.get("properties"), where)
    data = item.get("data")
    if data is not None and not isinstance(data, str):
        raise SchemaFileError(f"{where}: data is not text")
    if kind is SchemaType.KEY_VALUE:
        try:
            pair = json.loads(data or "")
        except ValueError as exc:
            raise SchemaFileError(f"{where}: the KEY_VALUE data is not JSON ({exc})") from None
        if not isinstance(pair, dict):
            raise SchemaFileError(f"{where}: the KEY_VALUE data is not an object")
        # convertKeyValueDataStringToSchemaInfoSchema: "" (a primitive) is empty bytes
        key, value = (
            b"" if pair.get(side) in ("", None) else _text(pair.get(side))
            for side in ("key", "value")
        )
        definition = _key_value_bytes(key, value)
    else:
        definition = (data or "").encode("utf-8")
    return _schema(kind, definition, props, version, item)


def schema_file_values(paths: list[Any]) -> Any:
    """``decode --schema FILE...``: the schemas of the files as one
    :class:`pulsarctl_py.values.Values`; one of them may be without a version (it decodes
    every message whose version none of the others has)."""
    from pulsarctl_py.values import Values

    versioned: list[StoredSchema] = []
    any_version = None
    for path in paths:
        for version, schema in read_schema_file(path):
            if version is None:
                if any_version is not None:
                    raise LedgerctlError(
                        f"{path}: a second schema without a version (one may decode "
                        "every message; give the others with their versions)"
                    )
                any_version = schema
            elif any(s.version == version for s in versioned):
                raise LedgerctlError(f"{path}: schema version {version} is given twice")
            else:
                versioned.append(schema)
    latest = max((s.version for s in versioned), default=None)
    return Values(versioned, latest, any_version)
