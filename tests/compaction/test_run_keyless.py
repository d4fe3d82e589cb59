"""`ledgerctl compact` on a topic whose messages carry no key.

A one-ledger topic of keyless messages (single messages and a batch), built with the verify
world's ledger and metadata builders: without ``--retain-null-key`` compaction would drop
everything, so the command says so on one line and exits 1 (a finding in the data), and
``--apply`` writes nothing; with ``--retain-null-key`` every message is kept, as Pulsar's
compactor keeps keyless messages when ``topicCompactionRetainNullKey`` is set.
"""

from __future__ import annotations

from pathlib import Path

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders.checksums import master_key
from pulsarctl_py.decoders.payload import build_batch
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.proto import pulsar_api_pb2 as api
from tests.support.cli_helpers import run
from tests.support.verify_world import (
    LedgerSpec,
    _Builder,
    _ml_info,
    _tags,
    bookkeeper_root_nodes,
    tree_digest,
    write_cookies,
    write_tree,
)

TOPIC = "persistent://public/default/keyless"


def _entries() -> list[bytes]:
    out = []
    for seq in range(3):  # single messages without partition_key
        md = api.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1_000 + seq)
        out.append(build_entry(md, f"v{seq}".encode()))
    rows = [(api.SingleMessageMetadata(sequence_id=3 + i), f"b{i}".encode()) for i in range(4)]
    md = api.MessageMetadata(producer_name="p", sequence_id=3, publish_time=1_010)
    md.num_messages_in_batch = 4
    out.append(build_entry(md, build_batch(rows)))
    return out


def _world(root: Path) -> tuple[str, Path]:
    from pulsarctl_py.stores.bookie import write_db_ledger_dir
    from pulsarctl_py.stores.metadata import create_metadata_store

    spec = LedgerSpec(7, _tags(TOPIC))
    _Builder.pack(spec, _entries())
    nodes = {
        mld.TopicName.parse(TOPIC).ml_path: mld.build_info(_ml_info([(spec, True)], {})),
        lm.ledger_path(7): lm.build(spec.metadata()),
        **bookkeeper_root_nodes(root / "bookie"),
    }
    root.mkdir(parents=True)
    store = create_metadata_store(root / "metadata")
    try:
        write_tree(store, nodes)
    finally:
        store.close()
    write_db_ledger_dir(root / "bookie" / "current", spec.entries, master_key(b""))
    write_cookies(root / "bookie")
    return f"rocksdb://{root / 'metadata'}", root / "bookie"


def test_a_keyless_topic_is_one_line_exit_1_and_nothing_written(tmp_path, capsys):
    url, bookie = _world(tmp_path / "w")
    args = ["--metadata-url", url, "--bookie-dir", str(bookie)]
    before = tree_digest(tmp_path / "w")
    for extra in ([], ["--apply", "--plan", str(tmp_path / "c.json")], ["-o", "json"]):
        result = run(capsys, "compact", TOPIC, *extra, *args)
        assert result.code == 1, (extra, result.err)
        lines = result.err.strip().splitlines()
        assert len(lines) == 1 and "no keyed messages" in lines[0], result.err
        assert "--retain-null-key" in lines[0] and "Traceback" not in result.err
        assert result.out == ""
    assert tree_digest(tmp_path / "w") == before


def test_retain_null_key_keeps_every_keyless_message(tmp_path, capsys):
    url, bookie = _world(tmp_path / "w")
    args = ["--metadata-url", url, "--bookie-dir", str(bookie)]
    result = run(capsys, "compact", TOPIC, "--retain-null-key", "-o", "json", *args)
    assert result.code == 0, result.err
    report = result.json()
    assert report["keys"] == 0 and report["keyless_dropped"] == 0
    assert report["kept"] == 7 and report["entries_in"] == 4 and report["entries_out"] == 4
    assert report["horizon"] == "7:3"
    assert report["last_message_position"] == "7:3:3"

    applied = run(
        capsys, "compact", TOPIC, "--retain-null-key", "--apply", "--plan", tmp_path / "c.json",
        "-o", "json", *args,
    )  # fmt: skip
    assert applied.code == 0, applied.err
    new_id = applied.json()["compacted_ledger"]
    shown = run(capsys, "inspect", str(new_id), "-o", "json", *args)
    assert shown.code == 0, shown.err
    values = [m["value"] for e in shown.json()["entries"] for m in e["messages"]]
    assert len(values) == 7
