"""What the console reads: a small data-source Protocol and the plain values it returns.

The console draws pages; it owns no state of its own. Whoever holds jobs and endpoints
(``tfbatch api``'s store, the in-process ``JobBoard``, the static report of one finished
job) answers these few questions. Every answer is already an aggregate: a page never asks
for anything whose size grows with a job's objects, so a 10-million-object job costs the
browser what a 10-object job does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

# SageMaker's TransformJobStatus values; a job in one of the last four has stopped and its
# page no longer polls.
JOB_STATUSES = ("InProgress", "Stopping", "Completed", "Failed", "Stopped")
FINAL_STATUSES = frozenset({"Completed", "Failed", "Stopped"})
ENDPOINT_STATUSES = ("Creating", "Updating", "InService", "Deleting", "Failed", "OutOfService")

# How much of errors.jsonl a page shows, and how long one line may be before it is cut:
# the file is the job's own, but an object key or error message can be arbitrarily long.
FAILURE_LINES = 50
MAX_FAILURE_LINE = 64 * 1024


@dataclass(frozen=True)
class JobRow:
    """One line of the jobs list; times are seconds since the epoch (None: not yet)."""

    name: str
    status: str
    created: float | None = None
    started: float | None = None
    ended: float | None = None
    instances: int = 1
    objects_done: int = 0
    objects_total: int | None = None  # unknown until the listing pass ends
    records: int = 0
    records_per_second: float = 0.0
    failed_records: int = 0
    failed_objects: int = 0

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES


@dataclass(frozen=True)
class JobPage:
    """One page of the jobs list, newest first, with the number of jobs matching the filter."""

    rows: list[JobRow]
    total: int
    offset: int
    limit: int


@dataclass(frozen=True)
class Setting:
    """One setting a job ran with, and who chose it (a flag, the tuner, a default)."""

    name: str
    value: str
    chosen_by: str = ""


@dataclass(frozen=True)
class Failure:
    """One line of ``errors.jsonl``: record and offset are None for object-level failures."""

    object: str
    record: int | None
    offset: int | None
    error: str


@dataclass(frozen=True)
class InstanceCounts:
    """One instance's totals so far."""

    instance: int
    objects: int = 0
    records: int = 0
    failed_objects: int = 0
    failed_records: int | None = None  # None: the source does not count them per instance


@dataclass(frozen=True)
class JobDetail:
    """A job's page: its row, where its inputs and outputs are, and what it ran with."""

    row: JobRow
    output: str = ""
    error_report: str | None = None
    message: str | None = None  # why it failed or stopped
    details: list[tuple[str, str]] = field(default_factory=list)  # model, input, content type, ...
    settings: list[Setting] = field(default_factory=list)
    instances: list[InstanceCounts] = field(default_factory=list)


# The key of a progress series counting all instances together, for a source that keeps
# per-instance totals but one series for the whole job (tfbatch api's stored progress).
ALL_INSTANCES = -1


@dataclass(frozen=True)
class Point:
    """Cumulative counts of one instance at ``t`` seconds after the job started."""

    t: float
    objects: int
    records: int
    failed: int


@dataclass(frozen=True)
class WorkerStats:
    """One serving worker of an endpoint (or the endpoint's only one)."""

    worker: str
    requests_per_second: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    errors: int = 0
    requests: int = 0


@dataclass(frozen=True)
class EndpointRow:
    name: str
    status: str
    model: str
    created: float | None = None
    url: str = ""
    workers: list[WorkerStats] = field(default_factory=list)

    @property
    def requests_per_second(self) -> float:
        return sum(w.requests_per_second for w in self.workers)

    @property
    def errors(self) -> int:
        return sum(w.errors for w in self.workers)


@dataclass(frozen=True)
class ModelRow:
    name: str
    artifact: str
    created: float | None = None
    details: list[tuple[str, str]] = field(default_factory=list)


@runtime_checkable
class ConsoleSource(Protocol):
    """The questions the console asks. Each answer is bounded in size whatever the job's size."""

    def list_jobs(self, *, status: str | None = None, offset: int = 0, limit: int = 50) -> JobPage:
        """Jobs newest first (by creation), only ``status`` ones when given."""
        ...

    def job(self, name: str) -> JobDetail | None: ...

    def progress(self, name: str) -> dict[int, list[Point]]:
        """Per instance, the job's progress series (a bounded number of points each); a source
        with one series for the whole job gives it under ``ALL_INSTANCES``."""
        ...

    def failures(self, name: str, limit: int = FAILURE_LINES) -> list[Failure]:
        """The first ``limit`` lines of the job's error report (live failures while it runs)."""
        ...

    def log_tail(self, name: str, limit: int = 100) -> list[str]: ...

    def endpoints(self) -> list[EndpointRow]: ...

    def models(self) -> list[ModelRow]: ...


def settings_from_report(report: dict[str, Any]) -> list[Setting]:
    """What a job ran with, from its ``report.json``: lane choices (the tuner's or the flags') first.

    Every instance runs the same lanes with the same rules, so a setting that came out the
    same on all instances is shown once; one that differs is shown per instance.
    """
    found: dict[tuple[str, str, str], list[str]] = {}
    for lane, stats in sorted((report.get("batches") or {}).items()):
        if not isinstance(stats, dict):
            continue
        instance, _, name = lane.partition(":")
        by = stats.get("chosen_by") or {}
        tuned = stats.get("autotune") or {}
        rows = [("lane", stats.get("lane"), "tfbatch (what the job's shape allows)"),
                ("predict", stats.get("predict"), "tfbatch (what the model and script allow)"),
                ("batch size", stats.get("max_batch_size"), by.get("max_batch_size") or ("tuner" if tuned else "")),
                ("workers", stats.get("workers"), by.get("workers", "")),
                ("lane threads", stats.get("lane_threads"), ""),
                ("handler workers", stats.get("handler_workers"), ""),
                ("objects in flight", stats.get("in_flight_objects"), by.get("in_flight_objects", "")),
                ("precision", stats.get("precision"), by.get("precision", ""))]
        for label, value, who in rows:
            if value is not None:
                found.setdefault((f"{name or lane} {label}", str(value), str(who)), []).append(instance)
    settings: list[Setting] = []
    per_name: dict[str, int] = {}
    for (label, _value, _who) in found:
        per_name[label] = per_name.get(label, 0) + 1
    for (label, value, who), instances in found.items():
        shown = label if per_name[label] == 1 else f"{label} (instance {', '.join(instances)})"
        settings.append(Setting(shown, value, who))
    if report.get("instances") is not None:
        settings.append(Setting("instances", str(report["instances"]), "job"))
    if report.get("concurrency"):
        settings.append(Setting("concurrent transforms", str(report["concurrency"]), "job"))
    return settings


def parse_failure(line: str | bytes) -> Failure | None:
    """One ``errors.jsonl`` line as a Failure; None for a line that is not one (cut, or garbage)."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or "object" not in data:
        return None

    def _int(value: Any) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return Failure(str(data.get("object")), _int(data.get("record")), _int(data.get("offset")),
                   str(data.get("error", "")))


def read_failures(uri: str | None, limit: int = FAILURE_LINES) -> list[Failure]:
    """The first ``limit`` failures of an error report, reading only as far as they go."""
    if not uri or limit <= 0:
        return []
    from tfbatch.storage import ObjectNotFound, open_read

    out: list[Failure] = []
    try:
        with open_read(uri) as stream:
            while len(out) < limit:
                line = stream.readline(MAX_FAILURE_LINE)
                if not line:
                    break
                if not line.endswith(b"\n"):
                    # Over the cap: skip the rest of this line, show what fits.
                    while (more := stream.readline(MAX_FAILURE_LINE)) and not more.endswith(b"\n"):
                        pass
                    out.append(Failure("?", None, None, line[:1000].decode("utf-8", "replace") + " [cut]"))
                    continue
                failure = parse_failure(line)
                if failure is not None:
                    out.append(failure)
    except (ObjectNotFound, FileNotFoundError):
        return []
    return out
