"""Text fields that are not valid UTF-8, kept losslessly and shown without a crash.

Protobuf ``string`` fields are meant to be UTF-8, but C++ and Go producers write any bytes
there (keys, property keys and values, producer names), and a proto2 parse then hands out
``bytes`` instead of ``str``. Such a value becomes a :class:`RawText`: still the exact bytes,
marked as text that is not UTF-8. People see it with backslash escapes (``\\xff``); JSON
gets the same escaped text plus the bytes in base64 under ``not_utf8``, naming the field.
"""

from __future__ import annotations

import base64
from typing import Any


class RawText(bytes):
    """The bytes of a text field (key, property, name) that are not valid UTF-8."""

    __slots__ = ()

    def __str__(self) -> str:
        return self.decode("utf-8", "backslashreplace")


def as_text(value: Any) -> Any:
    """A protobuf string field's value: ``str``, or :class:`RawText` when it is bytes."""
    if isinstance(value, (bytes, bytearray, memoryview)) and not isinstance(value, RawText):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return RawText(raw)
    return value


def text_of_bytes(value: bytes | memoryview) -> str | RawText:
    """Bytes meant as text (ledger custom metadata values): str when UTF-8, else RawText."""
    result: str | RawText = as_text(bytes(value))
    return result


def quoted(value: Any) -> str:
    """For people, quoted: "text" (JSON-style escapes); not-UTF-8 text is marked."""
    import json

    if value is None:
        return "null"
    if isinstance(value, RawText):
        return '"' + str(value) + '" (not UTF-8)'
    return json.dumps(str(value), ensure_ascii=False)


def b64(value: bytes | memoryview) -> str:
    return base64.b64encode(bytes(value)).decode("ascii")


def json_text(value: Any, field: str, notes: list[dict[str, Any]] | None) -> Any:
    """A text value for JSON: RawText becomes its escaped text, noted with its base64."""
    if isinstance(value, RawText):
        if notes is not None:
            notes.append({"field": field, "base64": b64(value)})
        return str(value)
    return value


def json_map(
    values: dict[Any, Any], field: str, notes: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """A text->text map for JSON; each pair with a non-UTF-8 key or value is noted whole."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        key = str(k)
        if isinstance(k, RawText) or isinstance(v, RawText):
            if notes is not None:
                notes.append(
                    {
                        "field": field,
                        "key": key,
                        "key_base64": b64(k if isinstance(k, bytes) else str(k).encode()),
                        "value_base64": b64(v if isinstance(v, bytes) else str(v).encode()),
                    }
                )
            out[key] = str(v)
        else:
            out[key] = v
    return out


def text_map(pairs: Any) -> dict[Any, Any]:
    """Protobuf KeyValue pairs as a dict whose non-UTF-8 keys and values are RawText."""
    out: dict[Any, Any] = {}
    for kv in pairs:
        k, v = kv.key, kv.value
        if type(k) is not str:
            k = as_text(k)
        if type(v) is not str:
            v = as_text(v)
        out[k] = v
    return out
