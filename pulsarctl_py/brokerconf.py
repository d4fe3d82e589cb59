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
* ``maxMessageSize`` and the broker entry metadata settings.

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
    values: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

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
    interceptors = tuple(
        p.strip() for p in values.get("brokerEntryMetadataInterceptors", "").split(",") if p.strip()
    )
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
        expose_entry_metadata_to_client=values.get(
            "exposingBrokerEntryMetadataToClientEnabled", ""
        ).lower()
        == "true",
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
