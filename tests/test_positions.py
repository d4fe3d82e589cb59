"""Positions (``L:E[:B]``) and times as operators type them, and the exit-code classes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsarctl_py.errors import (
    EXIT_FINDINGS,
    EXIT_STORE,
    EXIT_USAGE,
    ChecksumMismatch,
    LedgerctlError,
    MetadataStoreError,
    NotFoundError,
)
from pulsarctl_py.positions import Position, format_position, parse_position
from pulsarctl_py.timeparse import format_time_ms, parse_duration_ms, parse_time_ms

NOW = 1_763_719_200_000  # 2025-11-21T10:00:00Z


def test_positions_parse_and_print() -> None:
    assert parse_position("12:40") == Position(12, 40)
    assert parse_position(" 12:40:3 ") == Position(12, 40, 3)
    assert parse_position("7:-1") == Position(7, -1)
    assert str(Position(12, 40, 3)) == "12:40:3" and str(Position(12, 40)) == "12:40"
    assert Position(12, 40, 3).entry == (12, 40)


@pytest.mark.parametrize(
    "text",
    ["12", "12:", ":4", "a:b", "1:2:3:4", "-1:0", "1:-2", "1:2:-1", "99999999999999999999:0", ""],
)
def test_bad_positions_are_one_line_usage_errors(text: str) -> None:
    with pytest.raises(LedgerctlError) as info:
        parse_position(text)
    assert info.value.exit_code == EXIT_USAGE
    assert "\n" not in info.value.one_line()


def test_batch_index_refused_where_only_an_entry_is_meant() -> None:
    with pytest.raises(LedgerctlError, match="give L:E"):
        parse_position("1:2:3", batch=False)


@given(st.integers(0, 2**63 - 1), st.integers(-1, 2**63 - 1), st.none() | st.integers(0, 2**31 - 1))
def test_position_round_trip(ledger: int, entry: int, batch: int | None) -> None:
    assert parse_position(format_position(ledger, entry, batch)) == Position(ledger, entry, batch)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-11-21T10:00:00Z", NOW),
        ("2025-11-21T10:00:00", NOW),  # no zone: UTC
        ("2025-11-21 11:00:00+01:00", NOW),
        ("1763719200000", NOW),
        ("0", 0),
        ("now", NOW),
        ("100m", NOW - 100 * 60_000),
        ("3h", NOW - 3 * 3_600_000),
        ("2d", NOW - 2 * 86_400_000),
        ("1w", NOW - 7 * 86_400_000),
        ("30s", NOW - 30_000),
    ],
)
def test_times(text: str, expected: int) -> None:
    assert parse_time_ms(text, now=NOW) == expected


def test_epoch_seconds_refused_with_a_hint() -> None:
    with pytest.raises(LedgerctlError, match=r"looks like epoch seconds.*1763719200000"):
        parse_time_ms("1763719200")


@pytest.mark.parametrize("text", ["yesterday", "", "12x", "2025-13-01", "99999999999999999999"])
def test_bad_times(text: str) -> None:
    with pytest.raises(LedgerctlError) as info:
        parse_time_ms(text, now=NOW)
    assert info.value.exit_code == EXIT_USAGE


def test_durations_and_formatting() -> None:
    assert parse_duration_ms("1.5h") == 5_400_000
    assert format_time_ms(NOW + 7) == "2025-11-21T10:00:00.007Z"
    assert format_time_ms(None) is None


def test_exit_code_classes() -> None:
    assert LedgerctlError("x").exit_code == EXIT_USAGE
    assert NotFoundError("x").exit_code == EXIT_FINDINGS
    assert ChecksumMismatch("l", 0, "crc", "1", "2").exit_code == EXIT_FINDINGS
    assert MetadataStoreError("x").exit_code == EXIT_STORE
