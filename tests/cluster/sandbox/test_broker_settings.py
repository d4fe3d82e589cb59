"""Broker settings as the real broker of ``scripts/sandbox`` (Pulsar 4.0.7) takes them.

* ledgerctl's defaults for the settings it reads from a broker configuration are the
  running broker's (its ``/admin/v2/brokers/configuration/runtime``, for settings the
  sandbox's broker.conf leaves out);
* ``topicCompactionRetainNullKey`` comes from the broker configuration: keyless messages
  compacted by the broker itself (its configuration: dropped) and by Pulsar's own
  ``CompactorTool`` built from a configuration that sets it to true (kept), each next to
  ``ledgerctl compact`` given the same configuration, byte for byte;
* topic-level persistence policies: for topics with local, global, both, removed or no
  topic policies in a namespace with persistence policies of its own, the quorums of the
  ledger the broker rolls for each are the quorums ledgerctl picks for the topic's new data
  ledgers, reading the namespace's ``__change_events`` (compacted by the broker half way,
  so that the read spans its compacted ledger and the entries after it).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.sandbox_oracle import (
    RUN,
    broker_compact,
    ledgerctl_env,
    produce,
    stored_compaction,
    tool_compact,
)

NAMESPACE = f"public/settings-{RUN}"
#: keyed and keyless messages, single and batched (a batch holding both kinds too)
SINGLES = [("a", b"1"), (None, b"keyless-1"), ("a", b"2"), (None, b"keyless-2"), ("b", b"3")]
BATCHED = [("a", b"4"), (None, b"keyless-3"), ("b", b""), (None, b"keyless-4"), ("c", b"5")]


def _topic(name: str) -> str:
    return f"persistent://{NAMESPACE}/{name}"


# -- defaults ---------------------------------------------------------------------------------


def test_ledgerctl_defaults_are_the_running_brokers(sandbox):
    from pulsarctl_py.brokerconf import parse_broker_conf

    runtime = sandbox.admin("GET", "/brokers/configuration/runtime")
    conf = Path(sandbox.state["broker"]["conf"]).read_text()
    defaults = parse_broker_conf("")
    ours = {
        "topicCompactionRetainNullKey": str(defaults.retain_null_key).lower(),
        "compactionServiceFactoryClassName": defaults.compaction_factory,
        "topicPoliciesServiceClassName": defaults.topic_policies_service,
        "allowOverrideEntryFilters": str(defaults.allow_override_entry_filters).lower(),
        "entryFilterNames": "[]" if not defaults.entry_filter_names else None,
        "exposingBrokerEntryMetadataToClientEnabled": str(
            defaults.expose_entry_metadata_to_client
        ).lower(),
    }
    for key, value in ours.items():
        assert key not in conf  # the broker runs with its default of it
        assert runtime[key] == value, key


# -- topicCompactionRetainNullKey ---------------------------------------------------------------


def _produce_keyless(box: Any, topic: str) -> None:
    client = box.client()
    try:
        produce(client, topic, SINGLES, batching_enabled=False)
        produce(
            client,
            topic,
            BATCHED,
            batching_enabled=True,
            batching_max_messages=len(BATCHED),
            batching_max_publish_delay_ms=1000,
        )
    finally:
        client.close()
    box.unload(topic)


def _ledgerctl_entries(box: Any, topic: str, conf: Path) -> list[bytes]:
    """``ledgerctl compact``'s entries with the settings the command takes from ``conf``."""
    from pulsarctl_py.brokerconf import load_broker_conf
    from pulsarctl_py.compaction import CompactionOptions
    from pulsarctl_py.compaction.run import compact, read_spool
    from pulsarctl_py.compaction.settings import compactor_settings

    s = compactor_settings(conf=load_broker_conf(conf))
    options = CompactionOptions(
        retain_null_key=s.retain_null_key, order=s.order, keep_entry_metadata=s.keep_entry_metadata
    )
    with ledgerctl_env(box):
        report = compact(topic, full=True, spool=True, options=options, settings=s)
    try:
        return [] if report.spool is None else [e.data for e in read_spool(report.spool)]
    finally:
        if report.spool is not None:
            report.spool.unlink(missing_ok=True)


def _cli_report(box: Any, topic: str, conf: Path, *args: str) -> dict[str, Any]:
    """``ledgerctl compact TOPIC --full -o json --broker-conf CONF ARGS`` in this process
    (its real entry point): the report."""
    import contextlib
    import io

    from pulsarctl_py.cli import main

    out, err = io.StringIO(), io.StringIO()
    with ledgerctl_env(box), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["compact", topic, "--full", "-o", "json", "--broker-conf", str(conf), *args])
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def keyless(sandbox, tmp_path_factory) -> dict[str, Any]:
    """Twin topics of keyed and keyless messages: the broker compacts ``by-broker`` with its
    own configuration, CompactorTool ``by-tool`` with topicCompactionRetainNullKey=true;
    ledgerctl computes each with the same configuration, before."""
    box = sandbox
    box.admin("PUT", f"/namespaces/{NAMESPACE}", ok=(204, 409))
    broker_conf = Path(box.state["broker"]["conf"])
    retain_conf = tmp_path_factory.mktemp("confs") / "broker-retain.conf"
    retain_conf.write_text(broker_conf.read_text() + "topicCompactionRetainNullKey=true\n")
    out: dict[str, Any] = {"broker_conf": broker_conf, "retain_conf": retain_conf}
    for name in ("by-broker", "by-tool"):
        _produce_keyless(box, _topic(name))
    out["ours_broker"] = _ledgerctl_entries(box, _topic("by-broker"), broker_conf)
    out["ours_tool"] = _ledgerctl_entries(box, _topic("by-tool"), retain_conf)
    out["ours_tool_default"] = _ledgerctl_entries(box, _topic("by-tool"), broker_conf)
    out["cli_broker"] = _cli_report(box, _topic("by-broker"), broker_conf)
    out["cli_tool"] = _cli_report(box, _topic("by-tool"), retain_conf)
    out["cli_flag"] = _cli_report(box, _topic("by-tool"), retain_conf, "--drop-null-key")
    broker_compact(box, _topic("by-broker"))
    out["broker"] = stored_compaction(box, _topic("by-broker"))
    tool_compact(box, _topic("by-tool"), retain_conf)
    out["tool"] = stored_compaction(box, _topic("by-tool"))
    return out


def test_keyless_messages_compact_as_the_brokers_own_configuration_says(keyless):
    # the sandbox's broker.conf does not set it: dropped, as the broker drops them
    assert keyless["ours_broker"] == keyless["broker"].entries
    report = keyless["cli_broker"]
    assert report["settings"]["retain_null_key"] is False
    assert report["settings"]["from"]["retain_null_key"] == "Pulsar's default"
    assert report["entries_out"] == len(keyless["broker"].entries)


def test_topic_compaction_retain_null_key_is_taken_from_the_broker_configuration(keyless):
    tool = keyless["tool"].entries
    # the compactor built from that configuration keeps the keyless messages ...
    assert len(tool) > len(keyless["broker"].entries)
    # ... and ledgerctl given the same configuration computes the same entries, byte for
    # byte; without it (the broker's default) it would not
    assert keyless["ours_tool"] == tool
    assert keyless["ours_tool_default"] != tool
    report = keyless["cli_tool"]
    assert report["settings"]["retain_null_key"] is True
    assert report["settings"]["from"]["retain_null_key"].startswith("broker configuration ")
    assert report["settings"]["from"]["retain_null_key"].endswith("(topicCompactionRetainNullKey)")
    assert report["entries_out"] == len(tool) and report["keyless_dropped"] == 0
    # a flag wins over the configuration
    flagged = keyless["cli_flag"]
    assert flagged["settings"]["from"]["retain_null_key"] == "--drop-null-key"
    assert flagged["entries_out"] == len(keyless["ours_tool_default"])


# -- topic-level persistence policies --------------------------------------------------------

#: per topic: the policies set (local and global persistence, in order; None removes the
#: local ones) and the quorums the broker then writes its next ledger with; the namespace's
#: own persistence is (2, 2, 2), the broker's default (3, 2, 2)
POLICIES: dict[str, tuple[list[tuple[str, tuple[int, int, int] | None]], tuple[int, int, int]]] = {
    "none": ([], (2, 2, 2)),
    "local": ([("local", (2, 2, 1))], (2, 2, 1)),
    "global": ([("global", (3, 1, 1))], (3, 1, 1)),
    "both": ([("global", (3, 3, 3)), ("local", (2, 1, 1))], (2, 1, 1)),
    "removed": ([("local", (3, 3, 1)), ("local", None)], (2, 2, 2)),
}
#: set after the broker compacted __change_events: read from the entries after the horizon
LATE = {"late": ([("local", (3, 2, 1))], (3, 2, 1))}


def _persistence(box: Any, topic: str, scope: str, quorums: tuple[int, int, int] | None) -> None:
    path = box.topic_path(topic) + "/persistence"
    if scope == "global":
        path += "?isGlobal=true"
    if quorums is None:
        box.admin("DELETE", path)
        return
    e, w, a = quorums
    body = {"bookkeeperEnsemble": e, "bookkeeperWriteQuorum": w, "bookkeeperAckQuorum": a}
    box.admin("POST", path, body)


def _rolled_quorums(box: Any, topic: str) -> tuple[int, int, int]:
    """The quorums of the ledger the broker opens for ``topic`` now (unloaded, then written
    to: the broker loads it with its current policies and rolls a new ledger)."""
    from pulsarctl_py.ledgers import LedgerSource

    box.unload(topic)
    client = box.client()
    try:
        produce(client, topic, [("k", b"after")], batching_enabled=False)
    finally:
        client.close()
    newest = box.internal_stats(topic)["ledgers"][-1]["ledgerId"]
    with ledgerctl_env(box), LedgerSource.open(need_metadata=True) as source:
        md = source.ledger(newest).metadata
    return md.ensemble_size, md.write_quorum_size, md.ack_quorum_size


def _wait_applied(box: Any, topic: str, scope: str, expected: Any) -> None:
    """Until the broker's topic policies cache has the change (an update is an event in
    __change_events that the broker's reader applies asynchronously)."""
    path = box.topic_path(topic) + "/persistence" + ("?isGlobal=true" if scope == "global" else "")
    deadline = time.monotonic() + 30
    while True:
        got = box.admin("GET", path)
        now = (
            None
            if not got
            else tuple(
                got[k]
                for k in ("bookkeeperEnsemble", "bookkeeperWriteQuorum", "bookkeeperAckQuorum")
            )
        )
        if now == expected:
            return
        assert time.monotonic() < deadline, (topic, scope, got, expected)
        time.sleep(0.1)


@pytest.fixture(scope="module")
def persistence(sandbox) -> dict[str, Any]:
    box = sandbox
    ns = f"{NAMESPACE}-p"
    box.admin("PUT", f"/namespaces/{ns}", ok=(204, 409))
    body = {"bookkeeperEnsemble": 2, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 2}
    box.admin("POST", f"/namespaces/{ns}/persistence", body)
    out: dict[str, Any] = {"ns": ns, "expected": {}, "rolled": {}}

    def set_all(cases: dict[str, Any]) -> None:
        for name, (changes, expected) in cases.items():
            topic = f"persistent://{ns}/{name}"
            client = box.client()
            try:
                produce(client, topic, [("k", b"first")], batching_enabled=False)
            finally:
                client.close()
            for scope, quorums in changes:
                _persistence(box, topic, scope, quorums)
                _wait_applied(box, topic, scope, quorums)
            out["expected"][topic] = expected

    set_all(POLICIES)
    events = f"persistent://{ns}/__change_events"
    broker_compact(box, events)
    out["compacted_ledger"] = box.internal_stats(events)["compactedLedger"]["ledgerId"]
    set_all(LATE)
    for topic in out["expected"]:
        out["rolled"][topic] = _rolled_quorums(box, topic)
    return out


def test_the_brokers_ledgers_take_topic_policies_over_the_namespaces(persistence):
    # the oracle itself: what the broker wrote for each case (local over global over the
    # namespace; removed local policies fall back to the namespace's)
    assert persistence["rolled"] == persistence["expected"]
    assert persistence["compacted_ledger"] > 0


def test_new_data_ledgers_take_the_quorums_the_broker_takes(sandbox, persistence):
    from pulsarctl_py.brokerconf import load_broker_conf
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.writesettings import resolve_write_settings, topic_data_settings

    conf = load_broker_conf(sandbox.state["broker"]["conf"])
    base = resolve_write_settings(broker_conf=conf, env={})
    assert (base.ensemble, base.write_quorum, base.ack_quorum) == (3, 2, 2)
    got = {}
    with ledgerctl_env(sandbox), LedgerSource.open(need_metadata=True, need_bookie=True) as src:
        for topic in persistence["rolled"]:
            s = topic_data_settings(base, src, topic, conf)
            got[topic] = (s.ensemble, s.write_quorum, s.ack_quorum)
            where = s.source["ensemble"]
            name = topic.rsplit("/", 1)[-1]
            if name in ("none", "removed"):
                assert where.startswith("the persistence policies of namespace"), where
            else:
                scope = "global" if name == "global" else "local"
                assert where.startswith(f"the {scope} topic policies of {topic}"), where
    assert got == persistence["rolled"]
