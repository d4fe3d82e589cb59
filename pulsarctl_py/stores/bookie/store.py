"""An offline, read-only view of a bookie's data directories.

:class:`BookieStore` opens one or more ``--bookie-dir`` paths (see :mod:`.layout`) and
answers: which ledgers are here, what the bookie knows about each (fenced, master key,
explicit LAC, last entry), where an entry is, and the raw digest-packed bytes of a range
of entries, streamed in entry order with bounded memory. Locations come from the
bookie's own index (DbLedgerStorage RocksDB or ``.idx`` files); where an index is missing
or unreadable the entry logs are scanned instead; entries a crashed bookie had only in
its journal (after ``lastMark``) are read from the journal.

Nothing is ever written: files are opened ``O_RDONLY`` and RocksDB is opened read-only
through a private shadow directory (see :mod:`.rocks`).
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from pulsarctl_py.decoders import entrylog
from pulsarctl_py.decoders import journal as journal_format
from pulsarctl_py.decoders._readat import read_exact
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.decoders.entry import DecodeOptions
from pulsarctl_py.decoders.errors import CorruptEntryError, LedgerctlError, NotFoundError
from pulsarctl_py.decoders.heads import EntryHead, head_options
from pulsarctl_py.decoders.nodes import Problem
from pulsarctl_py.decoders.speedups import native

from .files import FileCache, read_small_file, unreadable
from .heads import native_digest, record_head_batches, scan_db_heads, scan_slot_heads
from .indexes import DbIndex, IdxIndex, JournalTail, ScanIndex
from .layout import BookieLayout, discover, has_index_files
from .model import (
    ConsistencyReport,
    EntryLogInfo,
    EntryNotFound,
    Finding,
    JournalInfo,
    LedgerInfo,
    LedgerRecord,
    Location,
    StoredEntry,
)
from .readahead import PassReader
from .rocks import is_rocksdb_dir

IndexMode = Literal["auto", "scan"]
#: bytes read at a time from an entry log while a pass reads a ledger's entries in order
READ_AHEAD = 1 << 20
JournalMode = Literal["tail", "all", "none"]


class _Source(Protocol):
    source: str

    def ledger_ids(self) -> Iterable[int]: ...
    def record(self, ledger_id: int) -> LedgerRecord | None: ...
    def locate(self, ledger_id: int, entry_id: int) -> Location | None: ...
    def iter_locations(
        self, ledger_id: int, first: int, last: int | None
    ) -> Iterator[tuple[int, Location]]: ...
    def last_entry(self, ledger_id: int) -> int | None: ...
    def iter_all(self) -> Iterator[tuple[int, int, Location]]: ...
    def close(self) -> None: ...


def _scanned(source: Any) -> bool:
    """Whether the native head scans read this index: DbLedgerStorage's (its locations
    readable), index files, or entry logs scanned into slot tables."""
    if isinstance(source, DbIndex):
        return source.locations is not None
    return isinstance(source, IdxIndex) or (isinstance(source, ScanIndex) and source.has_slots())


def _holds(source: Any, ledger_id: int, first: int, last: int | None) -> bool:
    """Whether ``source`` has an entry of the ledger in [first, last]."""
    found = source.iter_locations(ledger_id, first, last)
    try:
        return next(found, None) is not None
    finally:
        found.close()


def _list_logs(directory: Path) -> dict[int, Path]:
    logs = {}
    for name in os.listdir(directory):
        log_id = entrylog.parse_log_file_name(name)
        if log_id is not None and (directory / name).is_file():
            logs[log_id] = directory / name
    return dict(sorted(logs.items()))


def _truncation(header: entrylog.EntryLogHeader, size: int) -> str | None:
    """Why a log with this header cannot be whole at ``size`` bytes, or None."""
    if size < entrylog.HEADER_SIZE:
        return f"the entry log is {size} bytes, shorter than its {entrylog.HEADER_SIZE}-byte header"
    if header.has_ledgers_map and header.ledgers_map_offset >= size:
        return (
            f"the header puts the ledgers map at {header.ledgers_map_offset}, past the end of "
            f"the {size}-byte file: truncated"
        )
    return None


def _relabel(problem: Problem, path: Path) -> Problem:
    return Problem(
        problem.severity, f"{problem.layer} {path.name}", problem.offset, problem.message
    )


class BookieStore:
    """Ledgers as they are stored on one bookie, read offline from its directories.

    ``dirs``: ledger, index and journal directories (a ``current/`` dir, its parent, or a
    bookie data root). ``index``: "auto" uses the bookie's indexes and scans entry logs
    only where an index is missing or unreadable; "scan" ignores indexes and rebuilds
    locations from the entry logs. ``journal``: "tail" replays journal records after
    ``lastMark`` as a restarting bookie would, "all" every journal record, "none" none.
    Problems met on the way (unreadable index, damaged log) are in ``problems`` and
    ``findings``; bad bytes met while reading raise :class:`CorruptEntryError`.
    """

    def __init__(
        self,
        dirs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        index: IndexMode = "auto",
        journal: JournalMode = "tail",
        open_files: int = 64,
    ) -> None:
        if index not in ("auto", "scan") or journal not in ("tail", "all", "none"):
            raise LedgerctlError(f"unknown mode index={index!r} journal={journal!r}")
        paths = [dirs] if isinstance(dirs, str | os.PathLike) else list(dirs)
        self.layout: BookieLayout = discover(paths)
        self.index_mode = index
        self.journal_mode = journal
        self.problems: list[Problem] = []
        self.findings: list[Finding] = []
        self._files = FileCache(open_files)
        self._sources: list[_Source] = []
        self._covered: dict[Path, _Source] = {}
        self._scan: ScanIndex | None = None
        self._journal: JournalTail | None = None
        try:
            self._logs: dict[Path, dict[int, Path]] = {
                d: _list_logs(d) for d in self.layout.ledger_dirs
            }
            self._open_indexes()
        except OSError as exc:
            self.close()
            raise unreadable(Path(exc.filename or paths[0]), exc) from None
        except BaseException:
            self.close()
            raise

    # -- opening -------------------------------------------------------------------------

    def _open_indexes(self) -> None:
        dirs = self.layout.ledger_dirs
        if self.index_mode == "auto":
            db_dirs = [d for d in dirs if is_rocksdb_dir(d / "locations")]
            idx_dirs = [d for d in dirs if has_index_files(d)]
            log_only = [d for d in dirs if self._logs[d] and d not in db_dirs and d not in idx_dirs]
            index_only = [d for d in db_dirs if not self._logs[d]]
            pairs = [(d, d) for d in db_dirs if self._logs[d]]
            # DbLedgerStorage with separate indexDirectories: index dir i serves ledger dir i
            pairs += list(zip(index_only, log_only, strict=False))
            pairs += [(d, d) for d in index_only[len(log_only) :]]
            for index_dir, log_dir in pairs:
                db = DbIndex(index_dir, log_dir, self.problems)
                self._sources.append(db)
                if db.ledgers is None:
                    self._unusable_index(
                        f"{index_dir / 'ledgers'}: missing or unreadable; a bookie would "
                        "not know its ledgers (reads fail with NoSuchLedger)"
                    )
                if db.locations_error is None:
                    self._covered[log_dir] = db
                else:
                    self._unusable_index(
                        f"{index_dir / 'locations'}: {db.locations_error}; "
                        "locations rebuilt by scanning the entry logs"
                    )
            if idx_dirs:
                idx = IdxIndex(idx_dirs, self._resolve_log, self._files)
                self._sources.append(idx)
                for d in dirs:
                    if d not in db_dirs:
                        self._covered.setdefault(d, idx)
        scan_logs = [
            (log_id, path)
            for d in dirs
            if d not in self._covered
            for log_id, path in self._logs[d].items()
        ]
        if scan_logs:
            self._scan = ScanIndex(scan_logs, self._files, self.problems)
        if self.index_mode == "auto":
            for d in dirs:
                if d not in self._covered and d not in db_dirs and self._logs[d]:
                    self._unusable_index(
                        f"{d}: entry logs without an index (no locations/ database, no "
                        ".idx files); located by scanning the logs, but a bookie could "
                        "not serve these entries"
                    )

    def _unusable_index(self, message: str) -> None:
        self.findings.append(Finding("unusable-index", None, None, None, message))

    def _resolve_log(self, log_id: int) -> Path:
        """The entry log file with this id in any ledger dir (Interleaved/Sorted storage)."""
        for logs in self._logs.values():
            if log_id in logs:
                return logs[log_id]
        first = self.layout.ledger_dirs[0] if self.layout.ledger_dirs else Path(".")
        return first / entrylog.log_file_name(log_id)

    def _journal_tail(self) -> JournalTail | None:
        if self.journal_mode == "none" or not self.layout.journal_dirs:
            return None
        if self._journal is None:
            self._journal = JournalTail(
                list(self.layout.journal_dirs),
                self.last_marks(),
                self.journal_mode,
                self._files,
                self.problems,
            )
        return self._journal

    def _all_sources(self) -> list[_Source]:
        sources: list[_Source] = list(self._sources)
        if self._scan is not None:
            sources.append(self._scan)
        return sources

    # -- ledgers ---------------------------------------------------------------------------

    def ledgers(self) -> list[int]:
        """Ids of the ledgers this bookie holds (index records, scanned logs, journal tail)."""
        ids: set[int] = set()
        for source in self._all_sources():
            ids.update(source.ledger_ids())
        tail = self._journal_tail()
        if tail is not None:
            ids.update(tail.ledger_ids())
        return sorted(ids)

    def ledger(self, ledger_id: int) -> LedgerInfo:
        """What the bookie knows about a ledger; raises EntryNotFound for unknown ledgers."""
        record = next(
            (r for s in self._all_sources() if (r := s.record(ledger_id)) is not None), None
        )
        tail = self._journal_tail()
        in_tail = tail is not None and ledger_id in tail.ledger_ids()
        if record is None and not in_tail:
            raise EntryNotFound(ledger_id)
        if record is None:
            record = LedgerRecord(ledger_id, True, False, None, None, None, "journal", None)
        fenced, master_key, lac = record.fenced, record.master_key, record.explicit_lac
        if tail is not None and in_tail:
            if ledger_id in tail.fenced:
                fenced = True
            master_key = master_key or tail.master_keys.get(ledger_id)
            lac = tail.explicit_lacs.get(ledger_id, lac)
        return LedgerInfo(
            ledger_id=ledger_id,
            exists=record.exists,
            fenced=fenced,
            master_key=master_key,
            explicit_lac=lac,
            limbo=record.limbo,
            last_entry_id=self.last_entry_id(ledger_id),
            source=record.source,
            path=record.path,
        )

    def journal_tail_ledgers(self) -> set[int]:
        """Ledgers with records in the journal after ``lastMark``: a restarting bookie
        replays them into its index."""
        tail = self._journal_tail()
        return set() if tail is None else set(tail.ledger_ids())

    def last_entry_id(self, ledger_id: int) -> int | None:
        """The highest entry id of the ledger stored here (None: no entry)."""
        found = [s.last_entry(ledger_id) for s in self._all_sources()]
        tail = self._journal_tail()
        if tail is not None:
            found.append(tail.last_entry(ledger_id))
        known = [e for e in found if e is not None]
        return max(known) if known else None

    # -- entries ---------------------------------------------------------------------------

    def locate(self, ledger_id: int, entry_id: int) -> Location | None:
        """Where an entry is: index first, then a scan, then the journal tail."""
        for source in self._all_sources():
            found = source.locate(ledger_id, entry_id)
            if found is not None:
                return found
        tail = self._journal_tail()
        return tail.locate(ledger_id, entry_id) if tail is not None else None

    def iter_locations(
        self, ledger_id: int, first: int = 0, last: int | None = None
    ) -> Iterator[tuple[int, Location]]:
        """``(entry_id, location)`` for the entries in ``[first, last]``, in entry order."""
        streams = [s.iter_locations(ledger_id, first, last) for s in self._all_sources()]
        tail = self._journal_tail()
        if tail is not None:
            streams.append(tail.iter_locations(ledger_id, first, last))
        if len(streams) == 1:
            # one source: its entry ids are unique and ascending, nothing to merge
            yield from streams[0]
            return
        ranked = [
            ((entry_id, rank, location) for entry_id, location in stream)
            for rank, stream in enumerate(streams)
        ]
        previous = None
        for entry_id, _, location in heapq.merge(*ranked, key=lambda t: (t[0], t[1])):
            if entry_id != previous:
                previous = entry_id
                yield entry_id, location

    def read_at_location(self, ledger_id: int, entry_id: int, location: Location) -> bytes:
        """The entry bytes at ``location``, checked to be that ledger's entry."""
        layer = f"{'journal' if location.in_journal else 'entry-log'} {location.path.name}"
        if not location.path.is_file():
            raise CorruptEntryError(layer, location.offset, "the file to exist", "no such file")
        with self._files.open(location.path) as f:
            try:
                if location.in_journal and location.size is not None:
                    entrylog.check_entry_size(location.size, location.offset, layer)
                    data = read_exact(f.read_at, location.offset, location.size, layer, "entry")
                    entrylog.check_entry_head(
                        entrylog.SIZE.pack(len(data)) + data[:16],
                        location.offset,
                        ledger_id,
                        entry_id,
                    )
                    return data
                return entrylog.read_entry(f.read_at, location.offset, ledger_id, entry_id)
            except CorruptEntryError as exc:
                raise CorruptEntryError(layer, exc.offset, exc.expected, exc.found) from None

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        """The raw digest-packed bytes of one entry; raises EntryNotFound if absent."""
        location = self.locate(ledger_id, entry_id)
        if location is None:
            raise EntryNotFound(ledger_id, entry_id)
        return self.read_at_location(ledger_id, entry_id, location)

    def read_entries(
        self, ledger_id: int, first: int = 0, last: int | None = None
    ) -> Iterator[StoredEntry]:
        """Stream the entries in ``[first, last]`` held here, in order, one at a time.

        Starts at ``first`` without reading earlier entries, so disjoint ranges can be
        read independently (for parallel scans). Entries missing on this bookie (striped
        ensembles) are skipped.
        """
        reader = PassReader(self._files, self.read_at_location, READ_AHEAD)
        read = reader.read
        try:
            for entry_id, loc in self.iter_locations(ledger_id, first, last):
                yield StoredEntry(ledger_id, entry_id, loc, read(ledger_id, entry_id, loc))
        finally:
            reader.close()

    def read_heads(
        self,
        ledger_id: int,
        first: int = 0,
        last: int | None = None,
        options: DecodeOptions | None = None,
    ) -> Iterator[EntryHead]:
        """The heads of the entries in ``[first, last]`` held here, in order.

        The entries of :meth:`read_entries`, each decoded to its broker entry metadata
        (``decoders.heads``): ``options`` gives the digest type and password. Where one
        index holds the ledger's entries alone (DbLedgerStorage in any of its
        directories, index files, or the entry logs scanned for a lost index) and the
        digest is CRC32C, CRC32 or DUMMY, the native scanners read them (:mod:`.heads`);
        entries from several sources (a journal tail) are read, then their heads made
        natively; with the same results as the Python decoder in every case. A digest
        type of None (not known: detected per entry) is served as CRC32C: it is the first
        type detection tries, so an entry whose CRC32C digest verifies is detected as
        CRC32C, and any other entry takes the Python path, which detects.
        """
        yield from self._heads(ledger_id, first, last, options, False)

    def read_heads_with_data(
        self,
        ledger_id: int,
        first: int = 0,
        last: int | None = None,
        options: DecodeOptions | None = None,
    ) -> Iterator[tuple[EntryHead, bytes]]:
        """:meth:`read_heads`, each head with the stored bytes of its entry."""
        for pairs in self.read_head_batches(ledger_id, first, last, options):
            yield from pairs

    def read_head_batches(
        self,
        ledger_id: int,
        first: int = 0,
        last: int | None = None,
        options: DecodeOptions | None = None,
    ) -> Iterator[list[tuple[EntryHead, bytes]]]:
        """:meth:`read_heads_with_data` a list of pairs at a time, in order: a loop over
        many entries pays one generator step per list, not per entry."""
        yield from self._heads(ledger_id, first, last, options, True)

    def _heads(
        self,
        ledger_id: int,
        first: int,
        last: int | None,
        options: DecodeOptions | None,
        batched: bool,
    ) -> Iterator[Any]:
        """Heads, or (``batched``) lists of (head, data) pairs."""
        opts = head_options(options or DecodeOptions(digest_type=DigestType.CRC32C))
        digest = native_digest(opts) if native is not None else None
        runs = self.index_runs(ledger_id, first, last) if digest is not None else []
        for source, run_first, run_last in runs or [(None, first, last)]:
            if isinstance(source, DbIndex) and digest == DigestType.CRC32C:
                yield from scan_db_heads(
                    self, source, ledger_id, run_first, run_last, opts, batched, batched
                )
            elif source is not None and digest is not None:
                yield from scan_slot_heads(
                    self, source, ledger_id, run_first, run_last, opts, digest, batched
                )
            else:
                stored = self.read_entries(ledger_id, run_first, run_last)
                try:
                    yield from record_head_batches(stored, ledger_id, opts, digest, batched)
                finally:
                    stored.close()

    def index_runs(
        self, ledger_id: int, first: int, last: int | None
    ) -> list[tuple[Any, int, int | None]]:
        """The range [first, last] as runs ``(index, first, last)``, in order: an index the
        native scans read (:meth:`sole_source`, whose slots or items they take), or None
        for a run :meth:`read_entries` reads from several sources. The entries before a
        journal tail's first entry of the ledger (a bookie stopped before it flushed the
        last ones) are one index's run when it alone holds them."""
        source = self.sole_source(ledger_id, first, last)
        if source is not None:
            return [(source, first, last)] if _scanned(source) else [(None, first, last)]
        tail = self._journal_tail()
        found = tail.iter_locations(ledger_id, first, last) if tail is not None else None
        split = next(found, (first,))[0] if found is not None else first
        if split > first:
            before = self.sole_source(ledger_id, first, split - 1)
            if before is not None and _scanned(before):
                return [(before, first, split - 1), (None, split, last)]
        return [(None, first, last)]

    def sole_source(self, ledger_id: int, first: int, last: int | None) -> _Source | None:
        """The one index that holds this ledger's entries in [first, last], if one alone
        does: no other source (another ledger directory's index, logs scanned for a lost
        index, the journal tail) holds any of them. Each source is asked for its first
        entry in the range (a seek, for a DbLedgerStorage index). An index that cannot be
        read raises, as :meth:`read_entries` would."""
        sources = self._all_sources()
        tail = self._journal_tail()
        if tail is not None:
            sources.append(tail)
        if len(sources) == 1:
            return sources[0] if sources[0] is not tail else None
        holding = [s for s in sources if _holds(s, ledger_id, first, last)]
        if len(holding) != 1 or holding[0] is tail:
            return None
        return holding[0]

    # -- entry logs ------------------------------------------------------------------------

    def entry_logs(self) -> list[EntryLogInfo]:
        """Every entry log in the ledger dirs, by directory then id."""
        out = []
        for logs in self._logs.values():
            for log_id, path in logs.items():
                try:
                    out.append(self._log_info(log_id, path))
                except LedgerctlError as exc:  # unreadable: the other logs still are
                    self._log_problem(path, 0, exc.one_line())
                    out.append(EntryLogInfo(log_id, path, 0, None, 0, 0, 0, exc.one_line()))
        return out

    def _log_info(self, log_id: int, path: Path) -> EntryLogInfo:
        with self._files.open(path) as f:
            if f.size == 0:
                return EntryLogInfo(log_id, path, 0, None, 0, 0, 0)
            head = f.read_at(0, entrylog.HEADER_SIZE + entrylog.FAKE_RECORD.size)
            try:
                h = entrylog.parse_header(head)
            except CorruptEntryError as exc:
                self._log_problem(path, exc.offset, str(exc))
                return EntryLogInfo(log_id, path, f.size, None, 0, 0, 0, str(exc))
            problem = _truncation(h, f.size)
            if problem is not None:
                self._log_problem(path, min(f.size, h.ledgers_map_offset), problem)
            return EntryLogInfo(
                log_id,
                path,
                f.size,
                h.version,
                h.ledgers_map_offset,
                h.ledgers_count,
                h.size,
                problem,
            )

    def _log_problem(self, path: Path, offset: int, message: str) -> None:
        problem = Problem("error", f"entry-log {path.name}", offset, message)
        if problem not in self.problems:
            self.problems.append(problem)

    def _find_log(self, log: EntryLogInfo | int | Path) -> Path:
        if isinstance(log, EntryLogInfo):
            return log.path
        if isinstance(log, Path):
            return log
        for logs in self._logs.values():
            if log in logs:
                return logs[log]
        raise NotFoundError(f"no entry log {entrylog.log_file_name(log)} in the ledger dirs")

    def scan_entry_log(
        self,
        log: EntryLogInfo | int | Path,
        *,
        include_meta: bool = False,
        problems: list[Problem] | None = None,
    ) -> Iterator[entrylog.LogRecord]:
        """The records of one log in file order (BookKeeper's ``readlog``).

        Problems go to ``problems`` when given, else to ``self.problems``.
        """
        path = self._find_log(log)
        sink = self.problems if problems is None else problems
        found: list[Problem] = []
        with self._files.open(path) as f:
            if f.size:
                try:
                    header = entrylog.parse_header(f.read_at(0, entrylog.HEADER_SIZE + 12))
                except CorruptEntryError as exc:
                    found.append(Problem("error", entrylog.LAYER, exc.offset, str(exc)))
                else:
                    problem = _truncation(header, f.size)
                    if problem is not None:
                        found.append(Problem("error", entrylog.LAYER, f.size, problem))
                yield from entrylog.scan_records(
                    f.read_at, f.size, include_meta=include_meta, problems=found
                )
        sink.extend(_relabel(p, path) for p in found)

    def ledger_sizes(self, log: EntryLogInfo | int | Path) -> dict[int, int]:
        """``{ledger_id: bytes}`` in a log: its ledgers map, or a scan when it has none."""
        path = self._find_log(log)
        with self._files.open(path) as f:
            if f.size == 0:
                return {}
            try:
                header = entrylog.parse_header(f.read_at(0, entrylog.HEADER_SIZE + 12))
                found = entrylog.read_ledgers_map(f.read_at, f.size, header)
            except CorruptEntryError as exc:
                self._log_problem(path, exc.offset, str(exc))
                found = None
            if found is not None and sum(found.values()) > f.size:
                self._log_problem(
                    path,
                    header.ledgers_map_offset,
                    f"the ledgers map claims {sum(found.values())} bytes of entries in a "
                    f"{f.size}-byte file",
                )
        if found is not None:
            return found
        return entrylog.ledger_sizes(self.scan_entry_log(path))

    # -- journal ---------------------------------------------------------------------------

    def last_marks(self) -> list[tuple[int, int]]:
        """``(journal_id, offset)`` from every ``lastMark`` / ``lastMark.<n>`` file."""
        marks = []
        for directory in self.layout.ledger_dirs:
            for name in sorted(os.listdir(directory)):
                if name == "lastMark" or name.startswith("lastMark."):
                    try:
                        marks.append(
                            journal_format.parse_last_mark(read_small_file(directory / name))
                        )
                    except LedgerctlError as exc:  # damaged or unreadable
                        self.problems.append(Problem("error", name, 0, exc.one_line()))
        return marks

    def journals(self) -> list[JournalInfo]:
        """Every journal file, with where replay would start in it."""
        tail = self._journal_tail()
        if tail is not None:
            return list(tail.journals)
        out = []
        for directory in self.layout.journal_dirs:
            for name in sorted(os.listdir(directory)):
                journal_id = journal_format.parse_journal_file_name(name)
                if journal_id is None:
                    continue
                with self._files.open(directory / name) as f:
                    try:
                        version = journal_format.parse_header(f.read_at(0, 8))[0]
                        problem = None
                    except CorruptEntryError as exc:
                        version, problem = None, str(exc)
                    out.append(JournalInfo(journal_id, f.path, f.size, version, None, problem))
        return sorted(out, key=lambda j: j.journal_id)

    def journal_records(
        self,
        journal: JournalInfo | Path,
        start: int | None = None,
        *,
        problems: list[Problem] | None = None,
    ) -> Iterator[journal_format.JournalRecord]:
        """The records of one journal file (BookKeeper's ``readjournal`` / ``scanJournal``)."""
        path = journal.path if isinstance(journal, JournalInfo) else journal
        found: list[Problem] = []
        with self._files.open(path) as f:
            yield from journal_format.scan_records(f.read_at, f.size, start, problems=found)
        (self.problems if problems is None else problems).extend(_relabel(p, path) for p in found)

    def read_journal_body(
        self, journal: JournalInfo | Path, record: journal_format.JournalRecord
    ) -> bytes:
        """The body of a journal record (the entry, for data records)."""
        path = journal.path if isinstance(journal, JournalInfo) else journal
        with self._files.open(path) as f:
            return read_exact(
                f.read_at, record.offset, record.size, f"journal {path.name}", "record"
            )

    # -- rebuild and check -----------------------------------------------------------------

    def rebuild_locations(self) -> ScanIndex:
        """Locations of every entry rebuilt by scanning all entry logs (index ignored)."""
        logs = [(log_id, path) for logs in self._logs.values() for log_id, path in logs.items()]
        return ScanIndex(logs, self._files, self.problems)

    def check(self) -> ConsistencyReport:
        """Compare each index with the entry logs it covers, both ways.

        Entries in a log the index does not know (``in-log-not-in-index``), index entries
        whose location does not hold that entry (``in-index-not-in-log``), log copies the
        index does not point to (``stale-copy``) and entries only in the journal tail
        (``journal-only``). Memory stays bounded: logs are streamed, lookups are by key.
        """
        report = ConsistencyReport(findings=list(self.findings))
        problems: list[Problem] = []
        for source in self._sources:
            logs = [
                (log_id, path)
                for directory, covering in self._covered.items()
                if covering is source
                for log_id, path in self._logs[directory].items()
            ]
            self._check_logs(source, logs, report, problems)
            self._check_index(source, report)
        if self._scan is not None:
            for _, path in self._scan.logs:
                for _ in self.scan_entry_log(path, problems=problems):
                    report.entries_in_logs += 1
        tail = self._journal_tail()
        if tail is not None:
            for ledger_id, entries in tail.entries.items():
                for entry_id, location in entries.items():
                    if not any(s.locate(ledger_id, entry_id) for s in self._all_sources()):
                        report.findings.append(
                            Finding(
                                "journal-only",
                                ledger_id,
                                entry_id,
                                location,
                                "only in the journal tail (not yet in an entry log)",
                            )
                        )
        everything = [*self.problems, *problems]
        unique = {(p.severity, p.layer, p.offset, p.message): p for p in everything}
        report.problems = list(unique.values())
        return report

    def _check_logs(
        self,
        source: _Source,
        logs: list[tuple[int, Path]],
        report: ConsistencyReport,
        problems: list[Problem],
    ) -> None:
        known: dict[int, bool] = {}
        for log_id, path in sorted(logs):
            for rec in self.scan_entry_log(path, problems=problems):
                report.entries_in_logs += 1
                here = Location("scan", path, log_id, rec.offset, rec.size)
                indexed = source.locate(rec.ledger_id, rec.entry_id)
                if indexed is None:
                    if rec.ledger_id not in known:
                        known[rec.ledger_id] = source.record(rec.ledger_id) is not None
                    why = "" if known[rec.ledger_id] else " (ledger unknown to the index: deleted?)"
                    report.findings.append(
                        Finding(
                            "in-log-not-in-index",
                            rec.ledger_id,
                            rec.entry_id,
                            here,
                            f"in {path.name} at {rec.offset}, not in {source.source}{why}",
                        )
                    )
                elif (indexed.file_id, indexed.offset) != (log_id, rec.offset):
                    report.findings.append(
                        Finding(
                            "stale-copy",
                            rec.ledger_id,
                            rec.entry_id,
                            here,
                            f"the index points to log {indexed.file_id:x} at {indexed.offset}",
                        )
                    )

    def _check_index(self, source: _Source, report: ConsistencyReport) -> None:
        for ledger_id, entry_id, location in source.iter_all():
            report.entries_in_index += 1
            try:
                self._check_location(ledger_id, entry_id, location)
            except CorruptEntryError as exc:
                report.findings.append(
                    Finding("in-index-not-in-log", ledger_id, entry_id, location, str(exc))
                )

    def _check_location(self, ledger_id: int, entry_id: int, location: Location) -> None:
        layer = f"entry-log {location.path.name}"
        if not location.path.is_file():
            raise CorruptEntryError(
                layer, location.offset, "the entry log to exist", "no such file"
            )
        with self._files.open(location.path) as f:
            head = f.read_at(location.offset - 4, entrylog.RECORD_HEAD.size)
            size = entrylog.check_entry_head(head, location.offset, ledger_id, entry_id)
            if location.offset + size > f.size:
                raise CorruptEntryError(
                    layer,
                    location.offset,
                    f"{size} bytes of entry",
                    f"{f.size - location.offset} left",
                )

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        for source in self._sources:
            source.close()
        self._sources = []
        self._files.close()

    def __enter__(self) -> BookieStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        dirs = ", ".join(str(d) for d in self.layout.ledger_dirs + self.layout.journal_dirs)
        return f"BookieStore({dirs})"


def open_bookie(
    dirs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    index: IndexMode = "auto",
    journal: JournalMode = "tail",
) -> BookieStore:
    """Open a bookie's directories read-only (see :class:`BookieStore`)."""
    return BookieStore(dirs, index=index, journal=journal)
