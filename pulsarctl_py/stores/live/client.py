"""A bookie client that only reads: READ_ENTRY and READ_LAC over v3 or v2 frames.

Plain blocking sockets, one connection per bookie, reused for every call. Reads are
pipelined: up to ``window`` requests are in flight on a connection, and each new one is
sent as an answer comes back. Every wait is bounded by ``timeout`` seconds (the time a
bookie may stay silent while requests are pending); a bookie that does not answer, closes
the connection or sends a frame that does not parse raises :class:`BookieUnavailable`
(exit code 3) with one line naming it, and the connection is dropped.

Nothing here can fence a ledger or set the recovery flag: the frame builders in
``decoders.bookie_wire`` have no such option. TLS follows BookKeeper's own client: a v3
START_TLS request on the plain connection, then the TLS handshake on the same socket. The
bookie's certificate chain is checked against the CA file (or the system CAs) and, unless
``check_hostname`` is off, its names against the host of the bookie id (the name in
ledger metadata, also when ``--bookie-address`` sends the connection elsewhere).

``auto`` starts each connection with v3; a bookie that closes the connection, stays
silent or answers something that is not a v3 frame is asked again over v2.

Memory: a frame is at most the maximum message size plus 10 KiB (``decoders.limits``:
what Pulsar's own BookKeeper client allows, ``nettyMaxFrameSizeBytes``); a longer one is
refused from its 4-byte length, before any of it is read. A connection buffers at most
one such frame (and 256 KiB), so each bookie costs a few frames of memory at most.
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulsarctl_py.decoders import bookie_wire as wire
from pulsarctl_py.decoders import limits
from pulsarctl_py.decoders.errors import InputFormatError, LedgerctlError, StoreUnavailable
from pulsarctl_py.decoders.speedups import native

#: one answer to a read: (key, status code, ledger id, entry id, body, maxLAC)
Raw = tuple[object, int, int, int, bytes | None, int | None]

_NATIVE = native if native is not None and hasattr(native, "v3_read_replies") else None

DEFAULT_PORT = 3181
DEFAULT_TIMEOUT = 5.0
DEFAULT_WINDOW = 64


class BookieUnavailable(StoreUnavailable):
    """A bookie that cannot be reached, does not answer in time, or breaks the protocol."""

    def __init__(self, bookie: str, message: str) -> None:
        super().__init__(f"bookie {bookie}: {message}")
        self.bookie = bookie
        self.reason = message


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """How to reach bookies: protocol, TLS, timeout, pipelining, address overrides."""

    v2: bool = False
    tls: bool = False
    ca_file: Path | None = None
    timeout: float = DEFAULT_TIMEOUT
    window: int = DEFAULT_WINDOW
    addresses: tuple[tuple[str, str], ...] = ()  # bookie id -> host:port (NAT)
    auto: bool = False  # v3 first, v2 for a bookie that does not speak v3
    check_hostname: bool = True
    cert_file: Path | None = None  # client certificate (mutual TLS), PEM
    key_file: Path | None = None  # its private key, if not in cert_file
    key_password_env: str | None = None  # the variable holding the key's passphrase

    def address_of(self, bookie_id: str) -> str:
        return dict(self.addresses).get(bookie_id, bookie_id)

    def override(self, bookie_id: str) -> str | None:
        """The address ``--bookie-address`` gives ``bookie_id``, if it gives one."""
        return dict(self.addresses).get(bookie_id)

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        try:
            ctx = ssl.create_default_context(
                cafile=str(self.ca_file) if self.ca_file is not None else None
            )
        except (OSError, ssl.SSLError) as exc:
            raise LedgerctlError(
                f"cannot load the bookie CA file {self.ca_file}: {_ssl_reason(exc)}"
            ) from None
        ctx.check_hostname = self.check_hostname
        if self.cert_file is not None:
            secret = os.environ.get(self.key_password_env) if self.key_password_env else None
            key = self.key_file or self.cert_file

            def no_prompt() -> bytes:  # never OpenSSL's own prompt on the terminal
                raise LedgerctlError(
                    f"the bookie client key {key} is encrypted: put its passphrase in "
                    "LEDGERCTL_BOOKIE_TLS_KEY_PASSWORD"
                )

            try:
                ctx.load_cert_chain(self.cert_file, self.key_file, secret or no_prompt)
            except (OSError, ssl.SSLError) as exc:
                raise LedgerctlError(
                    f"cannot load the bookie client certificate {self.cert_file} "
                    f"(a PEM certificate and its private key): {_ssl_reason(exc)}"
                ) from None
        return ctx


def connection_to(
    bookie_id: str,
    options: ClientOptions,
    resolver: Any = None,
    ssl_context: ssl.SSLContext | None = None,
) -> BookieConnection:
    """A connection (not yet made) to the bookie named ``bookie_id`` in ledger metadata:
    to the address ``--bookie-address`` gives it, else to the one its registration
    publishes (``resolver.resolve``), else to the id itself. When the registration names
    no usable endpoint (and no address is given), connecting raises
    :class:`BookieUnavailable` with the reason."""
    address = options.override(bookie_id)
    endpoint = broken = None
    if resolver is not None:
        try:
            endpoint = resolver.resolve(bookie_id)
        except BookieUnavailable as exc:
            broken = None if address is not None else exc.reason
    if address is None:
        address = bookie_id if endpoint is None else endpoint.address
    return BookieConnection(
        address,
        options,
        ssl_context,
        bookie_id,
        tls_host=None if endpoint is None or not endpoint.registered else endpoint.host,
        name=bookie_id if address == bookie_id else f"{bookie_id} at {address}",
        broken=broken,
    )


def _ssl_reason(exc: BaseException) -> str:
    """An ssl or OS error as one short clause (no errno tuple, no ``(_ssl.c:N)``)."""
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        text = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], str) else str(exc)
        return re.sub(r"^\[[^\]]*\]\s*|\s*\(_ssl\.c:\d+\)$", "", text) or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) of a bookie id; the port defaults to 3181."""
    host, sep, port = address.rpartition(":")
    if not sep or "]" in port:
        return address.strip("[]"), DEFAULT_PORT
    try:
        number = int(port)
    except ValueError:
        raise LedgerctlError(
            f"bookie address {address!r} is not host:port; map it with "
            "--bookie-address ID=HOST:PORT"
        ) from None
    return host.strip("[]"), number


class BookieConnection:
    """One connection to one bookie; not thread-safe (one user at a time)."""

    def __init__(
        self,
        address: str,
        options: ClientOptions,
        ssl_context: ssl.SSLContext | None = None,
        bookie_id: str | None = None,
        tls_host: str | None = None,
        name: str | None = None,
        broken: str | None = None,
    ) -> None:
        self.address = address
        self.bookie_id = bookie_id or address
        # the name its certificate must carry: its registration's host, else its id's
        self.tls_host = tls_host
        self.name = name or address  # for messages
        self.broken = broken  # why it cannot be reached at all (its registration)
        self.options = options
        self.v2 = options.v2  # auto: decided by the first exchange of each connection
        self._probe = options.auto
        self._ssl = ssl_context
        self._sock: socket.socket | None = None
        self._buf = bytearray()
        self._pos = 0  # start of the first unread byte in _buf
        self._txn = 0
        self.requests_sent = 0

    # -- connection ---------------------------------------------------------------------

    def _fail(self, message: str) -> BookieUnavailable:
        self.close()
        return BookieUnavailable(self.name, message)

    def connect(self) -> None:
        if self._sock is not None:
            return
        if self.broken is not None:
            raise BookieUnavailable(self.name, self.broken)
        host, port = split_address(self.address)
        timeout = self.options.timeout
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except TimeoutError:
            raise BookieUnavailable(self.name, f"no connection within {timeout:g}s") from None
        except OSError as exc:
            raise BookieUnavailable(self.name, f"cannot connect: {exc.strerror or exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._buf.clear()
        self._pos = 0
        if self._ssl is not None:
            self._start_tls(self.tls_host or split_address(self.bookie_id)[0])

    def _start_tls(self, host: str) -> None:
        if self.v2:
            raise LedgerctlError("TLS needs protocol v3 (BookKeeper starts TLS with a v3 request)")
        try:
            reply = self._call(wire.v3_start_tls_request(self._next_txn()))
        except BookieUnavailable as exc:
            raise self._fail(f"no TLS: {exc.reason}") from None
        if reply.status != "EOK":
            raise self._fail(f"refused START_TLS ({reply.status}): it does not speak TLS")
        assert self._sock is not None and self._ssl is not None
        self._sock.settimeout(self.options.timeout)
        try:
            self._sock = self._ssl.wrap_socket(self._sock, server_hostname=host)
        except TimeoutError:
            raise self._fail(
                f"TLS handshake failed: no answer within {self.options.timeout:g}s"
            ) from None
        except (ssl.SSLError, OSError) as exc:
            raise self._fail(f"TLS handshake failed: {_ssl_reason(exc)}") from None

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self._buf.clear()
        self._pos = 0
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    # -- frames -------------------------------------------------------------------------

    def _next_txn(self) -> int:
        self._txn += 1
        return self._txn

    def _send(self, data: bytes) -> None:
        assert self._sock is not None
        self._sock.settimeout(self.options.timeout)
        try:
            self._sock.sendall(data)
        except TimeoutError:
            raise self._fail(f"cannot send within {self.options.timeout:g}s") from None
        except OSError as exc:
            raise self._fail(f"connection lost while sending: {self._why(exc)}") from None
        self.requests_sent += 1

    def _why(self, exc: OSError) -> str:
        why = _ssl_reason(exc)
        if isinstance(exc, ssl.SSLError) and self.options.cert_file is None:
            # TLS 1.3 reports a refused client certificate only after the handshake
            why += " (if the bookie requires a client certificate: LEDGERCTL_BOOKIE_TLS_CERT_FILE)"
        return why

    def _fill(self, deadline: float, need: int) -> None:
        """Receive what the bookie sends next (at most until ``deadline``) into ``_buf``.

        The consumed head of the buffer is dropped first, so a buffer of many small
        answers is not shifted once per frame.
        """
        sock = self._sock
        assert sock is not None
        buf = self._buf
        if self._pos:
            if self._pos == len(buf):  # all taken: drop the buffer, not only its head,
                buf = self._buf = bytearray()  # so that a large frame's room is given back
            else:
                del buf[: self._pos]
            self._pos = 0
        left = deadline - time.monotonic()
        if left <= 0:
            raise self._fail(f"no answer within {self.options.timeout:g}s")
        sock.settimeout(left)
        try:
            chunk = sock.recv(max(262144, need - len(buf)))
        except TimeoutError:
            raise self._fail(f"no answer within {self.options.timeout:g}s") from None
        except OSError as exc:
            raise self._fail(f"connection lost: {self._why(exc)}") from None
        if not chunk:
            what = "in the middle of a response" if buf else "before answering"
            raise self._fail(f"closed the connection {what}")
        buf += chunk

    def _take_frame(self) -> bytes | int:
        """The next complete frame in ``_buf``, else how many bytes it needs."""
        buf, pos = self._buf, self._pos
        have = len(buf) - pos
        if have < 4:
            return 4
        size = int.from_bytes(buf[pos : pos + 4], "big")
        cap = limits.max_frame()
        if size > cap:
            raise self._fail(
                f"sent a frame of {size} bytes, over the limit of {cap} (the maximum message "
                "size plus 10 KiB; raise it with --max-message-size)"
            )
        if have < 4 + size:
            return 4 + size
        self._pos = pos + 4 + size
        with memoryview(buf) as view:  # one copy, not a bytearray slice and then bytes
            return view[pos + 4 : pos + 4 + size].tobytes()

    def _recv_frame(self) -> bytes:
        """One frame, waiting at most ``timeout`` for the bookie to send anything."""
        deadline = time.monotonic() + self.options.timeout
        while True:
            frame = self._take_frame()
            if not isinstance(frame, int):
                return frame
            self._fill(deadline, frame)

    def _parse(self, payload: bytes) -> wire.ReadReply:
        try:
            if self.v2:
                return wire.parse_v2_response(payload)
            return wire.parse_v3_response(payload)
        except InputFormatError as exc:
            raise self._fail(str(exc)) from None

    def _reply(self) -> wire.ReadReply:
        return self._parse(self._recv_frame())

    def _call(self, request: bytes) -> wire.ReadReply:
        self._send(request)
        return self._reply()

    def _replies(self) -> list[Raw]:
        """The answers to reads that have arrived, at least one (waiting for it at most
        ``timeout``): every buffered v3 answer in one call of the C parser when it is
        built, any other frame one at a time through the Python parser."""
        deadline = time.monotonic() + self.options.timeout
        fast = None if self.v2 else _NATIVE
        while True:
            if fast is not None:
                out: list[Raw] = []
                self._pos = fast.v3_read_replies(self._buf, self._pos, limits.max_frame(), out)
                if out:
                    return out
            frame = self._take_frame()
            if isinstance(frame, int):
                self._fill(deadline, frame)
                continue
            reply = self._parse(frame)
            if reply.op != "read":
                raise self._fail(
                    f"answered a request it was not asked ({reply.op} of "
                    f"{reply.ledger_id}:{reply.entry_id})"
                )
            code = (wire.V2_FROM_NAME if self.v2 else wire.V3_FROM_NAME).get(reply.status)
            if code is None:  # "status N": a code the protocol does not name
                code = int(reply.status.rpartition(" ")[2])
            return [(reply.key, code, reply.ledger_id, reply.entry_id, reply.body, reply.max_lac)]

    # -- reads --------------------------------------------------------------------------

    def _requests(self, ledger_id: int, entry_ids: list[int], pending: dict) -> bytes:
        """The frames reading ``entry_ids``, each recorded in ``pending`` by its key."""
        if self.v2:
            frames = []
            for entry_id in entry_ids:
                key = (ledger_id, entry_id)
                if key not in pending:  # the same v2 read twice: one answer serves both
                    pending[key] = entry_id
                    frames.append(wire.v2_read_request(ledger_id, entry_id))
            return b"".join(frames)
        txn = self._txn
        request = wire.v3_read_request
        frames = []
        for entry_id in entry_ids:
            txn += 1
            pending[txn] = entry_id
            frames.append(request(txn, ledger_id, entry_id))
        self._txn = txn
        return b"".join(frames)

    def read_entry(self, ledger_id: int, entry_id: int) -> wire.ReadReply:
        return next(self.read_entries(ledger_id, [entry_id]))

    def read_raw(
        self, ledger_id: int, entry_ids: Iterable[int], window: int | None = None
    ) -> Iterator[list[Raw]]:
        """Pipelined reads: lists of answers ``(key, status code, ledger id, entry id,
        body or None, maxLAC or None)`` in the order they arrive (bookies may reorder).

        At most ``window`` requests are in flight; when half of them have been answered,
        the next ones go out in one send. Status codes are the protocol's own (EOK is 0
        in both versions; ``bookie_wire.status_name`` names them).
        """
        self.connect()
        if self._probe:
            self._choose_protocol(ledger_id)
        window = max(1, window or self.options.window)
        ids = entry_ids if isinstance(entry_ids, list | range) else list(entry_ids)
        pending: dict[object, int] = {}
        low = window // 2
        at, count = 0, len(ids)
        try:
            while True:
                if at < count and len(pending) <= low:
                    room = window - len(pending)
                    self._send(self._requests(ledger_id, list(ids[at : at + room]), pending))
                    at += room
                if not pending:
                    return
                replies = self._replies()
                pop = pending.pop
                for reply in replies:
                    if pop(reply[0], None) is None:
                        raise self._fail(
                            f"answered a request it was not asked (read of {reply[2]}:{reply[3]})"
                        )
                yield replies
        finally:
            if pending:
                self.close()  # answers still on the way would confuse the next call

    def read_entries(
        self, ledger_id: int, entry_ids: Iterable[int], window: int | None = None
    ) -> Iterator[wire.ReadReply]:
        """Pipelined reads as :class:`ReadReply` objects, in the order they arrive."""
        v2 = self.v2
        for replies in self.read_raw(ledger_id, entry_ids, window):
            for key, code, ledger, entry, body, max_lac in replies:
                status = wire.status_name(code, v2=v2)
                yield wire.ReadReply("read", key, status, ledger, entry, body, None, max_lac)

    def read_lac(self, ledger_id: int) -> wire.ReadReply:
        """v3 READ_LAC; v2 has none a bookie decodes, so it reads entry -1 (the last one)."""
        self.connect()
        if self._probe:
            return self._choose_protocol(ledger_id)
        if self.v2:
            return self._call(wire.v2_read_request(ledger_id, wire.LAST_ADD_CONFIRMED))
        reply = self._call(wire.v3_read_lac_request(self._next_txn(), ledger_id))
        if reply.op != "lac":
            raise self._fail(f"answered READ_LAC with {reply.op}")
        return reply

    def _choose_protocol(self, ledger_id: int) -> wire.ReadReply:
        """``auto``: a v3 READ_LAC first; a bookie that does not answer it in v3 gets v2.

        Returns the answer to that READ_LAC (v3), or to reading entry -1 (v2).
        """
        self._probe = False
        try:
            return self.read_lac(ledger_id)
        except BookieUnavailable as v3_error:
            self.v2 = True
            try:
                return self.read_lac(ledger_id)
            except BookieUnavailable as v2_error:
                raise BookieUnavailable(
                    self.name,
                    f"neither v3 ({v3_error.reason}) nor v2 ({v2_error.reason})",
                ) from None


class BookiePool:
    """Connections by bookie id, made on first use and reused until closed.

    A bookie's address: the one ``--bookie-address`` gives its id, else the one its
    registration publishes (``resolver``, an :class:`~.registry.AddressBook`), else its id.
    """

    def __init__(self, options: ClientOptions | None = None, resolver: Any = None) -> None:
        self.options = options or ClientOptions()
        self.resolver = resolver
        self._ssl = self.options.ssl_context()
        self._conns: dict[str, BookieConnection] = {}

    def get(self, bookie_id: str) -> BookieConnection:
        conn = self._conns.get(bookie_id)
        if conn is None:
            conn = connection_to(bookie_id, self.options, self.resolver, self._ssl)
            self._conns[bookie_id] = conn
        return conn

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def __enter__(self) -> BookiePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
