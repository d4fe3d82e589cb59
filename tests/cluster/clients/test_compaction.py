"""Real-client entries compacted by ledgerctl, read back by the official client.

The official ``pulsar-client`` publishes through the capture endpoint (tests/support/harness); the
captured entries are compacted by ledgerctl's phases; a loopback endpoint then serves the
compacted ledger the way a broker serves a ``readCompacted`` reader (original message ids,
GetLastMessageId answered with ledgerctl's compacted last position), and the official
client's reader must receive exactly the expected messages and see
``has_message_available()`` turn false at the end.

What "expected" means comes from what was sent, not from ledgerctl: the latest value of
each key, tombstones (null values) removing keys, keyless messages dropped. The C++ client
(and so the Python one) does not skip ``compacted_out`` placeholders (formats.md §6.4): a
rebatched batch arrives whole, placeholders as messages with an empty key and value.
"""

from __future__ import annotations

import struct

import pulsar
import pytest

from pulsarctl_py.compaction.core import CompactionOptions, Stats, phase_one, phase_two
from pulsarctl_py.compaction.lastpos import last_position
from pulsarctl_py.compaction.reader import raw_entry
from pulsarctl_py.decoders import DecodeOptions, Depth, Outer, decode_entry
from pulsarctl_py.engines.local import LocalKeyTable
from tests.support.harness.compacted_endpoint import CompactedEndpoint
from tests.support.harness.real_client import OutMessage, Publication, Scenario, publish

HISTORY = (
    OutMessage(b"a1", "a"),
    OutMessage(b"b1", "b"),
    OutMessage(b"c1", "c"),
    OutMessage(None, "b"),
    OutMessage(b"a2", "a", properties={"v": "2"}),
    OutMessage(b"no key", None),
    OutMessage(b"c2", "c"),
    OutMessage(b"d1", "d"),
    OutMessage(b"e1", "e"),
    OutMessage(None, "e"),
)


def _compact(
    pub: Publication, opts: CompactionOptions | None = None
) -> tuple[list, tuple[int, int, int] | None]:
    options = DecodeOptions(outer=Outer.PULSAR_ENTRY, depth=Depth.METADATA)
    raws = [raw_entry(decode_entry(data, options, pos)) for data, pos in pub.stream()]
    table = LocalKeyTable(None)
    opts = opts or CompactionOptions()
    for key, rank, tomb in phase_one(raws, opts):
        table.offer(key, rank, tomb)
    table.finish()
    out = list(phase_two(raws, table, opts, Stats()))
    table.close()
    last = last_position(out[-1].data if out else None)
    if last.position is None:
        return out, None
    parts = [int(p) for p in last.position.split(":")]
    return out, (parts[0], parts[1], parts[2] if len(parts) > 2 else -1)


def _expected(
    pub: Publication, batching: bool, codec: str
) -> list[tuple[str, bytes, tuple[int, int]]]:
    """What a readCompacted reader receives, from what was sent.

    Sizes decide tombstones, not null_value (formats.md §6.3): a single message's size is
    its ``uncompressed_size``, which the C++ client sets only when it compresses; without
    it the whole entry's length counts, so an uncompressed single null value is NOT a
    tombstone and stays, as an empty message.
    """
    latest: dict[str, tuple[int, int, int]] = {}
    sizes_known = batching or codec != "NONE"
    for s in pub.sent:
        key, value = s.message.key, s.message.value
        if key is None:
            continue
        if value or not sizes_known:
            latest[key] = (s.ledger_id, s.entry_id, s.batch_index)
        else:
            latest.pop(key, None)
    kept = set(latest.values())
    by_entry: dict[tuple[int, int], list] = {}
    for s in pub.sent:
        by_entry.setdefault(s.position, []).append(s)
    out = []
    for position in sorted(by_entry):
        group = by_entry[position]
        if not any((s.ledger_id, s.entry_id, s.batch_index) in kept for s in group):
            continue
        for s in group:
            if (s.ledger_id, s.entry_id, s.batch_index) in kept:
                out.append((s.message.key, s.message.value or b"", position))
            elif batching:
                out.append(("", b"", position))  # a placeholder, delivered by the C++ client
    return out


def _read_back(entries: list, last: tuple[int, int, int] | None) -> tuple[list, bool]:
    served = []
    for c in entries:
        (size,) = struct.unpack_from(">I", c.data, 0)
        served.append((c.position, c.data[8 + size :]))
    with CompactedEndpoint(served, last) as endpoint:
        client = pulsar.Client(endpoint.service_url, operation_timeout_seconds=10)
        try:
            reader = client.create_reader(
                "persistent://public/default/compacted",
                pulsar.MessageId.earliest,
                is_read_compacted=True,
            )
            got = []
            for _ in range(100):
                if not reader.has_message_available():
                    break
                m = reader.read_next(timeout_millis=5000)
                mid = m.message_id()
                got.append((m.partition_key(), m.data(), (mid.ledger_id(), mid.entry_id())))
            still = reader.has_message_available()
            reader.close()
        finally:
            client.close()
        assert not endpoint.problems, endpoint.problems
    return got, still


@pytest.mark.parametrize(
    ("codec", "batching"),
    [("LZ4", True), ("ZSTD", True), ("SNAPPY", True), ("NONE", False), ("ZLIB", False)],
)
def test_official_reader_gets_the_compacted_view(codec, batching):
    pub = publish(
        Scenario(
            f"compact-{codec.lower()}-{batching}",
            HISTORY,
            compression=codec,
            batching=batching,
            batching_max_messages=3,
        )
    )
    entries, last = _compact(pub)
    expected = _expected(pub, batching, codec)
    assert expected, "the history must leave something"
    got, still_available = _read_back(entries, last)
    assert got == expected
    assert still_available is False


def test_keep_chunks_keeps_every_chunk_of_the_latest_chunked_message_so_it_reassembles():
    big = bytes(range(256)) * 12  # several chunks at the small advertised size
    history = (
        OutMessage(b"old", "k"),
        OutMessage(big, "k"),
        OutMessage(b"other", "j"),
    )
    pub = publish(Scenario("compact-chunked", history, chunking=True, max_message_size=1024))
    assert sum(1 for e in pub.entries if e.is_chunk) > 2
    entries, last = _compact(pub, CompactionOptions(keep_chunks=True))
    got, still_available = _read_back(entries, last)
    assert [(k, v) for k, v, _ in got] == [("k", big), ("j", b"other")]
    assert still_available is False
    # the broker's rule (the default): only the last chunk stays, and the official reader
    # drops a chunk whose first one it never got: the message is gone for it
    entries, last = _compact(pub)
    got, _ = _read_back(entries, last)
    assert [(k, v) for k, v, _ in got] == [("j", b"other")]
