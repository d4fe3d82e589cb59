"""The write spine: every write ledgerctl makes goes through a plan.

A plan is drafted (:mod:`.draft`: the store as the drafted changes would leave it), saved
as a document a person can review (:mod:`.document`: the changes of :mod:`.change`, a
digest, the store it is bound to, :mod:`.binding`), read back as untrusted input and
validated (:mod:`.validate`), checked against what the store holds (:mod:`.references`),
then applied with compare-and-set and a backup, and undone from it (:mod:`.apply`: the
one apply and the one undo). A plan may also delete entries of a stopped bookie's indexes
(:mod:`.bookie_index`), and record the ledgers a command wrote before it
(:mod:`.written`), written under the plan file saved before every step (:mod:`.writing`)
while the run holds a lease (:mod:`.leases`).

The recipes that draft plans (``repair``, ``compaction``, ``migrate``) import this
package; it imports none of them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .apply import (
        APPLIED,
        APPLYING,
        BACKUP_FORMAT,
        BACKUP_SUFFIX,
        STEPS,
        UNCHANGED,
        UNDONE,
        NeverApplied,
        Outcome,
        apply_plan,
        backup_path,
        undo_plan,
    )
    from .change import (
        KINDS,
        Change,
        Unreachable,
    )
    from .document import (
        PLAN_FORMAT,
        PLAN_VERSION,
        UNLOAD_WARNING,
        Plan,
        PlanEdited,
        document_digest,
    )
    from .draft import (
        Draft,
    )

#: what the package exports, and the module that defines it: imported on first use, so
#: that a reader of one module (``verify`` takes :mod:`.leases`) does not load the apply
_EXPORTS = {
    "APPLIED": ".apply",
    "APPLYING": ".apply",
    "BACKUP_FORMAT": ".apply",
    "BACKUP_SUFFIX": ".apply",
    "STEPS": ".apply",
    "UNCHANGED": ".apply",
    "UNDONE": ".apply",
    "NeverApplied": ".apply",
    "Outcome": ".apply",
    "apply_plan": ".apply",
    "backup_path": ".apply",
    "undo_plan": ".apply",
    "KINDS": ".change",
    "Change": ".change",
    "Unreachable": ".change",
    "PLAN_FORMAT": ".document",
    "PLAN_VERSION": ".document",
    "UNLOAD_WARNING": ".document",
    "Plan": ".document",
    "PlanEdited": ".document",
    "document_digest": ".document",
    "Draft": ".draft",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "APPLIED",
    "APPLYING",
    "BACKUP_FORMAT",
    "BACKUP_SUFFIX",
    "KINDS",
    "PLAN_FORMAT",
    "PLAN_VERSION",
    "STEPS",
    "UNCHANGED",
    "UNDONE",
    "UNLOAD_WARNING",
    "Change",
    "Draft",
    "NeverApplied",
    "Outcome",
    "Plan",
    "PlanEdited",
    "Unreachable",
    "apply_plan",
    "backup_path",
    "document_digest",
    "undo_plan",
]
