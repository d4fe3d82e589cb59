"""Every replica of every entry of a ledger, read from the bookies and compared.

For each entry in the range, each bookie of its write set is asked for it (pipelined, a
chunk of entries per bookie at a time). A copy is compared by its bytes (a BLAKE2b hash
of the whole stored entry, header and digest included) and its digest is verified. The
report lists:

* divergent entries: replicas holding different bytes, with the bookies that disagree
  with the majority (all groups when there is none);
* replicas whose digest does not verify;
* missing replicas (the bookie answers ENOENTRY / ENOLEDGER);
* replicas that could not be asked (the bookie is down or too slow);
* entries with fewer good copies than the write quorum;
* the last entry of the unbroken run from the first one in which every replica is present,
  verifies and agrees: the place where a close could be planned.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from .client import BookieUnavailable
from .store import LiveBookieStore, digest_ok, write_set

CHUNK = 512


@dataclass(slots=True)
class Copy:
    bookie: str
    state: str  # ok, bad-digest, missing, unreachable
    digest: str | None = None  # hash of the stored bytes
    size: int | None = None
    detail: str | None = None


@dataclass(slots=True)
class EntryReplicas:
    entry_id: int
    write_set: list[str]
    copies: list[Copy]

    def present(self) -> list[Copy]:
        return [c for c in self.copies if c.digest is not None]

    def groups(self) -> list[list[Copy]]:
        by: dict[str, list[Copy]] = {}
        for c in self.present():
            by.setdefault(c.digest or "", []).append(c)
        return sorted(by.values(), key=len, reverse=True)

    @property
    def divergent(self) -> bool:
        return len(self.groups()) > 1

    @property
    def good(self) -> int:
        return sum(1 for c in self.copies if c.state == "ok")

    @property
    def clean(self) -> bool:
        return all(c.state == "ok" for c in self.copies) and not self.divergent

    def disagreeing(self) -> list[str]:
        groups = self.groups()
        if len(groups) < 2:
            return []
        if len(groups[0]) > len(groups[1]):
            return sorted(c.bookie for g in groups[1:] for c in g)
        return sorted(c.bookie for g in groups for c in g)  # no majority: all of them

    def to_json(self) -> dict[str, Any]:
        return {
            "entry_id": self.entry_id,
            "write_set": self.write_set,
            "copies": [
                {
                    "bookie": c.bookie,
                    "state": c.state,
                    "digest": c.digest,
                    "size": c.size,
                    "detail": c.detail,
                }
                for c in self.copies
            ],
            "disagreeing": self.disagreeing(),
        }


@dataclass(slots=True)
class ReplicaReport:
    ledger_id: int
    state: str
    write_quorum: int
    ack_quorum: int
    first: int
    last: int | None
    checked: int = 0
    divergent: list[EntryReplicas] = field(default_factory=list)
    bad_digest: list[EntryReplicas] = field(default_factory=list)
    missing: list[EntryReplicas] = field(default_factory=list)
    unreachable: list[EntryReplicas] = field(default_factory=list)
    below_write_quorum: list[EntryReplicas] = field(default_factory=list)
    last_agreed_entry: int | None = None
    bookies: dict[str, str | None] = field(default_factory=dict)  # id -> error or None

    @property
    def ok(self) -> bool:
        return not (
            self.divergent
            or self.bad_digest
            or self.missing
            or self.unreachable
            or self.below_write_quorum
        )

    def to_json(self) -> dict[str, Any]:
        def ids(rows: list[EntryReplicas]) -> list[dict[str, Any]]:
            return [r.to_json() for r in rows]

        return {
            "ledger_id": self.ledger_id,
            "state": self.state,
            "write_quorum": self.write_quorum,
            "ack_quorum": self.ack_quorum,
            "first": self.first,
            "last": self.last,
            "entries_checked": self.checked,
            "last_agreed_entry": self.last_agreed_entry,
            "bookies": [
                {"bookie": b, "reachable": err is None, "error": err}
                for b, err in sorted(self.bookies.items())
            ],
            "divergent": ids(self.divergent),
            "bad_digest": ids(self.bad_digest),
            "missing": ids(self.missing),
            "unreachable": ids(self.unreachable),
            "below_write_quorum": ids(self.below_write_quorum),
            "ok": self.ok,
        }


def compare_replicas(
    store: LiveBookieStore, ledger_id: int, first: int = 0, last: int | None = None
) -> ReplicaReport:
    """Read and compare every replica of the entries in ``[first, last]``.

    ``last`` defaults to the lastEntryId of a closed ledger, else to the last entry any
    bookie of the last ensemble holds.
    """
    md = store.metadata_of(ledger_id)
    if last is None:
        last = md.last_entry_id if md.is_closed else store.last_entry_id(ledger_id)
    report = ReplicaReport(
        ledger_id, md.state.name, md.write_quorum_size, md.ack_quorum_size, first, last
    )
    for bookies in md.ensembles.values():
        for b in bookies:
            report.bookies.setdefault(b, None)
    if last is None or last < first:
        report.last_agreed_entry = None
        return report
    kind, password = md.digest_type, store.password if store.password is not None else md.password
    prefix_clean = True
    start = first
    while start <= last:
        end = min(last, start + CHUNK - 1)
        rows = {e: EntryReplicas(e, write_set(md, e), []) for e in range(start, end + 1)}
        by_bookie: dict[str, list[int]] = {}
        for e, row in rows.items():
            for b in row.write_set:
                by_bookie.setdefault(b, []).append(e)
        for bookie, ids in by_bookie.items():
            copies = _read_copies(store, report, bookie, ledger_id, ids, kind, password)
            for e in ids:
                rows[e].copies.append(copies[e])
        for e in range(start, end + 1):
            row = rows[e]
            row.copies.sort(key=lambda c: row.write_set.index(c.bookie))
            _classify(report, row)
            if prefix_clean and row.clean:
                report.last_agreed_entry = e
            else:
                prefix_clean = False
        report.checked += end - start + 1
        start = end + 1
    return report


def _read_copies(
    store: LiveBookieStore,
    report: ReplicaReport,
    bookie: str,
    ledger_id: int,
    ids: list[int],
    kind: Any,
    password: bytes | None,
) -> dict[int, Copy]:
    out: dict[int, Copy] = {}
    if report.bookies.get(bookie) is not None:  # failed earlier in this run
        return {e: Copy(bookie, "unreachable", detail=report.bookies[bookie]) for e in ids}
    try:
        for reply in store.pool.get(bookie).read_entries(ledger_id, ids):
            e = reply.entry_id
            if reply.status != "EOK" or reply.body is None:
                out[e] = Copy(bookie, "missing", detail=reply.status)
                continue
            body = reply.body
            h = hashlib.blake2b(body, digest_size=16).hexdigest()
            ok = digest_ok(body, ledger_id, e, kind, password)
            state = "bad-digest" if ok is False else "ok"
            out[e] = Copy(bookie, state, h, len(body), None if ok is not None else "unchecked")
    except BookieUnavailable as exc:
        report.bookies[bookie] = exc.one_line()
        store._mark_down(bookie, exc)
    for e in ids:
        if e not in out:
            out[e] = Copy(bookie, "unreachable", detail=report.bookies.get(bookie))
    return out


def _classify(report: ReplicaReport, row: EntryReplicas) -> None:
    states = {c.state for c in row.copies}
    if row.divergent:
        report.divergent.append(row)
    if "bad-digest" in states:
        report.bad_digest.append(row)
    if "missing" in states:
        report.missing.append(row)
    if "unreachable" in states:
        report.unreachable.append(row)
    if row.good < report.write_quorum and "unreachable" not in states:
        report.below_write_quorum.append(row)


def check_replicas(
    metadata_url: str | None,
    ledger_id: int,
    first: int = 0,
    last: int | None = None,
    *,
    options: Any = None,
    password: bytes | None = None,
) -> ReplicaReport:
    """Open the metadata store, read every replica of the ledger's entries, compare."""
    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.stores.metadata import open_metadata_store

    if first < 0 or (last is not None and last < first):
        raise LedgerctlError(f"bad entry range: --from {first} --to {last}")
    with (
        open_metadata_store(metadata_url) as metadata,
        LiveBookieStore(metadata, options, password) as store,
    ):
        return compare_replicas(store, ledger_id, first, last)
