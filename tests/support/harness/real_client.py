"""Publish through the official Pulsar client into a :class:`CaptureEndpoint`.

:func:`publish` starts a capture endpoint on 127.0.0.1, a ``pulsar.Client`` (the C++
client 4.x wrapped by pulsar-client 3.x) and one producer configured from a
:class:`Scenario` (codec, batching, chunking, end-to-end encryption), sends the scenario's
messages, flushes, closes everything and returns a :class:`Publication`: the entries the
endpoint captured (exact headersAndPayload bytes of every CommandSend, with the position
it assigned) next to what was sent and the message id the client got back for each
message.

How the Python client is driven (facts of pulsar-client 3.13, checked against its code):

* a null value (tombstone) is ``producer.send(None)``: the message builder then calls
  ``set_null_value()``; an empty ``b""`` stays an empty, non-null value;
* ``partition_key``, ``ordering_key``, ``event_timestamp`` and ``sequence_id`` are only
  set when truthy, so "" and 0 mean "not set";
* with batching on, a blocking ``send()`` waits for the batch timer, so batched scenarios
  always use ``send_async`` and ``flush()``; batches are closed by
  ``batching_max_messages`` or the final flush (the publish delay is set far away);
* the chunk size is the ``max_message_size`` the endpoint advertises in CONNECTED;
  chunking requires batching off (the wrapper raises ValueError otherwise);
* a chunked message is compressed whole, sliced, and then every slice is encrypted on its
  own with its own IV (``encryption_param``); with C++ client 4.2 chunk k also repeats the
  same EncryptionKeys entry k+1 times (a client quirk a decoder must tolerate).

The C++ client logs to a file (``FileLogger``), not to stderr. Its logger is process-wide
and only the first client's logger setting takes effect, so every publish logs into one
file per process (:func:`client_log_path`, removed at exit); the part a publish wrote is
returned in :attr:`Publication.client_log` and quoted in :class:`PublishError`.
"""

from __future__ import annotations

import atexit
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pulsar

from .pulsar_capture import DEFAULT_MAX_MESSAGE_SIZE, CapturedSend, CaptureEndpoint

#: the RSA test key pair of the real-client corpus (made for that corpus only)
KEYS_DIR = Path(__file__).resolve().parents[2] / "data" / "real-client" / "keys"
PUBLIC_KEY = KEYS_DIR / "rsa_public.pem"
PRIVATE_KEY = KEYS_DIR / "rsa_private.pem"

CODECS = ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY")


@dataclass(frozen=True, slots=True)
class OutMessage:
    """One message to publish; ``value=None`` publishes a null value (tombstone)."""

    value: bytes | None
    key: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    event_timestamp: int | None = None
    ordering_key: str | None = None
    sequence_id: int | None = None


@dataclass(frozen=True, slots=True)
class Scenario:
    """Producer settings and the messages to send with them."""

    name: str
    messages: tuple[OutMessage, ...]
    compression: str = "NONE"  # one of CODECS
    batching: bool = False
    batching_max_messages: int = 1000
    key_based_batching: bool = False
    chunking: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE  # advertised in CONNECTED
    encryption_key: str | None = None  # key name; the RSA pair in KEYS_DIR encrypts
    sync: bool = False  # blocking send() per message instead of send_async + flush

    @property
    def topic(self) -> str:
        return f"persistent://public/default/capture-{self.name}"

    @property
    def producer_name(self) -> str:
        return f"capture-{self.name}"


@dataclass(frozen=True, slots=True)
class SentMessage:
    """A message as sent, and the id the client reported for it."""

    message: OutMessage
    ledger_id: int
    entry_id: int
    partition: int
    batch_index: int

    @property
    def position(self) -> tuple[int, int]:
        return self.ledger_id, self.entry_id


@dataclass(slots=True)
class Publication:
    """What one :func:`publish` sent and what the endpoint captured, in order."""

    scenario: Scenario
    entries: list[CapturedSend]
    sent: list[SentMessage]
    client_log: str
    trace: list[str]

    def stream(self) -> list[tuple[bytes, tuple[int, int]]]:
        """(entry bytes, position) pairs in topic order, as decode_entries takes them."""
        return [(e.data, e.position) for e in self.entries]


class PublishError(RuntimeError):
    """The client failed to publish; the message quotes its log and the endpoint's trace."""


def publish(scenario: Scenario, timeout: int = 10) -> Publication:
    """Publish ``scenario`` with the official client and return what was captured.

    Every client operation is bounded by ``timeout`` seconds (operation and send
    timeouts), so a misbehaving endpoint fails the call instead of hanging it.
    """
    if scenario.sync and scenario.batching:
        raise ValueError("a blocking send() with batching waits for the batch timer")
    if scenario.chunking and scenario.batching:
        raise ValueError("the client refuses chunking together with batching")
    log_path = client_log_path()
    log_start = log_path.stat().st_size
    with (
        _PythonLog() as python_log,
        CaptureEndpoint(max_message_size=scenario.max_message_size) as endpoint,
    ):
        client = pulsar.Client(
            endpoint.service_url,
            operation_timeout_seconds=timeout,
            connection_timeout_ms=timeout * 1000,
            stats_interval_in_seconds=0,
            logger=pulsar.FileLogger(pulsar.LoggerLevel.Info, str(log_path)),
        )
        try:
            ids = _run_producer(client, scenario, timeout)
        except Exception as exc:
            log = _read_log(log_path, log_start).splitlines() + python_log.lines
            raise PublishError(_diagnose(str(exc), endpoint, log)) from exc
        finally:
            client.close()
        entries = endpoint.captured(scenario.topic)
        trace = endpoint.trace
        if endpoint.problems:
            raise PublishError(_diagnose("endpoint problems", endpoint, log_path, log_start))
    log = _read_log(log_path, log_start)
    sent = [
        SentMessage(message, *message_id)
        for message, message_id in zip(scenario.messages, ids, strict=True)
    ]
    return Publication(scenario, entries, sent, log, trace)


def _run_producer(
    client: pulsar.Client, scenario: Scenario, timeout: int
) -> list[tuple[int, int, int, int]]:
    compression = {
        "NONE": pulsar.CompressionType.NONE,
        "LZ4": pulsar.CompressionType.LZ4,
        "ZLIB": pulsar.CompressionType.ZLib,
        "ZSTD": pulsar.CompressionType.ZSTD,
        "SNAPPY": pulsar.CompressionType.SNAPPY,
    }[scenario.compression]
    options: dict[str, object] = {}
    if scenario.encryption_key is not None:
        options["encryption_key"] = scenario.encryption_key
        options["crypto_key_reader"] = pulsar.CryptoKeyReader(str(PUBLIC_KEY), str(PRIVATE_KEY))
    producer = client.create_producer(
        scenario.topic,
        producer_name=scenario.producer_name,
        send_timeout_millis=timeout * 1000,
        compression_type=compression,
        batching_enabled=scenario.batching,
        batching_max_messages=scenario.batching_max_messages,
        batching_max_allowed_size_in_bytes=scenario.max_message_size,
        batching_max_publish_delay_ms=3_600_000,  # batches close by size or by flush
        batching_type=pulsar.BatchingType.KeyBased
        if scenario.key_based_batching
        else pulsar.BatchingType.Default,
        chunking_enabled=scenario.chunking,
        **options,
    )
    try:
        if scenario.sync:
            ids = [_id_tuple(producer.send(m.value, **_send_args(m))) for m in scenario.messages]
        else:
            ids = _send_all_async(producer, scenario.messages, timeout)
    finally:
        producer.close()
    return ids


def _send_args(message: OutMessage) -> dict[str, object]:
    return {
        "properties": dict(message.properties) or None,
        "partition_key": message.key,
        "ordering_key": message.ordering_key,
        "event_timestamp": message.event_timestamp,
        "sequence_id": message.sequence_id,
    }


def _send_all_async(
    producer: pulsar.Producer, messages: tuple[OutMessage, ...], timeout: int
) -> list[tuple[int, int, int, int]]:
    results: list[tuple[object, tuple[int, int, int, int] | None] | None] = [None] * len(messages)
    done = threading.Semaphore(0)

    def callback_for(i: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def callback(result: pulsar.Result, message_id: pulsar.MessageId) -> None:
            ok = result == pulsar.Result.Ok
            results[i] = (result, _id_tuple(message_id) if ok else None)
            done.release()

        return callback

    for i, message in enumerate(messages):
        producer.send_async(message.value, callback_for(i), **_send_args(message))
    producer.flush()
    deadline = time.monotonic() + timeout
    for _ in messages:
        if not done.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"send callbacks missing after {timeout} s")
    ids = []
    for i, slot in enumerate(results):
        assert slot is not None
        result, message_id = slot
        if message_id is None:
            raise RuntimeError(f"message {i} was not published: {result}")
        ids.append(message_id)
    return ids


def _id_tuple(message_id: pulsar.MessageId) -> tuple[int, int, int, int]:
    """(ledger_id, entry_id, partition, batch_index) of a MessageId from the client."""
    return (
        int(message_id.ledger_id()),
        int(message_id.entry_id()),
        int(message_id.partition()),
        int(message_id.batch_index()),
    )


_log_path: Path | None = None


def client_log_path() -> Path:
    """The file every client of this process logs into (created once, removed at exit)."""
    global _log_path
    if _log_path is None:
        fd, name = tempfile.mkstemp(prefix="ledgerctl-pulsar-client-", suffix=".log")
        os.close(fd)
        _log_path = Path(name)
        atexit.register(_log_path.unlink, missing_ok=True)
    return _log_path


def _read_log(path: Path, start: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


class _PythonLog:
    """The records of the ``pulsar-client`` Python logger while a publish runs.

    The C++ client keeps one logger for the whole process, set by the first client
    created: when a sandbox test (whose clients log through this Python logger) ran
    first in the process, the ``FileLogger`` given here is ignored and the client's
    warnings arrive as Python records instead.
    """

    def __init__(self) -> None:
        import logging

        self.lines: list[str] = []
        recorder = self

        class _Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                recorder.lines.append(f"{record.levelname} {record.getMessage()}")

        self._logger = logging.getLogger("pulsar-client")
        self._handler = _Handler(logging.WARNING)

    def __enter__(self) -> _PythonLog:
        self._logger.addHandler(self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self._handler)


def _diagnose(what: str, endpoint: CaptureEndpoint, log: list[str]) -> str:
    """``log``: the client's log lines, from its file and its Python records."""
    notable = [
        line
        for line in log
        if " WARN " in line or " ERROR " in line or line.startswith(("WARN", "ERROR"))
    ][-20:]
    lines = [f"publish failed: {what}"]
    lines += [f"endpoint problem: {p}" for p in endpoint.problems]
    lines.append("endpoint trace: " + ", ".join(endpoint.trace[-30:]))
    lines += ["client log (warnings and errors):", *notable] if notable else []
    return "\n".join(lines)


__all__ = [
    "CODECS",
    "KEYS_DIR",
    "PRIVATE_KEY",
    "PUBLIC_KEY",
    "OutMessage",
    "PublishError",
    "Publication",
    "Scenario",
    "SentMessage",
    "publish",
]
