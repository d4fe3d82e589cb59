"""A test bookie: serves a bookie data directory over the v3 and v2 read protocol on loopback.

The bytes come from the project's own offline store (:class:`BookieStore` over the
directory), so what a live read returns can be compared with what an offline read of
the same directory returns. Like a real bookie it decides per connection between v3 and
v2 from the first frame (a v3 Request starts with 0x0A), answers READ_ENTRY (entry -1:
the last entry it holds), READ_LAC (explicit LAC and last entry) and START_TLS.

Faults for tests: ``mode`` ``silent`` (accepts, reads, never answers), ``close-mid``
(sends half of its first answer, then closes), ``reorder`` (answers the frames that
arrived together in reverse order); ``corrupt`` / ``drop`` change or hide single entries.
Every request is recorded (``requests``) so tests can check that nothing fences.

Run alone (for the benchmark)::

    python -m tests.live_bookie DIR [--preload LEDGER ...]

prints ``port N`` on stdout once listening, and serves until stdin closes.
"""

from __future__ import annotations

import socket
import ssl
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from pulsarctl_py.decoders import bookie_wire as wire
from pulsarctl_py.decoders.bookkeeper import HEADER
from pulsarctl_py.stores.bookie import BookieStore, EntryNotFound, open_bookie


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
    ) -> None:
        self.store = source if isinstance(source, BookieStore) else open_bookie([Path(source)])
        self._own_store = not isinstance(source, BookieStore)
        self.mode = mode
        self.corrupt = corrupt or {}
        self.drop = drop or set()
        self.tls = tls
        self.requests: list[wire.ParsedRequest] = []
        self.raw_requests: list[bytes] = []
        self.accepted = 0  # connections accepted
        self.max_batch = 0  # most requests that arrived together (pipelining)
        self._lock = threading.Lock()
        self._cache: dict[tuple[int, int], bytes] = {}
        self._lacs: dict[int, int] = {}
        for ledger in preload or []:
            for stored in self.store.read_entries(ledger):
                self._cache[(ledger, stored.entry_id)] = stored.data
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
        return fault(data) if fault is not None else data

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
                    req = wire.parse_request(payload)
                    with self._lock:
                        self.requests.append(req)
                        self.raw_requests.append(payload)
                    answers.append(self._answer(req))
                    if req.op == "tls" and self.tls is not None:
                        upgrade = True
                if self.mode == "silent":
                    continue
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


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.live_bookie")
    parser.add_argument("dir")
    parser.add_argument("--preload", type=int, action="append", default=[])
    args = parser.parse_args(argv)
    with TestBookie(args.dir, preload=args.preload) as bookie:
        print(f"port {bookie.port}", flush=True)
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
