"""Managed-ledger metadata: the znodes a Pulsar broker keeps for each topic and cursor.

Znode values (Pulsar ``managed-ledger/.../impl/MetaStoreImpl.java``; formats.md §8.3):

    value = ""                                   ; empty: created before the first update
          | 0x4778:u16 meta_len:u32 Meta[meta_len] codec(Info)   ; compressed envelope
          | Info                                 ; plain binary protobuf
          | TextFormat(Info)                     ; very old clusters

``Info`` is ManagedLedgerInfo for a topic znode and ManagedCursorInfo for a cursor znode;
``Meta`` is ManagedLedgerInfoMetadata / ManagedCursorInfoMetadata {1 compressionType,
2 uncompressedSize}; the codec is one of Pulsar's compression codecs (``codecs.py``).
A plain ManagedLedgerInfo can never start with 0x47 0x78 (wire type 7 does not exist), so
the magic decides; Pulsar falls back to a plain parse when the envelope does not decode.
Cursor ledgers hold plain PositionInfo entries, never an envelope.

Znode paths (``TopicName.getPersistenceNamingEncoding``, ``Codec.encode``):

    /managed-ledgers/<tenant>/<namespace>/<domain>/<URL-encoded local name>[/<cursor>]
    /managed-ledgers/<tenant>/<cluster>/<namespace>/<domain>/<...>      ; v1 names

URL encoding is Java's ``URLEncoder`` in UTF-8: letters, digits and ``.-*_`` stay, a space
becomes ``+``, every other byte becomes ``%XX``. Partitions are the local names
``<topic>-partition-<n>``. The cursor znode name is the URL-encoded subscription name.
"""

from __future__ import annotations

import enum
import itertools
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from google.protobuf import text_format
from google.protobuf.message import Message

from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

from . import codecs
from .errors import CorruptEntryError, LedgerctlError, UnsupportedCodec
from .nodes import json_value
from .protos import parse_proto, proto_fields
from .text import text_map

MAGIC = 0x4778
_MAGIC_FIRST = MAGIC >> 8
ENVELOPE = struct.Struct(">HI")  # magic, metadata length
ML_ROOT = "/managed-ledgers"
DOMAINS = ("persistent", "non-persistent")
PARTITION_SUFFIX = "-partition-"

#: ML property keys (formats.md §8.4)
PROPERTY_INDEX = "index"
PROPERTY_SHADOW_SOURCE = "PULSAR.SHADOW_SOURCE"
PROPERTY_TOPIC_EPOCH = "pulsar.topic.epoch"

#: special cursor names (formats.md §8.3)
COMPACTION_CURSOR = "__compaction"
#: the ``__compaction`` cursor's mark-delete property naming the compacted ledger
#: (Pulsar ``Compactor.COMPACTED_TOPIC_LEDGER_PROPERTY``)
COMPACTED_TOPIC_LEDGER = "CompactedTopicLedger"
DEDUP_CURSOR = "pulsar.dedup"
REPLICATOR_PREFIX = "pulsar.repl"

M = TypeVar("M", bound=Message)


class InfoEncoding(enum.StrEnum):
    """How a znode value was (or is to be) written."""

    EMPTY = "empty"
    BINARY = "binary"
    COMPRESSED = "compressed"
    TEXT = "text"


@dataclass(slots=True)
class DecodedInfo(Generic[M]):
    """A decoded znode value, with how it was encoded so that it can be written back alike."""

    message: M
    encoding: InfoEncoding
    raw: bytes
    #: codec name (LZ4, ZLIB, ZSTD, SNAPPY, NONE) of a compressed envelope
    compression: str | None = None
    #: required fields the value lacks (damaged data); the other fields are kept
    missing: list[str] = field(default_factory=list)
    #: things that went wrong but did not stop the decode (e.g. an envelope fallback)
    problems: list[str] = field(default_factory=list)
    #: a topic value's ledger ids as stored, when that is not the order the broker reads
    #: them in (``message`` then holds them as the broker does, see ``broker_order``)
    stored_ledger_ids: list[int] | None = None

    def to_json(self) -> dict[str, Any]:
        notes: list[dict[str, Any]] = []
        out: dict[str, Any] = {
            "encoding": self.encoding.value,
            "size": len(self.raw),
            "fields": json_value(proto_fields(self.message), "fields", notes),
        }
        if notes:
            out["not_utf8"] = notes
        if self.compression is not None:
            out["compression"] = self.compression
        if self.missing:
            out["missing"] = list(self.missing)
        if self.problems:
            out["problems"] = list(self.problems)
        if self.stored_ledger_ids is not None:
            out["stored_ledger_ids"] = list(self.stored_ledger_ids)
        return out


_METADATA_CLASSES: dict[type[Message], type[Message]] = {
    mlpb.ManagedLedgerInfo: mlpb.ManagedLedgerInfoMetadata,
    mlpb.ManagedCursorInfo: mlpb.ManagedCursorInfoMetadata,
}


def _layer(cls: type[Message]) -> str:
    return "ml-info" if cls is mlpb.ManagedLedgerInfo else "cursor-info"


#: bytes that are never printable text (tab, newline and carriage return are)
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _looks_like_text(data: bytes) -> bool:
    """Binary ML/cursor info always holds a control byte (every tag byte is < 0x20)."""
    if _CONTROL.search(data):
        return False  # not printable, whatever the rest: found in one C scan
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(ch.isprintable() or ch in "\n\r\t " for ch in text)


def parse_info(cls: type[M], data: bytes | memoryview) -> DecodedInfo[M]:
    """Decode a ManagedLedgerInfo or ManagedCursorInfo znode value in any encoding."""
    raw = bytes(data)
    layer = _layer(cls)
    if not raw:
        msg = cls()
        missing = [] if msg.IsInitialized() else msg.FindInitializationErrors()
        return DecodedInfo(msg, InfoEncoding.EMPTY, raw, missing=missing)
    if raw[0] != _MAGIC_FIRST and _CONTROL.search(raw):
        # the common case, plain binary protobuf: no envelope, and a control byte rules
        # out text format (the checks below, in one C scan)
        msg, missing = parse_proto(cls, raw, layer, 0)
        return DecodedInfo(msg, InfoEncoding.BINARY, raw, missing=missing)
    if len(raw) >= 2 and struct.unpack_from(">H", raw, 0)[0] == MAGIC:
        try:
            return _parse_envelope(cls, raw)
        except LedgerctlError as exc:
            # Pulsar logs the failure and parses the whole value as plain protobuf.
            try:
                msg, missing = parse_proto(cls, raw, layer, 0)
            except CorruptEntryError:
                raise exc from None
            return DecodedInfo(
                msg,
                InfoEncoding.BINARY,
                raw,
                missing=missing,
                problems=[f"0x4778 envelope did not decode ({exc}); parsed as plain protobuf"],
            )
    if _looks_like_text(raw):
        msg = cls()
        try:
            text_format.Parse(raw.decode("utf-8"), msg)
        except text_format.ParseError:
            pass
        else:
            missing = [] if msg.IsInitialized() else msg.FindInitializationErrors()
            return DecodedInfo(msg, InfoEncoding.TEXT, raw, missing=missing)
    msg, missing = parse_proto(cls, raw, layer, 0)
    return DecodedInfo(msg, InfoEncoding.BINARY, raw, missing=missing)


def _parse_envelope(cls: type[M], raw: bytes) -> DecodedInfo[M]:
    layer = _layer(cls)
    if len(raw) < ENVELOPE.size:
        raise CorruptEntryError(layer, 2, "a 4-byte metadata length", f"{len(raw) - 2} bytes")
    _, meta_len = ENVELOPE.unpack_from(raw, 0)
    start = ENVELOPE.size
    if start + meta_len > len(raw):
        raise CorruptEntryError(
            layer, 2, f"{meta_len} bytes of compression metadata", f"{len(raw) - start} bytes left"
        )
    meta_cls = _METADATA_CLASSES[cls]
    meta, missing = parse_proto(meta_cls, raw[start : start + meta_len], layer, start)
    if missing:
        raise CorruptEntryError(
            layer, start, f"a complete {meta_cls.DESCRIPTOR.name}", "missing " + ", ".join(missing)
        )
    payload = raw[start + meta_len :]
    codec = codecs.codec(meta.compressionType)
    if meta.uncompressedSize < 0:
        raise CorruptEntryError(
            layer, start, "a non-negative uncompressedSize", str(meta.uncompressedSize)
        )
    plain = bytes(codecs.decompress(codec.number, payload, meta.uncompressedSize))
    msg, missing = parse_proto(cls, plain, layer, start + meta_len)
    return DecodedInfo(msg, InfoEncoding.COMPRESSED, raw, compression=codec.name, missing=missing)


def build_info(
    message: Message,
    encoding: InfoEncoding | str = InfoEncoding.BINARY,
    compression: str | int | None = None,
) -> bytes:
    """Encode a ManagedLedgerInfo / ManagedCursorInfo value.

    EMPTY gives empty bytes for an empty message and falls back to binary otherwise (what
    Pulsar writes on the first update of an empty znode). COMPRESSED always writes the
    envelope, whatever the size (Pulsar compresses only above a threshold).
    """
    encoding = InfoEncoding(encoding)
    cls = type(message)
    if cls not in _METADATA_CLASSES:
        raise LedgerctlError(f"{cls.__name__} is not stored in a managed-ledger znode")
    if encoding is InfoEncoding.EMPTY:
        return b"" if message.ByteSize() == 0 else message.SerializeToString()
    if encoding is InfoEncoding.TEXT:
        return text_format.MessageToString(message).encode("utf-8")
    body = message.SerializeToString()
    if encoding is InfoEncoding.BINARY:
        return body
    if compression is None:
        raise LedgerctlError("a compressed envelope needs a codec (LZ4, ZLIB, ZSTD or SNAPPY)")
    codec = (
        codecs.codec(compression)
        if isinstance(compression, int)
        else codecs.CODEC_BY_NAME.get(compression.upper())
    )
    if codec is None:
        raise UnsupportedCodec(f"unknown compression type {compression!r}")
    meta = _METADATA_CLASSES[cls](compressionType=codec.number, uncompressedSize=len(body))
    meta_bytes = meta.SerializeToString()
    return ENVELOPE.pack(MAGIC, len(meta_bytes)) + meta_bytes + codecs.compress(codec.number, body)


def rebuild(decoded: DecodedInfo[M], message: M | None = None) -> bytes:
    """Encode ``message`` (default: the decoded one) in the encoding it was read in; a
    topic's ledger list as the broker writes it (``broker_order``)."""
    target = decoded.message if message is None else message
    if isinstance(target, mlpb.ManagedLedgerInfo):
        ordered = mlpb.ManagedLedgerInfo()
        ordered.CopyFrom(target)
        broker_order(ordered)
        target = ordered  # type: ignore[assignment]
    return build_info(target, decoded.encoding, decoded.compression)


def broker_order(info: mlpb.ManagedLedgerInfo) -> list[int] | None:
    """Put a topic's ledger list in the order the broker reads it, in place; return the
    ledger ids as they were, or None when they already were in that order.

    The broker keeps a topic's ledgers in a map sorted by ledger id
    (``ManagedLedgerImpl.ledgers``, a ConcurrentSkipListMap): loading a topic it puts
    every stored LedgerInfo in it in stored order (``ManagedLedgerImpl.initialize``), so a
    ledger id stored twice keeps its last LedgerInfo, and it writes the list from that map
    in id order (``updateLedgersListAfterRollover`` through ``getManagedLedgerInfo``).
    The stored list can still be out of id order: an offload writes each ledger's new
    offload context from a copy of the map in a ``java.util.HashMap``
    (``tryTransformLedgerInfo`` -> ``buildManagedLedgerInfo(Map)``), whose order is by
    hash bucket (ledger id modulo the table size), until the next write from the sorted
    map (a rollover, or the deletion of the BookKeeper copies) puts it back in order.
    """
    ids = [li.ledgerId for li in info.ledgerInfo]
    if all(a < b for a, b in itertools.pairwise(ids)):
        return None
    last = {li.ledgerId: li for li in info.ledgerInfo}  # the last of a repeated id wins
    ordered = [last[lid] for lid in sorted(last)]
    kept = [mlpb.ManagedLedgerInfo.LedgerInfo() for _ in ordered]
    for dst, src in zip(kept, ordered, strict=True):
        dst.CopyFrom(src)
    del info.ledgerInfo[:]
    info.ledgerInfo.extend(kept)
    return ids


def parse_ml_info(data: bytes | memoryview) -> DecodedInfo[mlpb.ManagedLedgerInfo]:
    """Decode a topic znode value, its ledger list in the broker's order (``broker_order``;
    ``stored_ledger_ids`` then says how it is stored)."""
    decoded = parse_info(mlpb.ManagedLedgerInfo, data)
    decoded.stored_ledger_ids = broker_order(decoded.message)
    return decoded


def parse_cursor_info(data: bytes | memoryview) -> DecodedInfo[mlpb.ManagedCursorInfo]:
    """Decode a cursor znode value."""
    return parse_info(mlpb.ManagedCursorInfo, data)


def parse_position_info(data: bytes | memoryview) -> tuple[mlpb.PositionInfo, list[str]]:
    """Decode one cursor-ledger entry (plain PositionInfo) and the required fields it lacks."""
    return parse_proto(mlpb.PositionInfo, bytes(data), "position-info", 0)


def build_position_info(message: mlpb.PositionInfo) -> bytes:
    """Encode one cursor-ledger entry."""
    return message.SerializeToString()


def cursor_at(
    decoded: DecodedInfo[mlpb.ManagedCursorInfo] | None,
    position: tuple[int, int],
    properties: Iterable[tuple[str, int]],
    *,
    keep_acks: bool = False,
    last_active: int | None = None,
    broker_encoding: bool = False,
) -> bytes:
    """A cursor's whole state in its znode, marked deleted up to ``position``: the one
    writer of a cursor value that ledgerctl moves (a repair, a migration, a compaction's
    ``__compaction`` cursor).

    The state is the decoded value (``decoded``; None: a new cursor) with
    ``cursorsLedgerId`` -1, which makes the broker read it from the znode (it reads a
    cursor ledger's last entry otherwise, ``ManagedCursorImpl.recover``), the mark-delete
    position ``position`` and the mark-delete ``properties`` (replacing the old ones).
    ``keep_acks``: the individual acks (ranges and batch indexes) after ``position`` stay
    acknowledged; otherwise, and always for a cursor whose state was in a cursor ledger
    (the znode holds no acks of it), every ack is forgotten, as a reset forgets them.
    ``last_active``: the time (ms) written as the cursor's last activity (None: as read).
    ``broker_encoding``: encoded as a broker writes a value (an empty or text value
    becomes binary protobuf, ``MetaStoreImpl``); otherwise in the encoding it was read in.
    """
    msg = mlpb.ManagedCursorInfo()
    encoding: InfoEncoding = InfoEncoding.BINARY
    compression: str | int | None = None
    in_ledger = False
    if decoded is not None:
        msg.CopyFrom(decoded.message)
        encoding, compression = decoded.encoding, decoded.compression
        in_ledger = decoded.message.cursorsLedgerId != -1
        if broker_encoding and encoding in (InfoEncoding.EMPTY, InfoEncoding.TEXT):
            encoding = InfoEncoding.BINARY
    msg.cursorsLedgerId = -1
    msg.markDeleteLedgerId, msg.markDeleteEntryId = position
    if not keep_acks or in_ledger:
        del msg.individualDeletedMessages[:]
        del msg.batchedEntryDeletionIndexInfo[:]
    else:
        # acked ranges (lower, upper] after the new position stay acknowledged
        kept = []
        for r in msg.individualDeletedMessages:
            upper = (r.upperEndpoint.ledgerId, r.upperEndpoint.entryId)
            if upper > position:
                lower = max((r.lowerEndpoint.ledgerId, r.lowerEndpoint.entryId), position)
                kept.append((lower, upper))
        del msg.individualDeletedMessages[:]
        for lower, upper in kept:
            r = msg.individualDeletedMessages.add()
            r.lowerEndpoint.ledgerId, r.lowerEndpoint.entryId = lower
            r.upperEndpoint.ledgerId, r.upperEndpoint.entryId = upper
        batched = [
            b
            for b in msg.batchedEntryDeletionIndexInfo
            if (b.position.ledgerId, b.position.entryId) > position
        ]
        del msg.batchedEntryDeletionIndexInfo[:]
        for b in batched:
            msg.batchedEntryDeletionIndexInfo.add().CopyFrom(b)
    del msg.properties[:]
    for name, value in properties:
        msg.properties.add(name=name, value=value)
    if last_active is not None:
        msg.lastActive = last_active
    return build_info(msg, encoding, compression)


# -- ML properties -------------------------------------------------------------------------


def ml_properties(info: mlpb.ManagedLedgerInfo) -> dict[str, str]:
    """The ML properties as a dict (a repeated key wins the last time, like Pulsar's map)."""
    return text_map(info.properties)


def set_ml_property(info: mlpb.ManagedLedgerInfo, key: str, value: str | None) -> None:
    """Set (or with None remove) an ML property in place, keeping the others' order."""
    kept = [(kv.key, kv.value) for kv in info.properties if kv.key != key]
    del info.properties[:]
    for k, v in kept:
        info.properties.add(key=k, value=v)
    if value is not None:
        info.properties.add(key=key, value=value)


def ml_index(info: mlpb.ManagedLedgerInfo) -> int | None:
    """The last broker-entry-metadata index (the ``index`` property), if recorded."""
    value = ml_properties(info).get(PROPERTY_INDEX)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise CorruptEntryError("ml-info", 0, "a decimal 'index' property", repr(value)) from None


def shadow_source(info: mlpb.ManagedLedgerInfo) -> str | None:
    """The source topic of a shadow topic (``PULSAR.SHADOW_SOURCE``), if any."""
    return ml_properties(info).get(PROPERTY_SHADOW_SOURCE)


# -- names -----------------------------------------------------------------------------------

_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-*_")
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
#: text that both url_encode and url_decode leave as it is (listings decode 10^5 names)
_PLAIN = re.compile(r"[A-Za-z0-9.\-*_]*")


def url_encode(text: str) -> str:
    """Java's ``URLEncoder.encode(text, UTF-8)``: space -> '+', '.-*_' kept, rest %XX."""
    if _PLAIN.fullmatch(text):
        return text
    out: list[str] = []
    for byte in text.encode("utf-8", errors="surrogatepass"):
        if byte in _SAFE:
            out.append(chr(byte))
        elif byte == 0x20:
            out.append("+")
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def url_decode(text: str) -> str:
    """Java's ``URLDecoder.decode(text, UTF-8)``; a malformed escape is an error."""
    if _PLAIN.fullmatch(text):
        return text
    buf = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "+":
            buf.append(0x20)
            i += 1
        elif ch == "%":
            m = _PERCENT.match(text, i)
            if m is None:
                raise LedgerctlError(f"malformed %-escape at position {i} of {text!r}")
            buf.append(int(m.group(1), 16))
            i += 3
        else:
            buf.extend(ch.encode("utf-8", errors="surrogatepass"))
            i += 1
    return buf.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class TopicName:
    """A Pulsar topic name and the managed-ledger name it is stored under."""

    domain: str
    tenant: str
    namespace: str
    local_name: str
    cluster: str | None = None  # v1 names only

    @classmethod
    def parse(cls, name: str) -> TopicName:
        """Parse ``persistent://t/ns/x``, ``t/ns/x`` or ``x`` (public/default) like Pulsar."""
        text = name.strip()
        if "://" not in text:
            parts = [p for p in text.split("/") if p]
            if len(parts) == 3:
                text = "persistent://" + text
            elif len(parts) == 1:
                text = "persistent://public/default/" + parts[0]
            else:
                raise LedgerctlError(
                    f"invalid short topic name {name!r}: "
                    "use <topic> or <tenant>/<namespace>/<topic>"
                )
        domain, _, rest = text.partition("://")
        if domain not in DOMAINS:
            raise LedgerctlError(f"invalid topic domain {domain!r} in {name!r}")
        parts = rest.split("/", 3)
        if len(parts) == 3:
            tenant, namespace, local = parts
            cluster = None
        elif len(parts) == 4:
            tenant, cluster, namespace, local = parts
        else:
            raise LedgerctlError(f"invalid topic name {name!r}")
        if not tenant or not namespace or not local or cluster == "":
            raise LedgerctlError(f"invalid topic name {name!r}")
        return cls(domain, tenant, namespace, local, cluster)

    @classmethod
    def from_persistence_name(cls, name: str) -> TopicName:
        """Parse a managed-ledger name: ``t/ns/persistent/<enc>`` or ``t/c/ns/persistent/<enc>``."""
        parts = name.strip("/").split("/")
        if len(parts) == 4 and parts[2] in DOMAINS:
            tenant, namespace, domain, enc = parts
            cluster = None
        elif len(parts) == 5 and parts[3] in DOMAINS:
            tenant, cluster, namespace, domain, enc = parts
        else:
            raise LedgerctlError(
                f"invalid managed-ledger name {name!r}: expected "
                "<tenant>/<namespace>/persistent/<encoded topic>"
            )
        if not all((tenant, namespace, enc)):
            raise LedgerctlError(f"invalid managed-ledger name {name!r}")
        return cls(domain, tenant, namespace, url_decode(enc), cluster)

    @classmethod
    def from_ml_path(cls, path: str) -> TopicName:
        """Parse a znode path under /managed-ledgers."""
        prefix = ML_ROOT + "/"
        if not path.startswith(prefix):
            raise LedgerctlError(f"{path!r} is not under {ML_ROOT}")
        return cls.from_persistence_name(path[len(prefix) :])

    @property
    def is_v2(self) -> bool:
        return self.cluster is None

    @property
    def namespace_name(self) -> str:
        if self.cluster is None:
            return f"{self.tenant}/{self.namespace}"
        return f"{self.tenant}/{self.cluster}/{self.namespace}"

    @property
    def full_name(self) -> str:
        return f"{self.domain}://{self.namespace_name}/{self.local_name}"

    @property
    def encoded_local_name(self) -> str:
        return url_encode(self.local_name)

    @property
    def persistence_name(self) -> str:
        """The managed-ledger name, as in custom metadata ``pulsar/managed-ledger``."""
        return f"{self.namespace_name}/{self.domain}/{self.encoded_local_name}"

    @property
    def ml_path(self) -> str:
        return f"{ML_ROOT}/{self.persistence_name}"

    @property
    def partition_index(self) -> int:
        """The partition number, or -1 for a topic that is not a partition."""
        if PARTITION_SUFFIX not in self.local_name:
            return -1
        try:
            return int(self.local_name[self.local_name.rindex("-") + 1 :])
        except ValueError:
            return -1

    @property
    def partitioned_topic(self) -> TopicName:
        """The partitioned topic this partition belongs to (itself if not a partition)."""
        if self.partition_index < 0:
            return self
        base = self.local_name[: self.local_name.rindex(PARTITION_SUFFIX)]
        return TopicName(self.domain, self.tenant, self.namespace, base, self.cluster)

    def partition(self, index: int) -> TopicName:
        """Partition ``index`` of this (partitioned) topic."""
        if index < 0:
            raise LedgerctlError(f"invalid partition index {index}")
        base = self.partitioned_topic.local_name
        local = f"{base}{PARTITION_SUFFIX}{index}"
        return TopicName(self.domain, self.tenant, self.namespace, local, self.cluster)

    def cursor_path(self, subscription: str) -> str:
        """The znode of a subscription's cursor (its name URL-encoded)."""
        return f"{self.ml_path}/{url_encode(subscription)}"

    def __str__(self) -> str:
        return self.full_name


def names_managed_ledger(tag: str, expected: str) -> bool:
    """Whether a ledger's ``pulsar/managed-ledger`` tag names the managed ledger ``expected``
    (a persistence name), written encoded as the broker writes it, or not."""
    if tag == expected:
        return True
    try:
        return TopicName.from_persistence_name(tag).persistence_name == expected
    except LedgerctlError:
        return False
