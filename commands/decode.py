"""`ledgerctl decode`: decode stored entries given as files, stdin or samples."""

from __future__ import annotations

import enum
from pathlib import Path

import typer

from pulsarctl_py.commands.options import DepthChoice, password
from pulsarctl_py.render import OutputFormat


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
) -> None:
    """Decode stored entries layer by layer and print their messages.

    Exit status 1 when a checksum or digest does not match or a layer cannot be decoded.
    """
    from pulsarctl_py.decode import decode_sources, read_sample, read_source, samples
    from pulsarctl_py.decoders import DecodeOptions, Depth, DigestType, Outer
    from pulsarctl_py.decoders.crypto import load_private_key
    from pulsarctl_py.errors import LedgerctlError

    if sample == "list":
        for name in samples():
            typer.echo(name)
        return
    sources = [read_sample(sample)] if sample else []
    for path in inputs or ([] if sample else ["-"]):
        sources.append(read_source(path, input_format.value))
    key = None
    if private_key is not None:
        try:
            key = load_private_key(private_key.read_bytes())
        except OSError as exc:
            raise LedgerctlError(f"cannot read private key {private_key}: {exc.strerror}") from None
    options = DecodeOptions(
        outer=Outer(outer.value),
        digest_type=None if digest_type is DigestChoice.auto else DigestType.parse(digest_type),
        password=password(password_env, password_file),
        private_key=key,
        depth=Depth[depth.name.upper()],
        raise_errors=raise_errors,
    )
    results = decode_sources(sources, options)
    _show(results, output, hexdump)
    if not all(entry.ok for _, entry in results):
        raise typer.Exit(1)


def _show(results: list, output: OutputFormat, with_hex: bool) -> None:
    from pulsarctl_py import render

    fmt = render.resolve(output)
    if fmt is OutputFormat.JSON:
        docs = [dict(e.to_json(with_hex), input=label) for label, e in results]
        render.write_json(docs[0] if len(docs) == 1 else docs)
        return
    if fmt is OutputFormat.JSONL:
        render.write_jsonl(dict(e.to_json(with_hex), input=label) for label, e in results)
        return
    out = render.stdout_console()
    if fmt is OutputFormat.TABLE:
        out.print(render.layers_table(results))
        out.print(render.messages_table(results))
    else:
        for label, entry in results:
            out.print(render.entry_tree(entry, label, with_hex))
    err = render.stderr_console()
    render.report_problems(err, results)
    messages = sum(len(e.messages) for _, e in results)
    problems = sum(len(e.problems) for _, e in results)
    err.print(
        f"{len(results)} entr{'y' if len(results) == 1 else 'ies'}, "
        f"{messages} messages, {problems} problems"
    )


def register(app: typer.Typer) -> None:
    app.command("decode")(decode)
