"""Optional bearer-token authentication: every HTTP route but ``/ping``, and every gRPC call
but the health service's.

``/ping`` and gRPC health stay open because load balancers and orchestrators probe them
without credentials.
Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
from typing import Any

import grpc

from tfbatch.errors import Unauthorized
from tfbatch.tfs.loopback_auth import authorization_header, send_unauthorized

OPEN_PATHS = frozenset({"/ping"})
# gRPC's counterpart of /ping: health probes carry no credentials either.
OPEN_GRPC_PREFIX = "/grpc.health.v1.Health/"


def _token_ok(header: str | None, token: str) -> bool:
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())


class BearerAuthMiddleware:
    """Pure ASGI middleware: 401 ``{"error": ...}`` unless ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str):
        self.app = app
        self.token = token

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        if _token_ok(authorization_header(scope), self.token):
            await self.app(scope, receive, send)
            return
        err = Unauthorized(
            "missing or wrong bearer token: send 'Authorization: Bearer <token>' "
            "(the token given with --auth-token or TFBATCH_AUTH_TOKEN)"
        )
        await send_unauthorized(send, err.to_json(), "tfbatch")


class BearerAuthInterceptor(grpc.ServerInterceptor):
    """gRPC: the token travels as ``authorization: Bearer <token>`` call metadata."""

    def __init__(self, token: str):
        self.token = token

        def deny(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token in 'authorization' metadata")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(self, continuation, handler_call_details):
        if handler_call_details.method.startswith(OPEN_GRPC_PREFIX):
            return continuation(handler_call_details)
        metadata = dict(handler_call_details.invocation_metadata or ())
        if _token_ok(metadata.get("authorization"), self.token):
            return continuation(handler_call_details)
        return self._deny
