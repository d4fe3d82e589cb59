"""BookieStore on a real bookie's DbLedgerStorage directories (tests/data/bookkeeper/
live-dbledgerstorage), checked against the client manifest and BookKeeper's own tools.

No test bookie here, and it stays beside the sandbox's tests: the comparison is with the
outputs of BookKeeper's own shell (check-db-ledgers-index, ledger index, readlog) captured
with the corpus, and the corpus holds what the sandbox's broker does not write (an
explicit LAC) or what a running sandbox does not keep still (entries only in the journal).
The sandbox's bookies are read offline in tests/cluster/sandbox/test_reads.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from pulsarctl_py.decoders import entrylog
from pulsarctl_py.decoders.nodes import Problem
from pulsarctl_py.stores.bookie import BookieStore, EntryNotFound, open_bookie
from pulsarctl_py.stores.bookie.indexes import DbIndex
from tests.support.bookie_data import (
    LIVE,
    LIVE_DATA,
    LIVE_JOURNAL,
    LIVE_LEDGERS,
    OFFLINE,
    OFFLINE_LOGS,
    digest_type,
    live_manifest,
    offline_manifest,
    sha256,
    tree_digest,
    verified_payload,
)

SHELL = LIVE / "bk-shell"
LEDGERS = {led["ledger_id"]: led for led in live_manifest()["ledgers"]}


@pytest.fixture(scope="module")
def store() -> Iterator[BookieStore]:
    with open_bookie([LIVE_DATA]) as opened:
        yield opened


def test_layout_from_each_kind_of_path() -> None:
    for paths in (
        [LIVE_DATA],
        [LIVE_DATA / "ledgers", LIVE_DATA / "journal"],
        [LIVE_LEDGERS, LIVE_JOURNAL],
    ):
        with open_bookie(paths) as s:
            assert [p.resolve() for p in s.layout.ledger_dirs] == [LIVE_LEDGERS.resolve()]
            assert [p.resolve() for p in s.layout.journal_dirs] == [LIVE_JOURNAL.resolve()]


def test_ledgers_listed_like_check_db_ledgers_index(store: BookieStore) -> None:
    text = (SHELL / "check-db-ledgers-index.txt").read_text()
    scanned = re.findall(r"isFenced=(\w+), ledgerId=(\d+)", text)
    assert store.ledgers() == [int(lid) for _, lid in scanned] == [0, 1, 2, 3, 4, 6, 7, 8]
    for fenced, lid in scanned:
        assert store.ledger(int(lid)).fenced is (fenced == "true")
    with pytest.raises(EntryNotFound):
        store.ledger(5)  # a znode, but the bookie never saw the ledger


@pytest.mark.parametrize("ledger_id", sorted(LEDGERS))
def test_every_ledger_has_exactly_the_manifest_entries(store: BookieStore, ledger_id: int) -> None:
    spec = LEDGERS[ledger_id]
    kind = digest_type(spec["digest_type"])
    got = list(store.read_entries(ledger_id))
    assert [e.entry_id for e in got] == [e["entry_id"] for e in spec["entries"]]
    for entry, want in zip(got, spec["entries"], strict=True):
        payload = verified_payload(entry.data, ledger_id, entry.entry_id, kind)
        assert len(payload) == want["payload_length"]
        assert sha256(payload) == want["payload_sha256"]
        loc = want["bk_location"]
        assert (entry.location.file_id, entry.location.offset) == (
            loc["entry_log_id"],
            loc["offset"],
        )
        assert entry.location.source == "rocksdb"
        # the LAC and cumulative length the client packed into each entry
        assert int.from_bytes(entry.data[24:32], "big") == want["cumulative_length"]


def test_ledger_facts(store: BookieStore) -> None:
    for ledger_id, spec in LEDGERS.items():
        index = spec["bookie_ledger_index"]
        if not isinstance(index, dict):
            continue
        info = store.ledger(ledger_id)
        assert info.exists and info.fenced is index["fenced"]
        assert info.master_key is not None and info.master_key.hex() == index["master_key_hex"]
        lac = index["explicit_lac_record_hex"]
        assert (info.explicit_lac.hex() if info.explicit_lac else None) == lac
        assert info.last_entry_id == spec["entries"][-1]["entry_id"]
    assert store.ledger(7).fenced is True
    assert store.ledger(8).explicit_lac_value == 2
    # the open ledger 2: only the piggybacked LAC, the last entry is what the bookie holds
    assert store.ledger(2).last_entry_id == 6 == store.last_entry_id(2)
    last = store.read_entry(2, 6)
    assert int.from_bytes(last[16:24], "big", signed=True) == 5  # LAC packed with entry 6
    assert store.last_entry_id(5) is None


def test_locate_matches_bk_shell_ledger_index(store: BookieStore) -> None:
    for ledger_id in store.ledgers():
        text = (SHELL / f"ledger-index-{ledger_id}.txt").read_text()
        shell = [
            tuple(map(int, m))
            for m in re.findall(r"entry (\d+)\t:\t\(log: (\d+), pos: (\d+)\)", text)
        ]
        assert shell, ledger_id
        for entry_id, log_id, pos in shell:
            loc = store.locate(ledger_id, entry_id)
            assert loc is not None and (loc.file_id, loc.offset) == (log_id, pos)
            assert loc.packed == entrylog.make_location(log_id, pos)
    assert store.locate(0, 40) is None
    with pytest.raises(EntryNotFound):
        store.read_entry(0, 40)


def test_range_reads_start_where_asked(store: BookieStore) -> None:
    all_entries = [e.entry_id for e in store.read_entries(0)]
    assert [e.entry_id for e in store.read_entries(0, 10, 19)] == all_entries[10:20]
    assert [e.entry_id for e in store.read_entries(0, 35)] == all_entries[35:]
    assert list(store.read_entries(0, 50)) == []
    parts = [store.read_entries(0, a, a + 9) for a in range(0, 40, 10)]
    assert [e.data for part in parts for e in part] == [e.data for e in store.read_entries(0)]


def parse_readlog(log_id: int) -> list[tuple[int, int, int, int]]:
    text = (SHELL / f"readlog-{log_id}.txt").read_text()
    pattern = r"Entry \{entryId=(-?\d+), entrySize=(\d+), ledgerId=(\d+), position=(\d+)\}"
    return [
        (int(lid), int(eid), int(pos), int(size))
        for eid, size, lid, pos in re.findall(pattern, text)
    ]


def test_entry_logs_match_bk_shell_readlog_and_readlogmetadata(store: BookieStore) -> None:
    logs = store.entry_logs()
    assert [(log.log_id, log.size) for log in logs] == [
        (log["log_id"], log["size"]) for log in live_manifest()["entry_logs"]
    ]
    assert logs[-1].empty and not logs[3].has_ledgers_map and logs[0].has_ledgers_map
    for log in logs[:4]:
        got = [(r.ledger_id, r.entry_id, r.position, r.size) for r in store.scan_entry_log(log)]
        assert got == parse_readlog(log.log_id)
        text = (SHELL / f"readlogmetadata-{log.log_id}.txt").read_text()
        sizes = {int(a): int(b) for a, b in re.findall(r"ledgerId=(\d+), size=(\d+)", text)}
        total = int(re.search(r"totalSize=(\d+)", text).group(1))  # type: ignore[union-attr]
        assert store.ledger_sizes(log) == sizes and sum(sizes.values()) == total
    assert store.problems == []


def test_journal_holds_the_same_entries(store: BookieStore) -> None:
    [info] = store.journals()
    assert info.version == 6 and info.replay_from == 113152
    seen = []
    for rec in store.journal_records(info):
        if rec.entry_id >= 0:
            assert store.read_journal_body(info, rec) == store.read_entry(
                rec.ledger_id, rec.entry_id
            )
            seen.append((rec.ledger_id, rec.entry_id))
    assert len(set(seen)) == sum(len(led["entries"]) for led in LEDGERS.values())
    # recovery of ledger 7 by a second client wrote its last entry once more
    assert [k for k in set(seen) if seen.count(k) > 1] == [(7, 3)]


def test_wal_only_index_equals_compacted_sst_and_bookkeeper_dump() -> None:
    dump = json.loads((LIVE / "rocksdb-dump-by-bk.json").read_text())
    want = [
        (int(x["ledger_id"]), int(x["entry_id"]), int(x["location"])) for x in dump["locations"]
    ]
    for index_dir in (LIVE_LEDGERS, LIVE / "rocksdb-compacted"):
        problems: list[Problem] = []
        db = DbIndex(index_dir, LIVE_LEDGERS, problems)
        try:
            assert [(lid, eid, loc.packed) for lid, eid, loc in db.iter_all()] == want
            assert sorted(db.ledger_ids()) == [x["ledger_id"] for x in dump["ledgers"]]
            for x in dump["ledgers"]:
                rec = db.record(x["ledger_id"])
                assert rec is not None and rec.fenced is x["fenced"]
                assert rec.explicit_lac == (
                    bytes.fromhex(x["explicit_lac_hex"]) if x["has_explicit_lac"] else None
                )
        finally:
            db.close()
        assert problems == []


def test_scan_mode_rebuilds_the_same_locations(store: BookieStore) -> None:
    with open_bookie([LIVE_DATA], index="scan") as scanned:
        assert scanned.ledgers() == store.ledgers()
        for ledger_id in store.ledgers():
            a = [
                (e.entry_id, e.location.file_id, e.location.offset, e.data)
                for e in store.read_entries(ledger_id)
            ]
            b = [
                (e.entry_id, e.location.file_id, e.location.offset, e.data)
                for e in scanned.read_entries(ledger_id)
            ]
            assert a == b
            assert scanned.ledger(ledger_id).source == "scan"
            assert scanned.last_entry_id(ledger_id) == store.last_entry_id(ledger_id)


def test_consistency_check_is_clean(store: BookieStore) -> None:
    report = store.check()
    assert report.ok, report.to_json()
    assert report.entries_in_logs == report.entries_in_index == 82
    assert report.findings == []


def test_offline_entry_logs_without_index_are_scanned() -> None:
    spec = offline_manifest()["entrylog"]
    with open_bookie(OFFLINE / "entrylog" / "ledgers") as s:
        assert s.layout.ledger_dirs == (OFFLINE_LOGS,)
        assert s.ledgers() == [3, 4, 5, 6]
        for e in spec["entries"]:
            loc = s.locate(e["ledger_id"], e["entry_id"])
            assert loc is not None and loc.source == "scan"
            assert loc.packed == entrylog.make_location(e["log_id"], e["offset"])
            assert sha256(s.read_entry(e["ledger_id"], e["entry_id"])) == e["stored_sha256"]
        assert [x.entry_id for x in s.read_entries(4)] == [0, 1, 2, 3, 4, 5]
        assert s.ledger(4).fenced is None and s.ledger(4).master_key is None
        for log in spec["logs"]:
            want = {int(k): v for k, v in log["bk_getEntryLogMetadata_ledger_sizes"].items()}
            assert s.ledger_sizes(log["log_id"]) == want


def test_reading_modifies_nothing(tmp_path: Path) -> None:
    """sha256 of every file (and the listing) before and after every read path."""
    root = LIVE.parent
    before = tree_digest(root)
    for paths, index in (
        ([LIVE_DATA], "auto"),
        ([LIVE_DATA], "scan"),
        ([OFFLINE / "entrylog"], "auto"),
    ):
        with open_bookie(paths, index=index, journal="all") as s:  # type: ignore[arg-type]
            for ledger_id in s.ledgers():
                s.ledger(ledger_id)
                for _ in s.read_entries(ledger_id):
                    pass
            for log in s.entry_logs():
                s.ledger_sizes(log)
            for journal_info in s.journals():
                list(s.journal_records(journal_info))
            s.check()
    for index_dir in (LIVE_LEDGERS, LIVE / "rocksdb-compacted"):
        db = DbIndex(index_dir, LIVE_LEDGERS, [])
        list(db.iter_all())
        db.close()
    assert tree_digest(root) == before
