"""The head of a stored entry: where it is, whether its digest holds, its broker metadata.

An :class:`EntryHead` is what a scan needs to place an entry in time and in the
continuous index without decoding the Pulsar entry: the bookie header (ids, LAC,
length), the digest check, and the 0x0e02 broker entry metadata (``broker_timestamp``,
``index``). :func:`head_of` takes it from an :class:`~.entry.Entry` decoded at
``Depth.ENTRY``; that is the reference. Bookie stores produce the same heads faster
(``BookieStore.read_heads``, with the native scanner of ``_speedups.c`` for clean
entries), and tests/stores/bookie/test_heads.py checks the two agree entry by entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .entry import DecodeOptions, Depth, Entry, Outer, decode_entry
from .nodes import Problem
from .speedups import bind, native


@dataclass(slots=True)
class EntryHead:
    """One entry located and checked, decoded to its broker entry metadata only."""

    ledger_id: int
    entry_id: int
    size: int  # bytes of the stored entry: header, digest and payload
    lac: int | None  # last add confirmed, from the bookie header
    length: int | None  # ledger length up to this entry, from the bookie header
    digest_ok: bool | None  # None: not verified (a MAC without password, no bookie layer)
    broker_timestamp: int | None
    index: int | None  # continuous index of the entry's last message
    broker_metadata: bool  # whether the entry carries 0x0e02 broker entry metadata
    problems: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger_id": self.ledger_id,
            "entry_id": self.entry_id,
            "size": self.size,
            "lac": self.lac,
            "length": self.length,
            "digest_ok": self.digest_ok,
            "broker_timestamp": self.broker_timestamp,
            "index": self.index,
            "broker_metadata": self.broker_metadata,
            "problems": [p.to_json() for p in self.problems],
        }


if native is not None:
    bind(native.HEAD, EntryHead)


def head_of(entry: Entry) -> EntryHead:
    """The head of an entry decoded at ``Depth.ENTRY`` (or deeper)."""
    header = entry.header
    bk = entry.layers[0] if entry.layers and entry.layers[0].name == "bookie-entry" else None
    check = bk.check if bk is not None else None
    bem = entry.broker_entry_metadata
    pos = entry.position or (None, None)
    return EntryHead(
        pos[0] if pos[0] is not None else -1,
        pos[1] if pos[1] is not None else -1,
        len(entry.data),
        header.lac if header is not None else None,
        header.length if header is not None else None,
        check.ok if check is not None else None,
        bem.broker_timestamp if bem is not None and bem.HasField("broker_timestamp") else None,
        bem.index if bem is not None and bem.HasField("index") else None,
        bem is not None,
        tuple(entry.problems),
    )


def head_options(options: DecodeOptions) -> DecodeOptions:
    """``options`` as a head needs them: a bookie entry, decoded to ``Depth.ENTRY``."""
    return DecodeOptions(
        outer=Outer.BOOKIE_ENTRY,
        digest_type=options.digest_type,
        password=options.password,
        depth=Depth.ENTRY,
        verify=options.verify,
        max_uncompressed=options.max_uncompressed,
    )


def decode_head(
    data: bytes | memoryview, options: DecodeOptions, position: tuple[int, int]
) -> EntryHead:
    """The head of one stored bookie entry, by the Python decoder."""
    if options.depth is not Depth.ENTRY or options.outer is not Outer.BOOKIE_ENTRY:
        options = head_options(options)
    return head_of(decode_entry(data, options, position))
