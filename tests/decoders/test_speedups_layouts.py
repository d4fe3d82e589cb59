"""The native head scans of every storage layout (decoders/_speedups_layouts.c) against the
Python path, on generated and mutated entries, and their argument checks.

* ``scan_slots`` and ``record_heads``: every head they make is ``decode_head``'s for the
  same bytes (CRC32C, CRC32 and DUMMY digests), and on regular entries they make every
  head; ``verify_slots`` ends where ``verify_records`` ends on the same entries, with the
  same state (``verify_records`` is held to the general path by
  tests/verify/test_fastscan.py);
* ``item_slots``: the runs a Python reading of the items finds;
* ``log_slots``: through ``ScanIndex``, tests/stores/bookie/test_heads_layouts.py;
* hostile arguments (negative starts, out-of-range offsets, wrong types, unknown digest
  types) raise ValueError or TypeError and never crash.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders import bookkeeper, compacted
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.decoders.entry import DecodeOptions, Depth, Outer
from pulsarctl_py.decoders.heads import decode_head
from pulsarctl_py.decoders.pulsar import BrokerEntryMetadataLayer, build_entry
from pulsarctl_py.decoders.speedups import native
from pulsarctl_py.proto import pulsar_api_pb2 as api
from pulsarctl_py.verify import fastscan

needs_native = pytest.mark.skipif(native is None, reason="native module not built")
KINDS = [DigestType.CRC32C, DigestType.CRC32, DigestType.DUMMY]
LEDGER = 7
SLOT = struct.Struct(">q")


@st.composite
def payloads(draw: st.DrawFn, entry_id: int, regular: bool) -> bytes:
    """A stored Pulsar entry: the regular shapes (0x0e01 checksum, broker entry metadata
    of timestamp and index before it), or (not ``regular``) others too."""
    md = api.MessageMetadata(producer_name="p", sequence_id=entry_id, publish_time=5 + entry_id)
    body = build_entry(md, draw(st.binary(max_size=20)), checksum=True)
    shape = draw(st.sampled_from(["plain", "bem"] + ([] if regular else ["odd"] * 2)))
    if shape == "bem":
        bem = api.BrokerEntryMetadata()
        if draw(st.booleans()):
            bem.broker_timestamp = draw(st.integers(0, 2**64 - 1))
        if draw(st.booleans()):
            bem.index = draw(st.integers(0, 2**64 - 1))
        body = BrokerEntryMetadataLayer.build(bem) + body
    elif shape == "odd":
        body = draw(
            st.sampled_from(
                [
                    compacted.build(api.MessageIdData(ledgerId=3, entryId=entry_id), body),
                    build_entry(md, b"x", checksum=False),
                    b"\x0e\x02\x00\x00\x00\x02\x18\x07" + body,  # a field the scan skips
                    BrokerEntryMetadataLayer.build(api.BrokerEntryMetadata(index=1)) * 2 + body,
                    b"\x0e",
                    b"",
                ]
            )
        )
    return body


@st.composite
def ledgers(draw: st.DrawFn, kind: DigestType, regular: bool = False) -> list[bytes]:
    """A ledger's stored entries: valid headers and digests; unless ``regular``, some
    entries then damaged (a flipped byte, an implausible header, another ledger's id)."""
    out = []
    length = 0
    for entry_id in range(draw(st.integers(1, 12))):
        payload = draw(payloads(entry_id, regular))
        length += len(payload)
        lac = entry_id - 1
        if not regular and draw(st.integers(0, 9)) == 0:
            lac = draw(st.sampled_from([entry_id + 1, -2]))  # implausible
        header = BookieEntryHeader(LEDGER, entry_id, lac, length)
        data = bytearray(bookkeeper.build(header, payload, kind, b""))
        if not regular and draw(st.integers(0, 9)) == 0:
            data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
        out.append(bytes(data))
    return out


def python_head(data: bytes, kind: DigestType, entry_id: int) -> Any:
    options = DecodeOptions(outer=Outer.BOOKIE_ENTRY, digest_type=kind, depth=Depth.ENTRY)
    return decode_head(data, options, (LEDGER, entry_id))


def log_window(entries: list[bytes], start: int, holes: set[int]) -> tuple[bytes, bytes]:
    """A window of an entry log (log 5) from file offset ``start`` holding the entries as
    records, and their slots (0 for the entry ids in ``holes``, whose records are left
    out)."""
    window = bytearray()
    slots = bytearray()
    for entry_id, data in enumerate(entries):
        if entry_id in holes:
            slots += SLOT.pack(0)
            continue
        offset = start + len(window) + 4
        window += len(data).to_bytes(4, "big") + data
        slots += SLOT.pack((5 << 32) | offset)
    return bytes(window), bytes(slots)


@needs_native
@settings(max_examples=400, deadline=None)
@given(data=st.data(), kind=st.sampled_from(KINDS), start=st.integers(4, 10**6))
def test_scan_slots_makes_the_python_heads(data: Any, kind: DigestType, start: int) -> None:
    """Each head scan_slots makes (with its bytes, or without) is decode_head's for the
    same bytes; it stops only at an entry it leaves to the Python path."""
    entries = data.draw(ledgers(kind))
    holes = data.draw(st.sets(st.integers(0, len(entries) - 1), max_size=2))
    window, slots = log_window(entries, start, holes)
    for with_data in (False, True):
        out: list[Any] = []
        i, status = native.scan_slots(
            slots, 0, 0, LEDGER, 5, window, start, int(kind), out, with_data
        )
        assert status in (native.HEADS_END, native.HEADS_IRREGULAR)
        taken = [e for e in range(i) if e not in holes]
        got = [h for h, _ in out] if with_data else out
        assert got == [python_head(entries[e], kind, e) for e in taken]
        if with_data:
            assert [d for _, d in out] == [entries[e] for e in taken]
        if status == native.HEADS_END:
            assert i == len(entries)


@needs_native
@settings(max_examples=200, deadline=None)
@given(data=st.data(), kind=st.sampled_from(KINDS))
def test_regular_entries_are_all_taken(data: Any, kind: DigestType) -> None:
    """scan_slots and record_heads take every regular entry."""
    entries = data.draw(ledgers(kind, regular=True))
    window, slots = log_window(entries, 1024, set())
    out: list[Any] = []
    assert native.scan_slots(slots, 0, 0, LEDGER, 5, window, 1024, int(kind), out, False) == (
        len(entries),
        native.HEADS_END,
    )
    records = list(enumerate(entries))
    heads: list[Any] = []
    assert native.record_heads(records, 0, LEDGER, int(kind), heads, False) == (
        len(entries),
        native.HEADS_END,
    )
    assert heads == out == [python_head(d, kind, e) for e, d in records]


@needs_native
@settings(max_examples=300, deadline=None)
@given(data=st.data(), kind=st.sampled_from(KINDS))
def test_record_heads_makes_the_python_heads(data: Any, kind: DigestType) -> None:
    entries = data.draw(ledgers(kind))
    records: list[Any] = list(enumerate(entries))
    if data.draw(st.booleans()):  # a record that is not an (int, bytes) pair, or another id
        at = data.draw(st.integers(0, len(records) - 1))
        records[at] = data.draw(
            st.sampled_from([(at, bytearray(entries[at])), (at + 1, entries[at]), None])
        )
    start = data.draw(st.integers(0, len(records)))
    for with_data in (False, True):
        out: list[Any] = []
        i, status = native.record_heads(records, start, LEDGER, int(kind), out, with_data)
        assert start <= i <= len(records)
        assert status == (native.HEADS_END if i == len(records) else native.HEADS_IRREGULAR)
        got = [h for h, _ in out] if with_data else out
        assert got == [python_head(entries[e], kind, e) for e in range(start, i)]
        if with_data:
            assert all(d is records[e][1] for e, (_, d) in zip(range(start, i), out, strict=True))


def _state(expected: int = 0) -> list[Any]:
    state: list[Any] = [None] * fastscan.SLOTS
    state[fastscan.EXPECTED] = expected
    state[fastscan.ENTRIES] = state[fastscan.BYTES] = 0
    state[fastscan.BEM_SEEN] = False
    state[fastscan.IN_LAST] = True
    state[fastscan.ORDERED] = True
    return state


def _drive(call: Any, state: list[Any], ids: list[int]) -> list[Any]:
    """Call a verify scan until its end, as fastscan does: past a VALUES or IRREGULAR
    entry, and on from a GAP; every (i, status) and state on the way."""
    trace = []
    i = 0
    while True:  # a call at the end answers END
        i, status = call(i)
        trace.append((i, status, list(state)))
        if status == native.HEADS_END:
            break
        if status == native.VERIFY_GAP:
            state[fastscan.EXPECTED] = ids[i]
            continue
        state[fastscan.EXPECTED] = ids[i] + 1
        i += 1
    return trace


@needs_native
@settings(max_examples=300, deadline=None)
@given(data=st.data(), kind=st.sampled_from(KINDS))
def test_verify_slots_is_verify_records(data: Any, kind: DigestType) -> None:
    """On the same entries, verify_slots stops where verify_records stops, with the same
    state: the same entries counted, the same values handed to Python, gaps at the same
    holes."""
    entries = data.draw(ledgers(kind))
    holes = data.draw(st.sets(st.integers(0, len(entries) - 1), max_size=2))
    window, slots = log_window(entries, 4096, holes)
    present = [e for e in range(len(entries)) if e not in holes]
    records = [(e, entries[e]) for e in present]
    slot_state, record_state = _state(), _state()

    def by_slot(i: int) -> Any:
        return native.verify_slots(slots, i, 0, LEDGER, 5, window, 4096, int(kind), slot_state)

    def by_record(i: int) -> Any:
        return native.verify_records(records, i, LEDGER, int(kind), record_state)

    # slots count holes as positions: the same trace, up to the slot index
    slot_trace = _drive(by_slot, slot_state, list(range(len(entries))))
    record_trace = _drive(by_record, record_state, present)
    event(f"statuses {sorted({status for _, status, _ in slot_trace})}")

    def at(trace: list[Any], ids: list[int]) -> list[Any]:
        return [(ids[i] if i < len(ids) else None, status, st) for i, status, st in trace]

    assert at(slot_trace, list(range(len(entries)))) == at(record_trace, present)


def _python_runs(items: list[Any], start: int, ledger: int) -> tuple[bytes, int, int]:
    """item_slots read in Python: the run of consecutive entries from items[start]."""
    slots = bytearray()
    first = 0
    stop = start
    for stop in range(start, len(items) + 1):
        if stop == len(items):
            break
        item = items[stop]
        ok = (
            type(item) is tuple
            and len(item) == 2
            and all(type(x) is bytes for x in item)
            and len(item[0]) == 16
            and len(item[1]) == 8
        )
        if not ok:
            break
        found, entry_id = struct.unpack(">qq", item[0])
        (packed,) = SLOT.unpack(item[1])
        if found != ledger or entry_id < 0 or packed == 0:
            break
        if stop == start:
            first = entry_id
        elif entry_id != first + (stop - start):
            break
        slots += item[1]
    return bytes(slots), first, stop


@st.composite
def items(draw: st.DrawFn) -> list[Any]:
    out: list[Any] = []
    entry_id = draw(st.integers(0, 5))
    for _ in range(draw(st.integers(0, 12))):
        entry_id += draw(st.sampled_from([1, 1, 1, 2, 0]))
        ledger = draw(st.sampled_from([LEDGER] * 6 + [LEDGER + 1]))
        value = draw(st.sampled_from([(5 << 32) | 1028, 0, -1, 2**40]))
        item: Any = (struct.pack(">qq", ledger, entry_id), SLOT.pack(value))
        odd = draw(st.integers(0, 12))
        if odd == 0:
            item = (item[0] + b"x", item[1])
        elif odd == 1:
            item = [item[0], item[1]]
        elif odd == 2:
            item = (struct.pack(">qq", ledger, -entry_id - 1), item[1])
        out.append(item)
    return out


@needs_native
@settings(max_examples=400, deadline=None)
@given(found=items(), data=st.data())
def test_item_slots_finds_the_python_runs(found: list[Any], data: Any) -> None:
    start = data.draw(st.integers(0, len(found)))
    slots, first, stop = native.item_slots(found, start, LEDGER)
    expected = _python_runs(found, start, LEDGER)
    assert (slots, first if stop > start else 0, stop) == expected


@needs_native
def test_hostile_arguments_are_refused() -> None:
    slots = SLOT.pack((5 << 32) | 1028)
    window = b"\x00" * 64
    bad_slots = [
        (slots, -1, 0, LEDGER, 5, window, 0, 3, [], False),  # start below 0
        (slots, 2, 0, LEDGER, 5, window, 0, 3, [], False),  # start past the slots
        (slots, 0, -1, LEDGER, 5, window, 0, 3, [], False),  # first entry below 0
        (slots, 0, 2**63 - 1, LEDGER, 5, window, 0, 3, [], False),  # ids past int64
        (slots, 0, 0, LEDGER, 5, window, 2**62, 3, [], False),  # window start
        (slots, 0, 0, LEDGER, 5, window, -1, 3, [], False),
        (slots, 0, 0, LEDGER, 5, window, 0, 2, [], False),  # MAC without its key
        (slots, 0, 0, LEDGER, 5, window, 0, 2, [], False, b"k" * 19),  # a key of 19 bytes
        (slots, 0, 0, LEDGER, 5, window, 0, 3, [], False, b"k" * 20),  # a key without MAC
        (slots, 0, 0, LEDGER, 5, window, 0, 9, [], False),
    ]
    for args in bad_slots:
        with pytest.raises(ValueError):
            native.scan_slots(*args)
        with pytest.raises(ValueError):
            native.verify_slots(*args[:8], _state(), *args[10:])
    for args in [
        ("slots", 0, 0, LEDGER, 5, window, 0, 3, [], False),  # not bytes-like
        (slots, 0, 0, LEDGER, 5, window, 0, 3, (), False),  # out not a list
        (slots, 0, 0, LEDGER, 5, object(), 0, 3, [], False),  # window not bytes-like
        (slots, 0, 0, 2**64, 5, window, 0, 3, [], False),
    ]:
        with pytest.raises((TypeError, OverflowError)):
            native.scan_slots(*args)
    with pytest.raises(ValueError):
        native.verify_slots(slots, 0, 0, LEDGER, 5, window, 0, 3, [None] * 3)  # short state
    with pytest.raises(ValueError):
        native.item_slots([], 1, LEDGER)
    with pytest.raises(ValueError):
        native.item_slots([], -1, LEDGER)
    with pytest.raises(TypeError):
        native.item_slots((), 0, LEDGER)
    with pytest.raises(ValueError):
        native.record_heads([], 1, LEDGER, 3, [], False)
    with pytest.raises(ValueError):
        native.record_heads([], -1, LEDGER, 3, [], False)
    with pytest.raises(ValueError):
        native.record_heads([], 0, LEDGER, 2, [], False)  # MAC without its key
    with pytest.raises(ValueError):
        native.entry_lines([], 0, 64, LEDGER, None, b"}\n", True, 2)  # detected: CRC32C
    with pytest.raises((TypeError, ValueError)):  # ValueError: no MAC module
        native.record_heads([], 0, LEDGER, 2, [], False, "k" * 20)  # a key not bytes
    for args in [
        (window, -1, 0, 0, {}, {}),
        (window, 65, 0, 0, {}, {}),
        (window, 0, -1, 0, {}, {}),
        (window, 0, 2**62, 0, {}, {}),
        (window, 0, 0, -1, {}, {}),
        (window, 0, 0, 2**31, {}, {}),
    ]:
        with pytest.raises(ValueError):
            native.log_slots(*args)
    record = (20).to_bytes(4, "big") + struct.pack(">qq", 3, 0) + b"abcd"
    with pytest.raises(TypeError):
        native.log_slots(record, 0, 1024, 0, {3: b"not a bytearray"}, {3: bytearray()})
    same: dict[int, bytearray] = {}
    table = bytearray(16)
    for locs, sizes in [
        (same, same),  # one dict for both: one table for both
        ({3: table}, {3: table}),
        ({3: bytearray(16)}, {3: bytearray(4)}),  # tables out of step
        ({3: bytearray(12)}, {3: bytearray(6)}),  # part of a slot
    ]:
        with pytest.raises(ValueError):
            native.log_slots(record, 0, 1024, 0, locs, sizes)
    with pytest.raises(ValueError):
        native.entry_lines([], 0, 64, LEDGER, None, b"}\n", False, 7)  # no such digest
    with pytest.raises(ValueError):
        native.entry_lines([], 0, 64, LEDGER, None, b"}\n", True, 1)  # detected: CRC32C


@needs_native
def test_log_slots_grows_tables_and_keeps_the_later_copy() -> None:
    """Entries into per-ledger tables indexed by entry id, zeros between them, the later
    of two copies kept; padding and ledger -1 records stepped over; ODD for an entry id a
    table does not take."""

    def record(ledger: int, entry: int, body: bytes = b"") -> bytes:
        data = struct.pack(">qq", ledger, entry) + body
        return len(data).to_bytes(4, "big") + data

    log = record(3, 2) + b"\x00" * 7 + record(-1, 0, b"map") + record(3, 0) + record(3, 2, b"x")
    locs: dict[int, bytearray] = {}
    sizes: dict[int, bytearray] = {}
    pos, status = native.log_slots(log, 0, 1024, 9, locs, sizes)
    assert (pos, status) == (len(log), native.HEADS_WINDOW)
    slots = [SLOT.unpack_from(locs[3], 8 * i)[0] for i in range(3)]
    at_copy = 1024 + len(log) - 21 + 4
    assert slots == [(9 << 32) | (1024 + 20 + 7 + 23 + 4), 0, (9 << 32) | at_copy]
    assert [int.from_bytes(sizes[3][4 * i : 4 * i + 4], "big") for i in range(3)] == [16, 0, 17]
    far = record(3, 3 * 2 + native.SLOTS_TABLE_SLACK)
    assert native.log_slots(far, 0, 0, 9, locs, sizes) == (0, native.SLOTS_ODD)
    assert native.log_slots(record(3, -1), 0, 0, 9, locs, sizes) == (0, native.SLOTS_ODD)
    assert native.log_slots(record(-2, 0), 0, 0, 9, locs, sizes) == (0, native.HEADS_IRREGULAR)
    short = (12).to_bytes(4, "big") + struct.pack(">qi", 3, 0)
    assert native.log_slots(short, 0, 0, 9, locs, sizes) == (0, native.HEADS_WINDOW)
    assert native.log_slots(short + b"\x00" * 8, 0, 0, 9, locs, sizes)[1] == (
        native.HEADS_IRREGULAR
    )
