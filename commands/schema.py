"""`ledgerctl schema list|show`: a topic's schema versions where the broker stores them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from pulsarctl_py.commands.completion import complete_topic
from pulsarctl_py.commands.options import (
    BOOKIE,
    BOOKIE_DIRS,
    METADATA_URL,
    BookieFlags,
    bookie_flags,
    metadata_options,
)
from pulsarctl_py.render import OutputFormat

schema_app = typer.Typer(
    help="A topic's schemas from Pulsar's schema storage: the index in the metadata store "
    "(/schemas/...) and each version's entry in its schema ledger.",
    no_args_is_help=True,
)

OUTPUT = typer.Option(
    OutputFormat.AUTO,
    "--output",
    "-o",
    help="table or tree for people, json or jsonl for machines; auto is a table (list) or "
    "tree (show) on a terminal and json when piped.",
)
TOPIC = typer.Argument(
    ...,
    metavar="TOPIC",
    autocompletion=complete_topic,
    help="The topic (a partition: its topic's schemas).",
)


@schema_app.command("list")
@bookie_flags
@metadata_options
def list_command(
    topic: str = TOPIC,
    metadata_url: str = METADATA_URL,
    bookie_dirs: list[Path] = BOOKIE_DIRS,
    bookie: BookieFlags = BOOKIE,
    output: OutputFormat = OUTPUT,
) -> None:
    """List a topic's schema versions: version, type, deleted, time, where it is stored.

    Exit status 1 when the topic has no schema, or a version cannot be read.
    """
    from pulsarctl_py import render
    from pulsarctl_py.schemas import topic_schemas

    schemas = topic_schemas(topic, metadata_url, bookie_dirs, live=bookie.client())
    fmt = render.resolve(output, OutputFormat.TABLE)
    if fmt is OutputFormat.JSON:
        render.write_json(schemas.to_json(with_definition=False))
    elif fmt is OutputFormat.JSONL:
        render.write_jsonl(s.to_json(with_definition=False) for s in schemas.versions)
    else:
        from rich.table import Table
        from rich.text import Text

        # titles and cells are text: a topic or a problem may hold brackets
        table = Table(title=Text(f"{schemas.topic} ({schemas.path})"))
        for name in ("version", "type", "deleted", "timestamp", "stored at", "problems"):
            table.add_column(name)
        for s in schemas.versions:
            table.add_row(
                str(s.version),
                Text(s.type_name),
                "yes" if s.deleted else "",
                render.iso_ms(s.timestamp) if s.timestamp else "",
                f"{s.ledger_id}:{s.entry_id}",
                Text("; ".join(s.problems)),
                style=None,
            )
        render.stdout_console().print(table)
    _report(schemas)


@schema_app.command("show")
@bookie_flags
@metadata_options
def show_command(
    topic: str = TOPIC,
    version: int = typer.Option(
        None, "--version", "-v", metavar="V", help="This version (default: every version)."
    ),
    metadata_url: str = METADATA_URL,
    bookie_dirs: list[Path] = BOOKIE_DIRS,
    bookie: BookieFlags = BOOKIE,
    output: OutputFormat = OUTPUT,
) -> None:
    """Show a topic's schema versions with their definitions and properties.

    The definition is parsed JSON where it is JSON (AVRO, JSON, PROTOBUF_NATIVE; a
    KEY_VALUE's key and value), and always in definition_base64 as stored. Exit status
    1 when the topic has no schema, the version does not exist, or a version cannot be
    read.
    """
    from pulsarctl_py import render
    from pulsarctl_py.schemas import topic_schemas

    schemas = topic_schemas(topic, metadata_url, bookie_dirs, live=bookie.client(), version=version)
    fmt = render.resolve(output, OutputFormat.TREE)
    if fmt is OutputFormat.JSON:
        render.write_json(schemas.to_json())
    elif fmt is OutputFormat.JSONL:
        render.write_jsonl(s.to_json() for s in schemas.versions)
    else:
        import json

        from rich.markup import escape
        from rich.tree import Tree

        tree = Tree(f"[bold]{escape(schemas.topic)}[/] {escape(schemas.path)}")
        for s in schemas.versions:
            node = tree.add(
                f"[cyan]version {s.version}[/] {escape(s.type_name)}"
                + (" [yellow]deleted[/]" if s.deleted else "")
                + (f" {render.iso_ms(s.timestamp)}" if s.timestamp else "")
                + f" at {s.ledger_id}:{s.entry_id}"
            )
            for name, value in s.properties.items():
                node.add(escape(f"property {name}: {value}"))
            doc = s.to_json()
            if "definition" in doc:
                node.add(escape(json.dumps(doc["definition"], indent=2, ensure_ascii=False)))
            for problem in s.problems:
                node.add(f"[red]{escape(problem)}[/]")
        render.stdout_console().print(tree)
    _report(schemas)


def _report(schemas: Any) -> None:
    from pulsarctl_py import render

    err = render.stderr_console()
    problems = list(schemas.problems) + [
        f"version {s.version}: {p}" for s in schemas.versions for p in s.problems
    ]
    for problem in problems:
        err.print(f"error: {problem}", markup=False, highlight=False)
    if problems:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(schema_app, name="schema")
