"""The native key table (decoders/_speedups_compact.c): the same answers as a dict, and
the memory it accounts for.

Its layout (an index of 32-bit entry numbers, 12-byte entries, records with varint lengths
in one arena) is what the local engine's ``--memory`` budget counts (``nbytes``,
``peak_nbytes``); the issue's goal is at most 64 bytes a key held in memory at 10^6 keys.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders.speedups import native

pytestmark = pytest.mark.skipif(native is None, reason="the native module is not built")

# keys of every varint length the records use (1, 2 and 3 bytes: up to 127, 16,383, more)
KEYS = st.one_of(
    st.binary(max_size=4),
    st.binary(min_size=120, max_size=140),
    st.sampled_from([b"x" * 16_384, b"y" * 20_000]),
)
# ranks of several lengths (a rank of another length moves the key's record), and position
# ranks (ledger, entry, batch index + 1: stored packed when the entry fits 32 bits and the
# index 16; a ledger id of another varint length, or a rank that does not pack, moves it)
_U64 = st.one_of(
    st.integers(0, 300),
    st.sampled_from([127, 128, 16_383, 16_384, 2**28, 2**32 - 1, 2**32, 2**63, 2**64 - 1]),
    st.integers(0, 2**64 - 1),
)
_U32 = st.one_of(st.integers(0, 300), st.sampled_from([2**16 - 1, 2**16, 2**32 - 1]))
POSITION_RANKS = st.builds(lambda lg, en, ix: struct.pack(">QQI", lg, en, ix), _U64, _U64, _U32)
RANKS = st.one_of(st.binary(max_size=24), POSITION_RANKS)
OPS = st.lists(st.tuples(st.booleans(), KEYS, RANKS, st.booleans()), max_size=60)


@settings(max_examples=60, deadline=None)
@given(ops=OPS, filler=st.integers(min_value=0, max_value=300))
def test_the_key_table_answers_as_a_dict(ops, filler):
    """offer (the greater rank wins) and put (always) against a dict, with ``filler`` other
    keys first so that the index rehashes and the arena and entries grow (move) meanwhile."""
    table = native.key_table()
    model: dict[bytes, tuple[bytes, bool]] = {}
    for i in range(filler):
        key, rank = b"f%d" % i, struct.pack(">I", i)
        assert table.offer(key, rank, i % 7 == 0) is True
        model[key] = (rank, i % 7 == 0)
    for is_put, key, rank, tomb in ops:
        new = key not in model
        if is_put:
            assert table.put(key, rank, tomb) is new
            model[key] = (rank, tomb)
        else:
            assert table.offer(key, rank, tomb) is new
            if new or rank > model[key][0]:
                model[key] = (rank, tomb)
    assert len(table) == len(model)
    assert table.live == sum(1 for _, t in model.values() if not t)
    for key, state in model.items():
        assert table.get(key) == state
    assert table.get(b"absent key") is None or b"absent key" in model
    scanned, pos = [], 0
    while pos >= 0:
        pos, chunk = table.scan(pos, 7)
        scanned.extend(chunk)
    assert sorted(scanned) == sorted((k, r, t) for k, (r, t) in model.items())
    assert table.min_rank() == min((r for r, _ in model.values()), default=None)
    assert table.nbytes <= table.peak_nbytes


def test_a_key_held_in_memory_costs_at_most_40_bytes():
    """10^5 keys as phase one stores them (b"k" and a decimal key, a 20-byte position
    rank), each offered twice: what the table holds, by its own count, stays within 40
    bytes a key (the issue's goal is 64 for the whole process; 24-byte slots took 81, the
    rank stored as it is 51); the look-ahead the budget checks (the next growth, copies
    included) within 100. A newer rank of a key is written in place (no second record)."""
    table = native.key_table()
    n = 100_000
    for i in range(n):
        table.offer(b"k%d" % i, struct.pack(">QQI", 3, i // 100, i % 100 + 1), False)
    once = table.nbytes
    for i in range(n):
        rank = struct.pack(">QQI", 3, 70_000 + i // 100, i % 100 + 1)
        table.offer(b"k%d" % i, rank, False)
        assert i % 9973 or table.get(b"k%d" % i) == (rank, False)
    assert table.nbytes == once
    assert len(table) == n
    assert table.nbytes / n <= 40
    assert table.peak_nbytes / n <= 100
    # the records (2 varints, key, packed rank) are counted, not only index and entries
    assert table.nbytes >= n * (12 + 2 + 5 + 7)


@settings(max_examples=80, deadline=None)
@given(
    ops=OPS,
    prefix=st.binary(max_size=2),
    skip=st.sampled_from([b"", b"\x00\x00\x00\x00", b"\x00"]),
    data=st.data(),
)
def test_live_entries_answers_as_a_walk_over_the_dict(ops, prefix, skip, data):
    """live_entries (phase one's table scan, run.scan_table, for the entries phase two
    reads, reader.SparseReads): the bits of the entries holding a live key's winner with
    ``prefix``, over spans around those entries, and the count of the other keys; the
    same bits as reader.EntryBits sets in Python."""
    from pulsarctl_py.compaction.reader import EntryBits
    from tests.support.fuzz_native import disjoint_spans, python_live_entries

    table = native.key_table()
    model: dict[bytes, tuple[bytes, bool]] = {}
    for is_put, key, rank, tomb in ops:
        if is_put:
            table.put(key, rank, tomb)
            model[key] = (rank, tomb)
        elif table.offer(key, rank, tomb) or rank > model[key][0]:
            model[key] = (rank, tomb)
    at = sorted({struct.unpack_from(">QQ", r) for r, _ in model.values() if len(r) >= 16})
    spans: list[tuple[int, int, int]] = []
    for ledger, entry in data.draw(
        st.lists(st.sampled_from(at), unique=True) if at else st.just([])
    ):
        first = max(entry - data.draw(st.integers(0, 3)), 0)
        count = min(data.draw(st.integers(0, 5)), 2**64 - 1 - first)
        spans.append((ledger, first, count))
    spans = disjoint_spans(sorted(spans))
    bits = EntryBits(spans)
    got = table.live_entries(prefix, skip, bits.packed(), bits.bits)
    assert (got, bits.bits) == python_live_entries(
        model, prefix, skip, spans, bytearray(len(bits.bits))
    )
    walked = EntryBits(spans)
    for key, (rank, tomb) in model.items():
        if key.startswith(prefix) and not tomb and len(rank) >= 16 and rank[16:] != skip:
            walked.add(*struct.unpack_from(">QQ", rank))
    assert walked.bits == bits.bits
    assert [pos in bits for pos in at] == [pos in walked for pos in at]


def test_live_entries_refuses_spans_it_cannot_hold():
    """Spans not rising, overlapping or past 2^64, or bits too short: ValueError, no bit set."""
    from tests.support.fuzz_native import packed_spans

    table = native.key_table()
    table.offer(b"k", struct.pack(">QQI", 1, 2, 1), False)

    for spans, size, why in (
        (packed_spans([(1, 0, 5), (0, 0, 1)]), 1, "not rising"),
        (packed_spans([(1, 0, 5), (1, 4, 1)]), 1, "overlapping"),
        (packed_spans([(1, 2**64 - 1, 1)]), 1, r"past 2\^64"),
        (packed_spans([(1, 0, 9)]), 1, "bits shorter"),
        (b"\x00" * 23, 1, "24 bytes"),
    ):
        bits = bytearray(size)
        with pytest.raises(ValueError, match=why):
            table.live_entries(b"", b"", spans, bits)
        assert bits == bytearray(size)
    bits = bytearray(1)
    assert table.live_entries(b"", b"", packed_spans([(1, 0, 3)]), bits) == 0 and bits == b"\x04"
    with pytest.raises(TypeError):
        table.live_entries(b"", b"", packed_spans([(1, 0, 3)]), b"\x00")  # bits must be writable


def test_scan_table_counts_the_native_table_as_it_walks_it():
    """run.scan_table's answer from live_entries equals its walk over every record, with
    and without transaction records among the keys."""
    from pulsarctl_py.compaction.core import TXN_PREFIX
    from pulsarctl_py.compaction.reader import SparseReads
    from pulsarctl_py.compaction.run import scan_table
    from pulsarctl_py.engines.base import Split

    class Walked:  # the same records, without the native table
        def __init__(self, table):
            self.table = table

        def records(self):
            return self.table.records()

        def items(self):
            return self.table.items()

    from pulsarctl_py.engines.local import LocalKeyTable

    for extra in ((), ((TXN_PREFIX + b"f" + b"t" * 16, b"\xff" * 20, False),)):
        table = LocalKeyTable(None)
        for i in range(3000):
            rank = struct.pack(">QQI", 5, i // 7, (i % 7) if i % 5 else 0)
            table.offer(b"k%d" % (i % 1100), rank, i % 13 == 0)
        for key, rank, tomb in extra:
            table.offer(key, rank, tomb)
        table.finish()
        fast, slow = SparseReads(), SparseReads()
        for sparse in (fast, slow):  # the split phase one read, and one of another ledger
            sparse.noting(Split("t", 5, 0, 3000 // 7, (), None, 0))
            sparse.noting(Split("t", 4, 0, 9, (), None, 1))
        got = scan_table(table, fast)
        want = scan_table(Walked(table), slow)
        assert got == want
        assert fast.winners is not None and slow.winners is not None
        assert fast.winners.bits == slow.winners.bits and any(fast.winners.bits)
        assert not any(fast.winners.bits[:2])  # ledger 4's ten entries: no winner there
        assert scan_table(table)[:2] == want[:2]
        table.close()
