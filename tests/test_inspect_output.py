"""`inspect`'s output built the fast way is the output of the general way, byte for byte.

The per-entry JSON is built directly for the layer shapes entries have (plain values,
lists of them, flat text maps), and written by orjson; the table view joins its lines
from plain strings instead of a Rich layout per line. The references here are the
general paths: every field through ``json_value``, ``json.dumps`` with the standard
library, and Rich printing the line's markup. They are compared on every corpus entry,
on damaged bytes, on Hypothesis-built entries, and on a damaged demo store.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import random
import types
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from pulsarctl_py import render
from pulsarctl_py.decoders import DecodeOptions, Entry, decode_entry
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.decoders.crypto import load_private_key
from pulsarctl_py.decoders.entry import Depth, Message, Outer
from pulsarctl_py.decoders.nodes import Layer, json_value
from pulsarctl_py.decoders.text import json_map, json_text
from pulsarctl_py.inspect import entry_json, inspect
from pulsarctl_py.inspect_request import InspectRequest, Summary
from pulsarctl_py.ledgers import LedgerSource
from pulsarctl_py.stores.bookie import open_bookie
from tests.decoders.test_fuzz import MUTATIONS, mutate
from tests.decoders.test_text import NOT_UTF8, batched_entry, single_entry
from tests.support.cli_helpers import DATA, KEYS, REAL_CLIENT, run
from tests.support.demo_env import demo, demo_root, isolate
from tests.support.fuzz_targets import CRASHES
from tests.support.strategies import EntrySpec, entry_specs

DEMO_ENTRIES = Path(__file__).parent.parent / "pulsarctl_py" / "demo" / "entries"
BOOKKEEPER = DATA / "bookkeeper" / "offline" / "digest"
CORPUS = sorted(
    [
        *REAL_CLIENT.glob("*/*.bin"),
        *DEMO_ENTRIES.glob("*/*.bin"),
        *BOOKKEEPER.glob("*/*.entry"),
        *(DATA / "upstream" / "pulsar-client-go").glob("*.bin"),
        *CRASHES.glob("entry-*.bin"),
    ]
)
#: the shared demo fixtures this module's tests use
FIXTURES = (demo, demo_root)
PRIVATE_KEY = load_private_key((KEYS / "rsa_private.pem").read_bytes())


# -- the references: the general paths -----------------------------------------------------


def reference_layer(layer: Layer, with_hex: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"layer": layer.name, "offset": layer.offset, "length": layer.length}
    if layer.space != "entry":
        out["space"] = layer.space
    if layer.fields:
        notes: list[dict[str, Any]] = []
        out["fields"] = {k: json_value(v, k, notes) for k, v in layer.fields.items()}
        if notes:
            out["not_utf8"] = notes
    if layer.check is not None:
        out["check"] = layer.check.to_json()
    if layer.reason is not None:
        out["reason"] = layer.reason
    if with_hex:
        out["hex"] = bytes(layer.raw).hex()
    return out


def reference_message(m: Message) -> dict[str, Any]:
    notes: list[dict[str, Any]] = []
    out: dict[str, Any] = {
        "message_id": m.message_id,
        "key": json_text(m.key, "key", notes),
        "value": None if m.value is None else base64.b64encode(m.value).decode("ascii"),
        "size": 0 if m.value is None else len(m.value),
        "properties": json_map(m.properties, "properties", notes) if m.properties else {},
        "batch_index": m.batch_index,
        "null_value": m.null_value,
        "event_time": m.event_time,
        "sequence_id": m.sequence_id,
        "publish_time": m.publish_time,
    }
    if m.key_b64_encoded:
        out["key_b64_encoded"] = True
    if m.ordering_key is not None:
        out["ordering_key"] = base64.b64encode(m.ordering_key).decode("ascii")
    if m.index is not None:
        out["index"] = m.index
    if m.chunks is not None:
        out["chunks"] = m.chunks
    if notes:
        out["not_utf8"] = notes
    return out


def reference_json(view: Any, entry: Entry, with_hex: bool, with_hash: bool) -> dict[str, Any]:
    pos = entry.position
    doc: dict[str, Any] = {
        "position": f"{pos[0]}:{pos[1]}" if pos else None,
        "ledger_id": pos[0] if pos else None,
        "entry_id": pos[1] if pos else None,
        "size": len(entry.data),
        "ok": entry.ok,
        "verified": not entry.unverified,
        "encrypted": entry.encrypted,
        "layers": [reference_layer(layer, with_hex) for layer in entry.layers],
        "messages": [reference_message(m) for m in entry.messages],
        "problems": [p.to_json() for p in entry.problems],
    }
    first = entry.layers[0] if entry.layers else None
    bk = first if first is not None and first.name == "bookie-entry" else None
    doc["digest"] = bk.check.to_json() if bk is not None and bk.check is not None else None
    if bk is not None and with_hash:
        doc["payload_sha256"] = hashlib.sha256(entry.data[bk.offset + bk.length :]).hexdigest()
    lac = view.lac
    doc["confirmed"] = None if lac is None or doc["entry_id"] is None else doc["entry_id"] <= lac
    doc["ledger_kind"] = view.kind
    return doc


def reference_line(entry: Entry, label: str, lac: int | None, console: Console) -> str:
    """What Rich prints for the line's markup (emoji codes off: keys are data)."""
    with console.capture() as capture:
        console.print(render.entry_line(entry, label, lac), emoji=False)
    return capture.get()


VIEW = types.SimpleNamespace(lac=3, kind="topic")
STDLIB_LINE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def assert_same_output(view: Any, entry: Entry) -> None:
    """entry_json, written every way inspect writes it, is the reference's text."""
    line = render.jsonl_encoder(no_floats=True)
    for with_hex in (False, True):
        for with_hash in (False, True):
            want = reference_json(view, entry, with_hex, with_hash)
            got = entry_json(view, entry, with_hex, with_hash)
            text = STDLIB_LINE(want)
            assert line(got) == text
            assert render.jsonl_encoder()(got) == text
            indented = json.dumps(want, indent=2, ensure_ascii=False)
            assert render.indented_encoder(no_floats=True)(got) == indented
            assert json.dumps(got, indent=2, ensure_ascii=False) == indented
    label = "in" if entry.position is None else f"{entry.position[0]}:{entry.position[1]}"
    for kind in CONSOLES:
        assert fast_line(kind, entry, label, view.lac) == reference_line(
            entry, label, view.lac, console(kind)
        )


def console(kind: str, file: io.StringIO | None = None) -> Console:
    """A console as stdout_console makes it: piped (plain, unwrapped) or a colour terminal."""
    out = io.StringIO() if file is None else file
    if kind == "piped":
        return Console(file=out, width=10_000, soft_wrap=True, highlight=False)
    return Console(file=out, width=10_000, force_terminal=True, color_system=kind, highlight=False)


CONSOLES = ("piped", "standard", "truecolor")


def fast_line(kind: str, entry: Entry, label: str, lac: int | None) -> str:
    out = io.StringIO()
    render.EntryLines(console(kind, out))(entry, label, lac)
    return out.getvalue()


def options_for(path: Path) -> list[DecodeOptions]:
    key = PRIVATE_KEY if "encrypted" in str(path) else None
    return [DecodeOptions(depth=depth, private_key=key) for depth in Depth] + [
        DecodeOptions(verify=False),
        DecodeOptions(outer=Outer.PULSAR_ENTRY),
    ]


# -- the corpus, whole and damaged ----------------------------------------------------------


def test_the_corpus_is_there() -> None:
    assert len([p for p in CORPUS if p.parent.parent == REAL_CLIENT]) == 47
    assert any(p.suffix == ".entry" for p in CORPUS)
    assert any(p.parent == CRASHES for p in CORPUS)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_corpus_entries_print_as_the_general_path(path: Path) -> None:
    data = path.read_bytes()
    for options in options_for(path):
        for position in (None, (1, 0), (7, 9)):
            assert_same_output(VIEW, decode_entry(data, options, position))


@pytest.mark.parametrize("path", CORPUS[::3], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_damaged_corpus_entries_print_as_the_general_path(path: Path) -> None:
    data = path.read_bytes()
    rng = random.Random(path.name)
    for _ in range(12):
        ops = [
            (
                rng.choice(["flip", "cut", "insert", "delete", "huge-u32", "zero-u32"]),
                rng.randrange(len(data) + 1),
                rng.randbytes(rng.randint(1, 8)),
            )
            for _ in range(rng.randint(1, 3))
        ]
        damaged = mutate(data, ops)
        for options in options_for(path)[:3]:
            assert_same_output(VIEW, decode_entry(damaged, options, (2, 5)))


def test_text_that_is_not_utf8_prints_as_the_general_path() -> None:
    entries = [
        single_entry(b"k\xff", [(b"p\xfe", b"ok"), (b"ok", b"v\xc3")]),
        batched_entry([(b"\xffa", [(b"x", b"\xfe")]), (None, []), (b"plain", [(b"\xc3", b"y")])]),
    ]
    for data in entries:
        entry = decode_entry(data, DecodeOptions(), (5, 6))
        assert "not_utf8" in json.dumps(entry_json(VIEW, entry))
        assert_same_output(VIEW, entry)


# -- Hypothesis-built entries ---------------------------------------------------------------


def spec_options(spec: EntrySpec, with_key: bool) -> DecodeOptions:
    bookie = spec.bookie
    return DecodeOptions(
        digest_type=bookie.digest if bookie is not None else None,
        password=bookie.password if bookie is not None else None,
        private_key=PRIVATE_KEY if with_key else None,
    )


@settings(max_examples=150, deadline=None)
@given(spec=entry_specs(), with_key=st.booleans(), lac=st.none() | st.integers(-1, 5))
def test_built_entries_print_as_the_general_path(
    spec: EntrySpec, with_key: bool, lac: int | None
) -> None:
    entry = decode_entry(spec.build(), spec_options(spec, with_key))
    assert_same_output(types.SimpleNamespace(lac=lac, kind="topic"), entry)


@settings(max_examples=100, deadline=None)
@given(spec=entry_specs(), ops=MUTATIONS)
def test_damaged_built_entries_print_as_the_general_path(
    spec: EntrySpec, ops: list[tuple[str, int, bytes]]
) -> None:
    entry = decode_entry(mutate(spec.build(), ops), spec_options(spec, False), (4, 2))
    assert_same_output(VIEW, entry)


@settings(max_examples=60, deadline=None)
@given(key=NOT_UTF8, prop=NOT_UTF8, text=st.text(max_size=12))
def test_any_text_prints_as_the_general_path(key: bytes, prop: bytes, text: str) -> None:
    data = batched_entry([(key, [(prop, text.encode())]), (text.encode(), [(b"k", prop)])])
    assert_same_output(VIEW, decode_entry(data, DecodeOptions(), (5, 6)))


# -- the writers ----------------------------------------------------------------------------


def test_entry_lines_are_written_by_orjson_when_it_is_installed() -> None:
    pytest.importorskip("orjson")
    assert render.jsonl_encoder(no_floats=True) is not render.jsonl_encoder()


def test_what_orjson_refuses_is_written_by_the_standard_library() -> None:
    doc = {"big": 2**70, "text": "a\u2028b\x00", "nested": [{"k": -(2**63)}]}
    want = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    assert render.jsonl_encoder(no_floats=True)(doc) == want


JSONL_DOCS: list[Any] = [
    {"position": "7:0", "text": "caf\u00e9 \u2028 \U0001f600", "n": [1, -(2**63)]},
    {"big": 2**70, "null": None, "ok": True},  # orjson refuses the int: json writes it
]
JSONL_TEXT = '{"made":"line \u00e9"}\n'
JSONL_LINES = 3000  # several batches of render.JsonlOut.BATCH bytes


def _jsonl_out(stdout: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdout", stdout)
    out = render.JsonlOut(no_floats=True)
    try:
        for i in range(JSONL_LINES):
            if i % 3 == 2:
                out.text(JSONL_TEXT)
            else:
                out.obj(JSONL_DOCS[i % 3])
    finally:
        out.close()


def _jsonl_want() -> str:
    return "".join(
        JSONL_TEXT
        if i % 3 == 2
        else json.dumps(JSONL_DOCS[i % 3], ensure_ascii=False, separators=(",", ":")) + "\n"
        for i in range(JSONL_LINES)
    )


@pytest.mark.parametrize(
    ("encoding", "errors"),
    [("utf-8", "strict"), ("UTF8", "surrogateescape"), ("latin-1", "replace")],
)
def test_jsonl_out_writes_the_bytes_stdout_write_would(
    encoding: str, errors: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes straight to the buffer of a UTF-8 stdout, the text layer for any other
    encoding: what ``sys.stdout.write`` of each line would have written, in order."""
    raw = io.BytesIO()
    stdout = io.TextIOWrapper(raw, encoding=encoding, errors=errors, newline="\n")
    stdout.write("before\n")  # held by the text layer: written first
    _jsonl_out(stdout, monkeypatch)
    stdout.flush()
    assert len(_jsonl_want()) > 2 * render.JsonlOut.BATCH
    assert raw.getvalue() == ("before\n" + _jsonl_want()).encode(encoding, errors)


def test_jsonl_out_on_a_stdout_without_a_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = io.StringIO()
    _jsonl_out(stdout, monkeypatch)
    assert stdout.getvalue() == _jsonl_want()


def test_json_document_streamed_is_the_whole_document_with_line_breaks_in_text_kept(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Text may hold U+2028, U+2029 and U+0085 as they are: they stay inside their string."""
    items = [{"key": "a\u2028b", "n": 1, "nested": [{"p": "c\x85d"}]}, {"e": [], "f": {}}]
    tail = {"summary": {"message": "x\u2029y", "count": 2}}
    for no_floats in (False, True):
        capsys.readouterr()
        render.write_json_stream("entries", iter(items), lambda: tail, no_floats=no_floats)
        streamed = capsys.readouterr().out
        render.write_json({"entries": items, **tail})
        assert streamed == capsys.readouterr().out
        assert json.loads(streamed) == {"entries": items, **tail}


def old_iso_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


@settings(max_examples=2000, deadline=None)
@given(ms=st.integers(1, (1000 << 32) + 5000) | st.integers(1, 2_000_000_000_000))
def test_iso_ms_by_the_second_is_the_float_path(ms: int) -> None:
    """iso_ms keeps the text of the last second: the same text as the float path."""
    assert render.iso_ms(ms) == old_iso_ms(ms)
    assert render.iso_ms(ms - 1) == old_iso_ms(ms - 1) if ms > 1 else True


def test_iso_ms_at_the_edges() -> None:
    for ms in (1, 999, 1000, 1001, 1_717_200_000_999, (1000 << 32) - 1, 1000 << 32):
        assert render.iso_ms(ms) == old_iso_ms(ms)
    assert render.iso_ms(0) == render.iso_ms(None) == "-"
    assert render.iso_ms(-1) == old_iso_ms(-1)
    assert render.iso_ms(10**20).endswith("(out of range)")


def test_table_line_shows_emoji_codes_and_markup_in_keys_as_they_are() -> None:
    data = batched_entry([(b":thumbs_up: [red]k[/]", [])])
    entry = decode_entry(data, DecodeOptions(), (5, 6))
    line = fast_line("piped", entry, "5:6", None)
    assert line.endswith("  1 msg keys :thumbs_up: [red]k[/]\n")
    assert line == reference_line(entry, "5:6", None, console("piped"))


def test_table_line_with_a_control_character_is_left_to_rich() -> None:
    data = batched_entry([(b"tab\there", []), (b"bell\x07", [])])
    entry = decode_entry(data, DecodeOptions(), (5, 6))
    line = fast_line("piped", entry, "5:6", None)
    assert "\t" not in line and "\x07" not in line  # Rich expands tabs, drops the bell
    assert "bell" in line and line == reference_line(entry, "5:6", None, console("piped"))


def test_table_line_of_a_known_entry() -> None:
    """The expected line, written out: the look of the table view."""
    data = (REAL_CLIENT / "batched-none" / "000000.bin").read_bytes()
    entry = decode_entry(data, DecodeOptions(), (3, 0))
    key = entry.messages[0].key
    time = render.iso_ms(entry.publish_time)
    count = len(entry.messages)
    line = fast_line("standard", entry, "3:0", 0)
    keys = sorted({m.key for m in entry.messages if m.key is not None})
    shown = ", ".join(keys[:3]) + ("…" if len(keys) > 3 else "")
    assert key is not None
    assert line == (
        f"\x1b[1m3:0\x1b[0m  {len(data):>7}B  digest \x1b[2m-\x1b[0m  crc \x1b[32m✓\x1b[0m  "
        f"{time}  {count} msg keys {shown}\n"
    )


# -- inspect over stores ----------------------------------------------------------------------


def test_inspect_over_a_damaged_demo_store_prints_as_the_general_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pulsarctl_py.demo import create_demo

    isolate(monkeypatch, tmp_path)
    root = tmp_path / "demo"
    create_demo(root)
    logs = sorted((root / "bookkeeper" / "current").glob("*.log"))  # the entry logs
    assert logs
    rng = random.Random(13)
    for log in logs:
        raw = bytearray(log.read_bytes())
        for _ in range(6):  # entry bodies, digests, ids, sizes: whatever the bytes hold
            raw[rng.randrange(1024, len(raw))] ^= 1 << rng.randrange(8)
        log.write_bytes(bytes(raw))
    with open_bookie(root / "bookkeeper") as store:
        ledger_ids = list(store.ledgers())
    seen = damaged = 0
    with LedgerSource.open(None, [root / "bookkeeper"], None, need_bookie=True) as source:
        for ledger_id in ledger_ids:
            for view, entry in inspect(source, InspectRequest(ledger_id=ledger_id), Summary()):
                assert_same_output(view, entry)
                seen += 1
                damaged += not entry.ok
    assert seen > 20 and damaged > 0


def test_payload_sha256_only_with_hash(capsys: pytest.CaptureFixture[str], demo: Path) -> None:
    plain = run(capsys, "inspect", "--topic", "plain", "-o", "jsonl")
    hashed = run(capsys, "inspect", "--topic", "plain", "-o", "jsonl", "--hash")
    assert plain.code == hashed.code == 0, plain.err + hashed.err
    lines = [json.loads(line) for line in plain.out.splitlines()]
    with_hash = [json.loads(line) for line in hashed.out.splitlines()]
    assert lines and all("payload_sha256" not in doc for doc in lines)
    with LedgerSource.open(None, [demo / "bookkeeper"], None, need_bookie=True) as source:
        for doc, hashed_doc in zip(lines, with_hash, strict=True):
            sha = hashed_doc.pop("payload_sha256")
            assert hashed_doc == doc
            view = source.ledger(doc["ledger_id"])
            (stored,) = source.raw_entries(view, doc["entry_id"], doc["entry_id"])
            bk = doc["layers"][0]
            assert bk["layer"] == "bookie-entry"
            assert sha == hashlib.sha256(bytes(stored.data)[bk["length"] :]).hexdigest()


def test_table_output_is_rich_s_line_for_every_demo_entry(
    capsys: pytest.CaptureFixture[str], demo: Path
) -> None:
    result = run(capsys, "inspect", "--topic", "batched", "-o", "table", "-q")
    assert result.code == 0, result.err
    want = []
    request = InspectRequest(topic="batched")
    with LedgerSource.open("rocksdb://metadata", ["bookkeeper"], None, need_bookie=True) as src:
        for view, entry in inspect(src, request, Summary()):
            label = f"{view.ledger_id}:{entry.position[1] if entry.position else '?'}"
            want.append(reference_line(entry, label, view.lac, console("piped")))
    assert len(want) > 3 and result.out == "".join(want)


def test_digest_types_of_the_bookkeeper_corpus_are_all_there() -> None:
    assert {p.parent.name for p in CORPUS if p.suffix == ".entry"} == {
        kind.name for kind in DigestType
    }
