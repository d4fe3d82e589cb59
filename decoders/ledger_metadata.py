"""BookKeeper ledger metadata as stored in ZooKeeper or Pulsar's metadata store.

Wire grammar (BookKeeper ``meta/LedgerMetadataSerDe.java``; ../shared/spec/formats.md §9.4):

    znode   = "BookieMetadataFormatVersion" TAB version:ascii-digits(1..10) LF body
    body v1 = write_quorum LF ensemble_size LF length LF
              { first_entry_id { TAB bookie_id } LF }
              [ last_entry_id TAB "CLOSED" ]          ; -102 TAB CLOSED = in recovery
    body v2 = protobuf TextFormat of LedgerMetadataFormat (no cToken)
    body v3 = size:varint32 LedgerMetadataFormat[size]  ; protobuf "delimited", current

LedgerMetadataFormat (``proto/bookkeeper_data_formats.proto``): 1 quorumSize (the write
quorum), 2 ensembleSize, 3 length, 4 lastEntryId, 5 state (OPEN 1, IN_RECOVERY 2, CLOSED 3),
6 segment {1 ensembleMember, 2 firstEntryId}, 7 digestType (CRC32 1, HMAC 2, CRC32C 3,
DUMMY 4), 8 password, 9 ackQuorumSize, 10 ctime, 11 customMetadata {1 key, 2 value},
12 cToken. The values are read the way BookKeeper reads them: the ack quorum defaults to
the write quorum; length and lastEntryId count only for a CLOSED ledger (otherwise 0 and
-1); the digest type counts only when a password is stored; v1 stores neither.

Ledger znode paths under the ledgers root (``util/StringUtils.java``):

    flat                 L%010d                       /ledgers/L0000000005
    legacy hierarchical  %010d split 2-4-4            /ledgers/00/0000/L0005
    long hierarchical    %019d split 3-4-4-4-4        /ledgers/000/0000/0000/0000/L0005
    hierarchical         legacy below 2**31-1, long from there on (BookKeeper's default,
                         and what Pulsar's own ledger manager uses)

Pulsar's custom metadata keys (``managed-ledger/.../LedgerMetadataUtils.java``), with the
older spelling in brackets: application, component, pulsar/managed-ledger
(psr/managed-ledger), pulsar/cursor (psr/cursor), pulsar/compactedTopic (compactedTopic),
pulsar/compactedTo (compactedTo; a serialized MessageIdData), pulsar/schemaId (schemaId).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from pulsarctl_py.proto import bookkeeper_data_formats_pb2 as bkpb
from pulsarctl_py.proto import pulsar_api_pb2 as api

from .checksums import DigestType
from .errors import CorruptEntryError
from .nodes import json_value
from .protos import parse_proto, signed64
from .text import as_text, json_map, text_of_bytes

LAYER = "ledger-metadata"
HEADER_KEY = b"BookieMetadataFormatVersion\t"
MAX_VERSION_DIGITS = 10
FORMAT_V1 = 1
FORMAT_V2 = 2
FORMAT_V3 = 3
CURRENT_FORMAT = FORMAT_V3
V1_CLOSED_TAG = "CLOSED"
V1_IN_RECOVERY_ENTRY_ID = -102
#: Integer.MAX_VALUE: the first id that lives on the long hierarchical path.
SHORT_ID_LIMIT = 2**31 - 1
DEFAULT_ROOT = "/ledgers"


class LedgerState(enum.IntEnum):
    """LedgerMetadataFormat.State."""

    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


@dataclass(slots=True)
class LedgerMetadata:
    """A ledger's metadata with BookKeeper's reading applied, plus what was stored."""

    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    state: LedgerState
    ensembles: dict[int, list[str]]
    last_entry_id: int = -1  # -1 unless CLOSED
    length: int = 0  # 0 unless CLOSED
    digest_type: DigestType | None = None  # None when no password is stored
    password: bytes | None = None
    ctime: int | None = None  # ms; None when not stored
    ctoken: int = 0
    custom_metadata: dict[str, bytes] = field(default_factory=dict)  # in stored order
    format_version: int = CURRENT_FORMAT
    ledger_id: int | None = None  # from the path; the value itself does not hold it
    #: the raw lastEntryId / length fields (v2/v3), which BookKeeper ignores unless CLOSED
    stored_last_entry_id: int | None = None
    stored_length: int | None = None
    #: required protobuf fields that were missing (damaged metadata)
    missing: list[str] = field(default_factory=list)

    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    def ensemble_for(self, entry_id: int) -> list[str]:
        """The bookies that store ``entry_id``: the last segment starting at or before it."""
        chosen: list[str] = []
        for first, bookies in sorted(self.ensembles.items()):
            if first > entry_id:
                break
            chosen = bookies
        return chosen

    def pulsar(self) -> PulsarLedgerTags:
        """Pulsar's custom metadata, decoded."""
        return decode_custom_metadata(self.custom_metadata)

    def to_json(self) -> dict[str, Any]:
        notes: list[dict[str, Any]] = []
        out: dict[str, Any] = {
            "ledger_id": self.ledger_id,
            "format_version": self.format_version,
            "state": self.state.name,
            "ensemble_size": self.ensemble_size,
            "write_quorum_size": self.write_quorum_size,
            "ack_quorum_size": self.ack_quorum_size,
            "last_entry_id": self.last_entry_id,
            "length": self.length,
            "digest_type": self.digest_type.name if self.digest_type is not None else None,
            "has_password": self.password is not None,
            "ctime": self.ctime,
            "ctoken": self.ctoken,
            "ensembles": json_value(
                {str(k): list(v) for k, v in self.ensembles.items()}, "ensembles", notes
            ),
            # values are bytes in the format; text when they are UTF-8, else noted
            "custom_metadata": json_map(
                {k: text_of_bytes(v) for k, v in self.custom_metadata.items()},
                "custom_metadata",
                notes,
            ),
            "pulsar": self.pulsar().to_json(),
        }
        if notes:
            out["not_utf8"] = notes
        if self.missing:
            out["missing"] = list(self.missing)
        return out


# -- parsing -------------------------------------------------------------------------------


def parse_header(data: bytes | memoryview) -> tuple[int, int]:
    """Return the format version and the offset of the body."""
    data = bytes(data)
    n = len(HEADER_KEY)
    if data[:n] != HEADER_KEY:
        found = data[:n].decode("ascii", errors="replace") if data else "nothing"
        raise CorruptEntryError(
            LAYER, 0, "the header 'BookieMetadataFormatVersion\\t'", repr(found)
        )
    newline = data.find(b"\n", n, n + MAX_VERSION_DIGITS + 1)
    if newline < 0:
        raise CorruptEntryError(
            LAYER, n, "a format version of at most 10 digits ended by a newline", "no newline"
        )
    digits = data[n:newline]
    if not digits.isdigit():
        raise CorruptEntryError(
            LAYER, n, "a decimal format version", repr(digits.decode("latin-1"))
        )
    return int(digits), newline + 1


def parse(
    data: bytes | memoryview, ledger_id: int | None = None, *, strict: bool = False
) -> LedgerMetadata:
    """Decode a ledger metadata value in any of the three formats.

    A damaged protobuf with missing required fields decodes with ``missing`` set; with
    ``strict`` it raises CorruptEntryError instead.
    """
    data = bytes(data)
    version, at = parse_header(data)
    if version == FORMAT_V3:
        md = _parse_v3(data, at)
    elif version == FORMAT_V2:
        md = _parse_v2(data, at)
    elif version == FORMAT_V1:
        md = _parse_v1(data, at)
    else:
        raise CorruptEntryError(LAYER, len(HEADER_KEY), "format version 1, 2 or 3", str(version))
    md.ledger_id = ledger_id
    if strict and md.missing:
        raise CorruptEntryError(
            LAYER,
            at,
            "every required LedgerMetadataFormat field",
            "missing " + ", ".join(md.missing),
        )
    return md


def _read_varint32(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    start = pos
    while shift < 32:
        if pos >= len(data):
            raise CorruptEntryError(LAYER, start, "a varint32 message size", "end of data")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & 0xFFFFFFFF, pos
        shift += 7
    raise CorruptEntryError(LAYER, start, "a varint32 message size", "a malformed varint")


def _parse_v3(data: bytes, at: int) -> LedgerMetadata:
    size, body = _read_varint32(data, at)
    if body + size > len(data):
        raise CorruptEntryError(
            LAYER, body, f"{size} bytes of LedgerMetadataFormat", f"{len(data) - body} bytes left"
        )
    msg, missing = parse_proto(bkpb.LedgerMetadataFormat, data[body : body + size], LAYER, body)
    return _from_format(msg, FORMAT_V3, missing)


def parse_format(data: bytes | memoryview, offset: int = 0) -> LedgerMetadata:
    """A bare LedgerMetadataFormat protobuf (no header, no size prefix), as Pulsar's
    offloaders embed it (``OffloadUtils.buildLedgerMetadataFormat``): it stores a digest
    type but no password, so the digest type is kept as stored. ``offset`` is where the
    bytes start in their container, for error messages.
    """
    msg, missing = parse_proto(bkpb.LedgerMetadataFormat, bytes(data), LAYER, offset)
    md = _from_format(msg, FORMAT_V3, missing)
    if md.digest_type is None and msg.HasField("digestType"):
        try:
            md.digest_type = DigestType(msg.digestType)
        except ValueError:
            md.missing.append(f"digestType (unknown value {msg.digestType})")
    return md


def _parse_v2(data: bytes, at: int) -> LedgerMetadata:
    msg = bkpb.LedgerMetadataFormat()
    try:
        text = data[at:].decode("utf-8")
        text_format.Parse(text, msg)
    except (UnicodeDecodeError, text_format.ParseError) as exc:
        raise CorruptEntryError(
            LAYER, at, "LedgerMetadataFormat in protobuf text format", f"unparsable text ({exc})"
        ) from None
    missing = [] if msg.IsInitialized() else msg.FindInitializationErrors()
    return _from_format(msg, FORMAT_V2, missing)


def _from_format(
    msg: bkpb.LedgerMetadataFormat, version: int, missing: list[str]
) -> LedgerMetadata:
    state = LedgerState(msg.state)
    closed = state is LedgerState.CLOSED
    has_password = msg.HasField("password")
    ensembles: dict[int, list[str]] = {}
    for seg in msg.segment:
        ensembles[seg.firstEntryId] = [as_text(b) for b in seg.ensembleMember]
    return LedgerMetadata(
        ensemble_size=msg.ensembleSize,
        write_quorum_size=msg.quorumSize,
        ack_quorum_size=msg.ackQuorumSize if msg.HasField("ackQuorumSize") else msg.quorumSize,
        state=state,
        ensembles=ensembles,
        last_entry_id=msg.lastEntryId if closed else -1,
        length=msg.length if closed else 0,
        digest_type=DigestType(msg.digestType) if has_password else None,
        password=msg.password if has_password else None,
        ctime=msg.ctime if msg.HasField("ctime") else None,
        ctoken=msg.cToken,
        custom_metadata={as_text(e.key): e.value for e in msg.customMetadata},
        format_version=version,
        stored_last_entry_id=msg.lastEntryId if msg.HasField("lastEntryId") else None,
        stored_length=msg.length if msg.HasField("length") else None,
        missing=list(missing),
    )


def _parse_v1(data: bytes, at: int) -> LedgerMetadata:
    try:
        text = data[at:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptEntryError(LAYER, at, "v1 text metadata", f"non-UTF-8 bytes ({exc})") from None
    lines = text.split("\n")
    offset = at

    def number(i: int, what: str) -> int:
        if i >= len(lines) or not re.fullmatch(r"-?[0-9]+", lines[i]):
            found = repr(lines[i]) if i < len(lines) else "end of data"
            raise CorruptEntryError(LAYER, offset, f"the {what} line of v1 metadata", found)
        return int(lines[i])

    quorum = number(0, "write quorum")
    ensemble_size = number(1, "ensemble size")
    length = number(2, "length")
    md = LedgerMetadata(
        ensemble_size=ensemble_size,
        write_quorum_size=quorum,
        ack_quorum_size=quorum,
        state=LedgerState.OPEN,
        ensembles={},
        format_version=FORMAT_V1,
        stored_length=length,
    )
    offset += sum(len(line.encode()) + 1 for line in lines[:3])
    for line in lines[3:]:
        if line == "":
            offset += 1
            continue
        parts = line.split("\t")
        if not re.fullmatch(r"-?[0-9]+", parts[0]) or len(parts) < 2:
            raise CorruptEntryError(
                LAYER, offset, "'<entry id> TAB <bookie>...' or '<entry id> TAB CLOSED'", repr(line)
            )
        if parts[1] == V1_CLOSED_TAG:
            last = int(parts[0])
            md.stored_last_entry_id = last
            if last == V1_IN_RECOVERY_ENTRY_ID:
                md.state = LedgerState.IN_RECOVERY
            else:
                md.state = LedgerState.CLOSED
                md.last_entry_id = last
                md.length = length
            break
        md.ensembles[int(parts[0])] = parts[1:]
        offset += len(line.encode()) + 1
    return md


# -- building ------------------------------------------------------------------------------


def to_format(md: LedgerMetadata, *, include_ctoken: bool = True) -> bkpb.LedgerMetadataFormat:
    """The protobuf BookKeeper would write for ``md`` (``buildLedgerMetadataFormat``)."""
    msg = bkpb.LedgerMetadataFormat(
        quorumSize=md.write_quorum_size,
        ackQuorumSize=md.ack_quorum_size,
        ensembleSize=md.ensemble_size,
        length=md.length,
        lastEntryId=md.last_entry_id,
        state=int(md.state),
    )
    if md.ctime is not None:
        msg.ctime = md.ctime
    digest = md.digest_type if md.digest_type is not None else DigestType.CRC32C
    msg.digestType = int(digest)
    msg.password = md.password or b""
    for key, value in md.custom_metadata.items():
        msg.customMetadata.add(key=key, value=value)
    for first, bookies in md.ensembles.items():
        msg.segment.add(firstEntryId=first, ensembleMember=bookies)
    if include_ctoken:
        msg.cToken = md.ctoken
    return msg


def build(md: LedgerMetadata) -> bytes:
    """Encode ``md`` in format v3, byte for byte as BookKeeper's serializer does.

    A ledger without a digest type is written as CRC32C; a missing password as empty.
    """
    body = to_format(md).SerializeToString()
    return HEADER_KEY + b"3\n" + _varint(len(body)) + body


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        if value < 0x80:
            out.append(value)
            return bytes(out)
        out.append((value & 0x7F) | 0x80)
        value >>= 7


# -- paths -----------------------------------------------------------------------------------


class LedgerLayout(enum.StrEnum):
    """How ledger znodes are laid out under the ledgers root (LedgerManagerFactory names)."""

    FLAT = "flat"
    LEGACY_HIERARCHICAL = "legacyhierarchical"
    LONG_HIERARCHICAL = "longhierarchical"
    HIERARCHICAL = "hierarchical"


#: LAYOUT znode factory classes and the path layout each one uses.
FACTORY_LAYOUTS = {
    "org.apache.bookkeeper.meta.FlatLedgerManagerFactory": LedgerLayout.FLAT,
    "org.apache.bookkeeper.meta.LegacyHierarchicalLedgerManagerFactory": (
        LedgerLayout.LEGACY_HIERARCHICAL
    ),
    "org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory": (
        LedgerLayout.LONG_HIERARCHICAL
    ),
    "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory": LedgerLayout.HIERARCHICAL,
    "org.apache.pulsar.metadata.bookkeeper.PulsarLedgerManagerFactory": LedgerLayout.HIERARCHICAL,
}

#: Children of the ledgers root that never hold ledgers.
NON_LEDGER_NODES = frozenset(
    {
        "available",
        "cookies",
        "LAYOUT",
        "INSTANCEID",
        "underreplication",
        "idgen",
        "idgen-long",
        "ledgers",
        "bookies",
        "readonly",
    }
)


def _relative(ledger_id: int, layout: LedgerLayout) -> str:
    if ledger_id < 0:
        raise CorruptEntryError(LAYER, 0, "a non-negative ledger id", str(ledger_id))
    if layout is LedgerLayout.FLAT:
        return f"L{ledger_id:010d}"
    if layout is LedgerLayout.HIERARCHICAL:
        layout = (
            LedgerLayout.LEGACY_HIERARCHICAL
            if ledger_id < SHORT_ID_LIMIT
            else LedgerLayout.LONG_HIERARCHICAL
        )
    if layout is LedgerLayout.LEGACY_HIERARCHICAL:
        s = f"{ledger_id:010d}"
        return f"{s[0:2]}/{s[2:6]}/L{s[6:10]}"
    s = f"{ledger_id:019d}"
    return f"{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/L{s[15:19]}"


def ledger_path(
    ledger_id: int,
    layout: LedgerLayout | str = LedgerLayout.HIERARCHICAL,
    root: str = DEFAULT_ROOT,
) -> str:
    """The znode path of a ledger's metadata."""
    return f"{root.rstrip('/')}/{_relative(ledger_id, LedgerLayout(layout))}"


_FLAT = re.compile(r"L(\d{10,19})", re.ASCII)
_LEGACY = re.compile(r"(\d{2})/(\d{4})/L(\d{4})", re.ASCII)
_LONG = re.compile(r"(\d{3})/(\d{4})/(\d{4})/(\d{4})/L(\d{4})", re.ASCII)


def ledger_id_from_path(path: str, root: str = DEFAULT_ROOT) -> int | None:
    """The ledger id a znode path names under ``root``, or None for any other znode."""
    prefix = root.rstrip("/") + "/"
    if not path.startswith(prefix):
        return None
    rel = path[len(prefix) :]
    for pattern in (_FLAT, _LEGACY, _LONG):
        m = pattern.fullmatch(rel)
        if m:
            value = int("".join(m.groups()))
            return value if value < 2**63 else None
    return None


def is_ledger_dir(name: str, depth: int) -> bool:
    """Whether a znode name at ``depth`` (1 = child of the root) can lead to ledgers.

    Level 1 names are 2 digits (legacy hierarchical) or 3 digits (long hierarchical);
    the deeper levels are 4 digits. Flat ledger znodes (``L%010d``) are not directories.
    """
    if depth == 1:
        return name.isdigit() and len(name) in (2, 3) and name.isascii()
    return name.isdigit() and len(name) == 4 and name.isascii()


def parse_layout(data: bytes | memoryview) -> tuple[int, str, int, LedgerLayout | None]:
    """Decode the ``LAYOUT`` znode: layout version, factory class, manager version, layout."""
    text = bytes(data).decode("utf-8", errors="replace")
    lines = text.split("\n")
    if len(lines) < 2 or not lines[0].strip().isdigit():
        raise CorruptEntryError(
            "ledger-layout", 0, "'<version>\\n<factory class>:<version>'", repr(text)
        )
    cls, _, version = lines[1].strip().rpartition(":")
    if not cls or not version.isdigit():
        raise CorruptEntryError(
            "ledger-layout", len(lines[0]) + 1, "'<factory class>:<version>'", repr(lines[1])
        )
    return int(lines[0]), cls, int(version), FACTORY_LAYOUTS.get(cls)


# -- Pulsar's custom metadata ----------------------------------------------------------------

#: field name -> (new key, old key)
PULSAR_KEYS: dict[str, tuple[str, str]] = {
    "managed_ledger": ("pulsar/managed-ledger", "psr/managed-ledger"),
    "cursor": ("pulsar/cursor", "psr/cursor"),
    "compacted_topic": ("pulsar/compactedTopic", "compactedTopic"),
    "compacted_to": ("pulsar/compactedTo", "compactedTo"),
    "schema_id": ("pulsar/schemaId", "schemaId"),
}
APPLICATION_KEY = "application"
COMPONENT_KEY = "component"


@dataclass(slots=True)
class PulsarLedgerTags:
    """What Pulsar wrote into a ledger's custom metadata, and what it means."""

    application: str | None = None
    component: str | None = None
    managed_ledger: str | None = None
    cursor: str | None = None
    compacted_topic: str | None = None
    #: (ledger id, entry id, partition, batch index) from the serialized MessageIdData
    compacted_to: dict[str, int] | None = None
    schema_id: str | None = None
    #: "new" (pulsar/...), "old" (psr/... and bare names), "mixed" or None
    spelling: str | None = None
    other: dict[str, bytes] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """data, cursor, compacted, schema, or unknown."""
        if self.cursor is not None:
            return "cursor"
        if self.component == "compacted-ledger" or self.compacted_topic is not None:
            return "compacted"
        if self.component == "schema" or self.schema_id is not None:
            return "schema"
        if self.component == "managed-ledger" or self.managed_ledger is not None:
            return "data"
        return "unknown"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for name in (
            "application",
            "component",
            "managed_ledger",
            "cursor",
            "compacted_topic",
            "compacted_to",
            "schema_id",
            "spelling",
        ):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.other:
            notes: list[dict[str, Any]] = []
            out["other"] = json_map(
                {k: text_of_bytes(v) for k, v in self.other.items()}, "other", notes
            )
            if notes:
                out["not_utf8"] = notes
        if self.problems:
            out["problems"] = list(self.problems)
        return out


def decode_message_id(data: bytes) -> tuple[dict[str, int], list[str]]:
    """A serialized MessageIdData (``pulsar/compactedTo``) as plain numbers."""
    msg, missing = parse_proto(api.MessageIdData, data, "compacted-to", 0)
    out = {
        "ledger_id": signed64(msg.ledgerId),
        "entry_id": signed64(msg.entryId),
        "partition": msg.partition,
        "batch_index": msg.batch_index,
    }
    return out, [f"MessageIdData lacks {name}" for name in missing]


def decode_custom_metadata(custom: dict[str, bytes]) -> PulsarLedgerTags:
    """Decode Pulsar's custom metadata keys, accepting both spellings."""
    tags = PulsarLedgerTags()
    spellings: set[str] = set()
    known = {APPLICATION_KEY, COMPONENT_KEY}
    if APPLICATION_KEY in custom:
        tags.application = custom[APPLICATION_KEY].decode("utf-8", errors="replace")
    if COMPONENT_KEY in custom:
        tags.component = custom[COMPONENT_KEY].decode("utf-8", errors="replace")
    for name, (new, old) in PULSAR_KEYS.items():
        known.update((new, old))
        key = new if new in custom else old if old in custom else None
        if key is None:
            continue
        spellings.add("new" if key == new else "old")
        raw = custom[key]
        if name == "compacted_to":
            try:
                tags.compacted_to, problems = decode_message_id(raw)
                tags.problems.extend(problems)
            except (CorruptEntryError, DecodeError) as exc:
                tags.problems.append(f"{key} is not a MessageIdData: {exc}")
        else:
            setattr(tags, name, raw.decode("utf-8", errors="replace"))
    tags.other = {k: v for k, v in custom.items() if k not in known}
    if spellings:
        tags.spelling = spellings.pop() if len(spellings) == 1 else "mixed"
    return tags


def encode_message_id(
    ledger_id: int, entry_id: int, partition: int = -1, batch_index: int = -1
) -> bytes:
    """Serialize a MessageIdData the way Pulsar stores ``pulsar/compactedTo``."""
    msg = api.MessageIdData(ledgerId=ledger_id % 2**64, entryId=entry_id % 2**64)
    if partition != -1:
        msg.partition = partition
    if batch_index != -1:
        msg.batch_index = batch_index
    return msg.SerializeToString()


def pulsar_custom_metadata(
    managed_ledger: str,
    *,
    cursor: str | None = None,
    spelling: str = "new",
) -> dict[str, bytes]:
    """The custom metadata Pulsar gives a topic data ledger (or a cursor ledger)."""
    idx = 0 if spelling == "new" else 1
    out = {
        APPLICATION_KEY: b"pulsar",
        COMPONENT_KEY: b"managed-ledger",
        PULSAR_KEYS["managed_ledger"][idx]: managed_ledger.encode("utf-8"),
    }
    if cursor is not None:
        out[PULSAR_KEYS["cursor"][idx]] = cursor.encode("utf-8")
    return out
