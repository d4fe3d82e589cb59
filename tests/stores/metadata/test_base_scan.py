"""`topic list` from one ordered scan of each folder equals the listing read topic by topic.

The scan (``MetadataStore.scan_children``) reads a folder's topic znodes and their cursors in
the store's key order; the listing's order is the topics' names (partitions by number).
These tests build stores of odd topics (percent-encoded and unicode names, partitions past
9, topics with no cursor and with many, damaged values, stale ephemeral nodes, znode names
that are not the canonical encoding of their topic's) and check that the rows, and the error
a damaged znode raises, are those of the per-topic path: ``read_managed_ledger`` for each
topic and its row made by ``topic info``'s own code (``_row(_topic_info(...))``).
"""

from __future__ import annotations

import io
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsarctl_py import render, topics
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders import metadata_record as rec
from pulsarctl_py.errors import LedgerctlError
from pulsarctl_py.ledgers import LedgerSource
from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb
from pulsarctl_py.stores.metadata import MetadataStore, create_metadata_store, open_metadata_store
from tests.support.cli_helpers import run

FOLDERS = ("public/default/persistent", "old/c1/ns/persistent")
#: local names, stored under their canonical encoding
LOCALS = (
    "t",
    "t-a",
    "t-partition-0",
    "t-partition-1",
    "t-partition-2",
    "t-partition-10",
    "t-partition-11",
    "t-partition-x",
    "a b",
    "ä",
    "日本語",
    "x%y",
    "a~b",
    "a/b",
    "A",
    "z-partition-3",
    "p-partition-0",
)
#: znode names that are not a canonical encoding ("a%41" is "aA", "%7a" is "z") or no
#: encoding at all ("%zz": not a topic's znode)
RAW_NAMES = ("a%41", "%7a", "%zz")
CURSORS = (
    *("sub", "s p", "ü", "pulsar.dedup", "__compaction", "a/b", "x-1", "x"),
    *(f"s{i}" for i in range(12)),
)
#: what a topic znode holds: closed ledgers, an open last ledger (its metadata absent),
#: no value, bytes that are not protobuf; RocksDB only: a damaged header, a stale
#: ephemeral node, no node at all (its cursors only)
KINDS = ("closed", "open", "empty", "garbage")
ROCKS_KINDS = ("header", "stale", "absent")


def _info(kind: str, seed: int) -> bytes:
    if kind == "empty":
        return b""
    if kind == "garbage":
        return b"\xff\xff\xff\x07garbage"
    info = mlpb.ManagedLedgerInfo()
    for i in range(seed % 3 + 1):
        info.ledgerInfo.add(ledgerId=100 * seed + i, entries=5 + i, size=500 + i, timestamp=1)
    if kind == "open":
        info.ledgerInfo.add(ledgerId=100 * seed + 50)  # no timestamp, no entries: open
    return mld.build_info(info)


def _cursor(ledger: int) -> bytes:
    return mld.build_info(
        mlpb.ManagedCursorInfo(
            cursorsLedgerId=-1, markDeleteLedgerId=ledger, markDeleteEntryId=ledger % 7
        )
    )


def _value(data: bytes, *, ephemeral: bool = False, owner: int = 0) -> bytes:
    return rec.build(rec.MetaValue(0, owner, 1, 1, ephemeral, data))


Spec = tuple[str, str, str, tuple[str, ...]]  # folder, znode name, kind, cursors


def _write(store: MetadataStore, specs: list[Spec], rocks: bool) -> None:
    store.put("/ledgers/LAYOUT", b"", -1)  # BookKeeper's root, so open ledgers are looked up
    for n, (folder, znode, kind, cursors) in enumerate(specs):
        path = f"/managed-ledgers/{folder}/{znode}"
        if kind == "header":
            store.put_raw(rec.path_key(path), b"\x00\x00\x00\x29short")  # type: ignore[attr-defined]
        elif kind == "stale":
            value = _value(_info("closed", n), ephemeral=True, owner=12345)
            store.put_raw(rec.path_key(path), value)  # type: ignore[attr-defined]
        elif kind != "absent":
            store.put(path, _info(kind, n), -1)
        for i, sub in enumerate(sorted(cursors)):
            cursor_path = f"{path}/{mld.url_encode(sub)}"
            if rocks and i == 1 and len(cursors) > 3:  # a stale cursor among many
                value = _value(_cursor(i), ephemeral=True, owner=999)
                store.put_raw(rec.path_key(cursor_path), value)  # type: ignore[attr-defined]
            elif rocks and i == 2 and len(cursors) > 3 and kind == "garbage":
                # a cursor whose header is damaged: the listing stops on it, as before
                store.put_raw(rec.path_key(cursor_path), b"\x00\x00\x00\x05\x00")  # type: ignore[attr-defined]
            else:
                store.put(cursor_path, _cursor(i), -1)


def _listing(url: str) -> tuple[list[dict[str, Any]], str | None]:
    """The rows of ``iter_topics`` up to the error that stops it (and that error)."""
    rows: list[dict[str, Any]] = []
    with LedgerSource.open(url, [], need_metadata=True, metadata_only=True) as source:
        try:
            for row in topics.iter_topics(source):
                rows.append(row.to_json())
        except LedgerctlError as exc:
            return rows, f"{type(exc).__name__}: {exc}"
    return rows, None


def _row_by_topic_info(source: LedgerSource, record: Any) -> topics.TopicRow:
    return topics._row(topics._topic_info(source, record, read_cursor_ledgers=False))


@contextmanager
def per_topic() -> Iterator[None]:
    """The listing as it was made before the scan: each topic read alone, its row made by
    topic info's code."""
    with (
        mock.patch.object(topics._Lookahead, "take", lambda self, name: None),
        mock.patch.object(topics, "_list_row", _row_by_topic_info),
    ):
        yield


def _check_same(url: str) -> tuple[list[dict[str, Any]], str | None]:
    scanned = _listing(url)
    with per_topic():
        alone = _listing(url)
    assert scanned == alone
    with mock.patch.object(topics, "LOOKAHEAD", 1):  # groups dropped: read alone instead
        assert _listing(url) == alone
    return scanned


names = st.sampled_from([mld.url_encode(x) for x in LOCALS] + list(RAW_NAMES))
cursor_sets = st.one_of(
    st.just(()),
    st.tuples(st.sampled_from(CURSORS)),
    st.sets(st.sampled_from(CURSORS), min_size=2).map(tuple),
)


def _specs(kinds: tuple[str, ...]) -> st.SearchStrategy[list[Spec]]:
    spec = st.tuples(st.sampled_from(FOLDERS), names, st.sampled_from(kinds), cursor_sets)
    return st.lists(spec, max_size=14, unique_by=lambda s: (s[0], s[1]))


@pytest.fixture(autouse=True)
def _no_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("LEDGERCTL_METADATA_URL", "LEDGERCTL_BOOKIE_DIRS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(_specs(KINDS + ROCKS_KINDS))
def test_scan_listing_is_the_per_topic_listing_rocksdb(specs: list[Spec]) -> None:
    with tempfile.TemporaryDirectory(prefix="ledgerctl-topic-scan-") as tmp:
        path = Path(tmp) / "metadata"
        with create_metadata_store(path) as store:
            _write(store, specs, rocks=True)
        _check_same(f"rocksdb://{path}")


def _rich_specs() -> list[Spec]:
    """Every name, kind and cursor set of the pools at least once."""
    out: list[Spec] = []
    all_names = [mld.url_encode(x) for x in LOCALS] + list(RAW_NAMES)
    cursor_choices: list[tuple[str, ...]] = [(), ("sub",), CURSORS, ("s p", "ü", "a/b")]
    for i, znode in enumerate(all_names):
        kind = KINDS[i % len(KINDS)] if znode != "t-a" else "closed"
        out.append((FOLDERS[0], znode, kind, cursor_choices[i % len(cursor_choices)]))
        out.append((FOLDERS[1], znode, "closed", cursor_choices[(i + 1) % len(cursor_choices)]))
    return out


@pytest.mark.parametrize("damaged", [None, "header", "stale", "absent", "cursor"])
def test_rich_rocksdb_store(tmp_path: Path, damaged: str | None) -> None:
    specs = _rich_specs()
    if damaged is not None:  # one topic in the middle of the first folder
        folder, znode, _, cursors = specs[8]  # t-partition-2
        if damaged == "cursor":  # a cursor's header, among many
            specs[8] = (folder, znode, "garbage", CURSORS)
        else:
            specs[8] = (folder, znode, damaged, cursors)
    with create_metadata_store(tmp_path / "metadata") as store:
        _write(store, specs, rocks=True)
    rows, error = _check_same(f"rocksdb://{tmp_path / 'metadata'}")
    if damaged in ("header", "cursor"):  # as before: the listing stops on it, in one line
        assert error is not None and "metadata-record" in error
    else:
        assert error is None
        topics_seen = [r["topic"] for r in rows]
        assert topics_seen == sorted(topics_seen) and len(rows) > 20
        t = next(
            r for r in rows if r["topic"] == "persistent://public/default/t" and r["partitioned"]
        )
        gone = damaged in ("stale", "absent")  # partition 2: hidden as get() hides it
        want = [0, 1, 10, 11] if gone else [0, 1, 2, 10, 11]
        assert [p["partition"] for p in t["partitions"]] == want


def test_rich_zookeeper_store(scratch_zk: str) -> None:
    with open_metadata_store(scratch_zk, read_only=False) as store:
        _write(store, _rich_specs(), rocks=False)
    rows, error = _check_same(scratch_zk)
    assert error is None and len(rows) > 20
    garbage = [r for r in rows if any("undecodable" in p for p in r.get("problems", []))]
    assert garbage  # a value that is not protobuf is a finding in its row, as before


@pytest.mark.parametrize("output", ["jsonl", "json", "table"])
def test_cli_output_is_byte_identical(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, output: str
) -> None:
    with create_metadata_store(tmp_path / "metadata") as store:
        _write(store, _rich_specs(), rocks=True)
    args = ("topic", "list", "--metadata-url", f"rocksdb://{tmp_path / 'metadata'}", "-o", output)
    scanned = run(capsys, *args)
    with per_topic():
        alone = run(capsys, *args)
    assert scanned == alone
    assert scanned.code == 0 and scanned.out


def test_scan_children_matches_children_and_get(tmp_path: Path) -> None:
    """The store method itself: groups in children() order, each what get() reads."""
    with create_metadata_store(tmp_path / "metadata") as store:
        _write(store, _rich_specs(), rocks=True)
    with open_metadata_store(f"rocksdb://{tmp_path / 'metadata'}") as store:
        for folder in FOLDERS:
            parent = f"/managed-ledgers/{folder}"
            groups = list(store.scan_children(parent))
            expected = []
            for name in store.children(parent):
                node = store.get(f"{parent}/{name}")
                if node is None:
                    continue
                below = [
                    (sub, found)
                    for sub in store.children(f"{parent}/{name}")
                    if (found := store.get(f"{parent}/{name}/{sub}")) is not None
                ]
                expected.append((name, node, below))
            got = [(g.name, *g.nodes()) for g in groups]
            assert got == expected


def test_write_jsonl_same_text_on_a_terminal_and_a_pipe() -> None:
    """Lines joined into writes (a pipe) or written one by one (a terminal): the same text,
    with long lines and objects whose messages are streamed among them."""

    def rows() -> Iterator[dict[str, Any]]:
        for i in range(3000):
            if i % 211 == 5:
                yield {"a": i, "messages": render.Streamed({"m": m} for m in range(i % 7))}
            else:
                yield {"a": i, "s": "x" * (i % 50 if i % 97 else 20_000)}

    texts = []
    for line_buffering in (True, False):
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", line_buffering=line_buffering)
        with mock.patch.object(sys, "stdout", out):
            render.write_jsonl(rows(), no_floats=True)
        out.flush()
        texts.append(out.buffer.getvalue())  # type: ignore[attr-defined]
    assert texts[0] == texts[1]
    assert texts[0].count(b"\n") == 3000
    assert b'{"a":5,"messages":[{"m":0},{"m":1},{"m":2},{"m":3},{"m":4}]}\n' in texts[0]


def test_write_jsonl_writes_the_lines_before_an_error() -> None:
    def rows() -> Iterator[dict[str, int]]:
        yield {"a": 1}
        yield {"a": 2}
        raise LedgerctlError("stop")

    out = io.StringIO()
    with mock.patch.object(sys, "stdout", out), pytest.raises(LedgerctlError):
        render.write_jsonl(rows(), no_floats=True)
    assert out.getvalue() == '{"a":1}\n{"a":2}\n'
