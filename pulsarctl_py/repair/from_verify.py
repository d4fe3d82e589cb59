"""``repair --from-verify``: the repairs for the findings of a verify report, drafted one
after another in one plan (each sees what the earlier ones drafted).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.plans import Draft
from pulsarctl_py.verify import codes

from .compaction_pointer import clear_compaction
from .cursors import clamp_cursors, cursor_snapshots
from .missing_ledgers import missing_ledgers
from .orphans import delete_orphans
from .shadow import shadow

if TYPE_CHECKING:
    from pulsarctl_py.ledgers import LedgerSource


#: verify check id -> the repair that fixes it: verify's table of finding codes
REPAIR_FOR_CHECK = codes.REPAIR_FOR_CHECK


def load_verify_report(path: Any) -> Any:
    """A verify report read back (untrusted, through :mod:`pulsarctl_py.documents`): the
    document of ``verify -o json``, or the lines of ``verify -o jsonl`` (one finding per
    line; a line holding the summary is skipped), as the list of findings."""
    import os

    from pulsarctl_py.documents import parse_document, read_document

    name = os.fspath(path)
    shown = "on standard input" if name == "-" else name
    what = "verify report"
    hint = " (use verify -o json or -o jsonl)"
    data = read_document(path, what, stdin=True)
    try:
        doc = parse_document(data, shown, what, hint)
    except LedgerctlError:
        lines = [line for line in data.splitlines() if line.strip()]
        if len(lines) < 2:
            raise
        doc = [
            parse_document(line, f"{shown} line {n}", what, hint) for n, line in enumerate(lines, 1)
        ]
    if isinstance(doc, dict) and "check" in doc:
        doc = [doc]  # verify -o jsonl of a single finding
    if isinstance(doc, list):
        doc = [f for f in doc if not (isinstance(f, dict) and "check" not in f and "summary" in f)]
    return doc


def from_verify(draft: Draft, report: Any, source: LedgerSource | None) -> list[dict[str, Any]]:
    """Draft the repairs for the findings of ``verify --output json`` (or a list of
    findings); returns the findings no repair handles, each with the reason."""
    findings = report.get("findings") if isinstance(report, dict) else report
    if not isinstance(findings, list) or not all(isinstance(f, dict) for f in findings):
        raise LedgerctlError(
            'not verify output: expected {"findings": [...]} from verify -o json, or one '
            "finding per line from verify -o jsonl"
        )
    todo: dict[tuple[str, str | None], None] = {}
    orphans: set[int] = set()
    unhandled = []
    # topic -> whether every ledger verify found without metadata still has its entries on
    # the bookies (then their metadata is recreated, as the findings say; the recreation
    # reads and verifies them itself)
    recreatable: dict[str, bool] = {}
    for f in findings:
        check = f.get("check")
        if check == "ledger-missing-metadata" and isinstance(f.get("topic"), str):
            data = (
                (f.get("details") or {}).get("data") if isinstance(f.get("details"), dict) else None
            )
            held = isinstance(data, dict) and bool(data.get("copies"))
            recreatable[f["topic"]] = recreatable.get(f["topic"], True) and held
        repair = REPAIR_FOR_CHECK.get(str(check))
        if repair is None:
            unhandled.append({"check": check, "topic": f.get("topic"), "reason": "no repair"})
            continue
        if repair == "orphans":
            if isinstance(f.get("ledger_id"), int):
                orphans.add(f["ledger_id"])
            continue
        topic = f.get("topic")
        if not isinstance(topic, str):
            unhandled.append({"check": check, "topic": topic, "reason": "names no topic"})
            continue
        if check == "ledger-missing-storage" and (source is None or source.bookie is None):
            unhandled.append(
                {"check": check, "topic": topic, "reason": "needs --bookie-dir to confirm"}
            )
            continue
        todo[(repair, topic)] = None
    # a shadow resyncs from its source once the source is repaired
    order = ["missing-ledgers", "cursor-snapshot", "clamp-cursors", "compaction", "shadow"]
    for repair, topic in sorted(todo, key=lambda rt: (order.index(rt[0]), rt[1] or "")):
        assert topic is not None
        if repair == "missing-ledgers":
            missing_ledgers(draft, topic, source, recreate=recreatable.get(topic, False))
        elif repair == "cursor-snapshot":
            cursor_snapshots(draft, topic, source)
        elif repair == "clamp-cursors":
            clamp_cursors(draft, topic, source)
        elif repair == "compaction":
            clear_compaction(draft, topic, source)
        elif repair == "shadow":
            shadow(draft, topic, source)
    if orphans:
        from pulsarctl_py.verify.orphans import DEFAULT_MIN_AGE_MS

        delete_orphans(draft, source, only=orphans, min_age_ms=DEFAULT_MIN_AGE_MS)
    return unhandled
