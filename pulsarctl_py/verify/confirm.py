"""Findings that compare reads made at different times, judged again before they count.

On a running cluster the broker changes a topic while verify reads it, and verify reads the
topic's managed-ledger znode, its ledgers' metadata, its cursors' znodes and cursor ledgers
one after another. The broker orders its own writes so that each state it leaves is whole,
but two reads of ours can straddle one of its steps:

* a rollover lists the new ledger in the managed-ledger znode before any entry or cursor
  can be in it (``ManagedLedgerImpl.updateLedgersListAfterRollover``): a cursor read after
  the znode may already be in a ledger the znode we read does not list yet;
* trimming takes ledgers out of the znode, then deletes them from BookKeeper
  (``ManagedLedgerImpl.internalTrimLedgers``): a ledger listed in the znode we read may have
  no metadata by the time we look;
* a cursor that moves to a new cursor ledger writes its znode, then deletes the old ledger
  (``ManagedCursorImpl.createNewMetadataLedger`` / ``flushCursorsLedger``), and the compactor
  acks the new compacted ledger before deleting the old one (``CompactedTopicImpl
  .newCompactedLedger``);
* the topic's open ledger grows after we read its last entry, and a cursor read later may be
  past it.

So a finding of that kind is reported only if a second judgement on fresh reads finds it
too: a ledger finding only while the topic still lists the ledger (and, for missing
metadata, still has none), a cursor finding only if the same cursor judged again on a fresh
read of the topic, its ledgers and the cursor has it. What a change made in between hides is
counted (``VerifyStats.unconfirmed``); the next run sees the settled state. On a copy that
nothing writes, the second read finds the same and costs one more read per finding.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.verify.core import Finding, LedgerFacts, Run

if TYPE_CHECKING:
    from pulsarctl_py.stores.metadata import ManagedLedgerRecord

#: findings about a ledger the topic lists: they stand only while it is still listed
LISTED_LEDGER_CHECKS = frozenset(
    {"ledger-missing-metadata", "ledger-missing-storage", "entries-mismatch", "size-mismatch"}
)
#: findings about a cursor's state against the topic's: judged again on fresh reads
CURSOR_CHECKS = frozenset(
    {
        "cursor-unknown-ledger",
        "cursor-beyond-lac",
        "cursor-ledger-missing",
        "compacted-ledger-missing",
    }
)


def confirmed(run: Run, topic: mld.TopicName, findings: Iterable[Finding]) -> Iterator[Finding]:
    """The topic's findings, those that compare reads made at different times only if a
    second judgement on fresh reads finds them too."""
    fresh: list[ManagedLedgerRecord | None] = []
    rejudged: dict[str, set[tuple[str, int | None]]] = {}
    for finding in findings:
        if finding.check in LISTED_LEDGER_CHECKS and finding.ledger_id is not None:
            if not fresh:
                fresh.append(_read(run, topic))
            if _still_listed(run, fresh[0], finding):
                yield finding
            else:
                run.stats.unconfirmed += 1
        elif finding.check in CURSOR_CHECKS and _cursor_of(finding) is not None:
            name = _cursor_of(finding)
            assert name is not None
            if name not in rejudged:
                rejudged[name] = _rejudge_cursor(run, topic, name)
            if (finding.check, finding.ledger_id) in rejudged[name]:
                yield finding
            else:
                run.stats.unconfirmed += 1
        else:
            yield finding


def _read(run: Run, topic: mld.TopicName) -> ManagedLedgerRecord | None:
    from pulsarctl_py.stores.metadata import read_managed_ledger

    return read_managed_ledger(run.store, topic)


def _still_listed(run: Run, record: ManagedLedgerRecord | None, finding: Finding) -> bool:
    if record is None or record.info is None:
        return False  # the topic is gone: nothing it listed is missing from it
    lid = finding.ledger_id
    if lid not in record.ledger_ids:
        return False  # trimmed or deleted since the first read
    if finding.check == "ledger-missing-metadata":
        from pulsarctl_py.stores.metadata import read_ledger

        return read_ledger(run.store, lid) is None
    return True


def _cursor_of(finding: Finding) -> str | None:
    if finding.check == "compacted-ledger-missing":
        return mld.COMPACTION_CURSOR
    name = finding.details.get("cursor")
    return name if isinstance(name, str) else None


def _rejudge_cursor(run: Run, topic: mld.TopicName, name: str) -> set[tuple[str, int | None]]:
    """(check, ledger) of what judging the cursor again on fresh reads finds."""
    from pulsarctl_py.verify.cursors import cursor_findings

    record = _read(run, topic)
    if record is None or record.info is None:
        return set()
    cursor = next((c for c in record.cursors if c.name == name), None)
    if cursor is None:
        return set()  # the subscription was deleted meanwhile
    facts: dict[int, LedgerFacts] = {}
    return {
        (f.check, f.ledger_id) for f in cursor_findings(run, record, cursor, _ids(record), facts)
    }


def _ids(record: ManagedLedgerRecord) -> list[int]:
    return record.ledger_ids
