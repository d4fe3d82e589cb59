"""Which store a plan was made for, so that it is applied there and nowhere else.

A plan records (:class:`Binding`):

* the metadata store's URL, absolute (a ``rocksdb://`` path made absolute: the demo's
  ``ledgerctl.toml`` says ``rocksdb://metadata``, which names another store in every
  directory);
* the store's identity (:func:`store_identity`), so that the same URL naming another
  store (a ZooKeeper rebuilt at the same address, a demo directory created again at the
  same path) is refused even when every version happens to match:

  - ``bookkeeper_instance_id``: BookKeeper's cluster instance id, ``<root>/INSTANCEID``
    (a random UUID written when the cluster is formatted; every bookie cookie carries
    it), when the store holds BookKeeper's metadata;
  - ``rocksdb_identity``: for Pulsar's RocksDB store, the database's ``IDENTITY`` file
    (a UUID RocksDB writes when it creates a database and keeps for its life). The
    store's ``__metadata_instanceId_key`` is no identity: Pulsar increments it on every
    open (upstream ``RocksdbMetadataStore``);
  - ``anchor``: the creation id (:attr:`Stat.creation`: ZooKeeper's czxid; the RocksDB
    store's creation time) of the first of ``/managed-ledgers`` and the ledgers root that
    exists. Every non-empty plan changes a node under one of them, so an identity always
    exists and ledgerctl never has to write a marker of its own into the store;
* the metadata roots the plan's keys must lie under (``/managed-ledgers``, the ledgers
  root);
* each stopped bookie's ledger directory whose indexes the plan changes, with its identity
  (:func:`bookie_dir_identity`): the sha256 of its cookie (``current/VERSION``, which names
  the bookie and the cluster's instance id) and the ``IDENTITY`` of its DbLedgerStorage
  RocksDB indexes.

:func:`check_binding` compares all of it with the store a plan is applied to (or undone
on) before anything is read for writing; a difference is one line naming what differs.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.managed_ledger import ML_ROOT
from pulsarctl_py.stores.metadata.base import MetadataStore, join

#: the roots ledgerctl's repairs write under (BookKeeper's default ledgers root)
DEFAULT_ROOTS = {"managed_ledgers": ML_ROOT, "ledgers": lm.DEFAULT_ROOT}
#: the identity key of BookKeeper's instance id (every plan records it)
BOOKKEEPER_INSTANCE = "bookkeeper_instance_id"
#: at most this much of an IDENTITY or INSTANCEID is kept (they are UUIDs)
_ID_MAX = 256


class PlanBindingError(LedgerctlError):
    """A plan given to a store it was not made for (exit 2)."""


def absolute_url(url: str) -> str:
    """The metadata URL with a ``rocksdb://`` path made absolute (other URLs as given)."""
    from pulsarctl_py.stores.metadata.url import parse_metadata_url

    parsed = parse_metadata_url(url)
    if parsed.scheme == "rocksdb":
        return "rocksdb://" + os.path.abspath(parsed.target)
    return str(parsed)


def same_url(a: str, b: str) -> bool:
    """Whether two metadata URLs name the same store (RocksDB paths through symlinks)."""
    from pulsarctl_py.stores.metadata.url import parse_metadata_url

    pa, pb = parse_metadata_url(a), parse_metadata_url(b)
    if pa.scheme == pb.scheme == "rocksdb":
        return os.path.realpath(pa.target) == os.path.realpath(pb.target)
    return str(pa) == str(pb)


def _read_small(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            data = fh.read(_ID_MAX + 1)
    except OSError:
        return None
    if len(data) > _ID_MAX:
        return None
    return data.decode("utf-8", errors="replace").strip() or None


def store_identity(store: MetadataStore, roots: dict[str, str] | None = None) -> dict[str, str]:
    """What tells this metadata store apart from any other (see the module docstring)."""
    roots = roots or DEFAULT_ROOTS
    identity: dict[str, str] = {}
    path = getattr(store, "path", None)
    if isinstance(path, Path):  # Pulsar's RocksDB store: the database's own identity
        found = _read_small(path / "IDENTITY")
        if found is not None:
            identity["rocksdb_identity"] = found
    # BookKeeper's instance id where its metadata lives (another root, or another store)
    place = store.bookkeeper()
    node = place.store.get(join(place.root, "INSTANCEID"))
    if node is not None:
        identity[BOOKKEEPER_INSTANCE] = node.data[:_ID_MAX].decode("utf-8", "replace")
    for anchor in (roots["managed_ledgers"], roots["ledgers"]):
        st = store.exists(anchor)
        if st is not None:
            identity["anchor"] = f"{anchor} {st.creation}"
            break
    return identity


def bookie_dir_identity(current: Path) -> dict[str, str]:
    """What tells a bookie ledger directory (``current/``) apart: its cookie's sha256, the
    ``IDENTITY`` of its RocksDB indexes (whichever exist)."""
    identity: dict[str, str] = {}
    try:
        with open(current / "VERSION", "rb") as fh:
            cookie = fh.read(64 * 1024)
        identity["cookie_sha256"] = hashlib.sha256(cookie).hexdigest()
    except OSError:
        pass
    for name in ("ledgers", "locations"):
        found = _read_small(current / name / "IDENTITY")
        if found is not None:
            identity[f"{name}_identity"] = found
    return identity


@dataclass(slots=True)
class Binding:
    """The store a plan was made for."""

    metadata_url: str
    identity: dict[str, str] = field(default_factory=dict)
    roots: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ROOTS))
    #: ledger dir (absolute ``current/`` path) -> its identity
    bookie_dirs: dict[str, dict[str, str]] = field(default_factory=dict)
    #: the offload locations (filesystem roots, buckets) the plan deletes in, each with
    #: what identifies it (:func:`pulsarctl_py.plans.offload.location_binding`)
    offload: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, store: MetadataStore, bookie_dirs: list[Path] | None = None) -> Binding:
        """The binding of a plan made on ``store``: refused (one line, exit 3) when
        BookKeeper's metadata there has no instance id, so that the plan names its
        BookKeeper cluster (a store whose ledgers root is not BookKeeper's would make every
        ledger look missing)."""
        from pulsarctl_py.stores.metadata.ledgers import BookKeeperRootMissing

        roots = dict(DEFAULT_ROOTS)
        place = store.bookkeeper()
        if place.store is store:
            roots["ledgers"] = place.root
        identity = store_identity(store, roots)
        if BOOKKEEPER_INSTANCE not in identity:
            raise BookKeeperRootMissing(
                f"no BookKeeper instance id at {place.root}/INSTANCEID of {place.store.url}: "
                "a plan is bound to one BookKeeper cluster and this store does not say "
                "which (is BookKeeper's metadata elsewhere? give --bookkeeper-metadata-url "
                "or --broker-conf)"
            )
        return cls(
            absolute_url(store.url),
            identity,
            roots,
            {str(d): bookie_dir_identity(d) for d in sorted(bookie_dirs or [])},
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "identity": dict(self.identity),
            "roots": dict(self.roots),
            "bookie_dirs": [
                {"path": path, "identity": dict(ident)} for path, ident in self.bookie_dirs.items()
            ],
        }
        if self.offload:
            out["offload"] = [dict(b) for b in self.offload]
        return out

    @classmethod
    def from_json(cls, url: str, obj: Any, *, empty: bool = False) -> Binding:
        """The binding a plan recorded (``empty``: the plan changes nothing, and a store
        with no identity could not be told apart but is not written either)."""

        def texts(value: Any, what: str) -> dict[str, str]:
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise LedgerctlError(f"plan: the store's {what} is not a map of text")
            return dict(value)

        if not isinstance(obj, dict):
            raise LedgerctlError('plan: "store" (the store it was made for) is missing')
        roots = texts(obj.get("roots"), "roots")
        if set(roots) != set(DEFAULT_ROOTS):
            raise LedgerctlError(
                "plan: the store's roots are not the managed-ledger and ledgers roots"
            )
        if roots["managed_ledgers"] != ML_ROOT:
            raise LedgerctlError(f"plan: the managed-ledger root must be {ML_ROOT}")
        _check_root(roots["ledgers"])
        raw_dirs = obj.get("bookie_dirs", [])
        if not isinstance(raw_dirs, list):
            raise LedgerctlError("plan: the store's bookie_dirs is not a list")
        dirs: dict[str, dict[str, str]] = {}
        for item in raw_dirs:
            if not isinstance(item, dict) or not isinstance(item.get("path"), str):
                raise LedgerctlError("plan: a bookie directory lacks its path")
            path = item["path"]
            if not os.path.isabs(path) or os.path.normpath(path) != path or path == "/":
                raise LedgerctlError(f"plan: bookie directory {path!r} is not an absolute path")
            dirs[path] = texts(item.get("identity", {}), f"identity of {path}")
        identity = texts(obj.get("identity"), "identity")
        if not identity and not empty:
            raise LedgerctlError("plan: the store's identity is missing")
        if not empty and BOOKKEEPER_INSTANCE not in identity:
            raise LedgerctlError(
                "plan: it records no BookKeeper instance id (the BookKeeper cluster it was "
                "made for): make it again with this version of ledgerctl"
            )
        raw_offload = obj.get("offload", [])
        if not isinstance(raw_offload, list) or not all(
            isinstance(b, dict) and isinstance(b.get("location"), str) for b in raw_offload
        ):
            raise LedgerctlError("plan: the store's offload locations are not a list of locations")
        return cls(url, identity, roots, dirs, [dict(b) for b in raw_offload])


def _check_root(root: str) -> None:
    from pulsarctl_py.stores.metadata.base import validate_path

    validate_path(root)
    if root == "/" or root == ML_ROOT or root.startswith(ML_ROOT + "/"):
        raise LedgerctlError(f"plan: {root!r} cannot be the ledgers root")


def check_binding(binding: Binding, store: MetadataStore) -> None:
    """Refuse (:class:`PlanBindingError`) a store that is not the one the plan was made for."""
    if not same_url(binding.metadata_url, store.url):
        raise PlanBindingError(
            f"the plan was made for {binding.metadata_url}, not {absolute_url(store.url)}: "
            "a plan is applied only to the store it was made for"
        )
    now = store_identity(store, binding.roots)
    if now != binding.identity:
        differs = sorted(
            k for k in set(now) | set(binding.identity) if now.get(k) != binding.identity.get(k)
        )
        raise PlanBindingError(
            f"{absolute_url(store.url)} is not the store the plan was made for (its "
            f"{', '.join(differs)} differ{'s' if len(differs) == 1 else ''}): a store "
            "at the same place is another store; make the plan again on this one"
        )
    for path, identity in binding.bookie_dirs.items():
        current = Path(path)
        if os.path.realpath(current) != path:
            raise PlanBindingError(
                f"the bookie directory {path} the plan was made for is gone or moved (a "
                "symbolic link now stands in its path)"
                if current.exists()
                else f"the bookie directory {path} the plan was made for is gone"
            )
        if bookie_dir_identity(current) != identity:
            raise PlanBindingError(
                f"{path} is not the bookie directory the plan was made for (its cookie or "
                "index identity differs); make the plan again"
            )
