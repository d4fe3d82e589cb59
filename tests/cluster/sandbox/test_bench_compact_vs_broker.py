"""bench/compact_vs_broker.py against the session's sandbox at a tiny size (a smoke test: no
speed is checked): two topics (NONE, which the 4.0.7 broker compacts, and LZ4 with text
values, on which it fails, apache/pulsar#26290), ledgerctl's local engine and the broker's
compaction on each, the views compared, and every ledger ledgerctl wrote deleted again
(through the live-writes gate: the broker's compaction has the topic loaded by then). The
comparison itself is shown to catch a view that differs in one value or one message, on
the broker's own compacted ledger."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.support.cli_helpers import run_bench

BENCH = Path(__file__).resolve().parents[3] / "bench" / "compact_vs_broker.py"


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_compact_vs_broker", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def report(sandbox) -> dict:
    return run_bench(
        "compact_vs_broker.py",
        "--sandbox",
        str(sandbox.dir),
        "--quick",
        "--compression",
        "NONE",
        "--compression",
        "LZ4",
        timeout=600,
    )


def test_the_bench_compares_ledgerctl_with_the_brokers_compaction(report) -> None:
    none, lz4 = report["topics"]
    assert none["compression"] == "NONE" and lz4["compression"] == "LZ4"
    for topic in (none, lz4):
        assert topic["produced"]["messages"] == 2000
        (ours,) = topic["ledgerctl"]
        assert ours["engine"] == "local" and ours["seconds"] > 0 and ours["peak_rss_mib"] > 0
        assert 0 < ours["kept"] <= ours["keys"] <= 50
    # NONE: the broker's compaction succeeds, and its view is ledgerctl's, message by message
    broker = none["broker"]
    assert broker["status"] == "SUCCESS" and broker["last_error"] is None
    assert broker["heap"]["samples"] >= 2 and broker["heap"]["heap_used_mib_max"] > 0
    (compared,) = none["compared"]
    assert compared["reference"] == "broker" and compared["same_view"], compared
    assert compared["messages_equal"] == none["ledgerctl"][0]["kept"]
    assert none["ledgerctl"][0]["ratio_broker_over_ledgerctl"] > 0
    # LZ4 with values that compress: the broker fails as apache/pulsar#26290 says, where
    # ledgerctl said it would
    broker = lz4["broker"]
    assert broker["status"] == "ERROR", broker
    assert "IndexOutOfBoundsException" in broker["last_error"]
    assert lz4["ledgerctl"][0]["broker_compaction_fails_at"] is not None
    assert lz4["compared"] == []  # one engine, no broker view: nothing to compare with


def test_the_bench_deletes_every_ledger_ledgerctl_wrote(report, sandbox) -> None:
    from tests.cluster.sandbox.test_writes import _ledgers

    runs = [run for topic in report["topics"] for run in topic["ledgerctl"]]
    assert len(runs) == 2 and all("--unload" in run["command"] for run in runs)
    assert all(run["undone"] for run in runs), runs
    written = {run["compacted_ledger"] for run in runs}
    assert None not in written and not written & _ledgers(sandbox)


def test_the_view_comparison_catches_a_changed_value_and_a_missing_message(report, sandbox) -> None:
    bench = _bench_module()
    cluster = bench.Cluster(sandbox.dir)
    ledger = report["topics"][0]["broker"]["compacted_ledger"]
    with bench.ledger_source(cluster) as source:
        rows = list(bench._rows(source, ledger))
        entries = list(bench._entries(source, ledger))
    kept = [i for i, r in enumerate(rows) if not r[5]]
    assert len(kept) == report["topics"][0]["ledgerctl"][0]["kept"]
    same = bench.compare_views(iter(rows), iter(rows), iter(entries), iter(entries))
    assert same["same_view"] and same["messages_equal"] == len(kept)
    changed = list(rows)
    changed[kept[-1]] = (*rows[kept[-1]][:4], "another value", False)
    result = bench.compare_views(iter(rows), iter(changed), iter(entries), iter(entries))
    assert not result["same_view"] and result["rows_differing"] == 1
    dropped = rows[:-1]
    result = bench.compare_views(iter(rows), iter(dropped), iter(entries), iter(entries[:-1]))
    assert not result["same_view"] and result["rows_only_in_one"] == 1
    assert result["entries_byte_identical"] == len(entries) - 1
