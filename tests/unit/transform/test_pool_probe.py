"""The handler pool's batch-size probe sizes a split job from its listed bytes (PoolPredict and
BatchSizeProbe together, as transform/instance.py wires them)."""

import threading

from tfbatch.handlers.service import InvocationRequest, InvocationResponse
from tfbatch.transform.autotune import BatchSizeProbe
from tfbatch.transform.lookahead import CountAhead, rows_from_bytes
from tfbatch.transform.predict import PoolPredict


class _Sized:
    def __init__(self, size):
        self.size = size


class _Service:
    """Answers every request at once: the probe's bookkeeping is what is under test."""

    def invoke_many(self, reqs, timeout_s=None):
        return [InvocationResponse(status=200, body=b"{}") for _ in reqs]


def test_the_probe_asks_the_jobs_size_of_the_pool_predict_it_is_inside():
    # 200 objects of 10,000 bytes, requests of 100 bytes: 20,000 rows, a 2,000-row budget.
    counted = CountAhead([_Sized(10_000)] * 200, limit=1_000)
    tuned = None
    probe = BatchSizeProbe((8, 16, 32, 64, 128, 256), fallback=32, share=0.1,
                           job_rows=lambda want: rows_from_bytes(counted, tuned.bytes_per_request(), want))
    tuned = PoolPredict(_Service(), probe, lambda: {})
    finished = threading.Event()

    def lane():  # next_size asks job_rows while holding the PoolPredict's lock
        for _ in range(300):
            size = tuned.next_size(32)
            tuned.invoke_many([InvocationRequest(body=b"x" * 100)] * size)
        finished.set()

    worker = threading.Thread(target=lane, daemon=True)
    worker.start()
    worker.join(timeout=30)  # a bound on a deadlock, not a wait for something to happen
    assert finished.is_set(), "the probe's call for the job's size blocked on the lock it was called under"
    assert tuned.bytes_per_request() == 100
    assert probe.report()["probe_budget_rows"] in (None, 2000)
