"""Decoded Avro values per second: ledgerctl's value decoding against fastavro's own loop.

    python bench/values.py [--messages 1000000] [--rounds 5] [--block 20000] [--out FILE.json]

The same N Avro values of an orders schema (a long, strings, a nullable double, a nested
record with an array, a bytes field; written with fastavro) are decoded in each round by:

* ``floor``: fastavro's own loop, ``schemaless_reader(BytesIO(value), schema)`` per value,
  the parsed schema reused: the Avro library alone;
* ``values``: ``pulsarctl_py.values.Values.decode`` per message, as inspect and export call
  it: the message's 8-byte ``schema_version`` looked up, the value decoded by fastavro and
  turned into JSON (bytes as base64), the outcome recorded.

Each round times both on the same values in blocks (``--block``, the order alternating),
so that both meet the same load when the machine is shared. Reports min/median/max of each
and the ratio values/floor per round (goal >= 0.5), with the machine's load average.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._machine import machine

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "price", "type": ["null", "double"], "default": None},
        {
            "name": "customer",
            "type": {
                "type": "record",
                "name": "Customer",
                "fields": [
                    {"name": "name", "type": "string"},
                    {"name": "tags", "type": {"type": "array", "items": "string"}},
                ],
            },
        },
        {"name": "code", "type": "bytes"},
    ],
}


def make_values(n: int) -> list[bytes]:
    from fastavro import parse_schema, schemaless_writer

    parsed = parse_schema(ORDER)
    out = []
    for i in range(n):
        buf = io.BytesIO()
        schemaless_writer(
            buf,
            parsed,
            {
                "id": i,
                "item": f"item-{i % 1000}",
                "price": None if i % 3 else i / 4,
                "customer": {"name": f"c{i % 97}", "tags": ["a", "b"][: i % 3]},
                "code": bytes([i % 256, 1]),
            },
        )
        out.append(buf.getvalue())
    return out


def floor(values: list[bytes]) -> float:
    from fastavro import parse_schema, schemaless_reader

    parsed = parse_schema(ORDER)
    t = time.perf_counter()
    for v in values:
        schemaless_reader(io.BytesIO(v), parsed)
    return time.perf_counter() - t


def ledgerctl(values: list[bytes], decoder: Any = None) -> float:
    from pulsarctl_py.decoders.schemas import SchemaType, StoredSchema, version_bytes
    from pulsarctl_py.values import Values

    if decoder is None:
        schema = StoredSchema(
            0, SchemaType.AVRO, 5, json.dumps(ORDER).encode(), {}, False, 0, "", "x"
        )
        decoder = Values([schema])
    version = version_bytes(0)
    t = time.perf_counter()
    for v in values:
        got = decoder.decode(version, v, None)
    elapsed = time.perf_counter() - t
    assert got.decoded, got
    return elapsed


def one_round(values: list[bytes], block: int, decoder: Any) -> tuple[float, float]:
    """(floor seconds, ledgerctl seconds) over all values, the two interleaved by blocks
    (the order alternating), so that both meet the same load of a shared machine."""
    f = v = 0.0
    for n, start in enumerate(range(0, len(values), block)):
        part = values[start : start + block]
        if n % 2:
            v += ledgerctl(part, decoder)
            f += floor(part)
        else:
            f += floor(part)
            v += ledgerctl(part, decoder)
    return f, v


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block", type=int, default=20_000, help="values per timed block")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    values = make_values(args.messages)
    from pulsarctl_py.decoders.schemas import SchemaType, StoredSchema
    from pulsarctl_py.values import Values

    schema = StoredSchema(0, SchemaType.AVRO, 5, json.dumps(ORDER).encode(), {}, False, 0, "", "x")
    decoder = Values([schema])
    runs = []
    for _ in range(args.rounds):
        f, v = one_round(values, args.block, decoder)
        n = args.messages
        runs.append({"floor": n / f, "values": n / v, "ratio": f / v})

    def summary(key: str) -> dict[str, float]:
        xs = [r[key] for r in runs]
        return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}

    report = {
        "messages": args.messages,
        "rounds": args.rounds,
        "block": args.block,
        "floor_values_per_s": summary("floor"),
        "values_per_s": summary("values"),
        "ratio_values_to_floor": summary("ratio"),
        "goal_ratio": 0.5,
        "load_average": os.getloadavg(),
        "machine": machine(),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
