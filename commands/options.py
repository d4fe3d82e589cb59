"""Options shared by the commands that read ledgers where they live."""

from __future__ import annotations

import enum
from pathlib import Path

import typer


class DepthChoice(enum.StrEnum):
    """How deep to decode (decoders.Depth by name)."""

    entry = "entry"
    metadata = "metadata"
    messages = "messages"

METADATA_URL = typer.Option(
    None,
    "--metadata-url",
    metavar="URL",
    help="Metadata store in Pulsar's syntax: zk:host:2181,host2:2181/chroot (more hosts and "
    "the chroot optional) or rocksdb://path. Default: $LEDGERCTL_METADATA_URL or "
    "metadata_url in ./ledgerctl.toml.",
)
BOOKIE_DIRS = typer.Option(
    None,
    "--bookie-dir",
    metavar="DIR",
    help="A bookie's data directory (its ledger dir, or the folder holding ledgers/ and "
    "journal/); repeat for several. Default: $LEDGERCTL_BOOKIE_DIRS or bookie_dirs in "
    "./ledgerctl.toml.",
)
PASSWORD_ENV = typer.Option(
    None,
    "--password-env",
    metavar="VAR",
    help="Environment variable holding the ledger password, overriding the one in the "
    "ledger metadata. Default: LEDGERCTL_LEDGER_PASSWORD when it is set.",
)
PASSWORD_FILE = typer.Option(
    None, "--password-file", metavar="FILE", help="File holding the ledger password."
)


def password(env: str | None, file: Path | None) -> bytes | None:
    """The ledger password from a variable or a file (never from a flag value)."""
    from pulsarctl_py.secrets import LEDGER_PASSWORD_ENV, secret_from

    secret = secret_from(env, file, LEDGER_PASSWORD_ENV)
    return secret.reveal() if secret is not None else None


QUIET = typer.Option(
    False,
    "--quiet",
    "-q",
    help="Only the data and the errors: no headers, summary, warnings or progress line.",
)
NO_PROGRESS = typer.Option(
    False,
    "--no-progress",
    help="No progress line on stderr (it is shown only when stderr is a terminal and the "
    "output goes to a file or pipe).",
)


def progress_wanted(quiet: bool, no_progress: bool) -> bool:
    """A live progress line only helps when the output is not on the same terminal.

    Lines written to a terminal stdout while a live line redraws on its stderr tear that
    line apart; those lines are progress enough. So: stderr a terminal, stdout not.
    """
    import sys

    return not (quiet or no_progress) and sys.stderr.isatty() and not sys.stdout.isatty()
