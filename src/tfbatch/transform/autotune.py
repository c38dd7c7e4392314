"""Pick the model batch size from the job's own batches, instead of asking the user.

The seeds tell users to "experiment with powers of two". The lane does that experiment on
the job's real data: the first batches are formed at each candidate size in turn, the model
time per row is kept for each, and from then on the size with the lowest time per row is
used. The first call at a new batch shape is slow (tracing on the first call, oneDNN and
Eigen set up their kernels per shape), so each size gets one warm-up batch that is not
counted, formed a little before its timed batches: timing only the first calls made every
size but the first look slower and the probe chose the smallest (8 of 8-64, while the
job's CPU per image was 20 % lower at 64, benchmarks/transform/autotune_grid.md). The
timed batches of a size are formed back to back, so on a machine running two batches at
once they share the cores with their own kind. Probe batches are real work,
so nothing is wasted but the difference between a poor size and the best one; a size whose
first timing is already far behind the best (``give_up``) is not tried again. A size within
``tolerance`` of the best but smaller wins: less memory and latency for the same throughput.

A one-off probe is only as good as the load during it, and a long job outlives that load.
So every ``recheck_rows`` rows the lane times the chosen size again beside its neighbours
(one size smaller and one larger) and moves to a neighbour only if it beats the chosen size
by more than ``tolerance``. Pure bookkeeping, fed (rows, seconds) pairs, so it is tested
with made-up timings.
"""

from __future__ import annotations

DEFAULT_CANDIDATES = (8, 16, 32, 64)


class BatchSizeProbe:
    def __init__(self, candidates: tuple[int, ...] = DEFAULT_CANDIDATES, *, repeats: int = 2,
                 tolerance: float = 0.05, fallback: int = 16, give_up: float = 0.5,
                 recheck_rows: int = 4096):
        if not candidates or any(c < 1 for c in candidates):
            raise ValueError(f"batch size candidates must be positive, got {candidates}")
        self.candidates = tuple(sorted(set(candidates)))
        self.repeats = max(1, repeats)
        self.tolerance = tolerance
        self.give_up = give_up
        self.fallback = fallback
        self.recheck_rows = recheck_rows
        # The sizes still to hand out in this probe round: each size's warm-up batch one step
        # ahead of the timed batches of the size before it.
        sizes = self.candidates
        self._schedule = [sizes[0]]
        for i, c in enumerate(sizes):
            if i + 1 < len(sizes):
                self._schedule.append(sizes[i + 1])
            self._schedule += [c] * self.repeats
        self._warm: set[int] = set()
        self.per_row: dict[int, list[float]] = {c: [] for c in self.candidates}
        self._chosen: int | None = None
        self._rows_since = 0
        self._recheck: dict[int, list[float]] | None = None
        self.history: list[int] = []  # every choice made, first probe and re-checks

    def next_size(self) -> int:
        """The size of the next batch to form."""
        while self._schedule:
            size = self._schedule.pop(0)
            if not self._gave_up(size):
                return size
        if self._chosen is not None:
            return self._chosen
        # Every probe batch is handed out but not all timed yet: keep to the best so far.
        return self._best() or self.fallback

    def observe(self, rows: int, seconds: float) -> None:
        """A model call on ``rows`` rows took ``seconds``. Short batches (the job's tail) count
        only if their size is a candidate."""
        if rows not in self.per_row or seconds <= 0:
            return
        if rows not in self._warm:  # the first call at this shape: set-up, not the model
            self._warm.add(rows)
            return
        if self._chosen is None:
            self.per_row[rows].append(seconds / rows)
            if all(len(v) >= self.repeats or self._gave_up(c) for c, v in self.per_row.items()):
                self._choose(self._best())
            return
        if self._recheck is not None:
            if rows in self._recheck:
                self._recheck[rows].append(seconds / rows)
                if all(len(v) >= self.repeats for v in self._recheck.values()):
                    self._finish_recheck()
            return
        self._rows_since += rows
        if self.recheck_rows and self._rows_since >= self.recheck_rows:
            self._start_recheck()

    def _gave_up(self, size: int) -> bool:
        """During the first probe: ``size`` was timed once and is far behind another size."""
        if self._chosen is not None or not self.per_row[size]:
            return False
        others = [min(v) for c, v in self.per_row.items() if v and c != size]
        return bool(others) and min(self.per_row[size]) > min(others) * (1 + self.give_up)

    def _best(self) -> int | None:
        timed = {c: min(v) for c, v in self.per_row.items() if v}
        if not timed:
            return None
        best = min(timed.values())
        return min(c for c, t in timed.items() if t <= best * (1 + self.tolerance))

    def _choose(self, size: int | None) -> None:
        self._chosen = size or self.fallback
        self._schedule = []  # the round is decided: probe batches not yet formed are not needed
        self.history.append(self._chosen)
        self._rows_since = 0

    def _start_recheck(self) -> None:
        i = self.candidates.index(self._chosen) if self._chosen in self.candidates else None
        if i is None:
            return
        sizes = [self.candidates[j] for j in (i - 1, i, i + 1) if 0 <= j < len(self.candidates)]
        self._recheck = {c: [] for c in sizes}
        self._schedule = [c for c in sizes for _ in range(self.repeats)]

    def _finish_recheck(self) -> None:
        assert self._recheck is not None and self._chosen is not None
        timed = {c: min(v) for c, v in self._recheck.items()}
        for c, t in timed.items():  # the report shows the latest timing of each size
            self.per_row[c] = [t]
        best = min(timed, key=timed.get)
        keep = timed[self._chosen]
        # Move only for a clear gain: noise must not make the lane flap between sizes.
        self._recheck = None
        self._choose(best if timed[best] * (1 + self.tolerance) < keep else self._chosen)

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
            "choices": list(self.history),
        }
