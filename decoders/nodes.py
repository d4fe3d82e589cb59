"""The decoded tree: one :class:`Layer` per layer of a stored entry, plus messages.

Every layer keeps its raw byte span (``offset``/``length`` into the decoded input and
the bytes themselves), its typed fields, and for checksums and digests a
:class:`Check` with the stored and computed values. A layer that cannot be decoded is
a :class:`Layer` named ``undecoded`` carrying the reason; the outer layers stay.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from .text import RawText


@dataclass(slots=True)
class Check:
    """A verified checksum or digest: what the bytes say and what we computed."""

    kind: str
    stored: str
    computed: str | None
    ok: bool | None  # None: could not be computed (for example a MAC without password)
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.kind,
            "stored": self.stored,
            "computed": self.computed,
            "ok": self.ok,
            # ok is None: nothing was verified (a MAC without password, a DUMMY digest)
            "verified": self.ok is not None,
        }
        if self.note:
            out["note"] = self.note
        return out


@dataclass(slots=True)
class Problem:
    """Something wrong found while decoding, kept to be reported at the end."""

    severity: str  # "error" or "warning"
    layer: str
    offset: int
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "layer": self.layer,
            "offset": self.offset,
            "message": self.message,
        }

    def __str__(self) -> str:
        return f"{self.layer} at offset {self.offset}: {self.message}"


@dataclass(slots=True)
class Layer:
    """One decoded layer and the span of the input it covers."""

    name: str
    offset: int
    length: int
    raw: bytes | memoryview
    fields: dict[str, Any] = field(default_factory=dict)
    check: Check | None = None
    reason: str | None = None  # set on "undecoded" layers
    #: what ``offset`` counts in: "entry" (the input) or "payload" (the decrypted and
    #: decompressed payload, where batch records live)
    space: str = "entry"

    def to_json(self, with_hex: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"layer": self.name, "offset": self.offset, "length": self.length}
        if self.space != "entry":
            out["space"] = self.space
        if self.fields:
            notes: list[dict[str, Any]] = []
            out["fields"] = fields_json(self.fields, notes)
            if notes:
                out["not_utf8"] = notes
        if self.check is not None:
            out["check"] = self.check.to_json()
        if self.reason is not None:
            out["reason"] = self.reason
        if with_hex:
            out["hex"] = bytes(self.raw).hex()
        return out


def json_value(value: Any, path: str = "", notes: list[dict[str, Any]] | None = None) -> Any:
    """Typed value to JSON: bytes become base64, nested containers are walked.

    Text that is not UTF-8 (:class:`RawText`) becomes its escaped text, and its bytes are
    noted in ``notes`` as ``{"field": path, "base64": ...}``.
    """
    if isinstance(value, RawText):
        if notes is not None:
            notes.append({"field": path, "base64": base64.b64encode(value).decode("ascii")})
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = str(k)
            sub = f"{path}.{key}" if path else key
            if isinstance(k, RawText) and notes is not None:
                notes.append({"field": sub, "key_base64": base64.b64encode(k).decode("ascii")})
            out[key] = json_value(v, sub, notes)
        return out
    if isinstance(value, (list, tuple)):
        return [json_value(v, f"{path}[{i}]", notes) for i, v in enumerate(value)]
    return value


#: the types JSON takes as they are (exact types: RawText is bytes, an IntEnum is not int)
_PLAIN = frozenset((str, int, bool, type(None), float))


def fields_json(fields: dict[str, Any], notes: list[dict[str, Any]]) -> dict[str, Any]:
    """A layer's fields for JSON: what :func:`json_value` gives, without walking each value.

    The layers' fields are mostly plain values (ids, sizes, times, names) and lists of
    them or of flat text maps (``properties``); those are copied as they are. Anything
    else (bytes, text that is not UTF-8, nested messages) goes through :func:`json_value`.
    """
    plain = _PLAIN
    out: dict[str, Any] = {}
    for k, v in fields.items():
        kind = type(v)
        if kind in plain:
            out[k] = v
        elif kind is list:
            out[k] = _list_json(v, k, notes)
        else:
            out[k] = json_value(v, k, notes)
    return out


def _list_json(values: list[Any], path: str, notes: list[dict[str, Any]]) -> list[Any]:
    plain = _PLAIN
    out: list[Any] = []
    for i, v in enumerate(values):
        kind = type(v)
        if kind in plain:
            out.append(v)
        elif kind is dict and all(type(k) is str and type(x) in plain for k, x in v.items()):
            out.append(dict(v))
        else:
            out.append(json_value(v, f"{path}[{i}]", notes))
    return out


def with_text_notes(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` made JSON-safe: text that is not UTF-8 escaped, and listed in ``not_utf8``."""
    notes: list[dict[str, Any]] = []
    out: dict[str, Any] = json_value(doc, "", notes)
    if notes:
        out["not_utf8"] = notes
    return out
