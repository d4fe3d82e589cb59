"""BookieStore.read_heads on every storage layout and digest type: the native scans (slots
of index files, DbLedgerStorage in several directories, logs scanned for a lost index,
entries from several sources) against the Python path (read_entries + decode_head), entry
by entry, head and bytes, on clean and on damaged data; and the scanned index itself
(log_slots) against scan_records."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders import bookkeeper, entrylog
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.decoders.entry import DecodeOptions, Depth, Outer
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.heads import decode_head
from pulsarctl_py.stores.bookie import heads as heads_module
from pulsarctl_py.stores.bookie import indexes, open_bookie
from pulsarctl_py.stores.bookie.indexes import ScanIndex
from tests.stores.bookie.test_heads import pulsar_entry
from tests.support.layouts import LAYOUTS, write_layout

native = heads_module.native
needs_native = pytest.mark.skipif(native is None, reason="native module not built")
PASSWORD = b"secret"
DIGESTS = [DigestType.CRC32C, DigestType.CRC32, DigestType.DUMMY, DigestType.HMAC, None]
LEDGERS = {3: 400, 4: 5, 9: 150}


def entries_of(ledger_id: int, count: int, kind: DigestType, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    length = 0
    for entry_id in range(count):
        payload = pulsar_entry(rng, entry_id)
        length += len(payload)
        header = BookieEntryHeader(ledger_id, entry_id, entry_id - 1, length)
        out.append(bookkeeper.build(header, payload, kind, PASSWORD))
    return out


def interleaved(kind: DigestType) -> list[bytes]:
    """The ledgers' entries as they arrive at a bookie: interleaved."""
    ledgers = [entries_of(lid, n, kind, 10 + lid) for lid, n in LEDGERS.items()]
    out = []
    for i in range(max(LEDGERS.values())):
        out += [entries[i] for entries in ledgers if i < len(entries)]
    return out


def options_for(kind: DigestType | None) -> DecodeOptions:
    return DecodeOptions(
        outer=Outer.BOOKIE_ENTRY, digest_type=kind, password=PASSWORD, depth=Depth.ENTRY
    )


def python_pairs(bookie: Path, ledger_id: int, options: DecodeOptions) -> Any:
    """The reference: every stored entry through read_entries and the Python decoder."""
    with open_bookie([bookie]) as store:
        try:
            return [
                (decode_head(s.data, options, (ledger_id, s.entry_id)), bytes(s.data))
                for s in store.read_entries(ledger_id)
            ]
        except LedgerctlError as exc:
            return str(exc)


def fast_pairs(bookie: Path, ledger_id: int, options: DecodeOptions) -> Any:
    with open_bookie([bookie]) as store:
        out: list[Any] = []
        try:
            for pairs in store.read_head_batches(ledger_id, options=options):
                out.extend((h, bytes(d)) for h, d in pairs)
        except LedgerctlError as exc:
            return str(exc)
        return out


def fast_heads(bookie: Path, ledger_id: int, options: DecodeOptions) -> Any:
    with open_bookie([bookie]) as store:
        out: list[Any] = []
        try:
            out.extend(store.read_heads(ledger_id, options=options))
        except LedgerctlError as exc:
            return str(exc)
        return out


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, Any], Path]:
    """Every layout x digest type the entries are written with (None: CRC32C entries)."""
    out = {}
    for kind in (DigestType.CRC32C, DigestType.CRC32, DigestType.DUMMY, DigestType.HMAC):
        entries = interleaved(kind)
        for layout in LAYOUTS:
            root = tmp_path_factory.mktemp(f"{layout}-{kind.name}")
            out[(layout, kind)] = write_layout(root / "bookie", layout, entries)
    return out


@pytest.fixture
def python_path_calls(monkeypatch: Any) -> list[int]:
    """One item per entry the slot scan leaves to the Python path."""
    calls: list[int] = []
    read_head = heads_module._read_head

    def counted(*args: Any) -> Any:
        calls.append(1)
        return read_head(*args)

    monkeypatch.setattr(heads_module, "_read_head", counted)
    return calls


@needs_native
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", DIGESTS, ids=lambda k: k.name if k else "detected")
def test_every_layout_and_digest(
    layouts: dict[tuple[str, Any], Path], layout: str, kind: DigestType | None
) -> None:
    """The same heads and bytes as the Python path, on every layout, for entries of every
    digest type read with it (or with none given: detected per entry)."""
    bookie = layouts[(layout, kind or DigestType.CRC32C)]
    options = options_for(kind)
    for ledger_id in (*LEDGERS, 5):  # 5: not stored
        expected = python_pairs(bookie, ledger_id, options)
        assert isinstance(expected, list)
        assert len(expected) == LEDGERS.get(ledger_id, 0)
        assert fast_pairs(bookie, ledger_id, options) == expected
        assert fast_heads(bookie, ledger_id, options) == [h for h, _ in expected]


@needs_native
@pytest.mark.parametrize(
    ("layout", "kind"),
    [
        (layout, kind)
        for layout in ("index-files", "sorted", "scan", "db-dirs")
        for kind in (DigestType.CRC32C, DigestType.CRC32, DigestType.DUMMY)
        if (layout, kind) != ("db-dirs", DigestType.CRC32C)  # scan_heads, not slots
    ],
)
def test_the_slot_scan_does_the_work(
    layouts: dict[tuple[str, Any], Path],
    layout: str,
    kind: DigestType,
    python_path_calls: list[int],
) -> None:
    """Most heads come from scan_slots; only odd entries (compacted framing, payloads too
    short: about 10%) take the Python path."""
    bookie = layouts[(layout, kind)]
    heads = fast_heads(bookie, 3, options_for(kind))
    assert len(heads) == LEDGERS[3]
    assert 0 < len(python_path_calls) < LEDGERS[3] // 4


@needs_native
@pytest.mark.parametrize("layout", ["index-files", "scan", "journal"])
def test_small_windows(layouts: dict[tuple[str, Any], Path], layout: str, monkeypatch: Any) -> None:
    """Windows smaller than some entries: those entries take the Python path, the rest are
    cut from many windows; the same heads and bytes."""
    bookie = layouts[(layout, DigestType.CRC32)]
    options = options_for(DigestType.CRC32)
    expected = python_pairs(bookie, 3, options)
    monkeypatch.setattr(heads_module, "WINDOW", 300)
    assert fast_pairs(bookie, 3, options) == expected


def test_without_the_native_module(layouts: dict[tuple[str, Any], Path], monkeypatch: Any) -> None:
    from pulsarctl_py.stores.bookie import store as store_module

    bookie = layouts[("index-files", DigestType.DUMMY)]
    options = options_for(DigestType.DUMMY)
    expected = python_pairs(bookie, 9, options)
    monkeypatch.setattr(store_module, "native", None)
    assert fast_pairs(bookie, 9, options) == expected


@needs_native
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_damaged_logs_read_the_same(
    layouts: dict[tuple[str, Any], Path], tmp_path_factory: Any, data: Any
) -> None:
    """Flipped bytes anywhere in an entry log or an index file, in any layout: the same
    heads and bytes, or the same error."""
    layout = data.draw(st.sampled_from(LAYOUTS))
    kind = data.draw(st.sampled_from([DigestType.CRC32C, DigestType.CRC32, DigestType.DUMMY]))
    bookie = tmp_path_factory.mktemp("damaged") / "bookie"
    shutil.copytree(layouts[(layout, kind)], bookie)
    logs = [p for p in bookie.rglob("current/*.log") if p.stat().st_size]  # not RocksDB's
    files = sorted([*logs, *bookie.rglob("*.idx")])
    path = data.draw(st.sampled_from(files))
    raw = bytearray(path.read_bytes())
    low = entrylog.DIRECT_HEADER_SIZE if path.suffix == ".log" else 1024
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(min(low, len(raw) - 1), len(raw) - 1))
        raw[at] ^= 1 << data.draw(st.integers(0, 7))
    path.write_bytes(bytes(raw))
    options = options_for(data.draw(st.sampled_from([kind, None])))
    ledger_id = data.draw(st.sampled_from([3, 9]))
    expected = python_pairs(bookie, ledger_id, options)
    assert fast_pairs(bookie, ledger_id, options) == expected
    heads = expected if isinstance(expected, str) else [h for h, _ in expected]
    assert fast_heads(bookie, ledger_id, options) == heads


# -- the scanned index (ScanIndex: log_slots, or scan_records alone) ---------------------------


def scanned(bookie: Path, monkeypatch: Any, with_native: bool) -> Any:
    """Everything a ScanIndex of the bookie's logs answers, and the problems it met."""
    if not with_native:
        monkeypatch.setattr(indexes, "native", None)
    try:
        with open_bookie([bookie], index="scan") as store:
            source = store._scan
            assert isinstance(source, ScanIndex)
            everything = [(lid, eid, loc.to_json()) for lid, eid, loc in source.iter_all()]
            ids = list(source.ledger_ids())
            lasts = [source.last_entry(lid) for lid in (*ids, 12345)]
            some = [source.locate(lid, e) for lid in ids for e in (-1, 0, 1, 7, 10**9)]
            ranges = [list(source.iter_locations(lid, 2, 5)) for lid in ids]
            return everything, ids, lasts, some, ranges, [str(p) for p in store.problems]
    finally:
        monkeypatch.undo()


@st.composite
def logs(draw: st.DrawFn) -> list[bytes]:
    """Entry logs of records a scan meets: entries of a few ledgers (copies of an entry
    too), padding, ledgers maps and fake records (ledger -1), implausible and cut records,
    trailing bytes."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        raw = bytearray(entrylog.build_header(direct=draw(st.booleans())))
        for _ in range(draw(st.integers(0, 25))):
            what = draw(st.sampled_from(["entry"] * 12 + ["pad", "meta", "odd", "cut"]))
            if what == "entry":
                lid = draw(st.sampled_from([0, 3, 4, 2**40]))
                eid = draw(st.integers(0, 12))
                if draw(st.integers(0, 29)) == 0:  # one a slot table does not take
                    eid = draw(st.sampled_from([-3, 2**21, 2**40]))
                body = lid.to_bytes(8, "big", signed=True) + eid.to_bytes(8, "big", signed=True)
                body += draw(st.binary(max_size=40))
                raw += len(body).to_bytes(4, "big") + body
            elif what == "pad":
                raw += draw(st.sampled_from([b"\x00", b"\xf0"])) * draw(st.integers(1, 70))
            elif what == "meta":
                body = (-1).to_bytes(8, "big", signed=True) + draw(st.binary(max_size=30))
                raw += len(body).to_bytes(4, "big") + body
            elif what == "odd":  # below 16 bytes with a ledger, or a ledger id below -1
                body = draw(st.sampled_from([3, -7])).to_bytes(8, "big", signed=True)
                body += draw(st.binary(max_size=20))
                raw += len(body).to_bytes(4, "big") + body
            else:  # cut: a record longer than what is left, or trailing bytes
                raw += draw(st.binary(min_size=1, max_size=30))
                break
        out.append(bytes(raw))
    return out


@needs_native
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(found=logs(), window=st.sampled_from([64, 200, 1 << 20]))
def test_scanned_index_equals_scan_records(
    tmp_path_factory: Any, monkeypatch: Any, found: list[bytes], window: int
) -> None:
    """The slot tables log_slots fills give what scan_records' Location dicts give: every
    location and size, the ledgers, the last entries, and the same problems; with windows
    small enough that records cross them."""
    current = tmp_path_factory.mktemp("scanned") / "current"
    current.mkdir()
    for log_id, raw in enumerate(found):
        (current / entrylog.log_file_name(log_id)).write_bytes(raw)
    monkeypatch.setattr(indexes, "_SCAN_WINDOW", window)
    fast = scanned(current, monkeypatch, True)
    monkeypatch.setattr(indexes, "_SCAN_WINDOW", window)
    assert fast == scanned(current, monkeypatch, False)


@needs_native
def test_scanned_index_takes_the_slot_tables(tmp_path: Path) -> None:
    """Healthy logs of two directories whose logs share ids: slot tables, the right file."""
    for i in range(2):
        entries = entries_of(3 + i, 50, DigestType.CRC32C, i)
        write_layout(tmp_path / f"d{i}", "scan", entries, log_size_limit=4000)
    with open_bookie([tmp_path / "d0", tmp_path / "d1"]) as store:
        assert isinstance(store._scan, ScanIndex) and store._scan.has_slots()
        for i in range(2):
            locations = list(store.iter_locations(3 + i))
            assert len(locations) == 50
            assert {loc.path.parent.parent.name for _, loc in locations} == {f"d{i}"}
            heads = list(store.read_heads(3 + i, options=options_for(DigestType.CRC32C)))
            assert [h.entry_id for h in heads] == list(range(50))


@needs_native
def test_a_journal_tail_leaves_the_index_its_run(layouts: dict[tuple[str, Any], Path]) -> None:
    """With the last entries only in the journal, the entries before the tail's first one
    are one index's run (scanned natively), the rest read from both sources."""
    from pulsarctl_py.stores.bookie.indexes import DbIndex

    with open_bookie([layouts[("journal", DigestType.CRC32C)]]) as store:
        runs = store.index_runs(3, 0, None)
        tail = 2 * LEDGERS[3] // 3  # the first entry the journal alone holds (266)
        assert [(type(s), a, b) for s, a, b in runs] == [
            (DbIndex, 0, tail - 1),
            (type(None), tail, None),
        ]
        assert store.index_runs(3, tail, None) == [(None, tail, None)]
        assert [(type(s), a, b) for s, a, b in store.index_runs(3, 5, 20)] == [(DbIndex, 5, 20)]
