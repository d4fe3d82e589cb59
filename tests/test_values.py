"""Schema storage records and message values: round trips, encodings as Pulsar's Java
schemas write them, and malformed schemas and payloads (never a traceback, bounded memory).
The comparison with the real broker and its consumers is in test_schemas_sandbox.py."""

from __future__ import annotations

import io
import json
import struct
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.schemas import (
    IndexEntry,
    SchemaType,
    StoredSchema,
    build_locator,
    build_schema_entry,
    build_schema_info,
    parse_locator,
    parse_schema_entry,
    parse_version,
    split_key_value,
    version_bytes,
)
from pulsarctl_py.values import (
    SchemaDefinitionError,
    Values,
    Where,
    build_decoder,
    java_instant,
    java_local_time,
)

ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "raw", "type": "bytes"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def schema(
    kind: SchemaType, definition: bytes = b"", version: int = 0, **props: str
) -> StoredSchema:
    return StoredSchema(
        version, kind, kind.value + 1, definition, dict(props), False, 1, "", "t/n/x"
    )


def avro_bytes(doc: dict[str, Any], value: dict[str, Any]) -> bytes:
    from fastavro import parse_schema, schemaless_writer

    out = io.BytesIO()
    schemaless_writer(out, parse_schema(doc), value)
    return out.getvalue()


# -- storage records ------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2**40), st.integers(0, 2**20), st.binary(max_size=32)),
        min_size=1,
        max_size=8,
    ),
    st.binary(max_size=200),
    st.sampled_from(list(SchemaType)),
    st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=4),
    st.booleans(),
)
def test_storage_records_round_trip(positions, definition, kind, props, deleted) -> None:
    index = [IndexEntry(v, lid, 0, h) for v, (lid, _e, h) in enumerate(positions)]
    for i, (_v, eid, _h) in enumerate(positions):
        index[i].entry_id = eid
    locator = parse_locator(build_locator(index))
    assert locator.index == index and locator.latest == index[-1] and not locator.problems
    stored = StoredSchema(3, kind, None, definition, props, deleted, 17, "u", "t/n/x")
    data = build_schema_entry(build_schema_info(stored), index[:-1])
    back = parse_schema_entry(data, 3)
    expected_type = kind if kind.value >= 0 else SchemaType.NONE  # stored as NONE
    assert (back.type, back.definition, back.properties, back.deleted) == (
        expected_type,
        definition,
        props,
        deleted,
    )


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_storage_parsers_take_any_bytes(data) -> None:
    for parse in (parse_locator, lambda d: parse_schema_entry(d, 0)):
        try:
            parse(data)
        except LedgerctlError:
            pass


def test_schema_version_is_eight_bytes_big_endian() -> None:
    assert version_bytes(1) == b"\0" * 7 + b"\1"
    assert parse_version(version_bytes(2**40)) == 2**40
    assert parse_version(b"\0\0") is None


# -- values ----------------------------------------------------------------------------------


def test_avro_values_keep_stored_numbers_and_bytes_as_base64() -> None:
    value = {"id": 42, "note": None, "raw": b"\x00\xff", "at": 1_700_000_000_000}
    data = avro_bytes(ORDER, value)
    got = Values([schema(SchemaType.AVRO, json.dumps(ORDER).encode())]).decode(
        version_bytes(0), data, None
    )
    assert got.decoded and got.value == {
        "id": 42,
        "note": None,
        "raw": "AP8=",
        "at": 1_700_000_000_000,
    }


def test_primitives_as_java_writes_them() -> None:
    cases = [
        (SchemaType.INT32, struct.pack(">i", -5), -5),
        (SchemaType.BOOLEAN, b"\x02", True),
        (SchemaType.DOUBLE, struct.pack(">d", 0.5), 0.5),
        (SchemaType.INSTANT, struct.pack(">qi", -1, 500_000_000), "1969-12-31T23:59:59.500Z"),
        (SchemaType.LOCAL_DATE, struct.pack(">q", 19782), "2024-02-29"),
        (SchemaType.LOCAL_TIME, struct.pack(">q", 3_600 * 10**9), "01:00"),
        (
            SchemaType.LOCAL_DATE_TIME,
            struct.pack(">qq", 0, 10**9 + 1000),
            "1970-01-01T00:00:01.000001",
        ),
        (SchemaType.STRING, "é".encode(), "é"),
    ]
    for kind, data, expected in cases:
        assert build_decoder(schema(kind))(data, None) == expected, kind
    assert java_instant(0, 0) == "1970-01-01T00:00:00Z"
    assert java_local_time(1) == "00:00:00.000000001"


def test_key_value_inline_and_separated() -> None:
    definition = struct.pack(">i", 0) + struct.pack(">i", 0)
    props = {"key.schema.type": "STRING", "value.schema.type": "INT64"}
    inline = schema(SchemaType.KEY_VALUE, definition, **props, **{"kv.encoding.type": "INLINE"})
    value = struct.pack(">i", 2) + b"ab" + struct.pack(">i", 8) + struct.pack(">q", 7)
    assert build_decoder(inline)(value, None) == {"key": "ab", "value": 7}
    null_key = struct.pack(">i", -1) + struct.pack(">i", 8) + struct.pack(">q", 7)
    assert build_decoder(inline)(null_key, None) == {"key": None, "value": 7}
    separated = schema(
        SchemaType.KEY_VALUE, definition, **props, **{"kv.encoding.type": "SEPARATED"}
    )
    assert build_decoder(separated)(struct.pack(">q", 9), b"k") == {"key": "k", "value": 9}


def test_a_value_that_does_not_decode_is_a_finding_with_the_bytes_kept() -> None:
    values = Values([schema(SchemaType.INT64)])
    got = values.decode(version_bytes(0), b"abc", None)
    assert not got.decoded and "INT64 takes 8 bytes" in got.error
    assert values.decode(None, b"abc", None).note.startswith("the message names no schema")
    assert "not in the schema storage" in values.decode(version_bytes(5), b"x", None).note


def test_where_paths_and_values() -> None:
    doc = {"order": {"id": 42, "tags": ["a"], "ok": True, "name": "x"}}
    assert Where.parse("order.id=42").matches(doc)
    assert Where.parse("order.tags.0=a").matches(doc)
    assert Where.parse("order.ok=true").matches(doc)
    assert Where.parse("order.id!=41").matches(doc)
    assert not Where.parse("order.missing=1").matches(doc)
    for bad in ("order.id", "=1", "a..b=1"):
        with pytest.raises(LedgerctlError):
            Where.parse(bad)


# -- malformed schemas and payloads -----------------------------------------------------------

KINDS = [k for k in SchemaType if k.value >= 0]


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(KINDS),
    st.one_of(
        st.binary(max_size=200),
        st.just(json.dumps(ORDER).encode()),
        st.just(b'{"fileDescriptorSet": "AAAA", "rootMessageTypeName": "x.Y"}'),
    ),
    st.dictionaries(
        st.sampled_from(
            [
                "__charset",
                "__PARSING_INFO__",
                "key.schema.type",
                "value.schema.type",
                "kv.encoding.type",
            ]
        ),
        st.sampled_from(["UTF-8", "nope", "INT64", "AVRO", "[]", '[{"number": 1}]', "SEPARATED"]),
        max_size=4,
    ),
    st.binary(max_size=300),
)
def test_malformed_schemas_and_payloads_never_raise(kind, definition, props, payload) -> None:
    values = Values([schema(kind, definition, **props)])
    got = values.decode(version_bytes(0), payload, payload[:4])
    json.dumps(got.value)  # whatever decoded is JSON
    assert got.decoded or got.error is not None or got.note is not None or kind is SchemaType.NONE


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_avro_payload_mutations_are_findings(noise) -> None:
    data = avro_bytes(ORDER, {"id": 1, "note": "n", "raw": b"r", "at": 2})
    values = Values([schema(SchemaType.AVRO, json.dumps(ORDER).encode())])
    for candidate in (noise, data[: len(noise) % len(data)], data + noise[:1]):
        got = values.decode(version_bytes(0), candidate, None)
        assert got.decoded or got.error


def test_huge_length_prefixes_are_not_allocated() -> None:
    """An Avro string or bytes length of 2^62 in a few bytes: refused, memory bounded."""
    values = Values([schema(SchemaType.AVRO, json.dumps(ORDER).encode())])
    zigzag_huge = bytes([0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F])
    tracemalloc.start()
    try:
        got = values.decode(version_bytes(0), b"\x02\x00" + zigzag_huge, None)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got.error and peak < 64 << 20
    kv = schema(SchemaType.KEY_VALUE, struct.pack(">ii", 0, 0), **{"key.schema.type": "STRING"})
    got = Values([kv]).decode(version_bytes(0), struct.pack(">i", 2**31 - 1) + b"x", None)
    assert got.error and "does not fit" in got.error


def test_bad_definitions_are_said_once() -> None:
    with pytest.raises(SchemaDefinitionError):
        build_decoder(schema(SchemaType.AVRO, b"{not json"))
    got = Values([schema(SchemaType.AVRO, b'{"type": "nope"}')]).decode(version_bytes(0), b"", None)
    assert got.error and "cannot decode values" in got.error
    with pytest.raises(ValueError):
        split_key_value(b"\0\0\0\5ab")


# -- Avro values as JSON: the schema-directed conversion ------------------------------------

_AVRO_PRIMITIVES = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]


def _avro_types() -> st.SearchStrategy[Any]:
    def record(fields: list[Any]) -> dict[str, Any]:
        return {
            "type": "record",
            "name": "R",
            "fields": [{"name": f"f{i}", "type": t} for i, t in enumerate(fields)],
        }

    def nullable(child: Any) -> Any:
        return ["null", child] if not isinstance(child, list) and child != "null" else child

    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            children.map(lambda t: {"type": "array", "items": t}),
            children.map(lambda t: {"type": "map", "values": t}),
            st.lists(children, min_size=1, max_size=4).map(record),
            children.map(nullable),
            st.lists(children, min_size=2, max_size=3).map(
                # a union of distinct unnamed kinds (Avro allows one branch per kind)
                lambda ts: (
                    list(dict.fromkeys(t for t in ts if isinstance(t, str))) or ["null", "int"]
                )
            ),
            st.integers(1, 4).map(lambda n: {"type": "fixed", "name": "X", "size": n}),
            st.just({"type": "enum", "name": "E", "symbols": ["A", "B"]}),
        )

    return st.recursive(st.sampled_from(_AVRO_PRIMITIVES), extend, max_leaves=10).map(
        lambda t: _named(record([t]))
    )


def _named(schema: Any, counter: list[int] | None = None) -> Any:
    """Every named type (record, fixed, enum) gets a name of its own."""
    counter = counter if counter is not None else [0]
    if isinstance(schema, list):
        return [_named(b, counter) for b in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _named(v, counter) if k in ("items", "values") else v for k, v in schema.items()}
    if "name" in out:
        counter[0] += 1
        out["name"] = f"{out['name']}{counter[0]}"
    if "fields" in out:
        out["fields"] = [{**f, "type": _named(f["type"], counter)} for f in out["fields"]]
    return out


def _avro_value(draw: Any, schema: Any) -> Any:
    if isinstance(schema, list):
        return _avro_value(draw, draw(st.sampled_from(schema)))
    kind = schema if isinstance(schema, str) else schema["type"]
    if kind == "null":
        return None
    if kind == "boolean":
        return draw(st.booleans())
    if kind in ("int", "long"):
        return draw(st.integers(-(2**31), 2**31 - 1))
    if kind in ("float", "double"):
        return draw(st.sampled_from([0.5, -2.0, float("nan"), float("inf"), float("-inf")]))
    if kind == "bytes":
        return draw(st.binary(max_size=6))
    if kind == "string":
        return draw(st.text(max_size=4))
    if kind == "fixed":
        return draw(st.binary(min_size=schema["size"], max_size=schema["size"]))
    if kind == "enum":
        return draw(st.sampled_from(schema["symbols"]))
    if kind == "array":
        return [_avro_value(draw, schema["items"]) for _ in range(draw(st.integers(0, 2)))]
    if kind == "map":
        return {
            f"k{i}": _avro_value(draw, schema["values"]) for i in range(draw(st.integers(0, 2)))
        }
    return {f["name"]: _avro_value(draw, f["type"]) for f in schema["fields"]}


@settings(max_examples=300, deadline=None)
@given(_avro_types(), st.data())
def test_avro_values_as_json_equal_the_generic_walk(avro: Any, data: Any) -> None:
    """The converter built from the schema gives exactly what walking every value gives
    (bytes and fixed as base64, NaN and infinities as text), on any schema."""
    from fastavro import parse_schema, schemaless_reader

    from pulsarctl_py.values import jsonable

    value = _avro_value(data.draw, avro)
    payload = avro_bytes(avro, value)
    got = Values([schema(SchemaType.AVRO, json.dumps(avro).encode())]).decode(
        version_bytes(0), payload, None
    )
    assert got.decoded, got
    walked = jsonable(schemaless_reader(io.BytesIO(payload), parse_schema(avro)))
    assert got.value == walked
    json.dumps(got.value, allow_nan=False)  # JSON, strictly


def test_recursive_avro_records_take_the_generic_walk() -> None:
    node = {
        "type": "record",
        "name": "Node",
        "fields": [
            {"name": "raw", "type": "bytes"},
            {"name": "next", "type": ["null", "Node"], "default": None},
        ],
    }
    value = {"raw": b"\x01", "next": {"raw": b"\x02", "next": None}}
    got = Values([schema(SchemaType.AVRO, json.dumps(node).encode())]).decode(
        version_bytes(0), avro_bytes(node, value), None
    )
    assert got.value == {"raw": "AQ==", "next": {"raw": "Ag==", "next": None}}
