"""verify's fast path (pulsarctl_py/verify/fastscan.py, the native ``verify_heads``) and
its general decode path find the same: same findings, same summary, on every world.

Each test verifies the same stores twice, ``fast=True`` and ``fast=False``, and compares
the findings' JSON and the statistics. The worlds: every broken world of
tests/support/verify_world.py; the demo data, healthy and damaged each way of
tests/support/damage.py
that changes bytes; and a corpus world whose ledgers hold every entry the official
client wrote (tests/data/real-client), under each digest type, with and without broker
entry metadata and BookKeeper metadata, with index gaps, runs without index, timestamps
going back and entries missing, and copies of the corpus entries damaged at random and
packed with a valid digest (so that the damage is met past the digest: the checksum,
the prefixes, the metadata). MAC ledgers (password known: the native MAC check of
``_speedups_mac``) also damaged in their MAC: packed with another password, a MAC byte
or a payload byte flipped.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders import bookkeeper
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
from pulsarctl_py.decoders.checksums import DigestType, mac_key
from pulsarctl_py.decoders.pulsar import BrokerEntryMetadataLayer
from pulsarctl_py.decoders.speedups import native
from pulsarctl_py.errors import LedgerctlError
from pulsarctl_py.ledgers import LedgerSource
from pulsarctl_py.proto import pulsar_api_pb2 as api
from pulsarctl_py.verify import VerifyStats, fastscan, verify_topics
from tests.stores.bookie.test_heads import in_memory_log, odd_entries
from tests.support import damage
from tests.support.cli_helpers import REAL_CLIENT
from tests.support.layouts import LAYOUTS, write_layout
from tests.support.verify_world import (
    T0,
    VARIANTS,
    LedgerSpec,
    _ml_info,
    _tags,
    bookkeeper_root_nodes,
    build_world,
    write_tree,
)

needs_native = pytest.mark.skipif(
    native is None or getattr(native, "VERIFY_SLOTS", None) != fastscan.SLOTS,
    reason="the native module is not built (or LEDGERCTL_PURE_PYTHON is set)",
)

needs_mac = pytest.mark.skipif(
    native is None or not getattr(native, "mac_available", lambda: False)(),
    reason="the native MAC module _speedups_mac is not built (no libcrypto headers)",
)

Opener = Callable[[], AbstractContextManager[LedgerSource]]


def _run(open_source: Opener, fast: bool) -> tuple[Any, dict[str, Any]]:
    """The findings (or the one-line error) and the summary of one verify --all run; the
    name of a damaged RocksDB store's scratch copy and an orphan's age (counted from the
    moment of the run), which differ from run to run, are left out."""
    stats = VerifyStats()
    with open_source() as source:
        try:
            found: Any = [f.to_json() for f in verify_topics(source, None, stats=stats, fast=fast)]
        except LedgerctlError as exc:
            found = f"{type(exc).__name__}: {exc}"
    text = re.sub(r"ledgerctl-rocksdb-\w+", "*", json.dumps(found))
    text = re.sub(r'"age_ms": \d+', '"age_ms": 0', text)
    text = re.sub(r"; [0-9dhms ]+ old, from", "; * old, from", text)
    return json.loads(text), stats.to_json()


def _native_calls(monkeypatch: pytest.MonkeyPatch, digests: list[int] | None = None) -> list[str]:
    """Count the calls of the real verify_heads, verify_slots and verify_records (they
    still run); ``digests``: each call's digest argument, appended."""
    calls: list[str] = []
    at = {"verify_heads": 6, "verify_slots": 7, "verify_records": 3}
    for name in ("verify_heads", "verify_slots", "verify_records"):
        real = getattr(native, name)

        def counted(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls.append(_name)
            if digests is not None:
                digests.append(args[at[_name]])
            return _real(*args)

        monkeypatch.setattr(native, name, counted)
    return calls


def assert_same(open_source: Opener) -> tuple[Any, dict[str, Any]]:
    fast = _run(open_source, True)
    general = _run(open_source, False)
    assert fast == general
    return fast


# -- the verify worlds -------------------------------------------------------------------------


@needs_native
@pytest.mark.parametrize("variant", [None, *sorted(VARIANTS)])
def test_verify_worlds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variant: str | None
) -> None:
    world = build_world(tmp_path / "w", variant)
    calls = _native_calls(monkeypatch)
    found, _ = assert_same(world.source)
    assert calls  # the data ledgers went the fast way
    if variant is not None:
        assert sorted(f["check"] for f in found) == sorted(VARIANTS[variant])


# -- the demo data, healthy and damaged ----------------------------------------------------------


@pytest.fixture(scope="module")
def demo_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pulsarctl_py.demo import create_demo

    root = tmp_path_factory.mktemp("demo") / "demo"
    create_demo(root)
    return root


def _demo_opener(root: Path) -> Opener:
    return lambda: LedgerSource.open(
        f"rocksdb://{root / 'metadata'}", [root / "bookkeeper"], need_metadata=True
    )


@needs_native
@pytest.mark.parametrize("name", [None, *sorted(damage.BYTES)])
def test_demo_data_healthy_and_damaged(
    demo_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str | None
) -> None:
    root = tmp_path / "demo"
    shutil.copytree(demo_copy, root, symlinks=True)
    if name is not None:
        damage.BYTES[name](root)
    calls = _native_calls(monkeypatch)
    found, stats = assert_same(_demo_opener(root))
    if name is None:
        assert calls and stats["entries"] > 0
        assert [f["check"] for f in found] == ["timestamp-regression"]  # planned in the demo


# -- every corpus entry, every digest, damaged past the digest -------------------------------------

CORPUS = sorted(REAL_CLIENT.glob("*/*.bin"))


def _corpus_topic(name: str) -> str:
    return f"persistent://public/corpus/{name}"


def _with_bem(entry: bytes, index: int | None, ts: int | None) -> bytes:
    bem = api.BrokerEntryMetadata()
    if ts is not None:
        bem.broker_timestamp = ts
    if index is not None:
        bem.index = index
    return BrokerEntryMetadataLayer.build(bem) + entry


def _count(entry: bytes) -> int:
    from pulsarctl_py.decoders import DecodeOptions, Depth, Outer, decode_entry

    decoded = decode_entry(entry, DecodeOptions(outer=Outer.PULSAR_ENTRY, depth=Depth.METADATA))
    return decoded.num_messages


def _ledger(
    ledger_id: int,
    topic: str,
    payloads: list[bytes | None],
    digest: DigestType,
    *,
    with_metadata: bool = True,
    password: bytes = b"",
    flip: Callable[[int], int | None] | None = None,
) -> LedgerSpec:
    """A closed ledger; a None payload is an entry id left out of the storage. Entries are
    packed with ``password`` (the metadata's is empty); ``flip(entry_id)``: a byte offset
    of the packed entry to flip after packing (the digest or the payload), or None."""
    spec = LedgerSpec(ledger_id, _tags(topic), digest=digest, with_metadata=with_metadata)
    length = 0
    for entry_id, payload in enumerate(payloads):
        data = payload or b""
        length += len(data)
        header = BookieEntryHeader(ledger_id, entry_id, entry_id - 1, length)
        packed = bookkeeper.build(header, data, digest, password)
        at = flip(entry_id) if flip is not None else None
        if at is not None:
            changed = bytearray(packed)
            changed[at % len(changed)] ^= 0x10
            packed = bytes(changed)
        spec.entries.append(packed if payload is not None else b"")
        spec.payload_sizes.append(len(data))
    return spec


def _order_cases(corpus: list[bytes]) -> list[list[bytes | None]]:
    """Two ledgers of one topic: continuous, then gaps, a run without index, timestamps
    going back (a region of several entries), an entry missing, a reused index."""
    first: list[bytes | None] = []
    second: list[bytes | None] = []
    index, ts = -1, T0
    for raw in corpus:
        index += _count(raw)
        ts += 1000
        first.append(_with_bem(raw, index, ts))
    for i, raw in enumerate(corpus):
        count = _count(raw)
        ts += 1000
        index += count
        if i == 3:
            index += 7  # a gap
        if i == 9:
            index -= 2  # reused
        stamp = ts - 20_000 if 12 <= i < 16 else ts  # a region going back
        if 20 <= i < 24:
            second.append(raw)  # no broker entry metadata: index-missing
            index -= count
        elif i == 30:
            second.append(None)  # missing from storage
        elif i == 33:
            second.append(_with_bem(raw, None, stamp))  # BEM without index
            index -= count
        else:
            second.append(_with_bem(raw, index, stamp))
    return [first, second]


def _damaged(corpus: list[bytes], seed: int, n: int) -> list[bytes | None]:
    """Corpus entries with a few random bytes changed (or cut), each then packed with a
    valid digest: the damage is met by the checks after the digest."""
    rng = random.Random(seed)
    out: list[bytes | None] = []
    for i in range(n):
        raw = bytearray(
            _with_bem(corpus[i % len(corpus)], i, T0 + i) if i % 2 else corpus[i % len(corpus)]
        )
        how = rng.randrange(4)
        if how == 0:  # flip bytes anywhere
            for _ in range(rng.randint(1, 3)):
                raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        elif how == 1:  # flip a byte in the first 40 (prefixes, metadata size, metadata)
            raw[rng.randrange(min(40, len(raw)))] ^= 0xFF
        elif how == 2:  # cut
            del raw[rng.randrange(1, len(raw)) :]
        else:  # the 0x0e01 checksum left out, a metadata byte changed
            at = max(raw.find(b"\x0e\x01"), 0)
            if raw[at : at + 2] == b"\x0e\x01":
                del raw[at : at + 6]
            raw[min(at + 8, len(raw) - 1)] ^= 0x08
        out.append(bytes(raw))
    return out


def _write_world(root: Path, topics: dict[str, list[LedgerSpec]], *, layout: str = "db") -> Opener:
    """Topics (short name -> ledgers) in a RocksDB metadata store and a bookie directory
    of ``layout`` (tests/support/layouts.py)."""
    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.stores.metadata import create_metadata_store

    nodes: dict[str, bytes] = {}
    for name, specs in topics.items():
        info = _ml_info([(s, True) for s in specs], {mld.PROPERTY_INDEX: "0"})
        nodes[mld.TopicName.parse(_corpus_topic(name)).ml_path] = mld.build_info(info)
        for spec in specs:
            if spec.with_metadata:
                nodes[lm.ledger_path(spec.ledger_id)] = lm.build(spec.metadata())
    root.mkdir(parents=True)
    entries = [e for specs in topics.values() for spec in specs for e in spec.entries if e]
    write_layout(root / "bookie", layout, entries, log_size_limit=1 << 20)
    nodes.update(bookkeeper_root_nodes())
    store = create_metadata_store(root / "metadata")
    try:
        write_tree(store, nodes)
    finally:
        store.close()
    return lambda: LedgerSource.open(
        f"rocksdb://{root / 'metadata'}", [root / "bookie"], need_metadata=True
    )


def _corpus_world(root: Path, *, layout: str = "db") -> Opener:
    corpus = [p.read_bytes() for p in CORPUS]
    topics: dict[str, list[LedgerSpec]] = {}
    lid = 100
    for digest in DigestType:
        name = digest.name.lower()
        topics[name] = []
        for payloads in _order_cases(corpus):
            topics[name].append(_ledger(lid, _corpus_topic(name), payloads, digest))
            lid += 1
        # no BookKeeper metadata: the digest type is detected from the entries
        bare = f"{name}-no-metadata"
        topics[bare] = [_ledger(lid, _corpus_topic(bare), [*corpus], digest, with_metadata=False)]
        lid += 1
    for seed in range(3):
        for digest in (DigestType.CRC32C, DigestType.CRC32):
            name = f"damaged-{seed}-{digest.name.lower()}"
            payloads = _damaged(corpus, seed, 60)
            topics[name] = [_ledger(lid, _corpus_topic(name), payloads, digest)]
            lid += 1
    return _write_world(root, topics, layout=layout)


#: the native scans verify uses, per layout: DbLedgerStorage's items (and slots for a DUMMY
#: digest), index files and scanned logs slots; with a journal tail, the index's scan up
#: to the tail's first entry, then the entries of both read first
_NATIVE_SCANS = {
    "db": {"verify_heads", "verify_slots"},
    "db-dirs": {"verify_heads", "verify_slots"},
    "index-files": {"verify_slots"},
    "sorted": {"verify_slots"},
    "scan": {"verify_slots"},
    "journal": {"verify_heads", "verify_slots", "verify_records"},
}


@needs_native
@pytest.mark.parametrize("layout", LAYOUTS)
def test_corpus_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    open_source = _corpus_world(tmp_path / "corpus", layout=layout)
    calls = _native_calls(monkeypatch)
    found, stats = assert_same(open_source)
    assert len(calls) > 10 and set(calls) == _NATIVE_SCANS[layout]
    checks = {f["check"] for f in found}
    # the order cases and the damage were all seen
    assert {
        "index-gap",
        "index-missing",
        "timestamp-regression",
        "entry-missing",
        "entry-corrupt",
        "ledger-missing-metadata",
    } <= checks, checks
    assert stats["entries"] == 4 * (3 * len(CORPUS) - 1) + 6 * 60  # every stored entry
    assert stats["unverified"] > 0  # the DUMMY and MAC (no password) ledgers


@needs_native
def test_corpus_world_on_live_bookies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same corpus world read from a test bookie over the wire: verify_records, the
    same findings as the general path."""
    from pulsarctl_py.stores.live import ClientOptions
    from tests.support.live_bookie import TestBookie
    from tests.support.verify_world import BOOKIE

    offline = _corpus_world(tmp_path / "corpus")
    with offline() as source:
        url = f"rocksdb://{tmp_path / 'corpus' / 'metadata'}"
        assert source.metadata is not None
    with TestBookie(tmp_path / "corpus" / "bookie", record=False) as bookie:
        options = ClientOptions(addresses=((BOOKIE, bookie.address),))

        def live() -> Any:
            return LedgerSource.open(url, None, need_metadata=True, live=options)

        calls = _native_calls(monkeypatch)
        found, stats = assert_same(live)
        assert len(calls) > 10 and set(calls) == {"verify_records"}
    # as read from the directory, but for the ledgers without metadata: their bookies
    # are not known (missing storage, and a storage problem about it)
    offline_found, offline_stats = _run(offline, True)

    def known(found: list[Any]) -> list[Any]:
        return [f for f in found if f["topic"] and "-no-metadata" not in f["topic"]]

    assert known(found) == known(offline_found)
    assert stats["entries"] == offline_stats["entries"] - 4 * len(CORPUS)


# -- MAC ledgers: the native HMAC-SHA1 check, healthy and damaged ------------------------------


def _mac_world(root: Path, *, layout: str = "db") -> Opener:
    """MAC ledgers whose password (empty) is in their metadata: the order cases, entries
    damaged past the MAC, a ledger packed with another password, and MAC and payload
    bytes flipped (every third entry its MAC, every fifth a byte of its payload)."""
    corpus = [p.read_bytes() for p in CORPUS]
    mac = DigestType.HMAC
    topics: dict[str, list[LedgerSpec]] = {}
    lid = 500
    topics["mac-order"] = []
    for payloads in _order_cases(corpus):
        topics["mac-order"].append(_ledger(lid, _corpus_topic("mac-order"), payloads, mac))
        lid += 1
    for seed in range(2):
        name = f"mac-damaged-{seed}"
        topics[name] = [_ledger(lid, _corpus_topic(name), _damaged(corpus, seed, 40), mac)]
        lid += 1
    wrong = _ledger(lid, _corpus_topic("mac-wrong-password"), [*corpus], mac, password=b"x")
    topics["mac-wrong-password"] = [wrong]
    lid += 1

    def flip(entry_id: int) -> int | None:
        if entry_id % 3 == 1:
            return 32 + entry_id % 20  # a byte of the MAC
        if entry_id % 5 == 2:
            return 52 + 7 * entry_id  # a byte of the payload (wrapped to the entry's size)
        return None

    topics["mac-flipped"] = [_ledger(lid, _corpus_topic("mac-flipped"), [*corpus], mac, flip=flip)]
    return _write_world(root, topics, layout=layout)


@needs_mac
@pytest.mark.parametrize("layout", LAYOUTS)
def test_mac_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    """MAC ledgers with their password go the native way (digest 2 with its key) on every
    layout and find what the general path finds: an entry whose MAC does not match (another
    password, a flipped MAC or payload byte) is handed to it and reported as it reports it."""
    open_source = _mac_world(tmp_path / "mac", layout=layout)
    digests: list[int] = []
    calls = _native_calls(monkeypatch, digests)
    in_python: list[DigestType] = []
    real = bookkeeper.digest_check

    def counted(kind: DigestType, *args: Any) -> Any:
        in_python.append(kind)
        return real(kind, *args)

    monkeypatch.setattr(bookkeeper, "digest_check", counted)
    found, stats = assert_same(open_source)
    # the general path checks every entry's MAC in Python, the fast one only the entries it
    # hands over (the damaged ones): the clean order-case entries, at least, were native
    in_python.clear()
    _run(open_source, True)
    fast_checks = len(in_python)
    in_python.clear()
    _run(open_source, False)
    assert len(in_python) - fast_checks > len(CORPUS), (fast_checks, len(in_python))
    # the scans of the layout (on DbLedgerStorage the items only: the slots there are DUMMY's)
    assert len(calls) > 10 and set(calls) <= _NATIVE_SCANS[layout]
    assert set(digests) == {int(DigestType.HMAC)}
    corrupt = {f["topic"].rsplit("/", 1)[-1] for f in found if f["check"] == "entry-corrupt"}
    assert {"mac-wrong-password", "mac-flipped"} <= corrupt, found
    assert stats["unverified"] == 0  # every MAC checked with the password


@needs_mac
def test_mac_world_on_live_bookies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The MAC world read from a test bookie over the wire: verify_records with the key."""
    from pulsarctl_py.stores.live import ClientOptions
    from tests.support.live_bookie import TestBookie
    from tests.support.verify_world import BOOKIE

    offline = _mac_world(tmp_path / "mac")
    url = f"rocksdb://{tmp_path / 'mac' / 'metadata'}"
    with TestBookie(tmp_path / "mac" / "bookie", record=False) as bookie:
        options = ClientOptions(addresses=((BOOKIE, bookie.address),))

        def live() -> Any:
            return LedgerSource.open(url, None, need_metadata=True, live=options)

        digests: list[int] = []
        calls = _native_calls(monkeypatch, digests)
        found, _ = assert_same(live)
        assert len(calls) > 10 and set(calls) == {"verify_records"}
        assert set(digests) == {int(DigestType.HMAC)}
    assert found == _run(offline, True)[0]


@needs_mac
def test_mac_with_the_password_given_to_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A password given for every ledger (``--password-env``/``--password-file``: the
    source's override) is the one the native check uses: the ledger packed with it reads
    clean, the ledgers of the metadata's (empty) password do not; as on the general path."""
    _mac_world(tmp_path / "mac")
    root = tmp_path / "mac"

    def given() -> Any:
        url = f"rocksdb://{root / 'metadata'}"
        return LedgerSource.open(url, [root / "bookie"], b"x", need_metadata=True)

    digests: list[int] = []
    calls = _native_calls(monkeypatch, digests)
    found, _ = assert_same(given)
    assert calls and set(digests) == {int(DigestType.HMAC)}
    corrupt = {f["topic"].rsplit("/", 1)[-1] for f in found if f["check"] == "entry-corrupt"}
    assert "mac-wrong-password" not in corrupt and "mac-order" in corrupt, corrupt


@needs_native
def test_mac_without_the_native_mac_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where _speedups_mac is absent (mac_available() False), MAC ledgers take the general
    path exactly as before it existed: no native call for them, the same findings."""
    open_source = _mac_world(tmp_path / "mac")
    with_module = _run(open_source, True)
    monkeypatch.setattr(native, "mac_available", lambda: False, raising=False)
    calls = _native_calls(monkeypatch)
    assert assert_same(open_source) == with_module
    assert calls == []


@needs_native
def test_the_native_module_refuses_mac_without_the_mac_module() -> None:
    """In a process where _speedups_mac cannot be imported (not built: no libcrypto
    headers), the native module says so and refuses a MAC digest as it did before MAC
    was native; decoders.checksums.native_mac_key then gives no key, so nothing asks it
    to."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['pulsarctl_py.decoders._speedups_mac'] = None\n"
        "from pulsarctl_py.decoders.speedups import native\n"
        "from pulsarctl_py.decoders.checksums import DigestType, native_mac_key\n"
        "assert native.mac_available() is False\n"
        "assert native_mac_key(DigestType.HMAC, b'') is None\n"
        "try:\n"
        "    native.verify_records([], 0, 1, 2, [None] * 18, bytes(20))\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "verify_records: digest must be CRC32C (3), CRC32 (1) or DUMMY (4)\n"


@needs_native
@pytest.mark.parametrize("digest", [DigestType.CRC32C, DigestType.CRC32])
def test_an_unknown_digest_type_is_detected_once_per_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, digest: DigestType
) -> None:
    """Without BookKeeper metadata the fast path detects the digest type once, from the
    ledger's first entry, and computes one digest per entry in the native scan; the general
    path computes each entry's digest in Python and finds the same."""
    corpus = [p.read_bytes() for p in CORPUS]
    spec = _ledger(7, _corpus_topic("bare"), corpus, digest, with_metadata=False)
    open_source = _write_world(tmp_path / "w", {"bare": [spec]})
    calls: list[DigestType] = []
    real = bookkeeper.digest_check

    def counted(kind: DigestType, *args: Any) -> Any:
        calls.append(kind)
        return real(kind, *args)

    monkeypatch.setattr(bookkeeper, "digest_check", counted)
    fast = _run(open_source, True)
    in_python = len(calls)
    calls.clear()
    assert fast == _run(open_source, False)
    assert fast[1]["entries"] == len(corpus)
    assert len(calls) >= len(corpus)  # the general path: each entry's digest in Python
    assert in_python <= 3  # the first entry's detection and check, then the native scan


def test_the_general_path_alone_without_the_native_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the native module every entry takes the general path, and finds the same."""
    world = build_world(tmp_path / "w", "index-gap")
    with_native = _run(world.source, True)
    monkeypatch.setattr(fastscan, "native", None)
    assert _run(world.source, True) == with_native


# -- one entry at a time, against the decoder --------------------------------------------------


def _python_values(
    data: bytes, ledger_id: int, entry_id: int, digest: DigestType, password: bytes | None = None
) -> Any:
    """What the general path reads of one entry for the ordered checks (the values
    ``verify_records`` hands over with VALUES), or None when it finds it damaged."""
    from pulsarctl_py.decoders import DecodeOptions, Depth, Outer, decode_entry
    from pulsarctl_py.verify.entries import payload_size

    options = DecodeOptions(
        outer=Outer.BOOKIE_ENTRY, digest_type=digest, password=password, depth=Depth.METADATA
    )
    entry = decode_entry(data, options, (ledger_id, entry_id))
    if entry.unverified or any(p.severity == "error" for p in entry.problems):
        return None
    bem = entry.broker_entry_metadata
    return (
        entry_id,
        payload_size(entry, None),
        entry.index,
        entry.num_messages,
        entry.entry_timestamp,
        bem is not None and bem.HasField("broker_timestamp"),
    )


def _fresh_state(expected: int) -> list[Any]:
    state: list[Any] = [None] * fastscan.SLOTS
    state[fastscan.EXPECTED] = expected
    state[fastscan.ENTRIES] = state[fastscan.BYTES] = 0
    state[fastscan.BEM_SEEN] = state[fastscan.IN_LAST] = state[fastscan.ORDERED] = False
    return state


@needs_native
@settings(max_examples=400, deadline=None)
@given(
    ledger_id=st.sampled_from([3, 2**40 + 1, -5]),
    digest=st.sampled_from(
        [DigestType.CRC32C, DigestType.CRC32]
        + ([DigestType.HMAC] if native is not None and native.mac_available() else [])
    ),
    data=st.data(),
)
def test_native_verify_passes_only_what_the_decoder_reads_clean(
    ledger_id: int, digest: DigestType, data: Any
) -> None:
    """With the ordered checks left to Python, verify_records hands over every entry it
    finds clean (VALUES) with the values the general path reads, and nothing else:
    implausible headers (LAC past the entry, negative length or ledger id) and prefixes
    or metadata in encodings protobuf refuses are IRREGULAR; a MAC packed with another
    password, or with a byte of it flipped, too. verify_heads, reading the same entry
    from an entry log window, answers the same."""
    entry_id = data.draw(st.integers(0, 3))
    password = b"pw" if digest is DigestType.HMAC else None
    key = mac_key(b"pw") if digest is DigestType.HMAC else None
    packed_with = data.draw(st.sampled_from([b"pw", b"pw", b"pw", b"other"])) if key else None
    entry = data.draw(odd_entries(ledger_id, entry_id, digest, packed_with))
    if key is not None and data.draw(st.integers(0, 4)) == 0:
        changed = bytearray(entry)
        changed[32 + data.draw(st.integers(0, 19))] ^= 1 << data.draw(st.integers(0, 7))
        entry = bytes(changed)
    state = _fresh_state(entry_id)
    got = native.verify_records([(entry_id, entry)], 0, ledger_id, int(digest), state, key)
    expected = _python_values(entry, ledger_id, entry_id, digest, password)
    if got == (0, native.VERIFY_VALUES):
        assert expected is not None
        assert tuple(state[fastscan.V_ENTRY :]) == expected
    else:
        assert got == (0, native.HEADS_IRREGULAR)
    # the same entry through verify_heads: at entry_id in an index of entries 0..entry_id
    before = [data.draw(odd_entries(ledger_id, e, digest, password)) for e in range(entry_id)]
    items, window = in_memory_log(ledger_id, [*before, entry])
    heads_state = _fresh_state(entry_id)
    stop, status = native.verify_heads(
        items, entry_id, ledger_id, 0, window, 0, int(digest), heads_state, key
    )
    assert (stop - entry_id, status) == got
    assert heads_state == state
