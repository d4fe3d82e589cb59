"""``verify`` on topics the real broker offloaded (the session's ``offload_world``: the
filesystem offloader with BLOCK and RECORD compression, the jcloud ``S3`` driver on the
sandbox's S3 server), and on a real interrupted offload.

The interrupted offload is the broker's own: a namespace whose offload policies name the
``S3`` driver with only the ``s3ManagedLedgerOffload*`` keys (which only ``aws-s3`` reads,
``TieredStorageConfiguration.getKeys``) makes the driver fail ("endpoint" missing) after
``ManagedLedgerImpl`` wrote the ledger's offload context (uid and driver metadata, no
``complete``): the offload stays RUNNING and the context stays incomplete.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_helpers import run
from tests.support.offload_world import RUN, use_offload_stores


@pytest.fixture
def offload_env(offload_sandbox: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandbox's stores in the environment, with the broker's S3 credentials as the
    broker's S3 driver gets them (Pulsar's ACCESS_KEY_ID / ACCESS_KEY_SECRET)."""
    use_offload_stores(monkeypatch, offload_sandbox)


def interrupted_offload(box: Any, timeout: float = 120) -> tuple[str, int]:
    """A topic whose first ledger's offload the broker began and cannot finish: (topic,
    ledger id)."""
    info = box.offload_info
    namespace = f"public/offload-stuck-{RUN}"
    box.admin("PUT", f"/namespaces/{namespace}", ok=(200, 204, 409))
    box.admin(
        "POST",
        f"/namespaces/{namespace}/offloadPolicies",
        {
            "managedLedgerOffloadDriver": "S3",
            "offloadersDirectory": info["offloaders_directory"],
            "s3ManagedLedgerOffloadBucket": info["s3"]["bucket"],
            "s3ManagedLedgerOffloadServiceEndpoint": info["s3"]["endpoint"],
            "s3ManagedLedgerOffloadRegion": info["s3"]["region"],
        },
    )
    topic = f"persistent://{namespace}/stuck"
    client = box.client()
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(20):
            producer.send(f"stuck-{i}".encode())
        producer.close()
    finally:
        client.close()
    closed = box.start_offload(topic)
    deadline = time.monotonic() + timeout
    while True:
        for li in box.ml_info(topic).ledgerInfo:
            ctx = li.offloadContext
            if li.ledgerId in closed and li.HasField("offloadContext") and ctx.HasField("uidMsb"):
                assert not ctx.complete, "the offload was expected to fail, it completed"
                return topic, li.ledgerId
        if time.monotonic() > deadline:
            raise AssertionError(f"no offload context written for {topic} in {timeout:.0f} s")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def stuck(offload_sandbox: Any) -> tuple[str, int]:
    return interrupted_offload(offload_sandbox)


def _verify(capsys: pytest.CaptureFixture[str], topic: str) -> Any:
    result = run(capsys, "verify", topic, "-o", "json", "--no-progress")
    assert "Traceback" not in result.err
    assert result.out, result.err
    return result


def test_offloaded_topics_verify_clean(
    offload_world: Any, offload_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every offloaded ledger of each driver read from tiered storage and verified: no
    error, no warning, as many entries read as the broker reader got."""
    for kind, world in offload_world.items():
        result = _verify(capsys, world.topic)
        assert result.code == 0, (kind, result.out)
        findings = result.json()["findings"]
        assert not [f for f in findings if f["severity"] != "info"], (kind, findings)
        assert not [f for f in findings if f["check"].startswith("offload-")], kind
        entries = {(m.ledger_id, m.entry_id) for m in world.messages}
        offloaded = {e for e in entries if e[0] in world.ledgers}
        assert len(offloaded) >= 1200
        assert result.json()["summary"]["entries"] >= len(offloaded), kind


def test_an_interrupted_offload_is_reported(
    stuck: tuple[str, int], offload_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, ledger = stuck
    result = _verify(capsys, topic)
    findings = result.json()["findings"]
    incomplete = [f for f in findings if f["check"] == "offload-incomplete"]
    assert [(f["ledger_id"], f["severity"]) for f in incomplete] == [(ledger, "warning")]
    # its BookKeeper copy is read as usual: nothing is wrong with the offload but that.
    # (The broker's offload can leave this topic's stored ledger list out of id order:
    # ledger-list-unordered, information, tested in test_ledger_order.py.)
    others = [f for f in findings if f["check"].startswith("offload-") and f not in incomplete]
    assert not others, findings


@dataclass
class Leftovers:
    """What an interrupted offload leaves, made on the sandbox: the broker's interrupted
    offload writes no object here, so its objects are the broker's own objects of another
    ledger copied under the stuck context's uid, with an unfinished multipart upload under
    it; and a MapFile directory under a uid no context names (a copy of a real one)."""

    client: Any
    bucket: str
    stuck_uid: str
    keys: list[str]
    upload_id: str
    stray: Path
    stray_uid: str
    stray_ledger: int

    def clean(self) -> None:
        import shutil

        shutil.rmtree(self.stray, ignore_errors=True)
        for u in self.client.list_multipart_uploads(Bucket=self.bucket).get("Uploads", []):
            if u["Key"] in self.keys:
                self.client.abort_multipart_upload(
                    Bucket=self.bucket, Key=u["Key"], UploadId=u["UploadId"]
                )
        for key in self.keys:
            self.client.delete_object(Bucket=self.bucket, Key=key)


def leftovers(box: Any, offload_world: Any, stuck: tuple[str, int]) -> Leftovers:
    import shutil
    import uuid as uuidlib

    from pulsarctl_py.stores.tiered.filesystem import offload_uuid
    from pulsarctl_py.stores.tiered.jcloud import data_key, index_key
    from pulsarctl_py.stores.tiered.s3 import S3Location, S3Objects
    from tests.support.offload_world import offload_context

    info = box.offload_info
    topic, ledger = stuck
    ctx = offload_context(box, topic)[ledger]
    stuck_uid = offload_uuid(ctx.uidMsb, ctx.uidLsb)
    s3_world = offload_world["s3"]
    real = offload_context(box, s3_world.topic)[s3_world.ledgers[0]]
    real_uid = offload_uuid(real.uidMsb, real.uidLsb)
    bucket = info["s3"]["bucket"]
    client = S3Objects(S3Location(bucket, info["s3"]["endpoint"])).client
    keys = [data_key(stuck_uid, ledger), index_key(stuck_uid, ledger)]
    for key, key_of in zip(keys, (data_key, index_key), strict=True):
        client.copy_object(
            Bucket=bucket,
            Key=key,
            CopySource={"Bucket": bucket, "Key": key_of(real_uid, s3_world.ledgers[0])},
        )
    upload = client.create_multipart_upload(Bucket=bucket, Key=keys[0])
    fs_world = offload_world["fs-block"]
    fs_ledger = fs_world.ledgers[0]
    fs_ctx = offload_context(box, fs_world.topic)[fs_ledger]
    tenant, ns, local = fs_world.short.split("/", 2)
    topic_dir = Path(info["filesystem"]["root"]) / tenant / ns / "persistent" / local
    stray_uid = str(uuidlib.uuid4())
    stray = topic_dir / f"{fs_ledger}-{stray_uid}"
    shutil.copytree(topic_dir / f"{fs_ledger}-{offload_uuid(fs_ctx.uidMsb, fs_ctx.uidLsb)}", stray)
    return Leftovers(
        client, bucket, stuck_uid, keys, upload["UploadId"], stray, stray_uid, fs_ledger
    )


def test_orphans_offloaded_lists_leftovers_never_a_referenced_offload(
    offload_sandbox: Any,
    offload_world: Any,
    stuck: tuple[str, int],
    offload_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``orphans --offloaded`` on the sandbox's S3 bucket and filesystem root: what an
    interrupted offload left (the broker's interrupted offload writes no object here, so
    its objects are the broker's own objects of another ledger copied under the stuck
    context's uid, and an unfinished multipart upload under it), and a MapFile directory
    under a uid no context names, are listed; the referenced offloads never are."""
    from pulsarctl_py.stores.tiered.filesystem import offload_uuid
    from tests.support.offload_world import offload_context

    _, ledger = stuck
    made = leftovers(offload_sandbox, offload_world, stuck)
    stuck_uid, stray_uid, stray = made.stuck_uid, made.stray_uid, made.stray
    try:
        result = run(capsys, "orphans", "--offloaded", "--min-age", "0", "-o", "json")
        assert result.code == 1, result.err
        listed = result.json()["offload_orphans"]
        by_uid = {(o["uuid"], o["ledger_id"]): o for o in listed}
        mine = by_uid[(stuck_uid, ledger)]
        assert "interrupted offload" in mine["why"]
        assert sorted(mine["paths"]) == sorted(made.keys)
        assert [u["upload_id"] for u in mine["unfinished_uploads"]] == [made.upload_id]
        assert by_uid[(stray_uid, made.stray_ledger)]["paths"] == [str(stray)]
        # the offloads the managed ledgers reference are never listed, nor kept
        everything = listed + result.json()["kept"]
        for world in offload_world.values():
            for lid, c in offload_context(offload_sandbox, world.topic).items():
                if c.HasField("uidMsb"):
                    assert (offload_uuid(c.uidMsb, c.uidLsb), lid) not in {
                        (o["uuid"], o["ledger_id"]) for o in everything
                    }
        # fresh leftovers are kept under the default --min-age (an offload may be running)
        fresh = run(capsys, "orphans", "--offloaded", "-o", "json")
        kept = {(o["uuid"], o["ledger_id"]) for o in fresh.json()["kept"]}
        assert {(stuck_uid, ledger), (stray_uid, made.stray_ledger)} <= kept
    finally:
        made.clean()


def test_offload_orphans_deleted_through_a_plan_and_undone(
    offload_sandbox: Any,
    offload_world: Any,
    stuck: tuple[str, int],
    offload_env: None,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """``orphans --offloaded --delete`` on the sandbox: the objects of the interrupted
    offload (the broker's own objects copied under the stuck context's uid, and an
    unfinished multipart upload) are kept while the broker runs that offload (its
    ``/offload`` status RUNNING), planned once no broker has the topic loaded, deleted with
    a stray filesystem offload directory, and put back byte for byte by undo; a referenced
    offload is never in a plan, and a plan is refused (exit 5, nothing deleted) after a
    managed ledger references the offload it deletes."""
    import json

    from kazoo.client import KazooClient

    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.proto import ml_data_formats_pb2
    from pulsarctl_py.stores.tiered.filesystem import offload_uuid
    from tests.support.offload_world import offload_context

    box = offload_sandbox
    topic, ledger = stuck
    made = leftovers(box, offload_world, stuck)
    client, bucket, keys, stray = made.client, made.bucket, made.keys, made.stray
    stuck_uid, stray_uid = made.stuck_uid, made.stray_uid

    def body(key: str) -> bytes:
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()

    def tree(path: Path) -> dict[str, bytes]:
        return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}

    def plan(name: str) -> tuple[Any, set[tuple[str, int]]]:
        path = tmp_path / name
        result = run(
            capsys, "orphans", "--offloaded", "--delete", "--min-age", "0", "--plan", str(path)
        )
        assert result.code == 0 and "Traceback" not in result.err, result.err
        doc = json.loads(path.read_text())
        return result, {(c["uuid"], c["ledger_id"]) for c in doc["offload"]}

    objects = {key: body(key) for key in keys}
    files = tree(stray)
    zk = KazooClient(hosts=box.state["zookeeper"]["address"])
    zk.start(timeout=30)
    try:
        # the broker runs the interrupted offload: its objects are kept, said why
        first, planned = plan("running.json")
        assert (stuck_uid, ledger) not in planned and (stray_uid, made.stray_ledger) in planned
        assert "runs an offload" in first.err
        for world in offload_world.values():  # a referenced offload is never in a plan
            for lid, c in offload_context(box, world.topic).items():
                assert (offload_uuid(c.uidMsb, c.uidLsb), lid) not in planned

        # no broker has the topic loaded: no offload runs, its leftovers are planned
        box.unload(topic)
        _, planned = plan("plan.json")
        assert {(stuck_uid, ledger), (stray_uid, made.stray_ledger)} <= planned
        applied = run(capsys, "apply", str(tmp_path / "plan.json"), "--yes", "-o", "json")
        assert applied.code == 0, applied.err
        written = {w["key"]: w["action"] for w in applied.json()["written"]}
        assert written[f"s3://{bucket}/{keys[0]}?uploadId={made.upload_id}"] == "abort"
        assert written[str(stray)] == "delete"
        listed = {o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])}
        assert not set(keys) & listed and not stray.exists()
        assert not [
            u for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
            if u["UploadId"] == made.upload_id
        ]  # fmt: skip

        undone = run(capsys, "undo", str(tmp_path / "plan.json"), "--yes", "-o", "json")
        assert undone.code == 0, undone.err
        assert {key: body(key) for key in keys} == objects and tree(stray) == files
        assert any("cannot be brought back" in u["reason"] for u in undone.json()["unchanged"])

        # a managed ledger references the offload after the plan was made: refused
        plan("again.json")
        ml_path = mld.TopicName.parse(topic).ml_path
        data, stat = zk.get(ml_path)
        ml = ml_data_formats_pb2.ManagedLedgerInfo()
        ml.ParseFromString(data)
        for li in ml.ledgerInfo:
            if li.ledgerId == ledger:
                li.offloadContext.complete = True
        zk.set(ml_path, ml.SerializeToString(), version=stat.version)
        try:
            refused = run(capsys, "apply", str(tmp_path / "again.json"), "--yes", "-o", "json")
            assert refused.code == 5 and "no orphan" in refused.err, refused.err
            assert not refused.json()["written"]
            assert {key: body(key) for key in keys} == objects and stray.is_dir()
        finally:
            now = zk.get(ml_path)[1]
            zk.set(ml_path, data, version=now.version)
    finally:
        zk.stop()
        zk.close()
        made.clean()
