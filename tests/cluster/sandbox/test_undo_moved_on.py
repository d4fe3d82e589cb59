"""Undo after the broker moved on, on the real broker (Pulsar 4.0.7) of ``scripts/sandbox``.

A plan drops the topic's first ledger from its ledger list (drafted on the write spine as a
repair drafts it, applied with the topic unloaded, as the other sandbox tests do). The
broker then loads the topic and a producer writes: the broker rolls a new ledger into the
list. ``undo`` is refused (exit 5, nothing written) with what changed and a new plan; that
plan, applied with the topic unloaded, gives the topic back its first ledger and keeps the
ledger the broker wrote since: a new subscription reads every message, the old and the new.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.sandbox_oracle import cli, ledgerctl_env, oracle_client, produce, topic_name


@pytest.fixture(scope="module")
def client(sandbox: Any) -> Iterator[Any]:
    yield from oracle_client(sandbox)


def _read(client: Any, topic: str, subscription: str) -> list[bytes]:
    import pulsar

    consumer = client.subscribe(
        topic, subscription, initial_position=pulsar.InitialPosition.Earliest
    )
    out: list[bytes] = []
    try:
        while True:
            try:
                msg = consumer.receive(5000 if not out else 1500)
            except pulsar.Timeout:
                return out
            out.append(msg.data())
            consumer.acknowledge(msg)
    finally:
        consumer.close()


def _ledgers(sandbox: Any, topic: str) -> list[int]:
    return [li["ledgerId"] for li in sandbox.internal_stats(topic)["ledgers"]]


def _drop_first_ledger(sandbox: Any, topic: str, path: Path) -> int:
    """Save the plan that drops the topic's first ledger from its list; that ledger."""
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.plans.draft import make_plan

    ml_path = mld.TopicName.parse(topic).ml_path
    dropped: list[int] = []

    def build(draft: Any, _source: Any) -> None:
        decoded = mld.parse_ml_info(draft.get(ml_path))
        info = decoded.message
        dropped.append(info.ledgerInfo[0].ledgerId)
        del info.ledgerInfo[0]
        draft.set(ml_path, "managed-ledger", mld.rebuild(decoded, info), "drop the first ledger")
        draft.topic(topic)

    with ledgerctl_env(sandbox):
        make_plan(None, None, build).save(path)
    return dropped[0]


def test_undo_after_the_broker_wrote_offers_a_plan_that_keeps_its_ledger(
    sandbox: Any, client: Any, tmp_path: Path
) -> None:
    from pulsarctl_py.decoders.managed_ledger import TopicName

    topic = topic_name("undo-moved-on")
    parts = []
    for part in range(2):  # two ledgers of four messages
        parts.append([f"{part}-{i}".encode() for i in range(4)])
        produce(client, topic, [(None, v) for v in parts[-1]])
        sandbox.unload(topic)
    plan = tmp_path / "drop.json"
    first = _drop_first_ledger(sandbox, topic, plan)
    # the topic is unloaded; its bundle stays owned (the broker's system readers)
    cli(sandbox, "apply", plan, "--force-owned")
    # the broker loads the topic without its first ledger, and writes into a new one
    assert _read(client, topic, "between") == parts[1]
    parts.append([f"2-{i}".encode() for i in range(4)])
    produce(client, topic, [(None, v) for v in parts[-1]])
    moved_on = _ledgers(sandbox, topic)
    assert first not in moved_on
    sandbox.unload(topic)
    # undo: refused (the list changed since the apply), nothing written, a new plan saved
    ml_path = TopicName.parse(topic).ml_path
    new_plan = tmp_path / "put-back.json"
    undo = cli(sandbox, "undo", plan, "--force-owned", "--plan", new_plan, "-o", "json", ok=(5,))
    doc = json.loads(undo.stdout)
    assert [r["key"] for r in doc["refused"]] == [ml_path], undo.stderr
    (key,) = doc["rebase"]["keys"]
    assert key["refused"] is None and any(
        line.startswith("+") and f"ledgerId: {moved_on[-1]}" in line
        for line in key["changed_since_apply"]
    ), key["changed_since_apply"]
    assert doc["rebase"]["new_plan_file"] == str(new_plan)
    assert "ledgerctl: error: undo refused, nothing restored" in undo.stderr
    assert new_plan.exists()
    # applied with the topic still unloaded (the broker rolls a new ledger when it loads it)
    applied = json.loads(cli(sandbox, "apply", new_plan, "--force-owned", "-o", "json").stdout)
    assert [w["key"] for w in applied["written"]] == [ml_path] and applied["refused"] == []
    # the broker serves the first ledger again and keeps the one it wrote since
    after = _ledgers(sandbox, topic)
    assert after[0] == first and set(moved_on) <= set(after)
    assert _read(client, topic, "after") == parts[0] + parts[1] + parts[2]


def test_undo_after_the_broker_wrote_on_the_live_path(
    sandbox: Any, client: Any, tmp_path: Path
) -> None:
    """The same with no manual unload: the plan applied with --unload while a consumer is
    connected (the broker loads the topic again at once and rolls a ledger: the apply
    rebases onto it), the broker writes, and the undo and the new plan run with --unload.
    (The consumer is closed before the undo: with a client loading the topic between the
    undo and the new plan's apply, the apply's rebase refuses a change of the topic's
    properties; see the report of this branch.)"""
    import pulsar

    topic = topic_name("undo-moved-on-live")
    parts = []
    for part in range(2):
        parts.append([f"{part}-{i}".encode() for i in range(4)])
        produce(client, topic, [(None, v) for v in parts[-1]])
        sandbox.unload(topic)
    consumer = client.subscribe(topic, "connected", initial_position=pulsar.InitialPosition.Latest)
    # the plan is made on what the broker persisted when it closed the topic
    sandbox.unload(topic)
    plan = tmp_path / "drop.json"
    first = _drop_first_ledger(sandbox, topic, plan)
    try:
        cli(sandbox, "apply", plan, "--unload", "--yes")
        parts.append([f"2-{i}".encode() for i in range(4)])
        produce(client, topic, [(None, v) for v in parts[-1]])
        assert [consumer.receive(10000).data() for _ in range(4)] == parts[2]
        moved_on = _ledgers(sandbox, topic)
        assert first not in moved_on
    finally:
        consumer.close()
    new_plan = tmp_path / "put-back.json"
    undo = cli(sandbox, "undo", plan, "--unload", "--plan", new_plan, "-o", "json", ok=(5,))
    doc = json.loads(undo.stdout)
    assert doc["rebase"]["new_plan_file"] == str(new_plan), undo.stderr
    cli(sandbox, "apply", new_plan, "--unload")
    after = _ledgers(sandbox, topic)
    assert after[0] == first and set(moved_on) <= set(after)
    assert _read(client, topic, "after") == parts[0] + parts[1] + parts[2]
