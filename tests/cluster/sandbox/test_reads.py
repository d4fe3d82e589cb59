"""Every command that reads ledgers, against the real cluster of scripts/sandbox.

Each command runs given only ``--metadata-url`` and ``--bookkeeper-metadata-url``: it reads
the running bookies (ensemble 3, write quorum 2: every entry on two of the three bookies).
Then all three bookies are stopped (``scripts/sandbox stop --bookie``), and each command
runs again on their files (``--bookie-dir`` for the two ledger directories of each of the
three bookies): the answers must be the same, but for what only a bookie's files can tell
(fence bit, master key, which index served an entry: ``FILE_ONLY``). While the bookies are
down, the metadata commands are asked too, with only the URLs: the metadata prints in
full and the bookies' view says "unreachable".

The data is the session's ``sandbox_world`` (the official clients' topics in public/world),
plus a topic of this module's own namespace that the broker compacted itself.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_helpers import Result

NAMESPACE = "public/reads"
COMPACTED = f"{NAMESPACE}/compacted"

#: what a bookie's files tell and a running bookie's read protocol does not
FILE_ONLY = {"fenced", "has_master_key", "source", "limbo"}
#: what differs between two runs whatever they read (``broker``: what the running broker
#: serves at that moment, beside what is stored: tests/cluster/sandbox/test_broker_view.py)
RUN_ONLY = {"seconds", "to", "broker"}


def cli(*args: str | Path) -> Result:
    """``ledgerctl ARGS`` in this process (stdout and stderr captured)."""
    from pulsarctl_py.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return Result(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def bare_environment(folder: Path) -> Iterator[None]:
    """No store named by the environment or a ledgerctl.toml: only the flags count."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith("LEDGERCTL_"):
                mp.delenv(name)
        mp.setenv("XDG_CONFIG_HOME", str(folder))
        mp.chdir(folder)
        yield


@contextlib.contextmanager
def all_bookies_stopped(box: Any) -> Iterator[None]:
    stopped = []
    try:
        for bookie in box.bookies:
            box.stop_bookie(bookie["id"])
            stopped.append(bookie["id"])
        yield
    finally:
        for bookie_id in stopped:
            box.start_bookie(bookie_id)


def _until_every_bookie_is_available(box: Any, urls: list[str], timeout: float = 120) -> None:
    """Wait until the bookies started again have registered (a started bookie's process
    runs a while before its znode under available/ is written)."""
    deadline = time.monotonic() + timeout
    while True:
        res = cli("bookie", "list", *urls, "-o", "json")
        states = {r["bookie_id"]: r["state"] for r in res.json()} if res.code == 0 else {}
        if all(states.get(b["id"]) == "available" for b in box.bookies):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the bookies did not register again: {states} {res.err}")
        time.sleep(1)


def without(doc: Any, keys: set[str]) -> Any:
    if isinstance(doc, dict):
        return {k: without(v, keys) for k, v in doc.items() if k not in keys}
    if isinstance(doc, list):
        return [without(v, keys) for v in doc]
    return doc


def differences(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Where two JSON documents differ: (path, running bookies, bookie files)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        pairs = enumerate(zip(a, b, strict=True))
        return [d for i, (x, y) in pairs for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [(path, a, b)]


def _compacted_topic(box: Any) -> None:
    """A keyed topic of this module's namespace, compacted by the broker itself."""
    box.admin("PUT", f"/namespaces/{NAMESPACE}", ok=(204, 409))
    topic = f"persistent://{COMPACTED}"
    client = box.client()
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(30):
            value = b"" if i % 9 == 8 else f"v{i}".encode()
            producer.send(value, partition_key=f"k{i % 6}")
        producer.close()
    finally:
        client.close()
    path = box.topic_path(topic) + "/compaction"
    box.admin("PUT", path)
    deadline = time.monotonic() + 120
    while True:
        status = box.admin("GET", path)
        if status.get("status") == "SUCCESS":
            return
        if status.get("status") == "ERROR" or time.monotonic() > deadline:
            raise AssertionError(f"the broker's compaction of {topic}: {status}")
        time.sleep(0.5)


@dataclass
class Reads:
    """Each command's answer from the running bookies, from their files, and (for the
    metadata commands) with the bookies down and only the URLs."""

    commands: dict[str, list[str]]
    live: dict[str, Result] = field(default_factory=dict)
    offline: dict[str, Result] = field(default_factory=dict)
    down: dict[str, Result] = field(default_factory=dict)
    files: dict[str, tuple[Path, Path]] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)
    ledgers_by_dir: dict[str, list[int]] = field(default_factory=dict)
    checks: dict[str, Result] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def _commands(world: Any, out: Path) -> tuple[dict[str, list[str]], dict[str, Path]]:
    keyed = world.topics["keyed"]
    first, last = keyed[0].message_id[0], keyed[-1].message_id[0]
    t = world.short
    cmds: dict[str, list[str]] = {
        "inspect ledger": ["inspect", str(first)],
        "inspect open ledger": ["inspect", str(last)],
        "inspect position": ["inspect", keyed[50].position],
        "inspect range": ["inspect", "--topic", t("keyed"), "--from",
                          keyed[30].position, "--to", keyed[90].position],
        "inspect last": ["inspect", "--topic", t("batched-lz4"), "--last", "7"],
        "topic list": ["topic", "list"],
        "ledger list": ["ledger", "list", "--topic", t("keyed")],
        "ledger meta closed": ["ledger", "meta", str(first)],
        "ledger meta open": ["ledger", "meta", str(last)],
        "seek index": ["seek", t("keyed"), "--index", "57"],
        "seek position": ["seek", t("keyed"), "--position", keyed[70].position],
        "seek time before": ["seek", t("batched-zstd"), "--time", "2000-01-01T00:00:00Z"],
        "compact status": ["compact", COMPACTED, "--status"],
        "compact status deep": ["compact", COMPACTED, "--status", "--deep"],
        "compact export": ["compact", COMPACTED, "--export", "{out}/compact-export.jsonl"],
        "orphans": ["orphans", "--min-age", "0"],
        "verify all": ["verify", "--all"],
    }  # fmt: skip
    topics = [*world.topics, "partitioned-partition-1"]
    topics.remove("partitioned")
    for name in topics:
        cmds[f"inspect topic {name}"] = ["inspect", "--topic", t(name)]
        cmds[f"verify {name}"] = ["verify", t(name)]
        cmds[f"export {name}"] = ["export", t(name), "--to", f"{{out}}/export-{name}.jsonl"]
    for name in ("keyed", "batched-zstd", "chunked", "txn"):
        cmds[f"topic info {name}"] = ["topic", "info", t(name)]
        cmds[f"compact {name}"] = ["compact", t(name)]
    cmds["topic info compacted"] = ["topic", "info", COMPACTED]
    files = {name: out for name, args in cmds.items() if any("{out}" in a for a in args)}
    return {k: [*v, "-o", "json"] for k, v in cmds.items()}, files


def _run_all(reads: Reads, urls: list[str], extra: list[str], out: Path, into: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, args in reads.commands.items():
        args = [a.replace("{out}", str(out)) for a in args]
        into[name] = cli(*args, *urls, *extra)


@pytest.fixture(scope="module")
def reads(sandbox_world: Any, tmp_path_factory: pytest.TempPathFactory) -> Reads:
    box = sandbox_world.sandbox
    _compacted_topic(box)
    folder = tmp_path_factory.mktemp("sandbox-reads")
    commands, files = _commands(sandbox_world, folder)
    reads = Reads(commands)
    urls = ["--metadata-url", box.metadata_url,
            "--bookkeeper-metadata-url", box.bookkeeper_metadata_url]  # fmt: skip
    for bookie in box.bookies:
        for d in bookie["ledger_dirs"]:
            reads.dirs += ["--bookie-dir", d]
    started = time.monotonic()
    with bare_environment(folder):
        _run_all(reads, urls, [], folder / "live", reads.live)
        reads.seconds["live"] = time.monotonic() - started
        with all_bookies_stopped(box):
            _run_all(reads, urls, reads.dirs, folder / "offline", reads.offline)
            reads.seconds["offline"] = time.monotonic() - started - reads.seconds["live"]
            for name in ("ledger meta closed", "ledger meta open", "topic info keyed",
                         "topic info compacted", "inspect ledger", "inspect open ledger",
                         "verify keyed", "topic list", "ledger list"):  # fmt: skip
                reads.down[name] = cli(*reads.commands[name], *urls)
            reads.down["ledger meta table"] = cli(
                *reads.commands["ledger meta open"][:-2], "-o", "table", *urls
            )
            from pulsarctl_py.stores.bookie import open_bookie

            for bookie in box.bookies:
                for d in bookie["ledger_dirs"]:
                    with open_bookie([d]) as store:
                        reads.ledgers_by_dir[d] = sorted(store.ledgers())
                dirs = [a for d in bookie["ledger_dirs"] for a in ("--bookie-dir", d)]
                reads.checks[bookie["id"]] = cli("bookie", "check", *dirs, "-o", "json")
        _until_every_bookie_is_available(box, urls)
    reads.seconds["all"] = time.monotonic() - started
    print(f"sandbox reads: {reads.seconds}")  # the time this module adds (pytest -s)
    for name in files:
        reads.files[name] = (folder / "live", folder / "offline")
    return reads


def assert_same(
    reads: Reads, name: str, *, codes: tuple[int, ...] = (0,), select: Any = None
) -> tuple[Any, Any]:
    """The command's answers from the running bookies and from their files agree
    (``select``: the part of each answer compared)."""
    live, offline = reads.live[name], reads.offline[name]
    assert live.code in codes, f"{name} (running bookies): {live.err}"
    assert offline.code == live.code, f"{name} (bookie files): {offline.err}"
    got = _file_names(without(live.json(), FILE_ONLY | RUN_ONLY))
    want = _file_names(without(offline.json(), FILE_ONLY | RUN_ONLY))
    if select is not None:
        got, want = select(got), select(want)
    assert got == want, f"{name}: {differences(got, want)[:8]}"
    for live_dir, offline_dir in [reads.files[name]] if name in reads.files else []:
        for f in live_dir.iterdir():
            assert f.read_bytes() == (offline_dir / f.name).read_bytes(), f.name
    return live.json(), offline.json()


def _file_names(doc: Any) -> Any:
    """An export's summary lists the files it wrote: each run writes into its own
    directory, so only the names are compared (the bytes are, below)."""
    if isinstance(doc, dict) and isinstance(doc.get("files"), list):
        doc = {**doc, "files": [{**f, "path": Path(f["path"]).name} for f in doc["files"]]}
    return doc


def _names(prefix: str) -> list[str]:
    # the names of the world's topics are known before the sandbox starts
    from tests.support.sandbox_world import CODECS

    topics = ["keyed", *(f"batched-{c}" for c in CODECS), "chunked", "encrypted",
              "partitioned-partition-1", "txn"]  # fmt: skip
    return [f"{prefix} {t}" for t in topics]


# -- the comparisons, one test per command ----------------------------------------------


def test_every_ledger_directory_of_every_bookie_holds_ledgers(reads: Reads) -> None:
    """DbLedgerStorage spreads ledgers over a bookie's ledger directories: the offline
    store must find both, and together they hold every entry the bookies served."""
    assert len(reads.ledgers_by_dir) == 6
    for d, ledgers in reads.ledgers_by_dir.items():
        assert ledgers, f"{d} holds no ledger"
    for i in range(0, 6, 2):
        a, b = list(reads.ledgers_by_dir.values())[i : i + 2]
        assert not set(a) & set(b)  # one directory per ledger on a bookie


def test_bookie_check_of_every_stopped_bookie_is_clean(reads: Reads) -> None:
    """``bookie check`` on each stopped bookie's two ledger directories: no error between
    the index and the entry logs, and every ledger the directories hold is listed."""
    assert len(reads.checks) == 3
    for bookie_id, res in reads.checks.items():
        assert res.code == 0, (bookie_id, res.err)
        doc = res.json()
        assert doc["ok"] and doc["errors"] == 0
        # a bookie restarted earlier in the session replayed its journal: the logs may hold
        # copies the index no longer points to (information, not an error)
        assert doc["entries_in_logs"] >= doc["entries_in_index"] > 0
    held = {ledger for ledgers in reads.ledgers_by_dir.values() for ledger in ledgers}
    listed = {r["ledger_id"] for res in reads.checks.values() for r in res.json()["ledgers"]}
    assert listed == held


@pytest.mark.parametrize("name", _names("inspect topic"))
def test_inspect_topic_live_equals_offline(reads: Reads, name: str) -> None:
    live, _ = assert_same(reads, name)
    assert live["summary"]["entries"] > 0 and live["summary"]["errors"] == 0


@pytest.mark.parametrize(
    "name", ["inspect ledger", "inspect open ledger", "inspect position", "inspect range",
             "inspect last"]
)  # fmt: skip
def test_inspect_ledger_and_positions_live_equals_offline(reads: Reads, name: str) -> None:
    live, _ = assert_same(reads, name)
    assert live["entries"]
    if name == "inspect open ledger":  # an open ledger: read to the last entry held
        assert len(live["entries"]) == 40 and live["ledgers"][0]["state"] == "OPEN"


def test_inspect_reads_the_values_the_producer_sent(reads: Reads, sandbox_world) -> None:
    import base64

    doc = reads.live["inspect topic keyed"].json()
    values = [base64.b64decode(m["value"]) for e in doc["entries"] for m in e["messages"]]
    assert values == [s.value for s in sandbox_world.topics["keyed"]]


@pytest.mark.parametrize("name", _names("verify"))
def test_verify_live_equals_offline(reads: Reads, name: str) -> None:
    live, _ = assert_same(reads, name)
    assert live["summary"]["entries"] > 0
    assert [f for f in live["findings"] if f["severity"] == "error"] == []


def ours(doc: dict[str, Any]) -> list[Any]:
    """The findings on the tests' topics: the broker's own system topics may change
    while the bookies are down (a failed write closes a ledger)."""
    return [
        f
        for f in doc["findings"]
        if any(f"/{ns}/" in (f.get("topic") or "") for ns in ("public/world", NAMESPACE))
    ]


def test_verify_all_live_equals_offline(reads: Reads) -> None:
    """A healthy cluster: no error anywhere, from the running bookies or their files (the
    coordinator's log read as Pulsar messages, transactional batches and ledgers closed
    with adds in flight made verify --all exit 1 here)."""
    live, offline = assert_same(reads, "verify all", select=ours)
    assert live["summary"]["topics"] >= len(reads.commands) // 10
    for doc in (live, offline):
        assert [f for f in doc["findings"] if f["severity"] == "error"] == []


@pytest.mark.parametrize(
    "name", ["topic info keyed", "topic info batched-zstd", "topic info chunked",
             "topic info txn", "topic info compacted"]
)  # fmt: skip
def test_topic_info_live_equals_offline(reads: Reads, name: str) -> None:
    live, _ = assert_same(reads, name)
    (open_row,) = [r for r in live["ledgers"] if r["open"]]
    # asked of the running bookies: their LAC, or the entries they store past it (the
    # last add's LAC reaches the bookies only with the next add; recovery keeps them)
    assert open_row["entries_source"] in ("lac", "storage")


@pytest.mark.parametrize("name", ["ledger meta closed", "ledger meta open"])
def test_ledger_meta_live_equals_offline(reads: Reads, name: str) -> None:
    live, _ = assert_same(reads, name)
    assert live["bookie"]["unreachable"] is None
    assert live["bookie"]["last_entry_id"] == 39 and live["bookie"]["has_master_key"] is None


OPEN_COUNTS = {"entries", "size", "entries_exact", "lac", "length", "entries_source"}


def test_listings_live_equal_offline_but_for_open_ledgers(reads: Reads) -> None:
    """topic list and ledger list read metadata only and never connect to a bookie (one
    READ_LAC per open ledger of a whole cluster is not a listing's price): an open
    ledger's count is unknown there, and said to be; with --bookie-dir the files tell."""
    for name in ("topic list", "ledger list"):
        assert_same(reads, name, select=lambda doc: without(doc, OPEN_COUNTS))
    for row in reads.live["topic list"].json():
        if row["topic"].startswith("persistent://public/world/"):
            assert row["entries_exact"] is False  # the open ledger is not counted
    for row in reads.live["ledger list"].json():
        if row["state"] == "OPEN":
            assert (row["entries"], row["entries_source"]) == (None, None)


@pytest.mark.parametrize("name", ["seek index", "seek position", "seek time before"])
def test_seek_live_equals_offline(reads: Reads, name: str) -> None:
    assert_same(reads, name)


@pytest.mark.parametrize(
    "name", ["compact keyed", "compact batched-zstd", "compact chunked", "compact txn",
             "compact status", "compact status deep", "compact export"]
)  # fmt: skip
def test_compact_live_equals_offline(reads: Reads, name: str) -> None:
    # the status of the broker's own compaction is compared with the broker elsewhere;
    # here: the same answer from the running bookies and from their files
    assert_same(
        reads, name, codes=(0, 1) if "status" in name else (0,), select=_without_broker_checks
    )


def _without_broker_checks(doc: Any) -> Any:
    """compact --status's checks of what the running broker answers (with its bookies
    stopped it cannot read the compacted ledger): not what storage holds."""
    if isinstance(doc, dict) and isinstance(doc.get("checks"), list):
        checks = [c for c in doc["checks"] if not c["check"].startswith("broker-")]
        return {**doc, "checks": checks}
    return doc


def test_bookie_list_and_info_name_the_running_bookies(sandbox) -> None:
    urls = ["--metadata-url", sandbox.metadata_url,
            "--bookkeeper-metadata-url", sandbox.bookkeeper_metadata_url]  # fmt: skip
    res = cli("bookie", "list", *urls, "-o", "json")
    assert res.code == 0, res.err
    rows = {r["bookie_id"]: r for r in res.json()}
    assert sorted(rows) == sorted(b["id"] for b in sandbox.bookies)
    for bookie in sandbox.bookies:
        row = rows[bookie["id"]]
        assert (row["state"], row["has_cookie"], row["cookie_instance_matches"]) == (
            "available", True, True)  # fmt: skip
        assert row["cookie"]["ledger_dirs"] == bookie["ledger_dirs"]
        assert row["cookie"]["journal_dirs"] == [bookie["journal_dir"]]
        res = cli("bookie", "info", bookie["id"], *urls, "-o", "json")
        assert res.code == 0, res.err
        assert res.json()["endpoints"][0]["port"] == bookie["port"]


@pytest.mark.parametrize("name", _names("export"))
def test_export_live_equals_offline(reads: Reads, name: str) -> None:
    live, _ = assert_same(reads, name)
    assert live["rows"] > 0


def test_orphans_live_equals_offline(reads: Reads) -> None:
    """The orphans of the tests' topics; the broker's own system topics may gain a ledger
    while the bookies are stopped (seen: a cursor ledger of __transaction_log_0 created
    between the two runs), so only their listing is compared, not the exit status."""

    def mine(doc: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [o for o in doc if "pulsar/system/" not in (o.get("owner") or "")]

    live, offline = reads.live["orphans"], reads.offline["orphans"]
    assert live.code in (0, 1) and offline.code in (0, 1), (live.err, offline.err)
    # the ages grow between the two runs (the creation times they come from do not)
    got = mine(without(live.json()["orphans"], FILE_ONLY | RUN_ONLY | {"age_ms"}))
    want = mine(without(offline.json()["orphans"], FILE_ONLY | RUN_ONLY | {"age_ms"}))
    assert got == want, differences(got, want)[:8]


def test_a_chunked_message_over_the_brokers_limit_is_read_whole(sandbox_world: Any) -> None:
    """The world's 6 MB chunked message (chunked because it is over the broker's 5 MiB
    maxMessageSize) under the default limit: joined (up to four limits) and exported byte
    for byte as a reader of the official client receives it."""
    import base64

    import pulsar

    box = sandbox_world.sandbox
    urls = ["--metadata-url", box.metadata_url,
            "--bookkeeper-metadata-url", box.bookkeeper_metadata_url]  # fmt: skip
    res = cli("inspect", "--topic", sandbox_world.short("chunked"), "-o", "jsonl", *urls)
    assert res.code == 0, res.err
    lines = [json.loads(line) for line in res.out.splitlines()]
    mine = [base64.b64decode(m["value"]) for e in lines for m in e["messages"]]
    sent = sandbox_world.topics["chunked"]
    client = box.client()
    try:
        reader = client.create_reader(sandbox_world.topic("chunked"), pulsar.MessageId.earliest)
        got = [reader.read_next(timeout_millis=60_000).data() for _ in sent]
    finally:
        client.close()
    assert got == [s.value for s in sent] and len(got[1]) > 5 * 1024 * 1024
    assert mine == got
    # (past four limits it is an error naming the flag: tests/test_hostile_limits.py; this
    # message's 5 MiB chunks leave no smaller limit that would still read its frames)


# -- the bookies down: metadata commands still answer (issue 21 point 2) ----------------


def test_ledger_meta_with_the_bookies_down_prints_the_metadata_in_full(reads: Reads) -> None:
    for name in ("ledger meta closed", "ledger meta open"):
        res, up = reads.down[name], reads.live[name].json()
        assert res.code == 0, res.err
        doc = res.json()  # one whole JSON document
        assert doc["metadata"] == up["metadata"] and doc["path"] == up["path"]
        assert doc["storage_problems"] == []
        assert doc["bookie"]["unreachable"].startswith("no bookie of ledger")
        assert "Connection refused" in doc["bookie"]["unreachable"]
        assert doc["bookie"]["last_entry_id"] is None  # not what the metadata says
    table = reads.down["ledger meta table"]
    assert table.code == 0 and "unreachable" in table.out and "ensemble" in table.out


def test_topic_info_with_the_bookies_down_says_they_could_not_be_asked(reads: Reads) -> None:
    res = reads.down["topic info keyed"]
    assert res.code == 0, res.err
    (open_row,) = [r for r in res.json()["ledgers"] if r["open"]]
    assert open_row["entries"] is None
    assert "could not be asked" in open_row["problem"]
    assert "no entries" not in open_row["problem"]


def test_listings_with_the_bookies_down_are_the_same(reads: Reads) -> None:
    for name in ("topic list", "ledger list"):
        assert reads.down[name].code == 0
        assert reads.down[name].json() == reads.live[name].json()


def test_reading_entries_with_the_bookies_down_exits_3(reads: Reads) -> None:
    for name in ("inspect ledger", "inspect open ledger", "verify keyed"):
        res = reads.down[name]
        assert res.code == 3, (name, res.err)
        assert res.out == "" and res.err.count("\n") == 1
        assert res.err.startswith("ledgerctl: error: ")


# -- where BookKeeper's metadata is named (a subprocess each: the environment counts) -----

LEDGERCTL = [sys.executable, "-m", "pulsarctl_py.cli"]


def _run(sandbox, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*LEDGERCTL, *args], capture_output=True, text=True, timeout=300,
                          env=env)  # fmt: skip


def _bare_env(sandbox) -> dict[str, str]:
    env = sandbox.env()
    env.pop("LEDGERCTL_METADATA_URL")
    env.pop("LEDGERCTL_BOOKKEEPER_METADATA_URL")
    return env


def _values(stdout: str) -> list[bytes]:
    import base64

    out = []
    for line in stdout.splitlines():
        entry = json.loads(line)
        out += [base64.b64decode(m["value"]) for m in entry.get("messages", [])]
    return out


def test_inspect_reads_the_running_bookies_given_both_urls(sandbox_world) -> None:
    box = sandbox_world.sandbox
    done = _run(
        box,
        "inspect",
        "--topic",
        sandbox_world.short("keyed"),
        "--metadata-url",
        box.metadata_url,
        "--bookkeeper-metadata-url",
        box.bookkeeper_metadata_url,
        "-o",
        "jsonl",
        env=_bare_env(box),
    )
    assert done.returncode == 0, done.stderr
    assert _values(done.stdout) == [s.value for s in sandbox_world.topics["keyed"]]


def test_broker_conf_alone_names_both_stores(sandbox_world) -> None:
    box = sandbox_world.sandbox
    done = _run(
        box,
        "inspect",
        "--topic",
        sandbox_world.short("keyed"),
        "--broker-conf",
        box.state["broker"]["conf"],
        "-o",
        "jsonl",
        env=_bare_env(box),
    )
    assert done.returncode == 0, done.stderr
    assert len(_values(done.stdout)) == len(sandbox_world.topics["keyed"])


def test_without_bookkeepers_place_the_answer_says_where_it_looked(sandbox_world) -> None:
    box = sandbox_world.sandbox
    env = _bare_env(box)
    done = _run(box, "ledger", "list", "--metadata-url", box.metadata_url, env=env)
    assert done.returncode == 3  # BookKeeper's metadata is not where it was looked for
    assert "BookKeeper's metadata is not at /ledgers" in done.stderr
    assert "/ledgers is not there" in done.stderr and "--bookkeeper-metadata-url" in done.stderr
    done = _run(
        box,
        "inspect",
        "--topic",
        sandbox_world.short("keyed"),
        "--metadata-url",
        box.metadata_url,
        "-o",
        "jsonl",
        env=env,
    )
    assert done.returncode == 3 and "--bookkeeper-metadata-url" in done.stderr


# -- ledger replicas on the real cluster ----------------------------------------------------


def _damage_entry(bookie: dict[str, Any], ledger_id: int, entry_id: int) -> int:
    """Change the last byte of every stored copy of one entry in a stopped bookie: its
    entry log and its journal (a bookie replays the journal from its last checkpoint when
    it starts, and the replayed copy would replace a damaged entry log's). The number of
    copies changed."""
    from pulsarctl_py.stores.bookie import open_bookie

    with open_bookie(bookie["ledger_dirs"]) as store:
        location = store.locate(ledger_id, entry_id)
        assert location is not None and not location.in_journal, location
        data = store.read_entry(ledger_id, entry_id)
    journal = Path(bookie["journal_dir"]) / "current"
    changed = 0
    for path in [Path(location.path), *sorted(journal.glob("*.txn"))]:
        content = bytearray(path.read_bytes())
        at, before = content.find(data), changed
        while at >= 0:
            content[at + len(data) - 1] ^= 0xFF
            changed += 1
            at = content.find(data, at + len(data))
        if changed > before:
            path.write_bytes(content)
    assert changed >= 1
    return changed


def _replicas_once_serving(ledger_id: int, urls: list[str], timeout: float = 90) -> Any:
    """``ledger replicas`` once every bookie answers again (a bookie just started may
    be registered before it serves reads)."""
    deadline = time.monotonic() + timeout
    while True:
        res = cli("ledger", "replicas", str(ledger_id), *urls, "-o", "json")
        assert res.code in (0, 1), res.err
        doc = res.json()
        if not doc["unreachable"] or time.monotonic() > deadline:
            return doc
        time.sleep(1)


def test_ledger_replicas_agree_then_name_the_bookie_with_a_damaged_entry_log(sandbox) -> None:
    box = sandbox
    box.admin("PUT", f"/namespaces/{NAMESPACE}", ok=(204, 409))
    topic = f"persistent://{NAMESPACE}/damaged"
    client = box.client()
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(f"entry-{i}".encode()) for i in range(20)]
        producer.close()
    finally:
        client.close()
    ledger_id = ids[0].ledger_id()
    assert {m.ledger_id() for m in ids} == {ledger_id}
    box.unload(topic)  # the broker closes the ledger
    urls = ["--metadata-url", box.metadata_url,
            "--bookkeeper-metadata-url", box.bookkeeper_metadata_url]  # fmt: skip
    try:
        res = cli("ledger", "replicas", str(ledger_id), *urls, "-o", "json")
        assert res.code == 0, res.err
        doc = res.json()
        assert (doc["entries_checked"], doc["last_agreed_entry"], doc["ok"]) == (20, 19, True)
        assert doc["write_quorum"] == 2 and len(doc["bookies"]) == 3
        meta = cli("ledger", "meta", str(ledger_id), *urls, "-o", "json").json()["metadata"]
        (ensemble,) = meta["ensembles"].values()
        damaged = 7
        victim = ensemble[damaged % len(ensemble)]  # the first bookie of its write set
        with box.bookie_stopped(victim) as bookie:
            # one bookie down: its copies are unreachable, not missing; reads fail over
            res = cli("ledger", "replicas", str(ledger_id), *urls, "--bookie-timeout", "2",
                      "-o", "json")  # fmt: skip
            assert res.code == 1, res.err
            doc = res.json()
            assert {b["bookie"]: b["reachable"] for b in doc["bookies"]}[victim] is False
            down = [r for r in doc["unreachable"] if victim in r["write_set"]]
            assert down and len(down) == len(doc["unreachable"])
            assert doc["below_write_quorum"] == [] and doc["missing"] == []
            res = cli("inspect", str(ledger_id), *urls, "-o", "json")
            assert res.code == 0, res.err
            assert len(res.json()["entries"]) == 20
            _damage_entry(bookie, ledger_id, damaged)
        doc = _replicas_once_serving(ledger_id, urls)
        assert [r["entry_id"] for r in doc["bad_digest"]] == [damaged], (res.out, res.err)
        bad = [c for c in doc["bad_digest"][0]["copies"] if c["state"] == "bad-digest"]
        assert [c["bookie"] for c in bad] == [victim]
        assert [r["entry_id"] for r in doc["divergent"]] == [damaged]
        assert [r["entry_id"] for r in doc["below_write_quorum"]] == [damaged]
        assert doc["last_agreed_entry"] == damaged - 1
        # a range past the damage agrees
        res = cli("ledger", "replicas", str(ledger_id), "--from", "8", "--to", "15", *urls,
                  "-o", "json")  # fmt: skip
        assert res.code == 0, res.err
        doc = res.json()
        assert (doc["entries_checked"], doc["last_agreed_entry"], doc["ok"]) == (8, 15, True)
        # a read of the topic takes the good replica
        res = cli("inspect", str(ledger_id), *urls, "-o", "json")
        assert res.code == 0, res.err
        assert len(res.json()["entries"]) == 20
    finally:
        # nobody else meets the damaged ledger (verify --all, orphans)
        box.admin("DELETE", box.topic_path(topic) + "?force=true")
