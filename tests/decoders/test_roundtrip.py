"""Round trips: build -> decode gives back what was built; decode -> rebuild gives back
the exact bytes, for entries we build and for entries real clients and BookKeeper wrote."""

from __future__ import annotations

import base64
import json
import struct
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders import bookkeeper, compacted
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
from pulsarctl_py.decoders.checksums import DigestType, crc32c
from pulsarctl_py.decoders.codecs import CODECS, compress
from pulsarctl_py.decoders.crypto import decrypt_payload, load_private_key
from pulsarctl_py.decoders.entry import (
    DecodeOptions,
    Entry,
    Outer,
    decode_entries,
    decode_entry,
    rebuild,
)
from pulsarctl_py.decoders.payload import build_batch
from pulsarctl_py.decoders.protos import signed64
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.proto import pulsar_api_pb2 as api
from tests.support.strategies import DATA, KEYS, EntrySpec, entry_specs

REAL_CLIENT = sorted((DATA / "real-client").glob("*/*.bin"))
GO_RAW = sorted((DATA / "upstream" / "pulsar-client-go").glob("raw*.bin"))
BK_OFFLINE = DATA / "bookkeeper" / "offline"
BK_ENTRIES = sorted((BK_OFFLINE / "digest").glob("*/*.entry"))
BK_PASSWORD = b"secret"  # offline/manifest.json: password_utf8


@cache
def private_key() -> Any:
    return load_private_key((KEYS / "rsa_private.pem").read_bytes())


def sidecar(path: Path) -> dict[str, Any]:
    return json.loads(path.with_suffix(".json").read_text())


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


# -- build, then decode -------------------------------------------------------------


def options_for(spec: EntrySpec, auto: bool, key: Any) -> DecodeOptions:
    opts = DecodeOptions(private_key=key)
    if spec.bookie is not None:
        opts.password = spec.bookie.password
        if not auto or spec.bookie.digest is DigestType.DUMMY:  # DUMMY cannot be detected
            opts.digest_type = spec.bookie.digest
    if not auto:
        opts.outer = (
            Outer.BOOKIE_ENTRY
            if spec.bookie is not None
            else Outer.COMPACTED
            if spec.original_id is not None
            else Outer.PULSAR_ENTRY
        )
    return opts


def check_decoded(entry: Entry, spec: EntrySpec, key_given: bool) -> None:
    assert entry.problems == []
    assert entry.ok
    names = [layer.name for layer in entry.layers]
    assert "undecoded" not in names
    if spec.bookie is not None:
        f = spec.bookie
        assert names[0] == "bookie-entry"
        assert entry.header == f.header
        assert entry.digest_type is f.digest
        # a DUMMY digest has nothing to verify: unverified, never "ok"
        want = None if f.digest is DigestType.DUMMY else True
        assert entry.layers[0].check is not None and entry.layers[0].check.ok is want
        assert entry.position == (f.header.ledger_id, f.header.entry_id)
    else:
        assert entry.header is None
    if spec.original_id is not None:
        assert "compacted" in names
        assert entry.original_id == spec.original_id
        assert entry.message_position == (
            signed64(spec.original_id.ledgerId),
            signed64(spec.original_id.entryId),
        )
    else:
        assert entry.original_id is None
    if spec.bem is not None:
        assert entry.broker_entry_metadata == spec.bem
    else:
        assert entry.broker_entry_metadata is None
    assert entry.has_checksum is spec.checksum
    if spec.checksum:
        (check,) = [layer.check for layer in entry.layers if layer.name == "checksum"]
        assert check is not None and check.ok is True
    assert entry.encrypted is spec.encrypt
    if spec.encrypt and not key_given:
        assert entry.messages == []
        return
    if spec.codec:
        assert "compression" in names
    expected = spec.expected()
    assert len(entry.messages) == len(expected)
    position = entry.message_position
    for got, want in zip(entry.messages, expected, strict=True):
        assert got.key == want.key
        assert (None if got.value is None else bytes(got.value)) == want.value
        assert got.null_value is want.null_value
        assert got.properties == want.properties
        assert got.batch_index == want.batch_index
        assert got.event_time == want.event_time
        assert got.sequence_id == want.sequence_id
        assert (None if got.ordering_key is None else bytes(got.ordering_key)) == want.ordering_key
        assert got.index == want.index
        assert (got.ledger_id, got.entry_id) == (position or (None, None))
    if spec.records is not None:
        holes = [
            (spec.compacted_indexes[j] if spec.compacted_indexes else j)
            for j, r in enumerate(spec.records)
            if r.compacted_out
        ]
        assert entry.placeholders == holes


@settings(max_examples=400, deadline=None)
@given(spec=entry_specs(), auto=st.booleans(), with_key=st.booleans())
def test_build_then_decode(spec: EntrySpec, auto: bool, with_key: bool) -> None:
    data = spec.build()
    key = private_key() if with_key else None
    entry = decode_entry(data, options_for(spec, auto, key))
    check_decoded(entry, spec, key is not None)
    # and back: the decoded values serialize to the very same bytes
    password = spec.bookie.password if spec.bookie is not None else None
    assert rebuild(entry, password) == data


@settings(max_examples=40, deadline=None)
@given(spec=entry_specs(framing=False, encryption=False))
def test_raw_pulsar_entry_bytes_follow_the_layout(spec: EntrySpec) -> None:
    """The builders write formats.md §1 byte for byte (checked by hand, not by decoding)."""
    data = spec.build()
    pos = 0
    if spec.bem is not None:
        body = spec.bem.SerializeToString()
        assert data[:6] == struct.pack(">HI", 0x0E02, len(body))
        assert data[6 : 6 + len(body)] == body
        pos = 6 + len(body)
    if spec.checksum:
        (magic, crc) = struct.unpack_from(">HI", data, pos)
        assert magic == 0x0E01
        assert crc == crc32c(data[pos + 6 :])
        pos += 6
    (size,) = struct.unpack_from(">I", data, pos)
    md = api.MessageMetadata.FromString(data[pos + 4 : pos + 4 + size])
    assert md.producer_name == spec.metadata.producer_name
    assert md.HasField("num_messages_in_batch") is (spec.records is not None)


# -- decode, then rebuild: real bytes ---------------------------------------------------


@pytest.mark.parametrize("with_key", [False, True], ids=["no-key", "private-key"])
@pytest.mark.parametrize("path", REAL_CLIENT, ids=_id)
def test_real_client_rebuild_is_byte_identical(path: Path, with_key: bool) -> None:
    data = path.read_bytes()
    key = private_key() if with_key else None
    entry = decode_entry(data, DecodeOptions(private_key=key))
    assert entry.ok, entry.problems
    assert rebuild(entry) == data

    facts = sidecar(path)
    codec = facts["producer_config"].get("compression_type", "NONE").upper()
    encrypted = "encryption_key" in facts["producer_config"]
    assert entry.encrypted is encrypted
    opened = key is not None or not encrypted
    names = [layer.name for layer in entry.layers]
    if entry.chunk is not None:
        return
    if codec != "NONE" and opened:
        # the rebuild above recompressed the payload: the compressor really ran
        assert "compression" in names
        assert CODECS[entry.metadata.compression].name == codec
    if opened:
        sent = facts["messages"]
        assert [m.key for m in entry.messages] == [m["key"] for m in sent]
        assert [
            None if m.value is None else base64.b64encode(m.value).decode() for m in entry.messages
        ] == [m["value_b64"] for m in sent]
        assert [m.properties for m in entry.messages] == [m["properties"] for m in sent]
    else:
        assert entry.messages == []


COMPRESSED = [
    p
    for p in REAL_CLIENT
    if sidecar(p)["producer_config"].get("compression_type", "NONE").upper() != "NONE"
    and not p.parent.name.startswith("chunked")
]


@pytest.mark.parametrize("path", COMPRESSED, ids=_id)
def test_python_compressors_match_the_cpp_client(path: Path) -> None:
    """What the C++ client 4.2.0 wrote is what lz4/zlib/zstandard/cramjam write again.

    LZ4: pulsar-client-cpp lib/CompressionCodecLZ4.cc calls LZ4_compress_default, which is
    python-lz4's block mode "default"; ZLIB: lib/CompressionCodecZLib.cc calls compress()
    (Z_DEFAULT_COMPRESSION), which is zlib.compress at level -1; ZSTD: ZSTD_compress at
    level 3 (formats.md §5), zstandard level 3 with the content size written; SNAPPY:
    snappy::Compress, cramjam's compress_raw. If a library upgrade changes its output,
    this test says which codec, before the rebuild test only says "bytes differ".
    """
    data = path.read_bytes()
    entry = decode_entry(data, DecodeOptions(private_key=private_key()))
    md = entry.metadata
    stored = bytes(entry.payload)
    if md.encryption_keys:
        stored, _, _ = decrypt_payload(
            stored, md.encryption_keys, bytes(md.encryption_param), private_key()
        )
    plain = entry.plaintext
    assert plain is not None and len(plain) == md.uncompressed_size
    assert compress(md.compression, plain) == stored


@pytest.mark.parametrize("scenario", ["chunked", "chunked-lz4"])
def test_chunked_message_recompresses_to_the_chunks(scenario: str) -> None:
    paths = sorted((DATA / "real-client" / scenario).glob("*.bin"))
    entries = list(decode_entries((p.read_bytes(), None) for p in paths))
    last = entries[-1]
    (message,) = last.messages
    sent = sidecar(paths[-1])["messages"][0]
    assert bytes(message.value) == base64.b64decode(sent["value_b64"])
    joined = b"".join(bytes(e.chunk.payload) for e in entries if e.chunk is not None)
    md = entries[0].metadata
    assert compress(md.compression, message.value) == joined
    for path, entry in zip(paths, entries, strict=True):
        assert rebuild(entry) == path.read_bytes()


@pytest.mark.parametrize("path", GO_RAW, ids=_id)
def test_go_client_vectors_rebuild(path: Path) -> None:
    data = path.read_bytes()
    entry = decode_entry(data)
    assert entry.ok, entry.problems
    assert rebuild(entry) == data
    # upstream test: every value is "hello"; the batch of 10 has sequence ids 0..9
    assert [bytes(m.value) for m in entry.messages] == [b"hello"] * len(entry.messages)
    if path.stem == "rawBatchMessage10":
        assert [m.sequence_id for m in entry.messages] == list(range(10))
    if path.stem == "rawCompatSingleMessage":
        assert entry.messages[0].properties == {"a": "1", "b": "2"}


@cache
def bk_items() -> dict[str, dict[str, Any]]:
    manifest = json.loads((BK_OFFLINE / "manifest.json").read_text())
    payloads = {p["name"]: p["file"] for p in manifest["payloads"]}
    out = {}
    for item in manifest["digest"]["items"]:
        if "entry_file" not in item:
            continue  # an explicit-LAC packet
        out[item["entry_file"]] = dict(item, payload_file=payloads[item["payload"]])
    return out


@pytest.mark.parametrize(
    "path,auto",
    # a DUMMY digest cannot be detected: only with the digest type given
    [(p, auto) for p in BK_ENTRIES for auto in (False, True) if not (auto and "DUMMY" in p.parts)],
    ids=lambda v: _id(v) if isinstance(v, Path) else "digest-detected" if v else "digest-given",
)
def test_bookkeeper_entries_rebuild(path: Path, auto: bool) -> None:
    data = path.read_bytes()
    item = bk_items()[path.relative_to(BK_OFFLINE).as_posix()]
    kind = DigestType[item["digest_type"]]
    payload = (BK_OFFLINE / item["payload_file"]).read_bytes()
    opts = DecodeOptions(password=BK_PASSWORD, digest_type=None if auto else kind)
    entry = decode_entry(data, opts)
    assert entry.digest_type is kind
    assert entry.header is not None
    assert (entry.header.ledger_id, entry.header.entry_id) == (item["ledger_id"], item["entry_id"])
    assert entry.header.lac == item["last_add_confirmed"]
    assert entry.header.length == item["length"]
    check = entry.layers[0].check
    assert check is not None and check.ok is (None if kind is DigestType.DUMMY else True)
    # the bookie layer alone round-trips whatever the payload is
    _, header, at = bookkeeper.parse(data, 0, len(data), kind, BK_PASSWORD)
    assert data[at:] == payload
    assert bookkeeper.build(header, payload, kind, BK_PASSWORD) == data
    if item["payload"].startswith("pulsar-"):
        assert entry.ok, entry.problems
        assert rebuild(entry, BK_PASSWORD) == data


# -- PIP-429 and compacted_out placeholders (formats.md §4, §6.5) --------------------------


def _batch_entry(md: Any, records: list[tuple[Any, bytes | None]]) -> bytes:
    return build_entry(md, build_batch(records), checksum=True)


def test_pip429_example_keeps_batch_index_and_count() -> None:
    """§6.5: the PIP example, 4 messages of which batch index 1 is kept."""
    md = api.MessageMetadata(
        producer_name="p", sequence_id=10, publish_time=1, num_messages_in_batch=4
    )
    md.compacted_batch_indexes.append(1)
    smm = api.SingleMessageMetadata(partition_key="k1", sequence_id=11)
    bem = api.BrokerEntryMetadata(index=103)
    data = build_entry(md, build_batch([(smm, b"v1")]), broker_entry_metadata=bem)
    entry = decode_entry(data)
    assert entry.ok
    (msg,) = entry.messages
    assert (msg.key, bytes(msg.value), msg.batch_index, msg.sequence_id) == ("k1", b"v1", 1, 11)
    assert entry.num_messages == 4  # num_messages_in_batch stays the original count
    assert msg.index == 103 - 4 + 1 + 1  # §2: index - batch size + i + 1
    assert rebuild(entry) == data


@pytest.mark.parametrize(
    ("count", "indexes", "said"),
    [
        (4, [4], "compacted_batch_indexes[0] = 4 is not below num_messages_in_batch 4"),
        (4, [0, 7], "compacted_batch_indexes[1] = 7 is not below num_messages_in_batch 4"),
        (4, [2, 1], "compacted_batch_indexes[1] = 1 is not above the one before it (2)"),
        (4, [1, 1], "compacted_batch_indexes[1] = 1 is not above the one before it (1)"),
        (4, [-1], "compacted_batch_indexes[0] = -1 is below 0"),
        (0, [0], "compacted_batch_indexes[0] = 0 is not below num_messages_in_batch 0"),
        (2**31 - 1, [0], "num_messages_in_batch 2147483647 of a compacted batch is outside"),
    ],
)
def test_pip429_indexes_that_name_no_message_are_an_error(
    count: int, indexes: list[int], said: str
) -> None:
    """Retained indexes past the batch's count, below 0 or not rising (and a count past the
    decoder's bound) give messages ids that name no message: the decoder says so, and
    still shows the records it read."""
    md = api.MessageMetadata(
        producer_name="p", sequence_id=10, publish_time=1, num_messages_in_batch=count
    )
    md.compacted_batch_indexes.extend(indexes)
    recs = [(api.SingleMessageMetadata(partition_key=f"k{i}"), b"v") for i in indexes]
    entry = decode_entry(_batch_entry(md, recs))
    assert not entry.ok
    (problem,) = entry.problems
    assert (problem.severity, problem.layer) == ("error", "batch")
    assert said in problem.message
    assert [m.batch_index for m in entry.messages] == indexes


@pytest.mark.parametrize("indexes", [[0], [0, 1, 2]])
def test_parse_batch_refuses_a_count_other_than_its_indexes(indexes: list[int]) -> None:
    """One record per retained index: a count that disagrees is damage the parser names
    (a LedgerctlError), not an IndexError from the record loop."""
    from pulsarctl_py.decoders.errors import CorruptEntryError
    from pulsarctl_py.decoders.payload import parse_batch

    plain = build_batch([(api.SingleMessageMetadata(partition_key=k), b"v") for k in "ab"])
    with pytest.raises(CorruptEntryError, match="compacted_batch_indexes, one per record"):
        parse_batch(plain, 2, indexes, [])


def test_pip429_packed_indexes_are_accepted() -> None:
    """§3.1: field 31 is unpacked (F8 01) but the packed form (FA 01) must be accepted."""
    md = api.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=6
    )
    indexes = [0, 3, 5]
    packed = bytes([0xFA, 0x01, len(indexes), *indexes])
    body = md.SerializeToString() + packed
    recs = [(api.SingleMessageMetadata(partition_key=f"k{i}"), f"v{i}".encode()) for i in indexes]
    data = struct.pack(">I", len(body)) + body + build_batch(recs)
    entry = decode_entry(data, DecodeOptions(outer=Outer.PULSAR_ENTRY))
    assert entry.ok, entry.problems
    assert [m.batch_index for m in entry.messages] == indexes
    assert [m.key for m in entry.messages] == [f"k{i}" for i in indexes]


def test_compacted_out_placeholders_are_skipped() -> None:
    """§4 / §6.4: old-style compacted batch; placeholders hold no message."""
    md = api.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=4
    )
    hole = api.SingleMessageMetadata(compacted_out=True)
    recs: list[tuple[Any, bytes | None]] = [
        (hole, None),
        (api.SingleMessageMetadata(partition_key="a", sequence_id=1), b"A"),
        (api.SingleMessageMetadata(compacted_out=True), None),
        (api.SingleMessageMetadata(partition_key="b", sequence_id=3, null_value=True), None),
    ]
    data = _batch_entry(md, recs)
    entry = decode_entry(data)
    assert entry.ok
    assert entry.placeholders == [0, 2]
    assert [(m.key, m.batch_index, m.null_value) for m in entry.messages] == [
        ("a", 1, False),
        ("b", 3, True),
    ]
    assert entry.messages[1].value is None
    assert rebuild(entry) == data


def test_pip429_batch_inside_compacted_ledger_entry() -> None:
    """A compacted-ledger entry (§6.2) wrapping a PIP-429 batch, inside a CRC32 bookie entry
    with the empty password, as the compactor writes it (§6.1)."""
    md = api.MessageMetadata(
        producer_name="p",
        sequence_id=5,
        publish_time=1,
        num_messages_in_batch=3,
        compression=api.ZLIB,
    )
    md.compacted_batch_indexes.extend([0, 2])
    recs = [
        (api.SingleMessageMetadata(partition_key="x"), b"x" * 50),
        (api.SingleMessageMetadata(partition_key="y"), b"y" * 50),
    ]
    plain = build_batch(recs)
    md.uncompressed_size = len(plain)
    inner = build_entry(md, compress(api.ZLIB, plain))
    msg_id = api.MessageIdData(ledgerId=77, entryId=2**64 - 1)
    header = BookieEntryHeader(900, 3, 2, 12345)
    data = bookkeeper.build(header, compacted.build(msg_id, inner), DigestType.CRC32, b"")
    entry = decode_entry(data)
    assert entry.ok, entry.problems
    assert entry.digest_type is DigestType.CRC32
    assert entry.message_position == (77, -1)
    assert [(m.key, m.batch_index, m.sequence_id) for m in entry.messages] == [
        ("x", 0, 5),
        ("y", 2, 7),
    ]
    assert [m.message_id for m in entry.messages] == ["77:-1:0", "77:-1:2"]
    assert rebuild(entry, b"") == data
