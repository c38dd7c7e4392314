"""Hooks that start in this process move to worker processes once they are most of its CPU
(handlers/adaptive_pool.py), and stay when they are not, or when the processes cannot start.

The pool reads its windows with a fake wall clock the test moves and a process-CPU clock
derived from the hooks' own measured CPU, so the share each window sees is the one the test
sets. The hooks are real: a real model, real worker processes; ``output_handler`` reports
the process it ran in. A hook that blocks on a FIFO holds a record in process across the move.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

from tests.integration.handlers.pool_fakes import BLOCKED, GATED_INPUT, ROW, FakeClock, gated_artifact
from tfbatch.handlers.adaptive_pool import MIN_WINDOW_HOPS, WINDOW_S, AdaptivePool
from tfbatch.handlers.inline_pool import InlinePool
from tfbatch.handlers.pool import HandlerPool
from tfbatch.handlers.pooled import PooledService, models_init
from tfbatch.handlers.service import InvocationRequest
from tfbatch.handlers.stack import build_stack

SCRIPT = GATED_INPUT + '''

def output_handler(response, context):
    answer = json.loads(response.content)
    answer["pid"] = os.getpid()
    return json.dumps(answer), "application/json"
'''


def _build(tmp_path, monkeypatch, share: float, *, broken_workers: bool = False):
    root, gate = gated_artifact(tmp_path, monkeypatch, SCRIPT)
    clock = FakeClock()
    made: list[AdaptivePool] = []

    def workers(init):
        if broken_workers:  # a script the child cannot import: every start fails
            init = {**init, "script": str(tmp_path / "missing" / "inference.py")}
        return HandlerPool(init, 2, start=2).start()

    def on_script(handlers, init):
        inline = InlinePool(init, "the test")
        # This process's CPU as the hooks' measured CPU over ``share``: each window sees that share.
        made.append(AdaptivePool(inline, lambda: workers(init), clock=clock,
                                 process_cpu=lambda: inline.spent()[0] / share))

    stack = build_stack(str(root), on_script=on_script)
    (pool,) = made
    pool.set_models(models_init(stack.service))
    return stack, pool, PooledService(stack.service, pool), clock, gate


@pytest.fixture
def heavy(tmp_path, monkeypatch):
    stack, pool, service, clock, gate = _build(tmp_path, monkeypatch, 0.9)
    try:
        yield pool, service, clock, gate
    finally:
        pool.close()
        stack.close()


def _pids(answers) -> set[int]:
    assert all(a.status == 200 for a in answers), [a.body for a in answers]
    for a in answers:
        assert json.loads(a.body)["predictions"], a.body
    return {json.loads(a.body)["pid"] for a in answers}


def _windows(pool, service, clock, count: int, *, until_starting: bool = False) -> set[int]:
    """``count`` windows of hops, each long and full enough to be read (or fewer: until the
    pool has started worker processes, so no later hop can see them ready)."""
    pids = set()
    for _ in range(count * MIN_WINDOW_HOPS):
        pids |= _pids(service.invoke_many([InvocationRequest(body=ROW)] * 3))
        clock.now += WINDOW_S / MIN_WINDOW_HOPS + 0.01
        if until_starting and pool.workers is not None:
            break
    return pids


def test_heavy_hooks_move_to_worker_processes_and_a_record_in_flight_finishes_in_process(heavy):
    pool, service, clock, gate = heavy
    _pids(service.invoke_many([InvocationRequest(body=ROW)]))  # opens the first window
    held = {}
    thread = threading.Thread(target=lambda: held.update(r=service.invoke(InvocationRequest(body=BLOCKED))))
    thread.start()
    writer = open(gate, "w")  # returns once the hook holds the FIFO: that record is in process
    try:
        assert _windows(pool, service, clock, 2, until_starting=True) == {os.getpid()}
        assert pool.workers is not None and not pool.moved  # starting; the hooks go on here meanwhile
        assert pool.workers.started(timeout_s=120) == 2
        after = _pids(service.invoke_many([InvocationRequest(body=ROW)] * 4))
        assert pool.moved and os.getpid() not in after and len(after) >= 1
    finally:
        writer.write("go")
        writer.close()
    thread.join(120)
    # Its input step ran here before the move, so its output step runs here too.
    assert _pids([held["r"]]) == {os.getpid()}
    stats = pool.stats
    assert stats["handler_workers"] == 2 and "then in worker processes" in stats["hooks"]
    assert stats["hook_cpu_share"] == pytest.approx(0.9, abs=0.01)
    assert pool.cpu() is None  # the batch-size probe compares wall time from here on


def test_light_hooks_stay_in_process(tmp_path, monkeypatch):
    stack, pool, service, clock, _gate = _build(tmp_path, monkeypatch, 0.1)
    try:
        assert _windows(pool, service, clock, 4) == {os.getpid()}
        assert pool.workers is None and not pool.moved
        stats = pool.stats
        assert stats["handler_workers"] == 0 and stats["hook_cpu_share"] == pytest.approx(0.1, abs=0.01)
    finally:
        pool.close()
        stack.close()


def test_hooks_stay_in_process_when_the_worker_processes_cannot_start(tmp_path, monkeypatch):
    stack, pool, service, clock, _gate = _build(tmp_path, monkeypatch, 0.9, broken_workers=True)
    try:
        assert _windows(pool, service, clock, 2, until_starting=True) == {os.getpid()}
        starting = pool.workers
        assert starting is not None and starting.started(timeout_s=120) == 0
        # Every record is still answered, in this process, and no new start is tried.
        assert _windows(pool, service, clock, 3) == {os.getpid()}
        assert pool.workers is None and not pool.moved
        assert pool.stats["handler_workers"] == 0
    finally:
        pool.close()
        stack.close()
