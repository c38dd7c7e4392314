"""Prometheus metrics for the endpoint: requests, latency, errors, in-flight, batching.

Each app gets its own CollectorRegistry (tests build several apps in one process). With
``--workers N`` every worker process keeps its own counters and ``/metrics`` answers for the
worker that took the scrape; the ``pid`` label on ``tfbatch_worker_info`` says which.
Batcher figures (batch sizes, queue depth) are read from ``ModelServer.batcher_stats()``
at scrape time, so the hot path pays nothing for them.
"""

from __future__ import annotations

import os
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
KNOWN_ROUTES = ("/ping", "/invocations", "/execution-parameters", "/metrics")


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
        self.in_flight = Gauge("tfbatch_requests_in_flight", "HTTP requests being served", registry=self.registry)
        self.request_rows = Histogram(
            "tfbatch_request_body_bytes", "HTTP request body sizes", ["route"],
            buckets=(1e3, 1e4, 1e5, 1e6, 6e6, 1e7, 1e8), registry=self.registry,
        )
        info = Gauge("tfbatch_worker_info", "This worker process", ["pid"], registry=self.registry)
        info.labels(str(os.getpid())).set(1)
        if model_server is not None:
            self.registry.register(_BatcherCollector(model_server))

    def observe(self, route: str, method: str, status: int, seconds: float, body_bytes: int | None) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route).observe(seconds)
        if status >= 400:
            self.errors.labels(route, str(status)).inc()
        if body_bytes is not None:
            self.request_rows.labels(route).observe(body_bytes)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class MetricsMiddleware:
    """Pure ASGI (no BaseHTTPMiddleware): counts and times every HTTP request."""

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
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                body_bytes = int(value) if value.isdigit() else None

        async def send_wrapper(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.metrics.in_flight.dec()
            self.metrics.observe(
                route_label(scope["path"]), scope["method"], status, time.perf_counter() - start, body_bytes
            )
