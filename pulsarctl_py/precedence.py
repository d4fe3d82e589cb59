"""Where every setting comes from: one rule, in one place.

Each setting ledgerctl takes is declared once below (:data:`SETTINGS`) and found by
:func:`resolve`, which returns its value and its source. The rule is the same for all of
them, first found wins:

1. the command's **flag** (``--metadata-url``, ...);
2. the **environment variable** (``LEDGERCTL_METADATA_URL``, ...);
3. the **config files**: the nearest ``ledgerctl.toml`` (the working directory's, else the
   closest directory above that has one, as git finds its repository), then
   ``$XDG_CONFIG_HOME/ledgerctl/config.toml`` (default ``~/.config/ledgerctl/config.toml``);
4. the value **derived from the broker configuration** (``broker.conf``: the setting
   ``broker_conf``, itself found by this same rule): ``metadataStoreUrl``,
   ``bookkeeperMetadataServiceUri``, ``maxMessageSize``, the managed-ledger quorums, digest
   and password, the compactor's ``exposingBrokerEntryMetadataToClientEnabled``,
   ``topicCompactionRetainNullKey`` and ``compactionServiceFactoryClassName``;
5. the **default**.

A ``--broker-conf`` flag is the flag of the ``broker_conf`` setting only: the values
derived from the file it names rank fourth, below any flag, variable or config file that
sets those values itself. ``--broker-conf b.conf`` with ``LEDGERCTL_METADATA_URL`` set
reads the store that variable names, and takes from ``b.conf`` what nothing above sets
(``ledgerctl config`` shows each value, its source and what it overrides).

Not every setting has every source: ZooKeeper credentials and the bookie TLS client
certificate come only from the environment; secrets come only from variables or files,
never from a flag's value nor from a config file (a config file may name a file holding
one). Every relative path in a config file (a ``rocksdb://`` directory, ``bookie_dirs``,
``broker_conf``, the CA and password files) is relative to the file's own directory and
made absolute when read (Spark executors run elsewhere).

The flags reach this module in two ways: as the ``explicit`` argument of :func:`resolve`
(a library function given a URL), or through :func:`flags`, a context the CLI sets around
one command so that the library resolves a flag exactly as a variable, one step earlier.
"""

from __future__ import annotations

import contextlib
import os
import tomllib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.errors import LedgerctlError

if TYPE_CHECKING:
    from pulsarctl_py.brokerconf import BrokerConf

LOCAL_CONFIG = "ledgerctl.toml"

#: the origins of a value, highest rank first
FLAG = "flag"
ENV = "env"
CONFIG = "config"
BROKER_CONF = "broker_conf"
DEFAULT = "default"
ORIGINS = (FLAG, ENV, CONFIG, BROKER_CONF, DEFAULT)


# -- the config files ---------------------------------------------------------------------


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


def load_config(path: Path) -> dict[str, Any] | None:
    """A config file's settings; None when it does not exist; one line when it is bad."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise LedgerctlError(f"config file {path} is not UTF-8 (byte {exc.start})") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LedgerctlError(f"cannot read config file {path}: {exc}") from None


def _folder(path: Path) -> Path:
    return Path(os.path.abspath(path)).parent


def _relative_path(config: Path, value: str) -> str:
    return os.path.normpath(_folder(config) / os.path.expanduser(value))


def _relative_url(config: Path, value: str) -> str:
    """A metadata URL of a config file with a relative ``rocksdb://`` directory made
    absolute, relative to the file (other URLs as written)."""
    prefix = ""
    text = value.strip()
    if text.startswith("metadata-store:"):
        prefix, text = "metadata-store:", text[len("metadata-store:") :]
    if text.startswith("rocksdb://") and " bookkeeper=" not in text:
        target = os.path.expanduser(text[len("rocksdb://") :])
        if target and not os.path.isabs(target):
            return f"{prefix}rocksdb://{os.path.normpath(_folder(config) / target)}"
    return value


# -- kinds of values: how each source spells them -------------------------------------------


class Kind:
    """How a setting's value is written by a flag, a variable, a config file and a
    broker configuration, and what it becomes (one Python type per kind)."""

    what = "a string"

    def flag(self, value: Any) -> Any:
        return value

    def env(self, raw: str, name: str) -> Any:
        return raw

    def config(self, value: Any, path: Path, key: str) -> Any:
        if not isinstance(value, str):
            raise LedgerctlError(f"{path}: {key} must be {self.what}")
        return value

    def conf(self, raw: str, where: str) -> Any:
        return self.env(raw, where)

    def shown(self, value: Any) -> Any:
        """The value as ``ledgerctl config`` shows it (JSON-friendly, never a secret)."""
        return value


class Text(Kind):
    pass


class Url(Kind):
    def config(self, value: Any, path: Path, key: str) -> Any:
        return _relative_url(path, super().config(value, path, key))


class PathKind(Kind):
    what = "a path"

    def flag(self, value: Any) -> Any:
        return str(value)

    def config(self, value: Any, path: Path, key: str) -> Any:
        return _relative_path(path, super().config(value, path, key))


class Paths(Kind):
    """Several paths: flags repeated, a variable separated by ``os.pathsep``."""

    what = "a list of paths"

    def flag(self, value: Any) -> Any:
        return [str(v) for v in value]

    def env(self, raw: str, name: str) -> Any:
        return [p for p in raw.split(os.pathsep) if p]

    def config(self, value: Any, path: Path, key: str) -> Any:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            raise LedgerctlError(f"{path}: {key} must be {self.what}")
        return [_relative_path(path, v) for v in items]


class Items(Kind):
    """Several values: flags repeated, a variable or config string comma-separated."""

    what = "a list of strings"

    def flag(self, value: Any) -> Any:
        return [str(v) for v in value]

    def env(self, raw: str, name: str) -> Any:
        return [raw]

    def config(self, value: Any, path: Path, key: str) -> Any:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            raise LedgerctlError(f"{path}: {key} must be {self.what}")
        return list(items)


class Integer(Kind):
    what = "an integer"

    def env(self, raw: str, name: str) -> Any:
        try:
            return int(raw.strip())
        except ValueError:
            raise LedgerctlError(f"{name}={raw!r} is not an integer") from None

    def config(self, value: Any, path: Path, key: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise LedgerctlError(f"{path}: {key} must be {self.what}")
        return value


class ByteCount(Integer):
    """A number of bytes, at least 1."""

    what = "a number of bytes"

    def env(self, raw: str, name: str) -> Any:
        text = raw.strip()
        if not text.isdigit() or int(text) < 1:
            raise LedgerctlError(f"{name}={raw!r}: expected a number of bytes")
        return int(text)

    def config(self, value: Any, path: Path, key: str) -> Any:
        found = super().config(value, path, key)
        if found < 1:
            raise LedgerctlError(f"{path}: {key} must be {self.what}")
        return found


class Number(Kind):
    what = "a number"

    def flag(self, value: Any) -> Any:
        return float(value)

    def env(self, raw: str, name: str) -> Any:
        try:
            return float(raw.strip())
        except ValueError:
            raise LedgerctlError(f"{name}={raw!r} is not a number") from None

    def config(self, value: Any, path: Path, key: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise LedgerctlError(f"{path}: {key} must be {self.what}")
        return float(value)


class Switch(Kind):
    what = "true or false"

    def env(self, raw: str, name: str) -> Any:
        text = raw.strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise LedgerctlError(f"{name}={raw!r}: use 1 or 0")

    def config(self, value: Any, path: Path, key: str) -> Any:
        if not isinstance(value, bool):
            raise LedgerctlError(f"{path}: {key} must be {self.what}")
        return value

    def conf(self, raw: str, where: str) -> Any:
        # java.util.Properties values read by Boolean.parseBoolean: "true" in any case
        return raw.strip().lower() == "true"


class Size(Kind):
    """A size in bytes: ``5MiB``, ``512m``, ``1g`` or a plain number (pulsarctl_py.limits)."""

    what = "a size (5MiB, 512m or bytes)"

    def _parse(self, text: str, where: str) -> int:
        from pulsarctl_py.limits import parse_limit

        try:
            return parse_limit(text)
        except ValueError as exc:
            raise LedgerctlError(f"{where}: {exc}") from None

    def flag(self, value: Any) -> Any:
        return self._parse(str(value), "--max-message-size")

    def env(self, raw: str, name: str) -> Any:
        return self._parse(raw, name)

    def config(self, value: Any, path: Path, key: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise LedgerctlError(f"{path}: {key} must be {self.what}")
        return self._parse(str(value), f"{path}: {key}")


class CompactionOrder(Kind):
    """The compactor's order: ``publishing`` or ``event-time``; the broker configuration
    names it by the factory class that builds the compactor
    (``compactionServiceFactoryClassName``, pulsarctl_py.brokerconf)."""

    what = "publishing or event-time"
    ORDERS = ("publishing", "event-time")

    def flag(self, value: Any) -> Any:
        return str(getattr(value, "value", value))

    def env(self, raw: str, name: str) -> Any:
        text = raw.strip().lower()
        if text not in self.ORDERS:
            raise LedgerctlError(f"{name}={raw!r}: use publishing or event-time")
        return text

    def config(self, value: Any, path: Path, key: str) -> Any:
        return self.env(super().config(value, path, key), f"{path}: {key}")

    def conf(self, raw: str, where: str) -> Any:
        from pulsarctl_py.brokerconf import COMPACTION_ORDERS

        order = COMPACTION_ORDERS.get(raw.strip())
        if order is None:
            raise LedgerctlError(
                f"{where}: compactionServiceFactoryClassName={raw.strip()} is not a compactor "
                "ledgerctl knows (PulsarCompactionServiceFactory: publishing order, "
                "EventTimeCompactionServiceFactory: event-time order); give --order if that "
                "compactor orders messages like one of them"
            )
        return order


class SecretKind(Kind):
    """A secret: a flag and a config file name a *file* holding it, a variable and the
    broker configuration hold the value itself. Shown only as set or empty."""

    what = "the path of a file holding the secret"

    def flag(self, value: Any) -> Any:
        from pulsarctl_py.secrets import secret_from

        return secret_from(None, Path(value))

    def env(self, raw: str, name: str) -> Any:
        from pulsarctl_py.secrets import Secret

        return Secret(os.fsencode(raw), f"${name}")

    def config(self, value: Any, path: Path, key: str) -> Any:
        from pulsarctl_py.secrets import secret_from

        return secret_from(None, Path(_relative_path(path, super().config(value, path, key))))

    def conf(self, raw: str, where: str) -> Any:
        from pulsarctl_py.secrets import Secret

        return Secret(raw.encode("utf-8"), where)

    def shown(self, value: Any) -> Any:
        return None if value is None else ("set" if value.reveal() else "empty")


class EnvSecret(Kind):
    """A secret that only a variable holds: shown as set, never read here."""

    def env(self, raw: str, name: str) -> Any:
        return "set"


# -- the settings ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One setting: its name (and ``ledgerctl config`` row), and each source's spelling."""

    name: str
    kind: Kind
    #: the command-line flag (None: no command takes one)
    flag: str | None = None
    #: the environment variable
    env: str | None = None
    #: the key in the config files (None: not read from them)
    key: str | None = None
    #: the broker.conf keys it is derived from, first non-empty wins
    conf: tuple[str, ...] = ()
    #: the value when no source sets it, and how ``ledgerctl config`` describes it
    default: Any = None
    default_text: str = "not set"


def _setting(name: str, kind: Kind, flag: str | None, env: str | None, **kw: Any) -> Setting:
    return Setting(name, kind, flag, env, kw.pop("key", name), **kw)


BROKER_CONF_FILE = _setting(
    "broker_conf",
    PathKind(),
    "--broker-conf",
    "LEDGERCTL_BROKER_CONF",
)
METADATA_URL = _setting(
    "metadata_url",
    Url(),
    "--metadata-url",
    "LEDGERCTL_METADATA_URL",
    conf=("metadataStoreUrl", "zookeeperServers"),
    default_text="not set",
)
BOOKKEEPER_METADATA_URL = _setting(
    "bookkeeper_metadata_url",
    Url(),
    "--bookkeeper-metadata-url",
    "LEDGERCTL_BOOKKEEPER_METADATA_URL",
    conf=("bookkeeperMetadataServiceUri",),
    default_text="default: /ledgers of the metadata store",
)
BOOKIE_DIRS = _setting(
    "bookie_dirs",
    Paths(),
    "--bookie-dir",
    "LEDGERCTL_BOOKIE_DIRS",
    default=[],
    default_text="not set: entries are read from the running bookies",
)
MAX_MESSAGE_SIZE = _setting(
    "max_message_size",
    Size(),
    "--max-message-size",
    "LEDGERCTL_MAX_MESSAGE_SIZE",
    conf=("maxMessageSize",),
    default=5 * 1024 * 1024,
    default_text="default: the broker's default maxMessageSize",
)
BOOKIE_ADDRESSES = _setting(
    "bookie_addresses",
    Items(),
    "--bookie-address",
    "LEDGERCTL_BOOKIE_ADDRESSES",
    default=[],
    default_text="default: the addresses in ledger metadata",
)
BOOKIE_TLS = _setting(
    "bookie_tls",
    Switch(),
    "--bookie-tls",
    "LEDGERCTL_BOOKIE_TLS",
    default=False,
    default_text="default: off (on with a CA file)",
)
BOOKIE_CA_FILE = _setting(
    "bookie_ca_file",
    PathKind(),
    "--bookie-ca-file",
    "LEDGERCTL_BOOKIE_CA_FILE",
    default_text="default: the system CAs",
)
BOOKIE_TIMEOUT = _setting(
    "bookie_timeout",
    Number(),
    "--bookie-timeout",
    "LEDGERCTL_BOOKIE_TIMEOUT",
    default=5.0,
    default_text="default",
)
BOOKIE_PROTOCOL = _setting(
    "bookie_protocol",
    Text(),
    "--bookie-protocol",
    "LEDGERCTL_BOOKIE_PROTOCOL",
    default="v3",
    default_text="default",
)
BOOKIE_TLS_CERT_FILE = _setting(
    "bookie_tls_cert_file", PathKind(), None, "LEDGERCTL_BOOKIE_TLS_CERT_FILE", key=None
)
BOOKIE_TLS_KEY_FILE = _setting(
    "bookie_tls_key_file", PathKind(), None, "LEDGERCTL_BOOKIE_TLS_KEY_FILE", key=None
)
BOOKIE_TLS_KEY_PASSWORD = _setting(
    "bookie_tls_key_password", EnvSecret(), None, "LEDGERCTL_BOOKIE_TLS_KEY_PASSWORD", key=None
)
BOOKIE_TLS_HOSTNAME_CHECK = _setting(
    "bookie_tls_hostname_check",
    Switch(),
    None,
    "LEDGERCTL_BOOKIE_TLS_HOSTNAME_CHECK",
    key=None,
    default=True,
    default_text="default: on",
)
# The defaults below are ServiceConfiguration's (Pulsar 4.0), as pulsarctl_py.brokerconf
# and pulsarctl_py.limits hold them (a test checks they agree); not imported from there, as
# brokerconf imports the stores, which import this module.
ENSEMBLE_SIZE = _setting(
    "ensemble_size",
    Integer(),
    "--ensemble-size",
    "LEDGERCTL_ENSEMBLE_SIZE",
    conf=("managedLedgerDefaultEnsembleSize",),
    default=2,
    default_text="Pulsar's default",
)
WRITE_QUORUM = _setting(
    "write_quorum",
    Integer(),
    "--write-quorum",
    "LEDGERCTL_WRITE_QUORUM",
    conf=("managedLedgerDefaultWriteQuorum",),
    default=2,
    default_text="Pulsar's default",
)
ACK_QUORUM = _setting(
    "ack_quorum",
    Integer(),
    "--ack-quorum",
    "LEDGERCTL_ACK_QUORUM",
    conf=("managedLedgerDefaultAckQuorum",),
    default=2,
    default_text="Pulsar's default",
)
DIGEST_TYPE = _setting(
    "digest_type",
    Text(),
    "--digest-type",
    "LEDGERCTL_DIGEST_TYPE",
    conf=("managedLedgerDigestType",),
    default="CRC32C",
    default_text="Pulsar's default",
)
MANAGED_LEDGER_PASSWORD = _setting(
    "managed_ledger_password",
    SecretKind(),
    "--managed-ledger-password-file",
    "LEDGERCTL_MANAGED_LEDGER_PASSWORD",
    key="managed_ledger_password_file",
    conf=("managedLedgerPassword",),
    default_text="Pulsar's default: none",
)
LEDGER_PASSWORD = _setting(
    "ledger_password",
    SecretKind(),
    "--password-file",
    "LEDGERCTL_LEDGER_PASSWORD",
    key="ledger_password_file",
    default_text="not set: each ledger's password in its metadata",
)
KEEP_ENTRY_METADATA = _setting(
    "keep_entry_metadata",
    Switch(),
    "--keep-entry-metadata",
    "LEDGERCTL_KEEP_ENTRY_METADATA",
    conf=("exposingBrokerEntryMetadataToClientEnabled",),
    default=False,
    default_text="default: stripped, as the broker's default",
)
RETAIN_NULL_KEY = _setting(
    "retain_null_key",
    Switch(),
    "--retain-null-key",
    "LEDGERCTL_RETAIN_NULL_KEY",
    conf=("topicCompactionRetainNullKey",),
    default=False,
    default_text="Pulsar's default: dropped",
)
COMPACTION_ORDER = _setting(
    "compaction_order",
    CompactionOrder(),
    "--order",
    "LEDGERCTL_COMPACTION_ORDER",
    conf=("compactionServiceFactoryClassName",),
    default="publishing",
    default_text="Pulsar's default: PulsarCompactionServiceFactory",
)
SPARK_THRESHOLD = _setting(
    "spark_threshold",
    Integer(),
    "--spark-threshold",
    "LEDGERCTL_SPARK_THRESHOLD",
    default=200_000,
    default_text="default: the measured crossover",
)
MAX_PLAN_SIZE = _setting(
    "max_plan_size",
    ByteCount(),
    None,
    "LEDGERCTL_MAX_PLAN_SIZE",
    default=256 * 1024 * 1024,
    default_text="default: 256 MiB",
)
# offloaded ledgers (pulsarctl_py.stores.tiered.locate): where their data is when not where
# their offloadContext says, and which copy of a ledger that has both is read
OFFLOAD_URL = _setting(
    "offload_url",
    Text(),
    "--offload-url",
    "LEDGERCTL_OFFLOAD_URL",
    default_text="not set: where the broker reads each ledger (stores/tiered/where.py)",
)
S3_ENDPOINT = _setting(
    "s3_endpoint",
    Text(),
    "--s3-endpoint",
    "LEDGERCTL_S3_ENDPOINT",
    default_text="not set: the offload policies', broker.conf's or offloadContext's",
)
PREFER = _setting(
    "prefer",
    Text(),
    "--prefer",
    "LEDGERCTL_PREFER",
    default="tiered",
    default_text="the broker's default: tiered storage first",
)
# the brokers' admin REST API (pulsarctl_py.stores.broker): where, and how to authenticate
# (the TLS files and the token only from the environment)
ADMIN_URL = _setting(
    "admin_url",
    Items(),
    "--admin-url",
    "LEDGERCTL_ADMIN_URL",
    default=[],
    default_text="not set: the brokers registered in the metadata store",
)
ADMIN_TLS_CA_FILE = _setting(
    "admin_tls_ca_file",
    PathKind(),
    None,
    "LEDGERCTL_ADMIN_TLS_CA_FILE",
    key=None,
    default_text="default: the system CAs",
)
ADMIN_TLS_CERT_FILE = _setting(
    "admin_tls_cert_file", PathKind(), None, "LEDGERCTL_ADMIN_TLS_CERT_FILE", key=None
)
ADMIN_TLS_KEY_FILE = _setting(
    "admin_tls_key_file", PathKind(), None, "LEDGERCTL_ADMIN_TLS_KEY_FILE", key=None
)
ADMIN_TOKEN = _setting("admin_token", EnvSecret(), None, "LEDGERCTL_ADMIN_TOKEN", key=None)
ADMIN_TOKEN_FILE = _setting(
    "admin_token_file", PathKind(), None, "LEDGERCTL_ADMIN_TOKEN_FILE", key=None
)
ZK_AUTH = _setting("zk_auth", EnvSecret(), None, "LEDGERCTL_ZK_AUTH", key=None)
ZK_AUTH_FILE = _setting("zk_auth_file", PathKind(), None, "LEDGERCTL_ZK_AUTH_FILE", key=None)
NO_COLOR = _setting("no_color", EnvSecret(), "--no-color", "NO_COLOR", key=None)

#: every setting, in the order ``ledgerctl config`` shows them
SETTINGS: tuple[Setting, ...] = (
    BROKER_CONF_FILE,
    METADATA_URL,
    BOOKKEEPER_METADATA_URL,
    BOOKIE_DIRS,
    MAX_MESSAGE_SIZE,
    BOOKIE_ADDRESSES,
    BOOKIE_TLS,
    BOOKIE_CA_FILE,
    BOOKIE_TIMEOUT,
    BOOKIE_PROTOCOL,
    BOOKIE_TLS_CERT_FILE,
    BOOKIE_TLS_KEY_FILE,
    BOOKIE_TLS_KEY_PASSWORD,
    BOOKIE_TLS_HOSTNAME_CHECK,
    ENSEMBLE_SIZE,
    WRITE_QUORUM,
    ACK_QUORUM,
    DIGEST_TYPE,
    MANAGED_LEDGER_PASSWORD,
    KEEP_ENTRY_METADATA,
    RETAIN_NULL_KEY,
    COMPACTION_ORDER,
    LEDGER_PASSWORD,
    SPARK_THRESHOLD,
    MAX_PLAN_SIZE,
    OFFLOAD_URL,
    S3_ENDPOINT,
    PREFER,
    ADMIN_URL,
    ADMIN_TLS_CA_FILE,
    ADMIN_TLS_CERT_FILE,
    ADMIN_TLS_KEY_FILE,
    ADMIN_TOKEN,
    ADMIN_TOKEN_FILE,
    ZK_AUTH,
    ZK_AUTH_FILE,
    NO_COLOR,
)
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


# -- the flags of one command ---------------------------------------------------------------

_FLAGS: ContextVar[Mapping[str, Any] | None] = ContextVar("ledgerctl_flags", default=None)


def given(value: Any) -> bool:
    """Whether a flag's value counts as given (None, "" and an empty list do not;
    ``False`` of a ``--no-x`` flag does)."""
    return value is not None and value != "" and value != [] and value != ()


@contextlib.contextmanager
def flags(**values: Any) -> Iterator[None]:
    """Resolve with these flags (by setting name; None: not given) inside the block, on
    top of the flags already in effect."""
    for name in values:
        if name not in BY_NAME:
            raise TypeError(f"no setting named {name!r}")
    merged = {**(_FLAGS.get() or {}), **{k: v for k, v in values.items() if given(v)}}
    token = _FLAGS.set(merged)
    try:
        yield
    finally:
        _FLAGS.reset(token)


def current_flags() -> dict[str, Any]:
    """The flags in effect (by setting name)."""
    return dict(_FLAGS.get() or {})


# -- resolution ------------------------------------------------------------------------------

#: "not given" where None means something (no broker configuration)
UNSET: Any = object()


@dataclass(frozen=True)
class Resolved:
    """A setting's value and where it came from."""

    setting: Setting
    value: Any
    #: the flag, the variable's name, the config file's path, "broker configuration PATH
    #: (key)", or the default's description
    source: str
    #: one of :data:`ORIGINS`
    origin: str

    @property
    def name(self) -> str:
        return self.setting.name

    @property
    def is_set(self) -> bool:
        """Whether a source set it (the default is not a source)."""
        return self.origin != DEFAULT

    def shown(self) -> Any:
        return self.setting.kind.shown(self.value)


@dataclass
class Sources:
    """Where settings are looked up: the flags, the environment, the config files (read
    once per Sources) and the broker configuration (loaded once)."""

    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    cwd: Path | None = None
    home: Path | None = None
    flags: Mapping[str, Any] = field(default_factory=current_flags)
    _docs: list[tuple[Path, dict[str, Any]]] | None = field(default=None, repr=False)
    _conf: Any = field(default=UNSET, repr=False)

    @classmethod
    def of(
        cls,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        home: Path | None = None,
        broker_conf: BrokerConf | Any | None = UNSET,
    ) -> Sources:
        """Sources with the process's environment unless ``env`` is given; a loaded
        ``broker_conf`` (or None for none) stands for the one the settings name."""
        out = cls(os.environ if env is None else env, cwd, home)
        out._conf = broker_conf
        return out

    def config_files(self) -> list[Path]:
        return config_paths(self.env, self.cwd, self.home)

    def docs(self) -> list[tuple[Path, dict[str, Any]]]:
        """The config files that exist, with their settings, nearest first."""
        if self._docs is None:
            self._docs = []
            for path in self.config_files():
                doc = load_config(path)
                if doc is not None:
                    self._docs.append((path, doc))
        return self._docs

    def broker_conf(self) -> BrokerConf | None:
        """The broker configuration the ``broker_conf`` setting names, loaded (or None)."""
        if self._conf is UNSET:
            found = resolve(BROKER_CONF_FILE, sources=self)
            if found.value is None:
                self._conf = None
            else:
                from pulsarctl_py.brokerconf import load_broker_conf

                self._conf = load_broker_conf(found.value)
        return self._conf


def layers(
    setting: Setting, explicit: Any = None, *, sources: Sources | None = None
) -> Iterator[Resolved]:
    """Every source that sets ``setting``, highest rank first, then the default.

    Lazy: a source below the first is read only when the caller asks for it."""
    src = Sources.of() if sources is None else sources
    kind = setting.kind
    value = explicit if given(explicit) else src.flags.get(setting.name)
    if given(value):
        yield Resolved(setting, kind.flag(value), setting.flag or "argument", FLAG)
    if setting.env is not None:
        raw = src.env.get(setting.env)
        # an empty variable is unset, except a secret's: an empty password is a password
        if raw is not None and (raw.strip() or isinstance(kind, SecretKind)):
            yield Resolved(setting, kind.env(raw, setting.env), setting.env, ENV)
    if setting.key is not None:
        for path, doc in src.docs():
            if doc.get(setting.key, "") != "":  # an empty string sets nothing, as in a variable
                found = kind.config(doc[setting.key], path, setting.key)
                yield Resolved(setting, found, str(path), CONFIG)
    if setting.conf:
        conf = src.broker_conf()
        if conf is not None:
            for key in setting.conf:
                raw = conf.values.get(key, "").strip()
                if raw:
                    where = f"broker configuration {conf.path} ({key})"
                    yield Resolved(setting, kind.conf(raw, where), where, BROKER_CONF)
                    break
    yield Resolved(setting, setting.default, setting.default_text, DEFAULT)


def resolve(
    setting: Setting | str, explicit: Any = None, *, sources: Sources | None = None
) -> Resolved:
    """The value of ``setting`` and its source: ``explicit`` (or the flag in effect), the
    variable, the config files, the broker configuration, else the default."""
    if isinstance(setting, str):
        setting = BY_NAME[setting]
    return next(layers(setting, explicit, sources=sources))


__all__ = [
    "BROKER_CONF",
    "CONFIG",
    "DEFAULT",
    "ENV",
    "FLAG",
    "LOCAL_CONFIG",
    "ORIGINS",
    "SETTINGS",
    "Resolved",
    "Setting",
    "Sources",
    "config_paths",
    "current_flags",
    "flags",
    "layers",
    "load_config",
    "nearest_config",
    "resolve",
    "user_config",
]
