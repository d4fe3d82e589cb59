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


def test_filesystem_offloads_read_as_the_broker_reads_them(offload_sandbox, offload_world):
    """Every message ledgerctl reads from the filesystem offloader's files (the BookKeeper
    copies deleted) is the one a broker reader returned, in order, with its id."""
    from pulsarctl_py.decoders import decode_entry
    from pulsarctl_py.stores.tiered.filesystem import (
        MapFileLedger,
        decode_options,
        ledger_directory,
        local_path,
        offload_uuid,
    )

    for kind in ("fs-block", "fs-record"):
        world = offload_world[kind]
        info = {i.ledgerId: i for i in offload_sandbox.ml_info(world.topic).ledgerInfo}
        tenant, ns, local = world.short.split("/", 2)
        got = []
        for ledger in world.ledgers:
            ctx = info[ledger].offloadContext
            props = {p.key: p.value for p in ctx.driverMetadata.properties}
            directory = ledger_directory(
                local_path(props["storageBasePath"]),
                f"{tenant}/{ns}/persistent/{local}",
                ledger,
                offload_uuid(ctx.uidMsb, ctx.uidLsb),
            )
            with MapFileLedger(directory, ledger) as m:
                md = m.metadata()
                assert md.last_entry_id == info[ledger].entries - 1
                assert md.length == info[ledger].size
                entries = list(m.read_entries(0, info[ledger].entries - 1))
                assert len(entries) == info[ledger].entries
                for e in entries:
                    decoded = decode_entry(e.data, decode_options(), (ledger, e.entry_id))
                    assert decoded.ok, decoded.problems
                    # the broker's entry metadata (the index interceptor) is in the bytes
                    assert decoded.broker_entry_metadata is not None
                    got += [
                        (
                            m.ledger_id,
                            e.entry_id,
                            msg.batch_index,
                            msg.key,
                            bytes(msg.value),
                            msg.properties,
                            msg.publish_time,
                            msg.event_time or 0,
                        )
                        for msg in decoded.messages
                    ]
        want = [
            (
                r.ledger_id,
                r.entry_id,
                r.batch_index,
                r.key,
                r.value,
                r.properties,
                r.publish_time,
                r.event_time,
            )
            for r in world.messages
        ]
        assert len(want) == 1600
        assert got == want, kind


def test_inspect_reads_an_offloaded_ledger_by_id(
    offload_sandbox, offload_world, tmp_path, capsys, monkeypatch
):
    """`inspect <ledger>` of a ledger whose BookKeeper copy is gone: found through its
    managed ledger's offloadContext, read from the filesystem offloader's files (or from a
    copy with --offload-url), with the messages a broker reader returned."""
    import base64
    import shutil

    from tests.support.cli_helpers import run

    world = offload_world["fs-record"]
    monkeypatch.setenv("LEDGERCTL_METADATA_URL", offload_sandbox.metadata_url)
    monkeypatch.setenv("LEDGERCTL_BOOKKEEPER_METADATA_URL", offload_sandbox.bookkeeper_metadata_url)
    monkeypatch.delenv("LEDGERCTL_OFFLOAD_URL", raising=False)

    def cli(*args):
        return run(capsys, *args)

    ledger = world.ledgers[1]  # the keyed LZ4 batches

    def messages(result) -> list[tuple]:
        assert result.code == 0, result.err
        return [
            (m["message_id"], m["key"], base64.b64decode(m["value"]))
            for line in result.out.splitlines()
            for m in json.loads(line)["messages"]
        ]

    want = [
        (f"{m.ledger_id}:{m.entry_id}:{m.batch_index}", m.key, m.value)
        for m in world.messages
        if m.ledger_id == ledger
    ]
    assert len(want) == 400
    assert messages(cli("inspect", ledger, "-o", "jsonl")) == want
    # a copy of the offload root, elsewhere
    root = Path(offload_sandbox.offload_info["filesystem"]["root"])
    tenant, ns, local = world.short.split("/", 2)
    copy = tmp_path / "copy"
    shutil.copytree(
        root / tenant / ns / "persistent" / local, copy / tenant / ns / "persistent" / local
    )
    copied = cli("inspect", ledger, "-o", "jsonl", "--offload-url", copy.as_uri())
    assert messages(copied) == want
    # the whole topic: its offloaded ledgers, then its current (empty) one on the bookies
    whole = messages(cli("inspect", "--topic", world.short, "-o", "jsonl"))
    assert [(mid.split(":")[:2], value) for mid, _key, value in whole] == [
        ([str(m.ledger_id), str(m.entry_id)], m.value) for m in world.messages
    ]
    # one entry, read from the nearest indexed key
    one = cli("inspect", f"{ledger}:17", "-o", "jsonl")
    assert [m[0].rsplit(":", 1)[0] for m in messages(one)] == [f"{ledger}:17"] * 10
    # a copy without the ledger: the data is gone, said plainly (exit 1)
    empty = cli("inspect", ledger, "--offload-url", (tmp_path / "empty").as_uri())
    assert empty.code == 1
    assert "bookkeeperDeleted" in empty.err and "gone" in empty.err
    assert "Traceback" not in empty.err
    # a copy of the wrong kind for the ledger's driver: one line, exit 2
    wrong = cli("inspect", ledger, "--offload-url", "s3://a-bucket")
    assert wrong.code == 2 and "filesystem offloader" in wrong.err
    assert len(wrong.err.strip().splitlines()) == 1
