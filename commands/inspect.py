"""`ledgerctl inspect`: decode a ledger's or a topic's stored entries."""

from __future__ import annotations

import enum
from pathlib import Path

import typer

from pulsarctl_py.commands.options import (
    BOOKIE_DIRS,
    METADATA_URL,
    PASSWORD_ENV,
    PASSWORD_FILE,
    STRICT,
    DepthChoice,
    password,
)
from pulsarctl_py.render import OutputFormat


class BrokerMetadata(enum.StrEnum):
    any = "any"
    with_ = "with"
    without = "without"


def inspect(
    ledger: int = typer.Argument(None, metavar="LEDGER", help="Ledger id to read."),
    topic: str = typer.Option(
        None, "--topic", "-t", help="Read every ledger of this topic, in order, instead."
    ),
    metadata_url: str = METADATA_URL,
    bookie_dirs: list[Path] = BOOKIE_DIRS,
    first: int = typer.Option(None, "--from", metavar="ENTRY", help="First entry id."),
    last: int = typer.Option(None, "--to", metavar="ENTRY", help="Last entry id."),
    last_n: int = typer.Option(None, "--last", metavar="N", help="Only the last N entries."),
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
    since: str = typer.Option(
        None, "--since", metavar="TIME", help="Entries at or after TIME (ISO-8601 or epoch ms)."
    ),
    until: str = typer.Option(
        None, "--until", metavar="TIME", help="Entries before TIME (ISO-8601 or epoch ms)."
    ),
    broker_metadata: BrokerMetadata = typer.Option(
        BrokerMetadata.any,
        "--broker-metadata",
        help="Only entries with, or without, broker entry metadata.",
    ),
    private_key: Path = typer.Option(
        None, "--private-key", metavar="FILE", help="Private key (PEM) to decrypt payloads."
    ),
    password_env: str = PASSWORD_ENV,
    password_file: Path = PASSWORD_FILE,
    output: OutputFormat = typer.Option(
        OutputFormat.AUTO,
        "--output",
        "-o",
        help="table (one line per entry) or tree for people, json or jsonl for machines; "
        "auto is table on a terminal and jsonl when piped.",
    ),
    hexdump: bool = typer.Option(False, "--hex", help="Add a hex dump of every layer."),
    strict: bool = STRICT,
) -> None:
    """Decode the stored entries of a ledger, or of every ledger of a topic.

    Reads the metadata store and the bookie's storage directly; no broker is needed.
    Exit status 1 when a digest or checksum does not match or an entry cannot be decoded.
    """
    from pulsarctl_py.decoders import Depth
    from pulsarctl_py.decoders.crypto import load_private_key
    from pulsarctl_py.errors import LedgerctlError
    from pulsarctl_py.inspect import InspectRequest, Summary
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.timeparse import parse_time_ms

    key_obj = None
    if private_key is not None:
        try:
            key_obj = load_private_key(private_key.read_bytes())
        except OSError as exc:
            raise LedgerctlError(f"cannot read private key {private_key}: {exc.strerror}") from None
    request = InspectRequest(
        ledger_id=ledger,
        topic=topic,
        first=first,
        last=last,
        last_n=last_n,
        depth=Depth[depth.name.upper()],
        verify=verify,
        key=key,
        since=parse_time_ms(since) if since else None,
        until=parse_time_ms(until) if until else None,
        broker_metadata=None
        if broker_metadata is BrokerMetadata.any
        else broker_metadata is BrokerMetadata.with_,
        private_key=key_obj,
    )
    summary = Summary()
    with LedgerSource.open(
        metadata_url, bookie_dirs, password(password_env, password_file), need_bookie=True
    ) as source:
        _show(source, request, summary, output, hexdump)
    if summary.errors or (strict and summary.unverified):
        raise typer.Exit(1)


def _show(source, request, summary, output: OutputFormat, with_hex: bool) -> None:
    from pulsarctl_py import render
    from pulsarctl_py.inspect import entry_json, inspect

    fmt = render.resolve(output, OutputFormat.TABLE, piped=OutputFormat.JSONL)
    err = render.stderr_console()
    if fmt is OutputFormat.JSON:
        # streamed: each entry is written as it is decoded, never held for the document
        ledgers: list = []
        render.write_json_stream(
            "entries",
            (
                entry_json(view, entry, with_hex)
                for view, entry in inspect(source, request, summary, ledgers.append)
            ),
            lambda: {"ledgers": [v.to_json() for v in ledgers], "summary": summary.to_json()},
        )
        render.print_summary(err, summary)
        return
    if fmt is OutputFormat.JSONL:
        render.write_jsonl(
            entry_json(view, entry, with_hex) for view, entry in inspect(source, request, summary)
        )
        render.print_summary(err, summary)
        return
    out = render.stdout_console()
    with render.progress(err, "reading entries") as advance:
        for view, entry in inspect(source, request, summary, lambda v: render.print_ledger(err, v)):
            label = f"{view.ledger_id}:{entry.position[1] if entry.position else '?'}"
            if fmt is OutputFormat.TREE:
                out.print(render.entry_tree(entry, label, with_hex))
            else:
                out.print(render.entry_line(entry, label, view.lac))
            render.report_problems(err, [(label, entry)])
            advance()
    render.print_summary(err, summary)


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)
