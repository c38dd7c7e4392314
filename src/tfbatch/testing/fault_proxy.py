"""A loopback HTTP proxy that answers chosen requests with an error and counts every request.

Put it between a client and an S3-API server (``FaultProxy(server.endpoint_url)``, then point
``AWS_ENDPOINT_URL`` at ``proxy.url``) to see how many requests a client really makes when the
service answers 503: the count is taken on the wire, so retries hidden in any client layer show.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host",
               "content-length", "proxy-connection"}
SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")


class FaultProxy:
    """Forwards to ``target``; the first ``failures`` requests that ``match(method, path)`` get ``status``."""

    def __init__(self, target: str, *, match: Callable[[str, str], bool] = lambda m, p: True,
                 failures: int = 0, status: int = 503, body: bytes = SLOW_DOWN):
        self.target = target.rstrip("/")
        self.match = match
        self.failures = failures
        self.status = status
        self.body = body
        self.requests: Counter[tuple[str, str]] = Counter()  # (method, path without query) -> count
        self.failed = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._session = requests.Session()

    @property
    def url(self) -> str:
        """The proxy's base URL (point AWS_ENDPOINT_URL here)."""
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def count(self, method: str, path: str) -> int:
        """Requests seen for ``method`` on ``path`` (query string ignored), failed ones included."""
        with self._lock:
            return self.requests[(method, path)]

    def _should_fail(self, method: str, path: str) -> bool:
        with self._lock:
            self.requests[(method, path.split("?", 1)[0])] += 1
            if self.failed < self.failures and self.match(method, path):
                self.failed += 1
                return True
            return False

    def start(self) -> "FaultProxy":
        """Listen on a free loopback port, serving from a daemon thread."""
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # the test reads counters, not access logs
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if proxy._should_fail(self.command, self.path):
                    self.send_response(proxy.status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(proxy.body)))
                    self.end_headers()
                    self.wfile.write(proxy.body)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                resp = proxy._session.request(self.command, proxy.target + self.path, headers=headers,
                                              data=body, allow_redirects=False, stream=False)
                self.send_response(resp.status_code)
                for key, value in resp.headers.items():
                    if key.lower() not in _HOP_BY_HOP and key.lower() != "content-encoding":
                        self.send_header(key, value)
                content = b"" if self.command == "HEAD" else resp.content
                self.send_header("Content-Length", resp.headers.get("Content-Length", str(len(content)))
                                 if self.command == "HEAD" else str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop listening and close the upstream session."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self._session.close()

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
