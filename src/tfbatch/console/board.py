"""Jobs run in this process, as a ConsoleSource: what the static report and tests read.

``JobBoard.start`` hands back a ``TrackedJob`` whose ``progress`` goes to
``run_transform(progress=...)``; ``finish`` takes the job's report. A job keeps only
aggregates (``ProgressAggregator``), the first failures and a bounded log tail, so holding
thousands of finished jobs costs little.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from tfbatch.console.aggregate import ProgressAggregator, RecordingProgress
from tfbatch.console.source import (
    FAILURE_LINES,
    EndpointRow,
    InstanceCounts,
    Failure,
    JobDetail,
    JobPage,
    JobRow,
    ModelRow,
    Point,
    read_failures,
    settings_from_report,
)
from tfbatch.transform.report import ObjectResult

LOG_LINES = 200


class LogTail(logging.Handler):
    """The last ``limit`` formatted log lines, for the job page's log section."""

    def __init__(self, limit: int = LOG_LINES):
        super().__init__(logging.INFO)
        self.lines: deque[str] = deque(maxlen=limit)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception:  # a log line that cannot be formatted must not break the job
            self.handleError(record)


class _Recorder(RecordingProgress):
    """Also keeps the first failures as they happen: errors.jsonl is written only at the end."""

    def __init__(self, job: "TrackedJob", mode: str):
        super().__init__(job.aggregator, mode)
        self.job = job

    def update(self, result: ObjectResult) -> None:
        super().update(result)
        if result.failures and len(self.job.live_failures) < FAILURE_LINES:
            with self.job.lock:
                for f in result.failures[: FAILURE_LINES - len(self.job.live_failures)]:
                    self.job.live_failures.append(Failure(f.object, f.record, f.offset, f.error))


class TrackedJob:
    def __init__(self, name: str, *, instances: int = 1, output: str = "",
                 details: list[tuple[str, str]] | None = None, progress: str = "off",
                 clock: Callable[[], float] = time.time):
        self.name = name
        self.created = clock()
        self.started: float | None = self.created
        self.ended: float | None = None
        self.status = "InProgress"
        self.message: str | None = None
        self.instances = instances
        self.output = output
        self.details = list(details or [])
        self.report: dict[str, Any] | None = None
        self.lock = threading.Lock()
        self.live_failures: list[Failure] = []
        self.logs = LogTail()
        self.aggregator = ProgressAggregator(instances)
        self.progress = _Recorder(self, progress)

    def capture_logs(self, logger: str = "tfbatch") -> Callable[[], None]:
        """Collect ``logger``'s records into this job's log tail; returns the undo.

        The logger's level is left alone: what the tail gets is what the program logs
        anyway (warnings by default, more with ``-v``), so watching a job never changes
        what reaches stderr.
        """
        target = logging.getLogger(logger)
        target.addHandler(self.logs)
        return lambda: target.removeHandler(self.logs)

    def finish(self, report: Any) -> None:
        """The job's report (a JobReport or its ``to_dict()``): final counts, status, settings."""
        data = report.to_dict() if hasattr(report, "to_dict") else dict(report)
        self.aggregator.stop()
        with self.lock:
            self.report = data
            self.ended = time.time()
            if data.get("stopped"):
                self.status, self.message = "Stopped", str(data["stopped"])
            elif data.get("fatal"):
                self.status, self.message = "Failed", "; ".join(map(str, data["fatal"]))
            elif data.get("failed"):
                self.status = "Failed"
                self.message = f"{data['failed']} objects had failed records (see the failures below)"
            else:
                self.status = "Completed"

    def fail(self, error: BaseException | str) -> None:
        """The job could not run at all (bad spec, output locked, ...)."""
        self.aggregator.stop()
        with self.lock:
            self.ended = time.time()
            self.status, self.message = "Failed", str(error)

    def row(self) -> JobRow:
        agg = self.aggregator
        report = self.report
        if report is not None:
            done = report.get("objects", 0)
            total = (agg.total if agg.total is not None else done) + report.get("skipped", 0)
            return JobRow(self.name, self.status, self.created, self.started, self.ended, self.instances,
                          done + report.get("skipped", 0), total, report.get("records", 0),
                          float(report.get("records_per_second", 0.0)), report.get("failed_records", 0),
                          report.get("failed", 0))
        objects, records, failed = agg.totals()
        elapsed = agg.elapsed()
        rate = records / elapsed if elapsed > 0 else 0.0
        return JobRow(self.name, self.status, self.created, self.started, self.ended, self.instances,
                      objects, agg.total, records, rate, agg.failed_records, failed)

    def detail(self) -> JobDetail:
        report = self.report or {}
        counts = [InstanceCounts(i, *c) for i, c in enumerate(self.aggregator.per_instance())]
        return JobDetail(self.row(), output=self.output, error_report=report.get("error_report"),
                         message=self.message, details=self.details, settings=settings_from_report(report),
                         instances=counts)

    def failures(self, limit: int = FAILURE_LINES) -> list[Failure]:
        if self.report is not None and self.report.get("error_report"):
            return read_failures(self.report["error_report"], limit)
        with self.lock:
            return list(self.live_failures[:limit])

    def log_tail(self, limit: int = 100) -> list[str]:
        lines = list(self.logs.lines)
        return lines[-limit:] if limit > 0 else []


class JobBoard:
    """A ConsoleSource over jobs tracked in this process, plus endpoint and model lists given to it."""

    def __init__(self, *, endpoints: Callable[[], list[EndpointRow]] = list,
                 models: Callable[[], list[ModelRow]] = list, max_jobs: int = 10_000):
        self._jobs: dict[str, TrackedJob] = {}
        self._lock = threading.Lock()
        self._endpoints = endpoints
        self._models = models
        self.max_jobs = max_jobs

    def start(self, name: str, **kwargs: Any) -> TrackedJob:
        job = TrackedJob(name, **kwargs)
        with self._lock:
            if name in self._jobs:
                raise ValueError(f"a job named {name!r} is already on the board")
            self._jobs[name] = job
            if len(self._jobs) > self.max_jobs:  # forget the oldest finished job
                for old in sorted(self._jobs.values(), key=lambda j: j.created):
                    if old.ended is not None:
                        del self._jobs[old.name]
                        break
        return job

    def add(self, job: TrackedJob) -> None:
        with self._lock:
            self._jobs[job.name] = job

    def get(self, name: str) -> TrackedJob | None:
        return self._jobs.get(name)

    def list_jobs(self, *, status: str | None = None, offset: int = 0, limit: int = 50) -> JobPage:
        with self._lock:
            jobs = list(self._jobs.values())
        if status:
            jobs = [j for j in jobs if j.status == status]
        jobs.sort(key=lambda j: (j.created, j.name), reverse=True)
        return JobPage([j.row() for j in jobs[offset:offset + limit]], len(jobs), offset, limit)

    def job(self, name: str) -> JobDetail | None:
        job = self.get(name)
        return job.detail() if job else None

    def progress(self, name: str) -> dict[int, list[Point]]:
        job = self.get(name)
        return job.aggregator.series() if job else {}

    def failures(self, name: str, limit: int = FAILURE_LINES) -> list[Failure]:
        job = self.get(name)
        return job.failures(limit) if job else []

    def log_tail(self, name: str, limit: int = 100) -> list[str]:
        job = self.get(name)
        return job.log_tail(limit) if job else []

    def endpoints(self) -> list[EndpointRow]:
        return self._endpoints()

    def models(self) -> list[ModelRow]:
        return self._models()
