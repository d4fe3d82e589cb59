"""`ledgerctl topic|ledger|bookie`: golden against BookKeeper's own tools, views on a small tree.

* bookie commands on the live bookie BookKeeper wrote (tests/data/bookkeeper/live-dbledgerstorage)
  checked against what ``bookkeeper shell readlog / readlogmetadata / readjournal / lastmark /
  check-db-ledgers-index`` printed for the same files;
* topic and ledger commands on a small cluster built with our writers: a Pulsar RocksDB
  metadata store (the ML tree of tests/support/fixtures/ml_tree.py plus ledgers and one more topic)
  and a DbLedgerStorage bookie holding the ledgers' entries;
* JSON shapes, read-only (every file hashed before and after), and bad input.
"""

from __future__ import annotations

import hashlib
import re
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.decoders import managed_ledger as mld
from tests.support.cli_helpers import Result, run
from tests.support.fixtures.views_cluster import (
    ACKS,
    BOOKIE_ID,
    CTIME,
    MASTER_KEY,
    ORDERS_0,
    ORDERS_1,
    PASSWORD,
    write_bookie,
    write_metadata,
)

LIVE = Path(__file__).parent / "data" / "bookkeeper" / "live-dbledgerstorage"
LIVE_BOOKIE = LIVE / "bookie-data"
SHELL = LIVE / "bk-shell"


@pytest.fixture(autouse=True)
def _no_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No store from the environment or a ledgerctl.toml: every test names its own."""
    for name in ("LEDGERCTL_METADATA_URL", "LEDGERCTL_BOOKIE_DIRS", "LEDGERCTL_LEDGER_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)


def one_line_error(result: Result, code: int = 1) -> str:
    """The one error line of a failed run, after checking its exit code (1, 2 or 3)."""
    assert result.code == code, (result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ledgerctl: error: "), result.err
    assert "Traceback" not in result.err
    return lines[0]


def tree_digest(*roots: Path) -> dict[str, str]:
    out = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """(metadata URL, bookie dir) of the small cluster of
    tests/support/fixtures/views_cluster.py."""
    from pulsarctl_py.stores.metadata import create_metadata_store

    base = tmp_path_factory.mktemp("cluster")
    with create_metadata_store(base / "metadata") as store:
        write_metadata(store)
    return f"rocksdb://{base / 'metadata'}", write_bookie(base / "bookie")


def cli_json(capsys: pytest.CaptureFixture[str], *args: Any) -> Any:
    result = run(capsys, *args, "--output", "json")
    assert result.code == 0, result.err
    return result.json()


# -- topic list / info -----------------------------------------------------------------------


def test_topic_list_groups_partitions(capsys: pytest.CaptureFixture[str], cluster: Any) -> None:
    url, bookie = cluster
    rows = cli_json(capsys, "topic", "list", "--metadata-url", url, "--bookie-dir", bookie)
    by_topic = {r["topic"]: r for r in rows}
    assert list(by_topic) == sorted(by_topic)
    assert set(by_topic) == {
        "persistent://old/cluster1/ns/legacy",
        ACKS,
        "persistent://public/default/orders",
        "persistent://t1/ns1/empty topic",
        "persistent://t1/ns1/shadow",
    }
    orders = by_topic["persistent://public/default/orders"]
    assert orders["partitioned"] is True
    assert [p["topic"] for p in orders["partitions"]] == [ORDERS_0, ORDERS_1]
    p0, p1 = orders["partitions"]
    # ledger 3 closed with 10 entries; ledger 7 open: LAC 4, 6 entries stored -> 6 entries
    # (the recovery of an open ledger keeps what is stored past its LAC)
    assert (p0["ledgers"], p0["entries"], p0["size"], p0["cursors"]) == (2, 16, 1600, 2)
    assert p0["managed_ledger"] == "public/default/persistent/orders-partition-0"
    # ledger 4 open: explicit LAC 2 -> 3 entries of 10 bytes
    assert (p1["ledgers"], p1["entries"], p1["size"], p1["cursors"]) == (1, 3, 30, 0)
    assert (orders["ledgers"], orders["entries"], orders["size"], orders["cursors"]) == (
        3,
        19,
        1630,
        2,
    )
    assert orders["entries_exact"] is True
    legacy = by_topic["persistent://old/cluster1/ns/legacy"]
    assert legacy["entries"] == 10 and legacy["entries_exact"] is False  # ledger 9: no entries
    assert by_topic["persistent://t1/ns1/empty topic"]["ledgers"] == 0
    assert set(by_topic[ACKS]) == {
        "topic",
        "partitioned",
        "ledgers",
        "entries",
        "size",
        "entries_exact",
        "cursors",
        "managed_ledger",
        "partition",
        "cursor_names",
    }
    # one namespace only, and one line per topic in jsonl
    result = run(capsys, "topic", "list", "--metadata-url", url, "-n", "t1/ns1", "-o", "jsonl")
    lines = [line for line in result.out.splitlines() if line]
    assert [__import__("json").loads(x)["topic"] for x in lines] == [
        "persistent://t1/ns1/empty topic",
        "persistent://t1/ns1/shadow",
    ]
    table = run(capsys, "topic", "list", "--metadata-url", url, "-o", "table")
    assert table.code == 0 and "orders-partition-1" in table.out and "(2 partitions)" in table.out
    # without storage the open ledgers are unknown: totals are lower bounds, marked '+'
    line = next(x for x in table.out.splitlines() if "orders-partition-0" in x)
    assert "10+" in line and "1000+" in line


@pytest.mark.parametrize(
    "name", [ORDERS_0, "public/default/orders-partition-0", "orders-partition-0"]
)
def test_topic_info_accepts_pulsar_names(
    capsys: pytest.CaptureFixture[str], cluster: Any, name: str
) -> None:
    url, bookie = cluster
    info = cli_json(capsys, "topic", "info", name, "--metadata-url", url, "--bookie-dir", bookie)
    assert info["topic"] == ORDERS_0
    assert (
        info["partition"] == 0 and info["partitioned_topic"] == "persistent://public/default/orders"
    )
    assert info["ledgers"] == [
        {
            "ledger_id": 3,
            "entries": 10,
            "size": 1000,
            "timestamp": CTIME + 3,
            "open": False,
            "entries_source": "ml-info",
            "offloaded": False,
            "stored": "bookies",
        },
        {
            "ledger_id": 7,
            "entries": 6,
            "size": 600,
            "timestamp": None,
            "open": True,
            "entries_source": "storage",
            "offloaded": False,
            "stored": "bookies",
            "state": "OPEN",
            "beyond_lac": 1,
        },
    ]
    assert (info["entries"], info["size"], info["entries_exact"]) == (16, 1600, True)
    assert info["properties"] == {"index": "99"} and info["index"] == 99
    cursors = {c["name"]: c for c in info["cursors"]}
    sub = cursors["sub a"]
    assert (sub["state_in"], sub["cursors_ledger_id"], sub["mark_delete"]) == ("znode", -1, "7:4")
    # 7:5, stored past the LAC, is the ledger's after a recovery: one entry to read
    assert (sub["mark_delete_source"], sub["backlog"], sub["backlog_exact"]) == ("znode", 1, True)
    comp = cursors["__compaction"]
    assert comp["special"] == "compaction"
    assert (comp["state_in"], comp["cursors_ledger_id"]) == ("ledger", 12)
    # the znode holds an older snapshot; the cursor ledger's last PositionInfo wins
    assert comp["znode_mark_delete"] == "7:1"
    assert (comp["mark_delete"], comp["mark_delete_source"]) == ("7:3", "cursor-ledger")
    assert comp["properties"] == {"CompactedTopicLedger": 13}
    assert comp["backlog"] == 2  # 7:4 and 7:5
    assert info["compaction"] == {"horizon": "7:3", "compacted_ledger": 13}
    assert info["terminated_at"] is None and info["shadow_source"] is None
    assert info["encoding"] == "binary" and info["problems"] == []


def test_topic_info_backlog_acks_and_termination(
    capsys: pytest.CaptureFixture[str], cluster: Any
) -> None:
    url, _ = cluster
    info = cli_json(capsys, "topic", "info", ACKS, "--metadata-url", url)
    assert info["terminated_at"] == "31:4"
    assert info["index"] == 24 and info["compaction"] is None
    cursors = {c["name"]: c for c in info["cursors"]}
    # after 30:4: 15 + 5 entries, minus (30:9, 30:12] = 3 and (30:14, 31:1] = 7
    assert cursors["c1"]["backlog"] == 10
    assert cursors["c1"]["individually_acked"] == [["30:9", "30:12"], ["30:14", "31:1"]]
    assert cursors["c1"]["last_active"] == CTIME + 99
    assert cursors["c2"]["backlog"] == 25  # mark-delete in a ledger no longer listed
    assert cursors["pulsar.dedup"]["backlog"] == 0
    assert cursors["pulsar.dedup"]["special"] == "deduplication"


def test_topic_info_shadow_and_unknown_open_ledger(
    capsys: pytest.CaptureFixture[str], cluster: Any
) -> None:
    url, bookie = cluster
    shadow = cli_json(
        capsys, "topic", "info", "t1/ns1/shadow", "--metadata-url", url, "--bookie-dir", bookie
    )
    assert shadow["shadow_source"] == ORDERS_0 and shadow["encoding"] == "text"
    # its only ledger is the source's ledger 3, closed in BookKeeper since
    assert shadow["ledgers"][0]["entries_source"] == "ledger-metadata"
    assert (shadow["entries"], shadow["size"]) == (10, 1000)
    assert shadow["cursors"][0]["name"] == "s/1" and shadow["cursors"][0]["backlog"] == 9
    legacy = cli_json(
        capsys,
        "topic",
        "info",
        "persistent://old/cluster1/ns/legacy",
        "--metadata-url",
        url,
        "--bookie-dir",
        bookie,
    )
    assert legacy["encoding"] == "compressed" and legacy["compression"] == "LZ4"
    last = legacy["ledgers"][-1]
    assert (last["ledger_id"], last["entries"], last["entries_source"]) == (9, None, "unknown")
    assert "no entries" in last["problem"] and legacy["entries_exact"] is False


def test_topic_info_without_storage(capsys: pytest.CaptureFixture[str], cluster: Any) -> None:
    url, _ = cluster
    info = cli_json(capsys, "topic", "info", ORDERS_0, "--metadata-url", url)
    assert info["ledgers"][1]["entries"] is None and info["entries_exact"] is False
    comp = next(c for c in info["cursors"] if c["name"] == "__compaction")
    assert (comp["mark_delete"], comp["mark_delete_source"]) == ("7:1", "znode")
    for fmt in ("tree", "table"):
        result = run(capsys, "topic", "info", ORDERS_0, "--metadata-url", url, "-o", fmt)
        assert result.code == 0 and "__compaction" in result.out


def test_topic_info_unknown_and_partitioned(
    capsys: pytest.CaptureFixture[str], cluster: Any
) -> None:
    url, _ = cluster
    line = one_line_error(run(capsys, "topic", "info", "nope", "--metadata-url", url))
    assert "persistent://public/default/nope not found" in line
    # partitions without the partitioned-topic metadata: shown, and the missing metadata
    # is a finding (the broker would not know "orders" as partitioned)
    result = run(capsys, "topic", "info", "orders", "--metadata-url", url, "-o", "json")
    assert result.code == 1
    doc = result.json()
    assert [p["topic"] for p in doc["partitions"]] == [ORDERS_0, ORDERS_1]
    assert doc["partitions_declared"] is None and "no partitioned-topic metadata" in result.err
    line = one_line_error(run(capsys, "topic", "info", "a/b", "--metadata-url", url), 2)
    assert "invalid short topic name" in line


# -- ledger list / meta ----------------------------------------------------------------------


def test_ledger_list(capsys: pytest.CaptureFixture[str], cluster: Any) -> None:
    url, bookie = cluster
    rows = cli_json(capsys, "ledger", "list", "--metadata-url", url, "--bookie-dir", bookie)
    by_id = {r["ledger_id"]: r for r in rows}
    assert list(by_id) == [3, 4, 7, 8, 9, 12, 13, 20, 21]
    assert set(by_id[3]) == {
        "ledger_id",
        "path",
        "state",
        "entries",
        "lac",
        "length",
        "digest_type",
        "kind",
        "topic",
        "managed_ledger",
        "cursor",
        "compacted_topic",
        "schema_id",
        "ctime",
        "entries_source",
        "error",
        "stored",
    }
    assert {r["stored"] for r in rows} == {"bookies"}
    assert by_id[3]["path"] == "/ledgers/00/0000/L0003"
    assert (by_id[3]["state"], by_id[3]["entries"], by_id[3]["length"]) == ("CLOSED", 10, 1000)
    assert (by_id[3]["kind"], by_id[3]["topic"], by_id[3]["ctime"]) == ("data", ORDERS_0, CTIME)
    assert (by_id[7]["entries"], by_id[7]["lac"], by_id[7]["length"]) == (6, 4, 600)
    assert by_id[7]["entries_source"] == "storage"
    assert (by_id[4]["entries"], by_id[4]["length"]) == (3, 30)
    assert (by_id[9]["entries"], by_id[9]["entries_source"]) == (None, None)
    assert (by_id[12]["kind"], by_id[12]["cursor"], by_id[12]["topic"]) == (
        "cursor",
        "__compaction",
        ORDERS_0,
    )
    assert (by_id[13]["kind"], by_id[13]["topic"], by_id[13]["digest_type"]) == (
        "compacted",
        ORDERS_0,
        "CRC32",
    )
    assert (by_id[20]["kind"], by_id[20]["schema_id"]) == ("schema", "x/y/z")
    assert by_id[21]["kind"] == "unknown" and by_id[21]["entries"] == 0

    def ids(*args: str) -> list[int]:
        return [
            r["ledger_id"] for r in cli_json(capsys, "ledger", "list", "--metadata-url", url, *args)
        ]

    assert ids("--topic", "orders-partition-0") == [3, 7, 12, 13]
    assert ids("--kind", "cursor") == [12]
    assert ids("--kind", "compacted", "--topic", ORDERS_0) == [13]
    assert ids("--kind", "unknown") == [21]
    # a topic no ledger names and no managed ledger knows is not found, not an empty list
    missing = run(capsys, "ledger", "list", "--metadata-url", url, "--topic", "nothing-here")
    assert missing.code == 1 and missing.out == ""
    assert "topic persistent://public/default/nothing-here not found" in missing.err
    table = run(capsys, "ledger", "list", "--metadata-url", url, "-o", "table")
    assert table.code == 0 and "__compaction" in table.out and "9 ledgers" in table.err


def test_ledger_meta_never_shows_secrets(capsys: pytest.CaptureFixture[str], cluster: Any) -> None:
    url, bookie = cluster
    meta = cli_json(capsys, "ledger", "meta", "4", "--metadata-url", url, "--bookie-dir", bookie)
    assert meta["path"] == "/ledgers/00/0000/L0004" and meta["format_version"] == 3
    assert meta["stat"]["version"] == 0 and meta["znode_size"] > 0
    md = meta["metadata"]
    assert (md["state"], md["digest_type"], md["has_password"]) == ("OPEN", "CRC32C", True)
    assert md["ensembles"] == {"0": [BOOKIE_ID]} and md["ctime"] == CTIME
    assert md["custom_metadata"]["pulsar/managed-ledger"].endswith("orders-partition-1")
    assert meta["topic"] == ORDERS_1 and meta["kind"] == "data"
    b = meta["bookie"]
    assert (b["exists"], b["fenced"], b["has_master_key"]) == (True, False, True)
    assert (b["explicit_lac"], b["last_entry_id"], b["last_entry_lac"]) == (2, 2, 1)
    assert (meta["lac"], meta["entries"]) == (2, 3)
    fenced = cli_json(capsys, "ledger", "meta", "3", "--metadata-url", url, "--bookie-dir", bookie)
    assert fenced["bookie"]["fenced"] is True and fenced["state"] == "CLOSED"
    secrets = [PASSWORD, PASSWORD.hex().encode(), MASTER_KEY.hex().encode()]
    import base64

    secrets += [base64.b64encode(PASSWORD), base64.b64encode(MASTER_KEY)]
    for fmt in ("json", "tree", "table"):
        result = run(
            capsys, "ledger", "meta", "3", "--metadata-url", url, "--bookie-dir", bookie, "-o", fmt
        )
        assert result.code == 0
        text = (result.out + result.err).encode()
        assert not any(s in text for s in secrets), fmt
    # the bookie's view alone, without a metadata store
    alone = cli_json(capsys, "ledger", "meta", "7", "--bookie-dir", bookie)
    assert alone["metadata"] is None and alone["path"] is None and alone["lac"] == 4


def test_ledger_bad_input(capsys: pytest.CaptureFixture[str], cluster: Any) -> None:
    url, bookie = cluster
    line = one_line_error(
        run(capsys, "ledger", "meta", "99", "--metadata-url", url, "--bookie-dir", bookie)
    )
    assert "ledger 99 not found" in line
    result = run(capsys, "ledger", "list", "--metadata-url", url, "--kind", "bogus")
    assert result.code == 2
    line = one_line_error(run(capsys, "ledger", "list"), 2)
    assert "no metadata store given" in line


# -- bookie commands: golden against BookKeeper's shell ---------------------------------------

_FIELDS = re.compile(r"(\w+)=([^,}]*)")


def shell_records(name: str, marker: str = "[FormatUtil] Entry {") -> list[dict[str, str]]:
    """The ``Entry {...}`` lines of a bk-shell output file as dicts."""
    out = []
    for line in (SHELL / name).read_text().splitlines():
        if line.startswith(marker):
            out.append(dict(_FIELDS.findall(line)))
    return out


@pytest.mark.parametrize("log_id", [0, 1, 2, 3])
def test_bookie_log_matches_readlog(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, log_id: int
) -> None:
    lines = shell_records(f"readlog-{log_id}.txt")
    heads = [d for d in lines if "entrySize" in d]
    lacs = [int(d["lastAddConfirmed"]) for d in lines if "lastAddConfirmed" in d]
    monkeypatch.setenv("BK_TEST_PW", "secret")  # ledger 3 has a MAC digest
    doc = cli_json(
        capsys,
        "bookie",
        "log",
        f"{log_id:x}.log",
        "--bookie-dir",
        LIVE_BOOKIE,
        "--password-env",
        "BK_TEST_PW",
    )
    records = doc["records"]
    assert [(r["ledger_id"], r["entry_id"], r["position"], r["size"]) for r in records] == [
        (int(d["ledgerId"]), int(d["entryId"]), int(d["position"]), int(d["entrySize"]))
        for d in heads
    ]
    assert [r["lac"] for r in records] == lacs
    assert all(r["offset"] == r["position"] + 4 for r in records)
    assert all(r["digest_ok"] is True for r in records), [r for r in records if not r["digest_ok"]]
    assert doc["problems"] == []


def test_bookie_logs_match_readlogmetadata(capsys: pytest.CaptureFixture[str]) -> None:
    logs = cli_json(capsys, "bookie", "logs", "--bookie-dir", LIVE_BOOKIE)
    assert [log["log_id"] for log in logs] == [0, 1, 2, 3, 4]
    for log in logs[:4]:
        text = (SHELL / f"readlogmetadata-{log['log_id']}.txt").read_text()
        sizes = {int(a): int(b) for a, b in re.findall(r"ledgerId=(\d+), size=(\d+)", text)}
        total = int(re.search(r"totalSize=(\d+)", text).group(1))  # type: ignore[union-attr]
        assert {int(k): v for k, v in log["ledgers"].items()} == sizes
        assert sum(log["ledgers"].values()) == total
        has_map = "No ledgers map index found" not in text
        assert log["has_ledgers_map"] is has_map
        assert log["ledgers_source"] == ("ledgers-map" if has_map else "scan")
        assert log["header_version"] == 1 and log["file"] == f"{log['log_id']:x}.log"
    empty = logs[4]
    assert (empty["size"], empty["ledgers"], empty["ledgers_source"]) == (0, {}, None)


def test_bookie_journal_matches_readjournal(capsys: pytest.CaptureFixture[str]) -> None:
    doc = cli_json(capsys, "bookie", "journal", "--bookie-dir", LIVE_BOOKIE)
    mark = re.search(
        r"Journal Id - (\d+)\((\w+)\.txn\), Pos - (\d+)", (SHELL / "lastmark.txt").read_text()
    )
    assert mark is not None
    assert doc["last_marks"] == [
        {
            "journal_id": int(mark.group(1)),
            "file": mark.group(2) + ".txn",
            "offset": int(mark.group(3)),
        }
    ]
    (journal,) = doc["journals"]
    assert journal["version"] == 6 and journal["replay_from"] == int(mark.group(3))
    lines = shell_records("readjournal-1a1fdc8ddb1.txt")
    heads = [d for d in lines if "entrySize" in d]
    records = journal["records"]
    assert [(r["ledger_id"], r["entry_id"], r["position"], r["size"]) for r in records] == [
        (int(d["ledgerId"]), int(d["entryId"]), int(d["position"]), int(d["entrySize"]))
        for d in heads
    ]
    data_lacs = [
        int(d["lastAddConfirmed"])
        for d in lines
        if "lastAddConfirmed" in d and int(d["entryId"]) >= 0
    ]
    assert [r["lac"] for r in records if r["kind"] == "data"] == data_lacs
    # readjournal prints the explicit-LAC record as DATA and reads its LAC from the
    # record's length field (0x14) and the packet's first bytes; the packet says LAC 2
    quirk = [d for d in lines if d.get("entryId") == "-32768" and "lastAddConfirmed" in d]
    assert [d["lastAddConfirmed"] for d in quirk] == [str(0x14 << 32)]
    text = (SHELL / "readjournal-1a1fdc8ddb1.txt").read_text()
    keys = re.findall(r"MasterKey \{entryId=-4096, ledgerId=(\d+)", text)
    fences = re.findall(r"Fenced \{entryId=-8192, ledgerId=(\d+)", text)
    assert [r["ledger_id"] for r in records if r["kind"] == "master-key"] == [int(k) for k in keys]
    assert all(r["master_key_set"] for r in records if r["kind"] == "master-key")
    assert [r["ledger_id"] for r in records if r["kind"] == "fence"] == [int(f) for f in fences]
    lac = [r for r in records if r["kind"] == "explicit-lac"]
    assert [(r["ledger_id"], r["lac"]) for r in lac] == [(8, 2)]
    assert "e793cbc3" not in str(doc)  # the master key itself is never shown
    only = cli_json(capsys, "bookie", "journal", "--bookie-dir", LIVE_BOOKIE, "--ledger", "7")
    assert {r["ledger_id"] for r in only["journals"][0]["records"]} == {7}
    after = cli_json(capsys, "bookie", "journal", "--bookie-dir", LIVE_BOOKIE, "--after-mark")
    assert after["journals"][0]["records"] == []  # a clean shutdown: everything checkpointed


def test_bookie_check_matches_check_db_ledgers_index(capsys: pytest.CaptureFixture[str]) -> None:
    doc = cli_json(capsys, "bookie", "check", "--bookie-dir", LIVE_BOOKIE)
    scanned = shell_records("check-db-ledgers-index.txt", "[LedgersIndexCheckOp] Scanned ledger {")
    assert [
        (lg["ledger_id"], lg["exists"], lg["fenced"], lg["explicit_lac"] is not None)
        for lg in doc["ledgers"]
    ] == [
        (
            int(d["ledgerId"]),
            d["exists"] == "true",
            d["isFenced"] == "true",
            d["explicitLAC"] != "-",
        )
        for d in scanned
    ]
    assert all(lg["has_master_key"] for lg in doc["ledgers"])
    assert (doc["ok"], doc["errors"], doc["findings"]) == (True, 0, [])
    assert doc["entries_in_logs"] == doc["entries_in_index"] == 82
    assert "55PLw3kQ" not in str(doc)  # BookKeeper prints the master key; we do not


def test_bookie_damage_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from tests.support.bookie_data import writable_copy

    copy = writable_copy(LIVE_BOOKIE, tmp_path / "copy")
    log = copy / "ledgers" / "current" / "1.log"
    raw = bytearray(log.read_bytes())
    raw[1028 + 8 : 1028 + 16] = struct.pack(">q", 77)  # entry 1 of ledger 2 now says entry 77
    raw[20000] ^= 0xFF  # a payload byte of another entry
    log.write_bytes(bytes(raw))
    result = run(capsys, "bookie", "check", "--bookie-dir", copy, "-o", "json")
    assert result.code == 1
    doc = result.json()
    kinds = {(f["kind"], f["severity"]) for f in doc["findings"]}
    assert ("in-index-not-in-log", "error") in kinds and ("in-log-not-in-index", "error") in kinds
    assert doc["ok"] is False and doc["errors"] >= 2
    result = run(capsys, "bookie", "log", "1", "--bookie-dir", copy, "-o", "json")
    assert result.code == 1
    bad = [r for r in result.json()["records"] if r["digest_ok"] is False]
    assert len(bad) == 2  # the renumbered entry and the flipped byte
    table = run(capsys, "bookie", "check", "--bookie-dir", copy, "-o", "table")
    assert table.code == 1 and "in-index-not-in-log" in table.out


def test_bookie_log_decode(capsys: pytest.CaptureFixture[str]) -> None:
    doc = cli_json(capsys, "bookie", "log", "0", "--bookie-dir", LIVE_BOOKIE, "--decode", "-l", "1")
    records = doc["records"]
    assert [r["entry_id"] for r in records] == list(range(11))
    first = records[0]["decoded"]
    assert first["ok"] is True
    assert [layer["layer"] for layer in first["layers"]][:2] == [
        "bookie-entry",
        "broker-entry-metadata",
    ]
    assert first["messages"]
    result = run(
        capsys, "bookie", "log", "0", "--bookie-dir", LIVE_BOOKIE, "--decode", "-o", "table"
    )
    assert result.code == 0 and "publish time" in result.out


def test_bookie_tables_render(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["logs"], ["log", "3"], ["journal"], ["check"], ["logs", "-o", "tree"]):
        if "-o" not in args:
            args = [*args, "-o", "table"]
        result = run(capsys, "bookie", *args, "--bookie-dir", LIVE_BOOKIE)
        assert result.code == 0, (args, result.err)
        assert result.out.strip()
    jsonl = run(capsys, "bookie", "log", "3", "--bookie-dir", LIVE_BOOKIE, "-o", "jsonl")
    assert len(jsonl.out.splitlines()) == 19


# -- read-only and bad input -----------------------------------------------------------------


def test_every_command_is_read_only(capsys: pytest.CaptureFixture[str], cluster: Any) -> None:
    url, bookie = cluster
    meta_dir = Path(url[len("rocksdb://") :])
    before = tree_digest(meta_dir, bookie, LIVE_BOOKIE)
    m, b = ("--metadata-url", url), ("--bookie-dir", str(bookie))
    live = ("--bookie-dir", str(LIVE_BOOKIE))
    for args in (
        ["topic", "list", *m, *b],
        ["topic", "info", ORDERS_0, *m, *b],
        ["ledger", "list", *m, *b],
        ["ledger", "meta", "12", *m, *b],
        ["bookie", "logs", *b],
        ["bookie", "log", "0", "--decode", *b],
        ["bookie", "journal", *live],
        ["bookie", "check", *b],
        ["bookie", "check", *live],
        ["bookie", "log", "2", *live],
    ):
        for fmt in ("json", "table"):
            result = run(capsys, *args, "-o", fmt)
            assert result.code == 0, (args, result.err)
    assert tree_digest(meta_dir, bookie, LIVE_BOOKIE) == before


def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    for args in (["bookie", "logs"], ["bookie", "check"], ["bookie", "journal"]):
        line = one_line_error(run(capsys, *args, "--bookie-dir", missing), 3)
        assert "does not exist" in line
    line = one_line_error(run(capsys, "bookie", "logs"), 2)
    assert "no bookie directory given" in line
    line = one_line_error(run(capsys, "bookie", "log", "9", "--bookie-dir", LIVE_BOOKIE))
    assert "no entry log 9.log" in line
    line = one_line_error(run(capsys, "bookie", "log", "x.y", "--bookie-dir", LIVE_BOOKIE), 2)
    assert "unknown entry log" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    line = one_line_error(run(capsys, "bookie", "check", "--bookie-dir", empty), 3)
    assert "no bookie data" in line
    line = one_line_error(
        run(capsys, "topic", "list", "--metadata-url", "rocksdb://" + str(missing)), 3
    )
    assert "no RocksDB metadata store" in line


def test_unreachable_zookeeper_fails_fast() -> None:
    """One line and exit 1 within the connect timeout (5 s), for each command at once."""
    import subprocess

    from tests.support.cli_helpers import ledgerctl_script

    commands = (
        ["topic", "list"],
        ["topic", "info", "t"],
        ["ledger", "list"],
        ["ledger", "meta", "1"],
    )
    # the machine's load counts as well: a fifth process that only starts and exits
    # (``--version``) runs beside them, and the four may take the 5 s connect timeout plus
    # a few times what starting took it (on a quiet machine about 1 s in all)
    started = time.monotonic()
    baseline = subprocess.Popen([ledgerctl_script(), "--version"], stdout=subprocess.PIPE)
    procs = [
        subprocess.Popen(
            [ledgerctl_script(), *args, "--metadata-url", "zk:127.0.0.1:1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in commands
    ]
    baseline.communicate(timeout=60)
    start_up = time.monotonic() - started
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        line = one_line_error(Result(proc.returncode, out, err), 3)
        assert "cannot reach ZooKeeper at zk:127.0.0.1:1" in line
    assert time.monotonic() - started < 5 + 2 + 3 * start_up


def test_entries_counting_helpers() -> None:
    from pulsarctl_py.topics import entries_after, entries_between

    ledgers = [(3, 10), (7, None), (9, 4)]
    assert entries_after(ledgers, (3, 4)) == (9, False)
    assert entries_after(ledgers, (9, -1)) == (4, True)
    assert entries_after(ledgers, (1, 0)) == (14, False)
    assert entries_after(ledgers, (9, 3)) == (0, True)
    assert entries_between([(3, 10), (9, 4)], (3, 8), (9, 1)) == 3
    assert entries_between([(3, 10)], (3, 5), (3, 5)) == 0
    assert mld.COMPACTION_CURSOR == "__compaction"
