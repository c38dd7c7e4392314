"""Count a job's objects ahead of the lane, so the tuner knows what share of the job it spends.

The listing is a stream (a 10M-object job never holds its keys), so the job's size is not known
up front. The batch-size probe only needs to know that the job has at least so many rows
(its budget is a share of them), so this iterator reads the listing ahead on demand, at most
``limit`` items, and says how many it has seen and whether that was the end. Items pass
through in order and each exactly once; nothing is read ahead unless asked.

``Prefetch`` is the other kind of look-ahead: the listing iterated on a thread of its own, a
bounded number of items ahead, so its system calls run while the driver waits.
"""

from __future__ import annotations

import math
import queue
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class CountAhead(Generic[T]):
    def __init__(self, source: Iterable[T], *, limit: int = 10_000):
        self._source = iter(source)
        # The driver iterates while the tuner, on a hop's thread, may read ahead: a generator
        # stepped from two threads at once raises "generator already executing".
        self._lock = threading.Lock()
        self._ahead: deque[T] = deque()
        self.limit = max(1, limit)
        self.seen = 0  # items read from the source, handed on or still held
        self.exhausted = False
        # The sizes of those items, where every one has a ``size`` (listed objects); else None.
        self.bytes: int | None = 0

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        with self._lock:
            if not self._ahead:
                self._pull(1)
            if not self._ahead:
                raise StopIteration
            return self._ahead.popleft()

    def _pull(self, n: int) -> None:
        for _ in range(n):
            if not self._pull_one():
                return

    def _pull_one(self) -> bool:
        try:
            item = next(self._source)
        except StopIteration:
            self.exhausted = True
            return False
        self._ahead.append(item)
        self.seen += 1
        size = getattr(item, "size", None)
        self.bytes = None if self.bytes is None or not isinstance(size, int) else self.bytes + size
        return True

    def rows(self, want: int) -> tuple[int, bool]:
        """Read ahead until ``want`` items are known to exist (at most ``limit`` held back);
        returns (items seen, whether the source is exhausted)."""
        with self._lock:
            if not self.exhausted and self.seen < want:
                self._pull(min(want - self.seen, self.limit - len(self._ahead)))
            return self.seen, self.exhausted

    def bytes_ahead(self, want: int) -> tuple[int | None, bool]:
        """Read ahead until the items seen hold ``want`` bytes (at most ``limit`` held back);
        returns (their bytes, or None where an item has no size; whether the source is exhausted)."""
        with self._lock:
            while (not self.exhausted and self.bytes is not None and self.bytes < want
                   and len(self._ahead) < self.limit and self._pull_one()):
                pass
            return self.bytes, self.exhausted


def rows_from_bytes(counted: CountAhead, bytes_per_row: float | None, want: int,
                    floor: int = 0) -> tuple[int, bool] | None:
    """A ``job_rows`` answer for objects split into records (lines, RecordIO, TFRecord): the
    rows in the objects listed ahead, estimated from their listed bytes and the bytes per row
    (request) seen so far, read ahead until they hold ``want`` rows' worth; None where either
    is unknown (no request yet, or an object without a listed size), and where fewer than both
    ``want`` and ``floor`` rows are found (the caller's fixed budget then holds: a job's
    estimate only ever raises it). Compressed or filtered inputs hold more rows than their
    bytes say, so the estimate errs low."""
    if not bytes_per_row:
        return None
    seen, exhausted = counted.bytes_ahead(math.ceil(want * bytes_per_row))
    if seen is None:
        return None
    rows = int(seen / bytes_per_row)
    return None if rows < want and rows < floor else (rows, exhausted)


class Prefetch(Generic[T]):
    """Iterate ``source`` on a thread of its own, ``limit`` items ahead of the consumer.

    A local listing makes one ``stat`` per file; run lazily on the thread that submits the
    job's chunks, those calls and the submitting took turns (on 16 cores the driver spent 15 of
    ~17 steady seconds listing 50,000 files and 11 waiting for writes; each ``stat`` waits for
    the GIL among dozens of threads). Here the listing runs while the driver waits. Items pass
    in order, each once, handed over in growing runs (1, 2, 4, ... ``run``) so the first item
    is not held back and later ones cost one queue hand-off per run, not per item. An exception
    in ``source`` is raised to the consumer after the items before it. ``close`` (the owner
    calls it, also when it stops iterating early) stops the thread at its next item or hand-off
    and closes ``source`` there; the thread is a daemon, so a forgotten ``close`` cannot keep a
    process alive.
    """

    def __init__(self, source: Iterable[T], *, limit: int = 4096, run: int = 256, name: str = "listing"):
        self._source = source
        self._run = max(1, run)
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, limit // self._run))
        self._stop = threading.Event()
        self._current: Iterator[T] = iter(())
        self._done = False
        self._thread = threading.Thread(target=self._fill, name=name, daemon=True)
        self._thread.start()

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _fill(self) -> None:
        source = iter(self._source)
        batch: list[T] = []
        try:
            size = 1
            for item in source:
                batch.append(item)
                if len(batch) >= size:
                    if not self._put(batch):
                        return
                    batch, size = [], min(size * 2, self._run)
                if self._stop.is_set():
                    return
            if batch and not self._put(batch):
                return
            self._put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            if not batch or self._put(batch):  # the items before it first
                self._put(_Failed(exc))
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        while True:
            for item in self._current:
                return item
            if self._done:
                raise StopIteration
            got = self._queue.get()
            if got is _END:
                self._done = True
                raise StopIteration
            if isinstance(got, _Failed):
                self._done = True
                raise got.exc
            self._current = iter(got)

    def close(self) -> None:
        self._stop.set()
        self._done = True
        self._current = iter(())
        self._thread.join(timeout=5)


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc


_END = object()
