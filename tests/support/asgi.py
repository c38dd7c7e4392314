"""Calling an ASGI app as uvicorn does, with a client that may leave after the first body chunk."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import anyio.lowlevel


def scope(method: str, path: str, headers: list[tuple[bytes, bytes]] | None = None) -> dict:
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": method, "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": headers or [], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2), "scheme": "http"}


async def call(app, method: str, path: str, body: bytes = b"", *, headers: list[tuple[bytes, bytes]] | None = None,
               leave_after_first: bool = False, on_first_chunk: Callable[[], None] | None = None) -> list[dict]:
    """Every message the app sends. With ``leave_after_first`` the client reports a disconnect
    once the first non-empty body chunk is sent (ASGI 2.3, as uvicorn does); ``on_first_chunk``
    runs at that moment."""
    sent: list[dict] = []
    first_chunk = anyio.Event()
    requested = False
    if body:
        headers = [*(headers or []), (b"content-length", str(len(body)).encode())]

    async def receive():
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": body, "more_body": False}
        if leave_after_first:
            await first_chunk.wait()
            return {"type": "http.disconnect"}
        await anyio.sleep_forever()

    async def send(message):
        sent.append(message)
        if message["type"] == "http.response.body" and message.get("body"):
            if on_first_chunk is not None and not first_chunk.is_set():
                on_first_chunk()
            first_chunk.set()
            await anyio.lowlevel.checkpoint()  # as a transport's drain would: the disconnect lands here

    await app(scope(method, path, headers), receive, send)
    return sent
