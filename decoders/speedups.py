"""The compiled fast paths of the decoders, when they were built.

``native`` is the C module ``_speedups`` (decoders/_speedups.c), or None when it was not
built (no C compiler at install time) or when ``LEDGERCTL_PURE_PYTHON`` is set to a
non-empty value. Every caller keeps a pure-Python path and takes it when ``native`` is
None or when a native function returns None (input that is not regular). The results of
the two paths are equal; tests/test_speedups.py checks that.
"""

from __future__ import annotations

import os
from dataclasses import fields
from types import ModuleType
from typing import Any

PURE_PYTHON_ENV = "LEDGERCTL_PURE_PYTHON"


def _load() -> ModuleType | None:
    if os.environ.get(PURE_PYTHON_ENV):
        return None
    try:
        from . import _speedups
    except ImportError:
        return None
    return _speedups


native: Any = _load()


def bind(kind: int, cls: type) -> None:
    """Let the native module build ``cls`` objects: every slot, in field order."""
    if native is None:
        return
    names = tuple(f.name for f in fields(cls))
    if getattr(cls, "__slots__", None) != names:
        raise TypeError(f"{cls.__name__}: slots {cls.__slots__!r} are not its fields {names!r}")
    native.bind(kind, cls, names)


def mac_key(digest: Any, password: bytes | None) -> bytes | None:
    """The key the native scans check a MAC digest with (``key=``: the HMAC key,
    SHA-1("mac" + password)), or None where they cannot: another digest type, no
    password, no native module, or no ``_speedups_mac`` (built only where OpenSSL's
    libcrypto headers were found; without it MAC stays on the Python path)."""
    from .checksums import DigestType
    from .checksums import mac_key as derive

    if native is None or digest is not DigestType.HMAC or password is None:
        return None
    available = getattr(native, "mac_available", None)
    if available is None or not available():
        return None
    return derive(password)
