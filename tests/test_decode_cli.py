"""`ledgerctl decode` behaviour: inputs, layers, checksums and digests, bad input."""

from __future__ import annotations

import hashlib
import json
import resource
import subprocess
import zlib
from pathlib import Path

import pytest

from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.proto import pulsar_api_pb2 as api
from tests.support.cli_helpers import DATA, REAL_CLIENT, ledgerctl_script, run, run_script

UPSTREAM = DATA / "upstream"
DIGESTS = DATA / "bookkeeper" / "offline" / "digest"
BATCHED_LZ4 = REAL_CLIENT / "batched-lz4" / "000000.bin"


def layer(doc: dict, name: str) -> dict:
    return next(item for item in doc["layers"] if item["layer"] == name)


# --- compression as Java writes it -------------------------------------------------------


@pytest.mark.parametrize(
    ("vector", "plain"),
    [("go-java-compat-hello.zlib", b"hello"), ("cpp-zlib-10zeros.java.zlib", bytes(10))],
)
def test_java_sync_flushed_zlib_decodes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, vector: str, plain: bytes
) -> None:
    payload = (UPSTREAM / "compression" / vector).read_bytes()
    # what makes it Java's: sync flush, never finished, so no final block and no Adler-32
    assert payload.endswith(b"\x00\x00\xff\xff")
    with pytest.raises(zlib.error):
        zlib.decompress(payload)
    md = api.MessageMetadata(
        producer_name="java",
        sequence_id=1,
        publish_time=1700000000000,
        compression=api.ZLIB,
        uncompressed_size=len(plain),
    )
    path = tmp_path / "java-zlib.bin"
    path.write_bytes(build_entry(md, payload))
    result = run(capsys, "decode", "-o", "json", path)
    assert result.code == 0, result.err
    doc = result.json()["entries"][0]
    assert [m["value"] for m in doc["messages"]] == [__import__("base64").b64encode(plain).decode()]
    assert layer(doc, "compression")["fields"]["codec"] == "ZLIB"


@pytest.mark.parametrize("codec", ["lz4", "zstd", "snappy"])
def test_go_java_compat_vectors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, codec: str
) -> None:
    payload = (UPSTREAM / "compression" / f"go-java-compat-hello.{codec}").read_bytes()
    md = api.MessageMetadata(
        producer_name="java",
        sequence_id=1,
        publish_time=1,
        compression=api.CompressionType.Value(codec.upper()),
        uncompressed_size=5,
    )
    path = tmp_path / "e.bin"
    path.write_bytes(build_entry(md, payload))
    doc = run(capsys, "decode", "-o", "json", path).json()["entries"][0]
    assert doc["messages"][0]["value"] == "aGVsbG8="  # hello


# --- upstream raw entries ----------------------------------------------------------------


def test_go_client_single_message(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run(
        capsys, "decode", "-o", "json", UPSTREAM / "pulsar-client-go/rawCompatSingleMessage.bin"
    ).json()["entries"][0]
    assert doc["ok"] is True
    (msg,) = doc["messages"]
    assert msg["properties"] == {"a": "1", "b": "2"}
    assert msg["value"] == "aGVsbG8="
    assert layer(doc, "checksum")["check"]["ok"] is True


def test_go_client_batches(capsys: pytest.CaptureFixture[str]) -> None:
    one = run(
        capsys, "decode", "-o", "json", UPSTREAM / "pulsar-client-go/rawBatchMessage1.bin"
    ).json()["entries"][0]
    assert [m["batch_index"] for m in one["messages"]] == [0]  # a batch of one is a batch
    ten = run(
        capsys, "decode", "-o", "json", UPSTREAM / "pulsar-client-go/rawBatchMessage10.bin"
    ).json()["entries"][0]
    assert [m["value"] for m in ten["messages"]] == ["aGVsbG8="] * 10
    assert [m["sequence_id"] for m in ten["messages"]] == list(range(10))


def test_broker_entry_metadata_kept_when_inner_layers_are_missing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # only the 0x0e02 prefix: the outer layer decodes, the missing metadata is named
    result = run(capsys, "decode", "-o", "json", UPSTREAM / "pulsar-client-go/brokerEntryMeta.bin")
    assert result.code == 1
    doc = result.json()["entries"][0]
    assert layer(doc, "broker-entry-metadata")["fields"] == {
        "broker_timestamp": 1646983036054,
        "index": 5,
    }
    undecoded = doc["layers"][-1]
    assert undecoded["layer"] == "undecoded" and undecoded["offset"] == 15
    assert doc["problems"][0]["layer"] == "message-metadata"


def test_crc32c_vectors() -> None:
    from pulsarctl_py.decoders import crc32c

    vectors = json.loads((UPSTREAM / "crc32c" / "vectors.json").read_text())
    for v in vectors:
        data = v["input_ascii"].encode() if "input_ascii" in v else bytes.fromhex(v["input_hex"])
        assert crc32c(data) == v["crc32c"], v["source"]


# --- checksum and truncation -------------------------------------------------------------


def test_flipped_payload_byte_is_a_checksum_mismatch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = bytearray(BATCHED_LZ4.read_bytes())
    data[-3] ^= 0x01
    path = tmp_path / "flipped.bin"
    path.write_bytes(data)
    result = run(capsys, "decode", "-o", "json", path)
    assert result.code == 1
    doc = result.json()["entries"][0]
    check = layer(doc, "checksum")["check"]
    assert check["ok"] is False and check["stored"] != check["computed"]
    assert any(p["layer"] == "checksum" and "mismatch" in p["message"] for p in doc["problems"])


@pytest.mark.parametrize(("cut", "where"), [(4, "checksum"), (20, "message-metadata")])
def test_truncated_entry_names_layer_and_offset(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, cut: int, where: str
) -> None:
    path = tmp_path / "short.bin"
    path.write_bytes(BATCHED_LZ4.read_bytes()[:cut])
    result = run(capsys, "decode", "-o", "table", path)
    assert result.code == 1
    assert "Traceback" not in result.err
    problems = [line for line in result.err.splitlines() if f": {where} at offset" in line]
    assert len(problems) == 1
    assert problems[0].startswith("error") and "expected" in problems[0] and "found" in problems[0]


def test_truncated_batch_names_the_payload(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # an uncompressed batch cut inside its third record (CRC fixed so that only the batch fails)
    src = REAL_CLIENT / "batched-none" / "000000.bin"
    from pulsarctl_py.decoders import decode_entry

    entry = decode_entry(src.read_bytes())
    md = entry.metadata
    payload = bytes(entry.payload)
    third = entry.records[2].offset
    short = build_entry(md, payload[: third + 6])
    path = tmp_path / "cut-batch.bin"
    path.write_bytes(short)
    doc = run(capsys, "decode", "-o", "json", path).json()["entries"][0]
    assert [m["batch_index"] for m in doc["messages"]] == []
    problem = doc["problems"][0]
    assert problem["layer"] == "batch" and problem["offset"] == third
    assert doc["layers"][-1] == {**doc["layers"][-1], "layer": "undecoded", "space": "payload"}


# --- bookie entries and digests -----------------------------------------------------------


@pytest.mark.parametrize("kind", ["CRC32", "CRC32C", "HMAC", "DUMMY"])
def test_bookkeeper_written_entries_verify(capsys: pytest.CaptureFixture[str], kind: str) -> None:
    manifest = json.loads((DATA / "bookkeeper/offline/manifest.json").read_text())
    items = [
        i for i in manifest["digest"]["items"] if i["digest_type"] == kind and "entry_file" in i
    ]
    assert items
    for item in items:
        path = DATA / "bookkeeper/offline" / item["entry_file"]
        result = run_with_password(
            capsys,
            "decode",
            "-o",
            "json",
            "--as",
            "bookie-entry",
            "--digest-type",
            kind.lower(),
            path,
        )
        doc = result.json()["entries"][0]
        bk = layer(doc, "bookie-entry")
        assert bk["fields"]["ledger_id"] == item["ledger_id"]
        assert bk["fields"]["entry_id"] == item["entry_id"]
        assert bk["fields"]["lac"] == item["last_add_confirmed"]
        assert bk["fields"]["length"] == item["length"]
        if kind != "DUMMY":
            assert bk["check"]["ok"] is True, item
            assert bk["check"]["stored"] == bk["check"]["computed"]


def run_with_password(capsys: pytest.CaptureFixture[str], *args: object):
    import os

    os.environ["LEDGERCTL_LEDGER_PASSWORD"] = "secret"
    try:
        return run(capsys, *map(str, args))
    finally:
        del os.environ["LEDGERCTL_LEDGER_PASSWORD"]


def test_digest_type_detected(capsys: pytest.CaptureFixture[str]) -> None:
    for kind in ("CRC32", "CRC32C"):
        doc = run(capsys, "decode", "-o", "json", DIGESTS / kind / "L7-E4.entry").json()
        doc = doc["entries"][0]
        assert layer(doc, "bookie-entry")["check"] == {
            **layer(doc, "bookie-entry")["check"],
            "type": kind,
            "ok": True,
        }
        assert len(doc["messages"]) == 5  # the batched-lz4 corpus entry inside


def test_mac_needs_the_password(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = DIGESTS / "HMAC" / "L7-E4.entry"
    without = run(capsys, "decode", "-o", "json", "--digest-type", "mac", path)
    check = layer(without.json()["entries"][0], "bookie-entry")["check"]
    assert check["ok"] is None and check["computed"] is None
    wrong = tmp_path / "pw"
    wrong.write_text("not-the-secret\n")
    bad = run(
        capsys, "decode", "-o", "json", "--digest-type", "mac", "--password-file", wrong, path
    )
    assert bad.code == 1
    assert layer(bad.json()["entries"][0], "bookie-entry")["check"]["ok"] is False
    right = tmp_path / "pw2"
    right.write_text("secret\n")
    good = run(capsys, "decode", "-o", "json", "--password-file", right, path)
    assert good.code == 0
    assert layer(good.json()["entries"][0], "bookie-entry")["check"]["ok"] is True


def test_flipped_bookie_payload_is_a_digest_mismatch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = bytearray((DIGESTS / "CRC32C" / "L7-E4.entry").read_bytes())
    data[-1] ^= 0x80
    path = tmp_path / "e.bin"
    path.write_bytes(data)
    result = run(
        capsys, "decode", "-o", "json", "--as", "bookie-entry", "--digest-type", "crc32c", path
    )
    assert result.code == 1
    doc = result.json()["entries"][0]
    assert layer(doc, "bookie-entry")["check"]["ok"] is False
    assert layer(doc, "checksum")["check"]["ok"] is False  # the inner CRC32C sees it too


# --- text inputs ---------------------------------------------------------------------------


def test_bookkeeper_shell_dump_is_accepted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    dump = (DATA / "bookkeeper/live-dbledgerstorage/bk-shell/readlog-0.txt").read_text()
    path = tmp_path / "readlog.txt"
    path.write_text(dump)
    doc = run(capsys, "decode", "-o", "json", path).json()["entries"][0]
    # readlog prints the digest and the payload of the first entry (ledger 0, entry 0)
    assert doc["layers"][0]["layer"] == "bookie-digest"
    expected = json.loads((REAL_CLIENT / "nonbatched-plain" / "000000.json").read_text())
    assert doc["messages"][0]["key"] == expected["messages"][0]["key"]
    assert doc["messages"][0]["value"] == expected["messages"][0]["value_b64"]


@pytest.mark.parametrize("tool", [["xxd"], ["hexdump", "-C"], ["od", "-An", "-tx1"]])
def test_hex_dumps_of_tools(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tool: list[str]
) -> None:
    dump = subprocess.run([*tool, str(BATCHED_LZ4)], capture_output=True, check=True).stdout
    path = tmp_path / "dump.txt"
    path.write_bytes(dump)
    doc = run(capsys, "decode", "-o", "json", path).json()["entries"][0]
    assert len(doc["messages"]) == 5 and doc["ok"]


def test_netty_pretty_hexdump(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = BATCHED_LZ4.read_bytes()
    lines = [
        "         +-------------------------------------------------+",
        "         |  0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f |",
        "+--------+-------------------------------------------------+----------------+",
    ]
    for i in range(0, len(data), 16):
        chunk = data[i : i + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"|{i:08x}| {' '.join(f'{b:02x}' for b in chunk):<47} |{text:<16}|")
    lines.append(lines[2])
    path = tmp_path / "netty.txt"
    path.write_text("\n".join(lines) + "\n")
    doc = run(capsys, "decode", "-o", "json", path).json()["entries"][0]
    assert len(doc["messages"]) == 5 and doc["ok"]


def test_stdin_base64(tmp_path: Path) -> None:
    import base64

    result = run_script(
        "decode", "-o", "jsonl", "-", stdin=base64.b64encode(BATCHED_LZ4.read_bytes())
    )
    assert result.code == 0, result.err
    (line,) = result.out.splitlines()
    assert len(json.loads(line)["messages"]) == 5


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        (b"", "empty input"),
        (b"this is not an entry!\n", "neither binary"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "input"
    if content is not None:
        path.write_bytes(content)
    result = run_script("decode", path)
    assert result.code == 2
    assert result.err.count("\n") == 1 and message in result.err
    assert "Traceback" not in result.err


def test_usage_error_exits_2() -> None:
    result = run_script("decode", "--as", "nonsense", "x")
    assert result.code == 2


def test_password_never_shown(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    secret = "s3cr3t-p4ss"
    pw = tmp_path / "pw"
    pw.write_text(secret)
    path = DIGESTS / "HMAC" / "L7-E4.entry"
    for fmt in ("json", "table", "tree"):
        result = run(capsys, "decode", "-o", fmt, "--hex", "--password-file", pw, path)
        assert secret not in result.out and secret not in result.err
    missing = run_script("decode", "--password-env", "NO_SUCH_VAR_LEDGERCTL", path)
    assert missing.code == 2 and "NO_SUCH_VAR_LEDGERCTL is not set" in missing.err


def test_input_files_are_not_modified(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(REAL_CLIENT.glob("*/*.bin"))
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    run(capsys, "decode", "-o", "json", *files)
    assert before == {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


# --- output formats ---------------------------------------------------------------------------


def test_tree_and_table_show_messages(capsys: pytest.CaptureFixture[str]) -> None:
    tree = run(capsys, "decode", "-o", "tree", "--hex", BATCHED_LZ4)
    assert tree.code == 0
    assert "key-0" in tree.out and "CRC32C 258e1a34" in tree.out
    assert "0e 01 25 8e 1a 34" in tree.out  # hex of the checksum layer
    table = run(capsys, "decode", "-o", "table", BATCHED_LZ4)
    assert "empty-in-batch" in table.out and "1 entry, 5 messages, 0 problems" in table.err


def test_samples_are_shipped(capsys: pytest.CaptureFixture[str]) -> None:
    listing = run(capsys, "decode", "--sample", "list")
    names = listing.out.split()
    assert "batched-lz4" in names and "bookie-entry-crc32c" in names
    for name in names:
        result = run(capsys, "decode", "-o", "json", "--sample", name)
        assert result.code == 0, name


def test_help_is_fast() -> None:
    # CPU time of the child, not wall-clock time: on a loaded machine a process waits for a
    # core, which says nothing about what --help costs (heavy imports show as CPU time).
    script = ledgerctl_script()
    best = min(_cpu_seconds([script, "--help"]) for _ in range(3))
    assert best < 0.3, f"ledgerctl --help used {best:.3f}s of CPU"


def _cpu_seconds(cmd: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, capture_output=True, check=True, timeout=30)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def test_help_imports_nothing_heavy() -> None:
    code = (
        "import sys; from pulsarctl_py.cli import main; "
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()): main(['--help'])\n"
        "heavy = [m for m in ('pyspark', 'kazoo', 'rocksdict', 'lz4', 'zstandard', 'cramjam', "
        "'cryptography', 'google.protobuf', 'fastavro', 'pyarrow') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
