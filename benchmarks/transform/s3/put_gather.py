"""Small PUTs to the moto server two ways: what tfbatch's S3 writers do today, and one gathered round.

``python -m benchmarks.transform.s3.put_gather [--objects 2000] [--rounds 3]``

* ``threads``: 32 threads, each PUT through ``fs.call_s3`` (a hand-off to s3fs's event loop
  and back per object), as the dataflow's 32 writer threads send outputs to a store;
* ``gathered``: the same PUTs gathered on the loop, 32 in flight, one hand-off for all
  (as ``storage.io.read_small_many`` does for GETs).

Both ways alternate each round; per way: wall seconds and this process's CPU seconds (the
moto server is another process and not counted). The bodies are 3 lines of TFS JSON rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from concurrent.futures import ThreadPoolExecutor

BODY = b'{"predictions": [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.0]]}\n' * 3
BUCKET = "put-gather"
IN_FLIGHT = 32


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transform.s3.put_gather")
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from fsspec.asyn import sync

    from benchmarks.transform.s3_inputs import Storage, client
    from tfbatch.storage.io import get_fs

    with Storage(0):
        client().create_bucket(Bucket=BUCKET)
        fs, _ = get_fs(f"s3://{BUCKET}/x")

        def threads(tag: str) -> None:
            with ThreadPoolExecutor(IN_FLIGHT) as pool:
                list(pool.map(lambda i: fs.call_s3("put_object", Bucket=BUCKET, Key=f"{tag}/{i}.out", Body=BODY),
                              range(args.objects)))

        def gathered(tag: str) -> None:
            async def every() -> list:
                gate = asyncio.Semaphore(IN_FLIGHT)

                async def one(i: int):
                    async with gate:
                        return await fs._call_s3("put_object", Bucket=BUCKET, Key=f"{tag}/{i}.out", Body=BODY)

                return await asyncio.gather(*(one(i) for i in range(args.objects)))

            sync(fs.loop, every)

        threads("warm-up")
        runs: dict[str, list[dict]] = {"threads": [], "gathered": []}
        for r in range(args.rounds):
            for name, way in (("threads", threads), ("gathered", gathered)):
                cpu, wall = _cpu(), time.time()
                way(f"{name}-{r}")
                runs[name].append({"wall_s": round(time.time() - wall, 2), "cpu_s": round(_cpu() - cpu, 2)})
                print(name, runs[name][-1], flush=True)
    print(json.dumps({"objects": args.objects, "in_flight": IN_FLIGHT, "runs": runs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
