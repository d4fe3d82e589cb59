"""The resolution of where an offloaded ledger is read (pulsarctl_py.stores.tiered.where):
each source alone and in conflict, against what the broker does (Pulsar 4.0.8's offloader
NARs, read from their classes):

* ``OffloadPoliciesImpl.mergeConfiguration``: field by field, topic > namespace > broker;
* ``BlobStoreManagedLedgerOffloader.readOffloaded``: the bucket of the ledger's driver
  metadata, through the blob store of the current configuration (its endpoint, region);
* ``TieredStorageConfiguration.getKeys``: ``aws-s3`` reads ``s3ManagedLedgerOffload*``
  before the generic keys, ``S3`` the generic keys only;
* ``FileSystemManagedLedgerOffloader``: its root is the current ``fs.defaultFS`` (the
  profile's, ``fileSystemURI`` over it), not the context's ``storageBasePath``;

and ledgerctl's overrides on top (flag > variable > ledgerctl.toml).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py import precedence
from pulsarctl_py.brokerconf import parse_broker_conf
from pulsarctl_py.errors import LedgerctlError
from pulsarctl_py.stores.metadata.base import Node
from pulsarctl_py.stores.tiered.locate import TieredLedger
from pulsarctl_py.stores.tiered.where import (
    Level,
    Locator,
    Overrides,
    conf_level,
    locate_ledger,
    merge,
    policy_level,
    profile_default_fs,
)

ML = "t/ns/persistent/x"
CTX_S3 = {
    "managedLedgerOffloadDriver": "S3",
    "bucket": "ctx-bucket",
    "region": "ctx-region",
    "serviceEndpoint": "http://ctx:9000",
}


def _loc(driver: str = "S3", props: dict[str, str] | None = None) -> TieredLedger:
    if props is None:
        props = dict(CTX_S3) if driver != "filesystem" else {"storageBasePath": "file:///ctx"}
    return TieredLedger(7, ML, 3, 30, "u-u-i-d", True, True, driver, props)


def _s3(endpoint: str, **extra: str) -> dict[str, str]:
    return {
        "managedLedgerOffloadDriver": "S3",
        "managedLedgerOffloadServiceEndpoint": endpoint,
        **extra,
    }


def _conf(text: str, path: str = "/etc/pulsar/broker.conf") -> Level:
    return conf_level(parse_broker_conf(text, path))


# -- each source alone --------------------------------------------------------------


def test_the_context_alone() -> None:
    where = locate_ledger(_loc())
    assert (where.bucket, where.endpoint, where.region) == (
        "ctx-bucket",
        "http://ctx:9000",
        "ctx-region",
    )
    assert set(where.sources.values()) == {
        "offloadContext (bucket)",
        "offloadContext (serviceEndpoint)",
        "offloadContext (region)",
    }
    fs = locate_ledger(_loc("filesystem"))
    assert fs.root == "file:///ctx"
    assert fs.sources == {"root": "offloadContext (storageBasePath)"}


@pytest.mark.parametrize(
    ("levels", "source"),
    [
        ([policy_level("topic policy t", _s3("http://topic:1")), None, None], "topic policy t"),
        ([None, policy_level("namespace policy t/ns", _s3("http://ns:1")), None], "namespace"),
        (
            [
                None,
                None,
                _conf(
                    "managedLedgerOffloadDriver=S3\n"
                    "managedLedgerOffloadServiceEndpoint=http://conf:1\n"
                ),
            ],
            "broker.conf",
        ),
    ],
)
def test_each_level_alone_names_the_endpoint_over_the_context(
    levels: list[Level | None], source: str
) -> None:
    """The broker reads through its current blob store: the configured endpoint, not
    the one the offload was written to."""
    where = locate_ledger(_loc(), levels=levels)
    assert where.endpoint is not None and where.endpoint != "http://ctx:9000"
    assert where.sources["endpoint"].startswith(source)
    assert "managedLedgerOffloadServiceEndpoint" in where.sources["endpoint"]
    # the bucket stays the ledger's own (readOffloaded: getBlobStoreLocation(driverMetadata))
    assert where.bucket == "ctx-bucket"
    assert where.sources["bucket"] == "offloadContext (bucket)"


def test_an_override_alone() -> None:
    over = Overrides("s3://copy", "LEDGERCTL_OFFLOAD_URL", "http://flag:1", "--s3-endpoint")
    where = locate_ledger(_loc(), over)
    assert (where.bucket, where.endpoint) == ("copy", "http://flag:1")
    assert where.sources["bucket"] == "LEDGERCTL_OFFLOAD_URL"
    assert where.sources["endpoint"] == "--s3-endpoint"
    fs = locate_ledger(_loc("filesystem"), Overrides("file:///copy", "--offload-url"))
    assert (fs.root, fs.sources["root"]) == ("file:///copy", "--offload-url")


# -- in conflict ----------------------------------------------------------------------


def test_topic_over_namespace_over_broker_conf_over_context() -> None:
    topic = policy_level("topic policy", _s3("http://topic:1"))
    ns = policy_level("namespace policy", _s3("http://ns:1", managedLedgerOffloadRegion="ns-r"))
    conf = _conf(
        "managedLedgerOffloadDriver=S3\nmanagedLedgerOffloadServiceEndpoint=http://conf:1\n"
        "managedLedgerOffloadRegion=conf-r\n"
    )
    assert locate_ledger(_loc(), levels=[topic, ns, conf]).endpoint == "http://topic:1"
    assert locate_ledger(_loc(), levels=[None, ns, conf]).endpoint == "http://ns:1"
    assert locate_ledger(_loc(), levels=[None, None, conf]).endpoint == "http://conf:1"
    # field by field: the topic names no region, the namespace's counts
    where = locate_ledger(_loc(), levels=[topic, ns, conf])
    assert (where.region, where.sources["region"]) == (
        "ns-r",
        "namespace policy (managedLedgerOffloadRegion)",
    )
    # the flag over all of them
    over = Overrides(s3_endpoint="http://flag:1", s3_endpoint_source="--s3-endpoint")
    assert locate_ledger(_loc(), over, [topic, ns, conf]).endpoint == "http://flag:1"


def test_merge_is_field_by_field() -> None:
    """mergeConfiguration: the driver from the namespace, the endpoint from broker.conf."""
    ns = policy_level("namespace policy", {"managedLedgerOffloadDriver": "S3", "x": "ignored"})
    conf = _conf("managedLedgerOffloadServiceEndpoint=http://conf:1\nmanagedLedgerOffloadDriver=\n")
    merged = merge([None, ns, conf])
    assert merged["managedLedgerOffloadDriver"] == (
        "S3",
        "namespace policy (managedLedgerOffloadDriver)",
    )
    assert merged["managedLedgerOffloadServiceEndpoint"][1].startswith("broker.conf ")
    assert locate_ledger(_loc(), levels=[None, ns, conf]).endpoint == "http://conf:1"


def test_the_drivers_keys() -> None:
    """aws-s3 reads s3ManagedLedgerOffloadServiceEndpoint first; S3 never reads it (the
    sandbox's stuck namespace: an S3 driver with only those keys has no endpoint)."""
    keys = {
        "s3ManagedLedgerOffloadServiceEndpoint": "http://legacy:1",
        "managedLedgerOffloadServiceEndpoint": "http://generic:1",
    }
    aws = policy_level("namespace policy", {"managedLedgerOffloadDriver": "aws-s3", **keys})
    s3 = policy_level("namespace policy", {"managedLedgerOffloadDriver": "S3", **keys})
    assert locate_ledger(_loc("aws-s3"), levels=[None, aws]).endpoint == "http://legacy:1"
    assert locate_ledger(_loc(), levels=[None, s3]).endpoint == "http://generic:1"
    only_legacy = policy_level(
        "namespace policy",
        {"managedLedgerOffloadDriver": "S3", "s3ManagedLedgerOffloadServiceEndpoint": "http://l:1"},
    )
    assert locate_ledger(_loc(), levels=[None, only_legacy]).endpoint == "http://ctx:9000"


def test_the_context_bucket_over_the_configured_one_and_the_configured_when_none() -> None:
    ns = policy_level("namespace policy", _s3("http://ns:1", managedLedgerOffloadBucket="ns-b"))
    assert locate_ledger(_loc(), levels=[None, ns]).bucket == "ctx-bucket"
    bare = _loc(props={"managedLedgerOffloadDriver": "S3"})
    where = locate_ledger(bare, levels=[None, ns])
    assert (where.bucket, where.sources["bucket"]) == (
        "ns-b",
        "namespace policy (managedLedgerOffloadBucket)",
    )


def test_a_changed_driver_reads_where_the_context_says_and_says_so() -> None:
    """The broker reads the ledger through the current (filesystem) offloader and fails;
    ledgerctl reads the S3 objects its context names, with a note."""
    ns = policy_level(
        "namespace policy t/ns",
        {"managedLedgerOffloadDriver": "filesystem", "fileSystemURI": "file:///fs"},
    )
    where = locate_ledger(_loc(), levels=[None, ns])
    assert where.endpoint == "http://ctx:9000"
    assert any("current offloader is filesystem" in n for n in where.notes)
    fs = locate_ledger(_loc("filesystem"), levels=[None, policy_level("n", _s3("http://x:1"))])
    assert fs.root == "file:///ctx"


def test_filesystem_root_from_uri_profile_and_context(tmp_path: Path) -> None:
    """FileSystemManagedLedgerOffloader: fs.defaultFS of the profile(s), fileSystemURI over
    it, the later profile over the earlier; a relative profile path is found next to
    broker.conf or one directory up (where the broker runs)."""
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    a = conf_dir / "a.xml"
    a.write_text(_profile("file:///from-a"))
    b = conf_dir / "b.xml"
    b.write_text(_profile("file:///from-b"))
    assert profile_default_fs(f"{a},{b}")[0] == "file:///from-b"
    assert profile_default_fs("conf/a.xml", conf_dir)[0] == "file:///from-a"
    profile = {"managedLedgerOffloadDriver": "filesystem", "fileSystemProfilePath": str(a)}
    where = locate_ledger(
        _loc("filesystem"), levels=[None, policy_level("namespace policy", profile)]
    )
    assert where.root == "file:///from-a"
    assert where.sources["root"].endswith("(fileSystemProfilePath): fs.defaultFS")
    uri = policy_level("namespace policy", {**profile, "fileSystemURI": "file:///uri"})
    assert locate_ledger(_loc("filesystem"), levels=[None, uri]).root == "file:///uri"
    # the shipped profile names an empty fs.defaultFS: the context's root, with a note
    (conf_dir / "empty.xml").write_text(_profile(""))
    empty = {"managedLedgerOffloadDriver": "filesystem", "fileSystemProfilePath": "empty.xml"}
    where = locate_ledger(
        _loc("filesystem"),
        levels=[None, None, _conf("\n".join(f"{k}={v}" for k, v in empty.items()))],
        conf_dir=conf_dir,
    )
    assert where.root == "file:///ctx"
    assert any("no fs.defaultFS" in n for n in where.notes)


def _profile(default_fs: str) -> str:
    return (
        "<?xml version='1.0'?><configuration>"
        f"<property><name>fs.defaultFS</name><value>{default_fs}</value></property>"
        "<property><name>hadoop.tmp.dir</name><value>pulsar</value></property>"
        "</configuration>"
    )


def test_overrides_flag_over_variable_over_config_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for name in ("LEDGERCTL_OFFLOAD_URL", "LEDGERCTL_S3_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "ledgerctl.toml").write_text('s3_endpoint = "http://toml:1"\n')
    over = Overrides.of(None, None)
    assert (over.s3_endpoint, over.s3_endpoint_source) == (
        "http://toml:1",
        str(tmp_path / "ledgerctl.toml"),
    )
    monkeypatch.setenv("LEDGERCTL_S3_ENDPOINT", "http://env:1")
    assert Overrides.of(None, None).s3_endpoint_source == "LEDGERCTL_S3_ENDPOINT"
    with precedence.flags(s3_endpoint="http://flag:1"):
        over = Overrides.of(None, None)
        assert (over.s3_endpoint, over.s3_endpoint_source) == ("http://flag:1", "--s3-endpoint")
    # a value a library caller passed (already resolved)
    assert Overrides.of(None, "http://given:1").s3_endpoint_source == "argument"


# -- the Locator: the metadata store's namespace policies, the topic's policies ----------


class _Store:
    def __init__(self, nodes: dict[str, bytes]) -> None:
        self.nodes = nodes
        self.reads: list[str] = []

    def get(self, path: str) -> Node | None:
        self.reads.append(path)
        data = self.nodes.get(path)
        return None if data is None else Node(data, None)  # type: ignore[arg-type]


class _TopicPolicies:
    def __init__(self, local: Any = None, global_: Any = None) -> None:
        self.local, self.global_ = local, global_


def test_locator_reads_namespace_and_topic_policies_once() -> None:
    doc = {"offload_policies": _s3("http://ns:1"), "retention_policies": None}
    store = _Store({"/admin/policies/t/ns": json.dumps(doc).encode()})
    asked: list[str] = []

    def topic_policies(topic: str) -> _TopicPolicies:
        asked.append(topic)
        return _TopicPolicies(global_={"offloadPolicies": _s3("http://topic-global:1")})

    locator = Locator(store, topic_policies=topic_policies)
    where = locator.locate(_loc())
    assert where.endpoint == "http://topic-global:1"
    assert where.sources["endpoint"].startswith("topic policy persistent://t/ns/x (global)")
    locator.locate(_loc())
    assert asked == ["persistent://t/ns/x"] and store.reads == ["/admin/policies/t/ns"]
    # without topic policies: the namespace's
    assert Locator(store).locate(_loc()).endpoint == "http://ns:1"


def test_locator_broker_conf_under_the_namespace(tmp_path: Path) -> None:
    conf = parse_broker_conf(
        "managedLedgerOffloadDriver=S3\nmanagedLedgerOffloadServiceEndpoint=http://conf:1\n",
        str(tmp_path / "broker.conf"),
    )
    nothing = _Store({})
    where = Locator(nothing, conf=conf).locate(_loc())
    assert where.endpoint == "http://conf:1"
    assert where.sources["endpoint"] == (
        f"broker.conf {tmp_path / 'broker.conf'} (managedLedgerOffloadServiceEndpoint)"
    )
    ns = _Store(
        {"/admin/policies/t/ns": json.dumps({"offload_policies": _s3("http://ns:1")}).encode()}
    )
    assert Locator(ns, conf=conf).locate(_loc()).endpoint == "http://ns:1"


def test_unreadable_policies_are_noted_not_guessed() -> None:
    def broken(topic: str) -> Any:
        raise LedgerctlError("the __change_events ledger 9 is missing")

    store = _Store({"/admin/policies/t/ns": b"{not json"})
    where = Locator(store, topic_policies=broken).locate(_loc())
    assert where.endpoint == "http://ctx:9000"
    assert any("topic policies of persistent://t/ns/x were not read" in n for n in where.notes)
    assert any("are not JSON" in n for n in where.notes)


def test_an_override_of_the_other_kind_is_refused() -> None:
    with pytest.raises(LedgerctlError) as exc:
        locate_ledger(_loc(), Overrides("file:///copy", "LEDGERCTL_OFFLOAD_URL"))
    assert "s3://bucket" in str(exc.value) and "LEDGERCTL_OFFLOAD_URL" in str(exc.value)
    with pytest.raises(LedgerctlError) as exc:
        locate_ledger(_loc("filesystem"), Overrides("s3://copy", "--offload-url"))
    assert "file:///dir" in str(exc.value)


def test_spark_splits_carry_the_drivers_broker_conf(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Executors read the offload policies themselves but do not see the driver's
    --broker-conf: the split carries its absolute path, and the executor's source reads
    the offload settings from it."""
    import pickle

    from pulsarctl_py.engines.base import build_scan_plan
    from pulsarctl_py.ledgers import LedgerSource

    monkeypatch.chdir(tmp_path)
    for name in ("LEDGERCTL_OFFLOAD_URL", "LEDGERCTL_S3_ENDPOINT", "LEDGERCTL_BROKER_CONF"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "broker.conf").write_text(
        "managedLedgerOffloadDriver=S3\nmanagedLedgerOffloadServiceEndpoint=http://conf:1\n"
    )
    with precedence.flags(broker_conf="broker.conf"):
        (split,) = build_scan_plan("t", [(1, 3, 30)], bookie_dirs=["bk"]).splits
    options = pickle.loads(pickle.dumps(split)).source_options()
    assert options["broker_conf"] == str(tmp_path / "broker.conf")
    monkeypatch.chdir("/")  # an executor's working directory
    source = LedgerSource(_Store({}), None, broker_conf=options["broker_conf"])
    assert source.tiered_location(_loc()).endpoint == "http://conf:1"
    (plain,) = build_scan_plan("t", [(1, 3, 30)], bookie_dirs=["bk"]).splits
    assert "broker_conf" not in plain.source_options()
