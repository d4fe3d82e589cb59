"""BookKeeper ledger metadata: every golden file BookKeeper wrote, paths, custom metadata."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.decoders.errors import CorruptEntryError
from pulsarctl_py.decoders.ledger_metadata import LedgerLayout, LedgerState
from pulsarctl_py.proto import bookkeeper_data_formats_pb2 as bkpb
from pulsarctl_py.proto import pulsar_api_pb2 as api

DATA = Path(__file__).resolve().parent.parent / "data"
OFFLINE = DATA / "bookkeeper" / "offline"
UPSTREAM = DATA / "upstream" / "bookkeeper-ledger-metadata"
OFFLINE_ITEMS = json.loads((OFFLINE / "manifest.json").read_text())["ledger_metadata"]["items"]


def bk_view(md: lm.LedgerMetadata) -> dict[str, Any]:
    """Our decode in the shape of the manifests' ``bk_parsed`` (BookKeeper's own reading)."""
    digest = None
    if md.digest_type is not None:
        digest = "MAC" if md.digest_type is DigestType.HMAC else md.digest_type.name
    return {
        "ledger_id": md.ledger_id,
        "format_version": md.format_version,
        "ensemble_size": md.ensemble_size,
        "write_quorum_size": md.write_quorum_size,
        "ack_quorum_size": md.ack_quorum_size,
        "state": md.state.name,
        "last_entry_id": md.last_entry_id,
        "length": md.length,
        "has_password": md.password is not None,
        "password_hex": md.password.hex() if md.password is not None else None,
        "digest_type": digest,
        "ctime": -1 if md.ctime is None else md.ctime,
        "ctoken": md.ctoken,
        "ensembles": {str(k): list(v) for k, v in md.ensembles.items()},
        "custom_metadata_utf8": {k: v.decode() for k, v in md.custom_metadata.items()},
    }


@pytest.mark.parametrize("item", OFFLINE_ITEMS, ids=[i["file"] for i in OFFLINE_ITEMS])
def test_offline_golden_equals_bookkeepers_parse(item: dict[str, Any]) -> None:
    data = (OFFLINE / item["file"]).read_bytes()
    assert len(data) == item["size"]
    md = lm.parse(data, item["bk_parsed"]["ledger_id"])
    assert bk_view(md) == item["bk_parsed"]
    assert md.format_version == item["format_version"]
    assert md.missing == []


@pytest.mark.parametrize(
    "path",
    [*sorted(OFFLINE.glob("ledger-metadata/*-v3.bin")), UPSTREAM / "version3.bin"],
    ids=lambda p: p.name,
)
def test_v3_rebuild_is_byte_identical(path: Path) -> None:
    data = path.read_bytes()
    assert lm.build(lm.parse(data)) == data


def test_upstream_vectors_as_their_test_asserts() -> None:
    v1 = lm.parse((UPSTREAM / "version1.bin").read_bytes())
    assert (v1.format_version, v1.write_quorum_size, v1.ensemble_size) == (1, 2, 3)
    assert v1.state is LedgerState.IN_RECOVERY
    assert v1.ensembles == {0: ["192.0.2.1:1234", "192.0.2.2:1234", "192.0.2.3:1234"]}
    assert v1.password is None and v1.digest_type is None

    v2 = lm.parse((UPSTREAM / "version2.bin").read_bytes())
    assert v2.state is LedgerState.IN_RECOVERY
    assert v2.digest_type is DigestType.CRC32 and v2.password == b"passwd"
    assert len(v2.ensembles[0]) == 3 and v2.ctime is None

    v2c = lm.parse((UPSTREAM / "version2ctime.bin").read_bytes())
    assert v2c.ctime == 1544002383075

    v3 = lm.parse((UPSTREAM / "version3.bin").read_bytes())
    assert v3.format_version == 3 and v3.state is LedgerState.OPEN
    assert v3.digest_type is DigestType.CRC32C and v3.password == b"foobar"
    assert v3.last_entry_id == -1 and v3.stored_last_entry_id == -1
    assert v3.ensembles == {0: [f"192.0.2.{i}:3181" for i in (1, 2, 3)]}


@pytest.mark.parametrize("name", ["open", "closed", "inrecovery"])
def test_v1_v2_v3_of_one_ledger_agree_where_bookkeeper_says_they_do(name: str) -> None:
    v2 = lm.parse((OFFLINE / f"ledger-metadata/{name}-v2.bin").read_bytes())
    v3 = lm.parse((OFFLINE / f"ledger-metadata/{name}-v3.bin").read_bytes())
    again = lm.parse(lm.build(v2))  # v2 -> v3 conversion keeps every field v2 has
    for md in (v3, again):
        assert (md.state, md.ensembles, md.password, md.digest_type, md.ctime) == (
            v2.state,
            v2.ensembles,
            v2.password,
            v2.digest_type,
            v2.ctime,
        )
        assert md.custom_metadata == v2.custom_metadata


def test_custom_metadata_keeps_stored_order() -> None:
    md = lm.parse((OFFLINE / "ledger-metadata/open-v3.bin").read_bytes())
    assert list(md.custom_metadata) == [
        "application",
        "component",
        "pulsar/managed-ledger",
        "pulsar/storage-cluster",
    ]
    tags = md.pulsar()
    assert tags.kind == "data" and tags.spelling == "new"
    assert tags.managed_ledger == "public/default/persistent/my-topic"
    assert tags.other == {"pulsar/storage-cluster": b"standalone"}


def test_ensemble_for_entry() -> None:
    md = lm.parse((OFFLINE / "ledger-metadata/closed-v3.bin").read_bytes())
    assert md.ensemble_for(0) == md.ensemble_for(4) == md.ensembles[0]
    assert md.ensemble_for(5) == md.ensemble_for(9) == md.ensembles[5]


# -- damaged input ---------------------------------------------------------------------------


def _v3(msg: bkpb.LedgerMetadataFormat) -> bytes:
    body = msg.SerializePartialToString()
    return lm.HEADER_KEY + b"3\n" + lm._varint(len(body)) + body


def test_missing_required_field_is_reported_not_a_crash() -> None:
    msg = bkpb.LedgerMetadataFormat(ensembleSize=1, length=0, state=3)
    msg.segment.add(firstEntryId=0, ensembleMember=["b:3181"])
    md = lm.parse(_v3(msg), 7)
    assert md.missing == ["quorumSize"]
    assert md.ensemble_size == 1 and md.state is LedgerState.CLOSED and md.ledger_id == 7
    with pytest.raises(CorruptEntryError, match="quorumSize"):
        lm.parse(_v3(msg), strict=True)


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"", "BookieMetadataFormatVersion"),
        (b"NotMetadata\t3\n", "BookieMetadataFormatVersion"),
        (b"BookieMetadataFormatVersion\t3", "newline"),
        (b"BookieMetadataFormatVersion\t12345678901\n", "newline"),
        (b"BookieMetadataFormatVersion\tx\n", "decimal"),
        (b"BookieMetadataFormatVersion\t4\n", "format version 1, 2 or 3"),
        (b"BookieMetadataFormatVersion\t3\n\x10\x08\x01", "bytes of LedgerMetadataFormat"),
        (b"BookieMetadataFormatVersion\t3\n\x80", "varint"),
        (b"BookieMetadataFormatVersion\t3\n\x03\xff\xff\xff", "undecodable"),
        (b"BookieMetadataFormatVersion\t2\nquorumSize: x\n", "text format"),
        (b"BookieMetadataFormatVersion\t1\n2\n3\n", "length"),
        (b"BookieMetadataFormatVersion\t1\n2\n3\n0\nbogus\n", "entry id"),
    ],
)
def test_corrupt_metadata_raises_corrupt_entry_error(data: bytes, fragment: str) -> None:
    with pytest.raises(CorruptEntryError, match=fragment) as info:
        lm.parse(data)
    assert info.value.layer == lm.LAYER
    assert "\n" not in info.value.one_line()


# -- paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ledger_id, layout, path",
    [
        (0, "hierarchical", "/ledgers/00/0000/L0000"),
        (5, "hierarchical", "/ledgers/00/0000/L0005"),
        (1234567890, "hierarchical", "/ledgers/12/3456/L7890"),
        (2**31 - 2, "hierarchical", "/ledgers/21/4748/L3646"),
        (2**31 - 1, "hierarchical", "/ledgers/000/0000/0021/4748/L3647"),
        (0x123456789A, "hierarchical", "/ledgers/000/0000/0781/8749/L3530"),
        (2**63 - 1, "longhierarchical", "/ledgers/922/3372/0368/5477/L5807"),
        (5, "longhierarchical", "/ledgers/000/0000/0000/0000/L0005"),
        (5, "legacyhierarchical", "/ledgers/00/0000/L0005"),
        (5, "flat", "/ledgers/L0000000005"),
        (0x123456789A, "flat", "/ledgers/L78187493530"),
    ],
)
def test_ledger_paths(ledger_id: int, layout: str, path: str) -> None:
    assert lm.ledger_path(ledger_id, layout) == path
    assert lm.ledger_id_from_path(path) == ledger_id


def test_ledger_path_with_other_root() -> None:
    assert lm.ledger_path(3, root="/bk/ledgers/") == "/bk/ledgers/00/0000/L0003"
    assert lm.ledger_id_from_path("/bk/ledgers/00/0000/L0003", "/bk/ledgers") == 3
    assert lm.ledger_id_from_path("/bk/ledgers/00/0000/L0003") is None


@pytest.mark.parametrize(
    "path",
    [
        "/ledgers",
        "/ledgers/00",
        "/ledgers/00/0000",
        "/ledgers/LAYOUT",
        "/ledgers/INSTANCEID",
        "/ledgers/idgen",
        "/ledgers/idgen/ID-0000000001",
        "/ledgers/available/127.0.0.1:3181",
        "/ledgers/cookies/127.0.0.1:3181",
        "/ledgers/underreplication/ledgers/0000/0000/0000/0000/urL0000000001",
        "/ledgers/00/0000/L12345",
        "/ledgers/00/000/L0001",
        "/ledgers/0a/0000/L0001",
        "/ledgers/00/0000/l0001",
        "/ledgers/L123",
        "/other/00/0000/L0001",
        "/ledgers/00/0000/L0001/child",
        "/ledgers/99999/L0001",
    ],
)
def test_non_ledger_znodes_are_skipped(path: str) -> None:
    assert lm.ledger_id_from_path(path) is None


@given(st.integers(0, 2**63 - 1), st.sampled_from(list(LedgerLayout)))
def test_path_id_round_trip(ledger_id: int, layout: LedgerLayout) -> None:
    if layout is LedgerLayout.LEGACY_HIERARCHICAL and ledger_id >= 10**10:
        return  # %010d split 2-4-4 cannot hold it (BookKeeper refuses such ids there)
    assert lm.ledger_id_from_path(lm.ledger_path(ledger_id, layout)) == ledger_id


def test_layout_znode() -> None:
    data = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"
    assert lm.parse_layout(data) == (
        2,
        "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory",
        1,
        LedgerLayout.HIERARCHICAL,
    )
    with pytest.raises(CorruptEntryError):
        lm.parse_layout(b"garbage")


# -- Pulsar custom metadata ------------------------------------------------------------------


def test_cursor_ledger_tags_both_spellings() -> None:
    new = lm.decode_custom_metadata(lm.pulsar_custom_metadata("t/ns/persistent/x", cursor="sub"))
    old = lm.decode_custom_metadata(
        lm.pulsar_custom_metadata("t/ns/persistent/x", cursor="sub", spelling="old")
    )
    for tags, spelling in ((new, "new"), (old, "old")):
        assert tags.kind == "cursor" and tags.spelling == spelling
        assert (tags.managed_ledger, tags.cursor) == ("t/ns/persistent/x", "sub")
        assert tags.application == "pulsar" and tags.component == "managed-ledger"
        assert tags.other == {}


@pytest.mark.parametrize("spelling", ["new", "old"])
def test_compacted_ledger_tags(spelling: str) -> None:
    topic_key, to_key = ("pulsar/compactedTopic", "pulsar/compactedTo")
    if spelling == "old":
        topic_key, to_key = ("compactedTopic", "compactedTo")
    custom = {
        "application": b"pulsar",
        "component": b"compacted-ledger",
        topic_key: b"persistent://public/default/t",
        to_key: api.MessageIdData(ledgerId=12, entryId=34, batch_index=2).SerializeToString(),
    }
    tags = lm.decode_custom_metadata(custom)
    assert tags.kind == "compacted" and tags.spelling == spelling
    assert tags.compacted_topic == "persistent://public/default/t"
    assert tags.compacted_to == {"ledger_id": 12, "entry_id": 34, "partition": -1, "batch_index": 2}
    assert lm.decode_message_id(lm.encode_message_id(12, 34, batch_index=2))[0] == tags.compacted_to


def test_compacted_to_entry_minus_one_is_signed() -> None:
    tags = lm.decode_custom_metadata({"pulsar/compactedTo": lm.encode_message_id(3, -1)})
    assert tags.compacted_to is not None and tags.compacted_to["entry_id"] == -1


def test_damaged_compacted_to_is_a_problem_not_a_crash() -> None:
    tags = lm.decode_custom_metadata(
        {"pulsar/compactedTo": b"\xff\xff", "compactedTo": b"", "pulsar/schemaId": b"s"}
    )
    assert tags.compacted_to is None and tags.problems
    partial = lm.decode_custom_metadata({"compactedTo": b"\x08\x05"})  # no entryId
    assert partial.compacted_to == {
        "ledger_id": 5,
        "entry_id": 0,
        "partition": -1,
        "batch_index": -1,
    }
    assert any("entryId" in p for p in partial.problems)


def test_schema_and_mixed_spelling() -> None:
    tags = lm.decode_custom_metadata(
        {"component": b"schema", "schemaId": b"public/default/t", "pulsar/managed-ledger": b"x"}
    )
    assert tags.kind == "schema" and tags.schema_id == "public/default/t"
    assert tags.spelling == "mixed"
    assert lm.decode_custom_metadata({}).kind == "unknown"


def test_to_json_is_plain() -> None:
    md = lm.parse((OFFLINE / "ledger-metadata/closed-v3.bin").read_bytes(), 101)
    out = md.to_json()
    json.dumps(out)
    assert out["digest_type"] == "HMAC" and out["state"] == "CLOSED"
    assert out["pulsar"]["managed_ledger"] == "public/default/persistent/my-topic"


@given(
    last=st.integers(-1, 2**40),
    length=st.integers(0, 2**40),
    digest=st.sampled_from(list(DigestType)),
    ctime=st.integers(0, 2**45),
    custom=st.dictionaries(st.text(max_size=8), st.binary(max_size=8), max_size=3),
)
def test_bare_format_as_offloaders_embed_it(
    last: int, length: int, digest: DigestType, ctime: int, custom: dict[str, bytes]
) -> None:
    """OffloadUtils.buildLedgerMetadataFormat: no header, no size prefix, no password; the
    digest type is kept as stored."""
    md = lm.LedgerMetadata(
        ensemble_size=3,
        write_quorum_size=2,
        ack_quorum_size=2,
        state=LedgerState.CLOSED,
        ensembles={0: ["127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183"]},
        last_entry_id=last,
        length=length,
        digest_type=digest,
        ctime=ctime,
        custom_metadata=custom,
    )
    msg = lm.to_format(md, include_ctoken=False)
    msg.ClearField("password")
    back = lm.parse_format(msg.SerializeToString())
    assert (back.last_entry_id, back.length, back.digest_type, back.ctime) == (
        last,
        length,
        digest,
        ctime,
    )
    assert back.password is None and back.custom_metadata == custom
    assert back.ensembles == md.ensembles and back.is_closed


def test_bare_format_garbage_is_corrupt() -> None:
    with pytest.raises(CorruptEntryError):
        lm.parse_format(b"\xff\xff\xff", 32)
