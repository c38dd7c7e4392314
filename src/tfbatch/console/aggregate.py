"""A running job's progress over time, per instance, in bounded memory.

``run_transform`` reports each finished object once (its ``Progress.update``). The console
needs a chart of objects and records over time, per instance, for jobs of any length; one
point per object would grow with the job (10 million objects), and one point per second with
its duration. So each instance keeps at most ``max_points`` cumulative points, one per time
bucket: when the buckets run out, their width doubles and neighbours merge (the later point
of a pair survives, since the counts are cumulative). A day-long job keeps points every few
minutes; a one-minute job keeps one per event burst.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tfbatch.console.source import Point
from tfbatch.transform.plan import instance_of
from tfbatch.transform.progress import Progress
from tfbatch.transform.report import ObjectResult

MAX_POINTS = 512
FIRST_WIDTH_S = 0.25


class Buckets:
    """Cumulative points of one series, at most ``max_points``, one per bucket of ``width`` seconds.

    Rows are plain tuples ``(t, objects, records, failed)`` and the current bucket's number is
    kept: ``add`` runs once per finished object on the job's result thread, so it stays a
    few hundred nanoseconds.
    """

    def __init__(self, max_points: int = MAX_POINTS, width: float = FIRST_WIDTH_S):
        if max_points < 2:
            raise ValueError(f"max_points must be at least 2, got {max_points}")
        self.max_points = max_points
        self.width = width
        self.rows: list[tuple[float, int, int, int]] = []
        self._bucket = -1

    @property
    def points(self) -> list[Point]:
        return [Point(*row) for row in self.rows]

    def add(self, point: Point | tuple[float, int, int, int]) -> None:
        row = (point.t, point.objects, point.records, point.failed) if isinstance(point, Point) else point
        bucket = int(row[0] // self.width)
        if self.rows and bucket == self._bucket:
            self.rows[-1] = row  # same bucket: the later cumulative value stands for it
            return
        self.rows.append(row)
        self._bucket = bucket
        while len(self.rows) > self.max_points:
            self._coarsen()

    def _coarsen(self) -> None:
        self.width *= 2
        kept: list[tuple[float, int, int, int]] = []
        last = -1
        for row in self.rows:
            bucket = int(row[0] // self.width)
            if kept and bucket == last:
                kept[-1] = row
            else:
                kept.append(row)
                last = bucket
        self.rows = kept
        self._bucket = last


class ProgressAggregator:
    """Per-instance cumulative counters and their bounded series; safe to feed from any thread.

    ``instance_of`` is the planner's own rule, so an object is counted for the instance that
    ran it without the engines having to say which one that was.
    """

    def __init__(self, instances: int = 1, *, max_points: int = MAX_POINTS,
                 clock: Callable[[], float] = time.monotonic):
        self.instances = max(1, instances)
        self.max_points = max_points
        self.clock = clock
        self.started = clock()
        self.total: int | None = None
        self.stopped: float | None = None
        self._lock = threading.Lock()
        self._counts = [[0, 0, 0] for _ in range(self.instances)]  # objects, records, failed objects
        self._series = [Buckets(max_points) for _ in range(self.instances)]
        self.failed_records = 0
        self._failed_records = [0] * self.instances
        for series in self._series:
            series.add((0.0, 0, 0, 0))

    def set_total(self, total: int) -> None:
        self.total = total

    def observe(self, result: ObjectResult) -> None:
        instance = instance_of(result.key, self.instances)
        now = self.clock() - self.started
        with self._lock:
            counts = self._counts[instance]
            counts[0] += 1
            counts[1] += result.records
            counts[2] += 0 if result.ok else 1
            self.failed_records += result.failed_records
            self._failed_records[instance] += result.failed_records
            self._series[instance].add((now, counts[0], counts[1], counts[2]))

    def stop(self) -> None:
        """The job ended: series end here, not at the time someone looks at them."""
        if self.stopped is None:
            self.stopped = self.clock()

    def series(self) -> dict[int, list[Point]]:
        """A copy of every instance's points, ending now (a flat line while idle) or when the job ended."""
        now = self.elapsed()
        with self._lock:
            out = {}
            for i, buckets in enumerate(self._series):
                points = buckets.points
                if points and points[-1].t < now:
                    points.append(Point(now, *self._counts[i]))
                out[i] = points
            return out

    def per_instance(self) -> list[tuple[int, int, int, int]]:
        """Objects, records, failed objects and failed records of each instance, in order."""
        with self._lock:
            return [(c[0], c[1], c[2], f) for c, f in zip(self._counts, self._failed_records)]

    def totals(self) -> tuple[int, int, int]:
        """Objects, records and failed objects so far, over all instances."""
        with self._lock:
            return (sum(c[0] for c in self._counts), sum(c[1] for c in self._counts),
                    sum(c[2] for c in self._counts))

    def elapsed(self) -> float:
        return (self.stopped if self.stopped is not None else self.clock()) - self.started


class RecordingProgress(Progress):
    """A ``Progress`` (bar, log lines or quiet, as asked) that also feeds a ProgressAggregator.

    Pass it as ``run_transform(progress=...)``: the job's one progress callback is the
    console's only hook into a run.
    """

    def __init__(self, aggregator: ProgressAggregator, mode: str = "off", **kwargs):
        super().__init__(mode, **kwargs)
        self.aggregator = aggregator
        if self.mode == "off":
            # run_job counts the input for the total only when the display is on; the console
            # wants the total even when nothing is drawn.
            self.mode = "quiet"

    def set_total(self, total: int) -> None:
        super().set_total(total)
        self.aggregator.set_total(total)

    def update(self, result: ObjectResult) -> None:
        super().update(result)
        self.aggregator.observe(result)

    def _draw(self, now: float) -> None:
        if self.mode != "quiet":
            super()._draw(now)

    def close(self) -> None:
        if self.mode != "quiet":
            super().close()
