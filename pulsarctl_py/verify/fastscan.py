"""verify's entry checks on the head scan: one pass over a ledger, no Entry per entry.

For a data ledger whose digest is CRC32C, CRC32 or DUMMY, or MAC where its password is
known and the native module checks MAC (``_speedups_mac``, OpenSSL's HMAC-SHA1), in
bookie directories or on live bookies:

* where one DbLedgerStorage index holds the ledger alone (as ``BookieStore.read_heads``
  takes its native path; in any of the bookie's ledger directories), the native
  ``verify_heads`` (decoders/_speedups.c) reads the locations index a batch at a time and
  checks each entry in a window of its entry log (a DUMMY digest: runs of the index as
  slots, by ``verify_slots``);
* where one index file (InterleavedLedgerStorage, SortedLedgerStorage) or the entry logs
  scanned for a lost index hold it alone, ``verify_slots`` checks the entries their slots
  name the same way;
* in any other storage (a journal tail, several sources) and on live bookies,
  ``verify_records`` checks the entries ``read_entries`` reads.

Each checks every entry as the general path does: record and ids, the digest, a
plausible header, the prefix layers in order, the 0x0e01 CRC32C, a MessageMetadata with
its required fields and valid UTF-8 text; and runs the ordered checks of
:class:`~.order.TopicOrder` where they have nothing to say (index continuous, timestamps
not going back). One digest and one checksum computation per entry. A DUMMY digest has
nothing to verify: every entry counts as unverified, as in the general path.

It stops at anything else, and this side does for that one entry what the general path
does: an entry that is not clean (damaged, a MAC that does not match, compacted
framing, text that is not UTF-8, ...) is read and decoded by ``Run.entries`` exactly as
the general path reads it; a clean entry the ordered checks have something to say about goes to
``TopicOrder.add_values`` with the values the native scan read, but for one whose index
is not the previous one plus its message count: whether it was published in a
transaction (which the broker counts as one message) is in its metadata, which the
general path reads (``_index_off``). A ledger whose digest
type is not in its metadata has it detected once, from its first entry (CRC32C or CRC32:
a DUMMY digest cannot be told from damage entry by entry). Everything the fast path
cannot serve (no native module, MAC digests without their password or without the
native MAC module, cursor and compacted ledgers, the transaction stores' records) takes
the general path. tests/verify/test_fastscan.py checks that both give the same findings,
on healthy and on damaged ledgers, in every storage layout.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.bookkeeper import HEADER
from pulsarctl_py.decoders.checksums import DIGESTS, DigestType, native_mac_key
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.speedups import native
from pulsarctl_py.proto import pulsar_api_pb2 as api
from pulsarctl_py.stores.bookie.rocks import LOCATION_VALUE

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerView
    from pulsarctl_py.stores.bookie.heads import SlotSource
    from pulsarctl_py.stores.bookie.indexes import DbIndex
    from pulsarctl_py.stores.bookie.store import BookieStore
    from pulsarctl_py.verify.core import Finding, Run
    from pulsarctl_py.verify.entries import LedgerScan
    from pulsarctl_py.verify.order import TopicOrder

#: digests the native scan checks (DUMMY: nothing to verify); and MAC with its key
SERVED = (DigestType.CRC32C, DigestType.CRC32, DigestType.DUMMY)
#: of the digests verify_heads checks on a DbLedgerStorage index's items (the others: slots)
ITEMS = (DigestType.CRC32C, DigestType.CRC32, DigestType.HMAC)
#: of those, the ones a ledger's first entry tells when its metadata does not
DETECTED = (DigestType.CRC32C, DigestType.CRC32)
#: what an entry's unverified digest is, for a DUMMY digest (``Entry.unverified``)
_DUMMY = ["DUMMY"]
#: location items read from the index at once
BATCH = 4096
#: after this many entries the general path had to read, if they are most of what was
#: read, the rest of the ledger goes the general way at once
GIVE_UP_AFTER = 256

# the slots of verify_heads' state (decoders/_speedups.c, S_*)
(
    EXPECTED,
    ENTRIES,
    BYTES,
    PREV_INDEX,
    PREV_ENTRY,
    BEM_SEEN,
    IN_LAST,
    MAX_BEFORE,
    MAX_ENTRY,
    TS_MAX,
    TS_ENTRY,
    ORDERED,
    V_ENTRY,
    V_PAYLOAD,
    V_INDEX,
    V_COUNT,
    V_TS,
    V_BROKER_TS,
) = range(18)
SLOTS = 18


def fast_scan(run: Run, scan: LedgerScan, view: LedgerView, last: int) -> Iterator[Finding] | None:
    """The findings of ``scan`` over entries 0..last by the fast path, or None when the
    storage or the ledger's digest cannot be served by it."""
    from pulsarctl_py.stores.bookie.store import BookieStore

    if native is None or getattr(native, "VERIFY_SLOTS", None) != SLOTS:
        return None
    if not hasattr(native, "payload_items"):
        return None  # a module built before the native payload check
    bookie = run.source.bookie
    live = getattr(bookie, "where", None) == "live"
    if not (isinstance(bookie, BookieStore) or live) or scan.order is None:
        return None
    if view.kind not in ("data", "unknown") or view.entry_format is not None:
        return None  # cursor, compacted ledgers and transaction stores: not Pulsar entries
    if view.digest_type is not None and view.digest_type not in SERVED:
        if native_mac_key(view.digest_type, view.password) is None:
            return None  # a MAC without its password (or without the native MAC module)
    runs: list[tuple[Any, int, int | None]] = [(None, 0, last)]
    if isinstance(bookie, BookieStore):
        try:
            runs = bookie.index_runs(view.ledger_id, 0, last)
        except LedgerctlError:
            pass  # the entries as read_entries finds them
    return _scan(scan, view, last, bookie, runs)


def _scan(
    scan: LedgerScan,
    view: LedgerView,
    last: int,
    bookie: Any,
    runs: list[tuple[Any, int, int | None]],
) -> Iterator[Finding]:
    from pulsarctl_py.stores.bookie.indexes import DbIndex

    digest = view.digest_type
    if digest is None:  # detected once, from the first entry the general path reads clean
        for entry_id, entry, error in scan.run.entries(view, 0, last):
            yield from scan.entry(entry_id, entry, error)
            if entry is not None and entry.ok and entry.digest_type is not None:
                digest = entry.digest_type
                break
        if digest not in DETECTED:
            if scan.expected <= last:
                yield from scan.general(scan.expected, last)
            return
    # a MAC digest's HMAC key (SHA-1("mac" + password)); None for the others
    key = native_mac_key(digest, view.password)
    # runs of the range: one index's (its items or slots), or read from several sources
    for source, _, run_last in runs:
        end = last if run_last is None else run_last
        if scan.expected > end:
            continue
        if isinstance(source, DbIndex) and digest in ITEMS:
            yield from _native(scan, view, end, bookie, source, digest, key)
        elif source is not None:
            yield from _slots(scan, view, end, bookie, source, digest, key)
        else:
            yield from _records(scan, view, end, bookie, digest, key)


def _native(
    scan: LedgerScan,
    view: LedgerView,
    last: int,
    bookie: BookieStore,
    db: DbIndex,
    digest: DigestType,
    key: bytes | None = None,
) -> Iterator[Finding]:
    from pulsarctl_py.stores.bookie.heads import _Window
    from pulsarctl_py.stores.bookie.rocks import (
        MAX_ID,
        decode_location_item,
        location_key,
    )

    assert db.locations is not None and scan.order is not None
    order = scan.order
    lid = view.ledger_id
    low = location_key(lid, scan.expected)
    high = location_key(lid, last + 1) if last < MAX_ID else None
    verify = native.verify_heads
    end, need_window, other = native.HEADS_END, native.HEADS_WINDOW, native.HEADS_OTHER_LEDGER
    gap, values = native.VERIFY_GAP, native.VERIFY_VALUES
    state: list[Any] = [None] * SLOTS
    state[ENTRIES] = state[BYTES] = 0
    kind = int(digest)
    window = _Window(bookie)
    payloads = Payloads(scan, view, digest)
    irregular = 0
    stop = False  # the native pass ends here: the general path reads what is left
    try:
        for batch in db.locations.item_batches(low, high, BATCH):
            i = 0
            loaded_for = -1  # the item a window was just read for
            while i < len(batch) and not stop:
                _state_in(state, scan, order)
                start = i
                i, status = verify(
                    batch, i, lid, window.log_id, window.data, window.start, kind, state, key
                )
                _state_out(state, scan, order, lid)
                general = status == values and _index_off(state, order)
                # the entries found clean (one whose index is off: the general path's)
                clean = i + 1 if status == values and not general else i
                yield from payloads.window(batch, start, clean, window)
                if status == end:
                    break
                if status == other:
                    stop = True
                elif status == gap:
                    scan.skip_to(decode_location_item(*batch[i])[1])
                elif status == values:
                    yield from _values(scan, state, None, general)
                    i += 1
                elif (
                    status == need_window
                    and loaded_for != i
                    and window.load(db.log_path, LOCATION_VALUE.unpack(batch[i][1])[0])
                ):
                    loaded_for = i
                else:  # not clean, or no window holds it: the general path, for this entry
                    try:
                        found, entry_id, _ = decode_location_item(*batch[i])
                    except LedgerctlError:
                        found = entry_id = -1
                    if found != lid or entry_id < scan.expected:
                        stop = True  # an item this pass cannot place
                        break
                    yield from scan.general(entry_id, entry_id)
                    irregular += 1
                    i += 1
                    # mostly irregular entries: the general path for the rest
                    stop = irregular > GIVE_UP_AFTER and irregular * 2 > scan.expected
            if stop:
                break
    finally:
        window.release()
    if scan.expected <= last:  # what the native pass left (if anything): the general path
        yield from scan.general(scan.expected, last)


def _slots(
    scan: LedgerScan,
    view: LedgerView,
    last: int,
    bookie: BookieStore,
    source: SlotSource,
    digest: DigestType,
    key: bytes | None = None,
) -> Iterator[Finding]:
    """One index naming the entries in slots (index files, the entry logs scanned for a
    lost index, a DbLedgerStorage index for a DUMMY digest): the native ``verify_slots``
    checks each entry in a window of its entry log."""
    from pulsarctl_py.decoders.index_file import LOCATION as SLOT
    from pulsarctl_py.stores.bookie.heads import _Window
    from pulsarctl_py.stores.bookie.model import Location

    assert scan.order is not None
    order = scan.order
    lid = view.ledger_id
    verify = native.verify_slots
    end, need_window = native.HEADS_END, native.HEADS_WINDOW
    gap, values = native.VERIFY_GAP, native.VERIFY_VALUES
    state: list[Any] = [None] * SLOTS
    state[ENTRIES] = state[BYTES] = 0
    kind = int(digest)
    window = _Window(bookie)
    payloads = Payloads(scan, view, digest)
    irregular = 0
    stop = False  # the native pass ends here: the general path reads what is left
    chunks = source.slot_chunks(lid, scan.expected, last)
    try:
        for first_entry, slots in chunks:
            if isinstance(slots, Location):  # an entry a slot cannot name
                if first_entry < scan.expected:
                    break
                yield from scan.general(first_entry, first_entry)
                irregular += 1
                if irregular > GIVE_UP_AFTER and irregular * 2 > scan.expected:
                    break
                continue
            count = len(slots) // SLOT.size
            i = 0
            loaded_for = -1  # the slot a window was just read for
            while i < count and not stop:
                _state_in(state, scan, order)
                before, start = scan.expected, i
                i, status = verify(
                    slots,
                    i,
                    first_entry,
                    lid,
                    window.log_id,
                    window.data,
                    window.start,
                    kind,
                    state,
                    key,
                )
                _state_out(state, scan, order, lid, digest, before)
                general = status == values and _index_off(state, order)
                clean = i + 1 if status == values and not general else i
                yield from payloads.slots(slots, first_entry, start, clean, window)
                if status == end:
                    break
                if status == gap:
                    scan.skip_to(first_entry + i)
                elif status == values:
                    yield from _values(scan, state, digest, general)
                    i += 1
                elif (
                    status == need_window
                    and loaded_for != i
                    and window.load(source.log_path, SLOT.unpack_from(slots, SLOT.size * i)[0])
                ):
                    loaded_for = i
                else:  # not clean, or no window holds it: the general path, for this entry
                    entry_id = first_entry + i
                    if entry_id < scan.expected:
                        stop = True  # a slot this pass cannot place
                        break
                    yield from scan.general(entry_id, entry_id)
                    irregular += 1
                    i += 1
                    # mostly irregular entries: the general path for the rest
                    stop = irregular > GIVE_UP_AFTER and irregular * 2 > scan.expected
            if stop:
                break
    except LedgerctlError:
        pass  # the general path meets the same error, and goes on after it
    finally:
        chunks.close()
        window.release()
    if scan.expected <= last:  # what the native pass left (if anything): the general path
        yield from scan.general(scan.expected, last)


def _records(
    scan: LedgerScan,
    view: LedgerView,
    last: int,
    bookie: Any,
    digest: DigestType,
    key: bytes | None = None,
) -> Iterator[Finding]:
    """Any other storage (a journal tail, several sources; live bookies): the entries as
    ``read_entries`` reads them, checked by the native ``verify_records``."""
    from itertools import islice

    assert scan.order is not None
    order = scan.order
    lid = view.ledger_id
    verify = native.verify_records
    end, gap, values = native.HEADS_END, native.VERIFY_GAP, native.VERIFY_VALUES
    state: list[Any] = [None] * SLOTS
    state[ENTRIES] = state[BYTES] = 0
    kind = int(digest)
    irregular = 0
    stop = False  # the native pass ends here: the general path reads what is left
    payloads = Payloads(scan, view, digest)
    stored = bookie.read_entries(lid, scan.expected, last)
    try:
        while not stop:
            try:
                batch = [(e.entry_id, e.data) for e in islice(stored, BATCH)]
            except LedgerctlError:
                break  # the general path meets the same error, and goes on after it
            if not batch:
                break
            i = 0
            while i < len(batch) and not stop:
                _state_in(state, scan, order)
                before, start = scan.expected, i
                i, status = verify(batch, i, lid, kind, state, key)
                _state_out(state, scan, order, lid, digest, before)
                general = status == values and _index_off(state, order)
                clean = i + 1 if status == values and not general else i
                yield from payloads.records(batch, start, clean)
                if status == end:
                    break
                if status == gap:
                    scan.skip_to(batch[i][0])
                elif status == values:
                    yield from _values(scan, state, digest, general)
                    i += 1
                else:  # not clean: the general path, for this entry
                    entry_id = batch[i][0]
                    if entry_id < scan.expected:
                        stop = True
                        break
                    yield from scan.general(entry_id, entry_id)
                    irregular += 1
                    i += 1
                    stop = irregular > GIVE_UP_AFTER and irregular * 2 > scan.expected
    finally:
        stored.close()
    if scan.expected <= last:
        yield from scan.general(scan.expected, last)


class Payloads:
    """The payload check of the entries the native pass found clean: what the decoder's
    :func:`~pulsarctl_py.decoders.entry.decode_payload` rejects (decompression, batch
    records), as the general path finds it (``verify`` decodes payloads there too).

    The native pass checked their layout (header, digest, prefix layers, a regular
    MessageMetadata). The native ``payload_items``/``payload_slots``/``payload_records``
    then pass every entry whose payload the decoder's step has nothing to say about (one
    plain value; a batch whose records split regularly, decompressed by the decoder's own
    ``decompress``) and name the others; for those, the payload is found here by walking
    that regular layout, the MessageMetadata parsed again and the payload given to the
    decoder's own step (``entry``)."""

    def __init__(self, scan: LedgerScan, view: LedgerView, digest: DigestType) -> None:
        from pulsarctl_py.decoders import Depth
        from pulsarctl_py.decoders.codecs import checking_decompress
        from pulsarctl_py.decoders.limits import max_message_size
        from pulsarctl_py.ledgers import LedgerSource

        self.scan = scan
        self.lid = view.ledger_id
        self.options = LedgerSource.entry_options(
            view, Depth.MESSAGES, max_uncompressed=scan.run.max_uncompressed
        )
        self.start = HEADER.size + DIGESTS[digest].size
        # the native check's last arguments: it passes the entries whose payload nothing in
        # decode_payload can reject (decompressing with the decoder's own function), and
        # names the others, which go to ``entry`` (decoders/_speedups_payloads.c)
        # (the limit resolved once: decompress would ask for the process's limit per entry)
        limit = self.options.max_uncompressed
        limit = max_message_size() if limit is None else limit
        self.native = (int(digest), limit, checking_decompress())

    def window(self, batch: list[Any], first: int, end: int, window: Any) -> Iterator[Finding]:
        """Items ``batch[first:end]`` of the locations index, each in ``window``."""
        data, start = window.data, window.start
        for i in native.payload_items(batch, first, end, data, start, *self.native):
            key, value = batch[i]
            offset = (LOCATION_VALUE.unpack(value)[0] & 0xFFFFFFFF) - start
            (size,) = _U32.unpack_from(data, offset - 4)
            yield from self.entry(_ENTRY_ID.unpack_from(key, 8)[0], data[offset : offset + size])

    def slots(
        self, slots: Any, first_entry: int, first: int, end: int, window: Any
    ) -> Iterator[Finding]:
        """Slots ``first:end`` of a slot table whose slot 0 is entry ``first_entry``, each
        entry in ``window`` (a slot is an entry log location, as a locations item's)."""
        data, start = window.data, window.start
        for i in native.payload_slots(slots, first, end, data, start, *self.native):
            (packed,) = _SLOT.unpack_from(slots, 8 * i)
            offset = (packed & 0xFFFFFFFF) - start
            (size,) = _U32.unpack_from(data, offset - 4)
            yield from self.entry(first_entry + i, data[offset : offset + size])

    def records(self, batch: list[Any], first: int, end: int) -> Iterator[Finding]:
        """``(entry id, bytes)`` records ``batch[first:end]``."""
        for i in native.payload_records(batch, first, end, *self.native):
            entry_id, data = batch[i]
            yield from self.entry(entry_id, data)

    def entry(self, entry_id: int, data: bytes | memoryview) -> Iterator[Finding]:
        from pulsarctl_py.decoders.entry import Entry, decode_payload

        at = self.start
        if data[at : at + 2] == _BEM:
            at += 6 + _U32.unpack_from(data, at + 2)[0]
        if data[at : at + 2] == _CHECKSUM:
            at += 6
        (size,) = _U32.unpack_from(data, at)
        at += 4
        mv = memoryview(data)
        md = _METADATA(mv[at : at + size])
        if not md.compression and not md.HasField("num_messages_in_batch"):
            if not md.HasField("marker_type"):
                return  # one plain value: nothing in it can fail to decode
        entry = Entry(data, metadata=md, payload=mv[at + size :], position=(self.lid, entry_id))
        decode_payload(entry, self.options, at + size)
        if not entry.ok:
            yield from self.scan.undecodable(entry_id, entry)


_U32 = struct.Struct(">I")
_SLOT = struct.Struct(">Q")
_ENTRY_ID = struct.Struct(">q")
_BEM = b"\x0e\x02"
_CHECKSUM = b"\x0e\x01"
_METADATA = api.MessageMetadata.FromString


def _index_off(state: list[Any], order: TopicOrder) -> bool:
    """Whether a clean entry the ordered checks have something to say about has an index
    that is not the previous one plus its message count: a transactional batch (which the
    broker counts as one message) or a gap. The native scan does not read whether an entry
    is transactional; the general path reads it again and judges (``TopicOrder``)."""
    index, count, prev = state[V_INDEX], state[V_COUNT], order.prev_index
    return (
        index is not None
        and count is not None
        and prev is not None
        and order.prev_pos is not None
        and index != prev + count
    )


def _values(
    scan: LedgerScan,
    state: list[Any],
    digest: DigestType | None = None,
    general: bool = False,
) -> Iterator[Finding]:
    """A clean entry the ordered checks have something to say about: its values to them
    (``general``: the entry read again by the general path instead)."""
    entry_id = state[V_ENTRY]
    if general:
        yield from scan.general(entry_id, entry_id)
        return
    yield from scan.values(
        entry_id,
        state[V_PAYLOAD],
        state[V_INDEX],
        state[V_COUNT],
        state[V_TS],
        state[V_BROKER_TS],
    )
    if digest is DigestType.DUMMY:  # read clean, its digest not verified (none stored)
        scan.unverified_run(entry_id, entry_id, _DUMMY)


def _state_in(state: list[Any], scan: LedgerScan, order: TopicOrder) -> None:
    state[EXPECTED] = scan.expected
    state[PREV_INDEX] = order.prev_index if order.prev_pos is not None else None
    state[PREV_ENTRY] = state[MAX_ENTRY] = state[TS_ENTRY] = None
    state[BEM_SEEN] = order.bem_seen
    state[IN_LAST] = order.in_last_ledger
    state[MAX_BEFORE] = order.max_index_before_last
    state[TS_MAX] = order.ts_max
    state[ORDERED] = order.quiet


def _state_out(
    state: list[Any],
    scan: LedgerScan,
    order: TopicOrder,
    lid: int,
    digest: DigestType | None = None,
    before: int = 0,
) -> None:
    scan.expected = state[EXPECTED]
    if state[ENTRIES]:
        scan.counted(state[ENTRIES], state[BYTES])
        if digest is DigestType.DUMMY:  # the entries counted: before .. expected - 1
            scan.unverified_run(before, scan.expected - 1, _DUMMY)
        state[ENTRIES] = state[BYTES] = 0
    order.bem_seen = state[BEM_SEEN]
    if state[PREV_ENTRY] is not None:
        order.prev_index, order.prev_pos = state[PREV_INDEX], (lid, state[PREV_ENTRY])
    if state[MAX_ENTRY] is not None:
        order.max_index_before_last = state[MAX_BEFORE]
        order.max_index_at = (lid, state[MAX_ENTRY])
    if state[TS_ENTRY] is not None:
        order.ts_max, order.ts_max_at = state[TS_MAX], (lid, state[TS_ENTRY])
