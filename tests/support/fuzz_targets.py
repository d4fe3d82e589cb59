"""What the fuzzers feed bytes to: every input parser, decoder, store record reader and
renderer. A target may raise only LedgerctlError (bad input, reported as one line);
anything else is a crash.

Shared by tests/decoders/test_fuzz_corpus.py (replays tests/data/fuzz-crashes/ in CI) and
scripts/fuzz_long.py (the long run, not in CI). A corpus file is named ``<target>-<what>``
and holds the bytes given to that target.
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pulsarctl_py.decoders import DecodeOptions, decode_entry, entrylog, index_file, journal
from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.decoders._readat import bytes_reader
from pulsarctl_py.decoders.checksums import DigestType
from pulsarctl_py.decoders.entry import Depth, Outer
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.textdump import read_entry

DATA = Path(__file__).parent.parent / "data"
CRASHES = DATA / "fuzz-crashes"


def render_everything(entry: Any, label: str = "fuzz", human: bool = True) -> int:
    """Every renderer over one decoded entry; return the characters written.

    The human views (tree, tables, one-line) must show no Python repr of bytes; the hex
    dumps are rendered too, but their ASCII column may show anything, so they are left
    out of that check.
    """
    from rich.console import Console

    from pulsarctl_py import render

    doc = entry.to_json(with_hex=True)
    text = json.dumps(doc, indent=2, ensure_ascii=False)
    line = json.dumps(entry.to_json(), ensure_ascii=False, separators=(",", ":"))
    assert "\n" not in line
    if not human:
        return len(text) + len(line)
    rows = [(label, entry)]
    buf = io.StringIO()
    console = Console(file=buf, width=160, highlight=False, soft_wrap=True)
    console.print(render.entry_tree(entry, label))
    console.print(render.layers_table(rows))
    console.print(render.messages_table(rows))
    console.print(render.entry_line(entry, label, 0))
    render.report_problems(console, rows)
    shown = buf.getvalue()
    for repr_mark in ("b'", 'b"', "bytearray(", "memoryview("):
        assert repr_mark not in shown, repr_mark
    hexed = io.StringIO()
    console = Console(file=hexed, width=160, highlight=False, soft_wrap=True)
    console.print(render.entry_tree(entry, label, with_hex=True))
    console.print(render.layers_table(rows, with_hex=True))
    return len(text) + len(line) + len(shown) + len(hexed.getvalue())


def entry_target(data: bytes, rng: random.Random | None = None) -> None:
    rng = rng or random.Random(len(data))
    options = DecodeOptions(
        outer=rng.choice(list(Outer)),
        digest_type=rng.choice([None, *DigestType]),
        password=rng.choice([None, b"", b"secret"]),
        depth=rng.choice(list(Depth)),
        verify=rng.random() < 0.8,
        max_uncompressed=rng.choice([1 << 16, 5 * 1024 * 1024 + 10 * 1024]),
    )
    entry = decode_entry(data, options, rng.choice([None, (1, 0)]))
    # Rich rendering costs 10x a decode: every case gets JSON, one in eight the human views
    render_everything(entry, human=rng.random() < 0.125)


def text_target(data: bytes, rng: random.Random | None = None) -> None:
    for fmt in ("auto", "hex", "base64"):
        try:
            read_entry(data, fmt)
        except LedgerctlError:
            pass


def ledger_metadata_target(data: bytes, rng: random.Random | None = None) -> None:
    md = lm.parse(data, ledger_id=1)
    json.dumps(md.to_json())


def ml_target(data: bytes, rng: random.Random | None = None) -> None:
    for parse in (mld.parse_ml_info, mld.parse_cursor_info):
        try:
            json.dumps(parse(data).to_json())
        except LedgerctlError:
            pass
    mld.parse_position_info(data)


def entrylog_target(data: bytes, rng: random.Random | None = None) -> None:
    problems: list[Any] = []
    for _ in entrylog.scan_records(bytes_reader(data), len(data), problems=problems):
        pass
    try:
        header = entrylog.parse_header(data)
        entrylog.read_ledgers_map(bytes_reader(data), len(data), header)
    except LedgerctlError:
        pass


def journal_target(data: bytes, rng: random.Random | None = None) -> None:
    problems: list[Any] = []
    for _ in journal.scan_records(bytes_reader(data), len(data), problems=problems):
        pass


def index_target(data: bytes, rng: random.Random | None = None) -> None:
    index_file.parse_header(data)
    for _ in index_file.parse_locations(data[index_file.entry_position(0) :]):
        pass


TARGETS: dict[str, Callable[[bytes, random.Random | None], None]] = {
    "entry": entry_target,
    "text": text_target,
    "ledger-metadata": ledger_metadata_target,
    "ml": ml_target,
    "entrylog": entrylog_target,
    "journal": journal_target,
    "index": index_target,
}


def run_target(name: str, data: bytes, rng: random.Random | None = None) -> None:
    """Run one target; LedgerctlError is the only accepted failure."""
    try:
        TARGETS[name](data, rng)
    except LedgerctlError:
        pass


def corpus() -> list[Path]:
    return sorted(p for p in CRASHES.iterdir() if p.suffix == ".bin")


def target_of(path: Path) -> str:
    name = path.stem
    for target in sorted(TARGETS, key=len, reverse=True):
        if name.startswith(target + "-"):
            return target
    raise ValueError(f"{path.name}: no target named in the file name")
