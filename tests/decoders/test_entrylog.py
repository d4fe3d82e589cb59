"""The pure bookie file formats (decoders.entrylog, journal, index_file) against files
written by BookKeeper's own classes (tests/data/bookkeeper/offline and the live bookie)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsarctl_py.decoders import entrylog, index_file, journal
from pulsarctl_py.decoders._readat import bytes_reader
from pulsarctl_py.decoders.errors import CorruptEntryError
from pulsarctl_py.decoders.nodes import Problem
from tests.support.bookie_data import (
    LIVE_JOURNAL,
    LIVE_LEDGERS,
    OFFLINE_JOURNAL,
    OFFLINE_LOGS,
    digest_type,
    live_manifest,
    offline_manifest,
    sha256,
    verified_payload,
)


def scan(data: bytes, **kw: object) -> list[entrylog.LogRecord]:
    return list(entrylog.scan_records(bytes_reader(data), len(data), **kw))  # type: ignore[arg-type]


# -- entry logs ------------------------------------------------------------------------


@pytest.mark.parametrize("log_id", [0, 1])
def test_offline_entry_log_records_match_bookkeeper(log_id: int) -> None:
    data = (OFFLINE_LOGS / f"{log_id}.log").read_bytes()
    expected = [e for e in offline_manifest()["entrylog"]["entries"] if e["log_id"] == log_id]
    records = scan(data)
    assert [(r.ledger_id, r.entry_id) for r in records] == [
        (e["ledger_id"], e["entry_id"]) for e in expected
    ]
    for rec, exp in zip(records, expected, strict=True):
        assert rec.location(log_id) == entrylog.make_location(log_id, exp["offset"])
        assert rec.size == exp["stored_size"]
        entry = entrylog.read_entry(bytes_reader(data), rec.offset, rec.ledger_id, rec.entry_id)
        assert sha256(entry) == exp["stored_sha256"] == exp["bk_readEntry_sha256"]
        assert entry[:40].hex().startswith(exp["header_and_digest_hex"][:64])
        verified_payload(entry, exp["ledger_id"], exp["entry_id"], digest_type(exp["digest_type"]))


def test_offline_entry_log_headers_and_ledgers_map() -> None:
    logs = {log["log_id"]: log for log in offline_manifest()["entrylog"]["logs"]}
    rotated = (OFFLINE_LOGS / "0.log").read_bytes()
    header = entrylog.parse_header(rotated)
    assert header.has_ledgers_map and header.ledgers_count == 3 and not header.direct
    sizes = entrylog.read_ledgers_map(bytes_reader(rotated), len(rotated), header)
    expected = {int(k): v for k, v in logs[0]["bk_getEntryLogMetadata_ledger_sizes"].items()}
    assert sizes == expected
    assert sum(sizes.values()) == logs[0]["bk_getEntryLogMetadata_total_size"]
    # the map is the last record, with ledger id -1 and entry id -2
    meta = [r for r in scan(rotated, include_meta=True) if r.is_meta]
    assert [(r.position, r.entry_id) for r in meta] == [(header.ledgers_map_offset, -2)]
    assert entrylog.ledger_sizes(scan(rotated)) == expected

    active = (OFFLINE_LOGS / "1.log").read_bytes()
    header = entrylog.parse_header(active)
    assert header.version == 1 and not header.has_ledgers_map
    assert entrylog.read_ledgers_map(bytes_reader(active), len(active), header) is None
    expected = {int(k): v for k, v in logs[1]["bk_getEntryLogMetadata_ledger_sizes"].items()}
    assert entrylog.ledger_sizes(scan(active)) == expected


def test_live_entry_logs_match_manifest_readlog() -> None:
    for log in live_manifest()["entry_logs"]:
        data = (LIVE_LEDGERS / f"{log['log_id']}.log").read_bytes()
        assert len(data) == log["size"]
        if not data:
            continue
        got = [(r.ledger_id, r.entry_id, r.position, r.size) for r in scan(data)]
        want = [
            (e["ledger_id"], e["entry_id"], e["size_field_position"], e["entry_size"])
            for e in log["bk_readlog_entries"]
        ]
        assert got == want
        header = entrylog.parse_header(data)
        assert header.has_ledgers_map is log["bk_has_ledgers_map"]
        sizes = entrylog.read_ledgers_map(bytes_reader(data), len(data), header)
        if sizes is None:
            sizes = entrylog.ledger_sizes(scan(data))
        assert sizes == {int(k): v for k, v in log["bk_ledger_sizes"].items()}


def test_ledgers_map_build_parse_and_batches() -> None:
    pairs = [(i, 100 + i) for i in range(10_001)]
    built = entrylog.build_ledgers_map(pairs)
    first_size = struct.unpack_from(">i", built, 0)[0]
    assert first_size == 20 + 16 * 10_000
    first = entrylog.parse_ledgers_map_record(built[: 4 + first_size])
    second = entrylog.parse_ledgers_map_record(built[4 + first_size :])
    assert first + second == pairs
    # the record BookKeeper wrote into log 0 parses and rebuilds byte for byte
    data = (OFFLINE_LOGS / "0.log").read_bytes()
    header = entrylog.parse_header(data)
    record = data[header.ledgers_map_offset :]
    assert entrylog.build_ledgers_map(entrylog.parse_ledgers_map_record(record)) == record


def test_header_build_parse_round_trip() -> None:
    for direct in (False, True):
        raw = entrylog.build_header(1, 123456, 7, direct=direct)
        assert len(raw) == (4096 if direct else 1024)
        parsed = entrylog.parse_header(raw)
        assert (parsed.version, parsed.ledgers_map_offset, parsed.ledgers_count) == (1, 123456, 7)
        assert parsed.direct is direct
        assert parsed.build() == raw
    assert entrylog.build_header(1)[:24] == (OFFLINE_LOGS / "1.log").read_bytes()[:24]


def test_direct_header_fake_record_jumps_to_4096() -> None:
    entry = (OFFLINE_LOGS / "1.log").read_bytes()[1028 : 1028 + 41]
    body = entrylog.frame(entry)
    data = entrylog.build_header(direct=True) + body + entrylog.padding(4096 + len(body))
    assert len(data) == 8192 and data[-1] == 0xF0
    records = scan(data, include_meta=True)
    assert [(r.position, r.ledger_id) for r in records] == [(1024, -1), (4096, 4)]
    assert records[0].size == 3068


def test_padding_skip_matches_bytewise_rule() -> None:
    entry = (OFFLINE_LOGS / "1.log").read_bytes()[1028 : 1028 + 41]
    for filler in (b"\xf0" * 5000, b"\x00" * 777, b"\xff\x80" * 3 + b"\x00" * 9):
        data = entrylog.build_header() + filler + entrylog.frame(entry)
        records = scan(data)
        assert [r.position for r in records] == [1024 + len(filler)]


# -- damaged entry logs ---------------------------------------------------------------


def test_corrupt_header_and_truncation_are_clear_errors() -> None:
    data = bytearray((OFFLINE_LOGS / "0.log").read_bytes())
    bad = bytes(b"XXXX" + data[4:])
    with pytest.raises(CorruptEntryError, match="magic 'BKLO'"):
        entrylog.parse_header(bad)
    with pytest.raises(CorruptEntryError):
        entrylog.parse_header(data[:10])
    # a log cut in the middle of a record: the records before it, then one problem
    cut = bytes(data[:3000])
    problems: list[Problem] = []
    records = list(entrylog.scan_records(bytes_reader(cut), len(cut), problems=problems))
    assert [r.end <= 3000 for r in records] == [True] * len(records)
    assert len(problems) == 1 and "truncated" in problems[0].message
    with pytest.raises(CorruptEntryError, match="truncated"):
        list(entrylog.scan_records(bytes_reader(cut), len(cut)))
    # the ledgers map pointing into garbage
    header = entrylog.EntryLogHeader(1, 2000, 3)
    with pytest.raises(CorruptEntryError):
        entrylog.read_ledgers_map(bytes_reader(bytes(data)), len(data), header)
    # a location whose ids differ from what is asked
    with pytest.raises(CorruptEntryError, match="ledger 9 entry 0"):
        entrylog.read_entry(bytes_reader(bytes(data)), 1028, 9, 0)


def bookkeeper_scan(data: bytes) -> list[tuple[int, int, int]]:
    """``DefaultEntryLogger.scanEntryLog`` restated one byte at a time, as a reference."""
    pos, out = 1024, []
    while pos + 12 <= len(data):
        size, ledger_id = struct.unpack_from(">iq", data, pos)
        if size <= 0:
            pos += 1
            continue
        if ledger_id != -1:
            if pos + 4 + size > len(data):
                break
            out.append((pos, size, ledger_id))
        pos += 4 + size
    return out


segments = st.one_of(
    st.builds(
        lambda lid, eid, body: entrylog.frame(struct.pack(">qq", lid, eid) + body),
        st.sampled_from([0, 3, -1, 2**40]),
        st.integers(0, 5),
        st.binary(max_size=40),
    ),
    st.integers(1, 300).map(lambda n: b"\xf0" * n),
    st.integers(1, 300).map(lambda n: b"\x00" * n),
    st.binary(max_size=30),
)


@given(st.lists(segments, max_size=12))
def test_scan_agrees_with_bytewise_reference(parts: list[bytes]) -> None:
    data = entrylog.build_header() + b"".join(parts)
    problems: list[Problem] = []
    got = [
        (r.position, r.size, r.ledger_id)
        for r in entrylog.scan_records(bytes_reader(data), len(data), problems=problems)
    ]
    sane = [(p, s, lid) for p, s, lid in bookkeeper_scan(data) if s >= 16 and lid >= 0]
    assert got == sane


@given(st.binary(max_size=3000))
def test_scanning_garbage_never_raises_or_overruns(garbage: bytes) -> None:
    data = entrylog.build_header() + garbage
    problems: list[Problem] = []
    for rec in entrylog.scan_records(bytes_reader(data), len(data), problems=problems):
        assert 1024 <= rec.position and rec.end <= len(data) and rec.size >= 16


# -- journal --------------------------------------------------------------------------


def test_offline_journal_matches_scan_journal() -> None:
    data = OFFLINE_JOURNAL.read_bytes()
    assert journal.parse_header(data[:8]) == (6, 512)
    spec = offline_manifest()["journal"]
    expected = spec["journals"][0]["bk_scanJournal_records"]
    records = list(journal.scan_records(bytes_reader(data), len(data)))
    assert [(r.position, r.size, r.ledger_id, r.entry_id) for r in records] == [
        (e["offset"], e["size"], e["ledger_id"], e["entry_id"]) for e in expected
    ]
    for rec, exp, written in zip(records, expected, spec["written"], strict=True):
        body = data[rec.offset : rec.end]
        assert sha256(body) == exp["sha256"] == written["record_sha256"]
        verified_payload(body, rec.ledger_id, rec.entry_id, digest_type(written["digest_type"]))


def test_live_journal_meta_records_match_readjournal() -> None:
    data = (LIVE_JOURNAL / "1a1fdc8ddb1.txn").read_bytes()
    records = list(journal.scan_records(bytes_reader(data), len(data)))
    expected = live_manifest()["journals"][0]["bk_readjournal_records"]
    assert [(r.ledger_id, r.entry_id, r.position, r.size) for r in records] == [
        (e["ledger_id"], e["entry_id"], e["record_position"], e["entry_size"]) for e in expected
    ]
    for rec, exp in zip(records, expected, strict=True):
        if exp.get("meta") == "MASTER_KEY":
            assert rec.kind is journal.RecordKind.MASTER_KEY
            assert rec.master_key is not None and rec.master_key.hex() == exp["master_key_hex"]
        elif exp.get("meta") == "FENCE":
            assert rec.kind is journal.RecordKind.FENCE and rec.ledger_id == 7
        elif exp["entry_id"] == -0x8000:
            assert rec.kind is journal.RecordKind.EXPLICIT_LAC
            lac_hex = live_manifest()["ledgers"][8]["bookie_ledger_index"][
                "explicit_lac_record_hex"
            ]
            assert rec.explicit_lac is not None and rec.explicit_lac.hex() == lac_hex
        else:
            assert rec.kind is journal.RecordKind.ENTRY
    # replay from lastMark finds nothing: the bookie checkpointed before stopping
    mark = journal.parse_last_mark((LIVE_LEDGERS / "lastMark").read_bytes())
    assert mark == (0x1A1FDC8DDB1, 113152)
    assert list(journal.scan_records(bytes_reader(data), len(data), mark[1])) == []


def test_journal_headers_padding_and_meta_round_trip() -> None:
    assert journal.build_header(6) == (LIVE_JOURNAL / "1a1fdc8ddb1.txn").read_bytes()[:512]
    assert journal.build_header(4) == b"BKLG\x00\x00\x00\x04"
    assert journal.build_header(1) == b""
    assert journal.parse_header(b"\x00\x00\x00\x28abcd") == (1, 0)
    with pytest.raises(CorruptEntryError):
        journal.parse_header(b"BKLG\x00\x00\x00\x09")
    for position in range(500, 530):
        pad = journal.build_padding(position)
        assert (position + len(pad)) % 512 == 0
        if pad:
            assert struct.unpack_from(">ii", pad) == (-256, len(pad) - 8)
    key = bytes(range(20))
    lac = bytes.fromhex("000000000000000800000000000000021b38188a")
    for body, kind in [
        (journal.build_master_key_body(5, key), journal.RecordKind.MASTER_KEY),
        (journal.build_fence_body(5), journal.RecordKind.FENCE),
        (journal.build_explicit_lac_body(5, lac), journal.RecordKind.EXPLICIT_LAC),
    ]:
        rec = journal.parse_body(body, 6, 512)
        assert (rec.kind, rec.ledger_id, rec.position, rec.size) == (kind, 5, 512, len(body))
    with pytest.raises(CorruptEntryError, match="before journal V6"):
        journal.parse_body(journal.build_explicit_lac_body(5, lac), 5)


def test_damaged_journal_is_a_problem_not_a_crash() -> None:
    head = journal.build_header(6)
    entry = OFFLINE_JOURNAL.read_bytes()[516 : 516 + 36]
    good = journal.build_record(entry)
    # a negative length other than padding
    data = head + good + struct.pack(">i", -5) + bytes(100)
    problems: list[Problem] = []
    got = list(journal.scan_records(bytes_reader(data), len(data), problems=problems))
    assert len(got) == 1 and "negative record length" in problems[0].message
    with pytest.raises(CorruptEntryError):
        list(journal.scan_records(bytes_reader(data), len(data)))
    # padding is not allowed before V5
    v4 = journal.build_header(4) + good + journal.build_padding(8 + len(good))
    problems = []
    assert len(list(journal.scan_records(bytes_reader(v4), len(v4), problems=problems))) == 1
    assert problems
    # a record cut short is where writing stopped: no problem
    cut = head + good + good[:20]
    problems = []
    assert len(list(journal.scan_records(bytes_reader(cut), len(cut), problems=problems))) == 1
    assert problems == []
    # a meta record with a bad key length is skipped with a problem
    bad = head + journal.build_record(struct.pack(">qqi", 3, -0x1000, 999)) + good
    problems = []
    got = list(journal.scan_records(bytes_reader(bad), len(bad), problems=problems))
    assert [r.kind for r in got] == [journal.RecordKind.ENTRY] and len(problems) == 1


# -- .idx -----------------------------------------------------------------------------


def test_index_file_round_trip_and_layout() -> None:
    lac = bytes.fromhex("000000000000000800000000000000021b38188a")
    header = index_file.IndexHeader(bytes(range(20)), index_file.STATE_FENCED_BIT, lac)
    locations = {0: entrylog.make_location(3, 1028), 5: entrylog.make_location(4, 2000)}
    data = index_file.build_index_file(header, locations)
    assert data[:4] == b"BKLE" and len(data) == 1024 + 8 * 6
    parsed = index_file.parse_header(data)
    assert parsed == header and parsed.fenced
    assert dict(index_file.parse_locations(data[1024:])) == locations
    assert dict(index_file.parse_locations(data[1024 + 40 :], 5)) == {5: locations[5]}
    v0 = index_file.IndexHeader(b"k", 0, None, index_file.V0)
    assert index_file.parse_header(v0.build()) == v0
    assert index_file.ledger_index_path(0x123456789A) == "78/9a/123456789a.idx"
    assert index_file.ledger_index_path(7) == "0/7/7.idx"
    assert index_file.parse_index_file_name("123456789a.idx") == 0x123456789A


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"BKLX" + bytes(1020), "signature"),
        (b"BKLE\x00\x00\x00\x07" + bytes(1016), "version"),
        (b"BKLE\x00\x00\x00\x01\x00\x00\x10\x00" + bytes(1012), "master key"),
        (b"BKLE\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05", "explicit LAC"),
        (b"BKLE", "header"),
    ],
)
def test_garbage_index_headers(data: bytes, match: str) -> None:
    with pytest.raises(CorruptEntryError, match=match):
        index_file.parse_header(data)
