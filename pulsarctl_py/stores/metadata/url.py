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

Defaults, first found wins: the explicit URL, ``$LEDGERCTL_METADATA_URL``, ``metadata_url``
in ``./ledgerctl.toml``, then in ``$XDG_CONFIG_HOME/ledgerctl/config.toml`` (default
``~/.config/ledgerctl/config.toml``).

ZooKeeper digest credentials come only from the environment: ``LEDGERCTL_ZK_AUTH`` =
``user:password``, or ``LEDGERCTL_ZK_AUTH_FILE`` = a file holding that (the first wins).
They never appear in a URL, an error message or a repr.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pulsarctl_py.decoders.errors import LedgerctlError

ENV_URL = "LEDGERCTL_METADATA_URL"
ENV_ZK_AUTH = "LEDGERCTL_ZK_AUTH"
ENV_ZK_AUTH_FILE = "LEDGERCTL_ZK_AUTH_FILE"
CONFIG_KEY = "metadata_url"
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

    @property
    def connect_string(self) -> str:
        """The ZooKeeper connect string kazoo takes (hosts plus chroot)."""
        return self.target + self.chroot

    def __str__(self) -> str:
        if self.scheme == "rocksdb":
            return f"rocksdb://{self.target}"
        if self.ledger_manager is not None:
            hosts = self.target.replace(",", ";")
            return f"zk+{self.ledger_manager}://{hosts}{self.chroot}{self.ledgers_root}"
        return f"zk:{self.target}{self.chroot}"


def parse_metadata_url(text: str, *, source: str = "argument") -> MetadataUrl:
    """Parse a metadata-store URL (see the module docstring for the accepted forms)."""
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


def config_paths(
    env: Mapping[str, str] | None = None, cwd: Path | None = None, home: Path | None = None
) -> list[Path]:
    """The config files consulted, in order."""
    env = os.environ if env is None else env
    cwd = Path.cwd() if cwd is None else cwd
    home = Path.home() if home is None else home
    xdg = env.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg else home / ".config"
    return [cwd / LOCAL_CONFIG, base / "ledgerctl" / "config.toml"]


def _from_config(path: Path) -> str | None:
    try:
        with path.open("rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise LedgerctlError(f"config file {path} is not UTF-8 (byte {exc.start})") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LedgerctlError(f"cannot read config file {path}: {exc}") from None
    value = doc.get(CONFIG_KEY)
    if value is None:
        return None
    if not isinstance(value, str):
        raise LedgerctlError(f"{path}: {CONFIG_KEY} must be a string")
    return value


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
    if explicit:
        return parse_metadata_url(explicit)
    env = os.environ if env is None else env
    if env.get(ENV_URL):
        return parse_metadata_url(env[ENV_URL], source=ENV_URL)
    for path in config_paths(env, cwd, home):
        value = _from_config(path)
        if value:
            return parse_metadata_url(value, source=str(path))
    raise LedgerctlError(
        f"no metadata store given: pass a URL (zk:host:2181 or rocksdb://path), set {ENV_URL}, "
        f"or put {CONFIG_KEY} in ./{LOCAL_CONFIG} or ~/.config/ledgerctl/config.toml"
    )


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
