"""`ledgerctl config`: the settings commands take when no flag gives them, and their sources."""

from __future__ import annotations

import typer

from pulsarctl_py.render import OutputFormat


def config(
    output: OutputFormat = typer.Option(
        OutputFormat.AUTO,
        "--output",
        "-o",
        help="table for people, json or jsonl for machines; auto is table on a terminal and "
        "json when piped.",
    ),
) -> None:
    """Show each setting commands use when no flag gives it, and where it comes from.

    Settings: the config files read (the nearest ledgerctl.toml in the working directory
    or a directory above it, then ~/.config/ledgerctl/config.toml), the broker
    configuration, the metadata store, where BookKeeper's metadata lives, the bookie
    directories, the maximum message size, and whether ZooKeeper credentials and NO_COLOR
    are set (credentials are never shown). Each source is a flag's environment variable,
    a config file (its relative paths are relative to the file, shown here absolute), the
    broker configuration, or the default. A flag given to a command wins over all of them.
    """
    from rich.markup import escape
    from rich.table import Table

    from pulsarctl_py import render
    from pulsarctl_py.config import settings

    rows = settings()
    fmt = render.resolve(output, OutputFormat.TABLE)
    if fmt is OutputFormat.JSON:
        render.write_json(rows)
        return
    if fmt is OutputFormat.JSONL:
        render.write_jsonl(rows)
        return
    table = Table(title="settings (a command's flags win over these)")
    for column in ("setting", "value", "source"):
        table.add_column(column, overflow="fold")
    for row in rows:
        value = row["value"]
        if isinstance(value, list):
            value = ", ".join(value) if value else "-"
        table.add_row(
            escape(row["setting"]),
            escape("-" if value is None else str(value)),
            escape(row["source"]),
        )
    render.print_table(render.stdout_console(), table)


def register(app: typer.Typer) -> None:
    app.command("config")(config)
