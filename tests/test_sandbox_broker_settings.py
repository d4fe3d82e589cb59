"""Broker settings as the real broker of ``scripts/sandbox`` (Pulsar 4.0.7) takes them.

* ledgerctl's defaults for the settings it reads from a broker configuration are the
  running broker's (its ``/admin/v2/brokers/configuration/runtime``, for settings the
  sandbox's broker.conf leaves out);
* ``topicCompactionRetainNullKey`` comes from the broker configuration: keyless messages
  compacted by the broker itself (its configuration: dropped) and by Pulsar's own
  ``CompactorTool`` built from a configuration that sets it to true (kept), each next to
  ``ledgerctl compact`` given the same configuration, byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox_oracle import (
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
    assert report["settings"]["from"]["retain_null_key"].startswith(
        "topicCompactionRetainNullKey of broker configuration"
    )
    assert report["entries_out"] == len(tool) and report["keyless_dropped"] == 0
    # a flag wins over the configuration
    flagged = keyless["cli_flag"]
    assert flagged["settings"]["from"]["retain_null_key"] == "--drop-null-key"
    assert flagged["entries_out"] == len(keyless["ours_tool_default"])
