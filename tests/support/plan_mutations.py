"""Mutated plans against a real world: none may write outside its store or raise anything
but a LedgerctlError.

A :class:`Arena` is a verify world (Pulsar's RocksDB metadata store and a stopped
bookie's DbLedgerStorage or ``.idx`` directory) with a valid plan that deletes the orphan
ledger (its znode and its bookie index entries) and moves a cursor, plus files outside
the world that mutations aim at. :func:`mutate` changes a copy of the plan the ways an
attacker or an accident would (paths pointed at those files or at other places in the
bookie directory, keys retargeted to BookKeeper's own nodes, kinds swapped, values
replaced, numbers out of range, structure broken, the store's binding changed, a
topic's ledger list or a cursor's ``CompactedTopicLedger`` / ``cursorsLedgerId`` pointed at
a ledger that does not exist or is another's), keeping hashes and the digest consistent
part of the time so that the checks behind them are reached. :meth:`Arena.run` applies
the mutant through the library, undoes it when it applied, and reports what happened; it
raises :class:`Violation` when a file outside the world changed, when a refused plan left
a write behind, when an applied plan left a topic naming a ledger that is not there or not
its own (:func:`bad_references`, read straight from the store), when an applied plan could
not be undone to the original state, or when something other than a LedgerctlError
escaped.

Used by tests/plans/test_fuzz.py (Hypothesis, in the suite) and scripts/fuzz_plans.py (the
long run).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsarctl_py.errors import LedgerctlError
from pulsarctl_py.plans import Draft, Plan, apply_plan, document_digest, undo_plan
from pulsarctl_py.repair.cursors import reset_cursor
from pulsarctl_py.repair.orphans import delete_orphans
from pulsarctl_py.stores.metadata import open_metadata_store
from tests.support.verify_world import ORDERS, World, build_world

#: what every mutation may put where a text goes
KEYS = [
    "/ledgers/LAYOUT",
    "/ledgers/INSTANCEID",
    "/ledgers/cookies/127.0.0.1:3181",
    "/ledgers/available/127.0.0.1:3181",
    "/ledgers/idgen/ID-0000000001",
    "/ledgers",
    "/managed-ledgers",
    "/managed-ledgers/public/default/persistent",
    "/managed-ledgers/public/default/persistent/orders",
    "/managed-ledgers/public/default/persistent/orders/sub",
    "/managed-ledgers/public/default/persistent/orders-shadow",
    "/managed-ledgers/tenant-b/ns/persistent/plain/c",
    "/ledgers/00/0000/L0010",
    "/ledgers/00/0000/L0050",
    "/ledgers/L0000000070",
    "/",
    "/zookeeper/quota",
    "relative/key",
    "/a//b",
    "/a/../b",
]
KINDS = ["managed-ledger", "cursor", "ledger", "ledger-data", "locations", "index-file", "x", ""]
#: ledgers a topic's list or a cursor may be pointed at: none (999, 2**40), orders' own data
#: (12; 70 is the orphan the plan deletes), its cursor ledger (20), its compacted ledger
#: (30), plain's data (40, 41), a partition's (80), a schema ledger (50), another
#: application's (60)
LEDGER_IDS = [999, 2**40, 12, 70, 20, 30, 40, 41, 80, 50, 60]
NUMBERS = [0, 1, -1, 2, 70, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63), 10**30, True, 1.5]


class Violation(AssertionError):
    """A mutated plan did what no plan may do."""


def _digest_files(paths: list[Path]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for root in paths:
        files = [root] if not root.is_dir() or root.is_symlink() else sorted(root.rglob("*"))
        for p in files:
            if p.is_symlink():
                out[str(p)] = "link:" + str(p.readlink())
            elif p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            elif not p.exists():
                out[str(p)] = None
    return out


@dataclass
class Outcome:
    """What one mutant did: ``stage`` is load, apply or applied (then undone)."""

    stage: str
    error: str | None = None


@dataclass
class Arena:
    root: Path
    world: World
    plan_doc: dict[str, Any]
    victims: list[Path]
    counter: int = 0
    baseline: dict[str, Any] = field(default_factory=dict)
    #: the references of the world that do not hold before any plan (none in this world)
    bad_before: set[tuple[str, str, int]] = field(default_factory=set)

    @classmethod
    def build(cls, root: Path, index: str = "db") -> Arena:
        world = build_world(root / "world", "orphan-ledger", index=index)
        outside = root / "outside"
        outside.mkdir()
        victims = [outside / "victim.conf", outside / "secret.key"]
        victims[0].write_bytes(b"keep me\n")
        victims[1].write_bytes(bytes(range(256)))
        # a link inside the bookie directory pointing outside it: paths through it must
        # never be followed
        (world.bookie_dir / "current" / "escape").symlink_to(outside)
        arena = cls(root, world, {}, victims)
        arena.replan()
        arena.baseline = arena.state()
        arena.bad_before = bad_references(world.metadata_url)
        return arena

    def replan(self) -> None:
        """Draft the valid plan again: after an apply and its undo the nodes it deleted
        were created again, so the old plan's creation ids no longer hold."""
        with self.world.source() as source:
            assert source.metadata is not None
            draft = Draft(source.metadata)
            delete_orphans(draft, source)
            reset_cursor(draft, ORDERS, "sub", source, earliest=True)
            plan = draft.plan()
        assert plan.bookie and len(plan.changes) >= 2
        self.plan_doc = plan.to_json()

    # -- what must not change -----------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The world's metadata (every node's bytes), its bookie directory's files and
        index records, and the files outside it."""
        from tests.plans.test_bookie_index import index_dump
        from tests.repair.test_repairs import snapshot

        bookie_files = {
            k: v
            for k, v in _digest_files([self.world.bookie_dir]).items()
            if "/ledgers/" not in k and "/locations/" not in k  # RocksDB files: see the dump
        }
        return {
            "metadata": snapshot(self.world.metadata_url),
            "index": index_dump(self.world),
            "bookie_files": bookie_files,
            "outside": _digest_files([self.root / "outside"]),
        }

    def check(self, what: str, *, outside_only: bool = False) -> None:
        if outside_only:  # nothing was opened for writing: only what a read could reach
            now = {"outside": _digest_files([self.root / "outside"])}
            if now["outside"] != self.baseline["outside"]:
                raise Violation(f"{what}: a file outside the world changed")
            return
        now = self.state()
        for part, before in self.baseline.items():
            if now[part] != before:
                changed = sorted(
                    k for k in set(before) | set(now[part]) if before.get(k) != now[part].get(k)
                )
                raise Violation(f"{what}: {part} changed: {changed[:5]}")

    # -- one mutant ---------------------------------------------------------------------------

    def run(self, doc: Any) -> Outcome:
        """Apply ``doc`` as a plan file, undo it if it applied; check nothing was left."""
        self.counter += 1
        path = self.root / f"plan-{self.counter}.json"
        try:
            text = json.dumps(doc, indent=1)
        except (TypeError, ValueError):
            text = repr(doc)
        path.write_text(text)
        try:
            try:
                Plan.load(path)
            except LedgerctlError as exc:
                self.check("a plan refused at load", outside_only=True)
                return Outcome("load", exc.one_line())
            try:
                with open_metadata_store(self.world.metadata_url, read_only=False) as store:
                    apply_plan(path, store)
            except LedgerctlError as exc:
                self.check("a plan refused at apply")
                return Outcome("apply", exc.one_line())
            bad = bad_references(self.world.metadata_url) - self.bad_before
            if bad:
                raise Violation(f"an applied mutant left references that do not hold: {bad}")
            try:
                with open_metadata_store(self.world.metadata_url, read_only=False) as store:
                    undo_plan(path, store)
            except LedgerctlError as exc:
                raise Violation(f"an applied mutant could not be undone: {exc}") from None
            self.check("an applied mutant, undone")
            self.replan()
            return Outcome("applied")
        except (Violation, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise Violation(f"{type(exc).__name__} escaped: {exc}") from exc
        finally:
            path.unlink(missing_ok=True)
            Path(f"{path}.backup.json").unlink(missing_ok=True)


# -- what the topics point at ------------------------------------------------------------------


def bad_references(url: str) -> set[tuple[str, str, int]]:
    """(key, what, ledger) for every reference in the store that does not hold: a ledger a
    topic lists that has no metadata or is not tagged as a data ledger of the topic (or of
    its shadow source); a ``cursorsLedgerId`` that is not that cursor's ledger; a
    ``CompactedTopicLedger`` that is not a compacted ledger of the topic. Read straight from
    the store and the ledgers' custom metadata (Pulsar's ``LedgerMetadataUtils`` tags)."""
    from pulsarctl_py.decoders import ledger_metadata as lm
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.stores.metadata import list_managed_ledgers, read_ledger

    bad: set[tuple[str, str, int]] = set()
    with open_metadata_store(url) as store:
        place = store.bookkeeper()

        def tags(lid: int) -> lm.PulsarLedgerTags | None:
            record = read_ledger(place.store, lid, place.root) if 0 <= lid < 2**63 else None
            return None if record is None or record.metadata is None else record.metadata.pulsar()

        for ref in list_managed_ledgers(store):
            node = store.get(ref.path)
            info = mld.parse_ml_info(node.data if node is not None else b"").message
            owners = {ref.name}
            source = mld.shadow_source(info)
            if source is not None:
                owners.add(mld.TopicName.parse(source).persistence_name)
            for li in info.ledgerInfo:
                t = tags(li.ledgerId)
                if t is None or t.kind != "data" or t.managed_ledger not in owners:
                    bad.add((ref.path, "ledger list", li.ledgerId))
            for child in store.children(ref.path):
                path = f"{ref.path}/{child}"
                data = store.get(path)
                cursor = mld.parse_cursor_info(data.data if data is not None else b"").message
                if cursor.cursorsLedgerId != -1:
                    t = tags(cursor.cursorsLedgerId)
                    if (
                        t is None
                        or t.cursor != mld.url_decode(child)
                        or t.managed_ledger != ref.name
                    ):
                        bad.add((path, "cursorsLedgerId", cursor.cursorsLedgerId))
                for p in cursor.properties:
                    if p.name == "CompactedTopicLedger":
                        t = tags(p.value)
                        if t is None or t.compacted_topic != ref.topic.full_name:
                            bad.add((path, "CompactedTopicLedger", p.value))
    return bad


# -- mutations --------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _places(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (keys and indexes) into ``doc``."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.extend(_places(v, (*prefix, k)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.extend(_places(v, (*prefix, i)))
    return out


def _set(doc: Any, place: tuple[Any, ...], value: Any) -> Any:
    if not place:
        return value
    parent = doc
    for step in place[:-1]:
        parent = parent[step]
    parent[place[-1]] = value
    return doc


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randrange(8 if depth < 2 else 5)
    if choice == 0:
        return None
    if choice == 1:
        return rng.choice([True, False])
    if choice == 2:
        return rng.choice(NUMBERS)
    if choice == 3:
        return rng.choice(["", "x", "AAAA", "====", "\u2603", "a" * 300])
    if choice == 4:
        return rng.choice(KEYS)
    if choice == 5:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {rng.choice(["key", "kind", "path", "a"]): _random_json(rng, depth + 1)}


def _aim(arena: Arena, rng: random.Random) -> str:
    """A path a bookie change could be pointed at."""
    current = arena.world.bookie_dir.resolve() / "current"
    picks = [
        *(str(v) for v in arena.victims),
        str(current / "escape" / "victim.conf"),
        str(current / "VERSION"),
        str(current / "lastMark"),
        str(current / "ledgers"),
        str(current / "locations"),
        str(current / "0" / "a" / "a.idx"),
        str(current / "0" / "46" / "46.idx"),
        str(current / "0" / "46" / ".." / ".." / "VERSION"),
        str(current),
        "/",
        "relative/0.idx",
    ]
    return rng.choice(picks)


def mutate(arena: Arena, rng: random.Random) -> Any:
    """A mutant of the arena's plan (see the module docstring)."""
    doc = copy.deepcopy(arena.plan_doc)
    for _ in range(rng.randint(1, 3)):
        doc = _one_mutation(arena, doc, rng)
    if isinstance(doc, dict) and rng.random() < 0.6:
        _fix_hashes(doc)
    if isinstance(doc, dict) and rng.random() < 0.7:
        doc["digest"] = document_digest(doc)
    return doc


def _one_mutation(arena: Arena, doc: Any, rng: random.Random) -> Any:
    if not isinstance(doc, dict):
        return doc
    what = rng.randrange(12)
    changes = doc.get("changes") if isinstance(doc.get("changes"), list) else []
    bookie = doc.get("bookie") if isinstance(doc.get("bookie"), list) else []
    if what == 0 and bookie:  # point a bookie change somewhere else, its bytes consistent
        change = rng.choice(bookie)
        if isinstance(change, dict):
            target = _aim(arena, rng)
            change["path"] = target
            if rng.random() < 0.5:
                change["current"] = rng.choice([str(Path(target).parent), target, "/"])
            try:
                data = Path(target).read_bytes() if Path(target).is_file() else b"x"
            except OSError:
                data = b"x"
            change["old_base64"], change["old_sha256"] = _b64(data), _sha(data)
            if rng.random() < 0.5:
                change["kind"] = rng.choice(KINDS)
    elif what == 1 and changes:  # retarget a metadata change, with the node's real bytes
        change = rng.choice(changes)
        if isinstance(change, dict):
            key = rng.choice(KEYS)
            change["key"] = key
            if rng.random() < 0.5:
                change["kind"] = rng.choice(KINDS)
            _take_node(arena, change, key)
    elif what == 2 and changes:  # write another value
        change = rng.choice(changes)
        if isinstance(change, dict):
            data = rng.choice([b"", b"\xff" * 7, rng.randbytes(rng.randrange(64)), b"\x08\x01"])
            change["new_base64"], change["new_sha256"] = _b64(data), _sha(data)
    elif what == 3:  # a number out of range
        place = rng.choice([p for p in _places(doc) if p and isinstance(p[-1], str)])
        doc = _set(doc, place, rng.choice(NUMBERS))
    elif what == 4:  # anything anywhere
        place = rng.choice(_places(doc))
        doc = _set(doc, place, _random_json(rng))
    elif what == 5:  # drop a field
        place = rng.choice([p for p in _places(doc) if p])
        parent = doc
        for step in place[:-1]:
            parent = parent[step]
        del parent[place[-1]]
    elif what == 6 and (changes or bookie):  # duplicate or reorder
        items = rng.choice([c for c in (changes, bookie) if c])
        if rng.random() < 0.5:
            items.append(copy.deepcopy(rng.choice(items)))
        else:
            rng.shuffle(items)
    elif what == 7:  # the binding
        store = doc.get("store")
        if isinstance(store, dict):
            target = rng.choice(["identity", "roots", "bookie_dirs"])
            if target == "identity" and isinstance(store.get("identity"), dict):
                store["identity"] = {k: "x" for k in store["identity"]}
            elif target == "roots":
                store["roots"] = {"managed_ledgers": "/", "ledgers": rng.choice(KEYS)}
            elif isinstance(store.get("bookie_dirs"), list):
                for item in store["bookie_dirs"]:
                    if isinstance(item, dict):
                        item["path"] = str(arena.root / "outside")
        else:
            doc["metadata_url"] = rng.choice(["rocksdb://elsewhere", "zk:127.0.0.1:1", ""])
    elif what == 10 and changes:  # a cursor pointed at a ledger
        cursors = [c for c in changes if isinstance(c, dict) and c.get("kind") == "cursor"]
        if cursors:
            _point_cursor(rng.choice(cursors), rng)
    elif what == 11:  # orders' ledger list naming another ledger
        _add_ledger(arena, doc, rng)
    elif what == 8:  # the version or format
        doc["version"] = rng.choice([1, 2, 3, 4, "3", None])
    else:  # a create where there was a set, or the opposite
        if changes:
            change = rng.choice(changes)
            if isinstance(change, dict):
                change["old_base64"] = None if change.get("old_base64") else _b64(b"x")
                change["version"] = None if rng.random() < 0.5 else rng.choice(NUMBERS)
    return doc


def _point_cursor(change: dict[str, Any], rng: random.Random) -> None:
    """The cursor's new value with its ``CompactedTopicLedger`` (added or replaced) or its
    ``cursorsLedgerId`` set to a ledger of :data:`LEDGER_IDS`."""
    how = "compacted" if rng.random() < 0.5 else "cursor-ledger"
    _set_cursor(change, rng.choice(LEDGER_IDS), how)


def _set_cursor(change: dict[str, Any], lid: int, how: str) -> None:
    from pulsarctl_py.decoders import managed_ledger as mld

    try:
        decoded = mld.parse_cursor_info(base64.b64decode(change.get("new_base64") or ""))
    except (LedgerctlError, ValueError, TypeError):
        return
    info = decoded.message
    if how == "compacted":
        kept = [(p.name, p.value) for p in info.properties if p.name != "CompactedTopicLedger"]
        del info.properties[:]
        for name, value in [*kept, ("CompactedTopicLedger", lid)]:
            info.properties.add(name=name, value=value)
    else:
        info.cursorsLedgerId = lid
    change["new_base64"] = _b64(mld.rebuild(decoded, info))
    change["new_sha256"] = _sha(base64.b64decode(change["new_base64"]))


def point_cursor(arena: Arena, lid: int, how: str) -> dict[str, Any]:
    """The arena's plan with its cursor change naming ledger ``lid`` (``how``: as
    "compacted", its CompactedTopicLedger; as "cursor-ledger", its cursorsLedgerId); the
    hashes and digest made again."""
    doc = copy.deepcopy(arena.plan_doc)
    (change,) = [c for c in doc["changes"] if c["kind"] == "cursor"]
    _set_cursor(change, lid, how)
    doc["digest"] = document_digest(doc)
    return doc


def point_list(arena: Arena, lid: int) -> dict[str, Any]:
    """The arena's plan with a change of orders' managed ledger whose list gains ledger
    ``lid``; the hashes and digest made again."""
    doc = copy.deepcopy(arena.plan_doc)
    _add_ledger(arena, doc, random.Random(0), lid)
    doc["digest"] = document_digest(doc)
    return doc


def _add_ledger(
    arena: Arena, doc: dict[str, Any], rng: random.Random, lid: int | None = None
) -> None:
    """A change of orders' managed ledger (from the value the store holds) whose list
    gains a ledger (``lid``, else one of :data:`LEDGER_IDS`), or has one of its ledgers
    replaced by it."""
    from pulsarctl_py.decoders import managed_ledger as mld

    key = mld.TopicName.parse(ORDERS).ml_path
    changes = doc.get("changes")
    if not isinstance(changes, list):
        return
    change = next((c for c in changes if isinstance(c, dict) and c.get("key") == key), None)
    if change is None:
        change = {"key": key, "kind": "managed-ledger", "why": ["a mutation"]}
        _take_node(arena, change, key)
        change["new_base64"] = change.get("old_base64")
        changes.append(change)
    try:
        decoded = mld.parse_ml_info(base64.b64decode(change.get("new_base64") or ""))
    except (LedgerctlError, ValueError, TypeError):
        return
    info = decoded.message
    if lid is None and info.ledgerInfo and rng.random() < 0.3:
        rng.choice(info.ledgerInfo).ledgerId = rng.choice(LEDGER_IDS)
    else:
        li = info.ledgerInfo.add()
        li.ledgerId = rng.choice(LEDGER_IDS) if lid is None else lid
        li.entries, li.size, li.timestamp = 1, 10, 1
    change["new_base64"] = _b64(mld.rebuild(decoded, info))
    change["new_sha256"] = _sha(base64.b64decode(change["new_base64"]))


def _take_node(arena: Arena, change: dict[str, Any], key: str) -> None:
    """Make a retargeted change expect what ``key`` holds now (so that only the checks
    of kind and place can stop it)."""
    try:
        with open_metadata_store(arena.world.metadata_url) as store:
            node = store.get(key)
    except LedgerctlError:
        return
    if node is None:
        change.update(old_base64=None, old_sha256=None, version=None, creation=None)
    else:
        change.update(
            old_base64=_b64(node.data),
            old_sha256=_sha(node.data),
            version=node.stat.version,
            creation=node.stat.creation,
        )


def _fix_hashes(doc: dict[str, Any]) -> None:
    """Make every base64 value's sha256 match it (as a careful forger would)."""
    for section in ("changes", "bookie"):
        items = doc.get(section)
        if not isinstance(items, list):
            continue
        for item in items:
            if not isinstance(item, dict):
                continue
            for side in ("old", "new"):
                text = item.get(f"{side}_base64")
                if isinstance(text, str):
                    try:
                        item[f"{side}_sha256"] = _sha(base64.b64decode(text, validate=True))
                    except ValueError:
                        pass
