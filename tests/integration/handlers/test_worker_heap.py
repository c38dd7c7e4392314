"""A handler worker process runs its hops with what it imported left out of garbage collection
and young collections every 10,000 allocations (``pool_worker.WORKER_GC_THRESHOLDS``): a script's
``pixels.tolist()`` makes thousands of lists an image, and Python's own 700 walked the middle
generation every few images (benchmarks/transform/profile/worker-gc.md).

The script reads the collector's state where it runs, in the worker process, and sends it as the
request's numbers: the collector is still on (reference cycles are still found).
"""

from __future__ import annotations

from tests.integration.handlers.pool_fakes import gated_artifact
from tfbatch.handlers.pool import HandlerPool
from tfbatch.handlers.pool_worker import WORKER_GC_THRESHOLDS
from tfbatch.handlers.pooled import models_init
from tfbatch.handlers.stack import build_stack

SCRIPT = '''
import gc
import json


def input_handler(data, context):
    data.read()
    return json.dumps({"instances": [[gc.get_threshold()[0], gc.get_freeze_count(), int(gc.isenabled())]]})


def output_handler(response, context):
    return response.content, "application/json"
'''


def test_a_worker_freezes_what_it_imported_and_collects_young_objects_less_often(tmp_path, monkeypatch):
    root, _ = gated_artifact(tmp_path, monkeypatch, SCRIPT)
    pools: list[HandlerPool] = []
    stack = build_stack(str(root), on_script=lambda handlers, init: pools.append(HandlerPool(init, 1).start()))
    try:
        (pool,) = pools
        pool.set_models(models_init(stack.service))
        item = (b"{}", "application/json", "application/json", None, "model", None, "predict", None, None)
        (result,) = pool.submit("input", [item]).result(timeout=120)
        assert result[0] == "tensors", result
        threshold, frozen, enabled = result[1]["x"].tolist()[0]
        assert threshold == WORKER_GC_THRESHOLDS[0]
        assert frozen > 1000  # the worker's imports and the script
        assert enabled == 1
    finally:
        stack.close()
