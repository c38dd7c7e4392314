"""Live loopback TFS endpoints (REST + gRPC) for handler scripts running inside batch jobs.

A SageMaker ``handler`` script POSTs to ``context.rest_uri`` or builds a stub on
``context.grpc_port``; inside a batch job there is no TFS process, so these endpoints stand
in for it, backed by the job's own ModelServer (and therefore its batcher).

They answer only the job's own processes or a caller with the token
(:mod:`~tfbatch.tfs.loopback_auth`): a port on 127.0.0.1 is reachable by every local process.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
from typing import Any

import uvicorn

from tfbatch.tfs.grpc_service import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_REQUEST_BYTES,
    method_handlers,
    start_grpc_server,
)
from tfbatch.tfs.loopback_auth import LoopbackAuthInterceptor, LoopbackAuthMiddleware, LoopbackGuard
from tfbatch.tfs.rest import tfs_app

log = logging.getLogger(__name__)


def bind_socket(host: str = "127.0.0.1", port: int = 0, *, reuse_port: bool = False) -> socket.socket:
    """A bound (not yet listening) TCP socket; port 0 picks a free port we can then report."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must say TCP: asyncio sets TCP_NODELAY on accepted connections only when it does,
    # and without it every response (headers, then body) waits ~40 ms on delayed ACKs.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


class UvicornThread:
    """Runs an ASGI app with uvicorn on a pre-bound socket in a daemon thread."""

    def __init__(self, app: Any, sock: socket.socket, *, name: str = "tfbatch-rest", **config: Any):
        config.setdefault("log_level", "warning")
        config.setdefault("lifespan", "off")
        self.server = uvicorn.Server(uvicorn.Config(app, **config))
        self.sock = sock
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self.sock])
        except BaseException as exc:  # reported to start(); a daemon thread has no other voice
            self.error = exc
            log.error("%s stopped: %r", self.thread.name, exc)
        finally:
            self.sock.close()  # a client of a dead server is refused, never left in the backlog

    def start(self, timeout: float = 30.0, *, wait: bool = True) -> None:
        """Serve; with ``wait`` (the default) return once uvicorn accepts connections. Without
        it, the socket listens first, so a client that connects before the server's loop runs
        waits in the backlog, and this returns at once (the loop starts beside the caller)."""
        if not wait:
            self.sock.listen(socket.SOMAXCONN)
            self.thread.start()
            return
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if self.error is not None or not self.thread.is_alive():
                raise RuntimeError(f"uvicorn failed to start: {self.error!r}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"uvicorn did not start within {timeout}s")
            time.sleep(0.01)

    def stop(self, timeout: float = 10.0, *, wait: bool = True) -> None:
        """Ask the server to stop; with ``wait``, return once its thread has ended. Without it,
        return at once: the thread ends on uvicorn's next tick (0.1 s) and closes the socket."""
        self.server.should_exit = True
        if not wait:
            return
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(timeout)
        self.sock.close()


class LoopbackEndpoints:
    """TFS REST + gRPC endpoints on 127.0.0.1 ephemeral ports, backed by ``model_server``.

    ``token`` is the endpoint's own (``tfbatch serve --auth-token``), so one token opens every
    door; without one a random token is made, which in practice leaves only the job's processes.
    """

    def __init__(
        self,
        model_server: Any,
        *,
        host: str = "127.0.0.1",
        grpc_max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        grpc_workers: int = 16,
        token: str | None = None,
    ):
        self.model_server = model_server
        self.token = token or secrets.token_urlsafe(32)
        self.guard = LoopbackGuard(self.token)
        self.host = host
        self.grpc_max_message_bytes = grpc_max_message_bytes
        self.grpc_workers = grpc_workers
        self.rest_port: int | None = None
        self.grpc_port: int | None = None
        self.grpc_methods: dict = {}
        self._rest: UvicornThread | None = None
        self._grpc = None

    def start(self) -> "LoopbackEndpoints":
        sock = bind_socket(self.host, 0)
        self.rest_port = sock.getsockname()[1]
        if not self.guard.peers.supported:
            log.warning("cannot tell this job's processes from others here: loopback TFS callers need the token")
        app = LoopbackAuthMiddleware(tfs_app(self.model_server), self.guard)
        self._rest = UvicornThread(app, sock, name="tfbatch-loopback-rest")
        # Not waited for: few scripts call the endpoints, and those that do connect into the
        # backlog until the loop runs. Waiting, then waiting for the stop's tick, was 0.3 s of
        # every scripted job (benchmarks/transform/profile/exit.md).
        self._rest.start(wait=False)
        # The endpoint's own budget (RuntimeSettings), as its REST side and TfsApi use.
        max_request_bytes = getattr(self.model_server.settings, "max_request_bytes", None) or DEFAULT_MAX_REQUEST_BYTES
        try:
            self._grpc, self.grpc_port = start_grpc_server(
                self.model_server,
                host=self.host,
                port=0,
                max_message_bytes=self.grpc_max_message_bytes,
                max_workers=self.grpc_workers,
                interceptors=[LoopbackAuthInterceptor(self.guard, self._grpc_address)],
                max_request_bytes=max_request_bytes,
            )
            # What the gRPC endpoint answers, for a handler's calls from this very process.
            self.grpc_methods = method_handlers(self.model_server, max_request_bytes=max_request_bytes)
        except BaseException:
            self._rest.stop()
            raise
        log.info("loopback TFS endpoints: REST %s:%s, gRPC %s:%s", self.host, self.rest_port, self.host, self.grpc_port)
        return self

    def _grpc_address(self) -> tuple[str, int] | None:
        return None if self.grpc_port is None else (self.host, self.grpc_port)

    @property
    def rest_url(self) -> str:
        return f"http://{self.host}:{self.rest_port}"

    def stop(self, grace: float = 5.0) -> None:
        if self._grpc is not None:
            self._grpc.stop(grace).wait(grace + 1)
            self._grpc = None
        if self._rest is not None:
            self._rest.stop(wait=False)
            self._rest = None

    def __enter__(self) -> "LoopbackEndpoints":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
