"""Bookie wire frames against a real bookie's and client's captured bytes, and round trips.

The captures (tests/data/bookkeeper/live-dbledgerstorage/wire, see its README) hold one
READ_ENTRY of ledger 0 entry 1 by BookKeeper's own client, over v3 and v2, and the real
bookie's answers.
"""

from __future__ import annotations

import json
import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarctl_py.decoders import bookie_wire as wire
from pulsarctl_py.decoders.errors import InputFormatError
from pulsarctl_py.stores.bookie import open_bookie
from pulsarctl_py.stores.live import BookieConnection, ClientOptions
from tests.support.live_bookie import TestBookie
from tests.support.live_world import LIVE_DATA, WIRE

CAPTURES = ["read-v3", "read-v2"]


def capture(name: str) -> tuple[bytes, bytes, dict]:
    return (
        (WIRE / f"{name}.client-to-bookie.bin").read_bytes(),
        (WIRE / f"{name}.bookie-to-client.bin").read_bytes(),
        json.loads((WIRE / f"{name}.frames.json").read_text()),
    )


def offline_entry(ledger_id: int, entry_id: int) -> bytes:
    with open_bookie([LIVE_DATA]) as store:
        return store.read_entry(ledger_id, entry_id)


def test_requests_equal_the_real_clients_bytes() -> None:
    v3_request = capture("read-v3")[0]
    v2_request = capture("read-v2")[0]
    # the real client's first call on a connection has txnId 1
    assert wire.v3_read_request(1, 0, 1) == v3_request
    assert wire.v2_read_request(0, 1) == v2_request
    assert v2_request[4:8] == bytes([2, 2, 0, 0])  # version 2, READENTRY, no flags


def test_real_responses_parse_to_the_stored_entry() -> None:
    expected = offline_entry(0, 1)
    _, v3, frames = capture("read-v3")
    reply = wire.parse_v3_response(v3[4:])
    assert (reply.op, reply.key, reply.status) == ("read", 1, "EOK")
    assert (reply.ledger_id, reply.entry_id, reply.max_lac) == (0, 1, 38)
    assert reply.body == expected
    assert frames["directions"]["bookie-to-client"]["frames"][0]["frame_length_prefix"] == (
        len(v3) - 4
    )
    _, v2, _ = capture("read-v2")
    reply2 = wire.parse_v2_response(v2[4:])
    assert (reply2.key, reply2.status, reply2.body) == ((0, 1), "EOK", expected)


@pytest.mark.parametrize("name", CAPTURES)
def test_test_bookie_answers_byte_for_byte_like_the_real_one(name: str) -> None:
    """The test bookie checked against the real bookie before any test relies on it."""
    request, response, _ = capture(name)
    with TestBookie(LIVE_DATA) as bookie, socket.create_connection(("127.0.0.1", bookie.port)) as s:
        s.settimeout(5)
        s.sendall(request)
        got = b""
        while len(got) < len(response):
            chunk = s.recv(65536)
            assert chunk, "test bookie closed early"
            got += chunk
    assert got == response


class Replay:
    """A one-shot bookie that checks the request bytes and plays the real answer back."""

    def __init__(self, request: bytes, response: bytes) -> None:
        self.request, self.response = request, response
        self.received = b""
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.settimeout(5)
            while len(self.received) < len(self.request):
                chunk = conn.recv(65536)
                if not chunk:
                    return
                self.received += chunk
            if self.received == self.request:
                conn.sendall(self.response)

    def close(self) -> None:
        self.sock.close()
        self.thread.join(timeout=5)


@pytest.mark.parametrize("name", CAPTURES)
def test_client_sends_the_real_request_and_reads_the_real_answer(name: str) -> None:
    request, response, _ = capture(name)
    replay = Replay(request, response)
    conn = BookieConnection(replay.address, ClientOptions(v2=name.endswith("v2"), timeout=5))
    try:
        reply = conn.read_entry(0, 1)
    finally:
        conn.close()
        replay.close()
    assert replay.received == request
    assert reply.status == "EOK"
    assert reply.body == offline_entry(0, 1)


def test_no_builder_can_fence() -> None:
    """Reads carry no flag and no master key: the bookie sees no fencing request."""
    for frame in (wire.v3_read_request(7, 3, 4), wire.v3_read_lac_request(8, 3)):
        parsed = wire.parse_request(frame[4:])
        assert parsed.fence is False
    v2 = wire.v2_read_request(3, 4)
    assert int.from_bytes(v2[4:8], "big") & 0xFFFF == 0
    assert len(v2) == 24  # no 20-byte master key


ids = st.integers(min_value=-1, max_value=2**63 - 1)
bodies = st.one_of(st.none(), st.binary(max_size=300))


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2**64 - 1), ids, ids, bodies, ids)
def test_v3_read_round_trip(txn: int, ledger: int, entry: int, body, lac: int) -> None:
    req = wire.parse_request(wire.v3_read_request(txn, ledger, entry)[4:])
    assert (req.op, req.key, req.ledger_id, req.entry_id, req.v2) == (
        "read",
        txn,
        ledger,
        entry,
        False,
    )
    status = "EOK" if body is not None else "ENOENTRY"
    frame = wire.v3_read_response(txn, status, ledger, entry, body, lac)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    reply = wire.parse_v3_response(frame[4:])
    assert (reply.key, reply.status, reply.ledger_id, reply.entry_id) == (
        txn,
        status,
        ledger,
        entry,
    )
    assert reply.body == body
    assert reply.max_lac == (lac if body is not None else None)
    # the hand-encoded answer parses like the generated module's
    assert (
        wire.parse_v3_response(wire.v3_read_response_pb(txn, status, ledger, entry, body, lac)[4:])
        == reply
    )


@settings(max_examples=200, deadline=None)
@given(ids, ids, bodies, st.sampled_from(sorted(wire.V2_FROM_NAME)))
def test_v2_read_round_trip(ledger: int, entry: int, body, status: str) -> None:
    req = wire.parse_request(wire.v2_read_request(ledger, entry)[4:])
    assert (req.key, req.v2, req.fence) == ((ledger, entry), True, False)
    reply = wire.parse_v2_response(wire.v2_read_response(status, ledger, entry, body)[4:])
    assert (reply.key, reply.status) == ((ledger, entry), status)
    assert reply.body == ((body or b"") if status == "EOK" else None)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2**64 - 1), ids, bodies, bodies)
def test_v3_read_lac_round_trip(txn: int, ledger: int, lac_body, last) -> None:
    frame = wire.v3_read_lac_response(txn, "EOK", ledger, lac_body, last)
    reply = wire.parse_v3_response(frame[4:])
    assert (reply.op, reply.key, reply.ledger_id) == ("lac", txn, ledger)
    assert (reply.lac_body, reply.body) == (lac_body, last)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_frames_raise_one_error_kind(data: bytes) -> None:
    for parse in (wire.parse_v3_response, wire.parse_v2_response):
        try:
            parse(data)
        except InputFormatError as exc:
            assert "\n" not in str(exc)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=2**64 - 1), ids, st.integers(-(2**63), 2**63 - 1))
def test_hand_encoded_read_request_equals_protobufs(txn: int, ledger: int, entry: int) -> None:
    assert wire.v3_read_request(txn, ledger, entry) == wire.v3_read_request_pb(txn, ledger, entry)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**22), ids, st.integers(-1, 2**22))
def test_short_varints_equal_protobufs(txn: int, ledger: int, entry: int) -> None:
    """The one-, two- and three-byte varint shortcuts (the ids of most reads)."""
    assert wire.v3_read_request(txn, ledger, entry) == wire.v3_read_request_pb(txn, ledger, entry)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=2**64 - 1), ids, ids, bodies, ids)
def test_hand_encoded_read_response_equals_protobufs(
    txn: int, ledger: int, entry: int, body, lac: int
) -> None:
    status = "EOK" if body is not None else "ENOENTRY"
    assert wire.v3_read_response(txn, status, ledger, entry, body, lac) == (
        wire.v3_read_response_pb(txn, status, ledger, entry, body, lac)
    )


@pytest.mark.parametrize("v2", [False, True], ids=["v3", "v2"])
def test_answers_encoded_at_preload_equal_the_ones_built_per_request(v2: bool) -> None:
    """The test bookie's read cache (answers encoded once) changes no byte of an answer."""
    ids = [*range(40), 40, 3, -1]  # past the end, a repeat, the last entry
    options = ClientOptions(v2=v2, timeout=5)
    replies = []
    for preload in ([], [0]):
        with TestBookie(LIVE_DATA, preload=preload, record=not preload) as b:
            conn = BookieConnection(b.address, options)
            try:
                replies.append(sorted(conn.read_entries(0, ids), key=lambda r: str(r.key)))
            finally:
                conn.close()
            if preload:
                assert b.requests == []  # served from the encoded answers, not parsed
    built, encoded = replies
    assert encoded == built
    # 0-39, the repeat of 3 (v3 only: in v2 one answer serves both), entry -1; 40 is not held
    assert [r.status for r in built].count("EOK") == (41 if v2 else 42)
    assert [r.status for r in built if r.entry_id == 40] == ["ENOENTRY"]
