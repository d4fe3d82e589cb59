"""The local engine: splits run in-process, one after the other, streaming.

Its key table lives in a dict until an estimate of its size passes the memory budget;
then the dict is merged into an embedded RocksDB (rocksdict, raw bytes) in a temporary
directory and emptied, and so on until the scan ends, when the last buffer is merged.
Memory therefore grows with keys up to the budget and no further; the disk holds the rest.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from .base import Fold, KeyRecord, KeyTable, ScanPlan, Split

T = TypeVar("T")

#: default budget for a key table (the CLI's --memory default)
DEFAULT_MEMORY = 512 * 1024 * 1024
#: what one dict slot costs beyond its key and rank bytes (dict slot, tuple, two bytes objects)
_SLOT_OVERHEAD = 200


def _pack(rank: bytes, tombstone: bool) -> bytes:
    return rank + (b"\x01" if tombstone else b"\x00")


def _unpack(value: bytes) -> tuple[bytes, bool]:
    return value[:-1], value[-1:] == b"\x01"


class LocalKeyTable:
    """Greatest-rank record per key, in memory up to ``memory`` bytes, then in RocksDB."""

    def __init__(
        self,
        memory: int | None = DEFAULT_MEMORY,
        spill_dir: str | None = None,
        fold: Fold | None = None,
    ) -> None:
        self.memory = memory
        self.fold = fold
        self._spill_parent = spill_dir
        self._buffer: dict[bytes, tuple[bytes, bool]] = {}
        self._estimate = 0
        self._db: Any = None
        self._dir: str | None = None
        self._count: int | None = None
        self._live: int | None = None
        self.spills = 0

    # -- building ---------------------------------------------------------------------------

    def offer(self, key: bytes, rank: bytes, tombstone: bool) -> None:
        buf = self._buffer
        if self.fold is not None:
            self._offer_fold(key, rank, tombstone)
            return
        old = buf.get(key)
        if old is None:
            buf[key] = (rank, tombstone)
            self._estimate += len(key) + len(rank) + _SLOT_OVERHEAD
            if self.memory is not None and self._estimate > self.memory:
                self._spill()
        elif rank > old[0]:
            buf[key] = (rank, tombstone)

    def _offer_fold(self, key: bytes, rank: bytes, tombstone: bool) -> None:
        assert self.fold is not None
        buf = self._buffer
        state = buf.get(key)
        fresh = state is None
        if fresh and self._db is not None:
            # records arrive in plan order, so the disk holds the state before this one
            raw = self._db.get(key)
            state = None if raw is None else _unpack(raw)
        new = self.fold(state, rank, tombstone)
        if new is None:
            new = state
        if new is None:
            return
        buf[key] = new
        if fresh:
            self._estimate += len(key) + len(new[0]) + _SLOT_OVERHEAD
            if self.memory is not None and self._estimate > self.memory:
                self._spill()

    def _open_db(self) -> Any:
        if self._db is None:
            import rocksdict

            self._dir = tempfile.mkdtemp(prefix="ledgerctl-keys-", dir=self._spill_parent)
            options = rocksdict.Options(raw_mode=True)
            options.create_if_missing(True)
            self._db = rocksdict.Rdict(self._dir, options)
        return self._db

    def _spill(self) -> None:
        """Merge the buffer into the on-disk table and empty it."""
        import rocksdict

        db = self._open_db()
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key, (rank, tomb) in self._buffer.items():
            if self.fold is not None:
                # the buffer already folded the disk state in: it is the newer state
                batch.put(key, _pack(rank, tomb))
                continue
            old = db.get(key)
            if old is None or rank > old[:-1]:
                batch.put(key, _pack(rank, tomb))
        db.write(batch)
        self._buffer = {}
        self._estimate = 0
        self.spills += 1

    def finish(self) -> LocalKeyTable:
        """End of the reduction: merge what is buffered, count keys."""
        if self._db is not None:
            if self._buffer:
                self._spill()
            count = live = 0
            for _, value in self._db.items():
                count += 1
                live += value[-1:] != b"\x01"
            self._count, self._live = count, live
        else:
            self._count = len(self._buffer)
            self._live = sum(1 for _, tomb in self._buffer.values() if not tomb)
        return self

    # -- KeyTable -------------------------------------------------------------------------

    @property
    def spilled(self) -> bool:
        return self._db is not None

    def get(self, key: bytes) -> tuple[bytes, bool] | None:
        found = self._buffer.get(key)
        if self.fold is not None and found is not None:
            return found
        if self._db is not None:
            raw = self._db.get(key)
            if raw is not None:
                disk = _unpack(raw)
                if found is None or disk[0] > found[0]:
                    found = disk
        return found

    def keeps(self, key: bytes, rank: bytes) -> bool:
        found = self.get(key)
        return found is not None and not found[1] and found[0] == rank

    def __len__(self) -> int:
        if self._count is None:
            self.finish()
        return self._count or 0

    @property
    def live(self) -> int:
        if self._live is None:
            self.finish()
        return self._live or 0

    def items(self) -> Iterator[tuple[bytes, bytes, bool]]:
        if self._db is None:
            for key in sorted(self._buffer):
                rank, tomb = self._buffer[key]
                yield key, rank, tomb
            return
        if self._buffer:
            self._spill()
        for key, value in self._db.items():
            rank, tomb = _unpack(value)
            yield bytes(key), rank, tomb

    def close(self) -> None:
        self._buffer = {}
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> LocalKeyTable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalEngine:
    """Runs every split in this process, in plan order."""

    name = "local"

    def __init__(self, spill_dir: str | None = None) -> None:
        self.spill_dir = spill_dir

    def map_splits(
        self,
        plan: ScanPlan,
        fn: Callable[..., Iterable[T]],
        winners: KeyTable | None = None,
    ) -> Iterator[T]:
        for split in plan.splits:
            if winners is None:
                yield from fn(split)
            else:
                yield from fn(split, winners)

    def latest_per_key(
        self,
        plan: ScanPlan,
        fn: Callable[[Split], Iterable[KeyRecord]],
        *,
        memory: int | None = DEFAULT_MEMORY,
        progress: Callable[[Split], None] | None = None,
        fold: Fold | None = None,
    ) -> LocalKeyTable:
        table = LocalKeyTable(memory, self.spill_dir, fold)
        try:
            for split in plan.splits:
                offer = table.offer
                for key, rank, tomb in fn(split):
                    offer(key, rank, tomb)
                if progress is not None:
                    progress(split)
            return table.finish()
        except BaseException:
            table.close()
            raise

    def close(self) -> None:
        return None
