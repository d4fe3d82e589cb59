"""The same entries stored in each way a bookie stores ledgers, for tests that compare the
fast (native head scan) and general paths on every layout.

* ``db``: DbLedgerStorage, one ledger directory (entry logs, RocksDB ``locations`` and
  ``ledgers``);
* ``db-dirs``: DbLedgerStorage with two ledger directories, each ledger in the one
  ``signSafeMod(ledgerId, 2)`` picks (BookKeeper's ``DbLedgerStorage.getLedgerStorage``);
* ``index-files``: InterleavedLedgerStorage: entry logs in write order and one ``.idx``
  file per ledger;
* ``sorted``: SortedLedgerStorage: the same files, entries written sorted by ledger;
* ``scan``: DbLedgerStorage whose ``locations`` index is lost: located by scanning logs;
* ``journal``: DbLedgerStorage holding the first two thirds of each ledger's entries, the
  rest only in a journal after the last mark (the entries come from two sources).

Entry logs rotate every ``log_size_limit`` bytes, so a ledger spans several logs.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from pulsarctl_py.decoders import entrylog
from pulsarctl_py.decoders.bookkeeper import HEADER
from pulsarctl_py.decoders.checksums import master_key
from pulsarctl_py.stores.bookie import JournalWriter, write_db_ledger_dir, write_index_file
from pulsarctl_py.stores.bookie.writers import EntryLogWriter, write_last_id

LAYOUTS = ("db", "db-dirs", "index-files", "sorted", "scan", "journal")
MASTER_KEY = master_key(b"")


def _ids(entry: bytes) -> tuple[int, int]:
    ledger_id, entry_id = HEADER.unpack_from(entry, 0)[:2]
    return ledger_id, entry_id


def write_index_files(current: Path, entries: Iterable[bytes], log_size_limit: int) -> None:
    """Entry logs holding ``entries`` in order (rotating, the last one active) and an
    ``.idx`` file per ledger."""
    current.mkdir(parents=True, exist_ok=True)
    locations: dict[int, dict[int, int]] = {}
    writer: EntryLogWriter | None = None
    log_id = 0
    for entry in entries:
        if writer is not None and writer.position + 4 + len(entry) > log_size_limit:
            writer.close(ledgers_map=True)
            for (lid, eid), loc in writer.locations.items():
                locations.setdefault(lid, {})[eid] = loc
            writer = None
            log_id += 1
        if writer is None:
            writer = EntryLogWriter(current / entrylog.log_file_name(log_id), log_id)
        writer.add(entry)
    if writer is not None:
        writer.close(ledgers_map=False)
        for (lid, eid), loc in writer.locations.items():
            locations.setdefault(lid, {})[eid] = loc
    write_last_id(current, log_id)
    for lid, locs in sorted(locations.items()):
        write_index_file(current, lid, MASTER_KEY, locs)


def write_layout(
    bookie: Path, layout: str, entries: list[bytes], *, log_size_limit: int = 40_000
) -> Path:
    """``entries`` (digest-packed, in write order) stored in ``layout`` under the bookie
    data root ``bookie``; returns ``bookie`` (what ``--bookie-dir`` names)."""
    current = bookie / "current"
    if layout in ("db", "scan"):
        write_db_ledger_dir(current, entries, MASTER_KEY, log_size_limit=log_size_limit)
        if layout == "scan":
            shutil.rmtree(current / "locations")
    elif layout == "db-dirs":
        for i in range(2):
            # DbLedgerStorage.getLedgerStorage: MathUtils.signSafeMod(ledgerId, numberOfDirs)
            mine = [e for e in entries if _ids(e)[0] % 2 == i]
            write_db_ledger_dir(
                bookie / f"ledgers{i}" / "current", mine, MASTER_KEY, log_size_limit=log_size_limit
            )
    elif layout == "index-files":
        write_index_files(current, entries, log_size_limit)
    elif layout == "sorted":
        write_index_files(current, sorted(entries, key=_ids), log_size_limit)
    elif layout == "journal":
        counts: dict[int, int] = {}
        for entry in entries:
            counts[_ids(entry)[0]] = counts.get(_ids(entry)[0], 0) + 1
        seen: dict[int, int] = {}
        logged, journaled = [], []
        for entry in entries:
            lid = _ids(entry)[0]
            seen[lid] = seen.get(lid, 0) + 1
            (logged if seen[lid] * 3 <= counts[lid] * 2 else journaled).append(entry)
        write_db_ledger_dir(current, logged, MASTER_KEY, log_size_limit=log_size_limit)
        with JournalWriter(current / "1.txn") as journal:  # no lastMark: replayed whole
            for entry in journaled:
                journal.add_entry(entry)
    else:
        raise ValueError(layout)
    from tests.support.verify_world import write_cookies

    write_cookies(bookie)
    return bookie
