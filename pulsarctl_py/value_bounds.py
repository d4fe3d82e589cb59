"""How much memory a decoded value may take, checked before it is decoded.

A value's bytes are bounded by the maximum message size, but what they decode to need not
be: an Avro array or map declares its item count in a varint, and an item may take no
bytes at all (``null``, a record of nulls, an empty record), so that two stored bytes can
declare 2^62 items (fastavro builds them: 10^7 ``None`` in 97 MB, then more). Items of
one byte each (a record of one ``int``) are about 220 bytes of Python objects apiece: a
5 MiB value becomes 1 GB. Protobuf (``MessageToDict``: a dict per empty sub-message of
two bytes) grows about 45 times; JSON (orjson) at most about 25 times.

So a decoded value has a budget: :func:`pulsarctl_py.decoders.limits.max_value_cost`
(``VALUE_FACTOR`` times the maximum message size), against an estimate of the Python
objects the decoder would build (CPython's sizes: an int 32 bytes, a list 56 plus 8 per
item, a record the dict of its fields, a string 49 plus its length...):

* Avro: :class:`AvroShape` walks the binary with the writer's schema before fastavro
  decodes it, counting what it would build without building it, and refuses past the
  budget (and malformed counts and lengths). The walk is skipped when it cannot matter:
  a schema without arrays, maps or recursion, or a value whose length times the most any
  of its bytes can cost stays within the budget (any small value of a schema whose
  repeated items take at least one byte).
* Protobuf: the parsed message (upb's, about 10 bytes per stored byte) is counted before
  ``MessageToDict`` when its length times the worst growth exceeds the budget.
* JSON: no counts to declare, at most about 25 times the bytes: within the budget.

The estimates are upper bounds of the right order, not exact sizes. ``cost`` of each
decoded value is also what an export's row group counts (its Parquet writer flushes by
the values it holds, decoded ones included).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

#: CPython 3.11 sizes (64-bit) the estimates use
SLOT = 9  # a reference in a list (8 bytes, and an eighth more as it grows)
INT = 32
FLOAT = 24
STR = 49  # plus the length
BYTES = 33  # plus the length
LIST = 88  # a list of up to four items (the first append makes room for four)
DICT = 64
MAP_ENTRY = 40  # a map's entry (hash, key and value references, amortized growth)

#: the most a decoded JSON value takes per stored byte ("[{},{},..." : a dict per 3 bytes)
JSON_GROWTH = 25
#: the most a decoded protobuf value takes per stored byte (an empty sub-message in 2
#: bytes: upb's message and MessageToDict's dict and list slot)
PROTOBUF_GROWTH = 45
#: a message object of the protobuf library, as counted
PROTOBUF_MESSAGE = DICT + 48


class ValueTooLarge(Exception):
    """A value whose decoded form would exceed its budget (or whose counts cannot be)."""


def _record_cost(fields: int) -> int:
    return sys.getsizeof(dict.fromkeys(range(fields)))


@dataclass(slots=True)
class _Node:
    """One Avro schema node, compiled: its kind and what the walk needs of it."""

    kind: str
    cost: int = 0  # the decoded value's own cost (nested repeats empty, strings empty)
    size: int | None = None  # encoded size when constant (every value the same length)
    min_size: int = 0  # the fewest bytes a value of it takes
    children: list[_Node] = field(default_factory=list)  # fields, branches, or the item
    count: int = 0  # enum symbols, fixed size, union branches


class AvroShape:
    """A (parsed, logical-type stripped) Avro writer schema, compiled for the budget walk."""

    def __init__(self, schema: Any) -> None:
        self._named: dict[str, Any] = {}
        self._compiled: dict[str, _Node] = {}
        self.recursive = False
        self.repeats = False  # arrays or maps anywhere
        self.unbounded = False  # a repeated item may take no bytes
        #: the most one stored byte of a value can cost (strings: one byte, one byte)
        self.ratio = 1.0
        self.root = self._compile(schema, ())

    # -- compiling ---------------------------------------------------------------------------

    def _compile(self, schema: Any, stack: tuple[str, ...]) -> _Node:
        if isinstance(schema, list):
            branches = [self._compile(b, stack) for b in schema]
            return _Node(
                "union",
                max((b.cost for b in branches), default=0),
                None,
                1 + min((b.min_size for b in branches), default=0),
                branches,
                len(branches),
            )
        if isinstance(schema, dict):
            kind = schema.get("type")
            if isinstance(kind, (dict, list)):
                return self._compile(kind, stack)
            name = schema.get("name")
            if kind in ("record", "error", "enum", "fixed") and isinstance(name, str):
                self._named[name] = schema
            if kind in ("record", "error"):
                return self._named_node(name, schema, stack)
            if kind == "enum":
                symbols = len(schema.get("symbols") or [])
                return _Node("enum", 0, None, 1, count=symbols)
            if kind == "fixed":
                size = int(schema.get("size") or 0)
                return _Node("fixed", BYTES + size, size, size, count=size)
            if kind == "array":
                self.repeats = True
                item = self._compile(schema.get("items"), stack)
                self._item(item)
                return _Node("array", LIST, None, 1, [item])
            if kind == "map":
                self.repeats = True
                value = self._compile(schema.get("values"), stack)
                self._item(value, extra=MAP_ENTRY + STR, key_bytes=1)
                return _Node("map", DICT, None, 1, [value])
            return self._compile(kind, stack)
        if isinstance(schema, str):
            primitive = _PRIMITIVES.get(schema)
            if primitive is not None:
                cost, size, min_size = primitive
                return _Node(schema, cost, size, min_size)
            if schema in stack:
                self.recursive = True
                return _Ref(schema)
            if schema in self._compiled:
                return self._compiled[schema]
            named = self._named.get(schema)
            if named is None:
                raise ValueTooLarge(f"the schema names an unknown type {schema!r}")
            return self._compile(named, stack)
        raise ValueTooLarge(f"the schema has a node {schema!r} the walk does not know")

    def _named_node(self, name: Any, schema: dict[str, Any], stack: tuple[str, ...]) -> _Node:
        fields = schema.get("fields") or []
        inner = (*stack, name) if isinstance(name, str) else stack
        node = _Node("record", _record_cost(len(fields)))
        if isinstance(name, str):
            self._compiled[name] = node
        node.children = [self._compile(f.get("type"), inner) for f in fields]
        node.cost += sum(c.cost for c in node.children)
        node.min_size = sum(c.min_size for c in node.children)
        sizes = [c.size for c in node.children]
        node.size = sum(s for s in sizes if s is not None) if None not in sizes else None
        return node

    def _item(self, item: _Node, extra: int = 0, key_bytes: int = 0) -> None:
        least = item.min_size + key_bytes
        if least == 0 or isinstance(item, _Ref):
            self.unbounded = True
            return
        self.ratio = max(self.ratio, (SLOT + extra + item.cost) / least)

    # -- the walk -----------------------------------------------------------------------------

    def needs_walk(self, length: int, budget: int) -> bool:
        """Whether a value of ``length`` bytes could exceed ``budget`` (else no walk).

        Without arrays or maps a value is its schema's fields and its own bytes (a
        recursive record nests one level per byte at least, as deep as fastavro's stack
        allows); with repeated items of at least one byte each, at most ``ratio`` per
        byte; items of no bytes (or recursive ones) can be any number: always walked."""
        if not self.repeats:
            return False
        if self.unbounded:
            return True
        return self.root.cost + length * self.ratio > budget

    def estimate(self, length: int) -> int:
        """An upper bound of a value's cost when it was not walked."""
        return int(self.root.cost + length * self.ratio)

    def cost(self, data: bytes | memoryview, budget: int) -> int:
        """What decoding ``data`` would build; ValueTooLarge past ``budget``, or when a
        count or length cannot be (negative, past the bytes)."""
        walk = _Walk(memoryview(data), budget, self)
        walk.value(self.root)
        return walk.cost


class _Ref(_Node):
    """A reference to a record being compiled (a recursive schema): resolved on use."""

    def __init__(self, name: str) -> None:
        _Node.__init__(self, "ref")
        self.name = name


#: primitive -> (cost, constant size or None, fewest bytes)
_PRIMITIVES: dict[str, tuple[int, int | None, int]] = {
    "null": (0, 0, 0),
    "boolean": (0, 1, 1),
    "int": (INT, None, 1),
    "long": (INT, None, 1),
    "float": (FLOAT, 4, 4),
    "double": (FLOAT, 8, 8),
    "bytes": (BYTES, None, 1),
    "string": (STR, None, 1),
}


class _Walk:
    """One walk over a value's bytes, adding up what fastavro would build."""

    __slots__ = ("budget", "cost", "data", "pos", "shape")

    def __init__(self, data: memoryview, budget: int, shape: AvroShape) -> None:
        self.data = data
        self.pos = 0
        self.cost = 0
        self.budget = budget
        self.shape = shape

    def _charge(self, amount: int) -> None:
        self.cost += amount
        if self.cost > self.budget:
            raise ValueTooLarge(
                f"it would take more than {self.budget} bytes decoded (about "
                f"{self.cost} at byte {self.pos} of {len(self.data)})"
            )

    def _long(self) -> int:
        data, pos, shift, acc = self.data, self.pos, 0, 0
        while True:
            if pos >= len(data):
                raise ValueTooLarge(f"a number is cut off at byte {pos}")
            b = data[pos]
            pos += 1
            acc |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 63:
                raise ValueTooLarge(f"a number at byte {self.pos} takes more than 10 bytes")
        self.pos = pos
        return (acc >> 1) ^ -(acc & 1)

    def _skip(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueTooLarge(f"{what} of {n} bytes at byte {self.pos} does not fit the value")
        self.pos += n

    def value(self, node: _Node) -> None:
        kind = node.kind
        if node.size is not None:  # null, boolean, float, double, fixed, such records
            self._skip(node.size, kind)
            self._charge(node.cost)
        elif kind in ("int", "long"):
            self._long()
            self._charge(INT)
        elif kind in ("string", "bytes"):
            n = self._long()
            self._skip(n, kind)
            self._charge(node.cost + n)
        elif kind == "record":
            self._charge(node.cost - sum(c.cost for c in node.children))
            for child in node.children:
                self.value(child)
        elif kind == "enum":
            index = self._long()
            if not 0 <= index < node.count:
                raise ValueTooLarge(f"enum index {index} of {node.count} symbols")
        elif kind == "union":
            index = self._long()
            if not 0 <= index < node.count:
                raise ValueTooLarge(f"union branch {index} of {node.count}")
            self.value(node.children[index])
        elif kind == "array":
            self._repeated(node.children[0], 0)
        elif kind == "map":
            self._charge(DICT)
            self._repeated(node.children[0], MAP_ENTRY)
        elif kind == "ref":
            assert isinstance(node, _Ref)
            self.value(self.shape._compiled[node.name])
        else:  # pragma: no cover - every kind compiled is handled above
            raise ValueTooLarge(f"an Avro node {kind!r}")

    def _repeated(self, item: _Node, entry: int) -> None:
        if entry == 0:
            self._charge(LIST)
        while True:
            count = self._long()
            if count == 0:
                return
            if count < 0:  # a block with its byte size after the count
                count = -count
                self._long()
            per = SLOT + entry + (item.cost if item.size is not None else 0)
            self._charge(count * per)  # refused here when the count alone is too many
            if entry == 0 and item.size is not None:
                self._skip(count * item.size, "an array block")
                continue
            for _ in range(count):
                if entry:
                    n = self._long()
                    self._skip(n, "a map key")
                    self._charge(STR + n)
                if item.size is None or entry:
                    if item.size is None:
                        self.value(item)
                    else:
                        self._skip(item.size, "a map value")


__all__ = [
    "JSON_GROWTH",
    "PROTOBUF_GROWTH",
    "AvroShape",
    "ValueTooLarge",
    "protobuf_cost",
]


def _is_repeated(descriptor: Any) -> bool:
    repeated = getattr(descriptor, "is_repeated", None)  # protobuf 6 and later
    if repeated is not None:
        return bool(repeated)
    return bool(descriptor.label == descriptor.LABEL_REPEATED)


def protobuf_cost(message: Any, budget: int) -> int:
    """What ``MessageToDict`` would build of a parsed message (ValueTooLarge past
    ``budget``): a dict per message, a list per repeated field, its items. Sub-messages
    are charged before they are visited, so that no more of them are looked at (each a
    Python wrapper) than the budget allows."""
    total = PROTOBUF_MESSAGE
    stack = [message]

    def charge(amount: int) -> None:
        nonlocal total
        total += amount
        if total > budget:
            raise ValueTooLarge(f"it would take more than {budget} bytes decoded")

    while stack:
        fields = stack.pop().ListFields()
        charge(len(fields) * (SLOT + STR))
        for descriptor, value in fields:
            kind = descriptor.message_type
            if not _is_repeated(descriptor):
                if kind is not None:
                    charge(PROTOBUF_MESSAGE)
                    stack.append(value)
                else:
                    charge(INT + (len(value) if isinstance(value, (str, bytes)) else 0))
                continue
            if kind is not None and kind.GetOptions().map_entry:
                item = kind.fields_by_name["value"].message_type
                charge(DICT + len(value) * (MAP_ENTRY + STR + INT))
                if item is not None:
                    charge(len(value) * PROTOBUF_MESSAGE)
                    stack.extend(value.values())
                continue
            charge(LIST + len(value) * SLOT)
            if kind is not None:
                charge(len(value) * PROTOBUF_MESSAGE)
                stack.extend(value)
            else:
                charge(len(value) * INT)
    return total
