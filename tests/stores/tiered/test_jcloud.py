"""The jcloud offloader's objects: parse, random access by entry id, and bad input.

Objects are laid out by the tiny writer in tests/support/jcloud_writer.py (checked against
the real broker's objects in test_jcloud_golden.py) and read from memory; the S3 path
itself is tested against a real S3 server in test_s3.py.
"""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsarctl_py.decoders.entry import DecodeOptions, Outer, decode_entry
from pulsarctl_py.decoders.errors import EXIT_FINDINGS, LedgerctlError, NotFoundError
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.proto import pulsar_api_pb2 as api
from pulsarctl_py.stores.tiered.jcloud import (
    BLOCK_MAGIC,
    HEADER_LENGTH,
    INDEX_ENTRY,
    INDEX_HEADER,
    POINT_WINDOW,
    RECORD_HEADER,
    JcloudLedger,
    OffloadedEntry,
    OffloadFormatError,
    OffloadObjectMissing,
    UnreadableOffloadedEntry,
    data_key,
    index_key,
    parse_index,
    uuid_of,
)
from tests.support.jcloud_writer import MemoryObjects, write_ledger

UUID = "5f0b3c1e-2d4a-4b6c-8e9f-0a1b2c3d4e5f"
LEDGER = 17


def ledger_of(
    entries: list[bytes],
    max_block_size: int = 64 << 20,
    window: int = 1 << 20,
    version: str | None = "1",
) -> tuple[JcloudLedger, MemoryObjects, bytes, bytes]:
    data, index, _ = write_ledger(entries, max_block_size)
    objects = MemoryObjects()
    objects.put_ledger(UUID, LEDGER, data, index, version)
    return JcloudLedger(objects, LEDGER, UUID, window=window), objects, data, index


def read_all(ledger: JcloudLedger, first: int = 0, last: int | None = None) -> list[object]:
    return list(ledger.read_entries(first, last))


def pulsar_entries(n: int) -> list[bytes]:
    out = []
    for i in range(n):
        md = api.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1000 + i)
        out.append(build_entry(md, f"value-{i}".encode() * (1 + i % 5)))
    return out


def test_uuid_of_signed_halves() -> None:
    # Java's UUID.getMostSignificantBits/getLeast... are signed longs
    assert uuid_of(-1, -1) == "ffffffff-ffff-ffff-ffff-ffffffffffff"
    assert uuid_of(0x12345678_9ABC_4DEF, -0x7000_0000_0000_0000) == (
        "12345678-9abc-4def-9000-000000000000"
    )


def test_entries_come_back_as_the_broker_wrote_them_and_decode() -> None:
    entries = pulsar_entries(12)
    ledger, _, _, _ = ledger_of(entries, max_block_size=400)
    assert len(ledger.index.entries) > 2  # several blocks
    got = read_all(ledger)
    assert [e.data for e in got] == entries  # type: ignore[union-attr]
    options = DecodeOptions(outer=Outer.PULSAR_ENTRY)
    for item in got:
        assert isinstance(item, OffloadedEntry)
        decoded = decode_entry(item.data, options, (LEDGER, item.entry_id))
        assert not decoded.problems
        assert (
            decoded.messages[0].value == entries[item.entry_id][-len(decoded.messages[0].value) :]
        )
    md = ledger.metadata
    assert md.last_entry_id == 11 and md.length == sum(map(len, entries))
    assert md.password is None and md.digest_type is not None


@given(
    entries=st.lists(st.binary(max_size=120), min_size=1, max_size=40),
    extra=st.integers(0, 600),
    window=st.sampled_from([16, 64, 1 << 20]),
    data=st.data(),
)
def test_round_trip_any_range(
    entries: list[bytes], extra: int, window: int, data: st.DataObject
) -> None:
    """Whatever the block size and window, every range reads back what was written."""
    block = HEADER_LENGTH + RECORD_HEADER.size + 120 + extra
    ledger, objects, raw, _ = ledger_of(entries, block, window)
    assert [e.data for e in read_all(ledger)] == entries  # type: ignore[union-attr]
    first = data.draw(st.integers(0, len(entries) - 1))
    last = data.draw(st.integers(first, len(entries) - 1))
    objects.reads.clear()
    got = read_all(ledger, first, last)
    assert [(e.entry_id, e.data) for e in got] == [  # type: ignore[union-attr]
        (i, entries[i]) for i in range(first, last + 1)
    ]
    # random access through the index: nothing before the first wanted block is read
    start = ledger.index.entries[ledger.index.block_of(first)].block_offset
    assert all(offset >= start for _, offset, _ in objects.reads)
    for item in got:
        loc = item.location  # type: ignore[union-attr]
        assert raw[loc.offset : loc.offset + loc.size] == item.data  # type: ignore[union-attr]


def test_one_entry_is_read_by_bounded_ranges_not_the_whole_object() -> None:
    entries = [bytes([i % 256]) * 1000 for i in range(400)]  # ~400 KB, blocks of 64 KiB
    ledger, objects, raw, _ = ledger_of(entries, 64 << 10, window=4096)
    objects.reads.clear()
    item = ledger.read_entry(250)
    assert item.data == entries[250]
    data_reads = [r for r in objects.reads if r[0] == data_key(UUID, LEDGER)]
    fetched = sum(length for _, _, length in data_reads)
    assert fetched <= (64 << 10) + 4096 and fetched < len(raw) // 4
    assert all(length <= 4096 for _, _, length in data_reads)


@given(order=st.lists(st.integers(0, 299), min_size=1, max_size=40))
def test_entries_read_one_at_a_time_in_any_order(order: list[int]) -> None:
    """One entry at a time in any order (a seek's probes), each read starting from the
    nearest record whose place an earlier read learned: each comes back as written."""
    entries = [bytes([i % 256]) * (1 + (i * 37) % 900) for i in range(300)]
    ledger, _, _, _ = ledger_of(entries, 32 << 10, window=4096)
    for i in order:
        assert ledger.read_entry(i).data == entries[i], i


def test_a_seeks_probes_do_not_walk_the_block_from_its_start_each_time() -> None:
    """The probes of a binary search into one block (the broker's 64 MiB blocks hold
    thousands of entries) fetch the block once up to the farthest probe, then a small
    range per probe; walking from the block's start for every probe (as the broker's
    BlobStoreBackedReadHandleImpl does for one read) fetched about half the block each."""
    entries = [bytes([i % 256]) * 1000 for i in range(2000)]  # ~2 MB, one block
    ledger, objects, raw, _ = ledger_of(entries)
    assert len(ledger.index.entries) == 1
    probes, lo, hi = [], 0, len(entries) - 1
    while lo < hi:  # the probes of a search for entry 1337
        mid = (lo + hi) // 2
        probes.append(mid)
        lo, hi = (mid + 1, hi) if mid < 1337 else (lo, mid)
    objects.reads.clear()
    for p in probes:
        assert ledger.read_entry(p).data == entries[p]
    fetched = sum(n for key, _, n in objects.reads if key == data_key(UUID, LEDGER))
    assert len(probes) == 11
    assert fetched <= len(raw) + len(probes) * POINT_WINDOW, fetched


def test_index_is_one_entry_per_block() -> None:
    entries = pulsar_entries(30)
    _, _, raw, index = ledger_of(entries, max_block_size=300)
    parsed = parse_index(index, data_size=len(raw))
    assert [b.part_id for b in parsed.entries] == list(range(1, len(parsed.entries) + 1))
    assert parsed.data_object_length == len(raw)
    assert parsed.data_header_length == HEADER_LENGTH


def test_single_block_has_no_padding() -> None:
    entries = pulsar_entries(5)
    raw, _, blocks = write_ledger(entries)
    assert len(blocks) == 1
    assert len(raw) == HEADER_LENGTH + sum(RECORD_HEADER.size + len(e) for e in entries)


# -- bad input: whole objects --------------------------------------------------------------


def _refused(ledger: JcloudLedger) -> LedgerctlError:
    with pytest.raises(LedgerctlError) as caught:
        read_all(ledger)
    exc = caught.value
    assert "\n" not in exc.one_line()
    return exc


@pytest.mark.parametrize("version", [None, "2", ""])
def test_format_version_refused_in_one_line(version: str | None) -> None:
    ledger, *_ = ledger_of(pulsar_entries(3), version=version)
    exc = _refused(ledger)
    assert isinstance(exc, OffloadFormatError) and exc.exit_code == EXIT_FINDINGS
    assert "format version" in str(exc) and f"ledger {LEDGER}" in str(exc)
    assert index_key(UUID, LEDGER) in str(exc)


def _with_index(index: bytes, entries: list[bytes] | None = None) -> JcloudLedger:
    entries = entries or pulsar_entries(6)
    data, _, _ = write_ledger(entries, 300)
    objects = MemoryObjects()
    objects.put_ledger(UUID, LEDGER, data, index)
    return JcloudLedger(objects, LEDGER, UUID)


def _good_index() -> tuple[bytes, bytes]:
    data, index, _ = write_ledger(pulsar_entries(6), 300)
    return data, index


@pytest.mark.parametrize(
    "name, mutate, says",
    [
        ("truncated", lambda b: b[: len(b) - 7], "truncated"),
        ("empty", lambda b: b"", "truncated index object"),
        ("header only", lambda b: b[:10], "truncated"),
        ("wrong magic", lambda b: b"\x00\x00\x00\x01" + b[4:], "magic 0x00000001"),
        ("streaming", lambda b: bytes.fromhex("3D1FB0BC") + b[4:], "streaming"),
        (
            "metadata claims 2^31-1",
            lambda b: b[:28] + struct.pack(">i", 2**31 - 1) + b[32:],
            "metadata bytes",
        ),
        (
            "count claims 2^31-1",
            lambda b: b[:24] + struct.pack(">i", 2**31 - 1) + b[28:],
            "blocks",
        ),
        (
            "data length 2^40",
            lambda b: b[:8] + struct.pack(">q", 1 << 40) + b[16:],
            "its index says 1099511627776",
        ),
        ("metadata garbage", lambda b: b[:32] + b"\xff" * 5 + b[37:], "ledger metadata"),
    ],
)
def test_damaged_index_is_one_line(name: str, mutate: object, says: str) -> None:
    _, index = _good_index()
    bad = mutate(index)  # type: ignore[operator]
    exc = _refused(_with_index(bad))
    assert isinstance(exc, OffloadFormatError), name
    assert says in str(exc), str(exc)


def _set_block_offset(index: bytes, block: int, offset: int) -> bytes:
    (md_length,) = struct.unpack_from(">i", index, 28)
    at = INDEX_HEADER.size + md_length + block * INDEX_ENTRY.size + 12
    return index[:at] + struct.pack(">q", offset) + index[at + 8 :]


@pytest.mark.parametrize("offset", [1 << 40, -5, 3])
def test_index_pointing_outside_the_object(offset: int) -> None:
    _, index = _good_index()
    exc = _refused(_with_index(_set_block_offset(index, 1, offset)))
    assert isinstance(exc, OffloadFormatError)
    assert "index block 1" in str(exc)


def test_missing_object_is_a_finding_naming_the_key() -> None:
    _, index, _ = write_ledger(pulsar_entries(3))
    objects = MemoryObjects()
    objects.put(index_key(UUID, LEDGER), index)
    exc = _refused(JcloudLedger(objects, LEDGER, UUID))
    assert isinstance(exc, OffloadObjectMissing) and exc.exit_code == EXIT_FINDINGS
    assert data_key(UUID, LEDGER) in str(exc)


def test_truncated_data_object_is_refused() -> None:
    entries = pulsar_entries(6)
    data, index, _ = write_ledger(entries, 300)
    objects = MemoryObjects()
    objects.put_ledger(UUID, LEDGER, data[:-40], index)
    exc = _refused(JcloudLedger(objects, LEDGER, UUID))
    assert "the data object has" in str(exc)


def test_entries_outside_the_ledger_are_not_found() -> None:
    ledger, *_ = ledger_of(pulsar_entries(3))
    with pytest.raises(NotFoundError, match=r"holds 0\.\.2"):
        read_all(ledger, 0, 3)


# -- bad input: damaged blocks are findings on their entries ---------------------------------


def _blocks(entries: list[bytes]) -> tuple[bytes, bytes, list[tuple[int, int, int]]]:
    """Data, index and each block's (offset, first id, last id)."""
    data, index, blocks = write_ledger(entries, 300)
    spans = []
    for i, b in enumerate(blocks):
        last = blocks[i + 1].first_entry_id - 1 if i + 1 < len(blocks) else len(entries) - 1
        spans.append((b.block_offset, b.first_entry_id, last))
    return data, index, spans


def _damaged(entries: list[bytes], at: int, patch: bytes) -> list[object]:
    data, index, _ = write_ledger(entries, 300)
    bad = data[:at] + patch + data[at + len(patch) :]
    objects = MemoryObjects()
    objects.put_ledger(UUID, LEDGER, bad, index)
    return read_all(JcloudLedger(objects, LEDGER, UUID))


def _check_only_block_lost(got: list[object], entries: list[bytes], lost: range) -> list[str]:
    assert [g.entry_id for g in got] == list(range(len(entries)))  # type: ignore[attr-defined]
    reasons = []
    for g in got:
        if g.entry_id in lost:  # type: ignore[attr-defined]
            assert isinstance(g, UnreadableOffloadedEntry), g
            reasons.append(g.reason)
        else:
            assert isinstance(g, OffloadedEntry) and g.data == entries[g.entry_id]
    return reasons


@pytest.mark.parametrize(
    "what, where, patch, says",
    [
        ("magic", 0, b"\x00\x00\x00\x00", "magic 0x00000000"),
        ("block length 2^40", 12, struct.pack(">q", 1 << 40), "block length 1099511627776"),
        ("first entry id", 20, struct.pack(">q", 99), "first entry id 99"),
    ],
)
def test_damaged_block_header_loses_only_its_entries(
    what: str, where: int, patch: bytes, says: str
) -> None:
    entries = pulsar_entries(12)
    _, _, spans = _blocks(entries)
    assert len(spans) >= 3
    offset, first, last = spans[1]
    tracemalloc.start()
    try:
        got = _damaged(entries, offset + where, patch)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20  # nothing of the claimed size allocated
    reasons = _check_only_block_lost(got, entries, range(first, last + 1))
    assert all(says in r for r in reasons), reasons


def test_record_claiming_2_31_bytes_loses_the_rest_of_its_block() -> None:
    entries = pulsar_entries(12)
    _, _, spans = _blocks(entries)
    offset, first, last = spans[1]
    second = offset + HEADER_LENGTH + RECORD_HEADER.size + len(entries[first])
    got = _damaged(entries, second, struct.pack(">i", 2**31 - 1))
    reasons = _check_only_block_lost(got, entries, range(first + 1, last + 1))
    assert "claims 2147483647 bytes" in reasons[0]


def test_record_with_wrong_entry_id() -> None:
    entries = pulsar_entries(12)
    _, _, spans = _blocks(entries)
    offset, first, last = spans[0]
    got = _damaged(entries, offset + HEADER_LENGTH + 4, struct.pack(">q", 7777))
    reasons = _check_only_block_lost(got, entries, range(first, last + 1))
    assert "holds entry id 7777, expected 0" in reasons[0]


def test_records_ending_early_in_a_block() -> None:
    entries = pulsar_entries(12)
    _, _, spans = _blocks(entries)
    offset, first, last = spans[1]
    # padding where the block's second record should be: the block ends early
    second = offset + HEADER_LENGTH + RECORD_HEADER.size + len(entries[first])
    got = _damaged(entries, second, bytes.fromhex("FEDCDEAD"))
    reasons = _check_only_block_lost(got, entries, range(first + 1, last + 1))
    assert "records end at offset" in reasons[0]


def test_read_entry_in_a_damaged_block_raises_one_line() -> None:
    entries = pulsar_entries(12)
    data, index, spans = _blocks(entries)
    offset, first, _ = spans[1]
    objects = MemoryObjects()
    objects.put_ledger(UUID, LEDGER, data[:offset] + b"\0" * 4 + data[offset + 4 :], index)
    ledger = JcloudLedger(objects, LEDGER, UUID)
    with pytest.raises(OffloadFormatError, match=f"ledger {LEDGER}: .*damaged header"):
        ledger.read_entry(first)
    assert ledger.read_entry(0).data == entries[0]


# -- fuzzing: mutated objects never escape as anything but one line --------------------------


@given(
    target=st.sampled_from(["data", "index"]),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=6),
    cut=st.none() | st.integers(0, 10**6),
)
def test_fuzz_mutated_objects(target: str, flips: list[tuple[int, int]], cut: int | None) -> None:
    entries = pulsar_entries(10)
    data, index, _ = write_ledger(entries, 300)
    blob = bytearray(data if target == "data" else index)
    for at, value in flips:
        blob[at % len(blob)] = value
    if cut is not None:
        blob = blob[: cut % (len(blob) + 1)]
    objects = MemoryObjects()
    if target == "data":
        objects.put_ledger(UUID, LEDGER, bytes(blob), index)
    else:
        objects.put_ledger(UUID, LEDGER, data, bytes(blob))
    fuzz_read(JcloudLedger(objects, LEDGER, UUID), entries)


def fuzz_read(ledger: JcloudLedger, entries: list[bytes] | None) -> None:
    """Read everything; only LedgerctlError may escape, and a read entry is never invented:
    its bytes are the ones its record holds."""
    try:
        got = read_all(ledger)
    except LedgerctlError as exc:
        assert "\n" not in exc.one_line()
        return
    ids = [g.entry_id for g in got]
    assert ids == list(range(len(ids)))
    for g in got:
        if isinstance(g, OffloadedEntry) and entries is not None and g.entry_id < len(entries):
            # a flip inside an entry's bytes changes them; elsewhere they are the original
            assert len(g.data) == g.location.size


def test_block_magic_constant() -> None:
    assert struct.pack(">I", BLOCK_MAGIC) == bytes.fromhex("FBDBABCB")
