"""Who may call the loopback TFS endpoints: the job's own processes, or whoever has the token.

A caller is let in when either
- it presents the token: HTTP ``Authorization: Bearer <token>`` or Basic auth with the token
  as password (so ``http://user:<token>@127.0.0.1:<port>/...`` works with requests), gRPC
  ``authorization: Bearer <token>`` metadata; or
- its TCP connection comes from this process or one of its descendants
  (:class:`~tfbatch.tfs.peers.ProcessTreePeers`), which is how SageMaker handler scripts
  call: a bare ``requests.post(context.rest_uri)`` or ``grpc.insecure_channel``, in the job
  process itself or in a handler worker process it started.

Everything else is answered 401 / UNAUTHENTICATED before any model work.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from typing import Any, Callable

import grpc

from tfbatch.errors import Unauthorized
from tfbatch.tfs.peers import ProcessTreePeers, parse_grpc_peer

DENIED = (
    "the loopback TFS endpoint answers only this job's processes, or a caller with the token "
    "(HTTP 'Authorization: Bearer <token>', gRPC 'authorization' metadata)"
)


def token_ok(header: str | None, token: str) -> bool:
    """Bearer <token>, or Basic with <token> as the password (any user name)."""
    if not header:
        return False
    scheme, _, value = header.strip().partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer":
        given = value.strip()
    elif scheme == "basic":
        try:
            given = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            return False
    else:
        return False
    return hmac.compare_digest(given.encode(), token.encode())


class LoopbackGuard:
    def __init__(self, token: str, peers: ProcessTreePeers | None = None):
        if not token:
            raise ValueError("the loopback endpoints need a non-empty token")
        self.token = token
        self.peers = peers or ProcessTreePeers()

    def allows(self, authorization: str | None, client: tuple[str, int] | None,
               server: tuple[str, int] | None) -> bool:
        if token_ok(authorization, self.token):
            return True
        return client is not None and server is not None and self.peers.is_ours(client, server)


class LoopbackAuthMiddleware:
    """ASGI: 401 ``{"error": ...}`` unless :class:`LoopbackGuard` lets the caller in."""

    def __init__(self, app: Any, guard: LoopbackGuard):
        self.app = app
        self.guard = guard

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client, server = scope.get("client"), scope.get("server")
        if self.guard.allows(authorization_header(scope), tuple(client) if client else None,
                             tuple(server) if server else None):
            await self.app(scope, receive, send)
            return
        await send_unauthorized(send, Unauthorized(DENIED).to_json(), "tfbatch-loopback")


def authorization_header(scope) -> str | None:
    """The ASGI request's ``Authorization`` header, or None."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            return value.decode("latin-1")
    return None


async def send_unauthorized(send, body: bytes, realm: str) -> None:
    """A complete ASGI 401 with a JSON body and the Bearer challenge (shared with serve's auth)."""
    await send({
        "type": "http.response.start",
        "status": 401,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", f'Bearer realm="{realm}"'.encode()),
        ],
    })
    await send({"type": "http.response.body", "body": body})


class LoopbackAuthInterceptor(grpc.ServerInterceptor):
    """gRPC: the token in metadata passes at once; otherwise the peer (known only inside the
    call, from ``context.peer()``) must be one of the job's processes."""

    def __init__(self, guard: LoopbackGuard, server_address: Callable[[], tuple[str, int] | None]):
        self.guard = guard
        self.server_address = server_address

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        metadata = dict(handler_call_details.invocation_metadata or ())
        if token_ok(metadata.get("authorization"), self.guard.token):
            return handler
        if handler.unary_unary is None:  # every TFS method is unary; anything else needs the token
            return grpc.unary_unary_rpc_method_handler(_deny)
        inner = handler.unary_unary

        def guarded(request, context):
            client = parse_grpc_peer(context.peer())
            if not self.guard.allows(None, client, self.server_address()):
                _deny(request, context)
            return inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            guarded,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _deny(request, context):
    context.abort(grpc.StatusCode.UNAUTHENTICATED, DENIED)

