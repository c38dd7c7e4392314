"""The model-work limiter: a request that gives up keeps its slot until its work ends."""

from __future__ import annotations

import functools
import threading

import anyio
import pytest

from tfbatch.tfs.blocking import Limiters, run_blocking


def test_a_timed_out_request_keeps_its_slot_until_the_work_ends():
    release = threading.Event()
    started = threading.Event()

    def slow_model_call() -> str:
        started.set()
        release.wait(30)
        return "done"

    async def scenario() -> None:
        limiters = Limiters(capacity=1)
        limiter = limiters["tfs"]

        async def give_up_once_started():
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(functools.partial(run_blocking, slow_model_call, limiter=limiter))
                    await anyio.to_thread.run_sync(started.wait, 30)
                    scope.cancel()  # the request's 504: it stops waiting, the thread runs on

        await give_up_once_started()
        # The request is gone but its model call still runs: the slot must still be taken.
        assert limiters.in_use("tfs") == 1
        assert limiter.available_tokens == 0
        release.set()
        with anyio.fail_after(30):
            await limiter.acquire()  # returns once the abandoned work has finished
        limiter.release()
        assert limiters.in_use("tfs") == 0

    anyio.run(scenario)


def test_a_request_cancelled_before_its_work_starts_returns_the_slot():
    async def scenario() -> None:
        limiters = Limiters(capacity=1)
        limiter = limiters["invocations"]
        ran = []
        with anyio.CancelScope() as scope:
            scope.cancel()  # cancelled before the thread hop can happen
            await run_blocking(ran.append, 1, limiter=limiter)
        assert ran == []
        assert limiters.in_use("invocations") == 0

    anyio.run(scenario)


def test_results_and_errors_pass_through():
    async def scenario() -> None:
        limiter = Limiters(capacity=2)["tfs"]
        assert await run_blocking(lambda a, b: a + b, 2, 3, limiter=limiter) == 5
        with pytest.raises(ZeroDivisionError):
            await run_blocking(lambda: 1 / 0, limiter=limiter)
        assert limiter.borrowed_tokens == 0

    anyio.run(scenario)
