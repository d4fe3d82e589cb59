"""A plan is untrusted input: everything it asks for is checked before anything is written.

Loading a plan (:meth:`Plan.load`) checks, after its digest (tamper evidence) and its
shape:

* every metadata change's key is of the kind it claims, under the roots of the store the
  plan was made for (:class:`~.binding.Binding`):

  - ``managed-ledger``: a topic's znode, ``/managed-ledgers/<tenant>/<ns>/persistent/<topic>``
    (or the v1 form with a cluster);
  - ``cursor``: a child of such a znode;
  - ``ledger``: a ledger's znode under the ledgers root in one of BookKeeper's layouts
    (``lm.ledger_id_from_path``), which ``LAYOUT``, ``INSTANCEID``, ``cookies``,
    ``available``, ``idgen`` and the other BookKeeper nodes never are;

* every value the plan writes decodes as its kind (ManagedLedgerInfo, ManagedCursorInfo,
  ledger metadata of that ledger id), and no value is larger than
  :data:`MAX_VALUE_SIZE`;
* every bookie change is inside a ledger directory the plan was made for, at the one
  place its kind and ledger id give (``current/ledgers``, ``current/locations``, or the
  ledger's ``.idx`` file ``current/<hex>/<hex>/<hex id>.idx``), and the bytes it removes
  belong to that ledger (each ``locations`` key starts with the ledger id; a
  ``LedgerData`` and an index header decode).

Apply then checks the places themselves (:func:`check_bookie_place`): no symbolic link
in the path, an ``.idx`` file a regular file.
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path
from typing import TYPE_CHECKING

from pulsarctl_py.decoders import ledger_metadata as lm
from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.decoders.managed_ledger import ML_ROOT

if TYPE_CHECKING:
    from .binding import Binding
    from .bookie_index import BookieChange
    from .change import Change

#: the largest value a plan may write or expect (ZooKeeper's own default cap is 1 MiB)
MAX_VALUE_SIZE = 64 * 1024 * 1024
_LEDGER_ID = struct.Struct(">q")
_ID_LIMIT = 2**63


class PlanInvalid(LedgerctlError):
    """A plan asking for something it cannot be for (exit 2)."""


def _topic_segments(key: str) -> list[str] | None:
    prefix = ML_ROOT + "/"
    return key[len(prefix) :].split("/") if key.startswith(prefix) else None


def _is_ml(parts: list[str]) -> bool:
    # <tenant>/<ns>/persistent/<topic>, or v1 <tenant>/<cluster>/<ns>/persistent/<topic>
    return (len(parts) == 4 and parts[2] == "persistent") or (
        len(parts) == 5 and parts[3] == "persistent"
    )


def key_kind_ok(key: str, kind: str, roots: dict[str, str]) -> bool:
    """Whether ``key`` is a node of ``kind`` under ``roots``."""
    if kind == "ledger":
        return lm.ledger_id_from_path(key, roots["ledgers"]) is not None
    parts = _topic_segments(key)
    if parts is None or not all(parts):
        return False
    if kind == "managed-ledger":
        return _is_ml(parts)
    if kind == "cursor":
        return len(parts) >= 5 and _is_ml(parts[:-1])
    return False


def _decodes(change: Change, data: bytes, roots: dict[str, str]) -> str | None:
    """Why ``data`` does not decode as the change's kind (None when it does)."""
    from pulsarctl_py.decoders import managed_ledger as mld

    try:
        if change.kind == "managed-ledger":
            mld.parse_ml_info(data)
        elif change.kind == "cursor":
            mld.parse_cursor_info(data)
        else:
            ledger_id = lm.ledger_id_from_path(change.key, roots["ledgers"])
            md = lm.parse(data, ledger_id)
            if md.missing:
                return f"missing required fields: {', '.join(md.missing)}"
    except LedgerctlError as exc:
        return exc.one_line()
    except Exception as exc:  # a decoder bug must not let the value through
        return f"{type(exc).__name__}: {exc}"
    return None


def validate_change(change: Change, roots: dict[str, str]) -> None:
    """Refuse a metadata change outside its kind's place or writing what is not its kind."""
    if not key_kind_ok(change.key, change.kind, roots):
        raise PlanInvalid(
            f"plan: {change.key} is not a {change.kind} node under "
            f"{roots['managed_ledgers'] if change.kind != 'ledger' else roots['ledgers']}: "
            "refused"
        )
    for name, data in (("old", change.old), ("new", change.new)):
        if data is not None and len(data) > MAX_VALUE_SIZE:
            raise PlanInvalid(
                f"plan: the {name} value of {change.key} is {len(data)} bytes, more than "
                f"{MAX_VALUE_SIZE}"
            )
    if change.new is not None:
        why = _decodes(change, change.new, roots)
        if why is not None:
            raise PlanInvalid(
                f"plan: the value it writes to {change.key} is not a {change.kind} value "
                f"({why}): refused"
            )


def bookie_place(current: str, kind: str, ledger_id: int) -> str:
    """The one path a bookie change of ``kind`` for ``ledger_id`` can name in ``current``."""
    from pulsarctl_py.decoders import index_file

    if kind == "ledger-data":
        return os.path.join(current, "ledgers")
    if kind == "locations":
        return os.path.join(current, "locations")
    return os.path.join(current, index_file.ledger_index_path(ledger_id))


def validate_bookie_change(change: BookieChange, binding: Binding) -> None:
    """Refuse a bookie change outside the bound ledger dirs, at another place than its
    kind's, or removing bytes that are not that ledger's."""
    from pulsarctl_py.decoders import index_file
    from pulsarctl_py.stores.bookie.indexes import parse_ledger_data

    if not 0 <= change.ledger_id < _ID_LIMIT:
        raise PlanInvalid(f"plan: bookie change of ledger {change.ledger_id}: not a ledger id")
    if change.current not in binding.bookie_dirs:
        raise PlanInvalid(
            f"plan: {change.path} is not in a bookie directory the plan was made for: refused"
        )
    place = bookie_place(change.current, change.kind, change.ledger_id)
    if change.path != place:
        raise PlanInvalid(
            f"plan: {change.path} is not where ledger {change.ledger_id}'s {change.kind} is "
            f"({place}): refused"
        )
    if len(change.old) > MAX_VALUE_SIZE:
        raise PlanInvalid(f"plan: {change.path}: the bytes it removes are over {MAX_VALUE_SIZE}")
    prefix = _LEDGER_ID.pack(change.ledger_id)
    try:
        if change.kind == "locations":
            for i in range(0, len(change.old), 24):
                if change.old[i : i + 8] != prefix:
                    raise PlanInvalid(
                        f"plan: {change.path}: a locations key it removes is not ledger "
                        f"{change.ledger_id}'s: refused"
                    )
        elif change.kind == "ledger-data":
            parse_ledger_data(change.ledger_id, change.old, "rocksdb", Path(change.path))
        else:
            index_file.parse_header(change.old[: index_file.START_OF_DATA])
    except PlanInvalid:
        raise
    except LedgerctlError as exc:
        raise PlanInvalid(
            f"plan: {change.path}: the bytes it removes are not ledger {change.ledger_id}'s "
            f"{change.kind} ({exc.one_line()}): refused"
        ) from None


def check_bookie_place(change: BookieChange) -> None:
    """At apply or undo: the place holds no symbolic link (the path resolves to itself),
    and an ``.idx`` file is a regular file."""
    path = change.path
    if change.kind == "index-file":
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise LedgerctlError(f"cannot check {path}: {exc.strerror or exc}") from None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise PlanInvalid(f"{path} is not a regular file (the plan names an index file)")
        checked = path if st is not None else os.path.dirname(path)
        while not os.path.lexists(checked):  # undo may recreate missing directories
            checked = os.path.dirname(checked)
    else:
        checked = path
    if os.path.realpath(checked) != checked:
        raise PlanInvalid(
            f"{checked} has a symbolic link in its path: the plan's bookie changes are "
            "refused (ledgerctl never follows one into a bookie directory)"
        )
