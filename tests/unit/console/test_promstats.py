"""Worker figures from a real ``tfbatch serve`` metrics registry's text (no server: the same
ServeMetrics object renders what its /metrics route would answer)."""

from __future__ import annotations

import pytest

from tfbatch.console.promstats import parse_scrape, quantile, worker_stats
from tfbatch.serve.metrics import ServeMetrics


def _text(metrics: ServeMetrics) -> str:
    body, _ = metrics.render()
    return body.decode()


def test_rates_percentiles_and_errors_from_two_scrapes():
    metrics = ServeMetrics()
    for _ in range(50):
        metrics.observe("/ping", "GET", 200, 0.0001, None)  # health checks are not traffic
    for _ in range(90):
        metrics.observe("/invocations", "POST", 200, 0.003, 100)  # in the (0.002, 0.005] bucket
    for _ in range(10):
        metrics.observe("/invocations", "POST", 500, 0.7, 100)  # in (0.5, 1]
    first = parse_scrape(_text(metrics), at=100.0)
    assert (first.requests, first.errors) == (100, 10)
    lifetime = worker_stats("w0", first)
    assert lifetime.requests_per_second == 0.0 and lifetime.requests == 100 and lifetime.errors == 10
    assert 2.0 < lifetime.p50_ms <= 5.0 and 500 < lifetime.p99_ms <= 1000

    for _ in range(40):
        metrics.observe("/endpoints/{name}/invocations", "POST", 200, 0.02, 100)  # (0.01, 0.025]
    later = worker_stats("w0", parse_scrape(_text(metrics), at=104.0), first)
    assert later.requests_per_second == pytest.approx(10.0)  # 40 requests in 4 s
    assert 10 < later.p50_ms <= 25 and 10 < later.p99_ms <= 25  # only what happened since the first look


def test_quantile_edges():
    assert quantile(0.5, {}) is None and quantile(0.5, {1.0: 0, float("inf"): 0}) is None
    assert quantile(0.5, {1.0: 0, 2.0: 10, float("inf"): 10}) == pytest.approx(1.5)
    assert quantile(0.99, {1.0: 0, 2.0: 0, float("inf"): 10}) == 2.0  # open-ended bucket: its floor


def test_oversized_metrics_text_is_refused_by_size():
    with pytest.raises(ValueError, match="over the 4194304 this reads"):
        parse_scrape("#" * (4 * 1024 * 1024 + 1), 0.0)
