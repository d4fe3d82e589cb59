"""`ledgerctl demo`: the embedded default data, read back through the stores and decoders.

The demo is checked against what it was built from: every stored entry must decode to
exactly the messages the official client sent (the sidecars in tests/data/real-client),
and the metadata store, the bookie's files and the managed-ledger info must agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.decoders import DecodeOptions, DigestType, Entry, Outer, decode_entries
from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.crypto import load_private_key
from pulsarctl_py.demo import BOOKIE_ID, DemoLedger, DemoSummary, DemoTopic, create_demo
from pulsarctl_py.stores.bookie import BookieStore, open_bookie
from pulsarctl_py.stores.metadata import (
    MetadataStore,
    list_ledgers,
    list_managed_ledgers,
    open_metadata_store,
    read_layout,
    read_ledger,
    read_managed_ledger,
)
from tests.commands.test_decode_golden import assert_messages_equal
from tests.support.cli_helpers import KEYS, REAL_CLIENT, run

SHIPPED = Path(__file__).resolve().parents[2] / "pulsarctl_py" / "demo" / "entries"
#: the scenario captured from a real broker with its schema storage (not the capture endpoint)
CAPTURED = "shop-orders"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> DemoSummary:
    return create_demo(tmp_path_factory.mktemp("demo") / "ledgerctl-demo")


@pytest.fixture
def metadata(built: DemoSummary) -> Iterator[MetadataStore]:
    store = open_metadata_store(f"rocksdb://{built.directory / 'metadata'}")
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def bookie(built: DemoSummary) -> Iterator[BookieStore]:
    store = open_bookie([built.directory / "bookkeeper"])
    try:
        yield store
    finally:
        store.close()


def data_topics(summary: DemoSummary) -> list[DemoTopic]:
    """Topics holding real-client entries (not shadows, not the generated seek-times)."""
    return [t for t in summary.topics if t.shadow_source is None and not generated(t)]


def endpoint_topics(summary: DemoSummary) -> list[DemoTopic]:
    """Topics of the capture endpoint's entries (with sidecars in tests/data/real-client)."""
    return [t for t in data_topics(summary) if t.local_name != CAPTURED]


def generated(topic: DemoTopic) -> bool:
    return any(e.source.startswith("generated/") for lg in topic.ledgers for e in lg.entries)


def sidecar(source: str) -> dict[str, Any]:
    return json.loads((REAL_CLIENT / f"{source}.json").read_text())


# -- what is shipped and what was built --------------------------------------------------------


def test_shipped_entries_are_the_real_client_bytes() -> None:
    shipped = sorted(p for p in SHIPPED.glob("*/*.bin") if p.parent.name != CAPTURED)
    assert len(shipped) == 47
    for path in shipped:
        original = REAL_CLIENT / path.parent.name / path.name
        assert path.read_bytes() == original.read_bytes(), path


def test_the_demo_has_the_promised_topics(built: DemoSummary) -> None:
    names = [t.local_name for t in built.topics]
    assert names[:6] == ["plain", "batched", "tombstones", "encrypted", "chunked", "with-index"]
    assert {"orders-partition-0", "orders-partition-1", "orders-partition-2"} <= set(names)
    assert built.partitioned_topics == {"persistent://public/default/orders": 3}
    sources = {e.source for t in data_topics(built) for lg in t.ledgers for e in lg.entries}
    assert len(sources) == 47 + 7  # every shipped entry is stored once in a topic
    batched = built.topic("batched")
    assert len(batched.ledgers) >= 2
    assert {e.source.split("/")[0] for lg in batched.ledgers for e in lg.entries} == {
        f"batched-{codec}" for codec in ("none", "lz4", "zlib", "zstd", "snappy")
    }
    assert [lg.state for lg in built.topic("plain").ledgers] == ["CLOSED", "OPEN"]
    assert "sub-1" in built.topic("plain").cursors
    assert built.topic("orders-partition-0").compacted_ledger is not None
    assert built.topic("batched-shadow").shadow_source == batched.name
    # ledger ids come from BookKeeper's generator: 0, 1, 2, ... in creation order
    ledgers = built.ledgers()
    assert [lg.ledger_id for lg in ledgers] == list(range(len(ledgers)))
    assert [lg.ctime for lg in ledgers] == sorted(lg.ctime for lg in ledgers)


def test_the_generated_seek_topic(built: DemoSummary, bookie: BookieStore) -> None:
    """seek-times: four ledgers after every real-client ledger, broker entry metadata on the
    last two only, and one region where publish times go back (a producer clock)."""
    topic = built.topic("seek-times")
    assert generated(topic) and [len(lg.entries) for lg in topic.ledgers] == [8, 8, 8, 6]
    # after the capture endpoint's topics (so their ids stay); the broker capture came later
    assert min(lg.ctime for lg in topic.ledgers) > max(
        lg.ctime for t in endpoint_topics(built) for lg in t.ledgers
    )
    assert max(lg.ctime for lg in topic.ledgers) < min(
        lg.ctime for lg in built.topic(CAPTURED).ledgers
    )
    with_bem = [all(e.index is not None for e in lg.entries) for lg in topic.ledgers]
    assert with_bem == [False, False, True, True]
    indexes = [e.index for lg in topic.ledgers[2:] for e in lg.entries]
    assert indexes == sorted(indexes) and topic.properties["index"] == str(indexes[-1])
    times = [e.publish_time for lg in topic.ledgers for e in lg.entries]
    backwards = [i for i in range(1, len(times)) if times[i] < max(times[:i])]
    assert backwards == [11, 12, 13]  # 14:3 .. 14:5 of the second ledger
    options = DecodeOptions(outer=Outer.BOOKIE_ENTRY)
    decoded = list(decode_entries(stored_topic(bookie, topic.ledgers), options))
    assert [e.publish_time for e in decoded] == times
    assert all(e.ok for e in decoded)


def test_publish_times_never_go_back_within_a_topic(built: DemoSummary) -> None:
    for topic in data_topics(built):
        times = [e.publish_time for lg in topic.ledgers for e in lg.entries]
        assert times == sorted(times), topic.name


# -- metadata ----------------------------------------------------------------------------------


def test_bookkeeper_cluster_nodes(metadata: MetadataStore) -> None:
    layout = read_layout(metadata)
    assert layout is not None and layout.layout is lm.LedgerLayout.HIERARCHICAL
    assert metadata.get("/ledgers/INSTANCEID") is not None
    assert metadata.exists("/ledgers/idgen") is not None
    cookie = metadata.get(f"/ledgers/cookies/{BOOKIE_ID}")
    assert cookie is not None and cookie.data.startswith(b"5\nbookieHost: ")


def test_every_ledger_has_bookkeeper_metadata(built: DemoSummary, metadata: MetadataStore) -> None:
    records = {r.ledger_id: r for r in list_ledgers(metadata)}
    assert sorted(records) == [lg.ledger_id for lg in built.ledgers()]
    for ledger in built.ledgers():
        record = records[ledger.ledger_id]
        md = record.metadata
        assert md is not None and record.error is None
        assert record.path == lm.ledger_path(ledger.ledger_id)
        assert (md.ensemble_size, md.write_quorum_size, md.ack_quorum_size) == (1, 1, 1)
        assert md.ensembles == {0: [BOOKIE_ID]}
        assert md.password == b"" and md.ctime == ledger.ctime
        assert md.digest_type is ledger.digest_type
        assert md.state.name == ledger.state
        if ledger.state == "CLOSED":
            assert md.last_entry_id == len(ledger.entries) - 1
            assert md.length == ledger.size
        else:
            assert (md.last_entry_id, md.length) == (-1, 0)
    for topic in [t for t in built.topics if t.shadow_source is None]:
        for ledger in topic.ledgers:
            tags = records[ledger.ledger_id].metadata.pulsar()  # type: ignore[union-attr]
            assert tags.kind == "data" and tags.application == "pulsar"
            assert tags.managed_ledger == mld.TopicName.parse(topic.name).persistence_name
        for ledger in topic.schema_ledgers:
            md = records[ledger.ledger_id].metadata
            assert md is not None and md.digest_type is DigestType.CRC32C
            tags = md.pulsar()
            assert (tags.kind, tags.application, tags.component) == ("schema", "pulsar", "schema")
            assert tags.schema_id == "public/default/shop-orders"
    assert [len(t.schema_ledgers) for t in built.topics if t.schema_ledgers] == [2]


def test_managed_ledgers_match_their_ledgers(built: DemoSummary, metadata: MetadataStore) -> None:
    names = sorted(ref.name for ref in list_managed_ledgers(metadata))
    expected = sorted(mld.TopicName.parse(t.name).persistence_name for t in built.topics)
    assert names == expected
    for topic in built.topics:
        record = read_managed_ledger(metadata, topic.name)
        assert record is not None and record.error is None and record.info is not None
        assert record.ledger_ids == [lg.ledger_id for lg in topic.ledgers]
        assert record.properties == topic.properties
        for info, ledger in zip(record.info.message.ledgerInfo, topic.ledgers, strict=True):
            if ledger.state == "OPEN":  # the broker records only the id while writing it
                assert not info.HasField("entries") and info.timestamp == 0
            else:
                assert (info.entries, info.size) == (len(ledger.entries), ledger.size)
                assert info.timestamp == ledger.closed_ms >= ledger.ctime
        cursors = {c.name: c for c in record.cursors}
        assert sorted(cursors) == sorted(topic.cursors)
        for name, cursor in cursors.items():
            assert cursor.error is None and cursor.state_in == "znode"
            assert list(cursor.mark_delete or ()) == topic.cursors[name]["mark_delete"]


def test_cursor_sits_inside_its_topic(built: DemoSummary, metadata: MetadataStore) -> None:
    topic = built.topic("plain")
    record = read_managed_ledger(metadata, topic.name)
    assert record is not None
    (cursor,) = record.cursors
    assert cursor.name == "sub-1"
    ledger_id, entry_id = cursor.mark_delete  # type: ignore[misc]
    ledger = next(lg for lg in topic.ledgers if lg.ledger_id == ledger_id)
    assert ledger.state == "CLOSED" and 0 <= entry_id <= ledger.last_entry_id
    (acked,) = cursor.info.message.individualDeletedMessages  # type: ignore[union-attr]
    assert acked.upperEndpoint.entryId > entry_id


def test_partitioned_topic_metadata(metadata: MetadataStore) -> None:
    node = metadata.get("/admin/partitioned-topics/public/default/persistent/orders")
    assert node is not None and json.loads(node.data) == {"partitions": 3}
    assert metadata.get("/admin/policies/public/default") is not None


def test_compacted_ledger_names_its_topic(built: DemoSummary, metadata: MetadataStore) -> None:
    topic = built.topic("orders-partition-0")
    record = read_managed_ledger(metadata, topic.name)
    assert record is not None
    cursor = next(c for c in record.cursors if c.name == mld.COMPACTION_CURSOR)
    props = {p.name: p.value for p in cursor.info.message.properties}  # type: ignore[union-attr]
    compacted = read_ledger(metadata, props["CompactedTopicLedger"])
    assert compacted is not None and compacted.metadata is not None
    tags = compacted.metadata.pulsar()
    assert tags.kind == "compacted" and tags.compacted_topic == topic.name
    assert compacted.metadata.digest_type is DigestType.CRC32
    horizon = cursor.mark_delete
    assert tags.compacted_to is not None
    assert (tags.compacted_to["ledger_id"], tags.compacted_to["entry_id"]) == horizon
    assert horizon == (topic.ledgers[-1].ledger_id, topic.ledgers[-1].last_entry_id)


def test_shadow_topic_ledgers_are_its_sources(built: DemoSummary, metadata: MetadataStore) -> None:
    shadow = read_managed_ledger(metadata, built.topic("batched-shadow").name)
    source = read_managed_ledger(metadata, built.topic("batched").name)
    assert shadow is not None and source is not None and shadow.info is not None
    assert mld.shadow_source(shadow.info.message) == source.ref.topic.full_name
    assert set(shadow.ledger_ids) <= set(source.ledger_ids)


# -- bookie ------------------------------------------------------------------------------------


def test_bookie_holds_every_entry(built: DemoSummary, bookie: BookieStore) -> None:
    assert bookie.ledgers() == [lg.ledger_id for lg in built.ledgers()]
    for ledger in built.ledgers():
        info = bookie.ledger(ledger.ledger_id)
        assert info.exists and not info.fenced and info.master_key is not None
        stored = list(bookie.read_entries(ledger.ledger_id))
        assert [s.entry_id for s in stored] == [e.entry_id for e in ledger.entries]
        assert info.last_entry_id == ledger.last_entry_id
    report = bookie.check()
    assert report.findings == [] and report.problems == []
    assert report.entries_in_logs == report.entries_in_index == built.entry_count
    assert len(bookie.entry_logs()) == len(built.entry_logs) >= 2
    (journal,) = bookie.journals()
    assert journal.path.name == built.journal


def stored_topic(bookie: BookieStore, ledgers: list[DemoLedger]) -> Iterator[tuple[bytes, Any]]:
    for ledger in ledgers:
        for stored in bookie.read_entries(ledger.ledger_id):
            yield stored.data, (ledger.ledger_id, stored.entry_id)


def check_layers(entry: Entry, digest: DigestType) -> None:
    assert entry.ok, entry.problems
    assert entry.digest_type is digest
    checks = {layer.name: layer.check for layer in entry.layers if layer.check is not None}
    assert checks["bookie-entry"].ok is True
    assert checks["checksum"].ok is True


def test_entries_decode_to_what_the_client_sent(built: DemoSummary, bookie: BookieStore) -> None:
    key = load_private_key((KEYS / "rsa_private.pem").read_bytes())
    options = DecodeOptions(outer=Outer.BOOKIE_ENTRY, private_key=key)
    for topic in endpoint_topics(built):
        planned = [e for lg in topic.ledgers for e in lg.entries]
        decoded = list(decode_entries(stored_topic(bookie, topic.ledgers), options))
        assert len(decoded) == len(planned)
        length = 0
        for entry, plan in zip(decoded, planned, strict=True):
            check_layers(entry, DigestType.CRC32C)
            assert entry.header is not None
            length = length + plan.size if entry.header.entry_id else plan.size
            assert entry.header.lac == entry.header.entry_id - 1
            assert entry.header.length == length  # cumulative within the ledger
            sent = sidecar(plan.source)
            if entry.chunk is not None and entry.chunk.chunk_id < entry.chunk.num_chunks - 1:
                assert entry.messages == []  # the message comes with its last chunk
                continue
            assert_messages_equal([m.to_json() for m in entry.messages], sent["messages"])
            assert all(m.publish_time == plan.publish_time for m in entry.messages)


def test_compacted_ledger_copies_the_latest_entry_per_key(
    built: DemoSummary, bookie: BookieStore
) -> None:
    topic = built.topic("orders-partition-0")
    assert topic.compacted_ledger is not None
    options = DecodeOptions(outer=Outer.BOOKIE_ENTRY)
    decoded = list(decode_entries(stored_topic(bookie, [topic.compacted_ledger]), options))
    latest: dict[str, tuple[int, int]] = {}
    for ledger in topic.ledgers:
        for e in ledger.entries:
            latest[sidecar(e.source)["messages"][0]["key"]] = (ledger.ledger_id, e.entry_id)
    assert [entry.message_position for entry in decoded] == sorted(latest.values())
    for entry, plan in zip(decoded, topic.compacted_ledger.entries, strict=True):
        check_layers(entry, DigestType.CRC32)
        original = bookie.read_entry(*plan.original)  # type: ignore[misc]
        assert bytes(entry.data).endswith(original[36:])  # the topic entry, byte for byte
        assert_messages_equal(
            [m.to_json() for m in entry.messages], sidecar(plan.source)["messages"]
        )


def test_broker_entry_metadata_index_is_continuous(
    built: DemoSummary, bookie: BookieStore, metadata: MetadataStore
) -> None:
    topic = built.topic("with-index")
    assert len(topic.ledgers) >= 2
    decoded = list(
        decode_entries(stored_topic(bookie, topic.ledgers), DecodeOptions(outer=Outer.BOOKIE_ENTRY))
    )
    indexes = [m.index for entry in decoded for m in entry.messages]
    assert indexes == list(range(len(indexes)))
    assert [e.index for e in decoded] == [e.index for lg in topic.ledgers for e in lg.entries]
    stamps = [e.broker_entry_metadata.broker_timestamp for e in decoded]
    assert stamps == sorted(set(stamps))
    assert all(e.entry_timestamp >= e.publish_time for e in decoded)  # type: ignore[operator]
    record = read_managed_ledger(metadata, topic.name)
    assert record is not None and record.info is not None
    assert mld.ml_index(record.info.message) == decoded[-1].index == indexes[-1]
    for topic in data_topics(built):  # the prefix is only where the plan put it
        if topic.local_name != "with-index":
            assert all(e.index is None for lg in topic.ledgers for e in lg.entries)


# -- shop-orders: a real broker's topic with its schema storage ----------------------------------


def capture_doc() -> dict[str, Any]:
    return json.loads((SHIPPED / CAPTURED / "capture.json").read_text())


def test_captured_files_are_the_ones_the_capture_recorded() -> None:
    import hashlib

    doc = capture_doc()
    files = [doc["schema_index"], *doc["schema_versions"], *doc["entries"]]
    on_disk = sorted(
        p.relative_to(SHIPPED / CAPTURED).as_posix() for p in (SHIPPED / CAPTURED).rglob("*.bin")
    )
    assert on_disk == sorted(f["file"] for f in files)
    for f in files:
        data = (SHIPPED / CAPTURED / f["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == f["sha256"], f["file"]
    # every entry the broker stored came from the sandbox's one topic ledger, in order
    positions = [tuple(e["sandbox_position"]) for e in doc["entries"]]
    assert positions == sorted(positions) and len(positions) == len(doc["message_ids"]) == 7
    assert [m["message_id"] for m in doc["received"]] == doc["message_ids"]
    assert [m["schema_version"] for m in doc["received"]] == [0, 0, 0, 0, 1, 1, 1]


def test_schema_storage_is_the_brokers_with_the_demos_ledger_ids(
    built: DemoSummary, metadata: MetadataStore, bookie: BookieStore
) -> None:
    """Relocated back to the sandbox's ledger ids, the index and each version's entry
    are the broker's bytes exactly; relocating changes nothing else."""
    from pulsarctl_py.decoders import Depth, decode_entry
    from pulsarctl_py.demo.builder import relocate_schema_positions

    doc = capture_doc()
    topic = built.topic(CAPTURED)
    assert topic.schema_path == "/schemas/public/default/shop-orders"
    demo_ids = [lg.ledger_id for lg in topic.schema_ledgers]
    sandbox_ids = [v["sandbox_position"][0] for v in doc["schema_versions"]]
    assert [v["version"] for v in doc["schema_versions"]] == [0, 1]
    back = dict(zip(demo_ids, sandbox_ids, strict=True))
    same = {i: i for i in sandbox_ids}
    captured_index = (SHIPPED / CAPTURED / "schemas" / "index.bin").read_bytes()
    assert relocate_schema_positions(captured_index, "locator", same) == captured_index
    node = metadata.get(topic.schema_path)
    assert node is not None and node.data != captured_index
    assert relocate_schema_positions(node.data, "locator", back) == captured_index
    assert node.stat.version == 1  # created with version 0, set again with version 1
    first, last = topic.schema_ledgers
    assert (node.stat.created_ms, node.stat.modified_ms) == (first.closed_ms, last.closed_ms)
    options = DecodeOptions(outer=Outer.BOOKIE_ENTRY, depth=Depth.ENTRY)
    for version, ledger in zip(doc["schema_versions"], topic.schema_ledgers, strict=True):
        entry = decode_entry(bookie.read_entry(ledger.ledger_id, 0), options)
        bk = entry.layers[0]
        assert bk.check is not None and bk.check.ok and entry.digest_type is DigestType.CRC32C
        payload = bytes(entry.data[bk.offset + bk.length :])
        captured = (SHIPPED / CAPTURED / version["file"]).read_bytes()
        assert relocate_schema_positions(captured, "entry", same) == captured
        assert relocate_schema_positions(payload, "entry", back) == captured
    # the schema ledgers come after the topic's first ledger, as on the broker
    assert (
        topic.ledgers[0].ctime
        < first.ctime
        < first.closed_ms
        <= topic.ledgers[0].entries[0].publish_time
    )  # type: ignore[operator]


def test_shop_orders_values_equal_what_the_consumer_received(
    capsys: pytest.CaptureFixture[str], built: DemoSummary
) -> None:
    """ledgerctl's decoded values of the demo topic equal what the official Java consumer
    received from the broker (AUTO_CONSUME: each message with its writer's version)."""
    doc = capture_doc()
    root = built.directory
    flags = [
        "--metadata-url",
        f"rocksdb://{root / 'metadata'}",
        "--bookie-dir",
        root / "bookkeeper",
    ]
    result = run(capsys, "inspect", "--topic", CAPTURED, "-o", "jsonl", *flags)
    assert result.code == 0, result.err
    got = [m for line in result.out.splitlines() for m in json.loads(line)["messages"]]
    assert [m["schema_version"] for m in got] == [r["schema_version"] for r in doc["received"]]
    assert [m["value_decoded"] for m in got] == [r["value"] for r in doc["received"]]
    assert [m["key"] for m in got] == [m["key"] for s in doc["sent"] for m in s["messages"]]
    listed = run(capsys, "schema", "list", CAPTURED, "-o", "json", *flags)
    assert listed.code == 0, listed.err
    versions = listed.json()["versions"]
    assert [(v["version"], v["type"], v["ledger_id"]) for v in versions] == [
        (i, "AVRO", lg.ledger_id) for i, lg in enumerate(built.topic(CAPTURED).schema_ledgers)
    ]
    shown = run(capsys, "schema", "show", CAPTURED, "-o", "json", *flags).json()
    assert [v["definition"] for v in shown["versions"]] == [
        json.loads(s["schema"]["definition"]) for s in doc["sent"]
    ]


# -- determinism and the directory -------------------------------------------------------------


def snapshot(directory: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    store = open_metadata_store(f"rocksdb://{directory / 'metadata'}")
    try:
        out["nodes"] = [(path, node) for path, node in store.walk("/")]
        out["counters"] = (store.sequential_id, store.instance_id)
    finally:
        store.close()
    current = directory / "bookkeeper" / "current"
    out["files"] = {p.name: p.read_bytes() for p in sorted(current.iterdir()) if p.is_file()}
    out["config"] = (directory / "ledgerctl.toml").read_bytes()
    with open_bookie([directory / "bookkeeper"]) as bookie:
        out["locations"] = [
            (lid, eid, loc.file_id, loc.offset)
            for lid in bookie.ledgers()
            for eid, loc in bookie.iter_locations(lid)
        ]
    return out


def test_a_second_run_writes_the_same_bytes(tmp_path: Path) -> None:
    target = tmp_path / "demo"
    first = create_demo(target)
    before = snapshot(target)
    second = create_demo(target, force=True)
    assert snapshot(target) == before
    assert first.to_json() == second.to_json()
    assert {"0.log", "1.log", "lastId", "lastMark", "VERSION", first.journal} <= set(
        before["files"]
    )


def test_refuses_a_non_empty_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    result = run(capsys, "demo", tmp_path)
    assert result.code == 2
    assert result.err.startswith("ledgerctl: error: ") and result.err.count("\n") == 1
    assert "--force" in result.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_force_replaces_only_the_demo_data(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    assert run(capsys, "demo", tmp_path, "--force", "-o", "json").code == 0
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert run(capsys, "demo", tmp_path, "--force", "-o", "json").code == 0
    other = tmp_path / "elsewhere"
    (other / "metadata").mkdir(parents=True)
    (other / "metadata" / "precious").write_text("not a RocksDB store")
    result = run(capsys, "demo", other, "--force")
    assert result.code == 2 and "does not look like ledgerctl demo data" in result.err
    assert (other / "metadata" / "precious").exists()


def test_cli_creates_the_demo_and_says_what_to_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = run(capsys, "demo", "-o", "json")
    assert result.code == 0, result.err
    doc = result.json()
    assert doc["directory"] == "ledgerctl-demo"
    # 30 entries, 4 ledgers: seek-times; 7 + 2 entries, 2 + 2 ledgers: shop-orders
    assert doc["entries"] == 88 and doc["ledgers"] == 21
    assert "cd ledgerctl-demo && ledgerctl inspect --topic batched" in result.err
    assert (tmp_path / "ledgerctl-demo" / "ledgerctl.toml").is_file()


def test_commands_run_in_the_demo_need_no_flags(
    capsys: pytest.CaptureFixture[str], built: DemoSummary, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pulsarctl_py.config import resolve_bookie_dirs
    from pulsarctl_py.stores.metadata import resolve_metadata_url

    monkeypatch.delenv("LEDGERCTL_METADATA_URL", raising=False)
    monkeypatch.delenv("LEDGERCTL_BOOKIE_DIRS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(built.directory / "no-user-config"))
    monkeypatch.chdir(built.directory)
    # relative to the config file, made absolute
    assert str(resolve_metadata_url()) == f"rocksdb://{built.directory.resolve() / 'metadata'}"
    assert resolve_bookie_dirs() == [built.directory / "bookkeeper"]
    result = run(capsys, "inspect", "--topic", "batched", "-o", "json")
    assert result.code == 0, result.err
