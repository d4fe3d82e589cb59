"""Drafting a plan: the store as the changes drafted so far would leave it.

A repair never writes directly: it drafts its changes on a :class:`Draft` (a view of the
store with the changes laid over it, so that several repairs can follow one another), and
the draft becomes a :class:`~.document.Plan` (:meth:`Draft.plan`), bound to the store.

Every writer drafts its changes this way: ``set``/``delete`` of a key with its kind (a
new ledger's metadata is a ``create`` of kind ``ledger``), ``check`` of a key a judgment
was made on (its version checked when the plan is applied, nothing written), the value a
key held when a long computation began (:meth:`Draft.read_before`: the compare-and-set is
against that read), the entries of a stopped bookie's indexes a plan deletes
(:func:`draft_deletion`), and the ledgers written before the plan (``written``). A new
kind of change needs its key rule and value check in :mod:`.validate`, and the ledgers
its value names in :mod:`.references`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.errors import LedgerctlError

from .binding import Binding
from .bookie_index import BookieChange, find_index_entries
from .change import Change, Unreachable
from .document import UNLOAD_WARNING, Plan

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.stores.metadata.base import MetadataStore, Node

    from .offload import OffloadChange
    from .written import Written


class Draft:
    """The store as the changes drafted so far would leave it; reads go through it.

    Nothing is written: :meth:`plan` turns the draft into a :class:`Plan` holding, per
    key, the value in the store now (its version and creation id) and the last drafted
    value, bound to the store (and to the bookie directories in ``bookie_dirs``).
    """

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._orig: dict[str, Node | None] = {}
        self._new: dict[str, bytes | None] = {}
        self._kind: dict[str, str] = {}
        self._why: dict[str, list[str]] = {}
        #: keys a judgment was made on: kept in the plan as checks when left unchanged
        self._checks: set[str] = set()
        self.repairs: list[dict[str, Any]] = []
        self.unreachable = Unreachable()
        self.warnings: list[str] = []
        self.topics: list[str] = []
        #: bookie index entries to delete (:func:`draft_deletion`)
        self.bookie: list[BookieChange] = []
        #: the stopped bookies' ledger dirs the bookie changes are in (bound to the plan)
        self.bookie_dirs: set[Path] = set()
        #: ledgers written before the plan, which it swaps in (undo deletes them)
        self.written: list[Written] = []
        #: offload objects and directories to delete (:mod:`.offload`)
        self.offload: list[OffloadChange] = []

    def ledgers_root(self) -> str:
        """The root of BookKeeper's ledger metadata in this store (``/ledgers`` unless the
        cluster keeps it elsewhere: ``bookkeeperMetadataServiceUri``). A plan reads and
        changes keys of one store only: ledger metadata kept in another store is refused."""
        place = self.store.bookkeeper()
        if place.store is not self.store:
            raise LedgerctlError(
                f"BookKeeper's metadata is in another store ({place.url}) than the topics' "
                f"({self.store.url}): a plan that reads or changes ledger metadata needs both "
                "in one store (another root of the same store is fine)"
            )
        return place.root

    def _load(self, key: str) -> None:
        if key not in self._orig:
            self._orig[key] = self.store.get(key)

    def read_before(self, key: str, node: Node | None) -> None:
        """``key`` held ``node`` when the work began (read before a long computation, as
        ``compact`` reads the ``__compaction`` cursor before it computes): the plan's
        compare-and-set is against that read, so that a change made meanwhile fails the
        apply instead of being lost."""
        if key in self._orig:
            raise LedgerctlError(f"{key} was read through the draft already")
        self._orig[key] = node

    def get(self, key: str) -> bytes | None:
        if key in self._new:
            return self._new[key]
        self._load(key)
        node = self._orig[key]
        return None if node is None else node.data

    def set(self, key: str, kind: str, data: bytes, why: str) -> None:
        self._write(key, kind, bytes(data), why)

    def delete(self, key: str, kind: str, why: str) -> None:
        self._write(key, kind, None, why)

    def check(self, key: str, kind: str, why: str) -> None:
        """A judgment of the plan was made on ``key`` as it is now: unless a change is
        drafted to it, the plan keeps it as a check (its version checked when the plan is
        applied, nothing written), so that the plan applies only while it is unchanged."""
        self._load(key)
        if key not in self._new:
            now = self.get(key)
            if now is None:
                raise LedgerctlError(f"{key} does not exist: there is nothing to check")
            self._write(key, kind, now, why)
        else:
            self._why.setdefault(key, []).append(why)
        self._checks.add(key)

    def _write(self, key: str, kind: str, data: bytes | None, why: str) -> None:
        self._load(key)
        self._new[key] = data
        self._kind[key] = kind
        self._why.setdefault(key, []).append(why)

    def topic(self, name: str) -> None:
        if name not in self.topics:
            self.topics.append(name)

    def plan(self, binding: Binding | None = None) -> Plan:
        """The plan of what is drafted, bound to the store (and to the bookie
        directories of its bookie changes and written ledgers), or to ``binding``: the
        binding a plan file saved while its ledgers were written has already
        (:class:`~.writing.PlanFile`)."""
        changes = []
        for key, new in self._new.items():
            node = self._orig[key]
            old = None if node is None else node.data
            if old == new and key not in self._checks:
                continue  # drafted back to what it was
            changes.append(
                Change(
                    key,
                    self._kind[key],
                    old,
                    new,
                    None if node is None else node.stat.version,
                    self._why[key],
                    None if node is None else node.stat.creation,
                )
            )
        warnings = list(self.warnings)
        if changes and self.topics:
            warnings.insert(0, UNLOAD_WARNING)
        if binding is None:
            dirs = self.bookie_dirs | {Path(w.files["current"]) for w in self.written if w.files}
            binding = Binding.of(self.store, sorted(dirs))
            if self.offload:
                from .offload import location_binding

                binding.offload = location_binding(self.offload)
        return Plan(
            metadata_url=binding.metadata_url,
            changes=changes,
            repairs=list(self.repairs),
            unreachable=self.unreachable,
            warnings=warnings,
            topics=list(self.topics),
            bookie=list(self.bookie),
            binding=binding,
            written=list(self.written),
            offload=list(self.offload),
        )


def make_plan(
    metadata_url: str | None,
    bookie_dirs: list[Path] | None,
    build: Callable[[Draft, LedgerSource], Any],
    *,
    metadata_only: bool = False,
) -> Plan:
    """The plan of what ``build`` drafts on the stores: the metadata store of
    ``metadata_url`` (read only) and the bookie directories (none: the running bookies),
    as a :class:`~pulsarctl_py.ledgers.LedgerSource` that the recipe reads through
    (``metadata_only``: no bookie store opened, for a recipe that reads no entry)."""
    from pulsarctl_py.ledgers import LedgerSource

    with LedgerSource.open(
        metadata_url, bookie_dirs or None, need_metadata=True, metadata_only=metadata_only
    ) as source:
        assert source.metadata is not None
        draft = Draft(source.metadata)
        build(draft, source)
        return draft.plan()


# -- a stopped bookie's index entries -------------------------------------------------------


def _ledger_dirs(source: LedgerSource | None) -> list[Path]:
    """The offline bookie's ledger dirs (none for running bookies or no bookie)."""
    layout = getattr(source.bookie, "layout", None) if source is not None else None
    return [] if layout is None else [Path(d).resolve() for d in layout.ledger_dirs]


def draft_deletion(
    draft: Draft, source: LedgerSource | None, ledgers: Mapping[int, str]
) -> list[BookieChange]:
    """Add to ``draft`` the deletion of every index entry of ``ledgers`` (ledger id -> why)
    in the offline bookie's ledger dirs of ``source``; return the changes (none without
    bookie dirs)."""
    changes = []
    for current in _ledger_dirs(source):
        for change in find_index_entries(current, ledgers):
            change.why.append(ledgers[change.ledger_id])
            changes.append(change)
            draft.bookie_dirs.add(current)
    changes.sort(key=lambda c: c.ledger_id)  # stable: each ledger's own order kept
    draft.bookie.extend(changes)
    tail = getattr(source.bookie, "journal_tail_ledgers", None) if source is not None else None
    replayed = sorted(set(ledgers) & tail()) if tail is not None else []
    if replayed:
        draft.warnings.append(
            f"ledger(s) {', '.join(map(str, replayed))} have records in the bookie's journal "
            "after its lastMark: a restarting bookie replays them into its index (stop the "
            "bookie cleanly so that it flushes first; its garbage collection removes them "
            "later either way)"
        )
    return changes
