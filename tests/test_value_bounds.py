"""Decoded values within the one limit (pulsarctl_py/value_bounds.py).

An Avro array or map declares its item count; items of no bytes (null, a record of
nulls) let two stored bytes declare 2^62 of them, which fastavro builds (10^7 ``None`` in
97 MB, then the machine's memory). Every decoder's value has a budget (VALUE_FACTOR
times the maximum message size), estimated before anything is built; what is over it
is a finding on the message, with the hint to raise the limit.
"""

from __future__ import annotations

import io
import json
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders import limits
from pulsarctl_py.decoders.schemas import SchemaType, StoredSchema, version_bytes
from pulsarctl_py.value_bounds import AvroShape, ValueTooLarge, _Walk, protobuf_cost
from pulsarctl_py.value_columns import value_column
from pulsarctl_py.values import BUDGET_HINT, Values, avro_schema

MiB = 1 << 20


@pytest.fixture(autouse=True)
def default_limit() -> Iterator[None]:
    limits.set_max_message_size(limits.DEFAULT_MAX_MESSAGE_SIZE)
    yield
    limits.set_max_message_size(limits.DEFAULT_MAX_MESSAGE_SIZE)


def zz(n: int) -> bytes:
    """An Avro long (zigzag varint)."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def avro(definition: Any, version: int = 0) -> StoredSchema:
    data = json.dumps(definition).encode()
    return StoredSchema(version, SchemaType.AVRO, 5, data, {}, False, 1, "", "t/n/x")


def encode(definition: Any, value: Any) -> bytes:
    from fastavro import parse_schema, schemaless_writer

    out = io.BytesIO()
    schemaless_writer(out, parse_schema(definition), value)
    return out.getvalue()


NULLS = {"type": "array", "items": "null"}
NULL_RECORDS = {
    "type": "array",
    "items": {"type": "record", "name": "N", "fields": [{"name": "z", "type": "null"}]},
}
INT_RECORDS = {
    "type": "array",
    "items": {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]},
}
TREE = {
    "type": "record",
    "name": "T",
    "fields": [{"name": "children", "type": {"type": "array", "items": "T"}}],
}

#: bombs: (schema, value bytes), each a few bytes declaring far more than any budget
BOMBS = {
    "nulls-2^62": (NULLS, zz(2**62) + zz(0)),
    "null-records-10^9": (NULL_RECORDS, zz(10**9) + zz(0)),
    "negative-block-2^40": (NULLS, zz(-(2**40)) + zz(0) + zz(0)),
    "tree-10^8-children": (TREE, zz(10**8) + zz(0) * 8),
    "map-of-nulls": ({"type": "map", "values": "null"}, zz(10**9) + b"\x00" * 8 + zz(0)),
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_declared_counts_are_refused_before_anything_is_built(name: str) -> None:
    definition, data = BOMBS[name]
    values = Values([avro(definition)])
    tracemalloc.start()
    started = time.monotonic()
    try:
        got = values.decode(version_bytes(0), data, None)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not got.decoded and got.error is not None
    assert time.monotonic() - started < 5 and peak < 16 * MiB
    if name != "map-of-nulls":  # eight keys of no bytes, then the bytes end: not Avro
        assert "not decoded: it would take more than" in got.error
        assert BUDGET_HINT in got.error


def test_small_values_of_such_schemas_decode_as_fastavro_decodes_them() -> None:
    for definition, value in (
        (NULLS, [None] * 1000),
        (NULL_RECORDS, [{"z": None}] * 10),
        (TREE, {"children": [{"children": []}, {"children": [{"children": []}]}]}),
        (INT_RECORDS, [{"a": i} for i in range(10_000)]),
    ):
        got = Values([avro(definition)]).decode(version_bytes(0), encode(definition, value), None)
        assert got.decoded and got.value == value, got.error
        assert got.cost > 0


def test_a_value_over_the_budget_decodes_when_the_limit_is_raised() -> None:
    """5 MiB of one-byte records: about 1 GB of dicts in Python; refused at the default
    limit (budget 120 MiB), decoded with the limit raised so that the budget holds it."""
    count = 600_000  # 600 KB of records, about 135 MB of Python objects
    data = zz(count) + b"\x02" * count + zz(0)
    got = Values([avro(INT_RECORDS)]).decode(version_bytes(0), data, None)
    assert not got.decoded and got.error and BUDGET_HINT in got.error
    limits.set_max_message_size(8 * MiB)  # budget 192 MiB
    got = Values([avro(INT_RECORDS)]).decode(version_bytes(0), data, None)
    assert got.decoded and len(got.value) == count


def test_typed_columns_apply_the_same_budget() -> None:
    definition = {
        "type": "record",
        "name": "B",
        "fields": [{"name": "nulls", "type": NULLS}, {"name": "n", "type": "int"}],
    }
    values = Values([avro(definition)])
    column = value_column(values)
    assert column.kind == "avro"
    bomb = zz(2**62) + zz(0) + zz(7)
    assert column.value(values, version_bytes(0), bomb, None) is None
    honest = encode(definition, {"nulls": [None, None], "n": 7})
    assert column.value(values, version_bytes(0), honest, None) == {"nulls": [None, None], "n": 7}


# -- the walk is Avro's own reading ---------------------------------------------------------

ITEM = {
    "type": "record",
    "name": "Item",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "flag", "type": "boolean"},
        {"name": "score", "type": ["null", "double"]},
        {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["a", "b", "c"]}},
        {"name": "raw", "type": {"type": "fixed", "name": "F", "size": 3}},
        {"name": "tags", "type": {"type": "map", "values": "float"}},
        {"name": "blob", "type": "bytes"},
        {"name": "nothing", "type": "null"},
    ],
}
DOC = {
    "type": "record",
    "name": "Doc",
    "fields": [
        {"name": "items", "type": {"type": "array", "items": ITEM}},
        {"name": "nested", "type": {"type": "array", "items": {"type": "array", "items": "int"}}},
        {"name": "again", "type": ["null", "Item"]},
        {"name": "tree", "type": TREE},
    ],
}

_items = st.fixed_dictionaries(
    {
        "id": st.integers(-(2**63), 2**63 - 1),
        "name": st.text(max_size=20),
        "flag": st.booleans(),
        "score": st.one_of(st.none(), st.floats(allow_nan=False, width=64)),
        "kind": st.sampled_from(["a", "b", "c"]),
        "raw": st.binary(min_size=3, max_size=3),
        "tags": st.dictionaries(st.text(max_size=5), st.floats(width=32, allow_nan=False)),
        "blob": st.binary(max_size=40),
        "nothing": st.none(),
    }
)
_trees = st.recursive(
    st.just({"children": []}),
    lambda inner: st.builds(lambda c: {"children": c}, st.lists(inner, max_size=3)),
    max_leaves=10,
)
_docs = st.fixed_dictionaries(
    {
        "items": st.lists(_items, max_size=6),
        "nested": st.lists(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=5), max_size=4),
        "again": st.one_of(st.none(), _items),
        "tree": _trees,
    }
)


@settings(max_examples=150, deadline=None)
@given(_docs)
def test_the_walk_reads_every_byte_of_any_value(doc: dict[str, Any]) -> None:
    data = encode(DOC, doc)
    shape = AvroShape(avro_schema(json.dumps(DOC).encode()))
    walk = _Walk(memoryview(data), 1 << 40, shape)
    walk.value(shape.root)
    assert walk.pos == len(data)  # the walk went through the value as Avro reads it
    assert shape.cost(data, 1 << 40) == walk.cost
    with pytest.raises(ValueTooLarge):
        shape.cost(data, walk.cost - 1)  # the budget is the walk's own count


@settings(max_examples=100, deadline=None)
@given(_docs, st.integers(0, 200), st.binary(min_size=1, max_size=4))
def test_the_walk_never_fails_but_by_its_own_refusal(doc: Any, at: int, noise: bytes) -> None:
    data = encode(DOC, doc)
    cut = data[: at % (len(data) + 1)] + noise
    shape = AvroShape(avro_schema(json.dumps(DOC).encode()))
    try:
        shape.cost(cut, 64 * MiB)
    except ValueTooLarge:
        pass


@pytest.mark.parametrize(
    "definition, value",
    [
        (INT_RECORDS, [{"a": 100_000 + i} for i in range(20_000)]),
        (NULLS, [None] * 50_000),
        ({"type": "map", "values": "string"}, {f"k{i}": "v" * 10 for i in range(5000)}),
        (DOC["fields"][1]["type"], [[i, i + 1000] for i in range(5000)]),
        (ITEM, {"id": 1, "name": "x" * 100, "flag": True, "score": 2.5, "kind": "b",
                "raw": b"abc", "tags": {"a": 1.0}, "blob": b"q" * 50, "nothing": None}),
    ],
)  # fmt: skip
def test_the_estimate_is_at_least_what_fastavro_builds(definition: Any, value: Any) -> None:
    from fastavro import schemaless_reader

    parsed = avro_schema(json.dumps(definition).encode())
    data = encode(definition, value)
    estimate = AvroShape(parsed).cost(data, 1 << 40)
    tracemalloc.start()
    try:
        decoded = schemaless_reader(io.BytesIO(data), parsed)
        built, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoded == value
    assert estimate >= built, (estimate, built)
    assert estimate <= 8 * built + 4096  # and of its order


# -- protobuf ---------------------------------------------------------------------------------


def _protobuf_schema() -> StoredSchema:
    import base64

    from google.protobuf import descriptor_pb2

    file = descriptor_pb2.FileDescriptorProto(name="b.proto", package="b", syntax="proto3")
    file.message_type.add(name="E")
    outer = file.message_type.add(name="M")
    outer.field.add(name="items", number=1, type=11, type_name=".b.E", label=3)
    outer.field.add(name="n", number=2, type=5, label=1)
    fds = descriptor_pb2.FileDescriptorSet(file=[file]).SerializeToString()
    definition = json.dumps(
        {"fileDescriptorSet": base64.b64encode(fds).decode(), "rootMessageTypeName": "b.M"}
    ).encode()
    return StoredSchema(0, SchemaType.PROTOBUF_NATIVE, 21, definition, {}, False, 1, "", "x")


def test_protobuf_values_are_counted_before_they_become_dicts() -> None:
    """Empty sub-messages of two bytes each: a dict apiece in MessageToDict (about 45
    times the bytes). Counted from the parsed message when the bytes could exceed the
    budget; refused past it."""
    limits.set_max_message_size(64 * 1024)  # budget 1.5 MiB: a few tens of KB exceed it
    values = Values([_protobuf_schema()])
    small = b"\x0a\x00" * 100 + b"\x10\x07"
    got = values.decode(version_bytes(0), small, None)
    assert got.decoded and got.value == {"items": [{}] * 100, "n": 7}
    bomb = b"\x0a\x00" * 40_000
    got = values.decode(version_bytes(0), bomb, None)
    assert not got.decoded and got.error and "not decoded: it would take more than" in got.error


def test_protobuf_cost_counts_nested_and_maps() -> None:
    from google.protobuf import struct_pb2

    doc = struct_pb2.Struct()
    doc.update({"a": [1, 2, {"b": "c" * 100}], "d": {"e": None}})
    cost = protobuf_cost(doc, 1 << 30)
    assert cost > 1000
    with pytest.raises(ValueTooLarge):
        protobuf_cost(doc, cost // 2)


# -- commands, in a child process: every bomb under 300 MB ------------------------------------


def _value_world(root: Path, large: int) -> Any:
    from tests.support import bombs

    definition = {
        "type": "record",
        "name": "B",
        "fields": [
            {"name": "nulls", "type": NULLS},
            {"name": "recs", "type": INT_RECORDS},
            {"name": "n", "type": "int"},
        ],
    }
    entry = lambda value: bombs.pulsar_entry(value, schema_version=version_bytes(0))  # noqa: E731
    nothing = zz(0) + zz(0)
    entries = [
        entry(encode(definition, {"nulls": [None], "recs": [{"a": 1}], "n": 1})),
        entry(zz(2**62) + zz(0) + nothing[:1] + zz(2)),  # declared: refused
        entry(zz(0) + zz(1_000_000) + b"\x02" * 1_000_000 + zz(0) + zz(3)),  # too many dicts
        # within the budget one at a time (about 24 MB each), not 30 in one row group
        *[entry(zz(3_000_000) + zz(0) + nothing[:1] + zz(4)) for _ in range(large)],
    ]
    return bombs.topic_world(
        root, entries, schemas=[(SchemaType.AVRO, json.dumps(definition).encode())]
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        ["export", "{topic}", "--to", "{out}/e.parquet"],
        ["export", "{topic}", "--to", "{out}/e.jsonl"],
        ["inspect", "--topic", "{topic}", "-o", "jsonl", "--values", "both"],
    ],
    ids=["export-parquet", "export-jsonl", "inspect-jsonl"],
)
def test_value_bombs_stay_under_300_mb(command: list[str], tmp_path: Path) -> None:
    from tests.support import bombs

    large = 30 if command[-1].endswith(".parquet") else 3  # JSON: 15 MB of text a row
    stores = _value_world(tmp_path / "w", large)
    args = [a.replace("{topic}", bombs.TOPIC).replace("{out}", str(tmp_path)) for a in command]
    out = tmp_path / "stdout"
    measured = bombs.run_peak(*args, *stores.flags(), stdout_to=out, timeout=600)
    assert "Traceback" not in measured.err, measured.err[-3000:]
    assert measured.code == 1, measured.err[-2000:]  # the two refused values are errors
    assert measured.peak < bombs.PEAK_GOAL, f"peak RSS {measured.peak_mib} MiB"
    if command[0] == "export" and command[-1].endswith(".jsonl"):
        rows = [json.loads(line) for line in (tmp_path / "e.jsonl").open(encoding="utf-8")]
        refused = [r for r in rows if any("not decoded: it would take" in p for p in r["problems"])]
        assert [r["entry_id"] for r in refused] == [1, 2]
        assert sum(r["value_decoded"] is not None for r in rows) == 1 + large
    if command[-1].endswith(".parquet"):
        import pyarrow.parquet as pq

        table = pq.read_table(tmp_path / "e.parquet", columns=["value_decoded"])
        assert table.num_rows == 3 + large
        assert table.column(0).null_count == 2
