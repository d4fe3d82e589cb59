"""`ledgerctl demo`: create a Pulsar standalone-style data directory from real client entries."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from pulsarctl_py.render import OutputFormat

if TYPE_CHECKING:
    from pulsarctl_py.demo import DemoSummary, DemoTopic

DEFAULT_DIR = "ledgerctl-demo"


def demo(
    directory: Path = typer.Argument(
        Path(DEFAULT_DIR),
        metavar="DIR",
        help="Where to create the demo data: a new or empty directory (see --force).",
        show_default=True,
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Use a non-empty DIR: replace the demo's own metadata/, bookkeeper/ and "
        "ledgerctl.toml in it, and leave everything else alone.",
    ),
    output: OutputFormat = typer.Option(
        OutputFormat.AUTO,
        "--output",
        "-o",
        help="json or jsonl also writes the summary to stdout for machines; auto does so "
        "when stdout is piped. The summary for people always goes to stderr.",
    ),
) -> None:
    """Create demo data: topics of real Pulsar client entries, stored as Pulsar would store them.

    DIR gets a RocksDB metadata store (metadata/), a bookie's DbLedgerStorage directory
    (bookkeeper/) and a ledgerctl.toml that points ledgerctl at both, so every command run
    in DIR works without connection flags. The topics hold batched and compressed
    messages, tombstones, encrypted and chunked messages, broker entry metadata, a
    partitioned topic, a subscription, a compacted partition and a shadow topic.
    """
    from pulsarctl_py import render
    from pulsarctl_py.demo import create_demo

    summary = create_demo(directory, force=force)
    fmt = render.resolve(output, OutputFormat.TABLE)
    if fmt is OutputFormat.JSON:
        render.write_json(summary.to_json())
    elif fmt is OutputFormat.JSONL:
        render.write_jsonl([summary.to_json()])
    _show(summary, str(directory))


def _show(summary: DemoSummary, shown_dir: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    from pulsarctl_py import render
    from pulsarctl_py.demo import BOOKIE_ID

    err = render.stderr_console()
    err.print(f"Created Pulsar standalone-style demo data in {escape(str(shown_dir))}/:")
    err.print(
        f"  metadata/        RocksDB metadata store ({escape(summary.metadata_url)}): "
        f"{len(summary.topics)} topics, {len(summary.ledgers())} ledgers",
        highlight=False,
    )
    err.print(
        f"  bookkeeper/      bookie {BOOKIE_ID}: {len(summary.entry_logs)} entry logs, "
        "a journal, DbLedgerStorage indexes",
        highlight=False,
    )
    err.print("  ledgerctl.toml   points ledgerctl at both", highlight=False)
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("topic", no_wrap=True)
    table.add_column("ledgers (entries)", no_wrap=True)
    table.add_column("msgs", justify="right", no_wrap=True)
    table.add_column("what", overflow="fold")
    for topic in summary.topics:
        ledgers = ", ".join(
            f"{lg.ledger_id} ({len(lg.entries)}{', open' if lg.state == 'OPEN' else ''})"
            for lg in topic.ledgers
        )
        table.add_row(topic.local_name, ledgers, str(topic.messages), _notes(topic))
    err.print(table)
    err.print(
        f"{len(summary.ledgers())} ledgers, {summary.entry_count} entries, "
        f"{summary.message_count} messages",
        highlight=False,
    )
    err.print(f"Next: {escape(summary.next_command(shown_dir))}", highlight=False)


def _notes(topic: DemoTopic) -> str:
    notes = [topic.description]
    for name, cursor in topic.cursors.items():
        if name != "__compaction":
            notes.append("cursor {} at {}:{}".format(name, *cursor["mark_delete"]))
    if topic.compacted_ledger is not None:
        notes.append(f"compacted into ledger {topic.compacted_ledger.ledger_id}")
    if topic.schema_ledgers:
        notes.append(
            "schema ledgers " + ", ".join(str(lg.ledger_id) for lg in topic.schema_ledgers)
        )
    return "; ".join(notes)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
