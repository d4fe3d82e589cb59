"""A tiny Hadoop SequenceFile v6 writer for the reader's round-trip tests.

It writes what Hadoop's ``SequenceFile.Writer``, ``RecordCompressWriter`` and
``BlockCompressWriter`` write (zlib ``DefaultCodec``), with the block boundaries and sync
markers the caller chooses, and a MapFile's (data, index) pair the way
``MapFile.Writer.append`` indexes keys.
"""

from __future__ import annotations

import itertools
import struct
import zlib

from pulsarctl_py.stores.tiered.seqfile import DEFAULT_CODEC, write_vlong

LONG = "org.apache.hadoop.io.LongWritable"
BYTES = "org.apache.hadoop.io.BytesWritable"


def text(s: str) -> bytes:
    raw = s.encode()
    return write_vlong(len(raw)) + raw


def header(key_class: str, value_class: str, compression: str, sync: bytes) -> bytes:
    compressed = compression != "NONE"
    out = b"SEQ\x06" + text(key_class) + text(value_class)
    out += bytes([compressed, compression == "BLOCK"])
    if compressed:
        out += text(DEFAULT_CODEC)
    return out + struct.pack(">i", 0) + sync


def long_key(k: int) -> bytes:
    return struct.pack(">q", k)


def bytes_value(v: bytes) -> bytes:
    return struct.pack(">i", len(v)) + v


def write(
    records: list[tuple[bytes, bytes]],
    compression: str,
    sync: bytes = bytes(range(16)),
    *,
    breaks: set[int] = frozenset(),  # type: ignore[assignment]
    key_class: str = LONG,
    value_class: str = BYTES,
) -> tuple[bytes, list[int]]:
    """The file, and the position each record was appended at (what ``MapFile`` indexes:
    a record's start, the sync marker written before it, or its block's start).
    ``breaks``: record indexes before which a sync marker (RECORD, NONE) or a new block
    (BLOCK) starts."""
    out = bytearray(header(key_class, value_class, compression, sync))
    positions: list[int] = []
    if compression == "BLOCK":
        bounds = [*sorted({0, *(b for b in breaks if 0 < b < len(records))}), len(records)]
        for a, b in itertools.pairwise(bounds):
            block = records[a:b]
            if not block:
                continue
            positions.extend([len(out)] * len(block))
            out.extend(struct.pack(">i", -1) + sync + write_vlong(len(block)))
            for part in (
                b"".join(write_vlong(len(k)) for k, _ in block),
                b"".join(k for k, _ in block),
                b"".join(write_vlong(len(v)) for _, v in block),
                b"".join(v for _, v in block),
            ):
                packed = zlib.compress(part)
                out.extend(write_vlong(len(packed)) + packed)
        return bytes(out), positions
    for i, (k, v) in enumerate(records):
        positions.append(len(out))
        if i in breaks:
            out.extend(struct.pack(">i", -1) + sync)
        body = zlib.compress(v) if compression == "RECORD" else v
        out.extend(struct.pack(">ii", len(k) + len(body), len(k)) + k + body)
    return bytes(out), positions


def mapfile(
    entries: dict[int, bytes], compression: str, interval: int = 128, **kw: object
) -> tuple[bytes, bytes]:
    """(data, index) of a MapFile of LongWritable -> BytesWritable, indexed as
    MapFile.Writer does: the first key, then every ``interval`` keys where the offset
    moved."""
    keys = sorted(entries)
    data, offsets = write([(long_key(k), bytes_value(entries[k])) for k in keys], compression, **kw)
    index: list[tuple[bytes, bytes]] = []
    last_count, last_pos = None, -1
    for n, (k, pos) in enumerate(zip(keys, offsets, strict=True)):
        if (last_count is None or n >= last_count + interval) and pos > last_pos:
            index.append((long_key(k), long_key(pos)))
            last_count, last_pos = n, pos
    idx, _ = write(index, "BLOCK", value_class=LONG)
    return data, idx
