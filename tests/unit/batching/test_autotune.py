"""The batch-size probe, fed made-up completion times (a fake clock, no model)."""

from __future__ import annotations

import itertools

import pytest

from tfbatch.transform.autotune import BatchSizeProbe
from tfbatch.transform.lookahead import CountAhead


class Lane:
    """Batches run one after another, formed like the real lane's: ask the probe for a size,
    then take that many objects from the job (fewer at its end). A batch of ``n`` rows at
    size ``s`` takes ``ms_per_row[s] * n`` ms of the fake clock."""

    def __init__(self, probe: BatchSizeProbe, job=None):
        self.probe = probe
        self.clock = 0.0
        self.job = iter(job) if job is not None else itertools.count()
        self.rows = 0
        self.probe_rows = 0  # rows handed out at sizes other than the default before the probe chose

    def form_batch(self) -> tuple[int, int]:
        """(size the probe asked for, rows taken from the job); counts rows spent probing."""
        probing = not self.probe.settled
        size = self.probe.next_size()
        rows = len(list(itertools.islice(self.job, size)))
        if rows and probing and not self.probe.settled and size != self.probe.start:
            self.probe_rows += rows
        self.rows += rows
        return size, rows

    def run(self, ms_per_row: dict[int, float], batches: int | None = None) -> list[int]:
        sizes = []
        for _ in itertools.count() if batches is None else range(batches):
            size, rows = self.form_batch()
            if not rows:
                break
            sizes.append(size)
            self.clock += ms_per_row[size] * rows / 1000
            self.probe.observe(rows, self.clock)
        return sizes


def test_climbs_from_the_default_while_each_step_up_pays():
    probe = BatchSizeProbe((8, 16, 32, 64), repeats=2, fallback=16)
    sizes = Lane(probe).run({8: 3.0, 16: 2.0, 32: 1.5, 64: 1.6}, 20)
    # A window of one opening completion and two timed ones per size (the job's first trial
    # opens at its third): 16, then 32 (faster), then 64 (not faster), so 32 is kept; 8 is never tried.
    assert sizes[:11] == [16] * 5 + [32] * 3 + [64] * 3
    assert set(sizes[11:]) == {32} and 8 not in sizes
    assert probe.settled and probe.chosen == 32
    assert probe.report()["ms_per_row"] == {"16": 2.0, "32": 1.5, "64": 1.6}


def test_stops_early_when_a_bigger_size_is_slower():
    probe = BatchSizeProbe((8, 16, 32, 64), repeats=2, fallback=16)
    # 64 would be faster still, but 32 is slower than 16: the climb does not go past it.
    sizes = Lane(probe).run({8: 2.2, 16: 2.0, 32: 2.5, 64: 1.0}, 20)
    assert sizes[:11] == [16] * 5 + [32] * 3 + [8] * 3
    assert 64 not in sizes and probe.chosen == 16 and set(sizes[11:]) == {16}


def test_steps_down_when_the_first_step_up_does_not_pay():
    probe = BatchSizeProbe((8, 16, 32), repeats=1, fallback=16)
    Lane(probe).run({8: 1.5, 16: 2.0, 32: 2.1}, 10)
    assert probe.chosen == 8 and probe.report()["choices"] == [8]


def test_a_tie_goes_to_the_larger_size_and_a_step_down_needs_a_clear_gain():
    probe = BatchSizeProbe((8, 16, 32), repeats=1, tolerance=0.05, fallback=16)
    # 32 is within 5 % of 16 (a tie: taken on the way up); 8 is no clear gain, so not taken.
    sizes = Lane(probe).run({8: 1.96, 16: 2.0, 32: 1.95}, 10)
    assert 8 in sizes and probe.chosen == 32
    probe = BatchSizeProbe((8, 16, 32), repeats=1, tolerance=0.05, fallback=16)
    Lane(probe).run({8: 2.0, 16: 2.0, 32: 2.08}, 10)  # 32 a little dearer, but within 5 %: still a tie
    assert probe.chosen == 32


def test_a_climb_on_ties_keeps_the_largest_size_within_tolerance_of_the_fastest():
    probe = BatchSizeProbe((8, 16, 32, 64, 128), repeats=1, tolerance=0.05, fallback=16)
    # Each step up a tie with the one before (32 +4 %, 64 +4.8 % on 32), then 128 clearly dearer:
    # the climb passes 32 and 64, and keeps 32, the largest within 5 % of 16.
    sizes = Lane(probe).run({8: 2.5, 16: 2.0, 32: 2.08, 64: 2.18, 128: 3.0}, 40)
    assert {16, 32, 64, 128, 8} <= set(sizes) and probe.chosen == 32
    assert "32 after timing" in probe.report()["why"] and "largest size within 5% of the fastest" in probe.report()["why"]


def test_on_a_cheap_model_the_climb_reaches_the_largest_size():
    # Every doubling ~9 % faster (the float-input Keras job's fixed-size rates, ms per row).
    probe = BatchSizeProbe((8, 16, 32, 64, 128), repeats=2, fallback=16)
    Lane(probe).run({8: 0.85, 16: 0.771, 32: 0.704, 64: 0.644, 128: 0.598}, 60)
    assert probe.chosen == 128 and set(probe.report()["choices"]) == {128}


def test_the_first_completion_of_a_size_only_opens_its_window():
    probe = BatchSizeProbe((8, 16), repeats=1, fallback=8, first_lead=1)
    probe.observe(8, 100.0)  # a new shape's set-up, or the pipeline still holding the size before
    assert probe.report()["ms_per_row"] == {}
    probe.observe(8, 100.016)
    assert probe.report()["ms_per_row"] == {"8": 2.0}


def test_the_jobs_first_batches_stay_out_of_the_first_window():
    probe = BatchSizeProbe((16, 32), repeats=1, fallback=16, first_lead=3)
    # The model's first calls on each lane thread: slow, and not what 16 costs.
    for rows, at in ((16, 1.0), (16, 1.9), (16, 1.932), (16, 1.964)):
        probe.observe(rows, at)
    assert probe.report()["ms_per_row"] == {"16": 2.0}
    # A later size needs no such lead: its shape is the only new thing.
    for rows, at in ((32, 2.0), (32, 2.032)):
        probe.observe(rows, at)
    assert probe.report()["ms_per_row"] == {"16": 2.0, "32": 1.0}


def test_a_late_batch_of_the_previous_size_counts_its_rows_in_the_window():
    probe = BatchSizeProbe((8, 16), repeats=1, fallback=8, first_lead=1)
    for rows, at in ((8, 0.0), (8, 0.016)):
        probe.observe(rows, at)
    probe.observe(16, 0.05)  # 16's window opens
    probe.observe(8, 0.066)  # an 8 still in flight finishes inside it
    probe.observe(16, 0.098)
    # 24 rows in 48 ms, not 16 rows: the late batch's time is not charged to 16 alone.
    assert probe.report()["ms_per_row"]["16"] == 2.0


@pytest.mark.parametrize("total", [40, 500, 2000, 25_000])
def test_the_probe_never_exceeds_its_share_of_the_job(total):
    job = CountAhead(range(total), limit=10_000)
    probe = BatchSizeProbe((8, 16, 32, 64), repeats=2, share=0.1, job_rows=job.rows)
    lane = Lane(probe, job)
    lane.run({8: 3.0, 16: 2.0, 32: 1.8, 64: 1.7})
    assert lane.rows == total  # probe batches are real rows: every object once
    # The share of what is known: the whole job, or the look-ahead's 10,000 when it is longer.
    assert lane.probe_rows == probe.probe_rows <= 0.1 * min(total, 10_000)
    if total <= 500:
        assert probe.report()["ms_per_row"].keys() <= {"16"}  # too short to try a second size
    if total >= 2000:
        assert probe.settled and "32" in probe.report()["ms_per_row"]


def test_without_the_jobs_size_the_probe_keeps_to_a_fixed_budget():
    probe = BatchSizeProbe((8, 16, 32, 64), repeats=2, budget_rows=200)
    lane = Lane(probe)
    lane.run({8: 3.0, 16: 2.0, 32: 1.8, 64: 1.7}, 40)
    assert probe.settled and lane.probe_rows <= 200
    assert probe.report()["probe_budget_rows"] == 200 and "budget" in probe.report()["why"]


def test_a_job_size_that_cannot_be_told_yet_gives_the_fixed_budget():
    # job_rows answers None (records split from objects, none sent yet): as without job_rows
    asked = []
    probe = BatchSizeProbe((8, 16, 32, 64), repeats=2, budget_rows=200,
                           job_rows=lambda want: asked.append(want))
    lane = Lane(probe)
    lane.run({8: 3.0, 16: 2.0, 32: 1.8, 64: 1.7}, 40)
    assert asked and probe.settled and lane.probe_rows <= 200
    assert probe.report()["probe_budget_rows"] == 200 and "budget" in probe.report()["why"]


def test_a_recheck_climbs_from_the_chosen_size_and_steps_down_only_for_a_clear_gain():
    timings = {8: 2.0, 16: 1.9, 32: 2.0}
    probe = BatchSizeProbe((8, 16, 32), repeats=1, fallback=16, recheck_rows=2048)
    lane = Lane(probe)
    lane.run(timings, 8)
    # 32 is 5.3 % dearer than 16: no tie; 8 no faster.
    assert probe.chosen == 16 and probe.report()["choices"] == [16]
    # The load changes: 8 is now 3 % faster than 16, which is noise, so 16 stays.
    timings.update({8: 1.94, 16: 2.0, 32: 2.5})
    sizes = lane.run(timings, 140)
    assert 8 in sizes and probe.chosen == 16 and len(probe.history) == 2
    # Later 8 is clearly faster: the next re-check (4,096 rows on) moves there, and the report says so.
    timings.update({8: 1.5})
    lane.run(timings, 280)
    assert probe.chosen == 8
    assert probe.report()["choices"][0] == 16 and probe.report()["choices"][-1] == 8
    assert probe.report()["ms_per_row"]["8"] == 1.5


def test_rechecks_grow_apart_and_stay_within_their_share():
    probe = BatchSizeProbe((8, 16, 32), repeats=2, fallback=16, recheck_rows=256, share=0.1)
    lane = Lane(probe)
    sizes = lane.run({8: 2.5, 16: 2.0, 32: 2.2}, 2000)
    off = sum(s for s in sizes[20:] if s != 16)  # rows at other sizes after the first choice
    assert probe.chosen == 16 and len(probe.history) >= 4
    assert off <= 0.1 * sum(sizes[20:])
    phases = probe.report()["phases"]
    assert phases["recheck"]["rows"] <= 0.1 * phases["chosen"]["rows"]


def test_the_report_says_what_was_chosen_by_whom_and_why():
    probe = BatchSizeProbe((8, 16, 32), repeats=1, fallback=16)
    Lane(probe).run({8: 2.5, 16: 2.0, 32: 1.0}, 12)
    report = probe.report()
    assert report["chosen"] == 32 and report["source"] == "tuner" and report["settled"]
    assert report["why"].startswith("32 after timing 16: 2, 32: 1 ms per row")
    assert report["reasons"] == [report["why"]] and report["choices"] == [32]  # one per choice, in order
    assert report["phases"]["probe"]["rows"] > 0 and report["phases"]["chosen"]["rows"] > 0


def test_before_any_timing_the_default_is_used_and_a_short_tail_is_not_timed():
    probe = BatchSizeProbe((8, 16), repeats=1, fallback=16)
    assert probe.chosen == 16 and probe.next_size() == 16
    probe.observe(16, 0.1)
    probe.observe(5, 0.2)  # the last, short batch of a job
    assert probe.report()["ms_per_row"] == {} and not probe.settled


def test_candidates_and_share_are_checked():
    with pytest.raises(ValueError):
        BatchSizeProbe((0, 8))
    with pytest.raises(ValueError):
        BatchSizeProbe(share=0)


def test_on_a_shared_machine_sizes_are_compared_by_cpu_per_row():
    probe = BatchSizeProbe((8, 16), repeats=1, fallback=8, cores=2, first_lead=1)
    # The process gets a quarter of its two cores: a neighbour's burst makes 16 look slow on
    # the wall clock (5 ms/row vs 3), but it used less CPU per row (0.9 ms vs 1.2).
    for rows, at, cpu in ((8, 0.0, 0.0), (8, 0.024, 0.0096), (16, 0.1, 0.02), (16, 0.18, 0.0344)):
        probe.observe(rows, at, cpu)
    assert probe.chosen == 16 and probe.report()["measure"].startswith("cpu")
    assert probe.report()["ms_per_row"] == {"8": 1.2, "16": 0.9}


def test_with_its_cores_to_itself_the_probe_compares_wall_time():
    probe = BatchSizeProbe((8, 16), repeats=1, fallback=8, cores=2, first_lead=1)
    # Both cores busy (CPU = 2 x wall): wall time per row decides, 8 is faster.
    for rows, at, cpu in ((8, 0.0, 0.0), (8, 0.016, 0.032), (16, 0.1, 0.2), (16, 0.14, 0.28)):
        probe.observe(rows, at, cpu)
    assert probe.chosen == 8 and probe.report()["measure"] == "wall ms per row"


def test_count_ahead_passes_every_item_once_and_reads_ahead_only_when_asked():
    produced = []

    def source():
        for i in range(30):
            produced.append(i)
            yield i

    ahead = CountAhead(source(), limit=10)
    assert next(ahead) == 0 and len(produced) == 1
    assert ahead.rows(5) == (5, False)
    assert ahead.rows(100) == (11, False)  # at most ``limit`` held back: a lower bound
    assert len(produced) == 11  # nothing beyond that was read
    assert list(ahead) == list(range(1, 30)) and ahead.rows(100) == (30, True)
    short = CountAhead(range(3), limit=10)
    assert short.rows(100) == (3, True) and list(short) == [0, 1, 2]


class PipelinedLane(Lane):
    """Like the real lane: ``workers`` batches run at once and the driver keeps one more
    formed, so the probe hands out sizes before the batches it is timing have finished."""

    def __init__(self, probe: BatchSizeProbe, job, workers: int = 2):
        super().__init__(probe, job)
        self.workers = workers
        self.free = [0.0] * workers
        self.now = 0.0
        self.in_flight: list[tuple[float, int]] = []

    def _finish_one(self) -> None:
        self.in_flight.sort()
        at, rows = self.in_flight.pop(0)
        self.now = max(self.now, at)
        self.probe.observe(rows, at)

    def run(self, ms_per_row: dict[int, float]) -> None:
        while True:
            while len(self.in_flight) >= self.workers + 1:
                self._finish_one()
            size, rows = self.form_batch()
            if not rows:
                break
            w = min(range(self.workers), key=self.free.__getitem__)
            self.free[w] = max(self.free[w], self.now) + ms_per_row[size] * rows / 1000
            self.in_flight.append((self.free[w], rows))
        while self.in_flight:
            self._finish_one()


def test_with_batches_in_flight_the_probe_times_each_size_and_keeps_to_its_budget():
    job = CountAhead(range(2000))
    probe = BatchSizeProbe((8, 16, 32, 64), repeats=2, share=0.1, job_rows=job.rows)
    lane = PipelinedLane(probe, job)
    lane.run({8: 3.0, 16: 2.0, 32: 1.6, 64: 1.5})
    assert lane.rows == 2000 and probe.settled
    # Two batches run at once: the lane finishes a row every half of a batch's ms per row.
    assert probe.report()["ms_per_row"] == pytest.approx({"16": 1.0, "32": 0.8})
    # 64 would cost 192 more rows than the 200 the job allows: the probe keeps 32.
    assert probe.chosen == 32 and "budget" in probe.report()["why"]
    assert lane.probe_rows == probe.probe_rows <= 200
    # 32's trial: 3 timed batches and 2 more keeping the lane full; no batch of 64 at all, as
    # its trial (5 batches) would not fit, so it never started.
    assert probe.probe_rows == 160 and "timing 64" in probe.report()["why"]


def _spiked(probe: BatchSizeProbe, ms_per_row: dict[int, float], spike_at: int, spike_s: float, batches: int) -> None:
    """Batches one after another on a fake clock; the ``spike_at``-th batch of the first size
    other than the start also waits ``spike_s`` (a write burst, a collection)."""
    clock, seen = 0.0, 0
    for _ in range(batches):
        size = probe.next_size()
        clock += ms_per_row[size] * size / 1000
        if size != probe.start:
            seen += 1
            if seen == spike_at:
                clock += spike_s
        probe.observe(size, clock)


def test_a_minimum_window_keeps_one_slow_batch_from_deciding():
    # 32 is a third cheaper per row than 16, but one of its batches waits 20 ms more. Two-batch
    # windows (6.4 ms of work each) charge the whole wait to 32; a 0.15 s window spreads it.
    costs = {8: 0.5, 16: 0.3, 32: 0.2, 64: 0.35}
    short = BatchSizeProbe((8, 16, 32, 64), repeats=2, fallback=16)
    _spiked(short, costs, spike_at=3, spike_s=0.02, batches=400)
    assert short.report()["choices"][0] != 32
    long = BatchSizeProbe((8, 16, 32, 64), repeats=2, fallback=16, min_window_s=0.15)
    _spiked(long, costs, spike_at=3, spike_s=0.02, batches=400)
    assert long.report()["choices"][0] == 32 and long.chosen == 32


def test_a_trial_out_of_budget_is_timed_on_the_window_it_has():
    # A short job: 32's window (32 ms a batch) cannot reach min_window_s before the probe's
    # share (300 rows) runs out. The trial still ends, on what it timed, and the probe settles:
    # no batch waits on it. (The default's own window costs no budget: it reaches 0.5 s.)
    job = CountAhead(range(3000), limit=10_000)
    probe = BatchSizeProbe((8, 16, 32, 64), repeats=2, fallback=16, share=0.1, job_rows=job.rows,
                           min_window_s=0.5)
    lane = Lane(probe, job)
    lane.run({8: 3.0, 16: 2.0, 32: 1.0, 64: 1.2})
    assert probe.settled and lane.rows == 3000 and lane.probe_rows <= 300
    assert probe.report()["ms_per_row"] == {"16": 2.0, "32": 1.0} and probe.chosen == 32
