"""Listing streams: on the S3-API server, the first output exists before the prefix is listed."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from tfbatch.engines.ray import RayEngine, RayOptions
from tfbatch.engines.ray_job import chunk_size
from tfbatch.storage import list_prefix
from tfbatch.transform import TransformSpec

OBJECTS = 400
PAGE = 20


def test_work_starts_before_listing_ends(ray_cluster, s3_server, s3_bucket, linear_model):
    client = s3_server.client()

    def put(n: int) -> None:
        client.put_object(Bucket=s3_bucket, Key=f"in/{n:05d}.jsonl", Body=json.dumps([n, 1, 2]).encode() + b"\n")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(OBJECTS)))
    spec = TransformSpec.build(
        model=str(linear_model), input=f"s3://{s3_bucket}/in/", output=f"s3://{s3_bucket}/out/",
        content_type="application/jsonlines", split_type="Line", instance_count=2,
        max_batch_size=2, max_concurrent_transforms=2, engine="ray",
    )
    engine = RayEngine(RayOptions(address=ray_cluster.address, cpus_per_instance=0.5, list_page_size=PAGE))
    results = []
    engine.run(spec, results.append)

    assert len(results) == OBJECTS and all(r.ok for r in results)
    line = engine.timeline
    assert line.listed == OBJECTS
    assert line.first_result_s is not None and line.listing_done_s is not None
    assert line.first_result_s < line.listing_done_s
    assert line.listed_at_first_result < OBJECTS
    # Bounded look-ahead: keys listed but not yet pulled by an instance's dataflow are, per
    # instance, under three chunks in the actor's inbox, one chunk held back and one filling.
    chunk = chunk_size(spec)
    assert 0 < line.max_waiting <= 2 * 5 * chunk < OBJECTS / 10
    outs = list(list_prefix(f"s3://{s3_bucket}/out/{0:05d}"))
    assert [r.key for r in outs] == ["00000.jsonl.out"]


def test_a_ray_job_lists_its_input_once(ray_cluster, s3_server, s3_bucket, linear_model):
    """Counted on the wire: the driver's one pass feeds both actors; actors never list.

    The input is in a bucket of its own, so every LIST there is a pass over the input.
    """
    import os
    import uuid

    from tfbatch import run_transform
    from tfbatch.storage.uri import clear_cache
    from tfbatch.testing.fault_proxy import FaultProxy

    client = s3_server.client()
    source = f"in-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=source)
    for n in range(24):
        client.put_object(Bucket=source, Key=f"in/{n:05d}.jsonl", Body=json.dumps([n, 1, 2]).encode() + b"\n")
    saved = os.environ["AWS_ENDPOINT_URL"]
    with FaultProxy(s3_server.endpoint_url) as proxy:
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint_url  # forwarded to the actors
        clear_cache()
        try:
            engine = RayEngine(RayOptions(address=ray_cluster.address, cpus_per_instance=0.5))
            report = run_transform(
                model=str(linear_model), input=f"s3://{source}/in/", output=f"s3://{s3_bucket}/out/",
                content_type="application/jsonlines", split_type="Line", instance_count=2, engine=engine,
                progress="log",
            )
        finally:
            os.environ["AWS_ENDPOINT_URL"] = saved
            clear_cache()
    assert report.ok and report.objects == 24, report.summary()
    assert engine.timeline.listed == 24
    assert proxy.count("GET", f"/{source}") == 1
    assert sum(c for (method, path), c in proxy.by_path.items()
               if method == "GET" and path.startswith(f"/{source}/")) == 24
