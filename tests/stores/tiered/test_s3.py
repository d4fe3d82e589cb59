"""The S3 path of the jcloud reader against a real S3 server (moto's, on loopback): ranged
GETs, credentials from the environment, unreachable and refusing endpoints, listings."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from pulsarctl_py.decoders.errors import EXIT_FINDINGS, EXIT_STORE, LedgerctlError
from pulsarctl_py.stores.tiered.jcloud import (
    FORMAT_VERSION_KEY,
    JcloudLedger,
    OffloadedEntry,
    OffloadFormatError,
    OffloadObjectMissing,
    OffloadUnreachable,
    data_key,
    index_key,
)
from pulsarctl_py.stores.tiered.s3 import (
    S3Location,
    S3Objects,
    list_offload_objects,
    parse_key,
)
from tests.stores.tiered.conftest import SECRET
from tests.support.jcloud_writer import write_ledger

BUCKET = "offloads"
UUID = "0d8f8f5e-6a43-4c39-9d0e-5b2b1c9e7a10"


@pytest.fixture(scope="module")
def bucket(s3_endpoint: str) -> dict[str, Any]:
    """The bucket with offloaded ledgers 5 (several blocks) and 6 (one block)."""
    objects = S3Objects(S3Location(BUCKET, s3_endpoint))
    client = objects.client
    client.create_bucket(Bucket=BUCKET)
    meta = {FORMAT_VERSION_KEY: "1", "role": "data", "managedLedgerName": "t/ns/persistent/x"}
    ledgers = {}
    for ledger_id, n, block in ((5, 40, 600), (6, 3, 64 << 20)):
        entries = [f"entry {ledger_id}:{i} ".encode() * (i % 7 + 1) for i in range(n)]
        data, index, _ = write_ledger(entries, block)
        client.put_object(Bucket=BUCKET, Key=data_key(UUID, ledger_id), Body=data, Metadata=meta)
        client.put_object(
            Bucket=BUCKET,
            Key=index_key(UUID, ledger_id),
            Body=index,
            Metadata={**meta, "role": "index"},
        )
        ledgers[ledger_id] = entries
    return {"endpoint": s3_endpoint, "ledgers": ledgers}


def _objects(endpoint: str, bucket: str = BUCKET) -> S3Objects:
    return S3Objects(
        S3Location.from_driver_metadata(
            "S3", {"bucket": bucket, "region": "eu-west-1", "serviceEndpoint": endpoint}
        )
    )


def test_reads_entries_by_ranged_gets(bucket: dict[str, Any]) -> None:
    objects = _objects(bucket["endpoint"])
    ranges: list[str | None] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        ranges.append(params.get("Range"))

    objects.client.meta.events.register("before-parameter-build.s3.GetObject", record)
    ledger = JcloudLedger(objects, 5, UUID, window=256)
    entries = bucket["ledgers"][5]
    got = list(ledger.read_entries())
    assert [g.data for g in got if isinstance(g, OffloadedEntry)] == entries
    assert all(r is not None for r in ranges)  # never a GET of a whole object
    ranges.clear()
    assert ledger.read_entry(33).data == entries[33]
    sizes = [int(b) - int(a) + 1 for a, b in (r[len("bytes=") :].split("-") for r in ranges)]
    assert sizes and max(sizes) <= 600  # at most one block's worth, in windows


def test_one_block_ledger_and_embedded_metadata(bucket: dict[str, Any]) -> None:
    ledger = JcloudLedger(_objects(bucket["endpoint"]), 6, UUID)
    entries = bucket["ledgers"][6]
    assert [g.data for g in ledger.read_entries()] == entries  # type: ignore[union-attr]
    assert ledger.metadata.last_entry_id == 2
    assert ledger.metadata.length == sum(map(len, entries))


def test_pulsar_credential_variables_are_used(bucket: dict[str, Any]) -> None:
    objects = _objects(bucket["endpoint"])
    credentials = objects.client._request_signer._credentials
    assert credentials.access_key == "ledgerctl-test"
    assert SECRET not in objects.name and SECRET not in repr(objects.location)


def test_missing_object_names_key_and_ledger(bucket: dict[str, Any]) -> None:
    ledger = JcloudLedger(_objects(bucket["endpoint"]), 99, UUID)
    with pytest.raises(OffloadObjectMissing) as caught:
        ledger.metadata  # noqa: B018
    assert caught.value.exit_code == EXIT_FINDINGS
    assert "ledger 99" in str(caught.value) and index_key(UUID, 99) in str(caught.value)


def test_refusing_endpoint_is_exit_3(bucket: dict[str, Any]) -> None:
    ledger = JcloudLedger(_objects(bucket["endpoint"], "no-such-bucket"), 5, UUID)
    with pytest.raises(OffloadUnreachable) as caught:
        ledger.metadata  # noqa: B018
    text = caught.value.one_line()
    assert caught.value.exit_code == EXIT_STORE
    assert bucket["endpoint"] in text and "ledger 5" in text and "no bucket no-such-bucket" in text
    assert SECRET not in text


def test_unreachable_endpoint_is_one_line_exit_3() -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    ledger = JcloudLedger(_objects(endpoint), 12, UUID)
    with pytest.raises(OffloadUnreachable) as caught:
        list(ledger.read_entries())
    text = caught.value.one_line()
    assert caught.value.exit_code == EXIT_STORE and "\n" not in text
    assert endpoint in text and "ledger 12" in text and "could not be reached" in text


def test_format_version_checked_on_the_real_object_metadata(bucket: dict[str, Any]) -> None:
    objects = _objects(bucket["endpoint"])
    data, index, _ = write_ledger([b"x" * 10])
    for key, body in ((data_key(UUID, 7), data), (index_key(UUID, 7), index)):
        objects.client.put_object(
            Bucket=BUCKET, Key=key, Body=body, Metadata={FORMAT_VERSION_KEY: "2"}
        )
    with pytest.raises(OffloadFormatError, match="offload format version '2'"):
        JcloudLedger(objects, 7, UUID).metadata  # noqa: B018


def test_driver_metadata() -> None:
    loc = S3Location.from_driver_metadata(
        "aws-s3", {"bucket": "b", "region": "r", "serviceEndpoint": ""}, endpoint=None
    )
    assert (loc.bucket, loc.endpoint, loc.region) == ("b", None, "r")
    over = S3Location.from_driver_metadata(
        "S3", {"bucket": "b", "serviceEndpoint": "http://a"}, endpoint="http://b", bucket="c"
    )
    assert (over.bucket, over.endpoint) == ("c", "http://b")
    with pytest.raises(LedgerctlError, match="only the S3 drivers"):
        S3Location.from_driver_metadata("google-cloud-storage", {"bucket": "b"})
    with pytest.raises(LedgerctlError, match="names no bucket"):
        S3Location.from_driver_metadata("S3", {})


def test_parse_key() -> None:
    assert parse_key(f"{UUID}-ledger-12") == (UUID, 12, "data")
    assert parse_key(f"{UUID}-ledger-12-index") == (UUID, 12, "index")
    assert parse_key(f"{UUID}-index") == (UUID, None, "index")
    assert parse_key(f"{UUID}") == (UUID, None, "data")
    assert parse_key("backup/readme.txt") is None
    assert parse_key(f"{UUID}-ledger-x") is None


def test_listing_groups_objects_and_unfinished_uploads(bucket: dict[str, Any]) -> None:
    objects = _objects(bucket["endpoint"], "listing")
    client = objects.client
    client.create_bucket(
        Bucket="listing", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
    )
    other = "9a1c2b3d-0000-4000-8000-00000000abcd"
    client.put_object(Bucket="listing", Key=data_key(UUID, 1), Body=b"d")
    client.put_object(Bucket="listing", Key=index_key(UUID, 1), Body=b"i")
    client.put_object(Bucket="listing", Key=index_key(other, 2), Body=b"i")  # no data
    client.put_object(Bucket="listing", Key="notes.txt", Body=b"n")
    # an offload that died while writing its data object: a multipart upload left open
    upload = client.create_multipart_upload(Bucket="listing", Key=data_key(other, 3))
    client.upload_part(
        Bucket="listing",
        Key=data_key(other, 3),
        UploadId=upload["UploadId"],
        PartNumber=1,
        Body=b"x" * 100,
    )
    listing = list_offload_objects(objects)
    assert set(listing.groups) == {(UUID, 1), (other, 2), (other, 3)}
    assert listing.groups[(UUID, 1)].complete
    assert listing.groups[(other, 2)].data is None and not listing.groups[(other, 2)].complete
    unfinished = listing.groups[(other, 3)]
    assert unfinished.data is None and [u.upload_id for u in unfinished.uploads] == [
        upload["UploadId"]
    ]
    assert listing.other == ["notes.txt"]
    assert sorted(listing.by_ledger()) == [1, 2, 3]
    assert listing.groups[(other, 3)].to_json()["unfinished_uploads"][0]["key"] == data_key(
        other, 3
    )
