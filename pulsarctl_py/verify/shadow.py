"""The checks of a shadow topic (PIP-180): its source exists, and its ledger list is a
subset of the source's, recorded alike. Its ledgers are checked against BookKeeper
metadata, never scanned: the entries are the source's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.verify.core import ERROR, WARNING, Finding, LedgerFacts, Run
from pulsarctl_py.verify.ledgers import (
    metadata_findings,
    offloaded,
    owner_findings,
    recorded,
    storage_missing,
)

if TYPE_CHECKING:
    from pulsarctl_py.stores.metadata import ManagedLedgerRecord


def shadow_findings(
    run: Run, record: ManagedLedgerRecord, source_name: str, facts: dict[int, LedgerFacts]
) -> Iterator[Finding]:
    """A shadow topic's ledgers against its source's list and BookKeeper metadata."""
    from pulsarctl_py.stores.metadata import read_managed_ledger

    topic = record.ref.topic.full_name
    infos = list(record.info.message.ledgerInfo) if record.info is not None else []
    try:
        source = read_managed_ledger(run.store, source_name, with_cursors=False)
    except LedgerctlError:
        source = None
    if source is None or source.info is None:
        yield Finding(
            ERROR,
            "shadow-source-missing",
            topic,
            None,
            None,
            f"shadow topic of {source_name}, which has no managed ledger",
            {"source": source_name},
        )
    source_infos = (
        {li.ledgerId: li for li in source.info.message.ledgerInfo}
        if source is not None and source.info is not None
        else None
    )
    source_ids = list(source_infos or {})
    source_in_run = source is not None and source.ref.name in run.run_names
    for i, li in enumerate(infos):
        lid = li.ledgerId
        is_last = i == len(infos) - 1
        in_source = source_infos is not None and lid in source_infos
        if source_infos is not None and not in_source:
            yield Finding(
                ERROR,
                "shadow-ledger-not-in-source",
                topic,
                lid,
                None,
                f"ledger {lid} is in the shadow topic's list but not in its source {source_name}'s",
                {"source": source_name, "source_ledger_ids": source_ids[:1000]},
            )
        elif in_source and source_infos is not None:
            sli = source_infos[lid]
            src_last = source_ids[-1] == lid
            if (
                recorded(li, is_last)
                and recorded(sli, src_last)
                and (li.entries, li.size) != (sli.entries, sli.size)
            ):
                yield Finding(
                    WARNING,
                    "shadow-ledger-differs",
                    topic,
                    lid,
                    None,
                    f"ledger {lid}: the shadow records {li.entries} entries / {li.size} "
                    f"bytes, its source {sli.entries} / {sli.size}",
                    {
                        "shadow": {"entries": li.entries, "size": li.size},
                        "source": {"entries": sli.entries, "size": sli.size},
                    },
                )
        if offloaded(li) or (in_source and source_in_run):
            continue  # checked under the source
        run.stats.ledgers += 1
        is_recorded = recorded(li, is_last)
        led = run.ledger(lid, li.entries if is_recorded else None)
        facts[lid] = led
        yield from metadata_findings(topic, led, "ledger", run)
        if source is not None:
            yield from owner_findings(topic, led, source.ref.name)
        if (
            run.source.bookie is not None
            and led.view is not None
            and led.last is not None
            and led.last >= 0
            and not led.stored
        ):
            yield storage_missing(topic, led, "ledger")
