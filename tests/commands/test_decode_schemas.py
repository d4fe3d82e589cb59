"""`ledgerctl decode --schema FILE | --schema-topic TOPIC`: decoded values without a topic.

The schema files are what Pulsar's own tools printed for the demo's ``shop-orders`` topic
on a real broker (pulsarctl_py/demo/entries/shop-orders/capture.json: ``pulsar-admin
schemas get``'s text, with and without ``--version``, and the admin REST API's answers);
the entries are that topic's stored entries. Every form must give the values the official
consumer received.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders.schemas import SchemaType, version_bytes
from pulsarctl_py.schema_files import SchemaFileError, parse_schema_document
from pulsarctl_py.values import Values
from tests.support.cli_helpers import run
from tests.support.demo_env import demo, demo_root

#: the shared demo fixtures this module's tests use
FIXTURES = (demo, demo_root)

CAPTURED = Path(__file__).resolve().parents[2] / "pulsarctl_py/demo/entries/shop-orders"


def capture() -> dict[str, Any]:
    return json.loads((CAPTURED / "capture.json").read_text())


ENTRIES = sorted(CAPTURED.glob("0*.bin"))


def decoded(result: Any) -> list[dict[str, Any]]:
    assert result.code == 0, result.err
    return [m for e in result.json()["entries"] for m in e["messages"]]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_what_pulsar_admin_prints_decodes_like_the_consumer(capsys, tmp_path) -> None:
    """`pulsar-admin schemas get TOPIC` (the latest, version 1) and `--version 0` (a
    SchemaInfo, which names no version) together decode both versions' messages."""
    doc = capture()
    latest = write(tmp_path, "latest.json", doc["pulsar_admin_schemas_get"]["latest"])
    v0 = write(tmp_path, "v0.json", doc["pulsar_admin_schemas_get"]["versions"]["0"])
    got = decoded(run(capsys, "decode", *ENTRIES, "--schema", latest, "--schema", v0, "-o", "json"))
    assert [m["value_decoded"] for m in got] == [r["value"] for r in doc["received"]]
    assert [m["schema_version"] for m in got] == [r["schema_version"] for r in doc["received"]]
    assert all(m["schema_type"] == "AVRO" and "value" in m for m in got)


def test_the_rest_apis_answers_decode_like_the_consumer(capsys, tmp_path) -> None:
    doc = capture()
    every = write(tmp_path, "all.json", json.dumps(doc["rest"]["schemas"]))
    got = decoded(run(capsys, "decode", *ENTRIES, "--schema", every, "-o", "json"))
    assert [m["value_decoded"] for m in got] == [r["value"] for r in doc["received"]]
    one = write(tmp_path, "one.json", json.dumps(doc["rest"]["schema"]))  # version 1 only
    got = decoded(run(capsys, "decode", *ENTRIES, "--schema", one, "-o", "json"))
    assert [m["value_decoded"] for m in got[4:]] == [r["value"] for r in doc["received"][4:]]
    # version 0's messages name a version the file does not hold: bytes, with a note
    assert all("value_decoded" in m and m["value_decoded"] is None for m in got[:4])
    assert all("version 0 is not in" in m["value_note"] for m in got[:4])


def test_a_schema_without_version_decodes_every_message(capsys, tmp_path) -> None:
    doc = capture()
    v0 = write(tmp_path, "v0.json", doc["pulsar_admin_schemas_get"]["versions"]["0"])
    res = run(capsys, "decode", *ENTRIES[:4], "--schema", v0, "--values", "decoded", "-o", "json")
    got = decoded(res)
    assert [m["value_decoded"] for m in got] == [r["value"] for r in doc["received"][:4]]
    assert all("value" not in m for m in got)  # --values decoded: the bytes dropped
    # version 1's messages do not decode with version 0's schema: an error, exit 1
    res = run(capsys, "decode", ENTRIES[5], "--schema", v0, "-o", "json")
    assert res.code == 1
    (m,) = [m for e in res.json()["entries"] for m in e["messages"]]
    assert m["value_decoded"] is None and "does not decode with its schema" in m["value_error"]


def test_schema_topic_reads_the_schema_storage(capsys, demo) -> None:
    doc = capture()
    got = decoded(run(capsys, "decode", *ENTRIES, "--schema-topic", "shop-orders", "-o", "json"))
    assert [m["value_decoded"] for m in got] == [r["value"] for r in doc["received"]]
    raw = decoded(run(capsys, "decode", *ENTRIES, "-o", "json"))
    assert all("value_decoded" not in m for m in raw)  # no schema: values stay bytes
    res = run(capsys, "decode", ENTRIES[0], "--schema-topic", "plain")
    assert res.code == 1 and res.err.count("\n") == 1 and "has no schema" in res.err


def test_the_tree_and_the_table_show_decoded_values(capsys, tmp_path) -> None:
    doc = capture()
    latest = write(tmp_path, "latest.json", doc["pulsar_admin_schemas_get"]["latest"])
    tree = run(capsys, "decode", ENTRIES[6], "--schema", latest, "-o", "tree")
    assert tree.code == 0 and "schema v1 AVRO" in tree.out, tree.err
    # field names are in no Avro value's bytes: only the decoded value shows them
    table = run(capsys, "decode", ENTRIES[6], "--schema", latest, "-o", "table")
    assert table.code == 0 and "coupon" in table.out and "qty" in table.out, table.err
    raw = run(capsys, "decode", ENTRIES[6], "-o", "table")
    assert raw.code == 0 and "coupon" not in raw.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--values", "decoded"], "needs a schema"),
        (["--values", "both"], "needs a schema"),
        (["--values", "raw", "--schema", "S"], "--values raw decodes no value"),
        (["--schema", "S", "--schema-topic", "t"], "not both"),
        (["--metadata-url", "rocksdb://x"], "give --schema-topic"),
        (["--bookie-dir", "x"], "give --schema-topic"),
        (["--schema", "S", "--depth", "metadata"], "--depth messages"),
        (["--schema", "NOPE"], "cannot read schema file"),
        (["--schema", "BAD"], "not JSON"),
        (["--schema", "ODD"], "not a schema as pulsar-admin prints it"),
        (["--schema", "S", "--schema", "S"], "given twice"),
    ],
)
def test_usage_errors_are_one_line(capsys, tmp_path, args, message) -> None:
    files = {
        "S": write(tmp_path, "s.json", capture()["pulsar_admin_schemas_get"]["latest"]),
        "BAD": write(tmp_path, "bad.json", "{nope"),
        "ODD": write(tmp_path, "odd.json", '{"hello": 1}'),
        "NOPE": tmp_path / "missing.json",
    }
    argv = [str(files.get(a, a)) for a in args]
    res = run(capsys, "decode", ENTRIES[0], *argv)
    assert res.code == 2, res.err
    assert res.err.startswith("ledgerctl: error: ") and res.err.count("\n") == 1
    assert message in res.err
    assert res.out == ""  # said before any entry was decoded


# -- the forms, one by one --------------------------------------------------------------------


def test_key_value_forms_rebuild_the_stored_definition() -> None:
    """A KEY_VALUE schema as pulsar-admin prints it ({"key": INFO, "value": INFO}) and as
    the REST API gives it (data {"key": .., "value": ..}): both decode INLINE values."""
    props = {
        "key.schema.name": "String",
        "key.schema.properties": "{}",
        "key.schema.type": "STRING",
        "kv.encoding.type": "INLINE",
        "value.schema.name": "INT64",
        "value.schema.properties": "{}",
        "value.schema.type": "INT64",
    }
    printed = {
        "version": 3,
        "schemaInfo": {
            "name": "kv",
            "schema": {
                "key": {"name": "String", "schema": "", "type": "STRING", "properties": {}},
                "value": {"name": "INT64", "schema": "", "type": "INT64", "properties": {}},
            },
            "type": "KEY_VALUE",
            "timestamp": 0,
            "properties": props,
        },
    }
    rest = {"version": 3, "type": "KEY_VALUE", "data": '{"key":"","value":""}', "properties": props}
    bare = {**printed["schemaInfo"], "properties": {}}  # the sub-schemas say their types
    value = struct.pack(">i", 2) + b"k1" + struct.pack(">i", 8) + struct.pack(">q", 7)
    for doc in (printed, rest, bare):
        ((version, schema),) = parse_schema_document(doc)
        assert schema.type is SchemaType.KEY_VALUE
        values = Values([schema]) if version is not None else Values([], None, schema)
        got = values.decode(version_bytes(3), value, None)
        assert got.decoded and got.value == {"key": "k1", "value": 7}, got


def test_protobuf_native_definitions_stay_text() -> None:
    definition = json.dumps({"fileDescriptorSet": "", "rootMessageTypeName": "x.Y"})
    ((_, printed),) = parse_schema_document({"type": "PROTOBUF_NATIVE", "schema": definition})
    assert printed.definition == definition.encode()
    ((_, avro),) = parse_schema_document({"type": "AVRO", "schema": {"type": "string"}})
    assert json.loads(avro.definition) == {"type": "string"}


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=12),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "version",
                        "schemaInfo",
                        "type",
                        "schema",
                        "data",
                        "properties",
                        "name",
                        "key",
                        "value",
                        "getSchemaResponses",
                        "timestamp",
                    ]
                ),
                children,
                max_size=5,
            )
        ),
        max_leaves=12,
    )
)
def test_any_json_is_a_schema_or_a_one_line_error(doc: Any) -> None:
    try:
        out = parse_schema_document(doc)
    except SchemaFileError as exc:
        assert "\n" not in str(exc)
        return
    for version, schema in out:
        assert version is None or version >= 0
        Values([schema]).decode(version_bytes(max(version or 0, 0)), b"\x00\x01", b"k")


def test_values_are_added_to_messages_written_one_at_a_time(capsys) -> None:
    """An entry of more than render.STREAM_MESSAGES messages has them written one at a
    time (render.Streamed); each still gains its decoded value, in order."""
    from pulsarctl_py.inspect import add_values
    from pulsarctl_py.render import STREAM_MESSAGES, Streamed, write_jsonl
    from pulsarctl_py.values import Decoded

    n = STREAM_MESSAGES + 5
    doc = {"entry_id": 0, "messages": Streamed({"value": "AA==", "i": i} for i in range(n))}
    decoded = [Decoded(0, "INT32", i, decoded=True) for i in range(n)]
    add_values(doc, decoded, "decoded")
    capsys.readouterr()
    write_jsonl([doc])
    (line,) = capsys.readouterr().out.splitlines()
    messages = json.loads(line)["messages"]
    assert [(m["i"], m["value_decoded"], m["schema_type"]) for m in messages] == [
        (i, i, "INT32") for i in range(n)
    ]
    assert not any("value" in m for m in messages)  # decoded: the bytes left out
