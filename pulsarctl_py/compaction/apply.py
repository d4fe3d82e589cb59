"""Write a computed compaction where the topic lives, as Pulsar's compactor would.

Order (nothing half-written: every step before the last is undone when a later one fails):

1. refuse while the bookie holds its lock (DbLedgerStorage's RocksDB ``LOCK``) or is
   registered as available in the metadata store;
2. take a new ledger id from the metadata store's id generator (BookKeeper's own scheme);
3. write the entries, digest-packed with CRC32 and the empty password, into a NEW entry log
   (with its ledgers map, as a rotated log) and index them: DbLedgerStorage's ``ledgers``
   and ``locations`` RocksDB indexes, or a new ``.idx`` file for Interleaved/Sorted storage;
   bump ``lastId``;
4. one metadata transaction: create the ledger's metadata (CLOSED, CRC32, empty password,
   ``application``/``component``/``pulsar/compactedTopic``/``pulsar/compactedTo``) and set the
   ``__compaction`` cursor (mark-delete = horizon, property ``CompactedTopicLedger``) with
   compare-and-set on the version read before the compaction started. A stale version
   fails the transaction: nothing is committed, and step 3 is undone.

The previous compacted ledger (and a cursor ledger the new cursor state replaces) is listed
for deletion; it is deleted (its metadata) only when asked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsarctl_py.decoders import bookkeeper, entrylog
from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
from pulsarctl_py.decoders.checksums import DigestType, master_key
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.errors import StoreUnavailable

from .core import CompactedEntry

COMPACTED_LEDGER_PROPERTY = "CompactedTopicLedger"
PASSWORD = b""


class BookieInUse(StoreUnavailable):
    """The bookie is running: its storage must not be written behind its back."""


@dataclass(slots=True)
class ApplyResult:
    ledger_id: int
    entries: int
    length: int
    entry_log: Path
    index: str  # "db" or "idx"
    ledger_path: str
    cursor_path: str
    to_delete: list[int] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)


# -- checks ---------------------------------------------------------------------------------


def _locked(lock: Path) -> bool:
    """Whether another process holds RocksDB's LOCK file (a running bookie)."""
    if not lock.exists():
        return False
    fd = os.open(lock, os.O_RDWR)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _cookie_bookie_id(current: Path) -> str | None:
    try:
        text = (current / "VERSION").read_text("utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("bookieHost:"):
            return line.split(":", 1)[1].strip().strip('"')
    return None


def check_bookie_free(
    current: Path, store: Any, doing: str = "writing a compacted ledger into its storage"
) -> None:
    """Refuse (:class:`BookieInUse`) while a bookie holds ``current``'s RocksDB locks or is
    registered as available in the metadata store; ``doing`` names the write refused."""
    for name in ("ledgers", "locations"):
        if _locked(current / name / "LOCK"):
            raise BookieInUse(
                f"the bookie holds its lock on {current / name}: stop the bookie before {doing}"
            )
    bookie_id = _cookie_bookie_id(current)
    bookkeeper = store.bookkeeper()
    if (
        bookie_id is not None
        and bookkeeper.store.exists(bookkeeper.path("available", bookie_id)) is not None
    ):
        raise BookieInUse(
            f"bookie {bookie_id} is registered as running "
            f"({bookkeeper.path('available', bookie_id)}): "
            f"stop it before {doing}"
        )


def target_dir(bookie: Any) -> tuple[Path, str]:
    """The ledger ``current/`` dir to write into and its index kind (db or idx)."""
    from pulsarctl_py.stores.bookie.layout import has_index_files
    from pulsarctl_py.stores.bookie.rocks import is_rocksdb_dir

    for current in bookie.layout.ledger_dirs:
        if is_rocksdb_dir(current / "locations") and is_rocksdb_dir(current / "ledgers"):
            return current, "db"
    for current in bookie.layout.ledger_dirs:
        if has_index_files(current):
            return current, "idx"
    raise LedgerctlError(
        "no DbLedgerStorage index (locations/, ledgers/) or .idx files in the bookie "
        "directories: cannot tell how to index a new ledger"
    )


def _next_log_id(current: Path) -> int:
    ids = [
        entrylog.parse_log_file_name(name)
        for name in os.listdir(current)
        if entrylog.parse_log_file_name(name) is not None
    ]
    last = max((i for i in ids if i is not None), default=-1)
    try:
        last = max(last, int((current / "lastId").read_text().strip() or "-1", 16))
    except (OSError, ValueError):
        pass
    return last + 1


# -- writing the bookie side ------------------------------------------------------------------


@dataclass(slots=True)
class _Written:
    log: Path | None = None
    last_id: tuple[Path, bytes | None] | None = None
    idx: Path | None = None
    db_keys: list[tuple[Path, bytes]] = field(default_factory=list)

    def undo(self) -> None:
        for path, key in reversed(self.db_keys):
            with contextlib.suppress(Exception):
                with writable_rocksdb(path) as db:
                    db.delete(key)
        if self.idx is not None:
            self.idx.unlink(missing_ok=True)
        if self.log is not None:
            self.log.unlink(missing_ok=True)
        if self.last_id is not None:
            path, old = self.last_id
            if old is None:
                path.unlink(missing_ok=True)
            else:
                _replace(path, old)


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".ledgerctl-tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@contextlib.contextmanager
def writable_rocksdb(path: Path) -> Any:
    """An existing RocksDB index opened for writing; rocksdict's config file removed after."""
    from rocksdict import Options, Rdict

    from pulsarctl_py.stores.bookie.rocks import ROCKSDICT_CONFIG

    options = Options(raw_mode=True)
    options.create_if_missing(False)
    had_config = (path / ROCKSDICT_CONFIG).exists()
    try:
        db = Rdict(str(path), options)
    except Exception as exc:
        raise BookieInUse(f"cannot open {path} for writing: {exc}") from None
    try:
        yield db
    finally:
        db.flush()
        db.close()
        if not had_config:
            (path / ROCKSDICT_CONFIG).unlink(missing_ok=True)


def pack_entries(
    ledger_id: int, entries: Iterable[CompactedEntry]
) -> Iterable[tuple[int, bytes, int]]:
    """Digest-packed entries (CRC32, empty password) with cumulative lengths."""
    length = 0
    for entry_id, entry in enumerate(entries):
        length += len(entry.data)
        header = BookieEntryHeader(ledger_id, entry_id, entry_id - 1, length)
        yield entry_id, bookkeeper.build(header, entry.data, DigestType.CRC32, PASSWORD), length


def write_bookie(
    current: Path, kind: str, ledger_id: int, entries: Iterable[CompactedEntry], written: _Written
) -> tuple[int, int]:
    """Write the ledger's entries and index them; return (entries, ledger length)."""
    from pulsarctl_py.stores.bookie.rocks import LOCATION_VALUE, ledger_key, location_key
    from pulsarctl_py.stores.bookie.writers import EntryLogWriter, ledger_data, write_index_file

    log_id = _next_log_id(current)
    log_path = current / entrylog.log_file_name(log_id)
    writer = EntryLogWriter(log_path, log_id)
    written.log = log_path
    count = length = 0
    locations: dict[int, int] = {}
    try:
        for entry_id, packed, total in pack_entries(ledger_id, entries):
            locations[entry_id] = writer.add(packed)
            count, length = count + 1, total
    finally:
        writer.close(ledgers_map=True)
    last_id_path = current / "lastId"
    old = last_id_path.read_bytes() if last_id_path.exists() else None
    written.last_id = (last_id_path, old)
    _replace(last_id_path, f"{log_id:x}\n".encode())
    key = master_key(PASSWORD)
    if kind == "db":
        with writable_rocksdb(current / "locations") as db:
            for entry_id, loc in locations.items():
                k = location_key(ledger_id, entry_id)
                db[k] = LOCATION_VALUE.pack(loc)
                written.db_keys.append((current / "locations", k))
        with writable_rocksdb(current / "ledgers") as db:
            k = ledger_key(ledger_id)
            db[k] = ledger_data(key)
            written.db_keys.append((current / "ledgers", k))
    else:
        written.idx = write_index_file(current, ledger_id, key, locations)
    return count, length


# -- metadata ------------------------------------------------------------------------------


def _ensure_parents(store: Any, path: str) -> None:
    from pulsarctl_py.stores.metadata import MetadataConflict

    parts = path.strip("/").split("/")[:-1]
    at = ""
    for part in parts:
        at += "/" + part
        if store.exists(at) is None:
            with contextlib.suppress(MetadataConflict):
                store.put(at, b"", -1)


def ledger_metadata(
    ledger_id: int,
    topic: str,
    compacted_to: tuple[int, int],
    count: int,
    length: int,
    bookie_id: str,
    partition: int,
) -> Any:
    custom = {
        lm.APPLICATION_KEY: b"pulsar",
        lm.COMPONENT_KEY: b"compacted-ledger",
        lm.PULSAR_KEYS["compacted_topic"][0]: topic.encode("utf-8"),
        lm.PULSAR_KEYS["compacted_to"][0]: lm.encode_message_id(
            compacted_to[0], compacted_to[1], partition
        ),
    }
    return closed_ledger_metadata(ledger_id, count, length, bookie_id, custom)


def closed_ledger_metadata(
    ledger_id: int, count: int, length: int, bookie_id: str, custom: dict[str, bytes]
) -> Any:
    """A closed ledger on one bookie, CRC32 with the empty password (what ledgerctl writes)."""
    return lm.LedgerMetadata(
        ensemble_size=1,
        write_quorum_size=1,
        ack_quorum_size=1,
        state=lm.LedgerState.CLOSED,
        ensembles={0: [bookie_id]},
        last_entry_id=count - 1,
        length=length,
        digest_type=DigestType.CRC32,
        password=PASSWORD,
        ctime=int(time.time() * 1000),
        custom_metadata=custom,
        ledger_id=ledger_id,
    )


def cursor_value(old: Any, horizon: tuple[int, int], ledger_id: int) -> bytes:
    """The ``__compaction`` cursor as a broker leaves it after a clean close, committed."""
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

    info = mlpb.ManagedCursorInfo()
    encoding: Any = mld.InfoEncoding.BINARY
    compression = None
    if old is not None and old.info is not None:
        info.CopyFrom(old.info.message)
        encoding, compression = old.info.encoding, old.info.compression
        if encoding in (mld.InfoEncoding.EMPTY, mld.InfoEncoding.TEXT):
            encoding = mld.InfoEncoding.BINARY
    info.cursorsLedgerId = -1  # state in the znode: the broker recovers the position from here
    info.markDeleteLedgerId, info.markDeleteEntryId = horizon
    del info.individualDeletedMessages[:]
    del info.batchedEntryDeletionIndexInfo[:]
    del info.properties[:]
    info.properties.add(name=COMPACTED_LEDGER_PROPERTY, value=ledger_id)
    info.lastActive = int(time.time() * 1000)
    return mld.build_info(info, encoding, compression)


def bookie_id_for(current: Path, source: Any, ledgers: list[int]) -> str:
    found = _cookie_bookie_id(current)
    if found:
        return found
    for ledger_id in reversed(ledgers):
        try:
            md = source.ledger(ledger_id).metadata
        except LedgerctlError:
            continue
        if md is not None and md.ensembles:
            return md.ensembles[min(md.ensembles)][0]
    return "127.0.0.1:3181"


def apply_compaction(
    *,
    metadata_url: str,
    bookie_dirs: list[str],
    topic: str,
    entries: Iterable[CompactedEntry],
    horizon: tuple[int, int],
    compacted_to: tuple[int, int],
    cursor_version: int | None,
    previous: int | None,
    previous_cursor_ledger: int | None,
    data_ledgers: list[int],
    partition: int,
    delete_old: bool = False,
    commit_cursor: bool = True,
) -> ApplyResult:
    """Write the compacted ledger and commit the cursor (see the module docstring).

    ``commit_cursor=False``: write the ledger and create its metadata only; the cursor is
    left to a plan (``migrate compacted``), so the new ledger is unreferenced until then."""
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.stores.metadata import (
        MetadataConflict,
        allocate_ledger_id,
        read_cursor,
        read_layout,
        resolve_topic,
    )

    name = resolve_topic(topic)
    with LedgerSource.open(metadata_url, bookie_dirs, need_metadata=True, need_bookie=True) as ro:
        current, kind = target_dir(ro.bookie)
        bookie_id = bookie_id_for(current, ro, data_ledgers)
    from pulsarctl_py.stores.metadata import open_metadata_store

    store = open_metadata_store(metadata_url, read_only=False)
    written = _Written()
    try:
        check_bookie_free(current, store)
        cursor_znode = mld.url_encode(mld.COMPACTION_CURSOR)
        cursor = read_cursor(store, name.ml_path, cursor_znode)
        now_version = None if cursor is None else cursor.stat.version
        if now_version != cursor_version:
            raise MetadataConflict(
                f"{name.ml_path}/{cursor_znode}",
                f"the __compaction cursor changed since the compaction was computed "
                f"(version {cursor_version} then, {now_version} now); nothing was written",
            )
        layout_info = read_layout(store)
        layout = (
            layout_info.layout
            if layout_info is not None and layout_info.layout is not None
            else lm.LedgerLayout.HIERARCHICAL
        )
        ledger_id = allocate_ledger_id(store, layout=layout)
        count, length = write_bookie(current, kind, ledger_id, entries, written)
        if count == 0:
            raise LedgerctlError("the compaction retained nothing: no ledger to write")
        md = ledger_metadata(
            ledger_id, name.full_name, compacted_to, count, length, bookie_id, partition
        )
        ledger_path = lm.ledger_path(ledger_id, layout)
        _ensure_parents(store, ledger_path)
        cursor_path = f"{name.ml_path}/{cursor_znode}"
        txn = store.transaction().create(ledger_path, lm.build(md))
        value = cursor_value(cursor, horizon, ledger_id)
        if not commit_cursor:
            pass
        elif cursor is None:
            txn.create(cursor_path, value)
        else:
            txn.set(cursor_path, value, cursor.stat.version)
        txn.commit()
    except BaseException:
        written.undo()
        store.close()
        raise
    result = ApplyResult(
        ledger_id, count, length, written.log or current, kind, ledger_path, cursor_path
    )
    result.to_delete = [lid for lid in (previous, previous_cursor_ledger) if lid is not None]
    if not commit_cursor:
        result.to_delete = []
    try:
        if delete_old:
            for lid in result.to_delete:
                path = lm.ledger_path(lid, layout)
                node = store.exists(path)
                if node is not None:
                    store.delete(path, node.version)
                    result.deleted.append(lid)
    finally:
        store.close()
    return result
