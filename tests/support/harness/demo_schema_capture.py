"""Capture the demo's Avro topic from a real broker: entries, schema index, schema ledgers.

    python -m tests.support.harness.demo_schema_capture SANDBOX_DIR OUT_DIR

``SANDBOX_DIR`` is a running ``scripts/sandbox`` cluster (Pulsar 4.0.7). The official Java
client (scripts/java/SchemaClient.java) produces :data:`TOPIC` with an Avro schema in two
versions (version 1 adds fields with defaults), the topic is unloaded (its ledger closed),
and what the broker and the bookies stored is copied, byte for byte:

* ``NNNNNN.bin``: each stored entry of the topic, in topic order, without the BookKeeper
  header and without the broker entry metadata prefix the sandbox's interceptors add, so
  it is exactly the producer's ``headersAndPayload`` as the other demo entries are;
* ``schemas/index.bin``: the value of the metadata store's ``/schemas/<tenant>/<ns>/<topic>``
  (a ``SchemaLocator``) as the broker wrote it;
* ``schemas/NNNNNN.bin``: version N's schema ledger entry (a ``SchemaEntry``) without its
  BookKeeper header;
* ``capture.json``: where each file came from (the sandbox's ledger ids and positions,
  SHA-256 of every file), what was sent, what the official consumer received with
  AUTO_CONSUME, what ``pulsar-admin schemas get`` prints (the admin client's answers it
  prints) and the admin REST API's schema answers.

The bytes are read with ledgerctl's readers from the running bookies, their BookKeeper
digests (CRC32C) verified, so they are what BookKeeper stored.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

TOPIC = "persistent://public/default/shop-orders"

CUSTOMER = {
    "type": "record",
    "name": "Customer",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "email", "type": ["null", "string"], "default": None},
    ],
}
ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "price", "type": "double"},
        {"name": "customer", "type": CUSTOMER},
    ],
}
#: version 1: fields added with defaults (the namespace's FULL compatibility allows it)
ORDER_V2 = {
    **ORDER_V1,
    "fields": [
        *ORDER_V1["fields"],
        {"name": "qty", "type": "int", "default": 1},
        {"name": "coupon", "type": ["null", "string"], "default": None},
    ],
}


def _order(
    i: int, item: str, price: float, name: str, email: str | None, **v2: Any
) -> dict[str, Any]:
    """An order in Avro's JSON encoding (a union's branch named)."""
    doc: dict[str, Any] = {
        "id": i,
        "item": item,
        "price": price,
        "customer": {"name": name, "email": None if email is None else {"string": email}},
    }
    if v2:
        doc["qty"] = v2["qty"]
        coupon = v2.get("coupon")
        doc["coupon"] = None if coupon is None else {"string": coupon}
    return doc


def specs() -> list[dict[str, Any]]:
    """What is produced, one message per entry: four orders with version 0, then three
    with version 1 (a second producer, with the new schema; order 42 again, corrected)."""
    v1 = [
        _order(40, "keyboard", 49.9, "ada", "ada@example.com"),
        _order(41, "mouse", 19.5, "grace", None),
        _order(42, "monitor", 199.0, "linus", "linus@example.com"),
        _order(43, "cable", 5.25, "ada", "ada@example.com"),
    ]
    v2 = [
        _order(44, "desk", 320.0, "grace", None, qty=1),
        _order(42, "monitor", 199.0, "linus", "linus@example.com", qty=2),
        _order(45, "lamp", 35.0, "ada", "ada@example.com", qty=3, coupon="WINTER"),
    ]
    return [
        {
            "topic": TOPIC,
            "batching": False,
            "schema": {"type": "AVRO", "definition": json.dumps(ORDER_V1)},
            "messages": [{"key": f"order-{v['id']}", "value": v} for v in v1],
        },
        {
            "topic": TOPIC,
            "batching": False,
            "schema": {"type": "AVRO", "definition": json.dumps(ORDER_V2)},
            "messages": [{"key": f"order-{v['id']}", "value": v} for v in v2],
        },
    ]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _payload(source: Any, ledger_id: int, entry_id: int) -> tuple[bytes, bytes]:
    """(the entry after its BookKeeper header, the same without broker entry metadata)."""
    from pulsarctl_py.decoders import Depth
    from pulsarctl_py.decoders.pulsar import BrokerEntryMetadataLayer

    view = source.ledger(ledger_id)
    for entry in source.entries(view, entry_id, entry_id, depth=Depth.ENTRY):
        bk = entry.layers[0]
        assert bk.name == "bookie-entry" and bk.check is not None and bk.check.ok, entry.problems
        stored = bytes(entry.data[bk.offset + bk.length :])
        client = stored
        magic, size = BrokerEntryMetadataLayer.HEADER.unpack_from(stored, 0)
        if magic == BrokerEntryMetadataLayer.MAGIC:
            client = stored[BrokerEntryMetadataLayer.HEADER.size + size :]
        return stored, client
    raise RuntimeError(f"entry {ledger_id}:{entry_id} was not read")


def capture(sandbox_dir: Path, out: Path) -> dict[str, Any]:
    from pulsarctl_py import precedence
    from pulsarctl_py.decoders.schemas import parse_locator
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.schemas import read_topic_schemas, topic_schema_name
    from pulsarctl_py.stores.metadata import read_managed_ledger
    from tests.support.fixtures.sandbox import Sandbox

    box = Sandbox(sandbox_dir)
    sent = specs()
    produced = box.java("schema-produce", {"all": sent}, timeout=600)["all"]
    ids = [mid for done in produced for mid in done["message_ids"]]
    received = box.java("schema-consume", {"topic": TOPIC, "count": len(ids)})["messages"]
    admin_get = box.java("schema-admin-get", {"web_url": box.web_url, "topic": TOPIC})
    name = topic_schema_name(TOPIC)
    rest = {
        "schema": box.admin("GET", f"/schemas/{name}/schema"),
        "schemas": box.admin("GET", f"/schemas/{name}/schemas"),
    }
    box.unload(TOPIC)  # the broker closes the topic's ledger: its last entry is final

    (out / "schemas").mkdir(parents=True, exist_ok=False)
    doc: dict[str, Any] = {
        "topic": TOPIC,
        "pulsar_version": box.state.get("pulsar_version"),
        "produced_by": "the official Java client 4.0.7 (tests/java/SchemaClient.java "
        "schema-produce: Apache Avro's writer, AUTO_PRODUCE_BYTES with the schema)",
        "sent": sent,
        "message_ids": ids,
        "received": received,
        "pulsar_admin_schemas_get": admin_get,
        "rest": rest,
    }
    with (
        precedence.flags(bookkeeper_metadata_url=box.bookkeeper_metadata_url),
        LedgerSource.open(box.metadata_url, [], need_metadata=True) as source,
    ):
        path = f"/schemas/{name}"
        node = source.metadata.get(path)
        assert node is not None and node.data
        index = bytes(node.data)
        (out / "schemas" / "index.bin").write_bytes(index)
        doc["schema_index"] = {"path": path, "file": "schemas/index.bin", "sha256": _sha(index)}
        locator = parse_locator(index)
        assert not locator.problems, locator.problems
        versions = []
        schemas = read_topic_schemas(source, TOPIC, required=True)
        assert schemas.ok, schemas.problems
        for e in locator.index:
            assert e.version is not None and e.ledger_id is not None and e.entry_id is not None
            stored, _ = _payload(source, e.ledger_id, e.entry_id)
            file = f"schemas/{e.version:06d}.bin"
            (out / file).write_bytes(stored)
            versions.append(
                {
                    "version": e.version,
                    "file": file,
                    "sandbox_position": [e.ledger_id, e.entry_id],
                    "sha256": _sha(stored),
                }
            )
        doc["schema_versions"] = versions
        record = read_managed_ledger(source.metadata, TOPIC, with_cursors=False)
        assert record is not None
        entries = []
        n = 0
        for ledger_id in record.ledger_ids:
            view = source.ledger(ledger_id)
            last = view.readable_last
            for entry_id in range(0 if last is None else last + 1):
                stored, client = _payload(source, ledger_id, entry_id)
                file = f"{n:06d}.bin"
                (out / file).write_bytes(client)
                entries.append(
                    {
                        "file": file,
                        "sandbox_position": [ledger_id, entry_id],
                        "sha256": _sha(client),
                        "broker_entry_metadata_stripped": len(stored) - len(client),
                    }
                )
                n += 1
        doc["entries"] = entries
    (out / "capture.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sandbox_dir", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    doc = capture(args.sandbox_dir, args.out)
    print(json.dumps({"entries": len(doc["entries"]), "versions": len(doc["schema_versions"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
