"""Reset by time next to the real broker (Pulsar 4.0.7): the admin API's reset-cursor to a
timestamp, then the cursor's read and mark-delete positions from internalStats, against
where ``seek --time`` (the broker rule) says the subscription reads first.

The topic spans three ledgers (closed: unloaded after each part), batched and not; the
timestamps: before the first entry, each entry's own broker timestamp and one past it,
between ledgers, the last entry's and after it. (The close-time narrowing of
``getFindPositionRange`` needs ledgers closed more than the broker's 60 s clock skew
apart; it is not compared here.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.support.sandbox_oracle import ledgerctl_env, namespace, short, topic_name

LEDGERCTL = [sys.executable, "-m", "pulsarctl_py.cli"]
SUBSCRIPTION = "reset-by-time"


@pytest.fixture(scope="module")
def topic(sandbox) -> dict[str, Any]:
    namespace(sandbox)
    name = "reset-by-time"
    client = sandbox.client()
    try:
        for part in range(3):
            producer = client.create_producer(
                topic_name(name),
                batching_enabled=part == 1,
                batching_max_messages=3,
                batching_max_publish_delay_ms=5,
            )
            for i in range(8):
                producer.send(b"v%d" % i, partition_key=f"k{i}")
                time.sleep(0.004)  # distinct broker timestamps
            producer.close()
            sandbox.unload(topic_name(name))
    finally:
        client.close()
    sandbox.admin(
        "PUT",
        sandbox.topic_path(topic_name(name)) + f"/subscription/{SUBSCRIPTION}",
        {"ledgerId": -1, "entryId": -1, "batchIndex": -1},
        ok=(204, 409),
    )
    return {"name": name, "heads": _heads(sandbox, name)}


def _heads(sandbox, name: str) -> list[tuple[str, int]]:
    """(position, broker timestamp) of every entry, as ledgerctl reads them."""
    done = subprocess.run(
        [*LEDGERCTL, "inspect", "--topic", short(name), "--depth", "metadata", "-o", "jsonl"],
        capture_output=True,
        text=True,
        timeout=300,
        env=sandbox.env(),
    )
    assert done.returncode == 0, done.stderr
    out = []
    for line in done.stdout.splitlines():
        entry = json.loads(line)
        if "position" not in entry:
            continue
        (bem,) = [la for la in entry["layers"] if la["layer"] == "broker-entry-metadata"]
        out.append((entry["position"], bem["fields"]["broker_timestamp"]))
    return out


def _broker_reset(sandbox, name: str, target: int) -> dict[str, str]:
    path = sandbox.topic_path(topic_name(name))
    sandbox.admin("POST", f"{path}/subscription/{SUBSCRIPTION}/resetcursor/{target}")
    cursor = sandbox.internal_stats(topic_name(name))["cursors"][SUBSCRIPTION]
    return {"read": cursor["readPosition"], "mark_delete": cursor["markDeletePosition"]}


def _seek(name: str, target: int) -> Any:
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.seek import SeekRequest, seek

    with LedgerSource.open() as source:
        return seek(source, SeekRequest(topic=short(name), time_ms=target))


def test_reset_by_time_lands_where_seek_says(topic, sandbox):
    heads = topic["heads"]
    assert len(heads) == 24 and len({p.split(":")[0] for p, _ in heads}) == 3
    first, last = heads[0][1], heads[-1][1]
    targets = {first - 60_000, first, last, last + 1, last + 3_600_000}
    targets |= {t for _p, t in heads} | {t + 1 for _p, t in heads[::2]}
    positions = [p for p, _t in heads]
    wrong = []
    with ledgerctl_env(sandbox):
        for target in sorted(targets):
            broker = _broker_reset(sandbox, topic["name"], target)
            result = _seek(topic["name"], target)
            assert not result.findings, result.findings
            if result.end:
                # after the last entry: the broker reads from the next valid position, past
                # every entry (the empty ledger the topic opened on its last load)
                ok = broker["mark_delete"] == positions[-1] and broker["read"] not in positions
            else:
                ours = result.to_json()["position"]
                before = positions.index(ours) - 1
                ok = broker["read"] == ours and (
                    before < 0 or broker["mark_delete"] == positions[before]
                )
            if not ok:
                wrong.append((target, broker, result.to_json()["position"], result.end))
    assert wrong == []
