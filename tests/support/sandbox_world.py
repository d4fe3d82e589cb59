"""The data the sandbox tests compare against: produced once per session by the official
clients into the real broker of ``scripts/sandbox``.

Every topic is in the namespace ``public/world`` and records what was sent (key, value,
the message id the broker gave, properties), so that tests can compare ledgerctl's reading
of the stored entries with what producers sent and with what the broker answers:

* ``keyed``: keyed, not batched, three ledgers (unloaded twice while producing), with
  tombstones (an empty value under a key);
* ``batched-none``, ``batched-lz4``, ``batched-zlib``, ``batched-zstd``, ``batched-snappy``:
  keyed batches of each codec, two ledgers each;
* ``chunked``: a 6 MB message in chunks (above the broker's 5 MB limit) between small ones;
* ``encrypted``: values encrypted for an RSA key (the key pair in ``keys/``);
* ``txn``: keyed messages in committed and aborted transactions (the Java client: the Python
  one has no transactions), tombstones in both, and plain messages between them;
* ``partitioned``: three partitions, keyed batches.
"""

from __future__ import annotations

import base64
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.fixtures.sandbox import Sandbox, b64

NAMESPACE = "public/world"
CODECS = ("none", "lz4", "zlib", "zstd", "snappy")
CHUNKED_SIZE = 6 * 1024 * 1024


@dataclass
class Sent:
    key: str | None
    value: bytes
    message_id: tuple[int, int, int, int]  # ledger, entry, batch index (-1: none), partition
    properties: dict[str, str] = field(default_factory=dict)
    transaction: str | None = None  # "commit" | "abort" for messages sent in a transaction

    @property
    def position(self) -> str:
        ledger, entry, batch, _ = self.message_id
        return f"{ledger}:{entry}" if batch < 0 else f"{ledger}:{entry}:{batch}"


@dataclass
class World:
    sandbox: Sandbox
    topics: dict[str, list[Sent]]
    keys_dir: Path

    def topic(self, name: str) -> str:
        return f"persistent://{NAMESPACE}/{name}"

    @staticmethod
    def short(name: str) -> str:
        """The name ledgerctl takes: tenant/namespace/topic."""
        return f"{NAMESPACE}/{name}"


def _mid(message_id: Any) -> tuple[int, int, int, int]:
    return (
        message_id.ledger_id(),
        message_id.entry_id(),
        message_id.batch_index(),
        message_id.partition(),
    )


def _ok() -> Any:
    import pulsar

    return pulsar.Result.Ok


class _Collector:
    """Message ids from send_async callbacks, in send order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.results: dict[int, Any] = {}
        self.errors: list[str] = []

    def callback(self, index: int):
        def done(result: Any, message_id: Any) -> None:
            with self.lock:
                if result != _ok():
                    self.errors.append(f"message {index}: {result}")
                else:
                    self.results[index] = _mid(message_id)

        return done


def _produce(
    client: Any, topic: str, messages: list[tuple[str | None, bytes, dict[str, str]]], **producer
) -> list[Sent]:
    producer_ = client.create_producer(topic, **producer)
    collector = _Collector()
    try:
        for i, (key, value, props) in enumerate(messages):
            kwargs: dict[str, Any] = {"properties": props} if props else {}
            if key is not None:
                kwargs["partition_key"] = key
            producer_.send_async(value, collector.callback(i), **kwargs)
        producer_.flush()
    finally:
        producer_.close()
    if collector.errors or len(collector.results) != len(messages):
        raise AssertionError(f"producing to {topic} failed: {collector.errors[:3]}")
    return [
        Sent(key, value, collector.results[i], props)
        for i, (key, value, props) in enumerate(messages)
    ]


def _keyed_messages(prefix: str, n: int, keys: int, tombstone_every: int = 0):
    out = []
    for i in range(n):
        key = f"{prefix}-k{i % keys}"
        if tombstone_every and i % tombstone_every == tombstone_every - 1:
            out.append((key, b"", {}))
        else:
            out.append((key, f"{prefix}-value-{i}".encode(), {"i": str(i)}))
    return out


def _rsa_keys(directory: Path) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    directory.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = directory / "world-private.pem"
    public = directory / "world-public.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return public, private


def build_world(sandbox: Sandbox) -> World:
    import pulsar

    sandbox.admin("PUT", f"/namespaces/{NAMESPACE}", ok=(204, 409))
    # no retention limit: the broker would otherwise delete every ledger but the current one
    # of a topic without subscriptions at its next retention check (every 120 s), under the
    # tests that compare several ledgers
    sandbox.admin(
        "POST",
        f"/namespaces/{NAMESPACE}/retention",
        {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
    )
    keys_dir = sandbox.dir / "world-keys"
    world = World(sandbox, {}, keys_dir)
    client = sandbox.client()
    try:
        # keyed: three ledgers
        topic = world.topic("keyed")
        sent: list[Sent] = []
        messages = _keyed_messages("keyed", 120, 10, tombstone_every=7)
        for part in range(3):
            sent += _produce(client, topic, messages[part * 40 : (part + 1) * 40])
            if part < 2:
                sandbox.unload(topic)
        world.topics["keyed"] = sent

        codecs = {
            "none": pulsar.CompressionType.NONE,
            "lz4": pulsar.CompressionType.LZ4,
            "zlib": pulsar.CompressionType.ZLib,
            "zstd": pulsar.CompressionType.ZSTD,
            "snappy": pulsar.CompressionType.SNAPPY,
        }
        for name, codec in codecs.items():
            topic = world.topic(f"batched-{name}")
            messages = _keyed_messages(f"b-{name}", 200, 13, tombstone_every=11)
            sent = _produce(
                client,
                topic,
                messages[:100],
                batching_enabled=True,
                batching_max_messages=10,
                batching_max_publish_delay_ms=50,
                compression_type=codec,
            )
            sandbox.unload(topic)
            sent += _produce(
                client,
                topic,
                messages[100:],
                batching_enabled=True,
                batching_max_messages=10,
                batching_max_publish_delay_ms=50,
                compression_type=codec,
            )
            world.topics[f"batched-{name}"] = sent

        big = bytes((i * 31 + 7) % 251 for i in range(CHUNKED_SIZE))
        world.topics["chunked"] = _produce(
            client,
            world.topic("chunked"),
            [("c-0", b"small-before", {}), ("c-1", big, {}), ("c-2", b"small-after", {})],
            chunking_enabled=True,
            batching_enabled=False,
        )

        public, private = _rsa_keys(keys_dir)
        reader = pulsar.CryptoKeyReader(str(public), str(private))
        world.topics["encrypted"] = _produce(
            client,
            world.topic("encrypted"),
            _keyed_messages("enc", 20, 4),
            encryption_key="world-key",
            crypto_key_reader=reader,
        )

        topic = world.topic("partitioned")
        sandbox.admin("PUT", sandbox.topic_path(topic) + "/partitions", 3, ok=(204, 409))
        world.topics["partitioned"] = _produce(
            client,
            topic,
            _keyed_messages("part", 90, 9),
            batching_enabled=True,
            batching_max_messages=5,
            batching_max_publish_delay_ms=50,
        )
    finally:
        client.close()
    world.topics["txn"] = _transactions(world)
    return world


def _transactions(world: World) -> list[Sent]:
    """Committed and aborted transactions with plain messages between them (Java client)."""
    topic = world.topic("txn")
    client = world.sandbox.client()
    sent: list[Sent] = []
    try:
        sent += _produce(client, topic, _keyed_messages("plain-a", 6, 3))
    finally:
        client.close()

    def txn(end: str, prefix: str, values: list[tuple[str, bytes | None]]) -> dict[str, Any]:
        return {
            "end": end,
            "messages": [{"key": k, "value": None if v is None else b64(v)} for k, v in values],
        }

    spec = {
        "topic": topic,
        "transactions": [
            txn("commit", "c1", [("t-k0", b"committed-0"), ("t-k1", b"committed-1")]),
            txn(
                "abort",
                "a1",
                [("t-k0", b"aborted-0"), ("t-k2", b"aborted-2"), ("plain-a-k0", None)],
            ),
            txn("commit", "c2", [("t-k1", None), ("t-k3", b"committed-3")]),
            txn("abort", "a2", [("t-k3", None)]),
        ],
    }
    result = world.sandbox.java("txn-produce", spec)
    for t_spec, t_out in zip(spec["transactions"], result["transactions"], strict=True):
        for m, mid in zip(t_spec["messages"], t_out["message_ids"], strict=True):
            ledger, entry, batch, partition = (int(x) for x in mid.split(":"))
            value = b"" if m["value"] is None else base64.b64decode(m["value"])
            sent.append(Sent(m["key"], value, (ledger, entry, batch, partition), {}, t_spec["end"]))
    client = world.sandbox.client()
    try:
        sent += _produce(client, topic, _keyed_messages("plain-b", 6, 3))
    finally:
        client.close()
    return sent
