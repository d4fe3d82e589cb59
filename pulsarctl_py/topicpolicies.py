"""A topic's topic-level policies, read as the broker reads them, without a broker.

Pulsar 4.0.7's default ``TopicPoliciesService`` (``SystemTopicBasedTopicPoliciesService``)
keeps each namespace's topic policies in the system topic
``persistent://<tenant>/<namespace>/__change_events``:

* every change is one message (``TopicPoliciesSystemTopicClient.TopicPolicyWriter``): key
  the topic's name, ``__G__`` in front for global (replicated) policies
  (``TopicPoliciesService.wrapEventKey``); value a ``PulsarEvent`` written with the AVRO
  schema of its class (``TopicPoliciesSystemTopicClient.avroSchema``; the version is in the
  topic's schema storage): ``{actionType, eventType, replicateTo, topicPoliciesEvent:
  {domain, tenant, namespace, topic, policies}}``, ``policies`` the whole
  ``TopicPolicies`` after the change (``isGlobal``, ``persistence``, ``entryFilters``,
  ...). Deleting a topic's policies writes a message with a null value under its key;
* the broker reads the topic from the start with ``readCompacted(true)``
  (``TopicPoliciesSystemTopicClient.newReaderAsyncInternal``): the compacted ledger up to
  the ``__compaction`` horizon, then the entries after it; and replays every message in
  that order into two maps keyed by the partitioned topic's name
  (``SystemTopicBasedTopicPoliciesService.refreshTopicPoliciesCache``): a null value
  removes the key from the global map (``__G__`` key) or the local one; otherwise, for
  ``eventType`` TOPIC_POLICY and the event's topic (``TopicName.get(domain, tenant,
  namespace, topic)``), INSERT puts the policies if absent, UPDATE puts them, DELETE
  removes the local ones, NONE does nothing; ``isGlobal`` picks the map.

``BrokerService.getManagedLedgerConfig`` then takes the persistence policies (ensemble,
write and ack quorum of new data ledgers) from the local topic policies when they have
them, else from the global ones, else from the namespace's policies, else the broker's
``managedLedgerDefault*`` settings. :func:`read_topic_policies` gives both maps' entry
for one topic. A read that cannot be done as the broker does it (the system topic
partitioned, an entry missing or damaged, a value that does not decode with its schema, a
topic-policies service other than the system topic's) raises :class:`TopicPoliciesUnread`
(a configuration ledgerctl cannot follow: :class:`LedgerctlError`) instead of answering
"none": ledgerctl would otherwise write with the namespace's settings where the broker uses
the topic's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pulsarctl_py.errors import DataError, LedgerctlError, NotFoundError

if TYPE_CHECKING:
    from pulsarctl_py.brokerconf import BrokerConf

#: the namespace's topic-policies system topic (``SystemTopicNames.NAMESPACE_EVENTS_LOCAL_NAME``)
EVENTS_TOPIC = "__change_events"
#: the key prefix of global policies (``TopicPoliciesService.GLOBAL_POLICIES_MSG_KEY_PREFIX``)
GLOBAL_PREFIX = "__G__"
PERSISTENCE_FIELDS = ("bookkeeperEnsemble", "bookkeeperWriteQuorum", "bookkeeperAckQuorum")


class TopicPoliciesUnread(DataError):
    """The topic's policies cannot be read as the broker reads them (the reason)."""


@dataclass(slots=True)
class TopicPolicies:
    """One topic's policies as the broker holds them after replaying ``__change_events``."""

    topic: str  # the partitioned topic's name: the policies of all its partitions
    #: the local and global TopicPolicies (JSON objects), None when there are none
    local: dict[str, Any] | None = None
    global_: dict[str, Any] | None = None
    #: False: the broker reads no topic policies (``TopicPoliciesService.DISABLED``)
    enabled: bool = True
    #: the system topic read, and the messages of this topic replayed
    events_topic: str | None = None
    events: int = 0
    read: list[str] = field(default_factory=list)  # what was read, for people

    def persistence(self) -> tuple[tuple[int, int, int], str] | None:
        """``((ensemble, write, ack), "local" or "global")`` as
        ``BrokerService.getManagedLedgerConfig`` picks it, or None."""
        for scope, policies in (("local", self.local), ("global", self.global_)):
            found = (policies or {}).get("persistence")
            if not isinstance(found, dict):
                continue
            try:
                values = tuple(int(found[k]) for k in PERSISTENCE_FIELDS)
            except (KeyError, TypeError, ValueError):
                raise TopicPoliciesUnread(
                    f"the {scope} topic policies of {self.topic} hold persistence policies "
                    f"ledgerctl cannot read: {found!r}"
                ) from None
            return values, scope  # type: ignore[return-value]
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "enabled": self.enabled,
            "events_topic": self.events_topic,
            "events": self.events,
            "local": self.local,
            "global": self.global_,
            "read": list(self.read),
        }


def _disabled(topic: str, why: str) -> TopicPolicies:
    return TopicPolicies(topic, enabled=False, read=[why])


def read_topic_policies(source: Any, topic: str, conf: BrokerConf | None = None) -> TopicPolicies:
    """The topic-level policies of ``topic`` (a partition: its partitioned topic's), as
    the broker of ``conf`` (None: Pulsar's defaults) reads them; see the module docstring.

    ``source``: a :class:`~pulsarctl_py.ledgers.LedgerSource` with metadata and bookie
    storage (or the running bookies)."""
    from pulsarctl_py.stores.metadata import resolve_topic

    name = resolve_topic(topic).partitioned_topic
    wanted = name.full_name
    if conf is not None:
        where = conf.topic_policies
        if where is None:
            return _disabled(
                wanted,
                f"topic-level policies are off in {conf.path} (topicLevelPoliciesEnabled or "
                "systemTopicEnabled false): the broker reads none",
            )
        if where != "system-topic":
            raise LedgerctlError(
                f"{conf.path}: topicPoliciesServiceClassName={where} keeps topic policies "
                "where ledgerctl cannot read them (it reads the __change_events system "
                "topic of SystemTopicBasedTopicPoliciesService)"
            )
    if source.metadata is None:
        raise TopicPoliciesUnread(f"the topic policies of {wanted} need the metadata store")
    events = f"persistent://{name.namespace_name}/{EVENTS_TOPIC}"
    out = TopicPolicies(wanted, events_topic=events)
    try:
        for key, event in _events(source, events, out):
            _replay(out, key, event)
    except TopicPoliciesUnread:
        raise
    except LedgerctlError as exc:
        if exc.exit_code == 3:  # a store that could not be reached: said as it is
            raise
        raise TopicPoliciesUnread(
            f"the topic policies of {wanted} cannot be read as the broker reads them "
            f"({events}): {exc.one_line()}"
        ) from None
    return out


def _replay(out: TopicPolicies, key: str | None, event: dict[str, Any] | None) -> None:
    """``refreshTopicPoliciesCache`` for one message of this topic."""
    out.events += 1
    if event is None:  # a null value: the key's policies removed
        if key is not None and key.startswith(GLOBAL_PREFIX):
            out.global_ = None
        else:
            out.local = None
        return
    if event.get("eventType") != "TOPIC_POLICY":
        return
    body = event.get("topicPoliciesEvent") or {}
    policies = body.get("policies")
    action = event.get("actionType")
    is_global = isinstance(policies, dict) and policies.get("isGlobal") is True
    if action == "DELETE":
        out.local = None
    elif action == "INSERT":
        if is_global and out.global_ is None:
            out.global_ = policies
        elif not is_global and out.local is None:
            out.local = policies
    elif action == "UPDATE":
        if is_global:
            out.global_ = policies
        else:
            out.local = policies


def _event_topic(event: dict[str, Any]) -> str | None:
    """``TopicName.get(domain, tenant, namespace, topic)`` of an event, as text."""
    body = event.get("topicPoliciesEvent")
    if not isinstance(body, dict):
        return None
    parts = [body.get(k) for k in ("domain", "tenant", "namespace", "topic")]
    if not all(isinstance(p, str) and p for p in parts):
        return None
    domain, tenant, namespace, local = parts
    return f"{domain}://{tenant}/{namespace}/{local}"


def _key_topic(key: str) -> str | None:
    """The partitioned topic a message key names (``unwrapEventKey``), or None."""
    from pulsarctl_py.stores.metadata import resolve_topic

    text = key[len(GLOBAL_PREFIX) :] if key.startswith(GLOBAL_PREFIX) else key
    try:
        return resolve_topic(text).partitioned_topic.full_name
    except LedgerctlError:
        return None


def _events(source: Any, events: str, out: TopicPolicies) -> Any:
    """``(key, decoded PulsarEvent or None)`` of every message of ``out.topic`` in what a
    readCompacted reader of the system topic gets, in order."""
    from pulsarctl_py.compaction.state import topic_state
    from pulsarctl_py.decoders import Depth
    from pulsarctl_py.topics import partitions_of
    from pulsarctl_py.values import message_key_bytes, values_for

    try:
        state = topic_state(source, events)
    except NotFoundError:
        if partitions_of(source.metadata, events):
            raise TopicPoliciesUnread(
                f"{events} is a partitioned topic: ledgerctl reads the topic policies of a "
                "non-partitioned __change_events only"
            ) from None
        out.read.append(f"{events} does not exist: no topic policies were ever set")
        return
    segments: list[tuple[int, int, int, bool]] = []  # ledger, first, last, compacted
    after = None
    if state.compacted_ledger is not None and state.horizon is not None:
        if state.compacted_problem is not None:
            raise TopicPoliciesUnread(
                f"the compacted ledger of {events} cannot be read ({state.compacted_problem})"
            )
        segments.append((state.compacted_ledger, 0, (state.compacted_entries or 0) - 1, True))
        after = state.horizon
    for ledger_id, entries, _size in state.ledgers:
        if entries is None:
            raise TopicPoliciesUnread(
                f"how many entries ledger {ledger_id} of {events} holds is not known (an open "
                "ledger whose bookies did not tell)"
            )
        if not entries:
            continue
        first = 0
        if after is not None:
            if ledger_id < after[0]:
                continue
            if ledger_id == after[0]:
                first = after[1] + 1
        if first <= entries - 1:
            segments.append((ledger_id, first, entries - 1, False))
    values = None
    wanted = out.topic
    for ledger_id, first, last, compacted in segments:
        if last < first:
            continue
        view = source.ledger(ledger_id)
        if compacted:
            view.kind = "compacted"
        out.read.append(
            f"{'compacted ledger' if compacted else 'ledger'} {ledger_id} entries {first}..{last}"
        )
        expected = first
        for entry in source.entries(view, first, last, depth=Depth.MESSAGES):
            position = entry.position or (ledger_id, expected)
            if position[1] != expected:
                raise TopicPoliciesUnread(
                    f"entry {ledger_id}:{expected} of {events} is not in storage"
                )
            expected += 1
            errors = [p for p in entry.problems if p.severity == "error"]
            if errors:
                raise TopicPoliciesUnread(
                    f"entry {position[0]}:{position[1]} of {events} is damaged "
                    f"({errors[0].layer}: {errors[0].message})"
                )
            md = entry.metadata
            version = (
                md.schema_version if md is not None and md.HasField("schema_version") else None
            )
            for m in entry.messages:
                key = m.key if isinstance(m.key, str) else None
                if key is not None and _key_topic(key) != wanted:
                    continue  # another topic's (a key always names the event's topic)
                if m.null_value:
                    if key is not None:
                        yield key, None
                    continue
                if values is None:
                    values = values_for(source, events, required=True)
                got = values.decode(version, m.value, message_key_bytes(m))
                if not got.decoded or not isinstance(got.value, dict):
                    why = got.error or got.note or "not a PulsarEvent"
                    raise TopicPoliciesUnread(
                        f"message {position[0]}:{position[1]} of {events} does not decode: {why}"
                    )
                if _event_topic(got.value) != wanted:
                    continue  # the broker files an event under the event's topic
                yield key, got.value
        if expected <= last:
            raise TopicPoliciesUnread(
                f"entries {ledger_id}:{expected}..{last} of {events} are not in storage"
            )


def persistence_source(policies: TopicPolicies) -> str:
    """How a report names the topic policies a setting came from."""
    found = policies.persistence()
    scope = found[1] if found is not None else "local"
    return f"the {scope} topic policies of {policies.topic} (in {policies.events_topic})"


def install() -> None:
    """Give the offload locations this module's reader of topic policies
    (:data:`pulsarctl_py.stores.tiered.where.topic_policy_reader`: the policies are read
    through a LedgerSource, so the locator cannot import this module itself). Light: it
    imports the locator's module, not the stores."""
    from pulsarctl_py.stores.tiered import where

    where.topic_policy_reader = read_topic_policies
