"""Judgments of "missing" on the real cluster (Pulsar 4.0.7: ensemble 3, write quorum 2, so
every entry on two of the three bookies; BookKeeper's metadata under /bookkeeper/ledgers,
not Pulsar's default /ledgers), each a case where ledgerctl used to plan dropping data
that exists:

* one bookie's directories: an intact ledger stored on the two other bookies was reported
  ``ledger-missing-storage`` and ``repair missing-ledgers`` planned to drop it;
* no ``--bookkeeper-metadata-url``: every ledger looked missing, and the repair planned to
  drop them all;
* a ledger whose metadata was deleted: ``verify`` said the bookies hold none of it while
  ``repair`` found its entries on three bookies; recreated with a bookie stopped, it got an
  ensemble of two and its entries sat below the write quorum. Recreated whole, BookKeeper's
  own client opens it with the broker's password and reads exactly the entries the bookies
  hold, and the broker serves every message of the topic again.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.sandbox.test_repairs import (
    _bookkeeper_path,
    _ledgers,
    _ml_ledgers,
    _read,
)
from tests.support.sandbox_oracle import LEDGERCTL, oracle_client, short, topic_name


@pytest.fixture(scope="module")
def pulsar_client(sandbox) -> Iterator[Any]:
    yield from oracle_client(sandbox)


def _run(sandbox, *args: Any, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*LEDGERCTL, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env or sandbox.env(),
    )


def _json(done: subprocess.CompletedProcess) -> Any:
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


def _ensemble(sandbox, ledger_id: int) -> list[str]:
    meta = _json(_run(sandbox, "ledger", "meta", ledger_id, "-o", "json"))
    (ensemble,) = meta["metadata"]["ensembles"].values()
    return ensemble


def _dirs(bookie: dict[str, Any]) -> list[str]:
    """Everything of one bookie: its two ledger directories and its journal."""
    return [a for d in [*bookie["ledger_dirs"], bookie["journal_dir"]] for a in ("--bookie-dir", d)]


@pytest.fixture(scope="module")
def two_ledgers(sandbox, pulsar_client) -> tuple[str, list[int]]:
    """A topic of two closed ledgers: one of one entry (on two of the three bookies), one
    of four."""
    name = "judge-partial"
    _ledgers(pulsar_client, sandbox, name, 1, 1)
    _ledgers(pulsar_client, sandbox, name, 1, 4)
    ids = _ml_ledgers(sandbox, name)[:2]
    return name, ids


def test_one_bookies_directories_judge_nothing_missing(sandbox, two_ledgers) -> None:
    name, (single, four) = two_ledgers
    ensemble = _ensemble(sandbox, single)
    # entry 0's write set is ensemble[0] and ensemble[1]: the third bookie holds none of it
    (outsider,) = [b for b in sandbox.bookies if b["id"] == ensemble[2]]
    done = _run(sandbox, "verify", short(name), *_dirs(outsider), "-o", "json")
    assert done.returncode == 0, done.stderr
    found = {(f["ledger_id"], f["check"]): f for f in _json(done)["findings"]}
    assert not [f for f in found.values() if f["severity"] != "info"], found
    none = found[(single, "storage-not-covered")]
    assert "holds none of its entries 0..0" in none["message"]
    assert set(none["details"]["unread"]) == set(ensemble[:2])
    # ledger `four`: the entries of the write sets without the outsider are not covered
    assert found[(four, "storage-not-covered")]["details"]["count"] >= 1

    done = _run(sandbox, "repair", "missing-ledgers", short(name), *_dirs(outsider), "-o", "json")
    assert done.returncode == 0, done.stderr
    doc = _json(done)
    assert doc["changes"] == [] and doc["repairs"][0]["ledgers"] == []
    assert [k["ledger_id"] for k in doc["repairs"][0]["not_judged"]] == [single]

    # every bookie's whole data: nothing absent, nothing to say
    every = [a for b in sandbox.bookies for a in _dirs(b)]
    done = _run(sandbox, "verify", short(name), *every, "-o", "json")
    assert done.returncode == 0, done.stderr
    assert _json(done)["findings"] == []


def test_without_the_bookkeeper_root_nothing_is_judged(sandbox, two_ledgers, tmp_path) -> None:
    name, _ = two_ledgers
    env = sandbox.env()
    del env["LEDGERCTL_BOOKKEEPER_METADATA_URL"]  # BookKeeper's root is not /ledgers here
    before = sandbox.internal_stats(topic_name(name))["ledgers"]
    plan = tmp_path / "drop.json"
    for args in (
        ["verify", short(name)],
        ["verify", "--all"],
        ["repair", "missing-ledgers", short(name), "--plan", plan],
        ["orphans", "--delete", "--plan", plan],
        ["ledger", "list"],
    ):
        done = _run(sandbox, *args, env=env)
        assert done.returncode == 3, (args, done.stdout[-500:], done.stderr)
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("ledgerctl: error: BookKeeper's metadata is not at /ledgers")
        assert "--bookkeeper-metadata-url" in line
        assert not plan.exists()
    assert sandbox.internal_stats(topic_name(name))["ledgers"] == before


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


def test_a_ledger_without_metadata_is_judged_alike_and_recreated_whole(
    sandbox, pulsar_client, tmp_path
) -> None:
    from kazoo.client import KazooClient

    name = "judge-lost-metadata"
    parts = _ledgers(pulsar_client, sandbox, name, 3, 5)
    lost = _ml_ledgers(sandbox, name)[1]
    before = _bk_read(sandbox, lost)
    ensemble = _ensemble(sandbox, lost)
    path = _bookkeeper_path(sandbox, lost)
    zk = KazooClient(hosts=sandbox.state["zookeeper"]["address"])
    zk.start(timeout=30)
    try:
        zk.delete(path)  # the bookies keep its entries
    finally:
        zk.stop()

    # verify and repair say the same: its entries are still on the bookies
    done = _run(sandbox, "verify", short(name), "-o", "json")
    assert done.returncode == 1, done.stderr
    (finding,) = _json(done)["findings"]
    assert finding["check"] == "ledger-missing-metadata"
    assert "its entries are still on the bookies (entries 0..4 on" in finding["message"]
    assert {c["bookie"] for c in finding["details"]["data"]["copies"]} == set(ensemble)
    done = _run(sandbox, "repair", "missing-ledgers", short(name), "-o", "json")
    assert done.returncode == 0, done.stderr
    doc = _json(done)
    assert doc["changes"] == [] and doc["repairs"][0]["ledgers"] == []  # never dropped
    (kept,) = doc["repairs"][0]["not_judged"]
    assert "its entries are still on the bookies" in kept["reason"]

    # a bookie of its ensemble stopped: not recreated from the two others ...
    stopped = ensemble[0]
    plan = tmp_path / "recreate.json"
    with sandbox.bookie_stopped(stopped):
        args = ["repair", "missing-ledgers", short(name), "--recreate", "--plan", plan]
        done = _run(sandbox, *args)
        assert done.returncode == 1, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert f"{stopped}: not running" in line and "--complete-ensemble" in line
        assert not plan.exists()
        # ... unless asked to: then with the stopped bookie in it, as it was
        done = _run(sandbox, *args, "--complete-ensemble")
        assert done.returncode == 0, done.stderr
    doc = json.loads(plan.read_text())
    (change,) = doc["changes"]  # the ledger's metadata, created where BookKeeper keeps it
    assert change["action"] == "create" and change["key"] == path
    (rec,) = doc["repairs"][0]["recreated"]
    assert rec["ensemble"] == ensemble and rec["write_quorum_size"] == 2
    assert rec["verified_entries"] == 5
    done = _run(sandbox, "apply", plan, "--yes", "--unload")  # the topic stays loaded
    assert done.returncode == 0, done.stderr

    after = _bk_read(sandbox, lost)  # BookKeeper's client, through the new metadata
    for key in (
        "entries",
        "ensembles",
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
    replicas = _json(_run(sandbox, "ledger", "replicas", lost, "-o", "json"))
    assert replicas["ok"] and replicas["below_write_quorum"] == [] and replicas["missing"] == []
    assert _read(pulsar_client, name, "after-recreate") == parts[0] + parts[1] + parts[2]
