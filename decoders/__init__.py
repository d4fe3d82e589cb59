"""Pure decoders and builders for every layer of a stored Pulsar entry; no I/O here.

Start with :func:`decode_entry` (bytes -> :class:`Entry` with layers and messages) and
:func:`rebuild` / the ``build`` functions of each layer module for the way back.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: each name of the package's interface -> the module that defines it, imported when the
#: name is first used: a process that needs one decoder module (or only the errors) does
#: not pay for importing every layer and the protobuf runtime (``ledgerctl``'s start)
_WHERE = {
    "DigestType": "checksums",
    "crc32c": "checksums",
    "ChunkAssembler": "entry",
    "DecodeOptions": "entry",
    "Depth": "entry",
    "Entry": "entry",
    "Message": "entry",
    "Outer": "entry",
    "decode_entries": "entry",
    "decode_entry": "entry",
    "rebuild": "entry",
    "CorruptEntryError": "errors",
    "LedgerctlError": "errors",
    "EntryHead": "heads",
    "head_of": "heads",
    "Check": "nodes",
    "Layer": "nodes",
    "Problem": "nodes",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


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
