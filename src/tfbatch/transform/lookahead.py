"""Count a job's objects ahead of the lane, so the tuner knows what share of the job it spends.

The listing is a stream (a 10M-object job never holds its keys), so the job's size is not known
up front. The batch-size probe only needs to know that the job has at least so many rows
(its budget is a share of them), so this iterator reads the listing ahead on demand, at most
``limit`` items, and says how many it has seen and whether that was the end. Items pass
through in order and each exactly once; nothing is read ahead unless asked.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class CountAhead(Generic[T]):
    def __init__(self, source: Iterable[T], *, limit: int = 10_000):
        self._source = iter(source)
        self._ahead: deque[T] = deque()
        self.limit = max(1, limit)
        self.seen = 0  # items read from the source, handed on or still held
        self.exhausted = False

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        if not self._ahead:
            self._pull(1)
        if not self._ahead:
            raise StopIteration
        return self._ahead.popleft()

    def _pull(self, n: int) -> None:
        for _ in range(n):
            try:
                self._ahead.append(next(self._source))
            except StopIteration:
                self.exhausted = True
                return
            self.seen += 1

    def rows(self, want: int) -> tuple[int, bool]:
        """Read ahead until ``want`` items are known to exist (at most ``limit`` held back);
        returns (items seen, whether the source is exhausted)."""
        if not self.exhausted and self.seen < want:
            self._pull(min(want - self.seen, self.limit - len(self._ahead)))
        return self.seen, self.exhausted
