"""`ledgerctl export` and the ledgerctl Spark data source, on both engines, on the demo data.

The reference is `inspect` (one process, one chunk assembler, no splits): every message it
decodes must be one exported row with the same fields, whatever the engine and however
small the splits. The engines must write the same bytes.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.demo import DemoSummary, create_demo
from pulsarctl_py.engines import LocalEngine, build_scan_plan
from pulsarctl_py.export import (
    COLUMN_NAMES,
    ENCRYPTED_NOTE,
    MESSAGE_COLUMNS,
    RowFilters,
    ValueOptions,
    export_plan,
    split_rows,
    topic_plan,
)
from pulsarctl_py.ledgers import LedgerSource
from tests.support.cli_helpers import ledgerctl_script, run

TOPICS = ["batched", "chunked", "tombstones", "with-index"]
ENTRY_COLUMNS = tuple(c for c in COLUMN_NAMES if c not in MESSAGE_COLUMNS)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoSummary, Path]:
    root = tmp_path_factory.mktemp("export") / "demo"
    return create_demo(root), root


def stores(root: Path) -> tuple[str, list[str]]:
    return f"rocksdb://{root / 'metadata'}", [str(root / "bookkeeper")]


def flags(root: Path) -> list[str]:
    url, dirs = stores(root)
    return ["--metadata-url", url, "--bookie-dir", dirs[0]]


def plan_of(root: Path, topic: str, split_entries: int = 10_000) -> Any:
    url, dirs = stores(root)
    with LedgerSource.open(url, dirs) as source:
        return topic_plan(
            source, topic, metadata_url=url, bookie_dirs=dirs, split_entries=split_entries
        )


def inspect_rows(root: Path, topic: str) -> list[dict[str, Any]]:
    """What inspect decodes, shaped as export rows (the message columns that matter)."""
    from pulsarctl_py.inspect import inspect
    from pulsarctl_py.inspect_request import InspectRequest, Summary

    url, dirs = stores(root)
    out = []
    with LedgerSource.open(url, dirs) as source:
        for _view, entry in inspect(source, InspectRequest(topic=topic), Summary()):
            for m in entry.messages:
                out.append(
                    {
                        "ledger_id": m.ledger_id,
                        "entry_id": m.entry_id,
                        "batch_index": None if m.batch_index < 0 else m.batch_index,
                        "key": m.key,
                        "value": None if m.value is None else base64.b64encode(m.value).decode(),
                        "properties": m.properties,
                        "publish_time": m.publish_time,
                        "event_time": m.event_time,
                        "index": m.index,
                        "null_value": m.null_value,
                    }
                )
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- the behaviour suite: both engines ------------------------------------------------------


@pytest.mark.parametrize("topic", TOPICS)
def test_export_has_exactly_inspects_messages(demo, engine, topic, tmp_path):
    _summary, root = demo
    expected = inspect_rows(root, topic)
    assert expected, f"the demo topic {topic} has messages"
    # one entry per split: chunked messages straddle splits, the reader must join them
    plan = plan_of(root, topic, split_entries=1)
    result = export_plan(plan, engine, tmp_path / "out.jsonl")
    rows = read_jsonl(tmp_path / "out.jsonl")
    assert result.engine == engine.name and result.rows == len(rows)
    got = [{k: r[k] for k in expected[0]} for r in rows]
    assert got == expected
    assert {r["topic"] for r in rows} == {f"persistent://public/default/{topic}"}
    assert all(r["problems"] == [] for r in rows)


def test_encrypted_topic_rows_say_why_values_are_missing(demo, engine, tmp_path):
    _summary, root = demo
    plan = plan_of(root, "encrypted")
    export_plan(plan, engine, tmp_path / "enc.parquet")
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "enc.parquet").to_pylist()
    assert rows and all(r["value"] is None and ENCRYPTED_NOTE in r["problems"] for r in rows)


def test_encrypted_rows_keep_what_is_stored_in_plain_text(demo, capsys, tmp_path):
    """Without the key: a single message's key and properties are in its metadata, in
    plain text, and exported; with --private-key every value is opened, as inspect opens
    them with the same key."""
    from tests.support.cli_helpers import KEYS

    _summary, root = demo
    out = tmp_path / "sealed.jsonl"
    result = run(capsys, "export", "encrypted", "--to", out, *flags(root), "-o", "json")
    assert result.code == 0, result.err
    sealed = read_jsonl(out)
    singles = [r for r in sealed if r["batch_index"] is None]
    assert singles and all(r["key"] and r["value"] is None for r in singles)
    assert all(ENCRYPTED_NOTE in r["problems"] for r in sealed)
    opened_path = tmp_path / "opened.jsonl"
    key = KEYS / "rsa_private.pem"
    result = run(
        capsys, "export", "encrypted", "--to", opened_path, *flags(root), "--private-key", key
    )
    assert result.code == 0, result.err
    opened = read_jsonl(opened_path)
    shown = run(
        capsys, "inspect", "--topic", "encrypted", *flags(root), "--private-key", key, "-o", "jsonl"
    )
    expected = [m for line in shown.out.splitlines() for m in json.loads(line)["messages"]]
    assert [r["value"] for r in opened] == [m["value"] for m in expected]
    assert all(r["value"] is not None and r["problems"] == [] for r in opened)
    by_key = {r["key"]: r for r in opened if r["batch_index"] is None}
    assert {r["key"]: r["properties"] for r in singles} == {
        k: by_key[k]["properties"] for k in (r["key"] for r in singles)
    }


def test_filters_as_inspect(demo, engine, tmp_path):
    _summary, root = demo
    everything = inspect_rows(root, "batched")
    key = everything[3]["key"]
    since = sorted({r["publish_time"] for r in everything})[1]
    plan = plan_of(root, "batched", split_entries=3)
    export_plan(plan, engine, tmp_path / "k.jsonl", filters=RowFilters(key=key, since=since))
    rows = read_jsonl(tmp_path / "k.jsonl")
    expected = [r for r in everything if r["key"] == key and r["publish_time"] >= since]
    assert [(r["ledger_id"], r["entry_id"], r["batch_index"]) for r in rows] == [
        (r["ledger_id"], r["entry_id"], r["batch_index"]) for r in expected
    ]
    assert rows  # the filter kept something, so the comparison meant something


def test_the_cli_writes_the_same_file_on_both_engines(demo, spark, capsys, tmp_path):
    _summary, root = demo
    files = {}
    for args in (["--engine", "local"], ["--spark"]):
        for ext in ("jsonl", "parquet"):
            target = tmp_path / f"{args[-1].strip('-')}.{ext}"
            res = run(
                capsys,
                "export",
                "chunked",
                "--to",
                target,
                "--split-entries",
                "2",
                "-o",
                "json",
                *flags(root),
                *args,
            )
            assert res.code == 0, res.err
            assert res.json()["engine"] == ("local" if "local" in args else "spark")
            files[(args[-1], ext)] = target
    assert files[("local", "jsonl")].read_bytes() == files[("--spark", "jsonl")].read_bytes()
    import pyarrow.parquet as pq

    local = pq.read_table(files[("local", "parquet")])
    on_spark = pq.read_table(files[("--spark", "parquet")])
    assert local.equals(on_spark) and local.num_rows == len(inspect_rows(root, "chunked"))


# -- decoded values: the demo's Avro topic (two versions) ---------------------------------------


def schema_values(root: Path, topic: str = "shop-orders") -> Any:
    from pulsarctl_py.values import values_for

    url, dirs = stores(root)
    with LedgerSource.open(url, dirs) as source:
        return values_for(source, topic, required=True)


def inspected_values(capsys, root: Path, topic: str = "shop-orders") -> list[dict[str, Any]]:
    res = run(capsys, "inspect", "--topic", topic, "-o", "jsonl", *flags(root))
    assert res.code == 0, res.err
    return [m for line in res.out.splitlines() for m in json.loads(line)["messages"]]


def test_decoded_values_as_inspect_decodes_them(demo, engine, capsys, tmp_path):
    """JSON lines: each value as its writer's version decodes it, as inspect gives it.
    Parquet: one struct of the latest version, version 0's rows reading its defaults."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pulsarctl_py.export import VALUE_COLUMNS
    from pulsarctl_py.value_columns import value_column

    _summary, root = demo
    values = schema_values(root)
    expected = inspected_values(capsys, root)
    plan = plan_of(root, "shop-orders", split_entries=2)
    cols = COLUMN_NAMES + VALUE_COLUMNS
    options = ValueOptions(values)
    export_plan(plan, engine, tmp_path / "v.jsonl", columns=cols, values=options)
    rows = read_jsonl(tmp_path / "v.jsonl")
    assert [r["value_decoded"] for r in rows] == [m["value_decoded"] for m in expected]
    assert [r["schema_version"] for r in rows] == [0, 0, 0, 0, 1, 1, 1]
    column = value_column(values)
    assert column.kind == "avro" and column.note is None
    result = export_plan(
        plan, engine, tmp_path / "v.parquet", columns=cols, values=ValueOptions(values, column)
    )
    assert result.files == [
        {"path": str(tmp_path / "v.parquet"), "rows": 7, "schema_version": None}
    ]
    table = pq.read_table(tmp_path / "v.parquet")
    kind = table.schema.field("value_decoded").type
    assert kind.names == ["id", "item", "price", "customer", "qty", "coupon"]
    assert kind.field("customer").type == pa.struct([("name", pa.string()), ("email", pa.string())])
    got = table.to_pylist()
    for row, m in zip(got, expected, strict=True):
        defaults = {"qty": 1, "coupon": None} if m["schema_version"] == 0 else {}
        assert row["value_decoded"] == {**m["value_decoded"], **defaults}


def test_versions_avro_cannot_merge_go_to_a_file_each(demo, engine, tmp_path):
    """Version 1 without the default of qty cannot read version 0's values (Avro's
    resolution rules): each version's rows go to a file typed by that version."""
    import pyarrow.parquet as pq

    from pulsarctl_py.export import VALUE_COLUMNS
    from pulsarctl_py.value_columns import value_column

    _summary, root = demo
    values = schema_values(root)
    v1 = json.loads(values.schemas[1].definition)
    for f in v1["fields"]:
        f.pop("default", None) if f["name"] == "qty" else None
    values.schemas[1].definition = json.dumps(v1).encode()
    column = value_column(values)
    assert column.kind == "split" and sorted(column.versions) == [0, 1]
    assert "schema version 0 cannot be read with version 1" in (column.note or "")
    plan = plan_of(root, "shop-orders", split_entries=3)
    target = tmp_path / "orders.parquet"
    result = export_plan(
        plan,
        engine,
        target,
        columns=COLUMN_NAMES + VALUE_COLUMNS,
        values=ValueOptions(values, column),
    )
    v0, v1_path = tmp_path / "orders.v0.parquet", tmp_path / "orders.v1.parquet"
    assert result.files == [
        {"path": str(target), "rows": 0, "schema_version": None},
        {"path": str(v0), "rows": 4, "schema_version": 0},
        {"path": str(v1_path), "rows": 3, "schema_version": 1},
    ]
    assert result.rows == 7 and result.ok
    main, first, second = (pq.read_table(p) for p in (target, v0, v1_path))
    assert main.num_rows == 0 and str(main.schema.field("value_decoded").type) == "string"
    assert first.schema.field("value_decoded").type.names == ["id", "item", "price", "customer"]
    assert second.schema.field("value_decoded").type.names[-2:] == ["qty", "coupon"]
    assert [r["value_decoded"]["qty"] for r in second.to_pylist()] == [1, 2, 3]
    assert [r["entry_id"] for r in first.to_pylist()] == [0, 1, 2, 3]
    meta = json.loads(main.schema.metadata[b"ledgerctl.values"])
    assert meta["version_files"] == {"0": "orders.v0.parquet", "1": "orders.v1.parquet"}
    # a second export replaces its own files (they are recognised as exports)
    again = export_plan(
        plan,
        engine,
        target,
        columns=COLUMN_NAMES + VALUE_COLUMNS,
        values=ValueOptions(values, column),
    )
    assert again.files == result.files


def test_a_split_export_refuses_a_stream_and_foreign_files(demo, capsys, tmp_path):
    from pulsarctl_py import outputs
    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.export import VALUE_COLUMNS, export_output_kind, version_outputs
    from pulsarctl_py.value_columns import value_column

    _summary, root = demo
    values = schema_values(root)
    v1 = json.loads(values.schemas[1].definition)
    v1["fields"][0]["type"] = "string"  # id: long -> string, beyond Avro's promotions
    values.schemas[1].definition = json.dumps(v1).encode()
    column = value_column(values)
    assert column.kind == "split"
    cols = COLUMN_NAMES + VALUE_COLUMNS
    (tmp_path / "mine.v1.parquet").write_text("not an export")
    out = outputs.prepare(tmp_path / "mine.parquet", export_output_kind())
    with pytest.raises(LedgerctlError, match=r"will not overwrite .*mine\.v1\.parquet"):
        version_outputs(out, column, cols)
    out.discard()
    assert (tmp_path / "mine.v1.parquet").read_text() == "not an export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.v1.parquet"]
    assert version_outputs(out, column, ("ledger_id", "value")) == {}  # no value column
    # a FIFO named *.parquet is streamed into: no file can be put beside it
    fifo = tmp_path / "pipe.parquet"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        stream = outputs.prepare(fifo, export_output_kind())
        with pytest.raises(LedgerctlError, match="name a file, not a device or FIFO"):
            version_outputs(stream, column, cols)
        stream.discard()
    finally:
        os.close(reader)


# -- column pruning ---------------------------------------------------------------------------


def test_entry_level_columns_never_decompress(demo, monkeypatch):
    """The reader executors run: entry columns only, and no payload is decompressed."""
    from pulsarctl_py.decoders import entry as entry_module

    _summary, root = demo
    calls = []
    real = entry_module.decompress

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(entry_module, "decompress", counting)
    for topic in ("batched", "with-index", "chunked"):
        plan = plan_of(root, topic, split_entries=2)
        pruned = [r for s in plan.splits for r in split_rows(s, ENTRY_COLUMNS)]
        assert calls == [], f"{topic}: entry-level columns decompressed payloads"
        full = [r for s in plan.splits for r in split_rows(s)]
        assert calls, f"{topic}: a full read must decompress (else this test proves nothing)"
        calls.clear()
        at = [COLUMN_NAMES.index(c) for c in ENTRY_COLUMNS]
        assert pruned == [tuple(r[i] for i in at) for r in full]


# -- the data source -------------------------------------------------------------------------


def test_data_source_reads_a_topic_and_prunes_by_schema(demo, spark):
    _summary, root = demo
    url, dirs = stores(root)
    reader = (
        spark.read.format("ledgerctl")
        .option("topic", "persistent://public/default/with-index")
        .option("metadata-url", url)
        .option("bookie-dir", dirs[0])
        .option("split-entries", "2")
    )
    df = reader.load()
    assert df.columns == list(COLUMN_NAMES)
    plan = plan_of(root, "with-index", split_entries=2)
    local = [r for s in plan.splits for r in split_rows(s)]
    assert df.rdd.getNumPartitions() == len(plan.splits) > 1
    rows = [tuple(r) for r in df.collect()]
    assert [r[:4] + r[5:] for r in rows] == [
        r[:4] + r[5:] for r in local
    ]  # the value column compares as bytes below
    assert [bytes(r[5]) if r[5] is not None else None for r in rows] == [r[5] for r in local]
    narrow = reader.schema("ledger_id bigint, entry_id bigint, index bigint").load()
    assert [tuple(r) for r in narrow.collect()] == [(r[1], r[2], r[10]) for r in local]


def test_data_source_reads_one_ledger_and_refuses_bad_options(demo, spark):
    summary, root = demo
    url, dirs = stores(root)
    ledger = summary.topic("plain").ledgers[0].ledger_id
    df = (
        spark.read.format("ledgerctl")
        .option("ledger", str(ledger))
        .option("metadata-url", url)
        .option("bookie-dir", dirs[0])
        .load()
    )
    ids = [(r.ledger_id, r.entry_id) for r in df.select("ledger_id", "entry_id").collect()]
    assert ids == [(ledger, e) for e in range(len(ids))] and ids
    with pytest.raises(Exception, match='give the option "topic" or "ledger"'):
        spark.read.format("ledgerctl").option("metadata-url", url).load().collect()
    with pytest.raises(Exception, match="unknown column"):
        spark.read.format("ledgerctl").schema("nope int").option("ledger", "1").load().collect()


#: the struct of shop-orders' values: its latest schema (version 0's rows read its defaults)
ORDER = (
    "struct<id:bigint,item:string,price:double,customer:struct<name:string,email:string>,"
    "qty:int,coupon:string>"
)


def spark_types(df: Any) -> dict[str, str]:
    return {f.name: f.dataType.simpleString() for f in df.schema.fields}


def sent_values() -> list[tuple[str, Any]]:
    """(key, value) of each message the official producer sent to the demo's Avro topic
    (its capture), in the order it sent them; unions as Avro's JSON encoding writes them."""
    folder = Path(__file__).resolve().parent.parent / "pulsarctl_py/demo/entries/shop-orders"
    capture = json.loads((folder / "capture.json").read_text())
    return [(m["key"], m["value"]) for sent in capture["sent"] for m in sent["messages"]]


def test_data_source_value_is_the_typed_value(demo, spark):
    """The Avro topic: ``value`` is the struct of its latest schema (the versions merge),
    each row as the local read decodes it; the payload bytes are ``value_bytes``. Each
    choice of the option ``values`` gives its columns; a user schema names the new ones."""
    from pulsarctl_py.export import VALUE_COLUMNS
    from pulsarctl_py.spark import VALUE_COLUMNS as SPARK_VALUE_COLUMNS
    from pulsarctl_py.value_columns import value_column

    assert SPARK_VALUE_COLUMNS == ("value_bytes", "schema_version", "schema_type")
    _summary, root = demo
    url, dirs = stores(root)

    def reader(values: str | None = None) -> Any:
        # a DataFrameReader keeps what .schema() and .option() set: a new one each time
        r = (
            spark.read.format("ledgerctl")
            .option("topic", "persistent://public/default/shop-orders")
            .option("metadata-url", url)
            .option("bookie-dir", dirs[0])
            .option("split-entries", "2")
        )
        return r if values is None else r.option("values", values)

    df = reader().load()
    assert df.columns == list(COLUMN_NAMES + SPARK_VALUE_COLUMNS)
    types = spark_types(df)
    assert (types["value"], types["value_bytes"]) == (ORDER, "binary")
    assert (types["schema_version"], types["schema_type"]) == ("bigint", "string")
    assert spark_types(reader("both").load()) == types
    values = schema_values(root)
    options = ValueOptions(values, value_column(values))
    plan = plan_of(root, "shop-orders", split_entries=2)
    cols = COLUMN_NAMES + VALUE_COLUMNS
    local = [
        dict(zip(cols, r, strict=True))
        for s in plan.splits
        for r in split_rows(s, cols, values=options)
    ]
    got = [r.asDict(recursive=True) for r in df.collect()]
    assert len(got) == len(local) == 7
    for row, want in zip(got, local, strict=True):
        row, want = dict(row), dict(want)
        assert row.pop("value") == want.pop("value_decoded")
        assert bytes(row.pop("value_bytes")) == want.pop("value")
        row["properties"] = dict(row["properties"])
        assert row == want
    # each row's value is what the producer sent (version 0's rows with 1.x's defaults)
    sent = sent_values()
    assert [r["key"] for r in got] == [k for k, _ in sent]
    for row, (_key, value) in zip(got, sent, strict=True):
        fields = ("id", "item", "price", "qty")
        assert [row["value"][f] for f in fields] == [value.get(f, 1) for f in fields]
        assert row["value"]["customer"]["name"] == value["customer"]["name"]
        email = value["customer"]["email"]
        assert row["value"]["customer"]["email"] == (email and email["string"])
    ids = df.where("value.id = 42").select("entry_id", "schema_version", "value.qty")
    assert [tuple(r) for r in ids.collect()] == [(2, 0, 1), (1, 1, 2)]

    # decoded: the typed value, no payload bytes
    decoded = reader("decoded").load()
    assert decoded.columns == list((*COLUMN_NAMES, "schema_version", "schema_type"))
    assert spark_types(decoded)["value"] == ORDER
    assert [r.value.item for r in decoded.select("value").collect()] == [
        r["value"]["item"] for r in got
    ]
    with pytest.raises(Exception, match="no column value_bytes with the option values decoded"):
        reader("decoded").schema("value_bytes binary").load().collect()
    with pytest.raises(Exception, match="with the option values decoded, not binary: use the"):
        reader("decoded").schema("value binary").load().collect()
    # raw: the payload bytes in value, no value columns
    raw = reader("raw").load()
    assert raw.columns == list(COLUMN_NAMES) and spark_types(raw)["value"] == "binary"
    payloads = [r["value"] for r in local]
    assert [bytes(r.value) for r in raw.select("value").collect()] == payloads

    # a user schema: the new names, value binary as values raw gives it
    narrow = reader().schema("entry_id bigint, schema_version bigint, value_bytes binary").load()
    assert [(r[0], r[1], bytes(r[2])) for r in narrow.collect()] == [
        (r["entry_id"], r["schema_version"], r["value"]) for r in local
    ]
    as_bytes = reader().schema("entry_id bigint, value binary").load()
    assert [bytes(r.value) for r in as_bytes.collect()] == payloads
    typed = reader().schema(f"value {ORDER}, schema_type string").load()
    assert [(r.value.id, r.schema_type) for r in typed.collect()] == [
        (r["value"]["id"], "AVRO") for r in got
    ]
    with pytest.raises(Exception, match=f"column value is {ORDER}, not string"):
        reader().schema("value string").load().collect()
    with pytest.raises(Exception, match="the decoded value is the column value, its payload"):
        reader().schema("value_decoded string").load().collect()

    def plain() -> Any:
        reader = spark.read.format("ledgerctl").option("topic", "plain")
        return reader.option("metadata-url", url).option("bookie-dir", dirs[0])

    # no schema: value is the payload bytes, no value columns
    assert plain().load().columns == list(COLUMN_NAMES)
    assert spark_types(plain().load())["value"] == "binary"
    with pytest.raises(Exception, match="has no schema"):
        plain().option("values", "decoded").load().collect()
    with pytest.raises(Exception, match=r"no value columns .*: the topic has no schema"):
        plain().schema("value_bytes binary").load().collect()


def rows_in_process(root: Path, **options: str) -> tuple[Any, list[dict[str, Any]]]:
    """The data source's schema and rows as Spark's Python workers make them (the same
    calls, in this process: a patched schema reaches them)."""
    from pulsarctl_py.spark import LedgerctlDataSource

    url, dirs = stores(root)
    source = LedgerctlDataSource(
        {"topic": "shop-orders", "metadata-url": url, "bookie-dir": dirs[0], **options}
    )
    schema = source.schema()
    reader = source.reader(schema)
    rows = [r for p in reader.partitions() for r in reader.read(p)]
    return schema, [dict(zip(schema.fieldNames(), r, strict=True)) for r in rows]


def patch_schemas(monkeypatch: pytest.MonkeyPatch, change: Any) -> None:
    """Change the topic's schema versions as the data source reads them."""
    from pulsarctl_py import values as module

    real = module.values_for

    def changed(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        if got is not None:
            change(got)
        return got

    monkeypatch.setattr(module, "values_for", changed)


def test_data_source_keeps_an_undecodable_value_as_bytes(demo, monkeypatch):
    """Version 0 given a trailing field without a default (still mergeable into version
    1): its messages do not decode. Their value is null, their bytes in value_bytes, the
    error in problems; version 1's values stay typed."""
    _summary, root = demo

    def trailing_field(values: Any) -> None:
        v0 = json.loads(values.schemas[0].definition)
        v0["fields"].append({"name": "extra", "type": "string"})
        values.schemas[0].definition = json.dumps(v0).encode()

    patch_schemas(monkeypatch, trailing_field)
    schema, rows = rows_in_process(root)
    assert schema["value"].dataType.simpleString() == ORDER
    assert [r["schema_version"] for r in rows] == [0, 0, 0, 0, 1, 1, 1]
    for row in rows:
        assert isinstance(row["value_bytes"], bytes) and row["value_bytes"]
        errors = [p for p in row["problems"] if p.startswith("error: value: ")]
        if row["schema_version"] == 0:
            assert row["value"] is None and len(errors) == 1, row
        else:
            assert row["value"]["id"] in (44, 42, 45) and not errors, row


def test_data_source_gives_versions_that_do_not_merge_as_json_text(demo, monkeypatch, capsys):
    """Version 1 without the default of qty cannot read version 0's values: one DataFrame
    has one type, so value is JSON text, each value as its writer's version decodes it."""
    _summary, root = demo
    expected = inspected_values(capsys, root)

    def no_default(values: Any) -> None:
        v1 = json.loads(values.schemas[1].definition)
        for f in v1["fields"]:
            f.pop("default", None) if f["name"] == "qty" else None
        values.schemas[1].definition = json.dumps(v1).encode()

    patch_schemas(monkeypatch, no_default)
    for choice in ("auto", "decoded"):
        schema, rows = rows_in_process(root, values=choice)
        assert schema["value"].dataType.simpleString() == "string"
        assert [json.loads(r["value"]) for r in rows] == [m["value_decoded"] for m in expected]
        assert ("value_bytes" in schema.fieldNames()) == (choice == "auto")
    assert [r["schema_type"] for r in rows] == ["AVRO"] * 7


# -- the Spark engine behind the boundary ----------------------------------------------------


def _records(split):
    for entry in range(split.first_entry, split.last_entry + 1):
        key = b"k%d" % ((entry * 7 + split.ledger_id) % 5)
        rank = split.ledger_id.to_bytes(8, "big") + entry.to_bytes(8, "big")
        yield key, rank, (entry + split.ledger_id) % 4 == 0


def _clear_on_tombstone(state, rank, tombstone):
    # order-dependent: a tombstone clears the key, then the next record wins whatever its rank
    if state is None or state[1] or rank > state[0]:
        return (rank, tombstone)
    return state


def _double(split):
    yield split.ordinal, split.first_entry, split.last_entry


def test_spark_engine_equals_the_local_engine(spark):
    from pulsarctl_py.engines.spark import SparkEngine

    plan = build_scan_plan("t", [(1, 23, None), (4, 17, None)], split_entries=4)
    local, on_spark = LocalEngine(), SparkEngine(spark, wave=3)
    assert list(on_spark.map_splits(plan, _double)) == list(local.map_splits(plan, _double))
    for fold in (None, _clear_on_tombstone):
        a = local.latest_per_key(plan, _records, fold=fold)
        b = on_spark.latest_per_key(plan, _records, fold=fold, memory=1)  # spills on the driver
        assert list(a.items()) == list(b.items()) and len(a) == 5 and b.spilled


# -- the CLI's choices and its failures ------------------------------------------------------


def test_auto_uses_spark_from_the_threshold_on(demo, spark, capsys, tmp_path, monkeypatch):
    from pulsarctl_py.engines.select import ENV_SPARK_THRESHOLD, pick

    assert pick("auto", 10, 11) == "local" and pick("auto", 11, 11) == "spark"
    assert pick("local", 10**9, 0) == "local"
    _summary, root = demo
    res = run(capsys, "export", "plain", "--to", tmp_path / "a.jsonl", "-o", "json", *flags(root))
    assert res.code == 0 and res.json()["engine"] == "local"
    monkeypatch.setenv(ENV_SPARK_THRESHOLD, "1")
    res = run(capsys, "export", "plain", "--to", tmp_path / "b.jsonl", "-o", "json", *flags(root))
    assert res.code == 0 and res.json()["engine"] == "spark", res.err
    monkeypatch.setenv(ENV_SPARK_THRESHOLD, "lots")
    res = run(capsys, "export", "plain", "--to", tmp_path / "c.jsonl", *flags(root))
    assert res.code == 2 and "LEDGERCTL_SPARK_THRESHOLD" in res.err


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["nosuch", "--to", "x.jsonl"], 1, "not found"),
        (["plain", "--to", "x.csv"], 2, ".parquet or .jsonl"),
        (["plain", "--to", "x.jsonl", "--columns", "key,nope"], 2, "unknown column"),
        (["plain", "--to", "x.jsonl", "--spark", "--engine", "local"], 2, "contradict"),
        (["plain", "--to", "x.jsonl", "--spark-conf", "novalue"], 2, "KEY=VALUE"),
        (["plain", "--to", "no/such/dir/x.jsonl", "--engine", "local"], 2, "no such directory"),
    ],
)
def test_bad_input_is_one_line(demo, capsys, tmp_path, monkeypatch, args, code, message):
    _summary, root = demo
    monkeypatch.chdir(tmp_path)
    res = run(capsys, "export", *args, *flags(root))
    assert res.code == code and message in res.err and len(res.err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_help_stays_fast_without_pyspark():
    code = (
        "import sys; from pulsarctl_py.cli import main; main(['export', '--help']); "
        "heavy = [m for m in ('pyspark', 'pyarrow', 'py4j') if m in sys.modules]; "
        "sys.exit(f'imported {heavy}' if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--spark-master" in proc.stdout


def test_without_java_spark_says_so_in_one_line(demo, tmp_path):
    _summary, root = demo
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java on it
    proc = subprocess.run(
        [
            ledgerctl_script(),
            "export",
            "plain",
            "--to",
            str(tmp_path / "x.jsonl"),
            "--spark",
            *flags(root),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 3
    assert proc.stderr.count("\n") == 1 and "Java" in proc.stderr


def test_compacted_view_without_a_typed_column_writes_json_text(tmp_path):
    """compact --export FILE.parquet when the versions cannot be merged (no typed column):
    every decoded value is JSON text, a string value too; no decoded value is null."""
    import pyarrow.parquet as pq

    from pulsarctl_py.export import CompactedViewParquet

    rows = [
        {"key": "a", "value": "AQ==", "schema_version": 0, "value_decoded": {"id": 1}},
        {"key": "b", "value": "Ag==", "schema_version": 1, "value_decoded": "text"},
        {"key": "c", "value": None, "schema_version": None, "value_decoded": None},
    ]
    path = tmp_path / "view.parquet"
    with path.open("wb") as fh:
        view = CompactedViewParquet(fh, values=True, column=None)
        for row in rows:
            view.write_row({**row, "properties": {}, "position": "1:0"})
        view.close()
    table = pq.read_table(path)
    assert str(table.schema.field("value_decoded").type) == "string"
    got = table.to_pylist()
    assert [r["value_decoded"] for r in got] == ['{"id":1}', '"text"', None]
    assert [r["value"] for r in got] == [b"\x01", b"\x02", None]
    assert view.rows == 3


def test_data_source_keeps_bytes_of_a_schema_that_stays_bytes(demo, monkeypatch):
    """Schema versions of BYTES (values that stay bytes): auto gives the payload in value
    as for a topic without a schema, not a column of nulls; decoded says why not."""
    from pulsarctl_py.decoders.schemas import SchemaType
    from pulsarctl_py.errors import LedgerctlError

    _summary, root = demo

    def as_bytes(values: Any) -> None:
        for schema in values.schemas:
            schema.type = SchemaType.BYTES

    patch_schemas(monkeypatch, as_bytes)
    schema, rows = rows_in_process(root)
    assert schema.fieldNames() == list(COLUMN_NAMES)
    assert schema["value"].dataType.simpleString() == "binary"
    assert len(rows) == 7 and all(isinstance(r["value"], bytes) and r["value"] for r in rows)
    for choice in ("decoded", "both"):
        with pytest.raises(LedgerctlError, match="are BYTES: its values stay bytes; use the"):
            rows_in_process(root, values=choice)
