"""BookKeeper's digest-packed entry: what a bookie stores and returns for a read.

Wire grammar (big-endian; BookKeeper ``proto/checksum/DigestManager.java``):

    entry       = ledger_id:i64 entry_id:i64 lac:i64 length:i64 digest[D] payload
    lac_packet  = ledger_id:i64 lac:i64 digest[D]

D depends on the ledger's digest type: CRC32 = 8 (the unsigned CRC in an int64),
CRC32C = 4, HMAC = 20 (HMAC-SHA1 keyed with SHA-1("mac" + password)), DUMMY = 0.
The digest covers the 32 header bytes and then the payload, skipping itself.
``length`` is the ledger length including this entry's payload. The explicit-LAC packet
is digested over its 16 header bytes. See ../shared/spec/formats.md §10.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ._reader import need
from .checksums import DIGESTS, DigestType, crc32c
from .errors import CorruptEntryError
from .nodes import Check, Layer

HEADER = struct.Struct(">qqqq")
LAC_HEADER = struct.Struct(">qq")
LAYER = "bookie-entry"


@dataclass(slots=True)
class BookieEntryHeader:
    """The four header fields of a digest-packed entry."""

    ledger_id: int
    entry_id: int
    lac: int
    length: int


#: digest names and sizes by type: ``DigestType.name`` is an enum property, slow per entry
_NAMES = {kind: kind.name for kind in DigestType}
_SIZES = {kind: digest.size for kind, digest in DIGESTS.items()}


def _computed(
    kind: DigestType, parts: list[bytes | memoryview], password: bytes | None
) -> bytes | None:
    """The digest of ``parts``; None for a MAC without its password."""
    if kind is DigestType.CRC32C:  # the usual digest, without the generic table's overhead
        value = 0
        for part in parts:
            value = crc32c(part, value)
        return value.to_bytes(4, "big")
    return DIGESTS[kind].compute(parts, password)


def digest_verifies(
    buf: bytes | memoryview, pos: int, end: int, kind: DigestType, password: bytes | None
) -> bool | None:
    """Whether the digest of the entry in ``buf[pos:end]`` verifies, as ``parse`` and
    ``digest_check`` decide it, without building their Layer and Check (paths that only
    need the answer, once per entry): False where the header and digest do not fit, None
    where nothing can be told (a DUMMY digest, a MAC without its password)."""
    if kind is DigestType.DUMMY:
        return None if end - pos >= HEADER.size else False
    at = pos + HEADER.size
    payload_at = at + _SIZES[kind]
    if payload_at > end:
        return False
    mv = memoryview(buf)
    if kind is DigestType.CRC32C:  # the usual digest: ``_computed``'s, without the list
        computed: bytes | None = crc32c(mv[payload_at:end], crc32c(mv[pos:at])).to_bytes(4, "big")
    else:
        computed = _computed(kind, [mv[pos:at], mv[payload_at:end]], password)
    if computed is None:
        return None
    return buf[at:payload_at] == computed


def digest_check(
    kind: DigestType,
    stored: bytes | memoryview,
    parts: list[bytes | memoryview],
    password: bytes | None,
) -> Check:
    """Compare a stored digest with the one computed over ``parts``."""
    computed = _computed(kind, parts, password)
    stored = bytes(stored)
    name = _NAMES[kind]
    if computed is None:
        return Check(name, stored.hex(), None, None, "no password")
    if kind is DigestType.DUMMY:
        return Check(name, "", None, None, "DUMMY digest: the ledger stores none")
    return Check(name, stored.hex(), computed.hex(), computed == stored)


def parse(
    buf: bytes | memoryview,
    pos: int,
    end: int,
    kind: DigestType,
    password: bytes | None = None,
) -> tuple[Layer, BookieEntryHeader, int]:
    """Decode the header and digest at ``pos``; return the layer, header, payload offset."""
    size = _SIZES[kind]
    digest_at = pos + HEADER.size
    payload_at = digest_at + size
    if payload_at > end:
        need(buf, pos, HEADER.size + size, end, LAYER, f"header and {_NAMES[kind]} digest")
    ledger_id, entry_id, lac, length = HEADER.unpack_from(buf, pos)
    header = BookieEntryHeader(ledger_id, entry_id, lac, length)
    mv = memoryview(buf)
    head = mv[pos:payload_at]
    check = digest_check(
        kind, head[HEADER.size :], [head[: HEADER.size], mv[payload_at:end]], password
    )
    layer = Layer(
        LAYER,
        pos,
        payload_at - pos,
        head,
        {
            "ledger_id": ledger_id,
            "entry_id": entry_id,
            "lac": lac,
            "length": length,
            "digest_type": _NAMES[kind],
            "payload_size": end - payload_at,
        },
        check,
    )
    return layer, header, payload_at


def build(
    header: BookieEntryHeader,
    payload: bytes | memoryview,
    kind: DigestType,
    password: bytes | None = None,
) -> bytes:
    """Pack an entry the way BookKeeper's DigestManager does before sending it."""
    head = HEADER.pack(header.ledger_id, header.entry_id, header.lac, header.length)
    digest = DIGESTS[kind].compute([head, payload], password)
    if digest is None:
        raise CorruptEntryError(LAYER, 0, "a password for the MAC digest", "none")
    return head + digest + bytes(payload)


def plausible_header(buf: bytes | memoryview, pos: int, end: int) -> bool:
    """Whether the 32 bytes at ``pos`` look like a BookKeeper entry header."""
    if end - pos < HEADER.size:
        return False
    ledger_id, entry_id, lac, length = HEADER.unpack_from(buf, pos)
    return ledger_id >= 0 and entry_id >= -1 and -1 <= lac < max(entry_id, 0) + 1 and length >= 0


def detect_by_layout(buf: bytes | memoryview, pos: int, end: int) -> DigestType | None:
    """The digest type whose size puts a Pulsar entry right after the header, if any.

    For entries no digest verifies: a MAC without the password, a DUMMY digest, or a
    damaged header or digest (which then shows as a digest mismatch, not as undecodable
    message metadata). The header itself may be damaged; the layout decides.
    """
    from . import compacted

    if end - pos < HEADER.size + 2:
        return None
    for kind in (DigestType.CRC32C, DigestType.CRC32, DigestType.HMAC, DigestType.DUMMY):
        at = pos + HEADER.size + _SIZES[kind]
        if bytes(buf[at : at + 2]) in (b"\x0e\x01", b"\x0e\x02") or (
            plausible_header(buf, pos, end) and compacted.plausible(buf, at, end)
        ):
            return kind
    return None


def detect_digest(
    buf: bytes | memoryview, pos: int, end: int, password: bytes | None
) -> DigestType | None:
    """The digest type whose digest verifies for the entry at ``pos``, if any."""
    if not plausible_header(buf, pos, end):
        return None
    for kind in (DigestType.CRC32C, DigestType.CRC32, DigestType.HMAC):
        if digest_verifies(buf, pos, end, kind, password):
            return kind
    return None


def parse_lac_packet(
    buf: bytes | memoryview, kind: DigestType, password: bytes | None = None
) -> tuple[int, int, Check]:
    """Decode an explicit-LAC packet: ledger id, LAC and the digest check."""
    size = DIGESTS[kind].size
    need(buf, 0, LAC_HEADER.size + size, len(buf), "explicit-lac", "ledger id, LAC and digest")
    ledger_id, lac = LAC_HEADER.unpack_from(buf, 0)
    mv = memoryview(buf)
    at = LAC_HEADER.size
    check = digest_check(kind, mv[at : at + size], [mv[:at]], password)
    return ledger_id, lac, check


def build_lac_packet(
    ledger_id: int, lac: int, kind: DigestType, password: bytes | None = None
) -> bytes:
    """Pack an explicit-LAC packet."""
    head = LAC_HEADER.pack(ledger_id, lac)
    digest = DIGESTS[kind].compute([head], password)
    if digest is None:
        raise CorruptEntryError("explicit-lac", 0, "a password for the MAC digest", "none")
    return head + digest
