"""The seeks that are no time rule of the broker's: the entry holding a continuous index
(KoP's ``FindEntryByOffset``, :func:`seek_index`), the compacted ledger's first entry at or
after a time (a lower bound, :func:`seek_compacted`), and one position
(:func:`seek_position`)."""

from __future__ import annotations

from pulsarctl_py.errors import LedgerctlError, NotFoundError
from pulsarctl_py.positions import format_position
from pulsarctl_py.timeparse import format_time_ms

from .heads import Head, HeadReader
from .probe import (
    FlatTopic,
    Prober,
    SeekLedger,
    SeekResult,
    answer_at,
    contradictions,
    finish,
    op_find_newest,
)


def seek_index(
    flat: FlatTopic, reader: HeadReader, target: int, *, skip_without_index: bool = False
) -> tuple[SeekResult, Prober]:
    """The entry holding continuous index ``target`` (KoP: ``entryIndex < offset``)."""
    result = SeekResult(None, "index", target, None, span=(0, flat.n - 1))
    prober = Prober(flat, reader)
    if flat.n == 0:
        result.findings.append("the topic has no entries")
        return result, prober
    if target < 0:
        raise LedgerctlError(f"index {target} is negative")
    no_index: list[Head] = []

    def pred(h: Head) -> tuple[bool, str]:
        if h.index is None:
            if skip_without_index and not h.has_bem:
                return True, "no index: skipped as older (skipMessagesWithoutIndex)"
            no_index.append(h)
            if h.has_bem:
                # KoP FindEntryByOffset: the index getter throws, a MetadataCorruptedException
                # the predicate answers false for, whatever skipMessagesWithoutIndex says
                return False, "broker entry metadata without an index (corrupt for KoP)"
            return False, "no index"
        ok = h.index < target
        return ok, f"index {h.index} {'<' if ok else '>='} {target}"

    found = op_find_newest(prober, 0, flat.n - 1, pred)
    if no_index and no_index[0].has_bem:
        result.findings.append(
            f"entry {no_index[0].position} has broker entry metadata without an index: KoP "
            "reads it as corrupt and the search stops there, whatever skipMessagesWithoutIndex "
            "says"
        )
    elif no_index:
        result.findings.append(
            f"entry {no_index[0].position} has no broker entry metadata index; pass "
            "--skip-without-index to treat such entries as older than every index"
        )
    answer = 0 if found is None else found + 1
    if not no_index:
        answer_at(result, prober, answer)
    head = result.head
    if no_index:
        pass  # the search stopped: no answer, the finding says where
    elif result.end:
        last = prober.head(flat.n - 1)
        result.findings.append(
            f"index {target} is past the end: the last entry {last.position} ends at index "
            f"{last.index}"
        )
    elif head is not None and head.index is not None:
        base = head.base_index
        if base is not None and base > target:
            result.findings.append(
                f"index {target} is not stored: the first entry holding an index "
                f"({head.position}) starts at {base}"
            )
        elif base is not None:
            result.batch_index = target - base if head.batched else None
    result.warnings.extend(contradictions(prober.probes, lambda h: h.index))
    finish(result, prober)
    return result, prober


def seek_compacted(
    ledger_id: int, entries: int, reader: HeadReader, target: int
) -> tuple[SeekResult, Prober]:
    """The compacted ledger's first entry with ``publish_time >= target`` (lower bound)."""
    flat = FlatTopic([SeekLedger(ledger_id, entries, None)])
    result = SeekResult(None, "time", target, "compacted")
    prober = Prober(flat, reader)
    lo, hi = 0, flat.n  # the answer is in [lo, hi]

    def pred(h: Head) -> tuple[bool, str]:
        ts = h.publish_time
        ok = ts is not None and ts >= target
        shown = f"{format_time_ms(ts)} {'>=' if ok else '<'} {format_time_ms(target)}"
        return ok, f"publish_time {shown}"

    while lo < hi:
        mid = (lo + hi) // 2
        _, ok = prober.test(mid, pred, "search")
        if ok:
            hi = mid
        else:
            lo = mid + 1
    answer_at(result, prober, lo)
    result.extra["compacted_ledger_id"] = ledger_id
    result.warnings.extend(contradictions(prober.probes, lambda h: h.publish_time))
    finish(result, prober)
    return result, prober


def seek_position(
    flat: FlatTopic, reader: HeadReader, ledger_id: int, entry_id: int, batch: int | None
) -> tuple[SeekResult, Prober]:
    value = format_position(ledger_id, entry_id, batch)
    result = SeekResult(None, "position", value, None)
    prober = Prober(flat, reader)
    i = flat.index_of(ledger_id, entry_id)
    if i is None:
        raise NotFoundError(f"position {value} does not exist in this topic")
    result.head = prober.head(i)
    result.batch_index = batch
    if result.head.error is not None:
        result.findings.append(f"entry {value} could not be read: {result.head.error}")
        result.head = result.batch_index = None  # never a position that was not read
    elif batch is not None and batch >= result.head.num_messages:
        raise NotFoundError(
            f"position {value}: the entry holds {result.head.num_messages} message(s)"
        )
    result.entries_read = reader.reads
    return result, prober
