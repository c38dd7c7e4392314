"""DynamicBatcher tested alone with plain numpy run_batch callables."""

from __future__ import annotations

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


def test_single_request_roundtrip():
    rec = Recorder()
    with DynamicBatcher(rec, max_batch_size=4, timeout_s=0.0) as b:
        out = b.submit({"x": rows(0, 3)}).result(timeout=5)
    np.testing.assert_array_equal(out["y"], rows(0, 3) * 2)
    assert rec.sizes == [3]


def test_lone_request_waits_for_timeout_then_runs():
    rec = Recorder()
    with DynamicBatcher(rec, max_batch_size=8, timeout_s=0.05) as b:
        t0 = time.monotonic()
        fut = b.submit({"x": rows(0, 1)})
        fut.result(timeout=5)
        elapsed = time.monotonic() - t0
    # It must wait for companions (not run as a batch of one at once) but not forever.
    assert 0.04 <= elapsed < 1.0, elapsed
    assert rec.sizes == [1]


def test_deadline_fixed_by_first_item_not_reset_by_later_ones():
    rec = Recorder()
    with DynamicBatcher(rec, max_batch_size=100, timeout_s=0.2) as b:
        t0 = time.monotonic()
        first = b.submit({"x": rows(0, 1)})
        # Keep adding rows more often than the timeout: a sliding deadline would never fire.
        later = []
        for i in range(6):
            time.sleep(0.05)
            later.append(b.submit({"x": rows(i + 1, 1)}))
        first.result(timeout=5)
        elapsed = time.monotonic() - t0
        for f in later:
            f.result(timeout=5)
    assert 0.18 <= elapsed < 0.3 + 0.5, elapsed
    assert rec.sizes[0] >= 2  # the first batch took the rows that arrived within the window


def test_full_batch_runs_before_deadline():
    rec = Recorder()
    with DynamicBatcher(rec, max_batch_size=4, timeout_s=10.0) as b:
        t0 = time.monotonic()
        futs = [b.submit({"x": rows(i, 1)}) for i in range(4)]
        for f in futs:
            f.result(timeout=5)
        assert time.monotonic() - t0 < 2.0
    assert rec.sizes == [4]


def test_batches_fill_under_concurrency_and_results_go_to_their_callers():
    rec = Recorder(delay=0.02)
    with DynamicBatcher(rec, max_batch_size=8, timeout_s=0.05, num_threads=2) as b:

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
    assert max(rec.sizes) == 8
    assert stats["batches"] == len(rec.sizes) <= 16  # coalesced, not 64 batches of one
    assert stats["rows"] == 64 and stats["queue_depth"] == 0
    assert sum(stats["batch_sizes"].values()) == stats["batches"]


def test_rows_of_different_requests_share_a_batch():
    rec = Recorder()
    with DynamicBatcher(rec, max_batch_size=8, timeout_s=0.2) as b:
        f1 = b.submit({"x": rows(0, 5)})
        f2 = b.submit({"x": rows(5, 5)})
        np.testing.assert_array_equal(f1.result(timeout=5)["y"], rows(0, 5) * 2)
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

    with DynamicBatcher(run, max_batch_size=16, timeout_s=0.1) as b:
        futs = [
            b.submit({"x": np.zeros((2, 3), np.float32)}),
            b.submit({"x": np.zeros((1, 4), np.float32)}),  # other trailing shape
            b.submit({"x": np.zeros((2, 3), np.float64)}),  # other dtype
            b.submit({"x": np.zeros((3, 3), np.float32)}),  # joins the first
            b.submit({"x": np.zeros((1, 3), np.float32), "z": np.array([b"a"], object)}),  # other keys
        ]
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
    gate = threading.Event()

    def run(inputs):
        gate.wait(10)
        return {"y": inputs["x"]}

    b = DynamicBatcher(run, max_batch_size=2, timeout_s=0.0, max_queued_rows=4)
    try:
        first = b.submit({"x": np.zeros((2, 1))})  # taken by the worker, which blocks
        deadline = time.monotonic() + 5
        while b.stats["running_batches"] == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        queued = [b.submit({"x": np.zeros((2, 1))}), b.submit({"x": np.zeros((2, 1))})]
        assert b.stats["queue_depth"] == 4
        with pytest.raises(errors.Unavailable, match="queue is full"):
            b.submit({"x": np.zeros((1, 1))}, block=False)
        t0 = time.monotonic()
        with pytest.raises(errors.Unavailable, match="queue is full"):
            b.submit({"x": np.zeros((1, 1))}, timeout=0.1)
        assert 0.08 <= time.monotonic() - t0 < 2.0

        # A blocked submit gets in once the worker frees room.
        result: list = []
        waiter = threading.Thread(target=lambda: result.append(b.submit({"x": np.ones((1, 1))}, timeout=10)))
        waiter.start()
        time.sleep(0.05)
        assert not result
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
    b = DynamicBatcher(rec, max_batch_size=4, timeout_s=30.0)  # deadline far away
    futs = [b.submit({"x": rows(i, 1)}) for i in range(3)]
    t0 = time.monotonic()
    b.close(wait=True)
    assert time.monotonic() - t0 < 5  # draining does not wait for the deadline
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
    gate = threading.Event()
    seen = []

    def run(inputs):
        gate.wait(5)
        seen.append(len(inputs["x"]))
        return {"y": inputs["x"]}

    with DynamicBatcher(run, max_batch_size=1, timeout_s=0.0) as b:
        first = b.submit({"x": np.zeros((1, 1))})
        time.sleep(0.05)
        second = b.submit({"x": np.zeros((1, 1))})
        assert second.cancel()
        gate.set()
        first.result(timeout=5)
    assert seen == [1]


def test_idle_dispatch_runs_a_lone_request_at_once_and_still_batches_under_load():
    rec = Recorder(delay=0.05)
    with DynamicBatcher(rec, max_batch_size=8, timeout_s=0.5, idle_dispatch=True) as batcher:
        start = time.monotonic()
        batcher.submit({"x": rows(0, 1)}).result(timeout=5)
        assert time.monotonic() - start < 0.25  # not the 0.5 s deadline
        # While that first batch runs, the next requests queue and leave together.
        first = batcher.submit({"x": rows(1, 1)})
        time.sleep(0.005)
        later = [batcher.submit({"x": rows(2 + i, 1)}) for i in range(7)]
        for f in [first, *later]:
            f.result(timeout=5)
    assert rec.sizes[0] == 1
    assert rec.sizes[1] == 1  # the batcher was idle again when `first` arrived
    assert rec.sizes[2:] == [7]  # queued behind a running batch: one full batch, no deadline wait


def test_without_idle_dispatch_a_lone_request_waits_for_its_deadline():
    rec = Recorder()
    with DynamicBatcher(rec, max_batch_size=8, timeout_s=0.2) as batcher:
        start = time.monotonic()
        batcher.submit({"x": rows(0, 1)}).result(timeout=5)
        assert time.monotonic() - start >= 0.19
