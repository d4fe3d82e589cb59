"""The compacted last message position per broker generation (formats.md §7)."""

from __future__ import annotations

import pytest

from pulsarctl_py.compaction.lastpos import last_position
from pulsarctl_py.decoders import compacted
from pulsarctl_py.decoders.payload import build_batch, placeholder
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.proto import pulsar_api_pb2 as api


def _framed(md, payload: bytes) -> bytes:
    return compacted.build(api.MessageIdData(ledgerId=7, entryId=3), build_entry(md, payload))


def _batch(kept: list[bool], pip429: bool = False) -> bytes:
    md = api.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    md.num_messages_in_batch = len(kept)
    rows = []
    for i, keep in enumerate(kept):
        if keep:
            rows.append((api.SingleMessageMetadata(partition_key=f"k{i}"), b"v"))
        elif not pip429:
            rows.append((placeholder(), None))
    if pip429:
        md.compacted_batch_indexes.extend(i for i, k in enumerate(kept) if k)
    plain = build_batch(rows)
    md.uncompressed_size = len(plain)
    return _framed(md, plain)


def test_nothing_compacted_is_earliest():
    assert last_position(None).position is None


def test_a_trailing_placeholder_hangs_readers_only_before_18877():
    framed = _batch([True, True, False])
    newest = last_position(framed, "pip-429")
    assert newest.position == "7:3:1" and not newest.hangs
    old = last_position(framed, "pre-18877")
    assert old.position == "7:3:2" and old.hangs
    assert old.delivered_last == "7:3:1"


def test_pip_429_batches_use_the_last_listed_index():
    framed = _batch([False, True, False, False], pip429=True)
    assert last_position(framed, "pip-429").position == "7:3:1"
    assert last_position(framed, "pre-18877").hangs  # answers 7:3:3


def test_single_messages_and_batches_of_one():
    md = api.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, partition_key="k")
    single = _framed(md, b"v")
    assert last_position(single).position == "7:3"
    old = last_position(single, "pre-18877")
    assert old.position == "7:3:0" and not old.hangs
    assert old.findings[0]["code"] == "last-position-nonbatched-index"
    one = last_position(_batch([True]))
    assert one.position == "7:3" and one.findings == []


def test_encrypted_batches_fail_before_pip_429():
    md = api.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    md.num_messages_in_batch = 3
    md.encryption_keys.add(key="k", value=b"x")
    framed = _framed(md, b"\x01" * 20)
    assert last_position(framed, "pip-429").position == "7:3:2"
    failed = last_position(framed, "pre-pip-429")
    assert failed.position is None and "Invalid unknown tag type" in failed.error


def test_unknown_generation_is_refused():
    from pulsarctl_py.errors import LedgerctlError

    with pytest.raises(LedgerctlError):
        last_position(None, "1.0")


def test_released_brokers_answer_entry_level_when_no_record_is_live():
    # Pulsar 4.0.7 ServerCnx.calculateTheLastBatchIndexInBatch starts at -1 and keeps it
    # when every record is compacted out: an answer, not an error (but no reader reaches it)
    framed = _batch([False, False, False])
    released = last_position(framed, "pre-pip-429")
    assert released.error is None and released.position == "7:3"
    assert released.hangs and released.delivered_last is None
    # the PIP-429 copy throws instead ("No valid message in entry")
    assert last_position(framed, "pip-429").error is not None


def test_pip_429_scans_the_still_compressed_batch():
    from pulsarctl_py.decoders.codecs import compress

    md = api.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    md.num_messages_in_batch = 3
    rows = [
        (api.SingleMessageMetadata(partition_key="k0"), b"v" * 40),
        (api.SingleMessageMetadata(partition_key="k1"), b"v" * 40),
        (placeholder(), None),
    ]
    plain = build_batch(rows)
    md.uncompressed_size = len(plain)
    md.compression = api.LZ4
    framed = _framed(md, compress(api.LZ4, plain))
    # the released broker decompresses first: the last live record
    assert last_position(framed, "pre-pip-429").position == "7:3:1"
    # the PIP-429 copy reads the LZ4 block as records: an error or a position it made up
    newest = last_position(framed, "pip-429")
    assert newest.error is not None or any(
        f["code"] == "last-position-misread" for f in newest.findings
    )


def test_the_default_generation_is_the_released_one():
    from pulsarctl_py.compaction.lastpos import DEFAULT

    assert DEFAULT == "pre-pip-429"
    assert last_position(_batch([True, False])).generation == "pre-pip-429"
