"""Migrations that write new ledgers, then swap them in through a plan.

``migrate compacted``: the topic's compacted ledger rewritten in the other batch format
(PIP-429 ``compacted_batch_indexes``, field 31, or the classic ``compacted_out``
placeholders) by the compaction package's phase two and writer; the ``__compaction``
cursor is re-pointed to it by a plan (:func:`pulsarctl_py.repair.repairs.point_compaction`,
the horizon kept).

The new ledger is written (bookie side, refused while the bookie holds its lock, and its
BookKeeper metadata) only when a plan file is asked for: until the plan is applied nothing
references it, and ``ledgerctl orphans`` lists it if the plan is dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import DataError, NotFoundError

from .plan import Draft
from .repairs import COMPACTED_TOPIC_LEDGER, _ledger_metadata, load_cursors, load_topic

if TYPE_CHECKING:
    from pulsarctl_py.compaction.core import CompactedEntry
    from pulsarctl_py.ledgers import LedgerSource


class _KeepAll:
    """Phase two's winners over a compacted ledger: every record in it is its key's latest."""

    def keeps(self, key: bytes, rank: bytes) -> bool:
        return True

    def get(self, key: bytes) -> tuple[bytes, bool] | None:
        return None


@dataclass(slots=True)
class CompactedState:
    topic: str
    ledger_id: int
    horizon: tuple[int, int]
    compacted_to: tuple[int, int]
    cursor_version: int | None
    partition: int
    data_ledgers: list[int]
    last_entry: int
    formats: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "compacted_ledger": self.ledger_id,
            "horizon": "{}:{}".format(*self.horizon),
            "compacted_to": "{}:{}".format(*self.compacted_to),
            "entries": self.last_entry + 1,
            "batches": dict(self.formats),
        }


def compacted_state(source: LedgerSource, topic_name: str) -> CompactedState:
    """The topic's compacted ledger, horizon and the ``__compaction`` cursor's version."""
    assert source.metadata is not None
    draft = Draft(source.metadata)
    topic = load_topic(draft, topic_name, changes=False)
    cursors = load_cursors(draft, topic, source, only=mld.COMPACTION_CURSOR)
    ledger = dict(cursors[0].properties).get(COMPACTED_TOPIC_LEDGER) if cursors else None
    if ledger is None or cursors[0].position is None:
        raise NotFoundError(
            f"{topic.name.full_name} has no compacted ledger (CompactedTopicLedger)"
        )
    md = _ledger_metadata(draft, ledger)
    if md is None:
        raise DataError(
            f"compacted ledger {ledger} has no BookKeeper metadata: "
            "`ledgerctl repair compaction --clear` first"
        )
    if not md.is_closed or md.last_entry_id < 0:
        raise DataError(f"compacted ledger {ledger} is not closed or holds no entry")
    tags = md.pulsar()
    to = tags.compacted_to
    node = source.metadata.get(cursors[0].path)
    return CompactedState(
        topic=topic.name.full_name,
        ledger_id=ledger,
        horizon=cursors[0].position,
        compacted_to=cursors[0].position if to is None else (to["ledger_id"], to["entry_id"]),
        cursor_version=None if node is None else node.stat.version,
        partition=topic.name.partition_index,
        data_ledgers=topic.ids,
        last_entry=md.last_entry_id,
    )


def converted_entries(
    state: CompactedState, fmt: str, metadata_url: str, bookie_dirs: list[str]
) -> Iterator[CompactedEntry]:
    """The compacted ledger's entries with every readable batch rebatched in ``fmt``
    (single messages and undecodable batches copied byte for byte); counts the input's
    batch formats into ``state.formats``."""
    from pulsarctl_py.compaction.core import CompactionOptions, Stats, is_readable_batch, phase_two
    from pulsarctl_py.compaction.reader import close_sources, read_split
    from pulsarctl_py.engines.base import KIND_COMPACTED, Split

    split = Split(
        state.topic,
        state.ledger_id,
        0,
        state.last_entry,
        tuple(bookie_dirs),
        metadata_url,
        0,
        KIND_COMPACTED,
    )

    def counted() -> Iterator[Any]:
        for raw in read_split(split):
            md = raw.metadata
            if md is not None and is_readable_batch(md):
                kind = "pip-429" if md.compacted_batch_indexes else "classic"
                state.formats[kind] = state.formats.get(kind, 0) + 1
            else:
                state.formats["single"] = state.formats.get("single", 0) + 1
            yield raw

    options = CompactionOptions(retain_null_key=True, format=fmt)
    stats = Stats()
    try:
        yield from phase_two(counted(), _KeepAll(), options, stats)
    finally:
        close_sources()
    if stats.problems:
        raise DataError(f"compacted ledger {state.ledger_id}: {stats.problems[0]}")
