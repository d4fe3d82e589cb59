"""Decode throughput of ledgerctl against the libraries it is built on (issue: decoder).

Generates stored Pulsar entries with ledgerctl's own builders (deterministic seed, codecs
NONE/LZ4/ZLIB/ZSTD/SNAPPY, batches of 1-100 messages with keys, properties and event
times), then measures on the same bytes in the same run:

* full decode: ``decode_entry(data)`` with the default options (CRC32C verified, payload
  decompressed, batch split, Message objects built), reading each message's value length;
* raw libraries: CRC32C over the checksummed span plus decompression of the payload with
  the codec library called directly, offsets computed before the clock starts;
* bare parse: ``SingleMessageMetadata.FromString`` of every batch record, slices made
  before the clock starts;
* reused-message parse (the faster bare baseline, reported beside the target): one
  ``SingleMessageMetadata`` object, ``ParseFromString`` (Clear + Merge) of every record
  into it, so no message object is allocated per record;
* python floor (context, not a target): the raw libraries plus the least a pure-Python
  batch split does (size, FromString, value slice per record, no objects kept).

Two sets: small messages (at least 100k entries; a pool of distinct entries is repeated,
and every repetition is decoded in full) and values of 16 KiB or more. Prints one JSON
object. MB is 10**6 bytes of stored entry (what is read from the bookie), the same
denominator for the decoder and for the libraries.

    python bench/decode.py            # the figures in docs/performance.md
    python bench/decode.py --quick    # smoke run, seconds
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import struct
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import cramjam
import crc32c
import lz4.block
import zstandard
from _machine import machine  # bench/ is on sys.path when a bench script runs

from pulsarctl_py.decoders.codecs import compress
from pulsarctl_py.decoders.entry import decode_entry
from pulsarctl_py.decoders.payload import build_batch
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.proto import pulsar_api_pb2 as api

SEED = 20240601
CODECS = {
    "NONE": api.NONE,
    "LZ4": api.LZ4,
    "ZLIB": api.ZLIB,
    "ZSTD": api.ZSTD,
    "SNAPPY": api.SNAPPY,
}
CODEC_NAMES = {number: name for name, number in CODECS.items()}
SMALL_VALUE_TARGET = 0.25  # full decode messages/s over bare-parse messages/s
LARGE_VALUE_TARGET = 0.50  # full decode MB/s over raw-library MB/s
LARGE_VALUE_MIN = 16 * 1024
#: CPU time of this process: on a shared machine, time spent waiting for a CPU would
#: count against whichever measurement happened to run then. The code is single-threaded.
CLOCK = time.process_time
REFERENCE_REPEATS = 2  # the references are short next to the decoder: best of more calls
U32 = struct.Struct(">I")

WORDS = (
    "order customer amount currency status created updated shipped pending paid refunded "
    "warehouse region eu-west us-east ap-south sku quantity price discount total tax "
    "account session device mobile desktop click view cart checkout search query result "
    "latency error retry timeout success tenant namespace topic partition ledger entry"
).split()


@dataclass(slots=True)
class SetSpec:
    """How one generated set looks."""

    name: str
    entries: int  # entries decoded (pool entries repeated)
    pool: int  # distinct entries generated
    batch: tuple[int, int]  # messages per entry, inclusive
    value: tuple[int, int]  # value bytes, inclusive


@dataclass(slots=True)
class PoolEntry:
    """One distinct generated entry and what the references need, computed untimed."""

    data: bytes
    codec: int
    messages: int
    value_bytes: int
    crc_span: memoryview  # what the 0x0e01 CRC32C covers
    payload: memoryview  # the stored (compressed) payload
    uncompressed: int
    smms: list[bytes]  # the serialized SingleMessageMetadata of each record


# -- generation ---------------------------------------------------------------------------


def _text(rng: random.Random, size: int) -> bytes:
    """JSON-like text of exactly ``size`` bytes: compressible, not trivially so."""
    parts: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        piece = f'"{word}":"{rng.choice(WORDS)}-{rng.randrange(100000)}",'
        parts.append(piece)
        length += len(piece)
    return "".join(parts).encode("ascii")[:size]


def _value_size(rng: random.Random, low: int, high: int) -> int:
    """Log-uniform between low and high: many small values, some large ones."""
    return min(high, max(low, round(low * (high / low) ** rng.random())))


def _smm(rng: random.Random, seq: int, publish_time: int) -> Any:
    smm = api.SingleMessageMetadata(sequence_id=seq)
    if rng.random() < 0.8:
        smm.partition_key = f"{rng.choice(WORDS)}-{rng.randrange(1_000_000)}"
    for i in range(rng.choice((0, 0, 1, 2, 3, 4))):
        kv = smm.properties.add()
        kv.key = ("trace-id", "source", "schema", "tenant", "region")[i]
        kv.value = f"{rng.getrandbits(64):016x}" if i == 0 else rng.choice(WORDS)
    if rng.random() < 0.5:
        smm.event_time = publish_time - rng.randrange(1000)
    return smm


def _entry(rng: random.Random, spec: SetSpec, codec: int, seq: int) -> tuple[bytes, int, int]:
    count = rng.randint(*spec.batch)
    publish_time = 1_717_200_000_000 + seq
    records = []
    value_bytes = 0
    for i in range(count):
        value = _text(rng, _value_size(rng, *spec.value))
        value_bytes += len(value)
        records.append((_smm(rng, seq + i, publish_time), value))
    plain = build_batch(records)
    md = api.MessageMetadata(
        producer_name=f"bench-producer-{rng.randrange(8)}",
        sequence_id=seq,
        publish_time=publish_time,
        num_messages_in_batch=count,
        highest_sequence_id=seq + count - 1,
    )
    if codec != api.NONE:
        md.compression = codec
        md.uncompressed_size = len(plain)
    payload = compress(codec, plain) if codec != api.NONE else plain
    return build_entry(md, payload, checksum=True), count, value_bytes


def _pool_entry(data: bytes, codec: int, messages: int, value_bytes: int) -> PoolEntry:
    """Offsets and slices for the reference loops, found without ledgerctl's decoder."""
    mv = memoryview(data)
    _require(data[:2] == b"\x0e\x01", "generated entries start with the 0x0e01 checksum")
    (md_size,) = U32.unpack_from(data, 6)
    md = api.MessageMetadata.FromString(mv[10 : 10 + md_size])
    _require(md.compression == codec, "the metadata names the codec")
    payload = mv[10 + md_size :]
    size = md.uncompressed_size if codec != api.NONE else len(payload)
    plain = memoryview(_raw_decompress(codec, payload, size))
    smms: list[bytes] = []
    pos = 0
    for _ in range(md.num_messages_in_batch):
        (smm_size,) = U32.unpack_from(plain, pos)
        raw = bytes(plain[pos + 4 : pos + 4 + smm_size])
        smms.append(raw)
        pos += 4 + smm_size + api.SingleMessageMetadata.FromString(raw).payload_size
    _require(pos == len(plain) == size, "the batch records fill the payload")
    return PoolEntry(data, codec, messages, value_bytes, mv[6:], payload, size, smms)


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"bench/decode.py: expected: {what}")


def generate(spec: SetSpec, seed: int) -> tuple[list[PoolEntry], list[int]]:
    """The distinct entries, and the order in which ``spec.entries`` of them are decoded."""
    rng = random.Random(f"{seed}-{spec.name}")
    pool: list[PoolEntry] = []
    codecs = list(CODECS.values())
    seq = 0
    for i in range(spec.pool):
        codec = codecs[i % len(codecs)]
        data, count, value_bytes = _entry(rng, spec, codec, seq)
        seq += count
        pool.append(_pool_entry(data, codec, count, value_bytes))
    order = [i % spec.pool for i in range(spec.entries)]
    rng.shuffle(order)
    return pool, order


# -- the measurements -----------------------------------------------------------------------


def _raw_decompress(codec: int, payload: memoryview, size: int) -> bytes | memoryview:
    if codec == api.NONE:
        return payload
    return RAW_DECOMPRESS[codec](payload, size)


_ZSTD = zstandard.ZstdDecompressor()
RAW_DECOMPRESS: dict[int, Callable[[memoryview, int], Any]] = {
    api.LZ4: lambda p, n: lz4.block.decompress(p, uncompressed_size=n),
    api.ZLIB: lambda p, n: zlib.decompress(p, bufsize=n),
    api.ZSTD: lambda p, n: _ZSTD.decompress(p, max_output_size=n),
    api.SNAPPY: lambda p, n: cramjam.snappy.decompress_raw(p),
}


def time_full(pool: Sequence[PoolEntry], order: Sequence[int]) -> tuple[float, int, int]:
    """decode_entry over every entry in ``order``: seconds, messages, value bytes."""
    datas = [pool[i].data for i in order]
    messages = value_bytes = 0
    start = CLOCK()
    for data in datas:
        entry = decode_entry(data)
        for m in entry.messages:
            value_bytes += len(m.value)
        messages += len(entry.messages)
    elapsed = CLOCK() - start
    return elapsed, messages, value_bytes


def time_raw(pool: Sequence[PoolEntry], order: Sequence[int]) -> tuple[float, int]:
    """CRC32C over the checksummed span and decompression of the payload, libraries only."""
    jobs = [(pool[i].crc_span, pool[i].codec, pool[i].payload, pool[i].uncompressed) for i in order]
    lib_crc = crc32c.crc32c
    raw = RAW_DECOMPRESS
    none = api.NONE
    total = 0
    start = CLOCK()
    for span, codec, payload, size in jobs:
        total ^= lib_crc(span)
        if codec != none:
            total ^= len(raw[codec](payload, size))
    elapsed = CLOCK() - start
    return elapsed, total


def time_bare(
    pool: Sequence[PoolEntry], order: Sequence[int], parse: Callable[[bytes], Any] | None = None
) -> tuple[float, int]:
    """SingleMessageMetadata.FromString (or ``parse``) of every record: seconds, records."""
    per_entry = [pool[i].smms for i in order]
    parse = parse or api.SingleMessageMetadata.FromString
    count = 0
    start = CLOCK()
    for smms in per_entry:
        for raw in smms:
            parse(raw)
        count += len(smms)
    elapsed = CLOCK() - start
    return elapsed, count


def time_bare_reused(pool: Sequence[PoolEntry], order: Sequence[int]) -> tuple[float, int]:
    """One SingleMessageMetadata object, ``ParseFromString`` (Clear + Merge) per record.

    The faster bare baseline: no message object is allocated per record.
    """
    return time_bare(pool, order, api.SingleMessageMetadata().ParseFromString)


def time_floor(pool: Sequence[PoolEntry], order: Sequence[int]) -> tuple[float, int]:
    """The least any pure-Python decoder does: the raw libraries, then split each batch.

    Per record: read the size, FromString the SingleMessageMetadata, slice the value. No
    checks, no objects kept. Not a target; it shows how close the targets can be reached.
    """
    jobs = [
        (pool[i].crc_span, pool[i].codec, pool[i].payload, pool[i].uncompressed, pool[i].messages)
        for i in order
    ]
    lib_crc = crc32c.crc32c
    raw = RAW_DECOMPRESS
    none = api.NONE
    parse = api.SingleMessageMetadata.FromString
    unpack = U32.unpack_from
    count = 0
    start = CLOCK()
    for span, codec, payload, size, messages in jobs:
        lib_crc(span)
        plain = payload if codec == none else raw[codec](payload, size)
        if type(plain) is not bytes:
            plain = memoryview(plain)
        pos = 0
        for _ in range(messages):
            (smm_size,) = unpack(plain, pos)
            pos += 4
            smm = parse(plain[pos : pos + smm_size])
            pos += smm_size
            value_size = smm.payload_size
            count += len(plain[pos : pos + value_size]) >= 0
            pos += value_size
    elapsed = CLOCK() - start
    return elapsed, count


def check(pool: Sequence[PoolEntry]) -> None:
    """Every generated entry decodes cleanly to its messages and values (not timed)."""
    for item in pool:
        entry = decode_entry(item.data)
        if not entry.ok or entry.problems or len(entry.messages) != item.messages:
            raise SystemExit(f"generated entry does not decode cleanly: {entry.problems}")
        if sum(len(m.value) for m in entry.messages if m.value is not None) != item.value_bytes:
            raise SystemExit("generated entry decodes to other values")


def best_of(runs: int, timers: dict[str, tuple[Callable[[], Any], int]]) -> dict[str, Any]:
    """Run the timers in turn ``runs`` times (each ``repeats`` times in a row); keep the
    fastest result of each (results are tuples, seconds first). Interleaving spreads any
    load from other processes over the decoder and the references alike."""
    best: dict[str, Any] = {}
    for _ in range(runs):
        for name, (fn, repeats) in timers.items():
            for _ in range(repeats):
                result = fn()
                if name not in best or result[0] < best[name][0]:
                    best[name] = result
    return best


def measure(
    spec: SetSpec, pool: list[PoolEntry], order: list[int], runs: int, by_codec: bool
) -> dict[str, Any]:
    stored = sum(len(pool[i].data) for i in order)
    expected_messages = sum(pool[i].messages for i in order)
    expected_values = sum(pool[i].value_bytes for i in order)
    best = best_of(
        runs,
        {
            "full": (lambda: time_full(pool, order), 1),
            "raw": (lambda: time_raw(pool, order), REFERENCE_REPEATS),
            "bare": (lambda: time_bare(pool, order), REFERENCE_REPEATS),
            "reused": (lambda: time_bare_reused(pool, order), REFERENCE_REPEATS),
            "floor": (lambda: time_floor(pool, order), REFERENCE_REPEATS),
        },
    )
    full_s, messages, value_bytes = best["full"]
    if messages != expected_messages or value_bytes != expected_values:
        raise SystemExit(f"{spec.name}: decoded {messages} messages, generated {expected_messages}")
    raw_s = best["raw"][0]
    bare_s, smms = best["bare"]
    reused_s = best["reused"][0]
    floor_s = best["floor"][0]
    mb = stored / 1e6
    out: dict[str, Any] = {
        "inputs": {
            "entries": len(order),
            "distinct_entries": len(pool),
            "messages": messages,
            "stored_bytes": stored,
            "value_bytes": value_bytes,
            "batch_size": list(spec.batch),
            "value_size": list(spec.value),
            "codec_mix": dict(Counter(CODEC_NAMES[pool[i].codec] for i in order)),
        },
        "full_decode": {
            "seconds": round(full_s, 4),
            "messages_per_s": round(messages / full_s),
            "mb_per_s": round(mb / full_s, 1),
            "value_mb_per_s": round(value_bytes / 1e6 / full_s, 1),
            "entries_per_s": round(len(order) / full_s),
        },
        "raw_libraries": {
            "what": "crc32c.crc32c over the checksummed span + codec library decompress",
            "seconds": round(raw_s, 4),
            "mb_per_s": round(mb / raw_s, 1),
            "messages_per_s": round(messages / raw_s),
        },
        "bare_parse": {
            "what": "SingleMessageMetadata.FromString of each batch record",
            "seconds": round(bare_s, 4),
            "messages_per_s": round(smms / bare_s),
        },
        "reused_message_parse": {
            "what": "one SingleMessageMetadata, ParseFromString of each batch record into it",
            "seconds": round(reused_s, 4),
            "messages_per_s": round(smms / reused_s),
        },
        "python_floor": {
            "what": "raw libraries + per record: size, FromString, value slice (no objects)",
            "seconds": round(floor_s, 4),
            "messages_per_s": round(messages / floor_s),
            "mb_per_s": round(mb / floor_s, 1),
        },
        "ratios": {
            "mb_per_s_vs_raw_libraries": round(raw_s / full_s, 3),
            "messages_per_s_vs_bare_parse": round(bare_s / full_s, 3),
            "messages_per_s_vs_reused_message_parse": round(reused_s / full_s, 3),
            "python_floor_mb_per_s_vs_raw_libraries": round(raw_s / floor_s, 3),
            "python_floor_messages_per_s_vs_bare_parse": round(bare_s / floor_s, 3),
        },
    }
    if by_codec:
        table: dict[str, Any] = {}
        for number, name in CODEC_NAMES.items():
            sub = [i for i in order if pool[i].codec == number]
            if not sub:
                continue
            sub_mb = sum(len(pool[i].data) for i in sub) / 1e6
            sub_best = best_of(
                runs,
                {
                    "full": (lambda sub=sub: time_full(pool, sub), 1),
                    "raw": (lambda sub=sub: time_raw(pool, sub), REFERENCE_REPEATS),
                },
            )
            f_s, r_s = sub_best["full"][0], sub_best["raw"][0]
            table[name] = {
                "full_decode_mb_per_s": round(sub_mb / f_s, 1),
                "raw_libraries_mb_per_s": round(sub_mb / r_s, 1),
                "ratio": round(r_s / f_s, 3),
            }
        out["by_codec"] = table
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--entries", type=int, help="small-message entries (default 100000)")
    parser.add_argument("--large-entries", type=int, help="16 KiB+ entries (default 2000)")
    parser.add_argument("--runs", type=int, help="best of N runs per measurement (default 3)")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    quick = args.quick
    small = SetSpec(
        "small",
        entries=args.entries or (2000 if quick else 100_000),
        pool=200 if quick else 4000,
        batch=(1, 100),
        value=(16, 1024),
    )
    large = SetSpec(
        "large",
        entries=args.large_entries or (40 if quick else 2000),
        pool=10 if quick else 60,
        batch=(1, 8),
        value=(LARGE_VALUE_MIN, 256 * 1024),
    )
    runs = args.runs or (1 if quick else 3)
    small.pool = min(small.pool, small.entries)
    large.pool = min(large.pool, large.entries)

    t0 = time.perf_counter()  # wall clock: generation is not measured against anything
    sets = {spec.name: (spec, *generate(spec, args.seed)) for spec in (small, large)}
    generated = time.perf_counter() - t0  # (wall clock)
    for _spec, pool, _order in sets.values():
        check(pool)
    gc.collect()
    results = {
        name: measure(spec, pool, order, runs, by_codec=name == "large")
        for name, (spec, pool, order) in sets.items()
    }
    small_ratio = results["small"]["ratios"]["messages_per_s_vs_bare_parse"]
    large_ratio = results["large"]["ratios"]["mb_per_s_vs_raw_libraries"]
    reused_ratio = results["small"]["ratios"]["messages_per_s_vs_reused_message_parse"]
    report = {
        "benchmark": "decode",
        "command": " ".join(["python", "bench/decode.py", *(argv or sys.argv[1:])]),
        "quick": quick,
        "seed": args.seed,
        "runs": runs,
        "clock": "time.process_time (CPU seconds of this single-threaded process)",
        "machine": machine(),
        "generation_seconds": round(generated, 2),
        "small_messages": results["small"],
        "large_values": results["large"],
        "reported": {
            "small_messages_vs_reused_message_parse": {
                "metric": "full decode messages/s / reused-message ParseFromString messages/s "
                "(the faster bare baseline; the target is set against the bare parse)",
                "measured": reused_ratio,
            },
        },
        "targets": {
            "small_messages_vs_bare_parse": {
                "metric": "full decode messages/s / bare SingleMessageMetadata parse messages/s",
                "target": SMALL_VALUE_TARGET,
                "measured": small_ratio,
                "pass": small_ratio >= SMALL_VALUE_TARGET,
            },
            "large_values_vs_raw_libraries": {
                "metric": "full decode MB/s / raw libraries (crc32c + decompress) MB/s",
                "target": LARGE_VALUE_TARGET,
                "measured": large_ratio,
                "pass": large_ratio >= LARGE_VALUE_TARGET,
            },
        },
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
