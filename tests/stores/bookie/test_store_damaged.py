"""Damaged bookie data (scratch copies in tmp_path): truncated or garbled entry logs,
unreadable RocksDB indexes, garbage ``.idx`` files and journals. Every case ends in a
CorruptEntryError or a finding with a reason, never a traceback or a hang."""

from __future__ import annotations

import os
import random
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from pulsarctl_py.decoders import entrylog, journal
from pulsarctl_py.decoders.errors import CorruptEntryError
from pulsarctl_py.stores.bookie import (
    BookieDirError,
    StoredEntry,
    open_bookie,
    write_db_index,
    write_index_file,
)
from pulsarctl_py.stores.bookie.writers import ledger_data
from tests.support.bookie_data import (
    LIVE_DATA,
    LIVE_LEDGERS,
    digest_type,
    live_manifest,
    sha256,
    verified_payload,
    writable_copy,
)

LEDGERS = {led["ledger_id"]: led for led in live_manifest()["ledgers"]}


@pytest.fixture
def bookie(tmp_path: Path) -> Path:
    return writable_copy(LIVE_DATA, tmp_path / "bookie")


def payload_digests(entries: Iterable[StoredEntry]) -> list[str]:
    return [
        sha256(verified_payload(e.data, e.ledger_id, e.entry_id, DIGESTS[e.ledger_id]))
        for e in entries
    ]


def packed(entry: dict) -> int:
    return entrylog.make_location(
        entry["bk_location"]["entry_log_id"], entry["bk_location"]["offset"]
    )


def drop_db_index(current: Path) -> None:
    for name in ("ledgers", "locations"):
        shutil.rmtree(current / name)


DIGESTS = {lid: digest_type(led["digest_type"]) for lid, led in LEDGERS.items()}


def test_truncated_entry_log_with_index(bookie: Path) -> None:
    log3 = bookie / "ledgers/current/3.log"
    os.truncate(log3, 3800)  # cuts ledger 8 entry 0 (3700 + 163) and drops entries 1, 2
    with open_bookie(bookie) as s:
        assert [e.entry_id for e in s.read_entries(7)] == [0, 1, 2, 3]
        with pytest.raises(CorruptEntryError, match=r"3\.log") as err:
            list(s.read_entries(8))
        assert err.value.offset == 3700
        report = s.check()
        missing = report.of_kind("in-index-not-in-log")
        assert [(f.ledger_id, f.entry_id) for f in missing] == [(8, 0), (8, 1), (8, 2)]
        assert not report.ok
        assert any("truncated" in p.message for p in report.problems)
        assert s.ledger_sizes(3) == {6: 2012, 7: 660}


def test_truncated_entry_log_without_index(bookie: Path) -> None:
    os.truncate(bookie / "ledgers/current/3.log", 3800)
    with open_bookie(bookie, index="scan") as s:
        assert [e.entry_id for e in s.read_entries(7)] == [0, 1, 2, 3]
        assert list(s.read_entries(8)) == []
        s.ledgers()
        assert any("truncated" in p.message and "3.log" in p.layer for p in s.problems)


def test_corrupted_entry_log_header(bookie: Path) -> None:
    log0 = bookie / "ledgers/current/0.log"
    with open(log0, "r+b") as f:
        f.write(b"XXXX\x00\x00\x00\x07")
    with open_bookie(bookie) as s:
        info = s.entry_logs()[0]
        assert info.header_version is None and "magic 'BKLO'" in (info.problem or "")
        # BookKeeper's scan does not look at the header: the entries are still readable
        assert payload_digests(s.read_entries(0)) == [
            e["payload_sha256"] for e in LEDGERS[0]["entries"]
        ]
        assert s.ledger_sizes(0) == {0: 11064, 1: 2030, 2: 10320}  # by scanning instead
        assert any("0.log" in p.layer for p in s.problems)
        assert s.check().of_kind("in-index-not-in-log") == []


def test_garbage_in_an_entry_log_record(bookie: Path) -> None:
    log2 = bookie / "ledgers/current/2.log"
    with open(log2, "r+b") as f:
        f.seek(31812 - 4)  # the size field of ledger 3 entry 0
        f.write(b"\x7f\xff\xff\xff")
    with open_bookie(bookie) as s:
        with pytest.raises(CorruptEntryError):
            s.read_entry(3, 0)
        report = s.check()
        assert (3, 0) in {(f.ledger_id, f.entry_id) for f in report.of_kind("in-index-not-in-log")}
        assert any("truncated" in p.message for p in report.problems)


def test_missing_entry_log_file(bookie: Path) -> None:
    (bookie / "ledgers/current/2.log").unlink()
    with open_bookie(bookie) as s:
        with pytest.raises(CorruptEntryError, match="no such file"):
            s.read_entry(3, 0)
        missing = {(f.ledger_id, f.entry_id) for f in s.check().of_kind("in-index-not-in-log")}
        assert missing == {(2, 4), (2, 5), (2, 6), (3, 0), (3, 1), (4, 0), (4, 1), (4, 2)}


@pytest.mark.parametrize("victim", ["CURRENT", "000004.log"])
def test_unreadable_locations_index_falls_back_to_scanning(bookie: Path, victim: str) -> None:
    path = bookie / "ledgers/current/locations" / victim
    data = bytearray(path.read_bytes())
    for i in range(min(len(data), 100), min(len(data), 600)):
        data[i] ^= 0x5A
    path.write_bytes(b"garbage\n" if victim == "CURRENT" else bytes(data))
    with open_bookie(bookie) as s:
        [finding] = s.findings
        assert finding.kind == "unusable-index" and "locations" in finding.message
        for ledger_id, spec in LEDGERS.items():
            got = list(s.read_entries(ledger_id))
            assert payload_digests(got) == [e["payload_sha256"] for e in spec["entries"]]
            assert all(e.location.source == "scan" for e in got)
        # the ledgers index still answers: fenced, master key, explicit LAC
        assert s.ledger(7).fenced is True and s.ledger(7).source == "rocksdb"
        assert s.ledger(8).explicit_lac_value == 2
        report = s.check()
        assert not report.ok and report.of_kind("unusable-index")


def test_garbage_ledgers_index_value(tmp_path: Path) -> None:
    current = writable_copy(LIVE_LEDGERS, tmp_path / "ledgers" / "current")
    drop_db_index(current)
    locations = [(0, e["entry_id"], packed(e)) for e in LEDGERS[0]["entries"]]
    write_db_index(current, {0: b"\xff\xff\xff", 1: ledger_data(b"k")}, locations)
    with open_bookie(current) as s:
        with pytest.raises(CorruptEntryError, match="LedgerData"):
            s.ledger(0)
        assert s.ledger(1).master_key == b"k" and s.ledger(1).last_entry_id is None
        assert len(list(s.read_entries(0))) == 40
        report = s.check()
        not_indexed = report.of_kind("in-log-not-in-index")
        assert {f.ledger_id for f in not_indexed} == {1, 2, 3, 4, 6, 7, 8}
        assert "unknown to the index" in next(f for f in not_indexed if f.ledger_id == 2).message


def test_garbage_idx_file(tmp_path: Path) -> None:
    logs = writable_copy(LIVE_LEDGERS, tmp_path / "ledgers" / "current")
    index = tmp_path / "index" / "current"
    drop_db_index(logs)
    key = bytes.fromhex(LEDGERS[0]["bookie_ledger_index"]["master_key_hex"])
    for lid in (0, 1):
        locs = {e["entry_id"]: packed(e) for e in LEDGERS[lid]["entries"]}
        write_index_file(index, lid, key, locs)
    bad = index / "0/1/1.idx"
    bad.write_bytes(b"NOPE" + bad.read_bytes()[4:])
    with open_bookie([tmp_path / "ledgers", tmp_path / "index"]) as s:
        assert s.ledgers() == [0, 1]
        assert len(list(s.read_entries(0))) == 40
        with pytest.raises(CorruptEntryError, match=r"1\.idx"):
            s.ledger(1)
        with pytest.raises(CorruptEntryError, match="signature"):
            list(s.read_entries(1))


def test_damaged_journal(bookie: Path) -> None:
    txn = bookie / "journal/current/1a1fdc8ddb1.txn"
    with open(txn, "r+b") as f:
        f.seek(1024)  # the length of ledger 0 entry 1
        f.write(b"\xff\xff\xff\x00\x7f\xff\xff\xff")  # padding mask with an absurd length
    with open_bookie(bookie, journal="all") as s:
        assert [e.entry_id for e in s.read_entries(0)] == list(range(40))
        [info] = s.journals()
        records = list(s.journal_records(info))
        assert [(r.ledger_id, r.entry_id) for r in records] == [(0, -4096), (0, 0)]
    with open(txn, "r+b") as f:
        f.seek(1024)
        f.write(b"\xff\xff\xff\xf0")  # a negative length that is not padding
    with open_bookie(bookie, journal="all") as s:
        s.ledgers()
        assert any("negative record length" in p.message for p in s.problems)
    with open(txn, "r+b") as f:
        f.write(b"BKLG\x00\x00\x00\x63")
    with open_bookie(bookie, journal="all") as s:
        [info] = s.journals()
        assert info.version is None and "journal version" in (info.problem or "")


def test_padding_and_random_logs_do_not_hang(tmp_path: Path) -> None:
    current = tmp_path / "ledgers" / "current"
    current.mkdir(parents=True)
    (current / "0.log").write_bytes(entrylog.build_header() + b"\xf0" * (4 << 20))
    rng = random.Random(7)
    (current / "1.log").write_bytes(entrylog.build_header() + rng.randbytes(1 << 20))
    (current / "2.log").write_bytes(b"\x00" * 700)  # shorter than a header
    started = time.monotonic()
    with open_bookie(current) as s:
        s.ledgers()
        for log in s.entry_logs():
            list(s.scan_entry_log(log))
        s.check()
        assert s.entry_logs()[2].problem is not None
    assert time.monotonic() - started < 10


def test_bad_bookie_dirs(tmp_path: Path) -> None:
    with pytest.raises(BookieDirError, match="does not exist"):
        open_bookie(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BookieDirError, match="no bookie data"):
        open_bookie(tmp_path / "empty")


def test_bad_last_mark_is_a_problem(bookie: Path) -> None:
    (bookie / "ledgers/current/lastMark").write_bytes(b"short")
    with open_bookie(bookie) as s:
        assert len(list(s.read_entries(0))) == 40
        assert any("lastMark" in p.layer for p in s.problems)
        assert journal.parse_journal_file_name("1a1fdc8ddb1.txn") == 0x1A1FDC8DDB1
