"""The broker settings that decide what its compactor computes, and where each comes from.

The broker's compactor takes them from its ``ServiceConfiguration`` (Pulsar 4.0.7):

* ``topicCompactionRetainNullKey`` (``AbstractTwoPhaseCompactor``'s constructor): whether
  keyless messages are kept; default false;
* ``compactionServiceFactoryClassName``: ``PulsarCompactionServiceFactory`` (the default)
  builds a ``PublishingOrderCompactor``, ``EventTimeCompactionServiceFactory`` an
  ``EventTimeOrderCompactor``; any other factory is code ledgerctl cannot follow;
* ``exposingBrokerEntryMetadataToClientEnabled`` (``PulsarCommandSenderImpl``): whether the
  compactor receives (and so writes) each entry's broker entry metadata;
* entry filters: the dispatcher of the ``__compaction`` subscription runs them like any
  other's (``PersistentDispatcherSingleActiveConsumer`` ->
  ``AbstractBaseDispatcher.filterEntriesForConsumer`` -> ``EntryFilterSupport``), so an
  entry a filter rejects never reaches the compactor. The filters are the broker's
  ``entryFilterNames``, or with ``allowOverrideEntryFilters`` the topic's or namespace's
  ``entryFilters`` policy. They are plugins (Java code in NAR files) that ledgerctl cannot
  run: a compaction they would change is refused, not computed wrong.

Each setting comes, first found, from the command's flag, its variable
(``LEDGERCTL_RETAIN_NULL_KEY``, ``LEDGERCTL_COMPACTION_ORDER``,
``LEDGERCTL_KEEP_ENTRY_METADATA``), ledgerctl.toml (``retain_null_key``,
``compaction_order``, ``keep_entry_metadata``), the broker configuration
(``--broker-conf``, ``$LEDGERCTL_BROKER_CONF``, ``broker_conf`` in ledgerctl.toml), then
Pulsar 4.0.7's default: the rule of every setting (:mod:`pulsarctl_py.precedence`);
:attr:`CompactorSettings.sources` says which.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pulsarctl_py.errors import LedgerctlError

if TYPE_CHECKING:
    from pulsarctl_py.brokerconf import BrokerConf

PULSAR_DEFAULT = "Pulsar's default"


@dataclass(frozen=True)
class CompactorSettings:
    """The compactor's settings for one run, and where each came from."""

    retain_null_key: bool
    order: str
    keep_entry_metadata: bool
    sources: dict[str, str] = field(default_factory=dict)
    #: what people should know about the configuration (settings the broker ignores)
    notes: list[str] = field(default_factory=list)
    #: the configuration read, when there is one (for the entry filter check)
    conf: BrokerConf | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "retain_null_key": self.retain_null_key,
            "order": self.order,
            "keep_entry_metadata": self.keep_entry_metadata,
            "from": dict(self.sources),
        }


def compactor_settings(
    *,
    retain_null_key: bool | None = None,
    order: str | None = None,
    keep_entry_metadata: bool | None = None,
    conf: BrokerConf | bool | None = True,
    check_filters: bool = True,
) -> CompactorSettings:
    """The settings: the flags given (not None), the variables, ledgerctl.toml, the broker
    configuration, then Pulsar's defaults. ``conf``: a loaded configuration, None for
    none, or True to resolve it as every command does. With ``check_filters`` (a
    compaction is computed) broker-wide entry filters are refused here
    (:func:`refuse_entry_filters`); a topic's own are checked by
    :func:`topic_entry_filters`.
    """
    from pulsarctl_py import precedence as p

    sources_of = p.Sources.of(broker_conf=p.UNSET if conf is True else conf or None)
    found = sources_of.broker_conf()
    sources: dict[str, str] = {}
    notes: list[str] = []

    def pick(key: str, setting: p.Setting, flag: Any, names: tuple[str, str] | None) -> Any:
        got = p.resolve(setting, flag, sources=sources_of)
        if got.origin == p.FLAG and names is not None:
            sources[key] = names[0] if got.value else names[1]
        else:
            sources[key] = PULSAR_DEFAULT if got.origin == p.DEFAULT else got.source
        return got.value

    retain_null_key = pick(
        "retain_null_key",
        p.RETAIN_NULL_KEY,
        retain_null_key,
        ("--retain-null-key", "--drop-null-key"),
    )
    if (
        found is not None
        and found.is_set("topicCompactionRemainNullKey")
        and not found.is_set("topicCompactionRetainNullKey")
    ):
        # the name of an unreleased commit (apache/pulsar#21690 renamed it before 3.2.0):
        # Pulsar's loader ignores keys that are no setting
        notes.append(
            f"{found.path} sets topicCompactionRemainNullKey, which no released broker reads "
            "(the setting is topicCompactionRetainNullKey): ignored, as the broker ignores it"
        )
    order = pick("order", p.COMPACTION_ORDER, order, None)
    keep_entry_metadata = pick(
        "keep_entry_metadata",
        p.KEEP_ENTRY_METADATA,
        keep_entry_metadata,
        ("--keep-entry-metadata", "--strip-entry-metadata"),
    )
    if found is not None and check_filters:
        refuse_entry_filters(found, found.entry_filter_names, "its entryFilterNames")
    return CompactorSettings(
        retain_null_key, order, keep_entry_metadata, sources, notes, conf=found
    )


def refuse_entry_filters(conf: BrokerConf, names: tuple[str, ...] | list[str], whose: str) -> None:
    """Refuse a compaction that entry filters would change (see the module docstring)."""
    if not names:
        return
    raise LedgerctlError(
        f"the broker of {conf.path} runs entry filters ({whose}: {', '.join(names)}) on "
        "every subscription, its compactor's included: entries they reject never reach the "
        "compactor, and ledgerctl cannot run them; its compaction would differ from the "
        "broker's"
    )


def _filter_names(policy: Any) -> list[str]:
    """``EntryFilters.entryFilterNames`` (comma separated) of a policy object, or []."""
    if not isinstance(policy, dict):
        return []
    names = policy.get("entryFilterNames")
    if not isinstance(names, str):
        return []
    return [n.strip() for n in names.split(",") if n.strip()]


def topic_entry_filters(source: Any, topic: str, settings: CompactorSettings) -> None:
    """With ``allowOverrideEntryFilters`` the topic's dispatchers run the entry filters of
    its topic-level policies, else of its namespace's (``EntryFilterSupport``,
    ``AbstractTopic.getEntryFilters``): refused when either names one. Reads the topic
    policies as the broker does (:mod:`pulsarctl_py.topicpolicies`)."""
    conf = settings.conf
    if conf is None or not conf.allow_override_entry_filters:
        return
    from pulsarctl_py.stores.metadata import resolve_topic
    from pulsarctl_py.topicpolicies import read_topic_policies

    name = resolve_topic(topic)
    policies = read_topic_policies(source, name.full_name, conf)
    for scope, found in (("local", policies.local), ("global", policies.global_)):
        names = _filter_names((found or {}).get("entryFilters"))
        refuse_entry_filters(conf, names, f"the {scope} topic policies of {name.full_name}")
    assert source.metadata is not None
    node = source.metadata.get(f"/admin/policies/{name.namespace_name}")
    if node is not None:
        try:
            ns = json.loads(node.data)
        except ValueError:
            ns = None
        names = _filter_names(ns.get("entryFilters") if isinstance(ns, dict) else None)
        refuse_entry_filters(conf, names, f"the policies of namespace {name.namespace_name}")
