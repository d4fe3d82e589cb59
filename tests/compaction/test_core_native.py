"""The native compaction helpers (decoders/_speedups.c) against the Python path.

``compact_offer`` (phase one into the C key table), ``compact_keep`` (phase two's kept
records and the rebuilt batch) and ``compact_rebuild`` must give exactly what the Python
path gives, or None so that the Python path runs. The batches here are written record by
record, not by protobuf: metadata fields in any order, repeated, with unknown fields,
non-minimal varints, booleans other than 0 and 1, so that the verbatim copy of a kept
record is tested against protobuf's parse-and-serialize, not only on canonical input.
Malformed batches (mutated bytes, wrong counts and indexes) must neither crash the helpers
nor change any answer or error: the pipeline with the helpers and without them writes the
same entries and reports the same problems. ``KeyTable`` equals a dict under any offers.
"""

from __future__ import annotations

import dataclasses
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsarctl_py.compaction import core
from pulsarctl_py.compaction.core import (
    FORMAT_CLASSIC,
    FORMAT_PIP_429,
    KEY_PREFIX,
    CompactionOptions,
    Stats,
    phase_one,
    phase_one_into,
    phase_two,
)
from pulsarctl_py.compaction.reader import raw_entry
from pulsarctl_py.decoders import DecodeOptions, Depth, Outer, decode_entry
from pulsarctl_py.decoders.codecs import compress
from pulsarctl_py.decoders.errors import DataError, LedgerctlError
from pulsarctl_py.decoders.payload import parse_batch
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.decoders.speedups import native
from pulsarctl_py.engines.local import LocalKeyTable
from pulsarctl_py.proto import pulsar_api_pb2 as api
from tests.support.protowire import reencoded

pytestmark = pytest.mark.skipif(native is None, reason="the native module is not built")

PLACEHOLDER = core._PLACEHOLDER_RECORD
PREFIX = struct.pack(">QQ", 7, 3)
KEYS = st.sampled_from(["a", "b", "c", "é", "", "key-1"])


# -- records written field by field -------------------------------------------------------------


def _varint(value: int, pad: int = 0) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if not value:
            out.append(byte)
            break
        out.append(byte | 0x80)
    if pad:  # non-minimal: the same value with continuation bytes of zeros
        out[-1] |= 0x80
        out += b"\x80" * (pad - 1) + b"\x00"
    return bytes(out)


def _field(number: int, wire: int, value: int | bytes, pad: int = 0) -> bytes:
    tag = _varint(number << 3 | wire)
    if wire == 0:
        assert isinstance(value, int)
        return tag + _varint(value, pad)
    assert isinstance(value, bytes)
    return tag + _varint(len(value), pad) + value


@dataclasses.dataclass
class Rec:
    key: str | None
    value: bytes
    fields: list[bytes]  # the metadata's encoded fields, in the order written
    compacted_out: bool = False


@st.composite
def records(draw: st.DrawFn) -> Rec:
    key = draw(st.one_of(st.none(), KEYS))
    value = draw(st.one_of(st.just(b""), st.binary(min_size=1, max_size=12)))
    fields: list[tuple[int, bytes]] = []
    for _ in range(draw(st.integers(0, 2))):
        k = draw(st.sampled_from(["trace", "é"])).encode()
        v = draw(st.sampled_from(["1", "x"])).encode()
        body = [_field(1, 2, k), _field(2, 2, v)]
        if draw(st.integers(0, 9)) == 0:
            body.reverse()  # value before key: not canonical
        fields.append((1, _field(1, 2, b"".join(body))))
    if key is not None:
        fields.append((2, _field(2, 2, key.encode(), pad=draw(st.sampled_from([0] * 9 + [1])))))
    fields.append((3, _field(3, 0, len(value), pad=draw(st.sampled_from([0] * 9 + [1])))))
    compacted_out = draw(st.integers(0, 5)) == 0
    for number in (4, 6, 9, 10):
        if number == 4 and compacted_out:
            fields.append((4, _field(4, 0, draw(st.sampled_from([1, 1, 2])))))
        elif number == 9:
            if draw(st.integers(0, 12)) == 0:
                fields.append((9, _field(9, 0, 1)))
        elif draw(st.integers(0, 4)) == 0:
            fields.append((number, _field(number, 0, draw(st.sampled_from([0, 1, 2])))))
    if draw(st.booleans()):
        fields.append((5, _field(5, 0, draw(st.integers(0, 2**64 - 1)))))
    if draw(st.integers(0, 3)) == 0:
        fields.append((7, _field(7, 2, draw(st.binary(max_size=4)))))
    if draw(st.integers(0, 3)) == 0:
        fields.append((8, _field(8, 0, draw(st.integers(0, 2**40)))))
    fields.sort(key=lambda f: f[0])  # protobuf's order (properties first, stable)
    if draw(st.integers(0, 7)) == 0:  # an unknown field
        fields.append((99, _field(draw(st.sampled_from([11, 15, 300])), 0, 5)))
    if draw(st.integers(0, 7)) == 0 and len(fields) > 1:  # out of order
        i = draw(st.integers(0, len(fields) - 2))
        fields[i], fields[i + 1] = fields[i + 1], fields[i]
    if draw(st.integers(0, 9)) == 0:  # a field written twice (the last one wins)
        number, encoded = draw(st.sampled_from(fields))
        fields.insert(0, (number, encoded))
    return Rec(key, value, [f for _, f in fields], compacted_out)


def encode_batch(recs: list[Rec], draw: st.DrawFn | None = None) -> bytes:
    """The batch; with ``draw``, each record's metadata written again with tags, lengths
    and varints of drawn sizes, overlong or past what protobuf takes
    (tests/support/protowire.py)."""
    out = bytearray()
    for rec in recs:
        smm = b"".join(rec.fields)
        if draw is not None:
            smm = draw(reencoded(smm, {1: {}}))
        out += struct.pack(">I", len(smm)) + smm + rec.value
    return bytes(out)


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[Rec], bytes, list[int] | None]:
    recs = draw(st.lists(records(), min_size=1, max_size=6))
    indexes = None
    if draw(st.integers(0, 4)) == 0:  # a PIP-429 batch: the retained records' indexes
        indexes = sorted(draw(st.sets(st.integers(0, 12), min_size=len(recs), max_size=len(recs))))
    return recs, encode_batch(recs, draw if draw(st.integers(0, 3)) == 0 else None), indexes


def entry_of(plain: bytes, count: int, indexes: list[int] | None, codec: int, position):
    md = api.MessageMetadata(producer_name="gen", sequence_id=1, publish_time=1000)
    md.num_messages_in_batch = max(count, max(indexes) + 1) if indexes else count
    if indexes:
        md.compacted_batch_indexes.extend(indexes)
    md.compression = codec
    md.uncompressed_size = len(plain)
    data = build_entry(md, compress(codec, plain) if codec else plain, checksum=True)
    options = DecodeOptions(outer=Outer.PULSAR_ENTRY, depth=Depth.METADATA)
    return raw_entry(decode_entry(data, options, position))


# -- the Python path, record by record -----------------------------------------------------------


def python_records(plain: bytes, count: int, indexes: list[int] | None):
    """(batch index, key or None, size) of the live records, as the Python parser reads them;
    raises LedgerctlError on damage."""
    _layer, recs, _holes = parse_batch(plain, count, indexes, [])
    return [
        (
            r.batch_index,
            r.smm.partition_key if r.smm.HasField("partition_key") else None,
            r.smm.payload_size if r.smm.HasField("payload_size") else 0,
        )
        for r in recs
    ]


def rank(index: int) -> bytes:
    return PREFIX + struct.pack(">I", index + 1)


def table_items(table) -> dict[bytes, tuple[bytes, bool]]:
    out = {}
    pos = 0
    while pos >= 0:
        pos, chunk = table.scan(pos, 3)
        for key, r, tomb in chunk:
            assert key not in out
            out[key] = (r, tomb)
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches(), preset=st.dictionaries(KEYS, st.integers(-1, 8), max_size=3))
def test_phase_one_helper_equals_the_python_path(batch, preset):
    recs, plain, indexes = batch
    count = len(recs)
    table = native.key_table()
    expected: dict[bytes, tuple[bytes, bool]] = {}
    for key, index in preset.items():  # the table already holds some keys
        table.offer(KEY_PREFIX + key.encode(), rank(index), False)
        expected[KEY_PREFIX + key.encode()] = (rank(index), False)
    before = table_items(table)
    done = native.compact_offer(plain, count, indexes, KEY_PREFIX, PREFIX, table)
    if done is None:
        assert table_items(table) == before  # not regular: nothing offered
        return
    offered = 0
    for index, key, size in python_records(plain, count, indexes):
        if key is None:
            continue
        offered += 1
        k = KEY_PREFIX + key.encode()
        if k not in expected or rank(index) > expected[k][0]:
            expected[k] = (rank(index), size <= 0)
    assert done == (offered, len(expected) - len(before))
    assert table_items(table) == expected
    assert len(table) == len(expected)
    assert table.live == sum(1 for _, t in expected.values() if not t)


def _python_rebuild(plain: bytes, count: int, keep: list[int], pip_429: bool) -> bytes:
    """What the Python path writes for a whole batch: each kept record's metadata parsed and
    serialized again (payload_size from its value), the others placeholders."""
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


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batch=batches(),
    winners=st.dictionaries(KEYS, st.tuples(st.integers(-1, 8), st.booleans()), max_size=6),
    retain=st.booleans(),
    pip_429=st.booleans(),
    ask=st.booleans(),
)
def test_phase_two_helper_equals_the_python_path(batch, winners, retain, pip_429, ask):
    recs, plain, indexes = batch
    count = len(recs)
    table = native.key_table()
    for key, (index, tomb) in winners.items():
        table.offer(KEY_PREFIX + key.encode(), rank(index), tomb)
    done = native.compact_keep(
        plain,
        count,
        indexes,
        KEY_PREFIX,
        PREFIX,
        None if ask else table,
        retain,
        pip_429,
        PLACEHOLDER,
    )
    if done is None:
        return
    keep, dropped, deleted, whole, rebuilt, asked = done
    live = python_records(plain, count, indexes)  # regular for the helper: parses in Python
    want_keep, want_dropped, want_deleted, want_asked = [], 0, True, []
    for index, key, size in live:
        if key is None:
            if retain:
                want_keep.append(index)
                want_deleted = False
            else:
                want_dropped += 1
            continue
        if size <= 0:
            continue
        want_deleted = False
        k = KEY_PREFIX + key.encode()
        if ask:
            want_asked.append((index, k, rank(index)))
        elif (found := table.get(k)) is not None and found == (rank(index), False):
            want_keep.append(index)
    assert (keep, dropped, deleted) == (want_keep, want_dropped, want_deleted)
    holes = count - len(live)
    assert whole == (indexes is None and holes == 0)
    if ask:
        assert asked is not None and list(zip(*asked, strict=True)) == want_asked
        assert rebuilt is None
        keep = sorted(keep + [i for i, k, r in want_asked if table.get(k) == (r, False)])
        # the caller rebuilds a whole batch it keeps something of (compact_rebuild takes
        # the batch as whole: no indexes)
        rebuilt = None
        if whole and keep:
            rebuilt = native.compact_rebuild(plain, count, keep, pip_429, PLACEHOLDER)
    else:
        assert asked is None
    if rebuilt is not None:
        assert whole and keep
        assert rebuilt == _python_rebuild(plain, count, keep, pip_429)


def test_canonical_records_are_copied_and_others_rebuilt_in_python():
    """Guard for the test above: the helper rebuilds canonical batches itself and leaves
    non-canonical kept records to the Python path."""
    canonical = api.SingleMessageMetadata(partition_key="a", payload_size=2).SerializeToString()
    plain = struct.pack(">I", len(canonical)) + canonical + b"v1"
    table = native.key_table()
    table.offer(KEY_PREFIX + b"a", rank(0), False)
    done = native.compact_keep(plain, 1, None, KEY_PREFIX, PREFIX, table, False, False, PLACEHOLDER)
    assert done[0] == [0] and done[4] == plain
    reordered = _field(3, 0, 2) + _field(2, 2, b"a")  # payload_size before partition_key
    plain = struct.pack(">I", len(reordered)) + reordered + b"v1"
    done = native.compact_keep(plain, 1, None, KEY_PREFIX, PREFIX, table, False, False, PLACEHOLDER)
    assert done[0] == [0] and done[4] is None
    assert _python_rebuild(plain, 1, [0], False) != plain  # protobuf writes it in order


# -- malformed input: no crash, the same answers and errors ---------------------------------------


@st.composite
def damaged(draw: st.DrawFn) -> tuple[bytes, int, list[int] | None]:
    recs, plain, indexes = draw(batches())
    data = bytearray(plain)
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "cut", "insert", "byte"]))
        if action == "cut" and data:
            at = draw(st.integers(0, len(data) - 1))
            del data[at : at + draw(st.integers(1, 6))]
        elif action == "insert":
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif data:
            at = draw(st.integers(0, len(data) - 1))
            data[at] = draw(st.integers(0, 255)) if action == "byte" else data[at] ^ 0x80
    count = len(recs) + draw(st.sampled_from([0, 0, 0, -1, 1, 1000]))
    if indexes is not None and draw(st.booleans()):
        indexes = [*indexes, draw(st.integers(-3, 40))][: max(count, 0)]
    return bytes(data), max(count, 0), indexes


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=damaged(), retain=st.booleans(), pip_429=st.booleans())
def test_helpers_on_damaged_batches_answer_as_python_or_not_at_all(case, retain, pip_429):
    plain, count, indexes = case
    try:
        live = python_records(plain, count, indexes)
    except LedgerctlError:
        live = None
    table = native.key_table()
    table.offer(KEY_PREFIX + b"a", rank(0), False)
    offered = native.compact_offer(plain, count, indexes, KEY_PREFIX, PREFIX, table)
    kept = native.compact_keep(
        plain, count, indexes, KEY_PREFIX, PREFIX, table, retain, pip_429, PLACEHOLDER
    )
    again = native.compact_rebuild(plain, count, list(range(count))[:1], pip_429, PLACEHOLDER)
    if live is None:  # the Python parser reports damage: the helpers must not answer
        assert offered is None and kept is None
        if indexes is None or len(indexes) == count:
            # damage in the bytes; a rebuild takes no indexes, so it cannot see a count
            # that disagrees with them
            assert again is None
        return
    if offered is not None:
        assert offered[0] == sum(1 for _i, key, _s in live if key is not None)
    if kept is not None:
        assert kept[1] == (0 if retain else sum(1 for _i, key, _s in live if key is None))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cases=st.lists(
        st.one_of(damaged(), batches().map(lambda b: (b[1], len(b[0]), b[2]))), max_size=5
    ),
    codec=st.sampled_from([0, 1]),
    retain=st.booleans(),
    fmt=st.sampled_from([FORMAT_CLASSIC, FORMAT_PIP_429]),
    memory=st.sampled_from([None, 1]),
)
def test_pipeline_with_and_without_the_helpers_writes_the_same(cases, codec, retain, fmt, memory):
    """Phase one and two over entries holding these batches (damaged or not): the same
    compacted entries, statistics and problems with the native helpers and without them."""
    raws = [
        entry_of(plain, count, indexes, codec, (5, i))
        for i, (plain, count, indexes) in enumerate(cases)
        if count > 0 or indexes
    ]
    # damage gone on past as the broker does (--accept-damage): the batches copied whole
    opts = CompactionOptions(retain_null_key=retain, format=fmt, accept_damage=True)

    def run():
        table = LocalKeyTable(memory)
        try:
            phase_one_into(raws, opts, table)
            table.finish()
            stats = Stats()
            out = [
                (c.position, c.data, c.messages, c.batch_index)
                for c in phase_two(raws, table, opts, stats)
            ]
            return out, dataclasses.asdict(stats), sorted(table.items())
        finally:
            table.close()

    fast = run()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(core, "_native", lambda: None)
        mp.setattr(core, "_native_split", lambda entry: None)
        slow = run()
    assert fast == slow
    # without --accept-damage, a batch copied whole is a refusal instead, both ways
    if fast[1]["damaged_count"]:
        opts = dataclasses.replace(opts, accept_damage=False)
        with pytest.raises(DataError, match="refusing to copy a damaged entry"):
            run()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(core, "_native", lambda: None)
            mp.setattr(core, "_native_split", lambda entry: None)
            with pytest.raises(DataError, match="refusing to copy a damaged entry"):
                run()
        opts = dataclasses.replace(opts, accept_damage=True)
    # and the generator of records gives what the table holds
    expected: dict[bytes, tuple[bytes, bool]] = {}
    for key, r, tomb in phase_one(raws, opts):
        if key not in expected or r > expected[key][0]:
            expected[key] = (r, tomb)
    assert fast[2] == sorted((k, r, t) for k, (r, t) in expected.items())


# -- KeyTable --------------------------------------------------------------------------------------

OPS = st.lists(
    st.tuples(
        st.sampled_from(["offer", "offer", "put", "get", "clear"]),
        st.binary(max_size=4),
        st.binary(max_size=5),
        st.booleans(),
    ),
    max_size=300,
)


@settings(max_examples=150, deadline=None)
@given(ops=OPS)
def test_key_table_equals_a_dict(ops):
    table = native.key_table()
    model: dict[bytes, tuple[bytes, bool]] = {}
    for op, key, r, tomb in ops:
        if op == "offer":
            fresh = key not in model
            if fresh or r > model[key][0]:
                model[key] = (r, tomb)
            assert table.offer(key, r, tomb) is fresh
        elif op == "put":
            assert table.put(key, r, tomb) is (key not in model)
            model[key] = (r, tomb)
        elif op == "get":
            assert table.get(key) == model.get(key)
        else:
            table.clear()
            model.clear()
        assert len(table) == len(model)
    assert table_items(table) == model
    assert table.live == sum(1 for _, t in model.values() if not t)
    assert table.min_rank() == min((r for r, _ in model.values()), default=None)
    assert table.nbytes >= sum(len(k) + len(r) for k, (r, _) in model.items())


def test_key_table_grows_past_many_keys_and_rejects_what_is_not_bytes():
    table = native.key_table()
    for i in range(50_000):
        table.offer(b"k%d" % i, struct.pack(">Q", i), i % 7 == 0)
    assert len(table) == 50_000 and table.get(b"k49999") == (struct.pack(">Q", 49999), False)
    assert table.live == 50_000 - len(range(0, 50_000, 7))
    with pytest.raises(TypeError):
        table.offer("k", b"r", False)
    with pytest.raises(TypeError):
        table.get(1)
    table.clear()
    assert len(table) == 0 and table.get(b"k1") is None and table.nbytes == 0


@pytest.mark.parametrize("fmt", [FORMAT_CLASSIC, FORMAT_PIP_429])
@pytest.mark.parametrize("with_helpers", [True, False])
@pytest.mark.parametrize(
    ("count", "indexes"),
    [(2**31 - 1, [0]), (4, [5]), (4, [4]), (4, [2, 1]), (4, [1, 1]), (4, [-1]), (0, [0])],
)
def test_a_batch_count_past_the_bound_is_damage_not_a_giant_rebuild(
    fmt, with_helpers, count, indexes
):
    """A PIP-429 batch whose num_messages_in_batch claims 2^31 - 1 records (one retained)
    must not size a rebuilt batch or its list of holes by that count: it is damage, and
    compaction refuses it (or, with the damage accepted, keeps the entry whole as Pulsar
    keeps every batch it cannot read, and lists it). So are
    retained indexes that name no message of the batch (past its count, below 0, not
    rising): rebatched, they would give messages ids that do not exist."""
    recs = [
        Rec(f"k{i}", b"v", [_field(2, 2, f"k{i}".encode()), _field(3, 0, 1)], False)
        for i in range(len(indexes))
    ]
    plain = encode_batch(recs)
    md = api.MessageMetadata(producer_name="gen", sequence_id=1, publish_time=1000)
    md.num_messages_in_batch = count
    md.compacted_batch_indexes.extend(indexes)
    md.uncompressed_size = len(plain)
    data = build_entry(md, plain, checksum=True)
    options = DecodeOptions(outer=Outer.PULSAR_ENTRY, depth=Depth.METADATA)
    raw = raw_entry(decode_entry(data, options, (5, 0)))
    stats = Stats()
    with pytest.MonkeyPatch.context() as mp:
        if not with_helpers:
            mp.setattr(core, "_native", lambda: None)
            mp.setattr(core, "_native_split", lambda entry: None)
        table = LocalKeyTable(None)
        try:
            # refused as damage, unless the damage is accepted
            with pytest.raises(DataError, match=r"^5:0: batch not decodable"):
                phase_one_into([raw], CompactionOptions(format=fmt), table)
            opts = CompactionOptions(format=fmt, accept_damage=True)
            phase_one_into([raw], opts, table)
            table.finish()
            out = list(phase_two([raw], table, opts, stats))
        finally:
            table.close()
    assert [c.position for c in out] == [(5, 0)]
    assert out[0].data.endswith(data)  # the stored entry, not a rebuilt batch
    assert stats.damaged_count == 1 and stats.damaged[0]["position"] == "5:0"
    assert stats.damaged[0]["problem"].endswith("copied whole")
