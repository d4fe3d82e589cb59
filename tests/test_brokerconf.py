"""The broker settings ledgerctl follows, without a cluster: how a broker.conf is read
(``ServiceConfiguration``'s 4.0.7 defaults, Java's boolean and list parsing), where each
compactor setting comes from, what is refused, and the broker's replay of topic policy
events. What the running broker does with them is in ``test_sandbox_broker_settings.py``."""

from __future__ import annotations

import pytest

from pulsarctl_py.brokerconf import parse_broker_conf
from pulsarctl_py.compaction.settings import compactor_settings
from pulsarctl_py.errors import LedgerctlError
from pulsarctl_py.topicpolicies import (
    TopicPolicies,
    TopicPoliciesUnread,
    _replay,
    read_topic_policies,
)
from tests.support.cli_helpers import run

EVENT_TIME = "org.apache.pulsar.compaction.EventTimeCompactionServiceFactory"


def test_defaults_and_java_parsing():
    d = parse_broker_conf("")
    assert d.retain_null_key is False and d.compaction_order == "publishing"
    assert d.entry_filter_names == () and d.allow_override_entry_filters is False
    assert d.topic_policies == "system-topic"
    c = parse_broker_conf(
        "topicCompactionRetainNullKey = TRUE\n"
        f"compactionServiceFactoryClassName={EVENT_TIME}\n"
        "entryFilterNames= a , b,\n"
        "allowOverrideEntryFilters=yes\n"  # Boolean.valueOf: only "true" is true
        "systemTopicEnabled=false\n"
    )
    assert c.retain_null_key is True and c.compaction_order == "event-time"
    assert c.entry_filter_names == ("a", "b") and c.allow_override_entry_filters is False
    assert c.topic_policies is None  # the system-topic service without system topics
    assert parse_broker_conf("topicLevelPoliciesEnabled=false").topic_policies is None
    custom = parse_broker_conf("topicPoliciesServiceClassName=com.example.Mine")
    assert custom.topic_policies == "com.example.Mine"
    # an empty value is the default, as Pulsar's loader reads it
    assert parse_broker_conf("topicCompactionRetainNullKey=").retain_null_key is False


def test_compactor_settings_flag_then_conf_then_default():
    conf = parse_broker_conf(
        f"topicCompactionRetainNullKey=true\ncompactionServiceFactoryClassName={EVENT_TIME}\n"
        "exposingBrokerEntryMetadataToClientEnabled=true\n",
        "b.conf",
    )
    s = compactor_settings(conf=conf)
    assert (s.retain_null_key, s.order, s.keep_entry_metadata) == (True, "event-time", True)
    assert (
        s.sources["retain_null_key"] == "broker configuration b.conf (topicCompactionRetainNullKey)"
    )
    assert s.sources["order"].endswith("(compactionServiceFactoryClassName)")
    flagged = compactor_settings(
        retain_null_key=False, order="publishing", keep_entry_metadata=False, conf=conf
    )
    assert (flagged.retain_null_key, flagged.order, flagged.keep_entry_metadata) == (
        False,
        "publishing",
        False,
    )
    assert flagged.sources == {
        "retain_null_key": "--drop-null-key",
        "order": "--order",
        "keep_entry_metadata": "--strip-entry-metadata",
    }
    none = compactor_settings(conf=None)
    assert (none.retain_null_key, none.order, none.keep_entry_metadata) == (
        False,
        "publishing",
        False,
    )
    assert set(none.sources.values()) == {"Pulsar's default"}


def test_what_the_broker_would_not_do_as_ledgerctl_is_refused_or_said():
    with pytest.raises(LedgerctlError, match=r"com\.example\.Compactor is not a compactor"):
        compactor_settings(
            conf=parse_broker_conf("compactionServiceFactoryClassName=com.example.Compactor")
        )
    # --order says which one the unknown factory's compactor is like
    s = compactor_settings(
        order="event-time",
        conf=parse_broker_conf("compactionServiceFactoryClassName=com.example.Compactor"),
    )
    assert s.order == "event-time"
    filters = parse_broker_conf("entryFilterNames=only-red", "f.conf")
    with pytest.raises(LedgerctlError, match=r"runs entry filters .*only-red"):
        compactor_settings(conf=filters)
    assert compactor_settings(conf=filters, check_filters=False).order == "publishing"
    # the name of an unreleased commit: ignored by the broker, and said
    remain = compactor_settings(conf=parse_broker_conf("topicCompactionRemainNullKey=true"))
    assert remain.retain_null_key is False
    assert "topicCompactionRemainNullKey" in remain.notes[0]


def test_compact_refuses_a_broker_with_entry_filters_in_one_line(tmp_path, capsys):
    conf = tmp_path / "broker.conf"
    conf.write_text("entryFilterNames=only-red\n")
    result = run(capsys, "compact", "t", "--broker-conf", conf)
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ledgerctl: error: ")
    assert "entry filters" in lines[0] and "Traceback" not in result.err


# -- topic policies ---------------------------------------------------------------------------


def _event(action: str, persistence=None, is_global=False, event_type="TOPIC_POLICY"):
    return {
        "actionType": action,
        "eventType": event_type,
        "topicPoliciesEvent": {
            "domain": "persistent",
            "tenant": "t",
            "namespace": "ns",
            "topic": "x",
            "policies": {"isGlobal": is_global, "persistence": persistence},
        },
    }


def _p(e, w, a):
    return {"bookkeeperEnsemble": e, "bookkeeperWriteQuorum": w, "bookkeeperAckQuorum": a}


def test_topic_policy_events_replay_as_the_broker_replays_them():
    key, gkey = "persistent://t/ns/x", "__G__persistent://t/ns/x"
    out = TopicPolicies("persistent://t/ns/x")
    _replay(out, gkey, _event("UPDATE", _p(3, 3, 3), is_global=True))
    assert out.persistence() == ((3, 3, 3), "global")
    _replay(out, key, _event("INSERT", _p(2, 2, 1)))
    assert out.persistence() == ((2, 2, 1), "local")  # local over global
    _replay(out, key, _event("INSERT", _p(1, 1, 1)))  # putIfAbsent: no change
    assert out.persistence() == ((2, 2, 1), "local")
    _replay(out, key, _event("UPDATE", None))  # policies without persistence
    assert out.persistence() == ((3, 3, 3), "global")
    _replay(out, key, _event("UPDATE", _p(2, 1, 1), event_type="TRANSACTION_BUFFER_SNAPSHOT"))
    assert out.persistence() == ((3, 3, 3), "global")  # not a topic policy event
    _replay(out, key, _event("UPDATE", _p(2, 1, 1)))
    _replay(out, key, _event("DELETE"))  # removes the local policies only
    assert out.persistence() == ((3, 3, 3), "global")
    _replay(out, key, _event("UPDATE", _p(2, 1, 1)))
    _replay(out, gkey, None)  # a null value under the global key
    assert out.persistence() == ((2, 1, 1), "local")
    _replay(out, key, None)
    assert out.persistence() is None
    assert out.events == 10
    broken = TopicPolicies(
        "persistent://t/ns/x", local={"persistence": {"bookkeeperEnsemble": "x"}}
    )
    with pytest.raises(TopicPoliciesUnread):
        broken.persistence()


def test_topic_policies_off_or_elsewhere_per_the_broker_configuration():
    off = read_topic_policies(None, "t/ns/x", parse_broker_conf("topicLevelPoliciesEnabled=false"))
    assert off.enabled is False and off.persistence() is None
    custom = parse_broker_conf("topicPoliciesServiceClassName=com.example.Mine")
    with pytest.raises(LedgerctlError, match=r"ServiceClassName=com\.example\.Mine") as e:
        read_topic_policies(None, "t/ns/x", custom)
    assert not isinstance(e.value, TopicPoliciesUnread) and e.value.exit_code == 2


def test_allow_override_refuses_the_topics_or_namespaces_entry_filters(monkeypatch):
    import json
    from types import SimpleNamespace

    import pulsarctl_py.topicpolicies as tp
    from pulsarctl_py.compaction.settings import topic_entry_filters

    namespaces = {"/admin/policies/t/ns": {"entryFilters": {"entryFilterNames": ""}}}
    local: dict = {}

    class Store:
        def get(self, path):
            found = namespaces.get(path)
            return None if found is None else SimpleNamespace(data=json.dumps(found).encode())

    def policies(source, topic, conf):
        return TopicPolicies(topic, local=dict(local))

    monkeypatch.setattr(tp, "read_topic_policies", policies)
    source = SimpleNamespace(metadata=Store())
    conf = parse_broker_conf("allowOverrideEntryFilters=true", "o.conf")
    settings = compactor_settings(conf=conf)
    topic_entry_filters(source, "t/ns/x", settings)  # no filters anywhere: computed
    topic_entry_filters(source, "t/ns/x", compactor_settings(conf=None))  # nothing to check
    local["entryFilters"] = {"entryFilterNames": "red, blue"}
    with pytest.raises(LedgerctlError, match="local topic policies of persistent://t/ns/x: red"):
        topic_entry_filters(source, "t/ns/x", settings)
    local.clear()
    namespaces["/admin/policies/t/ns"]["entryFilters"]["entryFilterNames"] = "green"
    with pytest.raises(LedgerctlError, match="policies of namespace t/ns: green"):
        topic_entry_filters(source, "t/ns/x", settings)
    # without allowOverrideEntryFilters the broker runs only its own (none here)
    plain = compactor_settings(conf=parse_broker_conf(""))
    topic_entry_filters(source, "t/ns/x", plain)
