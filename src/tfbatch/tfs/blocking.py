"""Running blocking model work off the event loop, abandonable when a request times out.

anyio's default ``to_thread.run_sync`` defers cancellation until the thread returns, so a
per-request timeout could not answer 504 before the model finished. Here a timed-out request
answers at once; its thread runs to completion in the background and its result is dropped.
Separate limiters keep TFS sub-requests from a handler script from waiting behind the very
``/invocations`` calls that issued them.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")


async def run_blocking(fn: Callable[..., T], *args: Any, limiter: anyio.CapacityLimiter | None = None) -> T:
    return await anyio.to_thread.run_sync(functools.partial(fn, *args), abandon_on_cancel=True, limiter=limiter)


class Limiters:
    """Thread capacity per kind of work; created lazily because limiters bind to a running loop."""

    def __init__(self, capacity: int = 64):
        self.capacity = capacity
        self._limiters: dict[str, anyio.CapacityLimiter] = {}

    def __getitem__(self, kind: str) -> anyio.CapacityLimiter:
        limiter = self._limiters.get(kind)
        if limiter is None:
            limiter = self._limiters[kind] = anyio.CapacityLimiter(self.capacity)
        return limiter
