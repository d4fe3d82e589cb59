"""Compaction semantics against a reference model over generated topic histories.

The histories are built with the decoders' own layer builders: single messages and
batches, every codec, tombstones (empty values) in and out of batches, keyless messages,
encrypted batches, chunked messages, markers, broker entry metadata, batches that already
carry placeholders (a previous compaction's output), an empty topic, topics whose keys
are all deleted, and transactions committed, aborted and still ongoing. The reference
model is the compactors' rules written the plain way (a dict per key, formats.md
§6.3-§6.4 and EventTimeOrderCompactor, over what the broker dispatches: no entry of an
aborted transaction, nothing from the oldest ongoing one on); the code under test runs
them through the engine's key table (spilling to RocksDB or not) and rebuilds the entries.
The compacted entries are then decoded like a reader would, and must hold exactly the
model's messages, with valid CRC32C checksums, batch sizes unchanged, in topic order, with
the message ids the dispatcher gives (partition -1), and the broker entry metadata prefix
only when the broker exposes it to clients (``keep_entry_metadata``), as a Pulsar 4.0.7
broker's own compaction does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.compaction.core import (
    FORMAT_CLASSIC,
    FORMAT_PIP_429,
    ORDER_EVENT_TIME,
    ORDER_PUBLISHING,
    CompactionOptions,
    Stats,
    fold_for,
    phase_one,
    phase_one_into,
    phase_two,
)
from pulsarctl_py.compaction.reader import raw_entry
from pulsarctl_py.compaction.run import scan_table
from pulsarctl_py.decoders import DecodeOptions, Depth, Outer, decode_entry
from pulsarctl_py.decoders.codecs import compress
from pulsarctl_py.decoders.payload import build_batch, placeholder
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.engines.local import LocalKeyTable
from pulsarctl_py.proto import pulsar_api_pb2 as api

KEYS = st.sampled_from(["a", "b", "c", "d", "é", ""])
MAYBE_KEY = st.one_of(st.none(), KEYS)
VALUE = st.one_of(st.just(b""), st.binary(min_size=1, max_size=20))
CODEC = st.sampled_from([0, 1, 2, 3, 4])
EVENT = st.one_of(st.none(), st.integers(1, 5))


@dataclass
class Msg:
    key: str | None
    value: bytes
    event_time: int | None = None
    compacted_out: bool = False


@dataclass
class Spec:
    kind: str  # single, batch, encrypted, marker, chunk, commit, abort
    msgs: list[Msg] = field(default_factory=list)
    codec: int = 0
    bem: bool = False
    chunk: tuple[str, int, int] | None = None  # uuid, chunk id, chunks
    size_field: bool = True
    txn: int | None = None  # the transaction of a message, or the one a commit/abort ends


@st.composite
def specs(draw: st.DrawFn) -> list[Spec]:
    out: list[Spec] = []
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(
            st.sampled_from(["single", "single", "batch", "batch", "encrypted", "marker", "chunk"])
        )
        spec = Spec(kind, codec=draw(CODEC), bem=draw(st.booleans()))
        if kind == "single":
            spec.msgs = [Msg(draw(MAYBE_KEY), draw(VALUE), draw(EVENT))]
            # a message without uncompressed_size cannot have been compressed
            spec.size_field = spec.codec != 0 or draw(st.sampled_from([True, True, False]))
        elif kind == "batch":
            n = draw(st.integers(1, 5))
            spec.msgs = [
                Msg(draw(MAYBE_KEY), draw(VALUE), draw(EVENT), draw(st.booleans()) and n > 1)
                for _ in range(n)
            ]
            if all(m.compacted_out for m in spec.msgs):
                spec.msgs[0].compacted_out = False
        elif kind == "encrypted":
            n = draw(st.integers(1, 4))
            key = draw(MAYBE_KEY)
            spec.msgs = [Msg(key, draw(st.binary(min_size=1, max_size=20))) for _ in range(n)]
        elif kind == "chunk":
            parts = draw(st.integers(2, 3))
            key, value = draw(KEYS), draw(st.binary(min_size=parts, max_size=30))
            uuid = f"p-{len(out)}"
            for i in range(parts):
                out.append(Spec("chunk", [Msg(key, value)], 0, spec.bem, (uuid, i, parts)))
            continue
        if kind != "marker":
            spec.txn = draw(st.sampled_from([None, None, None, 0, 1, 2]))
        out.append(spec)
    # each transaction is committed, aborted or left ongoing, its end marker somewhere after
    # its last message
    for txn in sorted({s.txn for s in out if s.txn is not None}):
        end = draw(st.sampled_from(["commit", "abort", "ongoing"]))
        if end == "ongoing":
            continue
        last = max(i for i, s in enumerate(out) if s.txn == txn and s.kind not in TXN_ENDS)
        at = draw(st.integers(last + 1, len(out)))
        out.insert(at, Spec(end, bem=draw(st.booleans()), txn=txn))
    return out


TXN_ENDS = {"commit": 21, "abort": 22}  # PulsarMarkers.proto MarkerType


def build(spec: Spec, seq: int) -> bytes:
    md = api.MessageMetadata(producer_name="gen", sequence_id=seq, publish_time=1000 + seq)
    if spec.txn is not None:
        md.txnid_most_bits, md.txnid_least_bits = 7, spec.txn
    if spec.kind == "marker":
        md.marker_type = 20
        payload = b""
    elif spec.kind in TXN_ENDS:
        md.marker_type = TXN_ENDS[spec.kind]
        payload = b""
    elif spec.kind == "single" or spec.kind == "chunk":
        m = spec.msgs[0]
        if m.key is not None:
            md.partition_key = m.key
        if m.event_time is not None:
            md.event_time = m.event_time
        md.compression = spec.codec
        if spec.size_field:
            md.uncompressed_size = len(m.value)
        payload = compress(spec.codec, m.value) if spec.codec else m.value
        if spec.chunk is not None:
            uuid, cid, parts = spec.chunk
            md.uuid, md.chunk_id, md.num_chunks_from_msg = uuid, cid, parts
            md.total_chunk_msg_size = len(m.value) * parts
            md.uncompressed_size = len(m.value) * parts
    elif spec.kind == "batch":
        rows = []
        for m in spec.msgs:
            if m.compacted_out:
                rows.append((placeholder(), None))
                continue
            smm = api.SingleMessageMetadata()
            if m.key is not None:
                smm.partition_key = m.key
            if m.event_time is not None:
                smm.event_time = m.event_time
            rows.append((smm, m.value))
        plain = build_batch(rows)
        md.num_messages_in_batch = len(spec.msgs)
        md.compression = spec.codec
        md.uncompressed_size = len(plain)
        payload = compress(spec.codec, plain) if spec.codec else plain
    else:  # encrypted batch: opaque payload, batch-level key (Commands.initBatchMessageMetadata)
        md.num_messages_in_batch = len(spec.msgs)
        if spec.msgs[0].key is not None:
            md.partition_key = spec.msgs[0].key
        md.encryption_keys.add(key="k", value=b"x")
        md.encryption_param = b"\x00" * 12
        md.uncompressed_size = 40
        payload = b"".join(m.value for m in spec.msgs) + b"\x00" * 16
    bem = api.BrokerEntryMetadata(broker_timestamp=5000 + seq, index=seq) if spec.bem else None
    return build_entry(md, payload, checksum=True, broker_entry_metadata=bem)


def history(entries: list[Spec]) -> list:
    out = []
    for i, spec in enumerate(entries):
        data = build(spec, i)
        position = (3 + i // 5, i % 5)
        entry = decode_entry(
            data, DecodeOptions(outer=Outer.PULSAR_ENTRY, depth=Depth.METADATA), position
        )
        out.append(raw_entry(entry))
    return out


# -- the reference model ------------------------------------------------------------------------


def dispatched(entries: list[Spec]) -> list[Spec | None]:
    """What the broker dispatches to the compactor: nothing from the first entry of an
    ongoing transaction on, no entry of an aborted one (None in their place)."""
    ended = {s.txn: s.kind for s in entries if s.kind in TXN_ENDS}
    ongoing = [i for i, s in enumerate(entries) if s.txn is not None and s.txn not in ended]
    cut = min(ongoing, default=len(entries))
    return [
        None if s.txn is not None and ended.get(s.txn) == "abort" and s.kind not in TXN_ENDS else s
        for s in entries[:cut]
    ]


def model(entries: list[Spec], opts: CompactionOptions) -> tuple[set, dict]:
    """Retained (ledger, entry, batch index) and the latest per key, the plain way."""
    latest: dict[str, tuple] = {}  # key -> (position, event time)
    positions = [(3 + i // 5, i % 5) for i in range(len(entries))]
    entries = [s if s is not None else Spec("marker") for s in dispatched(entries)]

    def offer(key: str, pid: tuple, size: int, et: int, batched: bool) -> None:
        if opts.order == ORDER_PUBLISHING:
            if size > 0:
                latest[key] = (pid, et)
            else:
                latest.pop(key, None)
            return
        old = latest.get(key)
        newer = old is None or (et > old[1] if batched else et >= old[1])
        if newer:
            if size > 0:
                latest[key] = (pid, et)
            else:
                latest.pop(key, None)

    positions = positions[: len(entries)]
    for spec, (lid, eid) in zip(entries, positions, strict=True):
        if spec.kind in ("marker", *TXN_ENDS):
            continue
        if spec.kind == "batch":
            for i, m in enumerate(spec.msgs):
                if m.compacted_out or m.key is None:
                    continue
                offer(m.key, (lid, eid, i), len(m.value), m.event_time or 0, True)
        else:
            m = spec.msgs[0]
            if m.key is None:
                continue
            if spec.kind == "single":
                size = len(m.value) if spec.size_field else 1
            elif spec.kind == "chunk":
                size = len(m.value) * spec.chunk[2]
            else:
                size = 40
            offer(m.key, (lid, eid, -1), size, m.event_time or 0, False)
    winners = {key: pid for key, (pid, _et) in latest.items()}
    last_chunk = {}
    for spec, (lid, eid) in zip(entries, positions, strict=True):
        if spec.kind == "chunk":
            last_chunk[spec.chunk[0]] = (lid, eid, -1)
    kept: set = set()
    for spec, (lid, eid) in zip(entries, positions, strict=True):
        if spec.kind in ("marker", *TXN_ENDS):
            continue
        if spec.kind == "batch":
            for i, m in enumerate(spec.msgs):
                if m.compacted_out:
                    continue
                if m.key is None:
                    if opts.retain_null_key:
                        kept.add((lid, eid, i))
                elif winners.get(m.key) == (lid, eid, i) and m.value:
                    kept.add((lid, eid, i))
            continue
        m = spec.msgs[0]
        if m.key is None:
            if opts.retain_null_key:
                kept.add((lid, eid, -1))
        elif winners.get(m.key) == (lid, eid, -1):
            kept.add((lid, eid, -1))
        elif (
            opts.keep_chunks
            and spec.kind == "chunk"
            and winners.get(m.key) == last_chunk[spec.chunk[0]]
        ):
            kept.add((lid, eid, -1))  # an earlier chunk of the latest chunked message
    return kept, winners


def run(entries: list[Spec], opts: CompactionOptions, memory: int | None, sparse: Any = None):
    """Phase one and two as compaction.run.run_phase_one drives them: a first phase one
    finds the transactions; with aborted or ongoing ones, phase one again without the
    aborted ones' entries and only up to the first entry of the oldest ongoing one.

    With ``sparse`` (a reader.SparseReads) phase one notes the plain batches per ledger
    and phase two reads only the entries ``sparse.needed`` names; ``sparse.read`` counts
    them."""
    raws = history(entries)

    def phase_one(raws: list, opts: CompactionOptions) -> LocalKeyTable:
        table = LocalKeyTable(memory, fold=fold_for(opts))
        if sparse is None:
            phase_one_into(raws, opts, table)  # what the local engine runs
        for split, members in _splits_of(raws) if sparse is not None else ():
            phase_one_into(members, opts, table, sparse.noting(split))
        table.finish()
        return table

    table = phase_one(raws, opts)
    _keys, _tombs, txns = scan_table(table, sparse)
    ongoing = txns.ongoing
    if txns.aborted or ongoing:
        table.close()
        if ongoing:
            first = min(ongoing.values())
            raws = [r for r in raws if r.position < first]
        opts = replace(opts, aborted=txns.aborted)
        table = phase_one(raws, opts)
        if sparse is not None:
            scan_table(table, sparse)
    stats = Stats()
    try:
        if sparse is None:
            out = list(phase_two(raws, table, opts, stats))
        else:
            out, sparse.read = [], 0
            for split, members in _splits_of(raws):
                ids = sparse.needed(split, stats)
                chosen = members if ids is None else [r for r in members if r.position[1] in ids]
                sparse.read += len(chosen)
                out.extend(phase_two(chosen, table, opts, stats))
    finally:
        table.close()
    return raws, out, stats


OPTIONS = st.builds(
    CompactionOptions,
    retain_null_key=st.booleans(),
    order=st.sampled_from([ORDER_PUBLISHING, ORDER_EVENT_TIME]),
    format=st.sampled_from([FORMAT_CLASSIC, FORMAT_PIP_429]),
    keep_entry_metadata=st.booleans(),
    keep_chunks=st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(entries=specs(), opts=OPTIONS, memory=st.sampled_from([None, 1]))
def test_compaction_equals_the_reference_model(entries, opts, memory):
    raws, out, stats = run(entries, opts, memory)
    expected, _winners = model(entries, opts)
    by_position = {r.position: (spec, r) for spec, r in zip(entries, raws, strict=False)}
    got: set = set()
    positions = [c.position for c in out]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    for c in out:
        decoded = decode_entry(c.data, DecodeOptions(outer=Outer.COMPACTED))
        assert decoded.ok, decoded.problems
        assert decoded.message_position == c.position
        spec, raw = by_position[c.position]
        framed = decoded.layers[0]
        inner = c.data[framed.offset + framed.length :]
        # the message id the dispatcher gives: ledger, entry, partition -1
        assert decoded.original_id.partition == -1
        # the broker entry metadata prefix, only when the broker exposes it
        prefix = raw.bem if opts.keep_entry_metadata else b""
        assert inner.startswith(prefix)
        assert (decoded.broker_entry_metadata is not None) == bool(prefix)
        md = decoded.metadata
        if spec.kind == "batch":
            assert md.num_messages_in_batch == len(spec.msgs)
            assert decoded.has_checksum
            for m in decoded.messages:
                if opts.format == FORMAT_PIP_429 or not _is_placeholder(decoded, m.batch_index):
                    src = spec.msgs[m.batch_index]
                    assert (m.key, bytes(m.value or b"")) == (src.key, src.value)
                    got.add((*c.position, m.batch_index))
            if opts.format == FORMAT_PIP_429:
                assert list(md.compacted_batch_indexes) == [m.batch_index for m in decoded.messages]
            else:
                assert not md.compacted_batch_indexes
                assert len(decoded.messages) + len(decoded.placeholders) == len(spec.msgs)
        else:
            # copied byte for byte, as dispatched
            assert inner == raw.data[len(raw.bem) - len(prefix) :]
            got.add((*c.position, -1))
    assert got == expected
    seen = dispatched(entries)
    assert stats.entries_in == len(seen)
    assert stats.aborted == sum(1 for s in seen if s is None)
    assert stats.entries_out == len(out)
    assert stats.markers == sum(
        1 for s in seen if s is not None and s.kind in ("marker", *TXN_ENDS)
    )
    assert stats.not_compactable == sum(1 for s in seen if s is not None and s.kind == "encrypted")
    if opts.keep_chunks is False:
        assert stats.chunks_kept == 0


def _is_placeholder(decoded, index: int) -> bool:
    return index in decoded.placeholders


@settings(max_examples=60, deadline=None)
@given(entries=specs(), opts=OPTIONS)
def test_spill_to_disk_gives_the_same_bytes(entries, opts):
    _, in_memory, s1 = run(entries, opts, None)
    _, spilled, s2 = run(entries, opts, 1)
    assert [(c.position, c.data) for c in in_memory] == [(c.position, c.data) for c in spilled]
    assert s1.kept == s2.kept and s1.to == s2.to


def test_empty_topic_and_all_keys_deleted():
    opts = CompactionOptions()
    assert run([], opts, None)[1] == []
    deleted = [
        Spec("single", [Msg("a", b"v")]),
        Spec("single", [Msg("a", b"")]),
        Spec("batch", [Msg("b", b"x"), Msg("b", b"")]),
    ]
    _raws, out, stats = run(deleted, opts, None)
    assert out == [] and stats.kept == 0
    # Pulsar's phase one counts a batch as not deleted when any record has a value, even one
    # its own tombstone removes later: "to" (pulsar/compactedTo) is that batch
    assert stats.to == (3, 2)


def test_pulsar_keeps_only_the_last_chunk_keep_chunks_keeps_all_of_them():
    chunks = [Spec("chunk", [Msg("k", b"abc")], chunk=("u", i, 3)) for i in range(3)]
    entries = [Spec("single", [Msg("k", b"old")]), *chunks]
    _, pulsar, stats = run(entries, CompactionOptions(), None)
    assert [c.position for c in pulsar] == [(3, 3)]
    assert stats.chunked_cut == 1 and stats.chunks_kept == 0
    _, ours, stats = run(entries, CompactionOptions(keep_chunks=True), None)
    assert [c.position for c in ours] == [(3, 1), (3, 2), (3, 3)]
    assert stats.chunks_kept == 2 and stats.kept == 1 and stats.chunked_cut == 0


def test_null_value_flag_is_not_a_tombstone_sizes_are():
    md = api.MessageMetadata(
        producer_name="p",
        sequence_id=1,
        publish_time=1,
        partition_key="k",
        null_value=True,
        uncompressed_size=3,
    )
    flagged = build_entry(md, b"abc")
    entry = raw_entry(
        decode_entry(flagged, DecodeOptions(outer=Outer.PULSAR_ENTRY, depth=Depth.METADATA), (1, 0))
    )
    records = list(phase_one([entry], CompactionOptions()))
    assert records and records[0][2] is False


def test_aborted_transactions_neither_set_nor_delete_a_key_and_ongoing_ones_wait():
    """Issue 20's cases: an aborted value must not become a key's latest, an aborted
    tombstone must not delete a key, and an ongoing transaction stops the compaction
    before its first entry (the broker's max read position)."""
    entries = [
        Spec("single", [Msg("a", b"a1")]),
        Spec("single", [Msg("b", b"b1")]),
        Spec("single", [Msg("a", b"a-aborted")], txn=1),
        Spec("single", [Msg("b", b"")], txn=1),  # an aborted tombstone
        Spec("abort", txn=1),
        Spec("single", [Msg("c", b"c-committed")], txn=2),
        Spec("commit", txn=2),
        Spec("single", [Msg("a", b"a-ongoing")], txn=3),
        Spec("single", [Msg("d", b"d-after-ongoing")]),
    ]
    _raws, out, stats = run(entries, CompactionOptions(), None)
    values = {}
    for c in out:
        decoded = decode_entry(c.data, DecodeOptions(outer=Outer.COMPACTED))
        for m in decoded.messages:
            values[m.key] = bytes(m.value)
    assert values == {"a": b"a1", "b": b"b1", "c": b"c-committed"}
    assert stats.aborted == 2 and stats.markers == 2 and stats.entries_in == 7


# -- phase two reading only what it keeps something of (reader.SparseReads) ---------------------


def _splits_of(raws: list) -> list:
    """One Split per ledger of ``raws`` (as build_scan_plan cuts a topic), with its raws."""
    from pulsarctl_py.engines.base import Split

    out: list = []
    for raw in raws:
        lid, eid = raw.position
        if out and out[-1][0].ledger_id == lid:
            split, members = out[-1]
            out[-1] = (replace(split, last_entry=eid), [*members, raw])
        else:
            out.append((Split("t", lid, eid, eid, (), None, len(out)), [raw]))
    return out


def _sparse_run(entries: list[Spec], opts: CompactionOptions, memory: int | None):
    """:func:`run` with reader.SparseReads: the entries, the stats and the entries read."""
    from pulsarctl_py.compaction.reader import SparseReads

    sparse = SparseReads()
    _raws, out, stats = run(entries, opts, memory, sparse)
    return out, stats, sparse.read


@st.composite
def with_plain_batches(draw: st.DrawFn) -> list[Spec]:
    """:func:`specs` with plain batches (every record keyed, none compacted out) put in
    among them: the entries SparseReads may skip, or must read for their winners."""
    out = draw(specs())
    for _ in range(draw(st.integers(1, 10))):
        msgs = [Msg(draw(KEYS), draw(VALUE), draw(EVENT)) for _ in range(draw(st.integers(1, 5)))]
        spec = Spec("batch", msgs, codec=draw(CODEC), bem=draw(st.booleans()))
        out.insert(draw(st.integers(0, len(out))), spec)
    return out


SPARSE_OPTIONS = st.builds(
    CompactionOptions,
    retain_null_key=st.booleans(),
    order=st.just(ORDER_PUBLISHING),
    format=st.sampled_from([FORMAT_CLASSIC, FORMAT_PIP_429]),
    keep_entry_metadata=st.booleans(),
    keep_chunks=st.just(False),
)


@settings(max_examples=150, deadline=None)
@given(entries=with_plain_batches(), opts=SPARSE_OPTIONS, memory=st.sampled_from([None, 1]))
def test_sparse_phase_two_gives_the_same_entries_and_counts(entries, opts, memory):
    """Skipping the plain batches without a winner changes nothing phase two gives: the
    same compacted entries, byte for byte, and the same counts; only phase one's "to",
    which reader.phase_one_to finds before phase two, may be earlier in what it saw."""
    from pulsarctl_py.compaction.reader import _NoWinners

    _raws, whole, full = run(entries, opts, memory)
    sparse, got, _read = _sparse_run(entries, opts, memory)
    assert [(c.position, c.data) for c in sparse] == [(c.position, c.data) for c in whole]
    to = got.to
    got.to = full.to
    assert got == full
    assert to is None or (full.to is not None and to <= full.to)
    # phase_one_to's walk back over what is dispatched finds the full phase two's "to"
    if full.aborted or any(s.txn is not None for s in entries):
        return
    walked = None
    for raw in reversed(history(entries)):
        one = Stats()
        list(phase_two([raw], _NoWinners(), opts, one))
        if one.to is not None:
            walked = one.to
            break
    assert walked == full.to


def test_sparse_phase_two_reads_only_the_batches_holding_a_winner():
    """Three keys rewritten in 20 batches: phase two reads the batches their last values
    are in, not the other 17."""
    entries = [
        Spec("batch", [Msg(f"k{j}", f"v{i}-{j}".encode()) for j in range(3)]) for i in range(19)
    ]
    entries += [Spec("batch", [Msg("k0", b"last"), Msg("k1", b"last"), Msg("k2", b"last")])]
    opts = CompactionOptions()
    _raws, whole, full = run(entries, opts, None)
    sparse, got, read = _sparse_run(entries, opts, None)
    assert [c.data for c in sparse] == [c.data for c in whole] and len(whole) == 1
    assert read == 1 and got.entries_in == full.entries_in == 20
    assert got.bytes_in == full.bytes_in
