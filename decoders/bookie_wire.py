"""BookKeeper client-bookie wire frames, pure bytes (formats.md section 12).

Both protocol versions frame every packet as ``[u32 frameLen][frame]`` (the length
excludes itself). v3 frames are ``Request``/``Response`` protobufs; v2 frames start with
the packet header int ``(version << 24) | (opcode << 16) | flags``.

What a reader needs is built here: READ_ENTRY and READ_LAC requests, and START_TLS for
v3; and what a writer of NEW ledgers needs: the v3 ADD_ENTRY of a ledger's creator
(``BookieClient.addEntry`` as ``PendingAddOp`` sends it: the master key and the
digest-packed entry). No function can set FENCE_LEDGER / DO_FENCING or RECOVERY_ADD: a
read from ledgerctl never fences a ledger, and an add never recovers someone else's.
v2 has no READ_LAC request a bookie decodes
(``BookieProtoEncoding.RequestEnDeCoderPreV3`` knows ADDENTRY, READENTRY, AUTH and
BATCH_READ_ENTRY only); reading entry -1 (``BookieProtocol.LAST_ADD_CONFIRMED``) returns
the last entry the bookie holds, whose header carries the writer's LAC.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

from pulsarctl_py.decoders.errors import InputFormatError

FRAME_LEN = struct.Struct(">I")
#: a frame size far above any bookie's; the client's own cap is ``limits.max_frame()``
#: (the maximum message size plus 10 KiB, as Pulsar's nettyMaxFrameSizeBytes)
MAX_FRAME = 64 * 1024 * 1024

# v3 (protobuf) ------------------------------------------------------------------------
VERSION_THREE = 3
OP_READ_ENTRY = 1
OP_ADD_ENTRY = 2
OP_READ_LAC = 7
OP_START_TLS = 9

# v2 (binary) --------------------------------------------------------------------------
V2_VERSION = 2
V2_READENTRY = 2
V2_HEADER = struct.Struct(">i")
V2_READ_REQ = struct.Struct(">iqq")  # header, ledgerId, entryId
V2_RESP_HEAD = struct.Struct(">iiqq")  # header, rc, ledgerId, entryId

LAST_ADD_CONFIRMED = -1  # entry id that reads the last entry a bookie holds

# status codes by name, both versions -------------------------------------------------
V3_STATUS = {
    0: "EOK",
    402: "ENOLEDGER",
    403: "ENOENTRY",
    404: "EBADREQ",
    501: "EIO",
    502: "EUA",
    503: "EBADVERSION",
    504: "EFENCED",
    505: "EREADONLY",
    506: "ETOOMANYREQUESTS",
    507: "EUNKNOWNLEDGERSTATE",
}
V2_STATUS = {
    0: "EOK",
    1: "ENOLEDGER",
    2: "ENOENTRY",
    100: "EBADREQ",
    101: "EIO",
    102: "EUA",
    103: "EBADVERSION",
    104: "EFENCED",
    105: "EREADONLY",
    106: "ETOOMANYREQUESTS",
    107: "EUNKNOWNLEDGERSTATE",
}
V2_FROM_NAME = {name: code for code, name in V2_STATUS.items()}
V3_FROM_NAME = {name: code for code, name in V3_STATUS.items()}


def status_name(code: int, v2: bool = False) -> str:
    return (V2_STATUS if v2 else V3_STATUS).get(code, f"status {code}")


@dataclass(slots=True)  # not frozen: one is made per entry read, and frozen init is slower
class ReadReply:
    """One answer to a read: ``status`` by name (EOK, ENOENTRY, ...) in either version.

    ``key`` matches it to its request: the txnId in v3, (ledgerId, entryId) in v2.
    ``body`` is the stored entry (header, digest, payload) for an entry read; for a v3
    READ_LAC it is the last stored entry and ``lac_body`` the explicit-LAC packet.
    """

    op: str  # "read", "add", "lac" or "tls"
    key: object
    status: str
    ledger_id: int
    entry_id: int
    body: bytes | None = None
    lac_body: bytes | None = None
    max_lac: int | None = None


def frame(payload: bytes) -> bytes:
    return FRAME_LEN.pack(len(payload)) + payload


_PB = None


def _pb():  # the generated module, imported when a v3 frame is first built or read
    global _PB
    if _PB is None:
        from pulsarctl_py.proto import bookkeeper_protocol_pb2

        _PB = bookkeeper_protocol_pb2
    return _PB


_SMALL = [bytes((i,)) for i in range(128)]


def _varint(value: int) -> bytes:
    """A protobuf varint; negative int64 values as their 10-byte two's complement."""
    if 0 <= value < 128:
        return _SMALL[value]
    if 0 < value < 0x200000:  # two or three bytes: entry ids and txnIds of most reads
        if value < 0x4000:
            return bytes(((value & 0x7F) | 0x80, value >> 7))
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_READ_TAG = _varint((100 << 3) | 2)  # Request.readRequest, length-delimited


def v3_read_request(txn_id: int, ledger_id: int, entry_id: int) -> bytes:
    """A framed v3 READ_ENTRY: no flag, no master key (so never fencing).

    Encoded by hand, field by field in the order protobuf serializes them (the tests
    check it equals the generated module's bytes): this is the per-entry hot path.
    """
    txn = _varint(txn_id)
    read = _ledger_field(ledger_id) + _varint(entry_id)
    # header {version 3, READ_ENTRY, txnId} is 5 bytes + the txnId varint (at most 10)
    payload = b"".join((_HEADER_TAGS[len(txn)], txn, _READ_TAG, _SMALL[len(read)], read))
    return FRAME_LEN.pack(len(payload)) + payload


#: field 1 (header), its length (5 fixed bytes + the txnId varint), version, operation
_HEADER_TAGS = [b"\x0a" + bytes((5 + i,)) + b"\x08\x03\x10\x01\x18" for i in range(11)]


@functools.lru_cache(maxsize=64)
def _ledger_field(ledger_id: int) -> bytes:
    """ReadRequest.ledgerId and the tag of entryId: the same for every read of a ledger."""
    return b"\x08" + _varint(ledger_id) + b"\x10"


def _v3_request(txn_id: int, op: int):
    req = _pb().Request()
    req.header.version = VERSION_THREE
    req.header.operation = op
    req.header.txnId = txn_id
    return req


def v3_read_request_pb(txn_id: int, ledger_id: int, entry_id: int) -> bytes:
    """The same frame built with the generated protobuf module (for the tests)."""
    req = _v3_request(txn_id, OP_READ_ENTRY)
    req.readRequest.ledgerId = ledger_id
    req.readRequest.entryId = entry_id
    return frame(req.SerializeToString())


#: Request.addRequest (field 101, length-delimited): 0xAA 0x06
_ADD_TAG = _varint((101 << 3) | 2)
#: field 1 (header), its length, version 3, operation ADD_ENTRY, the txnId tag
_ADD_HEADER_TAGS = [b"\x0a" + bytes((5 + i,)) + b"\x08\x03\x10\x02\x18" for i in range(11)]


def v3_add_request(
    txn_id: int, ledger_id: int, entry_id: int, master_key: bytes, body: bytes | memoryview
) -> bytes:
    """A framed v3 ADD_ENTRY of a new entry: no flag (never RECOVERY_ADD), no write flags.

    ``body`` is the digest-packed entry (header, digest, payload) and ``master_key`` the
    ledger's SHA-1("ledger" + password), as BookKeeper's ``PerChannelBookieClient`` sends
    an add for ``PendingAddOp``. Encoded by hand, fields in the order protobuf writes them
    (the tests compare it with :func:`v3_add_request_pb`): one frame per entry and bookie.
    """
    txn = _varint(txn_id)
    add = b"".join(
        (
            b"\x08",
            _varint(ledger_id),
            b"\x10",
            _varint(entry_id),
            b"\x1a",
            _varint(len(master_key)),
            master_key,
            b"\x22",
            _varint(len(body)),
        )
    )
    size = len(add) + len(body)
    head = b"".join((_ADD_HEADER_TAGS[len(txn)], txn, _ADD_TAG, _varint(size), add))
    return b"".join((FRAME_LEN.pack(len(head) + len(body)), head, body))


def v3_add_request_pb(
    txn_id: int, ledger_id: int, entry_id: int, master_key: bytes, body: bytes
) -> bytes:
    """The same frame built with the generated protobuf module (for the tests)."""
    req = _v3_request(txn_id, OP_ADD_ENTRY)
    req.addRequest.ledgerId = ledger_id
    req.addRequest.entryId = entry_id
    req.addRequest.masterKey = master_key
    req.addRequest.body = bytes(body)
    return frame(req.SerializeToString())


def v3_read_lac_request(txn_id: int, ledger_id: int) -> bytes:
    req = _v3_request(txn_id, OP_READ_LAC)
    req.readLacRequest.ledgerId = ledger_id
    return frame(req.SerializeToString())


def v3_start_tls_request(txn_id: int) -> bytes:
    req = _v3_request(txn_id, OP_START_TLS)
    req.startTLSRequest.SetInParent()
    return frame(req.SerializeToString())


def v2_read_request(ledger_id: int, entry_id: int) -> bytes:
    """A framed v2 READENTRY with flags 0 (no DO_FENCING, so no master key)."""
    header = (V2_VERSION << 24) | (V2_READENTRY << 16)
    return frame(V2_READ_REQ.pack(header, ledger_id, entry_id))


_RESPONSE: list = []  # [Response class, DecodeError], filled on the first response read


def parse_v3_response(payload: bytes) -> ReadReply:
    """One v3 Response frame (without its length prefix).

    The per-entry hot path: the generated class and protobuf's DecodeError are looked up
    once per process (an import statement here cost as much as the parse itself), and
    each field is read once.
    """
    if not _RESPONSE:
        from google.protobuf.message import DecodeError

        _RESPONSE.extend((_pb().Response, DecodeError))
    response, decode_error = _RESPONSE
    resp = response()
    try:
        resp.ParseFromString(payload)
    except decode_error as exc:
        raise InputFormatError(f"bookie sent a v3 frame that does not parse: {exc}") from None
    header = resp.header
    op = header.operation
    txn = header.txnId
    if op == OP_READ_ENTRY and resp.HasField("readResponse"):
        r = resp.readResponse
        status = r.status
        return ReadReply(
            "read",
            txn,
            "EOK" if status == 0 else status_name(status),
            r.ledgerId,
            r.entryId,
            r.body if r.HasField("body") else None,
            None,
            r.maxLAC if r.HasField("maxLAC") else None,
        )
    if op == OP_ADD_ENTRY and resp.HasField("addResponse"):
        r = resp.addResponse
        return ReadReply("add", txn, status_name(r.status), r.ledgerId, r.entryId)
    if op == OP_READ_LAC and resp.HasField("readLacResponse"):
        r = resp.readLacResponse
        return ReadReply(
            "lac",
            txn,
            status_name(r.status),
            r.ledgerId,
            LAST_ADD_CONFIRMED,
            r.lastEntryBody if r.HasField("lastEntryBody") else None,
            r.lacBody if r.HasField("lacBody") else None,
        )
    kind = {
        OP_READ_ENTRY: "read",
        OP_ADD_ENTRY: "add",
        OP_READ_LAC: "lac",
        OP_START_TLS: "tls",
    }.get(op, f"op{op}")
    return ReadReply(kind, txn, status_name(resp.status), -1, -1)


def parse_v2_response(payload: bytes) -> ReadReply:
    """One v2 READENTRY response frame (without its length prefix)."""
    if len(payload) < V2_RESP_HEAD.size:
        raise InputFormatError(
            f"bookie sent a v2 frame of {len(payload)} bytes, shorter than a read response"
        )
    header, rc, ledger_id, entry_id = V2_RESP_HEAD.unpack_from(payload, 0)
    opcode = (header >> 16) & 0xFF if (header >> 24) else header & 0xFF
    if opcode != V2_READENTRY:
        raise InputFormatError(f"bookie sent a v2 frame with opcode {opcode}, not a read")
    body = bytes(payload[V2_RESP_HEAD.size :]) if rc == 0 else None
    status = status_name(rc, v2=True)
    return ReadReply("read", (ledger_id, entry_id), status, ledger_id, entry_id, body)


# the server side, for the test bookie and for checks against captured frames ----------


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    op: str  # read, lac, tls, other
    key: object  # txnId (v3) or (ledgerId, entryId) (v2)
    ledger_id: int
    entry_id: int
    fence: bool
    v2: bool


def is_v3_frame(payload: bytes) -> bool:
    """A v3 Request starts with field 1 (header, length-delimited): byte 0x0A."""
    return len(payload) > 0 and payload[0] == 0x0A


def parse_request(payload: bytes) -> ParsedRequest:
    if is_v3_frame(payload):
        pb = _pb()
        req = pb.Request()
        req.ParseFromString(payload)
        op = req.header.operation
        txn = req.header.txnId
        if op == OP_READ_ENTRY:
            r = req.readRequest
            # proto2: an unset enum reads as its first value (FENCE_LEDGER), so ask HasField
            fence = r.HasField("flag") and r.flag == 1
            return ParsedRequest("read", txn, r.ledgerId, r.entryId, fence, False)
        if op == OP_READ_LAC:
            return ParsedRequest("lac", txn, req.readLacRequest.ledgerId, -1, False, False)
        if op == OP_START_TLS:
            return ParsedRequest("tls", txn, -1, -1, False, False)
        if op == OP_ADD_ENTRY:
            r = req.addRequest
            # ``fence`` carries RECOVERY_ADD for an add: what a writer must never send
            recovery = r.HasField("flag") and r.flag == 1
            return ParsedRequest("add", txn, r.ledgerId, r.entryId, recovery, False)
        return ParsedRequest("other", txn, -1, -1, False, False)
    header, ledger_id, entry_id = V2_READ_REQ.unpack_from(payload, 0)
    opcode = (header >> 16) & 0xFF
    fence = bool(header & 0x1)
    op = "read" if opcode == V2_READENTRY else "other"
    return ParsedRequest(op, (ledger_id, entry_id), ledger_id, entry_id, fence, True)


def v3_read_response(
    txn_id: int, status: str, ledger_id: int, entry_id: int, body: bytes | None, max_lac: int
) -> bytes:
    """A framed v3 READ_ENTRY answer, encoded by hand like v3_read_request (tests compare
    it with :func:`v3_read_response_pb`); maxLAC only with a body, as a bookie sends it."""
    code = _varint(V3_FROM_NAME[status])
    header = b"\x08\x03\x10\x01\x18" + _varint(txn_id)
    read = b"\x08" + code + b"\x10" + _varint(ledger_id) + b"\x18" + _varint(entry_id)
    if body is not None:
        read += b"\x22" + _varint(len(body)) + body + b"\x28" + _varint(max_lac)
    payload = b"".join(
        (b"\x0a", _varint(len(header)), header, b"\x10", code, _READ_TAG, _varint(len(read)), read)
    )
    return FRAME_LEN.pack(len(payload)) + payload


def _v3_response(txn_id: int, op: int, status: str):
    resp = _pb().Response()
    resp.header.version = VERSION_THREE
    resp.header.operation = op
    resp.header.txnId = txn_id
    resp.status = V3_FROM_NAME[status]
    return resp


def v3_read_response_pb(
    txn_id: int, status: str, ledger_id: int, entry_id: int, body: bytes | None, max_lac: int
) -> bytes:
    resp = _v3_response(txn_id, OP_READ_ENTRY, status)
    r = resp.readResponse
    r.status = resp.status
    r.ledgerId = ledger_id
    r.entryId = entry_id
    if body is not None:
        r.body = body
        r.maxLAC = max_lac
    return frame(resp.SerializeToString())


def v3_read_lac_response(
    txn_id: int, status: str, ledger_id: int, lac_body: bytes | None, last_entry: bytes | None
) -> bytes:
    resp = _v3_response(txn_id, OP_READ_LAC, status)
    r = resp.readLacResponse
    r.status = resp.status
    r.ledgerId = ledger_id
    if lac_body is not None:
        r.lacBody = lac_body
    if last_entry is not None:
        r.lastEntryBody = last_entry
    return frame(resp.SerializeToString())


@dataclass(frozen=True, slots=True)
class AddRequest:
    """A v3 ADD_ENTRY as a bookie reads it (for test bookies)."""

    txn_id: int
    ledger_id: int
    entry_id: int
    master_key: bytes
    body: bytes
    recovery: bool


def parse_add_request(payload: bytes) -> AddRequest:
    req = _pb().Request()
    req.ParseFromString(payload)
    r = req.addRequest
    recovery = r.HasField("flag") and r.flag == 1
    return AddRequest(req.header.txnId, r.ledgerId, r.entryId, r.masterKey, r.body, recovery)


def v3_add_response(txn_id: int, status: str, ledger_id: int, entry_id: int) -> bytes:
    resp = _v3_response(txn_id, OP_ADD_ENTRY, status)
    r = resp.addResponse
    r.status = resp.status
    r.ledgerId = ledger_id
    r.entryId = entry_id
    return frame(resp.SerializeToString())


def v3_simple_response(txn_id: int, op: int, status: str) -> bytes:
    resp = _v3_response(txn_id, op, status)
    if op == OP_START_TLS:
        resp.startTLSResponse.SetInParent()
    return frame(resp.SerializeToString())


def v2_read_response(status: str, ledger_id: int, entry_id: int, body: bytes | None) -> bytes:
    header = (V2_VERSION << 24) | (V2_READENTRY << 16)
    head = V2_RESP_HEAD.pack(header, V2_FROM_NAME[status], ledger_id, entry_id)
    return frame(head + (body or b""))
