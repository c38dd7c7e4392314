"""Closing a handler pool ends a worker process that is still importing the script instead of
waiting for it: a pool started as a job ends (adaptive_pool.py moving the hooks) would
otherwise hold the job's end for as long as the script's imports take (TensorFlow: seconds).

The script's import, in a worker process only, tells the test its pid through one FIFO and then
waits on another that nobody writes: opening the first to read returns once a worker is inside
the import, with no sleep or poll."""

from __future__ import annotations

import os

import pytest

from tests.integration.handlers.pool_fakes import gated_artifact
from tfbatch.handlers.pool import HandlerPool
from tfbatch.handlers.stack import build_stack

SCRIPT = '''
import os
import sys

if sys.argv[0].endswith("pool_worker.py"):  # the job's own process imports it too: not there
    with open(os.environ["POOL_STARTED"], "w") as started:
        started.write(str(os.getpid()))
    with open(os.environ["POOL_GATE"]) as gate:  # never written: this import does not end
        gate.read()


def input_handler(data, context):
    return data.read()


def output_handler(response, context):
    return response.content, "application/json"
'''


def test_closing_the_pool_ends_a_worker_still_importing_the_script(tmp_path, monkeypatch):
    started = tmp_path / "started"
    os.mkfifo(started)
    monkeypatch.setenv("POOL_STARTED", str(started))
    root, _ = gated_artifact(tmp_path, monkeypatch, SCRIPT)
    pools: list[HandlerPool] = []
    stack = build_stack(str(root), on_script=lambda handlers, init: pools.append(HandlerPool(init, 1).start()))
    try:
        (pool,) = pools
        with open(started) as fifo:  # returns once the worker process is inside the import
            pid = int(fifo.read())
        pool.close()
        # Ended and reaped by close(), not left waiting on the gate.
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        stack.close()
