"""Phase one and phase two of Pulsar's two-phase compaction, over decoded entries.

Pure: no stores, no engines. The rules follow ``AbstractTwoPhaseCompactor``,
``PublishingOrderCompactor``, ``EventTimeOrderCompactor`` and ``RawBatchConverter``
(apache/pulsar, pulsar-broker; docs/compaction.md lists what was checked upstream):

* an entry with any ``marker_type`` is dropped;
* a "readable batch" (``num_messages_in_batch`` present, no encryption keys) is split:
  records already ``compacted_out`` are skipped; the key is the record's
  ``partition_key`` (absent: keyless); the size is the record's ``payload_size`` (absent: 0);
  size > 0 makes the record the key's latest, size <= 0 is a tombstone;
* anything else (a single message, an encrypted batch, a chunk) is one unit: key =
  ``MessageMetadata.partition_key``; size = ``uncompressed_size`` when present, else the
  length of the whole headersAndPayload; ``null_value`` is never consulted;
* keyless messages are dropped unless ``retain_null_key``.

Phase two emits, in original-position order: single messages that are their key's latest
(copied byte for byte), keyless ones when retained, and readable batches rebatched
(placeholders for removed records, recompressed with the same codec, a new CRC32C, the
broker entry metadata prefix the compactor received put back) when at least one record is
kept. A batch that cannot be decoded is copied whole, as Pulsar does.

What the compactor's raw reader receives is what the broker dispatches to the
``__compaction`` subscription (checked on a Pulsar 4.0.7 broker,
``tests/cluster/sandbox/test_compaction.py``):

* entries of aborted transactions never reach it
  (``AbstractBaseDispatcher.filterEntriesForConsumer`` skips them when
  ``PersistentTopic.isTxnAborted``); transaction markers do, and are dropped as markers.
  ``CompactionOptions.aborted`` names the aborted transactions; phase one records what
  :class:`Transactions` needs to find them (records under :data:`TXN_PREFIX`, never
  message keys). Entries after the transaction buffer's max read position (the first entry
  of the oldest ongoing transaction) are not dispatched: the caller stops the plan before
  them (``compaction.run.run_phase_one``);
* the broker entry metadata prefix (0x0e02) is stripped unless the broker sets
  ``exposingBrokerEntryMetadataToClientEnabled``
  (``PulsarCommandSenderImpl.sendMessagesToConsumer``; here
  ``CompactionOptions.keep_entry_metadata``). So a default broker's compacted entries
  carry none, and its rebatched entries none either (``RawBatchConverter.rebatchMessage``
  puts back only the prefix it received);
* each compacted entry's MessageIdData is the one the dispatcher sends
  (``Commands.newMessageCommand``): ledger id, entry id and ``partition``, -1 for a topic
  that is not a partition (``TopicName.getPartitionIndex``), also for entries re-read from
  the previous compacted ledger.

Chunked messages, as the broker compacts them (Pulsar 4.0.7, checked on the sandbox:
``tests/cluster/sandbox/test_compaction.py``): the compactor's ``RawReader`` gives each chunk as a
message of its own (nothing in ``AbstractTwoPhaseCompactor``, ``PublishingOrderCompactor``
or ``RawBatchConverter`` looks at ``chunk_id`` or ``uuid``), so phase one records every chunk
under the message's key and the key's latest is the last chunk; phase two keeps that chunk
only. A compacted reader then gets a last chunk without its first one and drops it
(``ConsumerImpl.processMessageChunk``; the C++ client logs "Received an uncached chunk"):
the message is lost to it. ``Stats.chunked_cut`` counts such messages. With
``keep_chunks`` (``compact --keep-chunks``, not the broker's result) every chunk of that
message is kept instead, reported as ``chunks_kept``: each chunk is also recorded under a
group key, producer + uuid, whose latest position is the message's last chunk.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError

from pulsarctl_py.decoders import compacted as compacted_layer
from pulsarctl_py.decoders.codecs import compress_as_broker, decompress
from pulsarctl_py.decoders.entry import (
    MAX_BATCH_MESSAGES,
    DecodeOptions,
    Entry,
    compacted_indexes_error,
    decode_payload,
)
from pulsarctl_py.decoders.errors import CorruptEntryError, DataError, LedgerctlError
from pulsarctl_py.decoders.payload import batch_fit_error, build_batch, parse_batch, placeholder
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.engines.base import KeyRecord, KeyState, WinnerView
from pulsarctl_py.proto import pulsar_api_pb2 as api
from pulsarctl_py.proto import pulsar_markers_pb2 as markers_pb

from .rebatch_buffer import rebatch_failure

ORDER_PUBLISHING = "publishing"
ORDER_EVENT_TIME = "event-time"
ORDERS = (ORDER_PUBLISHING, ORDER_EVENT_TIME)
FORMAT_CLASSIC = "classic"
FORMAT_PIP_429 = "pip-429"
FORMATS = (FORMAT_CLASSIC, FORMAT_PIP_429)
#: what every command that writes (or plans to write) pip-429 batches says, in its report
#: or plan and on stderr: checked with pulsar-client 3.13 (C++ 4.2), which dies with a
#: segmentation fault reading a batch whose metadata has compacted_batch_indexes
PIP_429_CLIENT_CRASH = (
    "--format pip-429 writes field 31 (compacted_batch_indexes): the C++ and Python clients "
    "(pulsar-client 3.13 / C++ 4.2) crash on such batches (segmentation fault); only Java "
    "clients that know field 31 read them"
)

_POS = struct.Struct(">QQI")
_EVENT = struct.Struct(">Q")
#: prefixes of key-table keys: message keys, and chunk groups (producer + uuid)
KEY_PREFIX = b"k"
CHUNK_PREFIX = b"c"
#: phase one's transaction records, never message keys (:func:`transactions` reads them):
#: the first entry of a transaction (its rank the position inverted, so that the greatest
#: rank is the earliest entry) and the marker that ends it (rank: the marker's position;
#: tombstone: the transaction was aborted)
TXN_PREFIX = b"\x01"
_TXN_FIRST = TXN_PREFIX + b"f"
_TXN_END = TXN_PREFIX + b"e"
_TXN = struct.Struct(">QQ")
#: the markers that end a transaction (PulsarMarkers.proto), and whether it was aborted
_TXN_ENDS = {markers_pb.TXN_COMMIT: False, markers_pb.TXN_ABORT: True}
#: the length of an event-time rank (event time, position, batched flag)
_EVENT_RANK = 8 + _POS.size + 1


@dataclass(frozen=True, slots=True)
class CompactionOptions:
    retain_null_key: bool = False
    order: str = ORDER_PUBLISHING
    format: str = FORMAT_CLASSIC
    #: keep every chunk of the latest chunked message, so that readers can reassemble it;
    #: the broker keeps only its last chunk (the default here too)
    keep_chunks: bool = False
    #: the broker's exposingBrokerEntryMetadataToClientEnabled: the compactor then receives
    #: (and writes) each entry's 0x0e02 prefix; by default it is stripped
    keep_entry_metadata: bool = False
    #: aborted transactions (:func:`txn_key` of their ids): their entries are skipped
    aborted: frozenset[bytes] = frozenset()
    #: go on past damaged entries (a digest or checksum that does not match, metadata or a
    #: payload that does not decode) as the broker does, listing them (``Stats.damaged``);
    #: without it the first one stops the run (:func:`refuse`)
    accept_damage: bool = False


#: damaged positions listed one by one in a report; the rest are counted
MAX_DAMAGED = 1000


def refuse(position: tuple[int, int], why: str) -> DataError:
    """The error that stops a run at a damaged entry (without ``accept_damage``)."""
    return DataError(
        "{}:{}: {}; refusing to copy a damaged entry (--accept-damage copies it as the broker "
        "does, and lists it)".format(*position, why)
    )


@dataclass(slots=True)
class RawEntry:
    """One topic entry as the compactor's raw reader sees it."""

    position: tuple[int, int]  # the original topic position
    data: bytes  # headersAndPayload, possibly starting with the 0x0e02 prefix
    metadata: Any  # MessageMetadata, or None when it could not be parsed
    payload_at: int  # where the payload starts in ``data``
    bem: bytes = b""  # the raw broker entry metadata prefix (magic included), if any
    message_id: bytes | None = None  # serialized MessageIdData from a compacted ledger
    partition: int = -1
    #: why the entry fails an integrity check (read only with ``accept_damage``), or None
    damage: str | None = None


@dataclass(slots=True)
class CompactedEntry:
    """One entry of the compacted ledger: the original position and the RawMessage bytes."""

    position: tuple[int, int]
    data: bytes  # RawMessage framing: MessageIdData + headersAndPayload
    messages: int  # retained messages in it
    batch_index: int  # the last retained batch index (-1 for a single message)


@dataclass(slots=True)
class Stats:
    entries_in: int = 0
    bytes_in: int = 0
    entries_out: int = 0
    bytes_out: int = 0
    kept: int = 0
    keyless_dropped: int = 0
    not_compactable: int = 0
    markers: int = 0
    chunks_kept: int = 0  # chunks kept beyond what Pulsar's compactor keeps
    #: chunked messages of which only the last chunk is kept (the broker's rule): a reader
    #: of the compacted view drops such a chunk, the message is lost to it
    chunked_cut: int = 0
    undecodable: int = 0  # batches copied whole because they could not be decoded
    aborted: int = 0  # entries of aborted transactions, never dispatched to the compactor
    #: rebuilt batches a Pulsar 4.0/4.1 broker fails to write (apache/pulsar#26290), and the
    #: first one: that broker's own compaction of the topic never succeeds
    broker_failures: int = 0
    broker_failure_at: tuple[int, int] | None = None
    #: phase one's "to": the last entry that was not entirely deleted
    to: tuple[int, int] | None = None
    problems: list[str] = field(default_factory=list)
    #: damaged entries gone on past (``accept_damage``), the first MAX_DAMAGED:
    #: {"position": "L:E", "problem": why, and what was done with it}
    damaged: list[dict[str, str]] = field(default_factory=list)
    damaged_count: int = 0

    def damage(self, position: tuple[int, int], why: str, what: str) -> None:
        """A damaged entry gone on past: ``what`` was done with it."""
        self.damaged_count += 1
        if len(self.damaged) < MAX_DAMAGED:
            where = "{}:{}".format(*position)
            self.damaged.append({"position": where, "problem": f"{why}; {what}"})
            self.problems.append(f"{where}: {why}; {what}")

    def add(self, other: Stats) -> None:
        for name in (
            "entries_in",
            "bytes_in",
            "entries_out",
            "bytes_out",
            "kept",
            "keyless_dropped",
            "not_compactable",
            "markers",
            "chunks_kept",
            "chunked_cut",
            "undecodable",
            "aborted",
            "broker_failures",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if self.broker_failure_at is None:
            self.broker_failure_at = other.broker_failure_at
        if other.to is not None and (self.to is None or other.to > self.to):
            self.to = other.to
        room = max(MAX_DAMAGED - len(self.damaged), 0)
        self.damaged.extend(other.damaged[:room])
        self.problems.extend(other.problems[:room])
        self.damaged_count += other.damaged_count


# -- ranks and folds --------------------------------------------------------------------------


def position_rank(ledger_id: int, entry_id: int, batch_index: int = -1) -> bytes:
    """A rank in topic order: (ledger, entry, batch index), -1 sorting first."""
    return _POS.pack(ledger_id % 2**64, entry_id % 2**64, batch_index + 1)


def rank_of(
    options: CompactionOptions,
    ledger_id: int,
    entry_id: int,
    batch_index: int,
    event_time: int,
    batched: bool,
) -> bytes:
    pos = position_rank(ledger_id, entry_id, batch_index)
    if options.order == ORDER_PUBLISHING:
        return pos
    # event-time order: event time (0 when absent, as Java's getter reads it), the position,
    # and whether the record came from a batch (batches need a strictly newer event time)
    return _EVENT.pack(event_time % 2**64) + pos + (b"\x01" if batched else b"\x00")


def event_time_fold(state: KeyState, rank: bytes, tombstone: bool) -> KeyState:
    """EventTimeOrderCompactor's rule, applied in topic order.

    A record replaces the key's latest when the key is absent (never seen, or removed by a
    tombstone) or when its event time is newer: ``>=`` for single messages, ``>`` for
    batch records. A newer tombstone removes the key; an older record changes nothing.
    Transaction records (position ranks, not event-time ranks) keep the greatest rank.
    """
    if len(rank) != _EVENT_RANK:
        return (rank, tombstone) if state is None or rank > state[0] else state
    if state is None or state[1]:
        return (rank, tombstone)
    new_time = _EVENT.unpack_from(rank)[0]
    old_time = _EVENT.unpack_from(state[0])[0]
    batched = rank[-1:] == b"\x01"
    newer = new_time > old_time if batched else new_time >= old_time
    return (rank, tombstone) if newer else state


def fold_for(options: CompactionOptions) -> Any:
    return event_time_fold if options.order == ORDER_EVENT_TIME else None


def message_key(key: str | bytes) -> bytes:
    """The key table's key of a message key. A key that is not UTF-8 comes as its bytes
    (:class:`~pulsarctl_py.decoders.text.RawText`) and is kept as they are, as the native
    helpers keep it. (The broker's map holds a Java String, malformed bytes replaced by
    U+FFFD: two keys that differ only in their malformed bytes are one key there.)"""
    return KEY_PREFIX + (key if isinstance(key, bytes) else key.encode("utf-8"))


def txn_key(md: Any) -> bytes | None:
    """The transaction an entry belongs to (16 bytes: most, least significant bits), or None.

    An entry is transactional when both id halves are present, as the broker tests it
    (``AbstractBaseDispatcher.filterEntriesForConsumer``: ``hasTxnidMostBits() &&
    hasTxnidLeastBits()``)."""
    if md.HasField("txnid_most_bits") and md.HasField("txnid_least_bits"):
        return _TXN.pack(md.txnid_most_bits, md.txnid_least_bits)
    return None


def _inverted_rank(ledger_id: int, entry_id: int) -> bytes:
    return _POS.pack(2**64 - 1 - ledger_id % 2**64, 2**64 - 1 - entry_id % 2**64, 0)


def _txn_records(md: Any, txn: bytes, position: tuple[int, int]) -> Iterator[KeyRecord]:
    """Phase one's records about the transaction of one topic entry."""
    if md.HasField("marker_type"):
        aborted = _TXN_ENDS.get(md.marker_type)
        if aborted is not None:
            yield _TXN_END + txn, position_rank(*position), aborted
    else:
        yield _TXN_FIRST + txn, _inverted_rank(*position), False


@dataclass(slots=True)
class Transactions:
    """The transactions phase one saw in the topic: where each began and how it ended.

    The broker's view (``TopicTransactionBuffer``): a transaction is aborted once its
    abort marker is written (``isTxnAborted``); one with no end marker yet is ongoing, and
    the max read position is the entry before the first entry of the oldest ongoing one
    (``handleTransactionMessage``, ``updateMaxReadPosition``), else the topic's last entry.
    """

    first: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    ended: dict[bytes, tuple[tuple[int, int], bool]] = field(default_factory=dict)

    def add(self, key: bytes, rank: bytes, tombstone: bool) -> bool:
        """Take one record of the key table; False when it is not a transaction record."""
        if not key.startswith(TXN_PREFIX):
            return False
        kind, txn = key[: len(_TXN_FIRST)], key[len(_TXN_FIRST) :]
        ledger, entry, _ = _POS.unpack(rank)
        if kind == _TXN_FIRST:
            self.first[txn] = (2**64 - 1 - ledger, 2**64 - 1 - entry)
        elif kind == _TXN_END:
            self.ended[txn] = ((ledger, entry), tombstone)
        return True

    @property
    def aborted(self) -> frozenset[bytes]:
        return frozenset(t for t, (_pos, aborted) in self.ended.items() if aborted)

    @property
    def ongoing(self) -> dict[bytes, tuple[int, int]]:
        """Transactions with entries and no end marker: their first entries."""
        return {t: pos for t, pos in self.first.items() if t not in self.ended}

    def to_json(self) -> dict[str, Any]:
        with_entries = set(self.first)
        return {
            "committed": sum(1 for t, (_p, a) in self.ended.items() if not a and t in with_entries),
            "aborted": sum(1 for t, (_p, a) in self.ended.items() if a and t in with_entries),
            "ongoing": [
                {"txn": txn_name(t), "first_entry": "{}:{}".format(*pos)}
                for t, pos in sorted(self.ongoing.items(), key=lambda kv: kv[1])
            ],
        }


def txn_name(txn: bytes) -> str:
    """A transaction id as the admin API prints it: ``(most,least)``."""
    most, least = _TXN.unpack(txn)
    return f"({most},{least})"


def chunk_group(md: Any) -> bytes:
    return CHUNK_PREFIX + md.producer_name.encode("utf-8") + b"\x00" + md.uuid.encode("utf-8")


# -- entry kinds ------------------------------------------------------------------------------


def is_readable_batch(md: Any) -> bool:
    return md.HasField("num_messages_in_batch") and len(md.encryption_keys) == 0


def is_chunk(md: Any) -> bool:
    return md.num_chunks_from_msg > 1 and md.HasField("uuid")


def _single_size(entry: RawEntry, options: CompactionOptions) -> int:
    """``extractKeyAndSize``: ``uncompressed_size``, else the length of headersAndPayload as
    the compactor received it (the 0x0e02 prefix included only when the broker exposes it)."""
    md = entry.metadata
    if md.HasField("uncompressed_size"):
        return md.uncompressed_size
    return len(entry.data) - (0 if options.keep_entry_metadata else len(entry.bem))


def dispatched(entry: RawEntry, options: CompactionOptions) -> RawEntry:
    """The entry as the broker sends it to the compactor: without its 0x0e02 prefix unless
    the broker exposes it (``PulsarCommandSenderImpl.sendMessagesToConsumer`` calls
    ``Commands.skipBrokerEntryMetadataIfExist`` when ``exposingBrokerEntryMetadataToClientEnabled``
    is false, the default)."""
    if not entry.bem or options.keep_entry_metadata:
        return entry
    cut = len(entry.bem)
    return RawEntry(
        entry.position,
        entry.data[cut:],
        entry.metadata,
        entry.payload_at - cut,
        b"",
        entry.message_id,
        entry.partition,
        entry.damage,
    )


def _skipped_txn(entry: RawEntry, md: Any, options: CompactionOptions) -> bool:
    """Whether the entry belongs to an aborted transaction (never dispatched)."""
    if not options.aborted or not md.HasField("txnid_most_bits"):
        return False
    return not md.HasField("marker_type") and txn_key(md) in options.aborted


def _batch_count(md: Any) -> int:
    """The batch's ``num_messages_in_batch``, refused past the decoder's bound: a batch
    rebuilt with placeholders (and its list of holes) is as long as that count, whatever
    ``compacted_batch_indexes`` says, so a damaged count must not size them; and PIP-429
    indexes that name no message of the batch (:func:`compacted_indexes_error`) are
    damage too, refused before they are rebatched."""
    count = md.num_messages_in_batch
    if not 0 <= count <= MAX_BATCH_MESSAGES:
        raise CorruptEntryError(
            "batch", 0, f"0 to {MAX_BATCH_MESSAGES} messages in a batch", f"{count}"
        )
    if md.HasField("uncompressed_size"):  # refused before the payload is decompressed
        unfit = batch_fit_error(count, md.uncompressed_size)
        if unfit is not None:
            raise CorruptEntryError("batch", 0, "records that fit uncompressed_size", unfit)
    if md.compacted_batch_indexes:
        wrong = compacted_indexes_error(count, md.compacted_batch_indexes)
        if wrong is not None:
            raise CorruptEntryError(
                "batch", 0, "strictly rising batch indexes below the batch's count", wrong
            )
    return count


def _batch_records(entry: RawEntry) -> tuple[list[Any], list[int]]:
    """The batch's live records and its compacted-out indexes (raises on damage)."""
    md = entry.metadata
    _batch_count(md)
    payload = memoryview(entry.data)[entry.payload_at :]
    plain = decompress(md.compression, payload, md.uncompressed_size)
    indexes = list(md.compacted_batch_indexes) or None
    problems: list[Any] = []
    count = len(indexes) if indexes is not None else md.num_messages_in_batch
    _layer, records, holes = parse_batch(plain, count, indexes, problems)
    if indexes is not None:
        present = set(indexes)
        holes = [i for i in range(md.num_messages_in_batch) if i not in present]
    return records, holes


#: a record of a batch: (batch index, key or None, size, event time)
_Rec = tuple[int, str | None, int, int]


@dataclass(slots=True)
class _Split:
    """A readable batch as the native splitter cut it: no per-record Python objects beyond
    the splitter's own. ``whole`` when every record is live and in order (no holes, no
    ``compacted_batch_indexes``): then phase two can rebuild from ``plain`` directly."""

    plain: bytes | memoryview
    messages: list[Any]  # entry.Message objects: key, value, batch_index, event_time
    whole: bool


def _native_split(entry: RawEntry) -> _Split | None:
    """The native split of a readable batch, or None (no native module, or irregular input:
    the caller takes the Python parser). Raises on damage the decompressor sees."""
    from pulsarctl_py.decoders.speedups import native

    if native is None:
        return None
    md = entry.metadata
    _batch_count(md)
    payload = memoryview(entry.data)[entry.payload_at :]
    plain = decompress(md.compression, payload, md.uncompressed_size)
    indexes = list(md.compacted_batch_indexes) or None
    count = len(indexes) if indexes is not None else md.num_messages_in_batch
    split = native.split_batch(plain, count, indexes, 0, 0, None, 0, 0)
    if split is None:
        return None
    messages = split[0]
    # payload_size is the value's length in a regular batch; a null-value record's value
    # is not returned by the split, so such a batch takes the Python parser
    for m in messages:
        if m.null_value:
            return None
    whole = indexes is None and not split[1] and len(messages) == md.num_messages_in_batch
    return _Split(plain, messages, whole)


def _records_of(split: _Split) -> list[_Rec]:
    return [(m.batch_index, m.key, len(m.value), m.event_time or 0) for m in split.messages]


def _batch_view(entry: RawEntry) -> tuple[list[_Rec], _Split | None]:
    """The batch's live records as (index, key, size, event time), and the native split
    when there was one (raises on damage)."""
    split = _native_split(entry)
    if split is not None:
        return _records_of(split), split
    records, _holes = _batch_records(entry)
    return [
        (
            r.batch_index,
            r.smm.partition_key if r.smm.HasField("partition_key") else None,
            r.smm.payload_size if r.smm.HasField("payload_size") else 0,
            r.smm.event_time,
        )
        for r in records
    ], None


#: 4-byte batch-index suffixes of position ranks (index + 1, so -1 sorts first)
_INDEX_SUFFIX = [struct.pack(">I", i) for i in range(1025)]


def _index_suffix(batch_index: int) -> bytes:
    i = batch_index + 1
    return _INDEX_SUFFIX[i] if 0 <= i < 1025 else struct.pack(">I", i % 2**32)


# -- phase one --------------------------------------------------------------------------------


def phase_one(entries: Iterable[RawEntry], options: CompactionOptions) -> Iterator[KeyRecord]:
    """The ``(key, rank, tombstone)`` records of phase one, in topic order."""
    publishing = options.order == ORDER_PUBLISHING
    for entry in entries:
        md = entry.metadata
        if md is None:
            continue
        if md.HasField("txnid_most_bits"):
            txn = txn_key(md)
            if txn is not None:
                if entry.message_id is None:  # from the topic (a compacted ledger has none)
                    yield from _txn_records(md, txn, entry.position)
                if txn in options.aborted and not md.HasField("marker_type"):
                    continue
        if md.HasField("marker_type"):
            continue
        ledger_id, entry_id = entry.position
        if is_readable_batch(md):
            try:
                split = _native_split(entry)
                if split is None:
                    records, _ = _batch_view(entry)
            except LedgerctlError as exc:
                if not options.accept_damage:
                    raise refuse(
                        entry.position, f"batch not decodable ({exc.one_line()})"
                    ) from None
                continue  # Pulsar logs it and keeps the whole batch in phase two
            if split is not None and publishing:
                # the hot path: keys and sizes straight from the splitter's messages; a
                # rank is the entry's position prefix and the record's index suffix
                prefix = _POS.pack(ledger_id % 2**64, entry_id % 2**64, 0)[:16]
                suffix = _INDEX_SUFFIX
                for m in split.messages:
                    key = m.key
                    if key is None:
                        continue
                    i = m.batch_index + 1
                    rank = prefix + (suffix[i] if i < 1025 else _index_suffix(i - 1))
                    yield message_key(key), rank, not m.value
                continue
            if split is not None:
                records = _records_of(split)
            for batch_index, key, size, event_time in records:
                if key is None:
                    continue
                rank = rank_of(options, ledger_id, entry_id, batch_index, event_time, True)
                yield message_key(key), rank, size <= 0
            continue
        if not md.HasField("partition_key"):
            continue
        rank = rank_of(options, ledger_id, entry_id, -1, md.event_time, False)
        yield message_key(md.partition_key), rank, _single_size(entry, options) <= 0
        if options.keep_chunks and is_chunk(md):
            yield chunk_group(md), rank, False


def _native() -> Any:
    from pulsarctl_py.decoders.speedups import native

    return native


def _batch_args(entry: RawEntry) -> tuple[bytes, int, list[int] | None, bytes]:
    """A readable batch's decompressed records, record count, ``compacted_batch_indexes``
    (None when absent) and rank prefix (the entry's position), for the native helpers.
    Raises on damage the decompressor sees, and on a count past the decoder's bound."""
    md = entry.metadata
    _batch_count(md)
    plain = decompress(
        md.compression, memoryview(entry.data)[entry.payload_at :], md.uncompressed_size
    )
    indexes = list(md.compacted_batch_indexes) or None
    count = len(indexes) if indexes is not None else md.num_messages_in_batch
    ledger_id, entry_id = entry.position
    return plain, count, indexes, _POS.pack(ledger_id % 2**64, entry_id % 2**64, 0)[:16]


def phase_one_into(
    entries: Iterable[RawEntry],
    options: CompactionOptions,
    table: Any,
    plain: Any = None,
) -> int:
    """Phase one straight into ``table`` (a key table with ``offer``); the number of records
    offered. The same records as :func:`phase_one`; a table with ``offer_batch`` (the local
    engine's, in publishing order) takes a regular batch's records in one native call.

    ``plain`` (an ``array`` or list), when given, gets one number per entry, in order: the
    entry's size when it is a plain batch (every record keyed and offered in the native
    call: no marker, transaction, keyless record or ``compacted_batch_indexes``), else 0.
    Phase two of a plain batch none of whose records wins adds nothing but
    ``entries_in`` and ``bytes_in`` (:class:`~.reader.SparseReads`)."""
    native = _native()
    offer_batch = getattr(table, "offer_batch", None)
    if native is None or options.order != ORDER_PUBLISHING:
        offer_batch = None
    offer = table.offer
    offered = 0
    note = plain.append if plain is not None else None
    for entry in entries:
        md = entry.metadata
        if (
            offer_batch is not None
            and md is not None
            and not md.HasField("marker_type")
            and not md.HasField("txnid_most_bits")
            and is_readable_batch(md)
        ):
            try:
                records, count, indexes, prefix = _batch_args(entry)
            except LedgerctlError as exc:
                if not options.accept_damage:
                    raise refuse(
                        entry.position, f"batch not decodable ({exc.one_line()})"
                    ) from None
                if note is not None:
                    note(0)
                continue  # as phase_one: Pulsar logs it and keeps the whole batch
            done = offer_batch(records, count, indexes, KEY_PREFIX, prefix)
            if done is not None:
                offered += done
                if note is not None:
                    note(len(entry.data) if done == count and indexes is None else 0)
                continue
        if note is not None:
            note(0)
        for key, rank, tomb in phase_one((entry,), options):
            offer(key, rank, tomb)
            offered += 1
    return offered


# -- phase two --------------------------------------------------------------------------------


def _frame(entry: RawEntry, data: bytes) -> bytes:
    """RawMessage framing (``RawMessageImpl.serialize``) around ``data``, with the
    MessageIdData the dispatcher gave the compactor (``Commands.newMessageCommand``: ledger,
    entry and partition, -1 outside a partitioned topic), also for an entry re-read from a
    compacted ledger, whose stored id is not reused."""
    msg_id = api.MessageIdData(
        ledgerId=entry.position[0] % 2**64,
        entryId=entry.position[1] % 2**64,
        partition=entry.partition,
    )
    body = msg_id.SerializeToString()
    return compacted_layer.SIZE.pack(len(body)) + body + compacted_layer.SIZE.pack(len(data)) + data


def _deleted_in_phase_one(entry: RawEntry, options: CompactionOptions, records: Any) -> bool:
    """Pulsar's ``deletedMessage`` for this entry (it decides phase one's ``to``)."""
    md = entry.metadata
    if md is None:
        return False
    if md.HasField("marker_type"):
        return True
    if is_readable_batch(md):
        if records is None:
            return False  # undecodable: kept whole
        if options.order == ORDER_EVENT_TIME:
            deleted = 0
            for _i, key, size, _t in records:
                if key is None:
                    deleted += not options.retain_null_key
                elif size <= 0:
                    deleted += 1
            return deleted == md.num_messages_in_batch
        for _i, key, size, _t in records:
            if key is None:
                if options.retain_null_key:
                    return False
            elif size > 0:
                return False
        return True
    if not md.HasField("partition_key"):
        return not options.retain_null_key
    return _single_size(entry, options) <= 0


def phase_two(
    entries: Iterable[RawEntry],
    winners: WinnerView,
    options: CompactionOptions,
    stats: Stats,
) -> Iterator[CompactedEntry]:
    """The compacted entries, in topic order; ``stats`` is filled on the way."""
    publishing = options.order == ORDER_PUBLISHING
    native = _native()
    for entry in entries:
        stats.entries_in += 1
        stats.bytes_in += len(entry.data)
        md = entry.metadata
        if md is None:
            why = entry.damage or "no readable MessageMetadata"
            if not options.accept_damage:
                raise refuse(entry.position, why)
            stats.damage(entry.position, why, "skipped")
            continue
        if entry.damage is not None:  # read with accept_damage: copied as the broker copies it
            stats.damage(entry.position, entry.damage, "processed as stored")
        if _skipped_txn(entry, md, options):
            stats.aborted += 1
            continue
        if md.HasField("marker_type"):
            stats.markers += 1
            continue
        entry = dispatched(entry, options)
        out: CompactedEntry | None
        if is_readable_batch(md):
            split = None
            try:
                done = None
                if native is not None and publishing:
                    # the native helper; if it finds the batch irregular, the native split
                    done = _keep_native(entry, native, winners, options, stats)
                if done is None:
                    split = _native_split(entry)
                    if split is not None and publishing:
                        done = _rebatch_native(entry, split, winners, options, stats)
                if done is not None:
                    out, deleted = done
                    if not deleted:
                        stats.to = entry.position
                    if out is not None:
                        stats.entries_out += 1
                        stats.bytes_out += len(out.data)
                        yield out
                    continue
                records = _records_of(split) if split is not None else _batch_view(entry)[0]
            except LedgerctlError as exc:
                why = f"batch not decodable ({exc.one_line()})"
                if not options.accept_damage:
                    raise refuse(entry.position, why) from None
                stats.undecodable += 1
                if entry.damage is None:  # else listed already, once per entry
                    stats.damage(entry.position, why, "copied whole")
                records = None
            if not _deleted_in_phase_one(entry, options, records):
                stats.to = entry.position
            if records is None:
                count = md.num_messages_in_batch
                out = CompactedEntry(entry.position, _frame(entry, entry.data), count, count - 1)
            else:
                out = _rebatch(entry, records, split, winners, options, stats)
        else:
            if not _deleted_in_phase_one(entry, options, None):
                stats.to = entry.position
            out = _single(entry, winners, options, stats)
        if out is not None:
            stats.entries_out += 1
            stats.bytes_out += len(out.data)
            yield out


def _single(
    entry: RawEntry, winners: WinnerView, options: CompactionOptions, stats: Stats
) -> CompactedEntry | None:
    md = entry.metadata
    ledger_id, entry_id = entry.position
    count = md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1
    if md.encryption_keys and md.HasField("num_messages_in_batch"):
        stats.not_compactable += 1
    if not md.HasField("partition_key"):
        if options.retain_null_key:
            _check_single(entry, options, stats)
            stats.kept += count
            return CompactedEntry(entry.position, _frame(entry, entry.data), count, -1)
        stats.keyless_dropped += count
        return None
    key = message_key(md.partition_key)
    rank = rank_of(options, ledger_id, entry_id, -1, md.event_time, False)
    keep = winners.keeps(key, rank)
    leading = is_chunk(md) and md.chunk_id < md.num_chunks_from_msg - 1
    if not keep and options.keep_chunks and leading:
        last = winners.get(chunk_group(md))
        if last is not None and winners.keeps(key, last[0]):
            keep = True
            stats.chunks_kept += 1
    if not keep:
        return None
    _check_single(entry, options, stats)
    if not leading:
        stats.kept += count  # a leading chunk is part of one message, counted at its last
    if not options.keep_chunks and is_chunk(md):
        stats.chunked_cut += 1  # kept alone (the key's latest): readers drop it
    batch_index = count - 1 if md.HasField("num_messages_in_batch") else -1
    return CompactedEntry(entry.position, _frame(entry, entry.data), count, batch_index)


#: how a copied message's payload is decoded to check it (as every reader decodes it)
_PAYLOAD_OPTIONS = DecodeOptions()


def payload_damage(entry: RawEntry) -> str | None:
    """Why the entry's payload does not decode as every reader decodes it
    (:func:`~pulsarctl_py.decoders.entry.decode_payload`: decompression, batch records,
    marker), or None."""
    md = entry.metadata
    if md is None:
        return None
    decoded = Entry(entry.data, metadata=md, payload=memoryview(entry.data)[entry.payload_at :])
    decode_payload(decoded, _PAYLOAD_OPTIONS, entry.payload_at)
    errors = [p for p in decoded.problems if p.severity == "error"]
    if not errors:
        return None
    return f"payload not decodable ({errors[0].layer}: {errors[0].message})"


def _check_single(entry: RawEntry, options: CompactionOptions, stats: Stats) -> None:
    """A message copied byte for byte: its payload must decode (:func:`payload_damage`:
    a compressed payload that does not decompress to its ``uncompressed_size`` is damage),
    unless the damage is accepted (then it is listed)."""
    md = entry.metadata
    if not md.compression or md.encryption_keys:
        return  # nothing to decompress, or sealed: nothing the decoders could reject here
    why = payload_damage(entry)
    if why is not None:
        if not options.accept_damage:
            raise refuse(entry.position, why)
        if entry.damage is None:  # else listed already, once per entry
            stats.damage(entry.position, why, "copied as stored")


def _keep_native(
    entry: RawEntry,
    native: Any,
    winners: WinnerView,
    options: CompactionOptions,
    stats: Stats,
) -> tuple[CompactedEntry | None, bool] | None:
    """Phase two of a readable batch in publishing order through the native helper: the
    compacted entry (or None) and phase one's ``deletedMessage``; None when the helper finds
    the batch irregular (the caller takes the Python path). The decisions of
    ``_rebatch_native``: an in-memory table is looked up in C, any other view answers the
    records the helper asks about (one multi-get when the table spilled)."""
    plain, count, indexes, prefix = _batch_args(entry)
    memory = getattr(winners, "memory_table", None)
    # the local engine's native key table, when the whole table is in memory
    table = getattr(memory() if memory is not None else None, "native", None)
    pip_429 = options.format == FORMAT_PIP_429
    done = native.compact_keep(
        plain,
        count,
        indexes,
        KEY_PREFIX,
        prefix,
        table,
        options.retain_null_key,
        pip_429,
        _PLACEHOLDER_RECORD,
    )
    if done is None:
        return None
    keep, dropped, deleted, whole, rebuilt, asked = done
    if asked is not None:
        if asked[0]:
            many = getattr(winners, "keeps_many", None)
            keys, ranks = asked[1], asked[2]
            if many is not None:
                flags = many(keys, ranks)
            else:
                flags = [winners.keeps(k, r) for k, r in zip(keys, ranks, strict=True)]
            keep.extend(i for i, kept in zip(asked[0], flags, strict=True) if kept)
            keep.sort()
        if keep and whole:
            rebuilt = native.compact_rebuild(plain, count, keep, pip_429, _PLACEHOLDER_RECORD)
    if not keep:
        stats.keyless_dropped += dropped
        return None, deleted
    if whole and rebuilt is not None:
        stats.keyless_dropped += dropped
        return _finish_rebatch(entry, rebuilt, keep, options, stats), deleted
    # placeholders or indexes already there, or a kept record not in canonical form: the
    # Python path (it decides and counts again)
    records, split = _batch_view(entry)
    return _rebatch(entry, records, split, winners, options, stats), deleted


def _rebatch_native(
    entry: RawEntry,
    split: _Split,
    winners: WinnerView,
    options: CompactionOptions,
    stats: Stats,
) -> tuple[CompactedEntry | None, bool]:
    """Phase two of a natively split batch in publishing order: the compacted entry (or
    None) and whether phase one counted the batch as deleted. The same decisions as
    ``_rebatch`` and ``_deleted_in_phase_one``, without a Python object per record."""
    ledger_id, entry_id = entry.position
    prefix = _POS.pack(ledger_id % 2**64, entry_id % 2**64, 0)[:16]
    memory = getattr(winners, "memory_table", None)
    table = memory() if memory is not None else None
    keeps = winners.keeps
    # a spilled table answers a whole batch with one multi-get
    many = getattr(winners, "keeps_many", None) if table is None else None
    asked: list[int] = []
    asked_keys: list[bytes] = []
    asked_ranks: list[bytes] = []
    suffixes = _INDEX_SUFFIX
    retain = options.retain_null_key
    keep_set: set[int] = set()
    dropped = 0
    deleted = True
    for m in split.messages:
        key = m.key
        batch_index = m.batch_index
        if key is None:
            if retain:
                keep_set.add(batch_index)
                deleted = False
            else:
                dropped += 1
            continue
        if not m.value:
            continue  # a tombstone: never kept
        deleted = False
        i = batch_index + 1
        rank = prefix + (suffixes[i] if i < 1025 else _index_suffix(batch_index))
        k = message_key(key)
        if table is not None:
            found = table.get(k)
            if found is not None and found[0] == rank and not found[1]:
                keep_set.add(batch_index)
        elif many is not None:
            asked.append(batch_index)
            asked_keys.append(k)
            asked_ranks.append(rank)
        elif keeps(k, rank):
            keep_set.add(batch_index)
    if asked:
        for batch_index, kept in zip(asked, many(asked_keys, asked_ranks), strict=True):
            if kept:
                keep_set.add(batch_index)
    if keep_set and split.whole:
        plain = _rebuild_plain(split, keep_set, options.format == FORMAT_PIP_429)
        if plain is not None:
            stats.keyless_dropped += dropped
            return _finish_rebatch(entry, plain, sorted(keep_set), options, stats), deleted
    elif not keep_set:
        stats.keyless_dropped += dropped
        return None, deleted
    # holes, indexes or a record that does not parse: the general path (it counts again)
    return _rebatch(entry, _records_of(split), split, winners, options, stats), deleted


def _rebatch(
    entry: RawEntry,
    view: list[_Rec],
    split: _Split | None,
    winners: WinnerView,
    options: CompactionOptions,
    stats: Stats,
) -> CompactedEntry | None:
    md = entry.metadata
    ledger_id, entry_id = entry.position
    keep_set: set[int] = set()
    keeps = winners.keeps
    for batch_index, key, size, event_time in view:
        if key is None:
            if options.retain_null_key:
                keep_set.add(batch_index)
            else:
                stats.keyless_dropped += 1
            continue
        rank = rank_of(options, ledger_id, entry_id, batch_index, event_time, True)
        if size > 0 and keeps(message_key(key), rank):
            keep_set.add(batch_index)
    if not keep_set:
        return None
    plain = None
    if split is not None and split.whole:
        plain = _rebuild_plain(split, keep_set, options.format == FORMAT_PIP_429)
    if plain is not None:
        return _finish_rebatch(entry, plain, sorted(keep_set), options, stats)
    records, _holes = _batch_records(entry)  # the protobufs, only for batches that stay
    by_index = {rec.batch_index: rec for rec in records}
    kept_indexes = sorted(keep_set)
    stats.kept += len(kept_indexes)
    new_md = api.MessageMetadata()
    new_md.CopyFrom(md)
    del new_md.compacted_batch_indexes[:]
    if options.format == FORMAT_PIP_429:
        plain = build_batch(
            (_copy(by_index[i].smm), bytes(by_index[i].value)) for i in kept_indexes
        )
        new_md.compacted_batch_indexes.extend(kept_indexes)
    else:
        rows = []
        for i in range(md.num_messages_in_batch):
            rec = by_index.get(i)
            if rec is not None and i in keep_set:
                rows.append((_copy(rec.smm), bytes(rec.value)))
            else:
                rows.append((placeholder(), None))
        plain = build_batch(rows)
    return _finish_rebatch(entry, plain, kept_indexes, options, stats, new_md)


#: the record of a message removed from a batch (``placeholder()`` serialized, no value)
_PLACEHOLDER_BODY = placeholder().SerializeToString()
_PLACEHOLDER_RECORD = struct.pack(">I", len(_PLACEHOLDER_BODY)) + _PLACEHOLDER_BODY
_U32 = struct.Struct(">I")
_SMM_FROM = api.SingleMessageMetadata.FromString


def _rebuild_plain(split: _Split, keep: set[int], pip_429: bool) -> bytes | None:
    """The rebuilt batch from the original bytes, walking record boundaries.

    Each kept record's metadata is parsed from its own bytes and serialized again with
    ``payload_size`` set from its value, exactly as ``build_batch`` writes it (and as
    ``RawBatchConverter`` re-serializes), and its value is copied as is; removed records
    become the constant placeholder record. Returns None when a record's metadata does not
    parse (the caller takes the Python path, which reports it).
    """
    plain = split.plain
    unpack = _U32.unpack_from
    pos = 0
    parts: list[bytes] = []
    add = parts.append
    placeholder_record = _PLACEHOLDER_RECORD
    for m in split.messages:  # whole: one message per record, in order
        (size,) = unpack(plain, pos)
        start = pos + 4
        value = m.value
        pos = start + size + len(value)
        if m.batch_index in keep:
            try:
                smm = _SMM_FROM(plain[start : start + size])
            except DecodeError:  # the slow path reports it
                return None
            smm.payload_size = len(value)
            body = smm.SerializeToString()
            add(_U32.pack(len(body)))
            add(body)
            add(bytes(value))
        elif not pip_429:
            add(placeholder_record)
    return b"".join(parts)


def _finish_rebatch(
    entry: RawEntry,
    plain: bytes,
    kept_indexes: list[int],
    options: CompactionOptions,
    stats: Stats,
    new_md: Any = None,
) -> CompactedEntry:
    """Metadata, recompression, checksum and framing of a rebuilt batch."""
    md = entry.metadata
    if new_md is None:
        stats.kept += len(kept_indexes)
        new_md = api.MessageMetadata()
        new_md.CopyFrom(md)
        del new_md.compacted_batch_indexes[:]
        if options.format == FORMAT_PIP_429:
            new_md.compacted_batch_indexes.extend(kept_indexes)
    if options.format == FORMAT_CLASSIC and rebatch_failure(len(entry.data), plain) is not None:
        stats.broker_failures += 1
        if stats.broker_failure_at is None:
            stats.broker_failure_at = entry.position
    new_md.uncompressed_size = len(plain)
    payload = compress_as_broker(md.compression, plain) if md.compression != api.NONE else plain
    body = build_entry(new_md, payload, checksum=True)
    data = entry.bem + body
    return CompactedEntry(entry.position, _frame(entry, data), len(kept_indexes), kept_indexes[-1])


def _copy(smm: Any) -> Any:
    out = api.SingleMessageMetadata()
    out.CopyFrom(smm)
    return out
