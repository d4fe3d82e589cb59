"""Where an offloaded ledger's data is read from: one resolution, the broker's.

The broker reads an offloaded ledger through the topic's *current* offloader
(``ManagedLedgerImpl.getLedgerHandle``: ``config.getLedgerOffloader().readOffloaded(ledgerId,
uid, driverMetadata)``, the ledger's driver metadata from its ``offloadContext``). That
offloader is built from the topic's offload policies merged field by field, topic level over
namespace level over the broker's configuration (``BrokerService.getManagedLedgerConfig`` ->
``OffloadPoliciesImpl.mergeConfiguration(topicLevel, namespaceLevel, brokerProperties)``;
``PulsarService.getManagedLedgerOffloader``). What each offloader takes from where (Pulsar
4.0.8's tiered-storage NARs, read from their classes):

* the jcloud drivers (``BlobStoreManagedLedgerOffloader.readOffloaded``): the **bucket** of the
  ledger's driver metadata (``getBlobStoreLocation(offloadDriverMetadata)``; the current one
  only when the context has none), read through the blob store of the **current**
  configuration (``getBlobStore(config.getBlobStoreLocation())``: its **endpoint** and
  **region**, and credentials). ``TieredStorageConfiguration.getKeys`` names the keys: for
  ``aws-s3`` ``s3ManagedLedgerOffload{Bucket,Region,ServiceEndpoint}`` first, then the generic
  ``managedLedgerOffload{Bucket,Region,ServiceEndpoint}``; for ``S3`` the generic ones only;
* the filesystem offloader (``FileSystemManagedLedgerOffloader``): the **root** is the
  current ``fs.defaultFS``, from the Hadoop profile(s) of ``fileSystemProfilePath`` with
  ``fileSystemURI`` over it; the context's ``storageBasePath`` is not used to read. An
  ``hdfs://`` root is resolved and named but not read: that needs an HDFS client (NameNode
  RPC or WebHDFS, Kerberos where the cluster has it), which ledgerctl does not have; a copy
  (``hdfs dfs -get``) is read with ``--offload-url file:///copy``.

ledgerctl resolves the same, per ledger, then puts its own overrides on top (each by
:mod:`pulsarctl_py.precedence`: flag > ``LEDGERCTL_*`` variable > ledgerctl.toml):

* bucket: ``--offload-url s3://bucket`` > the offloadContext's > the current configuration's;
* endpoint, region: ``--s3-endpoint`` (endpoint) > topic policy > namespace policy >
  broker.conf (``--broker-conf``) > the offloadContext's (what the offload was written
  through; ledgerctl's fallback where it sees no current configuration);
* filesystem root: ``--offload-url file:///dir`` > topic policy > namespace policy >
  broker.conf > the offloadContext's ``storageBasePath``.

The current configuration counts only when its driver is the ledger's kind (an S3 driver for
an S3 ledger, ``filesystem`` for a filesystem one): the broker reads a ledger through the
current offloader whatever driver wrote it (the ``TODO`` in ``getLedgerHandle``), so a
changed driver makes its old ledgers unreadable to the broker; ledgerctl then reads where the
context says and notes it. Each resolved part carries its source, shown by ``topic info``,
``ledger list -o json`` and verify's offload findings.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pulsarctl_py.errors import LedgerctlError

if TYPE_CHECKING:
    from pulsarctl_py.brokerconf import BrokerConf
    from pulsarctl_py.precedence import Resolved


class TieredLedger(Protocol):
    """What a location is resolved from: one ledger's offload as its managed ledger records
    it (:class:`.locate.TieredLedger`, which reads through this module: named here by
    what it offers, not imported)."""

    @property
    def ledger_id(self) -> int: ...
    @property
    def managed_ledger(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def driver(self) -> str: ...
    @property
    def properties(self) -> dict[str, str]: ...


#: reads a topic's policies (``read(source, topic, broker_conf)``:
#: :func:`pulsarctl_py.topicpolicies.read_topic_policies`) for the topic level of a location.
#: That reader reads the policies' system topic through a LedgerSource, which locates
#: offloaded ledgers through this module, so neither can import it: the layer above gives it
#: (:func:`pulsarctl_py.topicpolicies.install`, called by the CLI before each command and
#: where executors open their splits' sources). None: topic-level offload policies are not
#: read, and each location says so in its notes.
topic_policy_reader: Callable[..., Any] | None = None

#: the source names
CONTEXT = "offloadContext"
TOPIC_POLICY = "topic policy"
NAMESPACE_POLICY = "namespace policy"
BROKER_CONF = "broker.conf"

S3_KINDS = ("s3", "aws-s3", "aws_s3")
FILESYSTEM_KINDS = ("filesystem",)
#: the OffloadPoliciesImpl fields that say where data is (the others do not matter here)
LOCATION_FIELDS = (
    "managedLedgerOffloadDriver",
    "fileSystemURI",
    "fileSystemProfilePath",
    "s3ManagedLedgerOffloadBucket",
    "s3ManagedLedgerOffloadRegion",
    "s3ManagedLedgerOffloadServiceEndpoint",
    "managedLedgerOffloadBucket",
    "managedLedgerOffloadRegion",
    "managedLedgerOffloadServiceEndpoint",
)


def _kind(driver: str | None) -> str | None:
    name = (driver or "").strip().lower()
    if name in S3_KINDS:
        return "s3"
    if name in FILESYSTEM_KINDS:
        return "filesystem"
    return None


@dataclass(frozen=True)
class Level:
    """One level of offload settings: its name (where it was read) and its values."""

    source: str
    values: Mapping[str, str]


def policy_level(source: str, policies: Any) -> Level | None:
    """A level from an ``OffloadPoliciesImpl`` JSON object (a namespace's
    ``offload_policies``, a topic's ``offloadPolicies``); None when there is none."""
    if not isinstance(policies, dict):
        return None
    values = {
        k: str(v).strip()
        for k, v in policies.items()
        if k in LOCATION_FIELDS and v is not None and str(v).strip()
    }
    return Level(source, values)


def conf_level(conf: BrokerConf) -> Level:
    """The broker configuration's level (``getCompatibleValue``: the same keys; an empty
    value is unset, as in Pulsar's loader)."""
    values = {k: conf.values[k].strip() for k in LOCATION_FIELDS if conf.values.get(k, "").strip()}
    return Level(f"{BROKER_CONF} {conf.path}", values)


def merge(levels: list[Level | None]) -> dict[str, tuple[str, str]]:
    """``OffloadPoliciesImpl.mergeConfiguration``: each field from the first level that
    sets it (topic, namespace, broker), as (value, source)."""
    out: dict[str, tuple[str, str]] = {}
    for name in LOCATION_FIELDS:
        for level in levels:
            if level is not None and level.values.get(name):
                out[name] = (level.values[name], f"{level.source} ({name})")
                break
    return out


def _jcloud_keys(driver: str, what: str) -> tuple[str, ...]:
    """``TieredStorageConfiguration.getKeys``: the backward-compatible key first (only for
    ``aws-s3``), then the generic one."""
    generic = f"managedLedgerOffload{what}"
    if driver.strip().lower() in ("aws-s3", "aws_s3"):
        return (f"s3ManagedLedgerOffload{what}", generic)
    return (generic,)


def profile_default_fs(paths: str, base: Path | None = None) -> tuple[str | None, str]:
    """``fs.defaultFS`` from the Hadoop profile(s) of ``fileSystemProfilePath`` (comma
    separated, later ones over earlier ones as ``Configuration.addResource``), and a note of
    what was read. A relative path is tried against ``base`` (the broker configuration's
    directory and its parent, where the broker runs) and the working directory."""
    import xml.etree.ElementTree as ET

    found: str | None = None
    read: list[str] = []
    for raw in (p.strip() for p in paths.split(",")):
        if not raw:
            continue
        path = Path(raw).expanduser()
        candidates = [path]
        if not path.is_absolute() and base is not None:
            candidates = [base / path, base.parent / path, path]
        target = next((c for c in candidates if c.is_file()), None)
        if target is None:
            read.append(f"{raw}: not found here")
            continue
        try:
            root = ET.parse(target).getroot()
        except (OSError, ET.ParseError) as exc:
            read.append(f"{raw}: not read ({exc})")
            continue
        for prop in root.iter("property"):
            if (prop.findtext("name") or "").strip() == "fs.defaultFS":
                value = (prop.findtext("value") or "").strip()
                found = value or found
        read.append(str(target))
    return found, "; ".join(read)


@dataclass(frozen=True)
class Location:
    """Where one offloaded ledger is read: each part and where it came from."""

    ledger_id: int
    kind: str  # "s3", "filesystem" or "other"
    driver: str
    root: str | None = None
    bucket: str | None = None
    endpoint: str | None = None
    region: str | None = None
    sources: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def url(self, loc: TieredLedger) -> str:
        if self.kind == "s3":
            return f"s3://{self.bucket or '?'}/{loc.uid}-ledger-{loc.ledger_id}"
        base = (self.root or "?").rstrip("/")
        return f"{base}/{loc.managed_ledger}/{loc.ledger_id}-{loc.uid}"

    def to_json(self) -> dict[str, Any]:
        parts = (
            {"bucket": self.bucket, "endpoint": self.endpoint, "region": self.region}
            if self.kind == "s3"
            else {"root": self.root}
        )
        out: dict[str, Any] = {"driver": self.driver, **parts, "source": dict(self.sources)}
        if self.notes:
            out["notes"] = list(self.notes)
        return out


def _override_source(resolved: Resolved | None) -> str:
    if resolved is None:
        return "argument"
    return resolved.source


@dataclass
class Overrides:
    """ledgerctl's own settings: a copy's URL and an endpoint, with their sources."""

    offload_url: str | None = None
    offload_url_source: str = "--offload-url"
    s3_endpoint: str | None = None
    s3_endpoint_source: str = "--s3-endpoint"

    @classmethod
    def resolve(cls, offload_url: str | None = None, s3_endpoint: str | None = None) -> Overrides:
        """Each value given (a flag) or found by :mod:`pulsarctl_py.precedence` (flag >
        ``LEDGERCTL_*`` variable > ledgerctl.toml), with its source."""
        from pulsarctl_py.precedence import resolve

        url = resolve("offload_url", offload_url)
        endpoint = resolve("s3_endpoint", s3_endpoint)
        return cls(
            url.value or None,
            _override_source(url),
            endpoint.value or None,
            _override_source(endpoint),
        )

    @classmethod
    def of(cls, offload_url: str | None, s3_endpoint: str | None) -> Overrides:
        """The values a source was opened with (already resolved; None: not given, then
        what the settings say), with the source the settings give for them."""
        from pulsarctl_py.precedence import resolve

        out = cls()
        for name, given_value in (("offload_url", offload_url), ("s3_endpoint", s3_endpoint)):
            found = resolve(name)
            value, source = given_value, "argument"
            if given_value is None:
                value, source = found.value or None, found.source
            elif found.value == given_value:
                source = found.source
            setattr(out, name, value)
            setattr(out, f"{name}_source", source)
        return out


def locate_ledger(
    loc: TieredLedger,
    overrides: Overrides | None = None,
    levels: list[Level | None] | None = None,
    *,
    conf_dir: Path | None = None,
    notes: tuple[str, ...] = (),
) -> Location:
    """The location of one ledger (see the module docstring). ``levels``: topic policy,
    namespace policy, broker configuration (any of them None); ``conf_dir``: where the
    broker configuration is, for a relative Hadoop profile path."""
    over = overrides or Overrides()
    merged = merge(levels or [])
    kind = _kind(loc.driver) or "other"
    current = merged.get("managedLedgerOffloadDriver")
    current_kind = _kind(current[0]) if current else None
    notes_out = list(notes)
    usable = current is not None and current_kind == kind
    if current is not None and not usable:
        notes_out.append(
            f"the topic's current offloader is {current[0]} ({current[1]}), not the "
            f"{loc.driver} driver that wrote this ledger: the broker reads it through the "
            "current one and fails; read here where its offloadContext says"
        )
    props = loc.properties
    sources: dict[str, str] = {}
    url = over.offload_url
    if url and kind in ("s3", "filesystem") and url.lower().startswith("s3://") != (kind == "s3"):
        how = (
            f"the {loc.driver} driver: its objects are read from s3://bucket"
            if kind == "s3"
            else "the filesystem offloader: its files are read from file:///dir"
        )
        raise LedgerctlError(
            f"ledger {loc.ledger_id} is offloaded with {how}, not {url} ({over.offload_url_source})"
        )
    if kind == "s3":
        bucket, b_src = None, ""
        if over.offload_url and over.offload_url.lower().startswith("s3://"):
            bucket = over.offload_url.split("://", 1)[1].strip("/").split("/", 1)[0] or None
            b_src = over.offload_url_source
        if not bucket and props.get("bucket"):
            bucket, b_src = props["bucket"], f"{CONTEXT} (bucket)"
        current_driver = current[0] if usable and current else loc.driver

        def configured(what: str) -> tuple[str | None, str]:
            if not usable:
                return None, ""
            for key in _jcloud_keys(current_driver, what):
                if key in merged:
                    return merged[key]
            return None, ""

        if not bucket:
            bucket, b_src = configured("Bucket")
        endpoint, e_src = (
            (over.s3_endpoint, over.s3_endpoint_source)
            if over.s3_endpoint
            else (
                None,
                "",
            )
        )
        if not endpoint:
            endpoint, e_src = configured("ServiceEndpoint")
        if not endpoint and props.get("serviceEndpoint"):
            endpoint, e_src = props["serviceEndpoint"], f"{CONTEXT} (serviceEndpoint)"
        region, r_src = configured("Region")
        if not region and props.get("region"):
            region, r_src = props["region"], f"{CONTEXT} (region)"
        for part, src in (("bucket", b_src), ("endpoint", e_src), ("region", r_src)):
            if src:
                sources[part] = src
        return Location(
            loc.ledger_id,
            kind,
            loc.driver,
            bucket=bucket,
            endpoint=endpoint,
            region=region,
            sources=sources,
            notes=tuple(notes_out),
        )
    if kind == "filesystem":
        root, src = None, ""
        if over.offload_url and not over.offload_url.lower().startswith("s3://"):
            root, src = over.offload_url, over.offload_url_source
        if not root and usable:
            root, src = _configured_root(merged, conf_dir, notes_out)
        if not root and props.get("storageBasePath"):
            root, src = props["storageBasePath"], f"{CONTEXT} (storageBasePath)"
        if src:
            sources["root"] = src
        return Location(
            loc.ledger_id, kind, loc.driver, root=root, sources=sources, notes=tuple(notes_out)
        )
    return Location(loc.ledger_id, "other", loc.driver, sources=sources, notes=tuple(notes_out))


def _configured_root(
    merged: dict[str, tuple[str, str]], conf_dir: Path | None, notes: list[str]
) -> tuple[str | None, str]:
    """``FileSystemManagedLedgerOffloader``'s root: ``fs.defaultFS`` of the profile(s),
    ``fileSystemURI`` over it."""
    uri = merged.get("fileSystemURI")
    if uri is not None:
        return uri
    profile = merged.get("fileSystemProfilePath")
    if profile is None:
        return None, ""
    found, read = profile_default_fs(profile[0], conf_dir)
    if found:
        return found, f"{profile[1]}: fs.defaultFS"
    notes.append(f"no fs.defaultFS in the Hadoop profile {profile[0]} ({read})")
    return None, ""


class Locator:
    """The resolution for one run: the overrides, the broker configuration, and each
    managed ledger's namespace and topic policies, read once."""

    def __init__(
        self,
        store: Any,
        overrides: Overrides | None = None,
        conf: BrokerConf | None = None,
        *,
        topic_policies: Callable[[str], Any] | None = None,
    ) -> None:
        self.store = store
        self.overrides = overrides or Overrides()
        self.conf = conf
        self.topic_policies = topic_policies
        self._namespaces: dict[str, tuple[Level | None, str | None]] = {}
        self._topics: dict[str, tuple[Level | None, str | None]] = {}
        self._busy = False

    def namespace_level(self, managed_ledger: str) -> tuple[Level | None, str | None]:
        """The namespace's offload policies (``/admin/policies/<tenant>/<ns>``,
        ``offload_policies``), and a note when they could not be read."""
        tenant, ns = [*managed_ledger.split("/"), "", ""][:2]
        name = f"{tenant}/{ns}"
        if name not in self._namespaces:
            self._namespaces[name] = self._read_namespace(name)
        return self._namespaces[name]

    def _read_namespace(self, name: str) -> tuple[Level | None, str | None]:
        import json

        if self.store is None:
            return None, None
        path = f"/admin/policies/{name}"
        try:
            node = self.store.get(path)
        except LedgerctlError as exc:
            if exc.exit_code == 3:
                raise
            return None, f"the namespace policies of {name} were not read: {exc.one_line()}"
        if node is None:
            return None, None
        try:
            doc = json.loads(node.data)
        except (ValueError, UnicodeDecodeError) as exc:
            return None, f"the namespace policies of {name} ({path}) are not JSON: {exc}"
        policies = doc.get("offload_policies") if isinstance(doc, dict) else None
        return policy_level(f"{NAMESPACE_POLICY} {name}", policies), None

    def topic_level(self, managed_ledger: str) -> tuple[Level | None, str | None]:
        """The topic's offload policies (local, else global: ``offloadPolicies`` of its
        ``TopicPolicies``), and a note when they could not be read."""
        if self.topic_policies is None or self._busy:
            return None, None
        parts = managed_ledger.split("/", 3)
        if len(parts) != 4:
            return None, None
        tenant, ns, domain, local = parts
        topic = f"{domain}://{tenant}/{ns}/{urllib.parse.unquote(local)}"
        if topic not in self._topics:
            self._busy = True  # the policies' own system topic is read without them
            try:
                found = self.topic_policies(topic)
            except LedgerctlError as exc:
                self._topics[topic] = (
                    None,
                    f"the topic policies of {topic} were not read ({exc.one_line()}): "
                    "resolved without them",
                )
            else:
                level = None
                for scope, policies in (
                    ("local", getattr(found, "local", None)),
                    ("global", getattr(found, "global_", None)),
                ):
                    level = policy_level(
                        f"{TOPIC_POLICY} {topic} ({scope})",
                        (policies or {}).get("offloadPolicies"),
                    )
                    if level is not None:
                        break
                self._topics[topic] = (level, None)
            finally:
                self._busy = False
        return self._topics[topic]

    def locate(self, loc: TieredLedger) -> Location:
        topic, t_note = self.topic_level(loc.managed_ledger)
        namespace, n_note = self.namespace_level(loc.managed_ledger)
        conf = conf_level(self.conf) if self.conf is not None else None
        conf_dir = Path(self.conf.path).expanduser().absolute().parent if self.conf else None
        notes = tuple(n for n in (t_note, n_note) if n)
        return locate_ledger(
            loc, self.overrides, [topic, namespace, conf], conf_dir=conf_dir, notes=notes
        )


__all__ = [
    "BROKER_CONF",
    "CONTEXT",
    "NAMESPACE_POLICY",
    "TOPIC_POLICY",
    "Level",
    "Location",
    "Locator",
    "Overrides",
    "conf_level",
    "locate_ledger",
    "merge",
    "policy_level",
    "profile_default_fs",
]
