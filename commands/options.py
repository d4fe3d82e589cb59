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
STRICT = typer.Option(
    False,
    "--strict",
    help="Exit 1 also when a digest or checksum could not be verified (a MAC digest "
    "without the ledger password, a DUMMY digest).",
)
PASSWORD_FILE = typer.Option(
    None, "--password-file", metavar="FILE", help="File holding the ledger password."
)


def password(env: str | None, file: Path | None) -> bytes | None:
    """The ledger password from a variable or a file (never from a flag value)."""
    from pulsarctl_py.secrets import LEDGER_PASSWORD_ENV, secret_from

    secret = secret_from(env, file, LEDGER_PASSWORD_ENV)
    return secret.reveal() if secret is not None else None


def private_key_passphrase(env: str | None, file: Path | None) -> bytes | None:
    """The passphrase of an encrypted private key, from a variable or a file."""
    from pulsarctl_py.secrets import secret_from

    secret = secret_from(env, file)
    return secret.reveal() if secret is not None else None
