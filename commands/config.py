"""`ledgerctl config`: every setting a command would use, its value and its source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from pulsarctl_py.commands import options
from pulsarctl_py.render import OutputFormat

#: the write settings' flags as compact --apply and migrate take them (without --force-owned)
_write_flags = options.option_set(
    "write",
    options.WriteFlags,
    {
        "ensemble_size": (int, options.ENSEMBLE_SIZE),
        "write_quorum": (int, options.WRITE_QUORUM),
        "ack_quorum": (int, options.ACK_QUORUM),
        "digest_type": (str, options.DIGEST_TYPE),
        "managed_ledger_password_file": (Path, options.ML_PASSWORD_FILE),
    },
)


@options.metadata_options
@options.bookie_flags
@_write_flags
def config(
    metadata_url: str = options.METADATA_URL,
    bookie_dirs: list[Path] = options.BOOKIE_DIRS,
    bookie: options.BookieFlags = options.BOOKIE,
    password_file: Path = options.PASSWORD_FILE,
    max_message_size: str = options.MAX_MESSAGE_SIZE,
    output: OutputFormat = typer.Option(
        OutputFormat.AUTO,
        "--output",
        "-o",
        help="table for people, json or jsonl for machines; auto is table on a terminal and "
        "json when piped.",
    ),
    write: options.WriteFlags = options.WriteFlags(),
) -> None:
    """Show every setting a command would use, its value, and where it comes from.

    Each setting comes from, first found: the command's flag (this command takes the same
    ones, so 'ledgerctl config --metadata-url URL' shows what a command given that flag
    would use), its environment variable, the nearest ledgerctl.toml in the working
    directory or a directory above it, ~/.config/ledgerctl/config.toml, the broker
    configuration (--broker-conf, $LEDGERCTL_BROKER_CONF or broker_conf: its
    metadataStoreUrl, bookkeeperMetadataServiceUri, maxMessageSize and managed-ledger
    settings, below everything else), then the default. A config file's relative paths are
    relative to it (shown here absolute). Each row also lists the lower sources it
    overrides. Secrets show only whether they are set.
    """
    from rich.markup import escape
    from rich.table import Table

    from pulsarctl_py import precedence, render
    from pulsarctl_py.config import settings

    with precedence.flags(
        bookie_addresses=bookie.bookie_address or None,
        bookie_tls=bookie.bookie_tls,
        bookie_ca_file=bookie.bookie_ca_file,
        bookie_timeout=bookie.bookie_timeout,
        bookie_protocol=bookie.bookie_protocol,
        ensemble_size=write.ensemble_size,
        write_quorum=write.write_quorum,
        ack_quorum=write.ack_quorum,
        digest_type=write.digest_type,
        managed_ledger_password=write.managed_ledger_password_file,
        ledger_password=password_file,
    ):
        rows = settings()
    fmt = render.resolve(output, OutputFormat.TABLE)
    if fmt is OutputFormat.JSON:
        render.write_json(rows)
        return
    if fmt is OutputFormat.JSONL:
        render.write_jsonl(rows)
        return
    table = Table(title="settings (flag > environment > ledgerctl.toml > broker.conf > default)")
    for column in ("setting", "value", "source", "overrides"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            escape(row["setting"]),
            escape(_text(row["value"])),
            escape(row["source"]),
            escape("; ".join(f"{_text(o['value'])} ({o['source']})" for o in row["overrides"])),
        )
    render.print_table(render.stdout_console(), table)


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value)) if value else "-"
    return "-" if value is None else str(value)


def register(app: typer.Typer) -> None:
    app.command("config")(config)
