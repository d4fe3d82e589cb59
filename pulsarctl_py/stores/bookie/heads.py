"""Entry heads of a ledger read straight from a DbLedgerStorage index and its entry logs.

:meth:`BookieStore.read_heads` calls :func:`scan_db_heads` when one DbLedgerStorage
index holds the ledger alone (no other index, no journal tail for it) and the ledger's
digest is CRC32C. The locations index is read a list of pairs at a time, and the native
scanner (``_speedups.scan_heads``) checks each entry in a window of its entry log: record
size and ids as BookKeeper's ``readEntry`` checks them, the CRC32C digest, and the broker
entry metadata. Every entry it does not find clean, and every entry past what a window
can hold, goes through the Python path one by one: ``read_at_location`` (which raises
for a record that is not that entry, like :meth:`BookieStore.read_entries`) and
``decode_head``. So the heads, and the errors, are those of the Python path.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.entry import DecodeOptions
from pulsarctl_py.decoders.entrylog import split_location
from pulsarctl_py.decoders.heads import EntryHead, decode_head
from pulsarctl_py.decoders.speedups import native

from .indexes import DbIndex
from .rocks import LOCATION_VALUE, MAX_ID, decode_location_item, location_key

if TYPE_CHECKING:
    from .store import BookieStore

#: bytes of an entry log read at once; an entry larger than this is read whole
WINDOW = 1 << 20
#: the largest entry a window is grown for (BookKeeper's default nettyMaxFrameSizeBytes)
MAX_WINDOW_ENTRY = 5 << 20
BATCH = 4096


class _Window:
    """The bytes of one entry log from ``start``, with the log file held open."""

    def __init__(self, store: BookieStore) -> None:
        self.store = store
        self.log_id = -1
        self.data: bytes | None = None
        self.start = 0
        self._hold: AbstractContextManager[Any] | None = None
        self._file: Any = None

    def load(self, db: DbIndex, packed: int) -> bool:
        """Read the window holding the entry at ``packed``; False: leave it to Python."""
        log_id, offset = split_location(packed)
        if offset < 4:
            return False
        if log_id != self.log_id:
            self.release()
            path = db.location(packed).path
            if not path.is_file():
                return False
            self._hold = self.store._files.open(path)
            self._file = self._hold.__enter__()
            self.log_id = log_id
        data = self._file.read_at(offset - 4, WINDOW)
        if len(data) >= 4:
            size = int.from_bytes(data[:4], "big", signed=True)
            if len(data) < size + 4 <= MAX_WINDOW_ENTRY + 4:
                data = self._file.read_at(offset - 4, size + 4)
        self.data, self.start = data, offset - 4
        return True

    def release(self) -> None:
        if self._hold is not None:
            self._hold.__exit__(None, None, None)
        self._hold = self._file = self.data = None
        self.log_id = -1


def scan_db_heads(
    store: BookieStore,
    db: DbIndex,
    ledger_id: int,
    first: int,
    last: int | None,
    options: DecodeOptions,
    with_data: bool = False,
    batched: bool = False,
) -> Iterator[Any]:
    """The heads of the ledger's entries in ``[first, last]`` held in ``db``, in order.

    With ``with_data``, ``(head, data)`` pairs: each head with the entry's stored bytes
    (cut out of the window the native scanner read them from, or read by the Python path).
    With ``batched`` (and ``with_data``), lists of such pairs: those of one scanner call
    at a time, so that a caller's loop per entry is not behind a generator per entry.
    """
    if db.locations is None:
        return
    low = location_key(ledger_id, max(first, 0))
    if last is not None and last < MAX_ID:
        high: bytes | None = location_key(ledger_id, last + 1)
    else:
        high = location_key(ledger_id + 1, 0) if ledger_id < MAX_ID else None
    scan = native.scan_heads
    end, need_window, other = native.HEADS_END, native.HEADS_WINDOW, native.HEADS_OTHER_LEDGER
    window = _Window(store)
    out: list[EntryHead] = []
    try:
        for batch in db.locations.item_batches(low, high, BATCH):
            i = 0
            loaded_for = -1  # the item a window was just read for
            while i < len(batch):
                i, status = scan(batch, i, ledger_id, window.log_id, window.data, window.start, out)
                if out:
                    if batched:
                        yield _with_data(out, batch, i, window)
                    elif with_data:
                        yield from _with_data(out, batch, i, window)
                    else:
                        yield from out
                    out.clear()
                if status == end:
                    break
                if status == other:
                    return
                if status == need_window and loaded_for != i:
                    (packed,) = LOCATION_VALUE.unpack(batch[i][1])
                    if window.load(db, packed):
                        loaded_for = i
                        continue
                # irregular, or no window can hold it: the Python path, for this item only
                found = _python_head(store, db, ledger_id, batch[i], options)
                if found is None:
                    return
                if batched:
                    yield [found]
                else:
                    yield found if with_data else found[0]
                i += 1
    finally:
        window.release()


def _with_data(
    heads: list[EntryHead], batch: list[tuple[bytes, bytes]], end: int, window: _Window
) -> list[tuple[EntryHead, bytes]]:
    """The heads the native scanner made for ``batch[end - len(heads):end]``, each with its
    entry's bytes from the window (the scanner checked that each lies inside it)."""
    data, start = window.data, window.start
    assert data is not None
    unpack = LOCATION_VALUE.unpack
    ats = [(unpack(value)[0] & 0xFFFFFFFF) - start for _key, value in batch[end - len(heads) : end]]
    return [(head, data[at : at + head.size]) for head, at in zip(heads, ats, strict=True)]


def _python_head(
    store: BookieStore,
    db: DbIndex,
    ledger_id: int,
    item: tuple[bytes, bytes],
    options: DecodeOptions,
) -> tuple[EntryHead, bytes] | None:
    found_ledger, entry_id, packed = decode_location_item(*item)  # raises when malformed
    if found_ledger != ledger_id:
        return None
    data = store.read_at_location(ledger_id, entry_id, db.location(packed))
    return decode_head(data, options, (ledger_id, entry_id)), data
