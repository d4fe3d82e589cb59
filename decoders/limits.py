"""The one size limit every decoder and reader applies: the broker's maximum message size.

A Pulsar broker accepts a message of at most ``maxMessageSize`` bytes (default
``Commands.DEFAULT_MAX_MESSAGE_SIZE``, 5 MiB = 5,242,880 bytes: apache/pulsar
``pulsar-broker-common/.../ServiceConfiguration.java``, field ``maxMessageSize``, and
``pulsar-common/.../protocol/Commands.java``). Its BookKeeper client reads frames of at most
``maxMessageSize + Commands.MESSAGE_SIZE_FRAME_PADDING`` (10 KiB) bytes
(``BookKeeperClientFactoryImpl.createBkClientConfiguration``,
``setNettyMaxFrameSizeBytes``). ledgerctl reads stored data as a consumer would and
applies the same number to everything whose size stored bytes only *claim*:

* a payload's ``uncompressed_size``: a larger one is refused before anything is allocated;
* a chunked message, joined: its chunks together and what they decompress to, at most
  :data:`CHUNKED_FACTOR` limits. Chunking exists for messages larger than
  ``maxMessageSize``: the broker bounds each chunk by it, and the Java consumer joins a
  chunked message into a buffer of the ``total_chunk_msg_size`` chunk 0 announces and
  decompresses it without the maximum message size check (``ConsumerImpl``,
  ``processMessageChunk`` calls ``uncompressPayloadIfNeeded`` with
  ``checkMaxMessageSize`` false), bounded only by its memory; ledgerctl's bound is this;
* a bookie frame from a running bookie: at most the limit plus the frame padding, refused
  from its 4-byte length before it is read;
* one input of ``decode``: at most :data:`TEXT_FACTOR` frames (a hex dump of an entry is
  about 4.5 times its bytes);
* a message's value decoded with its schema (``--values``, export's value columns): at
  most :data:`VALUE_FACTOR` limits of Python objects, estimated before they are built
  (``pulsarctl_py.value_bounds``: an Avro array can declare 2^62 items of no bytes);
* a schema definition: at most one frame (the entry that stores it is one).

The limit is one number per process, set once by the CLI (``--max-message-size``,
``LEDGERCTL_MAX_MESSAGE_SIZE``, ledgerctl.toml, the broker's ``maxMessageSize``:
``pulsarctl_py.precedence`` resolves them) and carried to Spark executors inside each scan
split. This module only holds it: no environment, no I/O.
"""

from __future__ import annotations

#: Pulsar's default maxMessageSize (Commands.DEFAULT_MAX_MESSAGE_SIZE)
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
#: what a frame may hold beyond maxMessageSize (Commands.MESSAGE_SIZE_FRAME_PADDING)
FRAME_PADDING = 10 * 1024
#: an input of ``decode`` may be text (a hex dump): this many frames at most
TEXT_FACTOR = 5
#: a chunked message, joined (and decompressed), may hold at most this many limits: the
#: 6 MB chunked message an official producer writes under the default limit is read whole
CHUNKED_FACTOR = 4
#: chunked messages still being joined may hold at most this many limits of bytes
#: together (the Java consumer keeps at most ``maxPendingChunkedMessage`` = 10 pending)
PENDING_CHUNK_FACTOR = 10
#: a decoded value may take this many limits of memory (JSON grows at most about 25
#: times its bytes; a 5 MiB value: at most 120 MiB of objects)
VALUE_FACTOR = 24

_limit = DEFAULT_MAX_MESSAGE_SIZE


def max_message_size() -> int:
    """The largest message (payload, decompressed payload, joined chunks) accepted."""
    return _limit


def set_max_message_size(size: int) -> None:
    """Set this process's limit (``pulsarctl_py.limits.configure`` calls it)."""
    global _limit
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"a maximum message size is a positive number of bytes, not {size!r}")
    _limit = size


def max_frame() -> int:
    """The largest bookie frame (and stored entry) accepted: the limit plus the padding."""
    return _limit + FRAME_PADDING


def max_input() -> int:
    """The most bytes one ``decode`` input may hold (binary, or a text dump of it)."""
    return TEXT_FACTOR * max_frame()


def max_pending_chunks() -> int:
    """The most bytes the chunks of unfinished chunked messages may hold together."""
    return PENDING_CHUNK_FACTOR * _limit


def max_value_cost() -> int:
    """The most memory one decoded value may take (estimated before it is decoded)."""
    return VALUE_FACTOR * _limit
