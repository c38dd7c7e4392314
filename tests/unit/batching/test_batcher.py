"""DynamicBatcher tested alone with plain numpy run_batch callables.

Deadlines are tested on a fake clock that moves only when a test moves it, so no test
depends on how fast this machine is; real sleeps appear only as a model's own run time.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tfbatch import errors
from tfbatch.batching import DynamicBatcher


class Recorder:
    """run_batch that doubles ``x`` and records every batch it sees."""

    def __init__(self, delay: float = 0.0):
        self.batches: list[dict[str, np.ndarray]] = []
        self.delay = delay
        self.lock = threading.Lock()

    def __call__(self, inputs):
        with self.lock:
            self.batches.append({k: v.copy() for k, v in inputs.items()})
        if self.delay:
            time.sleep(self.delay)
        return {"y": inputs["x"] * 2}

    @property
    def sizes(self) -> list[int]:
        return [len(b["x"]) for b in self.batches]


def rows(start: int, n: int, width: int = 2) -> np.ndarray:
    return np.arange(start * width, (start + n) * width, dtype=np.float32).reshape(n, width)


class FakeClock:
    """A monotonic clock that moves only in ``advance``; it counts reads per thread, so a
    test can wait until a batcher thread has looked at the new time."""

    def __init__(self, start: float = 1000.0):
        self.now = start
        self._cond = threading.Condition()
        self._reads: collections.Counter[str] = collections.Counter()  # since the last advance

    def __call__(self) -> float:
        with self._cond:
            self._reads[threading.current_thread().name] += 1
            self._cond.notify_all()
            return self.now

    def advance(self, seconds: float) -> None:
        with self._cond:
            self.now += seconds
            self._reads.clear()

    def wait_read(self, thread_prefix: str, times: int = 1) -> None:
        """Until threads named ``thread_prefix...`` read the clock ``times`` times since the last advance."""
        def seen() -> bool:
            return sum(n for name, n in self._reads.items() if name.startswith(thread_prefix)) >= times

        with self._cond:
            assert self._cond.wait_for(seen, timeout=30), f"no clock read by {thread_prefix!r}"


def step(batcher: DynamicBatcher, clock: FakeClock, seconds: float) -> dict:
    """Move time on, let a worker look at it, and return the batcher's stats after that look.

    ``stats`` takes the batcher's lock, which the worker holds from reading the clock until it
    either waits again or has taken a batch: the stats show the decision made at the new time.
    """
    clock.advance(seconds)
    batcher.wake()
    clock.wait_read("batcher-")
    return batcher.stats


def test_single_request_roundtrip():
    rec = Recorder()
    with DynamicBatcher(rec, max_batch_size=4, timeout_s=0.0) as b:
        out = b.submit({"x": rows(0, 3)}).result(timeout=5)
    np.testing.assert_array_equal(out["y"], rows(0, 3) * 2)
    assert rec.sizes == [3]


def test_lone_request_waits_for_timeout_then_runs():
    rec, clock = Recorder(), FakeClock()
    with DynamicBatcher(rec, max_batch_size=8, timeout_s=0.05, clock=clock) as b:
        fut = b.submit({"x": rows(0, 1)})
        # It must wait for companions (not run as a batch of one at once)...
        stats = step(b, clock, 0.04)
        assert (stats["queue_depth"], stats["running_batches"], stats["batches"]) == (1, 0, 0)
        assert not fut.done()
        # ...but not beyond its deadline.
        step(b, clock, 0.011)
        fut.result(timeout=5)
    assert rec.sizes == [1]


def test_deadline_fixed_by_first_item_not_reset_by_later_ones():
    rec, clock = Recorder(), FakeClock()
    with DynamicBatcher(rec, max_batch_size=100, timeout_s=0.2, clock=clock) as b:
        first = b.submit({"x": rows(0, 1)})
        # Keep adding rows more often than the timeout: a sliding deadline would never fire.
        later = []
        for i in range(3):
            assert step(b, clock, 0.05)["queue_depth"] == i + 1
            later.append(b.submit({"x": rows(i + 1, 1)}))
        assert step(b, clock, 0.049)["queue_depth"] == 4
        step(b, clock, 0.002)  # 0.201 s after the first row, 0.051 s after the last
        first.result(timeout=5)
        for f in later:
            f.result(timeout=5)
    assert rec.sizes == [4]  # the first batch took the rows that arrived within the window


def test_full_batch_runs_before_deadline():
    rec = Recorder()
    # The clock never moves: only a full batch can run.
    with DynamicBatcher(rec, max_batch_size=4, timeout_s=10.0, clock=FakeClock()) as b:
        futs = [b.submit({"x": rows(i, 1)}) for i in range(4)]
        for f in futs:
            f.result(timeout=5)
    assert rec.sizes == [4]


def test_batches_fill_under_concurrency_and_results_go_to_their_callers():
    rec = Recorder(delay=0.02)
    # A still clock: batches leave only when full, however the 32 callers are scheduled.
    with DynamicBatcher(rec, max_batch_size=8, timeout_s=0.05, num_threads=2, clock=FakeClock()) as b:

        def call(i):
            x = rows(i, 1)
            out = b.submit({"x": x}).result(timeout=10)
            return i, out["y"]

        with ThreadPoolExecutor(32) as pool:
            results = list(pool.map(call, range(64)))
        stats = b.stats
    for i, y in results:
        np.testing.assert_array_equal(y, rows(i, 1) * 2)
    assert sum(rec.sizes) == 64
    assert rec.sizes == [8] * 8
    assert stats["batches"] == len(rec.sizes) <= 16  # coalesced, not 64 batches of one
    assert stats["rows"] == 64 and stats["queue_depth"] == 0
    assert sum(stats["batch_sizes"].values()) == stats["batches"]


def test_rows_of_different_requests_share_a_batch():
    rec, clock = Recorder(), FakeClock()
    with DynamicBatcher(rec, max_batch_size=8, timeout_s=0.2, clock=clock) as b:
        f1 = b.submit({"x": rows(0, 5)})
        f2 = b.submit({"x": rows(5, 5)})
        np.testing.assert_array_equal(f1.result(timeout=5)["y"], rows(0, 5) * 2)
        step(b, clock, 0.2)  # the 2 rows left over wait for their deadline
        np.testing.assert_array_equal(f2.result(timeout=5)["y"], rows(5, 5) * 2)
    # 10 rows with max 8: one full batch (5 + 3 cut from the second request), then 2.
    assert rec.sizes == [8, 2]
    np.testing.assert_array_equal(rec.batches[0]["x"], rows(0, 8))


def test_oversized_request_is_split_and_reassembled_in_order():
    rec = Recorder()
    with DynamicBatcher(rec, max_batch_size=4, timeout_s=0.0, num_threads=3) as b:
        x = rows(0, 11)
        out = b.submit({"x": x}).result(timeout=5)
    np.testing.assert_array_equal(out["y"], x * 2)
    assert sorted(rec.sizes) == [3, 4, 4]


def test_grouping_by_keys_dtype_and_trailing_shape():
    seen = []

    def run(inputs):
        seen.append({k: (v.dtype.str, v.shape) for k, v in inputs.items()})
        return {"n": np.full(len(next(iter(inputs.values()))), len(inputs))}

    clock = FakeClock()
    with DynamicBatcher(run, max_batch_size=16, timeout_s=0.1, clock=clock) as b:
        futs = [
            b.submit({"x": np.zeros((2, 3), np.float32)}),
            b.submit({"x": np.zeros((1, 4), np.float32)}),  # other trailing shape
            b.submit({"x": np.zeros((2, 3), np.float64)}),  # other dtype
            b.submit({"x": np.zeros((3, 3), np.float32)}),  # joins the first
            b.submit({"x": np.zeros((1, 3), np.float32), "z": np.array([b"a"], object)}),  # other keys
        ]
        step(b, clock, 0.1)
        for f in futs:
            f.result(timeout=5)
    shapes = sorted(tuple(sorted(d.items())) for d in seen)
    assert len(seen) == 4
    assert (("x", ("<f4", (5, 3))),) in shapes


def test_string_object_arrays_batch():
    def run(inputs):
        return {"len": np.array([len(v) for v in inputs["s"]], np.int64)}

    with DynamicBatcher(run, max_batch_size=4, timeout_s=0.05) as b:
        f1 = b.submit({"s": np.array([b"a", b"bb"], dtype=object)})
        f2 = b.submit({"s": np.array([b"ccc"], dtype=object)})
        assert f1.result(timeout=5)["len"].tolist() == [1, 2]
        assert f2.result(timeout=5)["len"].tolist() == [3]


def test_error_in_one_batch_fails_only_that_batch():
    def run(inputs):
        if (inputs["x"] < 0).any():
            raise RuntimeError("negative value in batch")
        return {"y": inputs["x"] + 1}

    with DynamicBatcher(run, max_batch_size=2, timeout_s=0.0) as b:
        bad = b.submit({"x": np.array([[-1.0]], np.float32)})
        with pytest.raises(errors.TfbatchError, match="RuntimeError: negative value in batch"):
            bad.result(timeout=5)
        good = b.submit({"x": np.array([[1.0]], np.float32)})
        assert good.result(timeout=5)["y"].tolist() == [[2.0]]
        assert b.stats["failed_batches"] == 1


def test_tfbatch_errors_pass_through_unchanged():
    def run(inputs):
        raise errors.InvalidInput("bad pixel")

    with DynamicBatcher(run, max_batch_size=2, timeout_s=0.0) as b:
        with pytest.raises(errors.InvalidInput, match="bad pixel"):
            b.submit({"x": np.zeros((1, 1))}).result(timeout=5)


def test_split_request_fails_if_any_piece_fails():
    def run(inputs):
        if (inputs["x"] == 5).any():
            raise ValueError("five")
        return {"y": inputs["x"]}

    with DynamicBatcher(run, max_batch_size=2, timeout_s=0.0) as b:
        with pytest.raises(errors.TfbatchError, match="five"):
            b.submit({"x": np.arange(8).reshape(8, 1)}).result(timeout=5)
        assert b.submit({"x": np.arange(2).reshape(2, 1)}).result(timeout=5)["y"].shape == (2, 1)


def test_wrong_output_rows_is_model_error_naming_output():
    def run(inputs):
        return {"y": inputs["x"], "bad": np.zeros(1)}

    with DynamicBatcher(run, max_batch_size=4, timeout_s=0.0) as b:
        with pytest.raises(errors.ModelError, match=r"output 'bad' has leading dimension 1 but the batch has 3 rows"):
            b.submit({"x": np.zeros((3, 2))}).result(timeout=5)


def test_invalid_requests_rejected_at_submit():
    with DynamicBatcher(lambda i: i, max_batch_size=4) as b:
        with pytest.raises(errors.InvalidInput, match="leading"):
            b.submit({"a": np.zeros((2, 1)), "b": np.zeros((3, 1))})
        with pytest.raises(errors.InvalidInput, match="no rows"):
            b.submit({"a": np.zeros((0, 1))})
        with pytest.raises(errors.InvalidInput, match="scalar"):
            b.submit({"a": np.float32(1.0)})


def test_queue_bound_non_blocking_raises_and_blocking_times_out():
    gate, running = threading.Event(), threading.Event()

    def run(inputs):
        running.set()
        gate.wait(10)
        return {"y": inputs["x"]}

    clock = FakeClock()
    b = DynamicBatcher(run, max_batch_size=2, timeout_s=0.0, max_queued_rows=4, clock=clock)
    try:
        first = b.submit({"x": np.zeros((2, 1))})  # taken by the worker, which blocks
        assert running.wait(10)
        queued = [b.submit({"x": np.zeros((2, 1))}), b.submit({"x": np.zeros((2, 1))})]
        assert b.stats["queue_depth"] == 4
        with pytest.raises(errors.Unavailable, match="queue is full"):
            b.submit({"x": np.zeros((1, 1))}, block=False)

        def submit_in_thread(name: str, **kwargs) -> tuple[threading.Thread, list]:
            outcome: list = []

            def call():
                try:
                    outcome.append(b.submit({"x": np.ones((1, 1))}, **kwargs))
                except errors.Unavailable as exc:
                    outcome.append(exc)

            thread = threading.Thread(target=call, name=name)
            thread.start()
            # Two reads: its deadline, then the time left before it waits (a submit that got
            # in would read once more for the arrival time, and show in queued_requests).
            clock.wait_read(name, 2)
            assert b.stats["queued_requests"] == 2 and not outcome
            return thread, outcome

        clock.advance(0)
        timed, outcome = submit_in_thread("timed-submit", timeout=0.1)
        clock.advance(0.09)
        b.wake()
        clock.wait_read("timed-submit")
        assert b.stats["queued_requests"] == 2 and not outcome  # still waiting for room
        clock.advance(0.011)
        b.wake()
        timed.join(10)
        assert len(outcome) == 1 and isinstance(outcome[0], errors.Unavailable)
        assert "queue is full" in str(outcome[0]) and "waited 0.1 s" in str(outcome[0])

        # A blocked submit gets in once the worker frees room.
        clock.advance(0)
        waiter, result = submit_in_thread("waiting-submit", timeout=10)
        gate.set()
        waiter.join(5)
        assert result and result[0].result(timeout=5)["y"].tolist() == [[1.0]]
        for f in [first, *queued]:
            f.result(timeout=5)
    finally:
        gate.set()
        b.close()


def test_close_drains_then_rejects():
    rec = Recorder(delay=0.01)
    # The clock never reaches the deadline: draining does not wait for it.
    b = DynamicBatcher(rec, max_batch_size=4, timeout_s=30.0, clock=FakeClock())
    futs = [b.submit({"x": rows(i, 1)}) for i in range(3)]
    b.close(wait=True)
    for i, f in enumerate(futs):
        np.testing.assert_array_equal(f.result(timeout=0)["y"], rows(i, 1) * 2)
    with pytest.raises(errors.Unavailable, match="closed"):
        b.submit({"x": rows(0, 1)})


def test_on_batch_callback_and_histogram():
    calls = []
    with DynamicBatcher(lambda i: {"y": i["x"]}, max_batch_size=3, timeout_s=0.0,
                        on_batch=lambda n, s: calls.append((n, s))) as b:
        b.submit({"x": np.zeros((7, 1))}).result(timeout=5)
        stats = b.stats
    assert sorted(n for n, _ in calls) == [1, 3, 3]
    assert all(s >= 0 for _, s in calls)
    assert stats["batch_sizes"] == {1: 1, 3: 2}


def test_cancelled_request_is_skipped():
    gate, running = threading.Event(), threading.Event()
    seen = []

    def run(inputs):
        running.set()
        gate.wait(5)
        seen.append(len(inputs["x"]))
        return {"y": inputs["x"]}

    with DynamicBatcher(run, max_batch_size=1, timeout_s=0.0) as b:
        first = b.submit({"x": np.zeros((1, 1))})
        assert running.wait(10)
        second = b.submit({"x": np.zeros((1, 1))})
        assert second.cancel()
        gate.set()
        first.result(timeout=5)
    assert seen == [1]


def test_idle_dispatch_runs_a_lone_request_at_once_and_still_batches_under_load():
    rec = Recorder()
    running, gate = threading.Event(), threading.Event()
    gate.set()

    def run(inputs):
        running.set()
        assert gate.wait(10)
        return rec(inputs)

    # The clock never moves, so nothing here can run because a deadline passed.
    with DynamicBatcher(run, max_batch_size=8, timeout_s=0.5, idle_dispatch=True, clock=FakeClock()) as batcher:
        batcher.submit({"x": rows(0, 1)}).result(timeout=5)  # not held for the 0.5 s deadline
        # While the next batch runs, the requests behind it queue and leave together.
        running.clear()
        gate.clear()
        first = batcher.submit({"x": rows(1, 1)})
        assert running.wait(10)
        later = [batcher.submit({"x": rows(2 + i, 1)}) for i in range(7)]
        gate.set()
        for f in [first, *later]:
            f.result(timeout=5)
    assert rec.sizes[0] == 1
    assert rec.sizes[1] == 1  # the batcher was idle again when `first` arrived
    assert rec.sizes[2:] == [7]  # queued behind a running batch: one full batch, no deadline wait


def test_without_idle_dispatch_a_lone_request_waits_for_its_deadline():
    rec, clock = Recorder(), FakeClock()
    with DynamicBatcher(rec, max_batch_size=8, timeout_s=0.2, clock=clock) as batcher:
        fut = batcher.submit({"x": rows(0, 1)})
        assert step(batcher, clock, 0.19)["queue_depth"] == 1 and not fut.done()
        step(batcher, clock, 0.011)
        fut.result(timeout=5)
    assert rec.sizes == [1]
