"""The entry scan of one ledger (:class:`LedgerScan`): its entries 0..last read one by one
on the general decode path, or in runs of clean ones by the fast path (:mod:`.fastscan`),
and the findings about the whole ledger once every entry was read: missing, unreadable
and unverified entries, entries not covered by the storage read, the stored payload bytes
against the ledger's length."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pulsarctl_py.decoders import Entry
from pulsarctl_py.decoders.bookkeeper import HEADER as BK_HEADER
from pulsarctl_py.decoders.checksums import DIGESTS
from pulsarctl_py.decoders.entry import PAYLOAD_LAYERS
from pulsarctl_py.stores.absence import Absence
from pulsarctl_py.verify.core import (
    ERROR,
    INFO,
    PROGRESS_EVERY,
    WARNING,
    Finding,
    LedgerFacts,
    Run,
)
from pulsarctl_py.verify.order import TopicOrder

#: the entries a digest-unverified finding lists
_SHOWN = 100


@dataclass(slots=True)
class ScanResult:
    #: the payload bytes of entries 0..last, when every one of them was read
    stored_bytes: int | None = None


def not_covered(
    topic: str, led: LedgerFacts, what: str, absence: Absence, holds_none: bool
) -> Finding:
    """storage-not-covered: entries absent from what was read, which proves nothing."""
    count, last = absence.uncovered_count, led.last
    shown = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in absence.uncovered[:10])
    more = " and more ranges" if len(absence.uncovered) > 10 else ""
    head = (
        f"{what} {led.ledger_id}: the storage read holds none of its entries 0..{last}"
        if holds_none
        else f"{what} {led.ledger_id}: {count} of its entries 0..{last} "
        f"({shown}{more}) are not in the storage read"
    )
    return Finding(
        INFO,
        "storage-not-covered",
        topic,
        led.ledger_id,
        None,
        f"{head}, and that proves nothing: {absence.unread_text()} (not judged missing)",
        {
            "not_covered": absence.uncovered[:100],
            "count": count,
            "unread": dict(absence.unread),
            "last_entry_id": last,
        },
    )


def payload_size(entry: Entry, digest_size: int | None) -> int:
    """The entry's payload bytes: its length less the BookKeeper header and digest."""
    bk = entry.layers[0] if entry.layers else None
    if bk is not None and bk.name == "bookie-entry" and "payload_size" in bk.fields:
        return int(bk.fields["payload_size"])
    if digest_size is None and entry.digest_type is not None:
        digest_size = DIGESTS[entry.digest_type].size
    return max(len(entry.data) - BK_HEADER.size - (digest_size or 0), 0)


class LedgerScan:
    """The scan of one ledger's entries 0..last, entry by entry or in runs of clean ones
    (:mod:`.fastscan`), and what it found: missing, unreadable and unverified entries, the
    stored payload bytes; the ordered checks of ``order`` on the way."""

    def __init__(
        self, run: Run, topic: str, led: LedgerFacts, order: TopicOrder | None, what: str
    ) -> None:
        self.run = run
        self.topic = topic
        self.led = led
        self.lid = led.ledger_id
        self.order = order
        self.what = what
        kind = led.view.digest_type if led.view is not None else None
        self.digest_size = DIGESTS[kind].size if kind is not None else None
        self.expected = 0  # the next entry id
        #: the entries not read: missing (proven), or not covered (:mod:`..stores.absence`)
        self.judge = run.source.absence_judge(led.view)
        self.absence = Absence()
        self.unreadable = 0
        self.stored_bytes = 0
        # entries whose digest could not be verified: how many, the first ones (the
        # finding shows 100), the digest types
        self.unverified = 0
        self.unverified_ids: list[int] = []
        self.unverified_kinds: set[str] = set()

    def skip_to(self, entry_id: int) -> None:
        """The next entry read is ``entry_id``: the ones before it are missing."""
        if entry_id > self.expected:
            self.absence.merge(self.judge(self.expected, entry_id - 1))
            if self.order is not None:
                self.order.break_index()
        self.expected = entry_id

    def counted(self, entries: int, payload_bytes: int) -> None:
        """``entries`` more entries read, holding ``payload_bytes``."""
        stats = self.run.stats
        before = stats.entries
        stats.entries += entries
        if before // PROGRESS_EVERY != stats.entries // PROGRESS_EVERY:
            self.run.report("entries", self.topic, self.lid)
        self.stored_bytes += payload_bytes
        stats.payload_bytes += payload_bytes

    def entry(self, entry_id: int, entry: Entry | None, error: str | None) -> Iterator[Finding]:
        """One entry of the general path (``Run.entries``)."""
        self.skip_to(entry_id)
        self.expected = entry_id + 1
        order, lid = self.order, self.lid
        if entry is None:
            self.unreadable += 1
            if order is not None:
                order.break_index()
            yield self._corrupt(entry_id, f" cannot be read from storage: {error}", [error])
            return
        self.counted(1, payload_size(entry, self.digest_size))
        errors = [p for p in entry.problems if p.severity == ERROR]
        if errors and all(p.layer in PAYLOAD_LAYERS for p in errors):
            # read and verified, the payload does not decode: its metadata still counts
            yield from self.undecodable(entry_id, entry)
        elif errors:
            if order is not None:
                order.break_index()
            text = ": " + "; ".join(str(p) for p in errors)
            yield self._corrupt(entry_id, text, [p.to_json() for p in errors])
            return
        kinds = entry.unverified
        if kinds:
            self.unverified_run(entry_id, entry_id, kinds)
        if order is not None:
            yield from order.add(entry, (lid, entry_id))

    def unverified_run(self, first: int, last: int, kinds: list[str]) -> None:
        """Entries ``first..last`` read, their digests (of ``kinds``) not verified."""
        self.unverified += last - first + 1
        ids = self.unverified_ids
        if len(ids) < _SHOWN:
            ids.extend(range(first, min(last + 1, first + _SHOWN - len(ids))))
        self.unverified_kinds.update(kinds)

    def undecodable(self, entry_id: int, entry: Entry) -> Iterator[Finding]:
        """entry-undecodable: what :func:`~pulsarctl_py.decoders.entry.decode_payload`
        rejected in an entry that was read and verified."""
        errors = [p for p in entry.problems if p.severity == ERROR]
        yield Finding(
            ERROR,
            "entry-undecodable",
            self.topic,
            self.lid,
            entry_id,
            f"entry {self.lid}:{entry_id}: its payload does not decode: "
            + "; ".join(str(p) for p in errors),
            {"problems": [p.to_json() for p in errors]},
        )

    def _corrupt(self, entry_id: int, text: str, problems: list[Any]) -> Finding:
        lid = self.lid
        return Finding(
            ERROR,
            "entry-corrupt",
            self.topic,
            lid,
            entry_id,
            f"entry {lid}:{entry_id}{text}",
            {"problems": problems},
        )

    def values(
        self,
        entry_id: int,
        size: int,
        index: int | None,
        count: int,
        timestamp: int,
        broker_timestamp: bool,
    ) -> Iterator[Finding]:
        """One clean entry of the fast path, for the ordered checks."""
        self.skip_to(entry_id)
        self.expected = entry_id + 1
        self.counted(1, size)
        if self.order is not None:
            yield from self.order.add_values(
                (self.lid, entry_id), index, count, timestamp, broker_timestamp
            )

    def general(self, first: int, last: int) -> Iterator[Finding]:
        """Entries ``first..last`` by the general path."""
        assert self.led.view is not None
        for entry_id, entry, error in self.run.entries(self.led.view, first, last):
            yield from self.entry(entry_id, entry, error)

    def finish(self, result: ScanResult | None) -> Iterator[Finding]:
        """The findings about the whole ledger, once every entry was read."""
        lid, what, last = self.lid, self.what, self.led.last
        assert last is not None and self.led.view is not None
        if self.unverified:
            self.run.stats.unverified += self.unverified
            yield Finding(
                WARNING,
                "digest-unverified",
                self.topic,
                lid,
                self.unverified_ids[0],
                f"{what} {lid}: the digests of {self.unverified} entries could not be "
                f"verified ({', '.join(sorted(self.unverified_kinds))}: no password?); "
                "--strict fails",
                {"count": self.unverified, "entries": self.unverified_ids},
            )
        past = self.led.view.past_last
        if past is not None:
            # LedgerHandle.asyncClose sets lastEntryId to the LAC and fails the adds still
            # pending; those already sent land on the bookies all the same
            first, stored = past
            yield Finding(
                INFO,
                "entry-past-last",
                self.topic,
                lid,
                first,
                f"{what} {lid} is closed at entry {first - 1} but the storage holds entries "
                f"up to {stored}: {stored - first + 1} stored past its last entry, adds in "
                "flight when it was closed, which no reader gets (every scan skips them)",
                {"last_entry_id": first - 1, "last_stored": stored, "count": stored - first + 1},
            )
        if self.expected <= last:
            self.skip_to(last + 1)
        absence = self.absence
        missing, missing_count = absence.missing, absence.missing_count
        if missing_count:
            shown = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in missing[:10])
            more = f" and {len(missing) - 10} more ranges" if len(missing) > 10 else ""
            yield Finding(
                ERROR,
                "entry-missing",
                self.topic,
                lid,
                missing[0][0],
                f"{what} {lid}: {missing_count} of its entries 0..{last} "
                f"{'is' if missing_count == 1 else 'are'} on none of their bookies: "
                f"{shown}{more}",
                {"missing": missing[:100], "count": missing_count, "last_entry_id": last},
            )
        if absence.uncovered_count:
            yield not_covered(self.topic, self.led, what, absence, holds_none=False)
        md = self.led.view.metadata
        complete = not missing_count and not absence.uncovered_count and not self.unreadable
        stored_bytes = self.stored_bytes
        if complete and md is not None and self.led.closed and stored_bytes != md.length:
            yield Finding(
                ERROR,
                "size-mismatch",
                self.topic,
                lid,
                None,
                f"{what} {lid}: its stored entries hold {stored_bytes} payload bytes, "
                f"its BookKeeper metadata says length {md.length}",
                {"stored_bytes": stored_bytes, "bk_length": md.length},
            )
        if result is not None and complete:
            result.stored_bytes = stored_bytes
