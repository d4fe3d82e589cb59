"""Differential fuzz targets of the native module (decoders/_speedups.c, and the MAC
digest of decoders/_speedups_mac.c where it is built).

Each target makes an input from real-shaped seeds (batches, bookie entries, v3 answers,
heads, key table operations, hostile arguments), mutates it (bit flips, bytes set, cuts,
inserts, huge lengths, and every tag, length and varint re-encoded overlong or past what
protobuf takes), calls the native functions on it and compares each answer with the
Python path's: a native answer (not None, not "irregular") must be exactly what the
Python path gives for that input. A difference raises :class:`Difference`; a memory
error is the sanitizers' to report (tests/decoders/test_speedups_sanitizers.py builds the module
with AddressSanitizer and UBSan and runs these targets under it; scripts/fuzz_long.py
--native is the long run).

``CALLS`` counts the calls of each native function on generated data, and apart
(``"name (arguments)"``) its calls with hostile arguments; ``COMPARED`` the answers that
were compared with the Python path's (a None is "not regular": the Python path runs).
"""

from __future__ import annotations

import random
import struct
from collections import Counter
from collections.abc import Callable
from functools import cache, lru_cache
from types import SimpleNamespace
from typing import Any

from pulsarctl_py.decoders import DecodeOptions, Depth, Outer, bookkeeper, decode_entry
from pulsarctl_py.decoders import bookie_wire as wire
from pulsarctl_py.decoders import entry as entry_module
from pulsarctl_py.decoders.bookkeeper import BookieEntryHeader
from pulsarctl_py.decoders.checksums import DigestType, crc32c, mac_key
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.heads import EntryHead, decode_head
from pulsarctl_py.decoders.payload import parse_batch
from pulsarctl_py.decoders.speedups import native
from pulsarctl_py.proto import pulsar_api_pb2 as api
from tests.support import protowire

CALLS: Counter[str] = Counter()
#: native answers compared with the Python path's (the others were None: not regular)
COMPARED: Counter[str] = Counter()
PREFIX = bytes(range(16))
KEY = b"k"
PLACEHOLDER = struct.pack(">I", 2) + b"\x18\x00"
#: the password of the MAC ledgers made here, and their HMAC key (the scans' key argument)
PASSWORD = b"pw"
MAC_KEY = mac_key(PASSWORD)
#: whether the native scans check MAC digests (_speedups_mac built)
MAC = native is not None and bool(getattr(native, "mac_available", lambda: False)())


class Difference(AssertionError):
    """The native path answered otherwise than the Python path."""


def differ(what: str, native_answer: Any, python_answer: Any) -> None:
    COMPARED[what.split()[0]] += 1
    if native_answer != python_answer:
        raise Difference(f"{what}: native {native_answer!r}, Python {python_answer!r}")


# -- mutations ---------------------------------------------------------------------------------

BIG = [0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, 1 << 24, 0x10000]


def reencode(data: bytes, rng: random.Random, nested: protowire.Nested | None = None) -> bytes:
    """protowire.reencoded with ``rng``: tags, lengths and varints in sizes from the fewest
    to past protobuf's limits."""
    try:
        parsed = protowire.fields(data)
    except ValueError:
        return data
    nested = nested or {}

    def size(need: int, limit: int) -> int:
        kind = rng.randrange(10)
        if kind < 5:
            return need
        if kind < 8:
            return rng.randint(need, max(need, limit))
        return rng.randint(max(need, limit + 1), max(need, limit) + 2)

    out = bytearray()
    for number, wire_type, value in parsed:
        tag = number << 3 | wire_type
        out += protowire.varint(tag, size(protowire.varint_size(tag), protowire.TAG_MAX))
        if wire_type == 0:
            n = size(protowire.varint_size(value), protowire.VARINT_MAX)
            if n == protowire.VARINT_MAX and rng.randrange(3) == 0:
                value |= rng.randint(1, 63) << 64
            out += protowire.varint(value, n)
        elif wire_type == 2:
            if number in nested:
                value = reencode(value, rng, nested[number])
            out += protowire.varint(len(value), size(protowire.varint_size(len(value)), 5))
            out += value
        else:
            out += value
    return bytes(out)


def mutate(data: bytes, rng: random.Random) -> bytes:
    """0-3 byte-level mutations."""
    buf = bytearray(data)
    for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):
        n = len(buf)
        op = rng.randrange(6)
        if op == 0 and n:
            buf[rng.randrange(n)] ^= 1 << rng.randrange(8)
        elif op == 1 and n:
            buf[rng.randrange(n)] = rng.choice((0, 0xFF, 0x80, 0x0E, 0x01, rng.randrange(256)))
        elif op == 2 and n:
            del buf[rng.randrange(n) :]
        elif op == 3:
            at = rng.randrange(n + 1)
            buf[at:at] = rng.randbytes(rng.randint(1, 6))
        elif op == 4 and n:
            at = rng.randrange(n)
            del buf[at : at + rng.randint(1, 6)]
        elif op == 5 and n >= 4:
            at = rng.randrange(n - 3)
            buf[at : at + 4] = struct.pack(">I", rng.choice(BIG))
    return bytes(buf)


#: native calls on each generated input: the input, then one-byte-level mutations of it
#: (generating an input costs the Python side far more than a native call)
BURST = 8


def variants(data: bytes, rng: random.Random) -> list[bytes]:
    """``data`` and BURST - 1 mutations of it."""
    return [data] + [mutate(data, rng) or data for _ in range(BURST - 1)]


# -- batches: split_batch and the compaction helpers ---------------------------------------------


def _smm(rng: random.Random) -> tuple[bytes, bytes]:
    value = rng.randbytes(rng.randrange(6))
    smm = api.SingleMessageMetadata(payload_size=len(value))
    for _ in range(rng.choice((0, 0, 1, 2))):
        smm.properties.add(key=rng.choice(("a", "é", "")), value=rng.choice(("1", "")))
    if rng.randrange(4):
        smm.partition_key = rng.choice(("a", "b", "c", "é", ""))
    if rng.randrange(2):
        smm.event_time = rng.getrandbits(64)
    if rng.randrange(2):
        smm.sequence_id = rng.getrandbits(rng.choice((8, 64)))
    if rng.randrange(4) == 0:
        smm.ordering_key = rng.randbytes(2)
    if rng.randrange(8) == 0:
        smm.compacted_out = True
    if rng.randrange(10) == 0:
        smm.null_value = True
    if rng.randrange(10) == 0:
        smm.partition_key_b64_encoded = True
    return smm.SerializeToString(), value


@cache
def _batch_seeds() -> list[list[tuple[bytes, bytes]]]:
    rng = random.Random(7)
    return [[_smm(rng) for _ in range(rng.randint(1, 4))] for _ in range(300)]


def _batch(rng: random.Random) -> tuple[bytes, int]:
    records = rng.choice(_batch_seeds())
    parts = []
    for smm, value in records:
        if rng.randrange(3) == 0:
            smm = reencode(smm, rng, {1: {}})
        parts.append(struct.pack(">I", len(smm)) + smm + value)
    plain = mutate(b"".join(parts), rng) if rng.randrange(3) == 0 else b"".join(parts)
    count = len(records) + rng.choice((0, 0, 0, 0, -1, 1))
    return plain, max(count, 0)


@lru_cache(maxsize=4096)
def python_split(plain: bytes, count: int) -> Any:
    entry = entry_module.Entry(b"", position=(5, 9))
    md = api.MessageMetadata(
        producer_name="p", sequence_id=7, publish_time=1000, num_messages_in_batch=count
    )
    entry.broker_entry_metadata = api.BrokerEntryMetadata(index=40 + count - 1)
    saved = entry_module.native
    entry_module.native = None
    try:
        messages = entry_module._messages(entry, md, plain)
    except LedgerctlError:
        return None
    finally:
        entry_module.native = saved
    if any(p.severity == "error" for p in entry.problems):
        return None
    return messages, entry.placeholders, entry.layers[-1].length


@lru_cache(maxsize=4096)
def _python_live(plain: bytes, count: int) -> list[tuple[int, str | None, int]] | None:
    """(batch index, key, payload size) of the live records as parse_batch reads them,
    or None when it refuses the batch or reports a problem."""
    problems: list[Any] = []
    try:
        _layer, recs, _holes = parse_batch(plain, count, None, problems)
    except LedgerctlError:
        return None
    if any(p.severity == "error" for p in problems):
        return None
    return [
        (
            r.batch_index,
            r.smm.partition_key if r.smm.HasField("partition_key") else None,
            r.smm.payload_size,
        )
        for r in recs
    ]


def _rank(index: int) -> bytes:
    return PREFIX + struct.pack(">I", index + 1)


def _python_rebuild(plain: bytes, count: int, keep: list[int], pip_429: bool) -> bytes:
    _layer, recs, _holes = parse_batch(plain, count, None, [])
    out = bytearray()
    for r in recs:
        if r.batch_index in keep:
            smm = api.SingleMessageMetadata()
            smm.CopyFrom(r.smm)
            smm.payload_size = len(r.value)
            body = smm.SerializeToString()
            out += struct.pack(">I", len(body)) + body + bytes(r.value)
        elif not pip_429:
            out += PLACEHOLDER
    return bytes(out)


def batch_target(rng: random.Random) -> None:
    base, count = _batch(rng)
    for plain in variants(base, rng):
        _check_batch(plain, count, rng)


def _check_batch(plain: bytes, count: int, rng: random.Random) -> None:
    CALLS["split_batch"] += 1
    got = native.split_batch(plain, count, None, 7, 1000, 40, 5, 9)
    if got is not None:
        differ("split_batch", got, python_split(plain, count))
    live = None
    table = native.key_table()
    CALLS["compact_offer"] += 1
    offered = native.compact_offer(plain, count, None, KEY, PREFIX, table)
    if offered is not None:
        live = _python_live(plain, count)
        if live is None:
            raise Difference(f"compact_offer took a batch the Python path refuses: {plain.hex()}")
        model: dict[bytes, tuple[bytes, bool]] = {}
        for index, key, size in live:
            if key is not None:
                k = KEY + key.encode()
                if k not in model or _rank(index) > model[k][0]:
                    model[k] = (_rank(index), size <= 0)
        keyed = sum(1 for _i, key, _s in live if key is not None)
        differ("compact_offer", offered, (keyed, len(model)))
        differ(
            "compact_offer table",
            sorted(table.scan(0, 1 << 20)[1]),
            sorted((k, r, t) for k, (r, t) in model.items()),
        )
    retain, pip_429 = bool(rng.randrange(2)), bool(rng.randrange(2))
    CALLS["compact_keep"] += 1
    kept = native.compact_keep(plain, count, None, KEY, PREFIX, None, retain, pip_429, PLACEHOLDER)
    if kept is not None:
        live = live if live is not None else _python_live(plain, count)
        if live is None:
            raise Difference(f"compact_keep took a batch the Python path refuses: {plain.hex()}")
        keep = [i for i, key, _s in live if key is None and retain]
        asked = [(i, KEY + k.encode(), _rank(i)) for i, k, s in live if k is not None and s > 0]
        dropped = 0 if retain else sum(1 for _i, key, _s in live if key is None)
        differ("compact_keep keep", (kept[0], kept[1]), (keep, dropped))
        differ("compact_keep asked", list(zip(*kept[5], strict=True)), asked)
    CALLS["compact_rebuild"] += 1
    rebuilt = native.compact_rebuild(plain, count, list(range(0, count, 2)), pip_429, PLACEHOLDER)
    if rebuilt is not None:
        live = live if live is not None else _python_live(plain, count)
        if live is None:
            raise Difference(f"compact_rebuild took a batch Python refuses: {plain.hex()}")
        differ(
            "compact_rebuild",
            rebuilt,
            _python_rebuild(plain, count, list(range(0, count, 2)), pip_429),
        )


# -- bookie entries: scan_heads, verify_heads, verify_records, entry_lines ----------------------

HEAD_OPTIONS = DecodeOptions(
    outer=Outer.BOOKIE_ENTRY, digest_type=DigestType.CRC32C, depth=Depth.ENTRY
)


def _payload(rng: random.Random, entry_id: int) -> bytes:
    md = api.MessageMetadata(producer_name="p", sequence_id=entry_id, publish_time=1000 + entry_id)
    if rng.randrange(2):
        md.num_messages_in_batch = rng.randint(1, 5)
    if rng.randrange(4) == 0:
        md.properties.add(key="k", value="v")
    metadata = (
        reencode(md.SerializeToString(), rng, {4: {}})
        if rng.randrange(3) == 0
        else (md.SerializeToString())
    )
    rest = struct.pack(">I", len(metadata)) + metadata + rng.randbytes(rng.randrange(6))
    body = rest
    if rng.randrange(5):
        body = b"\x0e\x01" + struct.pack(">I", crc32c(rest)) + rest
    if rng.randrange(2):
        bem = api.BrokerEntryMetadata()
        if rng.randrange(4):
            bem.broker_timestamp = rng.getrandbits(rng.choice((40, 64)))
        if rng.randrange(4):
            bem.index = rng.getrandbits(rng.choice((20, 64)))
        raw = bem.SerializeToString()
        raw = reencode(raw, rng) if rng.randrange(3) == 0 else raw
        body = b"\x0e\x02" + struct.pack(">I", len(raw)) + raw + body
    return mutate(body, rng) if rng.randrange(4) == 0 else body


def _entry(rng: random.Random, ledger_id: int, entry_id: int, digest: DigestType) -> bytes:
    return _pack(ledger_id, entry_id, _header(rng, entry_id), _payload(rng, entry_id), digest)


def _header(rng: random.Random, entry_id: int) -> tuple[int, int]:
    """A LAC and a length: mostly plausible, else what a damaged header may hold."""
    lac = rng.choice((entry_id - 1,) * 6 + (-1, entry_id, entry_id + 1, -2, 2**62))
    return lac, rng.choice((100,) * 6 + (0, -1, -(2**63)))


def _pack(
    ledger_id: int,
    entry_id: int,
    header: tuple[int, int],
    payload: bytes,
    digest: DigestType,
    rng: random.Random | None = None,
) -> bytes:
    """The stored entry, with a valid digest: damage is met past it. A MAC with
    :data:`PASSWORD`; given ``rng``, now and then with another password's MAC or a bit
    of its MAC flipped."""
    fields = BookieEntryHeader(ledger_id, entry_id, *header)
    if digest is not DigestType.HMAC:
        return bookkeeper.build(fields, payload, digest)
    how = rng.randrange(8) if rng is not None else 0
    packed = bytearray(
        bookkeeper.build(fields, payload, digest, b"other" if how == 1 else PASSWORD)
    )
    if how == 2 and rng is not None:
        packed[32 + rng.randrange(20)] ^= 1 << rng.randrange(8)
    return bytes(packed)


def _key(digest: DigestType) -> bytes | None:
    return MAC_KEY if digest is DigestType.HMAC else None


def _digests(*digests: DigestType) -> tuple[DigestType, ...]:
    """``digests``, and MAC where the native scans check it."""
    return (*digests, DigestType.HMAC) if MAC else digests


def _log(ledger_id: int, entries: list[bytes]) -> tuple[list[tuple[bytes, bytes]], bytes]:
    window = bytearray()
    items = []
    for entry_id, data in enumerate(entries):
        window += struct.pack(">I", len(data))
        items.append((struct.pack(">qq", ledger_id, entry_id), struct.pack(">q", len(window))))
        window += data
    return items, bytes(window)


@lru_cache(maxsize=4096)
def _python_values(data: bytes, ledger_id: int, entry_id: int, digest: DigestType) -> Any:
    from pulsarctl_py.verify.entries import payload_size

    options = DecodeOptions(
        outer=Outer.BOOKIE_ENTRY, digest_type=digest, password=PASSWORD, depth=Depth.METADATA
    )
    entry = decode_entry(data, options, (ledger_id, entry_id))
    if entry.unverified or any(p.severity == "error" for p in entry.problems):
        return None
    bem = entry.broker_entry_metadata
    return (
        entry_id,
        payload_size(entry, None),
        entry.index,
        entry.num_messages,
        entry.entry_timestamp,
        bem is not None and bem.HasField("broker_timestamp"),
    )


def _state(expected: int) -> list[Any]:
    state: list[Any] = [None] * native.VERIFY_SLOTS
    state[0], state[1], state[2] = expected, 0, 0
    state[5] = state[6] = state[11] = False
    return state


def entries_target(rng: random.Random) -> None:
    ledger_id = rng.choice((3, 3, 3, 2**40 + 1, -5))
    digest = rng.choice(_digests(DigestType.CRC32C, DigestType.CRC32C, DigestType.CRC32))
    n = rng.randint(1, 3)
    headers = [_header(rng, e) for e in range(n)]
    payloads = [_payload(rng, e) for e in range(n)]
    for k in range(BURST):
        h, p = list(headers), list(payloads)
        if k:  # one entry changed: its payload mutated, or its header drawn again
            at = rng.randrange(n)
            if rng.randrange(4):
                p[at] = mutate(p[at], rng)
            else:
                h[at] = _header(rng, at)
        entries = [_pack(ledger_id, e, h[e], p[e], digest, rng) for e in range(n)]
        _check_entries(rng, ledger_id, digest, entries)


def _check_entries(
    rng: random.Random, ledger_id: int, digest: DigestType, entries: list[bytes]
) -> None:
    items, window = _log(ledger_id, entries)
    if digest is DigestType.CRC32C:
        out: list[EntryHead] = []
        CALLS["scan_heads"] += 1
        native.scan_heads(items, 0, ledger_id, 0, window, 0, out)
        for entry_id, head in enumerate(out):
            differ("scan_heads", head, _python_head(entries[entry_id], ledger_id, entry_id))
        if out:
            _lines(rng, ledger_id, [(h, entries[i]) for i, h in enumerate(out)])
    entry_id = len(entries) - 1
    state = _state(entry_id)
    CALLS["verify_records"] += 1
    key = _key(digest)
    got = native.verify_records([(entry_id, entries[-1])], 0, ledger_id, int(digest), state, key)
    if got[1] == native.VERIFY_VALUES:
        differ(
            "verify_records",
            tuple(state[12:]),
            _python_values(entries[-1], ledger_id, entry_id, digest),
        )
    elif got != (0, native.HEADS_IRREGULAR):
        raise Difference(f"verify_records answered {got} for one entry")
    heads_state = _state(entry_id)
    CALLS["verify_heads"] += 1
    stop, status = native.verify_heads(
        items, entry_id, ledger_id, 0, window, 0, int(digest), heads_state, key
    )
    differ("verify_heads", (stop - entry_id, status, heads_state), (*got, state))


# -- every layout's head scans and verify's payload check -------------------------------------
# (decoders/_speedups_layouts.c: scan_slots, verify_slots, item_slots, record_heads,
# log_slots; decoders/_speedups_payloads.c: payload_items, payload_slots, payload_records)


def _layout_payload(rng: random.Random, entry_id: int) -> bytes:
    """An entry's payload layers as the payload check meets them: one value or a batch
    (regular or not), not compressed or LZ4/ZLIB (uncompressed_size right or not), now and
    then a marker, encryption, chunk, Kafka or compacted-index field."""
    from pulsarctl_py.decoders.codecs import compress

    md = api.MessageMetadata(producer_name="p", sequence_id=entry_id, publish_time=1000 + entry_id)
    if rng.randrange(3):
        plain, count = _batch(rng)
        md.num_messages_in_batch = count
    else:
        plain = rng.randbytes(rng.randrange(8))
    body = plain
    codec = rng.choice((0, 0, 1, 2))
    if codec:
        body = compress(codec, plain)
        md.compression = codec  # type: ignore[assignment]
        md.uncompressed_size = max(len(plain) + rng.choice((0, 0, 0, 0, 1, -1)), 0)
    elif rng.randrange(5) == 0:
        md.uncompressed_size = len(plain) + rng.choice((0, 1))
    odd = rng.randrange(16)
    if odd == 0:
        md.marker_type = rng.choice((1, 2, 20))
    elif odd == 1:
        md.encryption_keys.add(key="k", value=b"v")
    elif odd == 2:
        md.uuid, md.chunk_id, md.num_chunks_from_msg = "u", 0, 2
    elif odd == 3:
        md.properties.add(key="entry.format", value=rng.choice(("kafka", "pulsar")))
    elif odd == 4 and md.HasField("num_messages_in_batch"):
        md.compacted_batch_indexes.extend(range(max(md.num_messages_in_batch, 0)))
    metadata = md.SerializeToString()
    rest = struct.pack(">I", len(metadata)) + metadata + body
    if rng.randrange(2):
        rest = b"\x0e\x01" + struct.pack(">I", crc32c(rest)) + rest
    if rng.randrange(2):
        raw = api.BrokerEntryMetadata(broker_timestamp=5, index=entry_id).SerializeToString()
        rest = b"\x0e\x02" + struct.pack(">I", len(raw)) + raw + rest
    return mutate(rest, rng) if rng.randrange(6) == 0 else rest


@lru_cache(maxsize=4096)
def python_payload_ok(
    data: bytes, ledger_id: int, entry_id: int, digest: DigestType, limit: int | None
) -> Any:
    """Whether the decoder's payload step finds no error in an entry read clean to its
    metadata (verify's completeness check); None when the entry is not clean there."""
    options = DecodeOptions(
        outer=Outer.BOOKIE_ENTRY, digest_type=digest, password=PASSWORD, depth=Depth.METADATA
    )
    entry = decode_entry(data, options, (ledger_id, entry_id))
    if any(p.severity == "error" for p in entry.problems) or entry.metadata is None:
        return None
    messages = DecodeOptions(
        outer=Outer.BOOKIE_ENTRY,
        digest_type=digest,
        password=PASSWORD,
        depth=Depth.MESSAGES,
        max_uncompressed=limit,
    )
    entry_module.decode_payload(entry, messages)
    return entry.ok


def _layout_head(data: bytes, ledger_id: int, entry_id: int, digest: DigestType) -> Any:
    options = DecodeOptions(
        outer=Outer.BOOKIE_ENTRY, digest_type=digest, password=PASSWORD, depth=Depth.ENTRY
    )
    return decode_head(data, options, (ledger_id, entry_id))


def layouts_target(rng: random.Random) -> None:
    from pulsarctl_py.decoders.codecs import decompress

    ledger_id = rng.choice((3, 3, 2**40 + 1))
    digest = rng.choice(_digests(DigestType.CRC32C, DigestType.CRC32, DigestType.DUMMY))
    kind, key = int(digest), _key(digest)
    n = rng.randint(1, 4)
    entries = []
    for e in range(n):
        body = _layout_payload(rng, e) if rng.randrange(4) else _payload(rng, e)
        entries.append(_pack(ledger_id, e, _header(rng, e), body, digest, rng))
    items, window = _log(ledger_id, entries)
    slots = b"".join(value for _, value in items)  # log 0: a slot is the offset
    records = list(enumerate(entries))

    CALLS["item_slots"] += 1
    differ("item_slots", native.item_slots(items, 0, ledger_id), (slots, 0, n))
    locs: dict[int, bytearray] = {}
    sizes: dict[int, bytearray] = {}
    CALLS["log_slots"] += 1
    native.log_slots(window, 0, 0, 0, locs, sizes)
    lens = b"".join(struct.pack(">I", len(data)) for data in entries)
    differ("log_slots", (bytes(locs[ledger_id]), bytes(sizes[ledger_id])), (slots, lens))

    heads: list[Any] = []
    CALLS["scan_slots"] += 1
    stop, status = native.scan_slots(slots, 0, 0, ledger_id, 0, window, 0, kind, heads, False, key)
    recorded: list[Any] = []
    CALLS["record_heads"] += 1
    differ(
        "record_heads",
        (native.record_heads(records, 0, ledger_id, kind, recorded, False, key), recorded),
        ((stop, status), heads),
    )
    for entry_id, head in enumerate(heads):
        differ("scan_slots", head, _layout_head(entries[entry_id], ledger_id, entry_id, digest))
    if heads and digest is DigestType.HMAC:  # HMAC lines from the heads the key verified
        _lines(rng, ledger_id, [(h, entries[i]) for i, h in enumerate(heads)], digest)

    entry_id = n - 1
    state, slot_state = _state(entry_id), _state(entry_id)
    CALLS["verify_records"] += 1
    got = native.verify_records([records[-1]], 0, ledger_id, kind, state, key)
    CALLS["verify_slots"] += 1
    found = native.verify_slots(slots, entry_id, 0, ledger_id, 0, window, 0, kind, slot_state, key)
    differ("verify_slots", (found[0] - entry_id, found[1], slot_state), (*got, state))

    limit = rng.choice((None, None, 1 << 20, 4))
    CALLS["payload_records"] += 1
    named = native.payload_records(records, 0, n, kind, limit, decompress)
    CALLS["payload_items"] += 1
    differ(
        "payload_items",
        native.payload_items(items, 0, n, window, 0, kind, limit, decompress),
        named,
    )
    CALLS["payload_slots"] += 1
    differ(
        "payload_slots",
        native.payload_slots(slots, 0, n, window, 0, kind, limit, decompress),
        named,
    )
    for entry_id, data in records:
        if entry_id in named:
            continue  # the decoder judges it
        ok = python_payload_ok(data, ledger_id, entry_id, digest, limit)
        if ok is not None:
            differ("payload_records", True, ok)


@lru_cache(maxsize=4096)
def _python_head(data: bytes, ledger_id: int, entry_id: int) -> EntryHead:
    return decode_head(data, HEAD_OPTIONS, (ledger_id, entry_id))


def _lines(
    rng: random.Random,
    ledger_id: int,
    pairs: list[tuple[EntryHead, bytes]],
    kind: DigestType = DigestType.CRC32C,
) -> None:
    """entry_lines over heads the scanner made (for a ledger of digest ``kind``), some
    changed, against line_maker's line."""
    from dataclasses import replace

    from pulsarctl_py import inspect_heads

    for _ in range(4):
        changed = list(pairs)
        if rng.randrange(4):
            at = rng.randrange(len(changed))
            head, data = changed[at]
            name = rng.choice(("lac", "length", "entry_id", "index", "broker_timestamp", "size"))
            value = rng.choice((-1, -2, 0, 2**63 - 1, 2**64, None, getattr(head, name)))
            if name in ("entry_id", "size") and value is None:
                value = -1
            changed[at] = (replace(head, **{name: value}), data)
        lac = rng.choice((None, -1, 0, 5))
        digest = rng.choice((kind, None))
        view = SimpleNamespace(ledger_id=ledger_id, lac=lac, kind="data", digest_type=digest)
        runs = inspect_heads._native_lines(view, False)
        if runs is None:
            continue
        CALLS["entry_lines"] += 1
        made = runs(changed, 0, 10)[0]
        line = inspect_heads.line_maker(view)
        differ("entry_lines", made, [line(h, d) for h, d in changed[: len(made)]])


# -- v3 answers --------------------------------------------------------------------------------


@cache
def _v3_seeds() -> list[bytes]:
    rng = random.Random(3)
    out = []
    for _ in range(200):
        status = rng.choice(sorted(wire.V3_FROM_NAME))
        body = rng.randbytes(rng.randrange(20)) if rng.randrange(3) else None
        frame = wire.v3_read_response(
            rng.getrandbits(64),
            status,
            rng.getrandbits(63),
            rng.getrandbits(63),
            body,
            rng.randrange(-1, 100),
        )
        out.append(frame[4:])
    return out


def v3_target(rng: random.Random) -> None:
    payloads = []
    for _ in range(rng.randint(1, 3)):
        payload = rng.choice(_v3_seeds())
        if rng.randrange(2):
            payload = reencode(payload, rng, {1: {}, 100: {}})
        payloads.append(mutate(payload, rng) if rng.randrange(3) == 0 else payload)
    for k in range(BURST):
        changed = list(payloads)
        if k:
            at = rng.randrange(len(changed))
            changed[at] = mutate(changed[at], rng)
        _check_v3(changed)


def _check_v3(payloads: list[bytes]) -> None:
    buf = b"".join(struct.pack(">I", len(p)) + p for p in payloads)
    out: list[tuple] = []
    CALLS["v3_read_replies"] += 1
    native.v3_read_replies(buf, 0, wire.MAX_FRAME, out)
    for payload, taken in zip(payloads, out, strict=False):
        try:
            reply = wire.parse_v3_response(payload)
        except LedgerctlError:
            raise Difference(
                f"v3_read_replies took a frame protobuf refuses: {payload.hex()}"
            ) from None
        code = wire.V3_FROM_NAME.get(reply.status)
        differ(
            "v3_read_replies",
            taken,
            (reply.key, code, reply.ledger_id, reply.entry_id, reply.body, reply.max_lac),
        )


# -- the key table, arguments --------------------------------------------------------------------


def key_table_target(rng: random.Random) -> None:
    table = native.key_table()
    model: dict[bytes, tuple[bytes, bool]] = {}
    for _ in range(rng.randint(1, 12)):
        key, rank, tomb = (
            rng.randbytes(rng.randrange(3)),
            rng.randbytes(rng.randrange(3)) if rng.randrange(2) else _position_rank(rng),
            bool(rng.randrange(2)),
        )
        op = rng.randrange(5)
        CALLS["key_table"] += 1
        if op < 2:
            fresh = key not in model
            if fresh or rank > model[key][0]:
                model[key] = (rank, tomb)
            differ("KeyTable.offer", table.offer(key, rank, tomb), fresh)
        elif op == 2:
            differ("KeyTable.put", table.put(key, rank, tomb), key not in model)
            model[key] = (rank, tomb)
        elif op == 3:
            differ("KeyTable.get", table.get(key), model.get(key))
        else:
            differ(
                "KeyTable.min_rank",
                table.min_rank(),
                min((r for r, _ in model.values()), default=None),
            )
    differ(
        "KeyTable.scan",
        sorted(table.scan(0, 100)[1]),
        sorted((k, r, t) for k, (r, t) in model.items()),
    )
    prefix, skip = rng.randbytes(rng.randrange(2)), rng.randbytes(rng.randrange(5))
    spans = _spans(rng, model)
    bits = bytearray(rng.randrange(4) + (sum(c for _, _, c in spans) + 7) // 8)
    want = bytearray(bits)
    CALLS["key_table"] += 1
    try:
        got: Any = (table.live_entries(prefix, skip, packed_spans(spans), bits), bits)
    except ValueError as exc:
        got = f"ValueError: {exc}"
    differ(
        "KeyTable.live_entries",
        got,
        python_live_entries(model, prefix, skip, spans, want),
    )


def _spans(rng: random.Random, model: dict[bytes, tuple[bytes, bool]]) -> list[tuple]:
    """Spans (ledger, first entry, count) for live_entries around the ranks' positions:
    mostly rising and disjoint, at times not (an error to give), some at 2^64's edge."""
    at = sorted({struct.unpack_from(">QQ", r) for r, _ in model.values() if len(r) >= 16})
    spans = []
    for ledger, entry in at[: rng.randrange(len(at) + 1)]:
        first = max(entry - rng.randrange(3), 0)
        spans.append((ledger, first, min(rng.randrange(1, 5), 2**64 - first)))
    spans.extend(
        (rng.randrange(3), rng.randrange(3), rng.randrange(3)) for _ in range(rng.randrange(3))
    )
    if rng.randrange(4):
        spans = disjoint_spans(sorted(spans))
    return spans


def disjoint_spans(spans: list[tuple]) -> list[tuple]:
    """``spans`` (sorted) without each one that overlaps a span kept before it."""
    out: list[tuple] = []
    for ledger, first, count in spans:
        if out and out[-1][0] == ledger and first < out[-1][1] + out[-1][2]:
            continue
        out.append((ledger, first, count))
    return out


def packed_spans(spans: list[tuple]) -> bytes:
    """Spans (ledger, first entry, count) as ``live_entries`` takes them, as given."""
    return b"".join(struct.pack(">QQQ", *span) for span in spans)


def _position_rank(rng: random.Random) -> bytes:
    """A rank as core.position_rank makes it (the table packs those whose entry and index
    fit), with values at and across the packed form's limits."""

    def pick(limits: tuple[int, ...], top: int) -> int:
        if rng.randrange(2):
            return rng.randrange(4)
        edge = rng.choice(limits)
        return min(max(edge + rng.randrange(-1, 2), 0), top)

    edges = (127, 128, 16_384, 2**28, 2**32, 2**63)
    ledger, entry = pick(edges, 2**64 - 1), pick(edges, 2**64 - 1)
    return struct.pack(">QQI", ledger, entry, pick((2**16, 2**31), 2**32 - 1))


def python_live_entries(
    model: dict[bytes, tuple[bytes, bool]],
    prefix: bytes,
    skip: bytes,
    spans: list[tuple[int, int, int]],
    bits: bytearray,
) -> tuple[int, bytearray] | str:
    """What ``KeyTable.live_entries`` answers (and leaves in ``bits``) for a table holding
    ``model``, or the error it raises."""
    total, end = 0, (-1, 0)
    for ledger, first, count in spans:
        if first + count >= 2**64 or total + count >= 2**64:
            return "ValueError: live_entries: a span past 2^64"
        if (ledger, first) < end:
            return "ValueError: live_entries: spans not rising or overlapping"
        end, total = (ledger, first + count), total + count
    if total > len(bits) * 8:
        return "ValueError: live_entries: bits shorter than the spans"
    others = 0
    for key, (rank, tomb) in model.items():
        if not key.startswith(prefix):
            others += 1
        elif not tomb and len(rank) >= 16 and rank[16:] != skip:
            ledger, entry = struct.unpack_from(">QQ", rank)
            at = 0
            for span_ledger, first, count in spans:
                if span_ledger == ledger and first <= entry < first + count:
                    bit = at + entry - first
                    bits[bit >> 3] |= 1 << (bit & 7)
                at += count
    return others, bits


# -- an entry's JSON (entry_doc) ---------------------------------------------------------------


@cache
def _corpus() -> list[bytes]:
    """The entries real clients wrote (tests/data/real-client): batches, chunks, every
    codec, encrypted ones (decoded without their key)."""
    from pathlib import Path

    return [
        p.read_bytes()
        for p in sorted(Path(__file__).parent.parent.glob("data/real-client/*/*.bin"))
    ]


def _doc_input(rng: random.Random) -> tuple[bytes, DecodeOptions, tuple[int, int] | None]:
    """Stored bytes as the other targets make them, and options to decode them with."""
    entry_id = rng.randrange(4)
    digest = rng.choice(_digests(DigestType.CRC32C, DigestType.CRC32, DigestType.DUMMY))
    kind = rng.randrange(4)
    if kind == 0:
        data, outer = _entry(rng, 7, entry_id, digest), Outer.BOOKIE_ENTRY
    elif kind == 1:
        payload = _layout_payload(rng, entry_id)
        data, outer = (
            _pack(7, entry_id, _header(rng, entry_id), payload, digest),
            Outer.BOOKIE_ENTRY,
        )
    elif kind == 2:
        data, outer = _layout_payload(rng, entry_id), Outer.PULSAR_ENTRY
    else:
        corpus = _corpus()
        data = rng.choice(corpus) if corpus else _payload(rng, entry_id)
        outer = Outer.PULSAR_ENTRY
        if rng.randrange(3) == 0:
            data = mutate(data, rng)
    options = DecodeOptions(
        outer=rng.choice((outer, outer, Outer.AUTO)),
        digest_type=rng.choice((digest, None)),
        password=rng.choice((PASSWORD, None)),
        depth=rng.choice(list(Depth)),
    )
    return data, options, rng.choice(((7, entry_id), (7, entry_id), None, (-1, 2**63)))


def _as_json(doc: Any) -> bytes:
    """The JSON text of a document (orjson, key order kept); a value orjson cannot write
    (a hostile one) is named by its type and identity."""
    import json

    import orjson

    try:
        return orjson.dumps(doc)
    except TypeError:
        pass
    try:
        return json.dumps(doc, default=lambda o: f"<{type(o).__name__} {id(o)}>").encode()
    except (TypeError, ValueError):  # a key JSON cannot take: compared as dicts only
        return b"?"


def _compare_doc(entry: Any, what: str) -> Any:
    """native.entry_doc(entry) against entry.to_json_python() when it built a dict."""
    got = native.entry_doc(entry)
    if got is not None:
        slow = entry.to_json_python()
        differ(what, _as_json(got), _as_json(slow))
        differ(what, got, slow)
    return got


def entry_doc_target(rng: random.Random) -> None:
    """decode_entry over generated, mutated and real entries at every depth; the native
    document (when not None) is the Python path's, as JSON text with its key order."""
    data, options, position = _doc_input(rng)
    entry = decode_entry(data, options, position)
    CALLS["entry_doc"] += 1
    _compare_doc(entry, f"entry_doc {data.hex()} {options.depth.name} {position}")


class _BytesSub(bytes):
    pass


class _StrSub(str):
    def __hash__(self) -> int:  # user code where a dict is filled: empties the lists read
        _HOSTILE_ACTION[0]()
        return str.__hash__(self)


class _IntSub(int):
    pass


class _DictSub(dict):  # type: ignore[type-arg]
    pass


#: what the hostile objects of _hostile_values do when called (set per call)
_HOSTILE_ACTION: list[Callable[[], Any]] = [lambda: None]


class _Hostile:
    """An object whose conversions raise (``raises``) or empty the entry's lists first."""

    def __init__(self, raises: bool) -> None:
        self.raises = raises

    def _act(self) -> None:
        if self.raises:
            raise ValueError("hostile")
        _HOSTILE_ACTION[0]()

    def __index__(self) -> int:
        self._act()
        return 1

    def __len__(self) -> int:
        self._act()
        return 1

    def __eq__(self, other: object) -> bool:
        self._act()
        return False

    def __hash__(self) -> int:
        self._act()
        return 1

    def __iter__(self) -> Any:
        self._act()
        return iter(())

    def __str__(self) -> str:
        self._act()
        return "hostile"

    __repr__ = __str__


def _hostile_values(rng: random.Random) -> list[Any]:
    meddler = protowire.Meddler(rng.choice((0, 1, -1, 2**63)), lambda: _HOSTILE_ACTION[0]())
    return [
        None,
        "text",
        b"bytes",
        2**64 + 1,
        -(2**70),
        -1,
        1.5,
        float("nan"),
        True,
        [None, "x", b"y", [1]],
        [meddler, _Hostile(False)],
        [{1: 2}, {"k": b"v"}, {_StrSub("k"): 1}],
        memoryview(bytes(range(16)))[::2],
        memoryview(bytes(8)).cast("H"),
        memoryview(bytearray(4)).toreadonly(),
        _BytesSub(b"sub"),
        _StrSub("error"),
        _StrSub("bookie-digest"),
        _IntSub(3),
        _DictSub(a=1),
        {_StrSub("k"): 1, "b": [meddler]},
        {"k": _StrSub("v")},
        {1: "v"},
        (1,),
        (7, _IntSub(1)),
        (7, 2**70),
        meddler,
        _Hostile(True),
        _Hostile(False),
        SimpleNamespace(),
        object(),
    ]


def _entry_doc_arguments(rng: random.Random) -> None:
    """Hostile objects into entry_doc: a decoded entry with one slot (of the entry, a
    layer, a check, a problem or a message, or an item of their lists) replaced by a value
    of a wrong type, of a subclass, or whose conversions raise or empty the entry's lists.
    entry_doc answers None, raises TypeError/ValueError, or gives the Python path's dict."""
    from pulsarctl_py.decoders.nodes import Check, Layer, Problem

    data, options, position = _doc_input(rng)
    entry = decode_entry(data, options, position)
    if rng.randrange(4) == 0:
        entry.problems.append(Problem("error", "entry", 0, "m"))
    victims: list[list[Any]] = [entry.layers, entry.messages, entry.problems]

    def empty() -> None:
        for victim in victims:
            victim.clear()

    hostile = rng.choice(_hostile_values(rng))
    targets: list[Any] = [entry, *entry.layers, *entry.messages, *entry.problems]
    targets += [layer.check for layer in entry.layers if layer.check is not None]
    target = rng.choice(targets)
    where = rng.randrange(3)
    if where == 0:  # a slot
        names = [n for n in type(target).__slots__ if n != "__weakref__"]
        setattr(target, rng.choice(names), hostile)
    elif where == 1:  # an item of one of the lists, or a value of a layer's fields
        lists = [v for v in victims if v] or victims
        chosen = rng.choice(lists)
        if chosen:
            chosen[rng.randrange(len(chosen))] = hostile
        else:
            chosen.append(hostile)
    else:
        layers = entry.layers or [Layer("x", 0, 0, b"")]
        fields = rng.choice(layers).fields
        fields[rng.choice(("k", _StrSub("k"), 1))] = hostile
    argument = entry
    if rng.randrange(8) == 0:  # not an Entry
        argument = rng.choice(
            (hostile, target, Check("crc32c", "0", "0", True), SimpleNamespace(), 3, None)
        )
    acted: list[bool] = []
    _HOSTILE_ACTION[0] = lambda: (acted.append(True), empty())
    CALLS["entry_doc (arguments)"] += 1
    try:
        got = native.entry_doc(argument)
    except (TypeError, ValueError):
        return
    finally:
        _HOSTILE_ACTION[0] = lambda: None
    if got is None:
        return
    if acted:  # Python code ran while the entry was read, and changed it: no answer holds
        raise Difference(f"entry_doc (arguments): a document after {hostile!r} ran: {got!r}")
    if argument is not entry:
        raise Difference(f"entry_doc (arguments): a document of {argument!r}")
    try:
        slow = entry.to_json_python()
    except Exception as exc:  # the native path answered where the Python path cannot
        raise Difference(f"entry_doc (arguments): native {got!r}, Python {exc!r}") from exc
    differ("entry_doc (arguments)", _as_json(got), _as_json(slow))
    differ("entry_doc (arguments)", got, slow)


@cache
def _argument_log() -> tuple[list[tuple[bytes, bytes]], bytes]:
    rng = random.Random(5)
    return _log(3, [_entry(rng, 3, e, DigestType.CRC32C) for e in range(2)])


def arguments_target(rng: random.Random) -> None:
    """Hostile arguments to every function: negative starts, windows near 2^63, and
    Meddlers (tests/support/protowire.py) whose conversions empty the lists being read. Each call
    answers or raises TypeError/ValueError/OverflowError; a crash is the sanitizers'."""
    from pulsarctl_py.decoders.speedups import bind

    logged, window = _argument_log()
    items = list(logged)
    state = _state(0)
    victims: list[list[Any]] = [items, state]
    meddler = protowire.Meddler(rng.choice((0, 1, -1, 2**63)), lambda: [v.clear() for v in victims])
    if rng.randrange(3) == 0:
        state[rng.choice((0, 1, 3, 5, 11))] = meddler

    def pick(*choices: Any) -> Any:
        return rng.choice(choices)

    start = pick(0, 1, -1, 2**40, meddler, -(2**62))
    slots = b"".join(value for _, value in logged)  # the log's entries as slots of log 0
    tables: dict[Any, Any] = {3: pick(bytearray(8), b"", meddler)}

    def meddling(*args: Any) -> bytes:  # a decompress that empties the lists being read
        for victim in victims:
            victim.clear()
        return b""

    window_start = pick(0, -1, 2**63 - 2, 2**62, meddler)
    # a scan's key: the MAC's, of a wrong length or type, a meddler, or one given with
    # another digest (the digests are picked with MAC (2) among them)
    key = pick(None, MAC_KEY, MAC_KEY, MAC_KEY[:19], MAC_KEY + b"x", bytearray(MAC_KEY), meddler)
    calls: list[tuple[str, Callable[[], Any]]] = [
        (
            "scan_heads",
            lambda: native.scan_heads(items, start, pick(3, meddler), 0, window, window_start, []),
        ),
        (
            "verify_heads",
            lambda: native.verify_heads(
                items, start, 3, 0, window, window_start, pick(3, 2), state, key
            ),
        ),
        (
            "verify_records",
            lambda: native.verify_records(
                [(pick(0, meddler), pick(window, meddler))], start, 3, pick(3, 2), state, key
            ),
        ),
        (
            "entry_lines",
            lambda: native.entry_lines(
                [], start, 3, 3, pick(None, 1, meddler), b"}\n", pick(False, True), pick(3, 2, 5)
            ),
        ),
        (
            "v3_read_replies",
            lambda: native.v3_read_replies(window, pick(0, -1, 5), pick(0, -1, 99), []),
        ),
        (
            "split_batch",
            lambda: native.split_batch(
                window, pick(2, meddler), pick(None, [0, meddler]), pick(0, meddler), 0, None, 0, 0
            ),
        ),
        (
            "compact_offer",
            lambda: native.compact_offer(
                window,
                pick(2, meddler),
                pick(None, [0, meddler]),
                b"k",
                bytes(16),
                native.key_table(),
            ),
        ),
        (
            "compact_keep",
            lambda: native.compact_keep(
                window, 2, pick(None, [meddler, 1]), b"k", bytes(16), None, meddler, False, b""
            ),
        ),
        ("compact_rebuild", lambda: native.compact_rebuild(window, 2, [0, meddler], False, b"")),
        ("key_table", lambda: native.key_table().offer(b"", b"", meddler)),
        (
            "scan_slots",
            lambda: native.scan_slots(
                pick(slots, window),
                start,
                pick(0, -1, 2**63 - 1),
                3,
                0,
                window,
                window_start,
                pick(3, 1, 4, 2),
                [],
                False,
                key,
            ),
        ),
        (
            "verify_slots",
            lambda: native.verify_slots(
                pick(slots, window),
                start,
                pick(0, 2**63 - 1),
                3,
                0,
                window,
                window_start,
                pick(3, 1, 4, 0, 2),
                state,
                key,
            ),
        ),
        ("item_slots", lambda: native.item_slots(items, start, pick(3, meddler))),
        (
            "record_heads",
            lambda: native.record_heads(
                [(pick(0, meddler), pick(window, meddler))],
                start,
                3,
                pick(3, 4, 2),
                [],
                False,
                key,
            ),
        ),
        (
            "log_slots",
            lambda: native.log_slots(
                window, start, window_start, pick(0, -1, 2**31), pick({}, tables), pick({}, tables)
            ),
        ),
        (
            "payload_items",
            lambda: native.payload_items(
                items,
                start,
                pick(0, 2, -1, meddler),
                window,
                window_start,
                pick(3, 1, 4, 2),
                pick(None, meddler),
                pick(meddling, None),
            ),
        ),
        (
            "payload_slots",
            lambda: native.payload_slots(
                pick(slots, window),
                start,
                pick(0, 2, 2**40),
                window,
                window_start,
                3,
                None,
                pick(meddling, 1),
            ),
        ),
        (
            "payload_records",
            lambda: native.payload_records(
                [(0, pick(window, meddler))], start, pick(0, 1), pick(3, 9), None, meddling
            ),
        ),
        ("mac_available", lambda: native.mac_available()),
        ("bind", lambda: native.bind(native.HEAD, pick(int, EntryHead), (pick("ledger_id", 1),))),
    ]
    _entry_doc_arguments(rng)
    try:
        for name, call in calls:
            # bind has no data to fuzz: its calls are these; the others' are counted apart
            CALLS[name if name in ("bind", "mac_available") else f"{name} (arguments)"] += 1
            try:
                call()
            except (TypeError, ValueError, OverflowError):
                pass
    finally:
        bind(native.HEAD, EntryHead)  # the real binding again, whatever bind was given


# -- CRC32C (crc32c), against the crc32c package ---------------------------------------------


def crc32c_target(rng: random.Random) -> None:
    """Data of every length around the 8-byte steps, at every alignment (a slice of a
    longer buffer), continuing from any int (both take its low 32 bits)."""
    import crc32c as package

    size = rng.choice([rng.randrange(17), rng.randrange(4096), rng.randrange(1 << 17)])
    offset = rng.randrange(8)
    data = memoryview(rng.randbytes(size + offset))[offset:]
    value = rng.choice([0, rng.getrandbits(32), rng.getrandbits(70) - (1 << 69), -1])
    CALLS["crc32c"] += 1
    differ("crc32c", native.crc32c(data, value), package.crc32c(data, value))
    CALLS["crc32c (arguments)"] += 1
    for bad in ("text", None, 1.5):
        try:
            native.crc32c(bad)
        except TypeError:
            continue
        raise Difference(f"crc32c accepted {bad!r}")


TARGETS: dict[str, Callable[[random.Random], None]] = {
    "batch": batch_target,
    "entries": entries_target,
    "layouts": layouts_target,
    "v3": v3_target,
    "key-table": key_table_target,
    "entry-doc": entry_doc_target,
    "arguments": arguments_target,
    "crc32c": crc32c_target,
}
