"""The compacted last message position (formats.md §7), as each broker generation computes it.

GetLastMessageId on a compacted topic answers, for a readCompacted reader whose horizon has
reached the topic's end, the position of the compacted ledger's last entry with a batch
index. Readers compare it with what they received in ``hasMessageAvailable``; a position
that no delivered message has (a compacted-out record or a tombstone) makes them wait
forever (apache/pulsar#13533, #18877, pulsar-client-python#221, PIP-429).

Generations:

* ``pip-429`` (newest): ``num_messages_in_batch <= 1`` => -1; ``compacted_batch_indexes``
  => its last element; encryption keys => ``n - 1``; otherwise decompress and take the last
  record that is not ``compacted_out``;
* ``pre-pip-429`` (#18877): the same without the field-31 and encryption branches: an
  encrypted batch fails ("Invalid unknown tag type"), a PIP-429 batch is misread;
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


def _records(parsed: _Parsed, count: int) -> tuple[list[int], list[int]]:
    """(live record indexes, compacted-out indexes) scanning ``count`` records."""
    md = parsed.metadata
    plain = decompress(md.compression, parsed.payload, md.uncompressed_size)
    _layer, records, holes = parse_batch(plain, count, None, [])
    return [r.batch_index for r in records], holes


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


def last_position(framed: bytes | None, generation: str = NEWEST) -> LastPosition:
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
    index: int | None
    if generation == "pre-18877":
        index = n - 1
    elif n <= 1:
        index = -1
    elif generation == NEWEST and md.compacted_batch_indexes:
        index = md.compacted_batch_indexes[-1]
    elif generation == NEWEST and encrypted:
        index = n - 1
    elif encrypted:
        out.error = (
            "the broker decompresses the encrypted batch and fails (Invalid unknown tag type)"
        )
        out.findings.append(_finding("error", "last-position-error", out.error, None))
        return out
    else:
        try:
            live, _holes = _records(parsed, n)
        except LedgerctlError as exc:
            out.error = f"the broker cannot scan the batch: {exc.one_line()}"
            out.findings.append(_finding("error", "last-position-error", out.error, None))
            return out
        if md.compacted_batch_indexes and generation != NEWEST:
            out.findings.append(
                _finding(
                    "error",
                    "last-position-misread",
                    "a PIP-429 batch read by a broker that does not know field 31",
                    None,
                )
            )
        if not live:
            out.error = "no record of the last compacted batch is retained"
            out.findings.append(_finding("error", "last-position-error", out.error, None))
            return out
        index = live[-1]
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
