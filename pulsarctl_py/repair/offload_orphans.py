"""``orphans --offloaded``: what Pulsar's offloaders left in tiered storage that no managed
ledger references, judged on a whole view (:func:`judge_offload_orphans`).

An offload is referenced when a managed ledger's ``LedgerInfo.offloadContext`` names its
uid as ``complete`` for that ledger: the broker reads it (formats.md §18). Everything else
the offloaders wrote is left over (``ManagedLedgerImpl.offloadLoop`` writes the uid before
the objects and ``complete`` after them; a failed offload is cleaned up by
``cleanupOffloaded`` when the broker sees the failure, not when it dies; an offload retried
gets a new uid):

* the jcloud offloader's ``<uuid>-ledger-<id>`` / ``-index`` objects
  (``BlobStoreManagedLedgerOffloader``) and its multipart uploads never completed nor
  aborted (a broker that died during the upload), per bucket;
* the filesystem offloader's MapFile directories ``<ledgerId>-<uuid>`` under
  ``<root>/<tenant>/<ns>/persistent/<topic>/`` (``FileSystemManagedLedgerOffloader``).

The view must be whole: every managed ledger of the metadata store decoded (one that does
not decode may reference any offload: nothing is judged) and every location listed to the
end (a listing that fails raises; S3 listings are whole or raise, :func:`list_offload_objects`).
Kept, never called orphans (listed apart with the reason): what is younger than
``min_age_ms`` or of unknown age (an offload running now has written its objects and not
yet ``complete``), the objects of an offload whose context is there but not complete while
that ledger's BookKeeper copy is marked deleted (the only copy left, whatever state it is
in), and offloads of a managed ledger this metadata store does not hold (another cluster
sharing the bucket or root: the jcloud objects name theirs in ``managedledgername``).
Streaming offloader segments (``<uuid>``, ``<uuid>-index``) are not judged.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulsarctl_py.decoders.errors import LedgerctlError
from pulsarctl_py.stores.tiered.references import OffloadRefs, offload_references

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_FS_DIR = re.compile(rf"(\d+)-({_UUID})")


@dataclass(slots=True)
class OffloadOrphan:
    """One offload (a uuid and ledger) found in a store, judged."""

    location: str
    uuid: str
    ledger_id: int
    managed_ledger: str | None
    #: what would be deleted: object keys, or the MapFile directory
    paths: list[str]
    #: unfinished multipart uploads: (key, upload id)
    uploads: list[tuple[str, str]]
    size: int
    newest_ms: int | None
    age_ms: int | None
    why: str
    kept: str | None = None
    #: for an S3 location: (endpoint, region, driver) it was listed with
    s3: tuple[str | None, str | None, str] | None = None
    #: the managed ledger whose incomplete offload context names this uid (if one does)
    context_ml: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "location": self.location,
            "uuid": self.uuid,
            "ledger_id": self.ledger_id,
            "managed_ledger": self.managed_ledger,
            "paths": list(self.paths),
            "unfinished_uploads": [{"key": k, "upload_id": u} for k, u in self.uploads],
            "size": self.size,
            "newest_ms": self.newest_ms,
            "age_ms": self.age_ms,
            "why": self.why,
        }
        if self.kept is not None:
            out["kept"] = self.kept
        return out


def judge_offload_orphans(
    store: Any,
    *,
    offload_url: str | None = None,
    s3_endpoint: str | None = None,
    min_age_ms: int = 0,
    now_ms: int | None = None,
) -> list[OffloadOrphan]:
    """Every offload found in the locations the contexts name (``offload_url``: that one
    location instead; ``s3_endpoint``: the endpoint of every bucket), judged; ``kept`` set
    on those that are not orphans. Raises when the view is not whole."""
    refs = offload_references(store)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    found: list[OffloadOrphan] = []
    roots: list[str] = []
    buckets: list[tuple[str, str | None, str | None, str]] = []
    if offload_url:
        if offload_url.startswith("s3://"):
            buckets.append((offload_url[5:].strip("/"), s3_endpoint, None, "S3"))
        else:
            roots.append(offload_url)
    else:
        roots = sorted(refs.roots)
        buckets = sorted(
            {(b, s3_endpoint or e, r, d) for b, e, r, d in refs.buckets},
            key=lambda t: (t[0], t[1] or ""),
        )
    if not roots and not buckets:
        # nothing to list is no "no orphans"
        raise LedgerctlError(
            "no offload location to list: no managed ledger's offload context names one "
            "(no topic was offloaded, or only to a driver not read here); give one with "
            "LEDGERCTL_OFFLOAD_URL (file:///dir or s3://bucket)"
        )
    for root in roots:
        found.extend(_filesystem(root))
    for bucket, endpoint, region, driver in buckets:
        found.extend(_bucket(bucket, endpoint, region, driver, refs))
    judged = []
    for o in found:
        key = (o.uuid, o.ledger_id)
        if key in refs.complete:
            continue  # referenced: never listed
        o.age_ms = None if o.newest_ms is None else max(0, now - o.newest_ms)
        incomplete = refs.incomplete.get(key)
        if incomplete is not None:
            ml, deleted = incomplete
            o.managed_ledger = o.managed_ledger or ml
            o.context_ml = ml
            o.why = f"an interrupted offload of ledger {o.ledger_id} (its context is not complete)"
            if deleted:
                o.kept = (
                    "its context says the BookKeeper copy was deleted: this may be the only "
                    "copy of the ledger"
                )
        else:
            o.why = "no managed ledger names this offload"
        if o.kept is None and o.managed_ledger is not None:
            if o.managed_ledger not in refs.managed_ledgers:
                o.kept = (
                    f"its managed ledger {o.managed_ledger} is not in this metadata store "
                    "(another cluster's offload, or a deleted topic's): not judged"
                )
        if o.kept is None and min_age_ms > 0:
            if o.age_ms is None:
                o.kept = "its age is unknown (kept with --min-age)"
            elif o.age_ms < min_age_ms:
                o.kept = (
                    f"younger than --min-age ({o.age_ms // 1000} s): an offload may be running now"
                )
        judged.append(o)
    return judged


def _filesystem(root: str) -> Iterator[OffloadOrphan]:
    """The MapFile directories under a filesystem offloader's root; a directory that cannot
    be listed raises (the view would not be whole)."""
    from pulsarctl_py.stores.tiered.filesystem import local_path

    base = local_path(root)
    if not base.is_dir():
        raise LedgerctlError(f"offload root {root}: no such directory")

    def listdir(path: Path) -> list[Path]:
        try:
            return sorted(p for p in path.iterdir() if p.is_dir())
        except OSError as exc:
            raise LedgerctlError(
                f"offload root {root}: cannot list {path} ({exc.strerror}): no offload is "
                "judged on a partial listing"
            ) from None

    # <root>/<tenant>/<namespace>/persistent/<topic>/<ledgerId>-<uuid>
    for tenant in listdir(base):
        for ns in listdir(tenant):
            domain = ns / "persistent"
            if not domain.is_dir():
                continue
            for topic in listdir(domain):
                for ledger_dir in listdir(topic):
                    m = _FS_DIR.fullmatch(ledger_dir.name)
                    if m is None:
                        continue
                    size, newest = 0, None
                    for f in ledger_dir.iterdir():
                        st = f.stat()
                        size += st.st_size
                        mtime = int(st.st_mtime * 1000)
                        newest = mtime if newest is None else max(newest, mtime)
                    if newest is None:
                        newest = int(ledger_dir.stat().st_mtime * 1000)
                    ml = f"{tenant.name}/{ns.name}/persistent/{topic.name}"
                    yield OffloadOrphan(
                        base.as_uri(),
                        m[2].lower(),
                        int(m[1]),
                        _ml_name(ml),
                        [str(ledger_dir)],
                        [],
                        size,
                        newest,
                        None,
                        "",
                    )


def _ml_name(path_name: str) -> str:
    """The managed-ledger name of a filesystem offloader's topic directory (the topic's
    local name as the directory spells it; the metadata store URL-encodes it)."""
    from urllib.parse import quote, unquote

    tenant, ns, domain, topic = path_name.split("/", 3)
    return f"{tenant}/{ns}/{domain}/{quote(unquote(topic), safe='')}"


def _bucket(
    bucket: str, endpoint: str | None, region: str | None, driver: str, refs: OffloadRefs
) -> Iterator[OffloadOrphan]:
    from pulsarctl_py.stores.tiered.s3 import S3Location, S3Objects, list_offload_objects

    source = S3Objects(S3Location(bucket, endpoint, region, driver))
    listing = list_offload_objects(source)
    for group in listing.groups.values():
        if group.ledger_id is None:
            continue  # a streaming offloader segment: not judged
        if (group.uuid, group.ledger_id) in refs.complete:
            continue
        paths = [o.key for o in (group.data, group.index) if o is not None]
        times = [o.modified for o in (group.data, group.index) if o is not None]
        times += [u.initiated for u in group.uploads]
        known = [t for t in times if t is not None]
        ml = None
        for key in paths:  # the objects name the managed ledger that wrote them
            head = source.head(key)
            ml = {k.lower(): v for k, v in head.metadata.items()}.get("managedledgername") or ml
        yield OffloadOrphan(
            source.name,
            group.uuid,
            group.ledger_id,
            ml,
            paths,
            [(u.key, u.upload_id) for u in group.uploads],
            sum(o.size for o in (group.data, group.index) if o is not None),
            max(known) if known else None,
            None,
            "",
            s3=(endpoint, region, driver),
        )


def delete_offload_orphans(
    draft: Any,
    *,
    offload_url: str | None = None,
    s3_endpoint: str | None = None,
    min_age_ms: int = 0,
) -> list[OffloadOrphan]:
    """Draft the deletion of every offload orphan (:func:`judge_offload_orphans`) on
    ``draft`` (:mod:`pulsarctl_py.plans.offload`): its objects, directory and unfinished
    uploads. Kept besides what the judgment keeps: an orphan whose topic a broker runs an
    offload of now, and one whose topic is unknown (the broker cannot be asked)."""
    from pulsarctl_py import livewrite
    from pulsarctl_py.plans.offload import UPLOAD_WARNING, running_offloads, topic_of

    judged = judge_offload_orphans(
        draft.store, offload_url=offload_url, s3_endpoint=s3_endpoint, min_age_ms=min_age_ms
    )
    # the topic its path or objects name, and the one whose offload context names it
    topics_of = {
        id(o): sorted({t for t in map(topic_of, (o.managed_ledger, o.context_ml)) if t})
        for o in judged
        if o.kept is None
    }
    topics = sorted({t for names in topics_of.values() for t in names})
    live = livewrite.current()
    running = running_offloads(
        draft.store,
        topics,
        draft.warnings.append,
        admin_url=list(live.admin_url) or None,
        force_owned=live.force_owned,
    )
    for o in judged:
        if o.kept is not None:
            continue
        names = topics_of[id(o)]
        busy = [running[t] for t in names if t in running]
        if not names:
            o.kept = (
                "the topic it belongs to is unknown (its objects name no managed ledger): "
                "the broker cannot be asked whether its offload is running"
            )
        elif busy:
            o.kept = f"{busy[0]}: a running offload's objects are never deleted"
    for o in judged:
        if o.kept is not None:
            draft.warnings.append(
                f"offload {o.uuid} of ledger {o.ledger_id} is not deleted: {o.kept}"
            )
    orphans = [o for o in judged if o.kept is None]
    draft.offload.extend(draft_offload_deletion(orphans))
    uploads = sum(len(o.uploads) for o in orphans)
    if uploads:
        draft.warnings.append(UPLOAD_WARNING.format(n=uploads))
    draft.repairs.append(
        {
            "repair": "offload-orphans",
            "deleted": [o.to_json() for o in orphans],
            "min_age_ms": min_age_ms,
        }
    )
    return orphans


def draft_offload_deletion(orphans: list[OffloadOrphan]) -> list[Any]:
    """The changes that delete the judged orphans (kept ones left out), each with its
    fingerprint now."""
    from pulsarctl_py.errors import PlanConflict
    from pulsarctl_py.plans.offload import (
        OffloadChange,
        dir_fingerprint,
        head_object,
        object_fingerprint,
        s3_objects,
    )

    changes: list[OffloadChange] = []
    for o in orphans:
        why = o.why
        if o.location.startswith("s3://"):
            loc = o.location.split(" at ", 1)[0]
            endpoint, region, driver = o.s3 if o.s3 is not None else (None, None, "S3")
            source = s3_objects(
                OffloadChange(
                    "object",
                    loc,
                    "",
                    o.uuid,
                    o.ledger_id,
                    None,
                    0,
                    {},
                    None,
                    endpoint,
                    region,
                    driver,
                )
            )
            for key in o.paths:
                head = head_object(source, key)
                if head is None:
                    raise PlanConflict(
                        f"{loc}/{key} went away while the plan was made: make it again"
                    )
                changes.append(
                    OffloadChange(
                        "object",
                        loc,
                        key,
                        o.uuid,
                        o.ledger_id,
                        o.managed_ledger,
                        head["size"],
                        object_fingerprint(head),
                        None,
                        endpoint,
                        region,
                        driver,
                        [why],
                    )
                )
            for key, upload_id in o.uploads:
                changes.append(
                    OffloadChange(
                        "upload",
                        loc,
                        key,
                        o.uuid,
                        o.ledger_id,
                        o.managed_ledger,
                        0,
                        {"upload_id": upload_id},
                        upload_id,
                        endpoint,
                        region,
                        driver,
                        [why],
                    )
                )
        else:
            for path in o.paths:
                fp = dir_fingerprint(Path(path))
                if fp is None:
                    raise PlanConflict(f"{path} went away while the plan was made: make it again")
                size = sum(f[1] for f in fp["files"])
                changes.append(
                    OffloadChange(
                        "directory",
                        o.location,
                        path,
                        o.uuid,
                        o.ledger_id,
                        o.managed_ledger,
                        size,
                        fp,
                        why=[why],
                    )
                )
    return changes


def s3_endpoint_from_env() -> str | None:
    """``--s3-endpoint`` > ``LEDGERCTL_S3_ENDPOINT`` > ``s3_endpoint`` in ledgerctl.toml
    (:mod:`pulsarctl_py.precedence`)."""
    from pulsarctl_py.precedence import resolve

    return resolve("s3_endpoint").value or None
