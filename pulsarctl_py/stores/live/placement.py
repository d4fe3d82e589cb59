"""Which bookies a new ledger may be placed on: the broker's bookie isolation.

What a Pulsar 4.0 broker does (apache/pulsar, ``pulsar-broker`` and
``pulsar-broker-common``; checked against the 4.0.7 jars the sandbox runs):

* **A namespace's data ledgers** (and its cursor ledgers) are created by a BookKeeper client
  of their own when the namespace's *local policies* (``/admin/local-policies/<tenant>/<ns>``
  in the broker's metadata store) have a ``bookieAffinityGroup``
  (``pulsar-admin namespaces set-bookie-affinity-group``): ``BrokerService
  .getManagedLedgerConfig`` sets ``IsolatedBookieEnsemblePlacementPolicy`` with the
  properties ``isolationBookieGroups`` = ``bookkeeperAffinityGroupPrimary`` and
  ``secondaryIsolationBookieGroups`` = ``bookkeeperAffinityGroupSecondary``. With
  ``strictBookieAffinityEnabled=true`` every topic does so: without an affinity group with
  ``""`` and ``""`` (no isolation), a system topic with ``"*"`` and ``"*"`` (any bookie).
  ``ManagedLedgerImpl.asyncCreateLedger`` then records the policy in the ledger's custom
  metadata (``LedgerMetadataUtils.buildMetadataForPlacementPolicyConfig``): key
  ``EnsemblePlacementPolicyConfig``, value ``EnsemblePlacementPolicyConfig.encode()``, the
  policy class and the properties as Jackson's pretty-printed JSON in UTF-8 (a property
  whose value is null left out): :func:`encode_policy_config`.
* **Every other ledger the broker writes** (compacted ledgers, schema ledgers, the data
  ledgers of a namespace without affinity group) comes from its default client
  (``BookKeeperClientFactoryImpl.setDefaultEnsemblePlacementPolicy``): the same isolated
  policy with the broker's ``bookkeeperClientIsolationGroups`` and
  ``bookkeeperClientSecondaryIsolationGroups`` when the first is set, recorded nowhere;
  else the rack-aware policy over every writable bookie.
* **Which bookies** (``IsolatedBookieEnsemblePlacementPolicy
  .getExcludedBookiesWithIsolationGroups``), from the isolation groups of
  ``/bookies`` (``BookiesRackConfiguration``, the JSON ``{group: {bookie id: {rack,
  hostname}}}`` that ``pulsar-admin bookies set-bookie-rack`` writes) and the writable
  bookies: see :func:`excluded_bookies`. With no primary group (an empty property), or
  ``*`` among them, or no ``/bookies``, nothing is excluded. The rack-aware policy then
  picks among the rest; too few makes the broker fail the ledger
  (``BKNotEnoughBookiesException``).

ledgerctl reads the same settings (the local policies, ``/bookies``, and the broker
configuration's three settings) and keeps the same bookies out. Where one of them cannot
be read (not JSON, not the shape Pulsar writes), it refuses instead of placing the ledger
elsewhere. Within the bookies left it chooses at random: racks are not spread over (a
note says so when the bookies left are in several racks).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pulsarctl_py.errors import DataError, LedgerctlError

if TYPE_CHECKING:
    from pulsarctl_py.stores.metadata import MetadataStore

#: IsolatedBookieEnsemblePlacementPolicy's class and property names
ISOLATED_POLICY = "org.apache.pulsar.bookie.rackawareness.IsolatedBookieEnsemblePlacementPolicy"
PRIMARY = "isolationBookieGroups"
SECONDARY = "secondaryIsolationBookieGroups"
#: the primary group that excludes nothing (PULSAR_SYSTEM_TOPIC_ISOLATION_GROUP)
ANY_GROUP = "*"
#: the custom metadata key (EnsemblePlacementPolicyConfig.ENSEMBLE_PLACEMENT_POLICY_CONFIG)
CONFIG_KEY = "EnsemblePlacementPolicyConfig"
#: where Pulsar keeps the bookies' groups and racks (BookieRackAffinityMapping)
RACKS_PATH = "/bookies"
LOCAL_POLICIES = "/admin/local-policies"
#: the rack a bookie without rack information is in (NetworkTopology.DEFAULT_RACK)
DEFAULT_RACK = "/default-rack"

#: the system topics of SystemTopicNames (strictBookieAffinityEnabled places them anywhere)
SYSTEM_TOPICS = frozenset(
    {
        "__change_events",
        "__transaction_buffer_snapshot",
        "__transaction_buffer_snapshot_indexes",
        "__transaction_buffer_snapshot_segments",
    }
)

#: rack configuration: group -> bookie id -> its BookieInfo (rack, hostname)
Racks = dict[str, dict[str, dict[str, Any]]]


def split_groups(text: str | None) -> list[str]:
    """A group list as Java's ``String.split(",")`` splits it (trailing empty strings
    dropped, nothing trimmed); none for an empty or missing one."""
    if not text:
        return []
    parts = text.split(",")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


@dataclass(frozen=True)
class Placement:
    """How the broker would place one kind of ledger.

    ``primary`` and ``secondary`` are the isolation properties as the broker holds them
    (comma-separated groups; None: not set). ``recorded``: the ledger's custom metadata
    carries the policy (a namespace's own client). ``isolated``: the isolated policy is in
    use at all (else every writable bookie may be chosen). ``source`` says where it came
    from, for people.
    """

    isolated: bool = False
    primary: str | None = None
    secondary: str | None = None
    recorded: bool = False
    source: str = "no bookie isolation"

    @property
    def primary_groups(self) -> list[str]:
        return split_groups(self.primary)

    @property
    def secondary_groups(self) -> list[str]:
        return split_groups(self.secondary)

    def custom_metadata(self) -> dict[str, bytes]:
        """The custom metadata entry the broker records for this placement (none when it
        records none)."""
        if not self.recorded:
            return {}
        return {CONFIG_KEY: encode_policy_config(self.primary, self.secondary)}

    def describe(self) -> str:
        if not self.isolated:
            return self.source
        groups = f"isolation group(s) {self.primary or '(none)'}"
        if self.secondary:
            groups += f", secondary {self.secondary}"
        return f"{groups} ({self.source})"

    def candidates(
        self, writable: Iterable[str], ensemble: int, racks: Racks | None
    ) -> tuple[list[str], list[str]]:
        """The bookies among ``writable`` the broker could choose for an ensemble of
        ``ensemble``, and notes for people."""
        known = sorted(set(writable))
        notes: list[str] = []
        if not self.isolated or not self.primary:
            # no primary group: the policy reads no rack configuration and keeps every
            # bookie (IsolatedBookieEnsemblePlacementPolicy.initialize)
            left = known
        else:
            out = excluded_bookies(
                known, racks, ensemble, self.primary_groups, self.secondary_groups
            )
            left = [b for b in known if b not in out]
            if racks is None and self.primary_groups and ANY_GROUP not in self.primary_groups:
                notes.append(
                    f"{self.describe()}: no {RACKS_PATH} in the metadata store, so no bookie "
                    "is in any group; any writable bookie may be chosen, as the broker would"
                )
        spread = {rack_of(racks, b) for b in left}
        if len(spread) > 1:
            notes.append(
                f"the bookies to choose from are in {len(spread)} racks ({RACKS_PATH}): the "
                "ensemble was chosen at random among them, not spread over the racks as the "
                "broker's rack-aware policy tries to"
            )
        return left, notes

    def not_enough(self, left: list[str], ensemble: int) -> str:
        """Why an ensemble cannot be chosen, in one line."""
        among = f" ({', '.join(left)})" if left else ""
        if not self.isolated:
            return (
                f"not enough writable bookies: the ledger needs an ensemble of {ensemble}, "
                f"{len(left)} are registered as available and writable{among}"
            )
        return (
            f"not enough bookies for {self.describe()}: the ledger needs an ensemble of "
            f"{ensemble}, {len(left)} writable bookies are allowed{among}; the broker would "
            "fail this ledger too (add bookies to the group or change the group)"
        )


NO_ISOLATION = Placement()


def excluded_bookies(
    known: Iterable[str],
    racks: Racks | None,
    ensemble: int,
    primary: Iterable[str],
    secondary: Iterable[str],
) -> set[str]:
    """The bookies IsolatedBookieEnsemblePlacementPolicy keeps out of a new ensemble
    (``getExcludedBookiesWithIsolationGroups``, Pulsar 4.0.7), ``known`` being the writable
    bookies:

    1. nothing with ``*`` among the primary groups, or without a rack configuration (or
       with an empty one);
    2. the bookies of every group that is not primary, and every known bookie in no
       primary group; a bookie in a primary group too stays in;
    3. when fewer known bookies are in the primary groups than the ensemble needs, the
       bookies of the secondary groups come in (each counted, registered or not);
    4. when that still makes too few, the known bookies in no group at all come in.
    """
    primary = set(primary)
    secondary = list(secondary)
    excluded: set[str] = set()
    if ANY_GROUP in primary or not racks:
        return excluded
    known = set(known)
    in_primary: set[str] = set()
    available = 0
    for group, bookies in racks.items():
        if group not in primary:
            excluded.update(bookies)
            continue
        for bookie in bookies:
            if bookie not in in_primary:
                in_primary.add(bookie)
                available += bookie in known
    in_other_groups = set(excluded)
    ungrouped = known - in_primary
    excluded |= ungrouped
    for group in primary:
        excluded -= set(racks.get(group) or ())
    allowed = available
    if available < ensemble:
        for group in secondary:
            for bookie in racks.get(group) or ():
                if bookie in excluded:
                    excluded.discard(bookie)
                    allowed += 1
    if allowed < ensemble:
        excluded -= ungrouped - in_other_groups
    return excluded


def rack_of(racks: Racks | None, bookie: str) -> str:
    """A bookie's rack as ``/bookies`` gives it (BookieRackAffinityMapping), else the
    default rack."""
    for bookies in (racks or {}).values():
        info = bookies.get(bookie)
        if isinstance(info, Mapping) and isinstance(info.get("rack"), str) and info["rack"]:
            rack = info["rack"]
            return rack if rack.startswith("/") else "/" + rack
    return DEFAULT_RACK


# -- the JSON the broker records ---------------------------------------------------------------


def _string(value: str) -> str:
    # Jackson escapes what JSON requires (quote, backslash, control characters, the usual
    # ones by their short escapes) and writes everything else as UTF-8, as Python does here
    return json.dumps(value, ensure_ascii=False)


def encode_policy_config(primary: str | None, secondary: str | None) -> bytes:
    """``EnsemblePlacementPolicyConfig.encode()`` of the isolated policy with these
    properties: Jackson's default pretty printer (two-space indent, ``" : "``, ``{ }`` for
    an empty object), the properties in the iteration order of the broker's HashMap
    (``isolationBookieGroups`` first), a null one left out."""
    props = [(k, v) for k, v in ((PRIMARY, primary), (SECONDARY, secondary)) if v is not None]
    if props:
        inner = ",\n".join(f"    {_string(k)} : {_string(v)}" for k, v in props)
        properties = "{\n" + inner + "\n  }"
    else:
        properties = "{ }"
    text = f'{{\n  "policyClass" : {_string(ISOLATED_POLICY)},\n  "properties" : {properties}\n}}'
    return text.encode("utf-8")


def decode_policy_config(data: bytes) -> dict[str, Any]:
    """The policy class and properties of an ``EnsemblePlacementPolicyConfig`` value."""
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"{CONFIG_KEY} is not JSON: {exc}") from None
    if not isinstance(value, dict) or not isinstance(value.get("policyClass"), str):
        raise DataError(f"{CONFIG_KEY} names no policyClass")
    props = value.get("properties") or {}
    if not isinstance(props, dict):
        raise DataError(f"{CONFIG_KEY}: properties is not an object")
    return {"policy_class": value["policyClass"], "properties": props}


# -- reading the settings ------------------------------------------------------------------------


def read_racks(store: MetadataStore) -> Racks | None:
    """The rack configuration in ``/bookies`` of Pulsar's metadata store; None when there
    is none. A value that is not the JSON Pulsar writes is an error: the groups cannot be
    told."""
    node = store.get(RACKS_PATH)
    if node is None or not node.data.strip():
        return None
    try:
        value = json.loads(node.data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(
            f"{RACKS_PATH} in {store.url} is not JSON ({exc}): the bookies' isolation groups "
            "cannot be told, so no ledger is placed"
        ) from None
    if not isinstance(value, dict) or not all(
        isinstance(g, dict) and all(isinstance(i, dict) or i is None for i in g.values())
        for g in value.values()
    ):
        raise DataError(
            f"{RACKS_PATH} in {store.url} is not a map of groups to bookies (as `pulsar-admin "
            "bookies set-bookie-rack` writes it): the bookies' isolation groups cannot be "
            "told, so no ledger is placed"
        )
    return {group: {b: (i or {}) for b, i in bookies.items()} for group, bookies in value.items()}


def namespace_affinity(
    store: MetadataStore, namespace: str
) -> tuple[str | None, str | None] | None:
    """The namespace's bookie affinity group (primary, secondary) from its local policies;
    None when it has none."""
    path = f"{LOCAL_POLICIES}/{namespace}"
    node = store.get(path)
    if node is None:
        return None
    try:
        policies = json.loads(node.data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(
            f"{path} is not JSON ({exc}): the namespace's bookie affinity group cannot be "
            "told, so no ledger is placed"
        ) from None
    group = policies.get("bookieAffinityGroup") if isinstance(policies, dict) else None
    if group is None:
        return None
    values = (
        (
            group.get("bookkeeperAffinityGroupPrimary"),
            group.get("bookkeeperAffinityGroupSecondary"),
        )
        if isinstance(group, dict)
        else None
    )
    if values is None or not all(v is None or isinstance(v, str) for v in values):
        raise DataError(
            f"{path}: bookieAffinityGroup is not the object Pulsar writes: the namespace's "
            "bookie affinity group cannot be told, so no ledger is placed"
        )
    return values


def is_system_topic(namespace: str, local_name: str) -> bool:
    """``BrokerService.isSystemTopic``, closely: a topic of a system namespace (tenant
    ``pulsar``: ``pulsar/system``, the heartbeat and SLA namespaces) or one of
    SystemTopicNames' topics (a partition of one included)."""
    base = local_name.split("-partition-")[0]
    return namespace.split("/")[0] == "pulsar" or base in SYSTEM_TOPICS


@dataclass(frozen=True)
class BrokerIsolation:
    """The broker configuration's isolation settings (``ServiceConfiguration``)."""

    groups: str | None = None  # bookkeeperClientIsolationGroups
    secondary: str | None = None  # bookkeeperClientSecondaryIsolationGroups
    strict: bool = False  # strictBookieAffinityEnabled
    source: str = "Pulsar's default"

    @classmethod
    def from_conf(cls, values: Mapping[str, str], source: str) -> BrokerIsolation:
        groups = values.get("bookkeeperClientIsolationGroups", "").strip() or None
        secondary = values.get("bookkeeperClientSecondaryIsolationGroups", "").strip() or None
        strict_text = values.get("strictBookieAffinityEnabled", "").strip().lower()
        if strict_text not in ("", "true", "false"):
            raise LedgerctlError(
                f"{source}: strictBookieAffinityEnabled={strict_text!r} is not true or false"
            )
        return cls(groups, secondary, strict_text == "true", source)

    def default_placement(self) -> Placement:
        """The broker's default client: compacted and schema ledgers, and the data ledgers
        of a namespace without affinity group (when not strict)."""
        if not self.groups:
            return NO_ISOLATION
        return Placement(
            True,
            self.groups,
            self.secondary,
            recorded=False,
            source=f"bookkeeperClientIsolationGroups of the {self.source}",
        )

    def data_placement(self, store: MetadataStore, namespace: str, local_name: str) -> Placement:
        """A topic's data ledgers (``BrokerService.getManagedLedgerConfig``)."""
        affinity = namespace_affinity(store, namespace)
        if affinity is not None:
            return Placement(
                True,
                affinity[0],
                affinity[1],
                recorded=True,
                source=f"the bookie affinity group of namespace {namespace}",
            )
        if self.strict:
            groups = ANY_GROUP if is_system_topic(namespace, local_name) else ""
            return Placement(
                True,
                groups,
                groups,
                recorded=True,
                source=f"strictBookieAffinityEnabled of the {self.source}",
            )
        return self.default_placement()


def java_hashmap_order(keys: Iterable[str], capacity: int = 8) -> list[str]:
    """``keys`` (in insertion order) in the iteration order of a java.util.HashMap of that
    table size: by bucket (``String.hashCode`` spread as ``h ^ (h >>> 16)``), insertion
    order within one. The broker's data ledger metadata is such a map (4 keys or fewer: 8
    buckets on Java 17)."""

    def bucket(key: str) -> int:
        units = key.encode("utf-16-be")
        h = 0
        for i in range(0, len(units), 2):
            h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    order = list(keys)
    return sorted(order, key=lambda k: (bucket(k), order.index(k)))
