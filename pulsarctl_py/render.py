"""One place that turns results into output: JSON / JSON lines for machines on stdout,
Rich trees and tables for people, and problems and summaries on stderr.

Machine output never goes through Rich (it hard-wraps when piped): it is ``json.dumps``
to stdout, one object per line for streams.
"""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.tree import Tree

    from pulsarctl_py.decoders import Entry, Layer


class OutputFormat(enum.StrEnum):
    """How a command prints its result."""

    AUTO = "auto"  # tree/table on a terminal, JSON when piped
    TREE = "tree"
    TABLE = "table"
    JSON = "json"
    JSONL = "jsonl"


def resolve(fmt: OutputFormat, human: OutputFormat = OutputFormat.TREE) -> OutputFormat:
    """AUTO becomes ``human`` on a terminal and JSON when stdout is a pipe or file."""
    if fmt is not OutputFormat.AUTO:
        return fmt
    return human if sys.stdout.isatty() else OutputFormat.JSON


def stdout_console() -> Console:
    from rich.console import Console

    tty = sys.stdout.isatty()
    return Console(
        file=sys.stdout, soft_wrap=not tty, width=None if tty else 10_000, highlight=False
    )


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, soft_wrap=not sys.stderr.isatty(), highlight=False)


def write_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def write_jsonl(objs: Iterable[Any]) -> None:
    for obj in objs:
        sys.stdout.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")


def iso_ms(ms: int | None) -> str:
    """Epoch milliseconds as ISO-8601 UTC, for people; '-' when unset."""
    if not ms:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return f"{ms} (out of range)"


def hexdump(data: bytes | memoryview, base: int = 0) -> str:
    """Offset, 16 hex bytes and ASCII per line, offsets counted from ``base``."""
    raw = bytes(data)
    lines = []
    for i in range(0, len(raw), 16):
        chunk = raw[i : i + 16]
        hexpart = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
        lines.append(f"{base + i:08x}  {hexpart:<47}  {text}")
    return "\n".join(lines)


def _check_text(layer: Layer) -> str:
    check = layer.check
    if check is None:
        return ""
    if check.ok is None:
        return f" [yellow]? {check.kind} {check.stored} ({check.note or 'not verified'})[/]"
    if check.ok:
        return f" [green]✓ {check.kind} {check.stored}[/]"
    return f" [red]✗ {check.kind} stored {check.stored} computed {check.computed}[/]"


def _value_preview(value: bytes | memoryview | None, limit: int = 60) -> str:
    if value is None:
        return "null"
    raw = bytes(value[: limit + 1])
    try:
        text = raw.decode("utf-8")
        if all(c.isprintable() for c in text):
            return repr(text[:limit]) + ("…" if len(value) > limit else "")
    except UnicodeDecodeError:
        pass
    return "0x" + raw[: limit // 2].hex() + ("…" if len(value) > limit // 2 else "")


_TIME_FIELDS = {"publish_time", "event_time", "broker_timestamp", "deliver_at_time"}


def _field_text(name: str, value: Any) -> str:
    from rich.markup import escape

    if name in _TIME_FIELDS and isinstance(value, int):
        return f"{name}: {value} ({iso_ms(value)})"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"{name}: 0x{bytes(value).hex()}"
    return escape(f"{name}: {value}")


def entry_tree(entry: Entry, label: str, with_hex: bool = False) -> Tree:
    """A Rich tree: the entry, each layer with its fields and checks, then messages."""
    from rich.markup import escape
    from rich.text import Text
    from rich.tree import Tree

    status = "[green]ok[/]" if entry.ok else "[red]problems[/]"
    pos = f" {entry.position[0]}:{entry.position[1]}" if entry.position else ""
    tree = Tree(f"[bold]{escape(label)}[/]{pos}  {len(entry.data)} bytes  {status}")
    node = tree
    for layer in entry.layers:
        where = "" if layer.space == "entry" else f" of the {layer.space}"
        title = f"[cyan]{layer.name}[/] @{layer.offset}{where} +{layer.length}{_check_text(layer)}"
        if layer.reason:
            title += f" [red]{escape(layer.reason)}[/]"
        node = node.add(title)
        for name, value in layer.fields.items():
            if name == "payload" and isinstance(value, dict):
                sub = node.add("payload")
                for k, v in value.items():
                    sub.add(_field_text(k, v))
            else:
                node.add(_field_text(name, value))
        if with_hex and layer.length:
            node.add(Text(hexdump(layer.raw[: min(layer.length, 4096)], layer.offset)))
    if entry.messages:
        msgs = node.add(f"[bold]messages[/] ({len(entry.messages)})")
        for m in entry.messages:
            mid = m.message_id or f"batch index {m.batch_index}"
            key = "null" if m.key is None else repr(m.key)
            item = msgs.add(
                f"[magenta]{escape(mid)}[/] key={escape(key)} "
                f"value={escape(_value_preview(m.value))}"
                + (" [yellow]null value[/]" if m.null_value else "")
            )
            if m.properties:
                item.add(escape(f"properties: {m.properties}"))
            if m.event_time:
                item.add(_field_text("event_time", m.event_time))
            if m.index is not None:
                item.add(f"index: {m.index}")
            if m.chunks:
                item.add(f"reassembled from {m.chunks} chunks")
    return tree


def messages_table(entries: Iterable[tuple[str, Entry]]) -> Table:
    """One row per message; entries without messages get one row saying why."""
    from rich.table import Table

    table = Table(show_lines=False)
    for col in (
        "input",
        "message id",
        "key",
        "batch",
        "size",
        "value",
        "properties",
        "publish time",
    ):
        table.add_column(col, overflow="fold")
    for label, entry in entries:
        if not entry.messages:
            why = "encrypted" if entry.encrypted else ("chunk" if entry.chunk else "no messages")
            if not entry.ok:
                why = "; ".join(str(p) for p in entry.problems if p.severity == "error")
            table.add_row(label, "-", "-", "-", "-", why, "", iso_ms(entry.publish_time))
        for m in entry.messages:
            table.add_row(
                label,
                m.message_id or "-",
                "null" if m.key is None else m.key,
                str(m.batch_index),
                str(0 if m.value is None else len(m.value)),
                _value_preview(m.value),
                json.dumps(m.properties, ensure_ascii=False) if m.properties else "",
                iso_ms(m.publish_time),
            )
    return table


def layers_table(entries: Iterable[tuple[str, Entry]]) -> Table:
    """One row per layer: where it is, what it says, and its check."""
    from rich.table import Table

    table = Table()
    for col in ("input", "layer", "offset", "length", "check", "summary"):
        table.add_column(col, overflow="fold")
    for label, entry in entries:
        for layer in entry.layers:
            check = layer.check
            status = (
                ""
                if check is None
                else ("?" if check.ok is None else ("ok" if check.ok else "MISMATCH"))
            )
            summary = layer.reason or ", ".join(
                f"{k}={v}" for k, v in layer.fields.items() if not isinstance(v, (dict, list))
            )
            table.add_row(
                label, layer.name, str(layer.offset), str(layer.length), status, summary[:120]
            )
    return table


def report_problems(console: Console, entries: Iterable[tuple[str, Entry]]) -> None:
    """Every problem, one line each, on stderr."""
    from rich.markup import escape

    for label, entry in entries:
        for p in entry.problems:
            colour = "red" if p.severity == "error" else "yellow"
            console.print(f"[{colour}]{p.severity}[/]: {escape(label)}: {escape(str(p))}")


def entry_line(entry: Entry, label: str, lac: int | None = None) -> str:
    """One line per entry: position, size, digest and checksum, time, messages, index."""
    from rich.markup import escape

    def mark(check: Any) -> str:
        if check is None:
            return "[dim]-[/]"
        if check.ok is None:
            return "[yellow]?[/]"
        return "[green]✓[/]" if check.ok else "[red]✗[/]"

    digest = next((layer.check for layer in entry.layers if layer.name == "bookie-entry"), None)
    crc = next((layer.check for layer in entry.layers if layer.name == "checksum"), None)
    parts = [
        f"[bold]{escape(label)}[/]",
        f"{len(entry.data):>7}B",
        f"digest {mark(digest)}",
        f"crc {mark(crc)}",
        iso_ms(entry.entry_timestamp),
    ]
    if entry.index is not None:
        parts.append(f"index {entry.index}")
    if entry.messages:
        keys = sorted({m.key for m in entry.messages if m.key is not None})
        shown = ", ".join(keys[:3]) + ("…" if len(keys) > 3 else "")
        parts.append(f"{len(entry.messages)} msg" + (f" keys {escape(shown)}" if keys else ""))
    elif entry.encrypted:
        parts.append("[yellow]encrypted[/]")
    elif entry.chunk is not None:
        parts.append(f"chunk {entry.chunk.chunk_id + 1}/{entry.chunk.num_chunks}")
    marker = next((layer for layer in entry.layers if layer.name == "marker"), None)
    if marker is not None:
        parts.append(f"marker {marker.fields.get('name')}")
    position = next((layer for layer in entry.layers if layer.name == "position-info"), None)
    if position is not None:
        f = position.fields
        parts.append(f"mark-delete {f.get('ledgerId')}:{f.get('entryId')}")
    if lac is not None and entry.position is not None and entry.position[1] > lac:
        parts.append("[yellow]beyond LAC[/]")
    if not entry.ok:
        parts.append("[red]problems[/]")
    return "  ".join(parts)


def print_ledger(console: Console, view: Any) -> None:
    """A one-line header per ledger on stderr."""
    lac = "-" if view.lac is None else str(view.lac)
    state = view.state or "no metadata"
    fenced = " fenced" if view.bookie is not None and view.bookie.fenced else ""
    console.print(
        f"[bold]ledger {view.ledger_id}[/] {view.kind} {state}{fenced} LAC {lac} "
        f"digest {view.digest_type.name if view.digest_type else '?'}"
    )


def print_summary(console: Console, summary: Any) -> None:
    """The end-of-scan summary on stderr."""
    s = summary
    codecs = ", ".join(f"{k} {v}" for k, v in sorted(s.codecs.items())) or "-"
    span = f"{iso_ms(s.first_time)} .. {iso_ms(s.last_time)}"
    index = "-" if s.first_index is None else f"{s.first_index} .. {s.last_index}"
    colour = "red" if s.errors else ("yellow" if s.warnings else "green")
    console.print(
        f"[{colour}]{s.entries} entries[/] in {len(s.ledgers)} ledger(s), {s.messages} messages, "
        f"{s.bytes} bytes; codecs {codecs}; time {span}; index {index}; "
        f"{s.errors} errors, {s.warnings} warnings"
    )


class _Progress:
    def __init__(self, console: Console, label: str, enabled: bool = True) -> None:
        self.console = console
        self.label = label
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> Any:
        if not self.console.is_terminal or not self.enabled:
            return lambda: None
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            SpinnerColumn(),
            TextColumn("{task.description} {task.completed}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
            # data written to stdout meanwhile stays on stdout (Rich would move it here)
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self.bar.__enter__()
        self.task = self.bar.add_task(self.label, total=None)
        return lambda: self.bar.advance(self.task)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


def progress(console: Console, label: str, enabled: bool = True) -> _Progress:
    """A transient progress counter on stderr, silent when stderr is not a terminal."""
    return _Progress(console, label, enabled)


def print_table(console: Console, table: Table) -> None:
    """Print a table whose ``no_wrap`` columns (topic names) are never broken or cut.

    Rich squeezes a table into the terminal's width, folding or cropping even no_wrap
    cells; a name broken across lines cannot be copied. When the table needs more room
    than the terminal has, it is drawn at the width it needs and the terminal wraps the
    long lines instead, keeping every name whole.
    """
    from rich.measure import Measurement

    need = Measurement.get(console, console.options.update_width(1_000_000), table).minimum
    if need > console.width:  # print(width=) cannot exceed the console's own width
        from rich.console import Console

        console = Console(
            file=console.file,
            width=need,
            force_terminal=console.is_terminal,
            color_system=console.color_system,
            highlight=False,
        )
    console.print(table)
