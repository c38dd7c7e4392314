"""Pick the model batch size from the job's own first batches, instead of asking the user.

The seeds tell users to "experiment with powers of two". The lane does that experiment on
the job's real data: the first batches are formed at each candidate size in turn (after
one warm-up batch, which pays for tracing), the model time per row is kept for each, and
from then on the size with the lowest time per row is used. Probe batches are real work,
so nothing is wasted. A size within ``tolerance`` of the best but smaller wins: less
memory and latency for the same throughput. Pure bookkeeping, fed (rows, seconds) pairs,
so it is tested with made-up timings.
"""

from __future__ import annotations

DEFAULT_CANDIDATES = (8, 16, 32, 64)


class BatchSizeProbe:
    def __init__(self, candidates: tuple[int, ...] = DEFAULT_CANDIDATES, *, repeats: int = 2,
                 tolerance: float = 0.05, fallback: int = 16):
        if not candidates or any(c < 1 for c in candidates):
            raise ValueError(f"batch size candidates must be positive, got {candidates}")
        self.candidates = tuple(sorted(set(candidates)))
        self.repeats = max(1, repeats)
        self.tolerance = tolerance
        self.fallback = fallback
        # The schedule of sizes handed out while probing: warm-up first, then each candidate.
        self._schedule = [self.candidates[0]] + [c for c in self.candidates for _ in range(self.repeats)]
        self._handed = 0
        self._warmup_seen = False
        self.per_row: dict[int, list[float]] = {c: [] for c in self.candidates}
        self._chosen: int | None = None

    def next_size(self) -> int:
        """The size of the next batch to form."""
        if self._chosen is not None:
            return self._chosen
        if self._handed < len(self._schedule):
            size = self._schedule[self._handed]
            self._handed += 1
            return size
        # Every probe batch is handed out but not all timed yet: keep to the best so far.
        return self._best() or self.fallback

    def observe(self, rows: int, seconds: float) -> None:
        """A model call on ``rows`` rows took ``seconds``. Short batches (the job's tail) count
        only if their size is a candidate."""
        if not self._warmup_seen:
            self._warmup_seen = True
            return
        if self._chosen is not None or rows not in self.per_row or seconds <= 0:
            return
        self.per_row[rows].append(seconds / rows)
        if all(len(v) >= self.repeats for v in self.per_row.values()):
            self._chosen = self._best()

    def _best(self) -> int | None:
        timed = {c: min(v) for c, v in self.per_row.items() if v}
        if not timed:
            return None
        best = min(timed.values())
        return min(c for c, t in timed.items() if t <= best * (1 + self.tolerance))

    @property
    def chosen(self) -> int:
        return self._chosen if self._chosen is not None else (self._best() or self.fallback)

    @property
    def settled(self) -> bool:
        return self._chosen is not None

    def report(self) -> dict:
        return {
            "chosen": self.chosen,
            "settled": self.settled,
            "ms_per_row": {str(c): round(min(v) * 1000, 3) for c, v in self.per_row.items() if v},
        }
