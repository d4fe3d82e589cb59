"""`ledgerctl ledger replicas` and `bookie list|info`: the faults a real bookie cannot be
made to show, against test bookies serving the real bookie's directory.

On the real cluster (tests/cluster/sandbox/test_reads.py): replicas that agree, over a whole
ledger and a range; one bookie stopped (its copies unreachable, reads failing over); a
bookie whose entry log was damaged named by its bad digest; reading with only the
metadata URLs; verify live equal to offline; bookie list and info of running bookies.
What stays here: one replica holding *different* bytes while another lacks one entry
(ENOENTRY) of a ledger the others hold, with every replica asked and no read fencing (a
test bookie records each request: a real one cannot be made to lose one entry, nor
report what it was asked); a bookie that never answers or closes mid-frame (the timeout,
one line, exit 3); TLS (the sandbox's bookies speak plaintext); bookie list's read-only
and old-cookie rows (metadata only, written here).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pulsarctl_py.stores.metadata import open_metadata_store
from tests.support.cli_helpers import run
from tests.support.live_bookie import TestBookie
from tests.support.live_world import LIVE_DATA, REAL_BOOKIE, corpus_metadata, replicated_metadata

IDS = ["b1:3181", "b2:3181", "b3:3181"]


def _flip(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


@pytest.fixture(scope="module")
def corpus_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return corpus_metadata(tmp_path_factory.mktemp("cli") / "metadata")


@pytest.fixture(scope="module")
def replicated_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    # E3 / W3 / A2: every bookie holds every entry, so a minority can be named
    return replicated_metadata(tmp_path_factory.mktemp("cli3") / "metadata", IDS, 3, 2)


@pytest.fixture()
def cluster() -> Iterator[list[TestBookie]]:
    """b2 holds different bytes for entry 5 of ledger 0; b3 lacks its entry 7."""
    bookies = [
        TestBookie(LIVE_DATA),
        TestBookie(LIVE_DATA, corrupt={(0, 5): _flip}),
        TestBookie(LIVE_DATA, drop={(0, 7)}),
    ]
    try:
        yield bookies
    finally:
        for b in bookies:
            b.close()


def overrides(bookies: list[TestBookie | str]) -> list[str]:
    args = []
    for bookie_id, b in zip(IDS, bookies, strict=True):
        args += ["--bookie-address", f"{bookie_id}={b if isinstance(b, str) else b.address}"]
    return args


def entries(rows: list[dict]) -> list[int]:
    return [r["entry_id"] for r in rows]


def test_replicas_name_the_bookie_that_disagrees(
    capsys: pytest.CaptureFixture[str], replicated_url: str, cluster: list[TestBookie]
) -> None:
    res = run(capsys, "ledger", "replicas", "0", "--metadata-url", replicated_url,
              *overrides(cluster), "-o", "json")  # fmt: skip
    assert res.code == 1, res.err
    doc = res.json()
    assert (doc["first"], doc["last"], doc["entries_checked"]) == (0, 39, 40)
    assert entries(doc["divergent"]) == [5]
    assert doc["divergent"][0]["disagreeing"] == ["b2:3181"]
    assert entries(doc["bad_digest"]) == [5]
    assert entries(doc["missing"]) == [7]
    missing = [c for c in doc["missing"][0]["copies"] if c["state"] == "missing"]
    assert [(c["bookie"], c["detail"]) for c in missing] == [("b3:3181", "ENOENTRY")]
    assert entries(doc["below_write_quorum"]) == [5, 7]
    assert doc["unreachable"] == []
    assert doc["last_agreed_entry"] == 4
    assert all(b["reachable"] for b in doc["bookies"])
    # every replica of every entry was asked, and nothing fenced
    for b in cluster:
        assert sorted(r.entry_id for r in b.requests if r.op == "read") == list(range(40))
        assert not any(r.fence for r in b.requests)
    # the table says the same for people, the summary goes to stderr
    res = run(capsys, "ledger", "replicas", "0", "--metadata-url", replicated_url,
              *overrides(cluster), "-o", "table")  # fmt: skip
    assert res.code == 1
    assert "divergent" in res.out and "b2:3181" in res.out and "b3:3181" in res.out
    assert "agree up to entry 4" in res.err


def test_replicas_when_no_bookie_answers(
    capsys: pytest.CaptureFixture[str], corpus_url: str
) -> None:
    with TestBookie(LIVE_DATA, mode="silent") as silent:
        started = time.monotonic()
        res = run(capsys, "ledger", "replicas", "0", "--metadata-url", corpus_url,
                  "--bookie-address", f"{REAL_BOOKIE}={silent.address}",
                  "--bookie-timeout", "0.5")  # fmt: skip
        elapsed = time.monotonic() - started
    assert res.code == 3
    assert res.out == ""
    assert res.err.count("\n") == 1 and "no answer within 0.5s" in res.err
    assert elapsed < 5


@pytest.mark.parametrize("mode", ["silent", "close-mid"])
def test_inspect_against_a_broken_bookie_exits_3(
    capsys: pytest.CaptureFixture[str], corpus_url: str, monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:  # fmt: skip
    with TestBookie(LIVE_DATA, mode=mode) as b:
        monkeypatch.setenv("LEDGERCTL_BOOKIE_ADDRESSES", f"{REAL_BOOKIE}={b.address}")
        monkeypatch.setenv("LEDGERCTL_BOOKIE_TIMEOUT", "0.5")
        started = time.monotonic()
        res = run(capsys, "inspect", "0", "--metadata-url", corpus_url, "-o", "json")
        elapsed = time.monotonic() - started
    assert res.code == 3, res.err
    assert res.err.startswith("ledgerctl: error: ") and res.err.count("\n") == 1
    assert "Traceback" not in res.err
    assert elapsed < 5


def test_bookie_list_and_info(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    url = corpus_metadata(tmp_path / "metadata")
    with open_metadata_store(url, read_only=False) as store:
        store.put("/ledgers/available/readonly/10.0.0.9:3181", b"")
        cookie = b'5\nbookieHost: "10.0.0.9:3181"\njournalDir: "/j"\nledgerDirs: "2\\t/a\\t/b"\n'
        store.put("/ledgers/cookies/10.0.0.9:3181", cookie + b'instanceId: "other"\n')
        store.put("/ledgers/cookies/old:3181", b"3\nold:3181\n/j\n1\t/l\n")
    res = run(capsys, "bookie", "list", "--metadata-url", url, "-o", "json")
    assert res.code == 0, res.err
    rows = {r["bookie_id"]: r for r in res.json()}
    assert sorted(rows) == ["10.0.0.9:3181", "127.0.0.1:3181", "old:3181"]
    real = rows["127.0.0.1:3181"]
    assert (real["state"], real["has_cookie"], real["cookie_instance_matches"]) == (
        "available", True, True)  # fmt: skip
    assert real["endpoints"][0]["port"] == 3181
    assert real["endpoints"][0]["protocol"] == "bookie-rpc"
    ro = rows["10.0.0.9:3181"]
    assert (ro["state"], ro["cookie"]["ledger_dirs"], ro["cookie_instance_matches"]) == (
        "read-only", ["/a", "/b"], False)  # fmt: skip
    old = rows["old:3181"]
    assert (old["state"], old["cookie"]["layout"], old["cookie"]["ledger_dirs"]) == (
        "not running", 3, ["/l"])  # fmt: skip
    res = run(capsys, "bookie", "info", "127.0.0.1:3181", "--metadata-url", url, "-o", "json")
    assert res.code == 0
    cookie_doc = res.json()["cookie"]
    assert cookie_doc["instance_id"] == "0ed29b8e-07ec-4002-b84c-8cffc43ccc7d"
    assert cookie_doc["journal_dirs"] == ["/var/lib/bookkeeper/bookie-db/journal"]
    res = run(capsys, "bookie", "info", "127.0.0.1:3181", "--metadata-url", url, "-o", "table")
    assert res.code == 0 and "bookie-rpc://127.0.0.1:3181" in res.out
    res = run(capsys, "bookie", "info", "nobody:1", "--metadata-url", url)
    assert res.code == 1 and "nobody:1" in res.err and res.err.count("\n") == 1


def test_tls_flags(capsys: pytest.CaptureFixture[str], corpus_url: str, tmp_path: Path) -> None:
    from tests.support.live_world import self_signed, server_context

    cert, key = self_signed(tmp_path)
    with (
        TestBookie(LIVE_DATA, tls=server_context(cert, key)) as tls,
        TestBookie(LIVE_DATA) as plain,
    ):

        def replicas(bookie: TestBookie, *flags: str):
            return run(capsys, "ledger", "replicas", "4", "--metadata-url", corpus_url,
                       "--bookie-address", f"{REAL_BOOKIE}={bookie.address}",
                       "--bookie-timeout", "2", "-o", "json", *flags)  # fmt: skip

        ok = replicas(tls, "--bookie-ca-file", str(cert))
        assert ok.code == 0, ok.err
        assert ok.json()["entries_checked"] == 3 and tls.requests[0].op == "tls"
        untrusted = replicas(tls, "--bookie-tls")  # the system CAs do not know this one
        assert untrusted.code == 3 and "certificate verify failed" in untrusted.err
        refused = replicas(plain, "--bookie-tls")
        assert refused.code == 3 and "refused START_TLS" in refused.err
        assert replicas(plain, "--bookie-tls", "--bookie-protocol", "v2").code == 2
        assert replicas(plain, "--bookie-protocol", "v2").code == 0
        assert [(r.op, r.v2) for r in plain.requests[-3:]] == [("read", True)] * 3
