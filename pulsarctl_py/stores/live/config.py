"""How to reach bookies: flags, environment variables, config files, then the defaults.

Commands read entries from the bookies named in ledger metadata whenever no bookie
directory is configured and a metadata store is (see ``LedgerSource.open``). Every
command that reads ledgers takes the same flags (``commands/options.py``); each has an
environment variable that applies when the flag is not given, and a key of the same name
in the config files below that (``bookie_addresses``, ``bookie_tls``, ``bookie_ca_file``,
``bookie_timeout``, ``bookie_protocol``; :mod:`pulsarctl_py.precedence`):

* ``--bookie-address ID=HOST:PORT`` / ``LEDGERCTL_BOOKIE_ADDRESSES`` (comma-separated
  pairs): reach the bookie named ID in ledger metadata at HOST:PORT (NAT, port forwards).
* ``--bookie-tls`` / ``LEDGERCTL_BOOKIE_TLS=1``: TLS (BookKeeper's START_TLS).
* ``--bookie-ca-file`` / ``LEDGERCTL_BOOKIE_CA_FILE``: the CA bundle (PEM) that signed
  the bookies' certificates; implies TLS. Without it, the system CAs.
* ``--bookie-timeout`` / ``LEDGERCTL_BOOKIE_TIMEOUT``: seconds a bookie may stay silent
  (default 5).
* ``--bookie-protocol`` / ``LEDGERCTL_BOOKIE_PROTOCOL``: ``v3`` (default), ``v2`` or
  ``auto`` (v3, then v2 for a bookie that does not answer a v3 request).

Only from the environment (they are about secrets, or weaken a check):

* ``LEDGERCTL_BOOKIE_TLS_CERT_FILE`` and ``LEDGERCTL_BOOKIE_TLS_KEY_FILE``: the client
  certificate and private key (PEM) for bookies that require mutual TLS;
  ``LEDGERCTL_BOOKIE_TLS_KEY_PASSWORD``: the key's passphrase, if it is encrypted.
* ``LEDGERCTL_BOOKIE_TLS_HOSTNAME_CHECK=0``: do not check that a bookie's certificate
  names the host of its bookie id (the chain is still checked against the CA).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from pulsarctl_py.errors import LedgerctlError

from .client import DEFAULT_WINDOW, ClientOptions

ENV_ADDRESSES = "LEDGERCTL_BOOKIE_ADDRESSES"
ENV_TLS = "LEDGERCTL_BOOKIE_TLS"
ENV_CA_FILE = "LEDGERCTL_BOOKIE_CA_FILE"
ENV_TIMEOUT = "LEDGERCTL_BOOKIE_TIMEOUT"
ENV_PROTOCOL = "LEDGERCTL_BOOKIE_PROTOCOL"
ENV_CERT_FILE = "LEDGERCTL_BOOKIE_TLS_CERT_FILE"
ENV_KEY_FILE = "LEDGERCTL_BOOKIE_TLS_KEY_FILE"
ENV_KEY_PASSWORD = "LEDGERCTL_BOOKIE_TLS_KEY_PASSWORD"
ENV_HOSTNAME_CHECK = "LEDGERCTL_BOOKIE_TLS_HOSTNAME_CHECK"

PROTOCOLS = ("v3", "v2", "auto")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_address_map(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``ID=HOST:PORT`` pairs (each may hold several, comma-separated)."""
    out: list[tuple[str, str]] = []
    for item in pairs:
        for pair in item.split(","):
            pair = pair.strip()
            if not pair:
                continue
            old, sep, new = pair.partition("=")
            if not sep or not old.strip() or not new.strip():
                raise LedgerctlError(
                    f"bookie address override {pair!r} is not ID=HOST:PORT "
                    "(for example 10.0.0.5:3181=127.0.0.1:13181)"
                )
            out.append((old.strip(), new.strip()))
    return tuple(out)


def flag_value(raw: str) -> bool | None:
    """A yes/no setting as written (1/0, true/false, yes/no, on/off, any case), or None
    when ``raw`` is none of those words."""
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None


#: the longest bookie timeout: a day (sockets take no more than a time_t of seconds, and a
#: bookie silent for a day is down)
MAX_TIMEOUT = 86_400.0


def _file(path: Path | None, what: str) -> Path | None:
    if path is not None and not path.is_file():
        raise LedgerctlError(f"{what} {path} is not a file")
    return path


def resolve_client_options(
    *,
    addresses: Sequence[str] | None = None,
    tls: bool | None = None,
    ca_file: Path | None = None,
    timeout: float | None = None,
    protocol: str | None = None,
    window: int | None = None,
    env: Mapping[str, str] | None = None,
) -> ClientOptions:
    """Client options: each from its flag (the arguments, or the flags in effect), its
    variable, the config files, else the default (:mod:`pulsarctl_py.precedence`)."""
    from pulsarctl_py import precedence as p

    sources = p.Sources.of(env)
    pairs = p.resolve(p.BOOKIE_ADDRESSES, addresses, sources=sources).value
    found_ca = p.resolve(p.BOOKIE_CA_FILE, ca_file, sources=sources)
    ca_file = None if found_ca.value is None else Path(found_ca.value)
    _file(ca_file, "bookie CA file")
    found_tls = p.resolve(p.BOOKIE_TLS, tls, sources=sources)
    # a CA file implies TLS unless a flag turned it off (--no-bookie-tls)
    tls = found_tls.value if found_tls.origin == p.FLAG else found_tls.value or ca_file is not None
    cert = p.resolve(p.BOOKIE_TLS_CERT_FILE, sources=sources).value
    key = p.resolve(p.BOOKIE_TLS_KEY_FILE, sources=sources).value
    cert_file = _file(Path(cert), ENV_CERT_FILE) if cert else None
    key_file = _file(Path(key), ENV_KEY_FILE) if key else None
    if key_file is not None and cert_file is None:
        raise LedgerctlError(f"{ENV_KEY_FILE} is set without {ENV_CERT_FILE}")
    check_hostname = p.resolve(p.BOOKIE_TLS_HOSTNAME_CHECK, sources=sources).value
    found_timeout = p.resolve(p.BOOKIE_TIMEOUT, timeout, sources=sources)
    timeout = found_timeout.value
    if not 0 < timeout <= MAX_TIMEOUT:  # NaN fails both
        raise LedgerctlError(
            f"the bookie timeout must be more than 0 and at most {MAX_TIMEOUT:g} seconds "
            f"(a day), not {timeout:g} ({found_timeout.source})"
        )
    found_protocol = p.resolve(p.BOOKIE_PROTOCOL, protocol, sources=sources)
    protocol = found_protocol.value.strip().lower()
    if protocol not in PROTOCOLS:
        raise LedgerctlError(
            f"bookie protocol {protocol!r}: use v3, v2 or auto ({found_protocol.source})"
        )
    if tls and protocol == "v2":
        raise LedgerctlError("TLS needs protocol v3 (BookKeeper starts TLS with a v3 request)")
    password = p.resolve(p.BOOKIE_TLS_KEY_PASSWORD, sources=sources)
    return ClientOptions(
        v2=protocol == "v2",
        tls=bool(tls),
        ca_file=ca_file,
        timeout=timeout,
        window=window or DEFAULT_WINDOW,
        addresses=parse_address_map(pairs),
        auto=protocol == "auto" and not tls,
        check_hostname=check_hostname is not False,
        cert_file=cert_file,
        key_file=key_file,
        key_password_env=ENV_KEY_PASSWORD if password.is_set else None,
    )
