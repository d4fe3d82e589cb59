"""Where ledgers live when no flag says so: environment variables, then config files.

``ledgerctl.toml`` in the working directory (or ``~/.config/ledgerctl/config.toml``)::

    metadata_url = "rocksdb://data/metadata"   # or "zk:zk1:2181,zk2:2181/pulsar"
    bookie_dirs = ["data/bookkeeper"]         # relative to the config file's folder

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
        return [(path.parent / v) if not os.path.isabs(v) else Path(v) for v in value]
    return []
