"""`scripts/sandbox up --offload`: the broker runs Pulsar's real offloaders (filesystem, and
the jcloud S3 driver against the local S3 server), and cluster.json says where the data is."""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path

from tests.support.offload_world import KINDS, offload_context


def _uuid(ctx) -> str:
    return str(uuid.UUID(int=((ctx.uidMsb & (2**64 - 1)) << 64) | (ctx.uidLsb & (2**64 - 1))))


def test_cluster_json_says_where_offloaded_data_lives(offload_sandbox) -> None:
    offload = offload_sandbox.offload_info
    root = Path(offload["filesystem"]["root"])
    assert root.is_dir() and offload["filesystem"]["uri"] == root.as_uri()
    assert sorted(p.name for p in Path(offload["offloaders_directory"]).glob("*.nar")) == [
        "tiered-storage-file-system-4.0.8.nar",
        "tiered-storage-jcloud-4.0.8.nar",
    ]
    s3 = offload["s3"]
    assert s3["endpoint"].startswith("http://127.0.0.1:")
    with urllib.request.urlopen(f"{s3['endpoint']}/{s3['bucket']}", timeout=10) as resp:
        assert resp.status == 200
    assert offload["namespaces"]["public/offload-s3"] == {"driver": "S3"}
    for namespace in ("public/offload-s3", "public/offload-record"):
        policies = offload_sandbox.admin("GET", f"/namespaces/{namespace}/offloadPolicies")
        # the S3 driver, never aws-s3 (it dials s3.amazonaws.com whatever the endpoint)
        expected = offload["namespaces"][namespace]["driver"]
        assert policies["managedLedgerOffloadDriver"] == expected
    conf = dict(
        line.split("=", 1)
        for line in Path(offload_sandbox.state["broker"]["conf"]).read_text().splitlines()
    )
    assert conf["managedLedgerOffloadDriver"] == "filesystem"
    assert conf["fileSystemURI"] == offload["filesystem"]["uri"]


def test_each_driver_offloads_where_cluster_json_says(offload_sandbox, offload_world) -> None:
    offload = offload_sandbox.offload_info
    s3 = offload["s3"]
    with urllib.request.urlopen(f"{s3['endpoint']}/{s3['bucket']}", timeout=10) as resp:
        listing = resp.read().decode()
    for kind, world in offload_world.items():
        namespace, driver, _ = KINDS[kind]
        assert len(world.ledgers) == 2, world.ledgers
        contexts = offload_context(offload_sandbox, world.topic)
        for ledger in world.ledgers:
            ctx = contexts[ledger]
            assert ctx.complete and ctx.bookkeeperDeleted
            assert ctx.driverMetadata.name == driver
            props = {p.key: p.value for p in ctx.driverMetadata.properties}
            if driver == "filesystem":
                assert props["storageBasePath"] == offload["filesystem"]["uri"]
                directory = (
                    Path(offload["filesystem"]["root"])
                    / namespace
                    / "persistent"
                    / world.short.rsplit("/", 1)[1]
                    / f"{ledger}-{_uuid(ctx)}"
                )
                assert (directory / "data").is_file() and (directory / "index").is_file()
            else:
                assert props["bucket"] == s3["bucket"]
                assert props["serviceEndpoint"] == s3["endpoint"]
                assert f"<Key>{_uuid(ctx)}-ledger-{ledger}</Key>" in listing
                assert f"<Key>{_uuid(ctx)}-ledger-{ledger}-index</Key>" in listing
        # the broker reads the offloaded ledgers back whole (from tiered storage: the
        # BookKeeper copies are gone)
        assert len(world.messages) == 1600
        assert {m.ledger_id for m in world.messages} == set(world.ledgers)


def test_status_names_the_s3_server(offload_sandbox) -> None:
    import subprocess
    import sys

    from tests.support.fixtures.sandbox import SCRIPT

    status = json.loads(
        subprocess.run(
            [sys.executable, str(SCRIPT), "status", str(offload_sandbox.dir)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert status["s3"] is True
