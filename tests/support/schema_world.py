"""Topics with schemas in the sandbox, produced once per session by the official clients,
and what the official consumers receive from them.

The Java client (scripts/java/SchemaClient.java) produces AVRO with two versions (the second
adds fields with defaults: schema evolution), JSON, PROTOBUF and PROTOBUF_NATIVE (of a
generated class on the sandbox's class path), KeyValue INLINE and SEPARATED, and every
primitive and time type; it consumes each topic with AUTO_CONSUME (the writer's schema of
each message's version; PROTOBUF with its class). The Python client produces AVRO, JSON,
STRING and PROTOBUF_NATIVE (of one of ledgerctl's own generated classes) and consumes them
with the same schemas. Namespace ``public/schemas``.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from tests.support.fixtures.sandbox import Sandbox

NAMESPACE = "public/schemas"

CUSTOMER = {
    "type": "record",
    "name": "Customer",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "price", "type": ["null", "double"], "default": None},
        {"name": "customer", "type": CUSTOMER},
    ],
}
#: version 2: fields added with defaults (FULL compatibility, the namespace default)
ORDER_V2 = {
    **ORDER_V1,
    "fields": [
        *ORDER_V1["fields"],
        {"name": "qty", "type": "int", "default": 1},
        {"name": "code", "type": "bytes", "default": ""},
    ],
}
EVENT = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "kind", "type": "string"}, {"name": "n", "type": "int"}],
}


def _order(i: int, v2: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": 40 + i,
        "item": f"item-{i}",
        "price": None if i % 2 else {"double": 2.5 * i},
        "customer": {"name": f"c{i}", "tags": ["a", "b"][: i % 3]},
    }
    if v2:
        doc["qty"] = i
        doc["code"] = "\u0001\u00ff"
    return doc


PROTO_VALUES = [
    {
        "schemaId": f"t/n/x{i}",
        "user": "u",
        "type": "AVRO",
        "schema": base64.b64encode(bytes([i, 255])).decode(),
        "timestamp": str(1_700_000_000_000 + i),
        "deleted": i == 1,
        "props": [{"key": "k", "value": str(i)}],
    }
    for i in range(3)
]

PRIMITIVES: dict[str, list[Any]] = {
    "STRING": ["héllo", ""],
    "BOOLEAN": [True, False],
    "INT8": [-128, 7],
    "INT16": [-32768, 300],
    "INT32": [-(2**31), 70000],
    "INT64": [-(2**63), 2**40],
    "FLOAT": [1.5, -0.25],
    "DOUBLE": [2.25, 1e300],
    "BYTES": [base64.b64encode(b"\x00\x01raw").decode()],
    "DATE": [1_700_000_000_000],
    "TIME": [45_296_789],
    "TIMESTAMP": [1_700_000_000_123],
    "INSTANT": ["2024-02-29T12:34:56.123456789Z", "1969-12-31T23:59:59Z"],
    "LOCAL_DATE": ["2024-02-29", "1900-01-01"],
    "LOCAL_TIME": ["12:34:56.000001", "00:00"],
    "LOCAL_DATE_TIME": ["2024-02-29T12:34:56.789", "1970-01-01T00:00"],
}


def java_specs() -> dict[str, list[dict[str, Any]]]:
    """Topic -> the produce specs sent in order (several: one per schema version)."""
    specs: dict[str, list[dict[str, Any]]] = {
        "avro": [
            {
                "schema": {"type": "AVRO", "definition": json.dumps(ORDER_V1)},
                "messages": [{"key": f"k{i}", "value": _order(i)} for i in range(3)],
            },
            {
                "batching": True,
                "schema": {"type": "AVRO", "definition": json.dumps(ORDER_V2)},
                "messages": [{"key": f"k{i}", "value": _order(i, True)} for i in range(3, 6)],
            },
        ],
        "json": [
            {
                "batching": True,
                "schema": {"type": "JSON", "definition": json.dumps(EVENT)},
                "messages": [{"value": {"kind": f"e{i}", "n": i}} for i in range(3)],
            }
        ],
        "protobuf": [
            {"schema": {"type": "PROTOBUF"}, "messages": [{"value": v} for v in PROTO_VALUES]}
        ],
        "protobuf-native": [
            {
                "schema": {"type": "PROTOBUF_NATIVE"},
                "messages": [{"value": v} for v in PROTO_VALUES],
            }
        ],
    }
    for encoding in ("INLINE", "SEPARATED"):
        specs[f"kv-{encoding.lower()}"] = [
            {
                "batching": encoding == "INLINE",
                "schema": {
                    "type": "KEY_VALUE",
                    "key": {"type": "STRING"},
                    "value": {"type": "INT64"},
                    "encoding": encoding,
                },
                "messages": [{"value": {"key": f"kv{i}", "value": 10**12 + i}} for i in range(3)]
                + [{"value": {"key": None, "value": 5}}],
            }
        ]
    for name, values in PRIMITIVES.items():
        specs[name.lower().replace("_", "-")] = [
            {"schema": {"type": name}, "messages": [{"value": v} for v in values]}
        ]
    return specs


@dataclass
class SchemaWorld:
    sandbox: Sandbox
    #: topic -> what the official consumer received, in order
    received: dict[str, list[dict[str, Any]]]
    #: topic -> the message ids the producer got, in order
    produced: dict[str, list[str]]

    @staticmethod
    def topic(name: str) -> str:
        return f"persistent://{NAMESPACE}/{name}"


def build(sandbox: Sandbox) -> SchemaWorld:
    sandbox.admin("PUT", f"/namespaces/{NAMESPACE}", ok=(200, 204, 409))
    produce = []
    for name, specs in java_specs().items():
        for spec in specs:
            produce.append({**spec, "topic": SchemaWorld.topic(name)})
    done = sandbox.java("schema-produce", {"all": produce}, timeout=600)
    produced: dict[str, list[str]] = {}
    for spec, out in zip(produce, done["all"], strict=True):
        produced.setdefault(spec["topic"], []).extend(out["message_ids"])
    produced.update(_python_produce(sandbox))
    consume = [
        {
            "topic": topic,
            "count": len(ids),
            **({"schema": {"type": "PROTOBUF"}} if topic.endswith("/protobuf") else {}),
        }
        for topic, ids in produced.items()
        if "/py-" not in topic
    ]
    got = sandbox.java("schema-consume", {"all": consume}, timeout=600)
    received = {c["topic"]: out["messages"] for c, out in zip(consume, got["all"], strict=True)}
    received.update(_python_consume(sandbox, produced))
    return SchemaWorld(sandbox, received, produced)


def _mid(mid: Any) -> str:
    return f"{mid.ledger_id()}:{mid.entry_id()}:{mid.batch_index()}:{mid.partition()}"


def _python_records() -> tuple[Any, Any]:
    from pulsar.schema import Array, Double, Long, Record, String

    class Reading(Record):
        _avro_namespace = "sensors"
        sensor = String(required=True)
        value = Double(required=True)
        seq = Long(required=True)
        labels = Array(String())

    class Note(Record):
        text = String()
        n = Long()

    return Reading, Note


def _python_produce(sandbox: Sandbox) -> dict[str, list[str]]:
    from pulsar.schema import AvroSchema, JsonSchema, ProtobufNativeSchema, StringSchema

    from pulsarctl_py.proto import schema_storage_pb2 as sspb

    reading, note = _python_records()
    client = sandbox.client()
    out: dict[str, list[str]] = {}
    try:
        cases = [
            (
                "py-avro",
                AvroSchema(reading),
                [reading(sensor=f"s{i}", value=i / 4, seq=i, labels=["x"] * i) for i in range(3)],
            ),
            ("py-json", JsonSchema(note), [note(text=f"t{i}", n=i) for i in range(3)]),
            ("py-string", StringSchema(), ["één", "two"]),
            (
                "py-protobuf-native",
                ProtobufNativeSchema(sspb.IndexEntry),
                [
                    sspb.IndexEntry(
                        version=i,
                        hash=bytes([i]),
                        position=sspb.PositionInfo(ledgerId=i, entryId=2),
                    )
                    for i in range(2)
                ],
            ),
        ]
        for name, schema, values in cases:
            topic = SchemaWorld.topic(name)
            producer = client.create_producer(topic, schema=schema, batching_enabled=False)
            ids = []
            for v in values:
                mid = producer.send(v)
                ids.append(
                    f"{mid.ledger_id()}:{mid.entry_id()}:{mid.batch_index()}:{mid.partition()}"
                )
            producer.close()
            out[topic] = ids
    finally:
        client.close()
    return out


def _python_consume(
    sandbox: Sandbox, produced: dict[str, list[str]]
) -> dict[str, list[dict[str, Any]]]:
    from google.protobuf.json_format import MessageToDict
    from pulsar import ConsumerType, InitialPosition
    from pulsar.schema import AvroSchema, JsonSchema, ProtobufNativeSchema, StringSchema

    from pulsarctl_py.proto import schema_storage_pb2 as sspb

    reading, note = _python_records()
    schemas = {
        "py-avro": AvroSchema(reading),
        "py-json": JsonSchema(note),
        "py-string": StringSchema(),
        "py-protobuf-native": ProtobufNativeSchema(sspb.IndexEntry),
    }
    client = sandbox.client()
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        for name, schema in schemas.items():
            topic = SchemaWorld.topic(name)
            consumer = client.subscribe(
                topic,
                "ledgerctl-py-consume",
                schema=schema,
                consumer_type=ConsumerType.Exclusive,
                initial_position=InitialPosition.Earliest,
            )
            got = []
            for _ in produced[topic]:
                msg = consumer.receive(timeout_millis=60_000)
                value = msg.value()
                if isinstance(value, str):
                    doc: Any = value
                elif hasattr(value, "DESCRIPTOR"):
                    doc = MessageToDict(value, preserving_proto_field_name=True)
                else:
                    doc = {k: getattr(value, k) for k in type(value)._fields}
                mid = msg.message_id()
                got.append(
                    {
                        "message_id": _mid(mid),
                        "value": doc,
                    }
                )
            consumer.close()
            out[topic] = got
    finally:
        client.close()
    return out
