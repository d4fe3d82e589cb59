"""BookieStore.read_heads: the native scan of DbLedgerStorage ledgers against the Python
path (read_entries + decode_head), entry by entry, on clean, odd and damaged data."""

from __future__ import annotations

import random
import shutil
import struct
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders import bookkeeper, compacted, entrylog
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
from pulsarctl_py.decoders.checksums import DigestType, crc32c
from pulsarctl_py.decoders.entry import DecodeOptions, Depth, Outer
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.heads import EntryHead, decode_head
from pulsarctl_py.decoders.pulsar import BrokerEntryMetadataLayer, build_entry
from pulsarctl_py.proto import pulsar_api_pb2 as api
from pulsarctl_py.stores.bookie import heads as heads_module
from pulsarctl_py.stores.bookie import open_bookie, write_db_ledger_dir
from pulsarctl_py.stores.bookie import store as store_module
from tests.support.bookie_data import LIVE_DATA, digest_type, live_manifest

CRC = DigestType.CRC32C
OPTIONS = DecodeOptions(outer=Outer.BOOKIE_ENTRY, digest_type=CRC, depth=Depth.ENTRY)
native = heads_module.native
needs_native = pytest.mark.skipif(native is None, reason="native module not built")


def pulsar_entry(rng: random.Random, entry_id: int) -> bytes:
    """A stored Pulsar entry of one of the shapes a bookie holds, chosen by ``rng``."""
    md = api.MessageMetadata(producer_name="p", sequence_id=entry_id, publish_time=1000 + entry_id)
    body = build_entry(md, rng.randbytes(rng.randint(0, 60)), checksum=rng.random() < 0.9)
    shape = rng.random()
    if shape < 0.6:
        bem = api.BrokerEntryMetadata()
        if rng.random() < 0.9:
            bem.broker_timestamp = 2000 + entry_id
        if rng.random() < 0.9:
            bem.index = 10 * entry_id + 9
        if rng.random() < 0.05:
            bem.index = 2**64 - 1
        body = BrokerEntryMetadataLayer.build(bem) + body
    elif shape < 0.65:
        body = compacted.build(api.MessageIdData(ledgerId=3, entryId=entry_id), body)
    elif shape < 0.7:
        body = rng.randbytes(rng.randint(0, 3))  # too short for anything
    return body


def ledger(ledger_id: int, count: int, seed: int, big: int = 0) -> Iterator[bytes]:
    rng = random.Random(seed)
    length = 0
    for entry_id in range(count):
        payload = pulsar_entry(rng, entry_id)
        if big and entry_id % big == big - 1:
            payload = BrokerEntryMetadataLayer.build(api.BrokerEntryMetadata(index=1)) + bytes(3000)
        length += len(payload)
        header = BookieEntryHeader(ledger_id, entry_id, entry_id - 1, length)
        yield bookkeeper.build(header, payload, CRC)


def write(path: Path, ledgers: dict[int, int], seed: int = 1, big: int = 0, **kw: Any) -> Path:
    entries = [e for lid, n in ledgers.items() for e in ledger(lid, n, seed + lid, big)]
    write_db_ledger_dir(path, entries, bytes(20), **kw)
    return path


def python_heads(path: Path, ledger_id: int, first: int = 0, last: int | None = None) -> Any:
    """The reference: every stored entry through read_entries and the Python decoder."""
    with open_bookie(path) as store:
        try:
            return [
                decode_head(s.data, OPTIONS, (ledger_id, s.entry_id))
                for s in store.read_entries(ledger_id, first, last)
            ]
        except LedgerctlError as exc:
            return str(exc)


def fast_heads(path: Path, ledger_id: int, first: int = 0, last: int | None = None) -> Any:
    with open_bookie(path) as store:
        out: list[EntryHead] = []
        try:
            for head in store.read_heads(ledger_id, first, last, OPTIONS):
                out.append(head)
        except LedgerctlError as exc:
            return str(exc)
        return out


@pytest.fixture(scope="module")
def ledgers_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # three ledgers, entry logs rotating every 40 KiB so one ledger spans several logs
    return write(
        tmp_path_factory.mktemp("heads") / "current",
        {3: 700, 4: 5, 9: 300},
        log_size_limit=40_000,
    )


@needs_native
@pytest.mark.parametrize("ledger_id", [3, 4, 9, 5])
def test_heads_equal_the_python_path(ledgers_dir: Path, ledger_id: int) -> None:
    expected = python_heads(ledgers_dir, ledger_id)
    assert fast_heads(ledgers_dir, ledger_id) == expected
    assert isinstance(expected, list)
    if ledger_id != 5:
        assert len(expected) > 0 and any(h.broker_metadata for h in expected)
        assert any(not h.broker_metadata for h in expected)


@needs_native
@pytest.mark.parametrize(("first", "last"), [(0, 0), (10, 20), (699, None), (650, 10_000), (5, 4)])
def test_ranges(ledgers_dir: Path, first: int, last: int | None) -> None:
    assert fast_heads(ledgers_dir, 3, first, last) == python_heads(ledgers_dir, 3, first, last)


@pytest.fixture
def python_path_calls(monkeypatch: Any) -> list[int]:
    """One item per entry the native scan leaves to the Python path."""
    calls: list[int] = []
    python_head = heads_module._python_head

    def counted(*args: Any) -> Any:
        calls.append(1)
        return python_head(*args)

    monkeypatch.setattr(heads_module, "_python_head", counted)
    return calls


@needs_native
def test_the_native_scanner_does_the_work(ledgers_dir: Path, python_path_calls: list[int]) -> None:
    """Most heads come from the native scanner; only odd entries take the Python path."""
    heads = fast_heads(ledgers_dir, 3)
    assert len(heads) == 700
    assert 0 < len(python_path_calls) < 200  # compacted framing, too-short payloads (~10%)


@needs_native
def test_small_windows_and_entries_larger_than_a_window(tmp_path: Path, monkeypatch: Any) -> None:
    path = write(tmp_path / "current", {6: 120}, big=7)
    expected = python_heads(path, 6)
    monkeypatch.setattr(heads_module, "WINDOW", 512)
    assert fast_heads(path, 6) == expected
    monkeypatch.setattr(heads_module, "MAX_WINDOW_ENTRY", 1024)  # big entries: Python path
    assert fast_heads(path, 6) == expected


def test_without_the_native_module(ledgers_dir: Path, monkeypatch: Any) -> None:
    expected = python_heads(ledgers_dir, 9)
    monkeypatch.setattr(store_module, "native", None)
    assert fast_heads(ledgers_dir, 9) == expected


@needs_native
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_damaged_logs_read_the_same(ledgers_dir: Path, tmp_path_factory: Any, data: Any) -> None:
    """Flipped bytes anywhere in an entry log: the same heads, or the same error; read
    with their bytes and no digest type given, too."""
    path, ledger_id = damaged_copy(ledgers_dir, tmp_path_factory, data)
    assert fast_heads(path, ledger_id) == python_heads(path, ledger_id)
    got = heads_with_data(path, ledger_id, UNKNOWN)
    assert got == python_heads_with_data(path, ledger_id, UNKNOWN)


def damaged_copy(ledgers_dir: Path, tmp_path_factory: Any, data: Any) -> tuple[Path, int]:
    """A copy of ``ledgers_dir`` with 1-4 bits flipped in one entry log; a ledger to read."""
    path = tmp_path_factory.mktemp("damaged") / "current"
    shutil.copytree(ledgers_dir, path)
    logs = sorted(p for p in path.iterdir() if entrylog.parse_log_file_name(p.name) is not None)
    log = data.draw(st.sampled_from(logs))
    raw = bytearray(log.read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(entrylog.DIRECT_HEADER_SIZE, len(raw) - 1))
        raw[at] ^= 1 << data.draw(st.integers(0, 7))
    log.write_bytes(bytes(raw))
    return path, data.draw(st.sampled_from([3, 9]))


def test_real_bookie_ledgers(tmp_path: Path) -> None:
    """BookKeeper-written entries (not Pulsar entries): every digest type, the same heads."""
    for spec in live_manifest()["ledgers"]:
        kind = digest_type(spec["digest_type"])
        options = DecodeOptions(
            outer=Outer.BOOKIE_ENTRY, digest_type=kind, password=b"secret", depth=Depth.ENTRY
        )
        lid = spec["ledger_id"]
        with open_bookie([LIVE_DATA]) as store:
            heads = list(store.read_heads(lid, options=options))
            expected = [
                decode_head(s.data, options, (lid, s.entry_id)) for s in store.read_entries(lid)
            ]
        assert heads == expected
        assert [h.entry_id for h in heads] == [e["entry_id"] for e in spec["entries"]]
        assert all(h.digest_ok for h in heads)
        if kind is DigestType.HMAC:  # another password: no MAC matches, the same heads
            wrong = replace(options, password=b"wrong")
            with open_bookie([LIVE_DATA]) as store:
                heads = list(store.read_heads(lid, options=wrong))
                expected = [
                    decode_head(s.data, wrong, (lid, s.entry_id)) for s in store.read_entries(lid)
                ]
            assert heads == expected and not any(h.digest_ok for h in heads)


UNKNOWN = DecodeOptions(outer=Outer.BOOKIE_ENTRY, digest_type=None, depth=Depth.ENTRY)


def heads_with_data(path: Path, ledger_id: int, options: DecodeOptions) -> Any:
    with open_bookie(path) as store:
        try:
            return [
                (h, bytes(d)) for h, d in store.read_heads_with_data(ledger_id, options=options)
            ]
        except LedgerctlError as exc:
            return str(exc)


def python_heads_with_data(path: Path, ledger_id: int, options: DecodeOptions) -> Any:
    with open_bookie(path) as store:
        try:
            return [
                (decode_head(s.data, options, (ledger_id, s.entry_id)), bytes(s.data))
                for s in store.read_entries(ledger_id)
            ]
        except LedgerctlError as exc:
            return str(exc)


@needs_native
@pytest.mark.parametrize("options", [OPTIONS, UNKNOWN], ids=["crc32c", "digest-unknown"])
@pytest.mark.parametrize("ledger_id", [3, 9])
def test_heads_with_their_bytes(
    ledgers_dir: Path,
    ledger_id: int,
    options: DecodeOptions,
    monkeypatch: Any,
    python_path_calls: list[int],
) -> None:
    """Each head with the stored bytes read_entries gives; a digest type not known from
    metadata is detected per entry, the native scanner still doing most of the work."""
    got = heads_with_data(ledgers_dir, ledger_id, options)
    assert got == python_heads_with_data(ledgers_dir, ledger_id, options)
    assert len(got) > 100 and 0 < len(python_path_calls) < len(got) // 4
    monkeypatch.setattr(heads_module, "WINDOW", 512)  # many windows, entries cut from each
    assert heads_with_data(ledgers_dir, ledger_id, options) == got


def test_real_bookie_ledgers_digest_unknown() -> None:
    """BookKeeper-written ledgers of every digest type, read with no digest type given."""
    options = DecodeOptions(
        outer=Outer.BOOKIE_ENTRY, digest_type=None, password=b"secret", depth=Depth.ENTRY
    )
    for spec in live_manifest()["ledgers"]:
        lid = spec["ledger_id"]
        assert heads_with_data(LIVE_DATA, lid, options) == python_heads_with_data(
            LIVE_DATA, lid, options
        )


# -- one entry at a time: implausible headers, prefixes in any encoding -----------------------

#: lengths and LACs a damaged header may hold (the entry id is added to the LACs)
ODD_LACS = [-1, -1, -1, 0, 1, -2, 2**62]
ODD_LENGTHS = [100, 100, 100, 0, -1, -(2**63)]


@st.composite
def odd_entries(
    draw: st.DrawFn,
    ledger_id: int,
    entry_id: int,
    digest: DigestType = CRC,
    password: bytes | None = None,
) -> bytes:
    """A stored entry with a valid digest (a MAC: with ``password``), so that the damage is
    met past it: a header
    whose LAC or length may be implausible, and a broker entry metadata, checksum and
    message metadata written in any encoding (overlong or refused tags, lengths and
    varints: tests/support/protowire.py)."""
    from tests.support.protowire import reencoded

    md = api.MessageMetadata(producer_name="p", sequence_id=entry_id, publish_time=1000 + entry_id)
    if draw(st.booleans()):
        md.num_messages_in_batch = draw(st.integers(1, 5))
    if draw(st.integers(0, 3)) == 0:
        md.properties.add(key="k", value="v")
    metadata = draw(reencoded(md.SerializeToString(), {4: {}}))
    rest = struct.pack(">I", len(metadata)) + metadata + draw(st.binary(max_size=6))
    body = rest
    if draw(st.integers(0, 4)):
        body = b"\x0e\x01" + struct.pack(">I", crc32c(rest)) + rest
    if draw(st.booleans()):
        bem = api.BrokerEntryMetadata()
        if draw(st.integers(0, 3)):
            bem.broker_timestamp = draw(st.integers(0, 2**64 - 1))
        if draw(st.integers(0, 3)):
            bem.index = draw(st.integers(0, 2**64 - 1))
        raw = draw(reencoded(bem.SerializeToString()))
        body = b"\x0e\x02" + struct.pack(">I", len(raw)) + raw + body
    lac = draw(st.sampled_from(ODD_LACS))
    lac = lac + entry_id - 1 if lac in (0, 1) else lac
    length = draw(st.sampled_from(ODD_LENGTHS))
    header = BookieEntryHeader(ledger_id, entry_id, lac, length)
    return bookkeeper.build(header, body, digest, password)


def in_memory_log(ledger_id: int, entries: list[bytes]) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """``entries`` as one entry log's bytes (log 0, from offset 0) and the locations index
    items that name them."""
    from pulsarctl_py.stores.bookie.rocks import LOCATION_VALUE, location_key

    window = bytearray()
    items = []
    for entry_id, data in enumerate(entries):
        window += struct.pack(">I", len(data))
        items.append((location_key(ledger_id, entry_id), LOCATION_VALUE.pack(len(window))))
        window += data
    return items, bytes(window)


@needs_native
@settings(max_examples=400, deadline=None)
@given(ledger_id=st.sampled_from([3, 2**40 + 1, -5]), data=st.data())
def test_scan_heads_takes_only_what_decode_head_reads_clean(ledger_id: int, data: Any) -> None:
    """Every head the native scanner makes is the one decode_head makes of that entry, and
    has no problem: an implausible header (LAC past the entry, a negative length or ledger
    id) or a prefix protobuf refuses stops it (the Python path then reads the entry)."""
    entries = [data.draw(odd_entries(ledger_id, e)) for e in range(data.draw(st.integers(1, 4)))]
    items, window = in_memory_log(ledger_id, entries)
    out: list[EntryHead] = []
    stop, status = native.scan_heads(items, 0, ledger_id, 0, window, 0, out)
    assert stop == len(out) and status in (native.HEADS_END, native.HEADS_IRREGULAR)
    for entry_id, head in enumerate(out):
        assert head == decode_head(entries[entry_id], OPTIONS, (ledger_id, entry_id))
        assert not head.problems


@needs_native
def test_scan_heads_stops_at_an_implausible_header() -> None:
    """The entries the adversarial run found taken as clean: LAC past the entry id, a
    negative length, a negative ledger id. The Python decoder calls each damaged."""
    body = BrokerEntryMetadataLayer.build(api.BrokerEntryMetadata(index=1)) + b"\x0e\x01"
    for ledger_id, lac, length in [(3, 5, 10), (3, 0, -1), (-3, 0, 10)]:
        entry = bookkeeper.build(BookieEntryHeader(ledger_id, 0, lac, length), body, CRC)
        assert decode_head(entry, OPTIONS, (ledger_id, 0)).problems
        items, window = in_memory_log(ledger_id, [entry])
        out: list[EntryHead] = []
        assert native.scan_heads(items, 0, ledger_id, 0, window, 0, out) == (
            0,
            native.HEADS_IRREGULAR,
        )
