"""What the metadata says about a topic's data and its existing compaction
(:func:`topic_state`): its ledgers with their entries, its last entry, the ``__compaction``
cursor's horizon and compacted ledger, and why that ledger cannot be read whole, if it
cannot. Compaction plans from it, ``compact --status`` shows it, and the topic policies are
read through it (:mod:`pulsarctl_py.topicpolicies`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.errors import DataError


@dataclass(slots=True)
class TopicState:
    """What the metadata says about a topic's data and its existing compaction."""

    topic: str
    ledgers: list[tuple[int, int | None, int | None]]
    last: tuple[int, int] | None  # the topic's last entry, taken once
    horizon: tuple[int, int] | None  # the __compaction mark-delete position
    compacted_ledger: int | None
    compacted_entries: int | None = None
    compacted_bytes: int | None = None
    compacted_problem: str | None = None
    cursor_ledger: int | None = None
    partition: int = -1


def topic_state(source: Any, topic: str) -> TopicState:
    """Ledgers, last entry, and existing compaction of ``topic`` from its metadata."""
    from pulsarctl_py.stores.metadata import resolve_topic
    from pulsarctl_py.topics import topic_info

    info = topic_info(source, topic)
    if info.problems:
        raise DataError(f"{info.topic}: {info.problems[0]}")
    ledgers = [(li.ledger_id, li.entries, li.size) for li in info.ledgers]
    last = None
    for ledger_id, entries, _size in ledgers:
        if entries:
            last = (ledger_id, entries - 1)
    cursor = info.compaction_cursor
    state = TopicState(
        info.topic,
        ledgers,
        last,
        info.compaction_horizon,
        info.compacted_ledger,
        cursor_ledger=cursor.cursors_ledger_id if cursor is not None else None,
        partition=resolve_topic(info.topic).partition_index,
    )
    if state.compacted_ledger is not None:
        try:
            view = source.ledger(state.compacted_ledger)
        except LedgerctlError as exc:
            state.compacted_problem = exc.one_line()
        else:
            md = view.metadata
            if md is None:
                # the broker could not open it either (LedgerOpenOp reads the metadata)
                state.compacted_problem = (
                    f"compacted ledger {state.compacted_ledger} has no BookKeeper metadata"
                )
            elif not md.is_closed:
                state.compacted_problem = (
                    f"compacted ledger {state.compacted_ledger} is not closed "
                    f"({md.state.name}): its writer never finished it"
                )
            elif md.last_entry_id >= 0 and (
                view.last_stored is None or view.last_stored < md.last_entry_id
            ):
                held = "none" if view.last_stored is None else f"up to {view.last_stored}"
                state.compacted_problem = (
                    f"compacted ledger {state.compacted_ledger} is short: its metadata "
                    f"says entries 0..{md.last_entry_id}, the storage holds {held}"
                    + (f" ({view.storage_error})" if view.storage_error else "")
                )
            else:
                state.compacted_entries = md.last_entry_id + 1
                state.compacted_bytes = md.length
    return state
