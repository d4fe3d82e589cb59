"""Ledgers as an operator looks at them: ``ledger list`` and ``ledger meta``.

The list walks BookKeeper's ledgers (formats.md §9) with Pulsar's custom metadata decoded
(owning topic, cursor, compacted topic, schema), the entries of an open ledger counted from
storage as topic views count them (:mod:`pulsarctl_py.topics`); ``ledger meta`` shows one
ledger's metadata next to the bookie's view of it and what the storage reported about
itself; ``ledger meta --dump`` copies a ledger's stored metadata bytes to a file. A password
is never shown: only whether one is set. Everything here only reads the stores.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.errors import LedgerctlError, NotFoundError
from pulsarctl_py.topics import (
    Advance,
    length_at,
    location_json,
    no_advance,
    read_ledger_view,
    require_metadata,
    topic_not_found,
)

if TYPE_CHECKING:
    from pulsarctl_py.decoders.managed_ledger import TopicName
    from pulsarctl_py.ledgers import LedgerSource, LedgerView
    from pulsarctl_py.stores.metadata import LedgerRecord

LEDGER_KINDS = ("data", "cursor", "compacted", "schema", "unknown")


def _owner_topic(managed_ledger: str | None) -> str | None:
    if managed_ledger is None:
        return None
    try:
        return mld.TopicName.from_persistence_name(managed_ledger).full_name
    except LedgerctlError:
        return managed_ledger


@dataclass(slots=True)
class LedgerRow:
    """One line of ``ledger list``."""

    ledger_id: int
    path: str
    state: str | None
    entries: int | None
    lac: int | None
    length: int | None
    digest_type: str | None
    kind: str
    topic: str | None = None
    managed_ledger: str | None = None
    cursor: str | None = None
    compacted_topic: str | None = None
    schema_id: str | None = None
    ctime: int | None = None
    entries_source: str | None = None  # metadata, lac, ml-info, or None when unknown
    error: str | None = None
    #: where its entries are: "bookies", "tiered" (offloaded, no BookKeeper ledger left)
    #: or "both" (offloaded, its BookKeeper ledger kept)
    stored: str = "bookies"
    #: an offloaded ledger's location and where each part came from
    #: (:meth:`pulsarctl_py.stores.tiered.where.Location.to_json`)
    location: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "ledger_id": self.ledger_id,
            "path": self.path,
            "state": self.state,
            "entries": self.entries,
            "lac": self.lac,
            "length": self.length,
            "digest_type": self.digest_type,
            "kind": self.kind,
            "topic": self.topic,
            "managed_ledger": self.managed_ledger,
            "cursor": self.cursor,
            "compacted_topic": self.compacted_topic,
            "schema_id": self.schema_id,
            "ctime": self.ctime,
            "entries_source": self.entries_source,
            "error": self.error,
            "stored": self.stored,
        }
        if self.location is not None:
            out["location"] = self.location
        return out


def _ledger_row(source: LedgerSource, record: LedgerRecord) -> LedgerRow:
    md = record.metadata
    row = LedgerRow(
        ledger_id=record.ledger_id,
        path=record.path,
        state=None,
        entries=None,
        lac=None,
        length=None,
        digest_type=None,
        kind="unknown",
        error=record.error,
    )
    if md is None:
        return row
    tags = md.pulsar()
    row.state = md.state.name
    row.digest_type = md.digest_type.name if md.digest_type is not None else None
    row.kind = tags.kind
    row.managed_ledger = tags.managed_ledger
    row.topic = (
        tags.compacted_topic if tags.kind == "compacted" else _owner_topic(tags.managed_ledger)
    )
    row.cursor = tags.cursor
    row.compacted_topic = tags.compacted_topic
    row.schema_id = tags.schema_id
    row.ctime = md.ctime
    if md.is_closed:
        row.lac, row.length, row.entries_source = md.last_entry_id, md.length, "metadata"
    elif source.bookie is not None:
        view, error = read_ledger_view(source, record.ledger_id)
        if view is not None and view.lac is not None:
            row.lac = view.lac
            row.length = 0 if view.lac < 0 else length_at(source, record.ledger_id, view.lac)
            row.entries_source = "lac"
        elif error is not None and row.error is None:
            row.error = error
        last = view.last_stored if view is not None else None
        if last is not None and (row.lac is None or last > row.lac):
            # entries past the LAC count, as for the topic (see _complete_open)
            row.entries = last + 1
            row.length = length_at(source, record.ledger_id, last)
            row.entries_source = "storage"
            return row
    if row.lac is not None:
        row.entries = row.lac + 1
    return row


def _require_topic(source: LedgerSource, name: TopicName) -> None:
    """Raise NotFoundError unless the topic has a managed ledger (LedgerctlError when it is
    a partitioned topic: its partitions are the topics to ask for)."""
    from pulsarctl_py.stores.metadata import read_managed_ledger

    if read_managed_ledger(source.metadata, name) is not None:
        return
    raise topic_not_found(source, name)


def list_ledger_rows(
    source: LedgerSource,
    *,
    topic: str | None = None,
    kind: str | None = None,
    advance: Advance = no_advance,
) -> list[LedgerRow]:
    """Every ledger in the metadata store with its owner, filtered by topic and kind.

    ``topic`` keeps the topic's data and cursor ledgers and its compacted ledgers.
    """
    return list(iter_ledger_rows(source, topic=topic, kind=kind, advance=advance))


def iter_ledger_rows(
    source: LedgerSource,
    *,
    topic: str | None = None,
    kind: str | None = None,
    bookie: str | None = None,
    advance: Advance = no_advance,
) -> Iterator[LedgerRow]:
    """:func:`list_ledger_rows` one row at a time, in ledger id order (only the ids and
    paths are held; each ledger's metadata is read when its row is made). ``bookie``: only
    the ledgers with that bookie in one of their ensembles (``bookkeeper shell
    listledgers -bookieid``); a bookie that is neither registered nor in any ledger's
    ensemble is a NotFoundError."""
    from pulsarctl_py.stores.metadata import (
        iter_ledgers,
        require_bookkeeper_root,
        require_pulsar_data,
        resolve_topic,
    )

    store = require_metadata(source)
    if kind is not None and kind not in LEDGER_KINDS:
        raise LedgerctlError(f"unknown ledger kind {kind!r}: use one of {', '.join(LEDGER_KINDS)}")
    require_pulsar_data(store)
    require_bookkeeper_root(store)  # an empty chroot answers "no ledgers"
    wanted = resolve_topic(topic).full_name if topic else None
    found = False
    named = False  # some ledger's ensemble names ``bookie``
    # offloaded ledgers (their managed ledgers' offloadContext): "both" when BookKeeper
    # still lists them, else rows of their own, in ledger id order among the others
    if topic:
        from pulsarctl_py.stores.tiered.locate import managed_ledger_offloads

        every = managed_ledger_offloads(store, resolve_topic(topic).persistence_name)
    else:
        every = source.offloaded()  # one pass over the managed ledgers
    offloads = {lid: loc for lid, loc in every.items() if loc.complete}
    tiered_only = sorted(offloads) if bookie is None else []

    def wanted_row(row: LedgerRow) -> bool:
        return (kind is None or row.kind == kind) and (wanted is None or row.topic == wanted)

    for record in iter_ledgers(store):
        advance()
        while tiered_only and tiered_only[0] < record.ledger_id:
            row = _tiered_row(source, offloads[tiered_only.pop(0)])
            if wanted_row(row):
                found = True
                yield row
        if tiered_only and tiered_only[0] == record.ledger_id:
            tiered_only.pop(0)
        if bookie is not None:
            md = record.metadata
            if md is None or not any(bookie in b for b in md.ensembles.values()):
                continue
            named = True
        row = _ledger_row(source, record)
        if record.ledger_id in offloads:
            row.stored = "both"
            row.location = location_json(source, offloads[record.ledger_id])
        if not wanted_row(row):
            continue
        found = True
        yield row
    for lid in tiered_only:
        row = _tiered_row(source, offloads[lid])
        if wanted_row(row):
            found = True
            yield row
    if topic and not found:  # no ledger names it: is it a topic at all?
        _require_topic(source, resolve_topic(topic))
    if bookie is not None and not named:
        _require_bookie(store, bookie)


def _tiered_row(source: LedgerSource, loc: Any) -> LedgerRow:
    """A ledger only tiered storage holds (``bookkeeperDeleted``): what its managed
    ledger's LedgerInfo records (nothing is read from the object store to list it)."""
    entries = loc.entries
    location = location_json(source, loc)
    return LedgerRow(
        ledger_id=loc.ledger_id,
        path=location.get("url") or loc.where(),
        location=location,
        state=None,
        entries=entries,
        lac=entries - 1,
        length=loc.size,
        digest_type=None,
        kind="data",
        topic=_owner_topic(loc.managed_ledger),
        managed_ledger=loc.managed_ledger,
        entries_source="ml-info",
        stored="tiered",
    )


def _require_bookie(store: Any, bookie: str) -> None:
    """Raise NotFoundError unless ``bookie`` is a bookie BookKeeper knows (registered, or
    with a cookie): a mistyped id must not read as "this bookie holds no ledger"."""
    from pulsarctl_py.stores.live.registry import list_bookies

    known = sorted(r.bookie_id for r in list_bookies(store))
    if bookie in known:
        return
    raise NotFoundError(
        f"no bookie {bookie} in any ledger's ensemble nor registered"
        + (f" (bookies known: {', '.join(known)})" if known else " (no bookie is registered)")
    )


@dataclass(slots=True)
class LedgerMeta:
    """``ledger meta``: a ledger's metadata, where it is stored, and the bookie's view."""

    view: LedgerView
    path: str | None
    stat: Any = None
    znode_size: int | None = None
    #: what the bookie storage reported about itself (an unusable index, damaged files)
    storage_problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = self.view.to_json()
        md = self.view.metadata
        tags = md.pulsar() if md is not None else None
        out["path"] = self.path
        out["stat"] = self.stat.to_json() if self.stat is not None else None
        out["znode_size"] = self.znode_size
        out["format_version"] = md.format_version if md is not None else None
        out["topic"] = (
            None
            if tags is None
            else tags.compacted_topic
            if tags.kind == "compacted"
            else _owner_topic(tags.managed_ledger)
        )
        out["entries"] = None if self.view.lac is None else self.view.lac + 1
        if self.view.bookie is not None:
            out["bookie"]["limbo"] = self.view.bookie.limbo
        out["storage_problems"] = list(self.storage_problems)
        return out


def ledger_meta(source: LedgerSource, ledger_id: int) -> LedgerMeta:
    """One ledger: its full metadata, znode path and format, and what the bookie knows.

    The password is never part of the result (only whether one is set); nor is the
    bookie's master key (only whether it holds one).
    """
    from pulsarctl_py.stores.metadata import read_ledger

    if ledger_id < 0:
        raise LedgerctlError(f"invalid ledger id {ledger_id}")
    record = read_ledger(source.metadata, ledger_id) if source.metadata is not None else None
    view = source.ledger(ledger_id, unreachable_ok=True)
    problems = [p.message for p in source.storage_problems()]
    if view.last_entry_error is not None:
        problems.append(f"ledger {ledger_id} entry {view.last_stored}: {view.last_entry_error}")
    if record is None:
        return LedgerMeta(view, None, storage_problems=problems)
    return LedgerMeta(view, record.path, record.stat, len(record.raw), problems)


@dataclass(frozen=True, slots=True)
class MetadataDump:
    """What ``ledger meta --dump`` wrote: ``size`` bytes of the ledger's metadata, read
    from the znode (or key) ``path``, to the file ``to``."""

    ledger_id: int
    size: int
    path: str
    to: str


def dump_ledger_metadata(
    ledger_id: int, metadata_url: str | None, to: Path, *, force: bool = False
) -> MetadataDump:
    """Write the ledger's stored metadata bytes (as BookKeeper stores them, the password
    included) to ``to``: an output of :mod:`pulsarctl_py.outputs` prepared before the read,
    so a bad path fails first; refused over a file that is not an earlier dump unless
    ``force``."""
    from pulsarctl_py import outputs
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.stores.metadata import read_ledger

    out = outputs.prepare(to, outputs.LEDGER_METADATA, force=force)
    try:
        with LedgerSource.open(metadata_url, [], need_metadata=True, metadata_only=True) as src:
            assert src.metadata is not None
            record = read_ledger(src.metadata, ledger_id)
        if record is None:
            raise NotFoundError(f"ledger {ledger_id} has no metadata: nothing to dump")
        out.write_bytes(record.raw)
    except BaseException:
        out.discard()
        raise
    return MetadataDump(ledger_id, len(record.raw), record.path, str(out))
