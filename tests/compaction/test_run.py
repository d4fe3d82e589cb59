"""`ledgerctl compact --apply` on both metadata stores and both bookie index kinds.

The world is the verify tests' data directory (tests/support/verify_world.py): topic
public/default/orders, compacted up to 11:3 into ledger 30. Each test compacts it again
(--full), writes the ledger, and reads it back with `inspect` and `compact --status --deep`.
Failures (a stale compare-and-set, a bookie holding its lock) must leave every store as
it was.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.compaction import CompactionOptions, compact
from pulsarctl_py.compaction.ledger import write_compacted_ledger
from pulsarctl_py.compaction.run import read_spool
from pulsarctl_py.stores.metadata import MetadataConflict, open_metadata_store
from tests.support.cli_helpers import run
from tests.support.demo_world import holding_lock
from tests.support.verify_world import ORDERS, World, build_world

CURSOR = "/managed-ledgers/public/default/persistent/orders/__compaction"


def _to_idx_storage(world: World) -> None:
    """Rewrite the world's DbLedgerStorage bookie as Interleaved storage (.idx files)."""
    from pulsarctl_py.decoders.checksums import master_key
    from pulsarctl_py.stores.bookie import open_bookie
    from pulsarctl_py.stores.bookie.writers import EntryLogWriter, write_index_file, write_last_id

    current = world.bookie_dir / "current"
    with open_bookie([current]) as bookie:
        entries = [
            (lid, stored.entry_id, stored.data)
            for lid in bookie.ledgers()
            for stored in bookie.read_entries(lid, 0, None)
        ]
    new = world.root / "bookie-idx" / "current"
    new.mkdir(parents=True)
    writer = EntryLogWriter(new / "0.log", 0)
    locations: dict[int, dict[int, int]] = {}
    for lid, eid, data in entries:
        locations.setdefault(lid, {})[eid] = writer.add(data)
    writer.close(ledgers_map=True)
    write_last_id(new, 0)
    for lid, locs in locations.items():
        write_index_file(new, lid, master_key(b""), locs)
    world.bookie_dir = new.parent


def _world(tmp_path: Path, store_kind: str, index: str, request: pytest.FixtureRequest) -> World:
    if store_kind == "zookeeper":
        url = request.getfixturevalue("scratch_zk")
        store = open_metadata_store(url, read_only=False)
        try:
            world = build_world(tmp_path / "w", store=store, metadata_url=url)
        finally:
            store.close()
    else:
        world = build_world(tmp_path / "w")
    if index == "idx":
        _to_idx_storage(world)
    return world


def _args(world: World) -> list[str]:
    return ["--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir)]


def _bookie_files(world: World) -> dict[str, bytes]:
    out = {}
    for path in sorted(world.bookie_dir.rglob("*")):
        if path.is_file() and "LOG" not in path.name:
            out[str(path.relative_to(world.bookie_dir))] = path.read_bytes()
    return out


@pytest.mark.parametrize("index", ["db", "idx"])
@pytest.mark.parametrize("store_kind", ["rocksdb", "zookeeper"])
def test_apply_writes_a_ledger_that_inspect_and_status_read_back(
    tmp_path, capsys, request, store_kind, index
):
    world = _world(tmp_path, store_kind, index, request)
    dry = run(capsys, "compact", ORDERS, "--full", "-o", "json", *_args(world))
    assert dry.code == 0, dry.err
    planned = dry.json()
    assert planned["applied"] is False and planned["compacted_ledger"] is None
    assert planned["previous_compacted_ledger"] == 30

    done = run(
        capsys, "compact", ORDERS, "--full", "--apply", "--plan", world.root / "c.json",
        "-o", "json", *_args(world),
    )  # fmt: skip
    assert done.code == 0, done.err
    report = done.json()
    new_id = report["compacted_ledger"]
    assert report["applied"] is True and new_id not in (None, 30)
    assert report["to_delete"] == [30]
    for name in ("keys", "kept", "entries_out", "horizon", "last_message_position"):
        assert report[name] == planned[name]

    shown = run(capsys, "inspect", str(new_id), "-o", "json", *_args(world))
    assert shown.code == 0, shown.err
    view = shown.json()
    ledger = view["ledgers"][0]
    assert ledger["kind"] == "compacted" and ledger["state"] == "CLOSED"
    assert ledger["digest_type"] == "CRC32"
    pulsar = ledger["metadata"]["pulsar"]
    assert pulsar["compacted_topic"] == ORDERS
    assert len(view["entries"]) == report["entries_out"]
    assert all(e["ok"] for e in view["entries"])
    kept = sum(len(e["messages"]) for e in view["entries"])
    assert kept == report["kept"]

    status = run(capsys, "compact", ORDERS, "--status", "--deep", "-o", "json", *_args(world))
    assert status.code == 0, status.err + status.out
    st = status.json()
    assert st["compacted_ledger"] == new_id
    assert st["horizon"] == report["horizon"]
    assert st["checks"] == []
    # and an incremental run over the new compaction finds the same view
    again = run(capsys, "compact", ORDERS, "-o", "json", *_args(world))
    assert again.code == 0, again.err
    assert again.json()["previous_compacted_ledger"] == new_id
    assert again.json()["kept"] == report["kept"]


@pytest.mark.parametrize("store_kind", ["rocksdb", "zookeeper"])
def test_a_stale_compare_and_set_writes_nothing(tmp_path, request, store_kind):
    world = _world(tmp_path, store_kind, "db", request)
    state: dict = {}
    report = compact(
        ORDERS,
        metadata_url=world.metadata_url,
        bookie_dirs=[str(world.bookie_dir)],
        options=CompactionOptions(),
        full=True,
        spool=True,
        on_state=lambda s: state.update(s=s),
    )
    assert report.spool is not None and report.stats.entries_out > 0
    store = open_metadata_store(world.metadata_url, read_only=False)
    try:
        node = store.get(CURSOR)
        version = node.stat.version
        store.put(CURSOR, node.data, version)  # a broker committed in between
        ledgers_before = sorted(p for p, _ in store.walk("/ledgers") if "/L" in p)
        cursor_before = store.get(CURSOR)
    finally:
        store.close()
    files_before = _bookie_files(world)
    with pytest.raises(MetadataConflict):
        write_compacted_ledger(
            metadata_url=world.metadata_url,
            bookie_dirs=[str(world.bookie_dir)],
            topic=ORDERS,
            entries=read_spool(report.spool),
            compacted_to=report.compacted_to,
            cursor_version=version,
            data_ledgers=[10, 11, 12],
            partition=-1,
        )
    report.spool.unlink()
    store = open_metadata_store(world.metadata_url)
    try:
        assert sorted(p for p, _ in store.walk("/ledgers") if "/L" in p) == ledgers_before
        assert store.get(CURSOR) == cursor_before
    finally:
        store.close()
    assert _bookie_files(world) == files_before


def test_apply_refuses_while_the_bookie_holds_its_lock(tmp_path, capsys, request):
    world = _world(tmp_path, "rocksdb", "db", request)
    lock = world.bookie_dir / "current" / "locations" / "LOCK"
    with holding_lock(lock):
        before = _bookie_files(world)
        result = run(
            capsys, "compact", ORDERS, "--full", "--apply", "--plan", world.root / "c.json",
            "-o", "json", *_args(world),
        )  # fmt: skip
        assert result.code == 3
        assert "holds its lock" in result.err
        assert len(result.err.strip().splitlines()) <= 2
        assert _bookie_files(world) == before


def test_export_writes_the_compacted_view(tmp_path, capsys, request):
    world = _world(tmp_path, "rocksdb", "db", request)
    out = tmp_path / "view.jsonl"
    result = run(capsys, "compact", ORDERS, "--full", "--export", out, "-o", "json", *_args(world))
    assert result.code == 0, result.err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == result.json()["kept"]
    assert all({"key", "value", "properties", "position", "publish_time"} <= set(r) for r in rows)
    assert len({r["key"] for r in rows}) == len(rows)
    assert os.path.getsize(out) > 0


def test_spill_to_disk_reports_the_same_compaction(tmp_path, capsys, request):
    world = _world(tmp_path, "rocksdb", "db", request)
    base = run(capsys, "compact", ORDERS, "--full", "-o", "json", *_args(world))
    spilled = run(
        capsys,
        "compact",
        ORDERS,
        "--full",
        "--memory",
        "1",
        "--progress",
        "-o",
        "json",
        *_args(world),
    )
    assert base.code == spilled.code == 0, spilled.err
    a, b = base.json(), spilled.json()
    assert a["spilled"] is False and b["spilled"] is True
    for name in (
        "keys",
        "kept",
        "tombstoned",
        "entries_out",
        "bytes_out",
        "horizon",
        "last_message_position",
        "compacted_to",
    ):
        assert a[name] == b[name]
    assert "ledgerctl compact: phase one:" in spilled.err
    assert "ledgerctl compact: phase two:" in spilled.err
    bad = run(capsys, "compact", ORDERS, "--memory", "lots", *_args(world))
    assert bad.code == 2 and "--memory" in bad.err


def test_bad_input_is_one_line_and_non_zero(tmp_path, capsys, request):
    world = _world(tmp_path, "rocksdb", "db", request)
    missing = run(capsys, "compact", "public/default/nothing", *_args(world))
    assert missing.code == 1 and "not found" in missing.err
    assert len(missing.err.strip().splitlines()) == 1
    usage = run(capsys, "compact", ORDERS, "--deep", *_args(world))
    assert usage.code == 2
    partitioned = run(capsys, "compact", "tenant-b/ns/parts", *_args(world))
    assert partitioned.code == 2 and "partitioned topic" in partitioned.err


def _spooled(world: World) -> tuple[list[tuple], Any]:
    """A full compaction of ORDERS in ``world``, spooled: its entries and its report."""
    report = compact(
        ORDERS,
        metadata_url=world.metadata_url,
        bookie_dirs=[str(world.bookie_dir)],
        full=True,
        spool=True,
    )
    assert report.spool is not None
    try:
        return [(e.position, e.data) for e in read_spool(report.spool)], report
    finally:
        report.spool.unlink()


def test_phase_two_takes_phase_ones_entries_when_they_fit(tmp_path, request, monkeypatch):
    """The local engine reads each entry once when the whole topic fits the keep's budget
    (run.KEEP_SHARE of --memory, run.KEEP_MOST at most), twice otherwise: a keep is all of
    the topic or nothing. The compacted entries are the same bytes."""
    from pulsarctl_py.compaction import reader
    from pulsarctl_py.compaction import run as run_module

    world = _world(tmp_path, "rocksdb", "db", request)
    reads: list[tuple[int, int, int]] = []
    real = reader.read_split

    def counting(split, accept_damage=False, only=None):
        reads.append((split.ledger_id, split.first_entry, split.last_entry))
        return real(split, accept_damage, only)

    monkeypatch.setattr(reader, "read_split", counting)
    # every entry is read in phase two (test_sparse_phase_two_* has the skipping)
    monkeypatch.setattr(reader.SparseReads, "applies", staticmethod(lambda options: False))

    default = run_module.KEEP_MOST

    def compacted(share: float, most: int = default) -> tuple[list[tuple], int]:
        monkeypatch.setattr(run_module, "KEEP_SHARE", share)
        monkeypatch.setattr(run_module, "KEEP_MOST", most)
        reads.clear()
        out, report = _spooled(world)
        assert report.plan is not None and 300 < report.plan.bytes < default
        return out, len(reads)

    once, read_once = compacted(1 / 8)
    twice, read_twice = compacted(0)
    assert once and once == twice
    # without the budget phase two reads every split again; in both, phase one's "to" is
    # found by reading the last entry once more (reader.phase_one_to)
    assert read_twice - 1 == 2 * (read_once - 1)
    # a budget of 300 bytes holds the first entries only (of about 100 bytes each): nothing
    # is kept, and phase two reads every split again, whichever of the two limits it is
    for share, most in ((300 / (512 * 1024 * 1024), 1 << 30), (1 / 8, 300)):
        part, read_part = compacted(share, most)
        assert part == once
        assert read_part == read_twice


def test_the_run_reads_through_one_ledger_source(tmp_path, request, monkeypatch):
    """compact() opens one LedgerSource for the topic's state, the horizon walk and the
    local engine's splits (each open is a metadata-store session and a bookie store)."""
    from pulsarctl_py.ledgers import LedgerSource

    world = _world(tmp_path, "rocksdb", "db", request)
    opened: list[object] = []
    real = LedgerSource.open.__func__

    def counting(cls, *args, **kwargs):
        opened.append(args[:1])
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(LedgerSource, "open", classmethod(counting))
    report = compact(
        ORDERS, metadata_url=world.metadata_url, bookie_dirs=[str(world.bookie_dir)], full=True
    )
    assert report.stats.entries_in > 0 and report.stats.kept > 0
    assert len(opened) == 1, opened


@pytest.mark.parametrize("store_kind,index", [("rocksdb", "db"), ("zookeeper", "interleaved")])
def test_sparse_phase_two_reads_less_and_gives_the_same_compaction(
    tmp_path, request, monkeypatch, store_kind, index
):
    """Phase two reads only the entries holding a winner (reader.SparseReads); the
    compacted entries, the report and pulsar/compactedTo are those of reading them all."""
    from pulsarctl_py.compaction import reader

    world = _world(tmp_path, store_kind, index, request)
    read: list[int] = []
    real = reader.source_for

    def counted(split):
        source = real(split)
        raw = source.raw_entries

        def raw_entries(view, first=0, last=None):  # raw_entries_at reads through it here
            for stored in raw(view, first, last):
                read.append(stored.entry_id)
                yield stored

        source.raw_entries = raw_entries
        return source

    monkeypatch.setattr(reader, "source_for", counted)
    monkeypatch.setattr("pulsarctl_py.compaction.run.KEEP_SHARE", 0)  # read, not kept

    def compacted(sparse: bool) -> tuple[list, dict, int]:
        monkeypatch.setattr(
            reader.SparseReads, "applies", staticmethod(lambda options, on=sparse: on)
        )
        read.clear()
        out, report = _spooled(world)
        got = report.to_json()
        got.pop("seconds")
        return out, got, len(read)

    whole, whole_report, read_whole = compacted(False)
    sparse, sparse_report, read_sparse = compacted(True)
    assert sparse == whole and sparse_report == whole_report
    assert whole_report["compacted_to"] is not None
    assert read_sparse < read_whole


class _Table:
    """What the keep reads of a key table: what the last batch added (``new_keys``), the
    records and keys of every batch so far, whether it spilled."""

    new_keys: int | None = None
    spilled = False
    offered = added = 0


def _read_from(monkeypatch: Any, count: int, size: int) -> tuple[list[Any], Any]:
    """``count`` entries of ``size`` bytes in one split of ledger 1, which
    ``reader.read_split`` then gives: the entries and the split."""
    from pulsarctl_py.compaction import reader
    from pulsarctl_py.compaction.core import RawEntry
    from pulsarctl_py.engines.base import Split

    entries = [RawEntry((1, i), b"x" * size, None, 0) for i in range(count)]
    monkeypatch.setattr(
        reader,
        "read_split",
        lambda split, accept, only=None: iter(entries[split.first_entry : split.last_entry + 1]),
    )
    return entries, Split("t", 1, 0, count - 1, (), None, 0)


def test_the_keep_ends_when_the_topics_keys_stop_growing(monkeypatch):
    """With sparse reads, the first batch that adds no key to the table ends the keep and
    drops what it held (phase two reads few entries, near the topic's end); without them
    phase two reads every entry and the keep holds what fits."""
    from pulsarctl_py.compaction import reader

    entries, split = _read_from(monkeypatch, 6, 10)
    for sparse, kept in ((True, None), (False, entries)):
        keep, table = reader.KeptEntries(1 << 20, sparse), _Table()
        got = []
        for entry, new in zip(keep.read(split, False, table), [3, 2, 0, 5, 1, 1], strict=True):
            table.new_keys = new  # what offer_batch says of the entry just offered
            got.append(entry)
        assert got == entries
        assert keep.take(split) == kept
        assert keep.used == (0 if sparse else 60)


def test_a_keep_is_all_of_the_topic_or_nothing(monkeypatch):
    """A split that passes what is left of the budget ends the keep: what it held of
    earlier splits is dropped too, and nothing more is kept."""
    from pulsarctl_py.compaction import reader

    entries, split = _read_from(monkeypatch, 6, 10)
    second = replace(split, ledger_id=2)
    for budget, kept in ((120, entries), (119, None), (59, None)):
        keep = reader.KeptEntries(budget)
        assert list(keep.read(split, False)) == entries
        assert list(keep.read(second, False)) == entries  # read whole, kept or not
        assert keep.take(split) == kept and keep.take(second) == kept
        assert keep.full is (kept is None) and keep.used == (0 if kept is None else 120)


def test_the_table_says_how_many_keys_a_batch_added():
    """LocalKeyTable.new_keys, which the keep reads after each entry: the keys the last
    native batch added, None after a record offered on its own; and the records and keys
    of every batch so far (offered, added), which the keep weighs its worth by."""
    import struct

    from pulsarctl_py.compaction.core import KEY_PREFIX
    from pulsarctl_py.decoders.payload import build_batch
    from pulsarctl_py.decoders.speedups import native
    from pulsarctl_py.engines.local import LocalKeyTable
    from pulsarctl_py.proto import pulsar_api_pb2 as api

    if native is None:
        pytest.skip("the native module is not built")

    def batch(keys: list[str]) -> bytes:
        return build_batch((api.SingleMessageMetadata(partition_key=k), b"v") for k in keys)

    table = LocalKeyTable(None)
    prefix = struct.pack(">QQ", 1, 0)
    assert table.offer_batch(batch(["a", "b", "a"]), 3, None, KEY_PREFIX, prefix) == 3
    assert table.new_keys == 2
    assert table.offer_batch(batch(["b", "a"]), 2, None, KEY_PREFIX, prefix) == 2
    assert table.new_keys == 0
    assert (table.offered, table.added) == (5, 2)  # every batch so far, which the keep reads
    table.offer(KEY_PREFIX + b"c", prefix + b"\x00\x00\x00\x00", False)
    assert table.new_keys is None
    assert (table.offered, table.added) == (5, 2)  # a record on its own is not counted
    assert table.offer_batch(batch(["b", "c"]), 2, None, KEY_PREFIX, prefix) == 2
    assert (table.offered, table.added) == (7, 2)  # c came through offer: not new here
    table.close()


@pytest.mark.parametrize(
    ("planned", "kept"),
    [(100_000, False), (10_000, True)],
    ids=["keys-drawn-ten-times-each", "keys-drawn-once-each"],
)
def test_the_keep_ends_when_the_topics_size_says_its_records_will_be_replaced(
    monkeypatch, planned, kept
):
    """10^6 keys drawn uniformly, batches of 100: after an eighth of its budget (115
    entries, 11,500 records, 11,434 keys) the keep looks at its worth. With 10^5 entries
    planned (10^7 records) the records kept are nearly all replaced before the end: the
    keep is given up at that look and holds nothing after; with 10^4 planned (10^6
    records) they are not: it keeps on, and holds all 800."""
    from pulsarctl_py.compaction import reader

    entries, split = _read_from(monkeypatch, 800, 1000)
    keys, draws, per_entry = 10**6, 0, 100
    keep, table = reader.KeptEntries(800 * 1000 * 8 // 7, True), _Table()
    keep.planned = planned
    looked_at = []
    worth_it = keep.worth_it
    keep.worth_it = lambda t: looked_at.append(keep.seen) or worth_it(t)  # type: ignore[method-assign]
    for _entry in keep.read(split, False, table):
        draws += per_entry
        held = round(keys * (1 - math.exp(-draws / keys)))  # the keys drawn so far
        table.new_keys, table.added = held - table.added, held
        table.offered = draws
    assert keep.seen == 800
    assert looked_at[0] == 115
    if kept:
        assert keep.take(split) == entries
        assert looked_at == [115, 230, 345, 460, 575, 690]
    else:
        assert keep.take(split) is None and keep.used == 0
        assert looked_at == [115]
    assert keep.full is not kept
