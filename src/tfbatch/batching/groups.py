"""How a failed batch is cut to find its bad rows (group testing), for the callers that run a
batch of many requests in one model call and must answer each request alone when it fails
(``handlers.pooled.PooledService``, ``transform.predict.ImageBatchPredict``).

A failed call says only that some row was bad. Its requests go again in parts, each part that
fails is cut again, down to requests run alone. Halves find one bad request among n in about
2·log2(n) calls, but where bad rows are common they run the good rows again at every level.
``BadRows`` keeps the job's count of rows and of requests that failed alone; with p the chance
that one of the failed requests holds a bad row, n requests go in about n·sqrt(p) parts: the
group size of the fewest calls in two-stage group testing (Dorfman), 1/sqrt(p), so 3
requests at 10 %, and halves where bad rows are rare.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

# A failed part of this many requests or fewer runs each of them alone, not cut again.
ALONE_MAX = 2


class BadRows:
    """The job's share of bad rows so far, and the parts it makes of a failed call's requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rows_seen = 0
        self.requests_failed_alone = 0

    def seen(self, rows: int) -> None:
        """``rows`` reached a model call (jointly or alone)."""
        with self._lock:
            self.rows_seen += rows

    def failed_alone(self, requests: int) -> None:
        """``requests`` failed run alone: each holds a bad row."""
        with self._lock:
            self.requests_failed_alone += requests

    def parts(self, items: Sequence[T], rows_each: float = 1.0) -> list[Sequence[T]]:
        """``items`` (a failed call's requests, ``rows_each`` rows apiece on average) in parts of
        about equal size, in order: two where bad rows are rare, about n·sqrt(p) where not."""
        n = len(items)
        with self._lock:
            seen, bad = self.rows_seen, self.requests_failed_alone
        p = 1.0 - (1.0 - min(1.0, bad / max(seen, 1))) ** rows_each
        count = min(n, max(2, round(n * math.sqrt(p))))
        size, extra = divmod(n, count)
        out, at = [], 0
        for i in range(count):
            step = size + (i < extra)
            out.append(items[at:at + step])
            at += step
        return out

    def search(self, items: Sequence[T], joint: Callable[[Sequence[T]], list | None],
               alone: Callable[[T], Any], rows: Callable[[T], int] | None = None) -> list:
        """Each item's answer, in order, once a call of all of them failed: ``joint(part)`` (one
        answer per item of the part, or None where that call failed too) for each of ``parts``,
        a part that fails searched in turn; ``alone(item)`` for a part of one item, and for each
        item of ALONE_MAX or fewer. ``rows(item)``: an item's rows, where not one each."""
        if len(items) <= ALONE_MAX:
            return [alone(item) for item in items]
        rows_each = 1.0 if rows is None else sum(map(rows, items)) / len(items)
        out: list = []
        for part in self.parts(items, rows_each):
            # A part of one item runs alone (its answer or its own error): one call, not two.
            got = joint(part) if len(part) > 1 else None
            out += got if got is not None else self.search(part, joint, alone, rows)
        return out
