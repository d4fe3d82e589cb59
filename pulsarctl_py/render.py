"""One place that turns results into output: JSON / JSON lines for machines on stdout,
Rich trees and tables for people, and problems and summaries on stderr.

Machine output never goes through Rich (it hard-wraps when piped): it is ``json.dumps``
to stdout, one object per line for streams.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import itertools
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
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


def resolve(
    fmt: OutputFormat,
    human: OutputFormat = OutputFormat.TREE,
    piped: OutputFormat = OutputFormat.JSON,
) -> OutputFormat:
    """AUTO becomes ``human`` on a terminal and ``piped`` when stdout is a pipe or file.

    Scan commands (one item per entry or record) pass ``piped=JSONL``: streamed lines.
    """
    if fmt is not OutputFormat.AUTO:
        return fmt
    return human if sys.stdout.isatty() else piped


def _colour() -> dict[str, Any]:
    """No colour and no style (bold, dim) at all when NO_COLOR is set and not empty
    (https://no-color.org; ``ledgerctl --no-color`` sets it): Rich's own NO_COLOR support
    drops colours but keeps bold and dim."""
    import os

    return {"color_system": None} if os.environ.get("NO_COLOR") else {}


#: the styles ledgerctl's own messages use, as Rich markup tags; every other bracketed
#: word in printed text is the data's own and shown as it is
STYLE_WORDS = frozenset(
    "bold dim italic underline red green yellow blue magenta cyan white".split()
)
#: Rich's markup tag, with the backslashes before it (rich.markup.RE_TAGS)
_TAG = re.compile(r"(\\*)\[([a-z#/@][^[]*?)]")


def _style_tag(tag: str) -> bool:
    words = tag[1:].split() if tag.startswith("/") else tag.split()
    return (tag == "/" or bool(words)) and all(w in STYLE_WORDS for w in words)


def text_markup(text: str) -> str:
    """``text`` with every markup tag that is not one of ledgerctl's styles escaped.

    Values printed inside messages (topic names, keys, addresses, paths) are data: a
    ``[link=...]``, ``[@click]`` or a closing ``[/]`` with nothing open in them must
    print as it is, and must not make Rich raise. Call sites escape what they
    interpolate (rich.markup.escape); this is the net under them.
    """
    open_tags: list[str] = []

    def keep_or_escape(found: re.Match[str]) -> str:
        slashes, tag = found.groups()
        if len(slashes) % 2:  # escaped already: Rich prints it as text
            return found.group(0)
        if _style_tag(tag):
            if not tag.startswith("/"):
                open_tags.append(" ".join(tag.split()))
                return found.group(0)
            name = " ".join(tag[1:].split())
            if not name and open_tags:
                open_tags.pop()
                return found.group(0)
            if name and name in open_tags:
                del open_tags[len(open_tags) - 1 - open_tags[::-1].index(name)]
                return found.group(0)
        return f"{slashes}{slashes}\\[{tag}]"

    return _TAG.sub(keep_or_escape, text)


@functools.cache
def _console_class() -> type[Console]:
    from rich.console import Console
    from rich.errors import MarkupError

    class TextConsole(Console):
        """A Console for which printed strings are text with ledgerctl's own styles.

        Never Rich's emoji codes (``192.0.2.3:1234`` is an address, not ``:1234:``), no
        highlighting, markup limited to :data:`STYLE_WORDS` (:func:`text_markup`), and
        text whose markup does not parse is printed plain rather than raising.
        """

        def print(self, *objects: Any, **kwargs: Any) -> None:
            from rich.table import Table

            if len(objects) == 1 and isinstance(objects[0], Table) and not kwargs:
                print_table(self, objects[0])
                return
            super().print(*objects, **kwargs)

        def render_str(self, text: str, **kwargs: Any) -> Any:
            kwargs["emoji"] = False
            markup = kwargs.get("markup")
            if markup or (markup is None and self._markup):
                try:
                    return super().render_str(text_markup(text), **kwargs)
                except MarkupError:
                    kwargs["markup"] = False
            return super().render_str(text, **kwargs)

    return TextConsole


def make_console(**kwargs: Any) -> Console:
    """Every Console ledgerctl prints through: :class:`TextConsole` semantics, never
    emoji codes, never highlighting, no colour or style under NO_COLOR."""
    kwargs.setdefault("highlight", False)
    for key, value in _colour().items():
        kwargs.setdefault(key, value)
    return _console_class()(emoji=False, **kwargs)


def stdout_console() -> Console:
    tty = sys.stdout.isatty()
    out = make_console(file=sys.stdout, soft_wrap=not tty, width=None if tty else 10_000)
    out.on_broken_pipe = _broken_pipe  # type: ignore[method-assign]
    return out


def _broken_pipe() -> None:
    """Rich would exit 1 (findings); the CLI turns EPIPE into its quiet broken-pipe exit."""
    import errno

    raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def stderr_console() -> Console:
    return make_console(stderr=True, soft_wrap=not sys.stderr.isatty())


def write_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def write_document(obj: Any, fmt: OutputFormat) -> None:
    """A command's one result: indented for ``-o json``, one line for ``-o jsonl`` (a
    JSON lines stream of one object, as every ``-o jsonl`` is one object per line)."""
    if fmt is OutputFormat.JSONL:
        write_jsonl([obj])
    else:
        write_json(obj)


def write_json_list(items: Iterable[Any], no_floats: bool = False) -> None:
    """Write the list ``items`` as ``write_json`` would, item by item (never held whole).

    The first item is taken before anything is written: an error raised before it (a
    store that cannot be read) leaves stdout empty. ``no_floats`` as for
    :func:`write_json_stream`."""
    out = sys.stdout
    dumps = indented_encoder(no_floats)
    iterator = iter(items)
    head = next(iterator, _NOTHING)
    if head is _NOTHING:
        out.write("[]\n")
        return
    out.write("[")
    first = True
    for item in itertools.chain((head,), iterator):
        out.write("\n  " if first else ",\n  ")
        for piece in _pieces(item, dumps, indented=True):
            out.write(piece.replace("\n", "\n  "))
        first = False
    out.write("\n]\n")


#: rows of a listing laid out together in one table or tree (see :func:`pages`)
PAGE_ROWS = 1000


def pages(rows: Iterable[Any], size: int = PAGE_ROWS) -> Iterable[list[Any]]:
    """``rows`` in lists of ``size``: a listing for people is drawn a page at a time (a Rich
    table or tree of 10^5 rows takes minutes and hundreds of MB), each page with its
    own header."""
    page: list[Any] = []
    for row in rows:
        page.append(row)
        if len(page) >= size:
            yield page
            page = []
    if page:
        yield page


_NOTHING = object()


class Streamed:
    """A list inside an object written as JSON whose items are made as they are written.

    :func:`write_json_stream`, :func:`write_json_list`, :class:`JsonlOut` and
    :func:`write_jsonl` write an object holding one under ``messages`` (an entry's, see
    :func:`entry_doc`) with the same text as the list would have, item by item: a batch
    of 200,000 messages is never 200,000 dicts and their text at once. Other writers
    cannot encode it.
    """

    __slots__ = ("items",)

    def __init__(self, items: Iterable[Any]) -> None:
        self.items = items


#: stands in for a Streamed value while the rest of its object is encoded (private-use
#: characters, which both encoders write as they are)
_MARK = "\ue000ledgerctl-streamed\ue000"
_QUOTED_MARK = '"' + _MARK + '"'


#: an entry with more messages than this has them written one at a time (Streamed)
STREAM_MESSAGES = 256


def entry_doc(entry: Entry, with_hex: bool = False) -> dict[str, Any]:
    """``entry.to_json(with_hex)``, its messages Streamed when there are many of them."""
    if len(entry.messages) <= STREAM_MESSAGES:
        return entry.to_json(with_hex)
    doc = entry.to_json(with_hex, messages=False)
    doc["messages"] = Streamed(m.to_json() for m in entry.messages)
    return doc


def _streamed_in(obj: Any) -> tuple[Any, Streamed | None]:
    """``obj`` with its Streamed ``messages`` replaced by the mark (a look-up per object:
    the writers ask it for every line)."""
    if type(obj) is dict:
        value = obj.get("messages")
        if type(value) is Streamed:
            copy = dict(obj)
            copy["messages"] = _MARK
            return copy, value
    return obj, None


def _pieces(obj: Any, encode: Callable[[Any], str], indented: bool) -> Iterable[str]:
    """The text of ``obj`` as ``encode`` writes it, its Streamed list item by item."""
    shell, streamed = _streamed_in(obj)
    text = encode(shell)
    if streamed is None:
        yield text
        return
    head, tail = text.split(_QUOTED_MARK, 1)
    line = head[head.rfind("\n") + 1 :]
    inner = "\n" + " " * (len(line) - len(line.lstrip(" ")) + 2)
    yield head + "["
    first = True
    for item in streamed.items:
        if indented:
            yield ("" if first else ",") + inner + encode(item).replace("\n", inner)
        else:
            yield ("" if first else ",") + encode(item)
        first = False
    yield ("]" if first or not indented else inner[:-2] + "]") + tail


def write_json_stream(
    key: str,
    items: Iterable[Any],
    tail: Callable[[], dict[str, Any]] | None = None,
    no_floats: bool = False,
) -> None:
    """Write ``{key: [items...], **tail()}`` as ``write_json`` would, item by item.

    The document is never built in memory: each item is written as it comes, then the
    fields of ``tail()`` (computed after the last item, e.g. a summary). The text is the
    same as ``write_json`` of the whole document. ``no_floats``: the items hold no float,
    as for :func:`jsonl_encoder`, and orjson may write them.
    """
    out = sys.stdout
    dumps = indented_encoder(no_floats)
    iterator = iter(items)
    # the first item is taken before anything is written, so an error raised before any
    # item (a name that does not exist, a store that cannot be opened) leaves stdout empty
    head = next(iterator, _NOTHING)
    out.write("{\n  " + json.dumps(key) + ": [")
    first = True
    for item in itertools.chain(() if head is _NOTHING else (head,), iterator):
        # every line indented: only JSON's own newlines, text escapes its line breaks
        # (textwrap would also break at U+2028, U+0085 and the like inside a string)
        out.write("\n    " if first else ",\n    ")
        for piece in _pieces(item, dumps, indented=True):
            out.write(piece.replace("\n", "\n    "))
        first = False
    out.write("]" if first else "\n  ]")
    for name, value in (tail() if tail is not None else {}).items():
        text = json.dumps(value, indent=2, ensure_ascii=False).replace("\n", "\n  ")
        out.write(",\n  " + json.dumps(name) + ": " + text)
    out.write("\n}\n")


def indented_encoder(no_floats: bool) -> Callable[[Any], str]:
    """``json.dumps(obj, indent=2, ensure_ascii=False)``, or orjson's same text (no floats)."""
    if no_floats:
        try:
            from orjson import OPT_INDENT_2, dumps
        except ImportError:  # pragma: no cover - a platform without its wheel
            pass
        else:

            def encode(obj: Any) -> str:
                try:
                    return dumps(obj, option=OPT_INDENT_2).decode("utf-8")
                except TypeError:  # orjson.JSONEncodeError
                    return json.dumps(obj, indent=2, ensure_ascii=False)

            return encode
    return functools.partial(json.dumps, indent=2, ensure_ascii=False)


#: the JSON line of one object, as ``json.dumps(obj, ensure_ascii=False, separators=(",",
#: ":"))`` writes it; one encoder for every line (json.dumps makes one per call)
_compact_json = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), check_circular=False
).encode


def jsonl_encoder(no_floats: bool = False) -> Callable[[Any], str]:
    """The function that gives an object's JSON line (without the newline).

    ``no_floats``: the objects hold no float, as decoded entries do (the protobufs of
    Pulsar and BookKeeper have no float field). Then orjson, when installed, writes them:
    several times faster, and the same text as the standard library's, byte for byte
    (compact, UTF-8 unescaped, keys in order); floats are where the two differ (orjson
    writes ``1e-7`` for ``1e-07``). What orjson refuses (an int wider than 64 bits) is
    left to the standard library.
    """
    if no_floats:
        try:
            from orjson import dumps
        except ImportError:  # pragma: no cover - a platform without its wheel
            return _compact_json
        fallback = _compact_json

        def encode(obj: Any) -> str:
            try:
                return dumps(obj).decode("utf-8")
            except TypeError:  # orjson.JSONEncodeError
                return fallback(obj)

        return encode
    return _compact_json


class JsonlOut:
    """JSON lines to stdout, written about :data:`BATCH` bytes at a time.

    ``obj(o)`` writes an object's line (as :func:`jsonl_encoder` makes it), ``text(s)``
    lines already made (each ending in a newline); ``close()`` writes what is pending
    (use it in ``finally``). When stdout is a UTF-8 text stream over a byte buffer, as it
    is on a terminal or a pipe, orjson's bytes go to the buffer as they are: no decoding
    to text and encoding back per line, the same bytes; made lines are encoded with
    stdout's own encoding and error handler, as its ``write`` does. Otherwise each line
    goes through ``sys.stdout.write``. What is held stays small (below the size an
    allocator maps pages for, which would fault them in again for every batch).
    """

    __slots__ = ("_buffer", "_dumps", "_encode", "_encoding", "_errors", "_pending", "_size")

    #: bytes held before they are written
    BATCH = 1 << 16

    def __init__(self, no_floats: bool = False) -> None:
        import codecs
        import os

        out = sys.stdout
        buffer = getattr(out, "buffer", None)
        encoding = getattr(out, "encoding", None)
        self._pending: list[bytes] = []
        self._size = 0
        self._buffer = None
        self._dumps: Callable[[Any], bytes] | None = None
        self._encode = jsonl_encoder(no_floats)
        self._encoding = self._errors = ""
        try:
            utf8 = encoding is not None and codecs.lookup(encoding).name == "utf-8"
        except LookupError:
            utf8 = False
        if buffer is None or not utf8 or os.linesep != "\n":
            return
        out.flush()  # what the text layer holds goes first
        self._buffer = buffer
        self._encoding, self._errors = encoding, getattr(out, "errors", None) or "strict"
        if no_floats:
            try:
                from orjson import OPT_APPEND_NEWLINE, dumps
            except ImportError:  # pragma: no cover - a platform without its wheel
                return
            self._dumps = functools.partial(dumps, option=OPT_APPEND_NEWLINE)

    def obj(self, obj: Any) -> None:
        if type(obj) is dict and type(obj.get("messages")) is Streamed:
            for piece in _pieces(obj, self._encode, indented=False):
                self.text(piece)
            self.text("\n")
            return
        if self._buffer is None:
            sys.stdout.write(self._encode(obj) + "\n")
            return
        dumps = self._dumps
        line = None
        if dumps is not None:
            try:
                line = dumps(obj)
            except TypeError:  # orjson.JSONEncodeError: what it refuses, json writes
                pass
        if line is None:
            line = (self._encode(obj) + "\n").encode(self._encoding, self._errors)
        self._pending.append(line)
        self._size += len(line)
        if self._size >= self.BATCH:
            self._write()

    def text(self, text: str) -> None:
        if self._buffer is None:
            sys.stdout.write(text)
            return
        data = text.encode(self._encoding, self._errors)
        self._pending.append(data)
        self._size += len(data)
        if self._size >= self.BATCH:
            self._write()

    def _write(self) -> None:
        assert self._buffer is not None
        pending = self._pending
        self._pending = []
        self._size = 0
        if len(pending) == 1:
            self._buffer.write(pending[0])
        else:
            self._buffer.write(b"".join(pending))

    def close(self) -> None:
        if self._buffer is not None:
            if self._pending:
                self._write()
            self._buffer.flush()


def write_jsonl(objs: Iterable[Any], no_floats: bool = False) -> None:
    encode = jsonl_encoder(no_floats)
    out = sys.stdout
    write = out.write
    if getattr(out, "line_buffering", False):  # a terminal: each line as it comes
        for obj in objs:
            for piece in _pieces(obj, encode, indented=False):
                write(piece)
            write("\n")
        return
    # else lines are joined into writes of about the stream's buffer (listings write 10^5
    # lines; a write call each costs more than encoding them), and written when the
    # iteration stops, whatever stops it
    lines: list[str] = []
    held = 0

    def flush() -> None:
        nonlocal held
        lines.append("")
        write("\n".join(lines))
        lines.clear()
        held = 0

    try:
        for obj in objs:
            shell, streamed = _streamed_in(obj)
            if streamed is None:
                line = encode(shell)
                if len(line) < _JSONL_BATCH:
                    lines.append(line)
                    held += len(line)
                    if held >= _JSONL_BATCH:
                        flush()
                    continue
                if lines:  # a long line is written as it is, never copied into a join
                    flush()
                write(line)
                write("\n")
                continue
            if lines:
                flush()
            for piece in _pieces(obj, encode, indented=False):
                write(piece)
            write("\n")
    finally:
        if lines:
            flush()


#: characters of JSON lines joined into one write when stdout is not a terminal
_JSONL_BATCH = 8192


#: the second iso_ms wrote last and its text up to the seconds: a scan's entries mostly
#: share their second with the one before
_iso_second: tuple[int, str] = (-1, "")
#: below this many ms (2**32 s, year 2106), ms / 1000 is within 0.5 µs of the exact time:
#: the float path and the integer one give the same millisecond
_ISO_EXACT = 1000 << 32


def iso_ms(ms: int | None) -> str:
    """Epoch milliseconds as ISO-8601 UTC, for people; '-' when unset."""
    global _iso_second
    if not ms:
        return "-"
    if type(ms) is int and 0 < ms < _ISO_EXACT:
        second, milli = divmod(ms, 1000)
        cached, text = _iso_second
        if cached != second:
            text = datetime.fromtimestamp(second, UTC).isoformat(timespec="seconds")[:-6]
            _iso_second = (second, text)
        return f"{text}.{milli:03d}+00:00"
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return f"{ms} (out of range)"


def human_duration(ms: int | float | None) -> str:
    """A duration for people: ``850 ms``, ``42 s``, ``3 min 12 s``, ``4 d 22 h``; ``-``
    when unknown. Two units at most: an age is read at a glance, not computed with."""
    if ms is None:
        return "-"
    sign, ms = ("-", -ms) if ms < 0 else ("", ms)
    if ms < 1000:
        return f"{sign}{ms:.0f} ms"
    seconds = int(ms // 1000)
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count or parts:
            parts.append(f"{count} {unit}")
        if len(parts) == 2:
            break
    parts = [p for p in parts if not p.startswith("0 ")] or parts[:1]
    return sign + " ".join(parts)


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


def human(value: Any) -> str:
    """A value for people: no Python reprs (``b'..'``, ``None``, ``True``).

    Text that is not UTF-8 shows its bytes as backslash escapes, marked; other bytes
    are hex; containers are walked.
    """
    from pulsarctl_py.decoders.text import RawText

    if isinstance(value, str):
        return value
    if isinstance(value, RawText):
        return f"{value} (not UTF-8)"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "0x" + bytes(value).hex()
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{human(k)}: {human(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(human(v) for v in value) + "]"
    return str(value)


def _check_text(layer: Layer) -> str:
    from rich.markup import escape

    check = layer.check
    if check is None:
        return ""
    if check.ok is None:
        note = check.note or "not verified"
        return f" [yellow]? {check.kind} {check.stored} unverified ({escape(note)})[/]"
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
            more = "…" if len(value) > limit else ""
            return json.dumps(text[:limit], ensure_ascii=False) + more
    except UnicodeDecodeError:
        pass
    return "0x" + raw[: limit // 2].hex() + ("…" if len(value) > limit // 2 else "")


_TIME_FIELDS = {"publish_time", "event_time", "broker_timestamp", "deliver_at_time"}


def _field_text(name: str, value: Any) -> str:
    from rich.markup import escape

    if name in _TIME_FIELDS and isinstance(value, int) and not isinstance(value, bool):
        return f"{name}: {value} ({iso_ms(value)})"
    return escape(f"{name}: {human(value)}")


def entry_tree(
    entry: Entry, label: str, with_hex: bool = False, decoded: list[Any] | None = None
) -> Tree:
    """A Rich tree: the entry, each layer with its fields and checks, then messages
    (with their values decoded by their schema, ``decoded``, when given)."""
    from rich.markup import escape
    from rich.text import Text
    from rich.tree import Tree

    from pulsarctl_py.decoders.text import quoted

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
        for i, m in enumerate(entry.messages[:SHOWN_MESSAGES]):
            mid = m.message_id or f"batch index {m.batch_index}"
            key = quoted(m.key)
            item = msgs.add(
                f"[magenta]{escape(mid)}[/] key={escape(key)} "
                f"value={escape(_value_preview(m.value))}"
                + (" [yellow]null value[/]" if m.null_value else "")
            )
            if m.properties:
                item.add(escape(f"properties: {human(m.properties)}"))
            if m.event_time:
                item.add(_field_text("event_time", m.event_time))
            if m.index is not None:
                item.add(f"index: {m.index}")
            if m.chunks:
                item.add(f"reassembled from {m.chunks} chunks")
            got = decoded[i] if decoded is not None and i < len(decoded) else None
            if got is not None:
                _value_node(item, got)
        if len(entry.messages) > SHOWN_MESSAGES:
            msgs.add(_more_messages(len(entry.messages)))
    return tree


#: the most messages of one entry a tree or table shows (JSON shows them all)
SHOWN_MESSAGES = 1000


def _more_messages(count: int) -> str:
    return f"... and {count - SHOWN_MESSAGES} more messages (-o json or jsonl lists them all)"


def _value_node(item: Any, got: Any) -> None:
    """A message's decoded value (pulsarctl_py.values.Decoded) under its tree node."""
    from rich.markup import escape

    schema = f"schema v{got.schema_version} {got.schema_type}" if got.schema_type else "no schema"
    if got.error is not None:
        item.add(f"[red]{escape(schema)}: {escape(got.error)}[/]")
    elif got.decoded:
        text = json.dumps(got.value, ensure_ascii=False, separators=(", ", ": "))
        if len(text) > 2000:
            text = text[:2000] + "…"
        item.add(escape(f"{schema}: {text}"))
    elif got.note is not None:
        item.add(escape(got.note))


def messages_table(
    entries: Iterable[tuple[str, Entry]], decoded: dict[int, list[Any]] | None = None
) -> Table:
    """One row per message; entries without messages get one row saying why.

    ``decoded``: each entry's decoded values (pulsarctl_py.values.Decoded) by ``id(entry)``;
    a decoded value is shown in place of the bytes' preview. Every cell is plain text
    (never Rich markup): keys and values are the data's own.
    """
    from rich.table import Table
    from rich.text import Text

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
            row = (label, "-", "-", "-", "-", why, "", iso_ms(entry.publish_time))
            table.add_row(*map(Text, row))
        got = decoded.get(id(entry)) if decoded is not None else None
        for i, m in enumerate(entry.messages[:SHOWN_MESSAGES]):
            value = _value_preview(m.value)
            if got is not None and i < len(got) and got[i].decoded:
                value = json.dumps(got[i].value, ensure_ascii=False, separators=(", ", ": "))
            row = (
                label,
                m.message_id or "-",
                "null" if m.key is None else human(m.key),
                str(m.batch_index),
                str(0 if m.value is None else len(m.value)),
                value,
                human(m.properties) if m.properties else "",
                iso_ms(m.publish_time),
            )
            table.add_row(*map(Text, row))
        if len(entry.messages) > SHOWN_MESSAGES:
            more = (label, "...", "", "", "", _more_messages(len(entry.messages)), "", "")
            table.add_row(*map(Text, more))
    return table


def layers_table(entries: Iterable[tuple[str, Entry]], with_hex: bool = False) -> Table:
    """One row per layer: where it is, what it says, and its check (and its bytes in hex)."""
    from rich.table import Table
    from rich.text import Text

    table = Table()
    for col in ("input", "layer", "offset", "length", "check", "summary"):
        table.add_column(col, overflow="fold")
    if with_hex:
        table.add_column("hex (first 4096 bytes)", overflow="fold")
    for label, entry in entries:
        for layer in entry.layers:
            check = layer.check
            status = (
                ""
                if check is None
                else ("unverified" if check.ok is None else ("ok" if check.ok else "MISMATCH"))
            )
            summary = layer.reason or ", ".join(
                f"{k}={human(v)}"
                for k, v in layer.fields.items()
                if not isinstance(v, (dict, list))
            )
            row = [label, layer.name, str(layer.offset), str(layer.length), status, summary[:120]]
            if with_hex:
                row.append(bytes(layer.raw[: min(layer.length, 4096)]).hex())
            table.add_row(*map(Text, row))
    return table


def report_problems(console: Console, entries: Iterable[tuple[str, Entry]]) -> None:
    """Every problem, one line each, on stderr."""
    from rich.markup import escape

    for label, entry in entries:
        for p in entry.problems:
            colour = "red" if p.severity == "error" else "yellow"
            console.print(f"[{colour}]{p.severity}[/]: {escape(label)}: {escape(str(p))}")


def entry_parts(entry: Entry, label: str, lac: int | None = None) -> list[tuple[str, str]]:
    """The table view's line for one entry, as (text, style) pieces; style "" is none.

    Position, size, digest and checksum, time, messages, index: :func:`entry_line` makes
    Rich markup of it, :class:`EntryLines` writes it without a Rich layout per line.
    """

    def mark(check: Any) -> tuple[str, str]:
        if check is None:
            return "-", "dim"
        if check.ok is None:
            return "?", "yellow"
        return ("✓", "green") if check.ok else ("✗", "red")

    digest = crc = marker = position = None
    for layer in entry.layers:
        name = layer.name
        if name == "bookie-entry" and digest is None:
            digest = layer.check
        elif name == "checksum" and crc is None:
            crc = layer.check
        elif name == "marker" and marker is None:
            marker = layer
        elif name == "position-info" and position is None:
            position = layer
    # unstyled neighbours are one piece: fewer pieces to join per line
    parts = [
        (label, "bold"),
        (f"  {len(entry.data):>7}B  digest ", ""),
        mark(digest),
        ("  crc ", ""),
        mark(crc),
    ]
    rest = "  " + iso_ms(entry.entry_timestamp)
    if entry.index is not None:
        rest += f"  index {entry.index}"
    if entry.messages:
        keys = sorted(
            {k if type(k) is str else human(k) for m in entry.messages if (k := m.key) is not None}
        )
        shown = ", ".join(keys[:3]) + ("…" if len(keys) > 3 else "")
        rest += f"  {len(entry.messages)} msg" + (f" keys {shown}" if keys else "")
    elif entry.encrypted:
        parts += ((rest + "  ", ""), ("encrypted", "yellow"))
        rest = ""
    elif entry.chunk is not None:
        rest += f"  chunk {entry.chunk.chunk_id + 1}/{entry.chunk.num_chunks}"
    if marker is not None:
        rest += f"  marker {marker.fields.get('name')}"
    if position is not None:
        f = position.fields
        rest += f"  mark-delete {f.get('ledger_id')}:{f.get('entry_id')}"
    if lac is not None and entry.position is not None and entry.position[1] > lac:
        parts += ((rest + "  ", ""), ("beyond LAC", "yellow"))
        rest = ""
    if not entry.ok:
        parts += ((rest + "  ", ""), ("problems", "red"))
        rest = ""
    if rest:
        parts.append((rest, ""))
    return parts


def entry_line(entry: Entry, label: str, lac: int | None = None) -> str:
    """One line per entry (:func:`entry_parts`) as Rich markup."""
    from rich.markup import escape

    return "".join(
        f"[{style}]{escape(text)}[/]" if style else escape(text)
        for text, style in entry_parts(entry, label, lac)
    )


#: characters Rich would not print as they are (it expands tabs and drops some controls)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class EntryLines:
    """Write the table view's line per entry to a console's file, as Rich would print it.

    Rich lays out every printed line (markup parse, segments, wrapping): a scan of millions
    of entries would spend most of its time there. The styles are rendered once, through
    the console, and each line is joined from plain strings. A line whose text holds a
    control character (tab, newline, escape) is left to Rich; no line goes through Rich's
    emoji codes (a key ``:x:`` is shown as it is). A line wider than the terminal is
    wrapped by the terminal, not at a word.
    """

    def __init__(self, console: Console) -> None:
        from rich.text import Text

        self.console = console
        self.write = console.file.write
        self.codes: dict[str, tuple[str, str]] = {"": ("", "")}
        for style in ("bold", "dim", "green", "yellow", "red"):
            with console.capture() as capture:
                console.print(Text("\0", style=style), end="")
            start, _, end = capture.get().partition("\0")
            self.codes[style] = (start, end)

    def __call__(self, entry: Entry, label: str, lac: int | None = None) -> None:
        parts = entry_parts(entry, label, lac)
        if _CONTROL.search("".join(text for text, _ in parts)) is not None:
            self.console.print(entry_line(entry, label, lac), emoji=False)
            return
        codes = self.codes
        self.write(
            "".join(
                text if not style else codes[style][0] + text + codes[style][1]
                for text, style in parts
            )
            + "\n"
        )


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
        + (f", [yellow]{s.unverified} unverified[/]" if getattr(s, "unverified", 0) else "")
    )


class Activity:
    """One line of the progress display: a label, a count (of a total when known), a unit.

    ``advance(n)`` counts, ``update(...)`` sets; both do nothing when nothing is shown.
    """

    def __init__(self, display: Any = None, task: Any = None) -> None:
        self._display, self._task = display, task

    def advance(self, n: int = 1) -> None:
        if self._display is not None:
            self._display.advance(self._task, n)

    def update(
        self,
        *,
        label: str | None = None,
        completed: int | None = None,
        total: int | None = None,
        unit: str | None = None,
    ) -> None:
        if self._display is None:
            return
        fields: dict[str, Any] = {}
        if label is not None:
            fields["description"] = label
        if completed is not None:
            fields["completed"] = completed
        if total is not None:
            fields["total"] = total or None
        if unit is not None:
            fields["unit"] = unit
        self._display.update(self._task, **fields)

    def __call__(self) -> None:  # the counters the commands hand around: advance by one
        self.advance()


#: the process's one live progress display on stderr, while any activity runs; nested
#: activities (Spark's tasks inside an export) are lines of it, never a second display
_display: Any = None


def _count_column() -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Count(ProgressColumn):
        """``12/40 tasks`` when the total is known, ``12 tasks`` when not (never None)."""

        def render(self, task: Any) -> Text:
            unit = task.fields.get("unit", "")
            done = int(task.completed)
            text = f"{done}/{int(task.total)}" if task.total else f"{done}" if done else ""
            return Text(f"{text} {unit}".strip() if text else "", style="progress.download")

    return Count()


@contextlib.contextmanager
def activity(
    console: Console | None,
    label: str,
    *,
    total: int | None = None,
    unit: str = "",
    enabled: bool = True,
) -> Iterator[Activity]:
    """Show ``label`` with a live count on stderr while the block runs (transient).

    Shown only when ``console`` is a terminal and ``enabled``. The first activity opens
    the display; one started inside it is a line of the same display (Rich allows one
    live display at a time; two would fight over the terminal).
    """
    global _display
    if console is None or not enabled or not console.is_terminal:
        yield Activity()
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    owner = _display is None
    if owner:
        _display = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}", markup=False),
            _count_column(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            # data written to stdout meanwhile stays on stdout (Rich would move it here)
            redirect_stdout=False,
            redirect_stderr=False,
        )
        _display.start()
    display = _display
    task = display.add_task(label, total=total, unit=unit)
    try:
        yield Activity(display, task)
    finally:
        display.remove_task(task)
        if owner:
            display.stop()
            _display = None


def progress(console: Console, label: str, enabled: bool = True) -> Any:
    """A transient counter on stderr (a context manager giving a function that counts
    one), silent when stderr is not a terminal: an :func:`activity`."""
    return activity(console, label, enabled=enabled)


def document_tables(doc: dict[str, Any], title: str | None = None) -> list[Table]:
    """A JSON document as tables for people, holding what the JSON holds: one table of
    its fields (nested objects as ``a.b``, lists of values joined), then one table per
    list of objects (a column per key). Every cell is text, never markup."""
    from rich.table import Table
    from rich.text import Text

    fields = Table(title=title, show_header=False)
    fields.add_column("field", style="bold", no_wrap=True)
    fields.add_column("value", overflow="fold")
    lists: list[Table] = []

    def add(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for key, inner in value.items():
                add(f"{prefix}.{key}" if prefix else str(key), inner)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            columns = list(dict.fromkeys(k for row in value for k in row))
            table = Table(title=f"{prefix} ({len(value)})")
            for column in columns:
                table.add_column(str(column), no_wrap=True)
            for row in value:
                table.add_row(*(Text(cell_text(row.get(c))) for c in columns))
            lists.append(table)
        else:
            fields.add_row(Text(prefix), Text(cell_text(value)))

    add("", doc)
    return [fields, *lists]


def cell_text(value: Any) -> str:
    """A JSON value in a table cell: ``-`` for null and nothing, lists joined."""
    if value is None or value == [] or value == {}:
        return "-"
    if isinstance(value, list):
        return ", ".join(cell_text(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={cell_text(v)}" for k, v in value.items())
    return human(value)


#: table columns that hold ids, positions and names: never broken inside a word
WHOLE_COLUMNS = frozenset(
    {
        "topic",
        "ledger",
        "ledger_id",
        "ledger id",
        "entry",
        "entry_id",
        "position",
        "message id",
        "old_position",
        "input",
        "bookie",
        "bookie id",
        "id",
        "path",
        "cursor",
        "subscription",
        "name",
        "mark-delete",
        "log",
        "file",
        "key",
        "check",
    }
)
#: a value cell of one word up to this long (an id, a name, a position) is kept whole
_WHOLE_WORD = 200


def _keep_words_whole(table: Table) -> None:
    """Mark the columns of ``table`` that hold ids, names, positions or times
    ``no_wrap``: by their header, or when every cell is one word (up to
    :data:`_WHOLE_WORD` characters); free text still wraps between words. A title is
    never narrower than its longest word."""
    for i, column in enumerate(table.columns):
        header = str(column.header).strip().lower()
        if header in WHOLE_COLUMNS or (not table.show_header and i == 0):
            column.no_wrap = True
            continue
        cells = [str(c) for c in getattr(column, "_cells", ())]
        if cells and all(len(c) <= _WHOLE_WORD and not c.split()[1:] for c in cells):
            column.no_wrap = True
    if table.title is not None:
        if isinstance(table.title, str):  # a title names data (a topic): text, not markup
            from rich.text import Text

            table.title = Text(table.title, style="table.title")
        longest = max((len(w) for w in str(table.title).split()), default=0)
        table.min_width = max(table.min_width or 0, longest + 2)


def print_table(console: Console, table: Table) -> None:
    """Print a table whose ids and names are never broken or cut.

    Columns of ids, positions and names are ``no_wrap`` (:func:`_keep_words_whole`).
    Rich squeezes a table into the terminal's width, folding or cropping even no_wrap
    cells; a name broken across lines cannot be copied. When the table needs more room
    than the terminal has, it is drawn at the width it needs and the terminal wraps the
    long lines instead, keeping every name whole. Every table a ledgerctl console prints
    goes through here (:class:`TextConsole`).
    """
    from rich.measure import Measurement

    _keep_words_whole(table)
    wide = console.options.update_width(1_000_000)
    need = Measurement.get(console, wide, table).minimum
    # Rich measures a column's minimum at its longest word even when it may not wrap:
    # a no_wrap column needs its widest cell
    for column in table.columns:
        if column.no_wrap:
            measured = table._measure_column(console, wide, column)
            need += measured.maximum - measured.minimum
    if need > console.width:  # print(width=) cannot exceed the console's own width
        console = make_console(
            file=console.file,
            width=need,
            force_terminal=console.is_terminal,
            color_system=console.color_system,
        )
    _print(console, table)


def _print(console: Console, *objects: Any, **kwargs: Any) -> None:
    """Rich's own print, past :class:`TextConsole`'s table handling."""
    from rich.console import Console

    Console.print(console, *objects, **kwargs)
