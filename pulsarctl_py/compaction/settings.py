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

Each setting comes, first found, from the command's flag, the broker configuration
(``--broker-conf``, ``$LEDGERCTL_BROKER_CONF``, ``broker_conf`` in ledgerctl.toml), then
Pulsar 4.0.7's default; :attr:`CompactorSettings.sources` says which.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pulsarctl_py.brokerconf import DEFAULT_RETAIN_NULL_KEY
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
    """The settings: the flags given (not None), then the broker configuration, then
    Pulsar's defaults. ``conf``: a loaded configuration, None for none, or True to resolve
    it as every command does. With ``check_filters`` (a compaction is computed) broker-wide
    entry filters are refused here (:func:`refuse_entry_filters`); a topic's own are
    checked by :func:`topic_entry_filters`.
    """
    from pulsarctl_py.stores.metadata.url import resolve_broker_conf

    found = resolve_broker_conf() if conf is True else conf or None
    where = f"broker configuration {found.path}" if found is not None else None
    sources: dict[str, str] = {}
    notes: list[str] = []

    if retain_null_key is not None:
        sources["retain_null_key"] = "--retain-null-key" if retain_null_key else "--drop-null-key"
    elif found is not None and found.is_set("topicCompactionRetainNullKey"):
        retain_null_key = found.retain_null_key
        sources["retain_null_key"] = f"topicCompactionRetainNullKey of {where}"
    else:
        retain_null_key = DEFAULT_RETAIN_NULL_KEY
        sources["retain_null_key"] = PULSAR_DEFAULT
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

    if order is not None:
        sources["order"] = "--order"
    elif found is not None and found.is_set("compactionServiceFactoryClassName"):
        order = found.compaction_order
        if order is None:
            raise LedgerctlError(
                f"{found.path}: compactionServiceFactoryClassName={found.compaction_factory} "
                "is not a compactor ledgerctl knows (PulsarCompactionServiceFactory: "
                "publishing order, EventTimeCompactionServiceFactory: event-time order); "
                "give --order if that compactor orders messages like one of them"
            )
        sources["order"] = f"compactionServiceFactoryClassName of {where}"
    else:
        order = "publishing"
        sources["order"] = PULSAR_DEFAULT

    if keep_entry_metadata is not None:
        sources["keep_entry_metadata"] = (
            "--keep-entry-metadata" if keep_entry_metadata else "--strip-entry-metadata"
        )
    elif found is not None and found.is_set("exposingBrokerEntryMetadataToClientEnabled"):
        keep_entry_metadata = found.expose_entry_metadata_to_client
        sources["keep_entry_metadata"] = f"exposingBrokerEntryMetadataToClientEnabled of {where}"
    else:
        keep_entry_metadata = False
        sources["keep_entry_metadata"] = PULSAR_DEFAULT
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
