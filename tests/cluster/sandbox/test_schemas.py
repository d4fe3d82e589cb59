"""Values with schemas, against the real broker: what ledgerctl decodes from the stored
entries equals what the official consumers receive, message by message; the schema
storage ledgerctl reads is the one the broker wrote (live bookies and a stopped bookie's
directories). The topics: tests/support/schema_world.py."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from typing import Any

import pytest

from tests.support import schema_world
from tests.support.schema_world import SchemaWorld

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="session")
def schemas_world(sandbox) -> SchemaWorld:
    return schema_world.build(sandbox)


def ledgerctl(box: Any, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "pulsarctl_py.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=box.env(),
    )
    if check and done.returncode != 0:
        raise AssertionError(f"ledgerctl {' '.join(args)}: {done.returncode} {done.stderr}")
    return done


def messages(box: Any, topic: str, *extra: str) -> dict[str, dict[str, Any]]:
    """inspect -o jsonl of a topic: message id (L:E or L:E:B) -> its JSON."""
    done = ledgerctl(box, "inspect", "--topic", topic, "-o", "jsonl", *extra)
    out = {}
    for line in done.stdout.splitlines():
        for m in json.loads(line)["messages"]:
            out[m["message_id"]] = m
    return out


def short_id(message_id: str) -> str:
    ledger, entry, batch, _partition = message_id.split(":")
    return f"{ledger}:{entry}" if batch == "-1" else f"{ledger}:{entry}:{batch}"


# plain PROTOBUF is compared field by field in test_protobuf_values_top_level_fields
JAVA_TOPICS = sorted(n for n in schema_world.java_specs() if n != "protobuf")


@pytest.mark.parametrize(
    "name", [*JAVA_TOPICS, "py-avro", "py-json", "py-string", "py-protobuf-native"]
)
def test_decoded_values_equal_what_the_consumer_received(schemas_world, name) -> None:
    topic = SchemaWorld.topic(name)
    got = messages(schemas_world.sandbox, topic)
    received = schemas_world.received[topic]
    assert len(got) == len(received)
    for r in received:
        m = got[short_id(r["message_id"])]
        if name == "bytes":  # Schema.BYTES registers no schema: the value stays bytes
            assert "value_decoded" not in m and m["value"] == r["value"]
            continue
        assert m["value_decoded"] == r["value"], (name, r, m)
        assert "value_error" not in m
        if "schema_version" in r:
            assert m["schema_version"] == r["schema_version"]


def test_schema_evolution_two_versions(schemas_world) -> None:
    """Version 0 and 1 of the Avro topic; each message decoded with its writer's version."""
    topic = SchemaWorld.topic("avro")
    box = schemas_world.sandbox
    listed = json.loads(ledgerctl(box, "schema", "list", topic, "-o", "json").stdout)
    assert [(v["version"], v["type"], v["deleted"]) for v in listed["versions"]] == [
        (0, "AVRO", False),
        (1, "AVRO", False),
    ]
    shown = json.loads(
        ledgerctl(box, "schema", "show", topic, "--version", "1", "-o", "json").stdout
    )
    (v1,) = shown["versions"]
    assert v1["definition"] == schema_world.ORDER_V2
    assert (
        base64.b64decode(v1["definition_base64"])
        and v1["schema_id"] == f"{schema_world.NAMESPACE}/avro"
    )
    got = messages(box, topic)
    versions = sorted({m["schema_version"] for m in got.values()})
    assert versions == [0, 1]
    assert all(("qty" in m["value_decoded"]) == (m["schema_version"] == 1) for m in got.values())


def test_protobuf_values_top_level_fields(schemas_world) -> None:
    """PROTOBUF: the schema stores top-level field numbers only; scalar fields decode as
    the consumer's class reads them, enums as numbers, nested messages as their bytes."""
    topic = SchemaWorld.topic("protobuf")
    got = messages(schemas_world.sandbox, topic)
    for r in schemas_world.received[topic]:
        m = got[short_id(r["message_id"])]["value_decoded"]
        for name in ("schema_id", "user", "schema", "timestamp", "deleted"):
            assert m[name] == r["value"][name]
        assert m["type"] == 5  # AVRO in SchemaRegistryFormat.SchemaInfo.SchemaType
        (prop,) = m["props"]
        from pulsarctl_py.proto import schema_storage_pb2 as sspb

        pair = sspb.SchemaInfo.KeyValuePair.FromString(base64.b64decode(prop))
        assert {"key": pair.key, "value": pair.value} == r["value"]["props"][0]


def test_where_finds_a_message_by_a_field_of_its_value(schemas_world) -> None:
    topic = SchemaWorld.topic("avro")
    got = messages(schemas_world.sandbox, topic, "--where", "id=42", "--where", "customer.name=c2")
    assert [m["value_decoded"]["item"] for m in got.values()] == ["item-2"]
    got = messages(schemas_world.sandbox, SchemaWorld.topic("kv-separated"), "--where", "key=kv1")
    assert [m["value_decoded"]["value"] for m in got.values()] == [10**12 + 1]


def test_values_raw_and_decoded_modes(schemas_world) -> None:
    topic = SchemaWorld.topic("json")
    raw = messages(schemas_world.sandbox, topic, "--values", "raw")
    assert all("value_decoded" not in m and m["value"] for m in raw.values())
    decoded = messages(schemas_world.sandbox, topic, "--values", "decoded")
    assert all("value" not in m and m["value_decoded"]["kind"] for m in decoded.values())


def test_schema_from_a_stopped_bookies_directories(schemas_world) -> None:
    """The schema ledger's entry read offline from a bookie that holds it."""
    box = schemas_world.sandbox
    topic = SchemaWorld.topic("json")
    live = json.loads(ledgerctl(box, "schema", "show", topic, "-o", "json").stdout)
    (version,) = live["versions"]
    meta = json.loads(
        ledgerctl(box, "ledger", "meta", str(version["ledger_id"]), "-o", "json").stdout
    )
    ensemble = meta["metadata"]["ensembles"]["0"]
    holder = ensemble[0]  # entry 0 is on the first bookies of the ensemble (write quorum 2)
    bookie = next(b for b in box.bookies if b["id"] == holder)
    with box.bookie_stopped(holder):
        dirs = [a for d in bookie["ledger_dirs"] for a in ("--bookie-dir", d)]
        offline = json.loads(ledgerctl(box, "schema", "show", topic, *dirs, "-o", "json").stdout)
    assert offline == live


def test_parquet_has_typed_columns_from_the_schema(schemas_world, tmp_path) -> None:
    """AVRO's two versions merge into the latest (older rows read its defaults), JSON is a
    struct of its fields, primitives keep their type, KeyValue is JSON text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    box = schemas_world.sandbox

    def export(name: str) -> Any:
        path = tmp_path / f"{name}.parquet"
        ledgerctl(box, "export", SchemaWorld.topic(name), "--to", str(path), "-o", "json")
        return pq.read_table(path)

    avro = export("avro")
    kind = avro.schema.field("value_decoded").type
    assert kind == pa.struct(
        [
            ("id", pa.int64()),
            ("item", pa.string()),
            ("price", pa.float64()),
            ("customer", pa.struct([("name", pa.string()), ("tags", pa.list_(pa.string()))])),
            ("qty", pa.int32()),
            ("code", pa.binary()),
        ]
    )
    rows = avro.to_pylist()
    assert [(r["schema_version"], r["value_decoded"]["qty"]) for r in rows] == [
        (0, 1),
        (0, 1),
        (0, 1),
        (1, 3),
        (1, 4),
        (1, 5),
    ]
    assert rows[4]["value_decoded"]["customer"] == {"name": "c4", "tags": ["a"]}
    json_table = export("json")
    assert json_table.schema.field("value_decoded").type == pa.struct(
        [("kind", pa.string()), ("n", pa.int32())]
    )
    assert export("int64").schema.field("value_decoded").type == pa.int64()
    kv = export("kv-inline")
    assert kv.schema.field("value_decoded").type == pa.string()
    assert json.loads(kv.to_pylist()[0]["value_decoded"]) == {"key": "kv0", "value": 10**12}


def _stored_entries(box: Any, topic: str, out: Any) -> list[str]:
    """Every stored entry of the topic, as bookie entries in files (read from the running
    bookies, digests verified): the inputs of `ledgerctl decode`."""
    from pulsarctl_py import precedence
    from pulsarctl_py.decoders import Depth
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.stores.metadata import read_managed_ledger

    files = []
    with (
        precedence.flags(bookkeeper_metadata_url=box.bookkeeper_metadata_url),
        LedgerSource.open(box.metadata_url, [], need_metadata=True) as source,
    ):
        record = read_managed_ledger(source.metadata, topic, with_cursors=False)
        assert record is not None
        for ledger_id in record.ledger_ids:
            view = source.ledger(ledger_id)
            if view.readable_last is None:
                continue
            for entry in source.entries(view, 0, view.readable_last, depth=Depth.ENTRY):
                path = out / f"{ledger_id}-{entry.position[1]}.bin"
                path.write_bytes(bytes(entry.data))
                files.append(str(path))
    return files


#: every topic with a schema (BYTES registers none)
SCHEMA_TOPICS = [
    n
    for n in [*sorted(schema_world.java_specs()), "py-avro", "py-json", "py-string"]
    if n != "bytes"
] + ["py-protobuf-native"]


def test_decode_with_what_pulsar_admin_prints(schemas_world, tmp_path) -> None:
    """Every schema type: `decode --schema` given what `pulsar-admin schemas get` prints
    (the latest version with its number; older versions as `--version V` prints them,
    with their number), or the admin REST API's every-version answer, decodes each stored
    entry exactly as inspect decodes it from the schema storage."""
    box = schemas_world.sandbox
    topics = [SchemaWorld.topic(n) for n in SCHEMA_TOPICS]
    printed = box.java("schema-admin-get", {"web_url": box.web_url, "topics": topics})["all"]
    for name, topic, admin in zip(SCHEMA_TOPICS, topics, printed, strict=True):
        folder = tmp_path / name
        folder.mkdir()
        entries = _stored_entries(box, topic, folder)
        latest = json.loads(admin["latest"])
        files = [folder / "latest.json"]
        files[0].write_text(admin["latest"])
        for version, text in admin["versions"].items():
            if int(version) != latest["version"]:
                path = folder / f"v{version}.json"
                path.write_text(
                    json.dumps({"version": int(version), "schemaInfo": json.loads(text)})
                )
                files.append(path)
        rest = folder / "rest.json"
        rest.write_text(
            json.dumps(
                box.admin("GET", f"/schemas/public/schemas/{topic.rsplit('/', 1)[1]}/schemas")
            )
        )
        expected = messages(box, topic)
        for schema_args in (
            [a for f in files for a in ("--schema", str(f))],
            ["--schema", str(rest)],
        ):
            done = ledgerctl(box, "decode", *entries, *schema_args, "-o", "json")
            got = {
                m["message_id"]: m
                for e in json.loads(done.stdout)["entries"]
                for m in e["messages"]
            }
            assert sorted(got) == sorted(expected), name
            for mid, m in expected.items():
                assert got[mid]["value_decoded"] == m["value_decoded"], (name, mid, schema_args)
                assert got[mid]["schema_version"] == m["schema_version"], (name, mid)
