"""A whole transform job: plan, run the instances on the engine it is given, report.

``run_job`` is what ``tfbatch.run_transform`` (the Python API) and ``tfbatch transform``
call once they have picked an engine. It returns a JobReport and also writes it, with the
error report, into the output location, so the outcome of a job outlives the process that
ran it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from tfbatch.storage import is_local, normalize
from tfbatch.storage.io import is_temp_name
from tfbatch.storage.lock import OutputLock
from tfbatch.transform.engine import Engine, takes_inputs
from tfbatch.transform.ledger import Ledger
from tfbatch.transform.pipeline import output_uri
from tfbatch.transform.plan import JobInputs, Plan, iter_assigned, iter_inputs, make_plan
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
    done = Ledger.for_spec(spec).done_keys(retry_failed=spec.retry_failed) if spec.resume else set()
    return make_plan(spec, done)


def run_job(spec: TransformSpec, engine: Engine, *, progress: str | Progress | None = None) -> JobReport:
    """Run a transform job's instances on ``engine``, keep the ledger, write and return the report.

    ``progress``: "auto" (a bar on a terminal, else log lines on stderr), "bar", "log",
    a Progress, or None (quiet).
    """
    from tfbatch.storage.s3options import set_job_options

    set_job_options(kms_key_id=spec.kms_key_id)  # the driver's own writes (ledger, report) too
    # One job per output prefix for the whole run: only then is it safe to delete the
    # temporary files a killed run left behind, and to compact the ledger at the end.
    with OutputLock(normalize(spec.output), wait=spec.wait_lock) as output_lock:
        return _run_locked(spec, engine, progress, output_lock)


def _run_locked(spec: TransformSpec, engine: Engine, progress, output_lock: OutputLock) -> JobReport:
    ledger = Ledger.for_spec(spec)
    bar = progress if isinstance(progress, Progress) else Progress(progress or "off")
    remove_stale_temp_files(normalize(spec.output))
    done = ledger.done_keys(retry_failed=spec.retry_failed) if spec.resume else set()
    erred = ledger.keys_with_errors()
    earlier_failures = 0 if spec.retry_failed or not spec.resume else len(erred)
    report = JobReport(
        job=spec.fingerprint(), instances=spec.instance_count, concurrency=spec.concurrency, output=spec.output
    )
    lock = threading.Lock()
    stop = threading.Event()
    saw_failures = threading.Event()

    def emit(result: ObjectResult) -> None:
        if result.failures or not result.ok:
            saw_failures.set()
        with lock:
            report.count(result)
            if not result.ok:
                for failure in result.failures:
                    if len(report.errors) < ERRORS_IN_REPORT:
                        report.errors.append({"object": failure.object, "record": failure.record,
                                              "offset": failure.offset, "error": failure.error})
                log.warning("%s: %d of %d records failed: %s", result.key, result.failed_records,
                            result.records, result.error)
            if (not stop.is_set() and report.objects >= spec.error_rate_after
                    and report.failed > spec.max_error_rate * report.objects):
                report.stopped = (
                    f"{report.failed} of the first {report.objects} objects failed (more than --max-error-rate "
                    f"{spec.max_error_rate:g}); first error: {report.errors[0]['error'] if report.errors else '?'}. "
                    "Fix the cause and run the same command again: finished objects are kept"
                )
                stop.set()
        bar.update(result)

    inputs = None
    if takes_inputs(engine):
        # The job's one listing pass; the bar's total arrives when it ends.
        inputs = JobInputs.for_spec(spec, done, on_total=bar.set_total if bar.mode != "off" else None)
    elif bar.mode != "off":
        threading.Thread(target=_count_todo, args=(spec, done, bar), daemon=True, name="count-inputs").start()
    started = time.monotonic()
    try:
        summaries = engine.run(spec, emit, stop=stop, inputs=inputs) if inputs is not None else engine.run(
            spec, emit, stop=stop)
    finally:
        bar.close()
    report.seconds = time.monotonic() - started
    _merge(report, summaries)
    if output_lock.lost:
        report.fatal.append(output_lock.lost)
    ledger.compact()
    # Standing failures can only exist if the ledger had some when loaded or this run saw one;
    # a fatal instance may have committed entries whose results never reached this process.
    report.error_report = ledger.write_error_report(
        failures_possible=bool(erred) or saw_failures.is_set() or bool(report.fatal)
        or any(s.fatal for s in summaries))
    if earlier_failures:
        report.fatal.append(
            f"{earlier_failures} objects finished with failed records in an earlier run (see the error report); "
            "rerun with --retry-failed to redo them"
        )
    ledger.write_report(report.to_dict())
    return report


def remove_stale_temp_files(output: str) -> int:
    """Delete temporary files a killed run left in a local output folder.

    Call only while holding the output's lock: a live job's temporary files look the same.
    On S3 an unfinished upload is never visible, so nothing is needed there.
    """
    if not is_local(output) or not os.path.isdir(output):
        return 0
    removed = 0
    for folder, _dirs, files in os.walk(output):
        for name in files:
            if is_temp_name(name):
                try:
                    os.unlink(os.path.join(folder, name))
                    removed += 1
                except FileNotFoundError:
                    pass
    return removed


def _merge(report: JobReport, summaries: list[InstanceSummary]) -> None:
    report.processes = max(1, len(summaries))
    for s in summaries:
        report.skipped += s.skipped
        if s.fatal:
            report.fatal.append(f"instance {s.instance}: {s.fatal}")
        for name, stats in (s.batches or {}).items():
            report.batches[f"{s.instance}:{name}"] = stats


def _count_todo(spec: TransformSpec, done: set[str], bar: Progress) -> None:
    try:
        bar.set_total(sum(1 for _i, _ref, is_done in iter_assigned(iter_inputs(spec), 1, done) if not is_done))
    except Exception:  # the total only feeds the bar and ETA; the job itself reports listing errors
        log.debug("counting inputs failed", exc_info=True)
