"""A test bookie that takes v3 ADD_ENTRY requests and keeps the entries in memory.

It answers every add with EOK after checking what a real bookie checks (the master key
of the ledger's first add, one entry id at most once), and records every request so that
tests can see what a writer sent (``adds``), how many were in flight at once
(``max_outstanding``: adds received before the writer could have seen the answer to the
earliest, i.e. in one read), and that none carried RECOVERY_ADD.

Faults: ``fail_at`` = (entry id, status) answers that entry with the status;
``close_at`` closes the connection when that entry arrives; ``silent_at`` stops answering
from that entry on; ``delay`` seconds before each answer batch. ``tls``: a server SSL
context; START_TLS is answered EOK and the connection goes on in TLS, as a bookie's does
(the requests before it are recorded in ``plain``).
"""

from __future__ import annotations

import socket
import ssl
import threading
import time

from pulsarctl_py.decoders import bookie_wire as wire


class WriteBookie:
    __test__ = False

    def __init__(
        self,
        *,
        fail_at: tuple[int, str] | None = None,
        close_at: int | None = None,
        silent_at: int | None = None,
        delay: float = 0.0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.tls = tls
        self.plain: list[str] = []
        self.fail_at = fail_at
        self.close_at = close_at
        self.silent_at = silent_at
        self.delay = delay
        self.entries: dict[tuple[int, int], bytes] = {}
        self.master_keys: dict[int, bytes] = {}
        self.adds: list[wire.AddRequest] = []
        self.max_batch = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.1)
        self.port = self._sock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        for conn in list(self._conns):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> WriteBookie:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        silent = False
        try:
            while True:
                chunk = conn.recv(1 << 20)
                if not chunk:
                    return
                buf += chunk
                answers = []
                batch = 0
                while len(buf) >= 4:
                    size = int.from_bytes(buf[:4], "big")
                    if len(buf) < 4 + size:
                        break
                    payload, buf = buf[4 : 4 + size], buf[4 + size :]
                    req = wire.parse_request(payload)
                    if req.op == "tls" and self.tls is not None:
                        conn.sendall(wire.v3_simple_response(req.key, wire.OP_START_TLS, "EOK"))
                        conn = self.tls.wrap_socket(conn, server_side=True)
                        self.plain.append("tls")
                        continue
                    if req.op != "add":
                        self.errors.append(f"unexpected {req.op}")
                        continue
                    if self.tls is not None and not isinstance(conn, ssl.SSLSocket):
                        self.plain.append("add")
                    add = wire.parse_add_request(payload)
                    batch += 1
                    with self._lock:
                        self.adds.append(add)
                    if self.close_at is not None and add.entry_id >= self.close_at:
                        conn.close()
                        return
                    if self.silent_at is not None and add.entry_id >= self.silent_at:
                        silent = True
                    if silent:
                        continue
                    answers.append(self._answer(add))
                self.max_batch = max(self.max_batch, batch)
                if answers:
                    if self.delay:
                        time.sleep(self.delay)
                    conn.sendall(b"".join(answers))
        except (OSError, ssl.SSLError):
            return

    def _answer(self, add: wire.AddRequest) -> bytes:
        status = "EOK"
        if self.fail_at is not None and add.entry_id == self.fail_at[0]:
            status = self.fail_at[1]
        elif add.recovery:
            self.errors.append(f"RECOVERY_ADD on {add.ledger_id}:{add.entry_id}")
        else:
            with self._lock:
                known = self.master_keys.setdefault(add.ledger_id, add.master_key)
                if known != add.master_key:
                    status = "EUA"
                elif (add.ledger_id, add.entry_id) in self.entries:
                    self.errors.append(f"entry {add.ledger_id}:{add.entry_id} added twice")
                else:
                    self.entries[(add.ledger_id, add.entry_id)] = add.body
        return wire.v3_add_response(add.txn_id, status, add.ledger_id, add.entry_id)
