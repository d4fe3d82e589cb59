"""verify's entry checks on the head scan: one pass over a ledger, no Entry per entry.

For a data ledger in bookie directories whose digest is CRC32C or CRC32: where one
DbLedgerStorage index holds the ledger alone (as ``BookieStore.read_heads`` takes its
native path), the native ``verify_heads`` (decoders/_speedups.c) reads the locations
index a batch at a time and checks each entry in a window of its entry log; in any other
storage (entry logs with index files, a journal, several directories) ``verify_records``
checks the entries ``BookieStore.read_entries`` reads. Both check each entry as the
general path does: record and ids, the digest, a plausible header, the prefix layers in
order, the 0x0e01 CRC32C, a MessageMetadata with its required fields and valid UTF-8
text; and run the ordered checks of :class:`~.order.TopicOrder` where they have nothing
to say (index continuous, timestamps not going back). One digest and one checksum
computation per entry.

It stops at anything else, and this side does for that one entry what the general path
does: an entry that is not clean (damaged, a MAC digest, compacted framing, text that is
not UTF-8, ...) is read and decoded by ``Run.entries`` exactly as the general path reads
it; a clean entry the ordered checks have something to say about goes to
``TopicOrder.add_values`` with the values the native scan read. A ledger whose digest
type is not in its metadata has it detected once, from its first entry. Everything the
fast path cannot serve (no native module, live bookies, MAC and DUMMY digests, cursor
and compacted ledgers) takes the general path. tests/test_verify_fastpath.py
checks that both give the same findings, on healthy and on damaged ledgers.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.bookkeeper import HEADER
from pulsarctl_py.decoders.checksums import DIGESTS, DigestType
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.speedups import native
from pulsarctl_py.proto import pulsar_api_pb2 as api
from pulsarctl_py.stores.bookie.rocks import LOCATION_VALUE

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerView
    from pulsarctl_py.stores.bookie.indexes import DbIndex
    from pulsarctl_py.stores.bookie.store import BookieStore
    from pulsarctl_py.verify.core import Finding, Run
    from pulsarctl_py.verify.ledgers import LedgerScan
    from pulsarctl_py.verify.order import TopicOrder

#: digests the native scan verifies
SERVED = (DigestType.CRC32C, DigestType.CRC32)
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
    bookie = run.source.bookie
    if not isinstance(bookie, BookieStore) or scan.order is None:
        return None  # live bookies read over the network: the general path
    if view.kind not in ("data", "unknown"):
        return None
    if view.digest_type is not None and view.digest_type not in SERVED:
        return None
    try:
        db = bookie._sole_db_index(view.ledger_id, 0, last)
    except LedgerctlError:
        db = None  # the entries as read_entries finds them
    return _scan(scan, view, last, bookie, db)


def _scan(
    scan: LedgerScan, view: LedgerView, last: int, bookie: BookieStore, db: DbIndex | None
) -> Iterator[Finding]:
    digest = view.digest_type
    if digest is None:  # detected once, from the first entry the general path reads clean
        for entry_id, entry, error in scan.run.entries(view, 0, last):
            yield from scan.entry(entry_id, entry, error)
            if entry is not None and entry.ok and entry.digest_type is not None:
                digest = entry.digest_type
                break
        if digest not in SERVED:
            if scan.expected <= last:
                yield from scan.general(scan.expected, last)
            return
    if scan.expected > last:
        return
    if db is not None and db.locations is not None:
        yield from _native(scan, view, last, bookie, db, digest)
    else:
        yield from _records(scan, view, last, bookie, digest)


def _native(
    scan: LedgerScan,
    view: LedgerView,
    last: int,
    bookie: BookieStore,
    db: DbIndex,
    digest: DigestType,
) -> Iterator[Finding]:
    from pulsarctl_py.stores.bookie.heads import _Window
    from pulsarctl_py.stores.bookie.rocks import (
        LOCATION_VALUE,
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
                    batch, i, lid, window.log_id, window.data, window.start, kind, state
                )
                _state_out(state, scan, order, lid)
                clean = i + 1 if status == values else i  # the entries found clean
                yield from payloads.window(batch, start, clean, window)
                if status == end:
                    break
                if status == other:
                    stop = True
                elif status == gap:
                    scan.skip_to(decode_location_item(*batch[i])[1])
                elif status == values:
                    yield from _values(scan, state)
                    i += 1
                elif (
                    status == need_window
                    and loaded_for != i
                    and window.load(db, LOCATION_VALUE.unpack(batch[i][1])[0])
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


def _records(
    scan: LedgerScan, view: LedgerView, last: int, bookie: BookieStore, digest: DigestType
) -> Iterator[Finding]:
    """Any other storage (entry logs with index files, a journal, several indexes): the
    entries as ``read_entries`` reads them, checked by the native ``verify_records``."""
    from itertools import islice

    assert scan.order is not None
    order = scan.order
    lid = view.ledger_id
    verify = native.verify_records
    end, gap, values = native.HEADS_END, native.VERIFY_GAP, native.VERIFY_VALUES
    state: list[Any] = [None] * SLOTS
    state[ENTRIES] = state[BYTES] = 0
    kind = int(digest)
    payloads = Payloads(scan, view, digest)
    irregular = 0
    stop = False  # the native pass ends here: the general path reads what is left
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
                start = i
                i, status = verify(batch, i, lid, kind, state)
                _state_out(state, scan, order, lid)
                clean = i + 1 if status == values else i  # the entries found clean
                yield from payloads.records(batch, start, clean)
                if status == end:
                    break
                if status == gap:
                    scan.skip_to(batch[i][0])
                elif status == values:
                    yield from _values(scan, state)
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
    MessageMetadata), so the payload is found here by walking that regular layout; the
    MessageMetadata is parsed again (the native pass does not hand it over) and the
    payload goes to the decoder's own step."""

    def __init__(self, scan: LedgerScan, view: LedgerView, digest: DigestType) -> None:
        from pulsarctl_py.decoders import Depth
        from pulsarctl_py.ledgers import LedgerSource

        self.scan = scan
        self.lid = view.ledger_id
        self.options = LedgerSource.entry_options(
            view, Depth.MESSAGES, max_uncompressed=scan.run.max_uncompressed
        )
        self.start = HEADER.size + DIGESTS[digest].size

    def window(self, batch: list[Any], first: int, end: int, window: Any) -> Iterator[Finding]:
        """Items ``batch[first:end]`` of the locations index, each in ``window``."""
        data, start = window.data, window.start
        for key, value in batch[first:end]:
            offset = (LOCATION_VALUE.unpack(value)[0] & 0xFFFFFFFF) - start
            (size,) = _U32.unpack_from(data, offset - 4)
            yield from self.entry(_ENTRY_ID.unpack_from(key, 8)[0], data[offset : offset + size])

    def records(self, batch: list[Any], first: int, end: int) -> Iterator[Finding]:
        """``(entry id, bytes)`` records ``batch[first:end]``."""
        for entry_id, data in batch[first:end]:
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
_ENTRY_ID = struct.Struct(">q")
_BEM = b"\x0e\x02"
_CHECKSUM = b"\x0e\x01"
_METADATA = api.MessageMetadata.FromString


def _values(scan: LedgerScan, state: list[Any]) -> Iterator[Finding]:
    return scan.values(
        state[V_ENTRY],
        state[V_PAYLOAD],
        state[V_INDEX],
        state[V_COUNT],
        state[V_TS],
        state[V_BROKER_TS],
    )


def _state_in(state: list[Any], scan: LedgerScan, order: TopicOrder) -> None:
    state[EXPECTED] = scan.expected
    state[PREV_INDEX] = order.prev_index if order.prev_pos is not None else None
    state[PREV_ENTRY] = state[MAX_ENTRY] = state[TS_ENTRY] = None
    state[BEM_SEEN] = order.bem_seen
    state[IN_LAST] = order.in_last_ledger
    state[MAX_BEFORE] = order.max_index_before_last
    state[TS_MAX] = order.ts_max
    state[ORDERED] = order.quiet


def _state_out(state: list[Any], scan: LedgerScan, order: TopicOrder, lid: int) -> None:
    scan.expected = state[EXPECTED]
    if state[ENTRIES]:
        scan.counted(state[ENTRIES], state[BYTES])
        state[ENTRIES] = state[BYTES] = 0
    order.bem_seen = state[BEM_SEEN]
    if state[PREV_ENTRY] is not None:
        order.prev_index, order.prev_pos = state[PREV_INDEX], (lid, state[PREV_ENTRY])
    if state[MAX_ENTRY] is not None:
        order.max_index_before_last = state[MAX_BEFORE]
        order.max_index_at = (lid, state[MAX_ENTRY])
    if state[TS_ENTRY] is not None:
        order.ts_max, order.ts_max_at = state[TS_MAX], (lid, state[TS_ENTRY])
