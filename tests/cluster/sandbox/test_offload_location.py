"""Where an offloaded ledger is read when its offloadContext's endpoint is gone: the S3
service moved after the offload (issue 33 point 2).

The module's topic is offloaded by the real broker through a TCP forwarder (the S3
service's old address, in its namespace's offload policies), which then stops: every
ledger's offloadContext names a dead ``serviceEndpoint``. The namespace's offload policies
then name the S3 server itself, and the broker reads the ledgers back through it
(``BlobStoreManagedLedgerOffloader.readOffloaded``: the context's bucket, through the blob
store of the current configuration): the messages a broker reader returns are what ledgerctl
must read, with the endpoint given

* only by the namespace's offload policy (no flag, no variable), and
* only by ``--broker-conf`` (a broker.conf written here; the namespace's policy then names no
  endpoint).

Before the resolution (main), ledgerctl read the context's dead endpoint: exit 3.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.sandbox.test_offload_verbs import _inspected, _want
from tests.cluster.sandbox.test_offload_verbs import env as env  # the fixture
from tests.support.cli_helpers import run
from tests.support.offload_world import RUN, ReadMessage, read_all

NS = f"public/offload-moved-{RUN}"


class Forwarder:
    """A TCP forwarder on loopback to ``port`` (the S3 server's old address)."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self) -> None:
        self.server.close()
        with self.lock:
            for s in self.conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()


class Moved:
    def __init__(self, topic: str, ledgers: list[int], old: str, messages: list[ReadMessage]):
        self.topic = topic
        self.ledgers = ledgers
        self.old = old
        self.messages = messages

    @property
    def short(self) -> str:
        return self.topic.split("://", 1)[1]


def _policies(box: Any, endpoint: str | None) -> dict[str, Any]:
    info = box.offload_info
    out: dict[str, Any] = {
        "managedLedgerOffloadDriver": "S3",
        "offloadersDirectory": info["offloaders_directory"],
        "managedLedgerOffloadDeletionLagInMillis": info["deletion_lag_ms"],
        "managedLedgerOffloadBucket": info["s3"]["bucket"],
        "managedLedgerOffloadRegion": info["s3"]["region"],
    }
    if endpoint is not None:
        out["managedLedgerOffloadServiceEndpoint"] = endpoint
    return out


@pytest.fixture(scope="module")
def moved(offload_sandbox: Any) -> Iterator[Moved]:
    box = offload_sandbox
    s3 = box.offload_info["s3"]
    old = Forwarder(int(s3["port"]))
    box.admin("PUT", f"/namespaces/{NS}", {}, ok=(200, 204, 409))
    box.admin("POST", f"/namespaces/{NS}/offloadPolicies", _policies(box, old.url))
    topic = f"persistent://{NS}/moved"
    try:
        client = box.client()
        try:
            for part in range(2):
                producer = client.create_producer(topic, batching_enabled=False)
                for i in range(20):
                    producer.send(f"moved-{part}-{i}".encode(), partition_key=f"k{i % 3}")
                producer.close()
                box.unload(topic)
        finally:
            client.close()
        ledgers = box.offload(topic)
        contexts = {i.ledgerId: i.offloadContext for i in box.ml_info(topic).ledgerInfo}
        for lid in ledgers:
            props = {p.key: p.value for p in contexts[lid].driverMetadata.properties}
            assert props["serviceEndpoint"] == old.url, props
    finally:
        old.stop()
    # the S3 service "moved": the namespace names its new address, the broker reads there
    box.admin("POST", f"/namespaces/{NS}/offloadPolicies", _policies(box, s3["endpoint"]))
    box.unload(topic)
    messages = read_all(box, topic)
    assert {m.ledger_id for m in messages} >= set(ledgers) and len(messages) == 40
    yield Moved(topic, ledgers, old.url, messages)
    box.admin("POST", f"/namespaces/{NS}/offloadPolicies", _policies(box, s3["endpoint"]))
    box.admin("DELETE", box.topic_path(topic) + "?force=true", ok=(200, 204, 404))
    box.admin("DELETE", f"/namespaces/{NS}", ok=(200, 204, 404, 409))


def test_the_namespace_policy_names_the_endpoint(
    moved: Moved, env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """No flag, no variable: the namespace's offload policy, as the broker reads."""
    got = _inspected(run(capsys, "inspect", "--topic", moved.short, "-o", "jsonl"))
    assert got == _want(moved.messages)
    info = run(capsys, "topic", "info", moved.short, "-o", "json")
    assert info.code == 0, info.err
    rows = {r["ledger_id"]: r for r in info.json()["ledgers"]}
    for lid in moved.ledgers:
        where = rows[lid]["location"]
        assert where["endpoint"] != moved.old
        assert where["source"]["endpoint"] == (
            f"namespace policy {NS} (managedLedgerOffloadServiceEndpoint)"
        )
        assert where["source"]["bucket"] == "offloadContext (bucket)"
    listed = run(capsys, "ledger", "list", "--topic", moved.short, "-o", "json")
    assert listed.code == 0, listed.err
    for row in listed.json():
        if row["ledger_id"] in moved.ledgers:
            assert row["location"]["source"]["endpoint"].startswith("namespace policy ")
    checked = run(capsys, "verify", moved.short, "-o", "json", "--no-progress")
    assert checked.code == 0, (checked.out, checked.err)
    findings = checked.json()["findings"]
    assert not [f for f in findings if f["check"].startswith("offload-")], findings
    # the context's endpoint, given back as an override, is dead: one line, exit 3
    dead = run(capsys, "verify", moved.short, "--s3-endpoint", moved.old, "--no-progress")
    assert dead.code == 3 and moved.old in dead.err, dead.err


def test_only_broker_conf_names_the_endpoint(
    offload_sandbox: Any,
    moved: Moved,
    env: None,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """The namespace's policy names the driver and bucket only; the endpoint is the broker
    configuration's (mergeConfiguration: namespace over broker, field by field)."""
    box = offload_sandbox
    box.admin("POST", f"/namespaces/{NS}/offloadPolicies", _policies(box, None))
    try:
        lost = run(capsys, "inspect", "--topic", moved.short, "-o", "jsonl")
        assert lost.code == 3 and moved.old in lost.err, lost.err
        conf = tmp_path / "broker.conf"
        endpoint = box.offload_info["s3"]["endpoint"]
        conf.write_text(f"managedLedgerOffloadServiceEndpoint={endpoint}\n")
        got = run(
            capsys, "inspect", "--topic", moved.short, "-o", "jsonl", "--broker-conf", str(conf)
        )
        assert _inspected(got) == _want(moved.messages)
        info = run(capsys, "topic", "info", moved.short, "-o", "json", "--broker-conf", str(conf))
        assert info.code == 0, info.err
        sources = {
            r["ledger_id"]: r["location"]["source"]["endpoint"]
            for r in info.json()["ledgers"]
            if r["ledger_id"] in moved.ledgers
        }
        assert set(sources.values()) == {
            f"broker.conf {conf} (managedLedgerOffloadServiceEndpoint)"
        }, sources
    finally:
        box.admin(
            "POST",
            f"/namespaces/{NS}/offloadPolicies",
            _policies(box, box.offload_info["s3"]["endpoint"]),
        )


def test_the_topic_policy_names_the_endpoint(
    offload_sandbox: Any, moved: Moved, env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A topic-level offload policy (read from the namespace's __change_events, as the
    broker reads it) over a namespace policy that names no endpoint: the broker reads
    through it, and so does ledgerctl."""
    box = offload_sandbox
    endpoint = box.offload_info["s3"]["endpoint"]
    path = box.topic_path(moved.topic) + "/offloadPolicies"
    box.admin("POST", f"/namespaces/{NS}/offloadPolicies", _policies(box, None))
    box.admin("POST", path, _policies(box, endpoint))
    try:
        box.unload(moved.topic)
        assert read_all(box, moved.topic) == moved.messages  # the broker reads through it
        got = _inspected(run(capsys, "inspect", "--topic", moved.short, "-o", "jsonl"))
        assert got == _want(moved.messages)
        info = run(capsys, "topic", "info", moved.short, "-o", "json")
        assert info.code == 0, info.err
        sources = {
            r["location"]["source"]["endpoint"]
            for r in info.json()["ledgers"]
            if r["ledger_id"] in moved.ledgers
        }
        assert sources == {
            f"topic policy {moved.topic} (local) (managedLedgerOffloadServiceEndpoint)"
        }, sources
    finally:
        box.admin("DELETE", path)
        box.admin("POST", f"/namespaces/{NS}/offloadPolicies", _policies(box, endpoint))
