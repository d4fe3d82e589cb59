"""scripts/sandbox itself: the cluster it starts is the one the issue describes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kazoo.client import KazooClient

from tests.support.fixtures.sandbox import SCRIPT


def _zk(sandbox) -> KazooClient:
    zk = KazooClient(hosts=sandbox.state["zookeeper"]["address"])
    zk.start(timeout=30)
    return zk


def test_cluster_json_names_every_process(sandbox) -> None:
    state = json.loads((sandbox.dir / "cluster.json").read_text())
    for key in (
        "metadata_url",
        "bookkeeper_metadata_url",
        "service_url",
        "web_url",
        "bookies",
        "broker",
        "pulsar_version",
        "bookkeeper_version",
    ):
        assert key in state, key
    assert state["pulsar_version"] == "4.0.7" and state["bookkeeper_version"] == "4.17.2"
    assert len(state["bookies"]) == 3
    for bookie in state["bookies"]:
        assert set(bookie) >= {"id", "address", "ledger_dirs", "journal_dir", "pid"}
        assert len(bookie["ledger_dirs"]) == 2
        assert bookie["address"].startswith("127.0.0.1:")
        assert all(Path(d).is_dir() for d in bookie["ledger_dirs"])
        os.kill(bookie["pid"], 0)
    os.kill(state["broker"]["pid"], 0)
    assert Path(state["broker"]["conf"]).is_file()
    for url in (state["service_url"], state["web_url"], state["metadata_url"]):
        assert "127.0.0.1:" in url


def test_bookkeeper_metadata_is_not_under_pulsars_ledgers_root(sandbox) -> None:
    zk = _zk(sandbox)
    try:
        assert sandbox.bookkeeper_metadata_url.endswith("/bookkeeper/ledgers")
        assert zk.exists("/ledgers") is None
        available = zk.get_children("/bookkeeper/ledgers/available")
        assert sorted(b for b in available if b != "readonly") == sorted(
            b["id"] for b in sandbox.bookies
        )
    finally:
        zk.stop()


def test_broker_conf_has_the_cluster_settings(sandbox) -> None:
    conf = dict(
        line.split("=", 1)
        for line in Path(sandbox.state["broker"]["conf"]).read_text().splitlines()
        if "=" in line
    )
    assert conf["managedLedgerDefaultEnsembleSize"] == "3"
    assert conf["managedLedgerDefaultWriteQuorum"] == "2"
    assert conf["managedLedgerDefaultAckQuorum"] == "2"
    assert conf["managedLedgerDigestType"] == "CRC32C"
    assert conf["managedLedgerPassword"]
    assert conf["transactionCoordinatorEnabled"] == "true"
    assert "AppendIndexMetadataInterceptor" in conf["brokerEntryMetadataInterceptors"]
    assert "AppendBrokerTimestampMetadataInterceptor" in conf["brokerEntryMetadataInterceptors"]
    assert conf["bookkeeperMetadataServiceUri"] == sandbox.bookkeeper_metadata_url
    # closed ledgers of topics without subscriptions must not be trimmed under the tests
    assert conf["defaultRetentionTimeInMinutes"] == "-1"
    assert conf["defaultRetentionSizeInMB"] == "-1"


def test_world_topics_span_several_ledgers(sandbox_world) -> None:
    stats = sandbox_world.sandbox.internal_stats(sandbox_world.topic("keyed"))
    assert len(stats["ledgers"]) >= 3
    ledgers = {s.message_id[0] for s in sandbox_world.topics["keyed"]}
    assert len(ledgers) == 3
    txn = sandbox_world.topics["txn"]
    assert {s.transaction for s in txn} == {None, "commit", "abort"}


def test_a_stopped_bookie_starts_again(sandbox) -> None:
    bookie = sandbox.bookies[2]
    with sandbox.bookie_stopped(bookie["id"]):
        status = json.loads(
            subprocess.run(
                [sys.executable, str(SCRIPT), "status", str(sandbox.dir)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        assert status["bookies"][bookie["id"]] is False
    status = json.loads(
        subprocess.run(
            [sys.executable, str(SCRIPT), "status", str(sandbox.dir)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert all(status["bookies"].values()) and status["broker"]
