"""A tiny writer of the jcloud offloader's objects, for round trips and damage tests.

It lays entries out as ``BlockAwareSegmentInputStreamImpl`` does (block size
``min(maxBlockSize, remaining entries * 12 + remaining bytes + 128)``, records until the
next one does not fit, then ``FE DC DE AD`` padding) and writes the index as
``OffloadIndexBlockImpl.toStream`` does, with the ledger metadata as
``OffloadUtils.buildLedgerMetadataFormat`` builds it (CLOSED, no password). The golden
objects in tests/data/offload/s3 are the real broker's; this writer is checked against
them (tests/stores/tiered/test_jcloud_golden.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.decoders.ledger_metadata import LedgerMetadata, LedgerState, to_format
from pulsarctl_py.stores.tiered.jcloud import (
    BLOCK_PADDING,
    FORMAT_VERSION,
    FORMAT_VERSION_KEY,
    HEADER_LENGTH,
    RECORD_HEADER,
    BlockHeader,
    IndexEntry,
    ObjectHead,
    data_key,
    encode_index,
    index_key,
)


def metadata_bytes(entries: list[bytes], *, ctime: int = 1_767_225_600_000) -> bytes:
    md = LedgerMetadata(
        ensemble_size=2,
        write_quorum_size=2,
        ack_quorum_size=2,
        state=LedgerState.CLOSED,
        ensembles={0: ["127.0.0.1:3181", "127.0.0.1:3182"]},
        last_entry_id=len(entries) - 1,
        length=sum(len(e) for e in entries),
        digest_type=DigestType.CRC32C,
        ctime=ctime,
        custom_metadata={"application": b"pulsar", "component": b"managed-ledger"},
    )
    msg = to_format(md, include_ctoken=False)
    msg.ClearField("password")
    return msg.SerializeToString()


def write_ledger(
    entries: list[bytes], max_block_size: int = 64 << 20, metadata: bytes | None = None
) -> tuple[bytes, bytes, list[IndexEntry]]:
    """``(data object, index object, blocks)`` for a closed ledger holding ``entries``;
    ``metadata``: the embedded LedgerMetadataFormat bytes (default: made up)."""
    data = bytearray()
    blocks: list[IndexEntry] = []
    remaining = sum(len(e) for e in entries)
    at = 0
    while at < len(entries):
        size = min(
            max_block_size, (len(entries) - at) * RECORD_HEADER.size + remaining + HEADER_LENGTH
        )
        blocks.append(IndexEntry(at, len(blocks) + 1, len(data)))
        block = bytearray(BlockHeader(HEADER_LENGTH, size, at).encode())
        while at < len(entries) and len(block) + RECORD_HEADER.size + len(entries[at]) <= size:
            block += RECORD_HEADER.pack(len(entries[at]), at) + entries[at]
            remaining -= len(entries[at])
            at += 1
        if blocks[-1].first_entry_id == at:
            raise ValueError(f"entry {at} does not fit in a block of {max_block_size} bytes")
        pad = size - len(block)
        block += (BLOCK_PADDING * (pad // 4 + 1))[:pad]
        data += block
    md = metadata_bytes(entries) if metadata is None else metadata
    index = encode_index(md, blocks, len(data))
    return bytes(data), index, blocks


@dataclass
class MemoryObjects:
    """An ObjectSource over a dict, counting ranged reads (for parser tests only; the S3
    path is tested against a real S3 server)."""

    objects: dict[str, tuple[bytes, dict[str, str]]] = field(default_factory=dict)
    name: str = "memory"
    reads: list[tuple[str, int, int]] = field(default_factory=list)

    def put(self, key: str, data: bytes, version: str | None = FORMAT_VERSION) -> None:
        meta = {} if version is None else {FORMAT_VERSION_KEY: version}
        self.objects[key] = (data, meta)

    def put_ledger(
        self, uuid: str, ledger_id: int, data: bytes, index: bytes, version: str | None = "1"
    ) -> None:
        self.put(data_key(uuid, ledger_id), data, version)
        self.put(index_key(uuid, ledger_id), index, version)

    def head(self, key: str) -> ObjectHead:
        from pulsarctl_py.stores.tiered.jcloud import OffloadObjectMissing

        if key not in self.objects:
            raise OffloadObjectMissing(f"{key}: no such object")
        data, meta = self.objects[key]
        return ObjectHead(len(data), meta)

    def read(self, key: str, start: int, length: int) -> bytes:
        self.reads.append((key, start, length))
        return self.objects[key][0][start : start + length]
