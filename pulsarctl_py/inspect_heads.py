"""inspect read from entry heads: one pass, one digest computation per entry.

At ``--depth entry`` inspect shows each entry's bookie header, digest check and broker
entry metadata: what :meth:`BookieStore.read_head_batches` gives in one pass over the
ledger (the native scanner of ``decoders/_speedups.c`` verifies the CRC32C digest and
reads the broker entry metadata of clean entries; any other entry takes the Python path,
see :mod:`pulsarctl_py.stores.bookie.heads`). From the heads:

* the filters on broker entry metadata (``--since``/``--until`` on the broker timestamp,
  ``--broker-metadata``) drop entries before anything is built, at every depth: a head
  holds the broker entry metadata ``decode_entry`` finds. Below ``--depth entry`` an entry
  without a broker timestamp is timed by its publish time, so it is decoded and the
  general filter decides; at ``--depth messages`` a dropped entry whose message metadata
  makes it a chunk is still decoded and given to the chunk assembler, so a message whose
  last chunk is kept is joined from the chunks before the cut, as the general path does;
* at ``--depth entry`` a clean entry of the regular shape (a plausible header, its
  CRC32C, CRC32 or MAC digest verified or a DUMMY digest, broker entry metadata of
  broker_timestamp and index only, or none, then the 0x0e01 checksum) gets its JSON line
  straight from the head and its bytes (:func:`line_maker`): the bytes ``entry_json`` and
  ``render.write_jsonl`` write for the decoded entry. With a CRC32C, CRC32 or DUMMY digest
  (from the metadata; or CRC32C checked entry by entry where it was detected), no
  ``--hash``, no filter and no ``--limit``, runs of such entries get their lines from
  the native ``entry_lines``
  (:func:`_native_lines`), up to :data:`CHUNK` at once; it stops at the first entry it is
  not sure of, and ``line`` takes that one (tests/test_inspect_heads.py checks both make
  the same lines);
* any other kept entry is decoded by ``decode_entry`` from the bytes already read, with
  the options the general path (``LedgerSource.entries``) uses.

A store error (a damaged record or index) hands the rest of the ledger to the general
path, which reports it as it always does; so does a ledger whose entries are mostly not
regular (another digest type found by detection, compacted framing), where decoding
twice would cost more than it saves. tests/test_inspect_heads.py checks that both paths
write the same bytes and the same summary, on every corpus and on damaged stores.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import ChunkAssembler, DecodeOptions, Depth, Entry, decode_entry
from pulsarctl_py.decoders.bookkeeper import HEADER
from pulsarctl_py.decoders.checksums import DIGESTS, DigestType, crc32c
from pulsarctl_py.decoders.heads import EntryHead
from pulsarctl_py.decoders.protos import parse_proto
from pulsarctl_py.decoders.speedups import native
from pulsarctl_py.errors import LedgerctlError, StoreUnavailable
from pulsarctl_py.inspect_request import in_time_range, read_entries
from pulsarctl_py.proto import pulsar_api_pb2 as api

if TYPE_CHECKING:
    from pulsarctl_py.coverage import Tracker
    from pulsarctl_py.inspect_request import InspectRequest, Summary
    from pulsarctl_py.ledgers import LedgerSource, LedgerView

#: entries read before a ledger whose entries are mostly not regular goes the general way
PROBE = 64
#: JSON lines handed on at once when no --limit counts them one by one (about 45 KB of
#: small entries' lines: joined, they stay below the size an allocator maps pages for)
CHUNK = 64
_BEM_MAGIC = b"\x0e\x02"
_CHECKSUM_MAGIC = b"\x0e\x01"
#: digest types whose entries are read from heads (None: detected, served as CRC32C);
#: a MAC digest (see :func:`serves`) only with its password, at ``--depth entry``
_HEAD_DIGESTS = (DigestType.CRC32C, DigestType.CRC32, DigestType.DUMMY, None)
#: the digest types the native line builder writes (its DigestType numbers; a MAC from
#: heads whose digest was verified with the password, as ``line`` takes them)
_NATIVE_DIGESTS = (DigestType.CRC32C, DigestType.CRC32, DigestType.DUMMY, DigestType.HMAC)
#: an entry's digest check in its JSON, for a DUMMY digest
_DUMMY_CHECK = (
    '{"type":"DUMMY","stored":"","computed":null,"ok":null,"verified":false,'
    '"note":"DUMMY digest: the ledger stores none"}'
)


def serves(source: LedgerSource, view: LedgerView, request: InspectRequest) -> bool:
    """Whether this ledger's entries are read from heads for this request.

    A MAC digest is served with its password at ``--depth entry`` only: the native head
    scans check it where ``_speedups_mac`` is built (else the Python decoder builds the
    heads, and a regular entry's line still costs less than its decoded entry's JSON,
    bench/inspect_paths.py: 21 against 27 µs per entry); deeper every kept entry would be
    decoded twice (50-80 against 35-63 µs), and without the password every entry carries
    a warning to decode."""
    bookie = source.bookie
    digest = view.digest_type
    mac = digest is DigestType.HMAC and view.password is not None and request.depth is Depth.ENTRY
    return (
        request.verify
        and view.tiered is None  # read from tiered storage: the general path
        and view.kind != "cursor"  # decoded as PositionInfo: the general path
        and view.entry_format is None  # a transaction store's records: the general path
        and (digest in _HEAD_DIGESTS or mac)
        and hasattr(bookie, "read_head_batches")
        # deeper, heads only save the entries the filters on broker metadata drop
        and (request.depth is Depth.ENTRY or _head_filters(request))
    )


def _head_filters(request: InspectRequest) -> bool:
    return (
        request.broker_metadata is not None
        or request.since is not None
        or request.until is not None
    )


def dropped(head: EntryHead, request: InspectRequest) -> bool:
    """Whether inspect's entry filters (``_keep``) surely drop this entry, from its head.

    The broker entry metadata of a head is the decoded entry's. The entry timestamp is
    the broker timestamp, else (below ``Depth.ENTRY``) the publish time, which a head
    does not hold: then only the decoded entry can tell.
    """
    if request.broker_metadata is not None and head.broker_metadata != request.broker_metadata:
        return True
    if request.since is not None or request.until is not None:
        ts = head.broker_timestamp
        if ts is None:
            return request.depth is Depth.ENTRY  # no metadata decoded: no time at all
        return not in_time_range(ts, request)
    return False


def _add_counts(
    summary: Summary,
    entries: int,
    size: int,
    with_broker_metadata: int,
    times: tuple[int | None, int | None],
    indexes: tuple[int | None, int | None],
    unverified: bool = False,
) -> None:
    """``Summary.add`` of clean entries decoded at ``Depth.ENTRY``, from their heads, at
    once: their number, sizes, how many have broker entry metadata, and the lowest and
    highest broker timestamp (a non-zero one) and index; ``unverified``: their digests
    are not verified (DUMMY: none stored)."""
    summary.entries += entries
    if unverified:
        summary.unverified += entries
    summary.bytes += size
    summary.with_broker_metadata += with_broker_metadata
    low, high = times
    if low is not None and (summary.first_time is None or low < summary.first_time):
        summary.first_time = low
    if high is not None and (summary.last_time is None or high > summary.last_time):
        summary.last_time = high
    low, high = indexes
    if low is not None and (summary.first_index is None or low < summary.first_index):
        summary.first_index = low
    if high is not None and (summary.last_index is None or high > summary.last_index):
        summary.last_index = high


#: bytes of a varint by the bit length of its value
_VARINT = tuple(max(1, (bits + 6) // 7) for bits in range(65))


def _line_tail(view: LedgerView) -> str:
    """The end of every JSON line of the ledger, after ``"confirmed":...``."""
    return f',"ledger_kind":{json.dumps(view.kind, ensure_ascii=False)}}}\n'


def _native_lines(view: LedgerView, hashes: bool) -> Callable[..., Any] | None:
    """``lines(pairs, start, room)``: the native :func:`line_maker` over a batch of heads
    (``entry_lines`` of decoders/_speedups.c: the same bytes for the entries it takes, the
    rest left to ``line``), or None where it does not apply: no native module, payload
    hashes, a digest type other than CRC32C, CRC32, DUMMY and MAC, ids past int64. A digest
    type not in the metadata is checked entry by entry as CRC32C, as ``line`` does."""
    digest = view.digest_type
    if native is None or hashes or (digest is not None and digest not in _NATIVE_DIGESTS):
        return None
    detected = digest is None
    kind = int(digest if digest is not None else DigestType.CRC32C)
    entry_lines = getattr(native, "entry_lines", None)
    lac = view.lac
    fits = -(2**63) <= view.ledger_id < 2**63 and (lac is None or -(2**63) <= lac < 2**63)
    if entry_lines is None or not fits:
        return None
    ledger, tail = view.ledger_id, _line_tail(view).encode()

    def lines(pairs: list[Any], start: int, room: int) -> Any:
        return entry_lines(pairs, start, room, ledger, lac, tail, detected, kind)

    return lines


def line_maker(view: LedgerView, hashes: bool = False) -> Callable[[EntryHead, bytes], str | None]:
    """``line(head, data)``: the JSON line inspect writes for this ledger's entry at
    ``Depth.ENTRY``, or None when the entry is not of the regular shape (then it must be
    decoded); ``hashes``: with ``payload_sha256`` (``--hash``). What is the same for
    every entry of the ledger is formatted once."""
    lac = view.lac
    ledger = view.ledger_id
    tail = _line_tail(view)
    # digest type not known: a head the Python path made may hold another digest type
    # (detected per entry); the line is for one detection calls CRC32C
    detected = view.digest_type is None
    kind = view.digest_type if view.digest_type is not None else DigestType.CRC32C
    name = kind.name
    dummy = kind is DigestType.DUMMY
    bookie = HEADER.size + DIGESTS[kind].size  # where the payload starts
    bem_layer = f',{{"layer":"broker-entry-metadata","offset":{bookie},"length":'
    sha256 = hashlib.sha256
    varint = _VARINT
    payload_at = bookie + 2
    # a DUMMY digest stores nothing and verifies nothing; the others verified
    digest_ok = None if dummy else True
    # the line's text around the values that change from entry to entry
    check_head = f'{{"type":"{name}","stored":"'
    check_tail = ',"ok":true,"verified":true}'
    head_a = f'{{"position":"{ledger}:'
    head_b = f'","ledger_id":{ledger},"entry_id":'
    head_c = ',"size":'
    head_d = (
        f',"ok":true,"verified":{"false" if dummy else "true"},"encrypted":false,'
        f'"layers":[{{"layer":"bookie-entry","offset":0,"length":{bookie},'
        f'"fields":{{"ledger_id":{ledger},"entry_id":'
    )
    head_e = ',"lac":'
    head_f = f',"digest_type":"{name}","payload_size":'
    head_g = '],"messages":[],"problems":[],"digest":'
    head_h = ',"confirmed":'

    def line(head: EntryHead, data: bytes) -> str | None:
        size = head.size
        if head.problems or head.digest_ok is not digest_ok or size < payload_at:
            return None
        if detected and crc32c(data[bookie:], crc32c(data[:32])) != int.from_bytes(
            data[32:bookie], "big"
        ):
            return None
        entry_id, entry_lac, length = head.entry_id, head.lac, head.length
        if head.ledger_id != ledger or entry_id < 0 or length is None or length < 0:
            return None
        if entry_lac is None or not -1 <= entry_lac <= entry_id:
            return None  # the decoder adds a problem for an implausible header
        magic = data[bookie:payload_at]
        if head.broker_metadata:
            if magic != _BEM_MAGIC:
                return None
            ts, index = head.broker_timestamp, head.index
            if any(v is not None and not 0 <= v < 1 << 63 for v in (ts, index)):
                return None  # the general decoder says what such a value is
            bem_size = int.from_bytes(data[payload_at : payload_at + 4], "big")
            # what the fields take encoded, so that nothing else is in it (the decoder
            # would show other fields, or a field repeated)
            if ts is not None and index is not None:
                if bem_size != 2 + varint[ts.bit_length()] + varint[index.bit_length()]:
                    return None
                bem = (
                    f'{bem_layer}{6 + bem_size},"fields":{{"broker_timestamp":{ts},'
                    f'"index":{index}}}}}'
                )
            elif ts is not None or index is not None:
                value = ts if ts is not None else index
                if bem_size != 1 + varint[value.bit_length()]:
                    return None
                field = "broker_timestamp" if ts is not None else "index"
                bem = f'{bem_layer}{6 + bem_size},"fields":{{"{field}":{value}}}}}'
            elif bem_size == 0:
                bem = f"{bem_layer}6}}"
            else:
                return None
        elif magic == _CHECKSUM_MAGIC:
            bem = ""
        else:
            return None
        if dummy:
            check = _DUMMY_CHECK
        else:
            digest = data[32:bookie].hex()
            check = f'{check_head}{digest}","computed":"{digest}"{check_tail}'
        eid = str(entry_id)
        confirmed = "null" if lac is None else ("true" if entry_id <= lac else "false")
        return (
            f"{head_a}{eid}{head_b}{eid}{head_c}{size}{head_d}{eid}"
            f'{head_e}{entry_lac},"length":{length}{head_f}{size - bookie}}},"check":{check}}}'
            f"{bem}{head_g}{check}"
            + (f',"payload_sha256":"{sha256(data[bookie:]).hexdigest()}"' if hashes else "")
            + f"{head_h}{confirmed}{tail}"
        )

    return line


def _chunk_like(md: Any) -> bool:
    """Whether this message metadata may make its entry a chunk (``_decode_payload``)."""
    return md is not None and (
        md.num_chunks_from_msg > 1 or md.HasField("chunk_id") or md.HasField("uuid")
    )


def _metadata(data: bytes, pos: int) -> Any:
    """The message metadata of a regular entry (see :func:`line_maker`) whose payload
    starts at ``pos``, as the decoder reads it, found from the layout; ``...`` when the
    layout is not the regular one."""
    if data[pos : pos + 2] == _BEM_MAGIC:
        pos += 6 + int.from_bytes(data[pos + 2 : pos + 6], "big")
    if data[pos : pos + 2] == _CHECKSUM_MAGIC:
        pos += 6
    size = int.from_bytes(data[pos : pos + 4], "big")
    if data[pos : pos + 2] in (_BEM_MAGIC, _CHECKSUM_MAGIC) or size > len(data) - pos - 4:
        return ...
    try:
        md, _missing = parse_proto(
            api.MessageMetadata, memoryview(data)[pos + 4 : pos + 4 + size], "", pos + 4
        )
    except LedgerctlError:
        return ...
    return md


def read_from_heads(
    source: LedgerSource,
    view: LedgerView,
    first: int,
    last: int,
    request: InspectRequest,
    options: DecodeOptions,
    summary: Summary,
    *,
    lines: bool,
    hashes: bool = False,
    tracker: Tracker | None = None,
) -> Iterator[Entry | str | list[str]]:
    """The ledger's entries in [first, last] as inspect reads them, the filters on broker
    entry metadata decided on heads.

    A ``str`` is the JSON line of a kept entry (``Depth.ENTRY`` with ``lines``), already
    counted in ``summary``; without ``--limit``, consecutive lines come as a ``list`` of
    up to :data:`CHUNK` of them. An ``Entry`` is what ``LedgerSource.entries`` yields,
    still to be filtered and counted by the caller. ``options`` are the general path's
    (``LedgerSource.entry_options``); ``hashes``: lines with ``payload_sha256``. At
    ``Depth.MESSAGES`` an entry the filters drop may still be a chunk of a message a kept
    entry completes: its message metadata is read, and a chunk is decoded and given to
    the chunk assembler, as the general path does with every entry. ``tracker`` is told
    the id of every entry read (the ones the filters drop too).
    """
    store: Any = source.bookie
    see = tracker.see if tracker is not None else None
    see_run = tracker.see_run if tracker is not None else None
    depth = request.depth
    maker = line_maker(view, hashes)
    # where a regular entry's payload starts; a DUMMY digest's entries are not verified
    kind = view.digest_type if view.digest_type is not None else DigestType.CRC32C
    bookie = HEADER.size + DIGESTS[kind].size
    dummy = kind is DigestType.DUMMY
    line = maker if lines and depth is Depth.ENTRY else None
    filtering = _head_filters(request)
    chunked = request.limit is None  # no entry count to stop at: lines go in lists
    messages = depth is Depth.MESSAGES
    assembler = ChunkAssembler(options) if messages else None
    probe = replace(options, depth=Depth.METADATA, verify=False)
    chunk: list[str] = []
    ledger_id = view.ledger_id
    next_id = first
    regular = seen = 0
    # the summary of the entries given as lines, kept here and added at the end (finally:
    # also when the caller stops early); without a call per entry
    counted = size_sum = with_bem = 0
    low_t: int | None = None
    high_t: int | None = None
    low_i: int | None = None
    high_i: int | None = None
    irregular = False
    # a run of regular entries in a batch: their lines made natively, CHUNK at most at once
    runs = _native_lines(view, hashes) if line is not None and chunked and not filtering else None
    try:
        for pairs in store.read_head_batches(ledger_id, first, last, options):
            at, end = 0, len(pairs)
            while at < end:
                if runs is not None and seen >= PROBE:
                    made_lines, stop, sizes, bems, lt, ht, li, hi = runs(
                        pairs, at, CHUNK - len(chunk)
                    )
                    if made_lines:
                        # counted as made, as the loop counts its own lines
                        _add_counts(
                            summary, len(made_lines), sizes, bems, (lt, ht), (li, hi), dummy
                        )
                        if see_run is not None:
                            see_run([pair[0].entry_id for pair in pairs[at:stop]])
                        next_id = pairs[stop - 1][0].entry_id + 1
                        chunk.extend(made_lines)
                        if len(chunk) == CHUNK:
                            yield chunk
                            chunk = []
                        at = stop
                        continue
                    # pairs[at] is not certainly regular: the loop's own path takes it
                head, data = pairs[at]
                at += 1
                next_id = head.entry_id + 1
                if see is not None:
                    see(head.entry_id)
                if seen < PROBE:
                    seen += 1
                    regular += maker(head, data) is not None
                    if seen == PROBE and regular * 2 < seen:
                        next_id -= 1  # mostly irregular: decoding from heads would decode twice
                        irregular = True
                        break
                if filtering and dropped(head, request):
                    if messages:  # a chunk still goes to the assembler
                        position = (ledger_id, head.entry_id)
                        md = _metadata(data, bookie) if maker(head, data) is not None else ...
                        if md is ...:
                            md = decode_entry(data, probe, position).metadata
                        if _chunk_like(md):
                            entry = decode_entry(data, options, position)
                            if entry.chunk is not None and assembler is not None:
                                assembler.add(entry)
                    continue
                made = line(head, data) if line is not None else None
                if made is None:
                    if chunk:
                        yield chunk
                        chunk = []
                    entry = decode_entry(data, options, (ledger_id, head.entry_id))
                    if entry.chunk is not None and assembler is not None:
                        assembler.add(entry)
                    yield entry
                    continue
                counted += 1
                size_sum += head.size
                ts = head.broker_timestamp
                if ts:
                    if low_t is None or ts < low_t:
                        low_t = ts
                    if high_t is None or ts > high_t:
                        high_t = ts
                if head.broker_metadata:
                    with_bem += 1
                index = head.index
                if index is not None:
                    if low_i is None or index < low_i:
                        low_i = index
                    if high_i is None or index > high_i:
                        high_i = index
                if not chunked:
                    yield made
                    continue
                chunk.append(made)
                if len(chunk) == CHUNK:
                    yield chunk
                    chunk = []
            if irregular:
                break
        else:
            if chunk:
                yield chunk
            return
    except StoreUnavailable:
        raise
    except LedgerctlError:
        pass  # the general path reads on from here and reports the damage as it does
    finally:
        _add_counts(summary, counted, size_sum, with_bem, (low_t, high_t), (low_i, high_i), dummy)
    if chunk:
        yield chunk
    yield from read_entries(source, view, next_id, last, request, assembler)
