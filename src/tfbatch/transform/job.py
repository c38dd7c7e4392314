"""A whole transform job: plan, run the instances on the engine it is given, report.

``run_job`` is what ``tfbatch.run_transform`` (the Python API) and ``tfbatch transform``
call once they have picked an engine. It returns a JobReport and also writes it, with the
error report, into the output location, so the outcome of a job outlives the process that
ran it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from tfbatch.storage import normalize
from tfbatch.transform.engine import Engine
from tfbatch.transform.ledger import Ledger
from tfbatch.transform.pipeline import output_uri
from tfbatch.transform.plan import Plan, iter_inputs, make_plan
from tfbatch.transform.progress import Progress
from tfbatch.transform.report import InstanceSummary, JobReport, ObjectResult
from tfbatch.transform.spec import TransformSpec

log = logging.getLogger(__name__)

__all__ = ["run_job", "plan_transform", "as_spec", "output_uri", "iter_inputs", "JobReport", "ObjectResult"]

ERRORS_IN_REPORT = 20


def as_spec(spec: TransformSpec | None, fields: dict[str, Any]) -> TransformSpec:
    """``spec`` with ``fields`` laid over it, or a spec built from ``fields`` alone."""
    if spec is None:
        return TransformSpec.build(**fields)
    if fields:
        return TransformSpec.build(**{**spec.model_dump(), **fields})
    return spec


def plan_transform(spec: TransformSpec | None = None, **fields: Any) -> Plan:
    """What a run would do (objects per instance, what the ledger says is done); runs nothing."""
    spec = as_spec(spec, fields)
    done = Ledger.for_spec(spec).done_keys() if spec.resume else set()
    return make_plan(spec, done)


def run_job(spec: TransformSpec, engine: Engine, *, progress: str | Progress | None = None) -> JobReport:
    """Run a transform job's instances on ``engine``, keep the ledger, write and return the report.

    ``progress``: "auto" (a bar on a terminal, else log lines on stderr), "bar", "log",
    a Progress, or None (quiet).
    """
    from tfbatch.storage.s3options import set_job_options

    set_job_options(kms_key_id=spec.kms_key_id)  # the driver's own writes (ledger, report) too
    ledger = Ledger.for_spec(spec)
    bar = progress if isinstance(progress, Progress) else Progress(progress or "off")
    ledger.remove_stale_temp_files(normalize(spec.output))
    done = ledger.done_keys() if spec.resume else set()
    earlier_failures = len(ledger.keys_with_errors() & done)
    report = JobReport(
        job=spec.fingerprint(), instances=spec.instance_count, concurrency=spec.concurrency, output=spec.output
    )
    lock = threading.Lock()

    def emit(result: ObjectResult) -> None:
        with lock:
            report.count(result)
            if not result.ok:
                for failure in result.failures:
                    if len(report.errors) < ERRORS_IN_REPORT:
                        report.errors.append({"object": failure.object, "record": failure.record,
                                              "offset": failure.offset, "error": failure.error})
                log.warning("%s: %d of %d records failed: %s", result.key, result.failed_records,
                            result.records, result.error)
        bar.update(result)

    if bar.mode != "off":
        threading.Thread(target=_count_todo, args=(spec, done, bar), daemon=True, name="count-inputs").start()
    started = time.monotonic()
    try:
        summaries = engine.run(spec, emit)
    finally:
        bar.close()
    report.seconds = time.monotonic() - started
    _merge(report, summaries)
    report.error_report = ledger.write_error_report()
    if earlier_failures:
        report.fatal.append(
            f"{earlier_failures} objects finished with failed records in an earlier run (see the error report); "
            "rerun with resume off to redo them"
        )
    ledger.write_report(report.to_dict())
    return report


def _merge(report: JobReport, summaries: list[InstanceSummary]) -> None:
    for s in summaries:
        report.skipped += s.skipped
        if s.fatal:
            report.fatal.append(f"instance {s.instance}: {s.fatal}")
        for name, stats in (s.batches or {}).items():
            report.batches[f"{s.instance}:{name}"] = stats


def _count_todo(spec: TransformSpec, done: set[str], bar: Progress) -> None:
    try:
        bar.set_total(sum(1 for ref in iter_inputs(spec) if ref.key not in done))
    except Exception:  # the total only feeds the bar and ETA; the job itself reports listing errors
        log.debug("counting inputs failed", exc_info=True)
