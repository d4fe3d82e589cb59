"""What a plan's values point to, checked against the store before anything is written.

:mod:`.validate` checks each change on its own (its key, its kind, that its value decodes);
a value that decodes can still name a ledger that does not exist or that is another
topic's, which a broker then fails to load (or, for a compacted ledger, serves to
``readCompacted`` readers as this topic's). So apply (and undo, for what it restores)
reads the ledgers the plan's values name, in BookKeeper's metadata (under its ledgers root,
which may be another root or another store: :meth:`MetadataStore.bookkeeper`), and checks
them against Pulsar's custom metadata tags (``LedgerMetadataUtils`` upstream):

* ``managed-ledger`` (ManagedLedgerInfo): every ledger of ``ledgerInfo`` and the ledger of
  ``terminatedPosition`` is a data ledger of that managed ledger (``pulsar/managed-ledger``
  = its name, ``buildBaseManagedLedgerMetadata``), or, for a shadow topic
  (``PULSAR.SHADOW_SOURCE``), of its source. A ledger offloaded whose BookKeeper copy the
  broker deleted (``OffloadContext`` complete and ``bookkeeperDeleted``) has no metadata
  and is fine;
* ``cursor`` (ManagedCursorInfo): ``cursorsLedgerId`` (unless -1) is a cursor ledger of
  that managed ledger and that cursor (``pulsar/cursor``, ``buildAdditionalMetadataForCursor``
  merged with the base tags); a ``CompactedTopicLedger`` property is a compacted ledger of
  that topic (``component=compacted-ledger``, ``pulsar/compactedTopic`` = the topic,
  ``buildMetadataForCompactedLedger``);
* ``ledger`` deleted: the topic its tags name does not go on referencing it (its list, its
  ``__compaction`` cursor's ``CompactedTopicLedger``, its cursor's ``cursorsLedgerId``, as
  the plan leaves them);
* a stopped bookie's index entries deleted: only of a ledger left without metadata.

Only what a change *adds* is checked (ledgers named in the new value and not in the old;
a deletion is an addition of nothing but is checked as above): repairs of topics that are
already broken keep ledgers without metadata in a list while they drop others, and must
still apply. A ledger the same plan creates (a recreated ledger's metadata, the ledgers a
command wrote and recorded in the plan) counts as existing.

Undo restores old values, which may point at what was already broken when the apply ran
(the ledger ``missing-ledgers`` dropped, the lost compacted ledger ``compaction --clear``
cleared): apply records in the backup the problems its undo would bring back
(:func:`problems` of the reversed plan, on the store as it is before the commit), and undo
accepts those and only those; a ledger that went missing after the apply (deleted as an
orphan, say) is refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.errors import LedgerctlError

from .validate import PlanInvalid

if TYPE_CHECKING:
    from pulsarctl_py.decoders.ledger_metadata import LedgerMetadata
    from pulsarctl_py.stores.metadata.base import MetadataStore

    from .bookie_index import BookieChange

COMPACTED_TOPIC_LEDGER = mld.COMPACTED_TOPIC_LEDGER

#: what a reference can be wrong by
MISSING, UNREADABLE, FOREIGN, REFERENCED, KEPT = (
    "missing",
    "unreadable",
    "foreign",
    "referenced",
    "metadata-kept",
)


@dataclass(frozen=True, slots=True)
class Problem:
    """One reference a plan would write that does not hold."""

    key: str
    ledger_id: int
    code: str  # MISSING, UNREADABLE, FOREIGN, REFERENCED, KEPT
    text: str  # for people: what the key says of the ledger and what is wrong with it

    @property
    def ident(self) -> tuple[str, int, str]:
        return (self.key, self.ledger_id, self.code)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "ledger_id": self.ledger_id,
            "problem": self.code,
            "why": self.text,
        }

    @classmethod
    def from_json(cls, obj: Any) -> Problem | None:
        """A problem a backup recorded (None when the entry is not one)."""
        if not isinstance(obj, dict):
            return None
        key, lid, code, text = (obj.get(k) for k in ("key", "ledger_id", "problem", "why"))
        if not (isinstance(key, str) and isinstance(code, str) and isinstance(text, str)):
            return None
        if isinstance(lid, bool) or not isinstance(lid, int):
            return None
        return cls(key, lid, code, text)


class ReferenceRefused(PlanInvalid):
    """A plan whose value names a ledger that is not there or not the topic's (exit 2)."""

    def __init__(self, problem: Problem, action: str) -> None:
        """``action``: what was refused, "apply refused, nothing written"."""
        self.problem = problem
        self.key = problem.key
        super().__init__(f"plan: {problem.key}: {problem.text}: {action}")


@dataclass(frozen=True, slots=True)
class Step:
    """One key going from ``before`` to ``after`` (an apply's change, or an undo's restore)."""

    key: str
    kind: str
    before: bytes | None
    after: bytes | None


# -- the ledgers, as the plan leaves them ------------------------------------------------------


class Ledgers:
    """BookKeeper's ledger metadata as it will be: the store's, with the plan's own ledger
    values (``overlay``: ledger id -> bytes, None for deleted) laid over it."""

    def __init__(self, store: MetadataStore, overlay: dict[int, bytes | None]) -> None:
        place = store.bookkeeper()
        self.place_store, self.root = place.store, place.root
        self.overlay = overlay
        self._cache: dict[int, tuple[str, LedgerMetadata | None, str | None]] = {}

    def get(self, ledger_id: int) -> tuple[str, LedgerMetadata | None, str | None]:
        """("present", metadata, None), ("absent", None, None) or ("unreadable", None, why)."""
        if ledger_id not in self._cache:
            self._cache[ledger_id] = self._read(ledger_id)
        return self._cache[ledger_id]

    def _read(self, ledger_id: int) -> tuple[str, LedgerMetadata | None, str | None]:
        if ledger_id in self.overlay:
            data = self.overlay[ledger_id]
            if data is None:
                return "absent", None, None
            return _decoded(data, ledger_id)
        from pulsarctl_py.stores.metadata import read_ledger

        if not 0 <= ledger_id < 2**63:
            return "absent", None, None
        record = read_ledger(self.place_store, ledger_id, self.root)
        if record is None:
            return "absent", None, None
        if record.metadata is None or record.error is not None:
            return "unreadable", None, record.error or "does not decode"
        return "present", record.metadata, None


def _decoded(data: bytes, ledger_id: int) -> tuple[str, LedgerMetadata | None, str | None]:
    try:
        md = lm.parse(data, ledger_id)
    except LedgerctlError as exc:
        return "unreadable", None, exc.one_line()
    if md.missing:
        return "unreadable", None, f"missing required fields: {', '.join(md.missing)}"
    return "present", md, None


# -- what a value names -------------------------------------------------------------------------


def _same_ml(name: str | None, expected: str) -> bool:
    """Whether a ``pulsar/managed-ledger`` tag is there and names ``expected``."""
    return name is not None and mld.names_managed_ledger(name, expected)


def _same_topic(name: str | None, expected: str) -> bool:
    """Whether a ``pulsar/compactedTopic`` tag names the topic ``expected`` (full name)."""
    if name is None:
        return False
    if name == expected:
        return True
    try:
        return mld.TopicName.parse(name).full_name == expected
    except LedgerctlError:
        return False


def _parsed(parse: Any, data: bytes | None) -> Any:
    """``parse(data)``'s message, None for no value or one that does not parse."""
    if data is None:
        return None
    try:
        return parse(data).message
    except LedgerctlError:
        return None


def _ml_info(data: bytes | None) -> Any:
    return _parsed(mld.parse_ml_info, data)


def _cursor_info(data: bytes | None) -> Any:
    return _parsed(mld.parse_cursor_info, data)


def _data_refs(info: Any) -> dict[int, bool]:
    """The ledgers a ManagedLedgerInfo names -> whether it says their BookKeeper copy was
    deleted after an offload (then they have no metadata, rightly)."""
    if info is None:
        return {}
    out: dict[int, bool] = {}
    for li in info.ledgerInfo:
        ctx = li.offloadContext if li.HasField("offloadContext") else None
        out[li.ledgerId] = ctx is not None and ctx.complete and ctx.bookkeeperDeleted
    if info.HasField("terminatedPosition") and info.terminatedPosition.ledgerId >= 0:
        out.setdefault(info.terminatedPosition.ledgerId, False)
    return out


def _cursor_refs(info: Any) -> set[tuple[str, int]]:
    """("cursor", id) for a cursor ledger, ("compacted", id) for each CompactedTopicLedger."""
    if info is None:
        return set()
    out: set[tuple[str, int]] = set()
    if info.cursorsLedgerId != -1:
        out.add(("cursor", info.cursorsLedgerId))
    for p in info.properties:
        if p.name == COMPACTED_TOPIC_LEDGER:
            out.add(("compacted", p.value))
    return out


def _owner(md: LedgerMetadata) -> str:
    """What a ledger's tags say it is, for people."""
    tags = md.pulsar()
    if tags.application is not None and tags.application != "pulsar":
        return f"a ledger of application {tags.application}"
    if tags.kind == "cursor":
        return f"the cursor ledger of {tags.cursor} of {tags.managed_ledger}"
    if tags.kind == "compacted":
        return f"a compacted ledger of {tags.compacted_topic}"
    if tags.kind == "schema":
        return "a schema ledger"
    if tags.managed_ledger is not None:
        return f"a data ledger of {tags.managed_ledger}"
    return "a ledger without Pulsar's tags"


# -- the checks ------------------------------------------------------------------------------


class _Checker:
    """The checks of one set of steps: the store as the steps leave it (their own values
    over it; ``gone``: ledgers that will be deleted besides)."""

    def __init__(
        self,
        store: MetadataStore,
        steps: list[Step],
        ledger_root: str,
        gone: Iterable[int] = (),
    ) -> None:
        self.store = store
        self.after = {s.key: s.after for s in steps}
        overlay: dict[int, bytes | None] = {}
        for s in steps:
            if s.kind == "ledger":
                lid = lm.ledger_id_from_path(s.key, ledger_root)
                if lid is not None:
                    overlay[lid] = s.after
        for lid in gone:
            overlay[lid] = None
        self.ledgers = Ledgers(store, overlay)
        self._listed: dict[str, set[int]] = {}
        self.where = f"under {self.ledgers.root}"

    def value(self, key: str) -> bytes | None:
        """A key's value as the plan leaves it."""
        if key in self.after:
            return self.after[key]
        node = self.store.get(key)
        return None if node is None else node.data

    def listed(self, ml_path: str) -> set[int]:
        """The ledgers a managed ledger names, as the plan leaves it (read once: a plan
        deleting many ledgers of one topic asks for the same list each time)."""
        if ml_path not in self._listed:
            self._listed[ml_path] = set(_data_refs(_ml_info(self.value(ml_path))))
        return self._listed[ml_path]

    def _exists(
        self, key: str, lid: int, subject: str, *, offloaded: bool = False
    ) -> tuple[Problem | None, LedgerMetadata | None]:
        """``subject`` ends with "which": "the ledger list gains ledger 7, which"."""
        state, md, why = self.ledgers.get(lid)
        if state == "absent":
            if offloaded:
                return None, None
            text = f"{subject} has no BookKeeper metadata ({self.where})"
            return Problem(key, lid, MISSING, text), None
        if state == "unreadable":
            text = f"{subject} has BookKeeper metadata that does not decode ({why})"
            return Problem(key, lid, UNREADABLE, text), None
        return None, md

    def managed_ledger(self, step: Step) -> Iterable[Problem]:
        name = mld.TopicName.from_ml_path(step.key)
        old, new = _ml_info(step.before), _ml_info(step.after)
        if new is None:
            return
        # the source a shadow lists the ledgers of: as the store has it (a plan that
        # changes it would let the list name another topic's ledgers)
        source_of = mld.shadow_source(old if old is not None else new)
        owners = [name.persistence_name]
        if source_of is not None:
            try:
                owners.append(mld.TopicName.parse(source_of).persistence_name)
            except LedgerctlError:
                pass
        before = _data_refs(old)
        for lid, offloaded in _data_refs(new).items():
            if lid in before:
                continue
            subject = f"the ledger list gains ledger {lid}, which"
            problem, md = self._exists(step.key, lid, subject, offloaded=offloaded)
            if problem is not None:
                yield problem
                continue
            if md is None:
                continue
            tags = md.pulsar()
            if (
                (tags.application is None or tags.application == "pulsar")
                and tags.kind == "data"
                and any(_same_ml(tags.managed_ledger, o) for o in owners)
            ):
                continue
            whose = " or of its shadow source" if len(owners) > 1 else ""
            yield Problem(
                step.key,
                lid,
                FOREIGN,
                f"{subject} is {_owner(md)}, not a data ledger of {name.persistence_name}{whose}",
            )

    def cursor(self, step: Step) -> Iterable[Problem]:
        parent, _, znode = step.key.rpartition("/")
        topic = mld.TopicName.from_ml_path(parent)
        try:
            cursor_name = mld.url_decode(znode)
        except LedgerctlError:
            cursor_name = znode
        before = _cursor_refs(_cursor_info(step.before))
        for role, lid in sorted(_cursor_refs(_cursor_info(step.after)) - before):
            if role == "cursor":
                subject = f"cursorsLedgerId becomes {lid}, which"
                problem, md = self._exists(step.key, lid, subject)
                if problem is not None:
                    yield problem
                    continue
                assert md is not None
                tags = md.pulsar()
                if (
                    tags.kind == "cursor"
                    and _same_ml(tags.managed_ledger, topic.persistence_name)
                    and tags.cursor == cursor_name
                ):
                    continue
                yield Problem(
                    step.key,
                    lid,
                    FOREIGN,
                    f"{subject} is {_owner(md)}, not the cursor ledger of {cursor_name} of "
                    f"{topic.persistence_name}",
                )
            else:
                subject = f"{COMPACTED_TOPIC_LEDGER} becomes {lid}, which"
                problem, md = self._exists(step.key, lid, subject)
                if problem is not None:
                    yield problem
                    continue
                assert md is not None
                tags = md.pulsar()
                if tags.kind == "compacted" and _same_topic(tags.compacted_topic, topic.full_name):
                    continue
                yield Problem(
                    step.key,
                    lid,
                    FOREIGN,
                    f"{subject} is {_owner(md)}, not a compacted ledger of {topic.full_name}",
                )

    def ledger_deleted(self, step: Step, ledger_root: str) -> Iterable[Problem]:
        """A ledger's metadata deleted while the topic its tags name goes on naming it."""
        lid = lm.ledger_id_from_path(step.key, ledger_root)
        if lid is None or step.before is None:
            return
        _, md, _ = _decoded(step.before, lid)
        if md is None:
            return
        tags = md.pulsar()
        try:
            if tags.kind == "data" and tags.managed_ledger is not None:
                owner = mld.TopicName.from_persistence_name(tags.managed_ledger)
                if lid in self.listed(owner.ml_path):
                    yield self._referenced(step.key, lid, f"the ledger list of {owner.full_name}")
            elif tags.kind == "cursor" and tags.managed_ledger is not None:
                owner = mld.TopicName.from_persistence_name(tags.managed_ledger)
                cursor = owner.cursor_path(tags.cursor or "")
                if ("cursor", lid) in _cursor_refs(_cursor_info(self.value(cursor))):
                    yield self._referenced(step.key, lid, f"the cursorsLedgerId of {cursor}")
            elif tags.kind == "compacted" and tags.compacted_topic is not None:
                owner = mld.TopicName.parse(tags.compacted_topic)
                cursor = owner.cursor_path(mld.COMPACTION_CURSOR)
                if ("compacted", lid) in _cursor_refs(_cursor_info(self.value(cursor))):
                    yield self._referenced(
                        step.key, lid, f"the {COMPACTED_TOPIC_LEDGER} of {cursor}"
                    )
        except LedgerctlError:  # tags naming no topic: nothing of a topic to keep
            return

    @staticmethod
    def _referenced(key: str, lid: int, where: str) -> Problem:
        return Problem(
            key,
            lid,
            REFERENCED,
            f"it deletes the metadata of ledger {lid}, which {where} still names",
        )


def problems(
    store: MetadataStore,
    steps: list[Step],
    ledger_root: str,
    *,
    bookie: Iterable[BookieChange] = (),
    gone: Iterable[int] = (),
) -> list[Problem]:
    """Every reference ``steps`` would write that does not hold on ``store`` (with the
    steps' own ledger values laid over it; ``gone``: ledgers that will not exist, the
    ones an undo deletes), and every bookie index deletion of a ledger that keeps its
    metadata."""
    checker = _Checker(store, steps, ledger_root, gone)
    found: list[Problem] = []
    for step in steps:
        if step.kind == "managed-ledger":
            found.extend(checker.managed_ledger(step))
        elif step.kind == "cursor":
            found.extend(checker.cursor(step))
        elif step.kind == "ledger" and step.after is None:
            found.extend(checker.ledger_deleted(step, ledger_root))
    for bc in bookie:
        state, _, _ = checker.ledgers.get(bc.ledger_id)
        if state != "absent":
            found.append(
                Problem(
                    bc.key,
                    bc.ledger_id,
                    KEPT,
                    f"it deletes ledger {bc.ledger_id}'s entries from the bookie's index while "
                    "the ledger keeps its BookKeeper metadata",
                )
            )
    return found
