"""S3 requests per 1,000 objects of a transform job, counted at a loopback proxy.

A real moto S3 server process, a counting proxy in front of it (tfbatch.testing.fault_proxy,
no faults), a tiny real SavedModel, ``--objects`` small JSON objects under one prefix. Two
runs: a fresh job, then a resume of the finished job (what bookkeeping alone costs).

    python -m benchmarks.scale.s3_requests --objects 1000 --json benchmarks/scale/results/s3_requests.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--objects", type=int, default=1000)
    p.add_argument("--json")
    args = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tfbatch.storage.uri import clear_cache
    from tfbatch.testing.fault_proxy import FaultProxy
    from tfbatch.testing.models import make_linear_model
    from tfbatch.testing.s3_server import S3Server
    from tfbatch import run_transform

    n = args.objects
    model = Path(tempfile.mkdtemp(prefix="tfbatch-s3req-")) / "model"
    make_linear_model(model / "1")
    result: dict = {"objects": n}
    with S3Server() as server, FaultProxy(server.endpoint_url) as proxy:
        s3 = server.client()
        s3.create_bucket(Bucket="scale")
        for i in range(n):
            s3.put_object(Bucket="scale", Key=f"in/{i % 10}/o{i:06d}.json", Body=json.dumps([i, 1, 2]).encode())
        os.environ.update({**server.env(), "AWS_ENDPOINT_URL": proxy.endpoint_url})
        clear_cache()
        common = dict(model=str(model), input="s3://scale/in/", output="s3://scale/out",
                      content_type="application/json", progress=None)
        for run in ("fresh", "resume"):
            proxy.reset_counts()
            report = run_transform(**common)
            assert report.ok, report.summary()
            counts = dict(sorted(proxy.requests.items()))
            per_1000 = {op: round(c * 1000 / n, 1) for op, c in counts.items()}
            # Everything that is not an input read or an output write, by request: the bookkeeping.
            data = lambda method, path: ((method == "GET" and path.startswith("/scale/in/"))  # noqa: E731
                                         or (method == "PUT" and path.startswith("/scale/out/")
                                             and path.endswith(".out")))
            bookkeeping = sorted(f"{method} {path} x{c}" for (method, path), c in proxy.by_path.items()
                                 if not data(method, path))
            result[run] = {"objects_processed": report.objects, "requests": counts, "per_1000_objects": per_1000,
                           "bookkeeping_requests": bookkeeping}
    fresh = result["fresh"]["requests"]
    data_path = 2 * n  # one GET of the input and one PUT of the output per object
    bookkeeping = sum(fresh.values()) - data_path
    result["fresh_bookkeeping_requests"] = bookkeeping
    result["fresh_bookkeeping_pct_of_objects"] = round(100 * bookkeeping / n, 2)
    result["goal"] = "<= 1 GET + 1 PUT per object, bookkeeping <= 2% of objects"
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
