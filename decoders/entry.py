"""Decode a stored entry layer by layer, outermost first, and build one back.

    bookie entry (digest)  ->  [compacted framing]  ->  [0x0e02 BEM]  ->  [0x0e01 CRC32C]
      ->  MessageMetadata  ->  payload: marker | chunk | [decrypt] -> decompress
      ->  batch of SingleMessageMetadata + values | one value

:func:`decode_entry` never raises for bad bytes: a layer that cannot be decoded becomes
an ``undecoded`` layer with the reason and offset, the outer layers stay, and the
problem is listed in :attr:`Entry.problems`. :class:`ChunkAssembler` joins the chunks of
a chunked message across entries. :func:`rebuild` serializes a decoded entry again from
its decoded values.
"""

from __future__ import annotations

import base64
import enum
from binascii import b2a_base64
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from pulsarctl_py.proto import pulsar_api_pb2 as api

from . import bookkeeper, compacted, crypto, limits, transactions
from .bookkeeper import BookieEntryHeader
from .checksums import DIGESTS, DigestType
from .codecs import CODECS, LIMIT_HINT, DecompressionError, compress, decompress
from .errors import CorruptEntryError, DecryptionError, LedgerctlError, UnsupportedCodec
from .nodes import Check, Layer, Problem, json_value
from .payload import (
    MIN_RECORD,
    BatchRecord,
    batch_fit_error,
    batch_layer,
    build_batch,
    parse_batch,
    parse_marker,
    trailing_bytes,
)
from .protos import signed64
from .pulsar import ChecksumLayer, MetadataLayer, build_entry, parse_prefixes
from .speedups import bind, native
from .text import as_text, json_map, json_text, text_map


class Depth(enum.IntEnum):
    """How deep to decode: each level includes the ones before it."""

    ENTRY = 0  # bookie entry, compacted framing, broker entry metadata
    METADATA = 1  # + checksum and MessageMetadata
    MESSAGES = 2  # + payload: decrypt, decompress, unbatch


class Outer(enum.StrEnum):
    """The outermost layer of the input."""

    AUTO = "auto"
    BOOKIE_ENTRY = "bookie-entry"
    COMPACTED = "compacted"
    PULSAR_ENTRY = "pulsar-entry"


@dataclass(slots=True)
class DecodeOptions:
    """Everything that changes how an entry is decoded."""

    outer: Outer = Outer.AUTO
    digest_type: DigestType | None = None  # None: detect (CRC32C, CRC32, MAC with password)
    password: bytes | None = None
    private_key: Any = None  # from crypto.load_private_key
    depth: Depth = Depth.MESSAGES
    verify: bool = True
    #: the largest payload (decompressed, or chunks joined); None: the process's maximum
    #: message size (decoders.limits)
    max_uncompressed: int | None = None
    raise_errors: bool = False  # re-raise instead of recording an undecoded layer
    #: the entries are a transaction store's records, not Pulsar entries: the store's
    #: name in :data:`.transactions.STORES` (None: Pulsar entries)
    records: str | None = None


@dataclass(slots=True)
class Message:
    """One message of an entry, as a consumer would receive it."""

    key: str | None
    value: bytes | memoryview | None
    properties: dict[str, str]
    batch_index: int
    null_value: bool
    event_time: int | None
    sequence_id: int
    publish_time: int
    key_b64_encoded: bool = False
    ordering_key: bytes | None = None
    index: int | None = None  # continuous index (broker entry metadata), per message
    ledger_id: int | None = None
    entry_id: int | None = None
    chunks: int | None = None  # set on a message reassembled from chunks

    @property
    def message_id(self) -> str | None:
        if self.ledger_id is None or self.entry_id is None:
            return None
        if self.batch_index < 0:
            return f"{self.ledger_id}:{self.entry_id}"
        return f"{self.ledger_id}:{self.entry_id}:{self.batch_index}"

    def to_json(self) -> dict[str, Any]:
        notes: list[dict[str, Any]] = []
        key, value, properties = self.key, self.value, self.properties
        out: dict[str, Any] = {
            "message_id": self.message_id,
            "key": key if type(key) is str else json_text(key, "key", notes),
            "value": None if value is None else b2a_base64(value, newline=False).decode("ascii"),
            "size": 0 if value is None else len(value),
            "properties": json_map(properties, "properties", notes) if properties else {},
            "batch_index": self.batch_index,
            "null_value": self.null_value,
            "event_time": self.event_time,
            "sequence_id": self.sequence_id,
            "publish_time": self.publish_time,
        }
        if self.key_b64_encoded:
            out["key_b64_encoded"] = True
        if self.ordering_key is not None:
            out["ordering_key"] = base64.b64encode(self.ordering_key).decode("ascii")
        if self.index is not None:
            out["index"] = self.index
        if self.chunks is not None:
            out["chunks"] = self.chunks
        if notes:
            out["not_utf8"] = notes
        return out


if native is not None:
    bind(native.MESSAGE, Message)


@dataclass(slots=True)
class ChunkInfo:
    """The chunk carried by one entry of a chunked message."""

    uuid: str
    chunk_id: int
    num_chunks: int
    total_size: int
    payload: memoryview


@dataclass(slots=True)
class Entry:
    """A decoded entry: its layers outermost first, its messages, and what was wrong."""

    data: bytes | memoryview
    layers: list[Layer] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    header: BookieEntryHeader | None = None
    digest_type: DigestType | None = None
    original_id: Any = None  # MessageIdData of a compacted-ledger entry
    broker_entry_metadata: Any = None
    has_checksum: bool = False
    metadata: Any = None
    payload: memoryview | None = None  # the stored payload (after the metadata)
    plaintext: bytes | memoryview | None = None  # decrypted and decompressed payload
    encrypted: bool = False
    data_key: bytes | None = None  # set once an encrypted payload was opened
    chunk: ChunkInfo | None = None
    placeholders: list[int] = field(default_factory=list)
    position: tuple[int, int] | None = None  # (ledger_id, entry_id) where it is stored
    #: why the stored bytes could not be read (then ``data`` is empty): one line
    unreadable: str | None = None
    _records: list[BatchRecord] | None = field(default=None, init=False, repr=False)
    _batch: tuple[Any, int, list[int] | None] | None = field(default=None, init=False, repr=False)

    @property
    def records(self) -> list[BatchRecord] | None:
        """The batch records (metadata protobuf, value, offset); None when not batched.

        The native batch split builds messages without them; they are parsed from the
        plaintext the first time they are asked for (rebuild, tests, tools).
        """
        if self._records is None and self._batch is not None:
            _layer, self._records, _holes = parse_batch(*self._batch, [])
        return self._records

    @property
    def ok(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)

    @property
    def unverified(self) -> list[str]:
        """Digests and checksums present but not verified (e.g. a MAC without password)."""
        return [
            layer.check.kind
            for layer in self.layers
            if layer.check is not None and layer.check.ok is None
        ] + [
            str(layer.fields.get("digest_type"))
            for layer in self.layers
            if layer.name == "bookie-digest"
        ]

    @property
    def all_verified(self) -> bool:
        """``not self.unverified``, without building its list (once per entry in a scan)."""
        for layer in self.layers:
            check = layer.check
            if (check is not None and check.ok is None) or layer.name == "bookie-digest":
                return False
        return True

    @property
    def batched(self) -> bool:
        return self.metadata is not None and self.metadata.HasField("num_messages_in_batch")

    @property
    def num_messages(self) -> int:
        """Messages the broker counted for this entry (1 unless batched)."""
        return self.metadata.num_messages_in_batch if self.batched else 1

    @property
    def publish_time(self) -> int | None:
        return self.metadata.publish_time if self.metadata is not None else None

    @property
    def entry_timestamp(self) -> int | None:
        """Broker timestamp when present, else publish time: what Pulsar seeks by."""
        bem = self.broker_entry_metadata
        if bem is not None and bem.HasField("broker_timestamp"):
            return bem.broker_timestamp
        return self.publish_time

    @property
    def index(self) -> int | None:
        """The continuous index of the entry's last message, when the broker stored one."""
        bem = self.broker_entry_metadata
        return bem.index if bem is not None and bem.HasField("index") else None

    @property
    def message_position(self) -> tuple[int, int] | None:
        """The topic position consumers see: the original one for compacted entries."""
        if self.original_id is not None:
            return signed64(self.original_id.ledgerId), signed64(self.original_id.entryId)
        return self.position

    def to_json(self, with_hex: bool = False, messages: bool = True) -> dict[str, Any]:
        """The entry as JSON values; ``messages`` False leaves ``messages`` None, for a
        writer that makes them one at a time (``render.entry_doc``).

        A regular entry's is built by the native module (``entry_doc``, the same dict:
        tests/decoders/test_speedups.py compares the two); anything else here."""
        if _native_doc is not None and messages and not with_hex:
            doc: dict[str, Any] | None = _native_doc(self)
            if doc is not None:
                return doc
        return self.to_json_python(with_hex, messages)

    def to_json_python(self, with_hex: bool = False, messages: bool = True) -> dict[str, Any]:
        """:meth:`to_json` without the native module."""
        pos = self.position
        out: dict[str, Any] = {
            "position": f"{pos[0]}:{pos[1]}" if pos else None,
            "ledger_id": pos[0] if pos else None,
            "entry_id": pos[1] if pos else None,
            "size": len(self.data),
            "ok": self.ok,
            "verified": self.all_verified,
            "encrypted": self.encrypted,
            "layers": [layer.to_json(with_hex) for layer in self.layers],
            "messages": [m.to_json() for m in self.messages] if messages else None,
            "problems": [p.to_json() for p in self.problems],
        }
        return out


#: the native builder of a regular entry's JSON (decoders/_speedups_json.c), when built
_native_doc: Any = None
if native is not None and hasattr(native, "entry_doc"):
    for _kind, _cls in (
        (native.ENTRY, Entry),
        (native.LAYER, Layer),
        (native.CHECK, Check),
        (native.PROBLEM, Problem),
    ):
        bind(_kind, _cls)
    _native_doc = native.entry_doc

DEFAULT_OPTIONS = DecodeOptions()

#: the most messages one batch may claim (Pulsar's producers default to 1000 per batch)
MAX_BATCH_MESSAGES = 200_000


def compacted_indexes_error(num_messages: int, indexes: Iterable[int]) -> str | None:
    """What is wrong with a PIP-429 batch's ``compacted_batch_indexes`` (field 31), or
    None. They are the batch indexes a compaction kept out of the original batch of
    ``num_messages_in_batch`` (formats.md §6.5), so they rise strictly from 0 and stay
    below that count, and the count stays within the decoder's bound: anything else
    gives its messages batch indexes and continuous indexes that name no message."""
    if not 0 <= num_messages <= MAX_BATCH_MESSAGES:
        return (
            f"num_messages_in_batch {num_messages} of a compacted batch is outside 0 to "
            f"{MAX_BATCH_MESSAGES}"
        )
    previous = -1
    for i, index in enumerate(indexes):
        if index < 0:
            what = "below 0"
        elif index >= num_messages:
            what = f"not below num_messages_in_batch {num_messages}"
        elif index <= previous:
            what = f"not above the one before it ({previous})"
        else:
            previous = index
            continue
        return f"compacted_batch_indexes[{i}] = {index} is {what}"
    return None


def decode_entry(
    data: bytes | memoryview,
    options: DecodeOptions = DEFAULT_OPTIONS,
    position: tuple[int, int] | None = None,
) -> Entry:
    """Decode one stored entry; never raises for bad bytes unless options.raise_errors."""
    entry = Entry(data, position=position)
    try:
        _decode(entry, memoryview(data), options)
    except LedgerctlError as exc:
        if options.raise_errors:
            raise
        _record_failure(entry, exc, len(data))
    return entry


def _record_failure(entry: Entry, exc: LedgerctlError, end: int, space: str = "entry") -> None:
    layer = getattr(exc, "layer", "entry")
    offset = getattr(
        exc, "offset", entry.layers[-1].offset + entry.layers[-1].length if entry.layers else 0
    )
    where = "" if space == "entry" else f" of the {space}"
    entry.problems.append(Problem("error", layer, offset, f"{_reason(exc)}{where}"))
    raw = entry.data[offset:end] if space == "entry" else b""
    entry.layers.append(
        Layer("undecoded", offset, len(raw), raw, {"layer": layer}, None, _reason(exc), space)
    )


def _reason(exc: LedgerctlError) -> str:
    if isinstance(exc, CorruptEntryError):
        return f"expected {exc.expected}, found {exc.found}"
    return str(exc)


def _decode(entry: Entry, mv: memoryview, options: DecodeOptions) -> None:
    pos, end = 0, len(mv)
    outer = options.outer
    kind = options.digest_type
    if outer is Outer.AUTO:
        outer, kind = _detect_outer(mv, options)
    if outer is Outer.BOOKIE_ENTRY:
        if kind is None:
            kind = (
                bookkeeper.detect_digest(mv, pos, end, options.password)
                or bookkeeper.detect_by_layout(mv, pos, end)
                or DigestType.CRC32C
            )
        layer, header, pos = bookkeeper.parse(mv, pos, end, kind, options.password)
        entry.layers.append(layer)
        entry.header, entry.digest_type = header, kind
        if entry.position is not None and entry.position != (header.ledger_id, header.entry_id):
            entry.problems.append(
                Problem(
                    "error",
                    layer.name,
                    0,
                    f"entry says {header.ledger_id}:{header.entry_id}, "
                    f"it is stored as {entry.position[0]}:{entry.position[1]}",
                )
            )
        entry.position = entry.position or (header.ledger_id, header.entry_id)
        check = layer.check
        if check is not None and check.ok is None and kind is DigestType.HMAC and options.verify:
            entry.problems.append(
                Problem(
                    "warning",
                    layer.name,
                    32,
                    "HMAC digest unverified (no password): give the ledger password with "
                    "--password-env or --password-file",
                )
            )
        if not bookkeeper.plausible_header(mv, 0, end):
            entry.problems.append(
                Problem(
                    "error",
                    layer.name,
                    0,
                    f"implausible entry header (ledger {header.ledger_id}, entry "
                    f"{header.entry_id}, LAC {header.lac}, length {header.length}): damaged",
                )
            )
        if check is not None and check.ok is False and options.verify:
            entry.problems.append(
                Problem(
                    "error",
                    layer.name,
                    32,
                    f"{kind.name} digest mismatch: "
                    f"stored {check.stored}, computed {check.computed}",
                )
            )
        outer = Outer.COMPACTED if compacted.plausible(mv, pos, end) else Outer.PULSAR_ENTRY
    if (
        kind is not None
        and entry.header is None
        and outer is Outer.PULSAR_ENTRY
        and _detached_digest(mv, kind)
    ):
        size = DIGESTS[kind].size
        entry.layers.append(
            Layer(
                "bookie-digest",
                0,
                size,
                mv[:size],
                {"digest_type": kind.name, "stored": bytes(mv[:size]).hex()},
                None,
                None,
            )
        )
        entry.problems.append(
            Problem(
                "warning",
                "bookie-digest",
                0,
                "input starts with a bare digest (as bookkeeper shell prints entries); "
                "it cannot be verified without the 32-byte entry header",
            )
        )
        pos = size
    if options.records is not None:
        _decode_records(entry, mv, pos, end, options)
        return
    if outer is Outer.COMPACTED:
        layer, msg_id, pos, end = compacted.parse(mv, pos, end, entry.problems)
        entry.layers.append(layer)
        entry.original_id = msg_id
    _decode_pulsar(entry, mv, pos, end, options)


def _detached_digest(mv: memoryview, kind: DigestType) -> bool:
    size = DIGESTS[kind].size
    return (
        size > 0 and len(mv) > size + 2 and bytes(mv[size : size + 2]) in (b"\x0e\x01", b"\x0e\x02")
    )


def _detect_outer(mv: memoryview, options: DecodeOptions) -> tuple[Outer, DigestType | None]:
    end = len(mv)
    if options.digest_type is not None and bookkeeper.plausible_header(mv, 0, end):
        return Outer.BOOKIE_ENTRY, options.digest_type
    kind = bookkeeper.detect_digest(mv, 0, end, options.password)
    if kind is not None:
        return Outer.BOOKIE_ENTRY, kind
    head = bytes(mv[:2])
    if head in (b"\x0e\x01", b"\x0e\x02"):
        return Outer.PULSAR_ENTRY, None
    if compacted.plausible(mv, 0, end):
        return Outer.COMPACTED, None
    # no digest verified: a MAC without the password, DUMMY, or a damaged header or digest
    by_layout = bookkeeper.detect_by_layout(mv, 0, end)
    if by_layout is not None and bookkeeper.plausible_header(mv, 0, end):
        return Outer.BOOKIE_ENTRY, by_layout
    for kind in (DigestType.CRC32C, DigestType.CRC32, DigestType.HMAC):
        if _detached_digest(mv, kind):
            return Outer.PULSAR_ENTRY, kind
    if by_layout is not None:
        return Outer.BOOKIE_ENTRY, by_layout
    return Outer.PULSAR_ENTRY, None


def _decode_records(
    entry: Entry, mv: memoryview, pos: int, end: int, options: DecodeOptions
) -> None:
    """A transaction store's entry: [BEM] then its record(s) (decoders/transactions.py)."""
    layers, prefix, pos = parse_prefixes(
        mv, pos, end, entry.problems, options.verify, stop_before_checksum=True
    )
    entry.layers.extend(layers)
    entry.broker_entry_metadata = prefix.broker_entry_metadata
    if options.depth is not Depth.ENTRY:
        transactions.decode_records(entry, mv, pos, end, options.records or "")


def _decode_pulsar(
    entry: Entry, mv: memoryview, pos: int, end: int, options: DecodeOptions
) -> None:
    shallow = options.depth is Depth.ENTRY
    layers, prefix, pos = parse_prefixes(
        mv, pos, end, entry.problems, options.verify, stop_before_checksum=shallow
    )
    entry.layers.extend(layers)
    entry.broker_entry_metadata = prefix.broker_entry_metadata
    entry.has_checksum = prefix.checksum is not None
    if shallow:
        return
    layer, md, pos = MetadataLayer.parse(mv, pos, end, entry.problems)
    entry.layers.append(layer)
    entry.metadata = md
    entry.payload = mv[pos:end]
    if options.depth is Depth.METADATA:
        return
    _decode_payload(entry, mv, pos, end, options)


#: the layers :func:`decode_payload` records its problems on (what a payload that does
#: not decode is reported as, after every layer around it was read and verified), and
#: those of a transaction store's records
PAYLOAD_LAYERS = frozenset({"batch", "compression", "encryption", "marker"}) | transactions.LAYERS


def decode_payload(
    entry: Entry, options: DecodeOptions = DEFAULT_OPTIONS, at: int | None = None
) -> Entry:
    """Go on decoding an entry decoded to ``Depth.METADATA``: its payload (marker, chunk,
    decryption, decompression, batch), as :func:`decode_entry` does at ``Depth.MESSAGES``
    (this is the step it takes after the metadata). A payload that does not decode is
    recorded the same way: an ``undecoded`` layer and an error problem. An entry without
    decoded metadata is left as it is. ``at``: where ``entry.payload`` starts in
    ``entry.data`` (default: after the message-metadata layer). Returns the entry.

    What this rejects is what every reader of messages rejects (inspect, export, the
    compaction's batches, ``verify``): there is no second copy of these rules.
    """
    md, payload = entry.metadata, entry.payload
    if md is None or payload is None or entry.messages or entry.chunk is not None:
        return entry
    if at is None:
        layer = next((x for x in entry.layers if x.name == MetadataLayer.name), None)
        if layer is None:
            return entry
        at = layer.offset + layer.length
    mv = memoryview(entry.data)
    end = at + len(payload)
    try:
        _decode_payload(entry, mv, at, end, options)
    except LedgerctlError as exc:
        if options.raise_errors:
            raise
        _record_failure(entry, exc, end)
    return entry


def _decode_payload(
    entry: Entry, mv: memoryview, pos: int, end: int, options: DecodeOptions
) -> None:
    md = entry.metadata
    payload = mv[pos:end]
    if md.HasField("marker_type"):
        layer = parse_marker(payload, md.marker_type, entry.problems)
        layer.offset = pos
        entry.layers.append(layer)
        return
    if md.num_chunks_from_msg > 1 or (md.HasField("chunk_id") and md.HasField("uuid")):
        entry.chunk = ChunkInfo(
            as_text(md.uuid), md.chunk_id, md.num_chunks_from_msg, md.total_chunk_msg_size, payload
        )
        entry.encrypted = len(md.encryption_keys) > 0  # each chunk is encrypted on its own
        entry.layers.append(
            Layer(
                "chunk",
                pos,
                end - pos,
                payload,
                {
                    "uuid": entry.chunk.uuid,
                    "chunk_id": md.chunk_id,
                    "num_chunks": md.num_chunks_from_msg,
                    "total_chunk_msg_size": md.total_chunk_msg_size,
                    "chunk_size": end - pos,
                },
            )
        )
        return
    plain = open_payload(entry, md, payload, pos, options)
    if plain is None:
        return
    entry.plaintext = plain
    if any(kv.key == "entry.format" and kv.value == "kafka" for kv in md.properties):
        # KoP's kafka/mixed_kafka formats store a Kafka RecordBatch, not a Pulsar batch
        entry.layers.append(
            Layer(
                "kafka-record-batch",
                pos,
                end - pos,
                payload,
                {
                    "records": md.num_messages_in_batch,
                    "note": "Kafka-on-Pulsar entry format; Kafka records are not decoded",
                },
            )
        )
        return
    try:
        entry.messages = _messages(entry, md, plain)
    except CorruptEntryError as exc:
        if options.raise_errors:
            raise
        _record_failure(entry, exc, end, space="payload")


def open_payload(
    entry: Entry, md: Any, payload: bytes | memoryview, pos: int, options: DecodeOptions
) -> bytes | memoryview | None:
    """Decrypt (with the private key) and decompress a payload, recording both layers.

    Return None when the payload stays encrypted or cannot be opened.
    """
    if md.encryption_keys:
        entry.encrypted = True
        fields: dict[str, Any] = {
            "algorithm": md.encryption_algo or None,
            "keys": [k.key for k in md.encryption_keys],
            "iv": bytes(md.encryption_param),
            "encrypted_size": len(payload),
            "decrypted": False,
        }
        layer = Layer("encryption", pos, len(payload), payload, fields)
        entry.layers.append(layer)
        if options.private_key is None:
            fields["note"] = "payload is encrypted; pass --private-key to decrypt it"
            return None
        try:
            payload, key_name, entry.data_key = crypto.decrypt_payload(
                payload, md.encryption_keys, bytes(md.encryption_param), options.private_key
            )
        except DecryptionError as exc:
            if options.raise_errors:
                raise
            entry.problems.append(Problem("error", "encryption", pos, f"cannot decrypt: {exc}"))
            return None
        fields["decrypted"] = True
        fields["key_used"] = key_name
    if md.compression != api.NONE or md.HasField("uncompressed_size"):
        size = md.uncompressed_size
        codec = CODECS.get(md.compression)
        fields = {
            "codec": codec.name if codec else md.compression,
            "compressed_size": len(payload),
            "uncompressed_size": size,
        }
        if md.compression != api.NONE:
            entry.layers.append(Layer("compression", pos, len(payload), payload, fields))
            try:
                payload = decompress(md.compression, payload, size, options.max_uncompressed)
            except (DecompressionError, UnsupportedCodec) as exc:
                if options.raise_errors:
                    raise
                entry.problems.append(Problem("error", "compression", pos, str(exc)))
                entry.layers.append(
                    Layer(
                        "undecoded",
                        pos,
                        len(payload),
                        payload,
                        {"layer": "compression"},
                        None,
                        str(exc),
                    )
                )
                return None
        elif size != len(payload) and not entry.encrypted:
            entry.problems.append(
                Problem(
                    "warning",
                    "message-metadata",
                    pos,
                    f"uncompressed_size is {size}, "
                    f"the uncompressed payload has {len(payload)} bytes",
                )
            )
    return payload


def _messages(entry: Entry, md: Any, plain: bytes | memoryview) -> list[Message]:
    ledger_id, entry_id = entry.message_position or (None, None)
    publish_time = md.publish_time
    last_index = entry.index
    if not md.HasField("num_messages_in_batch"):
        first = last_index
        key = md.partition_key if md.HasField("partition_key") else None
        return [
            Message(
                key if type(key) is not bytes else as_text(key),
                None if md.null_value else plain,
                text_map(md.properties),
                -1,
                md.null_value,
                md.event_time if md.HasField("event_time") else None,
                md.sequence_id,
                publish_time,
                md.partition_key_b64_encoded,
                md.ordering_key if md.HasField("ordering_key") else None,
                first,
                ledger_id,
                entry_id,
            )
        ]
    count = md.num_messages_in_batch
    indexes = list(md.compacted_batch_indexes) or None
    if indexes is not None:
        count = len(indexes)
        wrong = compacted_indexes_error(md.num_messages_in_batch, indexes)
        if wrong is not None:
            entry.problems.append(Problem("error", "batch", 0, wrong))
    if not 0 <= count <= MAX_BATCH_MESSAGES:
        # each Message costs ~700 bytes: a tiny compressed batch of empty records must not
        # be able to claim millions of them
        raise CorruptEntryError(
            "batch", 0, f"0 to {MAX_BATCH_MESSAGES} messages in a batch", f"{count}"
        )
    unfit = batch_fit_error(count, len(plain))
    if unfit is not None:
        raise CorruptEntryError("batch", 0, f"at most {len(plain) // MIN_RECORD} records", unfit)
    first_index = None if last_index is None else last_index - md.num_messages_in_batch + 1
    base_seq = md.sequence_id
    if native is not None:
        split = native.split_batch(
            plain, count, indexes, base_seq, publish_time, first_index, ledger_id, entry_id
        )
        if split is not None:
            messages, placeholders, end = split
            entry.layers.append(
                batch_layer(plain, count, len(messages), placeholders, indexes, end)
            )
            if end != len(plain):
                entry.problems.append(trailing_bytes(end, len(plain), count))
            entry.placeholders = placeholders
            entry._batch = (plain, count, indexes)
            return messages  # type: ignore[no-any-return]
    layer, records, placeholders = parse_batch(plain, count, indexes, entry.problems)
    entry.layers.append(layer)
    entry._records = records
    entry.placeholders = placeholders
    out: list[Message] = []
    append = out.append
    message = Message
    for rec in records:
        smm = rec.smm
        i = rec.batch_index
        null = smm.null_value
        # Producers usually set the key and the sequence id: read the value first and ask
        # HasField only when it is the default (one upb call instead of two).
        key = smm.partition_key
        if not key and not smm.HasField("partition_key"):
            key = None
        elif type(key) is bytes:  # not UTF-8: protobuf hands out bytes
            key = as_text(key)
        seq = smm.sequence_id
        if not seq and not smm.HasField("sequence_id"):
            seq = base_seq + i
        append(
            message(
                key,
                None if null else bytes(rec.value),
                text_map(props) if (props := smm.properties) else {},
                i,
                null,
                smm.event_time if smm.HasField("event_time") else None,
                seq,
                publish_time,
                smm.partition_key_b64_encoded,
                smm.ordering_key if smm.HasField("ordering_key") else None,
                None if first_index is None else first_index + i,
                ledger_id,
                entry_id,
            )
        )
    return out


#: what a pending chunk costs beyond its bytes (the decoded Entry, its layers, its metadata)
PENDING_ENTRY_COST = 4096
#: how many discarded chunked messages are remembered, so that their later chunks are
#: dropped quietly instead of each being reported as a chunk without its chunk 0
REFUSED_KEYS = 1024


class ChunkAssembler:
    """Join the chunks of chunked messages, fed entry by entry in topic order.

    When the last chunk of a message arrives and every chunk before it was seen, the
    whole message is decrypted, decompressed and attached to that last entry, which is
    where a consumer's message id points.

    Irregular sequences are handled as the upstream consumer does (apache/pulsar
    ``pulsar-client/.../ConsumerImpl.java``, ``processMessageChunk``; see
    ../shared/spec/formats.md §3.4): chunk 0 again restarts the message; a duplicate of an
    earlier chunk (``chunk_id`` <= the last one added) is dropped and assembly goes on; a
    gap discards the message (an error: a consumer never receives it); a chunk whose
    chunk 0 was not read is not reassembled (a warning: the read may have started there).

    Memory is bounded (``decoders/limits.py``): a message whose chunks together hold more
    than :data:`limits.CHUNKED_FACTOR` times the maximum message size, or whose chunk 0
    announces more (``total_chunk_msg_size``), is discarded with an error (a consumer joins
    messages larger than the broker's limit, up to its memory: that is what chunking is
    for), and the joined message may decompress to as much; the messages still being
    joined hold at most
    :func:`limits.max_pending_chunks` bytes together (ten messages of the limit: the Java
    consumer's ``maxPendingChunkedMessage`` default is 10), past which the oldest is
    discarded with an error (the consumer's ``removeOldestPendingChunkedMessage``).
    """

    def __init__(self, options: DecodeOptions = DEFAULT_OPTIONS) -> None:
        self.options = options
        self.pending: dict[tuple[str, str], list[Entry]] = {}
        self._sizes: dict[tuple[str, str], int] = {}  # chunk payload bytes per message
        self._held = 0  # what the pending entries cost (PENDING_ENTRY_COST each + bytes)
        self._refused: dict[tuple[str, str], None] = {}  # discarded for their size

    def _limit(self) -> int:
        if self.options.max_uncompressed is not None:
            return self.options.max_uncompressed
        return limits.max_message_size()

    def _joined_limit(self) -> int:
        """The most a chunked message may hold, joined or decompressed."""
        return limits.CHUNKED_FACTOR * self._limit()

    def _drop(self, key: tuple[str, str]) -> list[Entry]:
        parts = self.pending.pop(key, [])
        self._sizes.pop(key, None)
        self._held -= sum(len(p.data) + PENDING_ENTRY_COST for p in parts)
        return parts

    def _refuse(self, key: tuple[str, str]) -> None:
        self._refused[key] = None
        if len(self._refused) > REFUSED_KEYS:
            del self._refused[next(iter(self._refused))]

    def add(self, entry: Entry) -> Message | None:
        chunk = entry.chunk
        if chunk is None:
            return None
        key = (entry.metadata.producer_name, chunk.uuid)
        parts = self.pending.get(key)
        expected = 0 if parts is None else len(parts)
        where = f"chunk {chunk.chunk_id} of {chunk.uuid}"
        if chunk.chunk_id != 0 and parts is None and key in self._refused:
            return None  # the rest of a message discarded for its size (reported then)
        if chunk.chunk_id != expected:
            if chunk.chunk_id == 0:  # the producer resent the message from its start
                entry.problems.append(
                    Problem(
                        "warning",
                        "chunk",
                        0,
                        f"{where} arrived after {expected} chunk(s): the message starts "
                        "over from this chunk, the earlier ones are dropped",
                    )
                )
                self._drop(key)
                parts = None
            elif parts is not None and chunk.chunk_id < expected:
                entry.problems.append(
                    Problem(
                        "warning",
                        "chunk",
                        0,
                        f"{where} is a duplicate (chunks 0..{expected - 1} were read): "
                        "dropped, as a consumer drops it; assembly goes on",
                    )
                )
                return None
            elif parts is not None:
                self._drop(key)
                entry.problems.append(
                    Problem(
                        "error",
                        "chunk",
                        0,
                        f"{where} follows chunk {expected - 1}: chunks "
                        f"{expected}..{chunk.chunk_id - 1} are missing, the message is "
                        "discarded (a consumer never receives it)",
                    )
                )
                return None
            else:
                entry.problems.append(
                    Problem(
                        "warning",
                        "chunk",
                        0,
                        f"{where} without its chunk 0 in what was read: not reassembled",
                    )
                )
                return None
        limit = self._joined_limit()
        size = self._sizes.get(key, 0) + len(chunk.payload)
        announced = chunk.total_size if chunk.chunk_id == 0 else 0
        if size > limit or announced > limit:
            self._drop(key)
            self._refuse(key)
            what = (
                f"announces {announced} bytes (total_chunk_msg_size)"
                if announced > limit
                else f"holds more than {limit} bytes in its first {chunk.chunk_id + 1} chunks"
            )
            entry.problems.append(
                Problem(
                    "error",
                    "chunk",
                    0,
                    f"chunked message {chunk.uuid} {what}, over the limit of {limit} bytes "
                    f"{LIMIT_HINT}: discarded, not joined",
                )
            )
            return None
        if parts is None:
            parts = self.pending[key] = []
            self._refused.pop(key, None)
        parts.append(entry)
        self._sizes[key] = size
        self._held += len(entry.data) + PENDING_ENTRY_COST
        if len(parts) < chunk.num_chunks:
            self._bound(entry)
            return None
        self._drop(key)
        return self._assemble(parts)

    def _bound(self, entry: Entry) -> None:
        """Discard the oldest unfinished messages while the pending chunks hold too much."""
        budget = limits.PENDING_CHUNK_FACTOR * self._limit()
        while self._held > budget and len(self.pending) > 1:
            oldest = next(iter(self.pending))
            parts = self._drop(oldest)
            self._refuse(oldest)
            first = parts[0].chunk if parts else None
            entry.problems.append(
                Problem(
                    "error",
                    "chunk",
                    0,
                    f"chunked message {oldest[1]} discarded with {len(parts)} of "
                    f"{first.num_chunks if first else '?'} chunks read: the messages being "
                    f"joined held more than {budget} bytes ({limits.PENDING_CHUNK_FACTOR} "
                    f"times the maximum message size {LIMIT_HINT})",
                )
            )

    def _assemble(self, parts: list[Entry]) -> Message | None:
        last = parts[-1]
        first_md = parts[0].metadata
        # The producer compresses the whole message, slices it, then encrypts every slice
        # on its own (each chunk has its own IV; seen in C++ client 4.2 captures, and the
        # Java and C++ consumers decrypt per chunk): decrypt each chunk, decompress the join.
        pieces = []
        for p in parts:
            if p.chunk is None:
                continue
            piece: bytes | memoryview | None = p.chunk.payload
            if p.metadata.encryption_keys:
                decrypt_only = api.MessageMetadata()
                decrypt_only.CopyFrom(p.metadata)
                decrypt_only.ClearField("compression")
                decrypt_only.ClearField("uncompressed_size")
                at = len(p.data) - len(p.chunk.payload)
                piece = open_payload(p, decrypt_only, p.chunk.payload, at, self.options)
                if piece is None:
                    return None
            pieces.append(bytes(piece))
        whole = b"".join(pieces)
        if first_md.encryption_keys:
            first_md = _copy_without_encryption(first_md)
        total = parts[0].chunk.total_size if parts[0].chunk is not None else len(whole)
        if len(whole) != total:
            last.problems.append(
                Problem(
                    "warning",
                    "chunk",
                    0,
                    f"chunks join to {len(whole)} bytes, total_chunk_msg_size says {total}",
                )
            )
        joined = replace(self.options, max_uncompressed=self._joined_limit())
        plain = open_payload(last, first_md, whole, 0, joined)
        if plain is None:
            return None
        messages = _messages(last, first_md, plain)
        for m in messages:
            m.chunks = len(parts)
        last.messages.extend(messages)
        return messages[0] if messages else None

    def incomplete(self) -> Iterator[tuple[str, int, int]]:
        """(uuid, chunks seen, chunks expected) of messages still missing chunks."""
        for (_, uuid), parts in self.pending.items():
            yield uuid, len(parts), parts[0].chunk.num_chunks if parts[0].chunk else 0


def decode_entries(
    entries: Iterable[tuple[bytes | memoryview, tuple[int, int] | None]],
    options: DecodeOptions = DEFAULT_OPTIONS,
) -> Iterator[Entry]:
    """Decode a stream of entries in topic order, reassembling chunked messages."""
    assembler = ChunkAssembler(options)
    for data, position in entries:
        entry = decode_entry(data, options, position)
        if entry.chunk is not None and options.depth is Depth.MESSAGES:
            assembler.add(entry)
        yield entry


def rebuild(entry: Entry, password: bytes | None = None) -> bytes:
    """Serialize a decoded entry again from its decoded values (not its raw bytes).

    Payloads are rebuilt from the messages: batch records re-serialized, compressed
    with the entry's codec, and encrypted again with the data key and IV when the
    entry was decrypted. Raises LedgerctlError when an inner layer was not decoded.
    """
    md = entry.metadata
    if md is None or entry.payload is None:
        raise LedgerctlError("cannot rebuild an entry whose metadata was not decoded")
    if any(layer.name == "undecoded" for layer in entry.layers):
        raise LedgerctlError("cannot rebuild an entry with an undecoded layer")
    if entry.chunk is not None or md.HasField("marker_type"):
        payload: bytes | memoryview = entry.payload
    elif entry.encrypted and entry.data_key is None:
        payload = entry.payload
    else:
        if entry.records is not None:
            plain: bytes | memoryview = build_batch(
                (_copy_smm(r.smm), r.value) for r in _with_placeholders(entry)
            )
        else:
            plain = entry.plaintext if entry.plaintext is not None else b""
        payload = compress(md.compression, plain) if md.compression != api.NONE else bytes(plain)
        if entry.encrypted and entry.data_key is not None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            payload = AESGCM(entry.data_key).encrypt(bytes(md.encryption_param), payload, None)
    out = build_entry(
        md,
        payload,
        checksum=entry.has_checksum,
        broker_entry_metadata=entry.broker_entry_metadata,
    )
    if entry.original_id is not None:
        out = compacted.build(entry.original_id, out)
    if entry.header is not None and entry.digest_type is not None:
        out = bookkeeper.build(entry.header, out, entry.digest_type, password)
    return out


def _copy_without_encryption(md: Any) -> Any:
    copy = api.MessageMetadata()
    copy.CopyFrom(md)
    del copy.encryption_keys[:]
    return copy


def _copy_smm(smm: Any) -> Any:
    copy = api.SingleMessageMetadata()
    copy.CopyFrom(smm)
    return copy


def _with_placeholders(entry: Entry) -> list[BatchRecord]:
    from .payload import placeholder

    records = list(entry.records or [])
    if not entry.placeholders or entry.metadata.compacted_batch_indexes:
        return records
    holes = [BatchRecord(i, placeholder(), memoryview(b""), 0) for i in entry.placeholders]
    return sorted(records + holes, key=lambda r: r.batch_index)


__all__ = [
    "ChecksumLayer",
    "ChunkAssembler",
    "ChunkInfo",
    "DecodeOptions",
    "Depth",
    "Entry",
    "Message",
    "Outer",
    "decode_entries",
    "decode_entry",
    "decode_payload",
    "json_value",
    "rebuild",
]
