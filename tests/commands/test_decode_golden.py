"""Golden tests: `ledgerctl decode` on entries written by the official Pulsar client,
compared with the sidecar JSON that says what was sent (tests/data/real-client)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.support.cli_helpers import KEYS, REAL_CLIENT, run

ENTRIES = sorted(REAL_CLIENT.glob("*/*.bin"))
CHUNKED = {"chunked", "chunked-lz4"}


def sidecar(path: Path) -> dict:
    return json.loads(path.with_suffix(".json").read_text())


def assert_messages_equal(got: list[dict], sent: list[dict]) -> None:
    assert len(got) == len(sent)
    for g, s in zip(got, sent, strict=True):
        assert g["key"] == s["key"]
        assert g["value"] == s["value_b64"]
        assert g["null_value"] is (s["value_b64"] is None)
        assert g["properties"] == s["properties"]
        # the batch index the client was given back for this message (-1: not batched)
        assert g["batch_index"] == s["client_message_id"]["batchIndex"]
        if "event_timestamp" in s:
            assert g["event_time"] == s["event_timestamp"]
        if "sequence_id" in s:
            assert g["sequence_id"] == s["sequence_id"]
        if "ordering_key" in s:
            assert base64.b64decode(g["ordering_key"]).decode() == s["ordering_key"]


def test_corpus_has_all_47_entries() -> None:
    assert len(ENTRIES) == 47


@pytest.mark.parametrize("path", ENTRIES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_decode_json_matches_sidecar(capsys: pytest.CaptureFixture[str], path: Path) -> None:
    scenario = path.parent.name
    extra = ["--private-key", KEYS / "rsa_private.pem"] if scenario.startswith("encrypted") else []
    if scenario in CHUNKED:
        # a chunk alone holds part of a message: decode the chunks of the message together
        files = sorted(path.parent.glob("*.bin"))
        result = run(capsys, "decode", "--output", "json", *extra, *files)
        assert result.code == 0, result.err
        docs = result.json()["entries"]
        entry = docs[files.index(path)]
        chunk = next(layer for layer in entry["layers"] if layer["layer"] == "chunk")
        assert chunk["fields"]["chunk_id"] == files.index(path)
        assert chunk["fields"]["num_chunks"] == len(files)
        messages = [m for doc in docs for m in doc["messages"]]
        assert docs[-1]["messages"] == messages  # the message sits on the last chunk's entry
        got = messages
    else:
        result = run(capsys, "decode", "--output", "json", *extra, path)
        assert result.code == 0, result.err
        entry = result.json()["entries"][0]
        got = entry["messages"]
    meta = sidecar(path)
    assert_messages_equal(got, meta["messages"])
    checksum = next(layer for layer in entry["layers"] if layer["layer"] == "checksum")
    assert checksum["check"]["ok"] is True
    assert checksum["check"]["stored"] == checksum["check"]["computed"]
    assert entry["ok"] is True and entry["problems"] == []


@pytest.mark.parametrize("scenario", ["encrypted-nonbatched", "encrypted-batched-zlib"])
def test_encrypted_without_key_shows_metadata(
    capsys: pytest.CaptureFixture[str], scenario: str
) -> None:
    for path in sorted((REAL_CLIENT / scenario).glob("*.bin")):
        result = run(capsys, "decode", "-o", "json", path)
        assert result.code == 0, result.err
        doc = result.json()["entries"][0]
        assert doc["encrypted"] is True
        assert doc["messages"] == []
        names = [layer["layer"] for layer in doc["layers"]]
        assert names[:3] == ["checksum", "message-metadata", "encryption"]
        enc = doc["layers"][2]["fields"]
        assert enc["decrypted"] is False and enc["keys"] == ["corpus-rsa-key"]
        md = doc["layers"][1]["fields"]
        assert md["producer_name"] == sidecar(path)["producer_name"]


def test_wrong_private_key_is_an_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = other.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    key = tmp_path / "other.pem"
    key.write_bytes(pem)
    path = REAL_CLIENT / "encrypted-nonbatched" / "000000.bin"
    result = run(capsys, "decode", "-o", "json", "--private-key", key, path)
    assert result.code == 1
    doc = result.json()["entries"][0]
    assert any("cannot decrypt" in p["message"] for p in doc["problems"])


def test_chunk_alone_is_reported_not_invented(capsys: pytest.CaptureFixture[str]) -> None:
    path = REAL_CLIENT / "chunked" / "000000.bin"
    result = run(capsys, "decode", "-o", "json", path)
    assert result.code == 0
    doc = result.json()["entries"][0]
    assert doc["messages"] == []
    assert doc["layers"][-1]["layer"] == "chunk"
