"""``orphans --offloaded --delete``: offload orphans deleted through a plan, on copies of
real offloads (tests/data; the filesystem offloader's MapFile directories, and the jcloud
objects on a moto S3 server): planned, applied (copied into the plan's backup, then
deleted), undone byte for byte; bound to the location it lists; refused (exit 5, nothing
deleted) when a managed ledger references the offload since, or the objects changed."""

from __future__ import annotations

import filecmp
import json
import os
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
from pulsarctl_py.stores.tiered.jcloud import data_key, index_key
from pulsarctl_py.stores.tiered.s3 import S3Location, S3Objects
from tests.stores.tiered.test_offload_orphans import LEDGER, ML, TOPIC, _copy, _store
from tests.stores.tiered.test_verify import (
    FS_DIR,
    S3_INFO,
    S3_LEDGER,
    S3_TOPIC,
    _fs_info,
    _s3_objects,
)
from tests.support.cli_helpers import run

UID = FS_DIR.name.split("-", 1)[1]


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    result = run(capsys, *args)
    assert "Traceback" not in result.err, result.err
    return result


def _plan(capsys: pytest.CaptureFixture[str], url: str, plan: Path) -> Any:
    result = _cli(
        capsys,
        "orphans", "--offloaded", "--delete", "--min-age", "0", "--metadata-url", url,
        "--plan", str(plan), "-o", "json",
    )  # fmt: skip
    assert result.code == 0, result.err
    return json.loads(plan.read_text())


def _tree(path: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(path)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def fs_world(tmp_path: Path) -> dict[str, Any]:
    """A referenced offload, a retried attempt's directory no context names, and an
    interrupted offload's directory (its context not complete, BookKeeper copy kept)."""
    referenced = _fs_info(tmp_path)
    interrupted = _fs_info(tmp_path, ledgerId=LEDGER + 1, complete=False, bookkeeperDeleted=False)
    url = _store(tmp_path, {TOPIC: [referenced, interrupted]})
    retried = str(uuidlib.uuid4())
    return {
        "url": url,
        "kept": _copy(tmp_path, ML, LEDGER, UID),
        "stray": _copy(tmp_path, ML, LEDGER, retried),
        "cut": _copy(tmp_path, ML, LEDGER + 1, UID),
        "infos": [referenced, interrupted],
    }


def test_filesystem_orphans_planned_applied_undone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fs_world: dict[str, Any]
) -> None:
    stray, cut, kept = fs_world["stray"], fs_world["cut"], fs_world["kept"]
    before = {p: _tree(p) for p in (stray, cut)}
    plan_path = tmp_path / "plan.json"
    doc = _plan(capsys, fs_world["url"], plan_path)
    assert sorted(c["path"] for c in doc["offload"]) == sorted([str(stray), str(cut)])
    assert {c["kind"] for c in doc["offload"]} == {"directory"}
    # bound to the root it lists: its path, device and inode
    (bound,) = doc["store"]["offload"]
    assert bound["location"] == (tmp_path / "offload").as_uri()
    assert bound["identity"]["inode"] == str(os.stat(tmp_path / "offload").st_ino)
    assert stray.is_dir() and cut.is_dir()  # a plan writes nothing

    applied = _cli(capsys, "apply", str(plan_path), "-o", "json", "--yes")
    assert applied.code == 0, applied.err
    outcome = applied.json()
    assert sorted(w["key"] for w in outcome["written"]) == sorted([str(stray), str(cut)])
    assert {w["action"] for w in outcome["written"]} == {"delete"}
    assert not stray.exists() and not cut.exists()
    assert kept.is_dir() and filecmp.dircmp(kept, FS_DIR).diff_files == []
    copies = tmp_path / "plan.json.backup.offload"
    assert len(list(copies.iterdir())) == 2
    backup = json.loads((tmp_path / "plan.json.backup.json").read_text())
    assert backup["status"] == "applied" and len(backup["offload"]) == 2

    again = _cli(capsys, "apply", str(plan_path), "-o", "json", "--yes")
    assert again.code == 0 and again.json()["note"] == "already applied", again.err

    undone = _cli(capsys, "undo", str(plan_path), "-o", "json", "--yes")
    assert undone.code == 0, undone.err
    assert {w["action"] for w in undone.json()["written"]} == {"restore"}
    for path, tree in before.items():
        assert _tree(path) == tree  # byte for byte, modification times too
    # undone twice: nothing to restore
    twice = _cli(capsys, "undo", str(plan_path), "-o", "json", "--yes")
    assert twice.code == 0 and twice.json()["note"] == "already undone", twice.err


def test_a_plan_is_refused_after_a_referencing_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fs_world: dict[str, Any]
) -> None:
    plan_path = tmp_path / "plan.json"
    _plan(capsys, fs_world["url"], plan_path)
    # the interrupted offload finished since: its context is complete now
    referenced, interrupted = fs_world["infos"]
    interrupted.offloadContext.complete = True
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.stores.metadata import open_metadata_store

    info = mlpb.ManagedLedgerInfo()
    info.ledgerInfo.extend([referenced, interrupted])
    with open_metadata_store(fs_world["url"], read_only=False) as store:
        store.put(mld.TopicName.parse(TOPIC).ml_path, mld.build_info(info))
    result = _cli(capsys, "apply", str(plan_path), "-o", "json", "--yes")
    assert result.code == 5, result.err
    assert "no orphan" in result.err and len(result.err.strip().splitlines()) == 1
    assert result.json()["refused"] and not result.json()["written"]
    assert fs_world["stray"].is_dir() and fs_world["cut"].is_dir()  # nothing deleted


def test_a_plan_is_refused_when_a_directory_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fs_world: dict[str, Any]
) -> None:
    plan_path = tmp_path / "plan.json"
    _plan(capsys, fs_world["url"], plan_path)
    with open(fs_world["stray"] / "data", "ab") as fh:
        fh.write(b"x")
    result = _cli(capsys, "apply", str(plan_path), "--yes")
    assert result.code == 5 and "changed since the plan was made" in result.err, result.err
    assert fs_world["cut"].is_dir()


def test_a_plan_is_bound_to_its_root(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fs_world: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan_path = tmp_path / "plan.json"
    _plan(capsys, fs_world["url"], plan_path)
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.setenv("LEDGERCTL_OFFLOAD_URL", other.as_uri())
    result = _cli(capsys, "apply", str(plan_path), "--yes")
    assert result.code == 2 and "only to the root it was made for" in result.err, result.err
    monkeypatch.delenv("LEDGERCTL_OFFLOAD_URL")
    # the same path, another directory (a copy made again there)
    root = tmp_path / "offload"
    root.rename(tmp_path / "moved")
    (tmp_path / "moved").rename(tmp_path / "moved2")
    import shutil

    shutil.copytree(tmp_path / "moved2", root)
    result = _cli(capsys, "apply", str(plan_path), "--yes")
    assert result.code == 2 and "not the offload root the plan was made for" in result.err
    assert fs_world["stray"].is_dir()


def test_an_edited_plan_deletes_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fs_world: dict[str, Any]
) -> None:
    from pulsarctl_py.plans.document import document_digest

    plan_path = tmp_path / "plan.json"
    doc = _plan(capsys, fs_world["url"], plan_path)
    doc["offload"][0]["path"] = str(tmp_path)  # not an offload directory
    doc["digest"] = document_digest(doc)
    plan_path.write_text(json.dumps(doc))
    result = _cli(capsys, "apply", str(plan_path), "--yes")
    assert result.code == 2 and "is not an offload directory" in result.err, result.err


# -- S3 (moto) -------------------------------------------------------------------------------


def _s3_store(tmp_path: Path, bucket: str, endpoint: str) -> str:
    """A metadata store whose topic references the golden S3 offload in ``bucket``."""
    li = json_format.ParseDict(S3_INFO, mlpb.ManagedLedgerInfo.LedgerInfo())
    props = {p.key: p for p in li.offloadContext.driverMetadata.properties}
    props["bucket"].value = bucket
    props["serviceEndpoint"].value = endpoint
    return _store(tmp_path, {S3_TOPIC: [li]})


def test_s3_orphans_planned_applied_undone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], s3_endpoint: str
) -> None:
    client = S3Objects(S3Location("unused", s3_endpoint)).client
    bucket = "orphans-plan"
    client.create_bucket(Bucket=bucket)
    objects = _s3_objects()
    uid = next(iter(objects)).split("-ledger-")[0]
    stray = str(uuidlib.uuid4())  # a retried offload's objects no context names
    for key, (body, meta) in objects.items():
        client.put_object(Bucket=bucket, Key=key, Body=body, Metadata=meta)
        client.put_object(
            Bucket=bucket, Key=key.replace(uid, stray), Body=body, Metadata=meta,
            ContentType="application/octet-stream",
        )  # fmt: skip
    upload = client.create_multipart_upload(Bucket=bucket, Key=data_key(stray, S3_LEDGER))
    url = _s3_store(tmp_path, bucket, s3_endpoint)
    plan_path = tmp_path / "plan.json"
    doc = _plan(capsys, url, plan_path)
    keys = [data_key(stray, S3_LEDGER), index_key(stray, S3_LEDGER)]
    assert sorted((c["kind"], c["path"]) for c in doc["offload"]) == sorted(
        [("object", keys[0]), ("object", keys[1]), ("upload", keys[0])]
    )
    assert doc["store"]["offload"] == [
        {"location": f"s3://{bucket}", "endpoint": s3_endpoint, "region": "us-east-1"}
    ]
    assert any("cannot be undone" in w for w in doc["warnings"])

    applied = _cli(capsys, "apply", str(plan_path), "-o", "json", "--yes")
    assert applied.code == 0, applied.err
    assert sorted(w["action"] for w in applied.json()["written"]) == ["abort", "delete", "delete"]
    left = {o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])}
    assert left == set(objects)  # the referenced offload's objects only
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads")

    undone = _cli(capsys, "undo", str(plan_path), "-o", "json", "--yes")
    assert undone.code == 0, undone.err
    out = undone.json()
    assert sorted(w["key"].rsplit("/", 1)[1] for w in out["written"]) == sorted(keys)
    (kept,) = out["unchanged"]
    assert kept["key"].endswith(upload["UploadId"]) and "cannot be brought back" in kept["reason"]
    for key, (body, meta) in objects.items():
        got = client.get_object(Bucket=bucket, Key=key.replace(uid, stray))
        assert got["Body"].read() == body  # byte for byte
        assert got["Metadata"] == meta and got["ContentType"] == "application/octet-stream"


def test_s3_plan_is_bound_to_its_endpoint(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    s3_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = S3Objects(S3Location("unused", s3_endpoint)).client
    bucket = "orphans-bound"
    client.create_bucket(Bucket=bucket)
    stray = str(uuidlib.uuid4())
    for key, (body, meta) in _s3_objects().items():
        client.put_object(Bucket=bucket, Key=stray + key[36:], Body=body, Metadata=meta)
    url = _s3_store(tmp_path, bucket, s3_endpoint)
    plan_path = tmp_path / "plan.json"
    _plan(capsys, url, plan_path)
    monkeypatch.setenv("LEDGERCTL_S3_ENDPOINT", "http://127.0.0.1:9")
    result = _cli(capsys, "apply", str(plan_path), "--yes")
    assert result.code == 2 and "only to the store it was made for" in result.err, result.err
    monkeypatch.setenv("LEDGERCTL_OFFLOAD_URL", "s3://another-bucket")
    monkeypatch.delenv("LEDGERCTL_S3_ENDPOINT")
    result = _cli(capsys, "apply", str(plan_path), "--yes")
    assert result.code == 2 and "only to the bucket it was made for" in result.err, result.err
    assert len(client.list_objects_v2(Bucket=bucket)["Contents"]) == 2


# -- the plan read back: untrusted input ----------------------------------------------------


@pytest.fixture(scope="module")
def fs_plan_doc(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    from pulsarctl_py.cli import main

    tmp_path = tmp_path_factory.mktemp("offload-plan-doc")
    interrupted = _fs_info(tmp_path, ledgerId=LEDGER + 1, complete=False, bookkeeperDeleted=False)
    url = _store(tmp_path, {TOPIC: [_fs_info(tmp_path), interrupted]})
    _copy(tmp_path, ML, LEDGER + 1, UID)
    plan = tmp_path / "plan.json"
    args = ["orphans", "--offloaded", "--delete", "--min-age", "0", "--metadata-url", url]
    code = main([*args, "--plan", str(plan), "-o", "json"])
    assert code == 0 and plan.is_file()
    return json.loads(plan.read_text()), tmp_path / "offload"


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.text(max_size=40),
    st.sampled_from(["/", "/etc", "../x", "directory", "object", "upload", "s3://", "s3://b/c"]),
    st.lists(st.text(max_size=5), max_size=2),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@settings(max_examples=150, deadline=None)
@given(
    field=st.sampled_from(
        ["kind", "location", "path", "uuid", "ledger_id", "size", "fingerprint", "why",
         "upload_id", "managed_ledger"]
    ),
    value=_VALUES,
    suffix=st.sampled_from(["", "/..", "/../../x", "/", "x"]),
)  # fmt: skip
def test_an_edited_offload_change_is_refused_or_names_an_offload(
    fs_plan_doc: tuple[dict[str, Any], Path], field: str, value: Any, suffix: str
) -> None:
    """Whatever a (re-digested) plan says of an offload change, reading it back refuses
    it in one line (LedgerctlError) or accepts only an offload directory of its ledger
    under the root the plan is bound to."""
    import copy

    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.plans.document import Plan, document_digest

    doc, root = fs_plan_doc
    doc = copy.deepcopy(doc)
    change = doc["offload"][0]
    change[field] = change["path"] + suffix if field == "path" and suffix else value
    doc["digest"] = document_digest(doc)
    try:
        plan = Plan.from_json(doc)
    except LedgerctlError as exc:
        assert "\n" not in exc.one_line()
        return
    for c in plan.offload:
        assert c.kind == "directory" and Path(c.path).is_relative_to(root)
        assert ".." not in Path(c.path).parts
        assert Path(c.path).name == f"{c.ledger_id}-{c.uuid}"
