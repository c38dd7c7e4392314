"""A dynamic batcher: coalesce row-wise requests into model batches across callers.

A request is a dict of numpy arrays sharing a leading dimension n (its rows). Rows of
many requests are packed into batches of at most ``max_batch_size`` rows; a request may
be cut across batches (that is how oversized requests are served instead of refused) and
its future resolves once every piece has run, with outputs stitched back in row order.

Timing follows TF Serving's batch scheduler: a batch's deadline is fixed when its first
row arrives (on ``clock``, ``time.monotonic`` by default), and the batch runs when it is
full or at the deadline, whichever comes first. Only requests with the same input keys,
dtypes and trailing shapes are packed together (a "group"); each group forms its own batches.

This module deliberately imports no TensorFlow: ``run_batch`` is any callable.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tfbatch import errors

RunBatch = Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]]
GroupKey = tuple[tuple[str, str, tuple[int, ...]], ...]


@dataclass(eq=False)
class _Request:
    inputs: dict[str, np.ndarray]
    rows: int
    future: Future
    # (start row, outputs of rows start..start+len) for every finished piece
    pieces: list[tuple[int, dict[str, np.ndarray]]] = field(default_factory=list)
    rows_done: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def deliver(self, start: int, outputs: dict[str, np.ndarray], rows: int) -> None:
        with self.lock:
            if self.future.done():
                return  # an earlier piece failed, or the caller cancelled
            self.pieces.append((start, outputs))
            self.rows_done += rows
            if self.rows_done < self.rows:
                return
            pieces = sorted(self.pieces, key=lambda p: p[0])
            self.pieces = []
        if len(pieces) == 1:
            result = pieces[0][1]
        else:
            result = {k: np.concatenate([p[1][k] for p in pieces]) for k in pieces[0][1]}
        _settle(self.future, result=result)

    def fail(self, exc: BaseException) -> None:
        with self.lock:
            self.pieces = []
        _settle(self.future, exc=exc)


def _settle(future: Future, *, result: Any = None, exc: BaseException | None = None) -> None:
    try:
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)
    except Exception:  # noqa: BLE001 - cancelled or already settled by another piece
        pass


@dataclass(eq=False)
class _Segment:
    """Rows start..stop of one request, waiting in a group's queue."""

    request: _Request
    start: int
    stop: int
    arrived: float


class DynamicBatcher:
    """Packs requests into batches of at most ``max_batch_size`` rows; see the module doc.

    ``run_batch`` receives ``{input: array[rows, ...]}`` and must return
    ``{output: array[rows, ...]}``. ``on_batch(size, seconds)`` is called after every batch
    (for metrics). ``max_queued_rows`` bounds rows waiting to be batched; ``None`` is unbounded.
    ``clock`` is where the batcher reads time (seconds, monotonic); after moving a fake one
    forward, call :meth:`wake`.
    """

    def __init__(
        self,
        run_batch: RunBatch,
        *,
        max_batch_size: int = 8,
        timeout_s: float = 0.001,
        max_queued_rows: int | None = None,
        num_threads: int = 1,
        name: str = "",
        on_batch: Callable[[int, float], None] | None = None,
        idle_dispatch: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if timeout_s < 0:
            raise ValueError(f"timeout_s must be >= 0, got {timeout_s}")
        if num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        if max_queued_rows is not None and max_queued_rows < 1:
            raise ValueError(f"max_queued_rows must be >= 1 or None, got {max_queued_rows}")
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.timeout_s = timeout_s
        self.max_queued_rows = max_queued_rows
        # Beyond TF Serving: when no batch is running, waiting for the deadline only adds
        # latency (nothing else can join faster than the model would finish); run at once.
        # Under load a batch is always running, so batches still fill as before.
        self.idle_dispatch = idle_dispatch
        self.name = name
        self._on_batch = on_batch
        # Every deadline and duration is read from here, so a test can drive time by hand.
        self._clock = clock
        self._cond = threading.Condition()
        self._groups: dict[GroupKey, collections.deque[_Segment]] = {}
        self._group_rows: dict[GroupKey, int] = {}
        self._queued_rows = 0
        self._queued_requests = 0
        self._closed = False
        self._batches = 0
        self._rows_run = 0
        self._failed_batches = 0
        self._running = 0
        self._histogram: collections.Counter[int] = collections.Counter()
        self._threads = [
            threading.Thread(target=self._worker, name=f"batcher-{name or id(self)}-{i}", daemon=True)
            for i in range(num_threads)
        ]
        for t in self._threads:
            t.start()

    # ---- public API -------------------------------------------------------------------

    def submit(
        self, inputs: Mapping[str, Any], *, block: bool = True, timeout: float | None = None
    ) -> Future:
        """Queue one request; its future resolves to ``{output: array[n, ...]}``.

        When the queue is full, wait for room (``block=True``, up to ``timeout`` seconds)
        or raise :class:`errors.Unavailable` at once (``block=False``).
        """
        arrays, rows = check_request(inputs, self.name)
        key = group_key(arrays)
        request = _Request(arrays, rows, Future())
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._closed:
                    raise errors.Unavailable(f"batcher {self.name!r} is closed")
                if self._has_room(rows):
                    break
                if not block:
                    raise errors.Unavailable(self._full_message(rows))
                remaining = None if deadline is None else deadline - self._clock()
                if remaining is not None and remaining <= 0:
                    raise errors.Unavailable(self._full_message(rows) + f" (waited {timeout} s)")
                self._cond.wait(remaining)
            queue = self._groups.setdefault(key, collections.deque())
            queue.append(_Segment(request, 0, rows, self._clock()))
            self._group_rows[key] = self._group_rows.get(key, 0) + rows
            self._queued_rows += rows
            self._queued_requests += 1
            self._cond.notify_all()
        return request.future

    def close(self, wait: bool = True) -> None:
        """Refuse new requests, run everything already queued, stop the workers."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if wait:
            for t in self._threads:
                if t is not threading.current_thread():
                    t.join()

    def wake(self) -> None:
        """Make waiting workers and submitters read the clock again.

        A real clock needs no help (they wake at their deadlines); a clock advanced by hand
        cannot wake them itself.
        """
        with self._cond:
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def stats(self) -> dict[str, Any]:
        with self._cond:
            return {
                "name": self.name,
                "queue_depth": self._queued_rows,
                "queued_requests": self._queued_requests,
                "running_batches": self._running,
                "batches": self._batches,
                "failed_batches": self._failed_batches,
                "rows": self._rows_run,
                "batch_sizes": dict(sorted(self._histogram.items())),
                "max_batch_size": self.max_batch_size,
            }

    def __enter__(self) -> DynamicBatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals --------------------------------------------------------------------

    def _has_room(self, rows: int) -> bool:
        if self.max_queued_rows is None:
            return True
        # A request larger than the whole bound still gets in when the queue is empty,
        # otherwise it could never be served.
        return self._queued_rows == 0 or self._queued_rows + rows <= self.max_queued_rows

    def _full_message(self, rows: int) -> str:
        return (
            f"batcher {self.name!r} queue is full: {self._queued_rows} rows queued, "
            f"limit {self.max_queued_rows}, request has {rows} rows"
        )

    def _pick_group(self, now: float) -> tuple[GroupKey | None, float | None]:
        """The ready group with the oldest head (or None) and the next deadline to wake at."""
        ready, ready_arrival, next_deadline = None, None, None
        for key, queue in self._groups.items():
            head = queue[0].arrived
            due = head + self.timeout_s
            idle = self.idle_dispatch and self._running == 0
            if self._closed or idle or self._group_rows[key] >= self.max_batch_size or due <= now:
                if ready_arrival is None or head < ready_arrival:
                    ready, ready_arrival = key, head
            elif next_deadline is None or due < next_deadline:
                next_deadline = due
        return ready, next_deadline

    def _take(self, key: GroupKey) -> list[_Segment]:
        """Pop up to max_batch_size rows of a group, cutting a segment if it overflows."""
        queue = self._groups[key]
        taken: list[_Segment] = []
        room = self.max_batch_size
        while queue and room > 0:
            seg = queue[0]
            if seg.request.future.cancelled():
                queue.popleft()
                self._dequeue_rows(key, seg.stop - seg.start, whole=True)
                continue
            size = seg.stop - seg.start
            if size <= room:
                queue.popleft()
                taken.append(seg)
                self._dequeue_rows(key, size, whole=True)
                room -= size
            else:
                taken.append(_Segment(seg.request, seg.start, seg.start + room, seg.arrived))
                seg.start += room
                self._dequeue_rows(key, room, whole=False)
                room = 0
        if not queue:
            del self._groups[key]
            del self._group_rows[key]
        return taken

    def _dequeue_rows(self, key: GroupKey, rows: int, *, whole: bool) -> None:
        self._group_rows[key] -= rows
        self._queued_rows -= rows
        if whole:  # a request has one segment queued at most: popping it dequeues the request
            self._queued_requests -= 1
        self._cond.notify_all()

    def _worker(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = self._clock()
                    key, wake_at = self._pick_group(now)
                    if key is not None:
                        batch = self._take(key)
                        break
                    if self._closed and not self._groups:
                        return
                    self._cond.wait(None if wake_at is None else max(wake_at - now, 0.0))
                if not batch:
                    continue
                self._running += 1
            try:
                self._run(batch)
            finally:
                with self._cond:
                    self._running -= 1

    def _run(self, batch: list[_Segment]) -> None:
        rows = sum(s.stop - s.start for s in batch)
        started = self._clock()
        try:
            inputs = _gather(batch)
            outputs = self._run_batch(inputs)
            outputs = _check_outputs(outputs, rows, self.name)
        except BaseException as exc:  # noqa: BLE001 - fail only this batch's requests
            err = errors.from_exception(exc)
            for seg in batch:
                seg.request.fail(err)
            self._record(rows, self._clock() - started, failed=True)
            if not isinstance(exc, Exception):
                raise
            return
        offset = 0
        for seg in batch:
            n = seg.stop - seg.start
            piece = {k: v[offset : offset + n] for k, v in outputs.items()}
            seg.request.deliver(seg.start, piece, n)
            offset += n
        self._record(rows, self._clock() - started, failed=False)

    def _record(self, rows: int, seconds: float, *, failed: bool) -> None:
        with self._cond:
            self._batches += 1
            self._rows_run += rows
            self._histogram[rows] += 1
            if failed:
                self._failed_batches += 1
        if self._on_batch is not None:
            try:
                self._on_batch(rows, seconds)
            except Exception:  # noqa: BLE001 - metrics must never fail a batch
                pass


def check_request(inputs: Mapping[str, Any], name: str) -> tuple[dict[str, np.ndarray], int]:
    """(the request's inputs as arrays, its rows), or the InvalidInput ``submit`` raises."""
    if not isinstance(inputs, Mapping) or not inputs:
        raise errors.InvalidInput(f"batcher {name!r}: a request must be a non-empty dict of arrays")
    arrays: dict[str, np.ndarray] = {}
    for key, value in inputs.items():
        arr = np.asarray(value)
        if arr.ndim == 0:
            raise errors.InvalidInput(
                f"input {key!r}: expected an array with a leading batch dimension, got a scalar"
            )
        arrays[key] = arr
    sizes = {k: a.shape[0] for k, a in arrays.items()}
    rows = next(iter(sizes.values()))
    if any(n != rows for n in sizes.values()):
        raise errors.InvalidInput(f"inputs must share the leading (batch) dimension, got sizes {sizes}")
    if rows == 0:
        raise errors.InvalidInput(f"request has no rows (input sizes {sizes})")
    return arrays, rows


def group_key(arrays: Mapping[str, np.ndarray]) -> GroupKey:
    """Which requests may share a batch: the same input names, dtypes and trailing shapes."""
    return tuple(sorted((k, a.dtype.str, tuple(a.shape[1:])) for k, a in arrays.items()))


def _gather(batch: list[_Segment]) -> dict[str, np.ndarray]:
    first = batch[0]
    if len(batch) == 1 and first.start == 0 and first.stop == first.request.rows:
        return dict(first.request.inputs)  # whole request alone: no copy
    keys = first.request.inputs.keys()
    return {
        k: np.concatenate([s.request.inputs[k][s.start : s.stop] for s in batch]) for k in keys
    }


def _check_outputs(outputs: Any, rows: int, name: str) -> dict[str, np.ndarray]:
    if not isinstance(outputs, Mapping):
        raise errors.ModelError(
            f"batcher {name!r}: run_batch must return a dict of arrays, got {type(outputs).__name__}"
        )
    checked: dict[str, np.ndarray] = {}
    for key, value in outputs.items():
        arr = np.asarray(value)
        size = arr.shape[0] if arr.ndim else None
        if size != rows:
            got = "a scalar" if size is None else f"leading dimension {size}"
            raise errors.ModelError(
                f"output {key!r} has {got} but the batch has {rows} rows: "
                f"every output must have one row per input row"
            )
        checked[key] = arr
    return checked

