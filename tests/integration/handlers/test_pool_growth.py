"""A handler pool started small grows by one process when the started ones are busy, and not
when they are idle. The pool's clock is a fake one the test moves; a hook that blocks on a
FIFO keeps a process busy for exactly as long as the test wants, and opening the FIFO to
write returns only once the hook is inside it."""

from __future__ import annotations

import json
import threading

import pytest

from tests.integration.handlers.pool_fakes import BLOCKED, GATED_INPUT, ROW, FakeClock, gated_artifact
from tfbatch.handlers.pool import GROW_WINDOW_S, HandlerPool
from tfbatch.handlers.pooled import PooledService, models_init
from tfbatch.handlers.service import InvocationRequest
from tfbatch.handlers.stack import build_stack

SCRIPT = GATED_INPUT + '''

def output_handler(response, context):
    return response.content, "application/json"
'''


@pytest.fixture
def pool_and_service(tmp_path, monkeypatch):
    root, gate = gated_artifact(tmp_path, monkeypatch, SCRIPT)
    clock = FakeClock()
    pools: list[HandlerPool] = []
    stack = build_stack(str(root), on_script=lambda handlers, init: pools.append(
        HandlerPool(init, 3, start=1, clock=clock).start()))
    (pool,) = pools
    pool.set_models(models_init(stack.service))
    try:
        yield pool, PooledService(stack.service, pool), clock, gate
    finally:
        pool.close()
        stack.close()


def _invoke_in_thread(service, body):
    answer = {}
    thread = threading.Thread(target=lambda: answer.update(r=service.invoke(InvocationRequest(body=body))))
    thread.start()
    return thread, answer


def test_a_busy_pool_grows_by_one_process_that_takes_the_next_records(pool_and_service):
    pool, service, clock, gate = pool_and_service
    assert (pool.size, pool.max_size) == (1, 3)
    blocked, blocked_answer = _invoke_in_thread(service, BLOCKED)  # opens the window at t
    writer = open(gate, "w")  # returns once the hook holds the FIFO: the process is in a hop
    try:
        clock.now += 2 * GROW_WINDOW_S  # busy the whole window
        queued, queued_answer = _invoke_in_thread(service, ROW)  # waits behind the blocked hop
        assert pool._slots[1].ready.wait(120)
        assert pool.size == 2 and not pool._slots[2].ready.is_set()
        # The new process takes a record while the first one is still blocked.
        response = service.invoke(InvocationRequest(body=ROW))
        assert response.status == 200 and json.loads(response.body)["predictions"], response.body
        assert blocked.is_alive() and queued.is_alive()
    finally:
        writer.write("go")
        writer.close()
    blocked.join(120)
    queued.join(120)
    assert blocked_answer["r"].status == 200 and queued_answer["r"].status == 200
    assert pool.stats["handler_workers"] == 2 and pool.stats["handler_workers_max"] == 3


def test_an_idle_pool_does_not_grow(pool_and_service):
    pool, service, clock, _gate = pool_and_service
    for _ in range(4):
        assert service.invoke(InvocationRequest(body=ROW)).status == 200  # hops take no fake time
        clock.now += 2 * GROW_WINDOW_S
    assert pool.size == 1 and pool._slots[1].thread.ident is None
    assert pool.stats["handler_workers"] == 1
