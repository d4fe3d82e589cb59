"""Writers for bookie files, read back with the same readers as BookKeeper's own files;
where BookKeeper wrote the same input, the bytes must be identical."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from pulsarctl_py.decoders import entrylog, index_file, journal
from pulsarctl_py.decoders._readat import bytes_reader
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.stores.bookie import (
    BookieStore,
    EntryLogWriter,
    JournalWriter,
    open_bookie,
    write_db_index,
    write_db_ledger_dir,
    write_entry_log,
    write_index_file,
    write_last_mark,
)
from pulsarctl_py.stores.bookie.indexes import DbIndex
from pulsarctl_py.stores.bookie.writers import ledger_data
from tests.support.bookie_data import (
    LIVE_DATA,
    LIVE_LEDGERS,
    OFFLINE_JOURNAL,
    OFFLINE_LOGS,
    digest_type,
    live_manifest,
    offline_manifest,
    sha256,
    stored_entry,
    tree_digest,
    verified_payload,
    writable_copy,
)

LEDGERS = {led["ledger_id"]: led for led in live_manifest()["ledgers"]}
MASTER_KEY = bytes.fromhex(LEDGERS[0]["bookie_ledger_index"]["master_key_hex"])
LAC_8 = bytes.fromhex(LEDGERS[8]["bookie_ledger_index"]["explicit_lac_record_hex"])


@pytest.fixture(scope="module")
def live() -> Iterator[BookieStore]:
    with open_bookie(LIVE_DATA) as store:
        yield store


@pytest.fixture(scope="module")
def journal_order(live: BookieStore) -> list[bytes]:
    """Every live entry once, in the order the bookie's journal received them."""
    [info] = live.journals()
    seen, out = set(), []
    for rec in live.journal_records(info):
        if rec.entry_id >= 0 and (rec.ledger_id, rec.entry_id) not in seen:
            seen.add((rec.ledger_id, rec.entry_id))
            out.append(live.read_journal_body(info, rec))
    return out


def assert_manifest_entries(
    store: BookieStore, ledgers: list[int], source: str | None = None
) -> None:
    for ledger_id in ledgers:
        spec = LEDGERS[ledger_id]
        got = list(store.read_entries(ledger_id))
        assert [e.entry_id for e in got] == [e["entry_id"] for e in spec["entries"]]
        for entry, want in zip(got, spec["entries"], strict=True):
            payload = verified_payload(
                entry.data, ledger_id, entry.entry_id, digest_type(spec["digest_type"])
            )
            assert sha256(payload) == want["payload_sha256"]
            if source is not None:
                assert entry.location.source == source


def rocksdb_options(db: Path) -> set[str]:
    [options] = sorted(db.glob("OPTIONS-*"))[-1:]
    wanted = ("rocksdb_version=", "compression=", "format_version=", "checksum=k")
    return {
        line.strip() for line in options.read_text().splitlines() if line.strip().startswith(wanted)
    }


# -- byte identity with BookKeeper ------------------------------------------------------


def test_entry_logs_are_byte_identical_to_bookkeeper(tmp_path: Path) -> None:
    logs = {i: (OFFLINE_LOGS / f"{i}.log").read_bytes() for i in (0, 1)}
    writers = {i: EntryLogWriter(tmp_path / f"{i}.log") for i in (0, 1)}
    for e in offline_manifest()["entrylog"]["entries"]:
        location = writers[e["log_id"]].add(stored_entry(logs[e["log_id"]], e["offset"]))
        assert location == e["location"] | (e["log_id"] << 32)
    # BookKeeper wrote the map in its hash-map order: 5, 3, 4
    order = [pid for pid, _ in entrylog.parse_ledgers_map_record(logs[0][4685:])]
    writers[0].close(map_order=order)
    writers[1].close(ledgers_map=False)  # the active log: no map yet
    assert (tmp_path / "0.log").read_bytes() == logs[0]
    assert (tmp_path / "1.log").read_bytes() == logs[1]


def test_journal_is_byte_identical_to_bookkeeper(tmp_path: Path) -> None:
    theirs = OFFLINE_JOURNAL.read_bytes()
    with JournalWriter(tmp_path / "1a1fdccd862.txn") as writer:
        for rec in offline_manifest()["journal"]["journals"][0]["bk_scanJournal_records"]:
            at = writer.add_entry(theirs[rec["offset"] + 4 : rec["offset"] + 4 + rec["size"]])
            assert at == rec["offset"]
    ours = (tmp_path / "1a1fdccd862.txn").read_bytes()
    assert len(ours) % 512 == 0  # the padding record BookKeeper writes at a flush
    assert theirs[: len(ours)] == ours and not any(theirs[len(ours) :])  # then preallocated zeros


# -- round trips ----------------------------------------------------------------------


@pytest.mark.parametrize("direct", [False, True])
def test_entry_log_round_trip(tmp_path: Path, journal_order: list[bytes], direct: bool) -> None:
    current = tmp_path / "ledgers" / "current"
    current.mkdir(parents=True)
    entries = [e for e in journal_order if int.from_bytes(e[:8], "big") in (6, 7, 8)]
    locations = write_entry_log(current / "a.log", entries, direct=direct)
    data = (current / "a.log").read_bytes()
    header = entrylog.parse_header(data)
    assert header.direct is direct and header.has_ledgers_map and header.ledgers_count == 3
    if direct:
        assert len(data) % 4096 == 0 and data[-1] == entrylog.PADDING_BYTE
    with open_bookie(current) as s:
        assert_manifest_entries(s, [6, 7, 8], source="scan")
        for (lid, eid), location in locations.items():
            assert s.locate(lid, eid).packed == location  # type: ignore[union-attr]
        assert s.ledger_sizes(10) == {6: 2012, 7: 660, 8: 450}  # same as BookKeeper's 3.log
        assert s.problems == []


def test_journal_versions_round_trip(tmp_path: Path, journal_order: list[bytes]) -> None:
    for version in range(1, 7):
        path = tmp_path / f"{version}.txn"
        with JournalWriter(path, version=version) as w:
            w.add_entry(journal_order[0])
            if version >= 3:
                w.add_master_key(0, MASTER_KEY)
            if version >= 4:
                w.add_fence(0)
            w.flush()
            if version >= 6:
                w.add_explicit_lac(8, LAC_8)
            w.add_entry(journal_order[1])
            if version < 6:
                with pytest.raises(LedgerctlError, match="cannot hold"):
                    w.add_explicit_lac(8, LAC_8)
        data = path.read_bytes()
        assert journal.parse_header(data[:8]) == (version, journal.header_size(version))
        kinds = [r.kind.value for r in journal.scan_records(bytes_reader(data), len(data))]
        expected = ["entry"] + ["master-key"] * (version >= 3) + ["fence"] * (version >= 4)
        expected += ["explicit-lac"] * (version >= 6) + ["entry"]
        assert kinds == expected


def test_idx_storage_round_trip(tmp_path: Path, live: BookieStore) -> None:
    logs = tmp_path / "ledgers" / "current"
    logs.mkdir(parents=True)
    for log in live.entry_logs():
        (logs / log.path.name).write_bytes(log.path.read_bytes())
    index = tmp_path / "index" / "current"
    for ledger_id in live.ledgers():
        info = live.ledger(ledger_id)
        locs = {eid: loc.packed for eid, loc in live.iter_locations(ledger_id)}
        path = write_index_file(
            index,
            ledger_id,
            info.master_key or b"",
            locs,
            fenced=bool(info.fenced),
            explicit_lac=info.explicit_lac,
        )
        assert (path.stat().st_size - 1024) % 8192 == 0
        assert path.relative_to(index).as_posix() == index_file.ledger_index_path(ledger_id)
    with open_bookie([tmp_path / "ledgers", tmp_path / "index"]) as s:
        assert s.ledgers() == live.ledgers()
        assert_manifest_entries(s, s.ledgers(), source="idx")
        for ledger_id in s.ledgers():
            assert s.ledger(ledger_id).to_json() | {"source": "x"} == live.ledger(
                ledger_id
            ).to_json() | {
                "source": "x",
                "limbo": None,
            }
        assert s.ledger(7).fenced is True and s.ledger(8).explicit_lac_value == 2
        report = s.check()
        assert report.ok and report.entries_in_logs == report.entries_in_index == 82


def test_db_index_round_trip_in_a_new_directory(tmp_path: Path, live: BookieStore) -> None:
    target = tmp_path / "index"
    records = {}
    for ledger_id in live.ledgers():
        info = live.ledger(ledger_id)
        records[ledger_id] = ledger_data(
            info.master_key or b"", fenced=bool(info.fenced), explicit_lac=info.explicit_lac
        )
    original = DbIndex(LIVE_LEDGERS, LIVE_LEDGERS, [])
    try:
        everything = [(lid, eid, loc.packed) for lid, eid, loc in original.iter_all()]
        write_db_index(target, records, everything)
        with pytest.raises(LedgerctlError, match="existing"):
            write_db_index(target, records, everything)
        assert sorted(os.listdir(target)) == ["ledgers", "locations"]
        assert "rocksdict-config.json" not in os.listdir(target / "locations")
        for name in ("ledgers", "locations"):  # the table options KeyValueStorageRocksDB uses
            assert rocksdb_options(target / name) == rocksdb_options(LIVE_LEDGERS / name)
        before = tree_digest(target)
        ours = DbIndex(target, LIVE_LEDGERS, [])
        try:
            assert [(lid, eid, loc.packed) for lid, eid, loc in ours.iter_all()] == everything
            for ledger_id in live.ledgers():
                mine, theirs = ours.record(ledger_id), original.record(ledger_id)
                assert mine is not None and theirs is not None
                assert replace(mine, path=None) == replace(theirs, path=None)
                assert ours.last_entry(ledger_id) == original.last_entry(ledger_id)
        finally:
            ours.close()
        assert tree_digest(target) == before
    finally:
        original.close()


def test_new_db_ledger_dir_from_live_entries(
    tmp_path: Path, journal_order: list[bytes], live: BookieStore
) -> None:
    current = tmp_path / "bookie" / "ledgers" / "current"
    summary = write_db_ledger_dir(
        current,
        journal_order,
        MASTER_KEY,
        fenced=[7],
        explicit_lacs={8: LAC_8},
        log_size_limit=32768,
    )
    assert (
        len(summary.log_ids) >= 4
        and (current / "lastId").read_text() == f"{summary.log_ids[-1]:x}\n"
    )
    with open_bookie(tmp_path / "bookie") as s:
        assert s.ledgers() == live.ledgers()
        assert_manifest_entries(s, s.ledgers(), source="rocksdb")
        logs = s.entry_logs()
        assert all(log.has_ledgers_map for log in logs[:-1]) and not logs[-1].has_ledgers_map
        for ledger_id in s.ledgers():
            assert s.ledger(ledger_id).to_json() | {"source": None} == live.ledger(
                ledger_id
            ).to_json() | {"source": None}
        report = s.check()
        assert report.ok and report.entries_in_logs == 82 and report.findings == []
    with pytest.raises(LedgerctlError, match="existing"):
        write_db_ledger_dir(current, journal_order[:1], MASTER_KEY)


def test_journal_tail_holds_entries_not_yet_in_logs(
    tmp_path: Path, journal_order: list[bytes]
) -> None:
    """A crashed bookie: ledgers 0-4 checkpointed, ledgers 6-8 only in the journal."""
    checkpointed = [e for e in journal_order if int.from_bytes(e[:8], "big") <= 4]
    later = [e for e in journal_order if int.from_bytes(e[:8], "big") > 4]
    ledgers = tmp_path / "ledgers" / "current"
    write_db_ledger_dir(ledgers, checkpointed, MASTER_KEY)
    jdir = tmp_path / "journal" / "current"
    jdir.mkdir(parents=True)
    with JournalWriter(jdir / "5.txn") as w:
        for entry in checkpointed:
            w.add_entry(entry)
        w.flush()
        mark = w.position
        for ledger_id in (6, 7, 8):
            w.add_master_key(ledger_id, MASTER_KEY)
        for entry in later:
            w.add_entry(entry)
        w.add_fence(7)
        w.add_explicit_lac(8, LAC_8)
    write_last_mark(ledgers, 5, mark)
    with open_bookie(tmp_path) as s:
        assert s.ledgers() == [0, 1, 2, 3, 4, 6, 7, 8]
        assert_manifest_entries(s, [0, 1, 2, 3, 4], source="rocksdb")
        assert_manifest_entries(s, [6, 7, 8], source="journal")
        assert s.ledger(7).fenced is True and s.ledger(7).source == "journal"
        assert s.ledger(8).explicit_lac_value == 2 and s.ledger(6).master_key == MASTER_KEY
        assert s.last_entry_id(6) == 11
        assert [j.replay_from for j in s.journals()] == [mark]
        report = s.check()
        assert report.ok and len(report.of_kind("journal-only")) == 19
    with open_bookie(tmp_path, journal="none") as s:
        assert s.ledgers() == [0, 1, 2, 3, 4]
    with open_bookie(tmp_path, journal="all") as s:
        assert_manifest_entries(s, [0, 4], source="rocksdb")  # the index wins over the journal


def test_several_ledger_dirs(tmp_path: Path, journal_order: list[bytes], live: BookieStore) -> None:
    """DbLedgerStorage with two ledger dirs: ledger L lives in dir L mod 2, log ids repeat."""
    for n in (0, 1):
        part = [e for e in journal_order if int.from_bytes(e[:8], "big") % 2 == n]
        write_db_ledger_dir(
            tmp_path / f"data{n}" / "current", part, MASTER_KEY, log_size_limit=32768
        )
    assert (tmp_path / "data0/current/0.log").exists() and (
        tmp_path / "data1/current/0.log"
    ).exists()
    with open_bookie([tmp_path / "data0", tmp_path / "data1"]) as s:
        assert len(s.layout.ledger_dirs) == 2
        assert s.ledgers() == live.ledgers()
        assert_manifest_entries(s, s.ledgers(), source="rocksdb")
        assert s.check().ok
    with open_bookie([tmp_path / "data0", tmp_path / "data1"], index="scan") as s:
        assert_manifest_entries(s, s.ledgers(), source="scan")


def test_writers_refuse_to_overwrite(tmp_path: Path) -> None:
    copy = writable_copy(LIVE_LEDGERS, tmp_path / "current")
    with pytest.raises(LedgerctlError, match="refusing"):
        EntryLogWriter(copy / "0.log")
    with pytest.raises(LedgerctlError, match="refusing"):
        JournalWriter(copy / "lastMark")
    with pytest.raises(LedgerctlError, match="refusing"):
        write_db_index(copy, {}, [])
    with pytest.raises(LedgerctlError, match="refusing"):
        write_last_mark(copy, 1, 2)
