"""How ledgerctl writes new ledgers: the cluster's settings, never ledgerctl's own.

A broker writes each kind of ledger with settings of its own configuration, and a ledger
ledgerctl writes in a broker's place must carry the same ones, or the broker cannot use it
(a managed ledger opened with another password fails with "Provided passwd does not
match", ``LedgerOpenOp``) or it is less replicated than the operator asked for:

* **compacted ledgers** (``compact --apply``, ``migrate compacted``): as the compactor
  creates them (``AbstractTwoPhaseCompactor.createLedger``): the broker's
  ``managedLedgerDefaultEnsembleSize`` / ``...WriteQuorum`` / ``...AckQuorum``, and always
  ``Compactor.COMPACTED_TOPIC_LEDGER_DIGEST_TYPE`` (CRC32) with
  ``COMPACTED_TOPIC_LEDGER_PASSWORD`` (empty);
* **data ledgers** (``migrate index``): as the managed ledger creates them
  (``ManagedLedgerImpl.asyncCreateLedger`` with the config of
  ``BrokerService.getManagedLedgerConfig``): the persistence policies
  (``bookkeeperEnsemble`` / ``bookkeeperWriteQuorum`` / ``bookkeeperAckQuorum``) of the
  topic's local topic-level policies, else of its global ones, else of its namespace's
  policies, else the broker's defaults (:func:`topic_data_settings`; the topic policies
  read from the namespace's ``__change_events`` as the broker reads them,
  :mod:`pulsarctl_py.topicpolicies`); ``managedLedgerDigestType`` and
  ``managedLedgerPassword``. A compacted ledger never takes the topic's or the
  namespace's quorums: the compactor creates it with the broker's defaults.

Where they are placed, as the broker places them (:mod:`pulsarctl_py.stores.live.placement`):
compacted ledgers with the broker's default client (its ``bookkeeperClientIsolationGroups``
/ ``...SecondaryIsolationGroups`` when set), data ledgers with the namespace's bookie
affinity group (its local policies) when it has one, recorded in the ledger's custom
metadata as ``EnsemblePlacementPolicyConfig`` as the managed ledger records it.

Where each setting comes from, first found wins (the rule of every setting,
:mod:`pulsarctl_py.precedence`): the command's flag (``--ensemble-size``,
``--write-quorum``, ``--ack-quorum``, ``--digest-type``), its variable
(``LEDGERCTL_ENSEMBLE_SIZE``, ``LEDGERCTL_WRITE_QUORUM``, ``LEDGERCTL_ACK_QUORUM``,
``LEDGERCTL_DIGEST_TYPE``), the config files (``ensemble_size``, ``write_quorum``,
``ack_quorum``, ``digest_type``), the broker configuration (``--broker-conf FILE``,
``$LEDGERCTL_BROKER_CONF``, ``broker_conf`` in ledgerctl.toml), then Pulsar's defaults
(ensemble 2, write and ack quorum 2, CRC32C, no password). A namespace's persistence
policies replace the broker configuration's quorums and the defaults, never a value the
operator gave. The managed-ledger password is a secret: only from a file
(``--managed-ledger-password-file``, ``managed_ledger_password_file`` in the config
files), ``$LEDGERCTL_MANAGED_LEDGER_PASSWORD`` or the broker configuration; never from a
flag's value, never printed. Every setting's source is reported
(:meth:`WriteSettings.sources`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.errors import LedgerctlError
from pulsarctl_py.secrets import Secret
from pulsarctl_py.stores.live.placement import BrokerIsolation, Placement, java_hashmap_order

if TYPE_CHECKING:
    from pulsarctl_py.brokerconf import BrokerConf
    from pulsarctl_py.stores.ledger_writer import LedgerConfig
    from pulsarctl_py.stores.metadata import MetadataStore

#: the variable holding the managed-ledger password (broker.conf's managedLedgerPassword)
ENV_PASSWORD = "LEDGERCTL_MANAGED_LEDGER_PASSWORD"
#: what the compactor writes with (Compactor.COMPACTED_TOPIC_LEDGER_DIGEST_TYPE / _PASSWORD)
COMPACTED_DIGEST = DigestType.CRC32
COMPACTED_PASSWORD = b""
PULSAR_DEFAULT = "Pulsar's default"


def digest_from_name(text: str) -> DigestType:
    """A digest type as broker.conf and BookKeeper name it (CRC32, CRC32C, MAC, DUMMY)."""
    return DigestType.parse(text)


@dataclass(frozen=True)
class WriteSettings:
    """The quorums, digest and password new ledgers are written with, and their sources."""

    ensemble: int
    write_quorum: int
    ack_quorum: int
    digest: DigestType
    password: Secret | None = field(default=None, repr=False)
    source: dict[str, str] = field(default_factory=dict)
    #: the broker configuration's bookie isolation settings
    isolation: BrokerIsolation = field(default_factory=BrokerIsolation)
    #: the data ledgers' placement, once :func:`data_settings` read the namespace's
    placement: Placement | None = None
    #: the settings an operator gave (a flag, a variable, a config file): a namespace's
    #: persistence policies do not replace them
    explicit: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.ensemble >= self.write_quorum >= self.ack_quorum >= 1:
            raise LedgerctlError(
                "the quorums must satisfy ensemble >= write quorum >= ack quorum >= 1 "
                f"(found {self.ensemble}/{self.write_quorum}/{self.ack_quorum}: "
                + ", ".join(f"{k} from {v}" for k, v in self.source.items() if "quorum" in k)
                + ")"
            )

    @property
    def password_bytes(self) -> bytes:
        return b"" if self.password is None else self.password.reveal()

    def sources(self) -> dict[str, Any]:
        """What each setting is and where it came from (the password only as set/empty)."""
        return {
            "ensemble": self.ensemble,
            "write_quorum": self.write_quorum,
            "ack_quorum": self.ack_quorum,
            "digest_type": self.digest.name if self.digest is not DigestType.HMAC else "MAC",
            "password": "set" if self.password_bytes else "empty",
            "placement": self.data_placement.describe(),
            "from": dict(self.source),
        }

    @property
    def data_placement(self) -> Placement:
        """Where data ledgers go: the namespace's placement when known, else the broker's
        default client's."""
        return self.placement or self.isolation.default_placement()

    def with_quorums(self, values: tuple[int, int, int], source: str) -> WriteSettings:
        """The same settings with other quorums (a namespace's persistence policies), except
        where the operator set them (a flag, a variable, a config file)."""
        src = dict(self.source)
        quorums = {"ensemble": self.ensemble, "write_quorum": self.write_quorum}
        quorums["ack_quorum"] = self.ack_quorum
        for key, value in zip(quorums, values, strict=True):
            if key not in self.explicit:
                quorums[key], src[key] = value, source
        return dataclasses.replace(
            self,
            ensemble=quorums["ensemble"],
            write_quorum=quorums["write_quorum"],
            ack_quorum=quorums["ack_quorum"],
            source=src,
        )

    # -- per kind of ledger ---------------------------------------------------------------

    def compacted_config(self, custom_metadata: dict[str, bytes]) -> LedgerConfig:
        """A compacted ledger as the broker's compactor creates it: with the broker's
        default BookKeeper client (``PulsarService.getBookKeeperClient``), so placed by
        the broker's isolation groups only, and none recorded."""
        from pulsarctl_py.stores.ledger_writer import LedgerConfig

        return LedgerConfig(
            self.ensemble,
            self.write_quorum,
            self.ack_quorum,
            COMPACTED_DIGEST,
            COMPACTED_PASSWORD,
            custom_metadata,
            self.isolation.default_placement(),
        )

    def data_config(self, custom_metadata: dict[str, bytes]) -> LedgerConfig:
        """A topic data ledger as the managed ledger creates it: placed by
        :attr:`data_placement`, which the custom metadata records when the broker's does
        (``ManagedLedgerImpl.asyncCreateLedger`` adds it to the HashMap it builds)."""
        from pulsarctl_py.stores.ledger_writer import LedgerConfig

        placement = self.data_placement
        recorded = placement.custom_metadata()
        if recorded:
            merged = {**custom_metadata, **recorded}
            custom_metadata = {k: merged[k] for k in java_hashmap_order(merged)}
        return LedgerConfig(
            self.ensemble,
            self.write_quorum,
            self.ack_quorum,
            self.digest,
            self.password_bytes,
            custom_metadata,
            placement,
        )

    def offline(self) -> WriteSettings:
        """The settings of a ledger written into ONE stopped bookie: ensemble 1, quorums 1
        (one bookie holds it; the digest and password stay the cluster's)."""
        src = dict(self.source)
        for key in ("ensemble", "write_quorum", "ack_quorum"):
            src[key] = "one stopped bookie's directories"
        return dataclasses.replace(self, ensemble=1, write_quorum=1, ack_quorum=1, source=src)


def resolve_write_settings(
    *,
    ensemble: int | None = None,
    write_quorum: int | None = None,
    ack_quorum: int | None = None,
    digest: str | None = None,
    password_file: Path | None = None,
    broker_conf: BrokerConf | bool | None = True,
    env: Mapping[str, str] | None = None,
) -> WriteSettings:
    """Each setting from its flag, its variable, the config files, the broker
    configuration, else Pulsar's default (:mod:`pulsarctl_py.precedence`).

    ``broker_conf``: a loaded configuration, None for none, or True to resolve it as every
    command does (``--broker-conf``, ``$LEDGERCTL_BROKER_CONF``, ``broker_conf``).
    """
    from pulsarctl_py import precedence as p

    conf = p.UNSET if broker_conf is True else broker_conf or None
    sources = p.Sources.of(env, broker_conf=conf)
    source: dict[str, str] = {}
    explicit: set[str] = set()

    def note(key: str, found: p.Resolved) -> Any:
        source[key] = PULSAR_DEFAULT if found.origin == p.DEFAULT else found.source
        if found.origin in (p.FLAG, p.ENV, p.CONFIG):
            explicit.add(key)
        return found.value

    quorums: list[int] = []
    for key, setting, flag in (
        ("ensemble", p.ENSEMBLE_SIZE, ensemble),
        ("write_quorum", p.WRITE_QUORUM, write_quorum),
        ("ack_quorum", p.ACK_QUORUM, ack_quorum),
    ):
        found = p.resolve(setting, flag, sources=sources)
        value = note(key, found)
        if value < 1:
            raise LedgerctlError(f"{found.source} must be at least 1")
        quorums.append(value)
    found = p.resolve(p.DIGEST_TYPE, digest, sources=sources)
    kind = digest_from_name(note("digest_type", found))
    found = p.resolve(p.MANAGED_LEDGER_PASSWORD, password_file, sources=sources)
    secret = note("password", found)
    if found.origin == p.FLAG and secret is not None:
        source["password"] = f"{found.source} ({secret.source})"
    if kind is DigestType.HMAC and not (secret and secret.reveal()):
        raise LedgerctlError("the MAC digest needs a managed-ledger password")
    found_conf = sources.broker_conf()
    isolation = BrokerIsolation()
    if found_conf is not None:
        isolation = BrokerIsolation.from_conf(
            found_conf.values, f"broker configuration {found_conf.path}"
        )
    return WriteSettings(
        *quorums, kind, secret, source, isolation=isolation, explicit=frozenset(explicit)
    )


def namespace_persistence(store: MetadataStore, namespace: str) -> tuple[int, int, int] | None:
    """The namespace's persistence policies (ensemble, write, ack quorum), if it has them.

    ``/admin/policies/<tenant>/<namespace>`` holds the namespace's Policies as JSON; its
    ``persistence`` (``PersistencePolicies``) overrides the broker's defaults for the
    topics' data ledgers (``BrokerService.getManagedLedgerConfig``), unless the topic has
    persistence policies of its own (:func:`topic_data_settings`).
    """
    import json

    node = store.get(f"/admin/policies/{namespace}")
    if node is None:
        return None
    try:
        policies = json.loads(node.data)
    except ValueError:
        return None
    persistence = policies.get("persistence") if isinstance(policies, dict) else None
    if not isinstance(persistence, dict):
        return None
    try:
        values = tuple(
            int(persistence[k])
            for k in ("bookkeeperEnsemble", "bookkeeperWriteQuorum", "bookkeeperAckQuorum")
        )
    except (KeyError, TypeError, ValueError):
        return None
    if not all(v >= 1 for v in values):
        return None
    return values  # type: ignore[return-value]


def data_settings(
    settings: WriteSettings, store: MetadataStore, namespace: str, local_name: str | None = None
) -> WriteSettings:
    """``settings`` for a topic's data ledgers: the namespace's persistence policies win
    over the broker's defaults (not over a flag); with the topic's ``local_name``, placed
    as the broker places them (the namespace's bookie affinity group, its local
    policies)."""
    if local_name is not None:
        placement = settings.isolation.data_placement(store, namespace, local_name)
        settings = dataclasses.replace(settings, placement=placement)
    found = namespace_persistence(store, namespace)
    if found is None:
        return settings
    return settings.with_quorums(found, f"the persistence policies of namespace {namespace}")


def topic_data_settings(
    settings: WriteSettings, source: Any, topic: str, conf: BrokerConf | bool | None = True
) -> WriteSettings:
    """``settings`` for ``topic``'s data ledgers, as ``BrokerService.getManagedLedgerConfig``
    picks the quorums: the topic's local topic-level persistence policies, else its
    global ones, else the namespace's, else the broker's defaults; a flag wins over all.

    ``source``: a LedgerSource with metadata and bookie storage (the topic policies are
    read from the namespace's ``__change_events``). ``conf``: the broker configuration
    (True: resolved as every command does), which says whether the broker reads topic
    policies at all. When they cannot be read as the broker reads them this raises
    :class:`~pulsarctl_py.topicpolicies.TopicPoliciesUnread`: the namespace's settings
    would be a guess."""
    from pulsarctl_py.stores.metadata import resolve_topic
    from pulsarctl_py.stores.metadata.url import resolve_broker_conf
    from pulsarctl_py.topicpolicies import persistence_source, read_topic_policies

    found = resolve_broker_conf() if conf is True else conf or None
    policies = read_topic_policies(source, topic, found)
    persistence = policies.persistence()
    assert source.metadata is not None
    name = resolve_topic(topic)
    # placed as the namespace's policies say; the topic's quorums over the namespace's
    settings = data_settings(settings, source.metadata, name.namespace_name, name.local_name)
    if persistence is not None:
        return settings.with_quorums(persistence[0], persistence_source(policies))
    return settings


def check_against_ledger(settings: WriteSettings, md: Any, ledger_id: int) -> list[str]:
    """Compare the settings with an existing data ledger of the topic.

    A different password is an error: the broker opens every ledger of the topic with its
    one managed-ledger password, so either the configuration given is not the broker's or
    the new ledgers would be unreadable to it. A different digest type is only a note
    (BookKeeper reads the digest type from each ledger's metadata).
    """
    notes: list[str] = []
    if md is None or md.password is None:
        return notes
    if md.password != settings.password_bytes:
        where = settings.source.get("password", PULSAR_DEFAULT)
        raise LedgerctlError(
            f"ledger {ledger_id} of the topic was written with another managed-ledger "
            f"password than the one ledgerctl would write with ({where}): the broker "
            f"would not open the new ledgers; give the broker's with ${ENV_PASSWORD}, "
            "--managed-ledger-password-file or --broker-conf"
        )
    if md.digest_type is not None and md.digest_type is not settings.digest:
        notes.append(
            f"ledger {ledger_id} of the topic uses the {md.digest_type.name} digest, the new "
            f"ledgers {settings.digest.name} ({settings.source.get('digest_type')})"
        )
    return notes
