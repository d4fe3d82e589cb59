"""GetLastMessageId over the binary protocol (:mod:`pulsarctl_py.stores.broker_protocol`):
the retry of error answers.

The real broker answers the id itself in tests/cluster/sandbox/test_broker_view.py. Its
``BrokerMetadataError (... refCnt: 0 ...)`` answers on an LZ4 compacted ledger (issue 32)
could not be made to appear on demand on the sandbox, so this server, which answers a
reader with that error a given number of times before the id, stands in for that fault
only.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from pulsarctl_py.proto import pulsar_api_pb2 as api
from pulsarctl_py.proto import pulsar_commands_pb2 as pb
from pulsarctl_py.stores.broker_protocol import (
    BrokerProtocolError,
    last_message_id,
)

B = pb.BaseCommand
REFCNT = (
    "Failed to read last entry of the compacted Ledger io.netty.util."
    "IllegalReferenceCountException: refCnt: 0"
)


def _frame(cmd: pb.BaseCommand) -> bytes:
    body = cmd.SerializeToString()
    return struct.pack(">II", 4 + len(body), len(body)) + body


def _read(conn: socket.socket) -> pb.BaseCommand | None:
    head = conn.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return None
    (total,) = struct.unpack(">I", head)
    data = conn.recv(total, socket.MSG_WAITALL)
    cmd = pb.BaseCommand()
    cmd.ParseFromString(data[4:])
    return cmd


def _serve(server: socket.socket, failures: int, seen: list[pb.BaseCommand]) -> None:
    conn, _ = server.accept()
    with conn:
        while (cmd := _read(conn)) is not None:
            seen.append(cmd)
            if cmd.type == B.CONNECT:
                conn.sendall(
                    _frame(
                        B(
                            type=B.CONNECTED,
                            connected=pb.CommandConnected(
                                server_version="test", protocol_version=21
                            ),
                        )
                    )
                )
                # a PING in between, as a broker sends them: answered, not taken as the reply
                conn.sendall(_frame(B(type=B.PING, ping=pb.CommandPing())))
            elif cmd.type == B.SUBSCRIBE:
                conn.sendall(
                    _frame(
                        B(
                            type=B.SUCCESS,
                            success=pb.CommandSuccess(request_id=cmd.subscribe.request_id),
                        )
                    )
                )
            elif cmd.type == B.GET_LAST_MESSAGE_ID:
                rid = cmd.getLastMessageId.request_id
                if failures > 0:
                    failures -= 1
                    error = pb.CommandError(request_id=rid, error=pb.MetadataError, message=REFCNT)
                    conn.sendall(_frame(B(type=B.ERROR, error=error)))
                else:
                    mid = api.MessageIdData(ledgerId=7, entryId=3, batch_index=2)
                    reply = pb.CommandGetLastMessageIdResponse(last_message_id=mid, request_id=rid)
                    conn.sendall(
                        _frame(
                            B(type=B.GET_LAST_MESSAGE_ID_RESPONSE, getLastMessageIdResponse=reply)
                        )
                    )
            elif cmd.type == B.CLOSE_CONSUMER:
                conn.sendall(
                    _frame(
                        B(
                            type=B.SUCCESS,
                            success=pb.CommandSuccess(request_id=cmd.close_consumer.request_id),
                        )
                    )
                )


@pytest.fixture
def broker(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[pb.BaseCommand]]]:
    server = socket.create_server(("127.0.0.1", 0))
    seen: list[pb.BaseCommand] = []
    thread = threading.Thread(target=_serve, args=(server, request.param, seen), daemon=True)
    thread.start()
    try:
        yield f"pulsar://127.0.0.1:{server.getsockname()[1]}", seen
    finally:
        server.close()
        thread.join(5)


@pytest.mark.parametrize("broker", [2], indirect=True)
def test_error_answers_are_retried_and_said(broker: tuple[str, list[pb.BaseCommand]]) -> None:
    url, seen = broker
    got = last_message_id(url, "persistent://t/n/x", backoff=0)
    assert got.answer == "7:3:2"
    assert got.attempts == 3
    assert got.errors == [f"MetadataError: {REFCNT}"] * 2
    types = [c.type for c in seen]
    assert types[0] == B.CONNECT and B.PONG in types  # the broker's PING answered
    sub = next(c.subscribe for c in seen if c.type == B.SUBSCRIBE)
    # a reader: non-durable (nothing stored), reading compacted, never creating the topic
    assert (sub.durable, sub.read_compacted, sub.force_topic_creation) == (False, True, False)
    assert types[-1] == B.CLOSE_CONSUMER


@pytest.mark.parametrize("broker", [10], indirect=True)
def test_the_retries_are_bounded(broker: tuple[str, list[pb.BaseCommand]]) -> None:
    url, seen = broker
    got = last_message_id(url, "persistent://t/n/x", attempts=4, backoff=0)
    assert got.answer is None and got.attempts == 4 and len(got.errors) == 4
    assert sum(1 for c in seen if c.type == B.GET_LAST_MESSAGE_ID) == 4


def test_an_unreachable_broker_is_one_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    with pytest.raises(BrokerProtocolError, match="cannot be reached"):
        last_message_id(f"pulsar://127.0.0.1:{port}", "persistent://t/n/x", timeout=2)
