"""Running blocking model work off the event loop, abandonable when a request times out.

anyio's default ``to_thread.run_sync`` defers cancellation until the thread returns, so a
per-request timeout could not answer 504 before the model finished. Here a timed-out request
answers at once; its thread runs to completion in the background and its result is dropped.

The capacity limiter counts model work, not waiting requests: a request's slot is returned
when its thread finishes, not when the request gives up on it. Otherwise every 504 would let
one more model call start while the abandoned one still runs, and timed-out work would pile
up past the limit. Separate limiters keep TFS sub-requests from a handler script from waiting
behind the very ``/invocations`` calls that issued them.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any, Callable, TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")


class _Slot:
    """One unit of a limiter, released exactly once: by the work when it ran, else by the caller."""

    def __init__(self, limiter: anyio.CapacityLimiter, loop: asyncio.AbstractEventLoop):
        self.limiter = limiter
        self.loop = loop
        self.lock = threading.Lock()
        self.state = "pending"  # -> running -> released, or pending -> released (never ran)

    def start(self) -> bool:
        with self.lock:
            if self.state != "pending":
                return False
            self.state = "running"
            return True

    def finish_from_thread(self) -> None:
        with self.lock:
            self.state = "released"
        try:
            self.loop.call_soon_threadsafe(self.limiter.release_on_behalf_of, self)
        except RuntimeError:  # the loop closed meanwhile (shutdown): nothing left to limit
            pass

    def release_if_never_started(self) -> None:
        with self.lock:
            if self.state != "pending":
                return
            self.state = "released"
        self.limiter.release_on_behalf_of(self)


async def run_blocking(fn: Callable[..., T], *args: Any, limiter: anyio.CapacityLimiter | None = None) -> T:
    if limiter is None:
        return await anyio.to_thread.run_sync(lambda: fn(*args), abandon_on_cancel=True)
    slot = _Slot(limiter, asyncio.get_running_loop())
    await limiter.acquire_on_behalf_of(slot)

    def work() -> T:
        if not slot.start():
            raise asyncio.CancelledError()  # the caller gave up before a thread picked this up
        try:
            return fn(*args)
        finally:
            slot.finish_from_thread()

    try:
        # The thread pool itself is not the limit here (the slot is): allow one thread per slot
        # plus the few that are between finishing their work and returning to the pool.
        return await anyio.to_thread.run_sync(work, abandon_on_cancel=True, limiter=_threads(limiter))
    finally:
        slot.release_if_never_started()


_THREAD_LIMITERS: "weakref.WeakKeyDictionary[anyio.CapacityLimiter, anyio.CapacityLimiter]" = (
    weakref.WeakKeyDictionary()
)


def _threads(limiter: anyio.CapacityLimiter) -> anyio.CapacityLimiter:
    threads = _THREAD_LIMITERS.get(limiter)
    if threads is None:
        threads = _THREAD_LIMITERS[limiter] = anyio.CapacityLimiter(2 * int(limiter.total_tokens))
    return threads


class Limiters:
    """Model-work capacity per kind of work; created lazily because limiters bind to a running loop."""

    def __init__(self, capacity: int = 64):
        self.capacity = capacity
        self._limiters: dict[str, anyio.CapacityLimiter] = {}

    def __getitem__(self, kind: str) -> anyio.CapacityLimiter:
        limiter = self._limiters.get(kind)
        if limiter is None:
            limiter = self._limiters[kind] = anyio.CapacityLimiter(self.capacity)
        return limiter

    def in_use(self, kind: str) -> int:
        limiter = self._limiters.get(kind)
        return int(limiter.borrowed_tokens) if limiter is not None else 0
