"""Times as operators type them, the way ``pulsar-admin`` takes them.

* ISO-8601 (``2026-11-21T10:00:00Z``, ``2026-11-21 10:00``); a time without a zone is UTC;
* epoch milliseconds (``1763719200000``); an integer that only makes sense as epoch
  seconds is refused with a hint instead of being read as a date in January 1970;
* ``now``;
* a duration before now as ``pulsar-admin`` writes it (``RelativeTimeUtil``): a number
  and one unit of ``s`` (seconds), ``m`` (minutes), ``h``, ``d``, ``w`` or ``y``
  (365 days), such as ``100m``, ``3h``, ``2d``, ``1w``.

Output of times uses :func:`format_time_ms`: ISO-8601 UTC with milliseconds.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from pulsarctl_py.decoders.errors import LedgerctlError

_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdwy])$")

# Epoch milliseconds below 10^11 are dates before March 1973; the same numbers read as
# epoch seconds (10^9 … 10^11) are 2001 … 5138. A number there was almost surely seconds.
_SECONDS_LOW = 10**9
_SECONDS_HIGH = 10**11
_MAX_MS = 253402300799999  # 9999-12-31T23:59:59.999Z

HINT = (
    "give ISO-8601 (2026-11-21T10:00:00Z; no zone means UTC), epoch milliseconds, "
    "'now', or a duration before now such as 100m, 3h, 2d, 1w"
)


def now_ms() -> int:
    """The current time in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def parse_duration_ms(text: str) -> int:
    """Milliseconds of a pulsar-admin duration such as ``100m``, ``3h``, ``2d``, ``1w``."""
    match = _DURATION.match(text.strip())
    if not match:
        raise LedgerctlError(f"cannot read duration {text!r}: give a number and s, m, h, d, w or y")
    return int(float(match.group(1)) * _UNITS_S[match.group(2)] * 1000)


def parse_time_ms(text: str, *, now: int | None = None) -> int:
    """Epoch milliseconds from any form the module accepts (see the module docstring)."""
    value = text.strip()
    if not value:
        raise LedgerctlError(f"cannot read time {text!r}: {HINT}")
    if value.lower() == "now":
        return now if now is not None else now_ms()
    if _DURATION.match(value):
        return (now if now is not None else now_ms()) - parse_duration_ms(value)
    if value.isdigit():
        number = int(value)
        if _SECONDS_LOW <= number < _SECONDS_HIGH:
            raise LedgerctlError(
                f"time {value} looks like epoch seconds ({format_time_ms(number * 1000)}); "
                f"ledgerctl takes epoch milliseconds: {number * 1000}"
            )
        if number > _MAX_MS:
            raise LedgerctlError(f"cannot read time {text!r}: {number} ms is past the year 9999")
        return number
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise LedgerctlError(f"cannot read time {text!r}: {HINT}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def format_time_ms(ms: int | None) -> str | None:
    """``2026-11-21T10:00:00.000Z`` for epoch milliseconds (None stays None)."""
    if ms is None:
        return None
    try:
        stamp = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms (out of range)"
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def check_time_range(
    since_ms: int | None,
    until_ms: int | None,
    since_flag: str = "--since",
    until_flag: str = "--until",
) -> None:
    """Refuse (exit 2) a time range that holds nothing: ``since`` at or after ``until``
    (``since`` is inclusive, ``until`` exclusive). An empty answer would read as "no
    entries in that time", which is not what was asked."""
    if since_ms is None or until_ms is None or since_ms < until_ms:
        return
    raise LedgerctlError(
        f"{since_flag} {format_time_ms(since_ms)} is not before {until_flag} "
        f"{format_time_ms(until_ms)}: the range holds no time (swapped?)"
    )
