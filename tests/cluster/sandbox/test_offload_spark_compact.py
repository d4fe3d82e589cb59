"""Spark over S3 offloads, and compaction over offloaded ledgers, on the session sandbox.

Spark: the session's ``offload_world["s3"]`` topic (every ledger offloaded by the broker's
jcloud ``S3`` driver to the sandbox's moto server, the BookKeeper copies deleted). The
executors of the shared ``local[2]`` session read the objects themselves, with the
credentials of their own environment (the session's, given to the test process by the
sandbox fixture), never through the task: the data source's rows, ``export --spark``'s
and ``compact --spark``'s results are the broker reader's messages and the local engine's.

Compaction: a topic of ``public/offload-s3`` the broker compacted, then offloaded. The
broker never offloads the compacted ledger (``ManagedLedgerImpl`` offloads the managed
ledger's own ledgers; the compactor's ledger is not in that list: apache/pulsar#13559 asks
for it, unmerged in 4.0.7), so the compacted ledger stays in BookKeeper while every data
ledger is in S3. ``compact --status`` checks it clean and predicts the broker's
GetLastMessageId from the offloaded tail; ``compact --apply --unload`` swaps ledgerctl's
incremental compaction in and the broker serves it to a compacted reader.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_helpers import run
from tests.support.compaction_outcome import outcome
from tests.support.fixtures.sandbox import run_script
from tests.support.offload_world import RUN, ReadMessage, read_all
from tests.support.sandbox_oracle import broker_compact, ledgerctl_env

LEDGERCTL = [sys.executable, "-m", "pulsarctl_py.cli"]


def _ids(messages: list[ReadMessage]) -> list[tuple[int, int, int]]:
    return [(m.ledger_id, m.entry_id, m.batch_index) for m in messages]


# -- Spark over the S3 offloads --------------------------------------------------------------


def test_the_data_source_reads_s3_offloads_on_the_executors(
    offload_world: Any, offload_sandbox: Any, spark: Any
) -> None:
    world = offload_world["s3"]
    df = (
        spark.read.format("ledgerctl")
        .option("topic", world.short)
        .option("metadata-url", offload_sandbox.metadata_url)
        .option("bookkeeper-metadata-url", offload_sandbox.bookkeeper_metadata_url)
        .option("split-entries", "300")
        .load()
    )
    assert df.rdd.getNumPartitions() > 2  # read in parallel, a ledger range per task
    rows = df.select("ledger_id", "entry_id", "batch_index", "key", "value").collect()
    # an unbatched message has no batch index (null); the broker's id says -1
    got = [(r.ledger_id, r.entry_id, -1 if r.batch_index is None else r.batch_index) for r in rows]
    assert got == _ids(world.messages)
    assert [(r.key, bytes(r.value)) for r in rows] == [(m.key, m.value) for m in world.messages]
    assert len(rows) == 1600


def test_the_data_sources_s3_endpoint_reaches_the_executors(
    offload_world: Any, offload_sandbox: Any, spark: Any
) -> None:
    """The option ``s3-endpoint`` travels with the tasks: the executors ask it (a closed
    port here) and say so, instead of the endpoint the offload context names."""
    df = (
        spark.read.format("ledgerctl")
        .option("topic", offload_world["s3"].short)
        .option("metadata-url", offload_sandbox.metadata_url)
        .option("bookkeeper-metadata-url", offload_sandbox.bookkeeper_metadata_url)
        .option("s3-endpoint", "http://127.0.0.1:9")
        .load()
    )
    with pytest.raises(Exception, match=r"(?s)Python worker.*S3 endpoint http://127\.0\.0\.1:9"):
        df.select("ledger_id", "entry_id").collect()


@pytest.fixture(scope="module")
def s3_env(offload_sandbox: Any) -> Any:
    """The library pointed at the sandbox (in-process CLI and compact calls)."""
    with ledgerctl_env(offload_sandbox):
        yield offload_sandbox


def test_export_on_spark_reads_s3_offloads(
    offload_world: Any, s3_env: Any, spark: Any, capsys: Any, tmp_path: Path
) -> None:
    """``export --spark`` on the running session: the rows are the broker reader's."""
    import base64

    world = offload_world["s3"]
    out = tmp_path / "spark.jsonl"
    args = ["export", world.short, "--split-entries", "300", "--to", out, "-o", "json"]
    done = run(capsys, *args, "--engine", "spark")
    assert done.code == 0, done.err
    report = done.json()
    assert report["engine"] == "spark" and report["splits"] > 2 and report["complete"]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(not r["problems"] for r in rows)
    got = [(r["ledger_id"], r["entry_id"], base64.b64decode(r["value"])) for r in rows]
    assert got == [(m.ledger_id, m.entry_id, m.value) for m in world.messages]


def test_compact_on_spark_over_s3_offloads_equals_the_local_engine(
    offload_world: Any, s3_env: Any, spark: Any, tmp_path: Path
) -> None:
    from pulsarctl_py.compaction import compact

    world = offload_world["s3"]

    def on(engine: str) -> tuple[str, list[Any], bytes]:
        export = tmp_path / f"{engine}.jsonl"
        report = compact(world.short, engine=engine, export=export, spool=True, split_entries=97)
        return outcome(report, engine, export)

    local = on("local")
    assert json.loads(local[0])["kept"] == 13  # key-0 .. key-12, the unkeyed dropped
    assert on("spark") == local


# -- compaction over offloaded ledgers --------------------------------------------------------


def _send(box: Any, topic: str, name: str, count: int, keys: int, batch: int = 0) -> None:
    """``count`` messages ``NAME-i`` keyed ``key-(i % keys)``; in batches of ``batch``."""
    client = box.client()
    try:
        options: dict[str, Any] = {"batching_enabled": batch > 0}
        if batch:
            options.update(batching_max_messages=batch, batching_max_publish_delay_ms=5000)
        producer = client.create_producer(topic, **options)
        for i in range(count):
            producer.send_async(f"{name}-{i}".encode(), None, partition_key=f"key-{i % keys}")
        producer.flush()
        producer.close()
    finally:
        client.close()


@pytest.fixture(scope="module")
def compacted_offloaded(offload_sandbox: Any) -> dict[str, Any]:
    """A topic the broker compacted, then 10 messages more, then every closed ledger
    offloaded to S3 (bookkeeperDeleted)."""
    box = offload_sandbox
    topic = f"persistent://public/offload-s3/compacted-offloaded-{RUN}"
    _send(box, topic, "first", 60, keys=6)  # the first ledger
    box.unload(topic)
    _send(box, topic, "second", 40, keys=8, batch=4)  # the second: batches of 4
    compaction = broker_compact(box, topic)
    _send(box, topic, "third", 10, keys=3)  # past the broker's compaction
    offloaded = box.offload(topic)
    info = box.ml_info(topic)
    return {
        "topic": topic,
        "short": topic.split("://", 1)[1],
        "offloaded": offloaded,
        "ml_ledgers": [li.ledgerId for li in info.ledgerInfo],
        "compaction": compaction,
        "messages": read_all(box, topic),
    }


def _cli(box: Any, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LEDGERCTL, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=box.env(),
    )


def test_status_of_a_compaction_whose_topic_is_offloaded(
    compacted_offloaded: Any, offload_sandbox: Any
) -> None:
    world = compacted_offloaded
    done = _cli(offload_sandbox, "compact", world["short"], "--status", "--deep", "-o", "json")
    assert done.returncode == 0, done.stderr + done.stdout
    status = json.loads(done.stdout)
    assert [c for c in status["checks"] if c["severity"] != "info"] == []
    assert len(world["offloaded"]) == 2  # every data ledger: in S3 only
    # the compacted ledger is BookKeeper's: never in the managed ledger's list, so never
    # offloaded; ledgerctl reads it from the bookies
    compacted = status["compacted_ledger"]
    assert compacted is not None and compacted not in world["ml_ledgers"]
    ledgers = _cli(offload_sandbox, "ledger", "list", "-o", "json")
    assert ledgers.returncode == 0, ledgers.stderr
    stored = {row["ledger_id"]: row["stored"] for row in json.loads(ledgers.stdout)}
    assert stored[compacted] == "bookies"
    assert {stored[i] for i in world["offloaded"]} == {"tiered"}
    # the broker compacted up to 10 messages ago: the tail is read from S3 for the
    # GetLastMessageId a plain and a compacted reader get, which the broker confirms
    last = world["messages"][-1]
    assert status["get_last_message_id"]["reader"] == f"{last.ledger_id}:{last.entry_id}:-1"
    assert status["broker"]["get_last_message_id"]["agrees"] is True


def test_apply_over_offloaded_ledgers_is_served_by_the_broker(
    compacted_offloaded: Any, offload_sandbox: Any, tmp_path: Path
) -> None:
    world = compacted_offloaded
    before = json.loads(
        _cli(offload_sandbox, "compact", world["short"], "--status", "-o", "json").stdout
    )
    plan = tmp_path / "plan.json"
    done = _cli(
        offload_sandbox,
        "compact", world["short"], "--apply", "--unload", "--plan", plan,
        "--admin-url", offload_sandbox.web_url, "-o", "json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads(done.stdout)
    assert report["applied"] and report["previous_compacted_ledger"] == before["compacted_ledger"]
    # the latest message of each key, over the offloaded ledgers (a broker reader's)
    latest: dict[str, ReadMessage] = {}
    for m in world["messages"]:
        latest[m.key] = m
    expected = sorted(latest.values(), key=lambda m: (m.ledger_id, m.entry_id, m.batch_index))
    served = json.loads(
        run_script("consume", str(offload_sandbox.dir), world["topic"], "compacted-check",
                   "--compacted", "--all")
    )  # fmt: skip
    assert served["keys"] == [m.key for m in expected]
    assert [tuple(int(p) for p in i.split(":")[:3]) for i in served["message_ids"]] == [
        (m.ledger_id, m.entry_id, m.batch_index if m.batch_index >= 0 else -1) for m in expected
    ]
    assert served["distinct_keys"] == 8
