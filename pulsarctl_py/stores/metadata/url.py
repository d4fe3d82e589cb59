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

Defaults, first found wins: the explicit URL, ``metadataStoreUrl`` of the broker
configuration (below), ``$LEDGERCTL_METADATA_URL``, ``metadata_url`` in the nearest
``ledgerctl.toml`` (the working directory's, else the closest directory above that has one),
then in ``$XDG_CONFIG_HOME/ledgerctl/config.toml`` (default ``~/.config/ledgerctl/config.toml``).
Every relative path in a config file is relative to the file's directory, made absolute
when it is read.

Where BookKeeper's metadata lives (ledger metadata, the bookie registry, cookies, the ledger
id generator) when it is not ``/ledgers`` of Pulsar's store: a broker configured with
``bookkeeperMetadataServiceUri`` keeps it there, in another root or another store
(formats.md corrections, §9). First found wins: ``--bookkeeper-metadata-url``,
``bookkeeperMetadataServiceUri`` of the broker configuration,
``$LEDGERCTL_BOOKKEEPER_METADATA_URL``, ``bookkeeper_metadata_url`` in the config files;
otherwise ``/ledgers`` of Pulsar's store (the broker's own default,
``"metadata-store:" + metadataStoreUrl + "/ledgers"`` in
``ServiceConfiguration.getBookkeeperMetadataStoreUrl``). The result rides on the
:class:`MetadataUrl` as ``bookkeeper``, so that everything that opens a store from it (Spark
executors included) finds the same place.

The broker configuration (a ``broker.conf``, :mod:`pulsarctl_py.brokerconf`) comes from
``--broker-conf FILE``, ``$LEDGERCTL_BROKER_CONF`` or ``broker_conf`` in the config files.

The command-line flags reach this module through :func:`metadata_flags` (a context the CLI
sets around one command), so that the library resolves a flag exactly as an environment
variable, one step earlier.

ZooKeeper digest credentials come only from the environment: ``LEDGERCTL_ZK_AUTH`` =
``user:password``, or ``LEDGERCTL_ZK_AUTH_FILE`` = a file holding that (the first wins).
They never appear in a URL, an error message or a repr.
"""

from __future__ import annotations

import contextlib
import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

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
LOCAL_CONFIG = "ledgerctl.toml"
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
    #: where the URL came from: "argument", the env var name, or a config file path
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


def nearest_config(cwd: Path | None = None) -> Path:
    """The nearest ``ledgerctl.toml``: in the working directory or the closest directory
    above it that has one (as git finds its repository); the working directory's own
    (absent) when none has."""
    here = Path(os.path.abspath(Path.cwd() if cwd is None else cwd))
    for folder in (here, *here.parents):
        candidate = folder / LOCAL_CONFIG
        if candidate.is_file():
            return candidate
    return here / LOCAL_CONFIG


def user_config(env: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """``$XDG_CONFIG_HOME/ledgerctl/config.toml`` (default ``~/.config/...``)."""
    env = os.environ if env is None else env
    home = Path.home() if home is None else home
    xdg = env.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg else home / ".config"
    return base / "ledgerctl" / "config.toml"


def config_paths(
    env: Mapping[str, str] | None = None, cwd: Path | None = None, home: Path | None = None
) -> list[Path]:
    """The config files consulted, in order: the nearest ``ledgerctl.toml`` up the
    directory tree, then the user's."""
    return [nearest_config(cwd), user_config(env, home)]


def relative_to_config(path: Path, key: str, value: str) -> str:
    """A setting of config file ``path`` with every relative path in it made absolute,
    relative to the file's own directory (never to the working directory, and absolute
    before it reaches a Spark executor): a rocksdb:// URL's directory, the broker
    configuration's file."""
    folder = Path(os.path.abspath(path)).parent
    if key == CONFIG_KEY_BROKER_CONF:
        return os.path.normpath(folder / os.path.expanduser(value))
    prefix = ""
    text = value.strip()
    if text.startswith("metadata-store:"):
        prefix, text = "metadata-store:", text[len("metadata-store:") :]
    if text.startswith("rocksdb://") and BOOKKEEPER_SEP not in text:
        target = os.path.expanduser(text[len("rocksdb://") :])
        if target and not os.path.isabs(target):
            return f"{prefix}rocksdb://{os.path.normpath(folder / target)}"
    return value


def _from_config(path: Path, key: str = CONFIG_KEY) -> str | None:
    try:
        with path.open("rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise LedgerctlError(f"config file {path} is not UTF-8 (byte {exc.start})") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LedgerctlError(f"cannot read config file {path}: {exc}") from None
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise LedgerctlError(f"{path}: {key} must be a string")
    return value


@dataclass(frozen=True)
class MetadataFlags:
    """The metadata flags of one command line (None: not given)."""

    bookkeeper_metadata_url: str | None = None
    broker_conf: str | None = None


_FLAGS: ContextVar[MetadataFlags | None] = ContextVar("ledgerctl_metadata_flags", default=None)


@contextlib.contextmanager
def metadata_flags(flags: MetadataFlags) -> Iterator[None]:
    """Resolve URLs with these flags (ahead of the environment) inside the block."""
    token = _FLAGS.set(flags)
    try:
        yield
    finally:
        _FLAGS.reset(token)


def _setting(
    flag: str | None,
    env_name: str,
    key: str,
    env: Mapping[str, str],
    cwd: Path | None,
    home: Path | None,
) -> tuple[str, str] | None:
    """(value, source) of a setting: the flag, the variable, then the config files."""
    if flag:
        return flag, "argument"
    if env.get(env_name):
        return env[env_name], env_name
    for path in config_paths(env, cwd, home):
        value = _from_config(path, key)
        if value:
            return relative_to_config(path, key, value), str(path)
    return None


def resolve_broker_conf(
    explicit: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
) -> BrokerConf | None:
    """The broker configuration to take settings from: the flag, the variable, the config."""
    from pulsarctl_py.brokerconf import load_broker_conf

    env = os.environ if env is None else env
    flags = _FLAGS.get()
    found = _setting(
        explicit or (flags.broker_conf if flags else None),
        ENV_BROKER_CONF,
        CONFIG_KEY_BROKER_CONF,
        env,
        cwd,
        home,
    )
    return None if found is None else load_broker_conf(found[0])


def resolve_bookkeeper_url(
    explicit: str | None = None,
    *,
    broker_conf: BrokerConf | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
) -> MetadataUrl | None:
    """Where BookKeeper's metadata lives, when given; None means Pulsar's store."""
    env = os.environ if env is None else env
    flags = _FLAGS.get()
    flag = explicit or (flags.bookkeeper_metadata_url if flags else None)
    if not flag and broker_conf is not None and broker_conf.bookkeeper_metadata_url:
        return parse_metadata_url(broker_conf.bookkeeper_metadata_url, source=broker_conf.path)
    found = _setting(flag, ENV_BOOKKEEPER_URL, CONFIG_KEY_BOOKKEEPER, env, cwd, home)
    if found is None:
        return None
    url = parse_metadata_url(found[0], source=found[1])
    if url.scheme == "zk" and url.ledger_manager is None and url.chroot:
        # zk:host:2181/bookkeeper/ledgers names BookKeeper's ledgers root, not a chroot:
        # BookKeeper's own spelling of that is zk+null://host:2181/bookkeeper/ledgers (the
        # ledger manager the LAYOUT znode names)
        url = replace(url, chroot="", ledgers_root=url.chroot, ledger_manager="null")
    return url


def resolve_metadata_url(
    explicit: str | MetadataUrl | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
) -> MetadataUrl:
    """The metadata-store URL to use: explicit, then the env var, then the config files."""
    if isinstance(explicit, MetadataUrl):
        return explicit
    env = os.environ if env is None else env
    broker = resolve_broker_conf(env=env, cwd=cwd, home=home)
    bookkeeper = resolve_bookkeeper_url(broker_conf=broker, env=env, cwd=cwd, home=home)
    if explicit:
        url = parse_metadata_url(explicit)
    elif broker is not None and broker.metadata_url:
        url = parse_metadata_url(broker.metadata_url, source=broker.path)
    else:
        found = _setting(None, ENV_URL, CONFIG_KEY, env, cwd, home)
        if found is None:
            raise LedgerctlError(
                "no metadata store given: pass a URL (zk:host:2181 or rocksdb://path), set "
                f"{ENV_URL}, give --broker-conf, or put {CONFIG_KEY} in {LOCAL_CONFIG} (here or in "
                "a directory above) or "
                "~/.config/ledgerctl/config.toml"
            )
        url = parse_metadata_url(found[0], source=found[1])
    # a URL that already names BookKeeper's place (the text form a driver hands on) keeps it
    return url if url.bookkeeper is not None else url.with_bookkeeper(bookkeeper)


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
