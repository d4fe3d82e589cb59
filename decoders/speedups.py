"""The compiled fast paths of the decoders, when they were built.

``native`` is the C module ``_speedups`` (decoders/_speedups.c and the units beside it), or
None when it was not built (no C compiler at install time) or when
``LEDGERCTL_PURE_PYTHON`` is set to a non-empty value. Every caller keeps a pure-Python
path and takes it when ``native`` is None or when a native function returns None (input
that is not regular). The results of the two paths are equal; tests/decoders/test_speedups.py
checks that.

To measure one entry point's gain (docs/performance.md, "Native entry points"),
``LEDGERCTL_PURE_PYTHON`` may instead name entry points, comma-separated, of those in
:data:`STAND_INS`: only they are off, each answering what its callers take as "not
regular" for every input, so that they run their Python path; any other value turns the
whole module off.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import fields
from types import ModuleType
from typing import Any

PURE_PYTHON_ENV = "LEDGERCTL_PURE_PYTHON"


_IRREGULAR = 2  # HEADS_IRREGULAR


def _named_slots(slots: Any, first: int, end: int, *rest: Any) -> list[int]:
    view = memoryview(slots).cast("B")
    return [i for i in range(first, end) if any(view[8 * i : 8 * i + 8])]


#: the entry points that can be turned off alone, and the answer each then gives: the one
#: its callers take as "not regular, the Python path decides" (see each in _speedups.h)
STAND_INS: dict[str, Callable[..., Any]] = {
    "split_batch": lambda *args: None,
    "entry_doc": lambda entry: None,
    "entry_lines": lambda pairs, start, *rest: ([], start, 0, 0, None, None, None, None),
    "payload_items": lambda items, first, end, *rest: list(range(first, end)),
    "payload_slots": _named_slots,
    "payload_records": lambda records, first, end, *rest: list(range(first, end)),
    "v3_read_replies": lambda buf, pos, max_frame, out: pos,
    "item_slots": lambda items, start, ledger_id: (b"", 0, start),
    "log_slots": lambda window, pos, *rest: (pos, _IRREGULAR),
    "compact_offer": lambda *args: None,
    "compact_keep": lambda *args: None,
    "compact_rebuild": lambda *args: None,
    # the scans: stop at their first item as irregular (start is their second argument)
    **dict.fromkeys(
        (
            "scan_heads",
            "scan_slots",
            "record_heads",
            "verify_heads",
            "verify_slots",
            "verify_records",
        ),
        lambda items, start, *rest: (start, _IRREGULAR),
    ),
}


class _Without:
    """The native module with some entry points answering "not regular" (STAND_INS)."""

    def __init__(self, module: ModuleType, off: set[str]) -> None:
        self._module = module
        self._off = off

    def __getattr__(self, name: str) -> Any:
        if name in self._off:
            return STAND_INS[name]
        return getattr(self._module, name)


def _load() -> Any:
    value = os.environ.get(PURE_PYTHON_ENV, "")
    off = {name.strip() for name in value.split(",")} if value else set()
    if off and not off <= STAND_INS.keys():
        return None
    try:
        from . import _speedups
    except ImportError:
        return None
    return _Without(_speedups, off) if off else _speedups


native: Any = _load()


def bind(kind: int, cls: type) -> None:
    """Let the native module build ``cls`` objects: every slot, in field order."""
    if native is None:
        return
    names = tuple(f.name for f in fields(cls))
    if getattr(cls, "__slots__", None) != names:
        raise TypeError(f"{cls.__name__}: slots {cls.__slots__!r} are not its fields {names!r}")
    native.bind(kind, cls, names)
