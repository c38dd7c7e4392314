"""A streamed body's generator is closed when the response ends, even when the client left
mid-stream and something else still holds the generator (so that the garbage collector would
not run its ``finally``)."""

from __future__ import annotations

import threading

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.routing import Route

from tests.support import asgi
from tfbatch.tfs.streaming import streamed


def app_streaming(chunks, responses: list | None = None):
    async def route(request):
        response = streamed(chunks, media_type="application/json")
        if responses is not None:
            responses.append(response)  # as a reference cycle through the response would hold it
        return response

    return Starlette(routes=[Route("/", route)])


async def call(app, *, leave_after_first: bool) -> list[dict]:
    return await asgi.call(app, "GET", "/", leave_after_first=leave_after_first)


def chunks(closed: threading.Event, produced: list[int]):
    try:
        for n in range(1000):
            produced.append(n)
            yield b"x" * 1000
    finally:
        closed.set()


def test_a_client_leaving_mid_stream_closes_the_generator():
    closed, produced = threading.Event(), []
    held = chunks(closed, produced)  # held here, as a reference cycle would hold it
    anyio.run(lambda: call(app_streaming(held), leave_after_first=True))  # returns after the loop's executor drained
    assert closed.is_set()
    assert 0 < len(produced) < 1000


def test_the_generator_is_closed_even_while_the_response_object_lives_on():
    closed, produced, responses = threading.Event(), [], []
    held = chunks(closed, produced)

    async def go() -> bool:
        await call(app_streaming(held, responses), leave_after_first=True)
        # Asked while the loop still runs: its shutdown would close every async generator anyway.
        return await anyio.to_thread.run_sync(closed.wait, 30)

    assert anyio.run(go) and responses


def test_a_finished_stream_sends_every_chunk_and_closes_the_generator():
    closed, produced = threading.Event(), []
    held = chunks(closed, produced)
    sent = anyio.run(lambda: call(app_streaming(held), leave_after_first=False))
    assert sum(len(m.get("body", b"")) for m in sent[1:]) == 1000 * 1000
    assert sent[-1].get("more_body") is False and closed.is_set()
