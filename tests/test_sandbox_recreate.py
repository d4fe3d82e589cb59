"""`repair missing-ledgers --recreate` on the real cluster (Pulsar 4.0.7, BookKeeper's
metadata under /bookkeeper/ledgers): a topic's middle ledger loses its metadata znode while
the running bookies still hold its entries; the plan recreates the metadata from them, and
BookKeeper's own client opens the ledger with the broker's password and reads exactly the
entries the bookies hold, and the broker serves every message of the topic again."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox_oracle import namespace, short, topic_name
from tests.test_sandbox_repairs import _bookkeeper_path, _cli, _ledgers, _ml_ledgers, _read


@pytest.fixture
def pulsar_client(sandbox) -> Iterator[Any]:
    namespace(sandbox)
    c = sandbox.client()
    yield c
    c.close()


@pytest.fixture
def zookeeper(sandbox) -> Iterator[Any]:
    from kazoo.client import KazooClient

    z = KazooClient(hosts=sandbox.state["zookeeper"]["address"])
    z.start(timeout=30)
    yield z
    z.stop()


def _bk_read(sandbox, ledger_id: int) -> dict:
    password = Path(sandbox.password_file).read_bytes()
    return sandbox.java(
        "bk-read",
        {
            "metadata_service_uri": sandbox.bookkeeper_metadata_url,
            "ledger_id": ledger_id,
            "password": base64.b64encode(password).decode(),
        },
    )


def test_lost_ledger_metadata_is_recreated_from_the_running_bookies(
    sandbox, pulsar_client, zookeeper, tmp_path
):
    client, zk = pulsar_client, zookeeper
    name = "recreate-lost-metadata"
    parts = _ledgers(client, sandbox, name, 3, 5)
    lost = _ml_ledgers(sandbox, name)[1]
    sandbox.unload(topic_name(name))
    before = _bk_read(sandbox, lost)
    assert len(before["entries"]) == 5
    path = _bookkeeper_path(sandbox, lost)
    zk.delete(path)  # BookKeeper lost the ledger's metadata; the bookies keep its entries

    plan = tmp_path / "recreate.json"
    _cli(sandbox, "repair", "missing-ledgers", short(name), "--recreate", "--plan", plan)
    doc = json.loads(plan.read_text())
    (change,) = doc["changes"]
    assert change["action"] == "create" and change["key"] == path
    (rec,) = doc["repairs"][0]["recreated"]
    assert rec["verified_entries"] == 5
    assert doc["repairs"][0]["ledgers"] == []  # nothing dropped from the topic
    # unloaded as the runbook says, but the bundle stays owned: --force-owned
    applied = _cli(sandbox, "apply", plan, "--yes", "--force-owned")
    assert "store: " in applied.stderr

    after = _bk_read(sandbox, lost)  # BookKeeper's client, through the new metadata
    assert after["entries"] == before["entries"]
    for key in (
        "state",
        "ensemble_size",
        "write_quorum_size",
        "ack_quorum_size",
        "digest_type",
        "last_entry_id",
        "length",
        "custom_metadata",
    ):
        assert after[key] == before[key], key
    assert after["ensembles"] == before["ensembles"]
    # the broker loads the topic and serves every ledger, the recreated one included
    assert _read(client, name, "after-recreate") == parts[0] + parts[1] + parts[2]
