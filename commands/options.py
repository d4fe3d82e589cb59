"""Options shared by the commands that read ledgers where they live."""

from __future__ import annotations

import enum
import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import typer

Command = TypeVar("Command", bound=Callable[..., Any])


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
    "the chroot optional) or rocksdb://path. Default: $LEDGERCTL_METADATA_URL, "
    "metadata_url in the nearest ledgerctl.toml (then ~/.config/ledgerctl/config.toml), "
    "else the broker configuration's metadataStoreUrl.",
)
BOOKIE_DIRS = typer.Option(
    None,
    "--bookie-dir",
    metavar="DIR",
    help="A bookie's data directory (its ledger dir, or the folder holding ledgers/ and "
    "journal/); repeat for several. Default: $LEDGERCTL_BOOKIE_DIRS, bookie_dirs in "
    "the nearest ledgerctl.toml (then the user's), else none: the running bookies.",
)
PASSWORD_ENV = typer.Option(
    None,
    "--password-env",
    metavar="VAR",
    help="Environment variable holding the ledger password, overriding the one in the "
    "ledger metadata. Default: $LEDGERCTL_LEDGER_PASSWORD, else the file that "
    "ledger_password_file in the nearest ledgerctl.toml names.",
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
ACCEPT_DAMAGE = typer.Option(
    False,
    "--accept-damage",
    help="Copy damaged entries (a digest or checksum that does not match, metadata or a "
    "payload that does not decode) as the broker copies them, and list them, instead of "
    "refusing at the first one.",
)


def damage_note(damaged: list[dict[str, str]], count: int) -> None:
    """Damaged entries gone on past (--accept-damage), one line each on stderr (the first
    ten; the report and the plan list them all)."""
    from pulsarctl_py import render

    err = render.stderr_console()
    for d in damaged[:10]:
        err.print(f"error: damaged {d['position']}: {d['problem']}", markup=False, highlight=False)
    if count > 10:
        err.print(f"error: {count - 10} more damaged entries", markup=False, highlight=False)


def password(env: str | None, file: Path | None) -> bytes | None:
    """The ledger password of ``--password-env`` / ``--password-file`` (never from a flag
    value): :func:`pulsarctl_py.config.resolve_ledger_password`."""
    from pulsarctl_py.config import resolve_ledger_password

    return resolve_ledger_password(env, file)


def option_set(
    param: str, make: Callable[..., Any], fields: Mapping[str, tuple[Any, Any]]
) -> Callable[[Command], Command]:
    """A decorator giving a command a set of options, after its own parameters.

    ``fields`` maps each parameter name to ``(type, typer.Option(...))``, in the order the
    help lists them; the command takes none of them itself but a parameter ``param``, which
    receives ``make(**values)``. The CLI sees exactly the options written out one by one.
    """

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command)
        own = [p for name, p in signature.parameters.items() if name != param]
        added = [
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation
            )
            for name, (annotation, option) in fields.items()
        ]

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {name: kwargs.pop(name) for name in fields}
            return command(*args, **kwargs, **{param: make(**values)})

        annotations = {k: v for k, v in command.__annotations__.items() if k != param}
        wrapper.__annotations__ = annotations | {n: t for n, (t, _) in fields.items()}
        wrapper.__signature__ = signature.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


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
#
# One flag set for every command that reads ledgers: a command declares one parameter,
# ``bookie: BookieFlags = BOOKIE``, and is wrapped by :func:`bookie_flags`, which puts the
# flags below in that parameter's place and hands the command their values as one object.
# Precedence: a flag, its environment variable, the key of the same name in ledgerctl.toml,
# then the default (pulsarctl_py.precedence); a client certificate for mutual TLS comes only
# from the environment (LEDGERCTL_BOOKIE_TLS_CERT_FILE / _KEY_FILE / _KEY_PASSWORD).

BOOKIE_ADDRESS = typer.Option(
    None,
    "--bookie-address",
    metavar="ID=HOST:PORT",
    help="Reach the bookie named ID in ledger metadata at HOST:PORT instead (NAT, port "
    "forwards); repeat for several. Default: $LEDGERCTL_BOOKIE_ADDRESSES (comma-separated), "
    "else bookie_addresses in ledgerctl.toml.",
)
BOOKIE_TLS = typer.Option(
    None,
    "--bookie-tls/--no-bookie-tls",
    help="Talk TLS to bookies (BookKeeper's START_TLS); the certificate must chain to the CA "
    "and name the bookie id's host. Default: $LEDGERCTL_BOOKIE_TLS, bookie_tls in "
    "ledgerctl.toml, else off (on with a CA file).",
    show_default=False,
)
BOOKIE_CA_FILE = typer.Option(
    None,
    "--bookie-ca-file",
    metavar="PATH",
    help="PEM file of the CA that signed the bookies' certificates (implies --bookie-tls). "
    "Default: $LEDGERCTL_BOOKIE_CA_FILE, bookie_ca_file in ledgerctl.toml, else the system "
    "CAs.",
)
BOOKIE_TIMEOUT = typer.Option(
    None,
    "--bookie-timeout",
    metavar="SECONDS",
    help="How long a bookie may stay silent before it counts as down. Default: "
    "$LEDGERCTL_BOOKIE_TIMEOUT, bookie_timeout in ledgerctl.toml, else 5.",
)
BOOKIE_PROTOCOL = typer.Option(
    None,
    "--bookie-protocol",
    metavar="v3|v2|auto",
    help="Wire protocol: v3 (protobuf), v2 for old bookies, or auto (v3, then v2 for a "
    "bookie that does not answer v3). Default: $LEDGERCTL_BOOKIE_PROTOCOL, bookie_protocol "
    "in ledgerctl.toml, else v3.",
)

#: the flags :func:`bookie_flags` adds, by parameter name
_BOOKIE_FLAGS: dict[str, tuple[Any, Any]] = {
    "bookie_address": (list[str], BOOKIE_ADDRESS),
    "bookie_tls": (bool, BOOKIE_TLS),
    "bookie_ca_file": (Path, BOOKIE_CA_FILE),
    "bookie_timeout": (float, BOOKIE_TIMEOUT),
    "bookie_protocol": (str, BOOKIE_PROTOCOL),
}


@dataclass(frozen=True)
class BookieFlags:
    """The values of the bookie flags as given (None: not given)."""

    bookie_address: list[str] | None = None
    bookie_tls: bool | None = None
    bookie_ca_file: Path | None = None
    bookie_timeout: float | None = None
    bookie_protocol: str | None = None

    def client(self) -> Any:
        """The client options: these flags, then the environment, then the defaults."""
        from pulsarctl_py.stores.live.config import resolve_client_options

        return resolve_client_options(
            addresses=self.bookie_address,
            tls=self.bookie_tls,
            ca_file=self.bookie_ca_file,
            timeout=self.bookie_timeout,
            protocol=self.bookie_protocol,
        )


#: the default of a command's ``bookie`` parameter (replaced by :func:`bookie_flags`)
BOOKIE = BookieFlags()

F = TypeVar("F", bound=Callable[..., Any])


def _signed(
    wrapper: Any, sig: inspect.Signature, params: list[inspect.Parameter], hints: dict[str, Any]
) -> Any:
    """``wrapper`` with the signature and annotations Typer reads: ``params`` (their
    annotations resolved) and the command's return annotation."""
    wrapper.__signature__ = sig.replace(parameters=params)
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    if "return" in hints:
        wrapper.__annotations__["return"] = hints["return"]
    return wrapper


def bookie_flags(command: F) -> F:
    """Give ``command`` the bookie flag set in place of its ``bookie`` parameter.

    Typer reads the wrapper's signature, so ``--help`` lists the flags where the
    parameter stands; the command receives one :class:`BookieFlags`.
    """
    hints = typing.get_type_hints(command)
    sig = inspect.signature(command)
    params: list[inspect.Parameter] = []
    for param in sig.parameters.values():
        if param.name == "bookie":
            params += [
                inspect.Parameter(name, param.kind, default=default, annotation=kind)
                for name, (kind, default) in _BOOKIE_FLAGS.items()
            ]
        else:
            params.append(param.replace(annotation=hints.get(param.name, param.annotation)))
    if len(params) == len(sig.parameters):
        raise TypeError(f"{command.__name__} has no 'bookie' parameter")

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name, None) for name in _BOOKIE_FLAGS}
        return command(*args, bookie=BookieFlags(**values), **kwargs)

    return _signed(wrapper, sig, params, hints)


PASSPHRASE_ENV = typer.Option(
    None,
    "--private-key-passphrase-env",
    metavar="VAR",
    help="Environment variable holding the passphrase of an encrypted --private-key.",
)
PASSPHRASE_FILE = typer.Option(
    None,
    "--private-key-passphrase-file",
    metavar="FILE",
    help="File holding the passphrase of an encrypted --private-key.",
)


class ValuesChoice(enum.StrEnum):
    auto = "auto"
    both = "both"
    decoded = "decoded"
    raw = "raw"


VALUES = typer.Option(
    ValuesChoice.auto,
    "--values",
    help="Message values: raw (the bytes, base64 in JSON), decoded (by the topic's schema "
    "version each message names; the bytes only where a value is not decoded) or both; "
    "auto is both when the topic has a schema, else raw.",
)
WHERE = typer.Option(
    None,
    "--where",
    metavar="FIELD=VALUE",
    help="Only messages whose decoded value has this field value (dot path: "
    "order.id=42; FIELD!=VALUE excludes); repeat: all must match.",
)
#: a PEM private key is a few KiB; refuse to read more (``--private-key /dev/zero``)
MAX_KEY_FILE = 1 << 20


def load_key(path: Path | None, passphrase_env: str | None, passphrase_file: Path | None) -> Any:
    """The consumer's private key from ``--private-key`` (None without it)."""
    if path is None:
        if passphrase_env or passphrase_file:
            from pulsarctl_py.errors import LedgerctlError

            raise LedgerctlError("a private key passphrase needs --private-key")
        return None
    from pulsarctl_py.decode import read_capped
    from pulsarctl_py.decoders.crypto import load_private_key

    pem = read_capped(path, MAX_KEY_FILE, "private key")
    return load_private_key(pem, private_key_passphrase(passphrase_env, passphrase_file))


def private_key_passphrase(env: str | None, file: Path | None) -> bytes | None:
    """The passphrase of an encrypted private key, from a variable or a file."""
    from pulsarctl_py.secrets import secret_from

    secret = secret_from(env, file)
    return secret.reveal() if secret is not None else None


# -- the maximum message size (pulsarctl_py.limits) ---------------------------------------

#: the per-command spelling kept on inspect and decode (where the flag was first); the same
#: setting as ``ledgerctl --max-message-size``, which every command takes. The command does
#: not read it: ``pulsarctl_py.cli`` resolves and applies the setting before it runs
MAX_MESSAGE_SIZE = typer.Option(
    None,
    "--max-message-size",
    metavar="BYTES",
    help="The largest message accepted (5MiB, 512m or bytes): a larger uncompressed_size "
    "or joined chunked message is reported as an error, not allocated. The same as "
    "'ledgerctl --max-message-size'. Default: $LEDGERCTL_MAX_MESSAGE_SIZE, "
    "max_message_size in ledgerctl.toml, the broker configuration's maxMessageSize, else "
    "the broker's default, 5MiB.",
    show_default=False,
)


def parse_size(text: str | None, flag: str, default: int) -> int:
    """``5MiB``, ``512m``, ``1g`` or plain bytes -> bytes; None -> ``default``."""
    if text is None:
        return default
    from pulsarctl_py.limits import parse_size as parse

    try:
        return parse(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=flag) from None


# -- where the metadata lives (pulsarctl_py.stores.metadata.url) --------------------------
#
# Next to --metadata-url on every command that has it: where BookKeeper's metadata lives
# when the broker keeps it elsewhere (bookkeeperMetadataServiceUri), and a broker.conf to
# take both places (and the broker's ledger settings) from, below any flag, variable or
# config file that sets them (pulsarctl_py.precedence). A command is wrapped by
# :func:`metadata_options`; the library resolves the flags as it resolves the environment
# variables, one step ahead of them.

BOOKKEEPER_METADATA_URL = typer.Option(
    None,
    "--bookkeeper-metadata-url",
    metavar="URL",
    help="Where BookKeeper's metadata (ledgers, bookies) lives when the broker's "
    "bookkeeperMetadataServiceUri puts it outside /ledgers of the metadata store: "
    "zk+hierarchical://host:2181/path/ledgers or zk:host:2181/path/ledgers. Default: "
    "$LEDGERCTL_BOOKKEEPER_METADATA_URL, bookkeeper_metadata_url in the nearest "
    "ledgerctl.toml, the broker configuration's bookkeeperMetadataServiceUri, else /ledgers "
    "of the metadata store. Refused when it holds another cluster's ledgers.",
)
BROKER_CONF = typer.Option(
    None,
    "--broker-conf",
    metavar="FILE",
    help="A broker's broker.conf: its metadataStoreUrl, bookkeeperMetadataServiceUri, "
    "maxMessageSize and managed-ledger settings serve where no flag, environment variable "
    "or ledgerctl.toml sets them (these rank above the file, even when it is given here). "
    "Default: $LEDGERCTL_BROKER_CONF or broker_conf in the nearest ledgerctl.toml.",
)

_METADATA_FLAGS: dict[str, tuple[Any, Any]] = {
    "bookkeeper_metadata_url": (str, BOOKKEEPER_METADATA_URL),
    "broker_conf": (Path, BROKER_CONF),
}


def metadata_options(command: F) -> F:
    """Give ``command`` --bookkeeper-metadata-url and --broker-conf after its --metadata-url.

    The command itself takes neither: it runs with them, its --metadata-url and its
    --bookie-dir in effect for every setting the library resolves
    (:func:`pulsarctl_py.precedence.flags`).
    """
    sig = inspect.signature(command)
    hints = typing.get_type_hints(command)
    params: list[inspect.Parameter] = []
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind)
        for name, (kind, default) in _METADATA_FLAGS.items()
    ]
    for param in sig.parameters.values():
        params.append(param.replace(annotation=hints.get(param.name, param.annotation)))
        if param.name == "metadata_url":
            params += [p.replace(kind=param.kind) for p in added]
    if len(params) == len(sig.parameters):
        raise TypeError(f"{command.__name__} has no 'metadata_url' parameter")

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from pulsarctl_py import precedence

        url = kwargs.pop("bookkeeper_metadata_url", None)
        conf = kwargs.pop("broker_conf", None)
        with precedence.flags(
            metadata_url=kwargs.get("metadata_url"),
            bookie_dirs=kwargs.get("bookie_dirs") or None,
            bookkeeper_metadata_url=url or None,
            broker_conf=None if conf is None else str(conf),
        ):
            return command(*args, **kwargs)

    return _signed(wrapper, sig, params, hints)


# -- how new ledgers are written (pulsarctl_py.writesettings) -------------------------------
#
# The verbs that write ledgers (compact --apply, migrate) take the cluster's settings from
# --broker-conf; these flags, their variables and ledgerctl.toml override single values
# (pulsarctl_py.precedence). The managed-ledger password is a secret: from
# $LEDGERCTL_MANAGED_LEDGER_PASSWORD or a file, never a flag's value.

ENSEMBLE_SIZE = typer.Option(
    None,
    "--ensemble-size",
    metavar="N",
    help="Bookies per new ledger. Default: $LEDGERCTL_ENSEMBLE_SIZE, ensemble_size in "
    "ledgerctl.toml, managedLedgerDefaultEnsembleSize of the broker configuration, else "
    "Pulsar's default (2). One stopped bookie (--bookie-dir) holds a ledger alone: 1.",
)
WRITE_QUORUM = typer.Option(
    None,
    "--write-quorum",
    metavar="N",
    help="Copies of each entry. Default: $LEDGERCTL_WRITE_QUORUM, write_quorum in "
    "ledgerctl.toml, managedLedgerDefaultWriteQuorum of the broker configuration, else 2.",
)
ACK_QUORUM = typer.Option(
    None,
    "--ack-quorum",
    metavar="N",
    help="Copies acknowledged before an entry counts as written. Default: "
    "$LEDGERCTL_ACK_QUORUM, ack_quorum in ledgerctl.toml, managedLedgerDefaultAckQuorum of "
    "the broker configuration, else 2.",
)
DIGEST_TYPE = typer.Option(
    None,
    "--digest-type",
    metavar="crc32c|crc32|mac|dummy",
    help="Digest of new data ledgers. Default: $LEDGERCTL_DIGEST_TYPE, digest_type in "
    "ledgerctl.toml, managedLedgerDigestType of the broker configuration, else crc32c.",
)
ML_PASSWORD_FILE = typer.Option(
    None,
    "--managed-ledger-password-file",
    metavar="FILE",
    help="File holding the managed-ledger password new data ledgers get (the broker's "
    "managedLedgerPassword). Default: $LEDGERCTL_MANAGED_LEDGER_PASSWORD, the file "
    "managed_ledger_password_file in ledgerctl.toml names, the broker configuration's, else "
    "none.",
)
ADMIN_URL = typer.Option(
    None,
    "--admin-url",
    metavar="URL",
    help="A broker's admin (web service) URL, http://host:8080 or https://host:8443, to ask "
    "whether it has the topic loaded; repeat it (or separate URLs with commas) for every "
    "broker. Default: $LEDGERCTL_ADMIN_URL, admin_url in the nearest ledgerctl.toml, else "
    "every broker registered in the metadata store. TLS CA, client certificate and token "
    "only from $LEDGERCTL_ADMIN_TLS_CA_FILE, $LEDGERCTL_ADMIN_TLS_CERT_FILE / _KEY_FILE, "
    "$LEDGERCTL_ADMIN_TOKEN or $LEDGERCTL_ADMIN_TOKEN_FILE.",
)
FORCE_OWNED = typer.Option(
    False,
    "--force-owned",
    help="Write even when the brokers cannot be asked whether they have the topic loaded "
    "(registered, but none answers: said as a warning). A broker that has it loaded may "
    "overwrite the change or keep serving the old state. A topic a broker says it has "
    "loaded is refused all the same: --unload.",
)
UNLOAD = typer.Option(
    False,
    "--unload",
    help="Unload the topics through the broker's admin API (a shadow topic's source too) "
    "and write in that window, with compare-and-set; keys the unload rewrote without "
    "changing what they mean for the plan are rebased and said; afterwards a broker that "
    "loaded the old state meanwhile is made to read it again. Without it a write to a topic "
    "a broker has loaded is refused (exit 4).",
)


def live_options(command: F) -> F:
    """Give ``command`` --unload and --admin-url (and --force-owned unless it has one),
    and run it with them in effect (:func:`pulsarctl_py.livewrite.flags`, the admin URL
    as a flag of :mod:`pulsarctl_py.precedence`)."""
    sig = inspect.signature(command)
    hints = typing.get_type_hints(command)
    params = [
        p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()
    ]
    own_force = "force_owned" in sig.parameters
    added = [
        inspect.Parameter(
            "unload", inspect.Parameter.KEYWORD_ONLY, default=UNLOAD, annotation=bool
        ),
        inspect.Parameter(
            "admin_url",
            inspect.Parameter.KEYWORD_ONLY,
            default=ADMIN_URL,
            annotation=typing.Optional[list[str]],  # noqa: UP045 (typer reads it)
        ),
    ]
    if not own_force:
        added.append(
            inspect.Parameter(
                "force_owned", inspect.Parameter.KEYWORD_ONLY, default=FORCE_OWNED, annotation=bool
            )
        )

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from pulsarctl_py import livewrite, precedence

        unload = bool(kwargs.pop("unload", False))
        admin = kwargs.pop("admin_url", None) or None
        force = bool(kwargs.get("force_owned") if own_force else kwargs.pop("force_owned", False))
        with (
            precedence.flags(admin_url=admin),
            livewrite.flags(unload=unload, force_owned=force),
        ):
            return command(*args, **kwargs)

    return _signed(wrapper, sig, [*params, *added], hints)


@dataclass(frozen=True)
class WriteFlags:
    """The write-settings flags as given (None: not given) and --force-owned."""

    ensemble_size: int | None = None
    write_quorum: int | None = None
    ack_quorum: int | None = None
    digest_type: str | None = None
    managed_ledger_password_file: Path | None = None
    force_owned: bool = False

    def settings(self) -> Any:
        """The settings: these flags, their variables, the config files, the broker
        configuration, then the defaults."""
        from pulsarctl_py.writesettings import resolve_write_settings

        return resolve_write_settings(
            ensemble=self.ensemble_size,
            write_quorum=self.write_quorum,
            ack_quorum=self.ack_quorum,
            digest=self.digest_type,
            password_file=self.managed_ledger_password_file,
        )


_QUORUM_FLAGS: dict[str, tuple[Any, Any]] = {
    "ensemble_size": (int, ENSEMBLE_SIZE),
    "write_quorum": (int, WRITE_QUORUM),
    "ack_quorum": (int, ACK_QUORUM),
}
_DATA_FLAGS: dict[str, tuple[Any, Any]] = {
    "digest_type": (str, DIGEST_TYPE),
    "managed_ledger_password_file": (Path, ML_PASSWORD_FILE),
}

#: compacted ledgers: the quorums (their digest and password are the compactor's own)
compacted_write_flags = option_set(
    "write", WriteFlags, {**_QUORUM_FLAGS, "force_owned": (bool, FORCE_OWNED)}
)
#: data ledgers: quorums, digest and password
data_write_flags = option_set(
    "write", WriteFlags, {**_QUORUM_FLAGS, **_DATA_FLAGS, "force_owned": (bool, FORCE_OWNED)}
)


# -- offloaded ledgers (pulsarctl_py.stores.tiered) -----------------------------------------

OFFLOAD_URL = typer.Option(
    None,
    "--offload-url",
    metavar="URL",
    help="Read offloaded ledgers from this copy instead of where the broker would (the "
    "offload policies, the broker configuration, their offloadContext): file:///dir (a "
    "copy of the filesystem offloader's root, the directory holding "
    "<tenant>/<ns>/persistent/<topic>/) or s3://bucket (the S3 drivers' objects). "
    "Default: $LEDGERCTL_OFFLOAD_URL or offload_url in ledgerctl.toml.",
)
S3_ENDPOINT = typer.Option(
    None,
    "--s3-endpoint",
    metavar="URL",
    help="The S3 endpoint to read offloaded ledgers from instead of the one their topic's "
    "or namespace's offload policy, the broker configuration or their offloadContext names "
    "(credentials: AWS's usual variables and chain, or "
    "ACCESS_KEY_ID/ACCESS_KEY_SECRET). Default: $LEDGERCTL_S3_ENDPOINT or s3_endpoint in "
    "ledgerctl.toml.",
)
PREFER = typer.Option(
    None,
    "--prefer",
    metavar="tiered|bookkeeper",
    help="Which copy of an offloaded ledger whose BookKeeper copy still exists is read: "
    "tiered (the broker's default, managedLedgerDataReadPriority=tiered-storage-first) or "
    "bookkeeper. Default: $LEDGERCTL_PREFER, prefer in ledgerctl.toml, else tiered.",
)

_TIERED_FLAGS: dict[str, Any] = {
    "offload_url": OFFLOAD_URL,
    "s3_endpoint": S3_ENDPOINT,
    "prefer": PREFER,
}


def tiered_options(command: F) -> F:
    """Give ``command`` --offload-url, --s3-endpoint and --prefer, and run it with them in
    effect as flags of :mod:`pulsarctl_py.precedence` (``LedgerSource.open(tiered=True)``
    resolves them)."""
    sig = inspect.signature(command)
    hints = typing.get_type_hints(command)
    params = [
        p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()
    ]
    added = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=default,
            annotation=typing.Optional[str],  # noqa: UP045 (typer reads it)
        )
        for name, default in _TIERED_FLAGS.items()
    ]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from pulsarctl_py import precedence

        values = {name: kwargs.pop(name, None) or None for name in _TIERED_FLAGS}
        with precedence.flags(**values):
            return command(*args, **kwargs)

    return _signed(wrapper, sig, [*params, *added], hints)
