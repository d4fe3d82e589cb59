"""Plans are validated against the store, not only their digest; apply and undo say what
they did; a plan is saved before it is printed.

A hand edit is made as an attacker (or an accident) could: the value's sha256 and the
plan's digest made again. On real stores: the demo's RocksDB metadata store (its
compacted partition ``orders-partition-0``, compacted ledger 12) and verify worlds in the
session's real ZooKeeper; the pipe test runs the installed CLI into ``head -c 1``.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.plans import Change, Draft, Plan
from pulsarctl_py.stores.metadata import open_metadata_store, read_ledger
from tests.plans.test_validate import b64, one_line, resign, sha
from tests.repair.test_repairs import snapshot
from tests.support.cli_helpers import ledgerctl_script, run
from tests.support.demo_env import demo, demo_root
from tests.support.verify_world import ORDERS, World, build_world

#: the shared demo fixtures this module's tests use
FIXTURES = (demo, demo_root)
COMPACTED = "persistent://public/default/orders-partition-0"
PLAIN = "persistent://public/default/plain"
#: ledgers the module adds to the demo: a compacted ledger of another partition, another
#: of orders-partition-0 itself (copies of ledger 12's metadata), a data ledger of plain
#: (a copy of ledger 0's)
OTHERS_COMPACTED, OWN_COMPACTED, PLAIN_DATA = 41, 42, 43


def _copy_ledger(url: str, source: int, target: int, tags: dict[str, bytes]) -> None:
    """Ledger ``target``'s metadata: ``source``'s with ``tags`` over its custom metadata."""
    with open_metadata_store(url, read_only=False) as store:
        record = read_ledger(store, source)
        assert record is not None and record.metadata is not None
        md = record.metadata
        md.custom_metadata = {**md.custom_metadata, **tags}
        store.put(lm.ledger_path(target), lm.build(md), -1)


@pytest.fixture(scope="module")
def demo_url(demo_root: Path) -> str:
    url = f"rocksdb://{demo_root / 'metadata'}"
    other = b"persistent://public/default/orders-partition-1"
    _copy_ledger(url, 12, OTHERS_COMPACTED, {"pulsar/compactedTopic": other})
    _copy_ledger(url, 12, OWN_COMPACTED, {})
    _copy_ledger(url, 0, PLAIN_DATA, {})
    return url


def _edit_value(path: Path, key_end: str, change: Callable[[Any], None]) -> None:
    """Edit the decoded new value of the plan's change whose key ends with ``key_end``;
    its sha256 and the plan's digest made again."""
    doc = json.loads(path.read_text())
    (c,) = [c for c in doc["changes"] if c["key"].endswith(key_end)]
    data = base64.b64decode(c["new_base64"])
    parse = mld.parse_cursor_info if c["kind"] == "cursor" else mld.parse_ml_info
    decoded = parse(data)
    change(decoded.message)
    new = mld.rebuild(decoded, decoded.message)
    c.update(new_base64=b64(new), new_sha256=sha(new))
    path.write_text(json.dumps(resign(doc), indent=2))


def _compacted_ledger(ledger: int) -> Callable[[Any], None]:
    def change(info: Any) -> None:
        for p in info.properties:
            if p.name == "CompactedTopicLedger":
                p.value = ledger

    return change


def _compaction_plan(capsys: pytest.CaptureFixture[str], path: Path) -> None:
    r = run(capsys, "repair", "cursor", COMPACTED, "__compaction", "--earliest", "--plan", path)
    assert r.code == 0, r.err


def _cursor_value(url: str, topic: str, cursor: str) -> Any:
    with open_metadata_store(url) as store:
        node = store.get(mld.TopicName.parse(topic).cursor_path(cursor))
        assert node is not None
        return mld.parse_cursor_info(node.data).message


# -- the compaction cursor ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ledger", "why"),
    [
        (999, "CompactedTopicLedger becomes 999, which has no BookKeeper metadata"),
        (
            OTHERS_COMPACTED,
            f"CompactedTopicLedger becomes {OTHERS_COMPACTED}, which is a compacted ledger of "
            "persistent://public/default/orders-partition-1, not a compacted ledger of "
            + COMPACTED,
        ),
        (0, "CompactedTopicLedger becomes 0, which is a data ledger of public/default/persistent"),
    ],
    ids=["nonexistent", "another-topics-compacted-ledger", "a-data-ledger"],
)
def test_a_compaction_cursor_pointed_at_a_wrong_ledger_is_refused(
    capsys: pytest.CaptureFixture[str], demo: Path, demo_url: str, ledger: int, why: str
) -> None:
    plan = demo / f"compaction-{ledger}.json"
    _compaction_plan(capsys, plan)
    _edit_value(plan, "/__compaction", _compacted_ledger(ledger))
    before = snapshot(demo_url)
    r = run(capsys, "apply", plan, "-o", "json")
    one_line(r, 2)
    key = mld.TopicName.parse(COMPACTED).cursor_path("__compaction")
    assert f"{key}: {why}" in r.err and "apply refused, nothing written" in r.err, r.err
    assert snapshot(demo_url) == before
    assert not Path(f"{plan}.backup.json").exists()
    # -o json: the outcome, with the key refused and why
    outcome = r.json()
    assert outcome["written"] == [] and [x["key"] for x in outcome["refused"]] == [key]
    assert outcome["refused"][0]["ledger_id"] == ledger


def test_a_compaction_cursor_pointed_at_its_own_compacted_ledger_applies(
    capsys: pytest.CaptureFixture[str], demo: Path, demo_url: str
) -> None:
    plan = demo / "compaction-own.json"
    _compaction_plan(capsys, plan)
    _edit_value(plan, "/__compaction", _compacted_ledger(OWN_COMPACTED))
    before = snapshot(demo_url)
    r = run(capsys, "apply", plan, "-o", "json")
    assert r.code == 0, r.err
    assert [w["action"] for w in r.json()["written"]] == ["set"]
    props = {p.name: p.value for p in _cursor_value(demo_url, COMPACTED, "__compaction").properties}
    assert props["CompactedTopicLedger"] == OWN_COMPACTED
    r = run(capsys, "undo", plan)
    assert r.code == 0 and "restored: 1 key(s) written" in r.err, r.err
    assert snapshot(demo_url) == before


# -- a topic's ledger list ----------------------------------------------------------------------


def _add_ledger_change(path: Path, url: str, topic: str, ledger: int) -> None:
    """Add to the plan at ``path`` a change of ``topic``'s managed ledger, from the value
    the store holds to one whose list also names ``ledger``."""
    key = mld.TopicName.parse(topic).ml_path
    with open_metadata_store(url) as store:
        node = store.get(key)
    assert node is not None
    decoded = mld.parse_ml_info(node.data)
    li = decoded.message.ledgerInfo.add()
    li.ledgerId, li.entries, li.size, li.timestamp = ledger, 1, 10, 1
    new = mld.rebuild(decoded, decoded.message)
    change = Change(key, "managed-ledger", node.data, new, node.stat.version, ["edited"])
    change.creation = node.stat.creation
    doc = json.loads(path.read_text())
    doc["changes"].append(change.to_json())
    path.write_text(json.dumps(resign(doc), indent=2))


@pytest.mark.parametrize(
    ("ledger", "why"),
    [
        (1, "which is a data ledger of public/default/persistent/orders-partition-0, not a data "
         "ledger of public/default/persistent/plain"),
        (999, "the ledger list gains ledger 999, which has no BookKeeper metadata"),
        (12, "which is a compacted ledger of " + COMPACTED),
        (18, "which is a schema ledger"),
    ],
    ids=["another-topics-data-ledger", "nonexistent", "a-compacted-ledger", "a-schema-ledger"],
)  # fmt: skip
def test_a_ledger_list_naming_a_wrong_ledger_is_refused(
    capsys: pytest.CaptureFixture[str], demo: Path, demo_url: str, ledger: int, why: str
) -> None:
    plan = demo / f"list-{ledger}.json"
    r = run(capsys, "repair", "cursor", PLAIN, "sub-1", "--earliest", "--plan", plan)
    assert r.code == 0, r.err
    _add_ledger_change(plan, demo_url, PLAIN, ledger)
    before = snapshot(demo_url)
    r = run(capsys, "apply", plan)
    one_line(r, 2)
    assert f"{mld.TopicName.parse(PLAIN).ml_path}: " in r.err and why in r.err, r.err
    assert snapshot(demo_url) == before  # the cursor change of the same plan neither


def test_a_ledger_list_naming_a_ledger_of_its_own_applies(
    capsys: pytest.CaptureFixture[str], demo: Path, demo_url: str
) -> None:
    plan = demo / "list-own.json"
    r = run(capsys, "repair", "cursor", PLAIN, "sub-1", "--earliest", "--plan", plan)
    assert r.code == 0, r.err
    _add_ledger_change(plan, demo_url, PLAIN, PLAIN_DATA)
    before = snapshot(demo_url)
    r = run(capsys, "apply", plan)
    assert r.code == 0 and "applied: 2 key(s) written, 0 unchanged" in r.err, r.err
    assert run(capsys, "undo", plan).code == 0
    assert snapshot(demo_url) == before


# -- undo says what it did ----------------------------------------------------------------------


def test_undo_after_an_apply_that_changed_nothing_restores_nothing(
    capsys: pytest.CaptureFixture[str], demo: Path, demo_url: str
) -> None:
    """Two plans of the same reset: the second one's apply finds it done and writes
    nothing, so its undo restores nothing (it used to take back the first one's write
    and say 'restored: 1 key(s) written')."""
    before = snapshot(demo_url)
    first, second = demo / "reset-1.json", demo / "reset-2.json"
    for plan in (first, second):
        r = run(capsys, "repair", "cursor", PLAIN, "sub-1", "--earliest", "--plan", plan)
        assert r.code == 0, r.err
    assert run(capsys, "apply", first).code == 0
    applied = snapshot(demo_url)
    assert applied != before
    r = run(capsys, "apply", second, "-o", "json")
    assert r.code == 0 and "already applied" in r.err, r.err
    assert r.json()["written"] == [] and r.json()["note"] == "already applied"
    r = run(capsys, "undo", second, "-o", "json")
    assert r.code == 0, r.err
    assert "nothing restored: its apply changed nothing" in r.err, r.err
    assert "key(s) written" not in r.err
    outcome = r.json()
    key = mld.TopicName.parse(PLAIN).cursor_path("sub-1")
    assert outcome["written"] == [] and [u["key"] for u in outcome["unchanged"]] == [key]
    assert snapshot(demo_url) == applied
    r = run(capsys, "undo", first)
    assert r.code == 0 and "restored: 1 key(s) written, 0 unchanged" in r.err, r.err
    assert snapshot(demo_url) == before
    r = run(capsys, "undo", first, "-o", "json")
    assert r.code == 0 and "nothing restored: already undone" in r.err, r.err
    assert r.json()["written"] == []
    # the record of an apply that changed nothing is history: the plan file may be reused
    r = run(capsys, "repair", "cursor", PLAIN, "sub-1", "--earliest", "--plan", second)
    assert r.code == 0, r.err
    assert not Path(f"{second}.backup.json").exists()


# -- on ZooKeeper: repairs of broken topics still apply, and undo checks what it restores ----


@pytest.fixture
def zk_world(scratch_zk: str, tmp_path: Path) -> Callable[[str | None], World]:
    def make(variant: str | None) -> World:
        with open_metadata_store(scratch_zk, read_only=False) as store:
            return build_world(tmp_path / "w", variant, store=store, metadata_url=scratch_zk)

    return make


def _flags(world: World) -> list[str]:
    return ["--metadata-url", world.metadata_url, "--bookie-dir", str(world.bookie_dir)]


def test_a_list_keeping_a_ledger_without_metadata_still_applies_and_undoes(
    capsys: pytest.CaptureFixture[str], zk_world: Callable[[str | None], World], tmp_path: Path
) -> None:
    """Orders lists 10, 11 (no BookKeeper metadata, no entries left) and 12: a plan that
    drops 10 keeps 11, which it does not newly name: it applies. The missing-ledgers repair
    drops 11; its undo names 11 again, as it was when the repair was applied: it
    restores."""
    world = zk_world("ledger-lost")
    before = snapshot(world.metadata_url)
    key = mld.TopicName.parse(ORDERS).ml_path
    with open_metadata_store(world.metadata_url) as store:
        draft = Draft(store)
        decoded = mld.parse_ml_info(draft.get(key) or b"")
        del decoded.message.ledgerInfo[0]  # ledger 10
        draft.set(key, "managed-ledger", mld.rebuild(decoded, decoded.message), "drop 10")
        draft.plan().save(tmp_path / "drop-10.json")
    r = run(capsys, "apply", tmp_path / "drop-10.json")
    assert r.code == 0, r.err
    assert run(capsys, "undo", tmp_path / "drop-10.json").code == 0
    assert snapshot(world.metadata_url) == before
    plan = tmp_path / "missing.json"
    r = run(capsys, "repair", "missing-ledgers", ORDERS, *_flags(world), "--plan", plan)
    assert r.code == 0, r.err
    assert run(capsys, "apply", plan).code == 0
    restores = json.loads(Path(f"{plan}.backup.json").read_text())["restores_broken"]
    assert {(p["key"], p["ledger_id"], p["problem"]) for p in restores} >= {(key, 11, "missing")}
    r = run(capsys, "undo", plan)
    assert r.code == 0, r.err
    assert snapshot(world.metadata_url) == before


def test_undo_refuses_to_point_at_a_ledger_deleted_after_the_apply(
    capsys: pytest.CaptureFixture[str], zk_world: Callable[[str | None], World], tmp_path: Path
) -> None:
    """`repair compaction --to 31` moves orders off compacted ledger 30; 30 is then
    deleted (as `orphans --delete` would: nothing references it). Undoing the repair would
    point the cursor at a ledger that is gone: refused, nothing restored; once 30 is back
    the undo restores."""
    world = zk_world(None)
    _copy_ledger(world.metadata_url, 30, 31, {})
    before = snapshot(world.metadata_url)
    plan = tmp_path / "to-31.json"
    r = run(capsys, "repair", "compaction", ORDERS, "--to", "31", *_flags(world), "--plan", plan)
    assert r.code == 0, r.err
    assert run(capsys, "apply", plan).code == 0
    with open_metadata_store(world.metadata_url, read_only=False) as store:
        record = read_ledger(store, 30)
        assert record is not None and record.stat is not None
        store.delete(record.path, record.stat.version)
    gone = snapshot(world.metadata_url)
    r = run(capsys, "undo", plan)
    one_line(r, 2)
    assert "CompactedTopicLedger becomes 30, which has no BookKeeper metadata" in r.err
    assert "it was not so when the plan was applied" in r.err and "nothing restored" in r.err
    assert snapshot(world.metadata_url) == gone
    with open_metadata_store(world.metadata_url, read_only=False) as store:
        store.put(record.path, record.raw, -1)
    r = run(capsys, "undo", plan)
    assert r.code == 0, r.err
    assert snapshot(world.metadata_url) == before


def test_a_compaction_cursor_pointed_at_a_nonexistent_ledger_is_refused_on_zookeeper(
    capsys: pytest.CaptureFixture[str], zk_world: Callable[[str | None], World], tmp_path: Path
) -> None:
    world = zk_world(None)
    plan = tmp_path / "c.json"
    r = run(
        capsys, "repair", "cursor", ORDERS, "__compaction", "--earliest", *_flags(world),
        "--plan", plan,
    )  # fmt: skip
    assert r.code == 0, r.err
    _edit_value(plan, "/__compaction", _compacted_ledger(987_654_321))
    before = snapshot(world.metadata_url)
    r = run(capsys, "apply", plan)
    one_line(r, 2)
    assert "CompactedTopicLedger becomes 987654321, which has no BookKeeper metadata" in r.err
    assert snapshot(world.metadata_url) == before


# -- a plan is saved before it is printed -----------------------------------------------------


@pytest.fixture
def many_acks(tmp_path: Path) -> Iterator[World]:
    """A world whose cursor ``sub`` holds 300 individually acknowledged ranges: resetting
    it makes a plan of some 100 KiB, more than a pipe and Python's stdout buffer hold."""
    world = build_world(tmp_path / "w", None)
    path = mld.TopicName.parse(ORDERS).cursor_path("sub")
    with open_metadata_store(world.metadata_url, read_only=False) as store:
        node = store.get(path)
        assert node is not None
        decoded = mld.parse_cursor_info(node.data)
        for i in range(300):
            r = decoded.message.individualDeletedMessages.add()
            r.lowerEndpoint.ledgerId = r.upperEndpoint.ledgerId = 12
            r.lowerEndpoint.entryId, r.upperEndpoint.entryId = 2 * i, 2 * i + 1
        store.put(path, mld.rebuild(decoded, decoded.message), node.stat.version)
    yield world


def test_a_plan_piped_to_head_is_saved_and_the_command_exits_quietly(
    many_acks: World, tmp_path: Path
) -> None:
    """`ledgerctl repair ... --plan p.json | head -c 1`, once head has its byte and has
    left: the print meets a closed pipe. The plan was saved before it, whole, and the
    command ends quietly with the shell's broken-pipe status (141): no traceback, no error
    line. (head takes its byte from a write of the test's own first: had it to come from
    ledgerctl, whether ledgerctl's later writes meet the closed pipe or a partial write
    into it depends on the kernel's timing; a 165 KiB print is well past Python's stdout
    buffer, so it is written, and fails, inside the print.)"""
    plan = tmp_path / "p.json"
    read, write = os.pipe()
    head = subprocess.Popen(["head", "-c", "1"], stdin=read, stdout=subprocess.PIPE)
    os.close(read)
    try:
        os.write(write, b"#")
        assert head.communicate(timeout=60)[0] == b"#"  # head has its byte, and has left
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERCTL_")}
        done = subprocess.run(
            [
                ledgerctl_script(), "repair", "cursor", ORDERS, "sub", "--earliest",
                *_flags(many_acks), "--plan", str(plan), "-o", "json",
            ],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=120,
            env=env | {"XDG_CONFIG_HOME": str(tmp_path / "no-config")},
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr and "ledgerctl: error" not in done.stderr, done.stderr
    assert f"plan saved to {plan}" in done.stderr
    saved = Plan.load(plan)  # whole, and its digest holds
    assert len(saved.changes) == 1 and plan.stat().st_size > 64 * 1024
