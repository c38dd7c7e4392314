"""Prometheus metrics for the endpoint: requests, latency, errors, in-flight, batching.

Each app gets its own CollectorRegistry (tests build several apps in one process). With
``--workers N`` the supervisor gives every worker one ``PROMETHEUS_MULTIPROC_DIR``; counters
and histograms then live in files there and any worker's ``/metrics`` answers for all of them
(prometheus-client's multiprocess mode). Batcher figures (batch sizes, queue depth) are read
from ``ModelServer.batcher_stats()`` at scrape time, so the hot path pays nothing for them;
they are the scraped worker's own. Label values come from fixed sets: a client's
path or method never creates a new series.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tfbatch.serve.logs import log_access

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
KNOWN_ROUTES = ("/ping", "/invocations", "/execution-parameters", "/metrics")
KNOWN_METHODS = frozenset({"GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"})
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def method_label(method: str) -> str:
    """HTTP methods are arbitrary tokens a client chooses; anything unusual is "other"."""
    return method if method in KNOWN_METHODS else "other"


def multiprocess() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))


def route_label(path: str) -> str:
    """A bounded set of labels: request paths carry model names, which must not explode series."""
    if path in KNOWN_ROUTES:
        return path
    if path.startswith("/endpoints/") and path.endswith("/invocations"):
        return "/endpoints/{name}/invocations"
    if path.startswith("/v1/models/"):
        for verb in (":predict", ":classify", ":regress"):
            if path.endswith(verb):
                return "/v1/models/{model}" + verb
        return "/v1/models/{model}/metadata" if path.endswith("/metadata") else "/v1/models/{model}"
    return "other"


class _BatcherCollector:
    """Reads batcher stats on scrape. Keys are whatever DynamicBatcher.stats reports."""

    def __init__(self, model_server: Any):
        self.model_server = model_server

    def collect(self):
        stats_fn = getattr(self.model_server, "batcher_stats", None)
        stats = stats_fn() if callable(stats_fn) else {}
        batches = CounterMetricFamily("tfbatch_batches", "Model batches run", labels=["batcher"])
        failed = CounterMetricFamily("tfbatch_batch_failures", "Model batches that raised", labels=["batcher"])
        rows = CounterMetricFamily("tfbatch_batch_rows", "Rows run in model batches", labels=["batcher"])
        sizes = HistogramMetricFamily("tfbatch_batch_size", "Rows per model batch", labels=["batcher"])
        queued = GaugeMetricFamily("tfbatch_queue_depth_rows", "Rows waiting for a batch", labels=["batcher"])
        for name, s in sorted(stats.items()):
            batches.add_metric([name], _number(s, "batches"))
            failed.add_metric([name], _number(s, "failed_batches"))
            rows.add_metric([name], _number(s, "rows"))
            queued.add_metric([name], _number(s, "queue_depth"))
            histogram = {int(k): int(v) for k, v in (s.get("batch_sizes") or {}).items()}
            cumulative, buckets = 0, []
            for bound in BATCH_BUCKETS:
                cumulative = sum(c for size, c in histogram.items() if size <= bound)
                buckets.append((str(bound), cumulative))
            buckets.append(("+Inf", sum(histogram.values())))
            total = float(sum(size * c for size, c in histogram.items()))
            sizes.add_metric([name], buckets, total)
        return [batches, failed, rows, sizes, queued]


def _number(stats: dict, *keys: str) -> float:
    for key in keys:
        value = stats.get(key)
        if isinstance(value, (int, float)):
            return float(value)
    return 0.0


class ServeMetrics:
    def __init__(self, model_server: Any | None = None):
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "tfbatch_requests", "HTTP requests answered", ["route", "method", "status"], registry=self.registry
        )
        self.errors = Counter(
            "tfbatch_errors", "HTTP requests answered with status >= 400", ["route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "tfbatch_request_duration_seconds", "HTTP request latency", ["route"],
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        # livesum: the in-flight figures of all live workers added up.
        self.in_flight = Gauge(
            "tfbatch_requests_in_flight", "HTTP requests being served", registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.request_rows = Histogram(
            "tfbatch_request_body_bytes", "HTTP request body sizes", ["route"],
            buckets=(1e3, 1e4, 1e5, 1e6, 6e6, 1e7, 1e8), registry=self.registry,
        )
        if multiprocess():  # the multiprocess collector adds the pid label itself
            Gauge("tfbatch_worker_info", "Worker processes", registry=self.registry, multiprocess_mode="liveall").set(1)
        else:
            Gauge("tfbatch_worker_info", "Worker processes", ["pid"], registry=self.registry).labels(
                str(os.getpid())
            ).set(1)
        # What /metrics renders: in multiprocess mode the values come from every worker's files.
        self.scrape_registry = self.registry
        if multiprocess():
            from prometheus_client import multiprocess as mp

            self.scrape_registry = CollectorRegistry()
            mp.MultiProcessCollector(self.scrape_registry)
        if model_server is not None:
            self.scrape_registry.register(_BatcherCollector(model_server))

    def observe(self, route: str, method: str, status: int, seconds: float, body_bytes: int | None) -> None:
        self.requests.labels(route, method_label(method), str(status)).inc()
        self.latency.labels(route).observe(seconds)
        if status >= 400:
            self.errors.labels(route, str(status)).inc()
        if body_bytes is not None:
            self.request_rows.labels(route).observe(body_bytes)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.scrape_registry), CONTENT_TYPE_LATEST


class MetricsMiddleware:
    """Pure ASGI (no BaseHTTPMiddleware): counts, times and access-logs every HTTP request.

    Every answer carries an ``x-request-id``: the client's own when it sent a sane one, else a
    fresh one, so a client's report and the access log meet on the same id.
    """

    def __init__(self, app: Any, metrics: ServeMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        body_bytes = None
        request_id = None
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                body_bytes = int(value) if value.isdigit() else None
            elif name == b"x-request-id" and 0 < len(value) <= 128 and value.isascii():
                request_id = value.decode("ascii")
        request_id = request_id or uuid.uuid4().hex
        sent = 0
        counted = False

        def count() -> None:
            # Once per request: just before its last body message goes out (a client that has the
            # whole answer, then scrapes /metrics, finds its request counted), or when the app
            # ends without one (a failure, a disconnect).
            nonlocal counted
            if counted:
                return
            counted = True
            self.metrics.in_flight.dec()
            seconds = time.perf_counter() - start
            self.metrics.observe(route_label(scope["path"]), scope["method"], status, seconds, body_bytes)
            log_access(request_id, method_label(scope["method"]), scope["path"][:512], status, sent, seconds)

        async def send_wrapper(message):
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = message["status"]
                message = dict(message, headers=[*message.get("headers", ()), (b"x-request-id", request_id.encode())])
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
                if not message.get("more_body", False):
                    count()
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            count()
