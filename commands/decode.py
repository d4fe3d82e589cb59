"""`ledgerctl decode`: decode stored entries given as files, stdin or samples."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import typer

from pulsarctl_py.commands.options import (
    MAX_MESSAGE_SIZE,
    STRICT,
    DepthChoice,
    password,
    private_key_passphrase,
    use_max_message_size,
)
from pulsarctl_py.render import OutputFormat

#: a PEM private key is a few KiB; refuse to read more (``--private-key /dev/zero``)
MAX_KEY_FILE = 1 << 20


class As(enum.StrEnum):
    auto = "auto"
    bookie_entry = "bookie-entry"
    compacted = "compacted"
    pulsar_entry = "pulsar-entry"


class DigestChoice(enum.StrEnum):
    auto = "auto"
    crc32 = "crc32"
    crc32c = "crc32c"
    mac = "mac"
    hmac = "hmac"
    dummy = "dummy"


class InputFormat(enum.StrEnum):
    auto = "auto"
    binary = "binary"
    hex = "hex"
    base64 = "base64"


def decode(
    inputs: list[str] = typer.Argument(
        None,
        metavar="FILE|-",
        help="Entries to decode, one per file ('-' for standard input), as binary, a hex "
        "dump (bookkeeper shell, pulsar-admin, hexdump -C, xxd), plain hex or base64. "
        "Several files are decoded in order and chunked messages are joined across them.",
        show_default=False,
    ),
    outer: As = typer.Option(
        As.auto, "--as", help="The outermost layer of the input; auto detects it."
    ),
    digest_type: DigestChoice = typer.Option(
        DigestChoice.auto,
        "--digest-type",
        help="BookKeeper digest type of a bookie entry; auto tries crc32c, crc32 and "
        "(with a password) mac.",
    ),
    password_env: str = typer.Option(
        None,
        "--password-env",
        metavar="VAR",
        help="Environment variable holding the ledger password (for MAC digests). "
        "Default: LEDGERCTL_LEDGER_PASSWORD when it is set.",
    ),
    password_file: Path = typer.Option(
        None, "--password-file", metavar="FILE", help="File holding the ledger password."
    ),
    private_key: Path = typer.Option(
        None,
        "--private-key",
        metavar="FILE",
        help="The consumer's private key (PEM) to decrypt end-to-end encrypted payloads.",
    ),
    input_format: InputFormat = typer.Option(
        InputFormat.auto, "--input-format", help="How the input files are written."
    ),
    depth: DepthChoice = typer.Option(
        DepthChoice.messages,
        "--depth",
        help="How deep to decode: entry (bookie header and broker entry metadata), "
        "metadata (+ checksum and message metadata) or messages (everything).",
    ),
    output: OutputFormat = typer.Option(
        OutputFormat.AUTO,
        "--output",
        "-o",
        help="tree or table for people, json or jsonl for machines; auto is tree on a "
        "terminal and json when piped.",
    ),
    hexdump: bool = typer.Option(False, "--hex", help="Add a hex dump of every layer."),
    sample: str = typer.Option(
        None,
        "--sample",
        metavar="NAME",
        help="Decode an entry shipped with ledgerctl ('list' names them).",
    ),
    raise_errors: bool = typer.Option(
        False, "--raise", help="Debugging: raise on the first undecodable layer."
    ),
    strict: bool = STRICT,
    max_message_size: str = MAX_MESSAGE_SIZE,
    passphrase_env: str = typer.Option(
        None,
        "--private-key-passphrase-env",
        metavar="VAR",
        help="Environment variable holding the passphrase of an encrypted --private-key.",
    ),
    passphrase_file: Path = typer.Option(
        None,
        "--private-key-passphrase-file",
        metavar="FILE",
        help="File holding the passphrase of an encrypted --private-key.",
    ),
) -> None:
    """Decode stored entries layer by layer and print their messages.

    Exit status 1 when a checksum or digest does not match or a layer cannot be decoded.
    """
    from pulsarctl_py.decode import (
        check_readable,
        decode_sources,
        iter_sources,
        read_capped,
        read_sample,
        samples,
    )
    from pulsarctl_py.decoders import DecodeOptions, Depth, DigestType, Outer
    from pulsarctl_py.decoders.crypto import load_private_key

    if sample == "list":
        for name in samples():
            typer.echo(name)
        return
    use_max_message_size(max_message_size)
    paths = list(inputs or ([] if sample else ["-"]))
    for path in paths:
        check_readable(path)
    key = None
    if private_key is not None:
        pem = read_capped(private_key, MAX_KEY_FILE, "private key")
        key = load_private_key(pem, private_key_passphrase(passphrase_env, passphrase_file))
    options = DecodeOptions(
        outer=Outer(outer.value),
        digest_type=None if digest_type is DigestChoice.auto else DigestType.parse(digest_type),
        password=password(password_env, password_file),
        private_key=key,
        depth=Depth[depth.name.upper()],
        raise_errors=raise_errors,
    )
    sources = iter_sources(paths, input_format.value)
    if sample:
        sources = itertools.chain([read_sample(sample)], sources)
    tally = _show(decode_sources(sources, options), output, hexdump)
    if tally.errors or (strict and tally.unverified):
        raise typer.Exit(1)


def _show(results: Iterable[tuple[str, Any]], output: OutputFormat, with_hex: bool) -> Any:
    """Render entries as they are decoded; problems and a summary go to stderr.

    Return the summary (inspect's: entries, messages, errors, warnings, unverified...).
    """
    from pulsarctl_py import render
    from pulsarctl_py.inspect import Summary

    fmt = render.resolve(output)
    err = render.stderr_console()
    tally = Summary()

    def counted() -> Iterator[tuple[str, Any]]:
        for label, entry in results:
            tally.add(entry)
            render.report_problems(err, [(label, entry)])
            yield label, entry

    if fmt is OutputFormat.JSON:
        # always {"entries": [...], "summary": {...}}, whatever the number of inputs
        render.write_json_stream(
            "entries",
            (dict(render.entry_doc(e, with_hex), input=label) for label, e in counted()),
            lambda: {"summary": dict(tally.to_json(), ok=tally.errors == 0)},
        )
    elif fmt is OutputFormat.JSONL:
        render.write_jsonl(
            dict(render.entry_doc(e, with_hex), input=label) for label, e in counted()
        )
    elif fmt is OutputFormat.TABLE:
        rows = list(counted())  # a table is laid out once all its rows are known
        out = render.stdout_console()
        out.print(render.layers_table(rows, with_hex))
        out.print(render.messages_table(rows))
    else:
        out = render.stdout_console()
        for label, entry in counted():
            out.print(render.entry_tree(entry, label, with_hex))
    err.print(
        f"{tally.entries} entr{'y' if tally.entries == 1 else 'ies'}, "
        f"{tally.messages} messages, {tally.errors + tally.warnings} problems"
        + (f", {tally.unverified} unverified" if tally.unverified else "")
    )
    return tally


def register(app: typer.Typer) -> None:
    app.command("decode")(decode)
