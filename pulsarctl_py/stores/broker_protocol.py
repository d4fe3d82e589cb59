"""GetLastMessageId from a broker, over Pulsar's binary protocol: what a reader gets.

The admin API answers only the plain last message id (``/lastMessageId``); a reader that
reads compacted gets its answer from ``ServerCnx.handleGetLastMessageId``, which takes it
from the compacted ledger once the compaction horizon has reached the topic's last
dispatchable entry. So this module speaks the binary protocol as a reader does:

    frame   = total_size:u32 command_size:u32 BaseCommand   (big-endian; total = 4 + command)
    CONNECT(client_version, protocol_version[, auth_method_name, auth_data]) -> CONNECTED
    SUBSCRIBE(non-durable, Exclusive, start_message_id=earliest, read_compacted)
                                                            -> SUCCESS | ERROR
    GET_LAST_MESSAGE_ID(consumer_id)                        -> GET_LAST_MESSAGE_ID_RESPONSE
                                                             | ERROR
    CLOSE_CONSUMER                                          -> SUCCESS
    (the broker's PING is answered with PONG at any time)

A non-durable subscription (``durable=false``, as ``ReaderImpl`` subscribes) keeps its cursor
in memory only (``NonDurableCursorImpl``): nothing is written, nothing is left. No flow
permits are sent, so the broker dispatches nothing. Subscribing loads a topic that is not
loaded: ask only the broker that has it loaded.

The Pulsar 4.0.7 broker answers GetLastMessageId on an LZ4-compressed compacted ledger with
``BrokerMetadataError`` (``... refCnt: 0 ...``, a released buffer) before the right id; the
Java client retries a failed GetLastMessageId with a backoff until its operation timeout
(``ConsumerImpl.internalGetLastMessageIdAsync``), so its users see the id. :func:`last_message_id`
retries an error answer a bounded number of times (:data:`ATTEMPTS`) and returns every
error it got on the way.

Authentication as :class:`pulsarctl_py.stores.broker.AdminAuth` says (the environment
only): a token as ``AuthenticationToken`` sends it (``auth_method_name`` "token"); a client
certificate is presented in the TLS handshake (``pulsar+ssl://``, "tls").
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pulsarctl_py.errors import LedgerctlError, StoreUnavailable

if TYPE_CHECKING:
    from pulsarctl_py.stores.broker import AdminAuth

FRAME = struct.Struct(">II")
SIZE = struct.Struct(">I")
#: Pulsar's protocol version 21 (what 4.x clients speak); the broker answers with its own
PROTOCOL_VERSION = 21
CLIENT_VERSION = "ledgerctl"
#: GetLastMessageId answers tried before an error answer is taken as the answer
ATTEMPTS = 5
#: the longest frame accepted (Pulsar's default maxMessageSize plus headers)
MAX_FRAME = 5 * 1024 * 1024 + 64 * 1024
#: MessageIdData of MessageId.earliest: (-1, -1) in uint64 fields
EARLIEST = 2**64 - 1


class BrokerProtocolError(StoreUnavailable):
    """The broker's binary protocol could not be spoken (unreachable, refused, cut)."""


@dataclass(slots=True)
class LastMessageId:
    """A broker's GetLastMessageId answer to a reader, and the error answers before it."""

    answer: str | None  # "L:E:B" (B -1: no batch index); None: only errors
    errors: list[str] = field(default_factory=list)
    attempts: int = 0
    mark_delete: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "attempts": self.attempts,
            "errors": list(self.errors),
        }


def _id(mid: Any) -> str:
    def signed(value: int) -> int:
        return value - 2**64 if value >= 2**63 else value

    batch = mid.batch_index if mid.HasField("batch_index") else -1
    return f"{signed(mid.ledgerId)}:{signed(mid.entryId)}:{batch}"


class _Connection:
    def __init__(self, url: str, auth: AdminAuth | None, timeout: float) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("pulsar", "pulsar+ssl") or not parts.hostname:
            raise LedgerctlError(f"broker service URL {url!r}: expected pulsar://host:port")
        port = parts.port or (6651 if parts.scheme == "pulsar+ssl" else 6650)
        self.url = url
        try:
            sock = socket.create_connection((parts.hostname, port), timeout=timeout)
            if parts.scheme == "pulsar+ssl":
                ctx = auth.ssl_context() if auth is not None else ssl.create_default_context()
                sock = ctx.wrap_socket(sock, server_hostname=parts.hostname)
        except OSError as exc:
            raise BrokerProtocolError(f"broker {url} cannot be reached: {exc}") from None
        self.sock = sock
        self.request_id = 0

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, cmd: Any) -> None:
        body = cmd.SerializeToString()
        try:
            self.sock.sendall(FRAME.pack(4 + len(body), len(body)) + body)
        except OSError as exc:
            raise BrokerProtocolError(f"broker {self.url}: {exc}") from None

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except OSError as exc:
                raise BrokerProtocolError(f"broker {self.url}: {exc}") from None
            if not chunk:
                raise BrokerProtocolError(f"broker {self.url} closed the connection")
            out += chunk
        return bytes(out)

    def receive(self) -> Any:
        """The next command that is not a PING (PINGs are answered)."""
        from google.protobuf.message import DecodeError

        from pulsarctl_py.proto import pulsar_commands_pb2 as pb

        while True:
            (total,) = SIZE.unpack(self._read(4))
            if total < 4 or total > MAX_FRAME:
                raise BrokerProtocolError(f"broker {self.url} sent a frame of {total} bytes")
            frame = self._read(total)
            (size,) = SIZE.unpack(frame[:4])
            cmd = pb.BaseCommand()
            try:
                cmd.ParseFromString(frame[4 : 4 + size])
            except DecodeError:
                raise BrokerProtocolError(
                    f"broker {self.url} sent a command that does not parse"
                ) from None
            if cmd.type == pb.BaseCommand.PING:
                self.send(pb.BaseCommand(type=pb.BaseCommand.PONG, pong=pb.CommandPong()))
                continue
            return cmd

    def next_request(self) -> int:
        self.request_id += 1
        return self.request_id


def _error_name(code: int) -> str:
    from pulsarctl_py.proto import pulsar_commands_pb2 as pb

    try:
        return pb.ServerError.Name(code)
    except ValueError:
        return f"error {code}"


def _refused(url: str, what: str, cmd: Any) -> BrokerProtocolError:
    from pulsarctl_py.proto import pulsar_commands_pb2 as pb

    if cmd.type == pb.BaseCommand.ERROR:
        name = _error_name(cmd.error.error)
        return BrokerProtocolError(f"broker {url} refused {what}: {name}: {cmd.error.message}")
    return BrokerProtocolError(f"broker {url} answered {what} with command {cmd.type}")


def last_message_id(
    service_url: str,
    topic: str,
    *,
    read_compacted: bool = True,
    auth: AdminAuth | None = None,
    timeout: float = 10.0,
    attempts: int = ATTEMPTS,
    backoff: float = 0.1,
) -> LastMessageId:
    """GetLastMessageId as a reader of ``topic`` (reading compacted when asked) gets it
    from the broker at ``service_url``; error answers are retried up to ``attempts`` times
    (module docstring). Raises :class:`BrokerProtocolError` when the broker cannot be
    reached or refuses the reader."""
    from pulsarctl_py.proto import pulsar_api_pb2 as api
    from pulsarctl_py.proto import pulsar_commands_pb2 as pb

    B = pb.BaseCommand
    conn = _Connection(service_url, auth, timeout)
    try:
        connect = pb.CommandConnect(
            client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION
        )
        if auth is not None and auth.token is not None:
            connect.auth_method_name = "token"
            connect.auth_data = auth.token.reveal()
        elif auth is not None and auth.cert_file is not None:
            connect.auth_method_name = "tls"
        conn.send(B(type=B.CONNECT, connect=connect))
        answer = conn.receive()
        if answer.type != B.CONNECTED:
            raise _refused(service_url, "the connection", answer)
        consumer_id = 1
        subscribe = pb.CommandSubscribe(
            topic=topic,
            subscription=f"ledgerctl-last-id-{int(time.time() * 1000)}",
            subType=pb.CommandSubscribe.Exclusive,
            consumer_id=consumer_id,
            request_id=conn.next_request(),
            durable=False,
            start_message_id=api.MessageIdData(ledgerId=EARLIEST, entryId=EARLIEST),
            read_compacted=read_compacted,
            force_topic_creation=False,
        )
        conn.send(B(type=B.SUBSCRIBE, subscribe=subscribe))
        answer = conn.receive()
        if answer.type != B.SUCCESS:
            raise _refused(service_url, f"a reader on {topic}", answer)
        out = LastMessageId(None)
        try:
            for attempt in range(attempts):
                out.attempts = attempt + 1
                request = pb.CommandGetLastMessageId(
                    consumer_id=consumer_id, request_id=conn.next_request()
                )
                conn.send(B(type=B.GET_LAST_MESSAGE_ID, getLastMessageId=request))
                answer = conn.receive()
                if answer.type == B.GET_LAST_MESSAGE_ID_RESPONSE:
                    got = answer.getLastMessageIdResponse
                    out.answer = _id(got.last_message_id)
                    if got.HasField("consumer_mark_delete_position"):
                        out.mark_delete = _id(got.consumer_mark_delete_position)
                    break
                if answer.type != B.ERROR:
                    raise _refused(service_url, "GetLastMessageId", answer)
                out.errors.append(f"{_error_name(answer.error.error)}: {answer.error.message}")
                if attempt + 1 < attempts:
                    time.sleep(backoff * (attempt + 1))
        finally:
            close = pb.CommandCloseConsumer(consumer_id=consumer_id, request_id=conn.next_request())
            try:
                conn.send(B(type=B.CLOSE_CONSUMER, close_consumer=close))
                conn.receive()
            except BrokerProtocolError:
                pass  # the connection's end closes the reader too
        return out
    finally:
        conn.close()
