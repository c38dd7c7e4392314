"""What a running transform job shows: aggregates for the console, lines for CloudWatch Logs.

``JobStats`` is fed by run_transform's progress hook (one call per finished object) and keeps
the job's totals, per-instance counts and a bounded time series (at most ``MAX_POINTS``
points: when full, every other point is dropped and the sampling step doubles, so a long job
keeps an even picture of its whole run). It is written to state at most every
``SAVE_EVERY_S`` and at the end, so the console sees finished jobs after a restart too.

``JobLog`` writes the job's log lines into ``/aws/sagemaker/TransformJobs`` streams named
``<job>/tfbatch-<instance>-<start epoch>`` as AWS names them per instance
(``<job>/<instance id>-<epoch>``), which is where ``transformer.wait(logs=True)`` looks.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tfbatch.transform.plan import instance_of
from tfbatch.transform.progress import Progress
from tfbatch.transform.report import ObjectResult

GROUP = "/aws/sagemaker/TransformJobs"
MAX_POINTS = 512
SAVE_EVERY_S = 1.0
# Failed objects logged one line each, up to this many per job; the error report has them all.
MAX_FAILURE_LINES = 100


class JobLog:
    """The log streams of one job run."""

    def __init__(self, state: Any, job: str, instances: int, started: float | None = None):
        self.state = state
        epoch = int(started or time.time())
        self.streams = [f"{job}/tfbatch-{i}-{epoch}" for i in range(max(1, instances))]
        # A job resumed after a restart writes on in the streams of its first run: one stream
        # per instance, as clients expect (the SDK's tailer pages streams only while it has
        # fewer than the instance count).
        earlier = sorted((s["stream"] for s in state.log_streams(GROUP, f"{job}/")),
                         key=lambda name: int(name.rsplit("-", 2)[-2]) if name.rsplit("-", 2)[-2].isdigit() else 0)
        if len(earlier) == len(self.streams):
            self.streams = earlier

    def write(self, message: str, instance: int = 0) -> None:
        now = int(time.time() * 1000)
        self.state.put_log_events(GROUP, self.streams[instance], [(now, message)])


class _LogLines:
    """A text stream for Progress(mode="log"): each finished line becomes one log event."""

    def __init__(self, log: JobLog):
        self.log = log
        self.pending = ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            if line.strip():
                self.log.write(line)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


class JobStats(Progress):
    """Progress of one job run, as counts the console reads and log lines CloudWatch serves."""

    def __init__(self, state: Any, job: str, instances: int, log: JobLog, *, interval_s: float = 2.0,
                 earlier: dict | None = None):
        # mode "log": run_job hands the job's total only to a Progress that shows it.
        super().__init__("log", _LogLines(log), interval_s=interval_s)
        self.state = state
        self.job = job
        self.log = log
        self.instance_count = max(1, instances)
        self.failure_lines = 0
        self._saved = 0.0
        self._step = 0.5  # seconds between series points; doubles when the series is thinned
        self._next_point = 0.0
        base = earlier or {}
        # A resumed job (after a restart) keeps counting from what its earlier run recorded.
        self.offset = {k: base.get(k, 0) for k in ("objects", "succeeded", "failed", "records", "failed_records")}
        self.per_instance = base.get("instances") or [
            {"instance": i, "objects": 0, "failed": 0, "records": 0, "failed_records": 0}
            for i in range(self.instance_count)]
        self.series: list[list[float]] = base.get("series", [])
        self.t0 = time.time() - (self.series[-1][0] if self.series else 0.0)
        self.succeeded = 0
        self.failed_records = 0
        self._stats_lock = threading.Lock()

    def update(self, result: ObjectResult) -> None:
        super().update(result)
        i = instance_of(result.key, self.instance_count)
        with self._stats_lock:
            slot = self.per_instance[i]
            slot["objects"] += 1
            slot["records"] += result.records
            slot["failed_records"] += result.failed_records
            self.failed_records += result.failed_records
            if result.ok:
                self.succeeded += 1
            else:
                slot["failed"] += 1
            self._point()
            due = time.monotonic() - self._saved >= SAVE_EVERY_S
        if not result.ok or result.failed_records:
            self._log_failure(result, i)
        if due:
            self.save()

    def _log_failure(self, result: ObjectResult, instance: int) -> None:
        self.failure_lines += 1
        if self.failure_lines <= MAX_FAILURE_LINES:
            self.log.write(f"{result.key}: {result.failed_records} of {result.records} records failed: "
                           f"{result.error}", instance)
        elif self.failure_lines == MAX_FAILURE_LINES + 1:
            self.log.write(f"more objects with failed records: see the job's _tfbatch/errors.jsonl", instance)

    def _point(self) -> None:
        t = time.time() - self.t0
        if t < self._next_point and self.series:
            return
        totals = self.snapshot_counts()
        self.series.append([round(t, 3), totals["objects"], totals["records"], totals["failed_records"]])
        if len(self.series) > MAX_POINTS:
            self.series = self.series[::2]
            self._step *= 2
        self._next_point = t + self._step

    def snapshot_counts(self) -> dict[str, int]:
        return {
            "objects": self.offset["objects"] + self.objects,
            "succeeded": self.offset["succeeded"] + self.succeeded,
            "failed": self.offset["failed"] + self.failed,
            "records": self.offset["records"] + self.records,
            "failed_records": self.offset["failed_records"] + self.failed_records,
        }

    def snapshot(self) -> dict[str, Any]:
        """What the console shows: totals, per instance, the series ``[seconds, objects, records,
        failed records]`` and the objects left to do (None until the listing pass ends)."""
        with self._stats_lock:
            doc: dict[str, Any] = self.snapshot_counts()
            doc.update(job=self.job, total=None if self.total is None else self.offset["objects"] + self.total,
                       instances=[dict(s) for s in self.per_instance], series=[list(p) for p in self.series],
                       updated=time.time())
        return doc

    def save(self) -> None:
        self._saved = time.monotonic()
        self.state.put_progress(self.job, self.snapshot())
