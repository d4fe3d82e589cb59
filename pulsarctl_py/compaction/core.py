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
original broker entry metadata prefix kept) when at least one record is kept. A batch that
cannot be decoded is copied whole, as Pulsar does.

One deliberate difference, reported as ``chunks_kept``: Pulsar's compactor treats every chunk
of a chunked message as its own keyed message, so only the last chunk of the latest
chunked message survives and the message cannot be reassembled. Here every chunk of that
message is kept (each chunk is also recorded under a group key, producer + uuid, whose
latest position is the message's last chunk).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pulsarctl_py.decoders import compacted as compacted_layer
from pulsarctl_py.decoders.codecs import compress, decompress
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.payload import build_batch, parse_batch, placeholder
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.engines.base import KeyRecord, KeyState, WinnerView
from pulsarctl_py.proto import pulsar_api_pb2 as api

ORDER_PUBLISHING = "publishing"
ORDER_EVENT_TIME = "event-time"
ORDERS = (ORDER_PUBLISHING, ORDER_EVENT_TIME)
FORMAT_CLASSIC = "classic"
FORMAT_PIP_429 = "pip-429"
FORMATS = (FORMAT_CLASSIC, FORMAT_PIP_429)

_POS = struct.Struct(">QQI")
_EVENT = struct.Struct(">Q")
#: prefixes of key-table keys: message keys, and chunk groups (producer + uuid)
KEY_PREFIX = b"k"
CHUNK_PREFIX = b"c"


@dataclass(frozen=True, slots=True)
class CompactionOptions:
    retain_null_key: bool = False
    order: str = ORDER_PUBLISHING
    format: str = FORMAT_CLASSIC
    #: keep every chunk of the latest chunked message (Pulsar keeps only its last chunk)
    keep_chunks: bool = True


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
    undecodable: int = 0  # batches copied whole because they could not be decoded
    #: phase one's "to": the last entry that was not entirely deleted
    to: tuple[int, int] | None = None
    problems: list[str] = field(default_factory=list)

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
            "undecodable",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if other.to is not None and (self.to is None or other.to > self.to):
            self.to = other.to
        self.problems.extend(other.problems)


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
    """
    if state is None or state[1]:
        return (rank, tombstone)
    new_time = _EVENT.unpack_from(rank)[0]
    old_time = _EVENT.unpack_from(state[0])[0]
    batched = rank[-1:] == b"\x01"
    newer = new_time > old_time if batched else new_time >= old_time
    return (rank, tombstone) if newer else state


def fold_for(options: CompactionOptions) -> Any:
    return event_time_fold if options.order == ORDER_EVENT_TIME else None


def message_key(key: str) -> bytes:
    return KEY_PREFIX + key.encode("utf-8")


def chunk_group(md: Any) -> bytes:
    return CHUNK_PREFIX + md.producer_name.encode("utf-8") + b"\x00" + md.uuid.encode("utf-8")


# -- entry kinds ------------------------------------------------------------------------------


def is_readable_batch(md: Any) -> bool:
    return md.HasField("num_messages_in_batch") and len(md.encryption_keys) == 0


def is_chunk(md: Any) -> bool:
    return md.num_chunks_from_msg > 1 and md.HasField("uuid")


def _single_size(entry: RawEntry) -> int:
    md = entry.metadata
    if md.HasField("uncompressed_size"):
        return md.uncompressed_size
    return len(entry.data) - len(entry.bem)


def _batch_records(entry: RawEntry) -> tuple[list[Any], list[int]]:
    """The batch's live records and its compacted-out indexes (raises on damage)."""
    md = entry.metadata
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


@dataclass(slots=True)
class _Rec:
    """What phase one and two need of a batch record: index, key, size, event time."""

    batch_index: int
    key: str | None
    size: int
    event_time: int


def _batch_view(entry: RawEntry) -> list[_Rec]:
    """The batch's live records, through the native splitter when it can (raises on damage).

    ``payload_size`` is the length of the record's value in a regular batch, so the native
    split's values give the sizes; a batch with a null-value record (whose value the split
    does not return) takes the Python parser, which reads ``payload_size`` itself.
    """
    from pulsarctl_py.decoders.speedups import native

    md = entry.metadata
    if native is not None:
        payload = memoryview(entry.data)[entry.payload_at :]
        plain = decompress(md.compression, payload, md.uncompressed_size)
        indexes = list(md.compacted_batch_indexes) or None
        count = len(indexes) if indexes is not None else md.num_messages_in_batch
        split = native.split_batch(plain, count, indexes, 0, 0, None, 0, 0)
        if split is not None and not any(m.null_value for m in split[0]):
            return [_Rec(m.batch_index, m.key, len(m.value), m.event_time or 0) for m in split[0]]
    records, _holes = _batch_records(entry)
    return [
        _Rec(
            r.batch_index,
            r.smm.partition_key if r.smm.HasField("partition_key") else None,
            r.smm.payload_size if r.smm.HasField("payload_size") else 0,
            r.smm.event_time,
        )
        for r in records
    ]


# -- phase one --------------------------------------------------------------------------------


def phase_one(entries: Iterable[RawEntry], options: CompactionOptions) -> Iterator[KeyRecord]:
    """The ``(key, rank, tombstone)`` records of phase one, in topic order."""
    for entry in entries:
        md = entry.metadata
        if md is None or md.HasField("marker_type"):
            continue
        ledger_id, entry_id = entry.position
        if is_readable_batch(md):
            try:
                records = _batch_view(entry)
            except LedgerctlError:
                continue  # Pulsar logs it and keeps the whole batch in phase two
            for rec in records:
                if rec.key is None:
                    continue
                rank = rank_of(options, ledger_id, entry_id, rec.batch_index, rec.event_time, True)
                yield message_key(rec.key), rank, rec.size <= 0
            continue
        if not md.HasField("partition_key"):
            continue
        rank = rank_of(options, ledger_id, entry_id, -1, md.event_time, False)
        yield message_key(md.partition_key), rank, _single_size(entry) <= 0
        if options.keep_chunks and is_chunk(md):
            yield chunk_group(md), rank, False


# -- phase two --------------------------------------------------------------------------------


def _frame(entry: RawEntry, data: bytes) -> bytes:
    if entry.message_id is not None:
        body = entry.message_id
    else:
        msg_id = api.MessageIdData(
            ledgerId=entry.position[0] % 2**64, entryId=entry.position[1] % 2**64
        )
        if entry.partition >= 0:
            msg_id.partition = entry.partition
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
            for rec in records:
                if rec.key is None:
                    deleted += not options.retain_null_key
                elif rec.size <= 0:
                    deleted += 1
            return deleted == md.num_messages_in_batch
        for rec in records:
            if rec.key is None:
                if options.retain_null_key:
                    return False
            elif rec.size > 0:
                return False
        return True
    if not md.HasField("partition_key"):
        return not options.retain_null_key
    return _single_size(entry) <= 0


def phase_two(
    entries: Iterable[RawEntry],
    winners: WinnerView,
    options: CompactionOptions,
    stats: Stats,
) -> Iterator[CompactedEntry]:
    """The compacted entries, in topic order; ``stats`` is filled on the way."""
    for entry in entries:
        stats.entries_in += 1
        stats.bytes_in += len(entry.data)
        md = entry.metadata
        if md is None:
            stats.problems.append(
                f"{entry.position[0]}:{entry.position[1]}: no readable MessageMetadata; skipped"
            )
            continue
        if md.HasField("marker_type"):
            stats.markers += 1
            continue
        ledger_id, entry_id = entry.position
        out: CompactedEntry | None
        if is_readable_batch(md):
            try:
                records = _batch_view(entry)
            except LedgerctlError as exc:
                stats.undecodable += 1
                stats.problems.append(
                    f"{ledger_id}:{entry_id}: batch not decodable ({exc.one_line()}); copied whole"
                )
                records = None
            if not _deleted_in_phase_one(entry, options, records):
                stats.to = entry.position
            if records is None:
                count = md.num_messages_in_batch
                out = CompactedEntry(entry.position, _frame(entry, entry.data), count, count - 1)
            else:
                out = _rebatch(entry, records, winners, options, stats)
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
    if not leading:
        stats.kept += count  # a leading chunk is part of one message, counted at its last
    batch_index = count - 1 if md.HasField("num_messages_in_batch") else -1
    return CompactedEntry(entry.position, _frame(entry, entry.data), count, batch_index)


def _rebatch(
    entry: RawEntry,
    view: list[_Rec],
    winners: WinnerView,
    options: CompactionOptions,
    stats: Stats,
) -> CompactedEntry | None:
    md = entry.metadata
    ledger_id, entry_id = entry.position
    keep_set: set[int] = set()
    for rec in view:
        if rec.key is None:
            if options.retain_null_key:
                keep_set.add(rec.batch_index)
            else:
                stats.keyless_dropped += 1
            continue
        rank = rank_of(options, ledger_id, entry_id, rec.batch_index, rec.event_time, True)
        if rec.size > 0 and winners.keeps(message_key(rec.key), rank):
            keep_set.add(rec.batch_index)
    if not keep_set:
        return None
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
    new_md.uncompressed_size = len(plain)
    payload = compress(md.compression, plain) if md.compression != api.NONE else plain
    body = build_entry(new_md, payload, checksum=True)
    data = entry.bem + body
    return CompactedEntry(entry.position, _frame(entry, data), len(kept_indexes), kept_indexes[-1])


def _copy(smm: Any) -> Any:
    out = api.SingleMessageMetadata()
    out.CopyFrom(smm)
    return out
