"""A bare bookie directory as BookKeeper's own shell tools show it, with checks they skip.

* :func:`entry_logs` is ``readlogmetadata`` for every log: size, header version, whether the
  log has its ledgers map, and bytes per ledger (from the map, or by scanning the log).
* :func:`log_records` is ``readlog``: every record of one entry log with its position (of
  the size field, as ``readlog`` prints it), ledger, entry, size, the LAC it carries, and the
  digest verified (``readlog`` skips that); ``decode`` decodes the Pulsar entry too.
* :func:`journals` / :func:`journal_records` are ``readjournal`` and ``lastmark``: data,
  master-key, fence and explicit-LAC records, and whether replay would read them.
* :func:`check` is ``check-db-ledgers-index`` plus the entry-log cross check: the ledgers
  index, and the entries in logs but not in the index and the reverse.

A master key is never shown, only whether one is stored (it is derived from the ledger
password). Nothing is written; see :mod:`pulsarctl_py.stores.bookie`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.errors import LedgerctlError, NotFoundError

if TYPE_CHECKING:
    from pulsarctl_py.decoders import Entry
    from pulsarctl_py.decoders.checksums import DigestType
    from pulsarctl_py.stores.bookie import BookieStore, JournalInfo

Advance = Callable[[], None]

#: finding kinds that mean the index and the logs disagree
ERROR_FINDINGS = frozenset({"in-log-not-in-index", "in-index-not-in-log", "unusable-index"})


def _noop() -> None:
    return None


# -- entry logs ------------------------------------------------------------------------------


@dataclass(slots=True)
class EntryLogView:
    """One entry log and the bytes each ledger has in it."""

    log_id: int
    path: Path
    size: int
    header_version: int | None
    has_ledgers_map: bool
    ledgers_count: int
    header_size: int
    ledgers: dict[int, int] = field(default_factory=dict)
    ledgers_source: str | None = None  # ledgers-map | scan | None (empty log)
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "log_id": self.log_id,
            "file": self.path.name,
            "path": str(self.path),
            "size": self.size,
            "header_version": self.header_version,
            "header_size": self.header_size,
            "has_ledgers_map": self.has_ledgers_map,
            "ledgers_count": self.ledgers_count,
            "ledgers": {str(k): v for k, v in sorted(self.ledgers.items())},
            "ledgers_source": self.ledgers_source,
            "problem": self.problem,
        }


def entry_logs(store: BookieStore, advance: Advance = _noop) -> list[EntryLogView]:
    """Every entry log with its header facts and ledger sizes (map, else a scan)."""
    out = []
    for info in store.entry_logs():
        view = EntryLogView(
            log_id=info.log_id,
            path=info.path,
            size=info.size,
            header_version=info.header_version,
            has_ledgers_map=info.has_ledgers_map,
            ledgers_count=info.ledgers_count,
            header_size=info.header_size,
            problem=info.problem,
        )
        if info.size and info.problem is None:
            before = len(store.problems)
            view.ledgers = store.ledger_sizes(info)
            fell_back = len(store.problems) > before
            view.ledgers_source = (
                "ledgers-map" if info.has_ledgers_map and not fell_back else "scan"
            )
            if fell_back:
                view.problem = str(store.problems[-1])
        out.append(view)
        advance()
    return out


def resolve_log(store: BookieStore, text: str) -> int | Path:
    """An entry log named as ``readlog`` takes it: a decimal id, ``0x`` hex, a file name
    (``1a.log``, hex) or a path to the file."""
    name = text.strip()
    if name.isdigit():
        return int(name)
    if name.lower().startswith("0x"):
        try:
            return int(name[2:], 16)
        except ValueError:
            pass
    path = Path(name)
    if os.sep in name and path.is_file():
        return path
    if name.endswith(".log"):
        try:
            return int(name[:-4], 16)
        except ValueError:
            pass
    raise LedgerctlError(
        f"unknown entry log {text!r}: give its id (decimal, or 0x hex), its file name "
        "(<hex id>.log) or a path to it"
    )


@dataclass(slots=True)
class LogRecordView:
    """One record of an entry log, with its header and digest checked."""

    log_id: int
    position: int  # of the 4-byte size field (what readlog prints)
    offset: int  # of the entry itself (the offset part of its location)
    size: int
    ledger_id: int
    entry_id: int
    lac: int | None = None
    length: int | None = None
    digest_type: str | None = None
    digest_ok: bool | None = None
    problem: str | None = None
    entry: Entry | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "log_id": self.log_id,
            "position": self.position,
            "offset": self.offset,
            "size": self.size,
            "ledger_id": self.ledger_id,
            "entry_id": self.entry_id,
            "lac": self.lac,
            "length": self.length,
            "digest_type": self.digest_type,
            "digest_ok": self.digest_ok,
            "problem": self.problem,
        }
        if self.entry is not None:
            decoded = self.entry.to_json()
            out["decoded"] = {
                "ok": decoded["ok"],
                "layers": decoded["layers"],
                "messages": decoded["messages"],
                "problems": decoded["problems"],
            }
        return out


def _log_path(store: BookieStore, log: int | Path) -> Path:
    if isinstance(log, Path):
        if not log.is_file():
            raise NotFoundError(f"no entry log {log}")
        return log
    for info in store.entry_logs():
        if info.log_id == log:
            return info.path
    dirs = ", ".join(str(d) for d in store.layout.ledger_dirs) or "no ledger dir"
    raise NotFoundError(f"no entry log {log:x}.log (id {log}) in {dirs}")


class _Digests:
    """The digest type of each ledger: given, or found on the ledger's verifiable entries."""

    def __init__(
        self, store: BookieStore, forced: DigestType | None, password: bytes | None
    ) -> None:
        self.store = store
        self.forced = forced
        self.password = password
        self.known: dict[int, DigestType | None] = {}

    def _detect(self, data: bytes) -> DigestType | None:
        from pulsarctl_py.decoders import bookkeeper

        return bookkeeper.detect_digest(data, 0, len(data), self.password)

    def _from_ledger(self, ledger_id: int, entry_id: int) -> DigestType | None:
        """Detect on another entry of the ledger (its first and last ones on this bookie)."""
        last = self.store.last_entry_id(ledger_id)
        for other in dict.fromkeys((0, last)):
            if other is None or other == entry_id:
                continue
            try:
                kind = self._detect(self.store.read_entry(ledger_id, other))
            except LedgerctlError:
                continue
            if kind is not None:
                return kind
        return None

    def check(
        self, ledger_id: int, entry_id: int, data: bytes
    ) -> tuple[DigestType | None, bool | None]:
        from pulsarctl_py.decoders import bookkeeper

        kind = self.forced or self.known.get(ledger_id)
        if kind is None:
            kind = self._detect(data)
            if kind is not None:
                self.known[ledger_id] = kind
                return kind, True
            if ledger_id in self.known:  # looked before: nothing verifies
                return None, None
            kind = self.known[ledger_id] = self._from_ledger(ledger_id, entry_id)
            if kind is None:
                return None, None
        return kind, bookkeeper.digest_verifies(data, 0, len(data), kind, self.password)


def log_records(
    store: BookieStore,
    log: int | Path,
    *,
    ledger_id: int | None = None,
    digest_type: DigestType | None = None,
    password: bytes | None = None,
    decode: bool = False,
) -> Iterator[LogRecordView]:
    """The records of one entry log in file order (``readlog``), digests verified.

    The digest type of each ledger is ``digest_type`` or detected (CRC32C, CRC32, MAC with
    ``password``); ``digest_ok`` is None when it cannot be told (a MAC without password).
    ``decode`` decodes each entry down to its messages. Problems met while scanning go to
    ``store.problems``.
    """
    from pulsarctl_py.decoders import DecodeOptions, Outer, decode_entry
    from pulsarctl_py.decoders.bookkeeper import HEADER
    from pulsarctl_py.decoders.entrylog import parse_log_file_name
    from pulsarctl_py.stores.bookie import Location

    path = _log_path(store, log)
    log_id = parse_log_file_name(path.name)
    if log_id is None:
        log_id = -1
    digests = _Digests(store, digest_type, password)
    for rec in store.scan_entry_log(path):
        if ledger_id is not None and rec.ledger_id != ledger_id:
            continue
        view = LogRecordView(
            log_id, rec.position, rec.offset, rec.size, rec.ledger_id, rec.entry_id
        )
        try:
            data = store.read_at_location(
                rec.ledger_id, rec.entry_id, Location("scan", path, log_id, rec.offset, rec.size)
            )
        except LedgerctlError as exc:
            view.problem = exc.one_line()
            yield view
            continue
        if len(data) >= HEADER.size:
            view.lac, view.length = HEADER.unpack_from(data, 0)[2:4]
        kind, ok = digests.check(rec.ledger_id, rec.entry_id, data)
        view.digest_type = kind.name if kind is not None else None
        view.digest_ok = ok
        if kind is None:
            view.problem = (
                "digest not verified: no CRC32C or CRC32 digest matches (MAC needs the password)"
            )
        elif ok is False:
            view.problem = f"{kind.name} digest mismatch"
        if decode:
            options = DecodeOptions(outer=Outer.BOOKIE_ENTRY, digest_type=kind, password=password)
            view.entry = decode_entry(data, options, (rec.ledger_id, rec.entry_id))
        yield view


# -- journal ---------------------------------------------------------------------------------


@dataclass(slots=True)
class JournalView:
    """One journal file and where a restarting bookie would start replaying it."""

    journal_id: int
    path: Path
    size: int
    version: int | None
    replay_from: int | None
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "journal_id": self.journal_id,
            "file": self.path.name,
            "path": str(self.path),
            "size": self.size,
            "version": self.version,
            "replay_from": self.replay_from,
            "problem": self.problem,
        }


@dataclass(slots=True)
class JournalRecordView:
    """One journal record: an entry (data) or a master-key, fence or explicit-LAC record."""

    journal_id: int
    position: int  # of the length field (what readjournal prints)
    size: int
    ledger_id: int
    entry_id: int
    kind: str  # data, master-key, fence, explicit-lac, force-ledger, unknown-meta
    after_mark: bool
    lac: int | None = None  # data: the LAC the entry carries; explicit-lac: the LAC sent
    length: int | None = None
    master_key_set: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "journal_id": self.journal_id,
            "position": self.position,
            "size": self.size,
            "ledger_id": self.ledger_id,
            "entry_id": self.entry_id,
            "kind": self.kind,
            "after_mark": self.after_mark,
            "lac": self.lac,
            "length": self.length,
            "master_key_set": self.master_key_set,
        }


@dataclass(slots=True)
class LastMark:
    """A ``lastMark`` file: the journal position everything before is in the entry logs."""

    journal_id: int
    offset: int

    def to_json(self) -> dict[str, Any]:
        return {
            "journal_id": self.journal_id,
            "file": f"{self.journal_id:x}.txn",
            "offset": self.offset,
        }


def last_marks(store: BookieStore) -> list[LastMark]:
    """Every ``lastMark`` of the ledger dirs."""
    return [LastMark(jid, offset) for jid, offset in store.last_marks()]


def journals(store: BookieStore) -> list[JournalView]:
    """Every journal file, with where replay would start (None: wholly before lastMark)."""
    return [_journal_view(j) for j in store.journals()]


def _journal_view(info: JournalInfo) -> JournalView:
    return JournalView(
        info.journal_id, info.path, info.size, info.version, info.replay_from, info.problem
    )


_KINDS = {"entry": "data"}


def journal_records(
    store: BookieStore,
    journal: JournalView,
    *,
    ledger_id: int | None = None,
    after_mark_only: bool = False,
) -> Iterator[JournalRecordView]:
    """The records of one journal (``readjournal``), each marked if replay would read it."""
    from pulsarctl_py.decoders.bookkeeper import HEADER, LAC_HEADER
    from pulsarctl_py.decoders.journal import RecordKind

    start = journal.replay_from if after_mark_only else None
    if after_mark_only and start is None:
        return
    for rec in store.journal_records(journal.path, start):
        if ledger_id is not None and rec.ledger_id != ledger_id:
            continue
        after = journal.replay_from is not None and rec.position >= journal.replay_from
        view = JournalRecordView(
            journal.journal_id,
            rec.position,
            rec.size,
            rec.ledger_id,
            rec.entry_id,
            _KINDS.get(rec.kind.value, rec.kind.value),
            after,
        )
        if rec.kind is RecordKind.ENTRY:
            try:
                body = store.read_journal_body(journal.path, rec)
            except LedgerctlError:
                body = b""
            if len(body) >= HEADER.size:
                view.lac, view.length = HEADER.unpack_from(body, 0)[2:4]
        elif rec.kind is RecordKind.MASTER_KEY:
            view.master_key_set = bool(rec.master_key)
        elif rec.kind is RecordKind.EXPLICIT_LAC and rec.explicit_lac is not None:
            if len(rec.explicit_lac) >= LAC_HEADER.size:
                view.lac = LAC_HEADER.unpack_from(rec.explicit_lac, 0)[1]
        yield view


# -- check -----------------------------------------------------------------------------------


@dataclass(slots=True)
class IndexedLedger:
    """A ledger in the bookie's ledgers index (what ``check-db-ledgers-index`` prints)."""

    ledger_id: int
    exists: bool
    fenced: bool | None
    has_master_key: bool
    explicit_lac: int | None
    limbo: bool | None
    last_entry_id: int | None
    source: str

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger_id": self.ledger_id,
            "exists": self.exists,
            "fenced": self.fenced,
            "has_master_key": self.has_master_key,
            "explicit_lac": self.explicit_lac,
            "limbo": self.limbo,
            "last_entry_id": self.last_entry_id,
            "source": self.source,
        }


def severity(kind: str) -> str:
    """error for index/log disagreements, info for stale copies and journal-only entries."""
    return "error" if kind in ERROR_FINDINGS else "info"


@dataclass(slots=True)
class CheckResult:
    """The ledgers index and every finding of the index-versus-logs cross check."""

    ledgers: list[IndexedLedger]
    findings: list[Any]
    problems: list[Any]
    entries_in_logs: int
    entries_in_index: int

    @property
    def errors(self) -> int:
        found = sum(1 for f in self.findings if severity(f.kind) == "error")
        return found + sum(1 for p in self.problems if p.severity == "error")

    @property
    def warnings(self) -> int:
        return sum(1 for p in self.problems if p.severity != "error")

    @property
    def ok(self) -> bool:
        return self.errors == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "errors": self.errors,
            "warnings": self.warnings,
            "entries_in_logs": self.entries_in_logs,
            "entries_in_index": self.entries_in_index,
            "ledgers": [lg.to_json() for lg in self.ledgers],
            "findings": [dict(f.to_json(), severity=severity(f.kind)) for f in self.findings],
            "problems": [p.to_json() for p in self.problems],
        }


def check(store: BookieStore) -> CheckResult:
    """The ledgers index, then the entry logs and the index checked against each other."""
    ledgers = []
    for ledger_id in store.ledgers():
        info = store.ledger(ledger_id)
        ledgers.append(
            IndexedLedger(
                ledger_id,
                info.exists,
                info.fenced,
                info.master_key is not None,
                info.explicit_lac_value,
                info.limbo,
                info.last_entry_id,
                info.source,
            )
        )
    for info in store.entry_logs():  # headers and ledgers maps: damage goes to problems
        if info.size and info.problem is None and info.has_ledgers_map:
            store.ledger_sizes(info)
    report = store.check()
    return CheckResult(
        ledgers, report.findings, report.problems, report.entries_in_logs, report.entries_in_index
    )
