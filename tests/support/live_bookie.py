"""A test bookie: serves a bookie data directory over the v3 and v2 read protocol on loopback.

The bytes come from the project's own offline store (:class:`BookieStore` over the
directory), so what a live read returns can be compared with what an offline read of
the same directory returns. Like a real bookie it decides per connection between v3 and
v2 from the first frame (a v3 Request starts with 0x0A), answers READ_ENTRY (entry -1:
the last entry it holds), READ_LAC (explicit LAC and last entry) and START_TLS.

Faults for tests: ``mode`` ``silent`` (accepts, reads, never answers), ``close-mid``
(sends half of its first answer, then closes), ``reorder`` (answers the frames that
arrived together in reverse order), ``v2-only`` (an old bookie: closes the connection on a
v3 frame), ``huge-frame`` (answers a read with the length of a frame of :data:`HUGE_FRAME`
bytes and 64 KiB of it, then nothing more); ``corrupt`` / ``drop`` change or hide single
entries; ``pad_to`` answers every entry padded with zeros to that many bytes, one answer
at a time (large frames without holding many). Every request is recorded (``requests``)
so tests can check that nothing fences; ``record=False`` skips that.

TLS: ``tls`` is the server's SSL context; after answering START_TLS with EOK the
connection continues as TLS, as a bookie's does. :func:`make_tls_files` writes a CA and
certificates signed by it (made at test time with ``cryptography``).

``preload`` holds ledgers in memory, like a bookie's read cache, and encodes every answer
to a plain (non-fencing) read of them once, so that serving a read is a dictionary look-up
and a copy: the test bookie's CPU lands on the same machine as the reader's, and a real
bookie's does not.

Run alone (for the benchmark)::

    python -m tests.support.live_bookie DIR [--preload LEDGER ...] [--no-record]

prints ``port N`` on stdout once listening, and serves until stdin closes.
"""

from __future__ import annotations

import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pulsarctl_py.decoders import bookie_wire as wire
from pulsarctl_py.decoders.bookkeeper import HEADER
from pulsarctl_py.stores.bookie import BookieStore, EntryNotFound, open_bookie

#: the frame length a ``huge-frame`` bookie announces (the 64 MiB of issue 24)
HUGE_FRAME = 64 << 20


class TestBookie:
    """One bookie on 127.0.0.1, one thread per connection."""

    __test__ = False  # not a pytest class

    def __init__(
        self,
        source: str | Path | BookieStore,
        *,
        mode: str = "normal",
        corrupt: dict[tuple[int, int], Callable[[bytes], bytes]] | None = None,
        drop: set[tuple[int, int]] | None = None,
        tls: ssl.SSLContext | None = None,
        preload: list[int] | None = None,
        delay: float = 0.0,
        record: bool = True,
        pad_to: int | None = None,
    ) -> None:
        self.store = source if isinstance(source, BookieStore) else open_bookie([Path(source)])
        self._own_store = not isinstance(source, BookieStore)
        self.mode = mode
        self.delay = delay  # seconds before each batch of answers (a slow bookie)
        self.busy: list[tuple[float, float]] = []  # (start, end) of each delayed batch
        self.corrupt = corrupt or {}
        self.drop = drop or set()
        self.pad_to = pad_to
        self.tls = tls
        self.record = record
        self.requests: list[wire.ParsedRequest] = []
        self.raw_requests: list[bytes] = []
        self.accepted = 0  # connections accepted
        self.max_batch = 0  # most requests that arrived together (pipelining)
        self._lock = threading.Lock()
        self._cache: dict[tuple[int, int], bytes] = {}
        self._lacs: dict[int, int] = {}
        # answers encoded once: v3 by the bytes of the readRequest field (the txnId is in
        # the header, which an answer repeats), v2 by the whole request frame
        self._v3_answers: dict[bytes, bytes] = {}
        self._v2_answers: dict[bytes, bytes] = {}
        for ledger in preload or []:
            for stored in self.store.read_entries(ledger):
                self._cache[(ledger, stored.entry_id)] = stored.data
            for entry_id in [e for (lg, e) in self._cache if lg == ledger]:
                self._encode_once(ledger, entry_id)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.1)  # accept() wakes up to see close()
        self.port = self._sock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        self._stop.set()
        try:
            self._sock.close()
        except OSError:
            pass
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        self._thread.join(timeout=5)
        if self._own_store:
            self.store.close()

    def __enter__(self) -> TestBookie:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue  # look at the stop flag again
            except OSError:
                return
            conn.settimeout(None)
            with self._lock:
                self._conns.append(conn)
                self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    # -- data ---------------------------------------------------------------------------

    def entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        if entry_id == wire.LAST_ADD_CONFIRMED:
            last = self._last(ledger_id)
            if last is None:
                return None
            entry_id = last
        if (ledger_id, entry_id) in self.drop:
            return None
        data = self._cache.get((ledger_id, entry_id))
        if data is None:
            with self._lock:
                try:
                    data = self.store.read_entry(ledger_id, entry_id)
                except EntryNotFound:
                    return None
        fault = self.corrupt.get((ledger_id, entry_id))
        data = fault(data) if fault is not None else data
        if self.pad_to is not None and len(data) < self.pad_to:
            data += bytes(self.pad_to - len(data))
        return data

    def _last(self, ledger_id: int) -> int | None:
        with self._lock:
            last = self.store.last_entry_id(ledger_id)
        while last is not None and last >= 0 and (ledger_id, last) in self.drop:
            last -= 1
        return last if last is None or last >= 0 else None

    def _max_lac(self, ledger_id: int) -> int:
        """The LAC the bookie knows: from its last entry's header (as maxLAC)."""
        known = self._lacs.get(ledger_id)
        if known is not None:
            return known
        last = self.entry(ledger_id, wire.LAST_ADD_CONFIRMED)
        lac = -1 if last is None or len(last) < HEADER.size else HEADER.unpack_from(last, 0)[2]
        self._lacs[ledger_id] = lac
        return lac

    def _explicit_lac(self, ledger_id: int) -> bytes | None:
        with self._lock:
            try:
                return self.store.ledger(ledger_id).explicit_lac
            except EntryNotFound:
                return None

    def _encode_once(self, ledger_id: int, entry_id: int) -> None:
        body = self.entry(ledger_id, entry_id)
        status = "EOK" if body is not None else "ENOENTRY"
        lac = self._max_lac(ledger_id) if body is not None else -1
        v3 = wire.v3_read_response(0, status, ledger_id, entry_id, body, lac)[4:]
        header_len = v3[1]  # the header {version, operation, txnId 0} and what follows it
        request = wire.v3_read_request(0, ledger_id, entry_id)[4:]
        self._v3_answers[request[2 + request[1] :]] = v3[2 + header_len :]
        v2_request = wire.v2_read_request(ledger_id, entry_id)[4:]
        self._v2_answers[v2_request] = wire.v2_read_response(status, ledger_id, entry_id, body)

    def _encoded(self, payload: bytes) -> bytes | None:
        """The answer encoded at preload for this request frame, if there is one."""
        if not payload:
            return None
        if payload[0] == 0x0A:  # v3: header {3, READ_ENTRY, txnId}, then readRequest
            if payload[2:7] != b"\x08\x03\x10\x01\x18":
                return None
            end = 2 + payload[1]
            tail = self._v3_answers.get(payload[end:])
            if tail is None:
                return None
            answer = payload[:end] + tail  # the answer's header is the request's
            return len(answer).to_bytes(4, "big") + answer
        return self._v2_answers.get(payload)

    # -- protocol -----------------------------------------------------------------------

    def _answer(self, req: wire.ParsedRequest) -> bytes:
        if req.op == "read":
            body = self.entry(req.ledger_id, req.entry_id)
            status = "EOK" if body is not None else "ENOENTRY"
            if req.v2:
                return wire.v2_read_response(status, req.ledger_id, req.entry_id, body)
            lac = self._max_lac(req.ledger_id) if body is not None else -1
            return wire.v3_read_response(
                req.key,
                status,
                req.ledger_id,
                req.entry_id,
                body,
                lac,  # type: ignore[arg-type]
            )
        if req.op == "lac" and not req.v2:
            lac_body = self._explicit_lac(req.ledger_id)
            last = self.entry(req.ledger_id, wire.LAST_ADD_CONFIRMED)
            status = "EOK" if (lac_body or last) else "ENOENTRY"
            return wire.v3_read_lac_response(req.key, status, req.ledger_id, lac_body, last)  # type: ignore[arg-type]
        if req.op == "tls":
            status = "EOK" if self.tls is not None else "EBADREQ"
            return wire.v3_simple_response(req.key, wire.OP_START_TLS, status)  # type: ignore[arg-type]
        return wire.v3_simple_response(req.key, 2, "EBADREQ")  # type: ignore[arg-type]

    def _serve(self, conn: socket.socket) -> None:
        buf = bytearray()
        sent_any = False
        try:
            while not self._stop.is_set():
                chunk = conn.recv(262144)
                if not chunk:
                    return
                buf += chunk
                frames = []
                while len(buf) >= 4:
                    n = int.from_bytes(buf[:4], "big")
                    if len(buf) < 4 + n:
                        break
                    frames.append(bytes(buf[4 : 4 + n]))
                    del buf[: 4 + n]
                self.max_batch = max(self.max_batch, len(frames))
                answers = []
                upgrade = False
                for payload in frames:
                    if self.mode == "v2-only" and wire.is_v3_frame(payload):
                        return  # an old bookie cannot decode it and drops the connection
                    ready = None if self.record else self._encoded(payload)
                    if ready is not None:
                        answers.append(ready)
                        continue
                    req = wire.parse_request(payload)
                    if self.record:
                        with self._lock:
                            self.requests.append(req)
                            self.raw_requests.append(payload)
                    ready = self._encoded(payload) if req.op == "read" and not req.fence else None
                    answer = ready if ready is not None else self._answer(req)
                    if self.pad_to is not None and self.mode == "normal":
                        conn.sendall(answer)  # large answers: one at a time, none kept
                        sent_any = True
                        continue
                    answers.append(answer)
                    if req.op == "tls" and self.tls is not None:
                        upgrade = True
                if self.mode == "silent":
                    continue
                if self.mode == "huge-frame" and frames:
                    if not sent_any:
                        conn.sendall(HUGE_FRAME.to_bytes(4, "big") + bytes(64 << 10))
                        sent_any = True
                    continue
                if self.delay and answers:
                    began = time.monotonic()
                    time.sleep(self.delay)
                    self.busy.append((began, time.monotonic()))
                if self.mode == "reorder":
                    answers.reverse()
                out = b"".join(answers)
                if self.mode == "close-mid" and out and not sent_any:
                    conn.sendall(out[: max(5, len(out) // 2)])
                    return
                if out:
                    conn.sendall(out)
                    sent_any = True
                if upgrade:
                    assert self.tls is not None
                    conn = self.tls.wrap_socket(conn, server_side=True)
        except (OSError, ssl.SSLError):
            return
        finally:
            try:
                conn.close()
            except OSError:
                pass


def make_tls_files(
    folder: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), *, client: bool = False
) -> dict[str, Path]:
    """A CA (``ca``), a server certificate it signed naming ``hosts`` (``cert``, ``key``)
    and, with ``client``, a client certificate it signed (``client_cert``, ``client_key``).
    PEM files in ``folder``; keys unencrypted."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    def write(stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
        (folder / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (folder / f"{stem}.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )

    def issue(subject: str, key, issuer: str, issuer_key, *, ca: bool, extensions=()):
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(name(issuer))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            builder = builder.add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                critical=True,
            ).add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
        else:
            builder = builder.add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                critical=False,
            )
        for ext in extensions:
            builder = builder.add_extension(ext, critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = issue("ledgerctl test CA", ca_key, "ledgerctl test CA", ca_key, ca=True)
    write("ca", ca, ca_key)
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    server_usage = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])
    cert = issue(hosts[0], key, "ledgerctl test CA", ca_key, ca=False,
                 extensions=(x509.SubjectAlternativeName(names), server_usage))  # fmt: skip
    write("bookie", cert, key)
    files = {"ca": folder / "ca.pem", "cert": folder / "bookie.pem", "key": folder / "bookie.key"}
    if client:
        ckey = ec.generate_private_key(ec.SECP256R1())
        client_usage = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
        ccert = issue("ledgerctl", ckey, "ledgerctl test CA", ca_key, ca=False,
                      extensions=(client_usage,))  # fmt: skip
        write("client", ccert, ckey)
        files["client_cert"] = folder / "client.pem"
        files["client_key"] = folder / "client.key"
    return files


def tls_server_context(files: dict[str, Path], require_client: bool = False) -> ssl.SSLContext:
    """The test bookie's side: its certificate; with ``require_client`` mutual TLS."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(files["cert"], files["key"])
    if require_client:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(files["ca"])
    return ctx


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.support.live_bookie")
    parser.add_argument("dir")
    parser.add_argument("--preload", type=int, action="append", default=[])
    parser.add_argument(
        "--record", action=argparse.BooleanOptionalAction, default=True,
        help="keep every request (for tests); --no-record serves preloaded reads faster",
    )  # fmt: skip
    args = parser.parse_args(argv)
    with TestBookie(args.dir, preload=args.preload, record=args.record) as bookie:
        print(f"port {bookie.port}", flush=True)
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
