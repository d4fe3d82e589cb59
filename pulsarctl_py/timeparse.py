"""Times given by people: epoch milliseconds or ISO-8601 (UTC unless an offset is given)."""

from __future__ import annotations

from datetime import UTC, datetime

from pulsarctl_py.errors import LedgerctlError


def parse_time_ms(text: str) -> int:
    """Epoch milliseconds from ``1700000000000`` or ``2023-11-14T22:13:20Z``-style text."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise LedgerctlError(
            f"cannot read time {text!r}: give epoch milliseconds or ISO-8601 "
            "(for example 2026-11-21T10:00:00Z)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)
