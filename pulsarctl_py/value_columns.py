"""Decoded values as a typed column (Parquet, Arrow): the column type from the topic's
schemas, and each message's value read into it.

* AVRO or JSON versions that the latest version can read by Avro's schema resolution rules
  (fields matched by name; a reader field missing from a writer has a default; numeric
  promotions) give one struct column of the latest version: every value is read with its
  writer's schema resolved to the latest one (fastavro), so older messages get the
  defaults of added fields, as a consumer of the latest schema gets them;
* a topic of one primitive type gives that type's column (INSTANT and the LOCAL_* types as
  their ISO-8601 text);
* AVRO or JSON versions that cannot be merged so give one column per version (kind
  ``split``): each version's values typed by its own schema, written by export to a file
  of their own (:attr:`ValueColumn.versions`; the rows of no version, such as messages
  naming no schema version or entries that could not be read, keep a JSON text column);
* anything else (KeyValue, protobuf, several kinds of schema, recursive records) gives
  the value as JSON text, and says why (:attr:`ValueColumn.note`).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

from pulsarctl_py.decoders.schemas import SchemaType, parse_version

_PRIMITIVE_ARROW = {
    SchemaType.STRING: "string",
    SchemaType.BOOLEAN: "bool",
    SchemaType.INT8: "int8",
    SchemaType.INT16: "int16",
    SchemaType.INT32: "int32",
    SchemaType.INT64: "int64",
    SchemaType.FLOAT: "float32",
    SchemaType.DOUBLE: "float64",
    SchemaType.DATE: "int64",
    SchemaType.TIME: "int64",
    SchemaType.TIMESTAMP: "int64",
    SchemaType.INSTANT: "string",
    SchemaType.LOCAL_DATE: "string",
    SchemaType.LOCAL_TIME: "string",
    SchemaType.LOCAL_DATE_TIME: "string",
}
_AVRO_ARROW = {
    "null": "null",
    "boolean": "bool",
    "int": "int32",
    "long": "int64",
    "float": "float32",
    "double": "float64",
    "bytes": "binary",
    "string": "string",
}
#: Avro's promotions (a writer type a reader type may read)
_PROMOTE = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
}


class NotTyped(Exception):
    """The values cannot have one typed column; the reason."""


def _type_name(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("type"))
    if isinstance(schema, list):
        return "union"
    return str(schema)


def arrow_type(schema: Any, seen: frozenset[str] = frozenset()) -> Any:
    """The Arrow type of a (logical-type stripped) Avro schema as parsed JSON."""
    import pyarrow as pa

    if isinstance(schema, str):
        if schema in _AVRO_ARROW:
            return getattr(pa, _AVRO_ARROW[schema] if _AVRO_ARROW[schema] != "bool" else "bool_")()
        raise NotTyped(f"the named type {schema} is used again (recursive or shared records)")
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return arrow_type(branches[0], seen)
        raise NotTyped("a union of several types")
    kind = schema.get("type")
    if kind == "record":
        name = schema.get("name", "")
        if name in seen:
            raise NotTyped(f"the record {name} is recursive")
        return pa.struct(
            [pa.field(f["name"], arrow_type(f["type"], seen | {name})) for f in schema["fields"]]
        )
    if kind == "enum":
        return pa.string()
    if kind == "array":
        return pa.list_(arrow_type(schema["items"], seen))
    if kind == "map":
        return pa.map_(pa.string(), arrow_type(schema["values"], seen))
    if kind == "fixed":
        return pa.binary()
    if isinstance(kind, (str, list, dict)):
        return arrow_type(kind, seen)
    raise NotTyped(f"an Avro type {kind!r}")


def readable(writer: Any, reader: Any) -> bool:
    """Whether Avro's resolution lets ``reader`` read data written with ``writer``."""
    w, r = _type_name(writer), _type_name(reader)
    if w == "union":
        return all(readable(b, reader) for b in writer)
    if r == "union":
        return any(readable(writer, b) for b in reader)
    if w in _PROMOTE or r in _PROMOTE:
        return r in _PROMOTE.get(w, {w})
    if w != r:
        return False
    if w == "record":
        if writer.get("name") != reader.get("name"):
            return False
        wf = {f["name"]: f for f in writer["fields"]}
        for f in reader["fields"]:
            if f["name"] in wf:
                if not readable(wf[f["name"]]["type"], f["type"]):
                    return False
            elif "default" not in f:
                return False
        return True
    if w == "array":
        return readable(writer["items"], reader["items"])
    if w == "map":
        return readable(writer["values"], reader["values"])
    if w == "enum":
        return (
            set(writer.get("symbols", [])) <= set(reader.get("symbols", [])) or "default" in reader
        )
    if w == "fixed":
        return writer.get("size") == reader.get("size")
    return True


@dataclass(slots=True)
class ValueColumn:
    """How decoded values go into one typed column (picklable; the readers are built
    where the rows are)."""

    kind: str  # "avro", "json", "primitive", "text", "split"
    arrow: str  # the Arrow type, as JSON of the reader schema or a primitive type name
    note: str | None = None
    reader: Any = None  # the latest Avro schema (JSON) for "avro" and "json"
    writers: dict[int, Any] = field(default_factory=dict)  # version -> Avro schema JSON
    #: "split": the column of each version's own rows
    versions: dict[int, ValueColumn] = field(default_factory=dict)
    _parsed: dict[int, Any] = field(default_factory=dict, repr=False)

    def __getstate__(self) -> Any:
        return (self.kind, self.arrow, self.note, self.reader, self.writers, self.versions)

    def __setstate__(self, state: Any) -> None:
        self.kind, self.arrow, self.note, self.reader, self.writers, self.versions = state
        self._parsed = {}

    def arrow_type(self) -> Any:
        import pyarrow as pa

        if self.kind in ("avro", "json"):
            return arrow_type(self.reader)
        if self.kind == "primitive":
            return pa.bool_() if self.arrow == "bool" else getattr(pa, self.arrow)()
        return pa.string()

    def part(self, schema_version: int | None) -> tuple[int | None, ValueColumn]:
        """Where a row of this ``schema_version`` goes and its column: a version of a
        ``split`` column has its own (the key is the version), any other row the JSON
        text column (key None). Not split: (None, this column)."""
        if self.kind != "split":
            return None, self
        if schema_version is not None and schema_version in self.versions:
            return schema_version, self.versions[schema_version]
        return None, _TEXT

    def value(self, values: Any, schema_version: bytes | None, data: Any, key: bytes | None) -> Any:
        """One message's value as the column holds it (None when it does not decode)."""
        if data is None:
            return None
        if self.kind == "split":
            _, column = self.part(parse_version(schema_version))
            return column.value(values, schema_version, data, key)
        if self.kind == "avro":
            version = parse_version(schema_version)
            if version not in self.writers:
                return None
            from pulsarctl_py.values import avro_budget, avro_schema, avro_shape

            parsed = self._parsed.get(version)
            if parsed is None:
                writer = avro_schema(json.dumps(self.writers[version]).encode())
                parsed = self._parsed[version] = (
                    writer,
                    avro_schema(json.dumps(self.reader).encode()),
                    avro_shape(writer),
                )
            from fastavro import schemaless_reader

            try:
                data = bytes(data)
                avro_budget(parsed[2], data)  # the same budget as the JSON side's
                return schemaless_reader(io.BytesIO(data), parsed[0], parsed[1])
            except Exception:  # a finding the JSON side reports: null here
                return None
        got = values.decode(schema_version, data, key)
        if not got.decoded:
            return None
        if self.kind == "text":
            return json.dumps(got.value, ensure_ascii=False, separators=(",", ":"))
        if self.kind == "json":
            return _fill(got.value, self.reader)
        return got.value


def _fill(value: Any, schema: Any) -> Any:
    """A JSON value shaped to a reader record: missing fields take their defaults."""
    if (
        not isinstance(value, dict)
        or not isinstance(schema, dict)
        or schema.get("type") != "record"
    ):
        return value
    out = {}
    for f in schema["fields"]:
        out[f["name"]] = (
            _fill(value[f["name"]], f["type"]) if f["name"] in value else f.get("default")
        )
    return out


#: the column of rows outside a split column's versions: JSON text
_TEXT = ValueColumn("text", "string")


def value_column(values: Any) -> ValueColumn:
    """The column of a topic's decoded values (see the module docstring)."""
    from pulsarctl_py.values import _strip_logical

    live = [s for s in values.schemas if not s.deleted and s.type is not None and not s.problems]
    kinds = {s.type for s in live}
    if not live:
        return ValueColumn("text", "string", "no readable schema version")
    if len(kinds) == 1 and next(iter(kinds)) in _PRIMITIVE_ARROW:
        return ValueColumn("primitive", _PRIMITIVE_ARROW[next(iter(kinds))])
    if kinds <= {SchemaType.AVRO, SchemaType.JSON}:
        try:
            writers = {s.version: _strip_logical(json.loads(s.definition)) for s in live}
        except ValueError:
            return ValueColumn("text", "string", "a definition is not JSON")
        kind_of = {s.version: "avro" if s.type is SchemaType.AVRO else "json" for s in live}
        latest = max(writers)
        reader = writers[latest]
        why = None
        if len(kinds) > 1:
            why = "the topic has AVRO and JSON versions"
        for version, writer in writers.items():
            if why is None and not readable(writer, reader):
                why = (
                    f"schema version {version} cannot be read with version {latest} by "
                    "Avro's resolution rules"
                )
        if why is not None:
            return _split(writers, kind_of, why)
        try:
            arrow_type(reader)
        except NotTyped as exc:
            return ValueColumn("text", "string", f"{exc}: the values are JSON text")
        return ValueColumn(kind_of[latest], "struct", None, reader, writers)
    names = ", ".join(sorted(k.name for k in kinds if k is not None))
    return ValueColumn("text", "string", f"values of {names} are JSON text")


def _split(writers: dict[int, Any], kind_of: dict[int, str], why: str) -> ValueColumn:
    """One column per version, each typed by that version's own schema."""
    versions = {}
    for version, writer in sorted(writers.items()):
        try:
            arrow_type(writer)
        except NotTyped as exc:
            versions[version] = ValueColumn(
                "text", "string", f"schema version {version}: {exc}: its values are JSON text"
            )
            continue
        versions[version] = ValueColumn(kind_of[version], "struct", None, writer, {version: writer})
    return ValueColumn(
        "split",
        "string",
        f"{why}: the values of each schema version are typed by that version, in a file of "
        "their own",
        versions=versions,
    )
