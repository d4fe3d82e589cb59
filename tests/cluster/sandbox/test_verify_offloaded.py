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
    import shutil
    import uuid as uuidlib

    from pulsarctl_py.stores.tiered.filesystem import offload_uuid
    from pulsarctl_py.stores.tiered.jcloud import data_key, index_key
    from pulsarctl_py.stores.tiered.s3 import S3Location, S3Objects
    from tests.support.offload_world import offload_context

    info = offload_sandbox.offload_info
    topic, ledger = stuck
    ctx = offload_context(offload_sandbox, topic)[ledger]
    stuck_uid = offload_uuid(ctx.uidMsb, ctx.uidLsb)
    s3_world = offload_world["s3"]
    real = offload_context(offload_sandbox, s3_world.topic)[s3_world.ledgers[0]]
    real_uid = offload_uuid(real.uidMsb, real.uidLsb)
    client = S3Objects(S3Location(info["s3"]["bucket"], info["s3"]["endpoint"])).client
    bucket = info["s3"]["bucket"]
    for key_of in (data_key, index_key):
        client.copy_object(
            Bucket=bucket,
            Key=key_of(stuck_uid, ledger),
            CopySource={"Bucket": bucket, "Key": key_of(real_uid, s3_world.ledgers[0])},
        )
    upload = client.create_multipart_upload(Bucket=bucket, Key=data_key(stuck_uid, ledger))
    # a filesystem offload directory no context names (a copy of a real one)
    fs_world = offload_world["fs-block"]
    fs_ctx = offload_context(offload_sandbox, fs_world.topic)[fs_world.ledgers[0]]
    fs_uid = offload_uuid(fs_ctx.uidMsb, fs_ctx.uidLsb)
    root = Path(info["filesystem"]["root"])
    tenant, ns, local = fs_world.short.split("/", 2)
    topic_dir = root / tenant / ns / "persistent" / local
    stray_uid = str(uuidlib.uuid4())
    stray = topic_dir / f"{fs_world.ledgers[0]}-{stray_uid}"
    shutil.copytree(topic_dir / f"{fs_world.ledgers[0]}-{fs_uid}", stray)
    try:
        result = run(capsys, "orphans", "--offloaded", "--min-age", "0", "-o", "json")
        assert result.code == 1, result.err
        listed = result.json()["offload_orphans"]
        by_uid = {(o["uuid"], o["ledger_id"]): o for o in listed}
        mine = by_uid[(stuck_uid, ledger)]
        assert "interrupted offload" in mine["why"]
        assert sorted(mine["paths"]) == sorted(
            [data_key(stuck_uid, ledger), index_key(stuck_uid, ledger)]
        )
        assert [u["upload_id"] for u in mine["unfinished_uploads"]] == [upload["UploadId"]]
        assert by_uid[(stray_uid, fs_world.ledgers[0])]["paths"] == [str(stray)]
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
        assert {(stuck_uid, ledger), (stray_uid, fs_world.ledgers[0])} <= kept
    finally:
        shutil.rmtree(stray, ignore_errors=True)
        client.abort_multipart_upload(
            Bucket=bucket, Key=data_key(stuck_uid, ledger), UploadId=upload["UploadId"]
        )
        for key_of in (data_key, index_key):
            client.delete_object(Bucket=bucket, Key=key_of(stuck_uid, ledger))
