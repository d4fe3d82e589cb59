"""Compaction on the Spark engine gives the local engine's report and the same bytes.

Phase one runs as Spark's distributed latest-per-key, phase two's rebatching on the
executors, and the driver writes the entries in plan order: the spooled compacted entries,
the exported view and, with --apply, the compacted ledger's stored entries must be
byte-identical to the local engine's, on the demo data, with one entry per split so that
every boundary is crossed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.demo import create_demo
from tests.support.cli_helpers import run
from tests.support.compaction_outcome import outcome

TOPICS = ["tombstones", "batched", "chunked", "with-index"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compact-spark") / "demo"
    create_demo(root)
    return root


def flags(root: Path) -> list[str]:
    return [
        "--metadata-url",
        f"rocksdb://{root / 'metadata'}",
        "--bookie-dir",
        str(root / "bookkeeper"),
    ]


def compaction(root: Path, topic: str, engine: str, out: Path) -> tuple[str, list, bytes]:
    from pulsarctl_py.compaction import compact

    export = out / f"{topic}-{engine}.jsonl"
    report = compact(
        topic,
        metadata_url=f"rocksdb://{root / 'metadata'}",
        bookie_dirs=[str(root / "bookkeeper")],
        engine=engine,
        export=export,
        spool=True,
        split_entries=1,
    )
    return outcome(report, engine, export)


@pytest.mark.parametrize("topic", TOPICS)
def test_spark_compaction_equals_local(demo, spark, topic, tmp_path):
    local = compaction(demo, topic, "local", tmp_path)
    on_spark = compaction(demo, topic, "spark", tmp_path)
    assert local[1], f"{topic}: the compaction keeps entries (else nothing is compared)"
    assert on_spark == local


def _ledger_bytes(root: Path, ledger_id: int) -> list[bytes]:
    from pulsarctl_py.ledgers import LedgerSource

    with LedgerSource.open(f"rocksdb://{root / 'metadata'}", [root / "bookkeeper"]) as source:
        view = source.ledger(ledger_id)
        return [bytes(e.data) for e in source.raw_entries(view)]


def _apply(capsys: Any, root: Path, *engine: str) -> dict[str, Any]:
    res = run(
        capsys,
        "compact",
        "tombstones",
        "--apply",
        "--plan",
        root / "compact-plan.json",
        "--full",
        "-o",
        "json",
        *flags(root),
        *engine,
    )
    assert res.code == 0, res.err
    return res.json()


def test_compact_spark_apply_writes_the_same_ledger(spark, capsys, tmp_path):
    roots = []
    for name in ("local", "spark"):
        root = tmp_path / name / "demo"
        create_demo(root)
        roots.append(root)
    local = _apply(capsys, roots[0])
    on_spark = _apply(capsys, roots[1], "--spark")
    assert (local.pop("engine"), on_spark.pop("engine")) == ("local", "spark")
    for doc in (local, on_spark):
        doc.pop("seconds", None)
        doc.pop("plan_file")  # one per demo directory
        # the apply's outcome names each directory's files, and the cursor it wrote carries
        # the time of the write (lastActive): the keys written are what must agree
        outcome = doc.pop("outcome")
        doc["written_keys"] = [w["key"] for w in outcome["written"]]
    assert on_spark == local and local["applied"]
    ledger = local["compacted_ledger"]
    assert ledger is not None
    stored = _ledger_bytes(roots[0], ledger)
    assert stored and _ledger_bytes(roots[1], ledger) == stored


def test_compact_export_parquet_on_spark(demo, spark, capsys, tmp_path):
    import pyarrow.parquet as pq

    lines, parquet = tmp_path / "view.jsonl", tmp_path / "view.parquet"
    assert run(capsys, "compact", "tombstones", "--export", lines, *flags(demo)).code == 0
    res = run(capsys, "compact", "tombstones", "--spark", "--export", parquet, *flags(demo))
    assert res.code == 0, res.err
    rows = pq.read_table(parquet).to_pylist()
    expected = [json.loads(line) for line in lines.read_text().splitlines()]
    assert rows and [(r["key"], r["position"]) for r in rows] == [
        (r["key"], r["position"]) for r in expected
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["view.jsonl", "view.parquet"]


def test_compact_export_writes_decoded_values_on_both_engines(demo, spark, capsys, tmp_path):
    """The compacted view of the Avro topic: value_decoded as inspect decodes each kept
    message (JSON lines) and typed as export types it (Parquet: the latest version's
    struct, version 0's messages reading its defaults); the same on both engines."""
    import pyarrow.parquet as pq

    shown = run(capsys, "inspect", "--topic", "shop-orders", "-o", "jsonl", *flags(demo))
    assert shown.code == 0, shown.err
    by_id = {
        m["message_id"]: m for line in shown.out.splitlines() for m in json.loads(line)["messages"]
    }
    files = {}
    for engine in ([], ["--spark"]):
        for ext in ("jsonl", "parquet"):
            out = tmp_path / f"view{'-spark' if engine else ''}.{ext}"
            res = run(capsys, "compact", "shop-orders", "--export", out, *flags(demo), *engine)
            assert res.code == 0, res.err
            files[(bool(engine), ext)] = out
    assert files[(False, "jsonl")].read_bytes() == files[(True, "jsonl")].read_bytes()
    rows = [json.loads(line) for line in files[(False, "jsonl")].read_text().splitlines()]
    # the latest message of each key: order 42's second copy (version 1) replaces the first
    assert [r["key"] for r in rows] == [
        "order-40",
        "order-41",
        "order-43",
        "order-44",
        "order-42",
        "order-45",
    ]
    for r in rows:
        m = by_id[r["position"]]
        assert (r["schema_version"], r["value_decoded"]) == (
            m["schema_version"],
            m["value_decoded"],
        )
        assert r["schema_type"] == "AVRO" and "value_error" not in r
    local, on_spark = (pq.read_table(files[(s, "parquet")]) for s in (False, True))
    assert local.equals(on_spark)
    typed = local.to_pylist()
    assert local.schema.field("value_decoded").type.names[-2:] == ["qty", "coupon"]
    for row, r in zip(typed, rows, strict=True):
        defaults = {"qty": 1, "coupon": None} if r["schema_version"] == 0 else {}
        assert row["value_decoded"] == {**r["value_decoded"], **defaults}
    raw = tmp_path / "raw.jsonl"
    res = run(capsys, "compact", "shop-orders", "--export", raw, "--values", "raw", *flags(demo))
    assert res.code == 0 and all(
        "value_decoded" not in json.loads(x) for x in raw.read_text().splitlines()
    )
    res = run(capsys, "compact", "plain", "--export", raw, "--values", "decoded", *flags(demo))
    assert res.code == 1 and "has no schema" in res.err and res.err.count("\n") == 1
    res = run(capsys, "compact", "shop-orders", "--values", "decoded", *flags(demo))
    assert res.code == 2 and "--values says what --export writes" in res.err
