"""Job inputs on an S3-API server, for ``python -m benchmarks.transform.shapes --storage s3``.

The shapes benchmark normally reads every contender's inputs from local files. With
``--storage s3`` it starts a moto server process on loopback (``tfbatch.testing.S3Server``),
optionally behind a proxy that delays every request by ``--s3-latency-ms`` (S3's own
first-byte latency for small objects is some tens of milliseconds; moto on loopback has
none), uploads each job's input folder under ``s3://BUCKET/<shape>/``, and points all three
contenders at that prefix through the usual ``AWS_*`` variables. Outputs stay local, so they
are read back and compared exactly as in a local run, unless ``--s3-outputs`` is given: then
each run writes under its own ``s3://BUCKET/outputs/<run>/`` (a batch transform job's
S3OutputPath), and once its processes have exited the ``.out`` objects are downloaded to the
run's local folder, each file's time set to its object's LastModified, so that the same code
reads and times them (``download``). Writing to S3: (b) and (c) PUT each output from
``READERS`` threads (``Outputs``), tfbatch (a) with its own writers.

What each contender does with an ``s3://`` input:

* (a) tfbatch: ``--input s3://...`` as a user would give it (its own listing and reads);
* (b) the expert's tf.data script: a boto3 client shared by ``READERS`` threads fetches the
  objects in key order, at most ``WINDOW`` ahead of the model, into
  ``tf.data.Dataset.from_generator`` -> ``map(decode, AUTOTUNE)`` -> ``batch`` -> ``prefetch``
  (TensorFlow has no S3 filesystem of its own since 2.6; ``tensorflow-io`` would add one);
* (c) the agent: each of its ``concurrency`` threads GETs an object and POSTs it, as the
  SageMaker agent fetches inputs beside its requests.

Shapes whose objects are split into records (TFRecord, RecordIO, CSV, JSON Lines) read their
objects whole before splitting them:

* (b) the expert downloads ``FILE_READERS`` objects at a time, at most ``FILE_WINDOW`` ahead of
  the pipeline, each to a local scratch file whose path feeds the same ``interleave`` of
  ``TFRecordDataset`` / ``TextLineDataset`` branches as its local job (``fetched_files``);
* (c) the agent GETs them in the same way, in order, and splits each object's bytes into
  payloads as it does a local file's.
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
FILE_READERS = 4  # objects of many records (shards, tables): a few GETs at once, each some MB
FILE_WINDOW = 8  # such objects held ahead of the pipeline at most


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


def fetched_files(uri: str, keys: list[str], scratch: str, threads: int = FILE_READERS,
                  window: int = FILE_WINDOW) -> Iterator[str]:
    """The local path of each object under ``uri``, in key order, once it is downloaded to the
    ``scratch`` folder (each under its own key's name, so outputs are named as in a local job)."""
    folder = Path(scratch)
    folder.mkdir(parents=True, exist_ok=True)
    for key, data in read_in_order(uri, keys, threads, window):
        path = folder / Path(key).name
        path.write_bytes(data)
        yield str(path)


class Outputs:
    """Where a contender (the expert's script, the agent) writes each object's output: files
    under a local folder, or, for an ``s3://`` prefix, PUTs from ``threads`` threads, as its
    writer would send them to S3 instead of writing a file."""

    def __init__(self, where: str, threads: int = READERS):
        self.pending: list = []
        self.pool = None
        if where.startswith("s3://"):
            self.s3 = client(threads)
            self.bucket, self.prefix = split_uri(where.rstrip("/") + "/")
            self.pool = ThreadPoolExecutor(threads, thread_name_prefix="s3-put")
        else:
            self.folder = Path(where)
            self.folder.mkdir(parents=True, exist_ok=True)

    def write(self, name: str, data: bytes) -> None:
        """``name`` is relative to the folder or prefix."""
        if self.pool is not None:
            self.pending.append(self.pool.submit(self.s3.put_object, Bucket=self.bucket, Key=self.prefix + name,
                                                 Body=data))
            return
        target = self.folder / name
        if "/" in name:
            target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    def close(self) -> None:
        """Waits for every PUT; raises the first that failed."""
        if self.pool is None:
            return
        try:
            for future in self.pending:
                future.result()
        finally:
            self.pool.shutdown()


def download(uri: str, folder: Path, threads: int = 16) -> int:
    """Every ``.out`` object under ``uri`` (and tfbatch's ``_tfbatch/report.json``) into
    ``folder`` at its relative key, the file's time set to the object's LastModified; how many."""
    s3 = client(threads)
    bucket, prefix = split_uri(uri.rstrip("/") + "/")
    items = [item for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
             for item in page.get("Contents", [])
             if item["Key"].endswith(".out") or item["Key"].endswith("/_tfbatch/report.json")]

    def fetch(item: dict) -> None:
        path = folder / item["Key"][len(prefix):]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read())
        stamp = item["LastModified"].timestamp()
        os.utime(path, (stamp, stamp))

    folder.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(fetch, items))
    return len(items)


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
