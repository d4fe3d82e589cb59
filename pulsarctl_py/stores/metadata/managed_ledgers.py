"""Topics (managed ledgers) and their cursors in a metadata store.

Tree (formats.md §8.3): ``/managed-ledgers/<tenant>/<namespace>/persistent/<topic>`` holds a
ManagedLedgerInfo, each child of it a ManagedCursorInfo; v1 names have a cluster level.
A cursor's state is in its znode while ``cursorsLedgerId == -1``; otherwise the broker
reads the last PositionInfo entry of that cursor ledger (the znode then holds an older
snapshot). Reading that ledger is the ledger store's job: here it is only named.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.managed_ledger import DecodedInfo, TopicName
from pulsarctl_py.decoders.nodes import with_text_notes
from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

from .base import MetadataStore, Stat, join

ML_ROOT = mld.ML_ROOT


@dataclass(frozen=True, slots=True)
class ManagedLedgerRef:
    """Where a topic's managed ledger lives."""

    name: str  # persistence name, e.g. public/default/persistent/my-topic
    path: str
    topic: TopicName

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "topic": self.topic.full_name}


@dataclass(slots=True)
class CursorRecord:
    """One cursor znode, decoded."""

    znode_name: str  # URL-encoded subscription name
    path: str
    stat: Stat
    info: DecodedInfo[mlpb.ManagedCursorInfo] | None
    error: str | None = None

    @property
    def name(self) -> str:
        """The subscription name (the znode name URL-decoded)."""
        return cursor_name(self.znode_name)

    @property
    def cursors_ledger_id(self) -> int | None:
        if self.info is None or not self.info.message.HasField("cursorsLedgerId"):
            return None
        return self.info.message.cursorsLedgerId

    @property
    def state_in(self) -> str:
        """ "znode" when the znode holds the state, "ledger" when the cursor ledger does."""
        ledger = self.cursors_ledger_id
        return "znode" if ledger is None or ledger == -1 else "ledger"

    @property
    def mark_delete(self) -> tuple[int, int] | None:
        """The mark-delete position recorded in the znode (a snapshot when state_in=ledger)."""
        if self.info is None:
            return None
        msg = self.info.message
        if not (msg.HasField("markDeleteLedgerId") and msg.HasField("markDeleteEntryId")):
            return None
        return msg.markDeleteLedgerId, msg.markDeleteEntryId

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "znode": self.znode_name,
            "path": self.path,
            "stat": self.stat.to_json(),
            "state_in": self.state_in,
            "cursors_ledger_id": self.cursors_ledger_id,
            "mark_delete": "{}:{}".format(*self.mark_delete) if self.mark_delete else None,
        }
        if self.info is not None:
            out["info"] = self.info.to_json()
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(slots=True)
class ManagedLedgerRecord:
    """A topic's ML znode and its cursors, decoded."""

    ref: ManagedLedgerRef
    stat: Stat
    info: DecodedInfo[mlpb.ManagedLedgerInfo] | None
    cursors: list[CursorRecord] = field(default_factory=list)
    error: str | None = None

    @property
    def ledger_ids(self) -> list[int]:
        return [] if self.info is None else [li.ledgerId for li in self.info.message.ledgerInfo]

    @property
    def properties(self) -> dict[str, str]:
        return {} if self.info is None else mld.ml_properties(self.info.message)

    @property
    def terminated_at(self) -> tuple[int, int] | None:
        if self.info is None or not self.info.message.HasField("terminatedPosition"):
            return None
        pos = self.info.message.terminatedPosition
        return pos.ledgerId, pos.entryId

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            **self.ref.to_json(),
            "stat": self.stat.to_json(),
            "ledger_ids": self.ledger_ids,
            "properties": self.properties,
            "terminated_at": "{}:{}".format(*self.terminated_at) if self.terminated_at else None,
            "cursors": [c.to_json() for c in self.cursors],
        }
        if self.info is not None:
            out["info"] = self.info.to_json()
        if self.error is not None:
            out["error"] = self.error
        return with_text_notes(out)


def resolve_topic(topic: str | TopicName) -> TopicName:
    """A topic name (``persistent://...``, short forms) or a persistence name."""
    if isinstance(topic, TopicName):
        return topic
    text = topic.strip()
    if text.startswith(ML_ROOT + "/"):
        return TopicName.from_ml_path(text)
    parts = text.strip("/").split("/")
    if "://" not in text and (
        (len(parts) == 4 and parts[2] in mld.DOMAINS)
        or (len(parts) == 5 and parts[3] in mld.DOMAINS)
    ):
        return TopicName.from_persistence_name(text)
    return TopicName.parse(text)


def list_managed_ledgers(store: MetadataStore) -> list[ManagedLedgerRef]:
    """Every managed ledger under /managed-ledgers (v2 and v1 names), sorted by name."""
    out: list[ManagedLedgerRef] = []
    for tenant in store.children(ML_ROOT):
        tenant_path = join(ML_ROOT, tenant)
        for second in store.children(tenant_path):
            second_path = join(tenant_path, second)
            below = store.children(second_path)
            domains = [d for d in below if d in mld.DOMAINS]
            if domains:  # v2: tenant/namespace/domain/topic
                for domain in domains:
                    out.extend(_topics(store, join(second_path, domain)))
                continue
            for namespace in below:  # v1: tenant/cluster/namespace/domain/topic
                ns_path = join(second_path, namespace)
                for domain in store.children(ns_path):
                    if domain in mld.DOMAINS:
                        out.extend(_topics(store, join(ns_path, domain)))
    out.sort(key=lambda ref: ref.name)
    return out


def managed_ledger_dirs(store: MetadataStore) -> list[tuple[str, str]]:
    """(the start of its topics' full names, its path) of every folder of managed ledgers,
    in the order of full topic names: domain first, then tenant, [cluster,] namespace.

    Listings go through these one folder at a time (:func:`iter_managed_ledgers`): a store
    of many topics is never held whole."""
    dirs: list[tuple[str, str]] = []
    for tenant in store.children(ML_ROOT):
        tenant_path = join(ML_ROOT, tenant)
        for second in store.children(tenant_path):
            second_path = join(tenant_path, second)
            below = store.children(second_path)
            domains = [d for d in below if d in mld.DOMAINS]
            if domains:  # v2: tenant/namespace/domain/topic
                for domain in domains:
                    dirs.append((f"{domain}://{tenant}/{second}/", join(second_path, domain)))
                continue
            for namespace in below:  # v1: tenant/cluster/namespace/domain/topic
                ns_path = join(second_path, namespace)
                for domain in store.children(ns_path):
                    if domain in mld.DOMAINS:
                        prefix = f"{domain}://{tenant}/{second}/{namespace}/"
                        dirs.append((prefix, join(ns_path, domain)))
    dirs.sort()
    return dirs


def iter_managed_ledgers(store: MetadataStore) -> Iterator[list[ManagedLedgerRef]]:
    """The managed ledgers of each folder of :func:`managed_ledger_dirs`, in its order."""
    for _, path in managed_ledger_dirs(store):
        yield _topics(store, path)


def _topics(store: MetadataStore, domain_path: str) -> list[ManagedLedgerRef]:
    refs = []
    for encoded in store.children(domain_path):
        path = join(domain_path, encoded)
        try:
            topic = TopicName.from_ml_path(path)
        except LedgerctlError:
            continue
        refs.append(ManagedLedgerRef(path[len(ML_ROOT) + 1 :], path, topic))
    return refs


def read_cursor(store: MetadataStore, ml_path: str, znode_name: str) -> CursorRecord | None:
    """One cursor znode under an ML path, decoded; None if it does not exist."""
    path = join(ml_path, znode_name)
    node = store.get(path)
    if node is None:
        return None
    try:
        info = mld.parse_cursor_info(node.data)
    except LedgerctlError as exc:
        return CursorRecord(znode_name, path, node.stat, None, exc.one_line())
    error = f"missing required fields: {', '.join(info.missing)}" if info.missing else None
    return CursorRecord(znode_name, path, node.stat, info, error)


def cursor_name(znode_name: str) -> str:
    """A subscription's name from its cursor znode's (URL-decoded; as is when malformed)."""
    try:
        return mld.url_decode(znode_name)
    except LedgerctlError:
        return znode_name


def decode_ml_info(data: bytes) -> tuple[DecodedInfo[mlpb.ManagedLedgerInfo] | None, str | None]:
    """A topic znode's ManagedLedgerInfo, decoded, and what is wrong with it (or None)."""
    try:
        info = mld.parse_ml_info(data)
    except LedgerctlError as exc:
        return None, exc.one_line()
    if info.missing:
        return info, f"missing required fields: {', '.join(info.missing)}"
    return info, None


def read_managed_ledger(
    store: MetadataStore, topic: str | TopicName, *, with_cursors: bool = True
) -> ManagedLedgerRecord | None:
    """A topic's ML info and cursors; None if the topic has no ML znode."""
    name = resolve_topic(topic)
    ref = ManagedLedgerRef(name.persistence_name, name.ml_path, name)
    node = store.get(ref.path)
    if node is None:
        return None
    info, error = decode_ml_info(node.data)
    record = ManagedLedgerRecord(ref, node.stat, info, error=error)
    if with_cursors:
        for child in store.children(ref.path):
            cursor = read_cursor(store, ref.path, child)
            if cursor is not None:
                record.cursors.append(cursor)
    return record
