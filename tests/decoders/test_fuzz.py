"""Malformed bytes through every parser: truncations, bit flips, oversized length fields,
random and mutated bytes.

decode_entry must never raise (a layer it cannot decode becomes an ``undecoded`` layer plus
an error Problem naming the layer and offset), must not hang, and must refuse absurd sizes
without allocating them. The layer parsers called directly may only raise LedgerctlError.
"""

from __future__ import annotations

import json
import signal
import struct
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders import bookkeeper, compacted
from pulsarctl_py.decoders.checksums import DIGESTS, DigestType
from pulsarctl_py.decoders.codecs import compress, decompress
from pulsarctl_py.decoders.crypto import load_private_key
from pulsarctl_py.decoders.entry import DecodeOptions, Depth, Entry, Outer, decode_entry
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.payload import build_batch, parse_batch, parse_marker
from pulsarctl_py.decoders.pulsar import MetadataLayer, build_entry, parse_prefixes
from pulsarctl_py.proto import pulsar_api_pb2 as api
from tests.support.strategies import DATA, KEYS, EntrySpec, entry_specs

REAL = sorted((DATA / "real-client").glob("*/*.bin")) + sorted(
    (DATA / "upstream" / "pulsar-client-go").glob("raw*.bin")
)
BK_OFFLINE = DATA / "bookkeeper" / "offline"
BK_ENTRIES = sorted((BK_OFFLINE / "digest").glob("*/*.entry"))
BK_PASSWORD = b"secret"
#: a generous bound for one decode of one small malformed entry, on a slow CI machine
CASE_SECONDS = 2.0
#: what decoding any of the small malformed entries here may allocate at its peak
PEAK_BYTES = 16 << 20


@cache
def private_key() -> Any:
    return load_private_key((KEYS / "rsa_private.pem").read_bytes())


@cache
def bk_pulsar_entries() -> list[tuple[Path, DigestType]]:
    """The offline BookKeeper entries whose payload is a Pulsar entry (per the manifest)."""
    manifest = json.loads((BK_OFFLINE / "manifest.json").read_text())
    out = []
    for item in manifest["digest"]["items"]:
        if item.get("payload", "").startswith("pulsar-"):
            out.append((BK_OFFLINE / item["entry_file"], DigestType[item["digest_type"]]))
    return out


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Turn a hang into a failure (SIGALRM; pytest runs tests in the main thread)."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"decoding took longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def decode(data: bytes, opts: DecodeOptions) -> Entry:
    """decode_entry, checked for time and for the undecoded-layer contract."""
    start = time.perf_counter()
    entry = decode_entry(data, opts)
    took = time.perf_counter() - start
    assert took < CASE_SECONDS, f"{took:.2f} s for {len(data)} bytes"
    check_contract(entry, data)
    return entry


def check_contract(entry: Entry, data: bytes) -> None:
    errors = [p for p in entry.problems if p.severity == "error"]
    for layer in entry.layers:
        if layer.name == "undecoded":
            # an error Problem names the same layer and offset as the undecoded span
            inner = layer.fields.get("layer")
            assert any((p.layer, p.offset) == (inner, layer.offset) for p in errors), (
                layer,
                entry.problems,
            )
        if layer.name != "batch" and getattr(layer, "space", "entry") == "entry":
            assert 0 <= layer.offset <= layer.offset + layer.length <= len(data), layer
    for p in entry.problems:
        assert p.severity in ("error", "warning")
        assert p.layer and p.message
        assert p.offset >= 0
        if p.layer not in ("batch", "marker", "chunk"):  # those count in the payload
            assert p.offset <= len(data), p


def all_options(key: Any = None) -> list[DecodeOptions]:
    """Every Outer at every Depth."""
    return [
        DecodeOptions(outer=outer, depth=depth, private_key=key, password=BK_PASSWORD)
        for outer in Outer
        for depth in Depth
    ]


def pulsar_spans(data: bytes, base: int = 0) -> tuple[int, int]:
    """(metadata start, payload start) of a checksummed entry at ``base`` (formats.md §1)."""
    assert data[base : base + 2] == b"\x0e\x01"
    (size,) = struct.unpack_from(">I", data, base + 6)
    return base + 6, base + 10 + size


def offsets(data: bytes, dense_until: int) -> list[int]:
    """Every offset of small entries; of large ones every offset of the headers, then a stride."""
    if len(data) <= 2048:
        return list(range(len(data)))
    return list(range(dense_until)) + list(range(dense_until, len(data), 61))


# -- truncation -------------------------------------------------------------------------


@pytest.mark.parametrize("path", REAL + BK_ENTRIES, ids=_id)
def test_truncation_never_raises(path: Path) -> None:
    data = path.read_bytes()
    key = private_key() if "encrypted" in path.parent.name else None
    opts = all_options(key)
    with time_limit(60):
        for t in offsets(data, 512):
            cut = data[:t]
            for o in opts:
                decode(cut, o)


def expected_truncation(data: bytes, t: int, base: int = 0) -> tuple[str, int] | None:
    """The layer and offset an entry truncated to ``t`` bytes must name (None: any layer)."""
    md_at, payload_at = pulsar_spans(data, base)
    if t < base + 2:
        return None  # not even the magic: nothing says it is a checksum
    if t < md_at:
        return "checksum", base
    if t < payload_at:
        return "message-metadata", md_at
    return "checksum", base  # a cut payload: the CRC32C no longer matches


@pytest.mark.parametrize("path", REAL, ids=_id)
def test_truncation_names_layer_and_offset(path: Path) -> None:
    data = path.read_bytes()
    _, payload_at = pulsar_spans(data)
    key = private_key() if "encrypted" in path.parent.name else None
    opts = DecodeOptions(outer=Outer.PULSAR_ENTRY, private_key=key)
    batched_none = path.parent.name in ("batched-none", "tombstone-batched")
    for t in offsets(data, payload_at + 64):
        entry = decode(data[:t], opts)
        assert not entry.ok
        errors = {(p.layer, p.offset) for p in entry.problems if p.severity == "error"}
        want = expected_truncation(data, t)
        if want is not None:
            assert want in errors, (t, entry.problems)
        if t < payload_at:
            assert any(layer.name == "undecoded" for layer in entry.layers)
        else:
            assert any("CRC32C mismatch" in p.message for p in entry.problems)
            assert entry.metadata is not None  # the metadata before the cut still decodes
        if batched_none and t >= payload_at:
            assert any(p.layer == "batch" for p in entry.problems), (t, entry.problems)


@pytest.mark.parametrize("path", REAL[::4], ids=_id)
def test_truncated_compacted_framing_names_compacted(path: Path) -> None:
    inner = path.read_bytes()
    msg_id = api.MessageIdData(ledgerId=12, entryId=34)
    data = compacted.build(msg_id, inner)
    id_size = len(msg_id.SerializeToString())
    opts = DecodeOptions(outer=Outer.COMPACTED)
    for t in offsets(data, 64):
        entry = decode(data[:t], opts)
        # formats.md §6.2: the first field that does not fit is the one named
        at = 0 if t < 4 + id_size else 4 + id_size if t < 8 + id_size else 8 + id_size
        assert ("compacted", at) in {(p.layer, p.offset) for p in entry.problems}, t
        assert any(layer.name == "undecoded" for layer in entry.layers)


@pytest.mark.parametrize(
    "path,kind", bk_pulsar_entries(), ids=lambda v: _id(v) if isinstance(v, Path) else v.name
)
def test_truncated_bookie_entry_names_layer(path: Path, kind: DigestType) -> None:
    data = path.read_bytes()
    head = 32 + DIGESTS[kind].size
    opts = DecodeOptions(outer=Outer.BOOKIE_ENTRY, digest_type=kind, password=BK_PASSWORD)
    for t in offsets(data, head + 64):
        entry = decode(data[:t], opts)
        assert not entry.ok
        names = {(p.layer, p.offset) for p in entry.problems if p.severity == "error"}
        if t < head:
            assert ("bookie-entry", 0) in names, t
        elif kind is not DigestType.DUMMY:
            assert any("digest mismatch" in p.message for p in entry.problems), t
        else:  # no digest: the Pulsar entry inside must say where it was cut
            want = expected_truncation(data, t, base=head)
            if want is not None:
                assert want in names, (t, entry.problems)


# -- bit flips --------------------------------------------------------------------------


def flips(data: bytes, dense_until: int) -> Iterator[tuple[int, int]]:
    """Every bit of the headers; one bit per byte (rotating) of the payload, thinned if large."""
    for i in range(min(dense_until, len(data))):
        for bit in range(8):
            yield i, bit
    step = 1 if len(data) <= 2048 else 53
    for i in range(dense_until, len(data), step):
        yield i, i % 8


def flipped(data: bytes, i: int, bit: int) -> bytes:
    out = bytearray(data)
    out[i] ^= 1 << bit
    return bytes(out)


@pytest.mark.parametrize("path", REAL, ids=_id)
def test_bit_flips_are_caught_by_the_checksum(path: Path) -> None:
    data = path.read_bytes()
    _, payload_at = pulsar_spans(data)
    # the private key (an RSA unwrap per decode) only where a flip reaches the ciphertext
    key = private_key() if "encrypted" in path.parent.name else None
    with time_limit(60):
        for i, bit in flips(data, min(payload_at, 64)):
            k = key if i >= payload_at else None
            bad = flipped(data, i, bit)
            entry = decode(bad, DecodeOptions(outer=Outer.PULSAR_ENTRY, private_key=k))
            assert not entry.ok, (i, bit)
            if i >= 2:  # past the magic, the CRC32C covers (or is) the flipped bit
                crc = [p for p in entry.problems if "CRC32C mismatch" in p.message]
                assert crc and crc[0].layer == "checksum" and crc[0].severity == "error", (i, bit)
            assert not decode(bad, DecodeOptions(private_key=k)).ok, (i, bit)


@pytest.mark.parametrize(
    "path,kind",
    [(p, k) for p, k in bk_pulsar_entries() if k is not DigestType.DUMMY],
    ids=lambda v: _id(v) if isinstance(v, Path) else v.name,
)
def test_bit_flips_in_bookie_entries_fail_the_digest(path: Path, kind: DigestType) -> None:
    data = path.read_bytes()
    opts = DecodeOptions(outer=Outer.BOOKIE_ENTRY, digest_type=kind, password=BK_PASSWORD)
    for i, bit in flips(data, 32 + DIGESTS[kind].size):
        entry = decode(flipped(data, i, bit), opts)
        assert not entry.ok
        assert any(
            p.layer == "bookie-entry" and "digest mismatch" in p.message for p in entry.problems
        ), (i, bit)


# -- oversized length fields --------------------------------------------------------------

HUGE = 0xFFFFFFFF


def _md(**fields: Any) -> Any:
    return api.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2, **fields)


def _set_u32(data: bytes, at: int, value: int = HUGE) -> bytes:
    return data[:at] + struct.pack(">I", value) + data[at + 4 :]


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def compressed_claiming(codec: int, size: int) -> list[bytes]:
    """Small compressed payloads of 1000 bytes, some rewritten to announce ``size``."""
    import zstandard

    plain = b"x" * 1000
    real = compress(codec, plain)
    if codec == 3:  # a frame without content size, and one announcing the claimed size
        bare = zstandard.ZstdCompressor(write_content_size=False).compress(plain)
        return [real, bare]
    if codec == 4:  # the raw block starts with the uncompressed length as a varint
        return [real, _varint(size) + real[len(_varint(len(plain))) :]]
    return [real]


class Oversized(NamedTuple):
    name: str
    data: bytes
    layer: str  # the layer that must be named
    offsets: set[int]  # the offsets it may name: the layer's, the size field's, or the
    # first byte the size covers; each tells an operator where to look
    outer: Outer = Outer.AUTO


def oversized_cases() -> Iterator[Oversized]:
    plain = build_batch([(api.SingleMessageMetadata(partition_key="k"), b"value")])
    batch = build_entry(_md(num_messages_in_batch=1), plain, checksum=False)
    yield Oversized("metadata size", _set_u32(batch, 0), "message-metadata", {0, 4})
    bem = api.BrokerEntryMetadata(broker_timestamp=1, index=2)
    with_bem = build_entry(_md(), b"v", broker_entry_metadata=bem)
    yield Oversized("BEM size", _set_u32(with_bem, 2), "broker-entry-metadata", {0, 2, 6})
    msg_id = api.MessageIdData(ledgerId=1, entryId=2)
    framed = compacted.build(msg_id, batch)
    i = len(msg_id.SerializeToString())
    yield Oversized("MessageIdData size", _set_u32(framed, 0), "compacted", {0, 4}, Outer.COMPACTED)
    yield Oversized(
        "wrapped entry size", _set_u32(framed, 4 + i), "compacted", {4 + i, 8 + i}, Outer.COMPACTED
    )
    md_len = struct.unpack_from(">I", batch)[0]
    yield Oversized("record metadata size", _set_u32(batch, 4 + md_len), "batch", {0, 4})
    smm = api.SingleMessageMetadata(payload_size=2**31 - 1).SerializeToString()
    raw = struct.pack(">I", len(smm)) + smm + b"v"
    entry = build_entry(_md(num_messages_in_batch=1), raw)
    yield Oversized("payload_size", entry, "batch", {0, 4 + len(smm)})
    many = build_entry(_md(num_messages_in_batch=2**31 - 1), plain)
    # refused before parsing (more than MAX_BATCH_MESSAGES), at the start of the batch
    yield Oversized("num_messages_in_batch", many, "batch", {0})
    for codec in (1, 2, 3, 4):
        for size in (HUGE, 400 << 20):
            for payload in compressed_claiming(codec, size):
                md = _md(compression=codec, uncompressed_size=size)
                at = 10 + md.ByteSize()
                name = f"codec {codec} claims {size} for {len(payload)} bytes"
                yield Oversized(name, build_entry(md, payload), "compression", {at})


@pytest.mark.parametrize("limit", [None, 2**40], ids=["default-limit", "no-limit"])
def test_oversized_lengths_are_refused_cheaply(limit: int | None) -> None:
    for case in oversized_cases():
        opts = DecodeOptions(outer=case.outer)
        if limit is not None:
            opts.max_uncompressed = limit  # the per-codec sanity bound must still refuse
        tracemalloc.start()
        try:
            entry = decode(case.data, opts)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < PEAK_BYTES, f"{case.name}: peak {peak} bytes"
        assert not entry.ok, case.name
        named = [p for p in entry.problems if p.layer == case.layer and p.offset in case.offsets]
        assert named, (case.name, entry.problems)


def _native_memory_child() -> None:  # pragma: no cover - runs in a subprocess
    """Decode the oversized cases under an address-space limit: native allocations
    (zstd, snappy) that tracemalloc cannot see would fail or abort here."""
    import resource

    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            current = int(line.split()[1]) * 1024
    limit = current + (256 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    for max_uncompressed in (DecodeOptions().max_uncompressed, 2**40):
        for case in oversized_cases():
            decode_entry(
                case.data, DecodeOptions(outer=case.outer, max_uncompressed=max_uncompressed)
            )
    print("ok")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_oversized_lengths_allocate_nothing_natively() -> None:
    root = Path(__file__).parent.parent.parent
    code = "from tests.decoders.test_fuzz import _native_memory_child; _native_memory_child()"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_batch_record_without_payload_size_is_reported() -> None:
    """formats.md §3.2: payload_size is required; a record without it is not a message."""
    smm = api.SingleMessageMetadata(partition_key="k")
    body = smm.SerializePartialToString()
    raw = struct.pack(">I", len(body)) + body
    entry = decode(build_entry(_md(num_messages_in_batch=1), raw), DecodeOptions())
    assert not entry.ok
    assert any(p.layer == "batch" and "payload_size" in p.message for p in entry.problems)


# -- cuts and flips of built entries, checked against the builder's layout --------------


def layout(spec: EntrySpec) -> list[tuple[int, int, str, set[int]]]:
    """[(start, stop, layer, offsets)]: a cut at t in [start, stop) must name ``layer`` at one
    of ``offsets``; worked out from what was built (formats.md §1, §6.2, §10)."""
    regions = []
    pos = 0
    if spec.bookie is not None:
        head = 32 + DIGESTS[spec.bookie.digest].size
        regions.append((0, head, "bookie-entry", {0}))
        pos = head
    inner = spec.pulsar_entry()
    if spec.original_id is not None:
        if spec.bookie is not None:
            # inside a bookie entry only the exact size tells compacted framing apart
            # (compacted.plausible), so a cut one is read as a Pulsar entry: the digest
            # mismatch is what must be reported
            return regions
        i = spec.original_id.ByteSize()
        end = pos + 8 + i + len(inner)
        regions.append((pos, end, "compacted", {pos, pos + 4 + i, pos + 8 + i}))
        return regions
    if spec.bem is not None:
        size = 6 + spec.bem.ByteSize()
        regions.append((pos, pos + 2, "message-metadata", {pos}))  # the magic alone is no magic
        regions.append((pos + 2, pos + size, "broker-entry-metadata", {pos, pos + 6}))
        pos += size
    crc_at = None
    if spec.checksum:
        regions.append((pos, pos + 2, "message-metadata", {pos}))
        regions.append((pos + 2, pos + 6, "checksum", {pos}))
        crc_at = pos
        pos += 6
    base = 0 if spec.bookie is None else 32 + DIGESTS[spec.bookie.digest].size
    (md_size,) = struct.unpack_from(">I", inner, pos - base)
    regions.append((pos, pos + 4 + md_size, "message-metadata", {pos}))
    if crc_at is not None:  # a cut payload fails the CRC32C
        regions.append((pos + 4 + md_size, base + len(inner), "checksum", {crc_at}))
    return regions


def strict_options(spec: EntrySpec) -> DecodeOptions:
    if spec.bookie is not None:
        return DecodeOptions(
            outer=Outer.BOOKIE_ENTRY,
            digest_type=spec.bookie.digest,
            password=spec.bookie.password,
        )
    outer = Outer.COMPACTED if spec.original_id is not None else Outer.PULSAR_ENTRY
    return DecodeOptions(outer=outer)


@settings(max_examples=200, deadline=None)
@given(spec=entry_specs(encryption=False), where=st.floats(0, 1, exclude_max=True))
def test_cut_built_entry_names_the_cut_layer(spec: EntrySpec, where: float) -> None:
    data = spec.build()
    t = int(where * len(data))
    entry = decode(data[:t], strict_options(spec))
    named = {(p.layer, p.offset) for p in entry.problems if p.severity == "error"}
    for start, stop, layer, offsets in layout(spec):
        if start <= t < stop:
            assert any((layer, o) in named for o in offsets), (t, layer, offsets, entry.problems)
            assert not entry.ok
    digest = spec.bookie is not None and spec.bookie.digest is not DigestType.DUMMY
    if digest and t >= 32 + DIGESTS[spec.bookie.digest].size:
        assert any("digest mismatch" in p.message for p in entry.problems)


@settings(max_examples=200, deadline=None)
@given(spec=entry_specs(), where=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7))
def test_flipped_built_entry_fails_its_checksum(spec: EntrySpec, where: float, bit: int) -> None:
    data = spec.build()
    i = int(where * len(data))
    entry = decode(flipped(data, i, bit), strict_options(spec))
    if spec.bookie is not None and spec.bookie.digest is not DigestType.DUMMY:
        assert not entry.ok
        assert any("digest mismatch" in p.message for p in entry.problems), (i, bit)
        return
    crc = [r for r in layout(spec) if r[2] == "checksum"]
    crc_at = min(next(iter(r[3])) for r in crc) if crc else None
    if crc_at is not None and i >= crc_at + 2:  # the CRC32C itself, or a byte it covers
        assert not entry.ok
        assert any("CRC32C mismatch" in p.message for p in entry.problems), (i, bit)
        return
    # No checksum covers the flipped byte (no digest, no CRC32C, or a byte before it).
    # Its decoded values may legitimately stay the same (the upper bits of an int32
    # varint are ignored by protobuf), but the flip must show in what is printed: the
    # layers and their bytes, never the original entry word for word.
    original = decode(data, strict_options(spec))
    assert original.ok, original.problems
    before = json.dumps(original.to_json(with_hex=True), sort_keys=True, default=str)
    after = json.dumps(entry.to_json(with_hex=True), sort_keys=True, default=str)
    assert after != before, (i, bit)


# -- random and mutated bytes ------------------------------------------------------------

OUTERS = st.sampled_from(list(Outer))
DEPTHS = st.sampled_from(list(Depth))
DIGEST_TYPES = st.none() | st.sampled_from(list(DigestType))


@settings(max_examples=600, deadline=None)
@given(
    data=st.binary(max_size=400),
    outer=OUTERS,
    depth=DEPTHS,
    digest=DIGEST_TYPES,
    password=st.none() | st.binary(max_size=6),
    verify=st.booleans(),
)
def test_random_bytes_never_raise(
    data: bytes,
    outer: Outer,
    depth: Depth,
    digest: DigestType | None,
    password: bytes | None,
    verify: bool,
) -> None:
    opts = DecodeOptions(
        outer=outer, depth=depth, digest_type=digest, password=password, verify=verify
    )
    with time_limit(10):
        decode(data, opts)


MAGIC_PREFIXES = st.sampled_from([b"", b"\x0e\x01", b"\x0e\x02", b"\x0e\x02\x00\x00\x00\x02"])


@settings(max_examples=150, deadline=None)
@given(prefix=MAGIC_PREFIXES, rest=st.binary(max_size=200), outer=OUTERS)
def test_random_bytes_after_a_magic_never_raise(prefix: bytes, rest: bytes, outer: Outer) -> None:
    with time_limit(10):
        decode(prefix + rest, DecodeOptions(outer=outer))


MUTATIONS = st.lists(
    st.tuples(
        st.sampled_from(["flip", "cut", "insert", "delete", "huge-u32", "zero-u32"]),
        st.integers(0, 10_000),
        st.binary(min_size=1, max_size=8),
    ),
    min_size=1,
    max_size=4,
)


def mutate(data: bytes, ops: list[tuple[str, int, bytes]]) -> bytes:
    out = bytearray(data)
    for op, where, extra in ops:
        i = where % (len(out) + 1)
        if op == "flip" and i < len(out):
            out[i] ^= extra[0] or 1
        elif op == "cut":
            del out[i:]
        elif op == "insert":
            out[i:i] = extra
        elif op == "delete":
            del out[i : i + len(extra)]
        elif op in ("huge-u32", "zero-u32"):
            out[i : i + 4] = b"\xff\xff\xff\xff" if op == "huge-u32" else b"\0\0\0\0"
    return bytes(out)


@settings(max_examples=400, deadline=None)
@given(spec=entry_specs(), ops=MUTATIONS, outer=OUTERS, depth=DEPTHS, with_key=st.booleans())
def test_mutated_built_entries_never_raise(
    spec: EntrySpec, ops: list[tuple[str, int, bytes]], outer: Outer, depth: Depth, with_key: bool
) -> None:
    data = mutate(spec.build(), ops)
    opts = DecodeOptions(
        outer=outer,
        depth=depth,
        private_key=private_key() if with_key else None,
        digest_type=spec.bookie.digest if spec.bookie is not None else None,
        password=spec.bookie.password if spec.bookie is not None else None,
    )
    with time_limit(10):
        decode(data, opts)
        opts.raise_errors = True  # then bad bytes raise, but only as LedgerctlError
        only_ledgerctl_errors(decode_entry, data, opts)


# -- the layer parsers, called directly -----------------------------------------------------


def only_ledgerctl_errors(fn: Any, *args: Any) -> Any:
    try:
        with time_limit(10):
            return fn(*args)
    except LedgerctlError:
        return None


@settings(max_examples=200, deadline=None)
@given(
    buf=st.binary(max_size=300),
    count=st.integers(-2, 40),
    indexes=st.none() | st.lists(st.integers(-(2**31), 2**31 - 1), max_size=40),
)
def test_parse_batch_raises_only_ledgerctl_errors(
    buf: bytes, count: int, indexes: list[int] | None
) -> None:
    if indexes is not None:
        count = len(indexes)
    only_ledgerctl_errors(parse_batch, buf, count, indexes, [])


@settings(max_examples=200, deadline=None)
@given(buf=st.binary(max_size=300), pos=st.integers(0, 8))
def test_compacted_parse_raises_only_ledgerctl_errors(buf: bytes, pos: int) -> None:
    only_ledgerctl_errors(compacted.parse, buf, pos, len(buf), [])
    compacted.plausible(buf, min(pos, len(buf)), len(buf))


@settings(max_examples=200, deadline=None)
@given(
    buf=st.binary(max_size=120),
    kind=st.sampled_from(list(DigestType)),
    password=st.none() | st.binary(max_size=6),
)
def test_bookkeeper_parse_raises_only_ledgerctl_errors(
    buf: bytes, kind: DigestType, password: bytes | None
) -> None:
    only_ledgerctl_errors(bookkeeper.parse, buf, 0, len(buf), kind, password)
    only_ledgerctl_errors(bookkeeper.parse_lac_packet, buf, kind, password)
    bookkeeper.detect_digest(buf, 0, len(buf), password)


@settings(max_examples=200, deadline=None)
@given(buf=st.binary(max_size=200), verify=st.booleans(), marker=st.integers(-1, 30))
def test_pulsar_layer_parsers_raise_only_ledgerctl_errors(
    buf: bytes, verify: bool, marker: int
) -> None:
    only_ledgerctl_errors(parse_prefixes, buf, 0, len(buf), [], verify)
    only_ledgerctl_errors(MetadataLayer.parse, buf, 0, len(buf), [])
    only_ledgerctl_errors(parse_marker, buf, marker, [])


@settings(max_examples=300, deadline=None)
@given(
    codec=st.integers(-1, 6),
    plain=st.binary(max_size=300),
    ops=MUTATIONS,
    size_delta=st.sampled_from([0, 0, 1, -1, HUGE, 400 << 20]),
    random_data=st.none() | st.binary(max_size=64),
)
def test_decompress_raises_only_ledgerctl_errors(
    codec: int,
    plain: bytes,
    ops: list[tuple[str, int, bytes]],
    size_delta: int,
    random_data: bytes | None,
) -> None:
    if random_data is not None:
        data = random_data
    elif 0 <= codec <= 4:
        data = mutate(compress(codec, plain), ops)
    else:
        data = plain
    size = max(0, min(len(plain) + size_delta, HUGE))
    tracemalloc.start()
    try:
        out = only_ledgerctl_errors(decompress, codec, data, size, 2**40)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES
    if out is not None and codec != 0:
        assert len(out) == size  # decompress promises exactly uncompressed_size bytes
