"""How to reach bookies when no flag says so: environment variables.

* ``LEDGERCTL_LIVE=1``: read entries from the bookies named in ledger metadata even in
  commands that otherwise read only the metadata when no bookie directory is given
  (commands that need entries, like ``inspect``, do so anyway).
* ``LEDGERCTL_BOOKIE_ADDRESSES``: ``ID=HOST:PORT`` pairs separated by commas, for bookies
  whose ids in the metadata cannot be reached as they are (NAT, port forwards).
* ``LEDGERCTL_BOOKIE_TLS=1`` and ``LEDGERCTL_BOOKIE_CA_FILE=path``: TLS (START_TLS).
* ``LEDGERCTL_BOOKIE_TIMEOUT``: seconds a bookie may stay silent (default 5).
* ``LEDGERCTL_BOOKIE_PROTOCOL``: ``v3`` (default) or ``v2``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from pulsarctl_py.errors import LedgerctlError

from .client import DEFAULT_TIMEOUT, DEFAULT_WINDOW, ClientOptions

ENV_LIVE = "LEDGERCTL_LIVE"
ENV_ADDRESSES = "LEDGERCTL_BOOKIE_ADDRESSES"
ENV_TLS = "LEDGERCTL_BOOKIE_TLS"
ENV_CA_FILE = "LEDGERCTL_BOOKIE_CA_FILE"
ENV_TIMEOUT = "LEDGERCTL_BOOKIE_TIMEOUT"
ENV_PROTOCOL = "LEDGERCTL_BOOKIE_PROTOCOL"

_TRUE = {"1", "true", "yes", "on"}


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


def live_requested(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return env.get(ENV_LIVE, "").strip().lower() in _TRUE


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
    """Client options from explicit values, then the environment, then the defaults."""
    env = os.environ if env is None else env
    pairs = list(addresses or [])
    if not pairs and env.get(ENV_ADDRESSES):
        pairs = [env[ENV_ADDRESSES]]
    if tls is None:
        tls = env.get(ENV_TLS, "").strip().lower() in _TRUE
    if ca_file is None and env.get(ENV_CA_FILE):
        ca_file = Path(env[ENV_CA_FILE])
    if ca_file is not None:
        if not ca_file.is_file():
            raise LedgerctlError(f"bookie CA file {ca_file} is not a file")
        tls = True
    if timeout is None:
        raw = env.get(ENV_TIMEOUT)
        try:
            timeout = float(raw) if raw else DEFAULT_TIMEOUT
        except ValueError:
            raise LedgerctlError(f"{ENV_TIMEOUT}={raw!r} is not a number of seconds") from None
    if not timeout > 0:
        raise LedgerctlError("the bookie timeout must be more than 0 seconds")
    protocol = (protocol or env.get(ENV_PROTOCOL) or "v3").strip().lower()
    if protocol not in ("v2", "v3"):
        raise LedgerctlError(f"bookie protocol {protocol!r}: use v3 or v2")
    if tls and protocol == "v2":
        raise LedgerctlError("TLS needs protocol v3 (BookKeeper starts TLS with a v3 request)")
    return ClientOptions(
        v2=protocol == "v2",
        tls=bool(tls),
        ca_file=ca_file,
        timeout=timeout,
        window=window or DEFAULT_WINDOW,
        addresses=parse_address_map(pairs),
    )
