"""Finding a bookie's ``current/`` directories from what the operator points at.

A ``--bookie-dir`` may be a ``current/`` directory itself, the directory above it (a
``ledgerDirectories`` or ``journalDirectories`` entry), or a bookie's data root whose
children hold ``current/`` (for example ``ledgers/`` and ``journal/``). See
../shared/spec/formats.md §11.1 for what lives in ``current/``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pulsarctl_py.decoders.entrylog import parse_log_file_name
from pulsarctl_py.decoders.journal import parse_journal_file_name

from .model import BookieDirError
from .rocks import is_rocksdb_dir

_HEX_DIR = re.compile(r"[0-9a-f]{1,2}")


@dataclass(frozen=True, slots=True)
class BookieLayout:
    """The ``current/`` directories found: ledger dirs (entry logs and indexes) and journals."""

    ledger_dirs: tuple[Path, ...]
    journal_dirs: tuple[Path, ...]


def has_index_files(path: Path) -> bool:
    """Whether ``path`` holds ``<xx>/<yy>/<id>.idx`` ledger index files."""
    try:
        outer = [e for e in os.scandir(path) if e.is_dir() and _HEX_DIR.fullmatch(e.name)]
    except OSError:
        return False
    for first in outer:
        for second in os.scandir(first.path):
            if second.is_dir() and _HEX_DIR.fullmatch(second.name):
                if any(n.endswith(".idx") for n in os.listdir(second.path)):
                    return True
    return False


def classify(path: Path) -> tuple[bool, bool]:
    """``(is_ledger_dir, is_journal_dir)`` for a candidate ``current/`` directory."""
    try:
        names = os.listdir(path)
    except PermissionError:
        raise  # a bookie dir we may not read is an error, not "no bookie data"
    except OSError:
        return False, False
    journal = any(parse_journal_file_name(n) is not None for n in names)
    ledger = (
        any(parse_log_file_name(n) is not None for n in names)
        or "lastId" in names
        or is_rocksdb_dir(path / "locations")
        or is_rocksdb_dir(path / "ledgers")
        or has_index_files(path)
    )
    return ledger, journal


def _candidates(path: Path) -> list[Path]:
    if any(classify(path)):
        return [path]
    current = path / "current"
    if current.is_dir() and any(classify(current)):
        return [current]
    found = []
    for child in sorted(p for p in path.iterdir() if p.is_dir()):
        nested = child / "current"
        try:
            is_dir = nested.is_dir()
        except PermissionError:  # a private sibling (lost+found) is no bookie dir of ours
            continue
        if is_dir and any(classify(nested)):
            found.append(nested)
    return found


class NotABookieDir(BookieDirError):
    """A --bookie-dir that names something else: a usage error (exit 2), not a store that
    could not be read."""

    exit_code = 2


def _not_a_database(path: Path) -> None:
    """Refuse a RocksDB database given as a bookie directory (Pulsar's metadata store,
    or a bookie's own ``locations``/``ledgers`` index): its write-ahead logs are named
    ``<number>.log`` like entry logs, and reading them as such talks of "entry logs
    without an index" about a directory that holds no entry at all."""
    if not is_rocksdb_dir(path):
        return
    if path.name in ("locations", "ledgers") and path.parent.name == "current":
        hint = f"it is a bookie's {path.name} index: give the bookie directory {path.parent.parent}"
    else:
        hint = (
            "Pulsar's RocksDB metadata store? (give that as --metadata-url rocksdb://...; "
            "--bookie-dir is the bookie's data directory, with current/ or ledgers/ in it)"
        )
    raise NotABookieDir(f"{path} is a RocksDB database, not a bookie directory: {hint}")


def discover(paths: Iterable[str | os.PathLike[str]]) -> BookieLayout:
    """The ledger and journal ``current/`` directories under the given paths, in order."""
    ledger_dirs: list[Path] = []
    journal_dirs: list[Path] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        try:
            if not path.is_dir():
                raise BookieDirError(
                    f"bookie directory {path} does not exist or is not a directory"
                )
            _not_a_database(path)
            found = _candidates(path)
        except OSError as exc:
            where = exc.filename or path
            raise BookieDirError(f"cannot read bookie directory {where}: {exc.strerror}") from None
        if not found:
            raise BookieDirError(
                f"no bookie data under {path}: expected entry logs (*.log), journals (*.txn), "
                "DbLedgerStorage indexes (locations/, ledgers/) or .idx files in a current/ dir"
            )
        for current in found:
            key = current.resolve()
            if key in seen:
                continue
            seen.add(key)
            ledger, journal = classify(current)
            if ledger:
                ledger_dirs.append(current)
            if journal:
                journal_dirs.append(current)
    return BookieLayout(tuple(ledger_dirs), tuple(journal_dirs))
