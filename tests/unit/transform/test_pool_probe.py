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
                           job_rows=lambda want: rows_from_bytes(counted, tuned.sent.per_request(), want))
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
    assert tuned.sent.per_request() == 100
    assert probe.report()["probe_budget_rows"] in (None, 2000)


def test_the_probe_starts_again_when_the_hooks_move_to_worker_processes():
    # AdaptivePool's cpu clock answers until the hooks move, then None: sizes timed on either
    # side are not comparable, so a new probe takes over (and says so in the report).
    clock = {"cpu": 0.0, "moved": False}

    def cpu():
        clock["cpu"] += 0.01
        return None if clock["moved"] else clock["cpu"]

    probes, starts = [], []

    def probe(start: int = 16):
        starts.append(start)
        probes.append(BatchSizeProbe((8, 16, 32, 64), fallback=start, budget_rows=10_000))
        return probes[-1]

    tuned = PoolPredict(_Service(), probe(), lambda: {"size": 2}, cpu, restart=probe)
    for hop in range(400):
        if hop == 40:
            clock["moved"] = True
        tuned.invoke_many([InvocationRequest(body=b"x")] * tuned.next_size(16))
    assert len(probes) == 2 and tuned.tuner is probes[1] and tuned.restarted_after_move
    # the new probe climbs from where the old one had got to, not from the bottom again
    assert starts[1] == probes[0].best() and probes[1].start == starts[1]
    first, second = probes[0].report(), probes[1].report()
    # each probe saw its own side of the move (the hop that found it counts for neither)
    seen = [sum(phase["rows"] for phase in r["phases"].values()) for r in (first, second)]
    assert seen[0] > 0 and seen[1] > 0
    stats = tuned.stats
    assert stats["size"] == 2 and stats["autotune"]["restarted"] == "when the hooks moved to worker processes"
    assert stats["autotune"]["choices"] == second["choices"]


def test_the_restarted_probe_starts_where_a_hop_of_the_jobs_requests_is_still_small():
    from tfbatch.transform.predict import POOL_CANDIDATES, POOL_START, POOL_START_HOP_BYTES, pool_start

    assert pool_start(POOL_CANDIDATES, None) == POOL_START  # nothing sent yet
    assert pool_start(POOL_CANDIDATES, 240.0) == 512  # CSV lines: the largest size
    assert pool_start(POOL_CANDIDATES, POOL_START_HOP_BYTES / 128) == 128  # exactly at the bound
    assert pool_start(POOL_CANDIDATES, POOL_START_HOP_BYTES / 128 + 1) == 64
    assert pool_start(POOL_CANDIDATES, 22_000.0) == POOL_START  # JPEGs: where the climb always began
    assert pool_start(POOL_CANDIDATES, 22_000.0, 128) == 128  # never below the first probe's best
    assert pool_start((8, 16), 240.0, 8) == 16  # MaxConcurrentTransforms' cap on the sizes holds
