"""Request body limit (413) and per-request timeout (504), as pure ASGI middleware.

The body limit is checked against Content-Length before anything is read, and enforced on
the bytes actually received for chunked uploads. A timed-out request is answered 504 at
once; its model call may still finish in a worker thread (threads cannot be killed), which
is why blocking work goes through :func:`tfbatch.tfs.blocking.run_blocking`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tfbatch.errors import PayloadTooLarge, RequestTimeout, TfbatchError


async def send_error(send, err: TfbatchError) -> None:
    body = err.to_json()
    await send({
        "type": "http.response.start",
        "status": err.status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
    })
    await send({"type": "http.response.body", "body": body})


class BodyReadTimeout(TfbatchError):
    status = 408
    grpc_code = "DEADLINE_EXCEEDED"


class BodyLimitMiddleware:
    """413 above ``max_bytes``; 408 when the body stalls for ``read_timeout_s`` between chunks."""

    def __init__(self, app: Any, max_bytes: int, read_timeout_s: float | None = None):
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout_s = read_timeout_s

    def _error(self, size: str) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"request body of {size} exceeds the limit of {self.max_bytes} bytes "
            f"({self.max_bytes / 2**20:g} MiB; raise it with --max-body-mb)"
        )

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await send_error(send, self._error(f"{int(value)} bytes"))
                return
        received = 0
        started = False

        body_done = False

        async def limited_receive():
            nonlocal received, body_done
            if body_done:  # later receives wait for a disconnect, which may rightly take long
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.read_timeout_s)
            except asyncio.TimeoutError:
                raise BodyReadTimeout(
                    f"the request body stalled for {self.read_timeout_s:g} s (--body-timeout)"
                ) from None
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # A TfbatchError, so routes that map errors answer 413 themselves.
                    raise self._error(f"more than {self.max_bytes} bytes")
            return message

        async def tracking_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except (PayloadTooLarge, BodyReadTimeout) as err:
            if not started:
                await send_error(send, err)


class TimeoutMiddleware:
    def __init__(self, app: Any, timeout_s: float):
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await asyncio.wait_for(self.app(scope, receive, tracking_send), self.timeout_s)
        except asyncio.TimeoutError:
            if not started:
                await send_error(
                    send,
                    RequestTimeout(
                        f"{scope['method']} {scope['path']} took longer than the request timeout of "
                        f"{self.timeout_s:g} s (--request-timeout)"
                    ),
                )
