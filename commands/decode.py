"""`ledgerctl decode`: decode stored entries given as files, stdin or samples."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import typer

from pulsarctl_py.commands.options import (
    BOOKIE,
    BOOKIE_DIRS,
    MAX_MESSAGE_SIZE,
    METADATA_URL,
    STRICT,
    BookieFlags,
    DepthChoice,
    ValuesChoice,
    bookie_flags,
    metadata_options,
    password,
    private_key_passphrase,
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


@bookie_flags
@metadata_options
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
        "Default: $LEDGERCTL_LEDGER_PASSWORD, else the file that ledger_password_file in "
        "the nearest ledgerctl.toml names.",
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
    values: ValuesChoice = typer.Option(
        ValuesChoice.auto,
        "--values",
        help="Message values: raw (the bytes, base64 in JSON), decoded (by the schema "
        "version each message names; the bytes only where a value is not decoded) or "
        "both; auto is both when --schema or --schema-topic is given, else raw.",
    ),
    schema_files: list[Path] = typer.Option(
        None,
        "--schema",
        metavar="FILE",
        help="A schema to decode values with: the JSON `pulsar-admin schemas get TOPIC` "
        "prints (version and schemaInfo), a SchemaInfo (type, schema, properties: it "
        "decodes every message, whatever version it names), or the admin REST API's "
        "schema (one version, or all of them); repeat for several versions.",
    ),
    schema_topic: str = typer.Option(
        None,
        "--schema-topic",
        metavar="TOPIC",
        help="Decode values with this topic's schemas, read from Pulsar's schema storage "
        "(the metadata store and the schema ledgers: --metadata-url and --bookie-dir or "
        "the running bookies, as inspect reads them).",
    ),
    metadata_url: str = METADATA_URL,
    bookie_dirs: list[Path] = BOOKIE_DIRS,
    bookie: BookieFlags = BOOKIE,
) -> None:
    """Decode stored entries layer by layer and print their messages.

    With a schema (--schema FILE or --schema-topic TOPIC) every message's value is also
    decoded with the schema version it names, as inspect decodes it: in JSON each
    message gains schema_version, schema_type and value_decoded. Exit status 1 when a
    checksum or digest does not match, a layer cannot be decoded, or a value does not
    decode with its schema.
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
    schemas, mode = _values(
        values, schema_files, schema_topic, metadata_url, bookie_dirs, bookie, options.depth
    )
    sources = iter_sources(paths, input_format.value)
    if sample:
        sources = itertools.chain([read_sample(sample)], sources)
    tally = _show(decode_sources(sources, options), output, hexdump, schemas, mode)
    if tally.errors or (strict and tally.unverified):
        raise typer.Exit(1)


def _values(
    values: ValuesChoice,
    schema_files: list[Path] | None,
    schema_topic: str | None,
    metadata_url: str | None,
    bookie_dirs: list[Path] | None,
    bookie: BookieFlags,
    depth: Any,
) -> tuple[Any, str]:
    """The schemas to decode values with (pulsarctl_py.values.Values, or None) and the
    value mode ("both", "decoded" or "raw"); usage errors said before any input is read."""
    from pulsarctl_py.decoders import Depth
    from pulsarctl_py.errors import LedgerctlError as UsageError

    given = bool(schema_files) or schema_topic is not None
    if schema_files and schema_topic is not None:
        raise UsageError("give --schema FILE or --schema-topic TOPIC, not both")
    if schema_topic is None and (metadata_url or bookie_dirs or bookie != BookieFlags()):
        raise UsageError(
            "--metadata-url, --bookie-dir and the bookie flags say where --schema-topic's "
            "schemas are: give --schema-topic TOPIC"
        )
    if values is ValuesChoice.raw:
        if given:
            raise UsageError("--values raw decodes no value: drop --schema/--schema-topic")
        return None, "raw"
    if not given:
        if values is ValuesChoice.auto:
            return None, "raw"
        raise UsageError(
            f"--values {values.value} needs a schema: give --schema FILE (what "
            "`pulsar-admin schemas get TOPIC` prints) or --schema-topic TOPIC"
        )
    if depth is not Depth.MESSAGES:
        raise UsageError("decoded values need --depth messages")
    mode = "decoded" if values is ValuesChoice.decoded else "both"
    if schema_files:
        from pulsarctl_py.schema_files import schema_file_values

        return schema_file_values(schema_files), mode
    from pulsarctl_py.ledgers import LedgerSource
    from pulsarctl_py.values import values_for

    with LedgerSource.open(
        metadata_url, bookie_dirs, need_metadata=True, live=bookie.client()
    ) as source:
        return values_for(source, schema_topic, required=True), mode


def _show(
    results: Iterable[tuple[str, Any]],
    output: OutputFormat,
    with_hex: bool,
    values: Any = None,
    mode: str = "raw",
) -> Any:
    """Render entries as they are decoded; problems and a summary go to stderr. With
    ``values`` (pulsarctl_py.values.Values) every message's value is decoded by its
    schema version, shown as inspect shows it (``mode``: "both" or "decoded").

    Return the summary (inspect's: entries, messages, errors, warnings, unverified...).
    """
    from pulsarctl_py import render
    from pulsarctl_py.inspect import add_values, decode_values
    from pulsarctl_py.inspect_request import Summary

    fmt = render.resolve(output)
    err = render.stderr_console()
    tally = Summary()
    decoded: dict[int, list[Any]] = {}

    def counted() -> Iterator[tuple[str, Any]]:
        for label, entry in results:
            if values is not None:
                # before the tally: a value that does not decode is a problem of the entry
                decoded[id(entry)] = decode_values(entry, values)
            tally.add(entry)
            render.report_problems(err, [(label, entry)])
            yield label, entry

    def doc(label: str, entry: Any) -> dict[str, Any]:
        out = dict(render.entry_doc(entry, with_hex), input=label)
        got = decoded.pop(id(entry), None)
        if got is not None:
            add_values(out, got, mode)
        return out

    if fmt is OutputFormat.JSON:
        # always {"entries": [...], "summary": {...}}, whatever the number of inputs
        render.write_json_stream(
            "entries",
            (doc(label, e) for label, e in counted()),
            lambda: {"summary": dict(tally.to_json(), ok=tally.errors == 0)},
        )
    elif fmt is OutputFormat.JSONL:
        render.write_jsonl(doc(label, e) for label, e in counted())
    elif fmt is OutputFormat.TABLE:
        rows = list(counted())  # a table is laid out once all its rows are known
        out = render.stdout_console()
        out.print(render.layers_table(rows, with_hex))
        out.print(render.messages_table(rows, decoded if values is not None else None))
    else:
        out = render.stdout_console()
        for label, entry in counted():
            out.print(render.entry_tree(entry, label, with_hex, decoded.pop(id(entry), None)))
    err.print(
        f"{tally.entries} entr{'y' if tally.entries == 1 else 'ies'}, "
        f"{tally.messages} messages, {tally.errors + tally.warnings} problems"
        + (f", {tally.unverified} unverified" if tally.unverified else "")
    )
    return tally


def register(app: typer.Typer) -> None:
    app.command("decode")(decode)
