"""The compacted last message position (formats.md §7), as each broker generation computes it.

GetLastMessageId on a compacted topic answers, for a readCompacted reader whose horizon has
reached the topic's end, the position of the compacted ledger's last entry with a batch
index. Readers compare it with what they received in ``hasMessageAvailable``; a position
that no delivered message has (a compacted-out record or a tombstone) makes them wait
forever (apache/pulsar#13533, #18877, pulsar-client-python#221, PIP-429).

Generations (settled against the released jars, and for ``pre-pip-429`` against a running
Pulsar 4.0.7 broker, ``tests/cluster/sandbox/test_lastpos.py``):

* ``pre-pip-429`` (#18877; Pulsar 2.11 to 4.0.x, the default: Pulsar 4.0.7's
  ``ServerCnx.calculateTheLastBatchIndexInBatch``): ``num_messages_in_batch <= 1`` => -1;
  otherwise the batch is decompressed (when ``compression`` is set) and its
  ``num_messages_in_batch`` records scanned; the last one not ``compacted_out`` wins, and
  **-1 when none is** (not an error). An encrypted batch is decompressed and scanned as if
  it were plain and fails; a PIP-429 batch (fewer records than its count) fails too;
* ``pip-429`` (the PIP-429 copy of ``PulsarTopicCompactionService.getLastMessagePosition``
  in apache/pulsar master, not in a release up to 4.0.7): ``num_messages_in_batch <= 1`` =>
  -1; ``compacted_batch_indexes`` => its last element; encryption keys => ``n - 1``;
  otherwise it decompresses the batch but scans the **still-compressed** payload (it
  passes ``payload``, not the decompressed buffer, to ``deSerializeSingleMessageInBatch``):
  right for uncompressed batches, an error or a garbage index for LZ4/ZLIB/ZSTD/SNAPPY
  ones; no live record => an error ("No valid message in entry");
* ``pre-18877``: ``num_messages_in_batch - 1`` with the getter's default of 1, so 0 for a
  message that is not batched, and possibly a compacted-out record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pulsarctl_py.decoders import compacted as compacted_layer
from pulsarctl_py.decoders.codecs import decompress
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.payload import parse_batch
from pulsarctl_py.decoders.protos import signed64
from pulsarctl_py.decoders.pulsar import MetadataLayer, parse_prefixes
from pulsarctl_py.positions import format_position

GENERATIONS = ("pip-429", "pre-pip-429", "pre-18877")
NEWEST = "pip-429"
#: the released brokers' generation (Pulsar 2.11 to 4.0.x; checked on 4.0.7)
DEFAULT = "pre-pip-429"


@dataclass(slots=True)
class LastPosition:
    """What one broker generation answers, and whether a reader can reach it."""

    generation: str
    position: str | None  # "L:E" or "L:E:B"; None: EARLIEST (nothing compacted)
    error: str | None = None  # the broker fails to answer
    #: the retained message a reader receives last ("L:E[:B]"), for comparison
    delivered_last: str | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def hangs(self) -> bool:
        return any(f["code"] == "last-position-unreachable" for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "position": self.position,
            "error": self.error,
            "delivered_last": self.delivered_last,
            "reader_hangs": self.hangs,
            "findings": list(self.findings),
        }


def _finding(severity: str, code: str, message: str, position: str | None) -> dict[str, Any]:
    return {"severity": severity, "code": code, "message": message, "position": position}


@dataclass(slots=True)
class _Parsed:
    ledger_id: int
    entry_id: int
    metadata: Any
    payload: memoryview


def _parse(framed: bytes) -> _Parsed:
    problems: list[Any] = []
    mv = memoryview(framed)
    _layer, msg_id, pos, end = compacted_layer.parse(mv, 0, len(mv), problems)
    _layers, _prefix, pos = parse_prefixes(mv, pos, end, problems, False)
    _layer, md, pos = MetadataLayer.parse(mv, pos, end, problems)
    return _Parsed(signed64(msg_id.ledgerId), signed64(msg_id.entryId), md, mv[pos:end])


def _scan(buf: bytes | memoryview, count: int) -> tuple[list[int], list[int]]:
    """(live record indexes, compacted-out indexes): ``count`` records of ``buf`` read one
    after the other as ``Commands.deSerializeSingleMessageInBatch`` does (raises when they
    do not parse)."""
    _layer, records, holes = parse_batch(buf, count, None, [])
    return [r.batch_index for r in records], holes


def _records(parsed: _Parsed, count: int) -> tuple[list[int], list[int]]:
    """(live record indexes, compacted-out indexes) scanning ``count`` decompressed records."""
    md = parsed.metadata
    plain = decompress(md.compression, parsed.payload, md.uncompressed_size)
    return _scan(plain, count)


def retained_indexes(framed: bytes) -> list[int] | None:
    """Batch indexes a reader receives from this compacted entry; None: not a readable batch."""
    parsed = _parse(framed)
    md = parsed.metadata
    if not md.HasField("num_messages_in_batch") or md.encryption_keys:
        return None
    if md.compacted_batch_indexes:
        return list(md.compacted_batch_indexes)
    live, _holes = _records(parsed, md.num_messages_in_batch)
    return live


def last_position(framed: bytes | None, generation: str = DEFAULT) -> LastPosition:
    """The answer of ``generation`` for a compacted ledger whose LAC entry is ``framed``."""
    if generation not in GENERATIONS:
        raise LedgerctlError(f"unknown broker generation {generation!r}: {', '.join(GENERATIONS)}")
    if framed is None:
        return LastPosition(generation, None)
    parsed = _parse(framed)
    md = parsed.metadata
    lid, eid = parsed.ledger_id, parsed.entry_id
    batched = md.HasField("num_messages_in_batch")
    n = md.num_messages_in_batch if batched else 1
    encrypted = len(md.encryption_keys) > 0
    # what a reader receives last from this entry
    delivered: int | None
    if not batched or encrypted:
        delivered = n - 1 if batched else -1
    else:
        try:
            delivered = (retained_indexes(framed) or [None])[-1]  # type: ignore[list-item]
        except LedgerctlError:
            delivered = None
    out = LastPosition(generation, None)
    out.delivered_last = (
        None
        if delivered is None
        else format_position(lid, eid, None if delivered < 0 else delivered)
    )

    def fail(message: str) -> LastPosition:
        out.error = message
        out.findings.append(_finding("error", "last-position-error", message, None))
        return out

    index: int
    if generation == "pre-18877":
        index = n - 1
    elif n <= 1:
        index = -1
    elif generation == NEWEST and md.compacted_batch_indexes:
        index = md.compacted_batch_indexes[-1]
    elif generation == NEWEST and encrypted:
        index = n - 1
    elif generation == NEWEST:
        # PulsarTopicCompactionService.getLastMessagePosition: decompresses, then scans the
        # payload it was given, still compressed
        try:
            if md.compression:
                decompress(md.compression, parsed.payload, md.uncompressed_size)
            live, _holes = _scan(parsed.payload, n)
        except LedgerctlError as exc:
            how = "the still-compressed" if md.compression else "the"
            return fail(f"the broker scans {how} batch and fails: {exc.one_line()}")
        if not live:
            return fail("no record of the last compacted batch is retained: the broker fails")
        index = live[-1]
        if md.compression:
            out.findings.append(
                _finding(
                    "error",
                    "last-position-misread",
                    "the broker scans the still-compressed batch (PIP-429's "
                    "getLastMessagePosition): its answer is not a position of the batch",
                    None,
                )
            )
    else:
        # Pulsar 4.0.7 ServerCnx.calculateTheLastBatchIndexInBatch: decompress when
        # compression is set, scan every record, -1 when none is live
        try:
            if encrypted:
                _scan_encrypted(parsed, n)
            live, _holes = _records(parsed, n)
        except LedgerctlError as exc:
            what = "encrypted batch" if encrypted else "batch"
            return fail(f"the broker cannot scan the {what}: {exc.one_line()}")
        if md.compacted_batch_indexes:
            out.findings.append(
                _finding(
                    "error",
                    "last-position-misread",
                    "a PIP-429 batch read by a broker that does not know field 31",
                    None,
                )
            )
        index = live[-1] if live else -1
    out.position = format_position(lid, eid, None if index < 0 else index)
    if out.position != out.delivered_last and index == 0 and not batched:
        out.findings.append(
            _finding(
                "warning",
                "last-position-nonbatched-index",
                f"GetLastMessageId answers {out.position}, batch index 0 for a message that "
                f"is not batched (delivered as {out.delivered_last})",
                out.position,
            )
        )
    elif index < 0 and out.delivered_last is not None:
        pass  # an entry-level position: reached once the entry (a batch of one) is delivered
    elif out.position != out.delivered_last:
        if index < 0:
            why = "no record of the batch is delivered"
        else:
            why = f"batch index {index} was compacted out (a placeholder or a tombstone)"
        out.findings.append(
            _finding(
                "error",
                "last-position-unreachable",
                f"GetLastMessageId answers {out.position} but the last message a reader "
                f"receives is {out.delivered_last}: {why}; readers wait in hasMessageAvailable",
                out.position,
            )
        )
    return out


def _scan_encrypted(parsed: _Parsed, count: int) -> None:
    """An encrypted batch as a broker before PIP-429 reads it: its ciphertext decompressed
    (when compressed) and scanned as records; raises where that fails (it nearly always
    does, "Invalid unknown tag type")."""
    md = parsed.metadata
    buf: bytes | memoryview = parsed.payload
    if md.compression:
        buf = decompress(md.compression, buf, md.uncompressed_size)
    try:
        _scan(buf, count)
    except LedgerctlError as exc:
        raise LedgerctlError(
            f"Invalid unknown tag type: ciphertext read as records ({exc.one_line()})"
        ) from None
