"""Pulsar's compression codecs, exactly as Pulsar writes them, in one table.

| CompressionType | bytes                                                         |
|-----------------|---------------------------------------------------------------|
| NONE   0        | as is                                                         |
| LZ4    1        | raw LZ4 block: no frame, no magic, no size prefix             |
| ZLIB   2        | zlib stream; Java writes it sync-flushed without final block  |
|                 | and Adler-32 (ends 00 00 ff ff), C++ writes a complete stream |
| ZSTD   3        | zstd frame                                                    |
| SNAPPY 4        | raw snappy block (varint length first), not the framing format|

Decompression is bounded by ``uncompressed_size`` (MessageMetadata field 9) and by the
maximum message size (:mod:`.limits`), checked before anything is allocated, so that a
corrupt size cannot exhaust memory; each library is told the size it may produce (LZ4's
``uncompressed_size``, zlib's ``max_length``, zstd's ``max_output_size``, snappy's
announced length checked first), and the result must have exactly that size, as Pulsar's
own codecs require. See Pulsar's ``CompressionCodec*.java`` and
../shared/spec/formats.md §5.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import limits
from .errors import DataError, UnsupportedCodec

#: The largest uncompressed size accepted by default: Pulsar's maxMessageSize (5 MiB).
#: The process's own limit is :func:`limits.max_message_size`.
DEFAULT_MAX_UNCOMPRESSED = limits.DEFAULT_MAX_MESSAGE_SIZE
#: how an exceeded limit says it can be raised
LIMIT_HINT = (
    "(the maximum message size; raise it with --max-message-size or LEDGERCTL_MAX_MESSAGE_SIZE)"
)


class DecompressionError(DataError):
    """Compressed bytes that do not decompress to the announced size."""


@dataclass(frozen=True, slots=True)
class Codec:
    """One compression type: its Pulsar number, name, and both directions."""

    number: int
    name: str
    decompress: Callable[[bytes | memoryview, int], bytes | memoryview]
    compress: Callable[[bytes | memoryview], bytes]
    #: the most one compressed byte can expand to, for a cheap sanity check
    max_ratio: int | None


def _none_decompress(data: bytes | memoryview, size: int) -> bytes | memoryview:
    return data


def _none_compress(data: bytes | memoryview) -> bytes:
    return bytes(data)


def _lz4_decompress(data: bytes | memoryview, size: int) -> bytes:
    import lz4.block

    try:
        return lz4.block.decompress(data, uncompressed_size=size)
    except lz4.block.LZ4BlockError as exc:
        raise DecompressionError(f"LZ4 block does not decompress: {exc}") from None


def _lz4_compress(data: bytes | memoryview) -> bytes:
    import lz4.block

    return lz4.block.compress(data, store_size=False)


def _zlib_decompress(data: bytes | memoryview, size: int) -> bytes:
    # decompressobj, not zlib.decompress: the Java client never finishes the stream.
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, size + 1)
    except zlib.error as exc:
        raise DecompressionError(f"zlib stream does not inflate: {exc}") from None
    return out


def _zlib_compress(data: bytes | memoryview) -> bytes:
    return zlib.compress(data)


def _zstd_decompress(data: bytes | memoryview, size: int) -> bytes:
    import zstandard

    try:
        declared = zstandard.frame_content_size(data)
        if declared not in (-1, size):
            raise DecompressionError(
                f"zstd frame announces {declared} bytes, uncompressed_size is {size}"
            )
        return _zstd_decompressor().decompress(data, max_output_size=max(size, 1))
    except zstandard.ZstdError as exc:
        raise DecompressionError(f"zstd frame does not decompress: {exc}") from None


_local = threading.local()


def _zstd_decompressor() -> Any:
    """This thread's ZstdDecompressor: creating one costs more than a small frame's decode.

    A ZstdDecompressor must not be used by two threads at once, and each decompress()
    starts a fresh frame, so one per thread is safe to reuse.
    """
    dctx = getattr(_local, "zstd", None)
    if dctx is None:
        import zstandard

        dctx = _local.zstd = zstandard.ZstdDecompressor()
    return dctx


def _zstd_compress(data: bytes | memoryview) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=3).compress(data)


def _snappy_length(data: bytes | memoryview) -> int:
    value = shift = 0
    for i in range(min(5, len(data))):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
    raise DecompressionError("snappy block does not start with a valid length varint")


def _snappy_decompress(data: bytes | memoryview, size: int) -> bytes:
    import cramjam

    announced = _snappy_length(data)
    if announced != size:
        raise DecompressionError(
            f"snappy block announces {announced} bytes, uncompressed_size is {size}"
        )
    try:
        return bytes(cramjam.snappy.decompress_raw(data))
    except Exception as exc:  # cramjam raises its own DecompressionError type
        raise DecompressionError(f"snappy block does not decompress: {exc}") from None


def _snappy_compress(data: bytes | memoryview) -> bytes:
    import cramjam

    return bytes(cramjam.snappy.compress_raw(data))


CODECS: dict[int, Codec] = {
    codec.number: codec
    for codec in (
        Codec(0, "NONE", _none_decompress, _none_compress, None),
        Codec(1, "LZ4", _lz4_decompress, _lz4_compress, 255),
        Codec(2, "ZLIB", _zlib_decompress, _zlib_compress, 1032),
        # zstd: a 4-byte RLE block (3-byte header + 1 byte) yields at most 128 KiB
        Codec(3, "ZSTD", _zstd_decompress, _zstd_compress, 32768),
        # snappy: the best element is a 3-byte copy of 64 bytes
        Codec(4, "SNAPPY", _snappy_decompress, _snappy_compress, 22),
    )
}

CODEC_BY_NAME: dict[str, Codec] = {codec.name: codec for codec in CODECS.values()}


def codec(number: int) -> Codec:
    """The codec for a CompressionType number."""
    try:
        return CODECS[number]
    except KeyError:
        raise UnsupportedCodec(f"unknown compression type {number}") from None


def decompress(
    number: int,
    data: bytes | memoryview,
    size: int,
    limit: int | None = None,
) -> bytes | memoryview:
    """Decompress ``data`` to exactly ``size`` bytes, or raise DecompressionError.

    ``limit``: the largest ``size`` accepted, checked before anything is allocated; None is
    the process's maximum message size."""
    c = codec(number)
    if c.number == 0:
        return data
    if limit is None:
        limit = limits.max_message_size()
    if size > limit:
        raise DecompressionError(
            f"uncompressed_size {size} exceeds the limit of {limit} bytes {LIMIT_HINT}"
        )
    if c.max_ratio is not None and size > c.max_ratio * len(data) + 64:
        raise DecompressionError(
            f"uncompressed_size {size} is impossible for {len(data)} {c.name} bytes"
        )
    out = c.decompress(data, size)
    if len(out) != size:
        found = f"more than {size}" if len(out) > size else str(len(out))
        raise DecompressionError(
            f"{c.name} payload decompresses to {found} bytes, uncompressed_size is {size}"
        )
    return out


def checking_decompress() -> Callable[[int, bytes | memoryview, int, int | None], Any]:
    """:func:`decompress` for a caller that calls it per payload (the native payload check
    of ``verify``): the same answers and errors, with the common case (LZ4, Pulsar's
    usual codec, within the limit and the codec's ratio) in one Python frame instead of
    three; every other case, and every failure of that one, goes to :func:`decompress`."""
    import lz4.block

    lz4_decompress = lz4.block.decompress
    lz4_number = CODECS[1].number
    ratio = CODECS[1].max_ratio or 0

    def checked(number: int, data: bytes | memoryview, size: int, limit: int | None) -> Any:
        if number == lz4_number and limit is not None and size <= limit:
            if size <= ratio * len(data) + 64:
                try:
                    out = lz4_decompress(data, uncompressed_size=size)
                except lz4.block.LZ4BlockError:
                    out = None
                if out is not None and len(out) == size:
                    return out
        return decompress(number, data, size, limit)

    return checked


def compress(number: int, data: bytes | memoryview) -> bytes:
    """Compress ``data`` the way Pulsar's producer does for this codec."""
    return codec(number).compress(data)


def compress_as_broker(number: int, data: bytes | memoryview) -> bytes:
    """Compress ``data`` the way a Java broker does (``RawBatchConverter.rebatchMessage``
    through ``CompressionCodecProvider``): ZLIB as ``CompressionCodecZLib.encode`` writes it,
    a default ``java.util.zip.Deflater`` flushed with ``SYNC_FLUSH`` and never finished (no
    final block, no Adler-32; byte for byte what a Pulsar 4.0.7 broker's compaction
    writes); the other codecs as :func:`compress`. (ZSTD: the broker's encoder is
    aircompressor's, whose frames differ from libzstd's at the same level; both decode to
    the same bytes.)"""
    if number == 2:
        deflater = zlib.compressobj()
        return deflater.compress(data) + deflater.flush(zlib.Z_SYNC_FLUSH)
    return compress(number, data)
