"""The bookies a cluster knows, from the metadata store only (formats.md section 9.3).

* ``<root>/available/<bookieId>``: a running, writable bookie (ephemeral); its value is a
  BookieServiceInfoFormat protobuf (endpoints, properties) or empty;
* ``<root>/available/readonly/<bookieId>``: a running bookie in read-only mode;
* ``<root>/cookies/<bookieId>``: the bookie's cookie, written once when it first joined:
  ``"<layout>\\n"`` then CookieFormat in protobuf text format (layout 4 and later) or
  plain lines (older layouts);
* ``<root>/INSTANCEID``: the cluster's instance id, which every cookie should carry.

Nothing here connects to a bookie. :class:`AddressBook` tells where to connect to one:
a bookie id is a name (``bookieId`` in the bookie's configuration), not always its
address.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pulsarctl_py.errors import LedgerctlError, NotFoundError

if TYPE_CHECKING:
    from pulsarctl_py.stores.metadata import MetadataStore


@dataclass(slots=True)
class Cookie:
    layout: int | None
    bookie_host: str | None = None
    journal_dirs: list[str] = field(default_factory=list)
    ledger_dirs: list[str] = field(default_factory=list)
    index_dirs: list[str] = field(default_factory=list)
    instance_id: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "bookie_host": self.bookie_host,
            "journal_dirs": self.journal_dirs,
            "ledger_dirs": self.ledger_dirs,
            "index_dirs": self.index_dirs,
            "instance_id": self.instance_id,
            "error": self.error,
        }


@dataclass(slots=True)
class BookieRecord:
    bookie_id: str
    available: bool = False
    read_only: bool = False
    endpoints: list[dict[str, Any]] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    service_info_error: str | None = None
    cookie: Cookie | None = None
    registered_ms: int | None = None  # ctime of the availability znode
    cluster_instance_id: str | None = None

    @property
    def state(self) -> str:
        if self.read_only:
            return "read-only"
        return "available" if self.available else "not running"

    @property
    def instance_matches(self) -> bool | None:
        if self.cookie is None or self.cluster_instance_id is None:
            return None
        return self.cookie.instance_id == self.cluster_instance_id

    def to_json(self) -> dict[str, Any]:
        return {
            "bookie_id": self.bookie_id,
            "state": self.state,
            "available": self.available,
            "read_only": self.read_only,
            "registered_ms": self.registered_ms,
            "endpoints": self.endpoints,
            "properties": self.properties,
            "service_info_error": self.service_info_error,
            "has_cookie": self.cookie is not None,
            "cookie": None if self.cookie is None else self.cookie.to_json(),
            "cookie_instance_matches": self.instance_matches,
        }


def _split_dirs(text: str | None) -> list[str]:
    """CookieFormat dirs: ``"<count>\\t<dir>\\t<dir>..."`` (journal: one plain dir)."""
    if not text:
        return []
    parts = text.split("\t")
    if len(parts) > 1 and parts[0].isdigit():
        parts = parts[1:]
    return [p for p in parts if p]


def parse_cookie(data: bytes) -> Cookie:
    text = data.decode("utf-8", "replace")
    head, _, body = text.partition("\n")
    try:
        layout: int | None = int(head.strip())
    except ValueError:
        return Cookie(None, error=f"no layout version on the first line: {head[:40]!r}")
    if layout is not None and layout <= 3:
        lines = body.splitlines()
        return Cookie(
            layout,
            bookie_host=lines[0] if lines else None,
            journal_dirs=_split_dirs(lines[1]) if len(lines) > 1 else [],
            ledger_dirs=_split_dirs(lines[2]) if len(lines) > 2 else [],
        )
    from google.protobuf import text_format

    from pulsarctl_py.proto import bookkeeper_data_formats_pb2 as dfpb

    msg = dfpb.CookieFormat()
    try:
        text_format.Parse(body, msg)
    except text_format.ParseError as exc:
        return Cookie(layout, error=f"cookie text does not parse: {exc}")
    return Cookie(
        layout,
        bookie_host=msg.bookieHost,
        journal_dirs=_split_dirs(msg.journalDir),
        ledger_dirs=_split_dirs(msg.ledgerDirs),
        index_dirs=_split_dirs(msg.indexDirs) if msg.HasField("indexDirs") else [],
        instance_id=msg.instanceId if msg.HasField("instanceId") else None,
    )


def _service_info(record: BookieRecord, data: bytes) -> None:
    if not data:
        return
    from google.protobuf.message import DecodeError

    from pulsarctl_py.proto import bookkeeper_data_formats_pb2 as dfpb

    msg = dfpb.BookieServiceInfoFormat()
    try:
        msg.ParseFromString(data)
    except DecodeError as exc:
        record.service_info_error = f"BookieServiceInfo does not parse: {exc}"
        return
    record.endpoints = [
        {
            "id": ep.id,
            "host": ep.host,
            "port": ep.port,
            "protocol": ep.protocol,
            "auth": list(ep.auth),
            "extensions": list(ep.extensions),
        }
        for ep in msg.endpoints
    ]
    record.properties = dict(sorted(msg.properties.items()))


#: the protocol of the endpoint clients send bookie requests to (BookieServiceInfo)
BOOKIE_RPC = "bookie-rpc"


@dataclass(frozen=True, slots=True)
class BookieEndpoint:
    """Where to reach a bookie: ``address`` (host:port) and the ``host`` its TLS
    certificate must name."""

    address: str
    host: str
    registered: bool  # whether the address comes from the bookie's registration


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class AddressBook:
    """Bookie ids to network addresses, as BookKeeper's ``DefaultBookieAddressResolver``
    resolves them (bookkeeper-server 4.17):

    * the bookie's registration, ``<root>/available/<id>`` or else
      ``<root>/available/readonly/<id>`` (``ZKRegistrationClient
      .readBookieServiceInfoAsync``): the first endpoint of protocol ``bookie-rpc`` of its
      BookieServiceInfo; a registration without one cannot be used ("does not publish a
      bookie-rpc endpoint");
    * an empty registration (a bookie older than 4.12) or none at all (a bookie not
      running): the id itself is taken for ``host:port``
      (``BookieServiceInfoUtils.buildLegacyBookieServiceInfo``). Upstream resolves an
      unregistered id only when it is a dummy ``host:0``; a bookie that is not running
      cannot be read either way, and the legacy reading keeps ``--bookie-address`` and
      bookies registered elsewhere usable.

    Each id is looked up once. ``place`` is BookKeeper's metadata
    (:meth:`MetadataStore.bookkeeper`), or a callable giving it on first use.
    """

    def __init__(self, place: Any) -> None:
        self._place = place
        self._known: dict[str, BookieEndpoint] = {}

    def _where(self) -> tuple[MetadataStore, str]:
        place = self._place() if callable(self._place) else self._place
        self._place = place
        return place.store, place.root

    def resolve(self, bookie_id: str) -> BookieEndpoint:
        """Where ``bookie_id`` listens; :class:`BookieUnavailable` when its registration
        names no usable endpoint."""
        known = self._known.get(bookie_id)
        if known is None:
            known = self._known[bookie_id] = self._lookup(bookie_id)
        return known

    def _lookup(self, bookie_id: str) -> BookieEndpoint:
        from .client import BookieUnavailable, split_address

        try:
            host = split_address(bookie_id)[0]
        except LedgerctlError:
            host = bookie_id  # connecting says it is not host:port
        legacy = BookieEndpoint(bookie_id, host, False)
        if "/" in bookie_id or bookie_id in ("", "readonly"):
            return legacy  # not a name a registration can have
        store, root = self._where()
        node = store.get(f"{root}/available/{bookie_id}")
        if node is None:
            node = store.get(f"{root}/available/readonly/{bookie_id}")
        if node is None or not node.data:
            return legacy
        record = BookieRecord(bookie_id)
        _service_info(record, node.data)
        if record.service_info_error is not None:
            raise BookieUnavailable(
                bookie_id, f"its registration under {root}/available: {record.service_info_error}"
            )
        for ep in record.endpoints:
            if ep["protocol"] == BOOKIE_RPC:
                return BookieEndpoint(_host_port(ep["host"], ep["port"]), ep["host"], True)
        listed = ", ".join(f"{e['protocol']} {e['host']}:{e['port']}" for e in record.endpoints)
        raise BookieUnavailable(
            bookie_id,
            f"its registration under {root}/available publishes no {BOOKIE_RPC} endpoint "
            f"({listed or 'no endpoint at all'}); map it with --bookie-address ID=HOST:PORT",
        )


def list_bookies(store: MetadataStore, root: str | None = None) -> list[BookieRecord]:
    """Every bookie that is registered (available or read-only) or has a cookie.

    ``root`` in ``store``, or (None) where BookKeeper's metadata lives for ``store``.
    """
    from pulsarctl_py.stores.metadata.ledgers import bookkeeper_place

    store, root = bookkeeper_place(store, root)
    records: dict[str, BookieRecord] = {}

    def rec(bookie_id: str) -> BookieRecord:
        return records.setdefault(bookie_id, BookieRecord(bookie_id))

    instance = store.get(f"{root}/INSTANCEID")
    cluster_id = instance.data.decode("utf-8", "replace").strip() if instance else None
    for folder, read_only in (("available", False), ("available/readonly", True)):
        for name in store.children(f"{root}/{folder}"):
            node = store.get(f"{root}/{folder}/{name}") if name != "readonly" else None
            if node is None:
                continue
            r = rec(name)
            r.read_only = r.read_only or read_only
            r.available = r.available or not read_only
            r.registered_ms = node.stat.created_ms if node.stat is not None else None
            _service_info(r, node.data)
    for name in store.children(f"{root}/cookies"):
        node = store.get(f"{root}/cookies/{name}")
        if node is not None:
            rec(name).cookie = parse_cookie(node.data)
    for r in records.values():
        r.cluster_instance_id = cluster_id
    return [records[k] for k in sorted(records)]


def bookie_info(store: MetadataStore, bookie_id: str, root: str | None = None) -> BookieRecord:
    from pulsarctl_py.stores.metadata.ledgers import bookkeeper_place

    store, root = bookkeeper_place(store, root)
    for record in list_bookies(store, root):
        if record.bookie_id == bookie_id:
            return record
    raise NotFoundError(f"bookie {bookie_id} is neither registered nor has a cookie under {root}")


def read_bookies(metadata_url: str | None, bookie_id: str | None = None) -> list[BookieRecord]:
    """Open the metadata store and list its bookies (or the one named)."""
    from pulsarctl_py.stores.metadata import open_metadata_store, require_bookkeeper_root

    with open_metadata_store(metadata_url) as store:
        require_bookkeeper_root(store)  # an empty chroot lists no bookies: wrong place
        if bookie_id is not None:
            return [bookie_info(store, bookie_id)]
        return list_bookies(store)
