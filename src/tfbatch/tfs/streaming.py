"""Sending a chunked JSON plan (:mod:`tfbatch.tfs.jsonstream`) with HTTP chunked transfer.

Each chunk is encoded in a worker thread under the same capacity limiter as the model call,
one chunk ahead of the one being sent: while the event loop writes chunk k to the socket and
waits for the client to drain it, a thread encodes chunk k+1. No thread is held while the
client is slow to read (a slow reader parks only this coroutine), and at most two encoded
chunks plus the transport's buffer exist at a time, whatever the response size.

A client that goes away mid-stream: uvicorn (ASGI 2.3) reports it through ``receive``, on
which Starlette's StreamingResponse cancels the stream; the chunk being encoded is dropped
when its thread finishes, nothing more is encoded, and the chunks' generator is closed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any

import anyio
from starlette.responses import StreamingResponse

from tfbatch.tfs.blocking import run_blocking
from tfbatch.tfs.jsonstream import Plan

_END = object()


def _next(chunks: Iterator[bytes], lock: threading.Lock) -> object:
    with lock:
        return next(chunks, _END)


def _close(chunks: Iterator[bytes], lock: threading.Lock) -> None:
    with lock:  # after the next() in flight, if any, has returned
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


async def prefetched(chunks: Iterable[bytes], limiter: anyio.CapacityLimiter | None = None) -> AsyncIterator[bytes]:
    """The chunks, each produced in a thread while the previous one is being sent.

    However the stream ends, the chunks' generator is closed in a thread once its last
    ``next()`` has returned, so that what it holds (JSON helper processes, the arrays) is
    given back now rather than whenever the garbage collector finds it."""
    it = iter(chunks)
    lock = threading.Lock()
    pending = asyncio.ensure_future(run_blocking(_next, it, lock, limiter=limiter))
    try:
        while True:
            chunk = await pending
            if chunk is _END:
                return
            # Only one next() is ever in flight: the generator is never advanced concurrently.
            pending = asyncio.ensure_future(run_blocking(_next, it, lock, limiter=limiter))
            yield chunk  # type: ignore[misc]
    finally:
        pending.cancel()
        asyncio.get_running_loop().run_in_executor(None, _close, it, lock)


class _ClosingStreamingResponse(StreamingResponse):
    """Starlette leaves an unfinished body iterator to the garbage collector when the client
    goes away; this closes it when the response ends, however it ends."""

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]


def streamed(
    chunks: Iterable[bytes],
    *,
    media_type: str,
    status_code: int = 200,
    headers: Mapping[str, str] | None = None,
    limiter: anyio.CapacityLimiter | None = None,
    helpers: Any = None,
) -> StreamingResponse:
    """A response with no Content-Length whose body is ``chunks``, sent with transfer-encoding chunked.

    ``helpers`` (a :class:`tfbatch.tfs.json_helpers.JsonHelpers`) write parts of a JSON plan's
    large arrays in other processes."""
    if helpers is not None and isinstance(chunks, Plan):
        chunks.helpers = helpers
    return _ClosingStreamingResponse(prefetched(chunks, limiter), status_code=status_code, media_type=media_type,
                                     headers=dict(headers or {}))
