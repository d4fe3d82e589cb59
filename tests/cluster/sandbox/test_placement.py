"""Bookie isolation and bookies named by an id that is not their address, on the real
cluster of scripts/sandbox.

The module adds a fourth bookie registered under the ``bookieId`` :data:`NAMED` (its
address only in its registration's bookie-rpc endpoint), puts it and the first bookie in
the isolation group ``iso`` and the two others in ``rest``, and gives a namespace of its
own the bookie affinity group ``iso`` with ensemble 2, write and ack quorum 1 (each entry
on one bookie, so half the entries are on the named bookie alone). Then:

* the broker writes a topic there; ``migrate index`` rewrites a second topic, whose old
  ledger sits on the ``rest`` bookies, with the running broker (the topic's namespace
  bundle is one the broker does not own). Both new ledgers must be in the group, carry the
  same ``EnsemblePlacementPolicyConfig`` custom metadata, and the broker must serve
  ledgerctl's;
* ``verify`` and ``inspect`` read the named bookie's entries live; ``--bookie-address``
  still wins over its registration.

The fixture removes everything afterwards: the namespace and its topics, the ledgers the
broker left behind for it (its system topics' schemas), the groups and the fourth bookie.
While that bookie runs the broker may place any new ledger on it: a ledger of another
namespace that names it afterwards is reported with a warning (its entries stay readable
from their other replicas). About 20 to 40 s, a third of it starting and stopping the
bookie.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.support.sandbox_oracle import run_ledgerctl

#: the fourth bookie's bookieId: a name, not host:port
NAMED = "placement-bookie"
MESSAGES = [(f"k{i}", f"placed-{i}".encode()) for i in range(40)]


def _url(box: Any) -> str:
    return f"{box.metadata_url} bookkeeper={box.bookkeeper_metadata_url}"


def _produce(box: Any, topic: str, messages: list[tuple[str, bytes]]) -> None:
    box.admin("PUT", box.topic_path(topic) + "/subscription/keep", ok=(204, 409))
    client = box.client()
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for key, value in messages:
            producer.send_async(value, None, partition_key=key)
        producer.flush()
        producer.close()
    finally:
        client.close()


def _metadata(box: Any, ledger_id: int) -> Any:
    from pulsarctl_py.stores.metadata import open_metadata_store, read_ledger

    store = open_metadata_store(_url(box))
    try:
        record = read_ledger(store, ledger_id)
        return None if record is None else record.metadata
    finally:
        store.close()


def _bundles(box: Any, ns: str, names: list[str]) -> list[str]:
    """The namespace bundle of each topic (the local policies' bundles, which setting the
    affinity group creates)."""
    from pulsarctl_py.ownership import topic_bundle
    from pulsarctl_py.stores.metadata import open_metadata_store, resolve_topic

    store = open_metadata_store(box.metadata_url)
    try:
        return [topic_bundle(store, resolve_topic(n)).range for n in names]
    finally:
        store.close()


def _topic_beside(box: Any, ns: str, prefix: str, beside: str) -> str:
    """A topic of ``ns`` named ``prefix-N`` in the bundle of the topic ``beside``."""
    names = [f"persistent://{ns}/{prefix}-{i}" for i in range(200)]
    want, *found = _bundles(box, ns, [f"persistent://{ns}/{beside}", *names])
    return next(n for n, b in zip(names, found, strict=True) if b == want)


def _free_topic(box: Any, ns: str) -> str:
    """A topic of ``ns`` in a bundle no broker owns: ledgerctl may write its metadata while
    the broker runs."""
    from pulsarctl_py.stores.metadata import open_metadata_store

    store = open_metadata_store(box.metadata_url)
    try:
        owned = set(store.children(f"/namespace/{ns}"))
    finally:
        store.close()
    names = [f"persistent://{ns}/legacy-{i}" for i in range(200)]
    return next(n for n, b in zip(names, _bundles(box, ns, names), strict=True) if b not in owned)


def _legacy(box: Any, ns: str, source: str, bookies: list[str]) -> dict[str, Any]:
    """A topic whose only ledger holds ``source``'s entries without broker entry
    metadata (as KoP < 2.8 wrote them), on ``bookies`` (outside the group)."""
    from pulsarctl_py.decoders.checksums import DIGESTS, DigestType
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
    from pulsarctl_py.repair.migrate import data_custom_metadata
    from pulsarctl_py.stores.ledger_writer import LedgerConfig
    from pulsarctl_py.stores.live.writer import write_ledger
    from pulsarctl_py.stores.metadata import open_metadata_store, read_managed_ledger

    topic = _free_topic(box, ns)
    local = topic.rsplit("/", 1)[1]
    bodies = []
    with LedgerSource.open(_url(box), None, need_metadata=True) as src:
        for li in read_managed_ledger(src.metadata, source).info.message.ledgerInfo:
            view = src.ledger(li.ledgerId)
            at = 32 + DIGESTS[view.digest_type].size
            for entry in src.raw_entries(view):
                data = bytes(entry.data[at:])
                if data[:2] == b"\x0e\x02":
                    data = data[6 + int.from_bytes(data[2:6], "big") :]
                bodies.append(data)
    password = Path(box.password_file).read_bytes().strip()
    store = open_metadata_store(_url(box), read_only=False)
    try:
        config = LedgerConfig(
            2, 1, 1, DigestType.CRC32C, password, data_custom_metadata(f"{ns}/persistent/{local}")
        )
        old = write_ledger(store.bookkeeper(), config, bodies, bookies=bookies)
        info = mlpb.ManagedLedgerInfo()
        info.ledgerInfo.add(ledgerId=old.ledger_id, entries=old.entries, size=old.length)
        ml = f"/managed-ledgers/{ns}/persistent/{local}"
        store.put(ml, info.SerializeToString(), -1)
        cursor = mlpb.ManagedCursorInfo(
            cursorsLedgerId=-1, markDeleteLedgerId=old.ledger_id, markDeleteEntryId=-1
        )
        store.put(f"{ml}/keep", cursor.SerializeToString(), -1)
    finally:
        store.close()
    return {"topic": topic, "old": old.ledger_id, "old_ensemble": old.ensemble}


@pytest.fixture(scope="module")
def placed(sandbox, tmp_path_factory) -> Any:
    box = sandbox
    tmp = tmp_path_factory.mktemp("placement")
    started = time.monotonic()
    originals = [b["id"] for b in box.bookies]
    ns = f"public/placement-{uuid.uuid4().hex[:8]}"
    newest = _newest_ledger(box)  # the ledgers after it may name the named bookie
    box.add_bookie(NAMED)
    record: dict[str, Any] = {"ns": ns, "group": {NAMED, originals[0]}, "rest": originals[1:]}
    try:
        box.bookie_group("iso", [NAMED, originals[0]])
        box.bookie_group("rest", originals[1:3])
        box.admin("PUT", f"/namespaces/{ns}")
        box.admin(
            "POST",
            f"/namespaces/{ns}/persistence",
            {
                "bookkeeperEnsemble": 2,
                "bookkeeperWriteQuorum": 1,
                "bookkeeperAckQuorum": 1,
                "managedLedgerMaxMarkDeleteRate": 0,
            },
        )
        box.bookie_affinity(ns, "iso")
        # the namespace's BookKeeper client reads /bookies in the background when it is
        # made: the first topic makes it, the second one is placed with the groups known.
        # Both in the bundle of the namespace's __change_events, which the broker's own
        # reader owns: of the four bundles, two at most are owned then
        _produce(box, _topic_beside(box, ns, "warm-up", "__change_events"), [("w", b"w")])
        record["broker_topic"] = topic = _topic_beside(box, ns, "by-broker", "__change_events")
        _produce(box, topic, MESSAGES)
        record["broker_ledger"] = box.internal_stats(topic)["ledgers"][0]["ledgerId"]
        legacy = record["legacy"] = _legacy(box, ns, topic, originals[1:3])
        record["migrate"] = run_ledgerctl(
            box,
            None,
            "migrate",
            "index",
            legacy["topic"],
            "--plan",
            str(tmp / "index.json"),
            "--apply",
            "--delete-old",
            "-o",
            "json",
        )
        record["seconds"] = time.monotonic() - started
        yield record
    finally:
        _clean(box, ns, newest)


def _newest_ledger(box: Any) -> int:
    from pulsarctl_py.stores.metadata import iter_ledger_paths, open_metadata_store

    store = open_metadata_store(_url(box))
    try:
        return max((ledger_id for ledger_id, _ in iter_ledger_paths(store)), default=-1)
    finally:
        store.close()


def _clean(box: Any, ns: str, newest: int) -> None:
    from pulsarctl_py.stores.metadata import iter_ledger_paths, open_metadata_store, read_ledger

    try:
        for topic in box.admin("GET", f"/namespaces/{ns}/topics") or []:
            box.admin("DELETE", box.topic_path(topic) + "?force=true", ok=(204, 404))
        box.delete_namespace(ns)
    finally:
        store = open_metadata_store(_url(box), read_only=False)
        elsewhere = []
        try:
            place = store.bookkeeper()
            for ledger_id, path in iter_ledger_paths(store):
                if ledger_id <= newest:  # ledger ids only grow (BookKeeper's id generator)
                    continue
                record = read_ledger(store, ledger_id)
                md = record.metadata
                if md is None or not any(NAMED in e for e in md.ensembles.values()):
                    continue
                owner = (
                    md.custom_metadata.get("pulsar/managed-ledger")
                    or md.custom_metadata.get("pulsar/schemaId")
                    or b""
                ).decode("utf-8", "replace")
                if owner.startswith(ns + "/") and record.stat is not None:
                    place.store.delete(path, record.stat.version)  # the broker left it behind
                else:
                    elsewhere.append(f"{ledger_id} ({owner or 'no owner recorded'})")
        finally:
            store.close()
            box.clear_bookie_groups()
            box.remove_bookie(NAMED)
        if elsewhere:
            warnings.warn(
                f"ledgers placed on the removed bookie {NAMED} while it ran: "
                + ", ".join(elsewhere),
                stacklevel=1,
            )


# -- the tests ---------------------------------------------------------------------------------


def test_ledgerctl_places_and_records_a_data_ledger_as_the_broker_does(sandbox, placed) -> None:
    """The broker's ledger and ledgerctl's: both ensembles are the group's two bookies
    (out of four; ledgerctl's old ledger was on the other two), with the same quorums and
    the same EnsemblePlacementPolicyConfig, byte for byte, first in the custom metadata."""
    from pulsarctl_py.stores.live.placement import CONFIG_KEY, ISOLATED_POLICY
    from pulsarctl_py.stores.live.placement import decode_policy_config as decode

    box, done = sandbox, placed["migrate"]
    assert done.returncode == 0, done.stderr
    legacy = placed["legacy"]
    assert set(legacy["old_ensemble"]) == set(placed["rest"])
    new_id = box.internal_stats(legacy["topic"])["ledgers"][0]["ledgerId"]
    assert new_id != legacy["old"]
    broker = _metadata(box, placed["broker_ledger"])
    ours = _metadata(box, new_id)
    assert set(broker.ensembles[0]) == placed["group"]
    assert set(ours.ensembles[0]) == placed["group"]
    for md in (broker, ours):
        assert (md.ensemble_size, md.write_quorum_size, md.ack_quorum_size) == (2, 1, 1)
    recorded = broker.custom_metadata[CONFIG_KEY]
    assert decode(recorded) == {
        "policy_class": ISOLATED_POLICY,
        "properties": {"isolationBookieGroups": "iso"},
    }
    assert ours.custom_metadata[CONFIG_KEY] == recorded
    # in the broker's HashMap order: the placement first, application last (the two keys
    # between share a bucket, in an order each broker process salts anew)
    for md in (broker, ours):
        keys = list(md.custom_metadata)
        assert (keys[0], keys[-1], len(keys)) == (CONFIG_KEY, "application", 4), keys
    assert {k: v for k, v in ours.custom_metadata.items() if k != "pulsar/managed-ledger"} == {
        k: v for k, v in broker.custom_metadata.items() if k != "pulsar/managed-ledger"
    }
    assert _metadata(box, legacy["old"]) is None  # --delete-old


def test_the_broker_serves_what_ledgerctl_placed_on_the_named_bookie(sandbox, placed) -> None:
    import pulsar

    box = sandbox
    assert placed["migrate"].returncode == 0, placed["migrate"].stderr
    client = box.client()
    try:
        reader = client.create_reader(placed["legacy"]["topic"], pulsar.MessageId.earliest)
        got = []
        while reader.has_message_available():
            msg = reader.read_next(30_000)
            got.append((msg.partition_key(), msg.data()))
        reader.close()
    finally:
        client.close()
    assert got == MESSAGES


def test_a_bookie_registered_under_a_name_is_read_live(sandbox, placed) -> None:
    """Half the broker's entries are on the named bookie alone (write quorum 1): verify
    reads all 40, inspect reads one of them; --bookie-address still wins."""
    box = sandbox
    short = placed["broker_topic"].removeprefix("persistent://")
    verified = run_ledgerctl(box, None, "verify", short, "-o", "json")
    assert verified.returncode == 0, verified.stderr
    summary = json.loads(verified.stdout)["summary"]
    assert (summary["entries"], summary["errors"], summary["unverified"]) == (40, 0, 0)

    ledger = placed["broker_ledger"]
    entry = _metadata(box, ledger).ensembles[0].index(NAMED)  # entry e on member e % 2
    shown = run_ledgerctl(box, None, "inspect", f"{ledger}:{entry}", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    message = json.loads(shown.stdout)["entries"][0]["messages"][0]
    assert base64.b64decode(message["value"]) == MESSAGES[entry][1]

    elsewhere = run_ledgerctl(
        box,
        None,
        "inspect",
        f"{ledger}:{entry}",
        "--bookie-address",
        f"{NAMED}=127.0.0.1:1",
        "--bookie-timeout",
        "2",
    )
    assert elsewhere.returncode == 3, elsewhere.stderr
    assert f"bookie {NAMED} at 127.0.0.1:1: cannot connect" in elsewhere.stderr
