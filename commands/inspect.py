"""`ledgerctl inspect`: decode a ledger's or a topic's stored entries."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from pulsarctl_py.commands.options import (
    BOOKIE,
    BOOKIE_DIRS,
    MAX_MESSAGE_SIZE,
    METADATA_URL,
    NO_PROGRESS,
    PASSPHRASE_ENV,
    PASSPHRASE_FILE,
    PASSWORD_ENV,
    PASSWORD_FILE,
    QUIET,
    STRICT,
    VALUES,
    WHERE,
    BookieFlags,
    DepthChoice,
    ValuesChoice,
    bookie_flags,
    load_key,
    metadata_options,
    password,
    progress_wanted,
    tiered_options,
)
from pulsarctl_py.render import OutputFormat

if TYPE_CHECKING:
    from pulsarctl_py.positions import Position


class BrokerMetadata(enum.StrEnum):
    any = "any"
    with_ = "with"
    without = "without"


class InspectOutput(enum.StrEnum):
    """render.OutputFormat plus raw (the stored bytes of one entry)."""

    auto = "auto"
    tree = "tree"
    table = "table"
    json = "json"
    jsonl = "jsonl"
    raw = "raw"


@bookie_flags
@metadata_options
@tiered_options
def inspect(
    target: str = typer.Argument(
        None,
        metavar="LEDGER|L:E",
        help="A ledger id, or one entry as L:E (L:E:B: one message of a batch).",
    ),
    topic: str = typer.Option(
        None,
        "--topic",
        "-t",
        help="Read every ledger of this topic, in order, instead; a partitioned topic: "
        "every partition, in order.",
    ),
    metadata_url: str = METADATA_URL,
    bookie_dirs: list[Path] = BOOKIE_DIRS,
    bookie: BookieFlags = BOOKIE,
    first: str = typer.Option(
        None,
        "--from",
        metavar="POS",
        help="Start at this position, L:E (or L:E:B); of a single ledger also an entry id. "
        "On a topic it spans ledgers: --from 9:1 --to 12:40.",
    ),
    last: str = typer.Option(
        None, "--to", metavar="POS", help="End at this position (included), as --from."
    ),
    last_n: int = typer.Option(
        None, "--last", metavar="N", min=0, help="Only the last N entries (of the whole topic)."
    ),
    limit: int = typer.Option(
        None,
        "--limit",
        metavar="N",
        min=0,
        help="Stop after N entries, counted after the filters, over the whole topic.",
    ),
    depth: DepthChoice = typer.Option(
        DepthChoice.messages,
        "--depth",
        help="entry: bookie header and broker entry metadata; metadata: + checksum and "
        "message metadata; messages: + payload, batches and values.",
    ),
    verify: bool = typer.Option(
        True, "--verify/--no-verify", help="Verify digests and checksums (on by default)."
    ),
    key: str = typer.Option(None, "--key", help="Only messages with this key."),
    properties: list[str] = typer.Option(
        None,
        "--property",
        metavar="NAME[=VALUE]",
        help="Only messages with this property (and value); repeat: all must match.",
    ),
    producer: str = typer.Option(
        None, "--producer", metavar="NAME", help="Only entries written by this producer."
    ),
    sequence_id: str = typer.Option(
        None,
        "--sequence-id",
        metavar="N|A..B",
        help="Only messages with this producer sequence id, or one in A..B (inclusive).",
    ),
    since: str = typer.Option(
        None,
        "--since",
        metavar="TIME",
        help="Entries at or after TIME: ISO-8601 (no zone: UTC), epoch ms, now, or a "
        "duration before now (100m, 3h, 2d, 1w).",
    ),
    until: str = typer.Option(
        None, "--until", metavar="TIME", help="Entries before TIME, as --since."
    ),
    broker_metadata: BrokerMetadata = typer.Option(
        BrokerMetadata.any,
        "--broker-metadata",
        help="Only entries with, or without, broker entry metadata.",
    ),
    private_key: Path = typer.Option(
        None, "--private-key", metavar="FILE", help="Private key (PEM) to decrypt payloads."
    ),
    passphrase_env: str = PASSPHRASE_ENV,
    passphrase_file: Path = PASSPHRASE_FILE,
    values: ValuesChoice = VALUES,
    where: list[str] = WHERE,
    password_env: str = PASSWORD_ENV,
    password_file: Path = PASSWORD_FILE,
    output: InspectOutput = typer.Option(
        InspectOutput.auto,
        "--output",
        "-o",
        help="table (one line per entry) or tree for people, json or jsonl for machines; "
        "auto is table on a terminal and jsonl when piped; raw writes the stored bytes of "
        "one entry (L:E) for decode or a bug report, never to a terminal.",
    ),
    hexdump: bool = typer.Option(False, "--hex", help="Add a hex dump of every layer."),
    with_hash: bool = typer.Option(
        False,
        "--hash",
        help="Add payload_sha256 to each entry's JSON: the SHA-256 of the entry's payload "
        "(after the bookie header and digest), to compare copies of an entry.",
    ),
    max_message_size: str = MAX_MESSAGE_SIZE,
    quiet: bool = QUIET,
    no_progress: bool = NO_PROGRESS,
    strict: bool = STRICT,
) -> None:
    """Decode the stored entries of a ledger, or of every ledger of a topic.

    Reads the metadata store and the bookie's storage directly; no broker is needed. A
    ledger offloaded to tiered storage (the filesystem offloader's files, the S3 drivers'
    objects) is read from there, found through its managed ledger's offloadContext.
    Exit status 1 when a digest or checksum does not match or an entry cannot be decoded,
    2 on bad input, 3 when a store cannot be opened.
    """
    from pulsarctl_py.decoders import Depth
    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.inspect import read_values
    from pulsarctl_py.inspect_request import InspectRequest, Summary
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.timeparse import check_time_range, parse_time_ms
    from pulsarctl_py.values import Where

    ledger_id, start, end = _where(target, topic, first, last, last_n)
    if output is InspectOutput.raw:
        _raw(start if start == end else None, metadata_url, bookie_dirs)
        return
    since_ms = parse_time_ms(since) if since else None
    until_ms = parse_time_ms(until) if until else None
    check_time_range(since_ms, until_ms)
    key_obj = load_key(private_key, passphrase_env, passphrase_file)
    wheres = [Where.parse(w) for w in where or []]
    if values is ValuesChoice.raw and wheres:
        raise LedgerctlError("--where looks at decoded values: it cannot go with --values raw")
    request = InspectRequest(
        ledger_id=ledger_id,
        topic=topic,
        start=start,
        end=end,
        last_n=last_n,
        limit=limit,
        depth=Depth[depth.name.upper()],
        verify=verify,
        key=key,
        since=since_ms,
        until=until_ms,
        broker_metadata=None
        if broker_metadata is BrokerMetadata.any
        else broker_metadata is BrokerMetadata.with_,
        producer=producer,
        sequence_ids=_sequence_ids(sequence_id) if sequence_id is not None else None,
        properties=[_property(p) for p in properties or []],
        private_key=key_obj,
        where=wheres,
    )
    summary = Summary()
    with LedgerSource.open(
        metadata_url,
        bookie_dirs,
        password(password_env, password_file),
        need_bookie=True,
        live=bookie.client(),
        tiered=True,
    ) as source:
        read_values(source, request, values.value)
        _show(
            source,
            request,
            summary,
            OutputFormat(output.value),
            hexdump,
            with_hash=with_hash,
            quiet=quiet,
            show_progress=progress_wanted(quiet, no_progress),
        )
    if summary.errors or (strict and summary.unverified):
        raise typer.Exit(1)


def _where(
    target: str | None,
    topic: str | None,
    first: str | None,
    last: str | None,
    last_n: int | None,
) -> tuple[int | None, Position | None, Position | None]:
    """The ledger id and the start and end positions the arguments mean."""
    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.positions import (
        Position,
        looks_like_position,
        parse_ledger_id,
        parse_position,
    )

    if (target is None) == (topic is None):
        raise LedgerctlError("give a ledger id (or an entry as L:E), or --topic, not both")
    if target is not None and ":" in target:
        if not looks_like_position(target):
            parse_position(target)  # says what is wrong with it
        at = parse_position(target)
        if first is not None or last is not None or last_n is not None:
            raise LedgerctlError(
                f"{target} names one entry: --from, --to and --last need a ledger id or --topic"
            )
        return at.ledger_id, at, at
    ledger_id = parse_ledger_id(target) if target is not None else None

    def position(text: str | None, flag: str) -> Position | None:
        if text is None:
            return None
        if ":" in text or ledger_id is None:
            if ":" not in text:
                raise LedgerctlError(
                    f"{flag} {text}: on a topic, give a position as L:E (ledger id, entry id), "
                    "for example 12:40"
                )
            return parse_position(text)
        return Position(ledger_id, parse_ledger_id(text, "entry id"))

    start, end = position(first, "--from"), position(last, "--to")
    if ledger_id is not None and start is not None and end is not None:
        # in one ledger the order is known now; on a topic it is the ledger list's
        check_order(start, end)
    return ledger_id, start, end


def check_order(start: Position, end: Position) -> None:
    """Refuse --from after --to in one ledger (exit 2): the range would hold nothing."""
    from pulsarctl_py.inspect import check_position_order

    check_position_order(start, end, None)


def _sequence_ids(text: str) -> tuple[int, int]:
    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.positions import parse_ledger_id

    low, sep, high = text.partition("..")
    first = parse_ledger_id(low, "sequence id")
    last = parse_ledger_id(high, "sequence id") if sep else first
    if last < first:
        raise LedgerctlError(f"--sequence-id {text}: the range ends before it starts")
    return first, last


def _property(text: str) -> tuple[str, str | None]:
    from pulsarctl_py.errors import LedgerctlError

    name, sep, value = text.partition("=")
    if not name:
        raise LedgerctlError(f"--property {text!r}: give NAME or NAME=VALUE")
    return name, value if sep else None


def _raw(at: Position | None, metadata_url: str | None, bookie_dirs: list[Path]) -> None:
    """Write one entry's stored bytes (bookie header and digest included) to stdout."""
    import sys

    from pulsarctl_py.errors import LedgerctlError

    if at is None or at.batch_index is not None:
        raise LedgerctlError(
            "--output raw writes one stored entry: give it as L:E (for example 4:2)"
        )
    if sys.stdout.isatty():
        raise LedgerctlError(
            "--output raw writes binary: redirect it to a file or a pipe "
            f"(ledgerctl inspect {at} -o raw > entry.bin)"
        )
    from pulsarctl_py.inspect import stored_entry

    data = stored_entry(metadata_url, bookie_dirs, at)
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


def _show(
    source,
    request,
    summary,
    output: OutputFormat,
    with_hex: bool,
    *,
    with_hash: bool = False,
    quiet: bool = False,
    show_progress: bool = False,
    fast: bool = True,
) -> None:
    import contextlib

    from pulsarctl_py import render
    from pulsarctl_py.inspect import entry_json, inspect

    fmt = render.resolve(output, OutputFormat.TABLE, piped=OutputFormat.JSONL)
    err = render.stderr_console()
    if show_progress:
        counter = render.progress(err, "reading entries")
    else:
        counter = contextlib.nullcontext(lambda: None)
    on_ledger = None if quiet else (lambda v: render.print_ledger(err, v))
    if fmt is OutputFormat.JSON:
        # streamed: each entry is written as it is decoded, never held for the document
        ledgers: list = []

        def streamed():
            for view, entry in inspect(source, request, summary, ledgers.append, fast=fast):
                yield entry_json(
                    view,
                    entry,
                    with_hex,
                    with_hash,
                    request.entry_values(entry),
                    request.value_mode,
                )
                advance()

        with counter as advance:
            render.write_json_stream(
                "entries",
                streamed(),
                lambda: {"ledgers": [v.to_json() for v in ledgers], "summary": summary.to_json()},
                no_floats=True,  # entries hold no float
            )
        _report(err, summary)
        if not quiet:
            render.print_summary(err, summary)
        return
    if fmt is OutputFormat.JSONL:
        out = render.JsonlOut(no_floats=True)  # entries hold no float
        put, text = out.obj, out.text
        try:
            with counter as advance:
                # at --depth entry a regular entry comes as its JSON line, from its head
                for view, entry in inspect(
                    source, request, summary, fast=fast, lines=not with_hex, hashes=with_hash
                ):
                    if type(entry) is list:  # lines of consecutive entries
                        text("".join(entry))
                        if show_progress:
                            for _ in entry:
                                advance()
                        continue
                    if type(entry) is str:
                        text(entry)
                    else:
                        put(
                            entry_json(
                                view,
                                entry,
                                with_hex,
                                with_hash,
                                request.entry_values(entry),
                                request.value_mode,
                            )
                        )
                    if show_progress:
                        advance()
        finally:
            out.close()
        _report(err, summary)
        if not quiet:
            render.print_summary(err, summary)
        return
    out = render.stdout_console()
    entry_line = render.EntryLines(out)
    with counter as advance:
        for view, entry in inspect(source, request, summary, on_ledger, fast=fast):
            label = f"{view.ledger_id}:{entry.position[1] if entry.position else '?'}"
            if fmt is OutputFormat.TREE:
                out.print(render.entry_tree(entry, label, with_hex, request.entry_values(entry)))
            else:
                entry_line(entry, label, view.lac)
            if entry.problems:
                render.report_problems(err, [(label, _errors_only(entry) if quiet else entry)])
            advance()
    _report(err, summary)
    if not quiet:
        render.print_summary(err, summary)


def _errors_only(entry):
    """A shallow stand-in for ``entry`` with only its error problems (for --quiet)."""
    import types

    return types.SimpleNamespace(problems=[p for p in entry.problems if p.severity == "error"])


def _report(err, summary) -> None:
    from rich.markup import escape

    for problem in summary.problems:
        err.print(f"[red]error[/]: {problem['check']}: {escape(problem['message'])}")
    for note in summary.notes:
        err.print(f"note: {note['check']}: {escape(note['message'])}")


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)
