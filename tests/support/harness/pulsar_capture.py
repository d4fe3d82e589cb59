"""A minimal Pulsar binary-protocol endpoint on 127.0.0.1 that records what producers send.

It answers just enough of the protocol for the official client (pulsar-client, the C++
client wrapped) to connect, look a topic up, create a producer, publish and close, and it
keeps the exact bytes of every published entry, so tests can decode fresh real-client bytes.

Framing (big-endian; ../../../shared/spec/formats.md §1 "On the wire")::

    frame   = totalSize:u32 cmdSize:u32 BaseCommand[cmdSize] [headersAndPayload]
    headersAndPayload (SEND and MESSAGE only) = every byte after the command up to
              totalSize: [0x0e01 crc32c:u32] mdSize:u32 MessageMetadata payload

headersAndPayload is exactly what a broker stores as the entry. The protocol subset:

    client -> endpoint            endpoint -> client
    CONNECT                       CONNECTED (protocol version, max_message_size: the chunk size)
    PARTITIONED_METADATA          PARTITIONED_METADATA_RESPONSE (0 partitions: not partitioned)
    LOOKUP                        LOOKUP_RESPONSE (Connect, authoritative, this endpoint's URL)
    PRODUCER                      PRODUCER_SUCCESS (the requested or a generated producer name)
    SEND + headersAndPayload      SEND_RECEIPT (ledgerId/entryId assigned here, per topic)
    CLOSE_PRODUCER                SUCCESS
    PING                          PONG
    PONG                          (nothing)
    anything else with a request_id: ERROR (NotAllowedError); without one: ignored

Each topic gets its own ledger id (``first_ledger_id``, +1 per new topic) and entry ids
0, 1, 2, ... in arrival order. Every CommandSend is kept as a :class:`CapturedSend`.

The endpoint runs an asyncio loop in a daemon thread. Every read, write and the start and
stop of the thread is bounded by a timeout, a frame larger than ``max_frame`` closes the
connection, and the context manager always stops the loop and closes every socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from google.protobuf.message import DecodeError

from pulsarctl_py.proto import pulsar_commands_pb2 as pb

#: [u32 totalSize][u32 cmdSize]
FRAME_HEADER = struct.Struct(">II")
SIZE = struct.Struct(">I")
#: the broker default (5 MiB); what CONNECTED advertises unless told otherwise
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
#: room for the command and metadata on top of max_message_size, as brokers allow
FRAME_PADDING = 64 * 1024
#: the newest protocol version we claim to speak (v20: topic migration)
PROTOCOL_VERSION = 20

Type = pb.BaseCommand.Type


@dataclass(frozen=True, slots=True)
class CapturedSend:
    """One CommandSend as received, with the position this endpoint assigned to it."""

    topic: str
    producer_name: str
    producer_id: int
    sequence_id: int
    highest_sequence_id: int
    num_messages: int
    is_chunk: bool
    marker: bool
    ledger_id: int
    entry_id: int
    data: bytes  # headersAndPayload: the stored entry, from the 0x0e01 magic on

    @property
    def position(self) -> tuple[int, int]:
        return self.ledger_id, self.entry_id


@dataclass(slots=True)
class _Producer:
    topic: str
    name: str
    encrypted: bool


class EndpointError(RuntimeError):
    """The endpoint could not start or stop in time, or saw a protocol violation."""


class CaptureEndpoint:
    """Pulsar binary-protocol capture endpoint; use as a context manager.

    >>> with CaptureEndpoint() as endpoint:          # doctest: +SKIP
    ...     client = pulsar.Client(endpoint.service_url)
    ...     ...
    ...     entries = endpoint.captured()
    """

    def __init__(
        self,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        protocol_version: int = PROTOCOL_VERSION,
        first_ledger_id: int = 1000,
        io_timeout: float = 10.0,
        idle_timeout: float = 60.0,
        server_version: str = "ledgerctl-capture",
    ) -> None:
        self.max_message_size = max_message_size
        self.protocol_version = protocol_version
        self.first_ledger_id = first_ledger_id
        self.io_timeout = io_timeout
        self.idle_timeout = idle_timeout
        self.server_version = server_version
        self.max_frame = max(max_message_size, DEFAULT_MAX_MESSAGE_SIZE) + FRAME_PADDING
        self.host = "127.0.0.1"
        self.port = 0
        self._lock = threading.Lock()
        self._sends: list[CapturedSend] = []
        self._trace: list[str] = []
        self._problems: list[str] = []
        self._ledgers: dict[str, list[int]] = {}  # topic -> [ledger_id, next entry_id]
        self._producers: dict[int, _Producer] = {}
        self._names = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._start_error: BaseException | None = None

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.host}:{self.port}"

    def start(self, timeout: float = 5.0) -> Self:
        """Bind 127.0.0.1 on a free port and serve in a daemon thread."""
        if self._thread is not None:
            raise EndpointError("endpoint already started")
        # made here, not in the thread, so that stop() can always reach them: a stop
        # requested before the loop runs is queued and ends _main as soon as it starts
        self._loop = asyncio.new_event_loop()
        self._stopped = asyncio.Event()
        self._thread = threading.Thread(
            target=self._run, args=(self._loop,), name="pulsar-capture", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(timeout):
            self.stop()
            raise EndpointError(f"endpoint did not start within {timeout} s")
        if self._start_error is not None:
            self.stop()
            raise EndpointError(f"endpoint failed to start: {self._start_error}")
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Close the listening socket and every connection; wait for the thread."""
        thread, loop, stopped = self._thread, self._loop, self._stopped
        if thread is None:
            return
        if loop is not None and stopped is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop finished meanwhile
                loop.call_soon_threadsafe(stopped.set)
        thread.join(timeout)
        if thread.is_alive():
            raise EndpointError(f"endpoint thread did not stop within {timeout} s")
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- what was seen -----------------------------------------------------------------

    def captured(self, topic: str | None = None) -> list[CapturedSend]:
        """Every CommandSend so far, in arrival order (of one topic when given)."""
        with self._lock:
            return [s for s in self._sends if topic is None or s.topic == topic]

    @property
    def trace(self) -> list[str]:
        """One line per command received or sent, for diagnostics."""
        with self._lock:
            return list(self._trace)

    @property
    def problems(self) -> list[str]:
        """Protocol violations, timeouts and unhandled commands seen so far."""
        with self._lock:
            return list(self._problems)

    # -- the loop ----------------------------------------------------------------------

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main())
        except BaseException as exc:  # reported to start() and problems
            self._start_error = self._start_error or exc
            self._note_problem(f"endpoint loop failed: {exc!r}")
        finally:
            self._ready.set()
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _main(self) -> None:
        assert self._stopped is not None
        try:
            server = await asyncio.start_server(self._accept, self.host, 0)
        except OSError as exc:
            self._start_error = exc
            return
        self._server = server
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stopped.wait()
        finally:
            server.close()
            for task in list(self._connections):
                task.cancel()
            if self._connections:
                await asyncio.wait(self._connections, timeout=self.io_timeout)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), self.io_timeout)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        try:
            await self._serve(reader, writer, peer)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # a broken connection must not kill the loop
            self._note_problem(f"{peer}: connection failed: {exc!r}")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)
            self._connections.discard(task)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: object
    ) -> None:
        while True:
            try:
                head = await asyncio.wait_for(reader.readexactly(SIZE.size), self.idle_timeout)
            except asyncio.IncompleteReadError:
                return  # the client closed the connection between frames
            except TimeoutError:
                self._note_problem(f"{peer}: idle for {self.idle_timeout} s, closing")
                return
            (total,) = SIZE.unpack(head)
            if not SIZE.size <= total <= self.max_frame:
                self._note_problem(f"{peer}: frame of {total} bytes, limit {self.max_frame}")
                return
            body = await asyncio.wait_for(reader.readexactly(total), self.io_timeout)
            (cmd_size,) = SIZE.unpack_from(body)
            if cmd_size > total - SIZE.size:
                self._note_problem(f"{peer}: command of {cmd_size} bytes in a {total}-byte frame")
                return
            command = pb.BaseCommand()
            try:
                command.ParseFromString(body[SIZE.size : SIZE.size + cmd_size])
            except DecodeError as exc:
                self._note_problem(f"{peer}: undecodable BaseCommand: {exc}")
                return
            rest = body[SIZE.size + cmd_size :]
            if not command.HasField("type"):  # a type newer than our schema: unknown field
                self._note_problem(f"{peer}: command of a type this endpoint does not know")
                continue
            self._note(f"<- {Type.Name(command.type)}")
            for reply in self._handle(command, rest):
                self._note(f"-> {Type.Name(reply.type)}")
                writer.write(frame(reply))
            await asyncio.wait_for(writer.drain(), self.io_timeout)

    # -- commands ----------------------------------------------------------------------

    def _handle(self, cmd: pb.BaseCommand, rest: bytes) -> list[pb.BaseCommand]:
        handler = self._HANDLERS.get(cmd.type)
        if handler is None:
            return self._unhandled(cmd)
        return handler(self, cmd, rest)

    def _connect(self, cmd: pb.BaseCommand, rest: bytes) -> list[pb.BaseCommand]:
        reply = pb.BaseCommand(type=Type.CONNECTED)
        reply.connected.server_version = self.server_version
        reply.connected.protocol_version = min(cmd.connect.protocol_version, self.protocol_version)
        # always sent: the C++ client keeps the last advertised size for the whole process
        reply.connected.max_message_size = self.max_message_size
        return [reply]

    def _partitioned_metadata(self, cmd: pb.BaseCommand, rest: bytes) -> list[pb.BaseCommand]:
        reply = pb.BaseCommand(type=Type.PARTITIONED_METADATA_RESPONSE)
        response = reply.partitionMetadataResponse
        response.request_id = cmd.partitionMetadata.request_id
        response.partitions = 0
        response.response = pb.CommandPartitionedTopicMetadataResponse.Success
        return [reply]

    def _lookup(self, cmd: pb.BaseCommand, rest: bytes) -> list[pb.BaseCommand]:
        reply = pb.BaseCommand(type=Type.LOOKUP_RESPONSE)
        response = reply.lookupTopicResponse
        response.request_id = cmd.lookupTopic.request_id
        response.response = pb.CommandLookupTopicResponse.Connect
        response.brokerServiceUrl = self.service_url
        response.authoritative = True
        return [reply]

    def _producer(self, cmd: pb.BaseCommand, rest: bytes) -> list[pb.BaseCommand]:
        request = cmd.producer
        name = request.producer_name or f"capture-{self.port}-{next(self._names)}"
        with self._lock:
            self._producers[request.producer_id] = _Producer(request.topic, name, request.encrypted)
        reply = pb.BaseCommand(type=Type.PRODUCER_SUCCESS)
        reply.producer_success.request_id = request.request_id
        reply.producer_success.producer_name = name
        reply.producer_success.last_sequence_id = -1
        reply.producer_success.producer_ready = True
        return [reply]

    def _send(self, cmd: pb.BaseCommand, rest: bytes) -> list[pb.BaseCommand]:
        send = cmd.send
        with self._lock:
            producer = self._producers.get(send.producer_id)
            if producer is None:
                reply = pb.BaseCommand(type=Type.SEND_ERROR)
                reply.send_error.producer_id = send.producer_id
                reply.send_error.sequence_id = send.sequence_id
                reply.send_error.error = pb.UnknownError
                reply.send_error.message = f"no producer with id {send.producer_id}"
                self._problems.append(reply.send_error.message)
                return [reply]
            ledger = self._ledgers.setdefault(
                producer.topic, [self.first_ledger_id + len(self._ledgers), 0]
            )
            ledger_id, entry_id = ledger
            ledger[1] += 1
            self._sends.append(
                CapturedSend(
                    topic=producer.topic,
                    producer_name=producer.name,
                    producer_id=send.producer_id,
                    sequence_id=send.sequence_id,
                    highest_sequence_id=send.highest_sequence_id,
                    num_messages=send.num_messages,
                    is_chunk=send.is_chunk,
                    marker=send.marker,
                    ledger_id=ledger_id,
                    entry_id=entry_id,
                    data=bytes(rest),
                )
            )
        reply = pb.BaseCommand(type=Type.SEND_RECEIPT)
        receipt = reply.send_receipt
        receipt.producer_id = send.producer_id
        receipt.sequence_id = send.sequence_id
        receipt.highest_sequence_id = send.highest_sequence_id
        receipt.message_id.ledgerId = ledger_id
        receipt.message_id.entryId = entry_id
        return [reply]

    def _close_producer(self, cmd: pb.BaseCommand, rest: bytes) -> list[pb.BaseCommand]:
        with self._lock:
            self._producers.pop(cmd.close_producer.producer_id, None)
        reply = pb.BaseCommand(type=Type.SUCCESS)
        reply.success.request_id = cmd.close_producer.request_id
        return [reply]

    def _ping(self, cmd: pb.BaseCommand, rest: bytes) -> list[pb.BaseCommand]:
        reply = pb.BaseCommand(type=Type.PONG)
        reply.pong.SetInParent()
        return [reply]

    def _pong(self, cmd: pb.BaseCommand, rest: bytes) -> list[pb.BaseCommand]:
        return []

    def _unhandled(self, cmd: pb.BaseCommand) -> list[pb.BaseCommand]:
        name = Type.Name(cmd.type)
        request_id = _request_id(cmd)
        self._note_problem(f"unhandled command {name} (request_id {request_id})")
        if request_id is None:
            return []
        reply = pb.BaseCommand(type=Type.ERROR)
        reply.error.request_id = request_id
        reply.error.error = pb.NotAllowedError
        reply.error.message = f"the capture endpoint does not implement {name}"
        return [reply]

    _HANDLERS: dict[int, Callable[[CaptureEndpoint, pb.BaseCommand, bytes], list[pb.BaseCommand]]]

    # -- bookkeeping -------------------------------------------------------------------

    def _note(self, line: str) -> None:
        with self._lock:
            self._trace.append(line)

    def _note_problem(self, line: str) -> None:
        with self._lock:
            self._problems.append(line)
            self._trace.append(f"!! {line}")


CaptureEndpoint._HANDLERS = {
    Type.CONNECT: CaptureEndpoint._connect,
    Type.PARTITIONED_METADATA: CaptureEndpoint._partitioned_metadata,
    Type.LOOKUP: CaptureEndpoint._lookup,
    Type.PRODUCER: CaptureEndpoint._producer,
    Type.SEND: CaptureEndpoint._send,
    Type.CLOSE_PRODUCER: CaptureEndpoint._close_producer,
    Type.PING: CaptureEndpoint._ping,
    Type.PONG: CaptureEndpoint._pong,
}


def frame(command: pb.BaseCommand, headers_and_payload: bytes = b"") -> bytes:
    """Serialize one frame: [u32 totalSize][u32 cmdSize][BaseCommand][headersAndPayload]."""
    body = command.SerializeToString()
    return FRAME_HEADER.pack(SIZE.size + len(body) + len(headers_and_payload), len(body)) + (
        body + headers_and_payload
    )


def _request_id(cmd: pb.BaseCommand) -> int | None:
    """The request_id of whichever command the BaseCommand carries, if it has one."""
    for descriptor, value in cmd.ListFields():
        if descriptor.message_type is None:
            continue
        if "request_id" in descriptor.message_type.fields_by_name and value.HasField("request_id"):
            return int(value.request_id)
    return None


__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "PROTOCOL_VERSION",
    "CaptureEndpoint",
    "CapturedSend",
    "EndpointError",
    "frame",
]
