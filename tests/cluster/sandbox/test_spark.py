"""compact and export on a real Spark standalone cluster, reading the sandbox's bookies.

pyspark's own master and two workers run on loopback (tests/support/fixtures/spark_cluster.py);
ledgerctl runs as a separate process (a driver of its own, as a user runs it) with
``--spark-master spark://...`` and only the two metadata URLs: the executors, Python
workers started by the Spark workers, read the running bookies of the sandbox. The report
and the rows must be those of the local engine. The demo directory's ledgerctl.toml names
its stores by relative paths: the executors, which run in the workers' directories, must
get them absolute.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.fixtures.spark_cluster import SparkCluster, spark_cluster  # noqa: F401

LEDGERCTL = [sys.executable, "-m", "pulsarctl_py.cli"]


def ledgerctl(cluster: SparkCluster, *args: str | Path, cwd: Path | None = None) -> Any:
    done = subprocess.run(
        [*LEDGERCTL, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env=cluster.env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _urls(box: Any) -> list[str]:
    return ["--metadata-url", box.metadata_url,
            "--bookkeeper-metadata-url", box.bookkeeper_metadata_url]  # fmt: skip


def _on(cluster: SparkCluster) -> list[str]:
    return ["--engine", "spark", "--spark-master", cluster.url, *cluster.conf()]


def _same(local: dict[str, Any], spark: dict[str, Any], *ignore: str) -> None:
    assert spark["engine"] == "spark" and local["engine"] == "local"
    skip = {"engine", "seconds", *ignore}
    assert {k: v for k, v in spark.items() if k not in skip} == {
        k: v for k, v in local.items() if k not in skip
    }


def test_compact_on_a_standalone_cluster_equals_the_local_engine(
    sandbox_world: Any,
    spark_cluster: SparkCluster,  # noqa: F811
) -> None:
    topic = sandbox_world.short("batched-zstd")
    args = ["compact", topic, *_urls(sandbox_world.sandbox), "-o", "json"]
    local = ledgerctl(spark_cluster, *args)
    spark = ledgerctl(spark_cluster, *args, *_on(spark_cluster))
    _same(local, spark)
    # phase two reads from the first entry that holds a key's latest message, to the end:
    # at most every entry the producer's batches went into (their number depends on timing)
    entries = {s.message_id[:2] for s in sandbox_world.topics["batched-zstd"]}
    assert 0 < local["entries_in"] <= len(entries) and local["kept"] > 0


def test_export_on_a_standalone_cluster_equals_the_local_engine(
    sandbox_world: Any,
    spark_cluster: SparkCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    topic = sandbox_world.short("keyed")
    files = [tmp_path / "local.jsonl", tmp_path / "spark.jsonl"]
    args = ["export", topic, *_urls(sandbox_world.sandbox), "--split-entries", "16", "-o", "json"]
    local = ledgerctl(spark_cluster, *args, "--to", files[0], "--engine", "local")
    spark = ledgerctl(spark_cluster, *args, "--to", files[1], *_on(spark_cluster))
    _same(local, spark, "to", "splits", "files")  # the files: their names and bytes below
    assert [f["path"] for f in local["files"]] == [str(files[0])]
    assert [f["path"] for f in spark["files"]] == [str(files[1])]
    assert local["rows"] == len(sandbox_world.topics["keyed"])
    assert files[0].read_text() and files[1].read_text() == files[0].read_text()


def test_compact_in_the_demo_directory_on_a_standalone_cluster(
    spark_cluster: SparkCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    """ledgerctl.toml's relative paths reach the executors absolute (was: "no RocksDB
    metadata store at metadata" from the executors, which run elsewhere)."""
    from pulsarctl_py.demo import create_demo

    demo = tmp_path / "demo"
    create_demo(demo)
    local = ledgerctl(spark_cluster, "compact", "tombstones", "-o", "json", cwd=demo)
    spark = ledgerctl(
        spark_cluster, "compact", "tombstones", "-o", "json", *_on(spark_cluster), cwd=demo
    )
    _same(local, spark)
    assert local["kept"] > 0


@pytest.mark.parametrize("url", ["rocksdb://metadata", "rocksdb://./m bookkeeper=rocksdb://b"])
def test_scan_plans_carry_absolute_paths(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pulsarctl_py.engines import build_scan_plan
    from pulsarctl_py.stores.metadata.url import parse_metadata_url

    monkeypatch.chdir(tmp_path)
    plan = build_scan_plan("t", [(1, 3, 30)], bookie_dirs=["bk"], metadata_url=url)
    (split,) = plan.splits
    assert split.bookie_dirs == (str(tmp_path / "bk"),)
    parsed = parse_metadata_url(split.metadata_url)
    assert parsed.target == str(tmp_path / Path(url.split()[0][len("rocksdb://") :]).name)
    if parsed.bookkeeper is not None:
        assert parsed.bookkeeper.target == str(tmp_path / "b")


def test_the_data_source_reads_the_running_bookies(spark: Any, sandbox_world: Any) -> None:
    """``spark.read.format("ledgerctl")`` (the session's local executors) with only the
    two metadata URLs: the rows are what the producer sent, with the ids it was given."""
    box = sandbox_world.sandbox
    sent = sandbox_world.topics["batched-lz4"]

    def reader(**options: str) -> Any:
        r = spark.read.format("ledgerctl").option("topic", sandbox_world.short("batched-lz4"))
        for name, value in {"metadata-url": box.metadata_url, **options}.items():
            r = r.option(name, value)
        return r

    df = reader(**{"bookkeeper-metadata-url": box.bookkeeper_metadata_url,
                   "split-entries": "3"}).load()  # fmt: skip
    assert df.rdd.getNumPartitions() > 2
    rows = df.select("ledger_id", "entry_id", "batch_index", "key", "value").collect()
    assert [(r.ledger_id, r.entry_id, r.batch_index) for r in rows] == [
        s.message_id[:3] for s in sent
    ]
    assert [(r.key, bytes(r.value)) for r in rows] == [(s.key, s.value) for s in sent]
    # without the place of BookKeeper's metadata: refused, not an empty DataFrame
    with pytest.raises(
        Exception, match=r"BookKeeper.s metadata is not at /ledgers .*--bookkeeper-metadata-url"
    ):
        reader().load().collect()


#: what the driver's environment may hold of S3 credentials (removed for the S3 run)
S3_CREDENTIALS = (
    "ACCESS_KEY_ID",
    "ACCESS_KEY_SECRET",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)


def _without_s3_credentials(cluster: SparkCluster) -> dict[str, str]:
    env = cluster.env(AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    for name in S3_CREDENTIALS:
        env.pop(name, None)
    return env


@pytest.mark.parametrize("kind", ["fs-block", "s3"])
def test_export_of_offloaded_ledgers_on_a_standalone_cluster(
    kind: str,
    offload_world: Any,
    offload_sandbox: Any,
    spark_cluster: SparkCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The executors read the offloaded ledgers themselves (each split names its ledger;
    the executor finds the offload through the ledger's managed ledger and reads the
    filesystem offloader's files, or the S3 driver's objects): one row per message the
    broker reader returned.

    S3: the driver runs without any S3 credentials; the workers were started with the
    sandbox's in their environment (as spark-env.sh gives them), so the executors can only
    have read with their own: nothing of the driver's travels with the tasks."""
    import base64

    world = offload_world[kind]
    out = tmp_path / "spark.jsonl"
    args = ["export", world.short, *_urls(offload_sandbox), "--split-entries", "300"]
    args += ["-o", "json", "--to", out, *_on(spark_cluster)]
    env = _without_s3_credentials(spark_cluster) if kind == "s3" else spark_cluster.env()
    done = subprocess.run(
        [*LEDGERCTL, *map(str, args)], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["engine"] == "spark" and report["rows"] == len(world.messages) == 1600
    assert report["complete"] and not report["errors"]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(not r["problems"] for r in rows)
    got = [(r["ledger_id"], r["entry_id"], base64.b64decode(r["value"])) for r in rows]
    assert got == [(m.ledger_id, m.entry_id, m.value) for m in world.messages]
