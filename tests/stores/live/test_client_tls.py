"""The bookie flags on every command that reads ledgers, and TLS to a test bookie.

The certificates are made at test time: a CA and a bookie certificate it signed (and a
client certificate for mutual TLS), written by ``tests.support.live_bookie.make_tls_files``. The
ledgers are the real bookie's (its metadata names the bookie ``127.0.0.1:3181``), served
by test bookies mapped with ``--bookie-address``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.cli_helpers import run
from tests.support.live_bookie import TestBookie, make_tls_files, tls_server_context
from tests.support.live_world import LIVE_DATA, REAL_BOOKIE, away_from_bookie_dirs, corpus_metadata

FLAGS = ("--bookie-address", "--bookie-tls", "--no-bookie-tls", "--bookie-ca-file",
         "--bookie-timeout", "--bookie-protocol")  # fmt: skip

#: every command that opens a ledger store
COMMANDS = [
    ["inspect"],
    ["verify"],
    ["seek"],
    ["compact"],
    ["export"],
    ["ledger", "meta"],
    ["ledger", "replicas"],
    ["topic", "info"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_ledger_reading_command_takes_the_bookie_flags(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    res = run(capsys, *command, "--help")
    assert res.code == 0, res.err
    missing = [flag for flag in FLAGS if flag not in res.out]
    assert missing == []


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return corpus_metadata(tmp_path_factory.mktemp("tls") / "metadata")


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_tls_files(tmp_path_factory.mktemp("pki"), ("127.0.0.1",), client=True)


@pytest.fixture(autouse=True)
def _no_bookie_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    away_from_bookie_dirs(tmp_path, monkeypatch)
    for name in ("TLS", "CA_FILE", "TIMEOUT", "PROTOCOL", "TLS_CERT_FILE", "TLS_KEY_FILE",
                 "TLS_HOSTNAME_CHECK"):  # fmt: skip
        monkeypatch.delenv(f"LEDGERCTL_BOOKIE_{name}", raising=False)


def inspect(capsys: pytest.CaptureFixture[str], url: str, bookie: TestBookie, *flags: str):
    return run(capsys, "inspect", "0", "--metadata-url", url, "-o", "json",
               "--bookie-address", f"{REAL_BOOKIE}={bookie.address}", *flags)  # fmt: skip


def encrypted(key_file: Path, passphrase: bytes) -> bytes:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(key_file.read_bytes(), None)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(passphrase),
    )


def one_line_error(res) -> str:
    assert res.out == ""
    assert res.err.startswith("ledgerctl: error: ") and res.err.count("\n") == 1, res.err
    assert "Traceback" not in res.err
    return res.err


def test_inspect_over_tls_reads_what_the_files_hold(
    capsys: pytest.CaptureFixture[str], url: str, tls: dict[str, Path]
) -> None:
    offline = run(capsys, "inspect", "0", "--metadata-url", url, "--bookie-dir", LIVE_DATA,
                  "-o", "json")  # fmt: skip
    assert offline.code == 0, offline.err
    with TestBookie(LIVE_DATA, tls=tls_server_context(tls)) as b:
        live = inspect(capsys, url, b, "--bookie-ca-file", tls["ca"], "--bookie-timeout", "5")
        assert live.code == 0, live.err
        assert b.requests[0].op == "tls"  # START_TLS first, then every read inside TLS
        assert sum(r.op == "read" for r in b.requests) >= 40
        assert not any(r.fence for r in b.requests)
    assert live.json()["entries"] == offline.json()["entries"]


def test_a_ca_that_did_not_sign_the_bookie_exits_3(
    capsys: pytest.CaptureFixture[str], url: str, tls: dict[str, Path], tmp_path: Path
) -> None:
    other = make_tls_files(tmp_path / "other")
    with TestBookie(LIVE_DATA, tls=tls_server_context(tls)) as b:
        res = inspect(capsys, url, b, "--bookie-ca-file", other["ca"], "--bookie-timeout", "3")
    assert res.code == 3
    assert "TLS handshake failed: certificate verify failed" in one_line_error(res)


def test_tls_to_a_plaintext_bookie_exits_3(
    capsys: pytest.CaptureFixture[str], url: str, tls: dict[str, Path]
) -> None:
    with TestBookie(LIVE_DATA) as plain:
        res = inspect(capsys, url, plain, "--bookie-ca-file", tls["ca"])
        assert plain.requests[0].op == "tls" and len(plain.requests) == 1  # no read sent
    assert res.code == 3
    assert "refused START_TLS (EBADREQ)" in one_line_error(res)


def test_the_certificate_must_name_the_bookie_host(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    elsewhere = make_tls_files(tmp_path / "pki", ("bookie-9.example",))
    with TestBookie(LIVE_DATA, tls=tls_server_context(elsewhere)) as b:
        res = inspect(capsys, url, b, "--bookie-ca-file", elsewhere["ca"])
        assert res.code == 3
        assert "mismatch" in one_line_error(res).lower()
        # the operator may turn the name check off; the chain is still checked
        monkeypatch.setenv("LEDGERCTL_BOOKIE_TLS_HOSTNAME_CHECK", "0")
        res = inspect(capsys, url, b, "--bookie-ca-file", elsewhere["ca"])
        assert res.code == 0, res.err
        res = inspect(capsys, url, b, "--bookie-tls")  # system CAs: not this one
        assert res.code == 3 and "certificate verify failed" in one_line_error(res)


def test_mutual_tls_takes_the_client_certificate_from_the_environment(
    capsys: pytest.CaptureFixture[str], url: str, tls: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    with TestBookie(LIVE_DATA, tls=tls_server_context(tls, require_client=True)) as b:
        res = inspect(capsys, url, b, "--bookie-ca-file", tls["ca"], "--bookie-timeout", "3")
        assert res.code == 3
        assert "LEDGERCTL_BOOKIE_TLS_CERT_FILE" in one_line_error(res)  # says what is missing
        monkeypatch.setenv("LEDGERCTL_BOOKIE_TLS_CERT_FILE", str(tls["client_cert"]))
        monkeypatch.setenv("LEDGERCTL_BOOKIE_TLS_KEY_FILE", str(tls["client_key"]))
        res = inspect(capsys, url, b, "--bookie-ca-file", tls["ca"])
        assert res.code == 0, res.err
        assert len(res.json()["entries"]) == 40
        assert str(tls["client_key"]) not in res.err + res.out
        # an encrypted key, its passphrase from the environment (never a flag)
        locked = tls["client_key"].with_name("locked.key")
        locked.write_bytes(encrypted(tls["client_key"], b"s3cret-pass"))
        monkeypatch.setenv("LEDGERCTL_BOOKIE_TLS_KEY_FILE", str(locked))
        monkeypatch.setenv("LEDGERCTL_BOOKIE_TLS_KEY_PASSWORD", "s3cret-pass")
        res = inspect(capsys, url, b, "--bookie-ca-file", tls["ca"])
        assert res.code == 0, res.err
        monkeypatch.setenv("LEDGERCTL_BOOKIE_TLS_KEY_PASSWORD", "wrong")
        res = inspect(capsys, url, b, "--bookie-ca-file", tls["ca"])
        assert res.code == 2 and "s3cret" not in res.err and "wrong" not in res.err
        monkeypatch.delenv("LEDGERCTL_BOOKIE_TLS_KEY_PASSWORD")
        res = inspect(capsys, url, b, "--bookie-ca-file", tls["ca"])  # no prompt, one line
        assert res.code == 2
        assert "is encrypted: put its passphrase in" in one_line_error(res)
    monkeypatch.setenv("LEDGERCTL_BOOKIE_TLS_KEY_FILE", str(tls["ca"]))  # not its key
    with TestBookie(LIVE_DATA, tls=tls_server_context(tls)) as b:
        res = inspect(capsys, url, b, "--bookie-ca-file", tls["ca"])
    assert res.code == 2
    assert "cannot load the bookie client certificate" in one_line_error(res)


@pytest.mark.parametrize("use_tls", [False, True], ids=["plain", "tls"])
def test_the_timeout_flag_is_honoured_and_beats_the_environment(
    capsys: pytest.CaptureFixture[str], url: str, tls: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch, use_tls: bool,
) -> None:  # fmt: skip
    monkeypatch.setenv("LEDGERCTL_BOOKIE_TIMEOUT", "60")
    flags = ["--bookie-ca-file", str(tls["ca"])] if use_tls else []
    ctx = tls_server_context(tls) if use_tls else None
    with TestBookie(LIVE_DATA, mode="silent", tls=ctx) as silent:
        started = time.monotonic()
        res = inspect(capsys, url, silent, *flags, "--bookie-timeout", "0.5")
        elapsed = time.monotonic() - started
    assert res.code == 3
    assert "no answer within 0.5s" in one_line_error(res)
    assert elapsed < 10  # the environment's 60 s did not apply


def test_flags_beat_the_environment(
    capsys: pytest.CaptureFixture[str], url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEDGERCTL_BOOKIE_TLS", "1")
    monkeypatch.setenv("LEDGERCTL_BOOKIE_PROTOCOL", "v2")
    with TestBookie(LIVE_DATA) as b:
        res = inspect(capsys, url, b)
        assert res.code == 2  # TLS (env) with v2 (env): cannot be
        res = inspect(capsys, url, b, "--no-bookie-tls")
        assert res.code == 0, res.err
        assert b.requests and all(r.v2 for r in b.requests)  # the environment's protocol
        count = len(b.requests)
        res = inspect(capsys, url, b, "--no-bookie-tls", "--bookie-protocol", "v3")
        assert res.code == 0, res.err
        assert not any(r.v2 for r in b.requests[count:])
        # the address flag wins over an environment that points at nothing
        with TestBookie(LIVE_DATA) as gone:
            nowhere = gone.address
        monkeypatch.setenv("LEDGERCTL_BOOKIE_ADDRESSES", f"{REAL_BOOKIE}={nowhere}")
        res = run(capsys, "inspect", "0", "--metadata-url", url, "--no-bookie-tls",
                  "--bookie-timeout", "2")  # fmt: skip
        assert res.code == 3 and nowhere in one_line_error(res)
        res = inspect(capsys, url, b, "--no-bookie-tls")
        assert res.code == 0, res.err


def test_protocol_auto_falls_back_to_v2_for_an_old_bookie(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    with TestBookie(LIVE_DATA, mode="v2-only") as old, TestBookie(LIVE_DATA) as new:
        res = inspect(capsys, url, old, "--bookie-protocol", "auto")
        assert res.code == 0, res.err
        assert len(res.json()["entries"]) == 40
        assert old.requests and all(r.v2 for r in old.requests)
        assert old.accepted == 2  # the v3 attempt, then the v2 connection
        res = inspect(capsys, url, new, "--bookie-protocol", "auto")
        assert res.code == 0, res.err
        assert new.requests and not any(r.v2 for r in new.requests)
        assert new.accepted == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--bookie-protocol", "v4"], "use v3, v2 or auto"),
        (["--bookie-timeout", "0"], "more than 0 and at most 86400 seconds"),
        (["--bookie-ca-file", "no-such.pem"], "is not a file"),
        (["--bookie-address", "no-equals-sign"], "is not ID=HOST:PORT"),
    ],
)
def test_bad_bookie_flags_are_usage_errors(
    capsys: pytest.CaptureFixture[str], url: str, flags: list[str], message: str
) -> None:
    res = run(capsys, "inspect", "0", "--metadata-url", url, *flags)
    assert res.code == 2
    assert message in one_line_error(res)
