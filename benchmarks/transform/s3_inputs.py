"""Job inputs on an S3-API server, for ``python -m benchmarks.transform.shapes --storage s3``.

The shapes benchmark normally reads every contender's inputs from local files. With
``--storage s3`` it starts a moto server process on loopback (``tfbatch.testing.S3Server``),
optionally behind a proxy that delays every request by ``--s3-latency-ms`` (S3's own
first-byte latency for small objects is some tens of milliseconds; moto on loopback has
none), uploads each job's input folder under ``s3://BUCKET/<shape>/``, and points all three
contenders at that prefix through the usual ``AWS_*`` variables. Outputs stay local, so they
are read back and compared exactly as in a local run.

What each contender does with an ``s3://`` input:

* (a) tfbatch: ``--input s3://...`` as a user would give it (its own listing and reads);
* (b) the expert's tf.data script: a boto3 client shared by ``READERS`` threads fetches the
  objects in key order, at most ``WINDOW`` ahead of the model, into
  ``tf.data.Dataset.from_generator`` -> ``map(decode, AUTOTUNE)`` -> ``batch`` -> ``prefetch``
  (TensorFlow has no S3 filesystem of its own since 2.6; ``tensorflow-io`` would add one);
* (c) the agent: each of its ``concurrency`` threads GETs an object and POSTs it, as the
  SageMaker agent fetches inputs beside its requests.

Only shapes with one object per payload (SplitType None) run on S3 here: the framed and
table shapes' (b) and (c) read whole local files by path.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BUCKET = "tfbatch-bench"
READERS = 32  # the expert's GET threads: S3 latency, not CPU, bounds one thread's rate
WINDOW = 256  # objects fetched ahead of the model at most (memory stays bounded)


def client(pool: int = READERS):
    """A boto3 S3 client for the endpoint in ``AWS_ENDPOINT_URL`` (botocore reads it itself)."""
    import boto3
    from botocore.config import Config

    return boto3.client("s3", config=Config(max_pool_connections=pool))


def split_uri(uri: str) -> tuple[str, str]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return bucket, prefix


def list_keys(uri: str, s3=None) -> list[str]:
    """Every key under ``uri`` (s3://bucket/prefix/), sorted as S3 lists them."""
    s3 = s3 or client()
    bucket, prefix = split_uri(uri)
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def read_in_order(uri: str, keys: list[str] | None = None, threads: int = READERS,
                  window: int = WINDOW) -> Iterator[tuple[str, bytes]]:
    """``(key, bytes)`` for every object under ``uri`` (or the ``keys`` already listed there),
    in key order, fetched by ``threads`` threads at most ``window`` objects ahead of the consumer."""
    s3 = client(threads)
    bucket, _ = split_uri(uri)
    keys = list_keys(uri, s3) if keys is None else keys

    def get(key: str) -> bytes:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()

    with ThreadPoolExecutor(threads, thread_name_prefix="s3-get") as pool:
        ahead: deque = deque()
        for key in keys:
            ahead.append((key, pool.submit(get, key)))
            if len(ahead) >= window:
                name, future = ahead.popleft()
                yield name, future.result()
        while ahead:
            name, future = ahead.popleft()
            yield name, future.result()


def upload(folder: Path, uri: str, threads: int = 16) -> int:
    """Put every file under ``folder`` at ``uri`` + its relative path; how many."""
    s3 = client(threads)
    bucket, prefix = split_uri(uri)
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda p: s3.put_object(Bucket=bucket, Key=prefix + str(p.relative_to(folder)),
                                              Body=p.read_bytes()), files))
    return len(files)


class Storage:
    """The moto server (and the latency proxy in front of it) for one benchmark run;
    ``with Storage(latency_ms) as s3:`` sets the ``AWS_*`` variables of this process, which
    the contenders' processes inherit."""

    def __init__(self, latency_ms: float = 0.0):
        self.latency_ms = latency_ms
        self.server = None
        self.proxy = None
        self._saved: dict[str, str | None] = {}

    def __enter__(self) -> "Storage":
        from tfbatch.testing.fault_proxy import FaultProxy
        from tfbatch.testing.s3_server import S3Server

        self.server = S3Server().start()
        env = self.server.env()
        if self.latency_ms > 0:
            self.proxy = FaultProxy(self.server.endpoint_url, delay=1.0, delay_s=self.latency_ms / 1000).start()
            env["AWS_ENDPOINT_URL"] = self.proxy.endpoint_url
        self._saved = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if self.proxy is not None:
            self.proxy.stop()
        if self.server is not None:
            self.server.stop()
