"""`ledgerctl bookie list|info` through a real ZooKeeper holding the real bookie's tree.

No test bookie here: the registry is metadata only. The sandbox's running bookies are
listed in tests/cluster/sandbox/test_reads.py; this one is a bookie registered at the default
``/ledgers`` root, kept for that layout.
"""

from __future__ import annotations

import pytest

from tests.support.cli_helpers import run
from tests.support.fixtures.zookeeper import load_dump, restore_with_kazoo
from tests.support.fixtures.zookeeper_store import LIVE

RUNNING_DUMP = LIVE / "zookeeper" / "zk-dump-bookie-running.json"
CHROOT = "/live-registry"


def test_bookie_list_and_info_from_zookeeper(
    capsys: pytest.CaptureFixture[str], zk_connect: str
) -> None:
    nodes = [n for n in load_dump(RUNNING_DUMP) if n["path"].startswith("/ledgers")]
    restore_with_kazoo(zk_connect, nodes, CHROOT)
    url = f"zk:{zk_connect}{CHROOT}"
    res = run(capsys, "bookie", "list", "--metadata-url", url, "-o", "json")
    assert res.code == 0, res.err
    assert [(r["bookie_id"], r["state"], r["cookie_instance_matches"]) for r in res.json()] == [
        ("127.0.0.1:3181", "available", True)
    ]
    res = run(capsys, "bookie", "info", "127.0.0.1:3181", "--metadata-url", url, "-o", "json")
    assert res.code == 0, res.err
    assert res.json()["endpoints"][0]["host"] == "127.0.0.1"
