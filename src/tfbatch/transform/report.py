"""What a transform job tells its caller: per-object results, record failures, the job report.

Everything here is a plain dataclass of str/int/float/list so it pickles across worker
processes (and Ray) unchanged: exceptions are turned into ``RecordFailure`` entries before
they leave the pipeline.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from tfbatch.errors import TfbatchError

# Failures that waiting may cure: such an object is not recorded as finished, so a re-run
# tries it again.
TRANSIENT_STATUS = frozenset({429, 503, 504})
# What an object-level exception that is not one of tfbatch's own errors is reported as: a
# storage or environment failure (connection reset, permission denied, 5xx after retries),
# never bad input. Decoding problems are tfbatch errors (RecordError, 4xx) by the time
# they leave the record readers.
STORAGE_FAILURE_STATUS = 503


@dataclass(frozen=True)
class RecordFailure:
    """One line of the error report. ``record``/``offset`` are None for object-level failures."""

    object: str
    record: int | None
    offset: int | None
    error: str
    status: int = 500
    retry: bool = False  # failed to process (not the input's fault): a resumed job runs it again

    @property
    def transient(self) -> bool:
        return self.retry or self.status in TRANSIENT_STATUS

    @classmethod
    def from_exception(cls, key: str, record: int | None, offset: int | None, exc: BaseException) -> "RecordFailure":
        if isinstance(exc, TfbatchError):
            return cls(key, record, offset, exc.message, exc.status, exc.status in TRANSIENT_STATUS)
        return cls(key, record, offset, f"{type(exc).__name__}: {exc}", STORAGE_FAILURE_STATUS, True)

    def to_json(self) -> str:
        data = asdict(self)
        if not data["retry"]:
            del data["retry"]  # bad-input lines keep the shape they always had
        return json.dumps(data, separators=(",", ":"))


@dataclass
class ObjectResult:
    """The outcome of one input object (the message an instance sends per object)."""

    key: str
    ok: bool
    records: int = 0
    failed_records: int = 0
    output_bytes: int = 0
    written: bool = False  # a .out exists for it
    seconds: float = 0.0
    failures: list[RecordFailure] = field(default_factory=list)
    failures_dropped: int = 0  # beyond the per-object cap kept in memory

    @property
    def error(self) -> str | None:
        return self.failures[0].error if self.failures else None

    @property
    def transient(self) -> bool:
        return any(f.transient for f in self.failures)


class _Counts:
    """Counting finished objects, shared by an instance's summary and the job's report."""

    objects: int
    succeeded: int
    failed: int
    records: int
    failed_records: int
    bad_input: int
    failed_to_process: int

    def count(self, result: ObjectResult) -> None:
        self.objects += 1
        self.records += result.records
        self.failed_records += result.failed_records
        if result.ok:
            self.succeeded += 1
        else:
            self.failed += 1
            if result.transient:
                self.failed_to_process += 1
            else:
                self.bad_input += 1


@dataclass
class InstanceSummary(_Counts):
    """What one instance reports when its partition is done."""

    instance: int
    objects: int = 0
    succeeded: int = 0
    failed: int = 0
    skipped: int = 0
    records: int = 0
    failed_records: int = 0
    bad_input: int = 0
    failed_to_process: int = 0
    seconds: float = 0.0
    batches: dict[str, Any] = field(default_factory=dict)
    fatal: str | None = None  # the instance itself could not run (model load failed, ...)


@dataclass
class JobReport(_Counts):
    """The job's result; also written as ``<output>/_tfbatch/report.json``."""

    job: str = ""
    objects: int = 0  # objects processed in this run
    succeeded: int = 0
    failed: int = 0
    skipped: int = 0  # finished by an earlier run (ledger)
    records: int = 0
    failed_records: int = 0
    bad_input: int = 0  # objects finished with recorded failures (permanent; --retry-failed redoes them)
    failed_to_process: int = 0  # objects left not done (storage/transient); a resumed job retries them
    stopped: str | None = None  # why the job stopped before its end (--max-error-rate); resumable
    seconds: float = 0.0
    instances: int = 1
    processes: int = 1  # the worker processes (local engine) or actors (Ray) that ran the instances
    concurrency: int = 0
    output: str = ""
    error_report: str | None = None
    errors: list[dict] = field(default_factory=list)  # the first few failures, for the summary
    fatal: list[str] = field(default_factory=list)
    batches: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.failed == 0 and not self.fatal and not self.stopped

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        data["records_per_second"] = round(self.records_per_second, 2)
        return data

    def summary(self) -> str:
        lines = [
            f"transform: {self.succeeded}/{self.objects} objects succeeded, {self.failed} failed "
            f"in {self.seconds:.1f}s"
            + (f" ({self.skipped} already done, skipped)" if self.skipped else "")
            + f"; {self.records} records, {self.failed_records} failed, {self.records_per_second:.1f} records/s"
            + (f"; {self.processes} worker processes for {self.instances} instance(s)"
               if self.processes > self.instances else "")
        ]
        if self.failed:
            lines.append(f"  {self.bad_input} objects with bad input (recorded; --retry-failed redoes them), "
                         f"{self.failed_to_process} failed to process (a resumed run retries them)")
        if self.stopped:
            lines.append(f"  stopped early: {self.stopped}")
        for name, stats in self.batches.items():
            # Knobs the job chose itself (the image batch predict's tuner) or was told.
            if isinstance(stats, dict) and (stats.get("predict") == "image-batch" or stats.get("lane") == "batch"):
                lines.append("  " + lane_choices(name, stats))
        for message in self.fatal:
            lines.append(f"  instance failed: {message}")
        for err in self.errors[:5]:
            where = err["object"] + (f" record {err['record']}" if err.get("record") is not None else "")
            lines.append(f"  {where}: {err['error']}")
        if self.error_report:
            lines.append(f"  error report: {self.error_report}")
        return "\n".join(lines)


def lane_choices(name: str, stats: dict[str, Any]) -> str:
    """One line saying what the batch lane ran with and whether it chose that or was told to."""
    tuned = stats.get("autotune") or {}
    how = "auto-tuned" if tuned else "set by flags"
    line = (f"{name}: batch size {stats.get('max_batch_size')}, lane workers {stats.get('workers')}, "
            f"up to {stats.get('in_flight_objects')} objects in flight ({how}; "
            "--max-batch-size, --lane-workers and --max-concurrent-transforms override)")
    by = stats.get("chosen_by") or {}
    if by:
        line += (f"; batch size by {by.get('max_batch_size')}, workers by {by.get('workers')}, "
                 f"objects in flight by {by.get('in_flight_objects')}")
    if tuned.get("why"):
        line += f"; tuner: {tuned['why']}"
    return line
