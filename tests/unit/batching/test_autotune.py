"""The batch-size probe, fed made-up timings (no clock, no model)."""

from __future__ import annotations

import pytest

from tfbatch.transform.autotune import BatchSizeProbe


def drive(probe: BatchSizeProbe, ms_per_row: dict[int, float], batches: int) -> list[int]:
    sizes = []
    for _ in range(batches):
        size = probe.next_size()
        sizes.append(size)
        probe.observe(size, ms_per_row[size] * size / 1000)
    return sizes


def test_probes_each_candidate_then_keeps_the_cheapest_per_row():
    probe = BatchSizeProbe((8, 16, 32), repeats=2)
    sizes = drive(probe, {8: 3.0, 16: 2.0, 32: 2.6}, 12)
    # Each size's warm-up batch one step ahead of the timed pair before it, then the winner for good.
    assert sizes[:9] == [8, 16, 8, 8, 32, 16, 16, 32, 32]
    assert set(sizes[9:]) == {16}
    assert probe.settled and probe.chosen == 16
    assert probe.report()["ms_per_row"] == {"8": 3.0, "16": 2.0, "32": 2.6}


def test_the_warm_up_batch_is_not_counted():
    probe = BatchSizeProbe((8, 16), repeats=1)
    probe.next_size()
    probe.observe(8, 100.0)  # tracing the function: not a timing of the model
    assert probe.report()["ms_per_row"] == {}


def test_the_first_call_at_each_size_is_not_counted():
    probe = BatchSizeProbe((8, 16), repeats=1)
    for rows, seconds in ((8, 1.0), (16, 5.0), (8, 0.016), (16, 0.016)):
        probe.observe(rows, seconds)
    # 16's first call (kernel set-up for a new shape) would have made it look 150x slower.
    assert probe.report()["ms_per_row"] == {"8": 2.0, "16": 1.0} and probe.chosen == 16


def test_a_smaller_size_within_tolerance_wins():
    probe = BatchSizeProbe((8, 16, 32), repeats=1, tolerance=0.05)
    drive(probe, {8: 2.04, 16: 2.0, 32: 2.1}, 6)
    assert probe.chosen == 8


def test_odd_sized_tail_batches_are_ignored_and_fallback_before_any_timing():
    probe = BatchSizeProbe((8, 16), repeats=1, fallback=16)
    assert probe.chosen == 16
    probe.next_size()
    probe.observe(8, 0.1)
    probe.observe(5, 0.0001)  # the last, short batch of a job
    assert "5" not in probe.report()["ms_per_row"]
    assert not probe.settled


def test_candidates_must_be_positive():
    with pytest.raises(ValueError):
        BatchSizeProbe((0, 8))


def test_a_size_far_behind_after_one_timing_is_not_tried_again():
    probe = BatchSizeProbe((8, 16, 64), repeats=2, give_up=0.5)
    sizes = drive(probe, {8: 2.0, 16: 1.9, 64: 4.0}, 10)
    # 64's first timing is twice the best: its second timed batch is skipped.
    assert sizes[:8] == [8, 16, 8, 8, 64, 16, 16, 64]
    assert probe.settled and probe.chosen == 16 and set(sizes[8:]) == {16}


def test_a_recheck_moves_to_a_neighbour_only_for_a_clear_gain():
    timings = {8: 2.0, 16: 1.9, 32: 2.0}
    probe = BatchSizeProbe((8, 16, 32), repeats=1, recheck_rows=64)
    drive(probe, timings, 6)
    assert probe.chosen == 16
    # The load changes: 32 is now 3 % cheaper than 16, which is noise, so 16 stays.
    timings.update({16: 2.0, 32: 1.94})
    sizes = drive(probe, timings, 8)
    assert 32 in sizes and 8 in sizes and probe.chosen == 16
    # Later 32 is clearly cheaper: the next recheck moves there, and the report says so.
    timings.update({32: 1.5})
    drive(probe, timings, 12)
    assert probe.chosen == 32
    assert probe.report()["choices"][0] == 16 and probe.report()["choices"][-1] == 32
    assert probe.report()["ms_per_row"]["32"] == 1.5
