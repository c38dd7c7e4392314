"""The transform job queue: bounded concurrency, clean stops, resume after a restart.

``JobQueue`` is the ``jobs`` component. ``submit(name)`` queues a stored job; worker threads
(``max_concurrent_jobs`` of them) take jobs in order, build the TransformSpec from the stored
request and run it through ``tfbatch.run_transform`` on the configured engine. Queued jobs
are InProgress, as on SageMaker, where a job waits for instances inside InProgress.

Stop: the engine is wrapped so the job's own stop event (the one its error-rate guard sets)
also fires on StopTransformJob; instances finish the objects they hold and return, the
ledger commits what finished, and the job ends Stopped with its partial outputs in place.

Restart: on start, every job the state says was InProgress is queued again (its ledger skips
what finished, so the outputs match an uninterrupted run), and a job that was Stopping is
Stopped (its process, and so its work, ended with the old server).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from tfbatch.apiserver.progress import JobLog, JobStats
from tfbatch.apiserver.protocol import ApiError
from tfbatch.apiserver.registry import component

log = logging.getLogger("tfbatch.apiserver.jobs")

KIND = "transform-job"
ACTIVE = ("InProgress", "Stopping")
# AWS caps FailureReason at 1024 characters.
MAX_REASON = 1024


class _StoppableEngine:
    """An Engine whose run also stops when the API asks (StopTransformJob)."""

    def __init__(self, engine: Any, requested: threading.Event):
        self.engine = engine
        self.requested = requested
        self.wake = threading.Event()

    @property
    def name(self) -> str:
        return self.engine.name

    def run(self, spec, emit, stop=None, inputs=None):
        from tfbatch.transform.engine import takes_inputs

        stop = stop or threading.Event()
        finished = threading.Event()

        def relay() -> None:
            self.wake.wait()
            if self.requested.is_set() and not finished.is_set():
                stop.set()

        threading.Thread(target=relay, daemon=True, name=f"stop-relay-{spec.output}").start()
        try:
            if inputs is not None and takes_inputs(self.engine):
                return self.engine.run(spec, emit, stop=stop, inputs=inputs)
            return self.engine.run(spec, emit, stop=stop)
        finally:
            finished.set()
            self.wake.set()


class _Run:
    def __init__(self, name: str, resumed: bool = False):
        self.name = name
        self.resumed = resumed  # queued again after a restart: its ledger has finished objects
        self.stop = threading.Event()
        self.engine: _StoppableEngine | None = None
        self.stats: JobStats | None = None

    def request_stop(self) -> None:
        self.stop.set()
        if self.engine is not None:
            self.engine.wake.set()


class JobQueue:
    def __init__(self, config: Any, state: Any):
        self.config = config
        self.state = state
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.runs: dict[str, _Run] = {}
        self.lock = threading.Lock()
        self.closing = False
        self.threads = [threading.Thread(target=self._work, daemon=True, name=f"transform-jobs-{i}")
                        for i in range(config.max_concurrent_jobs)]
        self._resume_interrupted()
        for t in self.threads:
            t.start()

    # ---- what handlers call --------------------------------------------------------

    def submit(self, name: str, resumed: bool = False) -> None:
        with self.lock:
            self.runs[name.lower()] = _Run(name, resumed)
        self.queue.put(name)

    def stop(self, name: str) -> None:
        """Ask a job to stop: Stopping now, Stopped once its instances have returned."""
        doc = self.state.get(KIND, name)
        if doc is None or doc["TransformJobStatus"] not in ACTIVE:
            return
        self.state.update(KIND, name, TransformJobStatus="Stopping", LastModifiedTime=time.time())
        with self.lock:
            run = self.runs.get(name.lower())
        if run is not None:
            run.request_stop()

    def progress(self, name: str) -> dict[str, Any] | None:
        """The job's progress (see ``JobStats.snapshot``): live for a running job, else the last
        saved one; None for a job that never started."""
        with self.lock:
            run = self.runs.get(name.lower())
        if run is not None and run.stats is not None:
            return run.stats.snapshot()
        return self.state.progress(name.lower())

    def close(self) -> None:
        with self.lock:
            runs = list(self.runs.values())
        self.closing = True
        for run in runs:
            # Stopped for the shut-down only: left InProgress, so the next start resumes it.
            run.request_stop()
        for _ in self.threads:
            self.queue.put(None)
        for t in self.threads:
            t.join(timeout=60)

    # ---- the work ------------------------------------------------------------------

    def _resume_interrupted(self) -> None:
        for doc in self.state.list(KIND):
            name, status = doc["TransformJobName"], doc["TransformJobStatus"]
            if status == "Stopping":
                self._finish(name, "Stopped", None)
            elif status == "InProgress":
                log.info("resuming transform job %s from its ledger", name)
                self.submit(name, resumed=True)

    def _work(self) -> None:
        while True:
            name = self.queue.get()
            if name is None:
                return
            with self.lock:
                run = self.runs.get(name.lower())
            if run is None:
                continue
            try:
                self._run(run)
            except Exception as exc:  # noqa: BLE001 - a job's fault must not end the worker thread
                log.exception("transform job %s: unexpected failure", name)
                self._finish(name, "Failed", f"InternalServerError: {type(exc).__name__}: {exc}")
            finally:
                with self.lock:
                    if self.runs.get(name.lower()) is run:
                        del self.runs[name.lower()]

    def _run(self, run: _Run) -> None:
        from tfbatch.api import run_transform
        from tfbatch.apiserver.jobspec import spec_for_job
        from tfbatch.errors import ConfigError, TfbatchError

        doc = self.state.get(KIND, run.name)
        if self.closing or doc is None:
            return  # shutting down: a queued job stays InProgress and runs after the next start
        if doc["TransformJobStatus"] == "Stopping" or run.stop.is_set():
            self._finish(run.name, "Stopped", None)  # stopped while it waited in the queue
            return
        if doc["TransformJobStatus"] != "InProgress":
            return
        started = time.time()
        self.state.update(KIND, run.name, TransformStartTime=doc.get("TransformStartTime", started),
                          LastModifiedTime=started)
        instances = doc.get("TransformResources", {}).get("InstanceCount", 1)
        job_log = JobLog(self.state, run.name, instances, started)
        earlier = self.state.progress(run.name.lower()) if run.resumed else None
        run.stats = JobStats(self.state, run.name.lower(), instances, job_log, earlier=earlier)
        try:
            model = self.state.get("model", doc["ModelName"])
            if model is None:
                raise ConfigError(f"model {doc['ModelName']!r} was deleted before the job started")
            spec = spec_for_job(doc, model, resumed=run.resumed)
            run.engine = _StoppableEngine(self._engine(), run.stop)
            if run.stop.is_set():
                run.engine.wake.set()
            job_log.write(f"tfbatch transform job {run.name}: model {spec.model}, input "
                          f"{spec.input or spec.manifest}, output {spec.output}, {spec.instance_count} instance(s), "
                          f"engine {self.config.engine}" + (" (resumed from its ledger)" if spec.resume and
                                                            run.resumed else ""))
            for i in range(len(job_log.streams)):
                job_log.write(f"instance {i + 1} of {len(job_log.streams)}: starting", i)
            report = run_transform(spec, engine=run.engine, progress=run.stats)
        except (TfbatchError, ApiError) as exc:
            if self.closing:
                return
            kind = "ClientError" if isinstance(exc, (ApiError, *_client_errors())) else "InternalServerError"
            job_log.write(f"job failed: {exc}")
            run.stats.save()
            self._finish(run.name, "Failed", f"{kind}: {exc}")
            return
        run.stats.save()
        for slot in run.stats.snapshot()["instances"]:
            job_log.write(f"instance {slot['instance'] + 1}: {slot['objects']} objects ({slot['failed']} failed), "
                          f"{slot['records']} records ({slot['failed_records']} failed)", slot["instance"])
        for line in report.summary().splitlines():
            job_log.write(line)
        current = self.state.get(KIND, run.name) or {}
        if self.closing and current.get("TransformJobStatus") == "InProgress":
            job_log.write("server shutting down: the job resumes from its ledger when it starts again")
            return
        if run.stop.is_set():
            self._finish(run.name, "Stopped", None)
        elif report.ok:
            self._finish(run.name, "Completed", None)
        else:
            self._finish(run.name, "Failed", _reason(report))

    def _engine(self) -> Any:
        from tfbatch.engines import get_engine

        if self.config.engine == "local":
            from tfbatch.engines.local import LocalEngine

            # Each job in worker processes of its own: jobs run side by side, and endpoints are
            # started from this process, so no job's environment may leak into it.
            return LocalEngine(isolated=True)
        return get_engine(self.config.engine, address=self.config.ray_address)

    def _finish(self, name: str, status: str, reason: str | None) -> None:
        now = time.time()
        fields: dict[str, Any] = {"TransformJobStatus": status, "TransformEndTime": now, "LastModifiedTime": now}
        if reason:
            fields["FailureReason"] = reason[:MAX_REASON]
        self.state.update(KIND, name, **fields)


def _client_errors() -> tuple[type, ...]:
    """What AWS calls a ClientError (the user's artifact, script, job or data): the errors for
    which ``tfbatch transform`` exits with status 2, and their subclasses."""
    from tfbatch.errors import ArtifactError, ConfigError, DependencyMissing, HandlerError, InvalidInput, NotFound

    found, todo = [], [ConfigError, InvalidInput, NotFound, ArtifactError, DependencyMissing, HandlerError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return tuple(found)


def _reason(report: Any) -> str:
    if report.fatal:
        # An instance's fatal error arrives as text ("instance 0: ArtifactError: ...").
        text = "; ".join(report.fatal)
        client = any(f"{cls.__name__}: " in text for cls in _client_errors())
        return ("ClientError: " if client else "InternalServerError: ") + text
    if report.stopped:
        return "ClientError: " + report.stopped
    first = report.errors[0]["error"] if report.errors else "see the error report"
    return (f"ClientError: {report.failed} of {report.objects} objects had records that failed; first: {first}. "
            f"Every failure is in {report.error_report or report.output + '/_tfbatch/errors.jsonl'}; "
            "outputs of the records that succeeded were written")


@component("jobs")
def make_job_queue(config: Any, state: Any) -> JobQueue:
    return JobQueue(config, state)
