"""The checks of a topic's cursors: the znode decodes, the cursor ledger exists and its
last PositionInfo reads, the mark-delete position is inside the topic's data."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders import managed_ledger as mld
from pulsarctl_py.verify.compaction import compacted_findings
from pulsarctl_py.verify.core import (
    ERROR,
    WARNING,
    Finding,
    LedgerFacts,
    Run,
)

if TYPE_CHECKING:
    from pulsarctl_py.stores.metadata import CursorRecord, ManagedLedgerRecord


def long_properties(props: Any) -> dict[str, int]:
    return {p.name: p.value for p in props}


def cursor_findings(
    run: Run,
    record: ManagedLedgerRecord,
    cursor: CursorRecord,
    ids: list[int],
    facts: dict[int, LedgerFacts],
) -> Iterator[Finding]:
    """cursor-unreadable, the cursor ledger, the mark-delete position, and for the
    ``__compaction`` cursor its compacted ledger."""
    topic = record.ref.topic.full_name
    name = cursor.name
    if cursor.info is None or cursor.info.missing:
        yield Finding(
            ERROR,
            "cursor-unreadable",
            topic,
            None,
            None,
            f"cursor {name!r}: the znode {cursor.path} does not decode: {cursor.error}",
            {"cursor": name, "path": cursor.path, "error": cursor.error},
        )
        if cursor.info is None:
            return
    position = cursor.mark_delete
    properties = long_properties(cursor.info.message.properties)
    origin = "znode"
    if cursor.state_in == "ledger":
        cl = cursor.cursors_ledger_id
        assert cl is not None
        run.referenced.add(cl)
        found = yield from _cursor_ledger(run, topic, name, cl)
        if found is not None:
            position, properties = found
            origin = f"cursor ledger {cl}"
    if position is not None:
        yield from _position(run, topic, name, position, origin, ids, facts)
    if name == mld.COMPACTION_CURSOR:
        compacted = properties.get(mld.COMPACTED_TOPIC_LEDGER)
        if compacted is not None:
            yield from compacted_findings(run, topic, compacted, position)


def _cursor_ledger(run: Run, topic: str, name: str, ledger_id: int) -> Any:
    """Findings about a cursor ledger; returns its last PositionInfo's position and
    properties, or None to fall back to the znode snapshot."""
    led = run.ledger(ledger_id)
    view = led.view
    missing = None
    if view is None or view.metadata is None:
        missing = "has no BookKeeper metadata"
    elif (
        run.source.bookie is not None and led.last is not None and led.last >= 0 and not led.stored
    ):
        missing = "holds no entries in bookie storage"
    if missing is not None:
        yield Finding(
            WARNING,
            "cursor-ledger-missing",
            topic,
            ledger_id,
            None,
            f"cursor {name!r}: its cursor ledger {ledger_id} {missing}; the broker rolls back "
            "to the znode's position (clamped to the topic's start) without the cursor's "
            "properties or individual acknowledgements, and redelivers what was "
            "acknowledged since",
            {"cursor": name},
        )
        return None
    if view is None or run.source.bookie is None or led.last is None or led.last < 0:
        return None
    view.kind = "cursor"  # whatever its tags say: decode its entries as PositionInfo
    entry = None
    error = led.last_entry_error
    if error is None:
        for _, got, err in run.entries(view, led.last, led.last):
            entry, error = got, err
    if entry is not None:
        errors = [p for p in entry.problems if p.severity == ERROR]
        if errors:
            error = "; ".join(str(p) for p in errors)
    if entry is None and error is None:
        error = "the entry is not in storage"
    if error is not None:
        yield Finding(
            ERROR,
            "entry-corrupt",
            topic,
            ledger_id,
            led.last,
            f"cursor {name!r}: the last entry {ledger_id}:{led.last} of its cursor ledger "
            f"is unreadable ({error}); a broker that cannot read it rolls back to the znode's "
            "position, without properties or individual acknowledgements",
            {"cursor": name, "problems": [error]},
        )
        return None
    assert entry is not None
    layer = entry.layers[-1] if entry.layers else None
    if layer is None or layer.name != "position-info":
        return None
    info, _ = mld.parse_position_info(layer.raw)
    return (info.ledgerId, info.entryId), long_properties(info.properties)


def _position(
    run: Run,
    topic: str,
    name: str,
    position: tuple[int, int],
    origin: str,
    ids: list[int],
    facts: dict[int, LedgerFacts],
) -> Iterator[Finding]:
    lid, eid = position
    details = {"cursor": name, "mark_delete": [lid, eid], "from": origin}
    if lid not in ids:
        if not ids or lid > ids[-1]:
            yield Finding(
                ERROR,
                "cursor-unknown-ledger",
                topic,
                lid,
                eid,
                f"cursor {name!r}: mark-delete position {lid}:{eid} ({origin}) is in a "
                "ledger after the topic's last ledger, ahead of all its data",
                {**details, "ledger_ids": ids[-5:]},
            )
        else:
            nxt = next(i for i in ids if i > lid)
            yield Finding(
                WARNING,
                "cursor-unknown-ledger",
                topic,
                lid,
                eid,
                f"cursor {name!r}: mark-delete position {lid}:{eid} ({origin}) is in a "
                f"ledger the topic no longer lists; on load the broker moves it to {nxt}:-1",
                {**details, "next_ledger": nxt},
            )
        return
    led = facts.get(lid)
    if led is None:  # a shadow's ledger checked under its source, or offloaded
        led = run.ledger(lid)
    last = led.last
    if last is not None and eid > last:
        yield Finding(
            ERROR,
            "cursor-beyond-lac",
            topic,
            lid,
            eid,
            f"cursor {name!r}: mark-delete position {lid}:{eid} ({origin}) is after the "
            f"last entry {lid}:{last} of its ledger",
            {**details, "last_entry_id": last},
        )
