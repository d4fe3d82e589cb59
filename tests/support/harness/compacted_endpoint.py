"""A loopback endpoint that serves a compacted ledger to the official client's readers.

It extends :class:`CaptureEndpoint` with the consumer side of the protocol, as a broker
serves a ``readCompacted`` reader whose compaction horizon has reached the topic's end:

    client -> endpoint            endpoint -> client
    SUBSCRIBE                     SUCCESS
    FLOW (permits)                MESSAGE + headersAndPayload, one per compacted entry,
                                  with the ORIGINAL message id (formats.md §6.2), the
                                  broker entry metadata prefix removed as for old clients
    GET_LAST_MESSAGE_ID           GET_LAST_MESSAGE_ID_RESPONSE (the compacted last position)
    ACK, REDELIVER_...            (nothing)
    CLOSE_CONSUMER, UNSUBSCRIBE   SUCCESS

Every command is still traced; anything else gets the capture endpoint's answer.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Sequence

from google.protobuf.message import DecodeError

from pulsarctl_py.proto import pulsar_commands_pb2 as pb

from .pulsar_capture import SIZE, CaptureEndpoint, frame

Type = pb.BaseCommand.Type
_BEM = struct.Struct(">HI")


def strip_broker_entry_metadata(data: bytes) -> bytes:
    if len(data) >= _BEM.size and data[:2] == b"\x0e\x02":
        (_magic, size) = _BEM.unpack_from(data)
        return data[_BEM.size + size :]
    return data


class CompactedEndpoint(CaptureEndpoint):
    """Serves ``entries`` = [((ledger, entry), headersAndPayload)] to any consumer."""

    def __init__(
        self,
        entries: Sequence[tuple[tuple[int, int], bytes]],
        last_message_id: tuple[int, int, int] | None,
        *,
        expose_broker_entry_metadata: bool = False,
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.entries = list(entries)
        self.last_message_id = last_message_id
        #: send entries as stored, as a broker with exposingBrokerEntryMetadataToClientEnabled
        self.expose_broker_entry_metadata = expose_broker_entry_metadata
        self._delivered: dict[int, int] = {}  # consumer id -> next entry index

    async def _serve(self, reader, writer, peer) -> None:  # type: ignore[no-untyped-def]
        while True:
            try:
                head = await asyncio.wait_for(reader.readexactly(SIZE.size), self.idle_timeout)
            except (asyncio.IncompleteReadError, TimeoutError):
                return
            (total,) = SIZE.unpack(head)
            if not SIZE.size <= total <= self.max_frame:
                self._note_problem(f"{peer}: frame of {total} bytes")
                return
            body = await asyncio.wait_for(reader.readexactly(total), self.io_timeout)
            (cmd_size,) = SIZE.unpack_from(body)
            command = pb.BaseCommand()
            try:
                command.ParseFromString(body[SIZE.size : SIZE.size + cmd_size])
            except DecodeError as exc:
                self._note_problem(f"{peer}: undecodable BaseCommand: {exc}")
                return
            if not command.HasField("type"):
                continue
            self._note(f"<- {Type.Name(command.type)}")
            for reply, payload in self._consumer(command, body[SIZE.size + cmd_size :]):
                self._note(f"-> {Type.Name(reply.type)}")
                writer.write(frame(reply, payload))
            await asyncio.wait_for(writer.drain(), self.io_timeout)

    def _consumer(self, cmd: pb.BaseCommand, rest: bytes) -> list[tuple[pb.BaseCommand, bytes]]:
        t = cmd.type
        if t == Type.SUBSCRIBE:
            self._delivered[cmd.subscribe.consumer_id] = 0
            return [(self._success(cmd.subscribe.request_id), b"")]
        if t == Type.FLOW:
            return self._flow(cmd.flow.consumer_id, cmd.flow.messagePermits)
        if t == Type.GET_LAST_MESSAGE_ID:
            reply = pb.BaseCommand(type=Type.GET_LAST_MESSAGE_ID_RESPONSE)
            response = reply.getLastMessageIdResponse
            response.request_id = cmd.getLastMessageId.request_id
            lid, eid, index = self.last_message_id or (-1, -1, -1)
            response.last_message_id.ledgerId = lid % 2**64
            response.last_message_id.entryId = eid % 2**64
            if index >= 0:
                response.last_message_id.batch_index = index
            return [(reply, b"")]
        if t in (Type.ACK, Type.REDELIVER_UNACKNOWLEDGED_MESSAGES):
            return []
        if t == Type.CLOSE_CONSUMER:
            return [(self._success(cmd.close_consumer.request_id), b"")]
        if t == Type.UNSUBSCRIBE:
            return [(self._success(cmd.unsubscribe.request_id), b"")]
        return [(reply, b"") for reply in self._handle(cmd, rest)]

    def _success(self, request_id: int) -> pb.BaseCommand:
        reply = pb.BaseCommand(type=Type.SUCCESS)
        reply.success.request_id = request_id
        return reply

    def _flow(self, consumer_id: int, permits: int) -> list[tuple[pb.BaseCommand, bytes]]:
        out = []
        start = self._delivered.get(consumer_id, 0)
        for (lid, eid), data in self.entries[start : start + max(permits, 0)]:
            reply = pb.BaseCommand(type=Type.MESSAGE)
            reply.message.consumer_id = consumer_id
            reply.message.message_id.ledgerId = lid
            reply.message.message_id.entryId = eid
            if not self.expose_broker_entry_metadata:
                data = strip_broker_entry_metadata(data)
            out.append((reply, data))
        self._delivered[consumer_id] = start + len(out)
        return out
