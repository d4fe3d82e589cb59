"""`ledgerctl ledger list|meta` and `topic list` on the real BookKeeper ZooKeeper tree.

The tree BookKeeper wrote (restored into a real ZooKeeper) and the bookie's directories,
checked against what ``bookkeeper shell listledgers -m`` / ``ledgermetadata`` printed and
what the bookie's ledgers index held (manifest.json).
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_helpers import run

LIVE = Path(__file__).resolve().parents[2] / "data" / "bookkeeper" / "live-dbledgerstorage"
BOOKIE = LIVE / "bookie-data"
SHELL = LIVE / "bk-shell"
DIGESTS = {"MAC": "HMAC"}  # BookKeeper's name -> ours


@pytest.fixture(autouse=True)
def _no_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("LEDGERCTL_METADATA_URL", "LEDGERCTL_BOOKIE_DIRS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)


def bk_metadata(text: str) -> dict[str, Any]:
    """BookKeeper's ``LedgerMetadata{...}`` toString as a dict."""
    body = text[text.index("LedgerMetadata{") + len("LedgerMetadata{") :]
    head, _, rest = body.partition(", ensembles={")
    out: dict[str, Any] = dict(re.findall(r"(\w+)=([^,]+)", head))
    ensembles, _, rest = rest.partition("}, customMetadata={")
    out["ensembles"] = {
        first: members.split(", ")
        for first, members in re.findall(r"(\d+)=\[([^\]]*)\]", ensembles)
    }
    custom = rest[: rest.index("}}")]
    out["customMetadata"] = {
        key: base64.b64decode(value).decode()
        for key, value in re.findall(r"([\w/.-]+)=base64:([A-Za-z0-9+/=]*)", custom)
    }
    return out


def listledgers() -> dict[int, dict[str, Any]]:
    out = {}
    for line in (SHELL / "listledgers.txt").read_text().splitlines():
        m = re.match(r"\[ListLedgersCommand\] log entry \{ledgerId=(\d+), metadata=", line)
        if m:
            out[int(m.group(1))] = bk_metadata(line)
    return out


def manifest() -> dict[int, dict[str, Any]]:
    doc = json.loads((LIVE / "manifest.json").read_text())
    return {lg["ledger_id"]: lg for lg in doc["ledgers"]}


def test_ledger_list_matches_listledgers(
    capsys: pytest.CaptureFixture[str], restored_zk: str
) -> None:
    result = run(
        capsys,
        "ledger",
        "list",
        "--metadata-url",
        restored_zk,
        "--bookie-dir",
        BOOKIE,
        "-o",
        "json",
    )
    assert result.code == 0, result.err
    rows = {r["ledger_id"]: r for r in result.json()}
    bk = listledgers()
    assert list(rows) == sorted(bk)
    for ledger_id, expected in bk.items():
        row = rows[ledger_id]
        assert row["state"] == expected["state"]
        assert row["digest_type"] == DIGESTS.get(expected["digestType"], expected["digestType"])
        assert row["path"] == manifest()[ledger_id]["zk_znode"]
        custom = expected["customMetadata"]
        if "pulsar/managed-ledger" in custom:
            assert row["kind"] == "data"
            assert row["managed_ledger"] == custom["pulsar/managed-ledger"]
            assert (
                row["topic"]
                == "persistent://public/default/"
                + custom["pulsar/managed-ledger"].rsplit("/", 1)[1]
            )
        else:
            assert row["kind"] == "unknown" and row["topic"] is None
        if expected["state"] == "CLOSED":
            assert row["lac"] == int(expected["lastEntryId"])
            assert row["length"] == int(expected["length"])
            assert row["entries_source"] == "metadata"
    # the open ledgers, counted from the bookie: C has only the piggybacked LAC (the entry
    # before the last) and counts its last entry too, as a recovery would keep it; I has an
    # explicit LAC equal to its last entry
    assert (rows[2]["lac"], rows[2]["entries"], rows[2]["entries_source"]) == (5, 7, "storage")
    assert (rows[8]["lac"], rows[8]["entries"]) == (2, 3)
    assert rows[8]["length"] == sum(e["payload_length"] for e in manifest()[8]["entries"])
    kinds = run(
        capsys, "ledger", "list", "--metadata-url", restored_zk, "--kind", "unknown", "-o", "json"
    )
    assert [r["ledger_id"] for r in kinds.json()] == [4]
    topic = run(
        capsys, "ledger", "list", "--metadata-url", restored_zk, "--topic", "corpus-h", "-o", "json"
    )
    assert [r["ledger_id"] for r in topic.json()] == [7]


@pytest.mark.parametrize("ledger_id", range(9))
def test_ledger_meta_matches_ledgermetadata(
    capsys: pytest.CaptureFixture[str], restored_zk: str, ledger_id: int
) -> None:
    result = run(
        capsys,
        "ledger",
        "meta",
        str(ledger_id),
        "--metadata-url",
        restored_zk,
        "--bookie-dir",
        BOOKIE,
        "-o",
        "json",
    )
    assert result.code == 0, result.err
    doc = result.json()
    expected = bk_metadata((SHELL / f"ledgermetadata-{ledger_id}.txt").read_text())
    facts = manifest()[ledger_id]
    md = doc["metadata"]
    assert doc["path"] == facts["zk_znode"] and doc["znode_size"] == facts["zk_znode_len"]
    assert md["format_version"] == doc["format_version"] == int(expected["formatVersion"])
    assert md["ensemble_size"] == int(expected["ensembleSize"])
    assert md["write_quorum_size"] == int(expected["writeQuorumSize"])
    assert md["ack_quorum_size"] == int(expected["ackQuorumSize"])
    assert md["state"] == expected["state"]
    assert md["digest_type"] == DIGESTS.get(expected["digestType"], expected["digestType"])
    assert md["ensembles"] == expected["ensembles"]
    assert md["custom_metadata"] == expected["customMetadata"]
    assert md["has_password"] is True
    if expected["state"] == "CLOSED":
        assert md["last_entry_id"] == int(expected["lastEntryId"])
        assert md["length"] == int(expected["length"])
        assert doc["entries"] == facts["expected_last_entry_id"] + 1
    index = facts["bookie_ledger_index"]
    if isinstance(index, str):  # ledger 5: the bookie never saw it
        assert doc["bookie"] is None
    else:
        bookie = doc["bookie"]
        assert bookie["exists"] is index["exists"] and bookie["fenced"] is index["fenced"]
        assert bookie["has_master_key"] is True
        lac_hex = index["explicit_lac_record_hex"]
        expected_lac = None if lac_hex is None else int(lac_hex[16:32], 16)
        assert bookie["explicit_lac"] == expected_lac
    text = result.out
    assert "c2VjcmV0" not in text and "secret" not in text  # the password never shows
    assert index == "ledger unknown to the bookie (no entry was ever written to it)" or (
        index["master_key_hex"] not in text
    )


def test_topic_list_on_a_tree_without_topics(
    capsys: pytest.CaptureFixture[str], restored_zk: str
) -> None:
    # a tree of BookKeeper's metadata without Pulsar's is the wrong place, not "no topics"
    result = run(capsys, "topic", "list", "--metadata-url", restored_zk, "-o", "json")
    assert result.code == 1 and result.out == ""
    assert "no Pulsar topic metadata in" in result.err and result.err.count("\n") == 1
    result = run(capsys, "topic", "info", "corpus-a", "--metadata-url", restored_zk)
    assert result.code == 1
    assert result.err.strip().endswith(
        "(no znode /managed-ledgers/public/default/persistent/corpus-a)"
    )


def _without_stats(doc: Any) -> Any:
    """Drop what differs between stores by nature: versions, times, znode stats."""
    if isinstance(doc, dict):
        return {
            k: _without_stats(v)
            for k, v in doc.items()
            if k not in ("version", "modified_ms", "stat")
        }
    if isinstance(doc, list):
        return [_without_stats(v) for v in doc]
    return doc


def test_topic_views_read_alike_from_zookeeper_and_rocksdb(
    capsys: pytest.CaptureFixture[str], scratch_zk: str, tmp_path: Path
) -> None:
    from pulsarctl_py.stores.metadata import create_metadata_store, open_metadata_store
    from tests.support.fixtures.views_cluster import ORDERS_0, write_bookie, write_metadata

    with open_metadata_store(scratch_zk, read_only=False) as zk:
        write_metadata(zk)
    with create_metadata_store(tmp_path / "rocks") as rocks:
        write_metadata(rocks)
    bookie = write_bookie(tmp_path / "bookie")
    commands = (
        ["topic", "list"],
        ["topic", "info", ORDERS_0],
        ["topic", "info", "persistent://t1/ns1/shadow"],
        ["ledger", "list"],
        ["ledger", "meta", "12"],
    )
    for args in commands:
        docs = []
        for url in (scratch_zk, f"rocksdb://{tmp_path / 'rocks'}"):
            result = run(capsys, *args, "--metadata-url", url, "--bookie-dir", bookie, "-o", "json")
            assert result.code == 0, (args, result.err)
            docs.append(_without_stats(result.json()))
        assert docs[0] == docs[1], args
    info = docs[0]
    assert (info["lac"], info["bookie"]["last_entry_id"], info["kind"]) == (0, 1, "cursor")
