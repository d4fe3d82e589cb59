"""Parsing protobuf messages from damaged data without crashing.

proto2 ``required`` fields make a strict parse fail on damaged data. We parse
partially, report what is missing as a problem, and keep every field that did decode.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from google.protobuf.message import DecodeError, Message

from .errors import CorruptEntryError
from .text import as_text

M = TypeVar("M", bound=Message)


def parse_proto(
    cls: type[M], data: bytes | memoryview, layer: str, offset: int
) -> tuple[M, list[str]]:
    """Parse ``data`` as ``cls``; return the message and the required fields it lacks.

    Raise CorruptEntryError when the bytes are not protobuf at all.
    """
    msg = cls()
    try:
        msg.MergeFromString(data)
    except DecodeError as exc:
        raise CorruptEntryError(
            layer, offset, f"a {cls.DESCRIPTOR.name} protobuf", f"undecodable bytes ({exc})"
        ) from None
    missing = [] if msg.IsInitialized() else msg.FindInitializationErrors()
    return msg, missing


#: names of the singular fields whose value is already plain (not a message or an enum),
#: by descriptor: reading descriptor attributes is what dominates proto_fields otherwise
_AS_IS: dict[Any, str] = {}


#: snake_case names of protobuf fields (``ledgerId`` -> ``ledger_id``), by descriptor
_SNAKE: dict[Any, str] = {}
_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")


def snake_case(name: str) -> str:
    """A protobuf field name as our JSON spells it.

    ``markDeleteLedgerId`` -> ``mark_delete_ledger_id``.
    """
    return _CAMEL.sub(r"_\1", name).lower()


def proto_fields(msg: Message) -> dict[str, Any]:
    """Every field that is set, as plain Python values (enums as names), snake_case named."""
    out: dict[str, Any] = {}
    as_is = _AS_IS
    for fd, value in msg.ListFields():
        name = as_is.get(fd)
        if name is not None:
            out[name] = value
            continue
        snake = _SNAKE.get(fd)
        if snake is None:
            snake = _SNAKE[fd] = snake_case(fd.name)
        out[snake] = _plain(fd, value)
        # string fields are not: one that is not UTF-8 arrives as bytes (see text.RawText)
        if not fd.is_repeated and fd.type not in (fd.TYPE_MESSAGE, fd.TYPE_ENUM, fd.TYPE_STRING):
            as_is[fd] = snake
    return out


def _plain(fd: Any, value: Any) -> Any:
    if fd.is_repeated:
        return [_scalar(fd, v) for v in value]
    return _scalar(fd, value)


def _scalar(fd: Any, value: Any) -> Any:
    if fd.type == fd.TYPE_MESSAGE:
        return proto_fields(value)
    if fd.type == fd.TYPE_ENUM:
        ev = fd.enum_type.values_by_number.get(value)
        return ev.name if ev is not None else value
    if fd.type == fd.TYPE_STRING and type(value) is not str:
        return as_text(value)
    return value


def signed64(value: int) -> int:
    """Reinterpret a uint64 as Java's signed long (entry id -1 is 2**64-1 on the wire)."""
    return value - (1 << 64) if value >= 1 << 63 else value
