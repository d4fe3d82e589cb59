"""`ledgerctl inspect`: stream a ledger's (or a topic's) entries, decoded, with a summary.

Entries are read in order with bounded memory; filters apply per entry (position,
time, broker entry metadata) and per message (key). The summary counts what was seen.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pulsarctl_py.decoders import Depth, Entry
from pulsarctl_py.decoders.codecs import CODECS
from pulsarctl_py.errors import LedgerctlError, NotFoundError
from pulsarctl_py.ledgers import LedgerSource, LedgerView


@dataclass(slots=True)
class InspectRequest:
    """What to read and how deep; None means no limit."""

    ledger_id: int | None = None
    topic: str | None = None
    first: int | None = None
    last: int | None = None
    last_n: int | None = None
    depth: Depth = Depth.MESSAGES
    verify: bool = True
    key: str | None = None
    since: int | None = None  # entry timestamp, ms, inclusive
    until: int | None = None  # entry timestamp, ms, exclusive
    broker_metadata: bool | None = None  # True: only with, False: only without
    private_key: Any = None


@dataclass(slots=True)
class Summary:
    """What a scan saw."""

    ledgers: list[int] = field(default_factory=list)
    entries: int = 0
    messages: int = 0
    bytes: int = 0
    codecs: Counter[str] = field(default_factory=Counter)
    first_time: int | None = None
    last_time: int | None = None
    first_index: int | None = None
    last_index: int | None = None
    with_broker_metadata: int = 0
    errors: int = 0
    warnings: int = 0
    #: entries with a digest or checksum that could not be verified (MAC without password)
    unverified: int = 0

    def add(self, entry: Entry) -> None:
        self.entries += 1
        self.messages += len(entry.messages)
        self.bytes += len(entry.data)
        md = entry.metadata
        if md is not None:
            codec = CODECS.get(md.compression)
            self.codecs[codec.name if codec else str(md.compression)] += 1
        ts = entry.entry_timestamp
        if ts:
            self.first_time = ts if self.first_time is None else min(self.first_time, ts)
            self.last_time = ts if self.last_time is None else max(self.last_time, ts)
        if entry.broker_entry_metadata is not None:
            self.with_broker_metadata += 1
        index = entry.index
        if index is not None:
            first = index - entry.num_messages + 1 if md is not None else index
            self.first_index = first if self.first_index is None else min(self.first_index, first)
            self.last_index = index if self.last_index is None else max(self.last_index, index)
        if entry.unverified:
            self.unverified += 1
        for p in entry.problems:
            if p.severity == "error":
                self.errors += 1
            else:
                self.warnings += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "ledgers": self.ledgers,
            "entries": self.entries,
            "messages": self.messages,
            "bytes": self.bytes,
            "codecs": dict(self.codecs),
            "first_time": self.first_time,
            "last_time": self.last_time,
            "first_index": self.first_index,
            "last_index": self.last_index,
            "with_broker_entry_metadata": self.with_broker_metadata,
            "errors": self.errors,
            "warnings": self.warnings,
            "unverified": self.unverified,
        }


def topic_ledgers(source: LedgerSource, topic: str) -> list[int]:
    """The ledger ids of a topic's managed ledger, in order."""
    if source.metadata is None:
        raise LedgerctlError(f"topic {topic}: a metadata store is needed to find its ledgers")
    from pulsarctl_py.stores.metadata import read_managed_ledger

    record = read_managed_ledger(source.metadata, topic, with_cursors=False)
    if record is None:
        raise NotFoundError(f"topic {topic} not found in the metadata store")
    return record.ledger_ids


def inspect(
    source: LedgerSource,
    request: InspectRequest,
    summary: Summary,
    on_ledger: Callable[[LedgerView], None] | None = None,
) -> Iterator[tuple[LedgerView, Entry]]:
    """Decoded entries of the ledger or topic, in order, filtered; fills ``summary``."""
    if (request.ledger_id is None) == (request.topic is None):
        raise LedgerctlError("give a ledger id or --topic, not both")
    ids = [request.ledger_id] if request.ledger_id is not None else topic_ledgers(
        source, request.topic or ""
    )
    for ledger_id in ids:
        view = source.ledger(ledger_id)
        summary.ledgers.append(ledger_id)
        if on_ledger is not None:
            on_ledger(view)
        if view.last_stored is None:
            continue
        first, last = _range(view, request)
        if first > last:
            continue
        for entry in source.entries(
            view,
            first,
            last,
            depth=request.depth,
            verify=request.verify,
            private_key=request.private_key,
            keep_going=True,
        ):
            if entry.unreadable is not None:  # no time, no messages: always reported
                summary.add(entry)
                yield view, entry
                continue
            if not _keep(entry, request):
                continue
            if request.key is not None:
                entry.messages = [m for m in entry.messages if m.key == request.key]
                if not entry.messages:
                    continue
            summary.add(entry)
            yield view, entry


def _range(view: LedgerView, request: InspectRequest) -> tuple[int, int]:
    end = view.last_stored if view.last_stored is not None else -1
    first = 0 if request.first is None else request.first
    last = end if request.last is None else min(request.last, end)
    if request.last_n is not None:
        first = max(first, last - request.last_n + 1)
    return first, last


def _keep(entry: Entry, request: InspectRequest) -> bool:
    if request.broker_metadata is not None:
        if (entry.broker_entry_metadata is not None) != request.broker_metadata:
            return False
    if request.since is not None or request.until is not None:
        ts = entry.entry_timestamp
        if ts is None:
            return False
        if request.since is not None and ts < request.since:
            return False
        if request.until is not None and ts >= request.until:
            return False
    return True


def entry_json(view: LedgerView, entry: Entry, with_hex: bool = False) -> dict[str, Any]:
    """The per-entry JSON of inspect: decode's shape plus digest, LAC and kind."""
    doc = entry.to_json(with_hex)
    bk = entry.layers[0] if entry.layers and entry.layers[0].name == "bookie-entry" else None
    doc["digest"] = bk.check.to_json() if bk is not None and bk.check is not None else None
    if bk is not None:
        # lets two copies of an entry (bookies, backups) be compared without the bytes
        doc["payload_sha256"] = hashlib.sha256(entry.data[bk.offset + bk.length :]).hexdigest()
    lac = view.lac
    doc["confirmed"] = None if lac is None or doc["entry_id"] is None else doc["entry_id"] <= lac
    doc["ledger_kind"] = view.kind
    return doc
