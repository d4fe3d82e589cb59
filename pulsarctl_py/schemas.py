"""A topic's schemas where the broker stores them: the index in the metadata store, each
version's entry in its schema ledger (read from bookie directories or running bookies).

:func:`read_topic_schemas` gives a :class:`TopicSchemas`: every version with its type,
definition, properties and deleted flag, and the problems met on the way (a version whose
ledger or entry cannot be read is listed with its problem, never dropped). Values are
decoded with it by :mod:`pulsarctl_py.values`. The byte layouts are in
:mod:`pulsarctl_py.decoders.schemas` and docs/schemas.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.schemas import (
    IndexEntry,
    StoredSchema,
    locator_path,
    parse_locator,
    parse_schema_entry,
    schema_id,
)
from pulsarctl_py.errors import LedgerctlError, NotFoundError

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource


@dataclass(slots=True)
class TopicSchemas:
    """Every schema version of a topic, oldest first, and what could not be read."""

    topic: str
    schema_name: str
    path: str
    versions: list[StoredSchema] = field(default_factory=list)
    latest: int | None = None
    problems: list[str] = field(default_factory=list)
    #: set when the store holds no schema for the topic
    absent: bool = False

    def get(self, version: int) -> StoredSchema | None:
        for schema in self.versions:
            if schema.version == version:
                return schema
        return None

    @property
    def ok(self) -> bool:
        return not self.problems and not any(s.problems for s in self.versions)

    def to_json(self, with_definition: bool = True) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "schema_id": self.schema_name,
            "path": self.path,
            "latest": self.latest,
            "versions": [s.to_json(with_definition) for s in self.versions],
            "problems": list(self.problems),
        }


def topic_schema_name(topic: str) -> str:
    """The schema id of a topic (``TopicName.getSchemaName``): partitions share their
    partitioned topic's schemas, and the domain is not part of it."""
    from pulsarctl_py.stores.metadata import resolve_topic

    name = resolve_topic(topic)
    base = name.partitioned_topic if name.partition_index >= 0 else name
    return schema_id(base.tenant, base.namespace, base.encoded_local_name)


def _unknown_topic_hint(store: Any, topic: str) -> str:
    """For a topic the store has no managed ledger of (nor partitions of): that it is not
    a topic, and the closest name of its namespace (pulsarctl_py.topics.topic_hint)."""
    from pulsarctl_py.stores.metadata import resolve_topic
    from pulsarctl_py.topics import topic_hint

    try:
        name = resolve_topic(topic)
        if store.get(name.ml_path) is not None:
            return ""
        folder, local = name.ml_path.rsplit("/", 1)
        if any(c.startswith(f"{local}-partition-") for c in store.children(folder)):
            return ""
    except (LedgerctlError, ValueError):
        return ""
    return "; no such topic either" + topic_hint(store, topic)


def read_topic_schemas(source: LedgerSource, topic: str, *, required: bool = False) -> TopicSchemas:
    """The topic's schema versions. Without a schema in the store the result is
    ``absent`` (``required``: NotFoundError instead). A metadata store is needed."""
    if source.metadata is None:
        raise LedgerctlError(f"topic {topic}: a metadata store is needed to find its schemas")
    from pulsarctl_py.stores.metadata import resolve_topic

    name = topic_schema_name(topic)
    path = locator_path(name)
    result = TopicSchemas(resolve_topic(topic).full_name, name, path)
    node = source.metadata.get(path)
    if node is None or not node.data:
        result.absent = True
        if required:
            raise NotFoundError(
                f"topic {topic} has no schema: {path} is not in the metadata store"
                + _unknown_topic_hint(source.metadata, topic)
            )
        return result
    try:
        locator = parse_locator(node.data)
    except LedgerctlError as exc:
        result.problems.append(f"{path}: {exc.one_line()}")
        return result
    result.problems += [f"{path}: {p}" for p in locator.problems]
    result.latest = locator.latest.version if locator.latest is not None else None
    for index in locator.index:
        if index.version is None:
            continue
        result.versions.append(read_version(source, index))
    return result


def read_version(source: LedgerSource, index: IndexEntry) -> StoredSchema:
    """One version from its schema ledger; a version that cannot be read keeps its place
    with the reason as its problem."""
    version = index.version if index.version is not None else -1

    def failed(why: str) -> StoredSchema:
        return StoredSchema(
            version,
            None,
            None,
            b"",
            {},
            False,
            None,
            None,
            None,
            index.ledger_id,
            index.entry_id,
            index.hash,
            [why],
        )

    if index.ledger_id is None or index.entry_id is None:
        return failed("the index names no position for this version")
    where = f"{index.ledger_id}:{index.entry_id}"
    if source.bookie is None:
        return failed(f"schema entry {where}: no bookie storage to read it from")
    try:
        payload, problems = _read_entry(source, index.ledger_id, index.entry_id)
    except LedgerctlError as exc:
        if isinstance(exc, NotFoundError) or exc.exit_code == 1:
            return failed(f"schema entry {where}: {exc.one_line()}")
        raise
    if payload is None:
        return failed(f"schema entry {where}: " + "; ".join(problems))
    try:
        schema = parse_schema_entry(payload, version)
    except LedgerctlError as exc:
        return failed(f"schema entry {where}: {exc.one_line()}")
    schema.ledger_id, schema.entry_id, schema.hash = index.ledger_id, index.entry_id, index.hash
    schema.problems = problems + schema.problems
    return schema


def _read_entry(source: LedgerSource, ledger_id: int, entry_id: int) -> tuple[Any, list[str]]:
    """The payload of one schema ledger entry after its BookKeeper header, its digest
    verified, and the problems met (payload None when there is none to decode)."""
    from pulsarctl_py.decoders import Depth

    view = source.ledger(ledger_id)
    if view.last_stored is None or view.last_stored < entry_id:
        held = "none" if view.last_stored is None else f"up to entry {view.last_stored}"
        raise NotFoundError(
            f"not in the bookie storage (it holds ledger {ledger_id} {held})"
            + (f": {view.storage_error}" if view.storage_error else "")
        )
    for entry in source.entries(view, entry_id, entry_id, depth=Depth.ENTRY, keep_going=True):
        if entry.position is not None and entry.position[1] != entry_id:
            continue
        problems = [
            f"{p.layer}: {p.message}"
            for p in entry.problems
            if p.severity == "error" and p.layer == "bookie-entry"
        ]
        bk = entry.layers[0] if entry.layers and entry.layers[0].name == "bookie-entry" else None
        if entry.unreadable is not None or bk is None:
            return None, problems or [entry.unreadable or "no BookKeeper entry"]
        return memoryview(entry.data)[bk.offset + bk.length :], problems
    raise NotFoundError(f"entry {ledger_id}:{entry_id} is not in the bookie storage")


def topic_schemas(
    topic: str,
    metadata_url: str | None,
    bookie_dirs: list[Any],
    *,
    live: Any = None,
    version: int | None = None,
) -> TopicSchemas:
    """``schema list|show``: the topic's schema versions from the stores (its schema is
    required), or only ``version`` (NotFoundError naming the versions there are)."""
    from pulsarctl_py.ledgers import LedgerSource

    with LedgerSource.open(metadata_url, bookie_dirs, need_metadata=True, live=live) as source:
        schemas = read_topic_schemas(source, topic, required=True)
    if version is not None:
        chosen = schemas.get(version)
        if chosen is None:
            known = ", ".join(str(s.version) for s in schemas.versions) or "none"
            raise NotFoundError(
                f"{schemas.topic} has no schema version {version} (versions: {known})"
            )
        schemas.versions = [chosen]
    return schemas
