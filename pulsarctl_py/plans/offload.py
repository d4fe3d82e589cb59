"""The tiered side of a plan: offload objects and directories no managed ledger references,
deleted (``orphans --offloaded --delete``), backed up, and put back by undo.

A change (:class:`OffloadChange`) names one thing an offloader wrote, in one location:

* ``directory``: a filesystem offloader's MapFile directory ``<ledgerId>-<uuid>`` under
  ``<root>/<tenant>/<ns>/persistent/<topic>/`` (``FileSystemManagedLedgerOffloader``);
* ``object``: a jcloud data or index object ``<uuid>-ledger-<id>[-index]``
  (``BlobStoreManagedLedgerOffloader``, ``DataBlockUtils``);
* ``upload``: a multipart upload the jcloud offloader began and never completed nor
  aborted (a broker that died during the upload).

with what it was when the plan was made (its *fingerprint*: each file's size and
modification time; the object's size, ETag and last-modified time; the upload's id). The
plan is bound to each location it lists (:func:`location_binding`): a filesystem root by
its absolute path and its directory's device and inode (a root copied or made again at
the same path is another root), a bucket by its name, endpoint and region (every object's
ETag and time then tell a bucket made again apart). Apply uses the plan's locations only,
and refuses when ``LEDGERCTL_OFFLOAD_URL`` / ``LEDGERCTL_S3_ENDPOINT`` name another.

Apply (:func:`apply_offload`) re-reads before it deletes anything, and refuses (exit 5,
nothing deleted) when what it would delete changed: every managed ledger again (a ledger
that now references the uid, an offload that finished since, or whose managed ledger is
gone, makes it no orphan; one that does not decode refuses: no deletion on a partial
view), every object and directory again (the same fingerprint), and the broker that has
the topic loaded (``GET .../offload``: a RUNNING offload's objects are never deleted;
brokers that cannot be asked refuse, exit 4, unless ``--force-owned``). Then each object
and directory is copied, streamed, into the plan's backup (``PLAN.backup.json`` and the
directory ``PLAN.backup.offload/`` beside it: the file's or object's bytes, with an S3
object's user metadata and content type), and only then deleted. Undo
(:func:`undo_offload`) puts each back byte for byte (S3: uploaded again, streamed, with its
metadata; a directory: its files with their modification times). Aborting a multipart
upload cannot be undone (its parts are gone with it): the plan says so, and undo leaves
them out and says so.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pulsarctl_py.decoders.errors import DataError, LedgerctlError
from pulsarctl_py.errors import PlanConflict, TopicLoaded

if TYPE_CHECKING:
    from pulsarctl_py.stores.metadata.base import MetadataStore
    from pulsarctl_py.stores.tiered.references import OffloadRefs

    from .binding import Binding

KINDS = ("directory", "object", "upload")
#: the hook's step after each deletion or restore
STEP = "offload"
#: the directory beside the plan holding the copies of what it deleted
BACKUP_DIR_SUFFIX = ".backup.offload"
#: streamed in pieces of this size (bounded memory, whatever the object's size)
CHUNK = 1 << 20
UPLOAD_WARNING = (
    "aborting an unfinished multipart upload cannot be undone (S3 drops its parts): the "
    "plan aborts {n} upload(s), and `undo` leaves them aborted"
)
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_FS_DIR = re.compile(rf"(\d+)-({_UUID})")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(slots=True)
class OffloadChange:
    """One offload directory, object or unfinished upload the plan deletes."""

    kind: str
    #: ``file:///root`` or ``s3://bucket``
    location: str
    #: the directory's absolute path, or the object's (upload's) key
    path: str
    uuid: str
    ledger_id: int
    managed_ledger: str | None
    size: int
    #: what it was when the plan was made (see the module docstring)
    fingerprint: dict[str, Any]
    upload_id: str | None = None
    endpoint: str | None = None
    region: str | None = None
    driver: str = ""
    why: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        if self.kind == "directory":
            return self.path
        key = f"{self.location}/{self.path}"
        return f"{key}?uploadId={self.upload_id}" if self.kind == "upload" else key

    @property
    def digest(self) -> str:
        """The fingerprint as one value (what the backup records as this change's old)."""
        import json

        return _sha256(json.dumps(self.fingerprint, sort_keys=True).encode())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "action": "abort" if self.kind == "upload" else "delete",
            "location": self.location,
            "path": self.path,
            "uuid": self.uuid,
            "ledger_id": self.ledger_id,
            "managed_ledger": self.managed_ledger,
            "size": self.size,
            "fingerprint": self.fingerprint,
            "why": list(self.why),
        }
        if self.kind != "directory":
            out |= {"endpoint": self.endpoint, "region": self.region, "driver": self.driver}
        if self.kind == "upload":
            out["upload_id"] = self.upload_id
            out["undo"] = "cannot be undone: an aborted upload's parts are gone"
        return out

    @classmethod
    def from_json(cls, obj: Any) -> OffloadChange:
        """A change read back from a plan, refused unless it can only name what an
        offloader writes, where the plan says (an edited plan deletes nothing else)."""
        from pulsarctl_py.stores.tiered.s3 import parse_key

        if not isinstance(obj, dict):
            raise LedgerctlError("plan: an offload change is not a JSON object")
        kind, location, path, uid, ledger = (
            obj.get(k) for k in ("kind", "location", "path", "uuid", "ledger_id")
        )
        if (
            kind not in KINDS
            or not isinstance(location, str)
            or not isinstance(path, str)
            or not isinstance(uid, str)
            or isinstance(ledger, bool)
            or not isinstance(ledger, int)
        ):
            raise LedgerctlError("plan: an offload change lacks its kind, location or path")
        size, fp, ml = obj.get("size"), obj.get("fingerprint"), obj.get("managed_ledger")
        if isinstance(size, bool) or not isinstance(size, int) or not isinstance(fp, dict):
            raise LedgerctlError(f"plan: {path}: the offload change's size or fingerprint")
        if ml is not None and not isinstance(ml, str):
            raise LedgerctlError(f"plan: {path}: managed_ledger is not text")
        why = obj.get("why", [])
        if not isinstance(why, list) or not all(isinstance(w, str) for w in why):
            raise LedgerctlError(f"plan: the reasons of {path} are not a list of text")
        if kind == "directory":
            root = _root_of(location)
            name = Path(path)
            m = _FS_DIR.fullmatch(name.name)
            if (
                not os.path.isabs(path)
                or os.path.normpath(path) != path
                or "\x00" in path
                or name.parent.parent.parent.parent.parent != root
                or name.parent.parent.name != "persistent"
                or m is None
                or (int(m[1]), m[2].lower()) != (ledger, uid)
            ):
                raise LedgerctlError(
                    f"plan: {path!r} is not an offload directory of ledger {ledger} under "
                    f"{location}"
                )
            return cls(kind, location, path, uid, ledger, ml, size, fp, why=list(why))
        if not location.startswith("s3://") or "/" in location[5:] or len(location) == 5:
            raise LedgerctlError(f"plan: {location!r} is not an s3://bucket location")
        parsed = parse_key(path)
        if parsed is None or (parsed[0].lower(), parsed[1]) != (uid, ledger):
            raise LedgerctlError(f"plan: {path!r} is not an offload object of ledger {ledger}")
        upload = obj.get("upload_id")
        if (kind == "upload") != isinstance(upload, str):
            raise LedgerctlError(f"plan: {path}: an upload change needs its upload id")
        texts = [obj.get(k) for k in ("endpoint", "region")]
        if not all(t is None or isinstance(t, str) for t in texts):
            raise LedgerctlError(f"plan: {path}: endpoint or region is not text")
        driver = obj.get("driver", "S3")
        return cls(
            kind,
            location,
            path,
            uid,
            ledger,
            ml,
            size,
            fp,
            upload if isinstance(upload, str) else None,
            texts[0],
            texts[1],
            driver if isinstance(driver, str) else "S3",
            list(why),
        )

    def summary(self) -> str:
        what = {
            "directory": "filesystem offload directory",
            "object": "offload object",
            "upload": "unfinished multipart upload",
        }[self.kind]
        where = "" if self.kind == "directory" else f" in {self.location}"
        return (
            f"{what} {self.path}{where} ({self.size} bytes; offload {self.uuid} of ledger "
            f"{self.ledger_id}, {self.managed_ledger or 'managed ledger unknown'})"
        )


def _root_of(location: str) -> Path:
    from pulsarctl_py.stores.tiered.filesystem import local_path

    if not location.startswith("file://"):
        raise LedgerctlError(f"plan: {location!r} is not a file:// offload root")
    root = local_path(location)
    if not root.is_absolute() or os.path.normpath(root) != str(root) or str(root) == "/":
        raise LedgerctlError(f"plan: {location!r} is not an absolute offload root")
    return root


class Plan(Protocol):
    """What this module reads of a plan (:class:`~.document.Plan`)."""

    offload: list[OffloadChange]
    binding: Binding | None


# -- where: one filesystem root or one bucket ----------------------------------------------


def s3_objects(change: OffloadChange) -> Any:
    from pulsarctl_py.stores.tiered.s3 import S3Location, S3Objects

    bucket = change.location[5:]
    return S3Objects(S3Location(bucket, change.endpoint, change.region, change.driver or "S3"))


def _root_identity(root: Path) -> dict[str, str]:
    try:
        st = os.stat(root)
    except OSError as exc:
        raise LedgerctlError(f"offload root {root}: {exc.strerror or exc}") from None
    return {"device": str(st.st_dev), "inode": str(st.st_ino)}


def location_binding(changes: list[OffloadChange]) -> list[dict[str, Any]]:
    """What binds the plan to each location it deletes in (the module docstring)."""
    out: dict[str, dict[str, Any]] = {}
    for c in changes:
        if c.location in out:
            continue
        if c.kind == "directory":
            out[c.location] = {
                "location": c.location,
                "identity": _root_identity(_root_of(c.location)),
            }
        else:
            out[c.location] = {
                "location": c.location,
                "endpoint": c.endpoint,
                "region": c.region,
            }
    return [out[k] for k in sorted(out)]


def check_location_binding(plan: Plan) -> None:
    """Refuse (:class:`~.binding.PlanBindingError`) a plan whose locations are not the
    ones it was made for (a root gone or made again at the same path; a change outside
    the locations the plan is bound to)."""
    from .binding import PlanBindingError

    bound = {b["location"]: b for b in (plan.binding.offload if plan.binding else [])}
    for c in plan.offload:
        b = bound.get(c.location)
        if b is None:
            raise PlanBindingError(f"plan: {c.location} is not a location the plan is bound to")
        if c.kind == "directory":
            root = _root_of(c.location)
            if not root.is_dir() or _root_identity(root) != b.get("identity"):
                raise PlanBindingError(
                    f"{c.location} is not the offload root the plan was made for (gone, or "
                    "another directory at the same path): make the plan again"
                )
        elif (b.get("endpoint"), b.get("region")) != (c.endpoint, c.region):
            raise PlanBindingError(f"plan: {c.key} is not in the location it is bound to")


def check_overrides(plan: Plan, offload_url: str | None, s3_endpoint: str | None) -> None:
    """Refuse (:class:`~.binding.PlanBindingError`) a plan when the offload URL or S3
    endpoint in effect now (``LEDGERCTL_OFFLOAD_URL``, ``LEDGERCTL_S3_ENDPOINT``) names
    another location than the plan's: it deletes only where it was made for, and says so
    rather than going elsewhere than the operator points."""
    from pulsarctl_py.stores.tiered.filesystem import local_path

    from .binding import PlanBindingError

    for c in plan.offload:
        if c.kind == "directory":
            if offload_url and not offload_url.startswith("s3://"):
                if os.path.realpath(local_path(offload_url)) != os.path.realpath(
                    _root_of(c.location)
                ):
                    raise PlanBindingError(
                        f"the plan deletes in {c.location}, not in {offload_url} (the offload "
                        "URL given now): a plan is applied only to the root it was made for"
                    )
            continue
        if offload_url and offload_url.startswith("s3://"):
            if offload_url[5:].strip("/") != c.location[5:]:
                raise PlanBindingError(
                    f"the plan deletes in {c.location}, not in {offload_url} (the offload URL "
                    "given now): a plan is applied only to the bucket it was made for"
                )
        if s3_endpoint and s3_endpoint != c.endpoint:
            raise PlanBindingError(
                f"the plan deletes in {c.location} at {c.endpoint or 'AWS S3'}, not at "
                f"{s3_endpoint} (LEDGERCTL_S3_ENDPOINT now): a plan is applied only to the "
                "store it was made for"
            )


# -- fingerprints: what is there now --------------------------------------------------------


def _dir_files(path: Path) -> list[tuple[str, Path]]:
    """Every file under an offload directory, by relative name, sorted."""
    files = []
    for base, dirs, names in os.walk(path, onerror=_raise):
        dirs.sort()
        for name in names:
            full = Path(base) / name
            files.append((str(full.relative_to(path)), full))
    return sorted(files)


def _raise(exc: OSError) -> None:
    raise LedgerctlError(f"cannot list {exc.filename}: {exc.strerror or exc}")


def dir_fingerprint(path: Path) -> dict[str, Any] | None:
    """Each file's size and modification time (ns) under ``path``; None when it is gone."""
    if not path.is_dir():
        return None
    out = []
    for name, full in _dir_files(path):
        st = full.stat()
        out.append([name, st.st_size, st.st_mtime_ns])
    return {"files": out}


def head_object(source: Any, key: str) -> dict[str, Any] | None:
    """An object's size, ETag, last-modified time, user metadata and content type (None:
    no such object)."""
    from pulsarctl_py.stores.tiered.s3 import OffloadObjectMissing

    try:
        answer = source._ask(key, source.client.head_object, Bucket=source.location.bucket, Key=key)
    except OffloadObjectMissing:
        return None
    modified = answer.get("LastModified")
    return {
        "size": int(answer["ContentLength"]),
        "etag": str(answer.get("ETag", "")),
        "modified_ms": None if modified is None else int(modified.timestamp() * 1000),
        "metadata": {str(k): str(v) for k, v in (answer.get("Metadata") or {}).items()},
        "content_type": answer.get("ContentType"),
    }


def object_fingerprint(head: dict[str, Any]) -> dict[str, Any]:
    return {k: head[k] for k in ("size", "etag", "modified_ms")}


def _uploads(source: Any, key: str) -> set[str]:
    return {u.upload_id for u in source.uploads(key) if u.key == key}


def fingerprint_now(change: OffloadChange) -> dict[str, Any] | None:
    """The change's fingerprint as the location holds it now (None: gone)."""
    if change.kind == "directory":
        return dir_fingerprint(Path(change.path))
    source = s3_objects(change)
    if change.kind == "upload":
        held = change.upload_id in _uploads(source, change.path)
        return dict(change.fingerprint) if held else None
    head = head_object(source, change.path)
    return None if head is None else object_fingerprint(head)


# -- drafting --------------------------------------------------------------------------------


def topic_of(managed_ledger: str | None) -> str | None:
    """The topic a managed-ledger name (``tenant/ns/persistent/local``) names."""
    from pulsarctl_py.decoders import managed_ledger as mld

    if not managed_ledger:
        return None
    try:
        return mld.TopicName.from_persistence_name(managed_ledger).full_name
    except (LedgerctlError, ValueError):
        return None


def running_offloads(
    store: MetadataStore,
    topics: list[str],
    say: Callable[[str], None],
    *,
    admin_url: list[str] | None = None,
    force_owned: bool = False,
) -> dict[str, str]:
    """Of ``topics``, those for which a broker runs an offload now: topic -> why. Asked of
    the broker that has the topic loaded only (``GET .../offload``, Pulsar's
    ``PersistentTopicsBase.internalOffloadStatus``; asking any other would load it); a
    topic no broker has loaded runs no offload (``ManagedLedgerImpl.offloadLoop`` runs in
    the broker that has it loaded). Brokers that cannot be asked refuse (exit 4) unless
    ``force_owned`` (then said, and nothing is known to run); ``admin_url``: the brokers'
    admin URLs (--admin-url; none: those registered in the metadata store)."""
    from pulsarctl_py.stores.broker import (
        BrokerRefused,
        BrokerUnreachable,
        topic_path,
        where_loaded,
    )
    from pulsarctl_py.stores.metadata import resolve_topic

    if store.location.scheme != "zk":
        return {}  # Pulsar's RocksDB store: no broker runs beside it
    running: dict[str, str] = {}
    for topic in topics:
        try:
            broker = where_loaded(store, topic, admin_url)
            if broker is None:
                continue
            status = broker.get_json(topic_path(resolve_topic(topic)) + "/offload")
        except (BrokerUnreachable, BrokerRefused) as exc:
            if not force_owned:
                raise TopicLoaded(
                    f"cannot ask the brokers whether an offload of {topic} is running "
                    f"({exc.one_line()}); nothing deleted: give a reachable admin URL "
                    "(--admin-url, $LEDGERCTL_ADMIN_URL), or --force-owned to delete without "
                    "asking"
                ) from None
            say(
                f"--force-owned: did not ask whether an offload of {topic} is running "
                f"({exc.one_line()})"
            )
            continue
        state = status.get("status") if isinstance(status, dict) else None
        if state == "RUNNING":
            running[topic] = f"the broker {broker.url} runs an offload of {topic} now"
    return running


# -- apply -----------------------------------------------------------------------------------


def backup_dir(bpath: Path) -> Path:
    """The directory beside the backup file holding the copies (``PLAN.backup.offload``)."""
    return bpath.with_name(bpath.name.removesuffix(".backup.json") + BACKUP_DIR_SUFFIX)


def _copy_name(index: int, change: OffloadChange) -> str:
    return f"{index:04d}-{change.kind}"


def recheck_references(plan: Plan, store: MetadataStore) -> OffloadRefs:
    """Every managed ledger again: refuse (exit 5) when one now references an offload the
    plan deletes, when its managed ledger is gone, or when its context now says the
    BookKeeper copy was deleted; one that does not decode refuses (a partial view)."""
    from pulsarctl_py.stores.tiered.references import offload_references

    refs: OffloadRefs = offload_references(store)
    for c in plan.offload:
        ident = (c.uuid, c.ledger_id)
        if ident in refs.complete:
            raise PlanConflict(
                f"{c.key}: a managed ledger references offload {c.uuid} of ledger "
                f"{c.ledger_id} now (an offload that finished since): it is no orphan; "
                "nothing deleted, make a new plan"
            )
        incomplete = refs.incomplete.get(ident)
        if incomplete is not None and incomplete[1]:
            raise PlanConflict(
                f"{c.key}: the context of ledger {c.ledger_id} now says its BookKeeper copy "
                "was deleted (this may be the only copy); nothing deleted"
            )
        if c.managed_ledger is not None and c.managed_ledger not in refs.managed_ledgers:
            raise PlanConflict(
                f"{c.key}: its managed ledger {c.managed_ledger} is no longer in the metadata "
                "store (the judgment no longer holds); nothing deleted, make a new plan"
            )
    return refs


def _check_running(
    plan: Plan,
    store: MetadataStore,
    refs: OffloadRefs,
    say: Callable[[str], None],
    admin_url: list[str] | None,
    force_owned: bool,
) -> None:
    """Refuse when a broker runs an offload of a topic a change belongs to: the one its
    path or object metadata names, and the one whose offload context names its uid."""
    topics: set[str] = set()
    unknown = []
    for c in plan.offload:
        incomplete = refs.incomplete.get((c.uuid, c.ledger_id))
        names = {c.managed_ledger, incomplete[0] if incomplete else None}
        found = {t for t in map(topic_of, names) if t}
        if not found:
            unknown.append(c.key)
        topics |= found
    if unknown:
        raise TopicLoaded(
            f"{unknown[0]}: the topic it belongs to is unknown, so the broker cannot be "
            "asked whether its offload runs; nothing deleted"
        )
    running = running_offloads(
        store, sorted(topics), say, admin_url=admin_url, force_owned=force_owned
    )
    if running:
        why = next(iter(running.values()))
        raise PlanConflict(
            f"{why} (it was not when the plan was made): a running offload's objects are "
            "never deleted; nothing deleted"
        )


def _copy_out(change: OffloadChange, target: Path) -> dict[str, Any]:
    """Copy what the change deletes into ``target`` (streamed); what the backup records."""
    if change.kind == "directory":
        target.mkdir(parents=True)
        files = []
        for name, full in _dir_files(Path(change.path)):
            dest = target / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha256()
            with open(full, "rb") as src, open(dest, "xb") as out:
                while chunk := src.read(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            st = full.stat()
            files.append(
                {
                    "name": name,
                    "size": st.st_size,
                    "mtime_ns": st.st_mtime_ns,
                    "sha256": digest.hexdigest(),
                }
            )
        return {"files": files}
    source = s3_objects(change)
    head = head_object(source, change.path)
    if head is None or object_fingerprint(head) != change.fingerprint:
        raise PlanConflict(
            f"{change.key} changed since the plan was made; nothing deleted: make a new plan"
        )
    answer = source._ask(
        change.path,
        source.client.get_object,
        Bucket=source.location.bucket,
        Key=change.path,
        IfMatch=head["etag"],
    )
    body = answer["Body"]
    digest = hashlib.sha256()
    size = 0
    try:
        with open(target, "xb") as out:
            for chunk in body.iter_chunks(CHUNK):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
    finally:
        body.close()
    if size != head["size"]:
        raise PlanConflict(f"{change.key} changed while it was copied; nothing deleted")
    return {
        "size": size,
        "sha256": digest.hexdigest(),
        "metadata": head["metadata"],
        "content_type": head["content_type"],
    }


def _delete(change: OffloadChange) -> None:
    if change.kind == "directory":
        shutil.rmtree(change.path)
        return
    source = s3_objects(change)
    bucket = source.location.bucket
    if change.kind == "upload":
        source._ask(
            change.path,
            source.client.abort_multipart_upload,
            Bucket=bucket,
            Key=change.path,
            UploadId=change.upload_id,
        )
    else:
        source._ask(change.path, source.client.delete_object, Bucket=bucket, Key=change.path)


#: what :func:`apply_offload` asks its caller to record in the backup, with the items
Save = Callable[[str, list[dict[str, Any]]], None]


@dataclass(slots=True)
class Earlier:
    """What the backup says of an earlier apply of the same plan (:mod:`.apply` reads it)."""

    #: an apply began (copies recorded, deletion maybe cut short) or finished
    began: bool = False
    #: it began and did not finish
    cut_short: bool = False
    applied: str | None = None
    items: list[dict[str, Any]] = field(default_factory=list)


def apply_offload(
    plan: Plan,
    store: MetadataStore,
    bpath: Path,
    earlier: Earlier,
    outcome: Any,
    after_step: Callable[[str], None],
    say: Callable[[str], None],
    save: Save,
    *,
    admin_url: list[str] | None = None,
    force_owned: bool = False,
) -> None:
    """Delete what the plan's offload changes name (the module docstring): checks, copies
    into the backup, deletes; a run cut short is finished by applying again. ``save``
    records the backup: ``save("applying", items)`` once the copies are made, ``save(
    "applied", items)`` when done; ``outcome`` is the apply's
    :class:`~pulsarctl_py.plans.Outcome`."""
    check_location_binding(plan)
    nows = [fingerprint_now(c) for c in plan.offload]
    if earlier.began:
        pending = []
        for c, now in zip(plan.offload, nows, strict=True):
            if now is None:
                outcome.unchanged.append({"key": c.key, "reason": "deleted already"})
            elif now != c.fingerprint:
                raise PlanConflict(
                    f"{c.key}: changed since the plan was applied ({earlier.applied}); "
                    "nothing deleted"
                )
            else:
                pending.append(c)
        if not pending:
            outcome.note = "already applied"
            if earlier.cut_short:
                save("applied", earlier.items)
            return
        refs = recheck_references(plan, store)
        _check_running(plan, store, refs, say, admin_url, force_owned)
        outcome.note = "resumed"
        for c in pending:
            _delete(c)
            outcome.written.append({"key": c.key, "action": _action(c), "sha256": None})
            after_step(STEP)
        save("applied", earlier.items)
        after_step("record")
        return
    for c, now in zip(plan.offload, nows, strict=True):
        if now is None:
            raise PlanConflict(f"{c.key}: no longer exists; nothing deleted: make a new plan")
        if now != c.fingerprint:
            raise PlanConflict(
                f"{c.key}: changed since the plan was made (size, ETag or modification time); "
                "nothing deleted: make a new plan"
            )
    refs = recheck_references(plan, store)
    _check_running(plan, store, refs, say, admin_url, force_owned)
    copies = backup_dir(bpath)
    if os.path.lexists(copies):
        shutil.rmtree(copies)  # a copy begun by an apply that never recorded it
    copies.mkdir(mode=0o700)
    saved: list[dict[str, Any]] = []
    for i, c in enumerate(plan.offload):
        item: dict[str, Any] = {"key": c.key, "fingerprint": c.digest}
        if c.kind != "upload":
            item["copy"] = _copy_name(i, c)
            item |= _copy_out(c, copies / item["copy"])
        saved.append(item)
    save("applying", saved)
    after_step("backup")
    for c in plan.offload:
        _delete(c)
        outcome.written.append({"key": c.key, "action": _action(c), "sha256": None})
        after_step(STEP)
    save("applied", saved)
    after_step("record")


def _action(c: OffloadChange) -> str:
    return "abort" if c.kind == "upload" else "delete"


# -- undo ------------------------------------------------------------------------------------


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _object_sha256(source: Any, key: str) -> str:
    answer = source._ask(key, source.client.get_object, Bucket=source.location.bucket, Key=key)
    body = answer["Body"]
    digest = hashlib.sha256()
    try:
        for chunk in body.iter_chunks(CHUNK):
            digest.update(chunk)
    finally:
        body.close()
    return digest.hexdigest()


def _holds_backup(change: OffloadChange, item: dict[str, Any], copies: Path) -> bool | None:
    """Whether the place holds the backed-up bytes (None: it is empty)."""
    if change.kind == "directory":
        path = Path(change.path)
        if not os.path.lexists(path):
            return None
        files = {name: full for name, full in _dir_files(path)} if path.is_dir() else {}
        want = {f["name"]: f["sha256"] for f in item["files"]}
        return set(files) == set(want) and all(_file_sha256(files[n]) == s for n, s in want.items())
    source = s3_objects(change)
    head = head_object(source, change.path)
    if head is None:
        return None
    return head["size"] == item["size"] and _object_sha256(source, change.path) == item["sha256"]


def _check_copy(change: OffloadChange, item: dict[str, Any], copies: Path) -> None:
    """The backup copy is whole (its sha256 as recorded), else the undo is refused."""
    place = copies / str(item.get("copy", ""))
    try:
        if change.kind == "directory":
            ok = all(_file_sha256(place / f["name"]) == f["sha256"] for f in item["files"])
        else:
            ok = _file_sha256(place) == item["sha256"]
    except (OSError, KeyError, TypeError):
        ok = False
    if not ok:
        raise DataError(
            f"the backup copy of {change.key} in {copies} is missing or damaged (its sha256 "
            "differs from the backup's record): nothing restored"
        )


def _restore(change: OffloadChange, item: dict[str, Any], copies: Path) -> None:
    place = copies / item["copy"]
    if change.kind == "directory":
        target = Path(change.path)
        tmp = target.with_name(target.name + ".ledgerctl-tmp")
        if os.path.lexists(tmp):
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        for f in item["files"]:
            dest = tmp / f["name"]
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(place / f["name"], "rb") as src, open(dest, "xb") as out:
                shutil.copyfileobj(src, out, CHUNK)
                out.flush()
                os.fsync(out.fileno())
            os.utime(dest, ns=(f["mtime_ns"], f["mtime_ns"]))
        os.replace(tmp, target)
        return
    from boto3.exceptions import S3UploadFailedError
    from boto3.s3.transfer import TransferConfig
    from botocore.exceptions import BotoCoreError, ClientError

    from pulsarctl_py.stores.tiered.s3 import OffloadUnreachable

    source = s3_objects(change)
    extra: dict[str, Any] = {"Metadata": dict(item.get("metadata") or {})}
    if item.get("content_type"):
        extra["ContentType"] = item["content_type"]
    with open(place, "rb") as fh:
        try:
            source.client.upload_fileobj(
                fh,
                source.location.bucket,
                change.path,
                ExtraArgs=extra,
                Config=TransferConfig(multipart_chunksize=8 * CHUNK, max_concurrency=1),
            )
        except (BotoCoreError, ClientError) as exc:
            raise source._failed(exc, change.path) from None
        except S3UploadFailedError as exc:
            raise OffloadUnreachable(
                f"S3 endpoint {source.endpoint_name} refused the upload of {change.path} to "
                f"{change.location}: {str(exc).splitlines()[0] if str(exc) else exc!r}"
            ) from None


def undo_offload(
    plan: Plan,
    bpath: Path,
    earlier: Earlier,
    undone_before: bool,
    outcome: Any,
    after_step: Callable[[str], None],
    save: Callable[[], None],
) -> None:
    """Put back every directory and object the apply deleted, from the copies (the
    backup's ``earlier.items``); uploads stay aborted (said per upload). A place holding
    anything else refuses the undo. ``save`` records the undo in the backup."""
    check_location_binding(plan)
    copies = backup_dir(bpath)
    items = {item.get("key"): item for item in earlier.items}
    todo = []
    for c in plan.offload:
        if c.kind == "upload":
            outcome.unchanged.append(
                {"key": c.key, "reason": "an aborted multipart upload cannot be brought back"}
            )
            continue
        item = items[c.key]
        held = _holds_backup(c, item, copies)
        if held:
            outcome.unchanged.append({"key": c.key, "reason": "already holds its old value"})
        elif held is None:
            _check_copy(c, item, copies)
            todo.append((c, item))
        else:
            raise DataError(
                f"{c.key} was written again after the plan was applied (it holds other bytes "
                "than the backup): nothing restored"
            )
    if not todo:
        outcome.note = "already undone" if undone_before else "nothing to restore"
    for c, item in todo:
        _restore(c, item, copies)
        outcome.written.append({"key": c.key, "action": "restore", "sha256": item.get("sha256")})
        after_step(STEP)
    save()


def iter_keys(changes: list[OffloadChange]) -> Iterator[str]:
    for c in changes:
        yield c.key
