"""`inspect` takes positions, ranges, limits and filters as operators write them (issue 7.5, 7.8).

Everything runs against the demo data (real client entries in RocksDB metadata and a
bookie's DbLedgerStorage); expected results are computed from a full read of the same
ledger or topic, never written down by hand.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.demo import DemoSummary, create_demo
from pulsarctl_py.stores.bookie import open_bookie
from tests.support.cli_helpers import ledgerctl_script, run, run_on_terminal, run_script


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DemoSummary]:
    target = tmp_path_factory.mktemp("positions") / "demo"
    return target, create_demo(target)


@pytest.fixture
def in_demo(demo: tuple[Path, DemoSummary], monkeypatch: pytest.MonkeyPatch) -> DemoSummary:
    for name in list(os.environ):
        if name.startswith("LEDGERCTL_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(demo[0])
    return demo[1]


def entries(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    result = run(capsys, "inspect", *args, "-o", "json")
    assert result.code == 0, result.err
    return result.json()["entries"]


def ids(docs: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(d["ledger_id"], d["entry_id"]) for d in docs]


def message_ids(docs: list[dict[str, Any]]) -> list[str]:
    return [m["message_id"] for d in docs for m in d["messages"]]


def topic_ledgers(summary: DemoSummary, short: str) -> list[int]:
    (topic,) = [t for t in summary.topics if t.name.endswith("/" + short)]
    return [ledger.ledger_id for ledger in topic.ledgers]


def test_one_entry_as_l_e_and_one_message_as_l_e_b(capsys, in_demo) -> None:
    ledger = topic_ledgers(in_demo, "batched")[0]
    whole = entries(capsys, str(ledger))
    assert len(whole) > 3
    (one,) = entries(capsys, f"{ledger}:2")
    assert one == whole[2]
    (msg,) = entries(capsys, f"{ledger}:2:3")
    assert message_ids([msg]) == [f"{ledger}:2:3"]
    assert msg["messages"][0] == whole[2]["messages"][3]


def test_an_entry_asked_for_by_name_that_is_not_stored_is_a_finding(capsys, in_demo) -> None:
    ledger = topic_ledgers(in_demo, "batched")[0]
    last = entries(capsys, str(ledger))[-1]["entry_id"]
    result = run(capsys, "inspect", f"{ledger}:{last + 1}")
    assert result.code == 1 and f"up to entry {last}" in result.err
    assert result.out == ""


def test_from_to_span_the_ledgers_of_a_topic(capsys, in_demo) -> None:
    first, second = topic_ledgers(in_demo, "batched")
    everything = ids(entries(capsys, "--topic", "batched"))
    start, end = (first, 4), (second, 1)
    expected = [p for p in everything if start <= p <= end]
    assert {p[0] for p in expected} == {first, second}  # really across ledgers
    got = ids(entries(capsys, "--topic", "batched", "--from", f"{first}:4", "--to", f"{second}:1"))
    assert got == expected
    # a batch index narrows the first and last entry to those messages
    docs = entries(capsys, "--topic", "batched", "--from", f"{first}:4:3", "--to", f"{second}:1:1")
    msgs = message_ids(docs)
    assert msgs[0] == f"{first}:4:3" and msgs[-1] == f"{second}:1:1"
    # on one ledger, a bare entry id still works
    assert ids(entries(capsys, str(first), "--from", "4")) == [
        p for p in everything if p[0] == first and p[1] >= 4
    ]


def test_last_and_limit_count_the_whole_topic(capsys, in_demo) -> None:
    everything = ids(entries(capsys, "--topic", "batched"))
    assert len({p[0] for p in everything[-6:]}) == 2
    assert ids(entries(capsys, "--topic", "batched", "--last", "6")) == everything[-6:]
    assert ids(entries(capsys, "--topic", "batched", "--limit", "7")) == everything[:7]
    first = everything[0][0]
    got = ids(entries(capsys, "--topic", "batched", "--from", f"{first}:5", "--limit", "2"))
    assert got == everything[5:7]
    assert entries(capsys, "--topic", "batched", "--limit", "0") == []


def test_a_partitioned_topic_reads_every_partition(capsys, in_demo) -> None:
    parts = [f"orders-partition-{i}" for i in range(3)]
    expected = [p for part in parts for p in ids(entries(capsys, "--topic", part))]
    assert len({p[0] for p in expected}) == 3
    assert ids(entries(capsys, "--topic", "orders")) == expected
    assert ids(entries(capsys, "--topic", "orders", "--limit", "5")) == expected[:5]
    result = run(capsys, "inspect", "--topic", "orders", "--last", "1")
    assert result.code == 2
    assert "orders-partition-0" in result.err and "partitioned" in result.err


@pytest.mark.parametrize(
    "args",
    [
        ["99999999999999999999"],
        ["4:99999999999999999999"],
        ["--topic", "batched", "--from", "99999999999999999999:0"],
        ["4", "--to", "99999999999999999999"],
        ["4:x"],
        ["--topic", "batched", "--from", "4"],  # on a topic a bare entry id is ambiguous
        ["--topic", "batched", "--from", "12345:0"],  # not a ledger of the topic
        ["4:2", "--last", "3"],
        ["--topic", "batched", "--sequence-id", "9..2"],
        ["--topic", "batched", "--property", "=x"],
        ["--topic", "batched", "--since", "1763719200"],  # epoch seconds, refused
    ],
)
def test_bad_positions_and_huge_numbers_are_one_line_errors(capsys, in_demo, args) -> None:
    result = run(capsys, "inspect", *args)
    assert result.code == 2, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ledgerctl: error: "), result.err


def test_times_as_timeparse_takes_them(capsys, in_demo) -> None:
    from pulsarctl_py.timeparse import now_ms

    docs = entries(capsys, "--topic", "batched")
    times = sorted({_time(d) for d in docs})
    middle = times[len(times) // 2]
    since = entries(capsys, "--topic", "batched", "--since", str(middle))
    assert since and all(_time(d) >= middle for d in since)
    assert len(since) < len(docs)
    assert ids(entries(capsys, "--topic", "batched", "--since", _iso(middle))) == ids(since)
    until = entries(capsys, "--topic", "batched", "--until", _iso(middle))
    assert ids(until) + ids(since) == ids(docs)
    # durations count back from now, as pulsar-admin's do
    hour_ago = now_ms() - 3_600_000
    want = [p for p, d in zip(ids(docs), docs, strict=True) if _time(d) >= hour_ago]
    assert ids(entries(capsys, "--topic", "batched", "--since", "1h")) == want
    assert entries(capsys, "--topic", "batched", "--until", "2000-01-01") == []


def _time(doc: dict[str, Any]) -> int:
    return doc["messages"][0]["publish_time"]


def _iso(ms: int) -> str:
    from pulsarctl_py.timeparse import format_time_ms

    return format_time_ms(ms) or ""


def test_property_producer_and_sequence_filters(capsys, in_demo) -> None:
    docs = entries(capsys, "--topic", "plain")
    msgs = [m for d in docs for m in d["messages"]]
    with_color = [m["message_id"] for m in msgs if "color" in m["properties"]]
    red = [m["message_id"] for m in msgs if m["properties"].get("color") == "red"]
    assert with_color and red
    assert message_ids(entries(capsys, "--topic", "plain", "--property", "color")) == with_color
    assert message_ids(entries(capsys, "--topic", "plain", "--property", "color=red")) == red
    assert entries(capsys, "--topic", "plain", "--property", "color=mauve") == []
    seqs = sorted(m["sequence_id"] for m in msgs)
    low, high = seqs[1], seqs[3]
    want = [m["message_id"] for m in msgs if low <= m["sequence_id"] <= high]
    got = entries(capsys, "--topic", "plain", "--sequence-id", f"{low}..{high}")
    assert message_ids(got) == want and 0 < len(want) < len(msgs)
    one = [m["message_id"] for m in msgs if m["sequence_id"] == seqs[-1]]
    assert message_ids(entries(capsys, "--topic", "plain", "--sequence-id", str(seqs[-1]))) == one
    producers = {_producer(d) for d in entries(capsys, "--topic", "batched")}
    assert len(producers) > 1
    name = sorted(producers)[0]
    by_producer = entries(capsys, "--topic", "batched", "--producer", name)
    assert by_producer and {_producer(d) for d in by_producer} == {name}
    result = run(capsys, "inspect", "--topic", "plain", "--property", "color", "--depth", "entry")
    assert result.code == 2 and "--depth messages" in result.err


def _producer(doc: dict[str, Any]) -> str:
    layer = next(la for la in doc["layers"] if "producer_name" in la["fields"])
    return layer["fields"]["producer_name"]


# -- raw output, quiet, progress: through the installed script -----------------------


def _flags(demo: Path) -> list[str]:
    url = f"rocksdb://{demo / 'metadata'}"
    return ["--metadata-url", url, "--bookie-dir", str(demo / "bookkeeper")]


def test_raw_writes_the_stored_bytes_of_one_entry(demo, tmp_path) -> None:
    path, summary = demo
    ledger = topic_ledgers(summary, "batched")[0]
    proc = subprocess.run(
        [ledgerctl_script(), "inspect", f"{ledger}:2", "-o", "raw", *_flags(path)],
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    with open_bookie([path / "bookkeeper"]) as bookie:
        assert proc.stdout == bookie.read_entry(ledger, 2)
    stored = tmp_path / "entry.bin"
    stored.write_bytes(proc.stdout)
    decoded = run_script("decode", str(stored), "-o", "json")
    assert decoded.code == 0, decoded.err
    inspected = run_script("inspect", f"{ledger}:2", "-o", "json", *_flags(path))
    assert decoded.json()["entries"][0]["messages"] == inspected.json()["entries"][0]["messages"]
    for bad in ([str(ledger)], [f"{ledger}:2:1"]):
        result = run_script("inspect", *bad, "-o", "raw", *_flags(path))
        assert result.code == 2 and "L:E" in result.err
    missing = run_script("inspect", f"{ledger}:999", "-o", "raw", *_flags(path))
    assert missing.code == 1 and missing.out == ""


def _on_terminal(args: list[str], *, stdout_tty: bool) -> tuple[int, bytes, bytes]:
    return run_on_terminal(*args, stdout_tty=stdout_tty)


def test_raw_refuses_a_terminal(demo) -> None:
    path, summary = demo
    ledger = topic_ledgers(summary, "batched")[0]
    code, _, screen = _on_terminal(
        ["inspect", f"{ledger}:2", "-o", "raw", *_flags(path)], stdout_tty=True
    )
    assert code == 2 and b"redirect" in screen
    assert len(screen) < 400  # one line, not the entry's bytes


def test_progress_only_when_the_output_is_not_on_the_terminal(demo) -> None:
    path, _ = demo
    args = ["inspect", "--topic", "batched", *_flags(path)]
    # output on the terminal: table lines and headers, and no live line redrawn among them
    code, _, screen = _on_terminal([*args, "-o", "table"], stdout_tty=True)
    assert code == 0 and b"digest" in screen
    assert b"reading entries" not in screen and b"\x1b[2K" not in screen
    # output to a pipe, stderr a terminal: the progress line is there, the data intact
    code, out, screen = _on_terminal([*args, "-o", "jsonl"], stdout_tty=False)
    assert code == 0 and b"reading entries" in screen
    assert len(out.decode().splitlines()) == 10
    code, out, screen = _on_terminal([*args, "-o", "jsonl", "--no-progress"], stdout_tty=False)
    assert code == 0 and b"reading entries" not in screen and b"in 2 ledger(s)" in screen
    code, out, screen = _on_terminal([*args, "-o", "jsonl", "--quiet"], stdout_tty=False)
    assert code == 0 and screen.strip() == b"" and len(out.decode().splitlines()) == 10


def test_quiet_keeps_data_and_errors_only(capsys, in_demo) -> None:
    loud = run(capsys, "inspect", "--topic", "batched", "-o", "table")
    quiet = run(capsys, "inspect", "--topic", "batched", "-o", "table", "--quiet")
    assert loud.code == quiet.code == 0
    assert "ledger " in loud.err and "entries in" in loud.err
    assert quiet.err == "" and quiet.out == loud.out
