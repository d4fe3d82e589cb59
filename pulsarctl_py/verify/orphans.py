"""Orphan ledgers: Pulsar ledgers that nothing references.

:func:`unreferenced_ledgers` is the one rule of what an orphan is, shared by
``verify --all`` (``orphan-ledger`` findings) and ``ledgerctl orphans``
(:func:`pulsarctl_py.repair.repairs.find_orphans`): a BookKeeper ledger whose metadata
decodes, whose custom metadata says ``application=pulsar`` and is no schema ledger
(schema references live under /schemas, not read here), that no reference holds, and
whose owner topic's references are all known. Each caller collects the references its
own way (verify while it walks the topics; ``orphans`` by loading every topic).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.verify.core import WARNING, Finding, Run

if TYPE_CHECKING:
    from pulsarctl_py.decoders.ledger_metadata import LedgerMetadata, PulsarLedgerTags
    from pulsarctl_py.stores.metadata import MetadataStore


@dataclass(frozen=True, slots=True)
class Unreferenced:
    """A ledger the orphan rule holds for."""

    ledger_id: int
    path: str
    metadata: LedgerMetadata
    tags: PulsarLedgerTags
    owner: str | None  # the managed ledger or compacted topic its tags name
    owner_exists: bool | None  # whether that topic has a managed ledger (None: no owner)


def unreferenced_ledgers(
    store: MetadataStore,
    referenced: set[int],
    uncertain: set[str],
    *,
    read: Callable[[str], bytes | None] | None = None,
    min_age_ms: int = 0,
    now_ms: int | None = None,
) -> Iterator[Unreferenced]:
    """Every orphan ledger, in ledger id order.

    ``referenced``: the ledger ids some managed ledger, cursor or compacted-ledger
    reference holds. ``uncertain``: persistence names of topics whose references are not
    all known; their ledgers are not judged. ``read`` reads a key (default: the store);
    ledgers younger than ``min_age_ms`` are not judged.
    """
    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.stores.metadata import iter_ledger_paths, resolve_topic

    if read is None:

        def read(path: str) -> bytes | None:
            node = store.get(path)
            return None if node is None else node.data

    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    for ledger_id, path in iter_ledger_paths(store):
        if ledger_id in referenced:
            continue
        data = read(path)
        if data is None:
            continue
        try:
            md = lm.parse(data, ledger_id)
        except LedgerctlError:
            continue
        tags = md.pulsar()
        if tags.application != "pulsar" or tags.kind == "schema":
            continue
        if min_age_ms and md.ctime and now - md.ctime < min_age_ms:
            continue
        owner = tags.managed_ledger or tags.compacted_topic
        exists = None
        if owner is not None:
            try:
                owner_topic = resolve_topic(owner)
            except LedgerctlError:
                owner_topic = None
            if owner_topic is not None:
                if owner_topic.persistence_name in uncertain:
                    continue  # its topic's references are not all known: no judgement
                exists = read(owner_topic.ml_path) is not None
        yield Unreferenced(ledger_id, path, md, tags, owner, exists)


def orphan_findings(run: Run) -> Iterator[Finding]:
    """``orphan-ledger`` for every orphan, after every topic of the run was walked."""
    for o in unreferenced_ledgers(run.store, run.referenced, run.unreadable):
        md, tags, owner = o.metadata, o.tags, o.owner
        whose = (
            ""
            if owner is None
            else f" of {owner}"
            + (" (a topic that no longer exists)" if o.owner_exists is False else "")
        )
        yield Finding(
            WARNING,
            "orphan-ledger",
            None,
            o.ledger_id,
            None,
            f"{tags.kind} ledger {o.ledger_id}{whose} is referenced by no topic, cursor or "
            f"compaction ({md.state.name}, {md.length} bytes)",
            {
                "kind": tags.kind,
                "state": md.state.name,
                "length": md.length,
                "ctime": md.ctime,
                "owner": owner,
                "owner_exists": o.owner_exists,
                "tags": tags.to_json(),
            },
        )
