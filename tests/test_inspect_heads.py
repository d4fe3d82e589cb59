"""`inspect --depth entry` from entry heads writes what the general path writes.

The fast path (pulsarctl_py/inspect_heads.py: ``BookieStore.read_heads_with_data``, the
filters decided on heads, JSON lines built from heads) against the general one
(``LedgerSource.entries`` + ``decode_entry`` + ``entry_json``), through the command's own
output function, byte for byte on stdout and stderr, with the same summary and the same
error: on the demo (with its metadata, and as a bare bookie directory whose digest types
must be detected), the verify world and its damaged variants, odd entry shapes (broker
entry metadata variants, compacted framing, payloads too short for anything, a CRC32
ledger with no metadata), the BookKeeper-written ledgers of every digest type, every
byte damage of tests/support/damage.py, and entry logs with flipped bits.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pulsarctl_py import inspect_heads
from pulsarctl_py.commands.inspect import _show
from pulsarctl_py.decoders import Depth, bookkeeper, entrylog
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
from pulsarctl_py.decoders.checksums import DigestType, crc32c, mac_key, master_key
from pulsarctl_py.decoders.pulsar import BrokerEntryMetadataLayer, build_entry
from pulsarctl_py.decoders.speedups import native
from pulsarctl_py.demo import create_demo
from pulsarctl_py.errors import LedgerctlError
from pulsarctl_py.inspect_request import InspectRequest, Summary
from pulsarctl_py.ledgers import LedgerSource
from pulsarctl_py.positions import Position
from pulsarctl_py.proto import pulsar_api_pb2 as api
from pulsarctl_py.render import OutputFormat
from pulsarctl_py.stores.bookie import open_bookie, write_db_ledger_dir
from pulsarctl_py.stores.metadata import open_metadata_store
from tests.stores.bookie.test_heads import pulsar_entry
from tests.support import damage
from tests.support.bookie_data import LIVE_DATA
from tests.support.layouts import LAYOUTS, write_layout
from tests.support.verify_world import build_world


@contextlib.contextmanager
def opened(metadata_url: str | None, bookie_dirs: list[Path]) -> Iterator[LedgerSource]:
    store = open_metadata_store(metadata_url) if metadata_url else None
    try:
        bookie = open_bookie(bookie_dirs)
        try:
            yield LedgerSource(store, bookie, b"secret" if store is None else None)
        finally:
            bookie.close()
    finally:
        if store is not None:
            store.close()


def shown(
    capsys: pytest.CaptureFixture[str],
    source: LedgerSource,
    request: InspectRequest,
    fmt: OutputFormat,
    fast: bool,
    with_hash: bool = False,
) -> tuple[str, str, Any, str | None]:
    """What inspect writes (stdout, stderr), its summary and its error, by one path."""
    summary = Summary()
    error = None
    capsys.readouterr()
    try:
        _show(source, request, summary, fmt, False, fast=fast, with_hash=with_hash)
    except LedgerctlError as exc:
        error = f"{type(exc).__name__}: {exc}"
    out = capsys.readouterr()
    return (
        _unshadowed(out.out),
        _unshadowed(out.err),
        _unshadowed(json.dumps(summary.to_json())),
        None if error is None else _unshadowed(error),
    )


_SHADOW = re.compile(r"/[^\s'\"]*ledgerctl-rocksdb-[^/\s'\"]+")


def _unshadowed(text: str) -> str:
    """``text`` without the names of RocksDB shadow directories (one per open)."""
    return _SHADOW.sub("SHADOW", text) if "ledgerctl-rocksdb-" in text else text


def timestamps(source: LedgerSource, ledger_id: int) -> tuple[list[int], int | None]:
    """The broker timestamps of a ledger's entries by the general path, its last entry."""
    found = []
    try:
        view = source.ledger(ledger_id)
        if view.last_stored is None:
            return [], None
        for entry in source.entries(view, 0, view.last_stored, depth=Depth.ENTRY, keep_going=True):
            if entry.entry_timestamp is not None:
                found.append(entry.entry_timestamp)
    except LedgerctlError:
        return [], None
    return found, view.last_stored


def requests(ledger_id: int, times: list[int], last: int | None) -> list[InspectRequest]:
    """inspect --depth entry with each filter and range option, on one ledger; and the
    filters on broker entry metadata at the other depths."""
    base = {"ledger_id": ledger_id, "depth": Depth.ENTRY}
    out = [
        InspectRequest(**base),
        InspectRequest(**base, broker_metadata=True),
        InspectRequest(**base, broker_metadata=False),
        InspectRequest(**base, last_n=2),
        InspectRequest(**base, limit=2),
    ]
    if last is not None and last >= 2:
        out.append(
            InspectRequest(**base, start=Position(ledger_id, 1), end=Position(ledger_id, last - 1))
        )
    deeper = [{"ledger_id": ledger_id, "depth": d} for d in (Depth.METADATA, Depth.MESSAGES)]
    out += [InspectRequest(**b, broker_metadata=False) for b in deeper]
    if times:
        ordered = sorted(times)
        low, high = ordered[len(ordered) // 3], ordered[(2 * len(ordered)) // 3]
        for b in [base, *deeper]:
            out += [
                InspectRequest(**b, since=low),
                InspectRequest(**b, until=high),
                InspectRequest(**b, since=low, until=high, limit=3),
                InspectRequest(**b, since=low, broker_metadata=True),
            ]
    return out


def assert_same_output(
    capsys: pytest.CaptureFixture[str],
    world: tuple[str | None, list[Path]],
    open_source: Callable[[], AbstractContextManager[LedgerSource]] | None = None,
    ledgers: list[int] | None = None,
) -> int:
    """Both paths write the same on every ledger of ``world`` (or ``ledgers``, read from
    the sources ``open_source`` opens); how many lines compared.

    Each path has a source of its own, opened once: what one path finds in the storage
    (the store's problems) cannot show in the other's output.
    """
    compared = 0
    opener = open_source or (lambda: opened(*world))
    try:
        with opener() as fast_source, opener() as general_source:
            assert general_source.bookie is not None
            for ledger_id in ledgers or sorted(general_source.bookie.ledgers()):
                times, last = timestamps(general_source, ledger_id)
                cases = [(r, OutputFormat.JSONL, False) for r in requests(ledger_id, times, last)]
                whole = InspectRequest(ledger_id=ledger_id, depth=Depth.ENTRY)
                cases += [
                    (whole, OutputFormat.JSONL, True),  # --hash: payload_sha256 in the lines
                    (whole, OutputFormat.JSON, False),
                    (whole, OutputFormat.TABLE, False),
                ]
                for request, fmt, with_hash in cases:
                    fast = shown(capsys, fast_source, request, fmt, True, with_hash)
                    general = shown(capsys, general_source, request, fmt, False, with_hash)
                    assert fast == general, (ledger_id, request, fmt)
                    compared += fast[0].count("\n")
    except LedgerctlError:
        pass  # the store cannot be opened: no path reads anything
    return compared


# -- worlds ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("heads-demo") / "demo"
    create_demo(root)
    return root


def demo_world(root: Path, with_metadata: bool = True) -> tuple[str | None, list[Path]]:
    url = f"rocksdb://{root / 'metadata'}" if with_metadata else None
    return url, [root / "bookkeeper"]


@pytest.mark.parametrize("with_metadata", [True, False], ids=["metadata", "bookie-only"])
def test_demo(capsys: pytest.CaptureFixture[str], demo_root: Path, with_metadata: bool) -> None:
    assert assert_same_output(capsys, demo_world(demo_root, with_metadata)) > 50


def test_demo_topic(capsys: pytest.CaptureFixture[str], demo_root: Path) -> None:
    with (
        opened(*demo_world(demo_root)) as fast_source,
        opened(*demo_world(demo_root)) as general_source,
    ):
        from pulsarctl_py.stores.metadata import list_managed_ledgers

        assert general_source.metadata is not None
        topics = [ref.topic.full_name for ref in list_managed_ledgers(general_source.metadata)]
        assert topics
        for topic in topics:
            for request in (
                InspectRequest(topic=topic, depth=Depth.ENTRY),
                InspectRequest(topic=topic, depth=Depth.ENTRY, last_n=3, limit=2),
            ):
                fast = shown(capsys, fast_source, request, OutputFormat.JSONL, True)
                general = shown(capsys, general_source, request, OutputFormat.JSONL, False)
                assert fast == general, topic


@pytest.mark.parametrize(
    "variant",
    [
        None,
        "entry-corrupt",
        "entry-unreadable",
        "entry-missing",
        "digest-unverified",
        "ledger-missing-storage",
        "ledger-missing-metadata",
        "cursor-ledger-corrupt",
    ],
)
def test_verify_world(capsys: pytest.CaptureFixture[str], tmp_path: Path, variant: str) -> None:
    world = build_world(tmp_path / "world", variant)
    assert assert_same_output(capsys, (world.metadata_url, [world.bookie_dir])) > 0


def _odd_ledgers(current: Path) -> None:
    """Mixed entry shapes (ledger 3), and a CRC32 ledger longer than the probe (ledger 5)."""
    write_db_ledger_dir(current, _odd_entries(), master_key(b""))


def _odd_entries() -> list[bytes]:
    """The entries of :func:`_odd_ledgers`."""
    entries = _shapes(3, DigestType.CRC32C, 300)
    length = 0
    for entry_id in range(inspect_heads.PROBE + 40):
        md = api.MessageMetadata(producer_name="p", sequence_id=entry_id, publish_time=5)
        bem = api.BrokerEntryMetadata(broker_timestamp=100 + entry_id, index=entry_id)
        payload = BrokerEntryMetadataLayer.build(bem) + build_entry(md, b"v", checksum=True)
        if entry_id == 3:  # a CRC32 digest whose bytes 4-5 read as the 0x0e01 magic
            payload = _crc32_looking_like_crc32c(length, md)
        length += len(payload)
        entries.append(
            bookkeeper.build(
                BookieEntryHeader(5, entry_id, entry_id - 1, length), payload, DigestType.CRC32
            )
        )
    return entries + _chunked_ledger(8)


def _shapes(ledger_id: int, kind: DigestType, count: int) -> list[bytes]:
    """Mixed entry shapes (pulsar_entry's, broker entry metadata with a field the scanner
    skips, empty broker entry metadata), digested with ``kind`` (a MAC: empty password)."""
    rng = random.Random(7)
    entries = []
    length = 0
    for entry_id in range(count):
        payload = pulsar_entry(rng, entry_id)
        if entry_id % 17 == 5:  # broker entry metadata with a field the scanner skips
            bem = api.BrokerEntryMetadata(broker_timestamp=10 + entry_id, index=entry_id)
            raw = bem.SerializeToString() + b"\x18\x07"
            payload = b"\x0e\x02" + len(raw).to_bytes(4, "big") + raw + payload[-20:]
        if entry_id % 23 == 7:  # an empty broker entry metadata
            md = api.MessageMetadata(producer_name="p", sequence_id=1, publish_time=5)
            payload = BrokerEntryMetadataLayer.build(api.BrokerEntryMetadata()) + build_entry(
                md, b"x"
            )
        length += len(payload)
        header = BookieEntryHeader(ledger_id, entry_id, entry_id - 1, length)
        entries.append(bookkeeper.build(header, payload, kind, b""))
    return entries


def _crc32_looking_like_crc32c(length: int, md: Any) -> bytes:
    """A payload (no broker entry metadata) for entry 5:3 whose 8-byte CRC32 digest puts
    0x0e 0x01 where a CRC32C entry has its payload: a layout check alone would take it
    for a CRC32C entry with the 0x0e01 checksum."""
    for i in range(1 << 20):
        payload = build_entry(md, i.to_bytes(4, "big"), checksum=True)
        header = BookieEntryHeader(5, 3, 2, length + len(payload))
        if bookkeeper.build(header, payload, DigestType.CRC32)[36:38] == b"\x0e\x01":
            return payload
    raise AssertionError("no such payload")


def _chunked_ledger(ledger_id: int) -> list[bytes]:
    """Chunked messages among plain ones, every entry with broker entry metadata: message
    a in entries 1, 2, 4 (entry 3 a plain message between its chunks), b in 6 and 7, c
    resent from its chunk 0 (entries 8, 9, then 10, 11), d missing its chunk 1 (12, 14).
    Time filters cut through them: a later chunk is kept, an earlier one dropped."""
    plan: list[tuple[str, int, int] | None] = [
        None,
        ("a", 0, 3),
        ("a", 1, 3),
        None,
        ("a", 2, 3),
        None,
        ("b", 0, 2),
        ("b", 1, 2),
        ("c", 0, 2),
        ("c", 0, 2),
        ("c", 1, 2),
        None,
        ("d", 0, 3),
        None,
        ("d", 2, 3),
        None,
    ]
    out = []
    length = 0
    for entry_id, step in enumerate(plan):
        md = api.MessageMetadata(producer_name="p", sequence_id=entry_id, publish_time=50)
        value = f"part-{entry_id}".encode()
        if step is not None:
            uuid, chunk_id, chunks = step
            md.uuid, md.chunk_id, md.num_chunks_from_msg = uuid, chunk_id, chunks
            md.total_chunk_msg_size = len(value) * chunks
        bem = api.BrokerEntryMetadata(broker_timestamp=1000 + entry_id, index=entry_id)
        payload = BrokerEntryMetadataLayer.build(bem) + build_entry(md, value, checksum=True)
        length += len(payload)
        header = BookieEntryHeader(ledger_id, entry_id, entry_id - 1, length)
        out.append(bookkeeper.build(header, payload, DigestType.CRC32C))
    return out


def test_chunks_across_time_filters(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Every --since/--until cut through chunked messages, at every depth: the same
    messages reassembled (or not) and the same chunk problems as the general path."""
    write_db_ledger_dir(tmp_path / "bookie" / "current", _chunked_ledger(8), master_key(b""))
    with (
        opened(None, [tmp_path / "bookie"]) as fast_source,
        opened(None, [tmp_path / "bookie"]) as general_source,
    ):
        assembled = 0
        for since in range(1000, 1017):
            for depth in (Depth.MESSAGES, Depth.METADATA, Depth.ENTRY):
                for until in (None, since + 3):
                    request = InspectRequest(ledger_id=8, depth=depth, since=since, until=until)
                    fast = shown(capsys, fast_source, request, OutputFormat.JSONL, True)
                    general = shown(capsys, general_source, request, OutputFormat.JSONL, False)
                    assert fast == general, request
                    assembled += fast[0].count('"chunks"')
        assert assembled > 0  # some cuts keep a reassembled message


@pytest.mark.parametrize("chunk", [inspect_heads.CHUNK, 3])
def test_odd_shapes(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    chunk: int,
) -> None:
    monkeypatch.setattr(inspect_heads, "CHUNK", chunk)  # lines handed on in lists of 3
    _odd_ledgers(tmp_path / "bookie" / "current")
    assert assert_same_output(capsys, (None, [tmp_path / "bookie"])) > 300


@pytest.mark.skipif(native is None, reason="native module not built")
def test_most_lines_come_from_heads(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast path does its work: regular entries are not decoded; a CRC32 ledger is
    handed to the general path after the probe."""
    _odd_ledgers(tmp_path / "bookie" / "current")
    decoded: list[int] = []
    real = inspect_heads.decode_entry

    def counted(*args: Any) -> Any:
        decoded.append(1)
        return real(*args)

    monkeypatch.setattr(inspect_heads, "decode_entry", counted)
    with opened(None, [tmp_path / "bookie"]) as source:
        request = InspectRequest(ledger_id=3, depth=Depth.ENTRY)
        out, _err, summary, error = shown(capsys, source, request, OutputFormat.JSONL, True)
        assert error is None and json.loads(summary)["entries"] == out.count("\n") == 300
        assert 0 < len(decoded) < 100
        decoded.clear()
        general: list[int] = []
        real_entries = LedgerSource.entries

        def entries(self: LedgerSource, view: Any, first: int, *args: Any, **kw: Any) -> Any:
            general.append(first)
            return real_entries(self, view, first, *args, **kw)

        monkeypatch.setattr(LedgerSource, "entries", entries)
        request = InspectRequest(ledger_id=5, depth=Depth.ENTRY)
        out, _err, summary, error = shown(capsys, source, request, OutputFormat.JSONL, True)
    assert error is None and json.loads(summary)["entries"] == inspect_heads.PROBE + 40
    assert general == [inspect_heads.PROBE - 1]  # the probe's entries, then the general path
    assert len(decoded) == inspect_heads.PROBE - 1


def test_bookkeeper_written_ledgers(capsys: pytest.CaptureFixture[str]) -> None:
    """BookKeeper's own ledgers of every digest type (not Pulsar entries), no metadata."""
    assert assert_same_output(capsys, (None, [LIVE_DATA])) > 0


@pytest.mark.parametrize("name", sorted(damage.BYTES))
def test_damaged_demo(
    capsys: pytest.CaptureFixture[str], demo_root: Path, tmp_path: Path, name: str
) -> None:
    root = tmp_path / "demo"
    shutil.copytree(demo_root, root)
    damage.BYTES[name](root)
    for with_metadata in (True, False):
        assert_same_output(capsys, demo_world(root, with_metadata))


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_flipped_bits(
    capsys: pytest.CaptureFixture[str], tmp_path_factory: Any, demo_root: Path, data: Any
) -> None:
    root = tmp_path_factory.mktemp("flipped") / "demo"
    shutil.copytree(demo_root, root)
    logs = damage.entry_logs(root)
    log = data.draw(st.sampled_from(logs))
    raw = bytearray(log.read_bytes())
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(entrylog.DIRECT_HEADER_SIZE, len(raw) - 1))
        raw[at] ^= 1 << data.draw(st.integers(0, 7))
    log.write_bytes(bytes(raw))
    assert_same_output(capsys, demo_world(root, data.draw(st.booleans())))


def _detected_one_by_one(source: LedgerSource, ledger_id: int) -> list[str]:
    """The reference: every stored entry decoded with its digest type detected (chunks
    joined, as ``LedgerSource.entries`` joins them)."""
    from pulsarctl_py.decoders import decode_entries
    from pulsarctl_py.inspect import entry_json

    view = source.ledger(ledger_id)
    options = source.entry_options(view)
    assert options.digest_type is None
    assert source.bookie is not None
    stored = [(s.data, (ledger_id, s.entry_id)) for s in source.bookie.read_entries(ledger_id)]
    return [json.dumps(entry_json(view, entry)) for entry in decode_entries(stored, options)]


def _decoded(source: LedgerSource, ledger_id: int) -> list[str]:
    from pulsarctl_py.inspect import entry_json

    view = source.ledger(ledger_id)
    last = view.last_stored if view.last_stored is not None else -1
    return [json.dumps(entry_json(view, entry)) for entry in source.entries(view, 0, last)]


def test_detected_digest_computed_once(
    demo_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no metadata the digest type is detected; once a ledger's entry was CRC32C, the
    next are decoded as CRC32C with one digest computation each, to the same result; a
    CRC32 ledger, implausible headers and flipped bits go back to detecting."""
    current = tmp_path / "bookie" / "current"
    _odd_ledgers(current)
    log = sorted(current.glob("*.log"))[0]
    raw = bytearray(log.read_bytes())
    for at in range(5000, len(raw), 7919):  # flipped bits: digest mismatches, bad headers
        raw[at] ^= 0x10
    log.write_bytes(bytes(raw))
    checks: list[int] = []

    def counted(real: Any) -> Any:
        def count(*args: Any, **kw: Any) -> Any:
            checks.append(1)
            return real(*args, **kw)

        return count

    mismatched = 0
    for root in (tmp_path / "bookie", demo_root / "bookkeeper"):
        with opened(None, [root]) as source:
            assert source.bookie is not None
            for ledger_id in sorted(source.bookie.ledgers()):
                try:
                    expected = _detected_one_by_one(source, ledger_id)
                except LedgerctlError:
                    continue  # a record cut by the flips: read_entries stops there
                assert _decoded(source, ledger_id) == expected, ledger_id
                mismatched += sum("digest mismatch" in line for line in expected)
    assert mismatched > 0  # the flips were read: entries that go back to detecting
    with opened(None, [demo_root / "bookkeeper"]) as source:
        # every digest computed: decoding checks with digest_check, detection with
        # digest_verifies
        monkeypatch.setattr(bookkeeper, "digest_check", counted(bookkeeper.digest_check))
        monkeypatch.setattr(bookkeeper, "digest_verifies", counted(bookkeeper.digest_verifies))
        view = source.ledger(13)
        entries = list(source.entries(view, 0, view.last_stored))
        assert len(entries) > 3 and all(e.digest_type is DigestType.CRC32C for e in entries)
        assert len(checks) == len(entries) + 1  # detection and decoding of the first entry


# -- the native line builder (decoders/_speedups.c entry_lines) ------------------------------

_INT64 = 2**63


@st.composite
def _line_pairs(
    draw: st.DrawFn, ledger: int, kind: DigestType = DigestType.CRC32C
) -> tuple[Any, bytes]:
    """An (EntryHead, data) pair as the head scan gives it for a ledger of digest type
    ``kind``: regular (about half), or with one to three of its values (often one alone,
    so that each check is met on its own) drawn from what a damaged or unusual entry may
    hold."""
    from pulsarctl_py.decoders.heads import EntryHead
    from pulsarctl_py.decoders.nodes import Problem

    names = ("entry", "values", "magic", "bem", "digest", "cut", "ledger", "size", "lac")
    names += ("length", "digest_ok", "problems")
    odd = draw(st.one_of(st.just(set()), st.sets(st.sampled_from(names), max_size=3)))

    def maybe(name: str, regular: Any, other: Any) -> Any:
        return draw(st.one_of(regular, other) if name in odd else regular)

    small = st.integers(0, 10**6)
    wide = st.one_of(st.integers(-3, 10**6), st.integers(-(2**66), 2**66))
    entry_id = maybe("entry", small, st.sampled_from([-2, -1, _INT64 - 1, _INT64]))
    value = st.one_of(small, wide) if "values" in odd else small
    ts = draw(st.one_of(st.none(), st.just(0), value))
    index = draw(st.one_of(st.none(), value))
    with_bem = draw(st.booleans())
    magic = maybe("magic", st.just(b"\x0e\x02" if with_bem else b"\x0e\x01"), st.just(b"xy"))
    # the broker entry metadata size the line checks against, right or not
    fields = [v for v in (ts, index) if v is not None and v >= 0]
    right = len(fields) + sum(max(1, (v.bit_length() + 6) // 7) for v in fields)
    bem_size = maybe("bem", st.just(right), st.integers(0, 2**32 - 1))
    header = draw(st.binary(min_size=32, max_size=32))
    body = magic + bem_size.to_bytes(4, "big") + draw(st.binary(max_size=8))
    # the CRC32C digest of header and payload (what a detected digest type is checked
    # against), or other bytes (another digest type's, or damage); other digest types'
    # bytes are only shown
    size = {DigestType.CRC32C: 4, DigestType.CRC32: 8, DigestType.DUMMY: 0}[kind]
    digest = crc32c(body, crc32c(header)).to_bytes(4, "big")
    if kind is not DigestType.CRC32C:
        digest = draw(st.binary(min_size=size, max_size=size))
    data = header + maybe("digest", st.just(digest), st.binary(min_size=4, max_size=4)) + body
    if "cut" in odd:
        data = data[: draw(st.integers(0, len(data)))]
    head = EntryHead(
        maybe("ledger", st.just(ledger), wide),
        entry_id,
        maybe("size", st.just(len(data)), st.one_of(st.integers(0, 2**41), st.just(37))),
        maybe(
            "lac",
            st.integers(-1, max(entry_id, -1)),
            st.one_of(st.none(), st.integers(-3, entry_id + 3), wide),
        ),
        maybe("length", st.integers(0, 2**40), st.one_of(st.none(), wide)),
        maybe(
            "digest_ok",
            st.just(None if kind is DigestType.DUMMY else True),
            st.sampled_from([False, None, True]),
        ),
        ts,
        index,
        with_bem,
        maybe("problems", st.just(()), st.just((Problem("warning", "bookie-entry", 0, "odd"),))),
    )
    return head, data


def _in_native_domain(head: Any, data: bytes, bookie: int = 36) -> bool:
    """What the native builder takes on itself: ids and values within int64 (timestamps
    and index not negative), sizes up to 2^40, data long enough for its prefix (the
    payload at ``bookie``)."""
    values = [head.ledger_id, head.entry_id, head.lac, head.length]
    values += [v for v in (head.broker_timestamp, head.index) if v is not None]
    fits = all(v is not None and -_INT64 <= v < _INT64 for v in values)
    unsigned = all(v >= 0 for v in (head.broker_timestamp, head.index) if v is not None)
    return (
        fits
        and unsigned
        and head.size <= 2**40
        and len(data) >= bookie + (6 if head.broker_metadata else 2)
    )


@pytest.mark.skipif(native is None, reason="native module not built")
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    start=st.integers(0, 3),
    room=st.integers(1, 70),
    digest=st.sampled_from([DigestType.CRC32C, None, DigestType.CRC32, DigestType.DUMMY]),
)
def test_native_lines_are_the_python_lines(
    data: Any, start: int, room: int, digest: DigestType | None
) -> None:
    """entry_lines makes, byte for byte, the lines ``line_maker``'s ``line`` makes, for the
    same run of pairs, and counts them as the loop does; it stops where ``line`` refuses,
    or earlier only at a value outside its domain."""
    from types import SimpleNamespace

    ledger = data.draw(st.sampled_from([7, 2**40 + 3]))
    kind = digest or DigestType.CRC32C
    pairs = data.draw(st.lists(_line_pairs(ledger, kind), max_size=12))
    ids = [h.entry_id for h, _ in pairs if -1 <= h.entry_id < _INT64] or [0]
    # the ledger's LAC: none, at an entry (confirmed: true), or anywhere
    lac = data.draw(st.one_of(st.none(), st.sampled_from(ids), st.integers(-1, 10**6)))
    # the digest type from metadata, or None: detected, then checked entry by entry
    view = SimpleNamespace(ledger_id=ledger, lac=lac, kind="data", digest_type=digest)
    line = inspect_heads.line_maker(view)  # type: ignore[arg-type]
    runs = inspect_heads._native_lines(view, False)  # type: ignore[arg-type]
    assert runs is not None
    made, stop, sizes, bems, low_t, high_t, low_i, high_i = runs(pairs, start, room)
    python: list[str] = []
    for head, raw in pairs[start:]:
        text = line(head, raw) if len(python) < room else None
        if text is None:
            break
        python.append(text)
    taken = pairs[start : start + len(made)]
    event(f"native lines: {'some' if made else 'none'}")
    assert made == python[: len(made)]
    assert stop == start + len(made)
    if len(made) < len(python):  # stopped early: only at a pair outside its domain
        assert not _in_native_domain(*pairs[stop], 32 + {1: 8, 3: 4, 4: 0}[int(kind)])
    assert sizes == sum(h.size for h, _ in taken)
    assert bems == sum(h.broker_metadata for h, _ in taken)
    times = [h.broker_timestamp for h, _ in taken if h.broker_timestamp]
    indexes = [h.index for h, _ in taken if h.index is not None]
    assert (low_t, high_t) == ((min(times), max(times)) if times else (None, None))
    assert (low_i, high_i) == ((min(indexes), max(indexes)) if indexes else (None, None))


@pytest.mark.skipif(native is None, reason="native module not built")
def test_native_lines_refuse_what_is_not_a_head() -> None:
    """Anything but (EntryHead, bytes) tuples stops the run; it never raises."""
    from types import SimpleNamespace

    view = SimpleNamespace(ledger_id=7, lac=None, kind="data", digest_type=DigestType.CRC32C)
    runs = inspect_heads._native_lines(view, False)  # type: ignore[arg-type]
    assert runs is not None
    for pairs in ([None], [(1, b"")], [(object(), b"x" * 50)], [("a", "b", "c")]):
        made, stop, *_ = runs(pairs, 0, 64)
        assert (made, stop) == ([], 0)
    assert runs([], 5, 64)[:2] == ([], 5)


def _with_metadata(root: Path, ledgers: dict[int, DigestType]) -> str:
    """A RocksDB metadata store naming ``ledgers`` (closed, with their digest types) as
    the bookie directory under ``root`` holds them: the digest type comes from metadata."""
    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.stores.metadata import create_metadata_store
    from tests.support.verify_world import write_tree

    nodes: dict[str, bytes] = {}
    with opened(None, [root / "bookie"]) as source:
        assert source.bookie is not None
        for ledger_id, digest in ledgers.items():
            entries = [bytes(e.data) for e in source.raw_entries(source.ledger(ledger_id))]
            length = bookkeeper.HEADER.unpack_from(entries[-1])[3]
            nodes[lm.ledger_path(ledger_id)] = lm.build(
                lm.LedgerMetadata(
                    ensemble_size=1,
                    write_quorum_size=1,
                    ack_quorum_size=1,
                    state=lm.LedgerState.CLOSED,
                    ensembles={0: ["127.0.0.1:3181"]},
                    last_entry_id=len(entries) - 1,
                    length=length,
                    digest_type=digest,
                    password=b"",
                    ctime=1,
                )
            )
    store = create_metadata_store(root / "metadata")
    try:
        write_tree(store, nodes)
    finally:
        store.close()
    return f"rocksdb://{root / 'metadata'}"


@pytest.mark.skipif(native is None, reason="native module not built")
@pytest.mark.parametrize("chunk", [inspect_heads.CHUNK, 3])
def test_native_lines_write_what_the_general_path_writes(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    chunk: int,
) -> None:
    """With the digest type in the metadata, runs of regular entries get their lines from
    entry_lines, the odd entries between them (broker entry metadata with another field,
    compacted framing, payloads too short) from the loop: the same bytes, summary and
    errors as the general path, in lists of CHUNK lines or of 3."""
    monkeypatch.setattr(inspect_heads, "CHUNK", chunk)
    _odd_ledgers(tmp_path / "bookie" / "current")
    url = _with_metadata(tmp_path, {3: DigestType.CRC32C, 8: DigestType.CRC32C})
    made: list[int] = []
    real = inspect_heads._native_lines

    def counting(view: Any, hashes: bool) -> Any:
        runs = real(view, hashes)
        if runs is None:
            return None

        def counted(pairs: Any, start: int, room: int) -> Any:
            out = runs(pairs, start, room)
            made.append(len(out[0]))
            return out

        return counted

    monkeypatch.setattr(inspect_heads, "_native_lines", counting)
    assert assert_same_output(capsys, (url, [tmp_path / "bookie"])) > 300
    assert sum(made) > 150  # most of ledger 3's 300 entries, for every request that reads them


# -- every storage layout and digest type ----------------------------------------------------

#: ledger -> digest type in the metadata of the layout worlds: ledgers 3, 5 and 8 of
#: _odd_entries, and ledger 3's shapes under the other digest types
_LAYOUT_DIGESTS = {
    3: DigestType.CRC32C,
    5: DigestType.CRC32,
    8: DigestType.CRC32C,
    13: DigestType.CRC32,
    14: DigestType.DUMMY,
    15: DigestType.HMAC,
    16: DigestType.HMAC,
}


def _mac_damaged(ledger_id: int, count: int) -> list[bytes]:
    """Ledger 3's shapes under a MAC digest (empty password), some entries damaged in
    their MAC: one in seven with a MAC byte flipped, one in eleven with a payload byte
    flipped, one in thirteen with the MAC of another password."""
    import hashlib
    import hmac

    entries = []
    for entry_id, entry in enumerate(_shapes(ledger_id, DigestType.HMAC, count)):
        raw = bytearray(entry)
        if entry_id % 7 == 2:
            raw[32 + entry_id % 20] ^= 0x01
        elif entry_id % 11 == 3:
            raw[52 + entry_id % (len(raw) - 52)] ^= 0x40
        elif entry_id % 13 == 4:
            other = hmac.new(mac_key(b"other"), raw[:32] + raw[52:], hashlib.sha1).digest()
            raw[32:52] = other
        entries.append(bytes(raw))
    return entries


def _layout_world(root: Path, layout: str) -> str:
    """The odd ledgers and ledger 3's shapes under every digest type (ledger 16: MAC, some
    MACs damaged), in ``layout`` under ``root``; the metadata URL (digest types and the
    empty password from it)."""
    entries = _odd_entries()
    for ledger_id in (13, 14, 15):
        entries += _shapes(ledger_id, _LAYOUT_DIGESTS[ledger_id], 120)
    entries += _mac_damaged(16, 120)
    write_layout(root / "bookie", layout, entries, log_size_limit=30_000)
    return _with_metadata(root, _LAYOUT_DIGESTS)


@pytest.mark.skipif(native is None, reason="native module not built")
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_and_digest(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    layout: str,
) -> None:
    """Ledgers of every digest type (CRC32C, CRC32, DUMMY, MAC with its password, from the
    metadata; MACs flipped, of a payload byte flipped, of another password) in each
    storage layout: the same bytes, summary and errors as the general path; most lines
    come from entry_lines, and the MAC ledgers' heads from the native scans with their
    key where _speedups_mac is built."""
    url = _layout_world(tmp_path, layout)
    made: dict[int, int] = {}
    real = inspect_heads._native_lines
    keyed: list[Any] = []  # the key arguments of the native head scans
    for name, at in (("scan_slots", 10), ("record_heads", 6)):
        scan = getattr(native, name)

        def with_key(*args: Any, _scan: Any = scan, _at: int = at) -> Any:
            keyed.append(args[_at] if len(args) > _at else None)
            return _scan(*args)

        monkeypatch.setattr(native, name, with_key)

    def counting(view: Any, hashes: bool) -> Any:
        runs = real(view, hashes)
        if runs is None:
            return None

        def counted(pairs: Any, start: int, room: int) -> Any:
            out = runs(pairs, start, room)
            made[view.ledger_id] = made.get(view.ledger_id, 0) + len(out[0])
            return out

        return counted

    monkeypatch.setattr(inspect_heads, "_native_lines", counting)
    assert assert_same_output(capsys, (url, [tmp_path / "bookie"])) > 1000
    assert made.get(3, 0) > 150 and made.get(13, 0) > 40 and made.get(14, 0) > 40
    assert made.get(15, 0) > 40 and made.get(16, 0) > 20
    if native.mac_available():
        assert mac_key(b"") in keyed


@pytest.mark.skipif(native is None, reason="native module not built")
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_flipped_bits_in_every_layout(
    capsys: pytest.CaptureFixture[str], tmp_path_factory: Any, data: Any
) -> None:
    """Flipped bits in an entry log or an index file of any layout: the same output."""
    root = tmp_path_factory.mktemp("layout-flipped")
    url = _layout_world(root, data.draw(st.sampled_from(LAYOUTS)))
    logs = [p for p in (root / "bookie").rglob("current/*.log") if p.stat().st_size]
    path = data.draw(st.sampled_from(sorted([*logs, *(root / "bookie").rglob("*.idx")])))
    raw = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(1024, len(raw) - 1))
        raw[at] ^= 1 << data.draw(st.integers(0, 7))
    path.write_bytes(bytes(raw))
    assert_same_output(capsys, (data.draw(st.sampled_from([url, None])), [root / "bookie"]))


@pytest.mark.skipif(native is None, reason="native module not built")
def test_live_bookies(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The layout world read from a test bookie: heads made natively from the entries read
    (record_heads), the same output as the general path on the same live store."""
    from pulsarctl_py.stores.live import ClientOptions, LiveBookieStore
    from tests.support.live_bookie import TestBookie

    made: list[int] = []
    real = native.record_heads

    def counted(records: Any, start: int, *args: Any) -> Any:
        i, status = real(records, start, *args)
        made.append(i - start)
        return i, status

    monkeypatch.setattr(native, "record_heads", counted)
    url = _layout_world(tmp_path, "db")
    with TestBookie(tmp_path / "bookie", record=False) as bookie:
        options = ClientOptions(addresses=(("127.0.0.1:3181", bookie.address),))

        @contextlib.contextmanager
        def live() -> Iterator[LedgerSource]:
            with open_metadata_store(url) as store, LiveBookieStore(store, options) as b:
                yield LedgerSource(store, b)

        compared = assert_same_output(capsys, (url, []), live, sorted(_LAYOUT_DIGESTS))
    assert compared > 1000 and sum(made) > 1000
