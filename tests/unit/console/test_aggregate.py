"""ProgressAggregator: per-instance cumulative series in bounded memory, fed by the progress callback."""

from __future__ import annotations

import io

import pytest

from tfbatch.console.aggregate import Buckets, ProgressAggregator, RecordingProgress
from tfbatch.console.source import Point
from tfbatch.transform.plan import instance_of
from tfbatch.transform.report import ObjectResult, RecordFailure


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_buckets_stay_bounded_and_keep_the_latest_count_of_each_bucket():
    buckets = Buckets(max_points=64, width=0.25)
    for i in range(1, 200_001):
        buckets.add(Point(i * 0.5, i, 2 * i, 0))  # 100,000 seconds of one event per half second
        assert len(buckets.points) <= 64
    times = [p.t for p in buckets.points]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert buckets.points[-1] == Point(100_000.0, 200_000, 400_000, 0)  # the newest count is never merged away
    assert all(p.records == 2 * p.objects for p in buckets.points)  # merging keeps real points, no blends
    assert buckets.width >= 100_000 / 64  # coarsened to cover the whole job
    # spread over the whole run, not crowded at one end
    assert buckets.points[len(buckets.points) // 2].t == pytest.approx(50_000, rel=0.1)


def test_buckets_refuse_a_size_that_cannot_hold_a_line():
    with pytest.raises(ValueError, match="max_points must be at least 2, got 1"):
        Buckets(max_points=1)


def test_aggregator_counts_each_object_for_the_instance_the_planner_gave_it():
    clock = FakeClock()
    agg = ProgressAggregator(3, max_points=16, clock=clock)
    keys = [f"dir/{i}.png" for i in range(3000)]
    for n, key in enumerate(keys):
        clock.now += 0.01
        ok = n % 100 != 0
        agg.observe(ObjectResult(key=key, ok=ok, records=4, failed_records=0 if ok else 1))
    series = agg.series()
    assert sorted(series) == [0, 1, 2]
    for instance, points in series.items():
        mine = [k for k in keys if instance_of(k, 3) == instance]
        assert points[-1].objects == len(mine) and points[-1].records == 4 * len(mine)
        assert len(points) <= 16 + 1  # the bounded buckets, plus "now" while nothing is arriving
    assert agg.totals() == (3000, 12000, 30) and agg.failed_records == 30
    per = agg.per_instance()
    assert [sum(c[k] for c in per) for k in range(4)] == [3000, 12000, 30, 30]


def test_series_end_at_the_current_time_while_a_job_is_quiet():
    clock = FakeClock()
    agg = ProgressAggregator(1, clock=clock)
    clock.now += 2
    agg.observe(ObjectResult(key="a", ok=True, records=1))
    clock.now += 30
    (points,) = agg.series().values()
    assert points[0] == Point(0.0, 0, 0, 0)
    assert points[-1] == Point(32.0, 1, 1, 0)


def test_recording_progress_feeds_the_aggregator_and_still_draws_what_was_asked():
    agg = ProgressAggregator(2)
    stream = io.StringIO()
    progress = RecordingProgress(agg, "log", stream=stream, interval_s=0)
    progress.set_total(5)
    failure = RecordFailure("k1", 0, 0, "bad")
    progress.update(ObjectResult(key="k1", ok=False, records=2, failed_records=1, failures=[failure]))
    progress.update(ObjectResult(key="k2", ok=True, records=3))
    progress.close()
    assert agg.total == 5 and agg.totals() == (2, 5, 1)
    assert "2/5 objects" in stream.getvalue()

    quiet = RecordingProgress(ProgressAggregator(1), "off", stream=stream)
    # not "off": the job counts its input (the total) only for a progress display that is on
    assert quiet.mode != "off"
    before = stream.getvalue()
    quiet.update(ObjectResult(key="x", ok=True, records=1))
    quiet.close()
    assert stream.getvalue() == before and quiet.aggregator.totals() == (1, 1, 0)


def test_a_stopped_job_series_end_when_it_ended():
    clock = FakeClock()
    agg = ProgressAggregator(1, clock=clock)
    clock.now += 5
    agg.observe(ObjectResult(key="a", ok=True, records=2))
    clock.now += 1
    agg.stop()
    clock.now += 1000
    (points,) = agg.series().values()
    assert points[-1] == Point(6.0, 1, 2, 0) and agg.elapsed() == 6.0


def test_charts_draw_per_instance_lines_and_their_sum_or_a_whole_job_series():
    from tfbatch.console.charts import progress_charts, total_series
    from tfbatch.console.source import ALL_INSTANCES

    series = {0: [Point(0, 0, 0, 0), Point(2, 5, 10, 0)], 1: [Point(0, 0, 0, 0), Point(1, 3, 3, 1), Point(3, 4, 4, 1)]}
    assert total_series(series) == [Point(0, 0, 0, 0), Point(1, 3, 3, 1), Point(2, 8, 13, 1), Point(3, 9, 14, 1)]
    svg = progress_charts(series)
    assert svg.count('data-label="all"') == 2 and 'data-label="instance 1" data-last="4"' in svg
    whole = progress_charts({ALL_INSTANCES: [Point(0, 0, 0, 0), Point(5, 7, 9, 0)]})
    assert 'data-label="all" data-last="7"' in whole and 'data-label="instance' not in whole


def test_the_rate_chart_is_records_per_second_over_equal_spans():
    from tfbatch.console.charts import progress_charts, rates

    points = [Point(0, 0, 0, 0), Point(2, 1, 10, 0), Point(2.001, 2, 12, 0), Point(4, 3, 40, 0)]
    assert rates(points, bins=2) == [(0.0, 0.0), (2.0, 5.0), (4.0, 15.0)]  # no spike from the 1 ms gap
    assert rates([]) == [] and rates([Point(0, 0, 0, 0)]) == [(0.0, 0.0)]
    svg = progress_charts({0: points})
    assert 'id="chart-rate"' in svg and svg.count('data-label="records/s"') == 1
