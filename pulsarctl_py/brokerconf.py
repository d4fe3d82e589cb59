"""A broker's configuration file (``broker.conf``): the settings ledgerctl takes from it.

The file is a Java properties file, read by Pulsar's ``PulsarConfigurationLoader`` with
``java.util.Properties.load`` (comments ``#``/``!``, ``key=value`` or ``key: value`` or
``key value``, backslash continuations and escapes); ``javaproperties`` implements that
grammar. An empty value means "the default", as in Pulsar's loader.

What ledgerctl takes from it:

* where the metadata lives: ``metadataStoreUrl`` (or the deprecated ``zookeeperServers``)
  and ``bookkeeperMetadataServiceUri``. When that is empty the broker keeps BookKeeper's
  metadata in its own store under ``/ledgers``
  (``ServiceConfiguration.getBookkeeperMetadataStoreUrl``: ``"metadata-store:" +
  metadataStoreUrl + "/ledgers"``);
* how the broker writes ledgers: ``managedLedgerDefaultEnsembleSize``, ``...WriteQuorum``,
  ``...AckQuorum``, ``managedLedgerDigestType`` and ``managedLedgerPassword``
  (``ManagedLedgerConfig`` from ``BrokerService.getManagedLedgerConfig``);
* ``maxMessageSize`` and the broker entry metadata settings;
* what decides the result of the broker's compaction (``compact``):
  ``topicCompactionRetainNullKey`` (``AbstractTwoPhaseCompactor``), the compactor chosen by
  ``compactionServiceFactoryClassName`` (``PulsarCompactionServiceFactory``: publishing
  order; ``EventTimeCompactionServiceFactory``: event-time order), and the entry filters
  the dispatcher runs for every subscription, ``__compaction`` included
  (``entryFilterNames``, ``allowOverrideEntryFilters``; ``EntryFilterSupport``);
* whether the broker reads topic-level policies, and from where
  (``topicLevelPoliciesEnabled``, ``systemTopicEnabled``, ``topicPoliciesServiceClassName``;
  ``PulsarService.initTopicPoliciesService``).

The defaults are ``ServiceConfiguration``'s in Pulsar 4.0.7 (read from its class: a
``new ServiceConfiguration()``'s fields).

The password is a secret: it is kept in a :class:`~pulsarctl_py.secrets.Secret` and never
printed.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from pulsarctl_py.errors import LedgerctlError
from pulsarctl_py.secrets import Secret

#: the largest broker.conf ledgerctl reads (Pulsar's own is about 100 KiB)
MAX_SIZE = 4 * 1024 * 1024

# ServiceConfiguration's defaults for the settings below (Pulsar 4.0)
DEFAULT_ENSEMBLE = 2
DEFAULT_WRITE_QUORUM = 2
DEFAULT_ACK_QUORUM = 2
DEFAULT_DIGEST = "CRC32C"
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
DIGESTS = ("CRC32", "CRC32C", "MAC", "DUMMY")
DEFAULT_RETAIN_NULL_KEY = False
#: compactionServiceFactoryClassName: the default, and the compactor order of each factory
#: Pulsar 4.0.7 ships (``PulsarCompactionServiceFactory.newCompactor`` builds a
#: ``PublishingOrderCompactor``, ``EventTimeCompactionServiceFactory`` an
#: ``EventTimeOrderCompactor``)
DEFAULT_COMPACTION_FACTORY = "org.apache.pulsar.compaction.PulsarCompactionServiceFactory"
COMPACTION_ORDERS = {
    DEFAULT_COMPACTION_FACTORY: "publishing",
    "org.apache.pulsar.compaction.EventTimeCompactionServiceFactory": "event-time",
}
#: topicPoliciesServiceClassName's default: topic policies in each namespace's
#: ``__change_events`` system topic
SYSTEM_TOPIC_POLICIES = "org.apache.pulsar.broker.service.SystemTopicBasedTopicPoliciesService"


@dataclass(frozen=True)
class BrokerConf:
    """The settings of one broker.conf that ledgerctl uses."""

    path: str
    metadata_url: str | None
    bookkeeper_metadata_url: str | None
    ensemble: int = DEFAULT_ENSEMBLE
    write_quorum: int = DEFAULT_WRITE_QUORUM
    ack_quorum: int = DEFAULT_ACK_QUORUM
    digest_type: str = DEFAULT_DIGEST
    password: Secret | None = field(default=None, repr=False)
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    entry_metadata_interceptors: tuple[str, ...] = ()
    expose_entry_metadata_to_client: bool = False
    retain_null_key: bool = DEFAULT_RETAIN_NULL_KEY
    compaction_factory: str = DEFAULT_COMPACTION_FACTORY
    entry_filter_names: tuple[str, ...] = ()
    allow_override_entry_filters: bool = False
    topic_level_policies_enabled: bool = True
    system_topic_enabled: bool = True
    topic_policies_service: str = SYSTEM_TOPIC_POLICIES
    values: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def is_set(self, key: str) -> bool:
        """Whether the file gives ``key`` a value (an empty one means the default)."""
        return bool(self.values.get(key, "").strip())

    @property
    def compaction_order(self) -> str | None:
        """The order of the compactor ``compactionServiceFactoryClassName`` builds:
        publishing or event-time; None for a factory ledgerctl does not know."""
        return COMPACTION_ORDERS.get(self.compaction_factory)

    @property
    def topic_policies(self) -> str | None:
        """Where the broker reads topic-level policies: ``"system-topic"`` (the
        namespace's ``__change_events``), None when it reads none
        (``TopicPoliciesService.DISABLED``: ``topicLevelPoliciesEnabled=false``, or the
        system-topic service with ``systemTopicEnabled=false``), else the class name of a
        service ledgerctl cannot read (``PulsarService.initTopicPoliciesService``)."""
        if not self.topic_level_policies_enabled:
            return None
        if self.topic_policies_service == SYSTEM_TOPIC_POLICIES:
            return "system-topic" if self.system_topic_enabled else None
        return self.topic_policies_service

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "metadata_url": self.metadata_url,
            "bookkeeper_metadata_url": self.bookkeeper_metadata_url,
            "ensemble": self.ensemble,
            "write_quorum": self.write_quorum,
            "ack_quorum": self.ack_quorum,
            "digest_type": self.digest_type,
            "password": "set" if self.password is not None else "empty",
            "max_message_size": self.max_message_size,
        }


def _int(values: dict[str, str], key: str, default: int, path: str) -> int:
    text = values.get(key, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise LedgerctlError(f"{path}: {key}={text!r} is not an integer") from None
    if value < 1 or value > 2**31 - 1:
        raise LedgerctlError(f"{path}: {key}={text!r} is out of range")
    return value


def _bool(values: dict[str, str], key: str, default: bool) -> bool:
    """A boolean setting as Pulsar's ``FieldParser`` reads it (``Boolean.valueOf``: "true"
    in any case is true, any other text false); empty or absent: ``default``."""
    text = values.get(key, "").strip()
    return default if not text else text.lower() == "true"


def _names(values: dict[str, str], key: str) -> tuple[str, ...]:
    """A list setting (``FieldParser.stringToList``: comma separated, trimmed)."""
    return tuple(p.strip() for p in values.get(key, "").split(",") if p.strip())


def parse_broker_conf(text: str, path: str = "broker.conf") -> BrokerConf:
    """The settings of a broker.conf given as text."""
    import javaproperties

    try:
        values = javaproperties.loads(text)
    except (ValueError, UnicodeError) as exc:
        raise LedgerctlError(f"{path}: not a properties file: {exc}") from None
    values = {k.strip(): v.strip() for k, v in values.items()}
    metadata = values.get("metadataStoreUrl") or values.get("zookeeperServers") or None
    bookkeeper = values.get("bookkeeperMetadataServiceUri") or None
    digest = (values.get("managedLedgerDigestType") or DEFAULT_DIGEST).upper()
    if digest not in DIGESTS:
        raise LedgerctlError(
            f"{path}: managedLedgerDigestType={digest!r} is not one of {', '.join(DIGESTS)}"
        )
    ensemble = _int(values, "managedLedgerDefaultEnsembleSize", DEFAULT_ENSEMBLE, path)
    write = _int(values, "managedLedgerDefaultWriteQuorum", DEFAULT_WRITE_QUORUM, path)
    ack = _int(values, "managedLedgerDefaultAckQuorum", DEFAULT_ACK_QUORUM, path)
    if not ensemble >= write >= ack:
        # the broker refuses to start with these (ServiceConfiguration checks the order)
        raise LedgerctlError(
            f"{path}: the quorums must satisfy ensemble >= write quorum >= ack quorum "
            f"(found {ensemble}/{write}/{ack})"
        )
    password = values.get("managedLedgerPassword", "")
    interceptors = _names(values, "brokerEntryMetadataInterceptors")
    return BrokerConf(
        path=path,
        metadata_url=metadata,
        bookkeeper_metadata_url=bookkeeper,
        ensemble=ensemble,
        write_quorum=write,
        ack_quorum=ack,
        digest_type=digest,
        password=Secret(password.encode("utf-8"), f"managedLedgerPassword in {path}")
        if password
        else None,
        max_message_size=_int(values, "maxMessageSize", DEFAULT_MAX_MESSAGE_SIZE, path),
        entry_metadata_interceptors=interceptors,
        expose_entry_metadata_to_client=_bool(
            values, "exposingBrokerEntryMetadataToClientEnabled", False
        ),
        retain_null_key=_bool(values, "topicCompactionRetainNullKey", DEFAULT_RETAIN_NULL_KEY),
        compaction_factory=values.get("compactionServiceFactoryClassName")
        or DEFAULT_COMPACTION_FACTORY,
        entry_filter_names=_names(values, "entryFilterNames"),
        allow_override_entry_filters=_bool(values, "allowOverrideEntryFilters", False),
        topic_level_policies_enabled=_bool(values, "topicLevelPoliciesEnabled", True),
        system_topic_enabled=_bool(values, "systemTopicEnabled", True),
        topic_policies_service=values.get("topicPoliciesServiceClassName") or SYSTEM_TOPIC_POLICIES,
        values=values,
    )


def load_broker_conf(path: str | Path) -> BrokerConf:
    """Read a broker.conf (a regular file, at most :data:`MAX_SIZE` bytes)."""
    path = Path(path).expanduser()
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise LedgerctlError(f"broker configuration {path} is not a regular file")
            data = fh.read(MAX_SIZE + 1)
    except FileNotFoundError:
        raise LedgerctlError(f"broker configuration {path} does not exist") from None
    except PermissionError:
        from pulsarctl_py.errors import StoreUnavailable

        raise StoreUnavailable(
            f"cannot read broker configuration {path}: permission denied"
        ) from None
    except IsADirectoryError:
        raise LedgerctlError(f"broker configuration {path} is a directory") from None
    except OSError as exc:
        raise LedgerctlError(f"cannot read broker configuration {path}: {exc.strerror}") from None
    if len(data) > MAX_SIZE:
        raise LedgerctlError(f"broker configuration {path} is larger than {MAX_SIZE} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        # Properties.load(InputStream) reads ISO-8859-1
        text = data.decode("latin-1")
    return parse_broker_conf(text, str(path))
