"""Checks of a topic's ledgers: BookKeeper metadata, owner tags, storage, the entry scan
(missing and corrupt entries, unverified digests: :mod:`.entries`, by the fast path of
:mod:`.fastscan` where the storage can serve it), entry counts and sizes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.verify.core import (
    ERROR,
    WARNING,
    Finding,
    LedgerFacts,
    Run,
)
from pulsarctl_py.verify.entries import LedgerScan, ScanResult, not_covered
from pulsarctl_py.verify.order import TopicOrder, index_property

if TYPE_CHECKING:
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
    from pulsarctl_py.stores.metadata import ManagedLedgerRecord


def recorded(li: mlpb.ManagedLedgerInfo.LedgerInfo, is_last: bool) -> bool:
    """Whether the ML has recorded the ledger's entries and size (it does when closed)."""
    return not (is_last and li.entries == 0 and li.size == 0)


def offloaded(li: mlpb.ManagedLedgerInfo.LedgerInfo) -> bool:
    if not li.HasField("offloadContext"):
        return False
    ctx = li.offloadContext
    return ctx.complete and ctx.bookkeeperDeleted


def metadata_findings(topic: str, led: LedgerFacts, what: str, run: Run) -> Iterator[Finding]:
    """ledger-missing-metadata / ledger-metadata-unreadable for one ledger.

    A ledger without metadata is looked for on every bookie the run can read (its ensemble
    is unknown): the finding says whether its entries are still there (``repair
    missing-ledgers --recreate`` restores it), on no bookie at all, or on none of those
    read while others were not."""
    view = led.view
    lid = led.ledger_id
    if view is None or (view.metadata is None and view.metadata_error is None):
        details: dict[str, Any] = {"problem": led.problem} if led.problem else {}
        where = ""
        found = run.copies_of(lid)
        if found is not None:
            details["data"] = found.to_json()
            if found.copies:
                where = (
                    f"; its entries are still on the bookies ({found.describe()}): "
                    "`repair missing-ledgers --recreate` restores its metadata from them"
                )
            elif found.unreachable:
                where = (
                    "; none of the bookies read holds any of its entries, but not every "
                    f"bookie could be read ({found.unreachable_text()}): whether its data "
                    "is gone is not known"
                )
            else:
                where = "; no bookie holds any of its entries: its data is gone"
        yield Finding(
            ERROR,
            "ledger-missing-metadata",
            topic,
            lid,
            None,
            f"{what} {lid} has no BookKeeper metadata: reads of it fail with "
            f"'No such ledger exists'{where}",
            details,
        )
    elif view.metadata_error is not None:
        yield Finding(
            ERROR,
            "ledger-metadata-unreadable",
            topic,
            lid,
            None,
            f"{what} {lid}: BookKeeper metadata does not decode: {view.metadata_error}",
            {"error": view.metadata_error},
        )


def owner_findings(topic: str, led: LedgerFacts, owner_ml: str) -> Iterator[Finding]:
    """ledger-wrong-owner: the ledger's tags name another managed ledger or kind."""
    view = led.view
    if view is None or view.metadata is None:
        return
    tags = view.metadata.pulsar()
    lid = led.ledger_id
    wrong = None
    if tags.application is not None and tags.application != "pulsar":
        wrong = f"application={tags.application}"
    elif tags.kind in ("cursor", "compacted", "schema"):
        wrong = f"a {tags.kind} ledger"
    elif tags.managed_ledger is not None and not mld.names_managed_ledger(
        tags.managed_ledger, owner_ml
    ):
        wrong = f"managed ledger {tags.managed_ledger}"
    if wrong is not None:
        yield Finding(
            ERROR,
            "ledger-wrong-owner",
            topic,
            lid,
            None,
            f"ledger {lid} is in the list of {owner_ml} but its custom metadata says {wrong}",
            {"expected_managed_ledger": owner_ml, "tags": tags.to_json()},
        )


def storage_missing(topic: str, led: LedgerFacts, what: str, where: str) -> Finding:
    return Finding(
        ERROR,
        "ledger-missing-storage",
        topic,
        led.ledger_id,
        None,
        f"{what} {led.ledger_id} should hold entries 0..{led.last} but {where} holds none of them",
        {"last_entry_id": led.last},
    )


def scan(
    run: Run,
    topic: str,
    led: LedgerFacts,
    order: TopicOrder | None,
    what: str,
    result: ScanResult | None = None,
) -> Iterator[Finding]:
    """Read entries 0..last: missing and corrupt entries, sizes, and the ordered checks.

    A topic's data ledgers go through the fast path (:mod:`.fastscan`) where the storage
    can serve it; everything else through the general decode path. Both find the same.
    """
    from pulsarctl_py.verify.fastscan import fast_scan

    view = led.view
    last = led.last
    if run.source.bookie is None or (last is not None and last < 0):
        return  # nothing to read, or nothing stored to read it from
    if view is None or last is None:
        if order is not None:
            order.break_index()  # its entries are unknown: no continuity across it
        return
    if view.metadata is None and run.source.live_options is not None:
        if order is not None:
            order.break_index()
        return  # running bookies are found through metadata: metadata_findings looked
    if not led.stored:
        if order is not None:
            order.break_index()
        absence = run.source.absence_judge(view)(0, last)
        if absence.missing_count == last + 1 and run.source.live_options is not None:
            # the READ_LAC that found nothing asked the last ensemble only: every replica
            # of every entry is asked before the ledger is called missing (a bookie that
            # cannot answer stops the read: exit 3, never "missing")
            held = _first_held(run, view, last)
            if held is not None:
                scanned = LedgerScan(run, topic, led, None, what)
                yield from scanned.general(held, last)
                yield from scanned.finish(None)
                return
        if absence.missing_count == last + 1:
            where = (
                "no bookie of its ensembles"
                if run.source.live_options
                else ("the bookie storage (every bookie of its ensembles read)")
            )
            yield storage_missing(topic, led, what, where)
        elif absence.uncovered_count == last + 1:
            yield not_covered(topic, led, what, absence, holds_none=True)
        else:  # some entries proven missing, the others not covered
            scanned = LedgerScan(run, topic, led, None, what)
            scanned.skip_to(last + 1)
            yield from scanned.finish(None)
        return
    scanned = LedgerScan(run, topic, led, order, what)
    fast = fast_scan(run, scanned, view, last) if order is not None and run.fast else None
    yield from scanned.general(0, last) if fast is None else fast
    yield from scanned.finish(result)


def _first_held(run: Run, view: Any, last: int) -> int | None:
    """The first entry of ``0..last`` any replica holds (running bookies), or None when
    every replica of every entry answered that it holds none."""
    for stored in run.source.raw_entries(view, 0, last):
        return int(stored.entry_id)
    return None


def data_ledgers(
    run: Run,
    record: ManagedLedgerRecord,
    infos: list[mlpb.ManagedLedgerInfo.LedgerInfo],
    facts: dict[int, LedgerFacts],
) -> Iterator[Finding]:
    """Every ledger of a (non-shadow) topic, in order, then the topic's ordered checks."""
    topic = record.ref.topic.full_name
    order = TopicOrder(topic)
    for i, li in enumerate(infos):
        is_last = i == len(infos) - 1
        lid = li.ledgerId
        run.stats.ledgers += 1
        run.report("ledger", topic, lid)
        order.start_ledger(is_last)
        if offloaded(li):
            order.break_index()
            continue
        is_recorded = recorded(li, is_last)
        led = run.ledger(lid, li.entries if is_recorded else None)
        facts[lid] = led
        yield from metadata_findings(topic, led, "ledger", run)
        yield from owner_findings(topic, led, record.ref.name)
        md = led.view.metadata if led.view is not None else None
        if md is not None and not md.is_closed and not is_last:
            yield Finding(
                WARNING,
                "ledger-not-closed",
                topic,
                lid,
                None,
                f"ledger {lid} is {md.state.name} in BookKeeper but is not the topic's last "
                "ledger (Pulsar closes a ledger before rolling to the next)",
                {"state": md.state.name},
            )
        if is_recorded and md is not None and led.closed:
            if li.entries != md.last_entry_id + 1:
                yield Finding(
                    ERROR,
                    "entries-mismatch",
                    topic,
                    lid,
                    None,
                    f"ledger {lid}: the managed ledger records {li.entries} entries, "
                    f"BookKeeper closed it at entry {md.last_entry_id} "
                    f"({md.last_entry_id + 1} entries)",
                    {"ml_entries": li.entries, "bk_last_entry_id": md.last_entry_id},
                )
            if li.size != md.length:
                yield Finding(
                    WARNING,
                    "size-mismatch",
                    topic,
                    lid,
                    None,
                    f"ledger {lid}: the managed ledger records size {li.size}, "
                    f"BookKeeper metadata says length {md.length}",
                    {"ml_size": li.size, "bk_length": md.length},
                )
        if led.last_entry_error is not None:
            order.break_index()
        scanned = ScanResult()
        yield from scan(run, topic, led, order, "ledger", scanned)
        if is_recorded and md is None and scanned.stored_bytes is not None:
            if li.size != scanned.stored_bytes:
                yield Finding(
                    WARNING,
                    "size-mismatch",
                    topic,
                    lid,
                    None,
                    f"ledger {lid}: the managed ledger records size {li.size}, its stored "
                    f"entries hold {scanned.stored_bytes} payload bytes",
                    {"ml_size": li.size, "stored_bytes": scanned.stored_bytes},
                )
    yield from order.finish()
    if record.properties.get(mld.PROPERTY_SHADOW_SOURCE) is None:
        yield from index_property(record, order)
