"""The console on ``tfbatch api``: its state read as a ``ConsoleSource``, and the routes mounted.

The console (``tfbatch.console``, a layer below) asks bounded questions; this module answers
them from what the server already keeps: the Describe documents in SQLite (jobs, models,
endpoints and their configs), each job's progress aggregate (``JobQueue.progress``: live, or
the last one saved), its CloudWatch log events, the job's own ``_tfbatch/report.json`` and
``errors.jsonl`` in its output, and each endpoint instance's ``/metrics``.

Sign-in: the API takes SigV4-signed calls, so the console takes its own token, never an AWS
secret: ``TFBATCH_CONSOLE_TOKEN``, else one generated on first start and kept (mode 0600) in
``<state-dir>/console-token`` so a restart does not sign browsers out. Start-up prints a
sign-in link.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tfbatch.apiserver.progress import GROUP as JOB_LOG_GROUP
from tfbatch.apiserver.registry import add_routes, component
from tfbatch.apiserver.runner import KIND as JOB
from tfbatch.console.app import console_routes
from tfbatch.console.source import (
    ALL_INSTANCES,
    FAILURE_LINES,
    FINAL_STATUSES,
    EndpointRow,
    InstanceCounts,
    Failure,
    JobDetail,
    JobPage,
    JobRow,
    ModelRow,
    Point,
    WorkerStats,
    read_failures,
    settings_from_report,
)

log = logging.getLogger("tfbatch.apiserver.console")

TOKEN_FILE = "console-token"
METRICS_TIMEOUT_S = 1.0
MIN_SCRAPE_GAP_S = 1.0
REPORTS_KEPT = 256


class ApiConsoleSource:
    """A ConsoleSource over the server's state and components (``jobs``, ``endpoints``)."""

    def __init__(self, state: Any, components: dict[str, Any]):
        self.state = state
        self.components = components
        self._reports: dict[str, dict] = {}  # final jobs' report.json, read once
        self._scrapes: dict[str, Any] = {}  # instance id -> (its last metrics scrape, what it showed)
        self._lock = threading.Lock()

    # ---- jobs ----------------------------------------------------------------------

    def _progress_doc(self, name: str) -> dict[str, Any]:
        jobs = self.components.get("jobs")
        doc = jobs.progress(name) if jobs is not None else self.state.progress(name.lower())
        return doc or {}

    def _row(self, doc: dict[str, Any]) -> JobRow:
        name = doc["TransformJobName"]
        p = self._progress_doc(name)
        started, ended = doc.get("TransformStartTime"), doc.get("TransformEndTime")
        seconds = ((ended or time.time()) - started) if started else 0.0
        records = int(p.get("records", 0))
        return JobRow(name, doc["TransformJobStatus"], doc.get("CreationTime"), started, ended,
                      int(doc.get("TransformResources", {}).get("InstanceCount", 1)), int(p.get("objects", 0)),
                      p.get("total"), records, records / seconds if seconds > 0 else 0.0,
                      int(p.get("failed_records", 0)), int(p.get("failed", 0)))

    def list_jobs(self, *, status: str | None = None, offset: int = 0, limit: int = 50) -> JobPage:
        # One page straight from SQLite (its created index, the status read inside the
        # document): parsing every job's document per page view costs ~0.1 s per 5,000 jobs.
        # State has no paging method of its own yet, so its one query helper is used here.
        where, args = "kind = ?", [JOB]
        if status:
            where += " AND json_extract(doc, '$.TransformJobStatus') = ?"
            args.append(status)
        total = self.state._run(f"SELECT COUNT(*) FROM resources WHERE {where}", tuple(args)).fetchone()[0]
        rows = self.state._run(f"SELECT doc FROM resources WHERE {where} ORDER BY created DESC, key DESC "
                               "LIMIT ? OFFSET ?", (*args, limit, offset)).fetchall()
        return JobPage([self._row(json.loads(r[0])) for r in rows], total, offset, limit)

    def _output(self, doc: dict[str, Any]) -> str:
        return str(doc.get("TransformOutput", {}).get("S3OutputPath", "")).rstrip("/")

    def _report(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The job's report.json once it has ended (read once, kept for the last few jobs)."""
        name = doc["TransformJobName"].lower()
        if doc.get("TransformJobStatus") not in FINAL_STATUSES:
            return {}
        with self._lock:
            if name in self._reports:
                return self._reports[name]
        from tfbatch.storage import ObjectNotFound, read_text

        try:
            report = json.loads(read_text(f"{self._output(doc)}/_tfbatch/report.json"))
        except (ObjectNotFound, FileNotFoundError, ValueError, OSError):
            report = {}
        with self._lock:
            if len(self._reports) >= REPORTS_KEPT:
                self._reports.pop(next(iter(self._reports)))
            self._reports[name] = report
        return report

    def job(self, name: str) -> JobDetail | None:
        doc = self.state.get(JOB, name)
        if doc is None:
            return None
        source = doc.get("TransformInput", {}).get("DataSource", {}).get("S3DataSource", {})
        details = [("Model", doc.get("ModelName")), ("Input", f"{source.get('S3DataType', '')} {source.get('S3Uri', '')}"),
                   ("Content type", doc.get("TransformInput", {}).get("ContentType")),
                   ("Split type", doc.get("TransformInput", {}).get("SplitType")),
                   ("Batch strategy", doc.get("BatchStrategy")), ("Max payload (MB)", doc.get("MaxPayloadInMB")),
                   ("Instance type", doc.get("TransformResources", {}).get("InstanceType")),
                   ("ARN", doc.get("TransformJobArn"))]
        report = self._report(doc)
        counts = [InstanceCounts(int(c.get("instance", i)), int(c.get("objects", 0)), int(c.get("records", 0)),
                                 int(c.get("failed", 0)), int(c.get("failed_records", 0)))
                  for i, c in enumerate(self._progress_doc(name).get("instances") or [])]
        return JobDetail(self._row(doc), output=self._output(doc), error_report=report.get("error_report"),
                         message=doc.get("FailureReason"),
                         details=[(k, str(v)) for k, v in details if v not in (None, "")],
                         settings=settings_from_report(report) if report else [], instances=counts)

    def progress(self, name: str) -> dict[int, list[Point]]:
        p = self._progress_doc(name)
        points = [Point(float(t), int(o), int(r), int(f)) for t, o, r, f in p.get("series", [])]
        if points and points[0].t > 0:
            points.insert(0, Point(0.0, 0, 0, 0))  # the chart starts at the job's start
        # The server keeps one series for the whole job (per-instance totals beside it).
        instances = p.get("instances") or []
        return {0 if len(instances) <= 1 else ALL_INSTANCES: points}

    def failures(self, name: str, limit: int = FAILURE_LINES) -> list[Failure]:
        doc = self.state.get(JOB, name)
        if doc is None:
            return []
        report = self._report(doc)
        return read_failures(report.get("error_report"), limit) if report else []

    def log_tail(self, name: str, limit: int = 100) -> list[str]:
        streams = [s["stream"] for s in self.state.log_streams(JOB_LOG_GROUP, prefix=f"{name}/")]
        if not streams:
            return []
        events = self.state.log_events(JOB_LOG_GROUP, streams, limit=limit, descending=True)
        return [f"{time.strftime('%H:%M:%S', time.gmtime(ts / 1000))} {stream.split('/', 1)[-1]}: {message}"
                for _id, stream, ts, _ingest, message in reversed(events)]

    # ---- endpoints and models ------------------------------------------------------

    def endpoints(self) -> list[EndpointRow]:
        rows, seen = [], set()
        for doc in sorted(self.state.list("endpoint"), key=lambda d: d.get("CreationTime") or 0, reverse=True):
            config = self.state.get("endpoint-config", doc.get("EndpointConfigName", "")) or {}
            models = ", ".join(v.get("ModelName", "?") for v in config.get("ProductionVariants", []))
            rows.append(EndpointRow(doc["EndpointName"], doc.get("EndpointStatus", "?"), models,
                                    doc.get("CreationTime"), workers=self._workers(doc["EndpointName"], seen)))
        with self._lock:  # forget processes that are gone (an update replaces them all)
            for gone in set(self._scrapes) - seen:
                del self._scrapes[gone]
        return rows

    def _workers(self, endpoint: str, seen: set[str]) -> list[WorkerStats]:
        from tfbatch.console.promstats import parse_scrape, worker_stats

        workers = self.components.get("endpoints")
        if workers is None:
            return []
        # EndpointWorkers has no public listing of its processes; its routing table is read
        # under its own lock (the same one its request path takes).
        with workers._lock:
            route = workers._routes.get(endpoint.lower())
            procs = [(v.name, p) for v in route.variants for p in v.processes] if route else []
        out = []
        for variant, proc in procs:
            seen.add(proc.instance_id)
            label = f"{variant} {proc.instance_id}"
            now = time.monotonic()
            with self._lock:
                before, shown = self._scrapes.get(proc.instance_id, (None, None))
            if before is not None and shown is not None and now - before.at < MIN_SCRAPE_GAP_S:
                out.append(shown)  # several open pages poll: one scrape a second serves them all
                continue
            try:
                scrape = parse_scrape(_get(f"{proc.url}/metrics"), now)
            except Exception as exc:  # a process starting or stopping: shown, not fatal to the page
                log.debug("metrics of %s: %s", label, exc)
                out.append(WorkerStats(label + " (no metrics)"))
                continue
            stats = worker_stats(label, scrape, before)
            with self._lock:
                self._scrapes[proc.instance_id] = (scrape, stats)
            out.append(stats)
        return out

    def models(self) -> list[ModelRow]:
        from tfbatch.apiserver.models import containers_of, model_data_url

        rows = []
        for doc in sorted(self.state.list("model"), key=lambda d: d.get("CreationTime") or 0, reverse=True):
            try:
                where, container = containers_of(doc)[0]
                artifact = model_data_url(container, where)
            except Exception:  # a stored model always has a container; show the rest if not
                artifact = "?"
            rows.append(ModelRow(doc.get("ModelName", "?"), str(artifact), doc.get("CreationTime"),
                                 [("ARN", doc.get("ModelArn", ""))]))
        return rows


def _get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=METRICS_TIMEOUT_S) as answer:  # loopback only
        return answer.read(4 * 1024 * 1024 + 1).decode("utf-8", "replace")


def console_token(config: Any) -> str:
    """The console's sign-in token: the environment's, else the state folder's (made on first use)."""
    given = os.environ.get("TFBATCH_CONSOLE_TOKEN")
    if given:
        return given
    path = Path(config.state_dir) / TOKEN_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(24)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


class Console:
    """The ``console`` component: the source and the token the routes read on each request."""

    def __init__(self, config: Any, state: Any):
        self.token = console_token(config)
        # Components start one by one at start-up; the jobs and endpoints ones are taken
        # from the running app's context when a page asks (see ``_source``).
        self.source = ApiConsoleSource(state, {})
        print(f"tfbatch api: console at http://{config.host}:{config.port}/console/ "
              f"(sign in: http://{config.host}:{config.port}/console/login?token={self.token})",
              file=sys.stderr, flush=True)


@component("console")
def make_console(config: Any, state: Any) -> Console:
    return Console(config, state)


def _console(request) -> Console:
    return request.app.state.context.components["console"]


def _source(request) -> ApiConsoleSource:
    console = _console(request)
    console.source.components = request.app.state.context.components
    return console.source


add_routes(console_routes(_source, token=lambda request: _console(request).token))
