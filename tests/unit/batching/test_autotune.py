"""The batch-size probe, fed made-up completion times (no clock, no model)."""

from __future__ import annotations

import pytest

from tfbatch.transform.autotune import BatchSizeProbe


class Lane:
    """Batches run one after another; a batch of ``size`` rows takes ``ms_per_row[size] * size``."""

    def __init__(self, probe: BatchSizeProbe):
        self.probe = probe
        self.clock = 0.0

    def run(self, ms_per_row: dict[int, float], batches: int) -> list[int]:
        sizes = []
        for _ in range(batches):
            size = self.probe.next_size()
            sizes.append(size)
            self.clock += ms_per_row[size] * size / 1000
            self.probe.observe(size, self.clock)
        return sizes


def test_probes_each_candidate_then_keeps_the_fastest_per_row():
    probe = BatchSizeProbe((8, 16, 32), repeats=2, lead=2)
    sizes = Lane(probe).run({8: 3.0, 16: 2.0, 32: 2.6}, 16)
    # A run of lead + repeats batches per size, then the winner for good.
    assert sizes[:12] == [8] * 4 + [16] * 4 + [32] * 4
    assert set(sizes[12:]) == {16}
    assert probe.settled and probe.chosen == 16
    assert probe.report()["ms_per_row"] == {"8": 3.0, "16": 2.0, "32": 2.6}


def test_the_lead_batches_of_a_run_are_not_timed():
    probe = BatchSizeProbe((8, 16), repeats=1, lead=2)
    probe.observe(8, 100.0)  # tracing and kernel set-up for a new shape
    probe.observe(8, 101.0)  # the pipeline still full of the size before
    assert probe.report()["ms_per_row"] == {}
    probe.observe(8, 101.016)
    assert probe.report()["ms_per_row"] == {"8": 2.0}


def test_a_smaller_size_within_tolerance_wins():
    probe = BatchSizeProbe((8, 16, 32), repeats=1, tolerance=0.05)
    Lane(probe).run({8: 2.04, 16: 2.0, 32: 2.1}, 9)
    assert probe.chosen == 8


def test_odd_sized_tail_batches_are_ignored_and_fallback_before_any_timing():
    probe = BatchSizeProbe((8, 16), repeats=1, fallback=16)
    assert probe.chosen == 16
    probe.next_size()
    probe.observe(8, 0.1)
    probe.observe(5, 0.2)  # the last, short batch of a job
    assert "5" not in probe.report()["ms_per_row"]
    assert not probe.settled


def test_candidates_must_be_positive():
    with pytest.raises(ValueError):
        BatchSizeProbe((0, 8))


def test_a_size_far_behind_after_one_timing_is_cut_short():
    probe = BatchSizeProbe((8, 16, 64), repeats=2, lead=2, give_up=0.5)
    sizes = Lane(probe).run({8: 2.0, 16: 1.9, 64: 4.0}, 14)
    # 64's first timing is twice the best: its last timed batch is skipped.
    assert sizes[:11] == [8] * 4 + [16] * 4 + [64] * 3
    assert probe.settled and probe.chosen == 16 and set(sizes[11:]) == {16}


def test_a_recheck_moves_to_a_neighbour_only_for_a_clear_gain():
    timings = {8: 2.0, 16: 1.9, 32: 2.0}
    probe = BatchSizeProbe((8, 16, 32), repeats=1, lead=1, recheck_rows=64)
    lane = Lane(probe)
    lane.run(timings, 6)
    assert probe.chosen == 16
    # The load changes: 32 is now 3 % faster than 16, which is noise, so 16 stays.
    timings.update({16: 2.0, 32: 1.94})
    sizes = lane.run(timings, 12)
    assert 32 in sizes and 8 in sizes and probe.chosen == 16
    # Later 32 is clearly faster: the next recheck moves there, and the report says so.
    timings.update({32: 1.5})
    lane.run(timings, 14)
    assert probe.chosen == 32
    assert probe.report()["choices"][0] == 16 and probe.report()["choices"][-1] == 32
    assert probe.report()["ms_per_row"]["32"] == 1.5


def test_on_a_shared_machine_sizes_are_compared_by_cpu_per_row():
    probe = BatchSizeProbe((8, 16), repeats=1, lead=1, cores=2)
    # The process gets a quarter of its two cores: a neighbour's burst makes 16 look slow on
    # the wall clock (5 ms/row vs 3), but it used less CPU per row (0.9 ms vs 1.2).
    for rows, at, cpu in ((8, 0.0, 0.0), (8, 0.024, 0.0096), (16, 0.1, 0.02), (16, 0.18, 0.0344)):
        probe.observe(rows, at, cpu)
    assert probe.chosen == 16 and probe.report()["measure"].startswith("cpu")
    assert probe.report()["ms_per_row"] == {"8": 1.2, "16": 0.9}


def test_with_its_cores_to_itself_the_probe_compares_wall_time():
    probe = BatchSizeProbe((8, 16), repeats=1, lead=1, cores=2)
    # Both cores busy (CPU = 2 x wall): wall time per row decides, 8 is faster.
    for rows, at, cpu in ((8, 0.0, 0.0), (8, 0.016, 0.032), (16, 0.1, 0.2), (16, 0.14, 0.28)):
        probe.observe(rows, at, cpu)
    assert probe.chosen == 8 and probe.report()["measure"] == "wall ms per row"
