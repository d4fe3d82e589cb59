"""Positions in Pulsar's notation: ``L:E`` or ``L:E:B`` (ledger, entry, batch index).

``pulsar-admin`` and the client libraries print message ids this way; ledgerctl takes
and prints the same text everywhere a position is meant, in input and in JSON output.
"""

from __future__ import annotations

from typing import NamedTuple

from pulsarctl_py.decoders.errors import LedgerctlError

# BookKeeper ids are signed 64-bit longs; -1 is used by Pulsar for "none" (earliest).
_MAX_ID = 2**63 - 1


class Position(NamedTuple):
    """A stored message's place: ledger id, entry id, and batch index (None: whole entry)."""

    ledger_id: int
    entry_id: int
    batch_index: int | None = None

    def __str__(self) -> str:
        return format_position(self.ledger_id, self.entry_id, self.batch_index)

    @property
    def entry(self) -> tuple[int, int]:
        """The entry's ``(ledger, entry)`` pair, without the batch index."""
        return (self.ledger_id, self.entry_id)


def format_position(ledger_id: int, entry_id: int, batch_index: int | None = None) -> str:
    """``L:E``, or ``L:E:B`` when a batch index is given."""
    if batch_index is None:
        return f"{ledger_id}:{entry_id}"
    return f"{ledger_id}:{entry_id}:{batch_index}"


def position_or_none(value: tuple[int, int] | None) -> str | None:
    """``L:E`` for a ``(ledger, entry)`` pair, None for None (JSON fields)."""
    return None if value is None else format_position(value[0], value[1])


def _id(text: str, what: str, original: str, *, allow_negative_one: bool) -> int:
    token = text.strip()
    if not token or not token.lstrip("-").isdigit() or token.count("-") > 1:
        raise LedgerctlError(
            f"cannot read position {original!r}: {what} {token!r} is not a whole number "
            "(give L:E or L:E:B, for example 12:40)"
        )
    value = int(token)
    if value < 0 and not (allow_negative_one and value == -1):
        raise LedgerctlError(f"cannot read position {original!r}: {what} {value} is negative")
    if value > _MAX_ID:
        raise LedgerctlError(
            f"cannot read position {original!r}: {what} {value} is larger than a "
            "BookKeeper id (2^63-1)"
        )
    return value


def parse_position(text: str, *, batch: bool = True) -> Position:
    """``"12:40"`` → ``Position(12, 40)``; ``"12:40:3"`` → ``Position(12, 40, 3)``.

    ``batch=False`` refuses a batch index (where only an entry is meant). Entry id -1
    is accepted (Pulsar's "before the first entry" of a ledger); nothing else negative.
    """
    parts = text.strip().split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and not batch):
        shape = "L:E or L:E:B" if batch else "L:E"
        raise LedgerctlError(
            f"cannot read position {text!r}: give {shape} (ledger id, entry id"
            + (", batch index" if batch else "")
            + "), for example 12:40"
        )
    ledger = _id(parts[0], "ledger id", text, allow_negative_one=False)
    entry = _id(parts[1], "entry id", text, allow_negative_one=True)
    index = None
    if len(parts) == 3:
        index = _id(parts[2], "batch index", text, allow_negative_one=False)
    if index is not None and index > 2**31 - 1:
        raise LedgerctlError(f"cannot read position {text!r}: batch index {index} is too large")
    return Position(ledger, entry, index)


def looks_like_position(text: str) -> bool:
    """True for text shaped like ``L:E`` or ``L:E:B`` (digits around colons)."""
    parts = text.strip().split(":")
    return len(parts) in (2, 3) and all(p.strip().lstrip("-").isdigit() for p in parts)


def parse_ledger_id(text: str, what: str = "ledger id") -> int:
    """A ledger (or entry) id typed alone: a whole number from 0 to 2^63-1."""
    token = text.strip()
    if not token.isdigit():
        raise LedgerctlError(f"cannot read {what} {text!r}: give a whole number, for example 12")
    value = int(token)
    if value > _MAX_ID:
        raise LedgerctlError(f"cannot read {what} {token}: larger than a BookKeeper id (2^63-1)")
    return value
