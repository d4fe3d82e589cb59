"""The read verbs over offloaded ledgers (issue 33), compared with what a broker reader
returns for the same topics.

Two kinds of topics: the session's ``offload_world`` (tests/support/offload_world.py: two
ledgers offloaded and ``bookkeeperDeleted`` per driver, the broker reading them from tiered
storage only), and this module's ``mixed`` topic in a namespace whose offload policies keep
the BookKeeper copy (``managedLedgerOffloadDeletionLagInMillis`` of an hour): two ledgers
offloaded to the S3 server with their BookKeeper copies still there (both copies, read
tiered first as the broker does, or from the bookies with ``--prefer bookkeeper``), then a
ledger on the bookies only.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_helpers import run
from tests.support.offload_world import (
    RUN,
    ReadMessage,
    keeping_copies,
    read_all,
    use_offload_stores,
)

BOTH_NS = "public/offload-both"
#: an endpoint nothing listens on (port 1 on loopback refuses at once)
DEAD_ENDPOINT = "http://127.0.0.1:1"


class Mixed:
    def __init__(self, topic: str, offloaded: list[int], messages: list[ReadMessage]) -> None:
        self.topic = topic
        self.offloaded = offloaded
        self.messages = messages

    @property
    def short(self) -> str:
        return self.topic.split("://", 1)[1]


def _wait_complete(box: Any, topic: str, closed: list[int], timeout: float = 120) -> None:
    """Poll until the offload succeeded and the ``closed`` ledgers' contexts are complete
    (their BookKeeper copies kept: the namespace's deletion lag is an hour)."""
    deadline = time.monotonic() + timeout
    while True:
        status = box.admin("GET", box.topic_path(topic) + "/offload")
        assert status["status"] != "ERROR", status
        if status["status"] == "SUCCESS":
            ctx = {i.ledgerId: i.offloadContext for i in box.ml_info(topic).ledgerInfo}
            if all(ctx[lid].complete for lid in closed):
                assert not any(ctx[lid].bookkeeperDeleted for lid in closed)
                return
        assert time.monotonic() < deadline, f"offload of {topic} not complete: {status}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def mixed(offload_sandbox: Any) -> Mixed:
    box = offload_sandbox
    hiccup = box.broker_hiccup()  # the unloads below are what can set it off
    keeping_copies(box, BOTH_NS, like="public/offload-s3")
    topic = f"persistent://{BOTH_NS}/mixed-{RUN}"
    client = box.client()
    try:
        for part in range(3):
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(150):
                producer.send_async(
                    f"m{part}-{i}".encode() * 4,
                    None,
                    partition_key=f"k{i % 17}",
                    event_timestamp=10_000 * part + i,
                )
            producer.flush()
            producer.close()
            # a new ledger per part; the last unload also has the broker write the ledger
            # list again: the offload's updates can leave it stored out of ledger-id order
            # (seen here: the current ledger listed before the offloaded ones), which the
            # broker sorts when it loads the topic
            box.unload(topic)
            if part == 1:
                closed = box.start_offload(topic)
                _wait_complete(box, topic, closed)
    finally:
        client.close()
    box.internal_stats(topic)  # loaded again
    ids = [li.ledgerId for li in box.ml_info(topic).ledgerInfo]
    assert ids == sorted(ids), ids
    return Mixed(topic, closed, read_all(box, topic, hiccup))


@pytest.fixture
def env(offload_sandbox: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandbox's stores, and its S3 credentials as the broker gets them (Pulsar's
    ACCESS_KEY_ID / ACCESS_KEY_SECRET); no AWS configuration of this machine."""
    use_offload_stores(monkeypatch, offload_sandbox)


def _want(messages: list[ReadMessage]) -> list[tuple[Any, ...]]:
    return [
        (
            f"{m.ledger_id}:{m.entry_id}" + (f":{m.batch_index}" if m.batch_index >= 0 else ""),
            m.key,
            m.value,
            m.publish_time,
        )
        for m in messages
    ]


def _inspected(result: Any) -> list[tuple[Any, ...]]:
    assert result.code == 0, result.err
    return [
        (m["message_id"], m["key"], base64.b64decode(m["value"]), m["publish_time"])
        for line in result.out.splitlines()
        for m in json.loads(line)["messages"]
    ]


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    for line in path.read_text().splitlines():
        yield json.loads(line)


def test_inspect_topic_reads_offloaded_and_bookie_ledgers(
    offload_world: Any, mixed: Mixed, env: None, capsys: Any
) -> None:
    """`inspect --topic` over the S3 topic whose ledgers are only in S3, and over a topic
    mixing offloaded ledgers (both copies) with a ledger on the bookies only: every
    message the broker reader returned, in order."""
    s3 = offload_world["s3"]
    got = _inspected(run(capsys, "inspect", "--topic", s3.short, "-o", "jsonl"))
    assert len(got) == 1600
    assert got == _want(s3.messages)
    assert {m.ledger_id for m in mixed.messages} > set(mixed.offloaded)
    got = _inspected(run(capsys, "inspect", "--topic", mixed.short, "-o", "jsonl"))
    assert len(got) == 450
    assert got == _want(mixed.messages)


def test_prefer_and_s3_endpoint(
    offload_sandbox: Any, mixed: Mixed, env: None, capsys: Any, monkeypatch: Any
) -> None:
    """A ledger with both copies is read from tiered storage first (the broker's default):
    an unreachable S3 endpoint given with --s3-endpoint is one line naming it and the
    ledger, exit 3; --prefer bookkeeper (or LEDGERCTL_PREFER) reads the bookies' copy."""
    ledger = mixed.offloaded[0]
    dead = run(capsys, "inspect", ledger, "-o", "jsonl", "--s3-endpoint", DEAD_ENDPOINT)
    assert dead.code == 3, dead.err
    assert DEAD_ENDPOINT in dead.err and f"ledger {ledger}" in dead.err
    assert len(dead.err.strip().splitlines()) == 1 and "Traceback" not in dead.err
    want = _want([m for m in mixed.messages if m.ledger_id == ledger])
    bookies = run(
        capsys,
        "inspect",
        ledger,
        "-o",
        "jsonl",
        "--s3-endpoint",
        DEAD_ENDPOINT,
        "--prefer",
        "bookkeeper",
    )
    assert _inspected(bookies) == want
    monkeypatch.setenv("LEDGERCTL_S3_ENDPOINT", DEAD_ENDPOINT)
    assert run(capsys, "inspect", ledger, "-o", "jsonl").code == 3
    monkeypatch.setenv("LEDGERCTL_PREFER", "bookkeeper")
    assert _inspected(run(capsys, "inspect", ledger, "-o", "jsonl")) == want
    monkeypatch.setenv("LEDGERCTL_PREFER", "bookies")
    bad = run(capsys, "inspect", ledger)
    assert bad.code == 2 and "LEDGERCTL_PREFER" in bad.err and "tiered" in bad.err
    monkeypatch.delenv("LEDGERCTL_PREFER")
    monkeypatch.delenv("LEDGERCTL_S3_ENDPOINT")
    # the configured endpoint itself, given as an override, reads the same messages
    endpoint = run(
        capsys,
        "inspect",
        ledger,
        "-o",
        "jsonl",
        "--s3-endpoint",
        offload_sandbox.offload_info["s3"]["endpoint"],
    )
    assert _inspected(endpoint) == want


def _rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (r["ledger_id"], r["entry_id"], r["batch_index"], r["key"], r["value"], r["publish_time"])
        for r in rows
    ]


def _broker_rows(messages: list[ReadMessage]) -> list[tuple[Any, ...]]:
    return [
        (m.ledger_id, m.entry_id, m.batch_index, m.key, m.value, m.publish_time) for m in messages
    ]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_reads_offloaded_ledgers(
    offload_world: Any, mixed: Mixed, env: None, capsys: Any, tmp_path: Path, fmt: str
) -> None:
    """`export` (JSON lines and Parquet) of the topic offloaded to the filesystem (RECORD)
    and of the mixed topic: one row per message the broker reader returned, no problems."""
    for name, topic, messages in (
        ("fs-record", offload_world["fs-record"].short, offload_world["fs-record"].messages),
        ("mixed", mixed.short, mixed.messages),
    ):
        out = tmp_path / f"{name}.{fmt}"
        done = run(capsys, "export", topic, "--to", out)
        assert done.code == 0, done.err
        if fmt == "jsonl":
            rows = list(_lines(out))
            for r in rows:
                r["value"] = base64.b64decode(r["value"])
        else:
            import pyarrow.parquet as pq

            rows = pq.read_table(out).to_pylist()
        assert all(not r["problems"] for r in rows), [r["problems"] for r in rows if r["problems"]]
        for r in rows:
            r["batch_index"] = -1 if r["batch_index"] is None else r["batch_index"]
        assert _rows(rows) == _broker_rows(messages), name


def _seek(capsys: Any, *args: Any) -> dict[str, Any]:
    result = run(capsys, "seek", *args, "-o", "json")
    assert result.code == 0, result.err
    answer = json.loads(result.out)
    assert answer["warnings"] == [] and answer["findings"] == [], answer
    return answer


def test_seek_over_offloaded_ledgers(
    offload_world: Any, mixed: Mixed, env: None, capsys: Any
) -> None:
    """`seek --index` on topics whose ledgers are all offloaded (S3, filesystem) lands on
    the message the broker reader returned at that index, reading no more entries than the
    bound a bookie search keeps (ceil(log2 N) + 3); `seek --time` on the mixed topic gives
    the same answer from the same number of reads whether the ledgers with both copies are
    read from S3 (the default) or from the bookies."""
    import math

    for kind in ("s3", "fs-block"):
        world = offload_world[kind]
        entries = len({(m.ledger_id, m.entry_id) for m in world.messages})
        bound = math.ceil(math.log2(entries)) + 3
        for n in (0, 1, 599, 1199, 1200, 1207, 1599):
            m = world.messages[n]
            answer = _seek(capsys, world.short, "--index", n)
            want = f"{m.ledger_id}:{m.entry_id}" + (
                f":{m.batch_index}" if m.batch_index >= 0 else ""
            )
            assert answer["position"] == want, (kind, n)
            assert 0 < answer["entries_read"] <= bound, (kind, n, answer["entries_read"])
    times = sorted({m.publish_time for m in mixed.messages})
    targets = [times[0] - 1, *times, times[-1] + 1]  # few: messages share milliseconds
    landed = set()
    for t in targets:
        tiered = _seek(capsys, mixed.short, "--time", t)
        bookies = _seek(capsys, mixed.short, "--time", t, "--prefer", "bookkeeper")
        for field in ("position", "end", "entries_read", "publish_time", "index"):
            assert tiered[field] == bookies[field], (t, field, tiered, bookies)
        landed.add(tiered["ledger_id"])
    assert set(mixed.offloaded) < landed


def test_topic_info_and_ledger_list_say_where_ledgers_are(
    offload_sandbox: Any, offload_world: Any, mixed: Mixed, env: None, capsys: Any
) -> None:
    """`topic info` and `ledger list` say where each ledger's entries are: tiered (the
    BookKeeper ledger deleted: ledger list lists it from its managed ledger, with the
    object it is in), both (offloaded, BookKeeper copy kept) or bookies."""
    s3 = offload_world["s3"]
    for topic, where in (
        (s3, {lid: "tiered" for lid in s3.ledgers}),
        (mixed, {lid: "both" for lid in mixed.offloaded}),
    ):
        info = run(capsys, "topic", "info", topic.short, "-o", "json")
        assert info.code == 0, info.err
        stored = {li["ledger_id"]: li["stored"] for li in json.loads(info.out)["ledgers"]}
        listed = run(capsys, "ledger", "list", "--topic", topic.short, "-o", "jsonl")
        assert listed.code == 0, listed.err
        rows = [json.loads(line) for line in listed.out.splitlines()]
        assert [r["ledger_id"] for r in rows] == sorted(stored)
        want = {lid: where.get(lid, "bookies") for lid in stored}
        assert stored == want
        assert {r["ledger_id"]: r["stored"] for r in rows} == want
        assert "bookies" in want.values()  # the current ledger
    rows = {
        r["ledger_id"]: r
        for r in map(
            json.loads,
            run(capsys, "ledger", "list", "--topic", s3.short, "-o", "jsonl").out.splitlines(),
        )
    }
    bucket = offload_sandbox.offload_info["s3"]["bucket"]
    for lid in s3.ledgers:
        assert rows[lid]["path"].startswith(f"s3://{bucket}/") and rows[lid]["kind"] == "data"
        assert rows[lid]["entries"] == len({m.entry_id for m in s3.messages if m.ledger_id == lid})
    table = run(capsys, "ledger", "list", "--topic", s3.short, "-o", "table")
    assert table.code == 0 and "damaged" not in table.out and "offloaded" in table.out


def test_compact_computes_over_offloaded_ledgers(
    offload_world: Any, mixed: Mixed, env: None, capsys: Any, tmp_path: Path
) -> None:
    """`compact --export` over the all-offloaded S3 topic and the mixed topic: every key's
    last value in the broker reader's order (the publishing-order compactor's rule),
    computed from entries read in tiered storage."""
    for name, topic in (("s3", offload_world["s3"]), ("mixed", mixed)):
        latest: dict[str, ReadMessage] = {}
        for m in topic.messages:
            if m.key is not None:
                latest[m.key] = m
        out = tmp_path / f"{name}.jsonl"
        done = run(capsys, "compact", topic.short, "--export", out, "-o", "json")
        assert done.code == 0, done.err
        report = json.loads(done.out)
        assert report["entries_in"] == len({(m.ledger_id, m.entry_id) for m in topic.messages})
        assert report["ledgers_missing"] == [] and report["entries_missing"] == 0
        got = {r["key"]: r for r in _lines(out)}
        assert sorted(got) == sorted(latest), name
        for key, m in latest.items():
            r = got[key]
            pos = f"{m.ledger_id}:{m.entry_id}" + (
                f":{m.batch_index}" if m.batch_index >= 0 else ""
            )
            assert (r["position"], base64.b64decode(r["value"])) == (pos, m.value), key
