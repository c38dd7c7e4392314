"""Pick the model batch size from the job's own batches, instead of asking the user.

The seeds tell users to "experiment with powers of two". The lane does that experiment on
the job's real data, as a hill climb from the default size: it times the default, then the
next size up, and keeps climbing while each step up is no slower than ``tolerance`` allows
(a tie goes to the larger size); when the first step up is slower, it tries one step down,
taken only when faster by more than ``tolerance``. At the end of a climb it keeps the largest
size it timed within ``tolerance`` of the fastest. Ties go up because on a cheap model every
doubling of the batch gained 8-10 % (the float-input Keras job, 20,000 JPEGs at fixed sizes:
1,297, 1,421, 1,553, 1,674 images/s at 16, 32, 64, 128), a step that short windows on a busy
machine measure as anything from -3 % to +20 %: the climb that needed a clear gain at every
step stopped at 16 or 32 at random (benchmarks/transform/profile/probe-ties.md). A size that
is clearly dearer still stops it (64 rows per batch cost MobileNetV2 40 % more CPU per image
than 16 on the grid, and trying it was the probe's largest cost).

Probe batches are real outputs, never redone; what the probe costs is only the gap between
the sizes it tried and the one it keeps. So the rows it runs at sizes other than the best so
far are capped at ``share`` of the job's rows when the job's size is known (``job_rows(n)``
counts up to n rows ahead and says whether that was all of them; None where it cannot tell),
else at a fixed ``budget_rows``. At the cap the probe stops and keeps the best size it has: a 500-image job may
spend 50 rows, too few to time 32 (5 batches with the lane's in flight, 160 rows), so it keeps
the default.

What is timed is the lane's throughput, not a model call: with two batches in flight, a
call's own duration does not show what it costs the batch beside it (timing calls made main's
tuner pick 8 where 64 used 20 % less CPU per image). A size's window opens at its first
completion, which pays for a new shape's kernel set-up and the pipeline still holding the
size before, and closes at its last; every row completed in between counts, whatever its
size, so a late batch of the previous size is charged with its own rows instead of skewing
the new size's time.

On a shared machine wall times mostly measure the neighbours. When the process got less
than ``contended`` of its ``cores`` during the probe, sizes are compared by CPU seconds per
row instead, which the load barely moves; on saturated cores throughput is cores / that.

A trial's window can also be asked to span ``min_window_s`` seconds (the image lane asks
0.15 s, the handler pool 0.3 s): a few batches of a cheap model are milliseconds, where one
write burst decides. Out of budget, a trial is timed on the window it has.

A long job outlives the load it was probed under, so after ``recheck_rows`` rows the lane
climbs again from the chosen size (the neighbours only, the shapes already set up), under
the same share of the rows since the last choice; the gap between re-checks doubles up to 16
times ``recheck_rows``, so re-checks stay a small, shrinking share of a long job. Pure
bookkeeping, fed (rows, completion time, CPU time) triples, so it is tested with made-up
timings.
"""

from __future__ import annotations

import math
from collections.abc import Callable

DEFAULT_CANDIDATES = (8, 16, 32, 64, 128)
# What the image lane asks of a trial's window (``min_window_s``): on the tiny model a batch
# takes a few milliseconds, and two-batch windows let a write burst pick 8 or 16 where 64 ran
# 20 % faster (20,000 JPEGs, 3 alternating rounds: 2,221-2,531 -> 2,887-3,043 images/s steady;
# benchmarks/transform/profile/probe-window.md).
MIN_WINDOW_S = 0.15
# The handler pool's (``PoolPredict``): a scripted batch crosses two hand-offs to the hook
# threads and back, so completions come in clumps and a two-completion window picked anything
# from 8 to 128 on the scripted tiny job (fixed 128 runs it 1.7x faster than 16); with 0.3 s the
# first probe kept 64 in every run (20,000 JPEGs: 11.2-11.8 s whole vs 11.8-13.8 s; 0.15 s
# still wandered in the rates it measured; probe-window.md, eighth session).
POOL_MIN_WINDOW_S = 0.3


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


class _Trial:
    """One size's timing window, from its first completion to its last (see the module doc)."""

    def __init__(self, size: int, repeats: int, lead: int = 1, min_s: float = 0.0):
        self.size = size
        self.repeats = repeats
        self.lead = max(1, lead)
        self.min_s = min_s
        self.seen = 0
        self.handed = 0
        self.timed = 0
        self.closed = False  # the probe hands out no more batches of this size (its budget)
        self._open: tuple[float, float | None, int] | None = None
        self._close: tuple[float, float | None, int] | None = None

    def completed(self, rows_done: int, at: float, cpu: float | None) -> None:
        """A batch of this size finished; ``rows_done`` counts every row finished so far."""
        self.seen += 1
        if self.seen < self.lead:
            return
        if self._open is None:
            self._open = (at, cpu, rows_done)
            return
        self._close = (at, cpu, rows_done)
        self.timed += 1

    @property
    def done(self) -> bool:
        """``repeats`` timed completions over at least ``min_s`` seconds, or fewer seconds once
        no more batches of this size will come."""
        if self.timed < self.repeats:
            return False
        if self.min_s <= 0 or self._close[0] - self._open[0] >= self.min_s:
            return True
        return self.closed and self.seen >= self.handed

    def _span(self) -> tuple[float, float | None, int] | None:
        if self._open is None or self._close is None:
            return None
        rows = self._close[2] - self._open[2]
        wall = self._close[0] - self._open[0]
        if rows <= 0 or wall <= 0:
            return None
        cpu = None if self._open[1] is None or self._close[1] is None else self._close[1] - self._open[1]
        return wall, cpu, rows

    @property
    def per_row(self) -> float | None:
        span = self._span()
        return None if span is None else span[0] / span[2]

    @property
    def cpu_per_row(self) -> float | None:
        span = self._span()
        return None if span is None or span[1] is None or span[1] <= 0 else span[1] / span[2]

    def share(self) -> float | None:
        """CPU seconds the process used per wall second in this window (2.0: two cores' worth)."""
        wall, cpu = self.per_row, self.cpu_per_row
        return None if wall is None or cpu is None else cpu / wall


class BatchSizeProbe:
    def __init__(self, candidates: tuple[int, ...] = DEFAULT_CANDIDATES, *, repeats: int = 2,
                 tolerance: float = 0.05, fallback: int = 16, share: float = 0.1, budget_rows: int = 1000,
                 job_rows: Callable[[int], tuple[int, bool] | None] | None = None, recheck_rows: int = 4096,
                 cores: int | None = None, contended: float = 0.6, first_lead: int = 3, in_flight: int = 2,
                 min_window_s: float = 0.0):
        if not candidates or any(c < 1 for c in candidates):
            raise ValueError(f"batch size candidates must be positive, got {candidates}")
        if not 0 < share <= 1:
            raise ValueError(f"the probe's share of the job must be in (0, 1], got {share}")
        self.candidates = tuple(sorted(set(candidates)))
        self.repeats = max(1, repeats)
        self.tolerance = tolerance
        self.fallback = fallback
        self.start = min(self.candidates, key=lambda c: (abs(c - fallback), c))
        self.share = share
        self.budget_rows = budget_rows
        self.job_rows = job_rows
        self.recheck_rows = recheck_rows
        self.cores = cores
        self.contended = contended
        self.first_lead = first_lead
        self.in_flight = in_flight  # batches the lane runs beside the one finishing (its workers)
        # A trial's window spans at least this long (while its budget lasts): a few batches of a
        # cheap model are tens of milliseconds, where one write burst or collection decides.
        self.min_window_s = min_window_s
        self.metric = "wall"
        self.per_row: dict[int, float] = {}  # the latest timing of each size, seconds per row
        self.history: list[int] = []  # every choice made, first probe and re-checks
        self.reasons: list[str] = []
        self.phases = Phases()
        self.probe_rows = 0  # rows the first probe handed out at sizes other than the best so far
        self.budget: int | None = None  # that probe's cap, once known
        self._rows_done = 0
        self._chosen: int | None = None
        self._rechecking = False
        self._rows_since = 0
        self._gap = recheck_rows
        self._gap_rows = recheck_rows
        self._round_rows = 0
        self._begin_round(self.start)

    def best(self) -> int:
        """The size the lane runs at now: the choice once made, else the best of the round so far."""
        return self._chosen if self._chosen is not None else self._incumbent

    # ---- the climb ----------------------------------------------------------------------

    def _begin_round(self, incumbent: int) -> None:
        self._incumbent = self._round_start = incumbent
        self._direction = 1
        self._gained = False  # a step in this round was faster by more than the tolerance
        self._results: dict[int, _Trial] = {}
        # The job's very first batches also pay for the model's first calls on every lane
        # thread; left in the first trial's window, they made MobileNetV2 leave 16 for 32,
        # which the grid measured at a third more CPU per image.
        self._trial = _Trial(incumbent, self.repeats, lead=1 if self.history else self.first_lead,
                             min_s=self.min_window_s)
        self._round_rows = 0  # rows handed out at sizes other than the best so far: the probe's cost
        self._waiting = 0

    def _neighbour(self, size: int, direction: int) -> int | None:
        i = self.candidates.index(size) + direction
        return self.candidates[i] if 0 <= i < len(self.candidates) else None

    def _next_trial(self) -> int | None:
        """After a trial: the next size to time, or None when the round is decided."""
        tried = self._trial
        self._results[tried.size] = tried
        if tried.size != self._incumbent:
            if self._faster(tried.size, self._incumbent):
                self._incumbent, self._gained = tried.size, True
            elif self._direction == 1 and self._no_slower(tried.size, self._incumbent):
                self._incumbent = tried.size  # a tie on the way up: keep climbing (``_pick`` decides)
            elif self._direction == 1:
                return self._down()  # clearly slower: the climb up is over
            else:
                return None
        nxt = self._untried(self._neighbour(self._incumbent, self._direction))
        if nxt is None and self._direction == 1:
            return self._down()  # already the largest size
        return nxt

    def _down(self) -> int | None:
        """The climb up is over; without a clear gain on the way, one step down from where the
        round began, taken only if faster by more than the tolerance."""
        if self._gained:
            return None
        self._direction = -1
        return self._untried(self._neighbour(self._round_start, -1))

    def _untried(self, size: int | None) -> int | None:
        return None if size is None or size in self._results else size

    def _faster(self, size: int, than: int) -> bool:
        mine, theirs = self._cost(self._results.get(size)), self._cost(self._results.get(than))
        return mine is not None and (theirs is None or mine < theirs * (1 - self.tolerance))

    def _no_slower(self, size: int, than: int) -> bool:
        mine, theirs = self._cost(self._results.get(size)), self._cost(self._results.get(than))
        return mine is not None and theirs is not None and mine <= theirs * (1 + self.tolerance)

    def _pick(self) -> int:
        """The round's choice: the largest size timed within ``tolerance`` of the fastest (the
        incumbent when nothing was timed)."""
        costs = {size: self._cost(trial) for size, trial in self._results.items()}
        costs = {size: cost for size, cost in costs.items() if cost is not None}
        if not costs:
            return self._incumbent
        best = min(costs.values())
        return max(size for size, cost in costs.items() if cost <= best * (1 + self.tolerance))

    def _cost(self, trial: _Trial | None) -> float | None:
        if trial is None:
            return None
        return trial.cpu_per_row if self.metric == "cpu" else trial.per_row

    def _pick_metric(self) -> None:
        """Wall time per row, unless the machine is shared: when the process got well under
        its cores during the probe, wall times mostly measure the neighbours' load (the same
        setting varied 2x between runs on the shared VM) while CPU per row barely moves, and
        with the cores saturated throughput is cores / CPU per row."""
        if not self.cores:
            return
        trials = [*self._results.values(), self._trial]
        shares = [t.share() for t in trials if t.share() is not None]
        if shares and all(t.cpu_per_row is not None for t in trials if t.per_row is not None):
            self.metric = "cpu" if sum(shares) / len(shares) < self.contended * self.cores else "wall"

    # ---- the lane's calls ---------------------------------------------------------------

    def _allowed(self, rows: int) -> bool:
        """May this round hand out ``rows`` rows in all? Only within its share of the job."""
        if self._rechecking:
            return rows <= self.share * self._gap_rows
        want = math.ceil(rows / self.share)
        known = None if self.job_rows is None else self.job_rows(want)
        if known is None:  # the job's size cannot be told (yet): the fixed budget
            self.budget = self.budget_rows
            return rows <= self.budget
        seen, exact = known
        if not exact and seen >= want:
            return True  # the job has at least ``want`` rows, so ``rows`` is within its share
        # The whole job is counted, or as much of it as the look-ahead holds (a lower bound).
        self.budget = int(self.share * seen)
        return rows <= self.budget

    def next_size(self) -> int:
        """The size of the next batch to form."""
        if self._chosen is not None and not self._rechecking:
            return self._chosen
        trial = self._trial
        if trial.size == self._incumbent:
            trial.handed += 1
            return trial.size
        planned = self._planned(trial.lead)
        # A trial starts only if all its batches fit: a lone batch of a size tells nothing.
        if not trial.handed and not self._allowed(self._round_rows + trial.size * planned):
            self._settle(f"{self._pick()}: timing {trial.size} ({planned} batches) would take the rows "
                         f"run at other sizes past the probe's budget, {self.share:.0%} of the job "
                         f"({self._round_rows} spent)")
            return self.chosen
        # Until its timed batches finish, the trial's size keeps the lane full, so the batches in
        # flight when its window closes are like those in flight when it opened. (The best size
        # so far in their place, smaller and cheaper, left work uncounted at the window's start
        # and not at its end: 32 looked a fifth cheaper than 16 on MobileNetV2, where the grid
        # measured it a third dearer.)
        if trial.handed < planned or self._allowed(self._round_rows + trial.size):
            trial.handed += 1
            self._round_rows += trial.size
            if not self._rechecking:
                self.probe_rows += trial.size
            return trial.size
        trial.closed = True  # out of budget: its window may end short of min_window_s
        if trial.done:  # ... and every batch of it has finished
            self._trial_over()
            return self.next_size()
        self._waiting += 1
        if self._waiting > 8 * planned:
            self._settle(f"{self._pick()}: the batches timing {trial.size} did not finish")
        return self._incumbent

    def observe(self, rows: int, at: float, cpu: float | None = None) -> None:
        """A batch of ``rows`` rows finished at ``at`` (a monotonic clock, seconds), when the
        process had used ``cpu`` CPU seconds."""
        self.phases.add("probe" if self._chosen is None else "recheck" if self._rechecking else "chosen",
                        rows, at, cpu)
        self._rows_done += rows
        if self._chosen is not None and not self._rechecking:
            self._rows_since += rows
            if self.recheck_rows and self._rows_since >= self._gap:
                self._gap_rows = self._rows_since
                self._gap = min(2 * self._gap, 16 * self.recheck_rows)
                self._rechecking = True
                self._begin_round(self._chosen)
            return
        if rows != self._trial.size:
            return  # a batch of an earlier trial (or the job's short tail): its rows count, not its time
        self._trial.completed(self._rows_done, at, cpu)
        if self._trial.done or self._nothing_to_compare(self._trial):
            self._trial_over()

    def _nothing_to_compare(self, trial: _Trial) -> bool:
        """The incumbent's window need not reach ``min_window_s`` when no other size fits in
        the budget after it (a short job): the round is decided as it was without a minimum."""
        if trial.timed < self.repeats or trial.size != self._incumbent:
            return False
        nxt = self._neighbour(trial.size, self._direction) or self._neighbour(trial.size, -self._direction)
        return nxt is None or not self._allowed(self._round_rows + nxt * self._planned(lead=1))

    def _planned(self, lead: int) -> int:
        """Batches a trial is handed before its budget is asked again: the opening ones, the
        timed ones and those in flight beside them."""
        return lead + self.repeats + self.in_flight

    def _trial_over(self) -> None:
        self._pick_metric()
        cost = self._cost(self._trial)
        if cost is not None:
            self.per_row[self._trial.size] = cost
        nxt = self._next_trial()
        if nxt is None:
            self._settle(self._why())
        else:
            self._trial = _Trial(nxt, self.repeats, min_s=self.min_window_s)
            self._waiting = 0

    def _why(self) -> str:
        timed = ", ".join(f"{s}: {1000 * c:.3g}" for s, c in sorted(
            (s, self._cost(t)) for s, t in self._results.items()) if c is not None)
        return (f"{self._pick()} after timing {timed} ms per row ({self.metric}): the largest size within "
                f"{self.tolerance:.0%} of the fastest")

    def _settle(self, why: str) -> None:
        self._incumbent = self._chosen = self._pick()
        self.history.append(self._chosen)
        self.reasons.append(why)
        self._rechecking = False
        self._rows_since = 0

    @property
    def chosen(self) -> int:
        return self._chosen if self._chosen is not None else self._incumbent

    @property
    def settled(self) -> bool:
        return self._chosen is not None

    def report(self) -> dict:
        return {
            "chosen": self.chosen,
            "source": "tuner",
            "settled": self.settled,
            "why": self.reasons[-1] if self.reasons else "still probing",
            "probe_rows": self.probe_rows,
            "probe_budget_rows": self.budget,
            "ms_per_row": {str(c): round(t * 1000, 3) for c, t in sorted(self.per_row.items())},
            "measure": "cpu ms per row (machine shared)" if self.metric == "cpu" else "wall ms per row",
            "choices": list(self.history),
            "reasons": list(self.reasons),  # why each choice was made, in the order of ``choices``
            "phases": self.phases.report(),
        }
