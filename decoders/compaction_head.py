"""What compaction reads of a regular stored bookie entry, without the full decoder's layers.

The broker's compactor (``TwoPhaseCompactor``, through ``RawBatchConverter``) needs of each
entry only its MessageMetadata, where its payload starts, and the raw broker entry metadata;
ledgerctl also checks every integrity layer on the way (the BookKeeper digest and ids, the
producer's CRC32C). :func:`compaction_head` does exactly that for a regular entry of a data
ledger and builds nothing else: no :class:`~.nodes.Layer`, no field dicts for inspect's
JSON, no :class:`~.entry.Entry`.

It answers None for anything that is not regular (a digest or CRC32C that does not verify, a
MAC without its password, compacted framing, prefixes out of order, metadata that does not
parse or lacks required fields, a header that does not name ``position``): the caller then
decodes the entry with :func:`~.entry.decode_entry`, which says what is wrong. Where it
answers, the answer is what ``decode_entry`` at ``Depth.METADATA`` with ``verify`` gives
(tests/compaction/test_compaction_head.py checks that over generated and damaged entries).
"""

from __future__ import annotations

import struct
from typing import Any

from google.protobuf.message import DecodeError

from pulsarctl_py.proto import pulsar_api_pb2 as api

from . import compacted
from .bookkeeper import _SIZES, HEADER, digest_verifies
from .checksums import DigestType, crc32c

_PREFIX = struct.Struct(">HI")  # magic, then the BEM's size or the CRC32C
_U32 = struct.Struct(">I")
_BEM, _CHECKSUM = 0x0E02, 0x0E01


def compaction_head(
    data: bytes | memoryview,
    kind: DigestType | None,
    password: bytes | None,
    position: tuple[int, int],
    digest_verified: bool = False,
) -> tuple[int, Any, int, bytes] | None:
    """``(start, metadata, payload_at, bem)`` of a regular bookie entry stored at
    ``position`` with a ``kind`` digest, or None (decode it with ``decode_entry``).

    ``start``: where the Pulsar entry starts (after the BookKeeper header and digest);
    ``payload_at``: where its payload starts, counted from ``start``; ``bem``: the raw
    0x0e02 prefix (magic and size included), or b"". ``digest_verified``: the store
    checked the ids and the ``kind`` digest already (the ids are checked again, the digest
    not)."""
    if kind is None:
        return None
    end = len(data)
    start = HEADER.size + _SIZES[kind]
    if start > end:
        return None
    ledger_id, entry_id, lac, length = HEADER.unpack_from(data, 0)
    # bookkeeper.plausible_header, and the ids the entry was read under
    if (ledger_id, entry_id) != position or not (
        ledger_id >= 0 and entry_id >= -1 and -1 <= lac < max(entry_id, 0) + 1 and length >= 0
    ):
        return None
    # the store that read it may have checked the same digest (StoredEntry.verified): the
    # CRC over every byte again was some 4 % of a compaction's CPU time
    verified = digest_verified or digest_verifies(data, 0, end, kind, password)
    if not (verified is True or (verified is None and kind is DigestType.DUMMY)):
        return None
    mv = memoryview(data)
    if compacted.plausible(mv, start, end):  # decode_entry would read compacted framing
        return None
    pos = start
    bem = b""
    magic = _magic(mv, pos, end)
    if magic == _BEM:
        if pos + _PREFIX.size > end:
            return None
        body = pos + _PREFIX.size
        size = _PREFIX.unpack_from(mv, pos)[1]
        if body + size > end or not _parses(api.BrokerEntryMetadata, mv[body : body + size]):
            return None
        bem = bytes(mv[pos : body + size])
        pos = body + size
        magic = _magic(mv, pos, end)
    if magic == _CHECKSUM:
        if pos + _PREFIX.size > end:
            return None
        if crc32c(mv[pos + _PREFIX.size : end]) != _PREFIX.unpack_from(mv, pos)[1]:
            return None
        pos += _PREFIX.size
        magic = _magic(mv, pos, end)
    if magic in (_BEM, _CHECKSUM):  # a prefix again or out of order: the decoder's error
        return None
    if pos + _U32.size > end:
        return None
    size = _U32.unpack_from(mv, pos)[0]
    body = pos + _U32.size
    if size > end - body:
        return None
    md = api.MessageMetadata()
    try:
        md.MergeFromString(mv[body : body + size])
    except DecodeError:  # the decoder says what is wrong
        return None
    if not md.IsInitialized():
        return None
    return start, md, body + size - start, bem


def _magic(mv: memoryview, pos: int, end: int) -> int | None:
    return (mv[pos] << 8 | mv[pos + 1]) if pos + 2 <= end else None


def _parses(cls: Any, body: memoryview) -> bool:
    try:
        cls().MergeFromString(body)
    except DecodeError:
        return False
    return True
