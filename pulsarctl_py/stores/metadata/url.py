"""Metadata-store URLs in Pulsar's own syntax, defaults, and ZooKeeper credentials.

Accepted (``metadataStoreUrl`` / ``metadataServiceUri`` spellings, formats.md §17):

    zk:host1:2181,host2:2181[/chroot]     Pulsar's form
    zk://host1:2181,host2:2181[/chroot]   also accepted
    host1:2181[,host2:2181][/chroot]      bare ZooKeeper connect string (port required)
    zk+hierarchical://h1:2181;h2:2181/ledgers
                                          BookKeeper's metadataServiceUri; the path is the
                                          ledgers root, not a chroot
    rocksdb://path                        Pulsar's RocksDB metadata store (path as given)
    metadata-store:<any of the above>     Pulsar's BookKeeper driver prefix

Where the URL comes from when a library function is not given one, first found wins (the
rule of every setting, :mod:`pulsarctl_py.precedence`): ``--metadata-url``,
``$LEDGERCTL_METADATA_URL``, ``metadata_url`` in the nearest ``ledgerctl.toml`` (the working
directory's, else the closest directory above that has one), then in
``$XDG_CONFIG_HOME/ledgerctl/config.toml`` (default ``~/.config/ledgerctl/config.toml``),
then ``metadataStoreUrl`` (or the deprecated ``zookeeperServers``) of the broker
configuration. Every relative path in a config file is relative to the file's directory,
made absolute when it is read.

Where BookKeeper's metadata lives (ledger metadata, the bookie registry, cookies, the ledger
id generator) when it is not ``/ledgers`` of Pulsar's store: a broker configured with
``bookkeeperMetadataServiceUri`` keeps it there, in another root or another store
(formats.md corrections, §9). First found wins: ``--bookkeeper-metadata-url``,
``$LEDGERCTL_BOOKKEEPER_METADATA_URL``, ``bookkeeper_metadata_url`` in the config files,
``bookkeeperMetadataServiceUri`` of the broker configuration; otherwise ``/ledgers`` of
Pulsar's store (the broker's own default, ``"metadata-store:" + metadataStoreUrl +
"/ledgers"`` in ``ServiceConfiguration.getBookkeeperMetadataStoreUrl``). The result rides on
the :class:`MetadataUrl` as ``bookkeeper``, so that everything that opens a store from it
(Spark executors included) finds the same place. Before BookKeeper's metadata is read from
such a place, :mod:`pulsarctl_py.stores.metadata.cluster` checks that it belongs to the same
cluster as Pulsar's store.

The broker configuration (a ``broker.conf``, :mod:`pulsarctl_py.brokerconf`) comes from
``--broker-conf FILE``, ``$LEDGERCTL_BROKER_CONF`` or ``broker_conf`` in the config files.

ZooKeeper digest credentials come only from the environment: ``LEDGERCTL_ZK_AUTH`` =
``user:password``, or ``LEDGERCTL_ZK_AUTH_FILE`` = a file holding that (the first wins).
They never appear in a URL, an error message or a repr.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from pulsarctl_py import precedence
from pulsarctl_py.decoders.errors import LedgerctlError

if TYPE_CHECKING:
    from pulsarctl_py.brokerconf import BrokerConf

ENV_URL = "LEDGERCTL_METADATA_URL"
ENV_ZK_AUTH = "LEDGERCTL_ZK_AUTH"
ENV_ZK_AUTH_FILE = "LEDGERCTL_ZK_AUTH_FILE"
ENV_BOOKKEEPER_URL = "LEDGERCTL_BOOKKEEPER_METADATA_URL"
ENV_BROKER_CONF = "LEDGERCTL_BROKER_CONF"
CONFIG_KEY = "metadata_url"
CONFIG_KEY_BOOKKEEPER = "bookkeeper_metadata_url"
CONFIG_KEY_BROKER_CONF = "broker_conf"
LOCAL_CONFIG = precedence.LOCAL_CONFIG
DEFAULT_LEDGERS_ROOT = "/ledgers"

_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+):([0-9]{1,5})")
_UNSUPPORTED = ("etcd:", "oxia:", "memory:", "local-memory:")


@dataclass(frozen=True, slots=True)
class MetadataUrl:
    """Where the metadata lives: ``scheme`` zk or rocksdb, and its target."""

    scheme: str  # "zk" or "rocksdb"
    #: zk: "host:port[,host:port]" ; rocksdb: the directory
    target: str
    chroot: str = ""  # zk only, "" or "/path"
    ledgers_root: str = DEFAULT_LEDGERS_ROOT
    #: the ledger manager named by a BookKeeper ``zk+<manager>://`` URI, if that form was used
    ledger_manager: str | None = None
    #: where the URL came from: the flag, "argument" (a caller's), the env var name, a
    #: config file path, or "broker configuration PATH (key)" (pulsarctl_py.precedence)
    source: str = field(default="argument", compare=False)
    #: where BookKeeper's metadata lives when it is not ``ledgers_root`` of this store
    bookkeeper: MetadataUrl | None = None

    @property
    def connect_string(self) -> str:
        """The ZooKeeper connect string kazoo takes (hosts plus chroot)."""
        return self.target + self.chroot

    def with_bookkeeper(self, bookkeeper: MetadataUrl | None) -> MetadataUrl:
        """This URL with BookKeeper's metadata at ``bookkeeper`` (None: in this store)."""
        if bookkeeper is not None:
            bookkeeper = replace(bookkeeper, bookkeeper=None)
            if self.same_store(bookkeeper) and bookkeeper.ledgers_root == self.ledgers_root:
                bookkeeper = None
        return replace(self, bookkeeper=bookkeeper)

    def same_store(self, other: MetadataUrl) -> bool:
        """Whether ``other`` names the same store (one connection serves both)."""
        return (self.scheme, self.target, self.chroot) == (other.scheme, other.target, other.chroot)

    @property
    def bookkeeper_location(self) -> MetadataUrl:
        """Where BookKeeper's metadata lives: ``bookkeeper``, or this store's ledgers root."""
        return self.bookkeeper if self.bookkeeper is not None else replace(self, bookkeeper=None)

    def describe(self) -> str:
        """The URL, and BookKeeper's place when it is elsewhere (for messages)."""
        if self.bookkeeper is None:
            return str(self)
        return f"{self} (BookKeeper metadata: {self.bookkeeper})"

    def __str__(self) -> str:
        # with BookKeeper's metadata elsewhere the text names both places, and parses back to
        # this URL: executors, plans and data source options carry it as text
        tail = "" if self.bookkeeper is None else f"{BOOKKEEPER_SEP}{self.bookkeeper}"
        if self.scheme == "rocksdb":
            return f"rocksdb://{self.target}{tail}"
        if self.ledger_manager is not None:
            hosts = self.target.replace(",", ";")
            return f"zk+{self.ledger_manager}://{hosts}{self.chroot}{self.ledgers_root}{tail}"
        return f"zk:{self.target}{self.chroot}{tail}"

    def absolute(self) -> MetadataUrl:
        """The same place from any working directory (RocksDB paths made absolute)."""
        bookkeeper = None if self.bookkeeper is None else self.bookkeeper.absolute()
        target = os.path.abspath(self.target) if self.scheme == "rocksdb" else self.target
        return replace(self, target=target, bookkeeper=bookkeeper)


#: joins a URL and where BookKeeper's metadata lives, in the text form of a MetadataUrl
BOOKKEEPER_SEP = " bookkeeper="


def parse_metadata_url(text: str, *, source: str = "argument") -> MetadataUrl:
    """Parse a metadata-store URL (see the module docstring for the accepted forms)."""
    if BOOKKEEPER_SEP in text:
        own, _, other = text.partition(BOOKKEEPER_SEP)
        return parse_metadata_url(own, source=source).with_bookkeeper(
            parse_metadata_url(other, source=source)
        )
    url = text.strip()
    if url.startswith("metadata-store:"):
        url = url[len("metadata-store:") :]
    if not url:
        raise LedgerctlError("empty metadata-store URL")
    if url.startswith("rocksdb://"):
        path = url[len("rocksdb://") :]
        if not path:
            raise LedgerctlError(
                "rocksdb:// needs a directory, e.g. rocksdb:///pulsar/data/metadata"
            )
        return MetadataUrl("rocksdb", os.path.expanduser(path), source=source)
    for prefix in _UNSUPPORTED:
        if url.startswith(prefix):
            raise LedgerctlError(
                f"unsupported metadata store {url.split(':', 1)[0]!r}: "
                "ledgerctl reads zk: and rocksdb:// stores"
            )
    m = re.match(r"zk\+([A-Za-z0-9_-]+)://", url)
    if m:
        hosts, slash, rest = url[m.end() :].partition("/")
        root = "/" + rest.rstrip("/") if slash and rest.strip("/") else DEFAULT_LEDGERS_ROOT
        hosts = _hosts(hosts.replace(";", ","), text)
        return MetadataUrl("zk", hosts, "", root, m.group(1), source)
    if url.startswith("zk://"):
        url = url[len("zk://") :]
    elif url.startswith("zk:"):
        url = url[len("zk:") :]
    elif "://" in url:
        raise LedgerctlError(
            f"unsupported metadata-store URL scheme {url.split('://', 1)[0]!r}: "
            "use zk:host:2181[/chroot] or rocksdb://path"
        )
    hosts, slash, rest = url.partition("/")
    chroot = ""
    if slash:
        chroot = "/" + rest.rstrip("/")
        if chroot == "/":
            chroot = ""
        elif any(p in ("", ".", "..") for p in chroot[1:].split("/")):
            raise LedgerctlError(f"invalid ZooKeeper chroot {chroot!r} in {text!r}")
    return MetadataUrl("zk", _hosts(hosts, text), chroot, source=source)


def _hosts(hosts: str, original: str) -> str:
    items = [h.strip() for h in hosts.split(",")]
    if not items or not all(items):
        raise LedgerctlError(f"no ZooKeeper host in metadata-store URL {original!r}")
    for item in items:
        m = _HOST.fullmatch(item)
        if m is None or not 0 < int(m.group(2)) < 65536:
            raise LedgerctlError(
                f"invalid ZooKeeper address {item!r} in {original!r}: expected host:port"
            )
    return ",".join(items)


# the config files and the settings' precedence live in pulsarctl_py.precedence; these
# names stay importable from here
nearest_config = precedence.nearest_config
user_config = precedence.user_config
config_paths = precedence.config_paths


def resolve_broker_conf(
    explicit: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
) -> BrokerConf | None:
    """The broker configuration to take settings from: the flag, the variable, the
    config files (:mod:`pulsarctl_py.precedence`)."""
    from pulsarctl_py.brokerconf import load_broker_conf

    sources = precedence.Sources.of(env, cwd, home)
    found = precedence.resolve(precedence.BROKER_CONF_FILE, explicit, sources=sources)
    return None if found.value is None else load_broker_conf(found.value)


def _bookkeeper_url(found: precedence.Resolved) -> MetadataUrl | None:
    if not found.is_set:
        return None
    url = parse_metadata_url(found.value, source=found.source)
    if url.scheme == "zk" and url.ledger_manager is None and url.chroot:
        # zk:host:2181/bookkeeper/ledgers names BookKeeper's ledgers root, not a chroot:
        # BookKeeper's own spelling of that is zk+null://host:2181/bookkeeper/ledgers (the
        # ledger manager the LAYOUT znode names)
        url = replace(url, chroot="", ledgers_root=url.chroot, ledger_manager="null")
    return url


def resolve_bookkeeper_url(
    explicit: str | None = None,
    *,
    broker_conf: BrokerConf | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
) -> MetadataUrl | None:
    """Where BookKeeper's metadata lives, when given; None means Pulsar's store.

    ``broker_conf``: a loaded broker configuration to derive it from, in place of the one
    the settings name."""
    sources = precedence.Sources.of(
        env, cwd, home, precedence.UNSET if broker_conf is None else broker_conf
    )
    found = precedence.resolve(precedence.BOOKKEEPER_METADATA_URL, explicit, sources=sources)
    return _bookkeeper_url(found)


def resolve_metadata_url(
    explicit: str | MetadataUrl | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
) -> MetadataUrl:
    """The metadata-store URL to use, with where BookKeeper's metadata lives: each by
    :mod:`pulsarctl_py.precedence` (flag, variable, config files, broker configuration)."""
    if isinstance(explicit, MetadataUrl):
        return explicit
    sources = precedence.Sources.of(env, cwd, home)
    found = precedence.resolve(precedence.METADATA_URL, explicit, sources=sources)
    if not found.is_set:
        raise LedgerctlError(
            f"no metadata store given: pass --metadata-url (zk:host:2181 or rocksdb://path), "
            f"set {ENV_URL}, put {CONFIG_KEY} in {LOCAL_CONFIG} (here or in a directory "
            "above) or ~/.config/ledgerctl/config.toml, or give --broker-conf"
        )
    source = found.source
    if explicit and explicit != sources.flags.get(precedence.METADATA_URL.name):
        source = "argument"  # a URL a caller passes (a plan's, a split's): no flag of the user's
    url = parse_metadata_url(found.value, source=source)
    if url.bookkeeper is not None:
        # a URL that already names BookKeeper's place (the text form a driver hands on)
        return url
    bookkeeper = precedence.resolve(precedence.BOOKKEEPER_METADATA_URL, sources=sources)
    return url.with_bookkeeper(_bookkeeper_url(bookkeeper))


@dataclass(frozen=True, slots=True)
class ZkDigestAuth:
    """ZooKeeper digest credentials; the password never shows in repr or str."""

    user: str
    password: str = field(repr=False)

    @property
    def credential(self) -> str:
        """The ``user:password`` string kazoo sends."""
        return f"{self.user}:{self.password}"

    def __str__(self) -> str:
        return f"digest user {self.user}"


def zk_auth_from_env(env: Mapping[str, str] | None = None) -> ZkDigestAuth | None:
    """Digest credentials from ``LEDGERCTL_ZK_AUTH`` or ``LEDGERCTL_ZK_AUTH_FILE``, if set."""
    env = os.environ if env is None else env
    value = env.get(ENV_ZK_AUTH)
    where = ENV_ZK_AUTH
    if not value and env.get(ENV_ZK_AUTH_FILE):
        path = Path(env[ENV_ZK_AUTH_FILE]).expanduser()
        where = f"the file named by {ENV_ZK_AUTH_FILE}"
        try:
            value = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise LedgerctlError(
                f"cannot read {ENV_ZK_AUTH_FILE} ({path}): {exc.strerror or exc}"
            ) from None
    if not value:
        return None
    user, sep, password = value.partition(":")
    if not sep or not user or not password or "\n" in value:
        raise LedgerctlError(f"{where} must hold 'user:password' (digest credentials)")
    return ZkDigestAuth(user, password)
