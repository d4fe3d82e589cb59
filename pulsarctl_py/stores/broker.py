"""The brokers' own view, through their admin REST API: which topics a broker has loaded,
its in-memory state of one, and unloading one.

A broker that has a topic loaded caches its managed-ledger and cursor metadata and rewrites
it (ledger rolls, cursor closes), so a write to that metadata is safe only while no broker
has the topic loaded (formats.md §8.3). The broker says so itself; this module asks it.

What each endpoint does to a topic that is **not** loaded (seen on the Pulsar 4.0.7
sandbox; the managed-ledger node's version moves when a broker opens the managed ledger):

* ``GET /admin/v2/broker-stats/bookieops``: the pending BookKeeper operations of every
  persistent topic the broker has loaded, by name (``BrokerStatsBase.getPendingBookieOpsStats``
  -> ``BookieClientStatsGenerator``, which walks ``BrokerService.getTopics()`` when asked).
  Loads nothing and is current: :meth:`BrokerAdmin.loaded_topics` asks it.
* ``GET /admin/v2/broker-stats/topics``: loads nothing, but it is the stats buffer that
  ``BrokerService.updateRates`` refills every ``statsUpdateFrequencyInSecs`` (60 s by
  default, first after 60 s): a topic loaded a moment ago is missing from it and one
  unloaded a moment ago still listed. Not used to decide anything.
* ``/stats``, ``/internalStats``, ``/compaction``, ``/subscriptions``, ``/lastMessageId``
  and ``PUT /unload`` **load** the topic (``PersistentTopicsBase`` takes a topic reference
  with ``BrokerService.getTopicIfExists``, which opens the managed ledger): ask them only of
  the broker that already has the topic loaded (:func:`where_loaded`). An unload of a topic
  that is not loaded opens and closes it, rewriting its metadata.
* ``/internal-info`` and ``/partitions`` read the metadata store and load nothing.

Where the brokers are: ``--admin-url`` / ``LEDGERCTL_ADMIN_URL`` / ``admin_url`` in
ledgerctl.toml (one URL or several, comma-separated), else every broker registered in the
metadata store (``/loadbalance/brokers/*``: ``webServiceUrl``, ``webServiceUrlTls``).
With the ZooKeeper-based load managers a topic can be loaded only by the owner of its
namespace bundle (``BrokerService.loadOrCreatePersistentTopic`` checks the ownership), whose
``httpUrl`` the ownership node holds (:mod:`pulsarctl_py.ownership`): that broker is asked
first. The extensible load manager keeps ownership elsewhere, so every broker is asked.

Authentication comes from the environment only (never flags, never printed):
``LEDGERCTL_ADMIN_TLS_CA_FILE`` (the CA to trust for ``https://``),
``LEDGERCTL_ADMIN_TLS_CERT_FILE`` / ``LEDGERCTL_ADMIN_TLS_KEY_FILE`` (TLS client
authentication, ``AuthenticationTls``), ``LEDGERCTL_ADMIN_TOKEN`` or
``LEDGERCTL_ADMIN_TOKEN_FILE`` (``AuthenticationToken``: ``Authorization: Bearer``).
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarctl_py.errors import LedgerctlError, StoreUnavailable

if TYPE_CHECKING:
    from pulsarctl_py.decoders.managed_ledger import TopicName
    from pulsarctl_py.secrets import Secret
    from pulsarctl_py.stores.metadata import MetadataStore

ENV_ADMIN_URL = "LEDGERCTL_ADMIN_URL"
ENV_CA_FILE = "LEDGERCTL_ADMIN_TLS_CA_FILE"
ENV_CERT_FILE = "LEDGERCTL_ADMIN_TLS_CERT_FILE"
ENV_KEY_FILE = "LEDGERCTL_ADMIN_TLS_KEY_FILE"
ENV_TOKEN = "LEDGERCTL_ADMIN_TOKEN"
ENV_TOKEN_FILE = "LEDGERCTL_ADMIN_TOKEN_FILE"
#: redirects followed per request (a broker redirects a topic's request to its owner)
MAX_REDIRECTS = 3
#: the longest answer read (a busy broker's bookieops lists every loaded topic)
MAX_ANSWER = 64 * 1024 * 1024
BROKERS_ROOT = "/loadbalance/brokers"


class BrokerUnreachable(StoreUnavailable):
    """A broker's admin API that cannot be reached (exit code 3)."""


class BrokerRefused(StoreUnavailable):
    """A broker that answered an admin request with an HTTP error (exit code 3)."""

    def __init__(self, message: str, status: int) -> None:
        self.status = status
        super().__init__(message)


@dataclass(frozen=True)
class AdminAuth:
    """How ledgerctl authenticates to the brokers' admin API."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    token: Secret | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AdminAuth:
        """The settings of ``LEDGERCTL_ADMIN_TLS_*`` and ``LEDGERCTL_ADMIN_TOKEN[_FILE]``."""
        from pulsarctl_py.secrets import Secret, secret_from

        env = os.environ if env is None else env

        def path(name: str) -> Path | None:
            value = env.get(name, "").strip()
            return Path(value) if value else None

        cert, key = path(ENV_CERT_FILE), path(ENV_KEY_FILE)
        if (cert is None) != (key is None):
            missing = ENV_KEY_FILE if key is None else ENV_CERT_FILE
            raise LedgerctlError(
                f"TLS client authentication to the brokers needs both {ENV_CERT_FILE} and "
                f"{ENV_KEY_FILE}: {missing} is not set"
            )
        token: Secret | None = None
        token_file = path(ENV_TOKEN_FILE)
        if env.get(ENV_TOKEN) is not None and token_file is not None:
            raise LedgerctlError(f"set {ENV_TOKEN} or {ENV_TOKEN_FILE}, not both")
        if token_file is not None:
            token = secret_from(None, token_file)
        elif env.get(ENV_TOKEN) is not None:
            token = Secret(env[ENV_TOKEN].strip().encode("utf-8"), f"${ENV_TOKEN}")
        return cls(path(ENV_CA_FILE), cert, key, token)

    @property
    def wants_tls(self) -> bool:
        return self.ca_file is not None or self.cert_file is not None

    def headers(self) -> dict[str, str]:
        if self.token is None:
            return {}
        return {"Authorization": "Bearer " + self.token.reveal().decode("utf-8", "replace")}

    def ssl_context(self) -> ssl.SSLContext:
        """The context of ``https://`` requests: the CA file (else the system's), the
        client certificate when given."""
        try:
            ctx = ssl.create_default_context(
                cafile=None if self.ca_file is None else str(self.ca_file)
            )
            if self.cert_file is not None and self.key_file is not None:
                ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        except (OSError, ssl.SSLError) as exc:
            raise LedgerctlError(
                f"cannot load the brokers' TLS files ({ENV_CA_FILE}, {ENV_CERT_FILE}, "
                f"{ENV_KEY_FILE}): {exc}"
            ) from None
        return ctx


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are followed by :meth:`BrokerAdmin._request` (for PUT too, as Pulsar's
    admin client does), not by urllib (which refuses them for PUT)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def topic_path(topic: TopicName) -> str:
    """The admin API's path of a topic: ``/admin/v2/persistent/t/ns/<encoded local>``
    (``/admin/persistent/t/cluster/ns/...`` for a v1 name)."""
    local = urllib.parse.quote(topic.local_name, safe="")
    if topic.cluster is None:
        return f"/admin/v2/{topic.domain}/{topic.tenant}/{topic.namespace}/{local}"
    return f"/admin/{topic.domain}/{topic.tenant}/{topic.cluster}/{topic.namespace}/{local}"


def _reason(raw: bytes, fallback: str) -> str:
    """The broker's message: ``{"reason": ...}`` of a RestException, else the text."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("reason"):
        return str(data["reason"])
    if text.startswith("<"):  # Jetty's HTML error page: its status line says it
        return fallback
    return " ".join(text.split())[:300] or fallback


class BrokerAdmin:
    """One broker's admin REST API."""

    def __init__(self, url: str, auth: AdminAuth | None = None, timeout: float = 10.0) -> None:
        text = url.strip().rstrip("/")
        parsed = urllib.parse.urlsplit(text)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise LedgerctlError(
                f"broker admin URL {url!r}: expected http://host:port or https://host:port"
            )
        self.url = text
        self.auth = AdminAuth() if auth is None else auth
        self.timeout = timeout
        self._opener = urllib.request.build_opener(
            _NoRedirect(),
            urllib.request.HTTPSHandler(context=self.auth.ssl_context())
            if parsed.scheme == "https"
            else urllib.request.HTTPHandler(),
        )

    def __repr__(self) -> str:
        return f"BrokerAdmin({self.url})"

    def _request(self, method: str, path: str) -> tuple[int, bytes]:
        target = self.url + path
        for _ in range(MAX_REDIRECTS + 1):
            req = urllib.request.Request(target, method=method, headers=self.auth.headers())
            if method == "PUT":
                req.data = b""
            try:
                with self._opener.open(req, timeout=self.timeout) as resp:
                    return resp.status, resp.read(MAX_ANSWER)
            except urllib.error.HTTPError as err:
                raw = err.read(64 * 1024)
                if err.code in (301, 302, 303, 307, 308) and err.headers.get("Location"):
                    target = urllib.parse.urljoin(target, err.headers["Location"])
                    continue
                raise BrokerRefused(
                    f"broker {self.url} answered {method} {path} with HTTP {err.code}: "
                    f"{_reason(raw, err.reason or 'error')}",
                    err.code,
                ) from None
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                why = getattr(exc, "reason", exc)
                raise BrokerUnreachable(
                    f"broker admin API {self.url} cannot be reached ({method} {path}): {why}"
                ) from None
        raise BrokerRefused(
            f"broker {self.url}: more than {MAX_REDIRECTS} redirects for {method} {path}", 310
        )

    def get_json(self, path: str) -> Any:
        """GET ``path`` (from ``/admin/...``); the decoded JSON, None for no content."""
        status, raw = self._request("GET", path)
        if status == 204 or not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise BrokerRefused(
                f"{self.url} answered GET {path} with something that is not JSON: is it a "
                "Pulsar broker's web service URL?",
                status,
            ) from None

    def loaded_topics(self) -> set[str]:
        """The persistent topics this broker has loaded now, by full name. Loads nothing.

        From ``/admin/v2/broker-stats/bookieops`` (``BookieClientStatsGenerator`` walks the
        broker's topics when asked), not ``broker-stats/topics``, which is refilled only
        every ``statsUpdateFrequencyInSecs``."""
        data = self.get_json("/admin/v2/broker-stats/bookieops")
        if data is None:
            return set()
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise BrokerRefused(
                f"{self.url}: /admin/v2/broker-stats/bookieops is not a map of namespaces to "
                "topics: is it a Pulsar broker?",
                200,
            )
        return {str(topic) for topics in data.values() for topic in topics}

    def is_loaded(self, topic: str | TopicName) -> bool:
        """Whether this broker has ``topic`` loaded now (loads nothing)."""
        return _name(topic).full_name in self.loaded_topics()

    def internal_stats(self, topic: str | TopicName) -> dict[str, Any]:
        """The managed ledger as the broker holds it (``/internalStats``): ledgers,
        cursors, ``compactedLedger``, ``lastConfirmedEntry``. Loads the topic if it is not
        loaded: ask only the broker that has it loaded."""
        return self._object(topic_path(_name(topic)) + "/internalStats")

    def stats(self, topic: str | TopicName) -> dict[str, Any]:
        """The topic's stats (``/stats``: producers, subscriptions, consumers). Loads the
        topic if it is not loaded."""
        return self._object(topic_path(_name(topic)) + "/stats")

    def compaction_status(self, topic: str | TopicName) -> dict[str, Any]:
        """The broker's compaction status of the topic (``/compaction``: ``status``
        NOT_RUN, RUNNING, SUCCESS or ERROR, ``lastError``). Loads the topic if it is not
        loaded."""
        return self._object(topic_path(_name(topic)) + "/compaction")

    def unload(self, topic: str | TopicName) -> None:
        """Unload the topic (``PUT .../unload``): the broker closes its managed ledger and
        cursors (persisting their positions) and forgets it until the next use loads it
        again. A topic that is not loaded is loaded and closed: ask :meth:`is_loaded`
        first."""
        self._request("PUT", topic_path(_name(topic)) + "/unload")

    def _object(self, path: str) -> dict[str, Any]:
        data = self.get_json(path)
        if not isinstance(data, dict):
            raise BrokerRefused(f"{self.url}: GET {path} answered no JSON object", 200)
        return data


def _name(topic: str | TopicName) -> TopicName:
    from pulsarctl_py.stores.metadata import resolve_topic

    return resolve_topic(topic)


def admin_urls(admin_url: str | list[str] | None = None) -> list[str]:
    """The admin URLs given: ``admin_url``, else ``--admin-url`` / ``LEDGERCTL_ADMIN_URL``
    / ``admin_url`` in ledgerctl.toml (:mod:`pulsarctl_py.precedence`); comma-separated
    lists are split. Empty when none is given."""
    from pulsarctl_py import precedence

    if isinstance(admin_url, str):
        admin_url = [admin_url]
    found = precedence.resolve(precedence.ADMIN_URL, admin_url).value or []
    if isinstance(found, str):
        found = [found]
    return [u.strip() for item in found for u in str(item).split(",") if u.strip()]


def registered_urls(store: MetadataStore, *, tls: bool = False) -> list[str]:
    """The web service URL of every broker registered in the metadata store
    (``/loadbalance/brokers/*``, ``LocalBrokerData`` / ``BrokerLookupData``): the TLS one
    when ``tls`` (or when it is the only one)."""
    out: list[str] = []
    for name in sorted(store.children(BROKERS_ROOT)):
        node = store.get(f"{BROKERS_ROOT}/{name}")
        try:
            data = json.loads(node.data) if node is not None else {}
        except ValueError:
            data = {}
        if not isinstance(data, dict):
            data = {}
        plain, secure = data.get("webServiceUrl"), data.get("webServiceUrlTls")
        url = (secure or plain) if tls else (plain or secure)
        if not url:  # registered under its lookup name host:port alone
            url = f"{'https' if tls else 'http'}://{name}"
        if url not in out:
            out.append(str(url))
    return out


def brokers(
    store: MetadataStore | None,
    admin_url: str | list[str] | None = None,
    *,
    auth: AdminAuth | None = None,
) -> list[BrokerAdmin]:
    """The brokers to ask: the admin URLs given (``--admin-url``, ``LEDGERCTL_ADMIN_URL``,
    ``admin_url`` in ledgerctl.toml), else every broker registered in the metadata store.
    None on a RocksDB store (no broker runs while ledgerctl holds it)."""
    auth = AdminAuth.from_env() if auth is None else auth
    urls = admin_urls(admin_url)
    if not urls and store is not None and store.location.scheme == "zk":
        urls = registered_urls(store, tls=auth.wants_tls)
    return [BrokerAdmin(u, auth) for u in urls]


def _same_broker(a: str, b: str) -> bool:
    pa, pb = urllib.parse.urlsplit(a), urllib.parse.urlsplit(b)
    return (pa.hostname, pa.port) == (pb.hostname, pb.port)


def where_loaded(
    store: MetadataStore | None,
    topic: str | TopicName,
    admin_url: str | list[str] | None = None,
    *,
    auth: AdminAuth | None = None,
) -> BrokerAdmin | None:
    """The broker that has ``topic`` loaded now, or None when none has. Never loads it.

    With the ZooKeeper-based load managers only the owner of the topic's bundle can have it
    loaded: an unowned bundle answers None without asking anyone, and the owner (its
    ``httpUrl`` from the ownership node; the admin URLs given when it cannot be reached
    there) answers. With the extensible load manager every broker is asked. Raises
    :class:`BrokerUnreachable` when no broker asked has it loaded but one that might could
    not be asked."""
    from pulsarctl_py.ownership import TopicOwned, owner_of

    name = _name(topic)
    auth = AdminAuth.from_env() if auth is None else auth
    candidates = brokers(store, admin_url, auth=auth)
    unreachable: list[BrokerUnreachable] = []
    if store is not None and store.location.scheme == "zk":
        try:
            owner = owner_of(store, name)
        except TopicOwned:
            owner = None  # extensible load manager: ownership is not here, ask every broker
        else:
            if owner is None:
                return None  # no broker owns its bundle: none can have it loaded
            http = owner.broker if owner.broker.startswith(("http://", "https://")) else None
            if http is not None:
                # only the owner can have it loaded (BrokerService checks the ownership
                # before it loads a topic): its answer is the answer
                first = [b for b in candidates if _same_broker(b.url, http)]
                ask = first[0] if first else BrokerAdmin(http, auth)
                try:
                    return ask if ask.is_loaded(name) else None
                except BrokerUnreachable as exc:
                    # the owner's URL may not be reachable from here; an admin URL given
                    # for it may be
                    unreachable.append(exc)
                    candidates = [b for b in candidates if not _same_broker(b.url, http)]
    for broker in candidates:
        try:
            if broker.is_loaded(name):
                return broker
        except BrokerUnreachable as exc:
            unreachable.append(exc)
    if unreachable:
        raise BrokerUnreachable(
            f"cannot tell whether a broker has {name.full_name} loaded: "
            + "; ".join(e.one_line() for e in unreachable)
        )
    return None


__all__ = [
    "AdminAuth",
    "BrokerAdmin",
    "BrokerRefused",
    "BrokerUnreachable",
    "admin_urls",
    "brokers",
    "registered_urls",
    "topic_path",
    "where_loaded",
]
