"""Where ledgers live when no flag says so, the ledger password, and ``ledgerctl config``'s
view of every setting.

Every setting follows one rule (:mod:`pulsarctl_py.precedence`): the flag, the
environment variable, the nearest ``ledgerctl.toml`` (the working directory's, else the
closest directory above that has one), then ``~/.config/ledgerctl/config.toml``, the value
derived from the broker configuration, the default::

    metadata_url = "rocksdb://data/metadata"   # or "zk:zk1:2181,zk2:2181/pulsar"
    bookie_dirs = ["data/bookkeeper"]

Every relative path (a rocksdb:// directory, bookie_dirs, broker_conf) is relative to the
config file's folder, and made absolute when read.

Environment: ``LEDGERCTL_METADATA_URL``; ``LEDGERCTL_BOOKIE_DIRS`` (paths separated by
``os.pathsep``). Credentials never live in a config file: see pulsarctl_py.secrets and the
metadata store's ``LEDGERCTL_ZK_AUTH`` / ``LEDGERCTL_ZK_AUTH_FILE``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pulsarctl_py import precedence
from pulsarctl_py.errors import LedgerctlError

ENV_BOOKIE_DIRS = precedence.BOOKIE_DIRS.env
BOOKIE_DIRS_KEY = precedence.BOOKIE_DIRS.key


def resolve_bookie_dirs(
    explicit: Sequence[Path | str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> list[Path]:
    """Bookie directories: the flags, the variable, the config files (none by default)."""
    found = precedence.resolve(
        precedence.BOOKIE_DIRS,
        None if not explicit else list(explicit),
        sources=precedence.Sources.of(env, cwd),
    )
    return [Path(p) for p in found.value]


def resolve_ledger_password(env: str | None = None, file: Path | None = None) -> bytes | None:
    """The ledger password from a variable or a file (never from a flag value): ``env``
    (the variable named by ``--password-env``) or ``file`` (``--password-file``), else
    $LEDGERCTL_LEDGER_PASSWORD, else ``ledger_password_file`` of the config files; None
    when none is set (each ledger's own password, from its metadata)."""
    from pulsarctl_py.secrets import secret_from

    if env is not None or file is not None:
        secret = secret_from(env, file)
    else:
        secret = precedence.resolve(precedence.LEDGER_PASSWORD).value
    return secret.reveal() if secret is not None else None


def _row(found: precedence.Resolved, value: Any, overrides: list[dict[str, Any]]) -> dict:
    return {
        "setting": found.name,
        "value": value,
        "source": found.source,
        "origin": found.origin,
        "overrides": overrides,
    }


def _overridden(
    setting: precedence.Setting, sources: precedence.Sources
) -> tuple[precedence.Resolved, list[dict[str, Any]]]:
    """The value in use, and the lower sources that set it too (what the first hides)."""
    found: list[precedence.Resolved] = []
    hidden: list[dict[str, Any]] = []
    for layer in precedence.layers(setting, sources=sources):
        if layer.origin == precedence.DEFAULT:
            if not found:
                found.append(layer)
            break
        if not found:
            found.append(layer)
        else:
            hidden.append({"value": _shown(layer), "source": layer.source, "origin": layer.origin})
    return found[0], hidden


def _shown(found: precedence.Resolved) -> Any:
    value = found.shown()
    if isinstance(value, Path):
        return str(value)
    return value


def settings(*, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> list[dict]:
    """Every setting a command would use (with the flags in effect, see
    :func:`pulsarctl_py.precedence.flags`): its value, its source (the flag, the variable,
    the config file, the broker configuration, or the default), its origin, and the lower
    sources it overrides. Secrets show only whether they are set."""
    from pulsarctl_py.stores.metadata import url as urls

    sources = precedence.Sources.of(env, cwd)
    rows: list[dict] = [
        {
            "setting": "config files",
            "value": [str(p) for p, _ in sources.docs()],
            "source": "the nearest ledgerctl.toml up from the working directory, then the user's",
            "origin": precedence.DEFAULT,
            "overrides": [],
        }
    ]
    for setting in precedence.SETTINGS:
        try:
            found, hidden = _overridden(setting, sources)
        except LedgerctlError as exc:
            rows.append(
                {
                    "setting": setting.name,
                    "value": None,
                    "source": f"error: {exc.one_line()}",
                    "origin": "error",
                    "overrides": [],
                }
            )
            continue
        value = _shown(found)
        if setting is precedence.METADATA_URL and found.is_set:
            try:
                value = str(urls.parse_metadata_url(found.value))
            except LedgerctlError as exc:
                value = f"{found.value} (invalid: {exc.one_line()})"
        elif setting is precedence.BOOKKEEPER_METADATA_URL:
            value = _bookkeeper_shown(found, sources)
        elif setting is precedence.METADATA_URL:
            found = precedence.Resolved(
                setting,
                None,
                "not set: no metadata store given (--metadata-url, "
                f"{setting.env}, {setting.key} in ledgerctl.toml, or a broker configuration)",
                precedence.DEFAULT,
            )
        rows.append(_row(found, value, hidden))
    return rows


def _bookkeeper_shown(found: precedence.Resolved, sources: precedence.Sources) -> Any:
    """BookKeeper's place as a command would use it: the URL given, else ``/ledgers`` of
    the metadata store in use."""
    from pulsarctl_py.stores.metadata import url as urls

    if found.is_set:
        try:
            place = urls._bookkeeper_url(found)
        except LedgerctlError as exc:
            return f"{found.value} (invalid: {exc.one_line()})"
        return str(place)
    try:
        own = precedence.resolve(precedence.METADATA_URL, sources=sources)
        if own.is_set:
            return f"{urls.parse_metadata_url(own.value)} (/ledgers)"
    except LedgerctlError:
        pass
    return None
