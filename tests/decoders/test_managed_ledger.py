"""Managed-ledger znode values in every encoding, and topic names <-> znode paths."""

from __future__ import annotations

import itertools
import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import CorruptEntryError, LedgerctlError
from pulsarctl_py.decoders.managed_ledger import InfoEncoding, TopicName
from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

CODECS = ["LZ4", "ZLIB", "ZSTD", "SNAPPY"]


def sample_ml_info() -> mlpb.ManagedLedgerInfo:
    info = mlpb.ManagedLedgerInfo()
    info.ledgerInfo.add(ledgerId=3, entries=10, size=1234, timestamp=1767225600123)
    off = info.ledgerInfo.add(ledgerId=7, entries=2, size=99, timestamp=1767225601123)
    off.offloadContext.uidMsb = 1
    off.offloadContext.uidLsb = 2
    off.offloadContext.complete = True
    off.offloadContext.driverMetadata.name = "aws-s3"
    off.offloadContext.driverMetadata.properties.add(key="bucket", value="b")
    info.ledgerInfo.add(ledgerId=9, timestamp=0)  # the open ledger
    info.terminatedPosition.ledgerId = 7
    info.terminatedPosition.entryId = 1
    info.properties.add(key=mld.PROPERTY_INDEX, value="41")
    info.properties.add(key=mld.PROPERTY_SHADOW_SOURCE, value="persistent://public/default/src")
    # make it large enough that compression matters, as Pulsar's threshold would want
    for i in range(200):
        info.properties.add(key=f"k{i}", value="v" * 50)
    return info


def sample_cursor_info() -> mlpb.ManagedCursorInfo:
    info = mlpb.ManagedCursorInfo(
        cursorsLedgerId=-1, markDeleteLedgerId=3, markDeleteEntryId=4, lastActive=1767225600999
    )
    rng = info.individualDeletedMessages.add()
    rng.lowerEndpoint.ledgerId, rng.lowerEndpoint.entryId = 3, 5
    rng.upperEndpoint.ledgerId, rng.upperEndpoint.entryId = 3, 8
    info.properties.add(name="p", value=7)
    batch = info.batchedEntryDeletionIndexInfo.add(deleteSet=[0b1011])
    batch.position.ledgerId, batch.position.entryId = 3, 9
    info.cursorProperties.add(name="sub prop", value="é")
    return info


MESSAGES = {"ml": sample_ml_info, "cursor": sample_cursor_info}
ENCODINGS = [("binary", None), ("text", None)] + [("compressed", c) for c in CODECS]


@pytest.mark.parametrize("kind", list(MESSAGES))
@pytest.mark.parametrize("encoding, codec", ENCODINGS, ids=[e[1] or e[0] for e in ENCODINGS])
def test_round_trip_in_every_encoding(kind: str, encoding: str, codec: str | None) -> None:
    msg = MESSAGES[kind]()
    data = mld.build_info(msg, encoding, codec)
    decoded = mld.parse_info(type(msg), data)
    assert decoded.message == msg
    assert decoded.encoding == InfoEncoding(encoding)
    assert decoded.compression == codec
    assert decoded.missing == [] and decoded.problems == []
    assert mld.rebuild(decoded) == data  # written back exactly as read
    # a modified message goes back in the same encoding
    if kind == "ml":
        msg.ledgerInfo.add(ledgerId=11, timestamp=0)
    else:
        msg.markDeleteEntryId = 6
    again = mld.parse_info(type(msg), mld.rebuild(decoded, msg))
    assert again.message == msg and again.encoding == decoded.encoding
    assert again.compression == codec


@pytest.mark.parametrize("codec", CODECS)
def test_envelope_layout(codec: str) -> None:
    msg = sample_ml_info()
    data = mld.build_info(msg, "compressed", codec)
    magic, meta_len = struct.unpack_from(">HI", data, 0)
    assert magic == 0x4778
    meta = mlpb.ManagedLedgerInfoMetadata.FromString(data[6 : 6 + meta_len])
    assert mlpb.CompressionType.Name(meta.compressionType) == codec
    assert meta.uncompressedSize == msg.ByteSize()
    assert len(data) < msg.ByteSize()


def test_java_sync_flushed_zlib_envelope() -> None:
    """Java's Deflater writes a sync-flushed stream without the final block and Adler-32."""
    msg = sample_cursor_info()
    body = msg.SerializeToString()
    deflater = zlib.compressobj()
    payload = deflater.compress(body) + deflater.flush(zlib.Z_SYNC_FLUSH)
    assert payload.endswith(b"\x00\x00\xff\xff")
    meta = mlpb.ManagedCursorInfoMetadata(compressionType=2, uncompressedSize=len(body))
    meta_bytes = meta.SerializeToString()
    data = struct.pack(">HI", 0x4778, len(meta_bytes)) + meta_bytes + payload
    decoded = mld.parse_cursor_info(data)
    assert decoded.message == msg and decoded.compression == "ZLIB"


def test_empty_znode_is_an_empty_ml_info() -> None:
    decoded = mld.parse_ml_info(b"")
    assert decoded.encoding is InfoEncoding.EMPTY
    assert decoded.message == mlpb.ManagedLedgerInfo() and decoded.missing == []
    assert mld.rebuild(decoded) == b""
    grown = mlpb.ManagedLedgerInfo()
    grown.ledgerInfo.add(ledgerId=1, timestamp=0)
    assert mld.rebuild(decoded, grown) == grown.SerializeToString()  # Pulsar's first update


def test_a_ledger_list_is_read_in_the_brokers_order() -> None:
    """Stored as a 4.0 broker's offload leaves it (the current ledger first: the HashMap
    order of ManagedLedgerImpl.tryTransformLedgerInfo), read and written sorted by id as
    the broker's sorted map holds it; the stored order is kept to report."""
    info = mlpb.ManagedLedgerInfo()
    for lid, entries in ((17, 0), (4, 5), (8, 5), (15, 5)):
        info.ledgerInfo.add(ledgerId=lid, entries=entries, timestamp=lid if entries else 0)
    raw = mld.build_info(info, InfoEncoding.COMPRESSED, "LZ4")
    decoded = mld.parse_ml_info(raw)
    assert [li.ledgerId for li in decoded.message.ledgerInfo] == [4, 8, 15, 17]
    assert decoded.stored_ledger_ids == [17, 4, 8, 15]
    assert decoded.to_json()["stored_ledger_ids"] == [17, 4, 8, 15]
    assert decoded.raw == raw  # the bytes a compare-and-set compares, untouched
    again = mld.parse_ml_info(mld.rebuild(decoded))
    assert again.message == decoded.message and again.stored_ledger_ids is None
    assert again.encoding is InfoEncoding.COMPRESSED
    in_order = mld.parse_ml_info(mld.build_info(again.message))
    assert in_order.stored_ledger_ids is None and "stored_ledger_ids" not in in_order.to_json()


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 1000)), min_size=0, max_size=30))
def test_broker_order_is_the_brokers_sorted_map(stored: list[tuple[int, int]]) -> None:
    """Whatever the stored list, the ledgers read are the broker's map after it put each
    stored LedgerInfo in stored order (ManagedLedgerImpl.initialize): sorted by id, the
    last LedgerInfo of a repeated id; writing it again changes nothing."""
    info = mlpb.ManagedLedgerInfo()
    for lid, entries in stored:
        info.ledgerInfo.add(ledgerId=lid, entries=entries)
    broker: dict[int, int] = {}
    for lid, entries in stored:
        broker[lid] = entries
    decoded = mld.parse_ml_info(info.SerializeToString())
    got = [(li.ledgerId, li.entries) for li in decoded.message.ledgerInfo]
    assert got == sorted(broker.items())
    ids = [lid for lid, _ in stored]
    in_order = all(a < b for a, b in itertools.pairwise(ids))
    assert decoded.stored_ledger_ids == (None if in_order else ids)
    assert mld.parse_ml_info(mld.rebuild(decoded)).stored_ledger_ids is None


def test_empty_cursor_znode_lacks_the_required_ledger_id() -> None:
    decoded = mld.parse_cursor_info(b"")
    assert decoded.encoding is InfoEncoding.EMPTY and decoded.missing == ["cursorsLedgerId"]


def test_legacy_text_format_as_java_printed_it() -> None:
    text = (
        b"ledgerInfo {\n  ledgerId: 3\n  entries: 10\n  size: 1234\n  timestamp: 1500000000000\n}\n"
        b"ledgerInfo {\n  ledgerId: 5\n  timestamp: 0\n}\n"
        b'properties {\n  key: "index"\n  value: "\\303\\251"\n}\n'
    )
    decoded = mld.parse_ml_info(text)
    assert decoded.encoding is InfoEncoding.TEXT
    assert [li.ledgerId for li in decoded.message.ledgerInfo] == [3, 5]
    assert mld.ml_properties(decoded.message) == {"index": "é"}
    assert mld.parse_ml_info(mld.rebuild(decoded)).message == decoded.message


def test_missing_required_field_is_reported() -> None:
    info = mlpb.ManagedLedgerInfo()
    info.ledgerInfo.add(entries=4)  # no ledgerId
    decoded = mld.parse_ml_info(info.SerializePartialToString())
    assert decoded.encoding is InfoEncoding.BINARY
    assert decoded.missing == ["ledgerInfo[0].ledgerId"]
    assert decoded.message.ledgerInfo[0].entries == 4


def test_position_info() -> None:
    pos = mlpb.PositionInfo(ledgerId=3, entryId=9)
    pos.individualDeletedMessageRanges.add(key=3, values=[5])
    msg, missing = mld.parse_position_info(mld.build_position_info(pos))
    assert msg == pos and missing == []
    _, missing = mld.parse_position_info(b"\x08\x03")
    assert missing == ["entryId"]


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xff\xff",  # not protobuf
        b"\x47\x78\x00",  # envelope cut short
        b"\x47\x78\x00\x00\x00\x10\x08",  # metadata longer than the value
        b"\x47\x78\x00\x00\x00\x04\x08\x01\x10\x64" + b"\x00" * 5,  # LZ4 garbage
        b"\x47\x78\x00\x00\x00\x02\x08\x01",  # metadata without uncompressedSize
        b"\x47\x78\x00\x00\x00\x04\x08\x09\x10\x01x",  # unknown codec 9
    ],
)
def test_corrupt_values_raise(data: bytes) -> None:
    with pytest.raises(LedgerctlError) as info:
        mld.parse_ml_info(data)
    assert "\n" not in info.value.one_line()


def test_properties_helpers() -> None:
    info = sample_ml_info()
    assert mld.ml_index(info) == 41
    assert mld.shadow_source(info) == "persistent://public/default/src"
    mld.set_ml_property(info, mld.PROPERTY_INDEX, "42")
    assert mld.ml_index(info) == 42 and info.properties[-1].key == "index"
    mld.set_ml_property(info, mld.PROPERTY_SHADOW_SOURCE, None)
    assert mld.shadow_source(info) is None
    assert mld.ml_index(mlpb.ManagedLedgerInfo()) is None
    bad = mlpb.ManagedLedgerInfo()
    bad.properties.add(key="index", value="x")
    with pytest.raises(CorruptEntryError):
        mld.ml_index(bad)


# -- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "plain, encoded",
    [
        ("my-topic", "my-topic"),
        ("my topic", "my+topic"),
        ("a*b.c-d_e", "a*b.c-d_e"),
        ("a/b", "a%2Fb"),
        ("~x", "%7Ex"),
        ("100%", "100%25"),
        ("a+b", "a%2Bb"),
        ("ü", "%C3%BC"),
        ("日本", "%E6%97%A5%E6%9C%AC"),
        ("sub:1", "sub%3A1"),
    ],
)
def test_java_url_encoding(plain: str, encoded: str) -> None:
    assert mld.url_encode(plain) == encoded
    assert mld.url_decode(encoded) == plain


def test_url_decode_rejects_a_bad_escape() -> None:
    with pytest.raises(LedgerctlError, match="malformed"):
        mld.url_decode("a%zz")


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",))))
def test_url_round_trip(text: str) -> None:
    assert mld.url_decode(mld.url_encode(text)) == text


@pytest.mark.parametrize(
    "name, full, persistence",
    [
        ("my-topic", "persistent://public/default/my-topic", "public/default/persistent/my-topic"),
        ("t/ns/x y", "persistent://t/ns/x y", "t/ns/persistent/x+y"),
        ("persistent://t/ns/x", "persistent://t/ns/x", "t/ns/persistent/x"),
        ("non-persistent://t/ns/x", "non-persistent://t/ns/x", "t/ns/non-persistent/x"),
        ("persistent://t/c1/ns/x", "persistent://t/c1/ns/x", "t/c1/ns/persistent/x"),
        ("persistent://t/c1/ns/a/b", "persistent://t/c1/ns/a/b", "t/c1/ns/persistent/a%2Fb"),
    ],
)
def test_topic_names(name: str, full: str, persistence: str) -> None:
    topic = TopicName.parse(name)
    assert topic.full_name == full
    assert topic.persistence_name == persistence
    assert topic.ml_path == "/managed-ledgers/" + persistence
    assert TopicName.from_persistence_name(persistence) == topic
    assert TopicName.from_ml_path(topic.ml_path) == topic


def test_partitions() -> None:
    base = TopicName.parse("persistent://t/ns/orders")
    part = base.partition(3)
    assert part.local_name == "orders-partition-3" and part.partition_index == 3
    assert part.partitioned_topic == base and base.partition_index == -1
    assert part.partition(1).local_name == "orders-partition-1"
    assert part.ml_path == "/managed-ledgers/t/ns/persistent/orders-partition-3"
    odd = TopicName.parse("persistent://t/ns/a-partition-x")
    assert odd.partition_index == -1
    with pytest.raises(LedgerctlError):
        base.partition(-1)


def test_cursor_path_is_url_encoded() -> None:
    topic = TopicName.parse("persistent://t/ns/x")
    assert topic.cursor_path("my sub/1") == "/managed-ledgers/t/ns/persistent/x/my+sub%2F1"


@pytest.mark.parametrize(
    "bad",
    ["", "a/b", "ftp://t/ns/x", "persistent://t/ns", "persistent://t//x", "persistent:///ns/x"],
)
def test_invalid_topic_names(bad: str) -> None:
    with pytest.raises(LedgerctlError):
        TopicName.parse(bad)


@pytest.mark.parametrize("bad", ["t/ns/x", "t/ns/queue/x", "t/ns/persistent/", "/x"])
def test_invalid_persistence_names(bad: str) -> None:
    with pytest.raises(LedgerctlError):
        TopicName.from_persistence_name(bad)


@given(st.one_of(st.binary(max_size=40), st.text(max_size=40).map(lambda t: t.encode())))
def test_text_format_guess_is_unchanged_by_the_control_byte_scan(data: bytes) -> None:
    """The one-scan rule for control bytes answers as the character-by-character check."""
    from pulsarctl_py.decoders.managed_ledger import _looks_like_text

    try:
        text = data.decode("utf-8")
        slow = all(ch.isprintable() or ch in "\n\r\t " for ch in text)
    except UnicodeDecodeError:
        slow = False
    assert _looks_like_text(data) == slow
