"""The broker admin client (pulsarctl_py.stores.broker) against a tiny local HTTP server:
what it asks, the headers it sends, redirects, TLS (CA and client certificate) and every
way a request fails. The real broker's answers are in tests/cluster/sandbox/test_live_writes.py.
"""

from __future__ import annotations

import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.errors import LedgerctlError, StoreUnavailable
from pulsarctl_py.stores.broker import (
    AdminAuth,
    BrokerAdmin,
    BrokerRefused,
    BrokerUnreachable,
    admin_urls,
    topic_path,
)
from pulsarctl_py.stores.metadata import resolve_topic
from tests.support.live_bookie import make_tls_files, tls_server_context

BOOKIEOPS = {
    "public/default": {
        "persistent://public/default/__change_events": {"dataLedgerOpenOp": 0},
        "persistent://public/default/a b": {"dataLedgerOpenOp": 0},
    },
    "t/ns": {"persistent://t/ns/x": {}},
}


class Handler(http.server.BaseHTTPRequestHandler):
    """Answers from the server's ``routes``: (method, path) -> (status, body, headers)."""

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        server: Server = self.server  # type: ignore[assignment]
        server.seen.append((self.command, self.path, dict(self.headers)))
        status, body, headers = server.routes.get(
            (self.command, self.path), (404, b'{"reason":"no such route"}', {})
        )
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = _answer


class Server(http.server.ThreadingHTTPServer):
    routes: dict[tuple[str, str], tuple[int, bytes, dict[str, str]]]
    seen: list[tuple[str, str, dict[str, str]]]


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server(("127.0.0.1", 0), Handler)
    srv.routes, srv.seen = {}, []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def url_of(srv: Server, scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{srv.server_address[1]}"


def test_loaded_topics_come_from_bookieops_and_the_token_is_sent(server: Server) -> None:
    server.routes[("GET", "/admin/v2/broker-stats/bookieops")] = (
        200,
        json.dumps(BOOKIEOPS).encode(),
        {},
    )
    auth = AdminAuth.from_env({"LEDGERCTL_ADMIN_TOKEN": "tok-123\n"})
    admin = BrokerAdmin(url_of(server) + "/", auth)
    assert admin.url == url_of(server)
    assert admin.loaded_topics() == {
        "persistent://public/default/__change_events",
        "persistent://public/default/a b",
        "persistent://t/ns/x",
    }
    assert admin.is_loaded("a b") and admin.is_loaded("t/ns/x")
    assert not admin.is_loaded("persistent://public/default/other")
    assert server.seen[0][2]["Authorization"] == "Bearer tok-123"
    assert "tok-123" not in repr(auth) and "tok-123" not in repr(admin)


def test_a_token_file_and_no_token(server: Server, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file\n")
    auth = AdminAuth.from_env({"LEDGERCTL_ADMIN_TOKEN_FILE": str(tmp_path / "token")})
    assert auth.headers() == {"Authorization": "Bearer from-file"}
    assert AdminAuth.from_env({}).headers() == {}
    with pytest.raises(LedgerctlError, match="not both"):
        AdminAuth.from_env(
            {"LEDGERCTL_ADMIN_TOKEN": "a", "LEDGERCTL_ADMIN_TOKEN_FILE": str(tmp_path / "token")}
        )
    with pytest.raises(LedgerctlError, match="LEDGERCTL_ADMIN_TLS_KEY_FILE"):
        AdminAuth.from_env({"LEDGERCTL_ADMIN_TLS_CERT_FILE": "c.pem"})


def test_topic_requests_use_the_admin_paths_and_follow_redirects_for_put(server: Server) -> None:
    topic = resolve_topic("persistent://t/ns/a b%c")
    path = topic_path(topic)
    assert path == "/admin/v2/persistent/t/ns/a%20b%25c"
    assert topic_path(resolve_topic("persistent://t/c1/ns/x")) == "/admin/persistent/t/c1/ns/x"
    owner = url_of(server) + "/owner"
    server.routes[("PUT", path + "/unload")] = (307, b"", {"Location": owner + path + "/unload"})
    server.routes[("PUT", "/owner" + path + "/unload")] = (204, b"", {})
    server.routes[("GET", path + "/internalStats")] = (200, b'{"ledgers": []}', {})
    server.routes[("GET", path + "/compaction")] = (200, b'{"status": "NOT_RUN"}', {})
    admin = BrokerAdmin(url_of(server))
    admin.unload(topic)
    assert [(m, p) for m, p, _ in server.seen] == [
        ("PUT", path + "/unload"),
        ("PUT", "/owner" + path + "/unload"),
    ]
    assert admin.internal_stats(topic) == {"ledgers": []}
    assert admin.compaction_status("persistent://t/ns/a b%c") == {"status": "NOT_RUN"}


def test_http_errors_are_one_line_with_the_status_and_the_brokers_reason(server: Server) -> None:
    admin = BrokerAdmin(url_of(server))
    with pytest.raises(BrokerRefused) as err:
        admin.internal_stats("persistent://t/ns/gone")
    assert err.value.status == 404
    assert err.value.exit_code == 3
    line = err.value.one_line()
    assert "HTTP 404" in line and "no such route" in line and url_of(server) in line
    server.routes[("GET", "/admin/v2/broker-stats/bookieops")] = (
        401,
        b"<html><body>HTTP ERROR 401 Unauthorized</body></html>",
        {},
    )
    with pytest.raises(BrokerRefused, match=r"HTTP 401: Unauthorized$"):
        admin.loaded_topics()
    server.routes[("GET", "/admin/v2/broker-stats/bookieops")] = (200, b"<html>hi</html>", {})
    with pytest.raises(BrokerRefused, match="not JSON"):
        admin.loaded_topics()
    server.routes[("GET", "/admin/v2/broker-stats/bookieops")] = (200, b"[1, 2]", {})
    with pytest.raises(BrokerRefused, match="not a map"):
        admin.loaded_topics()
    server.routes[("GET", "/admin/v2/broker-stats/bookieops")] = (204, b"", {})
    assert admin.loaded_topics() == set()
    loop = "/admin/v2/broker-stats/bookieops"
    server.routes[("GET", loop)] = (307, b"", {"Location": url_of(server) + loop})
    with pytest.raises(BrokerRefused, match="redirects"):
        admin.loaded_topics()


def test_an_unreachable_broker_is_a_store_error_naming_it() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    admin = BrokerAdmin(f"http://127.0.0.1:{port}", timeout=2)
    with pytest.raises(BrokerUnreachable) as err:
        admin.loaded_topics()
    assert isinstance(err.value, StoreUnavailable) and err.value.exit_code == 3
    assert f"127.0.0.1:{port}" in err.value.one_line()
    for bad in ("127.0.0.1:8080", "ftp://x", "http://"):
        with pytest.raises(LedgerctlError, match="expected http"):
            BrokerAdmin(bad)


def test_https_with_a_ca_file_and_a_client_certificate(server: Server, tmp_path: Path) -> None:
    files = make_tls_files(tmp_path / "pki", ("127.0.0.1",), client=True)
    server.socket = tls_server_context(files, require_client=True).wrap_socket(
        server.socket, server_side=True
    )
    server.routes[("GET", "/admin/v2/broker-stats/bookieops")] = (200, b"{}", {})
    url = url_of(server, "https")
    env = {
        "LEDGERCTL_ADMIN_TLS_CA_FILE": str(files["ca"]),
        "LEDGERCTL_ADMIN_TLS_CERT_FILE": str(files["client_cert"]),
        "LEDGERCTL_ADMIN_TLS_KEY_FILE": str(files["client_key"]),
    }
    assert BrokerAdmin(url, AdminAuth.from_env(env)).loaded_topics() == set()
    # without the CA the server's certificate is not trusted; without the client
    # certificate the server refuses the handshake: both one line, naming the URL
    no_ca = {k: v for k, v in env.items() if "CA_FILE" not in k}
    with pytest.raises(BrokerUnreachable, match=url):
        BrokerAdmin(url, AdminAuth.from_env(no_ca), timeout=3).loaded_topics()
    with pytest.raises(BrokerUnreachable, match=url):
        BrokerAdmin(url, AdminAuth(ca_file=files["ca"]), timeout=3).loaded_topics()
    with pytest.raises(LedgerctlError, match="TLS files"):
        BrokerAdmin(url, AdminAuth(ca_file=tmp_path / "missing.pem"))
    assert isinstance(ssl.create_default_context(), ssl.SSLContext)


def test_admin_urls_split_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGERCTL_ADMIN_URL", "http://a:1, http://b:2")
    assert admin_urls() == ["http://a:1", "http://b:2"]
    assert admin_urls("http://c:3") == ["http://c:3"]
    monkeypatch.delenv("LEDGERCTL_ADMIN_URL")
    monkeypatch.chdir(Path("/"))
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent")
    assert admin_urls() == []


def test_a_port_that_speaks_no_http_is_unreachable_not_a_traceback() -> None:
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]

        def garbage() -> None:
            conn, _ = listener.accept()
            conn.recv(1024)
            conn.sendall(b"\x00\x00\x00\x08binary!!")
            conn.close()

        threading.Thread(target=garbage, daemon=True).start()
        with pytest.raises(BrokerUnreachable, match=f"127.0.0.1:{port}"):
            BrokerAdmin(f"http://127.0.0.1:{port}", timeout=3).loaded_topics()
