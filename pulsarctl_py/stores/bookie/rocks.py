"""DbLedgerStorage's RocksDB indexes (``locations`` and ``ledgers``), through rocksdict.

Reading never writes to the database directory. RocksDB's read-only mode replays the
write-ahead log (``*.log``) into memory, which matters after a graceful shutdown: a bookie
may leave its index only in the WAL. A WAL corrupted before its last record makes the
open fail (the store then scans the entry logs) rather than silently dropping the rest.

rocksdict (0.3.29) drops a ``rocksdict-config.json`` into the directory it opens, even
read-only, so we open a private shadow directory whose entries are symlinks to the
database files; whatever is created lands in the shadow.

Keys and values (``storage/ldb/EntryLocationIndex.java``, ``LedgerMetadataIndex.java``):
``locations``: ledger_id:i64 entry_id:i64 -> location:i64; ``ledgers``: ledger_id:i64 ->
``LedgerData`` protobuf. Keys are compared as bytes, so non-negative ids sort numerically.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from pulsarctl_py.decoders.errors import CorruptEntryError, LedgerctlError

LAYER = "rocksdb"
LEDGER_KEY = struct.Struct(">q")
LOCATION_KEY = struct.Struct(">qq")
LOCATION_VALUE = struct.Struct(">q")
MAX_ID = (1 << 63) - 1
#: files rocksdict creates; never linked into the shadow, never left in written databases
ROCKSDICT_CONFIG = "rocksdict-config.json"


def is_rocksdb_dir(path: Path) -> bool:
    """Whether ``path`` looks like a RocksDB database directory.

    A directory that cannot be searched (permission denied) counts as one: opening it then
    fails with the reason, instead of the index silently not being there.
    """
    try:
        return (path / "CURRENT").is_file()
    except PermissionError:
        return path.is_dir()


def _check_status(path: Path, it: Any) -> None:
    """Raise if a RocksDB iterator stopped on an error (a corrupt block) instead of the end.

    An iterator that meets a damaged block just becomes invalid; only ``status()`` tells
    that apart from the end of the data, so a scan that skips it reads a truncated index.
    """
    try:
        it.status()
    except Exception as exc:  # rocksdict raises plain Exception for RocksDB errors
        raise _error(path, exc) from None


def _error(path: Path, exc: Exception) -> CorruptEntryError:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return CorruptEntryError(LAYER, 0, f"a readable RocksDB database at {path}", message)


class ReadOnlyRocksDB:
    """One RocksDB database opened read-only; raw byte keys and values."""

    def __init__(self, path: Path) -> None:
        from rocksdict import AccessType, DBRecoveryMode, Options, Rdict

        self.path = path
        self._db: Any = None
        try:
            self._shadow = Path(tempfile.mkdtemp(prefix="ledgerctl-rocksdb-"))
        except OSError as exc:
            raise _error(path, exc) from None
        # removes the shadow even if close() is never called
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._shadow, True)
        try:
            for name in sorted(os.listdir(path)):
                source = path / name
                if name == ROCKSDICT_CONFIG or not source.is_file():
                    continue
                os.symlink(source.resolve(), self._shadow / name)
            options = Options(raw_mode=True)
            options.create_if_missing(False)
            # a torn last WAL record (crash) is tolerated; corruption before it is an error
            # instead of the silent truncation of RocksDB's default point-in-time recovery
            options.set_wal_recovery_mode(DBRecoveryMode.tolerate_corrupted_tail_records())
            self._db = Rdict(str(self._shadow), options, access_type=AccessType.read_only())
        except Exception as exc:  # rocksdict raises plain Exception for RocksDB errors
            self._cleanup()
            raise _error(path, exc) from None

    def get(self, key: bytes) -> bytes | None:
        try:
            value = self._db.get(key)
        except Exception as exc:
            raise _error(self.path, exc) from None
        return None if value is None else bytes(value)

    def items(
        self, low: bytes | None = None, high: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """Key/value pairs with ``low <= key < high``, in key order, one at a time.

        Blocks read on the way do not go into RocksDB's block cache: a pass over a large
        ledger would otherwise grow memory with the size of its index.
        """
        from rocksdict import ReadOptions

        try:
            options = ReadOptions()
            options.fill_cache(False)
            it = self._db.iter(options)
            if low is None:
                it.seek_to_first()
            else:
                it.seek(low)
            while it.valid():
                key = bytes(it.key())
                if high is not None and key >= high:
                    return
                yield key, bytes(it.value())
                it.next()
        except Exception as exc:
            raise _error(self.path, exc) from None
        _check_status(self.path, it)

    def item_batches(
        self, low: bytes | None = None, high: bytes | None = None, size: int = 4096
    ) -> Iterator[list[tuple[bytes, bytes]]]:
        """The pairs of :meth:`items` in lists of up to ``size``: one call per list, not
        per pair, for scans that handle a list at a time. No block cache either."""
        from rocksdict import ReadOptions

        try:
            options = ReadOptions()
            options.fill_cache(False)
            if high is not None:
                options.set_iterate_upper_bound(high)
            if low is None:
                pairs = self._db.items(read_opt=options)
            else:
                pairs = self._db.items(from_key=low, read_opt=options)
            last = None
            while batch := list(islice(pairs, size)):
                last = batch[-1][0]
                yield batch
        except Exception as exc:
            raise _error(self.path, exc) from None
        self._check_ended(low if last is None else bytes(last) + b"\x00", high)

    def _check_ended(self, after: bytes | None, high: bytes | None) -> None:
        """Raise unless the data really ends before ``high`` from ``after`` on.

        rocksdict's ``items()`` ends quietly when it meets a corrupt block: a fresh
        iterator seeking to where it stopped tells a damaged block from the end.
        """
        try:
            it = self._db.iter()
            if after is None:
                it.seek_to_first()
            else:
                it.seek(after)
            if it.valid():
                key = bytes(it.key())
                if high is None or key < high:
                    raise CorruptEntryError(
                        LAYER,
                        0,
                        f"a complete scan of the RocksDB database at {self.path}",
                        f"the scan ended early before key {key.hex()}",
                    )
        except CorruptEntryError:
            raise
        except Exception as exc:
            raise _error(self.path, exc) from None
        _check_status(self.path, it)

    def floor_before(self, key: bytes) -> tuple[bytes, bytes] | None:
        """The pair with the largest key strictly below ``key`` (BookKeeper's ``getFloor``)."""
        try:
            it = self._db.iter()
            it.seek_for_prev(key)
            if it.valid() and bytes(it.key()) >= key:
                it.prev()
            if not it.valid():
                _check_status(self.path, it)
                return None
            return bytes(it.key()), bytes(it.value())
        except CorruptEntryError:
            raise
        except Exception as exc:
            raise _error(self.path, exc) from None

    def close(self) -> None:
        db, self._db = self._db, None
        try:
            if db is not None:
                db.close()
        finally:
            self._cleanup()


def location_key(ledger_id: int, entry_id: int) -> bytes:
    return LOCATION_KEY.pack(ledger_id, entry_id)


def ledger_key(ledger_id: int) -> bytes:
    return LEDGER_KEY.pack(ledger_id)


def decode_location_item(key: bytes, value: bytes) -> tuple[int, int, int]:
    """``(ledger_id, entry_id, location)`` from one ``locations`` pair."""
    if len(key) != LOCATION_KEY.size or len(value) != LOCATION_VALUE.size:
        raise CorruptEntryError(
            LAYER,
            0,
            "a 16-byte locations key with an 8-byte value",
            f"{key.hex()} -> {value.hex()}",
        )
    ledger_id, entry_id = LOCATION_KEY.unpack(key)
    return ledger_id, entry_id, LOCATION_VALUE.unpack(value)[0]


def write_rocksdb(
    path: Path, items: Iterable[tuple[bytes, bytes]], *, lz4: bool = False, batch_size: int = 10_000
) -> int:
    """Create a NEW RocksDB database at ``path`` holding ``items``; return how many.

    Table options follow KeyValueStorageRocksDB's defaults (block format version 5,
    xxHash checksums, LZ4 when ``lz4``, as for ``locations``). Refuses an existing path.
    The memtable is flushed to an SST file before closing, and rocksdict's own config file
    is removed, so the directory holds only RocksDB files.
    """
    from rocksdict import (
        BlockBasedOptions,
        ChecksumType,
        DBCompressionType,
        Options,
        Rdict,
        WriteBatch,
    )

    if path.exists():
        raise LedgerctlError(f"refusing to write a RocksDB database into existing {path}")
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    table = BlockBasedOptions()
    table.set_format_version(5)
    table.set_checksum_type(ChecksumType.xxhash())
    options.set_block_based_table_factory(table)
    if lz4:
        options.set_compression_type(DBCompressionType.lz4())
    db: Any = Rdict(str(path), options)
    count = 0
    try:
        batch = WriteBatch(raw_mode=True)
        pending = 0
        for key, value in items:
            batch.put(key, value)
            pending += 1
            count += 1
            if pending >= batch_size:
                db.write(batch)
                batch = WriteBatch(raw_mode=True)
                pending = 0
        if pending:
            db.write(batch)
        db.flush()
    finally:
        db.close()
    (path / ROCKSDICT_CONFIG).unlink(missing_ok=True)
    return count
