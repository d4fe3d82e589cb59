"""The local key table's spill: any offer order, any budget, the same table as a dict.

Records usually come in topic order, and then each spill writes the buffer without reading
the disk; records out of order (a rank older than one already on disk) take the
read-and-compare path. Both must give the greatest rank per key.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.engines.local import LocalKeyTable

RECORDS = st.lists(
    st.tuples(st.binary(min_size=1, max_size=3), st.binary(min_size=1, max_size=3), st.booleans()),
    max_size=80,
)


def _expected(records):
    out: dict[bytes, tuple[bytes, bool]] = {}
    for key, rank, tomb in records:
        if key not in out or rank > out[key][0]:
            out[key] = (rank, tomb)
    return out


@settings(max_examples=80, deadline=None)
@given(records=RECORDS, memory=st.sampled_from([1, 600, 3000, None]), ordered=st.booleans())
def test_spilled_table_equals_a_dict(records, memory, ordered):
    if ordered:
        records = sorted(records, key=lambda r: r[1])
    expected = _expected(records)
    with LocalKeyTable(memory) as table:
        for key, rank, tomb in records:
            table.offer(key, rank, tomb)
        table.finish()
        assert {k: (r, t) for k, r, t in table.items()} == expected
        # records(): the same, unsorted and streamed (phase one's totals read them)
        assert sorted(table.records()) == sorted(table.items())
        for key, (rank, tomb) in expected.items():
            assert table.get(key) == (rank, tomb)
            assert table.keeps(key, rank) is (not tomb)
        keys = [*expected, b"absent"]
        ranks = [*(expected[k][0] for k in expected), b"r"]
        assert table.keeps_many(keys, ranks) == [
            table.keeps(k, r) for k, r in zip(keys, ranks, strict=True)
        ]
        assert len(table) == len(expected)
        assert table.live == sum(1 for _, t in expected.values() if not t)
        if memory == 1 and expected:
            assert table.spilled


def test_the_memory_table_is_offered_only_before_a_spill():
    with LocalKeyTable(None) as table:
        table.offer(b"k", b"r", False)
        assert table.memory_table() == {b"k": (b"r", False)}
    with LocalKeyTable(1) as table:
        table.offer(b"k", b"r", False)
        table.finish()
        assert table.spilled and table.memory_table() is None


def test_phase_one_totals_do_not_sort_the_table(monkeypatch):
    """Phase one's totals (scan_table) stream the records: sorting an in-memory table of
    10^6 keys for them held 160 bytes a key more than the table itself."""
    from pulsarctl_py.compaction.run import scan_table

    with LocalKeyTable(None) as table:
        for i in range(50):
            table.offer(b"k%d" % i, b"r%d" % i, i % 5 == 0)
        table.finish()
        monkeypatch.setattr(LocalKeyTable, "items", lambda self: iter(()))
        keys, tombstoned, _txns = scan_table(table)
    assert (keys, tombstoned) == (50, 10)


def test_a_spill_writes_in_batches_bounded_by_the_budget(monkeypatch):
    """A spill's write batch holds at most a sixteenth of --memory (64 KiB at least) of
    keys and values: long keys no longer make a 50,000-put batch of 50 MB."""
    import rocksdict

    sizes: list[int] = []
    real = rocksdict.Rdict.write

    def write(self, batch, *args):
        sizes.append(len(batch))
        return real(self, batch, *args)

    monkeypatch.setattr(rocksdict.Rdict, "write", write)
    memory = 1 << 20
    with LocalKeyTable(memory) as table:
        assert table.write_batch_bytes == 64 << 10
        for i in range(2_000):
            table.offer(b"%04d" % i + b"x" * 996, b"r" * 20, False)
        table.finish()
        assert len(table) == 2_000
    # 1,021 bytes a put: at most 65 puts a batch, so more batches than spills
    assert sizes and max(sizes) <= 65


def test_one_malloc_arena_where_glibc_has_mallopt():
    """The compact command asks glibc for one malloc arena before its threads start (each
    thread's own arena kept what the read path freed: 141.5 MiB against 110.8 at 10^5 long
    keys); elsewhere it says it could not, and nothing fails."""
    import platform

    from pulsarctl_py.engines.local import one_malloc_arena

    assert one_malloc_arena() is (platform.libc_ver()[0] == "glibc")
