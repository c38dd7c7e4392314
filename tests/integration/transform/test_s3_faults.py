"""S3: the output lease, and a job through a proxy that resets connections, throttles and delays."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

from tfbatch.storage.lock import OutputLock, OutputLocked
from tfbatch.storage.uri import clear_cache
from tfbatch.testing.fault_proxy import FaultProxy
from tfbatch import run_transform


@pytest.fixture
def through(s3_server) -> Iterator:
    """``with through(proxy): ...`` points this process's S3 clients at ``proxy``."""
    from contextlib import contextmanager

    @contextmanager
    def use(proxy: FaultProxy):
        saved = os.environ["AWS_ENDPOINT_URL"]
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint_url
        clear_cache()
        try:
            yield proxy
        finally:
            os.environ["AWS_ENDPOINT_URL"] = saved
            clear_cache()

    return use


def test_lease_refuses_a_second_job_and_an_expired_lease_is_taken_over(s3_server, s3_bucket):
    prefix = f"s3://{s3_bucket}/out"
    with OutputLock(prefix):
        with pytest.raises(OutputLocked) as info:
            OutputLock(prefix).acquire()
        assert prefix in str(info.value) and f"pid {os.getpid()}" in str(info.value)
    s3 = s3_server.client()
    # A holder that died an hour ago: its lease expired, so the next job takes it over.
    stale = {"pid": 1, "host": "gone", "token": "old", "expires": time.time() - 3600}
    s3.put_object(Bucket=s3_bucket, Key="out/_tfbatch/lock.json", Body=json.dumps(stale).encode())
    with OutputLock(prefix) as lock:
        body = json.loads(s3.get_object(Bucket=s3_bucket, Key="out/_tfbatch/lock.json")["Body"].read())
        assert body["token"] == lock.token
    assert "Contents" not in s3.list_objects_v2(Bucket=s3_bucket, Prefix="out/_tfbatch/lock")


def _outputs(s3, bucket: str, prefix: str) -> dict[str, bytes]:
    found = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith(".out"):
                found[obj["Key"][len(prefix):]] = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
    return found


def test_job_through_resets_slowdowns_and_latency_matches_a_clean_run(s3_server, s3_bucket, linear_model, through):
    s3 = s3_server.client()
    n = 40
    for i in range(n):
        s3.put_object(Bucket=s3_bucket, Key=f"in/{i % 4}/o{i:03d}.json", Body=json.dumps([i, 1, 2]).encode())
    common = dict(model=str(linear_model), input=f"s3://{s3_bucket}/in/", content_type="application/json")
    with FaultProxy(s3_server.endpoint_url) as clean, through(clean):
        report = run_transform(**common, output=f"s3://{s3_bucket}/clean")
    assert report.ok and report.objects == n
    clean_requests = sum(clean.requests.values())
    with FaultProxy(s3_server.endpoint_url, reset=0.08, slow_down=0.08, delay=0.1, seed=7) as faulty, \
            through(faulty):
        report = run_transform(**common, output=f"s3://{s3_bucket}/faulty")
    assert report.ok and report.objects == n, report.summary()
    assert _outputs(s3, s3_bucket, "faulty/") == _outputs(s3, s3_bucket, "clean/")
    assert len(_outputs(s3, s3_bucket, "clean/")) == n
    errors = faulty.faults["reset"] + faulty.faults["slow_down"]
    assert errors >= 5  # the run did meet faults
    # Retries are bounded: each injected error costs at most a few extra requests, not a loop.
    extra = sum(faulty.requests.values()) - clean_requests
    assert extra <= 4 * errors, (dict(faulty.requests), dict(faulty.faults), clean_requests)


def test_reads_and_writes_keep_many_requests_in_flight(s3_server, s3_bucket, linear_model, through):
    """A GET or PUT is a round trip: the job overlaps many of them, counted on the wire (the
    proxy holds each input GET and output PUT until 16 of its kind wait at once, or 20 s
    pass). Past the 8 threads local files get and botocore's default pool of 10 connections."""
    s3 = s3_server.client()
    n = 64
    for i in range(n):
        s3.put_object(Bucket=s3_bucket, Key=f"many/o{i:03d}.json", Body=json.dumps([i, 1, 2]).encode())
    data = lambda method, path: "/many/o" in path or "/many-out/o" in path  # noqa: E731 - not the lock or ledger
    with FaultProxy(s3_server.endpoint_url, hold=16, only=frozenset({"GET", "PUT"}), hold_match=data) as slow, \
            through(slow):
        report = run_transform(model=str(linear_model), input=f"s3://{s3_bucket}/many/", content_type="application/json",
                               output=f"s3://{s3_bucket}/many-out", max_batch_size=32)
    assert report.ok and report.objects == n, report.summary()
    assert len(_outputs(s3, s3_bucket, "many-out/")) == n
    assert slow.max_in_flight["GET"] >= 16, dict(slow.max_in_flight)
    assert slow.max_in_flight["PUT"] >= 16, dict(slow.max_in_flight)
