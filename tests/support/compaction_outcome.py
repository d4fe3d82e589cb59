"""What two compaction runs are compared by: the report (without the engine and the time),
the spooled compacted entries, and the exported view."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def outcome(report: Any, engine: str, export: Path) -> tuple[str, list[Any], bytes]:
    """(the report as JSON without ``engine`` and ``seconds``, the spool's (position, bytes),
    the export file's bytes); the spool file is removed. The report must name ``engine``."""
    from pulsarctl_py.compaction.run import read_spool

    try:
        entries = [(e.position, bytes(e.data)) for e in read_spool(report.spool)]
    finally:
        report.spool.unlink()
    doc = report.to_json()
    assert doc.pop("engine") == engine
    doc.pop("seconds", None)
    return json.dumps(doc, sort_keys=True, default=str), entries, export.read_bytes()
