"""One set of limits, bounded memory everywhere (issue 24 point 4).

* one maximum message size (Pulsar's default maxMessageSize, 5 MiB) for every command,
  set by ``ledgerctl --max-message-size``, ``LEDGERCTL_MAX_MESSAGE_SIZE`` or the old
  per-command spelling of inspect and decode, carried to executors by the splits;
* the decoders' bounds: batches that cannot fit, chunked messages joined up to four limits,
  chunks waiting to be joined within a budget, messages written one at a time;
* bookie frames refused from their length, live reads within a byte budget;
* listings streamed in the order they had;
* the adversarial corpus (tests/support/bombs.py): every command on every bomb under 300 MB of
  peak RSS (the child's own VmHWM), with the error said, not a traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import pickle
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders import DecodeOptions, decode_entries, decode_entry
from pulsarctl_py.decoders import limits as dlimits
from pulsarctl_py.decoders.entry import ChunkAssembler
from pulsarctl_py.decoders.payload import batch_fit_error, build_batch
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.proto import pulsar_api_pb2 as api
from tests.support import bombs
from tests.support.bombs import LIMIT, PEAK_GOAL, MiB, run_peak
from tests.support.cli_helpers import run

#: what a bomb that is refused says, by bomb (inspect's problem on its entry)
REFUSED = {
    "lz4-declared": "uncompressed_size 4294967295 exceeds the limit of 5242880 bytes",
    "zlib-declared": "uncompressed_size 4294967295 exceeds the limit of 5242880 bytes",
    "zstd-declared": "uncompressed_size 4294967295 exceeds the limit of 5242880 bytes",
    "snappy-declared": "uncompressed_size 4294967295 exceeds the limit of 5242880 bytes",
    "lz4-lying": "LZ4 block does not decompress",
    "zlib-lying": "ZLIB payload decompresses to more than 5242880 bytes",
    "zstd-lying": "zstd frame does not decompress",
    "snappy-lying": "snappy block announces 10485760 bytes",
    "batch-count-huge": "0 to 200000 messages in a batch, found 2147483647",
    "batch-value-huge": "payload_size 2147483647",
    "chunk-announces-huge": "announces 2147483647 bytes (total_chunk_msg_size)",
    "chunks-join-past-limit": "holds more than 20971520 bytes in its first 5 chunks",
    "chunks-inflate-past-limit": "uncompressed_size 268435456 exceeds the limit",
    "chunks-never-finished": "the messages being joined held more than 52428800 bytes",
}
HINT = "raise it with --max-message-size or LEDGERCTL_MAX_MESSAGE_SIZE"


@pytest.fixture(autouse=True)
def default_limit() -> Iterator[None]:
    """Every test starts and ends with the default limit in this process."""
    dlimits.set_max_message_size(dlimits.DEFAULT_MAX_MESSAGE_SIZE)
    yield
    dlimits.set_max_message_size(dlimits.DEFAULT_MAX_MESSAGE_SIZE)


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("LEDGERCTL_METADATA_URL", "LEDGERCTL_BOOKIE_DIRS", "LEDGERCTL_MAX_MESSAGE_SIZE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-user-config"))


def honest(size: int, key: str = "k") -> bytes:
    """A ZSTD message of ``size`` zero bytes (a few hundred stored bytes)."""
    payload = bombs.zeros_compressed(api.ZSTD, size)
    return bombs.pulsar_entry(payload, compression=api.ZSTD, uncompressed_size=size, key=key)


def problems(result: Any) -> list[str]:
    return [p["message"] for e in result.json()["entries"] for p in e["problems"]]


# -- one limit ------------------------------------------------------------------------------


def test_the_default_is_the_brokers_max_message_size() -> None:
    # ServiceConfiguration.maxMessageSize = Commands.DEFAULT_MAX_MESSAGE_SIZE (5 MiB)
    assert dlimits.max_message_size() == 5 * 1024 * 1024 == 5_242_880
    assert dlimits.max_frame() == 5_242_880 + 10 * 1024  # + MESSAGE_SIZE_FRAME_PADDING
    at, over = decode_entry(honest(LIMIT)), decode_entry(honest(LIMIT + 1))
    assert at.ok and len(at.messages[0].value) == LIMIT
    assert not over.ok and not over.messages
    (message,) = [p.message for p in over.problems]
    assert f"uncompressed_size {LIMIT + 1} exceeds the limit of {LIMIT} bytes" in message
    assert HINT in message


def test_every_spelling_sets_the_one_limit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "two-mib.bin"
    path.write_bytes(honest(2 * MiB))
    refused = f"uncompressed_size {2 * MiB} exceeds the limit of {MiB} bytes"

    assert run(capsys, "decode", "-o", "json", path).code == 0
    for args, env in (
        (["--max-message-size", "1MiB", "decode", "-o", "json", path], None),
        (["decode", "-o", "json", "--max-message-size", "1m", path], None),  # the old one
        (["decode", "-o", "json", path], "1048576"),
    ):
        if env is not None:
            monkeypatch.setenv("LEDGERCTL_MAX_MESSAGE_SIZE", env)
        result = run(capsys, *args)
        monkeypatch.delenv("LEDGERCTL_MAX_MESSAGE_SIZE", raising=False)
        assert result.code == 1, (args, result.err)
        assert any(refused in m for m in problems(result)), problems(result)
        # the run leaves the process's limit as it found it
        assert dlimits.max_message_size() == LIMIT
    # the flag wins over the variable
    monkeypatch.setenv("LEDGERCTL_MAX_MESSAGE_SIZE", "1MiB")
    assert run(capsys, "--max-message-size", "3m", "decode", "-o", "json", path).code == 0
    assert run(capsys, "decode", "--max-message-size", "3m", "-o", "json", path).code == 0


@pytest.mark.parametrize("bad", ["abc", "0", "-1", "3g", "1t", "9" * 80])
def test_bad_limits_are_usage_errors(capsys: pytest.CaptureFixture[str], bad: str) -> None:
    for args in (
        ["--max-message-size", bad, "decode", "--sample", "nonbatched-plain"],
        ["decode", "--max-message-size", bad, "--sample", "nonbatched-plain"],
    ):
        result = run(capsys, *args)
        assert result.code == 2, (args, result.err)
        assert "--max-message-size" in result.err and "Traceback" not in result.err


def test_a_bad_variable_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEDGERCTL_MAX_MESSAGE_SIZE", "five megs")
    result = run(capsys, "decode", "--sample", "nonbatched-plain")
    assert result.code == 2
    assert result.err.startswith("ledgerctl: error: LEDGERCTL_MAX_MESSAGE_SIZE: ")
    assert result.err.count("\n") == 1


def test_export_and_compaction_apply_the_same_limit(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    clean_env: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Export decompressed up to 512 MiB and inspect up to 64 MiB: now both the one limit."""
    stores = bombs.topic_world(tmp_path / "w", [honest(6 * MiB, "big"), honest(1024, "small")])
    for limit, rows_ok in ((None, 1), ("8MiB", 2)):
        if limit is not None:
            monkeypatch.setenv("LEDGERCTL_MAX_MESSAGE_SIZE", limit)
        to = tmp_path / f"out-{rows_ok}.jsonl"
        result = run(capsys, "export", bombs.TOPIC, "--to", to, *stores.flags())
        rows = [json.loads(line) for line in to.read_text().splitlines()]
        assert sum(r["value"] is not None for r in rows) == rows_ok, result.err
        inspected = run(capsys, "inspect", "--topic", bombs.TOPIC, "-o", "json", *stores.flags())
        assert inspected.code == (1 if limit is None else 0), inspected.err
        compact = run(
            capsys, "compact", bombs.TOPIC, "--export", tmp_path / f"c-{rows_ok}.jsonl",
            *stores.flags(),
        )  # fmt: skip
        assert "Traceback" not in compact.err
        if limit is None:
            big = [r for r in rows if r["entry_id"] == 0]
            assert big and any("exceeds the limit of 5242880" in p for p in big[0]["problems"])
            # compaction refuses to copy what it cannot decode (without --accept-damage),
            # in one line naming the limit, and leaves no partial view behind
            assert compact.code == 1 and compact.err.count("\n") == 1, compact.err
            assert "exceeds the limit of 5242880" in compact.err
            assert not (tmp_path / f"c-{rows_ok}.jsonl").exists()
        else:
            assert compact.code == 0, compact.err
            assert (tmp_path / f"c-{rows_ok}.jsonl").exists()


def test_a_stored_entry_larger_than_a_frame_is_refused_before_it_is_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, clean_env: None
) -> None:
    """No bookie could serve it (frames are the limit + 10 KiB); raised, it is read."""
    import os

    big = bombs.pulsar_entry(os.urandom(6 * MiB), key="big")
    stores = bombs.topic_world(tmp_path / "w", [bombs.pulsar_entry(b"small"), big])
    args = ("inspect", str(bombs.TOPIC_LEDGER), "--bookie-dir", str(stores.bookie_dir))
    refused = run(capsys, *args, "-o", "json")
    assert refused.code == 1, refused.err
    entries = refused.json()["entries"]
    assert entries[0]["ok"] and not entries[1]["ok"]
    (message,) = [p["message"] for p in entries[1]["problems"]]
    assert f"an entry of at most {LIMIT + 10 * 1024} bytes" in message
    assert f"size {len(big) + 32 + 4}" in message and "--max-message-size" in message
    raised = run(capsys, "--max-message-size", "7m", *args, "-o", "json")
    assert raised.code == 0, raised.err
    assert raised.json()["entries"][1]["messages"][0]["size"] == 6 * MiB


def test_splits_carry_the_limit_to_executors() -> None:
    from pulsarctl_py import limits
    from pulsarctl_py.engines import build_scan_plan

    limits.configure(7 * MiB)
    plan = build_scan_plan("t", [(1, 10, 100)], bookie_dirs=["/nowhere"], split_entries=4)
    assert {s.max_message_size for s in plan.splits} == {7 * MiB}
    shipped = pickle.loads(pickle.dumps(plan.splits[0]))
    limits.configure(LIMIT)  # a fresh executor
    limits.apply_split(shipped)
    assert dlimits.max_message_size() == 7 * MiB


# -- the decoders' bounds -------------------------------------------------------------------


def test_batch_counts_that_cannot_fit_are_refused_before_any_record() -> None:
    assert batch_fit_error(3, 12) is None
    assert "cannot fit" in (batch_fit_error(4, 15) or "")
    records = build_batch([(api.SingleMessageMetadata(), b"v")] * 3)  # 3 x 7 bytes
    md = api.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=100
    )
    entry = decode_entry(build_entry(md, records))
    assert not entry.messages
    assert any("100 records cannot fit in 21 bytes" in p.message for p in entry.problems)


def _chunks(uuid: str, sizes: list[int], announced: int | None = None) -> list[bytes]:
    total = sum(sizes) if announced is None else announced
    return [
        bombs.chunk(uuid, i, len(sizes), bytes([65 + i]) * n, total) for i, n in enumerate(sizes)
    ]


def _decode(entries: list[bytes], limit: int) -> list[Any]:
    return list(decode_entries(((e, None) for e in entries), DecodeOptions(max_uncompressed=limit)))


def test_chunks_are_joined_up_to_four_limits() -> None:
    """A chunked message is larger than the limit by design (each chunk is within it): it
    is joined up to four limits, as a consumer joins it up to its memory."""
    kib = 1024
    ok = _decode(_chunks("fits", [60 * kib, 60 * kib, 60 * kib, 60 * kib, 16 * kib]), 64 * kib)
    assert [len(e.messages) for e in ok] == [0, 0, 0, 0, 1]
    assert len(ok[-1].messages[0].value) == 256 * kib and not ok[-1].problems
    # their bytes pass four limits, whatever chunk 0 announced
    over = _decode(_chunks("over", [60 * kib] * 5 + [8 * kib], 80), 64 * kib)
    assert [len(e.messages) for e in over] == [0] * 6
    assert "holds more than 262144 bytes in its first 5 chunks" in over[4].problems[0].message
    assert not over[5].problems  # the rest of a discarded message goes quietly
    # chunk 0 announces more than four limits: refused before anything is held
    announced = _decode(_chunks("announced", [1024, 1024], 2**31 - 1), 64 * kib)
    assert "announces 2147483647 bytes" in announced[0].problems[0].message
    assert HINT in announced[0].problems[0].message


def test_chunks_waiting_to_be_joined_stay_within_a_budget() -> None:
    """Ten limits of bytes at most (the Java consumer's maxPendingChunkedMessage is 10):
    the oldest unfinished message is discarded, with an error, and the rest go on."""
    kib = 1024
    limit = 64 * kib
    opened = [bombs.chunk(f"open-{i}", 0, 2, b"x" * (16 * kib), 32 * kib) for i in range(60)]
    late = _chunks("late", [8 * kib, 8 * kib])
    assembler = ChunkAssembler(DecodeOptions(max_uncompressed=limit))
    decoded = []
    for data in [*opened, *late]:
        entry = decode_entry(data, assembler.options)
        assembler.add(entry)
        decoded.append(entry)
        assert assembler._held <= 10 * limit + len(data) + 4096
    dropped = [p.message for e in decoded for p in e.problems]
    assert any("chunked message open-0 discarded with 1 of 2 chunks read" in m for m in dropped)
    assert len(decoded[-1].messages) == 1  # a later message still joins
    assert len(assembler.pending) < 60


@given(
    count=st.integers(0, 600),
    key=st.text(min_size=0, max_size=8),
    hexdump=st.booleans(),
)
@settings(max_examples=25, deadline=None)
def test_streamed_messages_write_the_same_json(count: int, key: str, hexdump: bool) -> None:
    from pulsarctl_py import render

    records = [
        (api.SingleMessageMetadata(partition_key=f"{key}{i}\n", sequence_id=i), b"v%d" % i)
        for i in range(count)
    ]
    md = api.MessageMetadata(
        producer_name="p", sequence_id=1, publish_time=1, num_messages_in_batch=count
    )
    entry = decode_entry(build_entry(md, build_batch(records)))

    def written(doc: Any, how: str, no_floats: bool) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            if how == "json":
                render.write_json_stream("entries", [doc], lambda: {"n": 1}, no_floats)
            elif how == "list":
                render.write_json_list([doc], no_floats)
            elif how == "jsonl":
                render.write_jsonl([doc], no_floats)
            else:
                lines = render.JsonlOut(no_floats)
                lines.obj(doc)
                lines.close()
        return out.getvalue()

    for how in ("json", "list", "jsonl", "out"):
        for no_floats in (False, True):
            assert written(render.entry_doc(entry, hexdump), how, no_floats) == written(
                entry.to_json(hexdump), how, no_floats
            )


def test_write_json_list_is_write_json() -> None:
    from pulsarctl_py import render

    for items in ([], [1], [{"a": [1, {"b": "x\ny"}]}, "é"], [[], {}]):
        a, b = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(a):
            render.write_json(items)
        with contextlib.redirect_stdout(b):
            render.write_json_list(items)
        assert a.getvalue() == b.getvalue()


def test_trees_and_tables_show_the_first_thousand_messages() -> None:
    from rich.console import Console

    from pulsarctl_py import render

    records = [(api.SingleMessageMetadata(partition_key=f"k{i}"), b"v") for i in range(1500)]
    md = api.MessageMetadata(
        producer_name="p", sequence_id=1, publish_time=1, num_messages_in_batch=1500
    )
    entry = decode_entry(build_entry(md, build_batch(records)))
    console = Console(file=io.StringIO(), width=200)
    console.print(render.entry_tree(entry, "e"))
    console.print(render.messages_table([("e", entry)]))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert text.count("... and 500 more messages (-o json or jsonl lists them all)") == 2
    assert "k999" in text and "k1000" not in text


# -- bookie frames and live reads -------------------------------------------------------------


def test_a_frame_over_the_cap_is_refused_from_its_length() -> None:
    from pulsarctl_py.stores.live.client import BookieConnection, BookieUnavailable, ClientOptions
    from tests.support.live_bookie import HUGE_FRAME, TestBookie
    from tests.support.live_world import LIVE_DATA

    with TestBookie(LIVE_DATA, mode="huge-frame", record=False) as bookie:
        conn = BookieConnection(bookie.address, ClientOptions(timeout=5))
        started = time.monotonic()
        with pytest.raises(BookieUnavailable) as caught:
            conn.read_entry(0, 0)
        conn.close()
    assert time.monotonic() - started < 2  # from the 4-byte length, not after 5 s
    assert f"sent a frame of {HUGE_FRAME} bytes, over the limit of 5253120" in str(caught.value)
    # a raised limit lets the same frame be read (here: until the bookie stops sending)
    dlimits.set_max_message_size(HUGE_FRAME)
    with TestBookie(LIVE_DATA, mode="huge-frame", record=False) as bookie:
        conn = BookieConnection(bookie.address, ClientOptions(timeout=0.5))
        with pytest.raises(BookieUnavailable) as caught:
            conn.read_entry(0, 0)
        conn.close()
    assert "no answer within" in str(caught.value)


def test_live_reads_hold_a_budget_of_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers of 100 KiB and a budget of 1 MiB: many rounds, bookies stopped at their
    share; every entry still comes once, in order, with its bytes."""
    from pulsarctl_py.stores.bookie import open_bookie
    from pulsarctl_py.stores.live import store as live_store
    from pulsarctl_py.stores.live.client import ClientOptions
    from pulsarctl_py.stores.metadata import open_metadata_store
    from tests.support.live_bookie import TestBookie
    from tests.support.live_world import LIVE_DATA, replicated_metadata

    monkeypatch.setattr(live_store, "READ_BUDGET", 1 << 20)
    dlimits.set_max_message_size(128 * 1024)  # frames of 138 KiB
    ids = ["b1:3181", "b2:3181"]
    url = replicated_metadata(tmp_path / "md", ids, 2, 2)
    shares: list[int] = []
    real = live_store.LiveBookieStore._read_from

    def spy(self: Any, *args: Any) -> None:
        shares.append(args[-2])
        real(self, *args)

    monkeypatch.setattr(live_store.LiveBookieStore, "_read_from", spy)
    pad = 100 * 1024
    with (
        TestBookie(LIVE_DATA, pad_to=pad, record=False) as b1,
        TestBookie(LIVE_DATA, pad_to=pad, record=False) as b2,
        open_bookie([LIVE_DATA]) as offline,
        open_metadata_store(url) as metadata,
    ):
        options = ClientOptions(addresses=((ids[0], b1.address), (ids[1], b2.address)))
        with live_store.LiveBookieStore(metadata, options) as store:
            got = list(store.read_entries(0))
        want = list(offline.read_entries(0))
    assert [g.entry_id for g in got] == [w.entry_id for w in want] == list(range(40))
    for g, w in zip(got, want, strict=True):
        assert g.data == w.data + bytes(max(0, pad - len(w.data)))
    # many rounds, each bookie's share of the 1 MiB budget at least one frame
    assert len(shares) > 10 and all(138 * 1024 <= share <= 1 << 20 for share in shares)


# -- listings ---------------------------------------------------------------------------------


def test_topic_list_keeps_its_order_and_groups(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, clean_env: None
) -> None:
    """The rows come in the order of full topic names, as when they were sorted whole."""
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
    from pulsarctl_py.stores.metadata import create_metadata_store

    names = [
        *(f"persistent://a/ns/x-partition-{i}" for i in (0, 1, 2, 10, 11)),
        "persistent://a/ns/x-a",
        "persistent://a/ns/x.b",
        "persistent://a/ns/t with space",
        "persistent://a/ns/über",
        "persistent://a/ns/%weird",
        "persistent://a-b/ns/t",
        "persistent://a/ns2/t",
        "persistent://a/ns/y-partition-3",
        "non-persistent://a/ns/t",
        "persistent://a/cluster/ns/t",
        "persistent://b/ns/t-partition-0",
    ]
    with create_metadata_store(tmp_path / "md") as store:
        for name in names:
            store.put(mld.TopicName.parse(name).ml_path, mld.build_info(mlpb.ManagedLedgerInfo()))
    result = run(
        capsys, "topic", "list", "-o", "json", "--metadata-url", f"rocksdb://{tmp_path}/md"
    )
    assert result.code == 0, result.err
    rows = result.json()
    bases = {}
    for name in names:
        t = mld.TopicName.parse(name)
        part = t.partition_index
        bases.setdefault(t.partitioned_topic.full_name if part >= 0 else t.full_name, []).append(
            part
        )
    assert [r["topic"] for r in rows] == sorted(bases)
    group = next(r for r in rows if r["topic"] == "persistent://a/ns/x")
    assert [p["partition"] for p in group["partitions"]] == [0, 1, 2, 10, 11]
    assert result.out == json.dumps(rows, indent=2, ensure_ascii=False) + "\n"


# -- the adversarial corpus: peak RSS of every command on every bomb ----------------------------


@pytest.fixture(scope="module")
def corpus_world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bombs.Stores, Path]:
    """One topic holding every bomb of the corpus, in corpus order; and the entries as
    files for decode (without the chunks that never finish: 1,200 files)."""
    root = tmp_path_factory.mktemp("corpus")
    parts = bombs.corpus()
    stores = bombs.topic_world(root / "w", [e for _, es in parts for e in es])
    files = root / "in"
    files.mkdir()
    for name, entries in parts:
        if name != "chunks-never-finished":
            for i, data in enumerate(entries):
                (files / f"{len(list(files.iterdir())):04d}-{name}-{i}.bin").write_bytes(data)
    return root, stores, files


def _one_line_errors(err: str) -> None:
    assert "Traceback" not in err, err[-3000:]
    for line in err.splitlines():
        if "ledgerctl: error:" in line:
            assert line.startswith("ledgerctl: error: "), line


def _bomb_positions() -> dict[int, str]:
    """Entry id -> the bomb it belongs to, in a corpus world."""
    out, at = {}, 0
    for name, entries in bombs.corpus():
        for _ in entries:
            out[at] = name
            at += 1
    return out


CORPUS_COMMANDS = {
    "inspect-jsonl": (["inspect", "--topic", bombs.TOPIC, "-o", "jsonl"], {1}),
    "inspect-json": (["inspect", "--topic", bombs.TOPIC, "-o", "json"], {1}),
    "inspect-table": (["inspect", "--topic", bombs.TOPIC, "-o", "table"], {1}),
    "export-parquet": (["export", bombs.TOPIC, "--to", "{out}/e.parquet"], {0, 1}),
    "export-jsonl": (["export", bombs.TOPIC, "--to", "{out}/e.jsonl"], {0, 1}),
    "compact-export-parquet": (["compact", bombs.TOPIC, "--export", "{out}/c.parquet"], {0, 1, 2}),
    "compact-export-jsonl": (["compact", bombs.TOPIC, "--export", "{out}/c.jsonl"], {0, 1, 2}),
    "verify": (["verify", bombs.TOPIC, "-o", "json"], {0, 1}),
    "seek": (["seek", bombs.TOPIC, "--time", "2026-01-01T00:00:00Z"], {0, 1}),
    # --accept-damage: the bombs are copied as stored and listed (exit 1), so the new
    # ledgers are written and the write path's memory is measured too (last: the other
    # commands read the world as it was built)
    "migrate-index": (
        ["migrate", "index", bombs.TOPIC, "--plan", "{out}/mi.json", "--accept-damage"],
        {1},
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("command", [*CORPUS_COMMANDS, "decode-jsonl"])
def test_every_command_on_every_bomb_stays_under_300_mb(
    command: str, corpus_world: tuple[Path, bombs.Stores, Path], tmp_path: Path
) -> None:
    _, stores, files = corpus_world
    out = tmp_path / "stdout"
    if command == "decode-jsonl":
        args, codes = ["decode", "-o", "jsonl", *sorted(map(str, files.iterdir()))], {1}
    else:
        template, codes = CORPUS_COMMANDS[command]
        args = [a.replace("{out}", str(tmp_path)) for a in template] + stores.flags()
    measured = run_peak(*args, stdout_to=out, timeout=300)
    _one_line_errors(measured.err)
    assert measured.code in codes, (command, measured.code, measured.err[-2000:])
    assert measured.peak < PEAK_GOAL, f"{command}: peak RSS {measured.peak_mib} MiB"
    if command == "inspect-jsonl":
        said: dict[str, list[str]] = {}
        names = _bomb_positions()
        with open(out, encoding="utf-8") as lines:
            for line in lines:
                doc = json.loads(line)
                if doc.get("entry_id") is not None:
                    said.setdefault(names[doc["entry_id"]], []).extend(
                        p["message"] for p in doc["problems"]
                    )
        for bomb, text in REFUSED.items():
            assert any(text in m for m in said[bomb]), (bomb, said[bomb][:3])
    if command == "export-jsonl":
        rows = errors = 0
        with open(tmp_path / "e.jsonl", encoding="utf-8") as lines:
            for line in lines:
                row = json.loads(line)
                rows += 1
                errors += any(HINT in p for p in row["problems"])
        assert rows > 200_000 and errors >= 6
    for name in ("e.jsonl", "c.jsonl", "e.parquet", "c.parquet"):
        (tmp_path / name).unlink(missing_ok=True)
    out.unlink()


@pytest.mark.slow
@pytest.mark.parametrize("bomb", ["zstd-declared", "zlib-lying", "batch-most-records"])
def test_compaction_and_migration_of_a_compacted_ledger_holding_a_bomb(
    bomb: str, tmp_path: Path
) -> None:
    from tests.support import verify_world

    stores = bombs.bomb_world(tmp_path / "w", bombs.ENTRY_BOMBS[bomb]())
    for args in (
        ["compact", verify_world.ORDERS, "--export", str(tmp_path / "c.parquet")],
        ["migrate", "compacted", verify_world.ORDERS, "--format", "pip-429", "-o", "json"],
        ["migrate", "index", verify_world.PLAIN, "-o", "json"],
    ):
        measured = run_peak(*args, *stores.flags())
        _one_line_errors(measured.err)
        assert measured.code in (0, 1, 2), (args, measured.err[-2000:])
        assert measured.peak < PEAK_GOAL, f"{args[:2]}: peak RSS {measured.peak_mib} MiB"


@pytest.fixture(scope="module")
def five_bookies_url(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    from tests.support.live_world import replicated_metadata

    ids = [f"b{i}:3181" for i in range(1, 6)]
    return replicated_metadata(tmp_path_factory.mktemp("five") / "md", ids, 5, 3), ids


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["huge-frame", "frames-at-the-cap"])
def test_five_bookies_sending_large_frames(
    kind: str, five_bookies_url: tuple[str, list[str]]
) -> None:
    """`ledger replicas` reached 955 MB when five bookies each sent a 64 MiB frame."""
    from tests.support.live_bookie import TestBookie
    from tests.support.live_world import LIVE_DATA

    url, ids = five_bookies_url
    options = {"mode": "huge-frame"} if kind == "huge-frame" else {"pad_to": LIMIT}
    bookies = [TestBookie(LIVE_DATA, record=False, **options) for _ in ids]  # type: ignore[arg-type]
    try:
        addresses = [
            arg
            for i, b in zip(ids, bookies, strict=True)
            for arg in ("--bookie-address", f"{i}={b.address}")
        ]
        for args in (["ledger", "replicas", "0", "-o", "json"], ["inspect", "0", "-o", "jsonl"]):
            measured = run_peak(*args, "--metadata-url", url, *addresses, timeout=300)
            _one_line_errors(measured.err)
            assert measured.peak < PEAK_GOAL, f"{args[:2]}: peak RSS {measured.peak_mib} MiB"
            if kind == "huge-frame":
                assert measured.code == 3, measured.err
                line = measured.err.strip().splitlines()[-1]
                assert line.startswith("ledgerctl: error: ")
                assert "sent a frame of 67108864 bytes, over the limit of 5253120" in line
            else:  # every padded copy fails its digest: findings, not a failure
                assert measured.code == 1, measured.err[-2000:]
    finally:
        for b in bookies:
            b.close()


@pytest.mark.slow
def test_listings_of_100000_topics_stay_under_300_mb(tmp_path: Path) -> None:
    """`topic list` reached 326 MB and `ledger list` 455 MB with 10^5 topics (-o json)."""
    topics = 100_000
    stores = bombs.many_topics_world(tmp_path / "w", topics)
    first = {
        "topic": f'    "topic": "persistent://{bombs.MANY_NAMESPACE}/t-000000",',
        "ledger": '    "ledger_id": 1000,',
    }
    for what in ("topic", "ledger"):
        out = tmp_path / "out"
        measured = run_peak(
            what, "list", "-o", "json", "--metadata-url", stores.metadata_url,
            stdout_to=out, timeout=600,
        )  # fmt: skip
        assert measured.code == 0, measured.err[-2000:]
        assert measured.peak < PEAK_GOAL, f"{what} list: peak RSS {measured.peak_mib} MiB"
        with open(out, encoding="utf-8") as lines:
            assert next(lines) == "[\n" and next(lines) == "  {\n"
            assert next(lines).rstrip("\n") == first[what]
            rows = 1 + sum(1 for line in lines if line == "  {\n")
        assert rows == topics
        out.unlink()
