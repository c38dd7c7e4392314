"""Sending a chunked JSON plan (:mod:`tfbatch.tfs.jsonstream`) with HTTP chunked transfer.

Each chunk is encoded in a worker thread under the same capacity limiter as the model call,
one chunk ahead of the one being sent: while the event loop writes chunk k to the socket and
waits for the client to drain it, a thread encodes chunk k+1. No thread is held while the
client is slow to read (a slow reader parks only this coroutine), and at most two encoded
chunks plus the transport's buffer exist at a time, whatever the response size.

A client that goes away mid-stream: uvicorn (ASGI 2.3) reports it through ``receive``, on
which Starlette's StreamingResponse cancels the stream; the chunk being encoded is dropped
when its thread finishes and nothing more is encoded.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any

import anyio
from starlette.responses import StreamingResponse

from tfbatch.tfs.blocking import run_blocking
from tfbatch.tfs.jsonstream import Plan

_END = object()


def _next(chunks: Iterator[bytes]) -> object:
    return next(chunks, _END)


async def prefetched(chunks: Iterable[bytes], limiter: anyio.CapacityLimiter | None = None) -> AsyncIterator[bytes]:
    """The chunks, each produced in a thread while the previous one is being sent."""
    it = iter(chunks)
    pending = asyncio.ensure_future(run_blocking(_next, it, limiter=limiter))
    try:
        while True:
            chunk = await pending
            if chunk is _END:
                return
            # Only one next() is ever in flight: the generator is never advanced concurrently.
            pending = asyncio.ensure_future(run_blocking(_next, it, limiter=limiter))
            yield chunk  # type: ignore[misc]
    finally:
        pending.cancel()


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
    return StreamingResponse(prefetched(chunks, limiter), status_code=status_code, media_type=media_type,
                             headers=dict(headers or {}))
