"""What users feed in: malformed hex dumps, a config file that is not UTF-8, encrypted
private keys with a passphrase, secrets never shown. One-line errors, never tracebacks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.textdump import read_entry
from pulsarctl_py.stores.bookie.model import LedgerInfo
from tests.support.cli_helpers import KEYS, REAL_CLIENT, Result, run

ENCRYPTED = REAL_CLIENT / "encrypted-nonbatched" / "000000.bin"


def one_line_error(result: Result, code: int) -> str:
    assert result.code == code, (result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ledgerctl: error: "), result.err
    return lines[0]


@pytest.mark.parametrize(
    "text",
    [
        "00000000: 0e0 1234  ..\n",  # xxd with an odd group
        "00000000 0E 01 25\n00000010 8E 1A\n",  # bookkeeper shell, lines missing
        "|00000000| 0e 01 25 8e 1a 34 00 00 00 00 00 00 00 00 00 00 |..%..4..........|\n"
        "|00000020| 00 |.|\n",  # netty, a line lost in the copy
        "00000000  0e 01 25 8e  |..%.|\n00000020  00 01  |..|\n",  # a gap in the offsets
    ],
)
def test_malformed_hex_dump_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str
) -> None:
    path = tmp_path / "dump.txt"
    path.write_text(text)
    line = one_line_error(run(capsys, "decode", path), 2)
    assert str(path) in line


DUMP_LINES = st.one_of(
    st.from_regex(r"[0-9a-f]{8}:( [0-9a-f]{1,5}){1,8}  .{0,16}", fullmatch=True),
    st.from_regex(r"[0-9a-f]{8}( [0-9A-F]{1,3}){1,16} .{0,16}", fullmatch=True),
    st.from_regex(r"\|[0-9a-f]{8}\|( [0-9a-f]{1,2}){1,16} *\|.{0,16}", fullmatch=True),
    st.from_regex(r"[0-9a-f]{8}  ([0-9a-f]{1,2} {1,2}){1,16} *\|.{0,16}", fullmatch=True),
    st.text(alphabet="0123456789abcdefABCDEFx: |-_+/=\n", max_size=80),
    st.text(max_size=40),
)


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(DUMP_LINES, max_size=5), fmt=st.sampled_from(["auto", "hex", "base64"]))
def test_text_input_parsers_raise_only_input_errors(lines: list[str], fmt: str) -> None:
    raw = "\n".join(lines).encode("utf-8", "surrogatepass")
    try:
        out = read_entry(raw, fmt)
    except LedgerctlError:
        return
    assert isinstance(out, bytes)


def test_config_file_not_utf8_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ledgerctl.toml").write_bytes(b'metadata_url = "rocksdb://x\xff"\n')
    monkeypatch.chdir(tmp_path)
    for key in ("LEDGERCTL_METADATA_URL", "LEDGERCTL_BOOKIE_DIRS"):
        monkeypatch.delenv(key, raising=False)
    for args in (["topic", "list"], ["ledger", "list"], ["inspect", "1"]):
        line = one_line_error(run(capsys, *args), 2)
        assert "not UTF-8" in line, args


def _encrypted_pem(passphrase: bytes) -> bytes:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key((KEYS / "rsa_private.pem").read_bytes(), None)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(passphrase),
    )


def test_passphrase_protected_private_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pem = tmp_path / "key.pem"
    pem.write_bytes(_encrypted_pem(b"s3cret"))
    plain = run(
        capsys, "decode", "-o", "json", "--private-key", KEYS / "rsa_private.pem", ENCRYPTED
    )
    assert plain.code == 0, plain.err
    want = plain.json()["entries"][0]["messages"]
    assert want

    line = one_line_error(run(capsys, "decode", "--private-key", pem, ENCRYPTED), 2)
    assert "passphrase" in line

    monkeypatch.setenv("KEY_PASS", "s3cret")
    by_env = run(
        capsys, "decode", "-o", "json", "--private-key", pem,
        "--private-key-passphrase-env", "KEY_PASS", ENCRYPTED,
    )  # fmt: skip
    assert by_env.code == 0, by_env.err
    assert by_env.json()["entries"][0]["messages"] == want
    assert "s3cret" not in by_env.out + by_env.err

    pass_file = tmp_path / "pass"
    pass_file.write_text("s3cret\n")
    by_file = run(
        capsys, "decode", "-o", "json", "--private-key", pem,
        "--private-key-passphrase-file", pass_file, ENCRYPTED,
    )  # fmt: skip
    assert by_file.code == 0 and by_file.json()["entries"][0]["messages"] == want

    pass_file.write_text("wrong\n")
    line = one_line_error(
        run(capsys, "decode", "--private-key", pem, "--private-key-passphrase-file", pass_file,
            ENCRYPTED),
        2,
    )  # fmt: skip
    assert "wrong" in line and "s3cret" not in line


def test_ledger_record_json_drops_the_master_key() -> None:
    key = os.urandom(20)
    info = LedgerInfo(7, True, False, key, None, None, 3, "ledgers")
    doc = info.to_json()
    assert doc["has_master_key"] is True
    assert key.hex() not in json.dumps(doc) and "master_key" not in doc
