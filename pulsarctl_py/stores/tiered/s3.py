"""Offload objects in S3 and S3-compatible stores, through boto3 (the ``tiered`` extra).

Where: the ledger's ``offloadContext.driverMetadata`` as Pulsar's S3 drivers write it
(``TieredStorageConfiguration.getOffloadDriverMetadata``: ``managedLedgerOffloadDriver``,
``bucket``, ``region``, ``serviceEndpoint``), or an override for copies and unreachable
endpoints. Credentials come from the environment only, never from flags, and are never
printed: AWS's own chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, profiles, …)
and, when it names none, Pulsar's ``ACCESS_KEY_ID``/``ACCESS_KEY_SECRET`` (what the
broker's ``S3`` driver reads, ``JCloudBlobStoreProvider``).

boto3 is imported only when an :class:`S3Objects` first talks to the store.

:func:`list_offload_objects` lists a bucket's offload objects, finished and unfinished
(multipart uploads never completed: an offload interrupted while it wrote the data
object), grouped by offload uuid and ledger, for ``orphans``: what no managed ledger
references is decided there, with the metadata, not here.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .jcloud import (
    JcloudLedger,
    ObjectHead,
    OffloadFormatError,
    OffloadObjectMissing,
    OffloadUnreachable,
    uuid_of,
)

#: driver names (``offloadContext.driverMetadata.name`` / managedLedgerOffloadDriver)
#: whose objects this module reads
S3_DRIVERS = frozenset({"s3", "aws-s3", "aws_s3"})
DEFAULT_REGION = "us-east-1"
#: seconds to connect and to wait for an answer; one retry
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class S3Location:
    """Where a ledger's offload objects are: a bucket at an endpoint (None: AWS's own)."""

    bucket: str
    endpoint: str | None = None
    region: str | None = None
    driver: str = "S3"

    @classmethod
    def from_driver_metadata(
        cls,
        driver: str,
        properties: Mapping[str, str],
        *,
        endpoint: str | None = None,
        bucket: str | None = None,
    ) -> S3Location:
        """The location an offload context names; ``endpoint``/``bucket`` override it
        (a copy of the bucket, an endpoint reached another way)."""
        name = driver or properties.get("managedLedgerOffloadDriver", "")
        if name.lower() not in S3_DRIVERS:
            from pulsarctl_py.decoders.errors import LedgerctlError

            raise LedgerctlError(
                f"offload driver {name or '(none)'!r}: only the S3 drivers (S3, aws-s3) "
                "are read from object stores"
            )
        chosen = bucket or properties.get("bucket") or ""
        if not chosen:
            from pulsarctl_py.decoders.errors import LedgerctlError

            raise LedgerctlError(
                "the offload context names no bucket: give one with an s3://bucket offload URL"
            )
        return cls(
            bucket=chosen,
            endpoint=endpoint or properties.get("serviceEndpoint") or None,
            region=properties.get("region") or None,
            driver=name,
        )


_SESSION: Any = None
_SESSION_LOCK = threading.Lock()


def _new_client(**kwargs: Any) -> Any:
    """An S3 client from the process's one boto3 session (a new session loads botocore's
    service models again; a session makes clients one at a time)."""
    global _SESSION
    with _SESSION_LOCK:
        if _SESSION is None:
            import boto3

            _SESSION = boto3.session.Session()
        return _SESSION.client("s3", **kwargs)


def _credentials() -> dict[str, str]:
    """Pulsar's ACCESS_KEY_ID/ACCESS_KEY_SECRET when AWS's variables name no key; empty
    otherwise (boto3 then follows AWS's chain)."""
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return {}
    key, secret = os.environ.get("ACCESS_KEY_ID"), os.environ.get("ACCESS_KEY_SECRET")
    if key and secret:
        return {"aws_access_key_id": key, "aws_secret_access_key": secret}
    return {}


class S3Objects:
    """One bucket of an S3 or S3-compatible store, read by HEAD, ranged GET and listings.

    Implements :class:`pulsarctl_py.stores.tiered.jcloud.ObjectSource`. Every failure to
    talk to the store raises OffloadUnreachable (exit 3) with one line naming the endpoint
    and bucket; an object that is not there raises OffloadObjectMissing.
    """

    def __init__(self, location: S3Location, *, client: Any = None) -> None:
        self.location = location
        self._client = client
        where = location.endpoint or f"AWS S3 ({location.region or DEFAULT_REGION})"
        self.endpoint_name = where
        self.name = f"s3://{location.bucket} at {where}"

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                import boto3  # noqa: F401
                from botocore.config import Config
            except ImportError:
                import sys

                from pulsarctl_py.decoders.errors import LedgerctlError

                # the Python named: on Spark it is an executor's, not the driver's
                raise LedgerctlError(
                    f"reading S3 offloads needs boto3 in {sys.executable}: "
                    "pip install 'ledgerctl[tiered]'"
                ) from None
            config = Config(
                connect_timeout=CONNECT_TIMEOUT,
                read_timeout=READ_TIMEOUT,
                retries={"max_attempts": 2, "mode": "standard"},
                # an S3-compatible endpoint (MinIO, moto, Ceph) serves path-style
                # addresses; AWS itself serves both
                s3={"addressing_style": "path" if self.location.endpoint else "auto"},
            )
            self._client = _new_client(
                endpoint_url=self.location.endpoint,
                region_name=self.location.region or os.environ.get("AWS_REGION") or DEFAULT_REGION,
                config=config,
                **_credentials(),
            )
        return self._client

    # -- errors --------------------------------------------------------------------------

    def _failed(self, exc: Exception, key: str | None) -> Exception:
        """The one-line error for a boto3/botocore failure."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        what = f"{key} in {self.name}" if key else self.name
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("NoSuchBucket",) or (code in ("404", "NotFound") and key is None):
                return OffloadUnreachable(
                    f"S3 endpoint {self.endpoint_name} refused: no bucket "
                    f"{self.location.bucket} there ({status} {code})"
                )
            if code in ("NoSuchKey", "404", "NotFound"):
                return OffloadObjectMissing("no such object")
            if code == "InvalidRange":
                return OffloadFormatError(f"{what}: a range past the object's end was asked")
            message = str(error.get("Message", "") or "").replace("\n", " ")
            return OffloadUnreachable(
                f"S3 endpoint {self.endpoint_name} refused ({status} {code}"
                + (f": {message}" if message else "")
                + f") for s3://{self.location.bucket}"
                + (f" object {key}" if key else "")
            )
        if isinstance(exc, NoCredentialsError):
            return OffloadUnreachable(
                f"no credentials for S3 endpoint {self.endpoint_name}: set AWS_ACCESS_KEY_ID "
                "and AWS_SECRET_ACCESS_KEY (or Pulsar's ACCESS_KEY_ID and ACCESS_KEY_SECRET)"
            )
        if isinstance(exc, BotoCoreError):
            reason = str(exc).replace("\n", " ")
            return OffloadUnreachable(
                f"S3 endpoint {self.endpoint_name} could not be reached for "
                f"s3://{self.location.bucket}: {reason}"
            )
        return exc

    def _ask(self, key: str | None, fn: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(**kwargs)
        except (BotoCoreError, ClientError) as exc:
            raise self._failed(exc, key) from None

    # -- ObjectSource ---------------------------------------------------------------------

    def head(self, key: str) -> ObjectHead:
        try:
            answer = self._ask(key, self.client.head_object, Bucket=self.location.bucket, Key=key)
        except OffloadObjectMissing:
            # a HEAD answers a bare 404 whether the key or the whole bucket is missing
            self._ask(None, self.client.head_bucket, Bucket=self.location.bucket)
            raise
        metadata = {str(k).lower(): str(v) for k, v in (answer.get("Metadata") or {}).items()}
        return ObjectHead(int(answer["ContentLength"]), metadata)

    def read(self, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        answer = self._ask(
            key,
            self.client.get_object,
            Bucket=self.location.bucket,
            Key=key,
            Range=f"bytes={start}-{start + length - 1}",
        )
        body = answer["Body"]
        try:
            # the body is never longer than the range asked: bounded
            data: bytes = self._ask(key, body.read)
        finally:
            body.close()
        return data[:length]

    # -- listings -------------------------------------------------------------------------

    def objects(self, prefix: str = "") -> Iterator[StoredObject]:
        """Every object under ``prefix``, in key order, page by page."""
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.location.bucket, "Prefix": prefix}
            if token:
                kwargs["ContinuationToken"] = token
            page = self._ask(None, self.client.list_objects_v2, **kwargs)
            for item in page.get("Contents") or ():
                yield StoredObject(
                    str(item["Key"]), int(item.get("Size", 0)), _ms(item.get("LastModified"))
                )
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")

    def uploads(self, prefix: str = "") -> Iterator[PendingUpload]:
        """Multipart uploads started and neither completed nor aborted."""
        key_marker: str | None = None
        upload_marker: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.location.bucket, "Prefix": prefix}
            if key_marker:
                kwargs["KeyMarker"] = key_marker
            if upload_marker:
                kwargs["UploadIdMarker"] = upload_marker
            page = self._ask(None, self.client.list_multipart_uploads, **kwargs)
            for item in page.get("Uploads") or ():
                yield PendingUpload(
                    str(item["Key"]), str(item["UploadId"]), _ms(item.get("Initiated"))
                )
            if not page.get("IsTruncated"):
                return
            key_marker = page.get("NextKeyMarker")
            upload_marker = page.get("NextUploadIdMarker")


def _ms(when: Any) -> int | None:
    """A boto3 datetime as epoch milliseconds."""
    return None if when is None else int(when.timestamp() * 1000)


# -- grouping a bucket's offload objects ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredObject:
    key: str
    size: int
    modified: int | None = None  # epoch ms


@dataclass(frozen=True, slots=True)
class PendingUpload:
    """A multipart upload never completed (``BlobStoreManagedLedgerOffloader`` aborts it
    on a failure it sees; a broker that dies leaves it)."""

    key: str
    upload_id: str
    initiated: int | None = None  # epoch ms


#: ``DataBlockUtils`` keys: ``<uuid>-ledger-<id>`` and ``-index``; the streaming
#: offloader's ``<uuid>`` and ``<uuid>-index`` segments
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_LEDGER_KEY = re.compile(rf"({_UUID})-ledger-(\d+)(-index)?")
_SEGMENT_KEY = re.compile(rf"({_UUID})(-index)?")


def parse_key(key: str) -> tuple[str, int | None, str] | None:
    """``(uuid, ledger id, kind)`` of an offload object key, kind ``data`` or ``index``
    (ledger id None for the streaming offloader's segments); None for other keys."""
    found = _LEDGER_KEY.fullmatch(key)
    if found is not None:
        return found[1].lower(), int(found[2]), "index" if found[3] else "data"
    found = _SEGMENT_KEY.fullmatch(key)
    if found is not None:
        return found[1].lower(), None, "index" if found[2] else "data"
    return None


@dataclass(slots=True)
class OffloadGroup:
    """The objects of one offload (one uuid and ledger) found in a bucket."""

    uuid: str
    ledger_id: int | None  # None: a streaming offloader segment
    data: StoredObject | None = None
    index: StoredObject | None = None
    uploads: list[PendingUpload] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Both objects there and no upload left unfinished."""
        return self.data is not None and self.index is not None and not self.uploads

    def to_json(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "ledger_id": self.ledger_id,
            "data": None if self.data is None else {"key": self.data.key, "size": self.data.size},
            "index": None
            if self.index is None
            else {"key": self.index.key, "size": self.index.size},
            "unfinished_uploads": [
                {"key": u.key, "upload_id": u.upload_id, "initiated": u.initiated}
                for u in self.uploads
            ],
            "complete": self.complete,
        }


@dataclass(slots=True)
class OffloadListing:
    """A bucket's offload objects grouped by (uuid, ledger id), and the other keys."""

    where: str
    groups: dict[tuple[str, int | None], OffloadGroup]
    other: list[str]

    def by_ledger(self) -> dict[int, list[OffloadGroup]]:
        out: dict[int, list[OffloadGroup]] = {}
        for group in self.groups.values():
            if group.ledger_id is not None:
                out.setdefault(group.ledger_id, []).append(group)
        return out


def list_offload_objects(source: S3Objects, prefix: str = "") -> OffloadListing:
    """Every offload object and unfinished multipart upload of a bucket, grouped.

    The listing is whole or raises (OffloadUnreachable): a partial listing is never
    returned, so nothing is called orphan on a partial view.
    """
    groups: dict[tuple[str, int | None], OffloadGroup] = {}
    other: list[str] = []

    def group_of(key: str) -> tuple[OffloadGroup, str] | None:
        parsed = parse_key(key)
        if parsed is None:
            return None
        uuid, ledger_id, kind = parsed
        found = groups.get((uuid, ledger_id))
        if found is None:
            found = groups[(uuid, ledger_id)] = OffloadGroup(uuid, ledger_id)
        return found, kind

    for obj in source.objects(prefix):
        hit = group_of(obj.key)
        if hit is None:
            other.append(obj.key)
            continue
        group, kind = hit
        if kind == "index":
            group.index = obj
        else:
            group.data = obj
    for upload in source.uploads(prefix):
        hit = group_of(upload.key)
        if hit is None:
            other.append(upload.key)
            continue
        hit[0].uploads.append(upload)
    return OffloadListing(source.name, groups, other)


def open_ledger(
    ledger_id: int,
    offload_context: Any,
    *,
    endpoint: str | None = None,
    bucket: str | None = None,
) -> JcloudLedger:
    """The offloaded ledger an ``MLDataFormats.OffloadContext`` names (uuid halves and
    driver metadata), read from S3; ``endpoint``/``bucket`` override the context's (a copy
    of the bucket, an endpoint reached another way). Nothing is asked of the store yet."""
    driver = offload_context.driverMetadata
    properties = {p.key: p.value for p in driver.properties}
    location = S3Location.from_driver_metadata(
        driver.name, properties, endpoint=endpoint, bucket=bucket
    )
    uuid = uuid_of(offload_context.uidMsb, offload_context.uidLsb)
    return JcloudLedger(S3Objects(location), ledger_id, uuid)
