"""Entry heads of a ledger read straight from a bookie's index and entry logs.

:meth:`BookieStore.read_heads` reads the heads natively wherever the ledger's entries
come from one index (no other source, no journal tail for them) and its digest is
CRC32C, CRC32 or DUMMY, or MAC where the password is known (:func:`native_key`):

* one DbLedgerStorage index and CRC32C (:func:`scan_db_heads`): the locations index is
  read a list of pairs at a time, and the native scanner (``_speedups.scan_heads``)
  checks each entry in a window of its entry log: record size and ids as BookKeeper's
  ``readEntry`` checks them, the CRC32C digest, and the broker entry metadata;
* any other index (:func:`scan_slot_heads`): the entries' locations as slots, 8-byte
  locations indexed by entry id, as an InterleavedLedgerStorage/SortedLedgerStorage
  ``.idx`` file holds them (read from it; a DbLedgerStorage index's runs of items
  turned into slots; the slot tables of entry logs scanned for a lost index), checked
  the same way by ``_speedups.scan_slots`` for the CRC32C, CRC32, DUMMY or MAC digest;
* entries already read, from several sources or from live bookies
  (:func:`record_head_batches`): ``_speedups.record_heads``.

Every entry the native scan does not find clean, and every entry past what a window can
hold, goes through the Python path one by one: ``read_at_location`` (which raises for a
record that is not that entry, like :meth:`BookieStore.read_entries`) and
``decode_head``. So the heads, and the errors, are those of the Python path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pulsarctl_py.decoders.checksums import DigestType, native_mac_key
from pulsarctl_py.decoders.entry import DecodeOptions
from pulsarctl_py.decoders.entrylog import split_location
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.heads import EntryHead, decode_head
from pulsarctl_py.decoders.index_file import LOCATION as SLOT
from pulsarctl_py.decoders.speedups import native

from .indexes import DbIndex, SlotChunk
from .model import Location, StoredEntry
from .rocks import LOCATION_VALUE, MAX_ID, decode_location_item, location_key

if TYPE_CHECKING:
    from .files import FileCache

#: bytes of an entry log read at once; an entry larger than this is read whole
WINDOW = 1 << 20
#: the largest entry a window is grown for (BookKeeper's default nettyMaxFrameSizeBytes)
MAX_WINDOW_ENTRY = 5 << 20
BATCH = 4096
#: entries read before their heads are made natively, on the records path
RECORD_BATCH = 1024


def native_digest(options: DecodeOptions) -> int | None:
    """The digest type the native head scans check for these options (its
    DigestType number), or None where they cannot serve them: no native module, a MAC
    digest without its password or without the native MAC module. A digest type not
    known (detected entry by entry) is scanned as CRC32C, the type detection tries first:
    an entry whose CRC32C digest verifies is detected as CRC32C, and any other entry takes
    the Python path, which detects."""
    if native is None:
        return None
    kind = options.digest_type
    if kind is None:
        return int(DigestType.CRC32C)
    if kind in (DigestType.CRC32C, DigestType.CRC32, DigestType.DUMMY):
        return int(kind)
    if native_key(options) is not None:
        return int(kind)
    return None


def native_key(options: DecodeOptions) -> bytes | None:
    """The ``key`` argument of the native scans for these options: the HMAC key of a MAC
    digest whose password is known, where the native module checks MAC; else None."""
    return native_mac_key(options.digest_type, options.password)


class EntryLogs(Protocol):
    """What the head scans read through: the entry logs of a bookie's directories and the
    Python path for one entry (:class:`.store.BookieStore`, which calls these scans)."""

    #: the store's open entry log files
    _files: FileCache

    def read_at_location(self, ledger_id: int, entry_id: int, location: Location) -> bytes: ...


class SlotSource(Protocol):
    """An index the slot scans read: see :class:`.indexes.IdxIndex`."""

    def slot_chunks(self, ledger_id: int, first: int, last: int | None) -> Iterator[SlotChunk]: ...
    def log_path(self, log_id: int) -> Path: ...
    def slot_location(self, ledger_id: int, entry_id: int, packed: int) -> Location: ...


class _Window:
    """The bytes of one entry log from ``start``, with the log file held open."""

    def __init__(self, store: EntryLogs) -> None:
        self.store = store
        self.log_id = -1
        self.data: bytes | None = None
        self.start = 0
        self._hold: AbstractContextManager[Any] | None = None
        self._file: Any = None

    def load(self, log_path: Callable[[int], Path], packed: int) -> bool:
        """Read the window holding the entry at ``packed`` (``log_path`` names the file of
        its log id); False: leave it to Python."""
        log_id, offset = split_location(packed)
        if offset < 4:
            return False
        if log_id != self.log_id:
            self.release()
            path = log_path(log_id)
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
    store: EntryLogs,
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
                    if window.load(db.log_path, packed):
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
    store: EntryLogs,
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


def scan_slot_heads(
    store: EntryLogs,
    source: SlotSource,
    ledger_id: int,
    first: int,
    last: int | None,
    options: DecodeOptions,
    digest: int,
    batched: bool = False,
) -> Iterator[Any]:
    """The heads of the ledger's entries in ``[first, last]`` that ``source`` names in
    slots, in order, by the native ``scan_slots`` (``digest``: its DigestType number; a
    MAC's key from ``options``, :func:`native_key`).
    ``batched``: lists of ``(head, data)`` pairs, those of one scanner call at a time;
    else heads one by one."""
    scan = native.scan_slots
    end, need_window = native.HEADS_END, native.HEADS_WINDOW
    key = native_key(options)
    unpack = SLOT.unpack_from
    window = _Window(store)
    out: list[Any] = []
    try:
        for first_entry, slots in source.slot_chunks(ledger_id, first, last):
            if isinstance(slots, Location):  # an entry a slot cannot name: Python's
                found = _read_head(store, ledger_id, first_entry, slots, options)
                yield [found] if batched else found[0]
                continue
            count = len(slots) // SLOT.size
            i = 0
            loaded_for = -1  # the slot a window was just read for
            while i < count:
                i, status = scan(
                    slots,
                    i,
                    first_entry,
                    ledger_id,
                    window.log_id,
                    window.data,
                    window.start,
                    digest,
                    out,
                    batched,
                    key,
                )
                if out:
                    if batched:
                        yield out
                        out = []
                    else:
                        yield from out
                        out.clear()
                if status == end:
                    break
                (packed,) = unpack(slots, SLOT.size * i)
                if (
                    status == need_window
                    and loaded_for != i
                    and window.load(source.log_path, packed)
                ):
                    loaded_for = i
                    continue
                # irregular, or no window can hold it: the Python path, for this entry only
                entry_id = first_entry + i
                location = source.slot_location(ledger_id, entry_id, packed)
                found = _read_head(store, ledger_id, entry_id, location, options)
                yield [found] if batched else found[0]
                i += 1
    finally:
        window.release()


def _read_head(
    store: EntryLogs, ledger_id: int, entry_id: int, location: Location, options: DecodeOptions
) -> tuple[EntryHead, bytes]:
    data = store.read_at_location(ledger_id, entry_id, location)
    return decode_head(data, options, (ledger_id, entry_id)), data


def record_head_batches(
    stored: Iterator[StoredEntry],
    ledger_id: int,
    options: DecodeOptions,
    digest: int | None,
    batched: bool = False,
) -> Iterator[Any]:
    """The heads of entries already read (``stored``, in order: from several sources of a
    bookie, or from live bookies), :data:`RECORD_BATCH` read at a time and made by the
    native ``record_heads`` (``digest``: its DigestType number, a MAC's key from
    ``options``; None: every head by the Python decoder). ``batched``: lists of ``(head,
    data)`` pairs; else heads. An error reading the entries is raised once the heads of
    the entries read before it are given, as the read itself gives them."""
    heads = native.record_heads if native is not None and digest is not None else None
    end = native.HEADS_END if heads is not None else 0
    key = native_key(options)
    while True:
        records: list[tuple[int, bytes]] = []
        error: LedgerctlError | None = None
        try:
            for entry in stored:
                records.append((entry.entry_id, entry.data))
                if len(records) == RECORD_BATCH:
                    break
        except LedgerctlError as exc:
            error = exc
        if not records and error is None:
            return
        if heads is None:
            pairs = [(decode_head(d, options, (ledger_id, e)), d) for e, d in records]
            if batched:
                yield pairs
            else:
                yield from (head for head, _ in pairs)
        i = 0
        out: list[Any] = []
        while heads is not None and i < len(records):
            i, status = heads(records, i, ledger_id, digest, out, batched, key)
            if out:
                if batched:
                    yield out
                    out = []
                else:
                    yield from out
                    out.clear()
            if status == end:
                break
            entry_id, data = records[i]
            head = decode_head(data, options, (ledger_id, entry_id))
            yield [(head, data)] if batched else head
            i += 1
        if error is not None:
            raise error
