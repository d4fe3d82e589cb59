"""BookKeeper ledgers in a metadata store: list them, read their metadata, allocate ids.

Paths and formats come from ``decoders/ledger_metadata.py``. Id allocation follows
BookKeeper's ``ZkLedgerIdGenerator`` / ``LongZkLedgerIdGenerator`` and Pulsar's
``PulsarLedgerIdGenerator`` (formats.md §9.2): create an ephemeral sequential node under
``<root>/idgen/ID-``, take the number, delete the node. Ids from 2**31-1 on switch to the
long generator: ``<root>/idgen-long/HOB-%010d/ID-<seq>`` gives ``(HOB << 32) | seq``, and
the existence of ``<root>/idgen-long`` means that switch has happened. In ZooKeeper the
sequence number is the parent's counter (%010d); in Pulsar's RocksDB store it is the
store-wide ``__metadata_sequentialId_key`` counter.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders.errors import LedgerctlError, StoreUnavailable
from pulsarctl_py.decoders.ledger_metadata import LedgerLayout, LedgerMetadata
from pulsarctl_py.errors import MetadataConflict

from .base import MetadataStore, Stat, join

IDGEN = "idgen"
IDGEN_LONG = "idgen-long"
ID_PREFIX = "ID-"
HOB_PREFIX = "HOB-"


@dataclass(slots=True)
class LedgerRecord:
    """One ledger znode: its id, path, stat and decoded metadata (or why it did not decode)."""

    ledger_id: int
    path: str
    stat: Stat | None
    metadata: LedgerMetadata | None
    raw: bytes = b""
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ledger_id": self.ledger_id, "path": self.path}
        if self.stat is not None:
            out["stat"] = self.stat.to_json()
        if self.metadata is not None:
            out["metadata"] = self.metadata.to_json()
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True, slots=True)
class LayoutInfo:
    """The ``<root>/LAYOUT`` znode."""

    layout_version: int
    factory_class: str
    manager_version: int
    layout: LedgerLayout | None


def bookkeeper_place(store: MetadataStore, root: str | None = None) -> tuple[MetadataStore, str]:
    """The store and ledgers root of BookKeeper's metadata: ``root`` in ``store`` when given,
    else where ``store`` says it lives (:meth:`MetadataStore.bookkeeper`)."""
    if root is not None:
        return store, root
    place = store.bookkeeper()
    return place.store, place.root


class BookKeeperRootMissing(StoreUnavailable):
    """BookKeeper's metadata is not where it was looked for (exit 3): without it every
    ledger would look missing, so nothing is judged."""


#: nodes BookKeeper keeps under its root (not ``ledgers``: a root one level too high has
#: that child, and is not BookKeeper's)
_ROOT_NODES = frozenset(
    {"LAYOUT", "INSTANCEID", "available", "cookies", "idgen", "idgen-long", "underreplication"}
)


def _looks_like_bookkeeper(name: str, root: str) -> bool:
    """Whether a child of a root is one BookKeeper keeps there: its own nodes (``LAYOUT``,
    ``INSTANCEID``, ``available``, ``cookies``, the id generators, ...), a ledger
    directory of the hierarchical layouts or a flat ledger znode."""
    return (
        name in _ROOT_NODES
        or lm.is_ledger_dir(name, 1)
        or lm.ledger_id_from_path(join(root, name), root) is not None
    )


def require_bookkeeper_root(store: MetadataStore, root: str | None = None) -> None:
    """Raise :class:`BookKeeperRootMissing` unless BookKeeper's metadata root (``root``
    in ``store``, else where ``store`` says it lives) is there and holds what BookKeeper
    keeps under it (``LAYOUT`` and ``INSTANCEID`` from the day the cluster was formatted,
    the bookie registry, ledger znodes). Checked once per store and root."""
    store, root = bookkeeper_place(store, root)
    checked = store.__dict__.setdefault("_bookkeeper_roots_checked", set())
    if root in checked:
        return
    if not any(_looks_like_bookkeeper(name, root) for name in store.children(root)):
        there = "is not there" if store.exists(root) is None else "holds nothing of BookKeeper"
        raise BookKeeperRootMissing(
            f"BookKeeper's metadata is not at {root} of {store.url} ({root} {there}: no "
            "LAYOUT, INSTANCEID, bookie registry or ledger), so no ledger can be looked up "
            "and none is judged missing: give where it is with --bookkeeper-metadata-url "
            "(or LEDGERCTL_BOOKKEEPER_METADATA_URL, bookkeeper_metadata_url in "
            "ledgerctl.toml, or --broker-conf with bookkeeperMetadataServiceUri)"
        )
    checked.add(root)


def read_layout(store: MetadataStore, root: str | None = None) -> LayoutInfo | None:
    """The ledger layout the cluster was initialised with, if the LAYOUT znode exists."""
    store, root = bookkeeper_place(store, root)
    node = store.get(join(root, "LAYOUT"))
    if node is None:
        return None
    return LayoutInfo(*lm.parse_layout(node.data))


def iter_ledger_paths(store: MetadataStore, root: str | None = None) -> Iterator[tuple[int, str]]:
    """Every ledger znode under ``root`` (any layout), in ledger id order."""
    store, root = bookkeeper_place(store, root)
    require_bookkeeper_root(store, root)
    found: list[tuple[int, str]] = []

    def descend(path: str, depth: int) -> None:
        for name in store.children(path):
            child = join(path, name)
            if depth == 1 and name in lm.NON_LEDGER_NODES:
                continue
            ledger_id = lm.ledger_id_from_path(child, root)
            if ledger_id is not None:
                found.append((ledger_id, child))
            elif depth < 5 and lm.is_ledger_dir(name, depth):
                descend(child, depth + 1)

    descend(root, 1)
    found.sort()
    return iter(found)


def _record(store: MetadataStore, ledger_id: int, path: str) -> LedgerRecord | None:
    node = store.get(path)
    if node is None:
        return None
    try:
        md = lm.parse(node.data, ledger_id)
    except LedgerctlError as exc:
        return LedgerRecord(ledger_id, path, node.stat, None, node.data, exc.one_line())
    error = f"missing required fields: {', '.join(md.missing)}" if md.missing else None
    return LedgerRecord(ledger_id, path, node.stat, md, node.data, error)


def list_ledgers(
    store: MetadataStore, root: str | None = None, *, with_metadata: bool = True
) -> list[LedgerRecord]:
    """Every ledger under ``root`` with its metadata; damaged ones carry ``error``."""
    return list(iter_ledgers(store, root, with_metadata=with_metadata))


def iter_ledgers(
    store: MetadataStore, root: str | None = None, *, with_metadata: bool = True
) -> Iterator[LedgerRecord]:
    """:func:`list_ledgers` one ledger at a time: only the ids and paths are held, each
    ledger's metadata is read when its turn comes."""
    store, root = bookkeeper_place(store, root)
    for ledger_id, path in iter_ledger_paths(store, root):
        if not with_metadata:
            yield LedgerRecord(ledger_id, path, None, None)
            continue
        record = _record(store, ledger_id, path)
        if record is not None:  # deleted while listing
            yield record


def read_ledger(
    store: MetadataStore,
    ledger_id: int,
    root: str | None = None,
    layout: LedgerLayout | str | None = None,
) -> LedgerRecord | None:
    """One ledger's record, or None if no znode holds it.

    Without ``layout`` the hierarchical path is tried first, then the flat one. Where
    BookKeeper's root is not there at all, :class:`BookKeeperRootMissing` instead of None
    (every ledger would look missing).
    """
    store, root = bookkeeper_place(store, root)
    layouts = (
        [LedgerLayout(layout)]
        if layout is not None
        else [LedgerLayout.HIERARCHICAL, LedgerLayout.FLAT, LedgerLayout.LONG_HIERARCHICAL]
    )
    for candidate in layouts:
        path = lm.ledger_path(ledger_id, candidate, root)
        record = _record(store, ledger_id, path)
        if record is not None:
            return record
    require_bookkeeper_root(store, root)  # "no such ledger" only where BookKeeper's root is
    return None


def create_ledger(
    store: MetadataStore,
    ledger_id: int,
    metadata: LedgerMetadata,
    root: str | None = None,
    layout: LedgerLayout | str = LedgerLayout.HIERARCHICAL,
) -> tuple[str, Stat]:
    """Write a new ledger's metadata (format v3) where BookKeeper would; fails if it exists."""
    store, root = bookkeeper_place(store, root)
    path = lm.ledger_path(ledger_id, layout, root)
    return store.put(path, lm.build(metadata), expected_version=-1)


def _sequence(created: str, prefix: str) -> int:
    suffix = created[len(prefix) :] if created.startswith(prefix) else ""
    if not suffix.isdigit():
        raise LedgerctlError(f"the id generator created {created!r}, not {prefix}<number>")
    return int(suffix)


def _next_sequence(store: MetadataStore, prefix: str) -> int:
    created, _ = store.put(prefix, b"", -1, ephemeral=True, sequential=True)
    try:
        return _sequence(created, prefix)
    finally:
        try:
            store.delete(created)
        except MetadataConflict:
            pass  # already gone (session ended); the number is ours anyway


def _ensure(store: MetadataStore, path: str) -> None:
    if store.exists(path) is None:
        try:
            store.put(path, b"", -1)
        except MetadataConflict:
            pass  # created concurrently


def allocate_ledger_id(
    store: MetadataStore,
    root: str | None = None,
    layout: LedgerLayout | str = LedgerLayout.HIERARCHICAL,
    *,
    skip_existing: bool = True,
    max_attempts: int = 1000,
) -> int:
    """Take a new ledger id the way BookKeeper's id generator does (the store must be writable).

    With ``skip_existing`` an id whose ledger znode already exists is passed over, as
    BookKeeper's ledger creation retries on "ledger exists" (a restored tree restarts the
    generator's counter, so old ids come round again).
    """
    store, root = bookkeeper_place(store, root)
    layout = LedgerLayout(layout)
    for _ in range(max_attempts):
        ledger_id = _allocate_once(store, root, layout)
        if not skip_existing or store.exists(lm.ledger_path(ledger_id, layout, root)) is None:
            return ledger_id
    raise LedgerctlError(f"no free ledger id after {max_attempts} attempts under {root}")


def _allocate_once(store: MetadataStore, root: str, layout: LedgerLayout) -> int:
    if layout is LedgerLayout.FLAT:
        return _next_sequence(store, join(root, ID_PREFIX))
    long_path = join(root, IDGEN_LONG)
    if layout is not LedgerLayout.LEGACY_HIERARCHICAL and store.exists(long_path) is None:
        short = join(root, IDGEN)
        _ensure(store, short)
        ledger_id = _next_sequence(store, join(short, ID_PREFIX))
        if 0 <= ledger_id < lm.SHORT_ID_LIMIT:
            return ledger_id
        _ensure(store, long_path)  # 31-bit ids are used up: switch to 63-bit ids for good
    elif layout is LedgerLayout.LEGACY_HIERARCHICAL:
        short = join(root, IDGEN)
        _ensure(store, short)
        ledger_id = _next_sequence(store, join(short, ID_PREFIX))
        if not 0 <= ledger_id < lm.SHORT_ID_LIMIT:
            raise LedgerctlError("legacy hierarchical layout has run out of 31-bit ledger ids")
        return ledger_id
    return _allocate_long(store, long_path)


def _allocate_long(store: MetadataStore, long_path: str) -> int:
    for _ in range(8):
        highs = [
            int(name[len(HOB_PREFIX) :])
            for name in store.children(long_path)
            if name.startswith(HOB_PREFIX) and name[len(HOB_PREFIX) :].isdigit()
        ]
        high = max(highs) if highs else 1
        hob = join(long_path, f"{HOB_PREFIX}{high:010d}")
        if not highs:
            _ensure(store, hob)
            continue
        low = _next_sequence(store, join(hob, ID_PREFIX))
        if 0 <= low < lm.SHORT_ID_LIMIT:
            return (high << 32) | low
        _ensure(store, join(long_path, f"{HOB_PREFIX}{high + 1:010d}"))
    raise LedgerctlError(f"could not allocate a 63-bit ledger id under {long_path}")
