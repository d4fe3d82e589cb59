"""The filesystem offloader's reader (pulsarctl_py.stores.tiered): real offloads written by
the sandbox's broker (tests/data/tiered/filesystem, see PROVENANCE.md), round trips through
a tiny SequenceFile writer, and damaged files."""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders import decode_entry
from pulsarctl_py.decoders.ledger_metadata import LedgerState
from pulsarctl_py.errors import (
    ChecksumMismatch,
    CorruptEntryError,
    LedgerctlError,
    NotFoundError,
    UnsupportedCodec,
)
from pulsarctl_py.stores.tiered import seqfile
from pulsarctl_py.stores.tiered.filesystem import (
    MapFileLedger,
    UnsupportedLocation,
    decode_options,
    local_path,
)
from pulsarctl_py.stores.tiered.seqfile import SequenceFile, write_vlong
from tests.support import seqfile_writer

DATA = Path(__file__).resolve().parents[2] / "data" / "tiered" / "filesystem"
KINDS = ("block", "record")


def golden(kind: str) -> tuple[Path, dict]:
    expected = json.loads((DATA / kind / "expected.json").read_text())
    (directory,) = [p for p in (DATA / kind).iterdir() if p.is_dir()]
    return directory, expected


def messages_of(m: MapFileLedger, first: int = 0, last: int | None = None) -> list[dict]:
    out = []
    for entry in m.read_entries(first, last):
        decoded = decode_entry(entry.data, decode_options(), (m.ledger_id, entry.entry_id))
        assert decoded.ok, decoded.problems
        for msg in decoded.messages:
            out.append(
                {
                    "message_id": msg.message_id,
                    "key": msg.key,
                    "value": bytes(msg.value).decode(),
                    "properties": msg.properties,
                    "publish_time": msg.publish_time,
                }
            )
    return out


# -- real offloads ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_real_offload_reads_as_the_broker_reader_did(kind: str) -> None:
    directory, expected = golden(kind)
    with MapFileLedger(directory, expected["ledger_id"]) as m:
        assert m.seq.header.compression == kind.upper()
        assert m._data.crc is not None  # the .crc side file is checked
        md = m.metadata()
        assert md.state is LedgerState.CLOSED
        assert md.last_entry_id == expected["entries"] - 1
        assert md.length == expected["size"]
        assert md.ensemble_size == 3 and md.write_quorum_size == 2
        entries = list(m.read_entries())
        assert [e.entry_id for e in entries] == list(range(expected["entries"]))
        assert sum(len(e.data) for e in entries) == expected["size"]
        assert messages_of(m) == expected["messages"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_entry_is_read_from_the_nearest_indexed_key(kind: str) -> None:
    directory, expected = golden(kind)
    with MapFileLedger(directory, expected["ledger_id"]) as m:
        keys, _ = m.index()
        whole = {e.entry_id: e.data for e in m.read_entries()}
        for entry_id in (0, 126, 127, 128, 200, 255, 300, 304):
            key, _offset = m.start_offset(entry_id)
            assert key <= entry_id and key == max(k for k in keys if k <= entry_id)
            seen = []
            real = m._records

            def counting(offset, real=real, seen=seen):
                for key_rec in real(offset):
                    seen.append(key_rec[0])
                    yield key_rec

            m._records = counting  # type: ignore[method-assign]
            try:
                assert m.read_entry(entry_id) == whole[entry_id]
            finally:
                m._records = real  # type: ignore[method-assign]
            # no scan from the start: only the records from the indexed key on
            assert seen[0] >= key if kind == "record" else seen[0] <= key
            if kind == "record":
                assert len(seen) <= entry_id - key + 1
        if kind == "record":
            assert keys[:3] == [-1, 127, 255]  # every 128 keys (io.map.index.interval)


def test_a_range_reads_only_its_entries() -> None:
    directory, expected = golden("record")
    with MapFileLedger(directory, expected["ledger_id"]) as m:
        got = messages_of(m, 250, 260)
        assert got == [
            x for x in expected["messages"] if 250 <= int(x["message_id"].split(":")[1]) <= 260
        ]
        with pytest.raises(NotFoundError):
            m.read_entry(305)


# -- damage -------------------------------------------------------------------------------


def copy(tmp_path: Path, kind: str) -> tuple[Path, dict]:
    directory, expected = golden(kind)
    dst = tmp_path / directory.name
    shutil.copytree(directory, dst)
    return dst, expected


@pytest.mark.parametrize("kind", KINDS)
def test_a_flipped_byte_is_a_finding_on_the_entries_it_affects(tmp_path, kind) -> None:
    directory, expected = copy(tmp_path, kind)
    data = bytearray((directory / "data").read_bytes())
    with MapFileLedger(directory, expected["ledger_id"]) as m:
        _key, at = m.start_offset(200)
    # past the first 512-byte checksum chunk, which also covers the file's header (a
    # damaged header makes the whole file unreadable: one error for the ledger)
    data[at + 1000] ^= 0xFF
    (directory / "data").write_bytes(bytes(data))
    with MapFileLedger(directory, expected["ledger_id"]) as m:
        with pytest.raises(ChecksumMismatch):
            list(m.read_entries(200, 210))
        # the last entry as the managed ledger's LedgerInfo says (the embedded metadata
        # may be in the damaged block)
        out = list(m.read_entries(0, expected["entries"] - 1, keep_going=True))
        assert [e.entry_id for e in out] == list(range(expected["entries"]))
        bad = [e.entry_id for e in out if e.error]
        assert bad and all("CRC32" in e.error for e in out if e.error)
        good = [e for e in out if not e.error]
        assert bad == list(range(bad[0], bad[-1] + 1))
        if kind == "record":
            # lost: from the damaged record to the next indexed key the read can resume
            # at (the CRC chunk may straddle an indexed record: then to the one after)
            keys, _ = m.index()
            assert bad[-1] + 1 in keys and bad[0] <= 200 - 128 + 128
            assert len(good) >= expected["entries"] - 2 * 128
        else:
            # the ledger's 305 entries are one block: the block is lost whole
            assert len(bad) == expected["entries"]
    # without the .crc side file the damage is still found (zlib, or Pulsar's checksum)
    (directory / ".data.crc").unlink()
    with MapFileLedger(directory, expected["ledger_id"]) as m:
        out = list(m.read_entries(keep_going=True))
        findings = [e for e in out if e.error] + [
            e
            for e in out
            if not e.error and not decode_entry(e.data, decode_options(), (0, e.entry_id)).ok
        ]
        assert findings


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda b: b[:-7], id="truncated"),
        pytest.param(lambda b: b"SEX" + b[3:], id="wrong-magic"),
        pytest.param(lambda b: b[:3] + b"\x05" + b[4:], id="wrong-version"),
        pytest.param(lambda b: b[:200], id="cut-short"),
    ],
)
def test_bad_data_files_are_one_line_errors(tmp_path, mutate) -> None:
    directory, expected = copy(tmp_path, "block")
    (directory / ".data.crc").unlink()
    (directory / "data").write_bytes(mutate((directory / "data").read_bytes()))
    with pytest.raises(LedgerctlError) as err, MapFileLedger(directory, expected["ledger_id"]) as m:
        list(m.read_entries())
    assert "\n" not in err.value.one_line()
    assert not isinstance(err.value, NotFoundError) or "entry" in str(err.value)


def test_an_index_pointing_outside_the_data_is_refused(tmp_path) -> None:
    directory, expected = copy(tmp_path, "record")
    (directory / ".index.crc").unlink()
    (directory / ".data.crc").unlink()
    size = (directory / "data").stat().st_size
    bad_index, _ = seqfile_writer.write(
        [
            (seqfile_writer.long_key(-1), seqfile_writer.long_key(138)),
            (seqfile_writer.long_key(5), seqfile_writer.long_key(size + 10)),
        ],
        "BLOCK",
        value_class=seqfile_writer.LONG,
    )
    (directory / "index").write_bytes(bad_index)
    with MapFileLedger(directory, expected["ledger_id"]) as m:
        with pytest.raises(CorruptEntryError, match="an offset inside the data file"):
            m.read_entry(7)


def test_missing_directory_or_file_is_one_line(tmp_path) -> None:
    with pytest.raises(NotFoundError, match="missing directory"):
        MapFileLedger(tmp_path / "nothing", 1)
    (tmp_path / "x").mkdir()
    with pytest.raises(NotFoundError, match="no such file"):
        MapFileLedger(tmp_path / "x", 1)


def test_a_claimed_length_of_2_to_the_40_allocates_nothing() -> None:
    # a block whose keys buffer claims 2^40 compressed bytes
    sync = bytes(16)
    head = seqfile_writer.header(seqfile_writer.LONG, seqfile_writer.BYTES, "BLOCK", sync)
    block = struct.pack(">i", -1) + sync + write_vlong(1)
    block += write_vlong(2**40) + zlib.compress(b"\x08")
    with pytest.raises(CorruptEntryError, match="bytes left"):
        list(SequenceFile(head + block, "t").records())
    # a RECORD record of 2^31 - 1 bytes, and a VInt record count of 2^40 with small buffers
    head = seqfile_writer.header(seqfile_writer.LONG, seqfile_writer.BYTES, "RECORD", sync)
    with pytest.raises(CorruptEntryError):
        list(SequenceFile(head + struct.pack(">ii", 2**31 - 1, 8), "t").records())
    head = seqfile_writer.header(seqfile_writer.LONG, seqfile_writer.BYTES, "BLOCK", sync)
    block = struct.pack(">i", -1) + sync + write_vlong(2**40)
    for part in (b"\x08", b"\x00" * 8, b"\x05", b"\x00\x00\x00\x01z"):
        packed = zlib.compress(part)
        block += write_vlong(len(packed)) + packed
    with pytest.raises(CorruptEntryError):
        list(SequenceFile(head + block, "t").records())
    # a value inflating past one frame (a zlib bomb) stops at the limit
    bomb = zlib.compress(b"\x00" * (seqfile.record_limit() + 100))
    head = seqfile_writer.header(seqfile_writer.LONG, seqfile_writer.BYTES, "RECORD", sync)
    rec = struct.pack(">ii", 8 + len(bomb), 8) + b"\x00" * 8 + bomb
    with pytest.raises(CorruptEntryError, match="at most"):
        list(SequenceFile(head + rec, "t").records())


def test_other_codecs_are_refused_in_one_line() -> None:
    raw = (
        b"SEQ\x06"
        + seqfile_writer.text(seqfile_writer.LONG)
        + seqfile_writer.text(seqfile_writer.BYTES)
        + b"\x01\x01"
        + seqfile_writer.text("org.apache.hadoop.io.compress.SnappyCodec")
        + struct.pack(">i", 0)
        + bytes(16)
    )
    with pytest.raises(UnsupportedCodec, match="BlockCompressorStream") as err:
        SequenceFile(raw, "data")
    assert err.value.exit_code == 1


def test_only_file_urls_are_read() -> None:
    assert local_path("file:///var/offload") == Path("/var/offload")
    assert local_path("/var/offload") == Path("/var/offload")
    for url in ("hdfs://namenode:8020/offload", "s3a://bucket/x", "file://host/x"):
        with pytest.raises(UnsupportedLocation) as err:
            local_path(url)
        assert err.value.exit_code == 2
    with pytest.raises(UnsupportedLocation, match="HDFS client"):
        local_path("hdfs://namenode:8020/offload")


# -- properties ---------------------------------------------------------------------------

records_st = st.lists(
    st.tuples(st.binary(max_size=40), st.binary(max_size=300)), min_size=0, max_size=40
)


@given(
    records=records_st,
    compression=st.sampled_from(["NONE", "RECORD", "BLOCK"]),
    breaks=st.sets(st.integers(0, 40), max_size=6),
    sync=st.binary(min_size=16, max_size=16),
)
def test_sequence_file_round_trip(records, compression, breaks, sync) -> None:
    data, positions = seqfile_writer.write(records, compression, sync, breaks=breaks)
    sf = SequenceFile(data, "t")
    assert sf.header.compression == compression and sf.header.sync == sync
    assert [(r.key, r.value) for r in sf.records()] == records
    for i, pos in enumerate(positions):
        # reading from the position a record was appended at gives that record (or, in a
        # block, its block's first) first
        first = next(iter(sf.records(pos)))
        assert (first.key, first.value) in records[: i + 1]


@given(st.integers(-(2**63), 2**63 - 1))
def test_vlong_round_trip(value) -> None:
    raw = seqfile.write_vlong(value)
    cur = seqfile._Cursor(memoryview(raw), 0, len(raw), "t")
    assert cur.vlong("v") == value and cur.pos == len(raw)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(
    entries=st.dictionaries(st.integers(0, 600), st.binary(max_size=64), max_size=300),
    compression=st.sampled_from(["NONE", "RECORD", "BLOCK"]),
    interval=st.integers(1, 130),
    every=st.integers(1, 50),
    wanted=st.integers(0, 600),
)
def test_mapfile_random_access_round_trip(
    tmp_path_factory, entries, compression, interval, every, wanted
) -> None:
    entries = {-1: b"", **entries}
    keys = sorted(entries)
    breaks = set(range(every, len(keys), every))
    data, index = seqfile_writer.mapfile(entries, compression, interval, breaks=breaks)
    directory = tmp_path_factory.mktemp("mapfile") / "1-x"
    directory.mkdir()
    (directory / "data").write_bytes(data)
    (directory / "index").write_bytes(index)
    with MapFileLedger(directory, 1) as m:
        if wanted in entries:
            assert m.read_entry(wanted) == entries[wanted]
        else:
            with pytest.raises(NotFoundError):
                m.read_entry(wanted)
        got = list(m.read_entries(0, None, keep_going=True))
        present = [e for e in got if e.error is None]
        assert {e.entry_id: e.data for e in present} == {k: v for k, v in entries.items() if k >= 0}


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=150)
@given(
    kind=st.sampled_from(KINDS),
    member=st.sampled_from(["data", "index"]),
    flips=st.lists(st.tuples(st.integers(0, 2**20), st.integers(1, 255)), max_size=4),
    cut=st.one_of(st.none(), st.integers(0, 2**20)),
)
def test_mutated_real_files_never_crash(tmp_path_factory, kind, member, flips, cut) -> None:
    src, expected = golden(kind)
    directory = tmp_path_factory.mktemp("fuzz") / src.name
    shutil.copytree(src, directory)
    (directory / f".{member}.crc").unlink()  # reach the parsers, not only the checksums
    raw = bytearray((directory / member).read_bytes())
    for at, xor in flips:
        raw[at % len(raw)] ^= xor
    if cut is not None:
        del raw[cut % (len(raw) + 1) :]
    (directory / member).write_bytes(bytes(raw))
    try:
        with MapFileLedger(directory, expected["ledger_id"]) as m:
            for entry in m.read_entries(keep_going=True):
                if entry.error is None:
                    decode_entry(entry.data, decode_options(), (1, entry.entry_id))
                else:
                    assert "\n" not in entry.error
    except LedgerctlError as exc:
        assert "\n" not in exc.one_line()


def test_a_block_buffer_must_end_with_its_records() -> None:
    """A block's values buffer holding more than its value lengths say, or a zlib stream
    whose Adler-32 is wrong, is damage: each buffer is read to its end."""
    sync = bytes(range(16))

    def block(values: bytes, damage_adler: bool = False) -> bytes:
        out = seqfile_writer.header(seqfile_writer.LONG, seqfile_writer.BYTES, "BLOCK", sync)
        out += struct.pack(">i", -1) + sync + write_vlong(1)
        for i, part in enumerate((b"\x08", b"k" * 8, b"\x05", values)):
            packed = zlib.compress(part)
            if i == 3 and damage_adler:
                packed = packed[:-1] + bytes([packed[-1] ^ 1])
            out += write_vlong(len(packed)) + packed
        return out

    value = b"\x00\x00\x00\x01v"
    assert [r.value for r in SequenceFile(block(value), "t").records()] == [value]
    with pytest.raises(CorruptEntryError, match="more bytes than its records"):
        list(SequenceFile(block(value + b"extra" * 1000), "t").records())
    with pytest.raises(CorruptEntryError, match="values"):
        list(SequenceFile(block(value, damage_adler=True), "t").records())


def test_keys_out_of_order_and_a_short_file_are_findings(tmp_path) -> None:
    directory = tmp_path / "1-x"
    directory.mkdir()
    records = [
        (seqfile_writer.long_key(k), seqfile_writer.bytes_value(b"e%d" % k))
        for k in (-1, 0, 1, 5, 3)
    ]
    data, _ = seqfile_writer.write(records, "RECORD")
    index, _ = seqfile_writer.write(
        [
            (
                seqfile_writer.long_key(-1),
                seqfile_writer.long_key(
                    len(
                        seqfile_writer.header(
                            seqfile_writer.LONG, seqfile_writer.BYTES, "RECORD", bytes(range(16))
                        )
                    )
                ),
            )
        ],
        "BLOCK",
        value_class=seqfile_writer.LONG,
    )
    (directory / "data").write_bytes(data)
    (directory / "index").write_bytes(index)
    with MapFileLedger(directory, 1) as m:
        with pytest.raises(CorruptEntryError, match="keys ascend"):
            list(m.read_entries(5, 9))
        out = list(m.read_entries(0, 9, keep_going=True))
        assert [e.entry_id for e in out if e.error is None] == [0, 1, 5]
        assert [e.entry_id for e in out] == list(range(10))
    # a file that ends before the ledger's last entry: the rest is missing, not "done"
    (directory / "data").write_bytes(seqfile_writer.write(records[:3], "RECORD")[0])
    with MapFileLedger(directory, 1) as m:
        with pytest.raises(NotFoundError, match="entry 2 is not in the offloaded data"):
            list(m.read_entries(0, 4))
        out = list(m.read_entries(0, 4, keep_going=True))
        assert [(e.entry_id, e.error is None) for e in out] == [
            (0, True),
            (1, True),
            (2, False),
            (3, False),
            (4, False),
        ]
