"""The plan document: what a write will do, exactly, as a file a person can review.

A plan holds every key it changes (:class:`~.change.Change`: znode path; for Pulsar's
RocksDB store the key is the same path), the value's current version, creation id and
sha256, the old and new bytes (base64) and their decoded text with a line diff, what the
change makes unreachable (ledgers, entries, time range), the topics to unload, the
entries of a stopped bookie's indexes it deletes (:mod:`.bookie_index`), the ledgers the
command wrote before it (:mod:`.written`), and the store it was made for (:mod:`.binding`).

A plan file is untrusted input when it comes back (it may have been edited, or be
anything at all), so :meth:`Plan.load` reads it through :mod:`pulsarctl_py.documents`
(regular files only, size cap, no deep nesting) and refuses it unless

* its ``digest`` (sha256 over the rest of the document, canonical JSON) still matches:
  any edit is "plan was edited after it was made" (tamper evidence, not security: the
  digest is not secret);
* every key, kind, value and bookie path is one the plan can be for (:mod:`.validate`).

Metadata writes need the topics unloaded (formats.md §8.3): the owning broker caches the
state and rewrites the znodes on every ledger roll and cursor close (:data:`UNLOAD_WARNING`).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.decoders.errors import LedgerctlError

from .binding import Binding
from .bookie_index import BookieChange
from .change import Change, Unreachable
from .offload import OffloadChange
from .validate import validate_bookie_change, validate_change
from .written import Written, validate_written

if TYPE_CHECKING:
    from pulsarctl_py.outputs import Output

PLAN_FORMAT = "ledgerctl-plan"
#: 3: bound to its store, a digest, creation ids (1 and 2 had none of these: refused)
PLAN_VERSION = 3
UNLOAD_WARNING = (
    "the topics this plan changes must not be loaded by a broker when it is applied (apply "
    "refuses while one has, --unload unloads them): a broker that has a topic loaded caches "
    "its metadata and rewrites it on every ledger roll and cursor close"
)


@dataclass(slots=True)
class Plan:
    """What a repair will write, exactly; applied only by :func:`apply_plan`."""

    metadata_url: str
    changes: list[Change] = field(default_factory=list)
    repairs: list[dict[str, Any]] = field(default_factory=list)
    unreachable: Unreachable = field(default_factory=Unreachable)
    warnings: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    #: bookie index entries the plan deletes (offline bookies; see bookie_index)
    bookie: list[BookieChange] = field(default_factory=list)
    created_ms: int = field(default_factory=lambda: time.time_ns() // 1_000_000)
    #: the store it was made for (None only for a plan built by hand in a test)
    binding: Binding | None = None
    #: the digest it was loaded with (set by :meth:`from_json`)
    digest: str | None = None
    #: ledgers the command wrote before the plan (undo deletes them; see written)
    written: list[Written] = field(default_factory=list)
    #: offload objects and directories the plan deletes (tiered storage; see offload)
    offload: list[OffloadChange] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.changes and not self.bookie and not self.offload

    def to_json(self) -> dict[str, Any]:
        from pulsarctl_py.timeparse import format_time_ms

        binding = self.binding or Binding(self.metadata_url)
        body = {
            "format": PLAN_FORMAT,
            "version": PLAN_VERSION,
            "created": format_time_ms(self.created_ms),
            "metadata_url": binding.metadata_url,
            "store": binding.to_json(),
            "topics": list(self.topics),
            "repairs": list(self.repairs),
            "warnings": list(self.warnings),
            "unreachable": self.unreachable.to_json(),
            "changes": [c.to_json() for c in self.changes],
            "bookie": [c.to_json() for c in self.bookie],
        }
        if self.written:
            body["written"] = [w.to_json() for w in self.written]
        if self.offload:
            body["offload"] = [c.to_json() for c in self.offload]
        digest = document_digest(body)
        return {"format": PLAN_FORMAT, "version": PLAN_VERSION, "digest": digest, **body}

    @classmethod
    def from_json(cls, obj: Any) -> Plan:
        """The plan in ``obj``, refused unless its digest holds and every change is one
        it can be for (:mod:`.validate`)."""
        if not isinstance(obj, dict) or obj.get("format") != PLAN_FORMAT:
            raise LedgerctlError(f'not a ledgerctl plan (no "format": "{PLAN_FORMAT}")')
        version = obj.get("version")
        if version in (1, 2):
            raise LedgerctlError(
                f"plan format version {version} was made by an older ledgerctl, without the "
                "store it is for or a digest: make the plan again"
            )
        if version != PLAN_VERSION:
            raise LedgerctlError(f"plan format version {version!r} is not supported")
        digest = obj.get("digest")
        if not isinstance(digest, str) or digest != document_digest(obj):
            raise PlanEdited(
                "plan was edited after it was made (its digest does not match its content): "
                "refused; make the plan again"
            )
        raw_changes, raw_bookie = obj.get("changes", []), obj.get("bookie", [])
        if not isinstance(raw_changes, list) or not isinstance(raw_bookie, list):
            raise LedgerctlError('plan: "changes" or "bookie" is not a list')
        changes = [Change.from_json(c) for c in raw_changes]
        bookie = [BookieChange.from_json(c) for c in raw_bookie]
        keys = [c.key for c in changes] + [c.key for c in bookie]
        if len(set(keys)) != len(keys):
            raise LedgerctlError("plan: a key appears twice")
        url = obj.get("metadata_url", "")
        if not isinstance(url, str) or not url:
            raise LedgerctlError('plan: "metadata_url" is not text')
        raw_written = obj.get("written", [])
        if not isinstance(raw_written, list):
            raise LedgerctlError('plan: "written" is not a list')
        written = [Written.from_json(w) for w in raw_written]
        raw_offload = obj.get("offload", [])
        if not isinstance(raw_offload, list):
            raise LedgerctlError('plan: "offload" is not a list')
        offload = [OffloadChange.from_json(c) for c in raw_offload]
        if offload and (changes or bookie or written):
            raise LedgerctlError(
                "plan: offload deletions are planned alone, never with metadata or bookie changes"
            )
        if len({c.key for c in offload}) != len(offload):
            raise LedgerctlError("plan: an offload key appears twice")
        binding = Binding.from_json(
            url,
            obj.get("store"),
            empty=not changes and not bookie and not written and not offload,
        )
        bound = {b["location"] for b in binding.offload}
        for c in offload:
            if c.location not in bound:
                raise LedgerctlError(f"plan: {c.location} is not a location the plan is bound to")
        for change in changes:
            validate_change(change, binding.roots)
        for bc in bookie:
            validate_bookie_change(bc, binding)
        for w in written:
            validate_written(w, binding)

        def texts(name: str) -> list[str]:
            value = obj.get(name, [])
            return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

        repairs = obj.get("repairs", [])
        return cls(
            metadata_url=url,
            changes=changes,
            repairs=[r for r in repairs if isinstance(r, dict)]
            if isinstance(repairs, list)
            else [],
            unreachable=Unreachable.from_json(obj.get("unreachable", {})),
            warnings=texts("warnings"),
            topics=texts("topics"),
            bookie=bookie,
            binding=binding,
            digest=digest,
            written=written,
            offload=offload,
        )

    def write(self, out: Output) -> None:
        """Write the plan to a prepared output (see :func:`pulsarctl_py.outputs.prepare`)."""
        write_document(out, self.to_json(), "plan")

    def save(self, path: Path, *, force: bool = False) -> None:
        """Write the plan to ``path`` (an output of kind plan: see :mod:`pulsarctl_py.outputs`)."""
        from pulsarctl_py import outputs

        self.write(outputs.prepare(path, outputs.PLAN, force=force))

    @classmethod
    def load(cls, path: Path) -> Plan:
        from pulsarctl_py.documents import load_document

        return cls.from_json(load_document(path, "plan"))


class PlanEdited(LedgerctlError):
    """A plan whose content no longer matches its digest (exit 2)."""


def document_digest(doc: dict[str, Any]) -> str:
    """sha256 of the document without its ``digest``, as canonical JSON (sorted keys,
    ASCII, no spaces): the same for the document saved and for the one read back."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    try:
        text = json.dumps(body, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    except (TypeError, ValueError):  # not a JSON document at all: cannot match
        return ""
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def write_document(out: Output, obj: Any, what: str) -> None:
    """A JSON document, indented for people, to a prepared output; a plan too large to be
    read back is refused before it is written."""
    from pulsarctl_py.documents import ENV_MAX_SIZE, max_document_size

    text = json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # text that is not Unicode (lone surrogates): escape it
        data = (json.dumps(obj, indent=2, ensure_ascii=True) + "\n").encode("ascii")
    if len(data) > max_document_size():
        out.discard()
        raise LedgerctlError(
            f"the {what} would be {len(data)} bytes, more than the {max_document_size()} a "
            f"{what} may hold (set {ENV_MAX_SIZE} to raise the limit; the same value is "
            "needed to read it back)"
        )
    out.write_bytes(data)
