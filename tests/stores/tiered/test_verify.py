"""``verify`` on offloaded ledgers (the offload-* checks), on copies of real offloads
(tests/data/tiered/filesystem and tests/data/offload, written by a real broker): intact they
are clean; each damage is its own finding, on the ledger (or the entries) it affects.

Each case is a metadata store of its own (RocksDB, BookKeeper's root formatted) holding the
offloaded topic's managed ledger, with the LedgerInfo the broker wrote (ids, counts, the
offload context) changed as the case says, and the offload copied where its context points
(a directory for the filesystem offloader; a bucket of a real S3 server for the jcloud one).
"""

from __future__ import annotations

import json
import shutil
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
from pulsarctl_py.stores.tiered.filesystem import MapFileLedger
from pulsarctl_py.stores.tiered.jcloud import data_key, index_key, uuid_of
from pulsarctl_py.stores.tiered.s3 import S3Location, S3Objects
from tests.support.cli_helpers import run
from tests.support.verify_world import bookkeeper_root_nodes, write_cookies, write_tree

DATA = Path(__file__).resolve().parents[2] / "data"
FS = DATA / "tiered" / "filesystem" / "block"
FS_DIR = next(p for p in FS.iterdir() if p.is_dir())  # <ledger>-<uuid>
FS_EXPECTED = json.loads((FS / "expected.json").read_text())
S3 = DATA / "offload" / "s3-blocks"
S3_INFO = json.loads((S3 / "ledger-info.json").read_text())


def _world(root: Path, topic: str, li: mlpb.ManagedLedgerInfo.LedgerInfo, md: Any) -> list[str]:
    """A metadata store holding ``topic`` with the one ledger ``li`` (its BookKeeper
    metadata too unless ``bookkeeperDeleted``), and an empty formatted bookie; the flags."""
    from pulsarctl_py.decoders.checksums import master_key
    from pulsarctl_py.stores.bookie import write_db_ledger_dir
    from pulsarctl_py.stores.metadata import create_metadata_store

    bookie = root / "bookie"
    write_db_ledger_dir(bookie / "current", [], master_key(b""))
    write_cookies(bookie)
    nodes = bookkeeper_root_nodes(bookie)
    info = mlpb.ManagedLedgerInfo()
    info.ledgerInfo.append(li)
    nodes[mld.TopicName.parse(topic).ml_path] = mld.build_info(info)
    if not li.offloadContext.bookkeeperDeleted:
        nodes[lm.ledger_path(li.ledgerId)] = lm.build(md)
    store = create_metadata_store(root / "metadata")
    try:
        write_tree(store, nodes)
    finally:
        store.close()
    return ["--metadata-url", f"rocksdb://{root / 'metadata'}", "--bookie-dir", str(bookie)]


def _verify(capsys: pytest.CaptureFixture[str], topic: str, flags: list[str]) -> Any:
    result = run(capsys, "verify", topic, *flags, "-o", "json", "--no-progress")
    assert "Traceback" not in result.err
    assert result.out or result.code == 3, result.err
    return result


def _offload(result: Any) -> set[tuple[str, str]]:
    return {
        (f["check"], f["severity"])
        for f in result.json()["findings"]
        if f["check"].startswith("offload-")
    }


# -- the filesystem offloader --------------------------------------------------------------

FS_TOPIC = FS_EXPECTED["topic"]
FS_ML = mld.TopicName.parse(FS_TOPIC).persistence_name


def _fs_info(root: Path, **changes: Any) -> mlpb.ManagedLedgerInfo.LedgerInfo:
    lid_text, uid = FS_DIR.name.split("-", 1)
    u = uuidlib.UUID(uid).int
    msb, lsb = u >> 64, u & ((1 << 64) - 1)
    to_signed = lambda v: v - (1 << 64) if v >= 1 << 63 else v  # noqa: E731
    li = mlpb.ManagedLedgerInfo.LedgerInfo(
        ledgerId=int(lid_text), entries=FS_EXPECTED["entries"], size=FS_EXPECTED["size"]
    )
    ctx = li.offloadContext
    ctx.uidMsb, ctx.uidLsb = to_signed(msb), to_signed(lsb)
    ctx.complete, ctx.bookkeeperDeleted = True, True
    ctx.driverMetadata.name = "filesystem"
    ctx.driverMetadata.properties.add(key="storageBasePath", value=(root / "offload").as_uri())
    for name, value in changes.items():
        target = ctx if name in ("complete", "bookkeeperDeleted") else li
        setattr(target, name, value)
    return li


def _fs_copy(root: Path, managed_ledger: str) -> Path:
    """The golden MapFile directory copied under the offload root, as the broker lays it
    out (``<root>/<tenant>/<ns>/persistent/<topic>/<ledger>-<uuid>``)."""
    target = root / "offload" / managed_ledger / FS_DIR.name
    shutil.copytree(FS_DIR, target)
    return target


def _fs_metadata() -> Any:
    with MapFileLedger(FS_DIR, int(FS_DIR.name.split("-", 1)[0])) as reader:
        return reader.metadata()


def _flip(path: Path, at: float) -> None:
    """One byte changed at fraction ``at`` of the file, its .crc removed (the damage then
    reaches the decoders, not only LocalFileSystem's checksum)."""
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0xFF
    path.write_bytes(bytes(data))
    crc = path.parent / f".{path.name}.crc"
    crc.unlink(missing_ok=True)


FS_CASES: dict[str, tuple[dict[str, Any], Callable[[Path], None] | None, set[tuple[str, str]]]] = {
    # changes to the LedgerInfo, damage to the copy, the offload findings expected
    "healthy": ({}, None, set()),
    "healthy-bookkeeper-copy-kept": ({"bookkeeperDeleted": False}, None, set()),
    "interrupted": (
        {"complete": False, "bookkeeperDeleted": False},
        shutil.rmtree,
        {("offload-incomplete", "warning")},
    ),
    "missing": ({"bookkeeperDeleted": False}, shutil.rmtree, {("offload-missing", "error")}),
    "lost": ({}, shutil.rmtree, {("offload-data-lost", "error")}),
    "lost-unreadable": (
        {},
        lambda d: (d / "index").write_bytes(b"SEQ\x06 not an index"),
        {("offload-data-lost", "error")},
    ),
    "unreadable": (
        {"bookkeeperDeleted": False},
        lambda d: (d / "index").write_bytes(b"SEQ\x06 not an index"),
        {("offload-unreadable", "error")},
    ),
    "ml-says-more": (
        {"entries": FS_EXPECTED["entries"] + 5},
        None,
        {("offload-metadata-mismatch", "error"), ("offload-data-mismatch", "error")},
    ),
    "ml-says-fewer": (
        {"entries": FS_EXPECTED["entries"] - 5},
        None,
        {("offload-metadata-mismatch", "error"), ("offload-data-mismatch", "error")},
    ),
    "ml-size": (
        {"size": FS_EXPECTED["size"] + 1},
        None,
        {("offload-metadata-mismatch", "warning"), ("offload-data-mismatch", "warning")},
    ),
    "damaged-block": (
        {},
        lambda d: _flip(d / "data", 0.5),
        {("offload-entry-corrupt", "error")},
    ),
    "hdfs": ({}, None, {("offload-not-checked", "info")}),
}


@pytest.mark.parametrize("case", sorted(FS_CASES))
def test_filesystem_offload_findings(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    changes, damage, expected = FS_CASES[case]
    li = _fs_info(tmp_path, **changes)
    if case == "hdfs":
        del li.offloadContext.driverMetadata.properties[:]
        li.offloadContext.driverMetadata.properties.add(
            key="storageBasePath", value="hdfs://namenode:9000/offload"
        )
    copy = _fs_copy(tmp_path, FS_ML)
    if damage is not None:
        damage(copy)
    flags = _world(tmp_path, FS_TOPIC, li, _fs_metadata())
    result = _verify(capsys, FS_TOPIC, flags)
    assert _offload(result) == expected, result.out
    errors = any(sev == "error" for _check, sev in expected)
    assert result.code == (1 if errors else 0), result.err
    if case.startswith("healthy"):
        summary = result.json()["summary"]
        assert summary["errors"] == 0 and summary["warnings"] == 0, result.out
        # every entry read from the offload (the bookie given holds none)
        assert summary["entries"] == FS_EXPECTED["entries"]
    if case.startswith("lost"):
        (lost,) = [f for f in result.json()["findings"] if f["check"] == "offload-data-lost"]
        assert "its data is gone" in lost["message"]
        # where it was looked for, and why there (pulsarctl_py.stores.tiered.where)
        where = lost["details"]["location"]
        assert where["root"] == (tmp_path / "offload").as_uri()
        assert where["source"] == {"root": "offloadContext (storageBasePath)"}
    if case == "damaged-block":
        corrupt = [f for f in result.json()["findings"] if f["check"] == "offload-entry-corrupt"]
        listed = [f for f in corrupt if f["entry_id"] is not None]
        total = max([len(listed)] + [f["details"].get("total", 0) for f in corrupt])
        # the damage is on the entries after it up to the next indexed position; the
        # entries before it (and the ledger's other entries) read whole
        assert 0 < total < FS_EXPECTED["entries"]
        assert min(f["entry_id"] for f in listed) > 0
        assert all("its BookKeeper copy is gone" in f["message"] for f in listed)


def test_a_copy_under_another_managed_ledger_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The embedded metadata's pulsar/managed-ledger tag names the topic that offloaded it."""
    topic = "persistent://public/default/another-topic"
    li = _fs_info(tmp_path)
    _fs_copy(tmp_path, "public/default/persistent/another-topic")
    result = _verify(capsys, topic, _world(tmp_path, topic, li, _fs_metadata()))
    assert _offload(result) == {("offload-metadata-mismatch", "error")}
    (f,) = [f for f in result.json()["findings"] if f["check"] == "offload-metadata-mismatch"]
    assert "golden-block2" in f["message"]


# -- the jcloud (S3) offloader -------------------------------------------------------------

S3_TOPIC = "persistent://public/default/golden-blocks"
S3_CTX = S3_INFO["offloadContext"]
S3_UUID = uuid_of(int(S3_CTX["uidMsb"]), int(S3_CTX["uidLsb"]))
S3_LEDGER = int(S3_INFO["ledgerId"])


def _s3_objects() -> dict[str, tuple[bytes, dict[str, str]]]:
    out = {}
    for key in (data_key(S3_UUID, S3_LEDGER), index_key(S3_UUID, S3_LEDGER)):
        meta = json.loads((S3 / f"{key}.metadata.json").read_text())
        out[key] = ((S3 / key).read_bytes(), meta)
    return out


def _damage_block_magic(objects: dict[str, tuple[bytes, dict[str, str]]]) -> None:
    """The second block's header magic changed (blocks are 300 bytes)."""
    key = data_key(S3_UUID, S3_LEDGER)
    body, meta = objects[key]
    data = bytearray(body)
    data[300] ^= 0xFF
    objects[key] = (bytes(data), meta)


def _version(objects: dict[str, tuple[bytes, dict[str, str]]]) -> None:
    for key, (body, meta) in list(objects.items()):
        objects[key] = (body, {**meta, "s3managedledgeroffloaderformatversion": "2"})


def _drop_index(objects: dict[str, tuple[bytes, dict[str, str]]]) -> None:
    del objects[index_key(S3_UUID, S3_LEDGER)]


def _truncate_index(objects: dict[str, tuple[bytes, dict[str, str]]]) -> None:
    key = index_key(S3_UUID, S3_LEDGER)
    body, meta = objects[key]
    objects[key] = (body[:40], meta)


S3_CASES: dict[str, tuple[dict[str, Any], Callable[..., None] | None, set[tuple[str, str]]]] = {
    "healthy": ({}, None, set()),
    "damaged-block": ({}, _damage_block_magic, {("offload-entry-corrupt", "error")}),
    "version": (
        {"bookkeeperDeleted": False},
        _version,
        {("offload-format-version", "error")},
    ),
    "version-lost": ({}, _version, {("offload-data-lost", "error")}),
    "index-missing-lost": ({}, _drop_index, {("offload-data-lost", "error")}),
    "index-missing": ({"bookkeeperDeleted": False}, _drop_index, {("offload-missing", "error")}),
    "index-truncated": (
        {"bookkeeperDeleted": False},
        _truncate_index,
        {("offload-unreadable", "error")},
    ),
    "ml-says-more": (
        {"entries": int(S3_INFO["entries"]) + 1},
        None,
        {
            ("offload-index-mismatch", "error"),
            ("offload-metadata-mismatch", "error"),
            ("offload-data-mismatch", "error"),
        },
    ),
    "azure": ({"driver": "azureblob"}, None, {("offload-not-checked", "info")}),
}


@pytest.fixture(scope="module")
def s3_client(s3_endpoint: str) -> Any:
    return S3Objects(S3Location("unused", s3_endpoint)).client


@pytest.mark.parametrize("case", sorted(S3_CASES))
def test_s3_offload_findings(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], s3_endpoint: str, s3_client: Any
) -> None:
    changes, damage, expected = S3_CASES[case]
    bucket = f"verify-{case}"
    objects = _s3_objects()
    if damage is not None:
        damage(objects)
    s3_client.create_bucket(Bucket=bucket)
    for key, (body, meta) in objects.items():
        s3_client.put_object(Bucket=bucket, Key=key, Body=body, Metadata=meta)
    li = json_format.ParseDict(S3_INFO, mlpb.ManagedLedgerInfo.LedgerInfo())
    props = {p.key: p for p in li.offloadContext.driverMetadata.properties}
    props["bucket"].value = bucket
    props["serviceEndpoint"].value = s3_endpoint  # where the context says, no flag
    for name, value in changes.items():
        if name == "driver":
            li.offloadContext.driverMetadata.name = value
            props["managedLedgerOffloadDriver"].value = value
        elif name == "bookkeeperDeleted":
            li.offloadContext.bookkeeperDeleted = value
        else:
            setattr(li, name, value)
    result = _verify(capsys, S3_TOPIC, _world(tmp_path, S3_TOPIC, li, _s3_metadata()))
    assert _offload(result) == expected, result.out
    errors = any(sev == "error" for _check, sev in expected)
    assert result.code == (1 if errors else 0), result.err
    if case == "healthy":
        summary = result.json()["summary"]
        assert summary["errors"] == 0 and summary["warnings"] == 0, result.out
        assert summary["entries"] == int(S3_INFO["entries"])
    if case == "damaged-block":
        ids = {
            f["entry_id"]
            for f in result.json()["findings"]
            if f["check"] == "offload-entry-corrupt"
        }
        # the second block's entries only: the others read whole
        assert ids and 0 not in ids and max(ids) < int(S3_INFO["entries"]) - 1


def test_an_unreachable_endpoint_is_one_line_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], s3_endpoint: str
) -> None:
    li = json_format.ParseDict(S3_INFO, mlpb.ManagedLedgerInfo.LedgerInfo())
    for p in li.offloadContext.driverMetadata.properties:
        if p.key == "serviceEndpoint":
            p.value = "http://127.0.0.1:9"  # nothing listens: refused at once
    result = _verify(capsys, S3_TOPIC, _world(tmp_path, S3_TOPIC, li, _s3_metadata()))
    assert result.code == 3
    line = result.err.strip().splitlines()[-1]
    assert line.startswith("ledgerctl: error:") and "127.0.0.1:9" in line
    assert f"ledger {S3_LEDGER}" in line


def _s3_metadata() -> Any:
    from pulsarctl_py.stores.tiered.jcloud import parse_index

    return parse_index((S3 / index_key(S3_UUID, S3_LEDGER)).read_bytes()).metadata
