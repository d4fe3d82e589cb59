"""The Spark data source's bookie client options reach the executors.

That Spark executors read the running bookies when no bookie directory is given (the data
source, compact and export, on a standalone Spark cluster too) is shown on the real
cluster: tests/cluster/sandbox/test_spark.py. What stays here needs a bookie that records how it
was asked: the driver resolves how to reach the bookies (the ``bookie-address`` option;
the executors' environment has no address override), each split carries those client
options (protocol v2 or v3, timeout, TLS settings), and bad values are refused in one
line before anything is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pulsarctl_py.demo.model import BOOKIE_DIR, BOOKIE_ID, METADATA_DIR
from tests.support.live_bookie import TestBookie
from tests.support.live_world import away_from_bookie_dirs, demo_root


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_root(tmp_path_factory, "live-spark")


@pytest.fixture()
def bookie(demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestBookie]:
    away_from_bookie_dirs(tmp_path, monkeypatch)  # the executors get no address either
    with TestBookie(demo / BOOKIE_DIR) as b:
        yield b


def _reads(b: TestBookie) -> int:
    return sum(1 for r in b.requests if r.op == "read")


def test_data_source_takes_the_bookie_client_options(spark, demo: Path, bookie: TestBookie):
    """bookie-protocol, bookie-timeout, bookie-tls and bookie-ca-file reach the client
    the executors use, as the CLI's flags of the same names do; bad values are refused in
    one line before anything is read."""
    url = f"rocksdb://{demo / METADATA_DIR}"
    address = f"{BOOKIE_ID}={bookie.address}"

    def reader(**options: str):
        r = spark.read.format("ledgerctl").option("topic", "batched")
        for name, value in {"metadata-url": url, "bookie-address": address, **options}.items():
            r = r.option(name, value)
        return r

    v3 = [tuple(r) for r in reader().load().collect()]
    assert v3 and bookie.requests and not any(r.v2 for r in bookie.requests)
    bookie.requests.clear()
    v2 = [
        tuple(r)
        for r in reader(**{"bookie-protocol": "v2", "bookie-timeout": "5"}).load().collect()
    ]
    assert v2 == v3
    reads = [r for r in bookie.requests if r.op == "read"]
    assert len(reads) >= 10 and all(r.v2 for r in reads)  # every read on the v2 protocol
    for options, said in (
        ({"bookie-protocol": "v9"}, "bookie protocol 'v9'"),
        ({"bookie-timeout": "soon"}, "bookie-timeout 'soon' is not a number"),
        ({"bookie-timeout": "0"}, "more than 0 and at most 86400 seconds"),
        ({"bookie-tls": "maybe"}, "bookie-tls 'maybe': use true or false"),
        ({"bookie-tls": "true", "bookie-protocol": "v2"}, "TLS needs protocol v3"),
        ({"bookie-ca-file": str(demo / "no-such-ca.pem")}, "bookie CA file"),
    ):
        with pytest.raises(Exception, match=said):
            reader(**options).load().collect()
