"""Checks of a topic's offloaded ledgers (tiered storage): the ``offload-*`` findings.

A ledger is offloaded when its managed ledger's ``LedgerInfo`` has an ``offloadContext``
with a uid (formats.md §18). Pulsar's lifecycle (``ManagedLedgerImpl.offloadLoop``,
``OffloadUtils``): the uid and driver metadata are written first, then the objects, then
``complete=true``; after the deletion lag the BookKeeper copy is deleted and
``bookkeeperDeleted=true``. A ``complete`` ledger is read from tiered storage first
(``managedLedgerDataReadPriority=tiered-storage-first``), so a tiered copy that does not
hold what the managed ledger says breaks reads even while the BookKeeper copy is there;
once that copy is deleted, the tiered copy is all there is.

For each offloaded ledger of a topic, :func:`tiered_findings` checks, in this order:

* the context: a uid without ``complete`` is an interrupted offload (the objects it wrote
  are left behind: ``ledgerctl orphans --offloaded`` finds them);
* the objects: both jcloud objects (``<uuid>-ledger-<id>`` and ``-index``, their format
  version ``s3managedledgeroffloaderformatversion=1``: ``DataBlockUtils.VERSION_CHECK``)
  or the filesystem offloader's MapFile directory ``<ledgerId>-<uuid>`` with ``data`` and
  ``index``, readable;
* the index against the ledger: the jcloud index's last entry (from its block entries
  and the embedded metadata) and the MapFile index's keys against ``LedgerInfo.entries``;
* the embedded ledger metadata (``OffloadUtils.buildLedgerMetadataFormat``) against the
  managed ledger's ``LedgerInfo``: closed, ``lastEntryId + 1 == entries``,
  ``length == size``, and the ``pulsar/managed-ledger`` tag naming this managed ledger;
* the data: every entry ``0..entries-1`` read through the reader by entry id and decoded
  as the broker wrote it (broker entry metadata, the ``0x0e01`` CRC32C verified, the
  metadata and payload), none past it; the sum of the entry sizes against ``size``.

A ledger whose BookKeeper copy was deleted and whose tiered copy cannot be read is said
plainly: its data is gone (``offload-data-lost``). A store that cannot be reached raises
(exit 3): nothing is judged on a store not read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.errors import (
    DataError,
    LedgerctlError,
    NotFoundError,
    StoreUnavailable,
)
from pulsarctl_py.verify.core import ERROR, INFO, WARNING, Finding, Run

if TYPE_CHECKING:
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
    from pulsarctl_py.stores.metadata import ManagedLedgerRecord
    from pulsarctl_py.stores.tiered.locate import TieredLedger
    from pulsarctl_py.stores.tiered.where import Location


class _FormatVersion(DataError):
    """Internal: the objects carry an offload format version this reader does not know."""


@dataclass(slots=True)
class _Read:
    """One entry read from tiered storage: its bytes, or why they could not be read."""

    entry_id: int
    data: bytes
    error: str | None = None


class _Copy:
    """One offloaded ledger opened for checking, whichever offloader wrote it."""

    where: str
    #: the last entry id its index covers (None: the index does not say)
    index_last: int | None

    def metadata(self) -> Any:
        raise NotImplementedError

    def entries(self, last: int) -> Iterator[_Read]:
        raise NotImplementedError

    def past(self, last: int) -> int | None:
        """The first entry id the data holds after ``last`` (None: none)."""
        raise NotImplementedError

    def close(self) -> None:
        return None


class _MapFileCopy(_Copy):
    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.where = str(reader.directory)
        keys, _offsets = reader.index()
        # the MapFile index holds every 128th key: its last one is a lower bound only
        self.index_last = None
        self.index_keys = keys

    def metadata(self) -> Any:
        return self.reader.metadata()

    def entries(self, last: int) -> Iterator[_Read]:
        # past the embedded lastEntryId the data holds nothing to read: a managed ledger
        # recording more entries is one offload-data-mismatch, not one finding per entry
        try:
            md_last = self.reader.metadata().stored_last_entry_id
        except LedgerctlError:
            md_last = None
        if md_last is not None and md_last >= -1:
            last = min(last, md_last)
        for e in self.reader.read_entries(0, last, keep_going=True):
            yield _Read(e.entry_id, bytes(e.data), e.error)

    def past(self, last: int) -> int | None:
        try:
            for e in self.reader.read_entries(last + 1, None):
                return int(e.entry_id)
        except LedgerctlError:
            return None
        return None

    def close(self) -> None:
        self.reader.close()


class _JcloudCopy(_Copy):
    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger
        self.where = f"{ledger.data_key} in {ledger.source.name}"
        self.index_last = ledger.index.last_entry_id

    def metadata(self) -> Any:
        return self.ledger.metadata

    def entries(self, last: int) -> Iterator[_Read]:
        from pulsarctl_py.stores.tiered.jcloud import UnreadableOffloadedEntry

        end = min(last, self.ledger.index.last_entry_id)
        if end < 0:
            return
        for item in self.ledger.read_entries(0, end):
            if isinstance(item, UnreadableOffloadedEntry):
                yield _Read(item.entry_id, b"", item.reason)
            else:
                yield _Read(item.entry_id, item.data)

    def past(self, last: int) -> int | None:
        index_last = self.ledger.index.last_entry_id
        return last + 1 if index_last > last else None


def _open(run: Run, loc: TieredLedger, location: Location) -> _Copy:
    """The ledger's tiered copy, where ``location`` says (:mod:`pulsarctl_py.stores.tiered.
    where`: the broker's resolution, ``--offload-url`` / ``--s3-endpoint`` over it). Raises
    NotFoundError (objects missing), _FormatVersion, DataError (not a readable offload),
    StoreUnavailable (the store did not answer), or LedgerctlError (a driver not read)."""
    from pulsarctl_py.stores.tiered.locate import FILESYSTEM_DRIVERS

    driver = loc.driver.lower()
    if driver in FILESYSTEM_DRIVERS:
        from pulsarctl_py.stores.tiered.filesystem import (
            MapFileLedger,
            ledger_directory,
            local_path,
        )

        if location.root is not None and location.root.lower().startswith("s3://"):
            raise LedgerctlError(f"a filesystem offload is not read from {location.root}")
        if not location.root:
            raise LedgerctlError(
                "neither its offloadContext (storageBasePath) nor the offload policies or "
                "broker configuration name the offloader's root (pass --offload-url file:///dir)"
            )
        directory = ledger_directory(
            local_path(location.root), loc.managed_ledger, loc.ledger_id, loc.uid
        )
        return _MapFileCopy(MapFileLedger(directory, loc.ledger_id))
    from pulsarctl_py.stores.tiered import s3
    from pulsarctl_py.stores.tiered.jcloud import (
        JcloudLedger,
        OffloadFormatError,
        check_format_version,
    )
    from pulsarctl_py.stores.tiered.locate import s3_location

    ledger = JcloudLedger(s3.S3Objects(s3_location(loc, location)), loc.ledger_id, loc.uid)
    for key, what in ((ledger.index_key, "index object"), (ledger.data_key, "data object")):
        head = ledger._call(key, ledger.source.head, key)
        try:
            check_format_version(head, f"{key} ({what})")
        except OffloadFormatError as exc:
            raise _FormatVersion(exc.one_line()) from None
    ledger.index  # noqa: B018 (reads and checks the index object)
    return _JcloudCopy(ledger)


def tiered_findings(
    run: Run,
    record: ManagedLedgerRecord,
    infos: list[mlpb.ManagedLedgerInfo.LedgerInfo],
) -> Iterator[Finding]:
    """The ``offload-*`` findings of one topic's offloaded ledgers."""
    from pulsarctl_py.stores.tiered.locate import from_ledger_info

    topic = record.ref.topic.full_name
    for li in infos:
        if not (li.HasField("offloadContext") and li.offloadContext.HasField("uidMsb")):
            continue
        loc = from_ledger_info(record.ref.name, li)
        run.report("ledger", topic, loc.ledger_id)
        yield from _ledger(run, topic, loc)


def _ledger(run: Run, topic: str, loc: TieredLedger) -> Iterator[Finding]:
    lid = loc.ledger_id
    details: dict[str, Any] = {"offload": loc.to_json()}
    location = None
    if loc.complete:
        location = run.source.tiered_location(loc)
        details["location"] = {"url": location.url(loc), **location.to_json()}
    if not loc.complete:
        yield Finding(
            ERROR if loc.bookkeeper_deleted else WARNING,
            "offload-incomplete",
            topic,
            lid,
            None,
            f"ledger {lid}: an interrupted offload (uid {loc.uid}, driver {loc.driver}: its "
            "offloadContext has no complete flag); the broker reads the ledger from "
            "BookKeeper and offloads it again, and what this offload wrote is left in the "
            "store"
            + (
                "; its BookKeeper copy is marked deleted: its data is gone"
                if loc.bookkeeper_deleted
                else ""
            ),
            details,
        )
        return
    assert location is not None
    try:
        copy = _open(run, loc, location)
    except StoreUnavailable:
        raise
    except (NotFoundError, DataError) as exc:
        yield _unopened(topic, loc, exc, details)
        return
    except LedgerctlError as exc:
        yield Finding(
            INFO,
            "offload-not-checked",
            topic,
            lid,
            None,
            f"ledger {lid}: its tiered copy was not checked: {exc.one_line()}",
            details,
        )
        return
    try:
        yield from _copy(run, topic, loc, copy, details)
    finally:
        copy.close()


def _unopened(topic: str, loc: TieredLedger, exc: LedgerctlError, details: dict) -> Finding:
    lid = loc.ledger_id
    reason = exc.one_line()
    details = {**details, "reason": reason}
    if loc.bookkeeper_deleted:
        return Finding(
            ERROR,
            "offload-data-lost",
            topic,
            lid,
            None,
            f"ledger {lid}: its data is gone: the BookKeeper copy was deleted after the "
            f"offload (bookkeeperDeleted) and the tiered copy cannot be read ({reason})",
            details,
        )
    if isinstance(exc, _FormatVersion):
        check, what = "offload-format-version", "is in an offload format not known"
    elif isinstance(exc, NotFoundError):
        check, what = "offload-missing", "is missing"
    else:
        check, what = "offload-unreadable", "cannot be read"
    return Finding(
        ERROR,
        check,
        topic,
        lid,
        None,
        f"ledger {lid}: its tiered copy {what} ({reason}); the broker reads an offloaded "
        "ledger from tiered storage first, so reads of it fail (its BookKeeper copy is "
        "still there)",
        details,
    )


def _copy(
    run: Run, topic: str, loc: TieredLedger, copy: _Copy, details: dict[str, Any]
) -> Iterator[Finding]:
    from pulsarctl_py.decoders.entry import decode_entry
    from pulsarctl_py.stores.tiered.filesystem import decode_options

    lid = loc.ledger_id
    last = loc.entries - 1
    gone = "; its BookKeeper copy is gone: these entries are lost" * loc.bookkeeper_deleted
    details = {**details, "where": copy.where}
    if copy.index_last is not None and copy.index_last != last:
        yield Finding(
            ERROR,
            "offload-index-mismatch",
            topic,
            lid,
            None,
            f"ledger {lid}: the offload index ends at entry {copy.index_last}, the managed "
            f"ledger records {loc.entries} entries (last entry {last})",
            {**details, "index_last_entry_id": copy.index_last, "ml_entries": loc.entries},
        )
    try:
        md = copy.metadata()
    except LedgerctlError as exc:
        md = None
        yield Finding(
            ERROR,
            "offload-unreadable",
            topic,
            lid,
            None,
            f"ledger {lid}: the ledger metadata embedded in its tiered copy cannot be read: "
            f"{exc.one_line()}",
            {**details, "reason": exc.one_line()},
        )
    if md is not None:
        yield from _metadata(topic, loc, md, details)
    options = decode_options(max_uncompressed=run.max_uncompressed)
    stored_bytes = 0
    count = 0
    damaged = 0
    stopped: str | None = None
    try:
        for read in copy.entries(last):
            count += 1
            run.stats.entries += 1
            problem = read.error
            if problem is None:
                stored_bytes += len(read.data)
                run.stats.payload_bytes += len(read.data)
                entry = decode_entry(read.data, options, (lid, read.entry_id))
                errors = [p for p in entry.problems if p.severity == ERROR]
                if errors:
                    problem = "; ".join(p.message for p in errors[:3])
            if problem is not None:
                damaged += 1
                yield Finding(
                    ERROR,
                    "offload-entry-corrupt",
                    topic,
                    lid,
                    read.entry_id,
                    f"ledger {lid} entry {read.entry_id} in tiered storage: {problem}{gone}",
                    {"where": copy.where, "reason": problem},
                )
    except StoreUnavailable:
        raise
    except LedgerctlError as exc:
        # the reader cannot go on (a truncated object): the entries after are unread
        stopped = exc.one_line()
        yield Finding(
            ERROR,
            "offload-entry-corrupt",
            topic,
            lid,
            count,
            f"ledger {lid}: entries {count}..{last} in tiered storage cannot be read: "
            f"{stopped}{gone}",
            {"where": copy.where, "reason": stopped, "first": count, "last": last},
        )
        return
    extra = copy.past(last)
    if count != loc.entries or extra is not None:
        holds = (
            f"its data ends after {count} entries"
            if extra is None
            else (f"its data holds entry {extra}, past them")
        )
        yield Finding(
            ERROR,
            "offload-data-mismatch",
            topic,
            lid,
            None,
            f"ledger {lid}: the managed ledger records {loc.entries} entries (last entry "
            f"{last}), {holds}",
            {**details, "ml_entries": loc.entries, "entries_read": count, "past": extra},
        )
    elif damaged == 0 and stored_bytes != loc.size:
        yield Finding(
            WARNING,
            "offload-data-mismatch",
            topic,
            lid,
            None,
            f"ledger {lid}: the managed ledger records size {loc.size}, the offloaded entries "
            f"hold {stored_bytes} bytes",
            {**details, "ml_size": loc.size, "stored_bytes": stored_bytes},
        )


def _metadata(topic: str, loc: TieredLedger, md: Any, details: dict[str, Any]) -> Iterator[Finding]:
    """The embedded ledger metadata against the managed ledger's LedgerInfo."""
    from pulsarctl_py.decoders import managed_ledger as mld

    lid = loc.ledger_id
    differs: list[str] = []
    severity = WARNING
    if not md.is_closed:
        differs.append(f"state {md.state.name} (the offloader offloads closed ledgers only)")
        severity = ERROR
    elif md.last_entry_id + 1 != loc.entries:
        differs.append(
            f"lastEntryId {md.last_entry_id} where the managed ledger records {loc.entries} entries"
        )
        severity = ERROR
    tags = md.pulsar()
    if tags.managed_ledger is not None and not mld.names_managed_ledger(
        tags.managed_ledger, loc.managed_ledger
    ):
        differs.append(f"managed ledger {tags.managed_ledger}, not {loc.managed_ledger}")
        severity = ERROR
    if md.is_closed and md.length != loc.size:
        differs.append(f"length {md.length} where the managed ledger records size {loc.size}")
    if differs:
        yield Finding(
            severity,
            "offload-metadata-mismatch",
            topic,
            lid,
            None,
            f"ledger {lid}: the ledger metadata embedded in its tiered copy says "
            + "; ".join(differs),
            {
                **details,
                "embedded": {
                    "state": md.state.name,
                    "last_entry_id": md.last_entry_id,
                    "length": md.length,
                    "managed_ledger": tags.managed_ledger,
                },
            },
        )
