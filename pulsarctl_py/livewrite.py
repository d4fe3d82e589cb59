"""Writes on a live cluster: the one gate every write verb passes, and ``--unload``.

A broker that has a topic **loaded** caches its managed-ledger and cursor metadata and
rewrites it (formats.md §8.3): a write behind its back is lost, or served stale. So the
safety check is "is the topic loaded", asked of the brokers themselves
(:func:`pulsarctl_py.stores.broker.where_loaded`, which never loads it):

* loaded, no ``--unload``: refused (:class:`TopicLoaded`, exit 4), naming the broker and
  the flag;
* brokers registered but none can be asked: refused (exit 4) unless ``--force-owned``,
  which says what it skipped;
* Pulsar's RocksDB store: only writable while no broker runs (the broker holds its lock):
  nothing to ask.

``--unload`` unloads the loaded topics through the admin API (a shadow topic's source too:
its shadow replicator reloads the shadow; PIP-180 ``ShadowReplicator``) and writes in the
window before a client loads them again; then :func:`apply` checks that the broker did not
load the old state meanwhile.

**Unloading rewrites metadata.** Closing a cursor persists its position into the cursor
node (``ManagedCursorImpl.persistPositionWhenClosing``: ``cursorsLedgerId`` -1, a new
``lastActive``); a client that reconnects loads the topic again, and loading rolls a new
ledger into the managed-ledger node (``ManagedLedgerImpl.initialize``: the last ledger is
recovered, dropped when empty, and a new one is created). A plan made before then meets new
versions. :func:`rebase` decides per key what the change means *for the plan*:

* a cursor: the same mark-delete position, individually deleted ranges, batch deletion
  indexes and properties (its cursor ledger id and last-active time aside) is the same
  cursor; a plan that read a cursor whose position was in its cursor ledger
  (``cursorsLedgerId`` set) cannot be compared and is refused;
* a managed ledger: the same properties, terminated position and ledgers, except what a
  reload does at the end of the list: the last ledger closed (its entries and size filled
  in) or dropped when it held nothing, and new ledgers that hold nothing appended (checked
  in BookKeeper's metadata: closed with no entry, or gone). The plan's new value gets the
  same treatment, so that no ledger the broker made is lost;

and such a key is rebased onto the new version (the plan file is rewritten, and the
rebase reported); anything else is refused (:class:`PlanConflict`, exit 5) with what
changed. Nothing the broker wrote that the plan did not see is written over.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.errors import LedgerctlError, PlanConflict, TopicLoaded

if TYPE_CHECKING:
    from pulsarctl_py.plans.apply import Outcome
    from pulsarctl_py.plans.change import Change
    from pulsarctl_py.plans.document import Plan
    from pulsarctl_py.stores.broker import BrokerAdmin
    from pulsarctl_py.stores.metadata import MetadataStore

#: rounds of unload + write (a client loading the topic again between the unload and the
#: write makes the compare-and-set fail) and of unloads after it (a broker that loaded the
#: old state)
MAX_ROUNDS = 5

Say = Callable[[str], None]


@dataclass(frozen=True)
class LiveFlags:
    """``--unload``, ``--force-owned`` and ``--admin-url`` of one command."""

    unload: bool = False
    force_owned: bool = False
    admin_url: tuple[str, ...] = ()


_FLAGS: ContextVar[LiveFlags | None] = ContextVar("ledgerctl_live_flags", default=None)


@contextlib.contextmanager
def flags(
    *, unload: bool = False, force_owned: bool = False, admin_url: list[str] | None = None
) -> Iterator[None]:
    """Run the block with these flags (the CLI sets them around one command)."""
    token = _FLAGS.set(LiveFlags(unload, force_owned, tuple(admin_url or ())))
    try:
        yield
    finally:
        _FLAGS.reset(token)


def current() -> LiveFlags:
    """The flags in effect (none given: all off)."""
    return _FLAGS.get() or LiveFlags()


def _quiet(text: str) -> None:
    return None


def _live(store: MetadataStore) -> bool:
    """Whether a broker can run beside this store (ZooKeeper; not RocksDB, whose lock the
    broker holds while it runs)."""
    return store.location.scheme == "zk"


def _admin_url(live: LiveFlags) -> list[str] | None:
    return list(live.admin_url) or None


def _names(topics: list[str] | list[Any]) -> list[str]:
    from pulsarctl_py.stores.metadata import resolve_topic

    out: list[str] = []
    for t in topics:
        name = resolve_topic(t).full_name if isinstance(t, str) else t.full_name
        if name not in out:
            out.append(name)
    return out


def _with_shadow_sources(store: MetadataStore, topics: list[str]) -> list[str]:
    """``topics`` with each shadow topic's source first (its shadow replicator loads the
    shadow again: ``PersistentTopic`` of the source starts a ``ShadowReplicator`` per
    shadow)."""
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.stores.metadata import resolve_topic

    out: list[str] = []
    for topic in topics:
        node = store.get(resolve_topic(topic).ml_path)
        source = None
        if node is not None:
            with contextlib.suppress(LedgerctlError):
                source = mld.shadow_source(mld.parse_ml_info(node.data).message)
        if source:
            source = resolve_topic(source).full_name
            if source not in out:
                out.append(source)
        if topic not in out:
            out.append(topic)
    return out


def _ask(
    store: MetadataStore, topic: str, live: LiveFlags, say: Say
) -> tuple[BrokerAdmin | None, bool]:
    """The broker that has ``topic`` loaded (None: none), and whether the brokers could be
    asked (False only with --force-owned; without it, a refusal)."""
    from pulsarctl_py.stores.broker import BrokerRefused, BrokerUnreachable, where_loaded

    try:
        return where_loaded(store, topic, _admin_url(live)), True
    except (BrokerUnreachable, BrokerRefused) as exc:
        if not live.force_owned:
            raise TopicLoaded(
                f"cannot ask the brokers whether {topic} is loaded ({exc.one_line()}); "
                "nothing written: give a reachable admin URL (--admin-url, "
                "$LEDGERCTL_ADMIN_URL; credentials in $LEDGERCTL_ADMIN_TOKEN, "
                "$LEDGERCTL_ADMIN_TLS_*), or pass --force-owned to write without asking"
            ) from None
        say(
            f"--force-owned: did not ask whether a broker has {topic} loaded "
            f"({exc.one_line()}); a broker that has it loaded may overwrite the change or "
            "keep serving the old state"
        )
        return None, False


def prepare(
    store: MetadataStore,
    topics: list[str] | list[Any],
    *,
    force: bool = False,
    live: LiveFlags | None = None,
) -> list[str]:
    """The gate before a write verb does any work: refuse (:class:`TopicLoaded`, exit 4)
    when a broker has one of ``topics`` loaded and --unload is not given, or when the
    brokers cannot be asked and --force-owned is not given; with --unload, unload them now
    (so that a plan made next reads what the broker persisted). Returns the warnings (what
    --force-owned skipped)."""
    live = current() if live is None else live
    if force and not live.force_owned:
        live = LiveFlags(live.unload, True, live.admin_url)
    warnings: list[str] = []
    if not _live(store):
        return warnings
    _unload_loaded(store, _names(topics), live, warnings.append)
    return warnings


def unload_loaded(
    store: MetadataStore, topics: list[str] | list[Any], *, say: Say = _quiet
) -> list[str]:
    """With --unload in effect: unload those of ``topics`` a broker has loaded (a shadow
    topic's source too); which were (with the broker). Refused as :func:`prepare` refuses."""
    live = current()
    if not _live(store) or not live.unload:
        return []
    return _unload_loaded(store, _names(topics), live, say)


def _unload_loaded(store: MetadataStore, topics: list[str], live: LiveFlags, say: Say) -> list[str]:
    """Refuse or (with --unload) unload every loaded topic of ``topics`` (shadow sources
    first); the topics unloaded."""
    order = _with_shadow_sources(store, topics) if live.unload else topics
    done: list[str] = []
    for topic in order:
        broker, _ = _ask(store, topic, live, say)
        if broker is None:
            continue
        if not live.unload:
            raise TopicLoaded(
                f"{topic} is loaded by the broker {broker.url}: nothing written; pass "
                "--unload to unload it through the broker's admin API for the write"
            )
        broker.unload(topic)
        done.append(f"{topic} (from {broker.url})")
    return done


# -- what a change means for the plan ------------------------------------------------------


def _cursor_meaning(data: bytes) -> tuple[Any, ...] | str:
    """What a cursor value means for a plan, or why it cannot be told."""
    from pulsarctl_py.decoders import managed_ledger as mld

    try:
        info = mld.parse_cursor_info(data).message
    except LedgerctlError as exc:
        return f"it does not decode ({exc.one_line()})"
    if info.HasField("cursorsLedgerId") and info.cursorsLedgerId != -1:
        return (
            f"its position was kept in its cursor ledger {info.cursorsLedgerId} (the node's "
            "is not the cursor's)"
        )
    return (
        info.markDeleteLedgerId,
        info.markDeleteEntryId,
        tuple(r.SerializeToString() for r in info.individualDeletedMessages),
        tuple(sorted((p.name, p.value) for p in info.properties)),
        tuple(r.SerializeToString() for r in info.batchedEntryDeletionIndexInfo),
        tuple(sorted((p.name, p.value) for p in info.cursorProperties)),
    )


def _position(data: bytes | None) -> str | None:
    from pulsarctl_py.decoders import managed_ledger as mld

    if data is None:
        return None
    with contextlib.suppress(LedgerctlError):
        info = mld.parse_cursor_info(data).message
        return f"{info.markDeleteLedgerId}:{info.markDeleteEntryId}"
    return None


class _Reloaded(Exception):
    """A broker has loaded the topic again since the unload (a ledger it writes to is open,
    a cursor's position is in its cursor ledger again): unload again, then judge."""


def _holds_nothing(store: MetadataStore, ledger_id: int) -> bool:
    """Whether a ledger holds no entry: gone (a broker deletes the empty last ledger it
    recovers), or closed with no entry. Open: :class:`_Reloaded` (a broker writes it)."""
    from pulsarctl_py.decoders.ledger_metadata import LedgerState
    from pulsarctl_py.stores.metadata.ledgers import read_ledger

    record = read_ledger(store, ledger_id)
    if record is None:
        return True
    md = record.metadata
    if md is not None and md.state is not LedgerState.CLOSED:
        raise _Reloaded(f"ledger {ledger_id} is {md.state.name.lower()}")
    return md is not None and md.is_closed and md.last_entry_id == -1


def _terminated(info: Any) -> tuple[int, int] | None:
    if not info.HasField("terminatedPosition"):
        return None
    return (info.terminatedPosition.ledgerId, info.terminatedPosition.entryId)


def _ml_rebase(store: MetadataStore, change: Change, now: bytes) -> tuple[bytes, str] | str:
    """The plan's new value rebased onto ``now`` and what the broker changed, or why the
    change means something else for the plan."""
    from pulsarctl_py.decoders import managed_ledger as mld

    assert change.old is not None
    try:
        old = mld.parse_ml_info(change.old).message
        cur = mld.parse_ml_info(now).message
        planned = mld.parse_ml_info(change.new) if change.new is not None else None
    except LedgerctlError as exc:
        return f"it does not decode ({exc.one_line()})"
    if sorted((p.key, p.value) for p in old.properties) != sorted(
        (p.key, p.value) for p in cur.properties
    ):
        return "its properties changed"
    if _terminated(old) != _terminated(cur):
        return "its terminated position changed"
    ol, cl = list(old.ledgerInfo), list(cur.ledgerInfo)
    i = 0
    while i < len(ol) and i < len(cl) and ol[i] == cl[i]:
        i += 1
    rest_old, rest_cur = ol[i:], cl[i:]
    notes: list[str] = []
    last = None  # the plan's last ledger, as it is now (None: dropped)
    if len(rest_old) > 1:
        return f"its ledgers changed from ledger {rest_old[0].ledgerId} on"
    if rest_old:
        last_old = rest_old[0]
        if rest_cur and rest_cur[0].ledgerId == last_old.ledgerId:
            if last_old.HasField("entries"):
                return f"ledger {last_old.ledgerId} changed"
            last, rest_cur = rest_cur[0], rest_cur[1:]
            notes.append(f"ledger {last.ledgerId} closed with {last.entries} entries")
        elif _holds_nothing(store, last_old.ledgerId):
            notes.append(f"empty ledger {last_old.ledgerId} dropped")
        else:
            return f"ledger {last_old.ledgerId}, which holds entries, left the list"
    for extra in rest_cur:
        if not _holds_nothing(store, extra.ledgerId):
            return f"ledger {extra.ledgerId}, which the plan did not see, holds entries"
        notes.append(f"empty ledger {extra.ledgerId} added")
    what = ", ".join(notes)
    if change.action == "check" or planned is None:
        return now, what
    # the same treatment for the plan's new value: the last ledger as it is now, the
    # broker's empty ledgers kept
    new = type(planned.message)()
    new.CopyFrom(planned.message)
    del new.ledgerInfo[:]
    for ledger in planned.message.ledgerInfo:
        if rest_old and ledger.ledgerId == rest_old[0].ledgerId:
            if ledger != rest_old[0]:
                return f"the plan changes ledger {ledger.ledgerId}, which the broker closed"
            if last is not None:
                new.ledgerInfo.add().CopyFrom(last)
            continue
        new.ledgerInfo.add().CopyFrom(ledger)
    have = {lg.ledgerId for lg in new.ledgerInfo}
    for extra in rest_cur:
        if extra.ledgerId not in have:
            new.ledgerInfo.add().CopyFrom(extra)
    return mld.rebuild(planned, new), what


def _meaning_now(
    store: MetadataStore, change: Change, expected: bytes | None, now: bytes, undo: bool = False
) -> tuple[bytes | None, str] | str:
    """For a key that moved: (the value to write instead of the plan's, what moved), or
    why it means something else for the plan. ``expected``: the value the plan expects."""
    assert expected is not None
    if change.kind == "cursor":
        was, is_now = _cursor_meaning(expected), _cursor_meaning(now)
        if isinstance(was, str):
            return f"the plan read it when {was}: make the plan after the unload (--unload)"
        if isinstance(is_now, str):
            if "cursor ledger" in is_now:
                raise _Reloaded(f"the cursor's position is in a cursor ledger again: {is_now}")
            return f"now {is_now}"
        if was != is_now:
            return (
                f"its mark-delete position, acknowledged ranges or properties changed "
                f"(the plan read {_position(expected)}, now {_position(now)})"
            )
        return None, "the same position and properties"
    if change.kind == "managed-ledger" and not undo:
        return _ml_rebase(store, change, now)
    if change.kind == "managed-ledger":
        # the broker rolled ledgers into the list the apply wrote: restoring the old list
        # over it would drop them
        return "the broker has rewritten the ledger list the apply wrote"
    return "the plan cannot tell what the change means"


def rebase(plan_path: Path, store: MetadataStore, say: Say, *, undo: bool = False) -> bool:
    """Rebase the plan at ``plan_path`` onto the keys the broker rewrote without changing
    what they mean for the plan (module docstring), rewriting the plan file (and, for an
    undo, its backup's digest); refuse (:class:`PlanConflict`) a key that changed in
    meaning. Returns whether the plan was rewritten. A plan with a backup (applied or
    interrupted) is not rebased for an apply: apply says what holds."""
    import os

    from pulsarctl_py.plans.apply import backup_path
    from pulsarctl_py.plans.document import Plan

    plan = Plan.load(plan_path)
    bpath = backup_path(plan_path)
    if not undo and os.path.lexists(bpath):
        return False
    moved: list[str] = []
    for change in plan.changes:
        expected = change.new if undo else change.old
        node = store.get(change.key)
        if expected is None or node is None:
            continue  # created or deleted: apply and undo say what holds
        if undo:
            if node.data in (change.new, change.old):
                continue
        elif node.data == change.old and node.stat.version == change.version:
            continue
        found = _meaning_now(store, change, expected, node.data, undo)
        if isinstance(found, str):
            raise PlanConflict(
                f"{change.key} changed since the plan was "
                f"{'applied' if undo else 'made'} (version {node.stat.version}): {found}; "
                "nothing written"
                + ("" if undo else ": make the plan again (after the unload: --unload)")
            )
        value, what = found
        if undo:
            change.new = node.data
        else:
            was = change.version
            if change.action == "check":
                change.new = node.data
            elif value is not None:
                change.new = value
            change.old, change.version = node.data, node.stat.version
            change.creation = node.stat.creation
            what = f"version {was} -> {node.stat.version}, {what}"
        moved.append(f"{change.key} ({what})")
    if not moved:
        return False
    old_digest = plan.digest
    plan.save(plan_path, force=True)
    if undo and os.path.lexists(bpath):
        _redigest_backup(bpath, old_digest, Plan.load(plan_path).digest)
    for line in moved:
        say(f"rebased onto what the broker rewrote when unloaded: {line}")
    return True


def _redigest_backup(bpath: Path, old: str | None, new: str | None) -> None:
    """The backup of a plan rebased for its undo names the rebased plan (its old values,
    which the backup holds, are unchanged)."""
    from pulsarctl_py import outputs
    from pulsarctl_py.documents import load_document
    from pulsarctl_py.plans.document import write_document

    doc = load_document(bpath, "plan backup")
    if isinstance(doc, dict) and doc.get("plan_digest") == old:
        doc["plan_digest"] = new
        write_document(outputs.prepare(bpath, outputs.BACKUP, force=True), doc, "plan backup")


# -- after the write: did the broker load the old state? ----------------------------------


def _stale(plan: Plan, topic: str, stats: dict[str, Any], undo: bool) -> list[str]:
    """What of the old state the broker's internal stats of ``topic`` still serve."""
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.stores.metadata import resolve_topic

    name = resolve_topic(topic)
    found: list[str] = []
    served = {int(lg.get("ledgerId", -1)) for lg in stats.get("ledgers") or []}
    cursors = stats.get("cursors") or {}
    for change in plan.changes:
        if change.action == "check":
            continue
        before, after = (change.new, change.old) if undo else (change.old, change.new)
        if change.kind == "managed-ledger" and change.key == name.ml_path:
            ids = [
                {lg.ledgerId for lg in mld.parse_ml_info(v).message.ledgerInfo}
                if v is not None
                else set()
                for v in (before, after)
            ]
            gone, added = ids[0] - ids[1], ids[1] - ids[0]
            if served & gone or (added - served):
                found.append(f"ledger list (it serves {sorted(served)})")
        elif change.kind == "cursor" and change.key.startswith(name.ml_path + "/"):
            cursor = mld.url_decode(change.key.rsplit("/", 1)[1])
            held = cursors.get(cursor) or {}
            was, want = _position(before), _position(after)
            if was != want and held.get("markDeletePosition") == was:
                found.append(f"mark-delete position of {cursor} ({was}, not {want})")
            if cursor == "__compaction":
                olds, news = (_compacted_ledger(v) for v in (before, after))
                serves = (stats.get("compactedLedger") or {}).get("ledgerId")
                if olds != news and olds is not None and serves == olds:
                    found.append(f"compacted ledger ({olds}, not {news})")
    return found


def _compacted_ledger(data: bytes | None) -> int | None:
    from pulsarctl_py.decoders import managed_ledger as mld

    if data is None:
        return None
    with contextlib.suppress(LedgerctlError):
        info = mld.parse_cursor_info(data).message
        for p in info.properties:
            if p.name == mld.COMPACTED_TOPIC_LEDGER:
                return int(p.value)
    return None


def check_after(store: MetadataStore, plan: Plan, live: LiveFlags, say: Say, undo: bool) -> None:
    """After the write: a broker that loaded a topic of the plan serving the old state
    (its ledgers, a cursor's mark-delete position, the compacted ledger) is made to read
    it again by unloading it (up to :data:`MAX_ROUNDS` times), and said; still stale after
    that: :class:`TopicLoaded`."""
    from pulsarctl_py.stores.broker import BrokerRefused, BrokerUnreachable, where_loaded

    for topic in _names(plan.topics):
        for attempt in range(MAX_ROUNDS + 1):
            try:
                broker = where_loaded(store, topic, _admin_url(live))
                if broker is None:
                    break
                stats = broker.internal_stats(topic)
            except (BrokerUnreachable, BrokerRefused) as exc:
                say(
                    f"the write is done, but whether a broker serves it could not be checked "
                    f"({exc.one_line()}): check {topic} with pulsar-admin topics stats-internal"
                )
                break
            stale = _stale(plan, topic, stats, undo)
            if not stale:
                if attempt:
                    say(f"{topic}: the broker {broker.url} now serves what was written")
                break
            if attempt == MAX_ROUNDS:
                raise TopicLoaded(
                    f"the write is done, but the broker {broker.url} still serves the old "
                    f"{'; '.join(stale)} of {topic} after {MAX_ROUNDS} unloads: unload it "
                    "again (pulsar-admin topics unload) or restart that broker"
                )
            say(
                f"the broker {broker.url} loaded {topic} before the write and serves the "
                f"old {'; '.join(stale)}: unloading it again so that it reads what was "
                "written"
            )
            broker.unload(topic)


# -- apply and undo on a live cluster ------------------------------------------------------


def apply(
    store: MetadataStore,
    plan_path: Path,
    run: Callable[[], Outcome],
    *,
    undo: bool = False,
    force: bool = False,
    say: Say = _quiet,
    live: LiveFlags | None = None,
) -> Outcome:
    """Apply (or undo) the plan at ``plan_path`` with ``run`` through the gate: refused
    while a broker has one of its topics loaded, unless --unload: then unload, rebase what
    the unload rewrote, write with compare-and-set (again, up to :data:`MAX_ROUNDS` times,
    when a client loaded the topic in between), and check the broker did not load the old
    state (:func:`check_after`)."""
    import os

    from pulsarctl_py.errors import MetadataConflict
    from pulsarctl_py.plans.apply import backup_path
    from pulsarctl_py.plans.document import Plan

    live = current() if live is None else live
    if force and not live.force_owned:
        live = LiveFlags(live.unload, True, live.admin_url)
    plan = Plan.load(plan_path)
    if not _live(store) or not plan.topics:
        return run()
    topics = _names(plan.topics)
    if not live.unload:
        _unload_loaded(store, topics, live, say)
        return run()
    bpath = backup_path(plan_path)
    had_backup = os.path.lexists(bpath)
    for attempt in range(1, MAX_ROUNDS + 1):
        for done in _unload_loaded(store, topics, live, say):
            say(f"unloaded {done}")
        try:
            rebase(plan_path, store, say, undo=undo)
        except _Reloaded as exc:
            if attempt == MAX_ROUNDS:
                raise TopicLoaded(
                    f"a client loaded {', '.join(topics)} again after each of {MAX_ROUNDS} "
                    f"unloads, before the write ({exc}); nothing written: try again, or stop "
                    "the clients for the write"
                ) from None
            say(f"a client loaded the topic again before the write ({exc}): unloading again")
            continue
        try:
            outcome = run()
        except MetadataConflict as exc:
            if attempt == MAX_ROUNDS:
                raise
            if not undo and not had_backup:
                # the commit failed, nothing was written: the backup it began goes, so
                # that the plan may be rebased
                with contextlib.suppress(FileNotFoundError):
                    bpath.unlink()
            say(
                f"{exc.path} changed between the unload and the write (a client loaded the "
                "topic again): unloading again"
            )
            continue
        check_after(store, Plan.load(plan_path), live, say, undo)
        return outcome
    raise AssertionError("unreachable")


__all__ = [
    "MAX_ROUNDS",
    "LiveFlags",
    "apply",
    "check_after",
    "current",
    "flags",
    "prepare",
    "rebase",
    "unload_loaded",
]
