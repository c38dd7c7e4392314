"""The Ray reader task (``remote_read``) against an S3 server: many GETs in flight, answers in order."""

from __future__ import annotations

import os

from tfbatch.storage.uri import clear_cache
from tfbatch.testing.fault_proxy import FaultProxy


def test_reader_task_overlaps_its_gets_and_keeps_the_chunks_order(s3_server, s3_bucket):
    from tfbatch.engines.ray_actor import read_objects

    s3 = s3_server.client()
    items = []
    for i in range(40):
        s3.put_object(Bucket=s3_bucket, Key=f"r/o{i:02d}", Body=b"%d" % i)
        items.append((f"s3://{s3_bucket}/r/o{i:02d}", len(b"%d" % i)))
    items.insert(7, (f"s3://{s3_bucket}/r/missing", 3))
    saved = os.environ["AWS_ENDPOINT_URL"]
    # Each GET waits at the proxy until 16 do (or 20 s pass): one at a time, they never would.
    with FaultProxy(s3_server.endpoint_url, hold=16, only=frozenset({"GET"})) as slow:
        os.environ["AWS_ENDPOINT_URL"] = slow.endpoint_url
        clear_cache()
        try:
            found = read_objects._function(items)  # the task's own code, in this process
        finally:
            os.environ["AWS_ENDPOINT_URL"] = saved
            clear_cache()
    assert found[7] is None  # not fetched: the actor reads it itself and reports why
    assert [b for b in found if b is not None] == [b"%d" % i for i in range(40)]
    assert slow.max_in_flight["GET"] >= 16, dict(slow.max_in_flight)
    assert slow.requests["HEAD"] == 0  # the listed size is the size: one GET per object
