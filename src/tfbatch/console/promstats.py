"""An endpoint worker's figures for the console, from the Prometheus text its ``/metrics`` serves.

``tfbatch serve`` counts requests (``tfbatch_requests``), errors (``tfbatch_errors``) and
latency (``tfbatch_request_duration_seconds``, a histogram) per route. The console shows
requests/s, P50/P99 and errors per worker: the rate and the percentiles come from the
difference between two scrapes (what happened since the page last looked), falling back to
the totals since the worker started on the first look. Health checks and scrapes are not
traffic, so ``/ping`` and ``/metrics`` are left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tfbatch.console.source import WorkerStats

NOT_TRAFFIC = frozenset({"/ping", "/metrics"})
MAX_METRICS_TEXT = 4 * 1024 * 1024


@dataclass(frozen=True)
class Scrape:
    """What one scrape said: request and error totals and the latency buckets (upper bound -> count)."""

    at: float
    requests: float = 0.0
    errors: float = 0.0
    buckets: dict[float, float] = field(default_factory=dict)


def parse_scrape(text: str, at: float) -> Scrape:
    """The traffic totals in a ``/metrics`` answer; text past 4 MiB is refused before parsing."""
    if len(text) > MAX_METRICS_TEXT:
        raise ValueError(f"metrics text of {len(text)} characters is over the {MAX_METRICS_TEXT} this reads")
    from prometheus_client.parser import text_string_to_metric_families

    requests = errors = 0.0
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("route") in NOT_TRAFFIC:
                continue
            if sample.name == "tfbatch_requests_total":
                requests += sample.value
            elif sample.name == "tfbatch_errors_total":
                errors += sample.value
            elif sample.name == "tfbatch_request_duration_seconds_bucket":
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return Scrape(at, requests, errors, buckets)


def quantile(q: float, buckets: dict[float, float]) -> float | None:
    """The ``q`` quantile (0..1) of a cumulative histogram, interpolated inside its bucket, in seconds.

    As Prometheus's ``histogram_quantile``: linear within the bucket that holds the rank; a
    rank in the open-ended last bucket answers the largest finite bound. None without data.
    """
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    total = buckets[bounds[-1]]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


def worker_stats(worker: str, now: Scrape, before: Scrape | None = None) -> WorkerStats:
    """Requests/s, P50/P99 (ms) and errors of one worker: since ``before`` when it is given and
    older, else over the worker's whole life (requests/s then unknown: 0)."""
    window = now
    rate = 0.0
    if before is not None and now.at > before.at and now.requests >= before.requests:
        rate = (now.requests - before.requests) / (now.at - before.at)
        delta = {b: c - before.buckets.get(b, 0.0) for b, c in now.buckets.items()}
        if delta and max(delta.values()) > 0:
            window = Scrape(now.at, buckets=delta)

    def ms(q: float) -> float | None:
        value = quantile(q, window.buckets)
        return None if value is None else value * 1000

    return WorkerStats(worker, rate, ms(0.5), ms(0.99), int(now.errors), int(now.requests))
