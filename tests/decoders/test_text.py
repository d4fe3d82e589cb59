"""Text that is not UTF-8 (C++ and Go producers write such keys, properties and names):
every renderer shows it without a crash, JSON keeps it losslessly and names the field.

Entries are built at the protobuf byte level, as such a producer writes them: the Python
protobuf API refuses to set a string field to bytes that are not UTF-8.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py import render
from pulsarctl_py.decoders import DecodeOptions, decode_entry
from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders.payload import build_batch
from pulsarctl_py.decoders.pulsar import build_entry
from pulsarctl_py.decoders.text import RawText
from pulsarctl_py.proto import pulsar_api_pb2 as api
from tests.support.cli_helpers import run

#: bytes that are never UTF-8 (a lone continuation byte, an invalid lead, a cut sequence)
NOT_UTF8 = st.one_of(
    st.binary(max_size=12).map(lambda b: b"\xff" + b),
    st.binary(max_size=12).map(lambda b: b + b"\xc3"),
    st.binary(min_size=1, max_size=16).filter(lambda b: not _is_utf8(b)),
)
ANY_TEXT = st.one_of(NOT_UTF8, st.text(max_size=8).map(lambda t: t.encode()))


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _kv(key: bytes, value: bytes) -> bytes:
    return _field(1, key) + _field(2, value)


def raw_smm(key: bytes | None, props: list[tuple[bytes, bytes]]) -> Any:
    """A SingleMessageMetadata with these exact key and property bytes."""
    raw = b"".join(_field(1, _kv(k, v)) for k, v in props)
    if key is not None:
        raw += _field(2, key)
    raw += _varint(3 << 3) + _varint(0)  # payload_size, set again by build_batch
    smm = api.SingleMessageMetadata()
    smm.ParseFromString(raw)
    return smm


def raw_metadata(producer: bytes, key: bytes | None, props: list[tuple[bytes, bytes]]) -> Any:
    """MessageMetadata with these exact producer name, key and property bytes."""
    raw = _field(1, producer) + _varint(2 << 3) + _varint(7) + _varint(3 << 3) + _varint(1000)
    raw += b"".join(_field(4, _kv(k, v)) for k, v in props)
    if key is not None:
        raw += _field(6, key)
    md = api.MessageMetadata()
    md.ParseFromString(raw)
    return md


def batched_entry(messages: list[tuple[bytes | None, list[tuple[bytes, bytes]]]]) -> bytes:
    md = raw_metadata(b"\xffproducer", None, [(b"batch-\xfe", b"v")])
    md.num_messages_in_batch = len(messages)
    payload = build_batch((raw_smm(k, p), b"value") for k, p in messages)
    return build_entry(md, payload)


def single_entry(key: bytes | None, props: list[tuple[bytes, bytes]]) -> bytes:
    return build_entry(raw_metadata(b"go-\xc3", key, props), b"value")


def human_outputs(data: bytes) -> str:
    """The tree, both tables and the one-line view of one decoded entry, as printed."""
    from rich.console import Console

    entry = decode_entry(data, DecodeOptions(), (5, 6))
    buf = io.StringIO()
    console = Console(file=buf, width=200, highlight=False, soft_wrap=True)
    results = [("in", entry)]
    console.print(render.entry_tree(entry, "in", with_hex=True))
    console.print(render.layers_table(results, with_hex=True))
    console.print(render.messages_table(results))
    console.print(render.entry_line(entry, "in"))
    render.report_problems(console, results)
    return buf.getvalue()


def _unescape(notes: list[dict[str, Any]], field: str) -> list[bytes]:
    return [base64.b64decode(n["base64"]) for n in notes if n["field"] == field]


def test_not_utf8_key_property_and_producer_render_everywhere(capsys: Any, tmp_path: Path) -> None:
    data = single_entry(b"k\xff", [(b"p\xfe", b"ok"), (b"ok", b"v\xc3")])
    entry = decode_entry(data)
    assert entry.ok, entry.problems
    (msg,) = entry.messages
    assert isinstance(msg.key, RawText) and bytes(msg.key) == b"k\xff"
    doc = msg.to_json()
    json.dumps(doc)
    assert doc["key"] == "k\\xff"
    assert _unescape(doc["not_utf8"], "key") == [b"k\xff"]
    props = [n for n in doc["not_utf8"] if n["field"] == "properties"]
    pairs = {
        (base64.b64decode(n["key_base64"]), base64.b64decode(n["value_base64"])) for n in props
    }
    assert pairs == {(b"p\xfe", b"ok"), (b"ok", b"v\xc3")}
    md_layer = next(
        layer for layer in entry.to_json()["layers"] if layer["layer"] == "message-metadata"
    )
    assert md_layer["fields"]["producer_name"] == "go-\\xc3"
    assert {"field": "producer_name", "base64": base64.b64encode(b"go-\xc3").decode()} in md_layer[
        "not_utf8"
    ]

    path = tmp_path / "entry.bin"
    path.write_bytes(data)
    for fmt in ("json", "jsonl", "table", "tree"):
        result = run(capsys, "decode", "-o", fmt, path)
        assert result.code == 0, (fmt, result.err)
        assert "Traceback" not in result.err
        assert "b'" not in result.out, fmt
    assert "k\\xff" in run(capsys, "decode", "-o", "table", path).out
    jl = [json.loads(line) for line in run(capsys, "decode", "-o", "jsonl", path).out.splitlines()]
    assert _unescape(jl[0]["messages"][0]["not_utf8"], "key") == [b"k\xff"]


def test_markup_in_keys_is_shown_as_text_not_parsed() -> None:
    out = human_outputs(batched_entry([(b"[/]", [(b"[bold]", b"[/red]")]), (b"[red]x", [])]))
    assert "[/]" in out and "[red]x" in out


@settings(max_examples=150, deadline=None)
@given(
    messages=st.lists(
        st.tuples(st.none() | ANY_TEXT, st.lists(st.tuples(ANY_TEXT, ANY_TEXT), max_size=3)),
        min_size=1,
        max_size=4,
    )
)
def test_every_renderer_takes_any_text(
    messages: list[tuple[bytes | None, list[tuple[bytes, bytes]]]],
) -> None:
    data = batched_entry(messages)
    entry = decode_entry(data)
    assert len(entry.messages) == len(messages)
    # JSON: serializable, and every non-UTF-8 value comes back byte for byte
    for m, (key, props) in zip(entry.to_json()["messages"], messages, strict=True):
        line = json.dumps(m, ensure_ascii=False)
        assert "\n" not in line
        notes = m.get("not_utf8", [])
        if key is None:
            assert m["key"] is None
        elif _is_utf8(key):
            assert m["key"] == key.decode()
        else:
            assert _unescape(notes, "key") == [key]
        last = dict(props)  # a repeated property key: the last one wins, as in Pulsar
        for k, v in last.items():
            if _is_utf8(k) and _is_utf8(v):
                assert m["properties"][k.decode()] == v.decode()
            else:
                assert any(
                    base64.b64decode(n["key_base64"]) == k
                    and base64.b64decode(n["value_base64"]) == v
                    for n in notes
                    if n["field"] == "properties"
                )
    # people: every view renders, without Python reprs
    out = human_outputs(data)
    texts = [key for key, _ in messages if key] + [t for _, ps in messages for p in ps for t in p]
    for text in texts:  # no bytes repr of any generated value (escaped text is fine)
        assert repr(text) not in out, text
    assert "None" not in out and "True" not in out


def test_ledger_metadata_custom_metadata_keeps_bytes() -> None:
    md = lm.LedgerMetadata(
        ensemble_size=1,
        write_quorum_size=1,
        ack_quorum_size=1,
        state=lm.LedgerState.OPEN,
        ensembles={0: ["bk1:3181"]},
        custom_metadata={"application": b"pulsar", "weird": b"\xff\x00x"},
    )
    back = lm.parse(lm.build(md), ledger_id=9)
    doc = back.to_json()
    json.dumps(doc)
    assert doc["custom_metadata"]["application"] == "pulsar"
    assert doc["custom_metadata"]["weird"] == "\\xff\x00x"
    (note,) = doc["not_utf8"]
    assert base64.b64decode(note["value_base64"]) == b"\xff\x00x"
    assert doc["pulsar"]["other"]["weird"] == "\\xff\x00x"
