"""Checksums and digests used by Pulsar and BookKeeper, in one table.

* CRC32C (Castagnoli): Pulsar's 0x0e01 checksum and BookKeeper's CRC32C digest.
* CRC32 (zlib / java.util.zip.CRC32): BookKeeper's CRC32 digest, stored in 8 bytes.
* HMAC-SHA1 keyed with SHA-1("mac" + password): BookKeeper's MAC digest, 20 bytes.
* DUMMY: no digest.

See BookKeeper's ``proto/checksum/*DigestManager.java`` and ../shared/spec/formats.md §10.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import hmac
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: the CRC32C function, chosen at the first call: the native module's when it is built
#: (the same answers: tests/support/fuzz_native.py), else the crc32c package's, whose
#: ``__init__`` imports importlib.metadata (for its version), argparse and email: some
#: 40 ms and 1 MB of every command's start
_crc32c: Any = None


def crc32c(data: bytes | memoryview, value: int = 0) -> int:
    """CRC32C of ``data``, continuing from ``value``."""
    global _crc32c
    if _crc32c is None:
        _crc32c = _crc32c_function()
    return _crc32c(data, value)  # type: ignore[no-any-return]


def _crc32c_function() -> Any:
    from .speedups import native

    found = getattr(native, "crc32c", None)  # None: not built, or built before it had one
    if found is not None:
        return found
    from crc32c import crc32c as package

    return package


class DigestType(enum.IntEnum):
    """BookKeeper digest types, numbered as LedgerMetadataFormat.DigestType."""

    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4

    @classmethod
    def parse(cls, text: str) -> DigestType:
        """Accept the names operators use: crc32, crc32c, mac/hmac, dummy/none."""
        aliases = {"MAC": "HMAC", "NONE": "DUMMY"}
        name = text.strip().upper()
        name = aliases.get(name, name)
        try:
            return cls[name]
        except KeyError:
            from .errors import LedgerctlError

            raise LedgerctlError(
                f"unknown digest type {text!r}: expected crc32, crc32c, mac or dummy"
            ) from None


def mac_key(password: bytes) -> bytes:
    """The HMAC key BookKeeper derives from a ledger password."""
    return hashlib.sha1(b"mac" + password).digest()


def native_mac_key(digest: DigestType | None, password: bytes | None) -> bytes | None:
    """The key the native scans check a MAC digest with (``key=``: the HMAC key,
    SHA-1("mac" + password)), or None where they cannot: another digest type, no
    password, no native module, or no ``_speedups_mac`` (built only where OpenSSL's
    libcrypto headers were found; without it MAC stays on the Python path)."""
    from .speedups import native

    if native is None or digest is not DigestType.HMAC or password is None:
        return None
    available = getattr(native, "mac_available", None)
    if available is None or not available():
        return None
    return mac_key(password)


def master_key(password: bytes) -> bytes:
    """The master key sent with adds and fences: SHA-1("ledger" + password)."""
    return hashlib.sha1(b"ledger" + password).digest()


@dataclass(frozen=True, slots=True)
class Digest:
    """How one digest type is computed and how many bytes it takes."""

    kind: DigestType
    size: int
    compute: Callable[[list[bytes | memoryview], bytes | None], bytes | None]


def _crc32_digest(parts: list[bytes | memoryview], password: bytes | None) -> bytes:
    value = 0
    for part in parts:
        value = zlib.crc32(part, value)
    return value.to_bytes(8, "big")


def _crc32c_digest(parts: list[bytes | memoryview], password: bytes | None) -> bytes:
    value = 0
    for part in parts:
        value = crc32c(part, value)
    return value.to_bytes(4, "big")


@functools.lru_cache(maxsize=8)
def _keyed_mac(password: bytes) -> hmac.HMAC:
    """HMAC-SHA1 keyed for ``password``, before any data: each digest works on a copy,
    never on this one (keying costs more than hashing a 1 KiB entry)."""
    return hmac.new(mac_key(password), digestmod=hashlib.sha1)


def _mac_digest(parts: list[bytes | memoryview], password: bytes | None) -> bytes | None:
    if password is None:
        return None
    mac = _keyed_mac(bytes(password)).copy()
    for part in parts:
        mac.update(part)
    return mac.digest()


def _no_digest(parts: list[bytes | memoryview], password: bytes | None) -> bytes:
    return b""


DIGESTS: dict[DigestType, Digest] = {
    DigestType.CRC32: Digest(DigestType.CRC32, 8, _crc32_digest),
    DigestType.CRC32C: Digest(DigestType.CRC32C, 4, _crc32c_digest),
    DigestType.HMAC: Digest(DigestType.HMAC, 20, _mac_digest),
    DigestType.DUMMY: Digest(DigestType.DUMMY, 0, _no_digest),
}
