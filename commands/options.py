"""Options shared by the commands that read ledgers where they live."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

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


# -- running bookies (pulsarctl_py.stores.live) ------------------------------------------

BOOKIE_ADDRESS = typer.Option(
    None,
    "--bookie-address",
    metavar="ID=HOST:PORT",
    help="Reach the bookie named ID in ledger metadata at HOST:PORT instead (NAT, port "
    "forwards); repeat for several. Default: $LEDGERCTL_BOOKIE_ADDRESSES.",
)
BOOKIE_TLS = typer.Option(
    None,
    "--bookie-tls/--no-bookie-tls",
    help="Talk TLS to bookies (BookKeeper's START_TLS). Default: $LEDGERCTL_BOOKIE_TLS.",
)
BOOKIE_CA_FILE = typer.Option(
    None,
    "--bookie-ca-file",
    metavar="FILE",
    help="PEM file of the CA that signed the bookies' certificates (implies --bookie-tls). "
    "Default: $LEDGERCTL_BOOKIE_CA_FILE, else the system CAs.",
)
BOOKIE_TIMEOUT = typer.Option(
    None,
    "--bookie-timeout",
    metavar="SECONDS",
    help="How long a bookie may stay silent before it counts as down. Default: "
    "$LEDGERCTL_BOOKIE_TIMEOUT or 5.",
)
BOOKIE_PROTOCOL = typer.Option(
    None,
    "--bookie-protocol",
    metavar="v3|v2",
    help="Wire protocol: v3 (protobuf, the default) or v2 for old bookies. Default: "
    "$LEDGERCTL_BOOKIE_PROTOCOL or v3.",
)


def client_options(
    addresses: list[str] | None,
    tls: bool | None,
    ca_file: Path | None,
    timeout: float | None,
    protocol: str | None,
) -> Any:
    """The bookie client options from the flags above, then the environment."""
    from pulsarctl_py.stores.live.config import resolve_client_options

    return resolve_client_options(
        addresses=addresses, tls=tls, ca_file=ca_file, timeout=timeout, protocol=protocol
    )
