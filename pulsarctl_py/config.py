"""Where ledgers live when no flag says so: environment variables, then config files.

The nearest ``ledgerctl.toml`` (the working directory's, else the closest directory above
that has one), then ``~/.config/ledgerctl/config.toml``::

    metadata_url = "rocksdb://data/metadata"   # or "zk:zk1:2181,zk2:2181/pulsar"
    bookie_dirs = ["data/bookkeeper"]

Every relative path (a rocksdb:// directory, bookie_dirs, broker_conf) is relative to the
config file's folder, and made absolute when read.

Environment: ``LEDGERCTL_METADATA_URL``; ``LEDGERCTL_BOOKIE_DIRS`` (paths separated by
``os.pathsep``). Credentials never live here: see pulsarctl_py.secrets and the
metadata store's ``LEDGERCTL_ZK_AUTH`` / ``LEDGERCTL_ZK_AUTH_FILE``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

from pulsarctl_py.errors import LedgerctlError
from pulsarctl_py.stores.metadata.url import config_paths

ENV_BOOKIE_DIRS = "LEDGERCTL_BOOKIE_DIRS"
BOOKIE_DIRS_KEY = "bookie_dirs"


def _load(path: Path) -> dict | None:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise LedgerctlError(f"config file {path} is not UTF-8 (byte {exc.start})") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LedgerctlError(f"cannot read config file {path}: {exc}") from None


def resolve_bookie_dirs(
    explicit: Sequence[Path | str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> list[Path]:
    """Bookie directories: explicit flags, then the env var, then the config files."""
    if explicit:
        return [Path(p) for p in explicit]
    env = os.environ if env is None else env
    if env.get(ENV_BOOKIE_DIRS):
        return [Path(p) for p in env[ENV_BOOKIE_DIRS].split(os.pathsep) if p]
    for path in config_paths(env, cwd):
        doc = _load(path)
        if not doc or BOOKIE_DIRS_KEY not in doc:
            continue
        value = doc[BOOKIE_DIRS_KEY]
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise LedgerctlError(f"{path}: {BOOKIE_DIRS_KEY} must be a list of paths")
        # relative to the config file's folder, absolute (Spark executors run elsewhere)
        folder = Path(os.path.abspath(path)).parent
        return [Path(os.path.normpath(folder / os.path.expanduser(v))) for v in value]
    return []


def bookie_dirs_source(
    *, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> tuple[list[Path], str | None]:
    """:func:`resolve_bookie_dirs` without flags, and where the answer came from (the
    variable's name, the config file's path; None when nothing sets them)."""
    env = os.environ if env is None else env
    dirs = resolve_bookie_dirs(None, env=env, cwd=cwd)
    if env.get(ENV_BOOKIE_DIRS):
        return dirs, ENV_BOOKIE_DIRS
    for path in config_paths(env, cwd):
        doc = _load(path)
        if doc and BOOKIE_DIRS_KEY in doc:
            return dirs, str(path)
    return dirs, None


def settings(*, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> list[dict]:
    """Every setting a command takes when no flag gives it: its value and its source (the
    variable, the config file, the broker configuration, or the default). Secrets show
    only whether they are set."""
    from pulsarctl_py.stores.metadata import url as urls

    env = os.environ if env is None else env
    rows: list[dict] = []

    def add(name: str, value: object, source: str | None) -> None:
        rows.append({"setting": name, "value": value, "source": source or "not set"})

    files = config_paths(env, cwd)
    add(
        "config files",
        [str(p) for p in files if p.is_file()],
        "the nearest ledgerctl.toml up from the working directory, then the user's",
    )
    found = urls._setting(None, urls.ENV_BROKER_CONF, urls.CONFIG_KEY_BROKER_CONF, env, cwd, None)
    add("broker_conf", found[0] if found else None, found[1] if found else None)
    try:
        url = urls.resolve_metadata_url(env=env, cwd=cwd)
    except LedgerctlError as exc:
        add("metadata_url", None, f"not set: {exc}")
        url = None
    if url is not None:
        own = url.with_bookkeeper(None) if url.bookkeeper is not None else url
        add("metadata_url", str(own), url.source)
        bk = url.bookkeeper
        if bk is not None:
            add("bookkeeper_metadata_url", str(bk), bk.source)
        else:
            add("bookkeeper_metadata_url", f"{own} (/ledgers)", "default: the metadata store")
    dirs, source = bookie_dirs_source(env=env, cwd=cwd)
    add("bookie_dirs", [str(d) for d in dirs], source)
    size = env.get("LEDGERCTL_MAX_MESSAGE_SIZE")
    add(
        "max_message_size",
        size or "5MiB",
        "LEDGERCTL_MAX_MESSAGE_SIZE" if size else "default: the broker's maxMessageSize",
    )
    for name in (urls.ENV_ZK_AUTH, urls.ENV_ZK_AUTH_FILE):
        add(name, "set" if env.get(name) else None, name if env.get(name) else None)
    add(
        "NO_COLOR",
        "set" if env.get("NO_COLOR") else None,
        "NO_COLOR" if env.get("NO_COLOR") else None,
    )
    return rows
