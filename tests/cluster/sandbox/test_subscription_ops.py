"""Subscription operations as plans (``repair cursor --skip``, ``--clear-backlog``, ``--time``,
``--all-subscriptions``, a partitioned topic's base name), against the real broker (Pulsar
4.0.7) of ``scripts/sandbox``.

Each test puts two subscriptions in the same state, lets the broker do the operation on one
(its admin API: skip, clear-backlog, reset-cursor) and ledgerctl plan and apply it on the
other with the topic unloaded (as the runbooks and tests/cluster/sandbox/test_repairs.py do:
nothing touches the topic between the unload and the apply), then lets the broker load the
topic again: its internal stats and what its consumers receive must be the same for both.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.sandbox_oracle import (
    oracle_client,
    plan_and_apply,
    produce,
    receive_all,
    short,
    topic_name,
)


def _plan_and_apply(sandbox, tmp_path, *args: Any) -> dict[str, Any]:
    return plan_and_apply(sandbox, tmp_path, "repair", "cursor", *args)


@pytest.fixture(scope="module")
def client(sandbox) -> Iterator[Any]:
    yield from oracle_client(sandbox)


def _poll(what: str, check: Callable[[], Any], timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _read(client: Any, topic: str, subscription: str) -> list[bytes]:
    consumer = client.subscribe(topic, subscription)
    try:
        return sorted(receive_all(consumer))
    finally:
        consumer.close()


def _cursor(sandbox, topic: str, subscription: str) -> dict[str, Any]:
    return sandbox.internal_stats(topic)["cursors"][subscription]


# -- skip -----------------------------------------------------------------------------------


def test_skip_writes_what_the_brokers_skip_writes(sandbox, client, tmp_path):
    import pulsar

    name = topic_name("subops-skip")
    values = [f"m{i}".encode() for i in range(20)]
    produce(client, name, [(None, v) for v in values], batching_enabled=False)
    # the same state on both: mark-delete at the third message, and the 5th, 7th, 8th,
    # 10th and 12th acknowledged one by one (skip passes over some, keeps the last)
    for sub in ("by-broker", "by-ledgerctl"):
        consumer = client.subscribe(name, sub, initial_position=pulsar.InitialPosition.Earliest)
        msgs = [consumer.receive(10000) for _ in range(12)]
        consumer.acknowledge_cumulative(msgs[2])
        for i in (4, 6, 7, 9, 11):
            consumer.acknowledge(msgs[i])
        _poll(
            f"{sub}'s acks",
            lambda sub=sub: (
                _cursor(sandbox, name, sub)["individuallyDeletedMessages"].count("(") == 4
            ),
        )
        consumer.close()
    states = [_cursor(sandbox, name, sub) for sub in ("by-broker", "by-ledgerctl")]
    for field in ("markDeletePosition", "individuallyDeletedMessages"):
        assert states[0][field] == states[1][field], field
    sandbox.admin("POST", sandbox.topic_path(name) + "/subscription/by-broker/skip/3")
    sandbox.unload(name)
    plan = _plan_and_apply(sandbox, tmp_path, short("subops-skip"), "by-ledgerctl", "--skip", 3)
    assert [c["key"].rsplit("/", 1)[-1] for c in plan["changes"]] == ["by-ledgerctl"]
    broker = _cursor(sandbox, name, "by-broker")
    ours = _cursor(sandbox, name, "by-ledgerctl")
    for field in ("markDeletePosition", "individuallyDeletedMessages"):
        assert ours[field] == broker[field], field
    # three unacknowledged entries skipped (m3, m5, m8), the acked m9 passed over with
    # them, m11's ack kept: both deliver m10 and m12..m19
    assert ours["individuallyDeletedMessages"] != "[]"
    expected = sorted([values[10], *values[12:]])
    assert _read(client, name, "by-broker") == expected
    assert _read(client, name, "by-ledgerctl") == expected


# -- clear backlog of every subscription of every partition ---------------------------------


def test_clear_backlog_of_all_subscriptions_on_every_partition(sandbox, client, tmp_path):
    name = topic_name("subops-clear")
    sandbox.admin("PUT", sandbox.topic_path(name) + "/partitions", 2)
    for sub in ("a", "b"):
        client.subscribe(name, sub).close()
    produce(client, name, [(f"k{i}", f"old{i}".encode()) for i in range(30)])
    stats = sandbox.admin("GET", sandbox.topic_path(name) + "/partitioned-stats?perPartition=true")
    assert all(stats["subscriptions"][s]["msgBacklog"] == 30 for s in ("a", "b"))
    parts = [f"{name}-partition-{i}" for i in range(2)]
    for part in parts:
        sandbox.unload(part)
    plan = _plan_and_apply(
        sandbox, tmp_path, short("subops-clear"), "--all-subscriptions", "--clear-backlog"
    )
    # one change per cursor: two subscriptions on two partitions
    assert len(plan["changes"]) == 4
    assert sorted(plan["topics"]) == parts
    # the broker loads them with nothing backlogged, and delivers only what comes next
    stats = sandbox.admin("GET", sandbox.topic_path(name) + "/partitioned-stats?perPartition=true")
    for part in parts:
        for sub in ("a", "b"):
            assert stats["partitions"][part]["subscriptions"][sub]["msgBacklog"] == 0
    produce(client, name, [(f"k{i}", f"new{i}".encode()) for i in range(6)])
    new = sorted(f"new{i}".encode() for i in range(6))
    assert _read(client, name, "a") == new
    assert _read(client, name, "b") == new


# -- reset by time on a partitioned topic's base name ----------------------------------------


def test_reset_by_time_on_every_partition_is_the_brokers(sandbox, client, tmp_path):
    name = topic_name("subops-time")
    sandbox.admin("PUT", sandbox.topic_path(name) + "/partitions", 2)
    for sub in ("by-broker", "by-ledgerctl"):
        client.subscribe(name, sub).close()
    produce(client, name, [(f"k{i}", f"early{i}".encode()) for i in range(10)])
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    produce(client, name, [(f"k{i}", f"late{i}".encode()) for i in range(10)])
    for sub in ("by-broker", "by-ledgerctl"):
        assert len(_read(client, name, sub)) == 20  # both acknowledged everything
    sandbox.admin(
        "POST", sandbox.topic_path(name) + f"/subscription/by-broker/resetcursor/{middle}"
    )
    parts = [f"{name}-partition-{i}" for i in range(2)]
    for part in parts:
        sandbox.unload(part)
    plan = _plan_and_apply(
        sandbox, tmp_path, short("subops-time"), "by-ledgerctl", "--time", middle
    )
    assert len(plan["changes"]) == 2
    for part in parts:
        broker, ours = _cursor(sandbox, part, "by-broker"), _cursor(sandbox, part, "by-ledgerctl")
        assert ours["markDeletePosition"] == broker["markDeletePosition"], part
    late = sorted(f"late{i}".encode() for i in range(10))
    assert _read(client, name, "by-broker") == late
    assert _read(client, name, "by-ledgerctl") == late
