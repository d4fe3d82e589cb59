"""Digests that cannot be verified are not "ok"; auto-detection finds MAC and DUMMY
entries by their layout; a damaged bookie header is a header/digest finding.

Entries are the ones BookKeeper's own DigestManager wrote (tests/data/bookkeeper/offline,
see its manifest.json), with the password "secret" for the MAC ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pulsarctl_py.decoders import DecodeOptions, decode_entry
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.inspect_request import Summary
from pulsarctl_py.render import hexdump
from tests.support.cli_helpers import DATA, run

OFFLINE = DATA / "bookkeeper" / "offline"
MANIFEST = json.loads((OFFLINE / "manifest.json").read_text())
PULSAR_ITEMS = [
    i
    for i in MANIFEST["digest"]["items"]
    if i.get("payload", "").startswith("pulsar-") and "entry_file" in i
]


def items(kind: str) -> list[dict]:
    found = [i for i in PULSAR_ITEMS if i["digest_type"] == kind]
    assert found, kind
    return found


def bk_layer(doc: dict) -> dict:
    return next(layer for layer in doc["layers"] if layer["layer"] == "bookie-entry")


@pytest.mark.parametrize("item", items("HMAC"), ids=lambda i: i["entry_file"])
def test_mac_without_password_is_unverified_everywhere(
    capsys: pytest.CaptureFixture[str], item: dict
) -> None:
    path = OFFLINE / item["entry_file"]
    result = run(capsys, "decode", "-o", "json", path)  # auto-detected, no password
    assert result.code == 0, result.err
    (doc,) = result.json()["entries"]
    assert result.json()["summary"]["unverified"] == 1
    check = bk_layer(doc)["check"]
    assert (check["type"], check["ok"], check["verified"]) == ("HMAC", None, False)
    assert check["note"] == "no password"
    assert doc["verified"] is False and doc["ok"] is True
    assert bk_layer(doc)["fields"]["entry_id"] == item["entry_id"]
    assert doc["messages"], "the Pulsar entry inside is decoded"
    warnings = [p for p in doc["problems"] if p["severity"] == "warning"]
    assert any("unverified (no password)" in p["message"] for p in warnings)
    assert not any(p["layer"] == "message-metadata" for p in doc["problems"])
    assert "1 unverified" in result.err
    table = run(capsys, "decode", "-o", "table", path)
    assert "unverified" in table.out
    tree = run(capsys, "decode", "-o", "tree", path)
    assert "unverified (no password)" in tree.out
    strict = run(capsys, "decode", "--strict", "-o", "json", path)
    assert strict.code == 1
    assert strict.out == result.out


def test_mac_with_password_is_verified(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("secret\n")
    path = OFFLINE / items("HMAC")[0]["entry_file"]
    result = run(capsys, "decode", "--strict", "-o", "json", "--password-file", pw, path)
    assert result.code == 0, result.err
    check = bk_layer(result.json()["entries"][0])["check"]
    assert (check["ok"], check["verified"]) == (True, True)


@pytest.mark.parametrize("item", items("DUMMY"), ids=lambda i: i["entry_file"])
def test_dummy_digest_is_detected(item: dict) -> None:
    entry = decode_entry((OFFLINE / item["entry_file"]).read_bytes())
    assert entry.layers[0].name == "bookie-entry"
    assert entry.digest_type is DigestType.DUMMY
    assert entry.position == (item["ledger_id"], item["entry_id"])
    assert entry.ok and entry.messages
    assert entry.unverified == ["DUMMY"]


def _shell_dump(data: bytes) -> str:
    """What ``bookkeeper shell readlog -m`` prints: offset, 16 hex bytes, ASCII."""
    return "\n".join(
        f"{i:08x} " + " ".join(f"{b:02X}" for b in data[i : i + 16])
        for i in range(0, len(data), 16)
    )


@pytest.mark.parametrize("item", items("HMAC"), ids=lambda i: i["entry_file"])
def test_shell_dump_of_a_mac_entry_is_a_bare_digest(tmp_path: Path, item: dict) -> None:
    from pulsarctl_py.decoders.textdump import read_entry

    raw = (OFFLINE / item["entry_file"]).read_bytes()
    text = _shell_dump(raw[32:])  # the shell prints the digest and payload, not the header
    entry = decode_entry(read_entry(text.encode()))
    assert entry.layers[0].name == "bookie-digest"
    assert entry.layers[0].fields["digest_type"] == "HMAC"
    assert entry.unverified == ["HMAC"]
    assert entry.ok and entry.messages
    assert hexdump(raw[32:48]).startswith("00000000  ")


@pytest.mark.parametrize("kind", ["CRC32", "CRC32C", "HMAC"])
def test_damaged_header_is_a_digest_finding(kind: str) -> None:
    options = DecodeOptions(password=b"secret")
    for item in items(kind):
        data = (OFFLINE / item["entry_file"]).read_bytes()
        for i in range(32):
            for bit in (0, 7):
                damaged = bytearray(data)
                damaged[i] ^= 1 << bit
                entry = decode_entry(bytes(damaged), options)
                assert entry.layers[0].name == "bookie-entry", (kind, i, bit)
                assert not entry.ok
                messages = [p.message for p in entry.problems if p.severity == "error"]
                assert any("digest mismatch" in m for m in messages), (kind, i, bit, messages)
                assert not any(p.layer == "message-metadata" for p in entry.problems)


def test_summary_counts_unverified_entries() -> None:
    summary = Summary()
    for item in items("HMAC") + items("CRC32C"):
        summary.add(decode_entry((OFFLINE / item["entry_file"]).read_bytes()))
    assert summary.unverified == len(items("HMAC"))
    assert summary.to_json()["unverified"] == len(items("HMAC"))
    assert summary.warnings >= len(items("HMAC"))


def test_verify_strict_fails_on_an_unverified_mac_ledger(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from tests.support.verify_world import PLAIN, build_world

    world = build_world(tmp_path / "w", "digest-unverified")
    args = [
        "verify",
        PLAIN,
        "--metadata-url",
        world.metadata_url,
        "--bookie-dir",
        str(world.bookie_dir),
    ]
    result = run(capsys, *args, "-o", "json")
    assert result.code == 0, result.err  # a warning, not an error
    (finding,) = result.json()["findings"]
    assert (finding["check"], finding["severity"]) == ("digest-unverified", "warning")
    assert result.json()["summary"]["unverified"] == 3
    assert run(capsys, *args, "--strict", "-o", "json").code == 1
