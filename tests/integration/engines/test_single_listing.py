"""A job lists its input once, however many instances run it (counted on the wire).

The input lives in a bucket of its own, so every ListObjectsV2 on that bucket is a pass
over the input (the ledger and the lease live in the output bucket). With 30 objects the
listing is one page, so one pass is exactly one LIST.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tfbatch import run_transform
from tfbatch.storage.uri import clear_cache
from tfbatch.testing.fault_proxy import FaultProxy

OBJECTS = 30


@contextmanager
def _through(proxy: FaultProxy) -> Iterator[FaultProxy]:
    # Spawned workers and Ray actors inherit (or are forwarded) this process's AWS_* variables.
    saved = os.environ["AWS_ENDPOINT_URL"]
    os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint_url
    clear_cache()
    try:
        yield proxy
    finally:
        os.environ["AWS_ENDPOINT_URL"] = saved
        clear_cache()


@pytest.fixture
def input_bucket(s3_server) -> str:
    name = f"in-{uuid.uuid4().hex[:12]}"
    s3 = s3_server.client()
    s3.create_bucket(Bucket=name)
    for i in range(OBJECTS):
        s3.put_object(Bucket=name, Key=f"in/{i % 3}/o{i:03d}.json", Body=json.dumps([i, 1, 2]).encode())
    return name


def _job(linear_model, input_bucket: str, output_bucket: str, **fields):
    return dict(model=str(linear_model), input=f"s3://{input_bucket}/in/", output=f"s3://{output_bucket}/out",
                content_type="application/json", progress="log", **fields)


def test_two_local_instances_share_one_listing_pass(s3_server, s3_bucket, input_bucket, linear_model):
    # progress="log" too: the bar's total must come from the same pass, not a counting pass of its own.
    with FaultProxy(s3_server.endpoint_url) as proxy, _through(proxy):
        report = run_transform(**_job(linear_model, input_bucket, s3_bucket, instance_count=2))
        assert report.ok and report.objects == OBJECTS, report.summary()
        assert {name.split(":")[0] for name in report.batches} == {"0", "1"}  # both processes ran objects
        assert proxy.count("GET", f"/{input_bucket}") == 1
        # Each input object is read once, by the instance it was handed to.
        reads = sum(c for (method, path), c in proxy.by_path.items()
                    if method == "GET" and path.startswith(f"/{input_bucket}/"))
        assert reads == OBJECTS

        proxy.reset_counts()
        again = run_transform(**_job(linear_model, input_bucket, s3_bucket, instance_count=2))
        assert again.objects == 0 and again.skipped == OBJECTS, again.summary()
        assert proxy.count("GET", f"/{input_bucket}") == 1
