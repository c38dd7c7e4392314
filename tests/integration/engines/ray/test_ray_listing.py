"""Listing streams: on the S3-API server, the first output exists before the prefix is listed."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from tfbatch.engines.ray import RayEngine, RayOptions
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
    # Bounded look-ahead: two windows per instance plus one page, not the whole prefix.
    assert line.listed_at_first_result <= 2 * 2 * 2 + PAGE + 1
    outs = list(list_prefix(f"s3://{s3_bucket}/out/{0:05d}"))
    assert [r.key for r in outs] == ["00000.jsonl.out"]
