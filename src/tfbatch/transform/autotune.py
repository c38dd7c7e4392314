"""Pick the model batch size from the job's own batches, instead of asking the user.

The seeds tell users to "experiment with powers of two". The lane does that experiment on
the job's real data: it forms a short run of batches at each candidate size in turn and
keeps the size that finished images fastest. Probe batches are real work, so nothing is
wasted but the difference between a poor size and the best one; a size whose first timing
is already far behind the best (``give_up``) is cut short. A size within ``tolerance`` of
the best but smaller wins: less memory and latency for the same throughput.

What is timed is the lane's throughput: wall time between batch completions per row, over
the batches of a run after its first ``lead`` (which pay for a new shape's kernel set-up and
for the pipeline filling with the new size). Timing each model call on its own (the first
version) favoured the smallest size: with two batches in flight a call's own duration does
not show what it costs the batch beside it, and the grid found 8 chosen where 64 used 20 %
less CPU per image (benchmarks/transform/autotune_grid-tiny-before.md).

On a shared machine wall times mostly measure the neighbours. When the process got less
than ``contended`` of its ``cores`` during the probe, sizes are compared by CPU seconds per
row instead, which the load barely moves; on saturated cores throughput is cores / that.

A one-off probe is only as good as the load during it, and a long job outlives that load.
So every ``recheck_rows`` rows the lane times the chosen size again beside its neighbours
(one size smaller and one larger) and moves to a neighbour only if it beats the chosen size
by more than ``tolerance``. Pure bookkeeping, fed (rows, completion time) pairs, so it is
tested with made-up timings.
"""

from __future__ import annotations

DEFAULT_CANDIDATES = (8, 16, 32, 64)


class _Run:
    """The completions of one size's probe run: the first ``lead`` only set the clocks."""

    def __init__(self, lead: int):
        self.lead = lead
        self.seen = 0
        self.start: float | None = None
        self.cpu_start: float | None = None
        self.rows = 0
        self.last: float | None = None
        self.cpu_last: float | None = None

    def add(self, rows: int, at: float, cpu: float | None) -> None:
        self.seen += 1
        if self.seen <= self.lead:
            self.start, self.cpu_start = at, cpu
            return
        self.rows += rows
        self.last, self.cpu_last = at, cpu

    @property
    def timed(self) -> int:
        return max(0, self.seen - self.lead)

    @property
    def per_row(self) -> float | None:
        if not self.rows or self.start is None or self.last is None or self.last <= self.start:
            return None
        return (self.last - self.start) / self.rows

    @property
    def cpu_per_row(self) -> float | None:
        if not self.rows or self.cpu_start is None or self.cpu_last is None or self.cpu_last <= self.cpu_start:
            return None
        return (self.cpu_last - self.cpu_start) / self.rows

    def share(self) -> float | None:
        """CPU seconds the process used per wall second in this run (2.0: two cores' worth)."""
        wall, cpu = self.per_row, self.cpu_per_row
        return None if wall is None or cpu is None else cpu / wall


class Phases:
    """Where the lane's rows and time went: probing, re-checking, or running the chosen size.

    Batches overlap, so a batch's time is the gap since the batch completion before it; the
    first completion only starts the clock. What the probe costs the job is the probe's time
    minus what its rows would have taken at the chosen size's rate.
    """

    NAMES = ("probe", "recheck", "chosen")

    def __init__(self) -> None:
        self.rows = dict.fromkeys(self.NAMES, 0)
        self.seconds = dict.fromkeys(self.NAMES, 0.0)
        self.cpu = dict.fromkeys(self.NAMES, 0.0)
        self._last: tuple[float, float | None] | None = None

    def add(self, phase: str, rows: int, at: float, cpu: float | None) -> None:
        if self._last is not None:
            self.rows[phase] += rows
            self.seconds[phase] += max(0.0, at - self._last[0])
            if cpu is not None and self._last[1] is not None:
                self.cpu[phase] += max(0.0, cpu - self._last[1])
        self._last = (at, cpu)

    def report(self) -> dict:
        out: dict = {}
        steady = self.seconds["chosen"] / self.rows["chosen"] if self.rows["chosen"] else None
        for name in self.NAMES:
            out[name] = {"rows": self.rows[name], "seconds": round(self.seconds[name], 3),
                         "cpu_seconds": round(self.cpu[name], 3)}
            if steady is not None and name != "chosen":
                # Seconds lost against running these rows at the chosen size's steady rate.
                out[name]["cost_seconds"] = round(self.seconds[name] - self.rows[name] * steady, 3)
        return out


class BatchSizeProbe:
    def __init__(self, candidates: tuple[int, ...] = DEFAULT_CANDIDATES, *, repeats: int = 2, lead: int = 2,
                 tolerance: float = 0.05, fallback: int = 16, give_up: float = 0.5, recheck_rows: int = 4096,
                 cores: int | None = None, contended: float = 0.6):
        if not candidates or any(c < 1 for c in candidates):
            raise ValueError(f"batch size candidates must be positive, got {candidates}")
        self.candidates = tuple(sorted(set(candidates)))
        self.repeats = max(1, repeats)
        self.lead = max(1, lead)
        self.tolerance = tolerance
        self.give_up = give_up
        self.fallback = fallback
        self.recheck_rows = recheck_rows
        self.cores = cores
        self.contended = contended
        self.metric = "wall"
        self.per_row: dict[int, float] = {}  # the latest timing of each size, seconds per row
        self._runs: dict[int, _Run] = {c: _Run(self.lead) for c in self.candidates}
        self._schedule = self._runs_of(self.candidates)
        self._chosen: int | None = None
        self._rechecking = False
        self._rows_since = 0
        self.history: list[int] = []  # every choice made, first probe and re-checks
        self.phases = Phases()

    def _runs_of(self, sizes) -> list[int]:
        return [c for c in sizes for _ in range(self.lead + self.repeats)]

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

    def observe(self, rows: int, at: float, cpu: float | None = None) -> None:
        """A batch of ``rows`` rows finished at ``at`` (a monotonic clock, seconds), when the
        process had used ``cpu`` CPU seconds. Short batches (the job's tail) count only if
        their size is a candidate."""
        self.phases.add("probe" if self._chosen is None else "recheck" if self._rechecking else "chosen",
                        rows, at, cpu)
        run = self._runs.get(rows)
        if run is None:
            return
        probing = self._chosen is None or self._rechecking
        if not probing:
            self._rows_since += rows
            if self.recheck_rows and self._rows_since >= self.recheck_rows:
                self._start_recheck()
            return
        run.add(rows, at, cpu)
        self._pick_metric()
        for c, r in self._runs.items():
            if self._cost(r) is not None:
                self.per_row[c] = self._cost(r)
        if all(r.timed >= self.repeats or self._gave_up(c) for c, r in self._runs.items()):
            if self._rechecking:
                self._finish_recheck()
            else:
                self._choose(self._best())

    def _pick_metric(self) -> None:
        """Wall time per row, unless the machine is shared: when the process got well under
        its cores during the probe, wall times mostly measure the neighbours' load (the same
        setting varied 2x between runs on the shared VM) while CPU per row barely moves, and
        with the cores saturated throughput is cores / CPU per row."""
        if not self.cores:
            return
        shares = [r.share() for r in self._runs.values() if r.share() is not None]
        if shares and all(r.cpu_per_row is not None for r in self._runs.values() if r.per_row is not None):
            self.metric = "cpu" if sum(shares) / len(shares) < self.contended * self.cores else "wall"

    def _cost(self, run: _Run) -> float | None:
        return run.cpu_per_row if self.metric == "cpu" else run.per_row

    def _gave_up(self, size: int) -> bool:
        """While probing: ``size`` has a timing and it is far behind another size's."""
        run = self._runs.get(size)
        if run is None or self._cost(run) is None:
            return False
        others = [self._cost(r) for c, r in self._runs.items() if c != size and self._cost(r) is not None]
        return bool(others) and self._cost(run) > min(others) * (1 + self.give_up)

    def _best(self) -> int | None:
        timed = {c: self._cost(r) for c, r in self._runs.items() if self._cost(r) is not None}
        if not timed:
            return None
        best = min(timed.values())
        return min(c for c, t in timed.items() if t <= best * (1 + self.tolerance))

    def _choose(self, size: int | None) -> None:
        self._chosen = size or self.fallback
        self.history.append(self._chosen)
        self._schedule = []  # the round is decided: probe batches not yet formed are not needed
        self._rows_since = 0
        self._rechecking = False

    def _start_recheck(self) -> None:
        if self._chosen not in self.candidates:
            self._rows_since = 0
            return
        i = self.candidates.index(self._chosen)
        sizes = [self.candidates[j] for j in (i, i - 1, i + 1) if 0 <= j < len(self.candidates)]
        self._runs = {c: _Run(self.lead) for c in sizes}
        self._schedule = self._runs_of(sizes)
        self._rechecking = True

    def _finish_recheck(self) -> None:
        assert self._chosen is not None
        timed = {c: self._cost(r) for c, r in self._runs.items() if self._cost(r) is not None}
        keep = timed.get(self._chosen)
        best = min(timed, key=timed.get) if timed else self._chosen
        # Move only for a clear gain: noise must not make the lane flap between sizes.
        move = keep is not None and timed[best] * (1 + self.tolerance) < keep
        self._choose(best if move else self._chosen)

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
            "ms_per_row": {str(c): round(t * 1000, 3) for c, t in sorted(self.per_row.items())},
            "measure": "cpu ms per row (machine shared)" if self.metric == "cpu" else "wall ms per row",
            "choices": list(self.history),
            "phases": self.phases.report(),
        }
