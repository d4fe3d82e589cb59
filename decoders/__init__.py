"""Pure decoders and builders for every layer of a stored Pulsar entry; no I/O here.

Start with :func:`decode_entry` (bytes -> :class:`Entry` with layers and messages) and
:func:`rebuild` / the ``build`` functions of each layer module for the way back.
"""

from .checksums import DigestType, crc32c
from .entry import (
    ChunkAssembler,
    DecodeOptions,
    Depth,
    Entry,
    Message,
    Outer,
    decode_entries,
    decode_entry,
    rebuild,
)
from .errors import CorruptEntryError, LedgerctlError
from .heads import EntryHead, head_of
from .nodes import Check, Layer, Problem

__all__ = [
    "Check",
    "ChunkAssembler",
    "CorruptEntryError",
    "DecodeOptions",
    "Depth",
    "DigestType",
    "Entry",
    "EntryHead",
    "Layer",
    "LedgerctlError",
    "Message",
    "Outer",
    "Problem",
    "crc32c",
    "decode_entries",
    "decode_entry",
    "head_of",
    "rebuild",
]
