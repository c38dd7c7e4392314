"""What the console costs: the job's progress callback per object, and page sizes and render
times at scale (a 10-million-object job, thousands of jobs).

    python -m benchmarks.console.bench [--objects 1000000] [--jobs 5000] [--json out.json]

(a) the callback: ``Progress`` (display off, what ``run_transform`` calls per finished object)
against ``RecordingProgress`` (the same plus the console's ``ProgressAggregator``), in the
same process, same objects, interleaved rounds; the figure is the extra CPU per object and
what it adds to a 10M-object job.
(b) pages: a 4-instance job fed ``--objects`` results over a simulated 24 hours (its series
saturate at 512 points each, as a 10M-object job's would), and a board of ``--jobs`` jobs:
the job page's bytes and render time through the real ASGI app, and the jobs list page's.
"""

from __future__ import annotations

import argparse
import json
import time

from tfbatch.console.aggregate import ProgressAggregator, RecordingProgress
from tfbatch.console.app import console_app
from tfbatch.console.board import JobBoard
from tfbatch.transform.progress import Progress
from tfbatch.transform.report import ObjectResult


def _results(n: int) -> list[ObjectResult]:
    return [ObjectResult(key=f"images/{i:09d}.jpg", ok=True, records=1) for i in range(n)]


def callback_cost(results: list[ObjectResult], rounds: int = 3) -> dict:
    """CPU seconds per object of each callback, best of ``rounds`` interleaved rounds."""
    best = {"progress": float("inf"), "recording": float("inf")}
    for _ in range(rounds):
        for name in best:
            bar = Progress("off") if name == "progress" else RecordingProgress(ProgressAggregator(4), "off")
            start = time.process_time()
            for r in results:
                bar.update(r)
            best[name] = min(best[name], (time.process_time() - start) / len(results))
    extra = best["recording"] - best["progress"]
    return {"objects": len(results), "progress_us": best["progress"] * 1e6, "recording_us": best["recording"] * 1e6,
            "ratio": best["recording"] / best["progress"], "extra_us_per_object": extra * 1e6,
            "extra_s_for_10m_objects": extra * 10_000_000}


def _timed_get(client, path: str, repeat: int = 10) -> tuple[float, int]:
    client.get(path)
    start = time.perf_counter()
    for _ in range(repeat):
        body = client.get(path).text
    return (time.perf_counter() - start) / repeat, len(body.encode())


def pages(results: list[ObjectResult], jobs: int) -> dict:
    from starlette.testclient import TestClient

    board = JobBoard()
    big = board.start("big", instances=4)
    clock = [0.0]
    big.aggregator.clock, big.aggregator.started = (lambda: clock[0]), 0.0
    big.aggregator.set_total(10_000_000)
    step = 86_400 / len(results)
    for i, r in enumerate(results):
        clock[0] = i * step
        big.progress.update(r)
    for i in range(jobs):
        job = board.start(f"job-{i:06d}", instances=1)
        job.finish({"objects": 10, "records": 10})
    client = TestClient(console_app(board))
    job_s, job_bytes = _timed_get(client, "/console/jobs/big")
    live_s, live_bytes = _timed_get(client, "/console/jobs/big/live")
    list_s, list_bytes = _timed_get(client, "/console/jobs")
    points = sum(len(p) for p in big.aggregator.series().values())
    return {"series_points": points, "job_page_ms": job_s * 1000, "job_page_bytes": job_bytes,
            "live_fragment_ms": live_s * 1000, "live_fragment_bytes": live_bytes, "jobs": jobs + 1,
            "jobs_page_ms": list_s * 1000, "jobs_page_bytes": list_bytes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args(argv)
    results = _results(args.objects)
    out = {"callback": callback_cost(results), "pages": pages(results, args.jobs)}
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
