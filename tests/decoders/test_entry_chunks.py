"""Chunked messages joined as the upstream consumer joins them.

apache/pulsar ``pulsar-client/src/main/java/org/apache/pulsar/client/impl/ConsumerImpl.java``
(``processMessageChunk``) and ../shared/spec/formats.md §3.4: chunk 0 again restarts the
message; a duplicate of an earlier chunk is dropped and assembly goes on; a gap discards
the message; a chunk whose chunk 0 was never seen is discarded. The chunks are the ones the
official Java client wrote (tests/data/real-client/chunked*).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsarctl_py.decoders import decode_entries
from pulsarctl_py.decoders.entry import Entry
from tests.support.cli_helpers import REAL_CLIENT, run

SCENARIOS = ["chunked", "chunked-lz4"]


def chunks(scenario: str) -> list[bytes]:
    return [p.read_bytes() for p in sorted((REAL_CLIENT / scenario).glob("*.bin"))]


def decode_order(scenario: str, order: list[int]) -> list[Entry]:
    data = chunks(scenario)
    return list(decode_entries((data[i], (1, n)) for n, i in enumerate(order)))


def values(entries: list[Entry]) -> list[bytes]:
    return [bytes(m.value or b"") for e in entries for m in e.messages]


def problems(entries: list[Entry]) -> list[tuple[str, str]]:
    return [(p.severity, p.message) for e in entries for p in e.problems]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_in_order_chunks_join_without_findings(scenario: str) -> None:
    n = len(chunks(scenario))
    entries = decode_order(scenario, list(range(n)))
    assert problems(entries) == []
    assert len(values(entries)) == 1 and entries[-1].messages[0].chunks == n


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_duplicate_chunk_is_dropped_and_assembly_goes_on(scenario: str) -> None:
    n = len(chunks(scenario))
    whole = values(decode_order(scenario, list(range(n))))
    order = [0, 1, 1, *range(2, n)]  # chunk 1 stored twice (a producer retry)
    entries = decode_order(scenario, order)
    assert values(entries) == whole
    assert entries[-1].messages[0].chunks == n
    (finding,) = problems(entries)
    assert finding[0] == "warning" and "duplicate" in finding[1] and "dropped" in finding[1]
    assert all(e.ok for e in entries)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_chunk_zero_again_restarts_the_message(scenario: str) -> None:
    n = len(chunks(scenario))
    whole = values(decode_order(scenario, list(range(n))))
    entries = decode_order(scenario, [0, 1, *range(n)])
    assert values(entries) == whole
    (finding,) = problems(entries)
    assert finding[0] == "warning" and "starts over" in finding[1]
    assert entries[2].problems and not entries[2].messages  # on the second chunk 0


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_gap_discards_the_message_with_an_error(scenario: str) -> None:
    n = len(chunks(scenario))
    entries = decode_order(scenario, [0, *range(2, n)])  # chunk 1 lost
    assert values(entries) == []
    errors = [m for sev, m in problems(entries) if sev == "error"]
    assert len(errors) == 1 and "missing" in errors[0] and "discarded" in errors[0]
    assert not entries[1].ok


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_chunk_without_its_start_is_not_reassembled(scenario: str) -> None:
    n = len(chunks(scenario))
    entries = decode_order(scenario, list(range(1, n)))
    assert values(entries) == []
    assert [sev for sev, _ in problems(entries)] == ["warning"] * (n - 1)
    assert all(e.ok for e in entries)


def test_decode_cli_joins_across_a_duplicate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    files = sorted((REAL_CLIENT / "chunked").glob("*.bin"))
    result = run(capsys, "decode", "-o", "json", files[0], files[1], files[1], files[2])
    assert result.code == 0, result.err
    docs = result.json()["entries"]
    assert [len(d["messages"]) for d in docs] == [0, 0, 0, 1]
    assert "duplicate" in result.err
