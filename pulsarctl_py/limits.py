"""The maximum message size of this process, and the size grammar.

One number bounds what stored bytes may make ledgerctl allocate, in every command (see
``decoders/limits.py`` for what it applies to). It is the ``max_message_size`` setting
of :mod:`pulsarctl_py.precedence`: ``ledgerctl --max-message-size SIZE`` (also accepted
after ``inspect``, ``decode`` and ``verify``), ``LEDGERCTL_MAX_MESSAGE_SIZE``,
``max_message_size`` in ledgerctl.toml, the broker configuration's ``maxMessageSize``,
else Pulsar's default ``maxMessageSize``, 5 MiB. Sizes are written ``5MiB``, ``512m``,
``1g`` or in bytes; the most is what Pulsar allows for ``maxMessageSize``: 2^31 - 1 less
the frame padding.

The CLI resolves it and calls :func:`configure` before a command runs; scan splits carry
the number to Spark executors, which call :func:`configure` with it (:func:`apply_split`).

Importing this module is cheap (the size grammar is shared with options such as
``compact --memory``); the decoders are imported when the limit is read or set.
"""

from __future__ import annotations

import re
from typing import Any

ENV = "LEDGERCTL_MAX_MESSAGE_SIZE"
FLAG = "--max-message-size"
#: Pulsar's default maxMessageSize (decoders.limits.DEFAULT_MAX_MESSAGE_SIZE)
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
#: Commands.MESSAGE_SIZE_FRAME_PADDING (decoders.limits.FRAME_PADDING)
FRAME_PADDING = 10 * 1024
#: ServiceConfiguration.maxMessageSize's maxValue: Integer.MAX_VALUE - MESSAGE_SIZE_FRAME_PADDING
LARGEST = 2**31 - 1 - FRAME_PADDING

#: a size: a number and an optional unit (k, m, g: binary; kb, mb, gb: decimal)
SIZE_PATTERN = re.compile(r"(?i)^\s*(\d+(?:\.\d+)?)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?\s*$")
SIZE_UNITS: dict[str | None, int] = {
    None: 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
}


def parse_size(text: str) -> int:
    """``5MiB``, ``512m``, ``1g`` or plain bytes -> bytes; ValueError saying why not."""
    found = SIZE_PATTERN.match(text) if len(text) < 64 else None
    if not found:
        raise ValueError(f"{text!r}: expected a size such as 5MiB, 512m or 1000000")
    number, unit = found.groups()
    value = int(float(number) * SIZE_UNITS[unit.lower() if unit else None])
    if value < 1:
        raise ValueError("must be a positive number of bytes")
    return value


def parse_limit(text: str) -> int:
    """A maximum message size: a size no larger than Pulsar allows (ValueError if not)."""
    value = parse_size(text)
    if value > LARGEST:
        raise ValueError(f"{text!r}: at most {LARGEST} bytes (Pulsar's largest maxMessageSize)")
    return value


def configure(size: int) -> None:
    """Set this process's maximum message size (decoders, readers, the bookie client)."""
    from pulsarctl_py.decoders import limits

    limits.set_max_message_size(size)


def max_message_size() -> int:
    """This process's maximum message size."""
    from pulsarctl_py.decoders import limits

    return limits.max_message_size()


def apply_split(split: Any) -> None:
    """On an executor: take the limit the driver put in ``split`` (when it has one)."""
    size = getattr(split, "max_message_size", None)
    if size is not None and size != max_message_size():
        configure(size)


__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "ENV",
    "FLAG",
    "FRAME_PADDING",
    "LARGEST",
    "apply_split",
    "configure",
    "max_message_size",
    "parse_limit",
    "parse_size",
]
