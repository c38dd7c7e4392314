"""An HTTP proxy on loopback in front of an S3-API server: counts requests, injects faults.

Clients point ``AWS_ENDPOINT_URL`` at the proxy; every request is forwarded to the real
server unless the proxy decides (seeded, so a run is repeatable) to

- reset the connection (RST, no response) — what a dropped connection looks like,
- answer ``503 SlowDown`` — S3's throttling answer,
- or forward it after a delay.

It counts requests by S3 operation kind (LIST, GET, PUT, HEAD, DELETE, POST) and by
(method, path), and faults by kind, which is how the tests bound retries and the benchmarks
count requests per object. ``failures=N`` (with an optional ``match(method, path)``) answers
the first N matching requests 503 SlowDown instead of drawing faults at random: the count is
taken on the wire, so retries hidden in any client layer show.

``hold=N`` measures how many requests a client keeps in flight without timing it: each
request of an operation in ``only`` (all when None) that ``hold_match(method, path)`` accepts
(all when None) waits at the proxy until N such requests of its operation wait at once, then
they and every later one go on; one waits at most ``hold_s``, so a client that never has N in
flight is slowed, not stuck, and ``max_in_flight`` shows how many it had.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")


def operation(method: str, path: str) -> str:
    query = urlsplit(path).query
    if method == "GET" and ("list-type=" in query or urlsplit(path).path.count("/") <= 1 and "prefix=" in query):
        return "LIST"
    return method


class FaultProxy:
    def __init__(self, upstream: str, *, reset: float = 0.0, slow_down: float = 0.0, delay: float = 0.0,
                 delay_s: float = 0.05, seed: int = 0, only: frozenset[str] | None = None,
                 failures: int = 0, match: Callable[[str, str], bool] | None = None,
                 hold: int = 0, hold_s: float = 20.0, hold_match: Callable[[str, str], bool] | None = None):
        self.upstream = urlsplit(upstream)
        self.rates = {"reset": reset, "slow_down": slow_down, "delay": delay}
        self.delay_s = delay_s
        self.only = only  # operations eligible for faults (None: all)
        self.random = random.Random(seed)
        self.requests: Counter[str] = Counter()
        self.by_path: Counter[tuple[str, str]] = Counter()  # (method, path without query) -> count
        self.failures = failures
        self.match = match
        self.failed = 0
        self.faults: Counter[str] = Counter()
        # Requests being handled right now, and the most at once, by operation: how many a
        # client really keeps in flight, taken on the wire.
        self.in_flight: Counter[str] = Counter()
        self.max_in_flight: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.hold = hold
        self.hold_s = hold_s
        self.hold_match = hold_match
        self.holding: Counter[str] = Counter()  # requests waiting at the proxy now, by operation
        self.released: set[str] = set()  # operations whose requests reached ``hold`` at once
        self.held = threading.Condition(self.lock)
        self.server: ThreadingHTTPServer | None = None

    @property
    def endpoint_url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        return self.endpoint_url

    def count(self, method: str, path: str) -> int:
        """Requests seen for ``method`` on ``path`` (query string ignored), failed ones included."""
        with self.lock:
            return self.by_path[(method, path)]

    def reset_counts(self) -> None:
        with self.lock:
            self.requests.clear()
            self.by_path.clear()
            self.faults.clear()
            self.max_in_flight.clear()

    def _decide(self, method: str, path: str) -> str | None:
        op = operation(method, path)
        with self.lock:
            self.requests[op] += 1
            self.by_path[(method, path.split("?", 1)[0])] += 1
            if self.failed < self.failures and (self.match is None or self.match(method, path)):
                self.failed += 1
                self.faults["slow_down"] += 1
                return "slow_down"
            if self.only is not None and op not in self.only:
                return None
            roll = self.random.random()
            for kind, rate in self.rates.items():
                if roll < rate:
                    self.faults[kind] += 1
                    return kind
                roll -= rate
        return None

    def _wait_for_company(self, method: str, path: str) -> None:
        """``hold``: wait until ``hold`` requests of this operation wait here at once (or
        ``hold_s`` passes); from then on that operation's requests go on at once."""
        op = operation(method, path)
        if (not self.hold or (self.only is not None and op not in self.only)
                or (self.hold_match is not None and not self.hold_match(method, path))):
            return
        with self.held:
            self.holding[op] += 1
            try:
                if self.holding[op] >= self.hold:
                    self.released.add(op)
                    self.held.notify_all()
                self.held.wait_for(lambda: op in self.released, timeout=self.hold_s)
            finally:
                self.holding[op] -= 1

    def start(self) -> "FaultProxy":
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    parts = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(parts)
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self) -> None:
                op = operation(self.command, self.path)
                with proxy.lock:
                    proxy.in_flight[op] += 1
                    proxy.max_in_flight[op] = max(proxy.max_in_flight[op], proxy.in_flight[op])
                try:
                    self._forward()
                finally:
                    with proxy.lock:
                        proxy.in_flight[op] -= 1

            def _forward(self) -> None:
                body = self._body()
                proxy._wait_for_company(self.command, self.path)
                fault = proxy._decide(self.command, self.path)
                if fault == "reset":
                    # SO_LINGER 0 turns close() into a TCP RST: "connection reset by peer".
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                if fault == "slow_down":
                    self.send_response(503, "Slow Down")
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(SLOW_DOWN)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(SLOW_DOWN)
                    return
                if fault == "delay":
                    time.sleep(proxy.delay_s)  # injected latency, the thing under test
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("transfer-encoding", "connection", "content-length")}
                if body or self.command in ("PUT", "POST"):
                    headers["Content-Length"] = str(len(body))
                up = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=60)
                try:
                    up.request(self.command, self.path, body=body or None, headers=headers)
                    resp = up.getresponse()
                    data = resp.read()
                finally:
                    up.close()
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True, name="fault-proxy").start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
