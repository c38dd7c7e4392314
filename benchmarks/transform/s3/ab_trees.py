"""One tfbatch job on S3, two source trees in alternating order: the A/B behind s3/README.md.

    python -m benchmarks.transform.s3.ab_trees --tree old=/tmp/wt-old/src --tree new=src \\
        --latency-ms 20 --rounds 3 --out benchmarks/transform/s3/ab-20ms.json

The jpeg-bytes shape's inputs and model (built as ``benchmarks.transform.shapes`` builds them,
in ``--workdir``) go to a moto server (behind a proxy adding ``--latency-ms`` to every
request, s3_inputs.py); each round runs ``python -m tfbatch transform`` once per tree
(``PYTHONPATH`` = the tree's ``src``), the order reversed every other round, outputs local.
Wall seconds per run, launch to exit, and the job process's CPU seconds (the S3 server's and
the proxy's are not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from benchmarks.transform.s3_inputs import Storage, upload
    from benchmarks.transform.shapes import SHAPES, Scale

    parser = argparse.ArgumentParser(prog="python -m benchmarks.transform.s3.ab_trees")
    parser.add_argument("--tree", action="append", required=True, help="NAME=path/to/src (twice or more)")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--workdir", default="/tmp/tfbatch-bench-shapes")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    trees = dict(t.split("=", 1) for t in args.tree)
    job = next(s for s in SHAPES if s.name == "jpeg-bytes").build(Path(args.workdir), Scale(args.scale))
    at = job.a.index("--input") + 1
    uri = "s3://tfbatch-bench/ab/"
    walls: dict[str, list[float]] = {name: [] for name in trees}
    cpus: dict[str, list[float]] = {name: [] for name in trees}  # the job process's CPU seconds
    with Storage(args.latency_ms):
        upload(job.input, uri)
        for n in range(args.rounds):
            for name in (list(trees) if n % 2 == 0 else list(trees)[::-1]):
                out = Path(args.workdir) / "ab-out" / f"{name}-{n}"
                cmd = job.a[:at] + [uri] + job.a[at + 1:] + ["--output", str(out), "--progress", "off"]
                env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(Path(trees[name]).resolve()))
                started, before = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
                walls[name].append(round(time.monotonic() - started, 2))
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpus[name].append(round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2))
                if proc.returncode != 0:
                    raise SystemExit(f"{name} failed: {proc.stderr[-2000:]}")
                print(name, n, walls[name][-1], cpus[name][-1], flush=True)
                shutil.rmtree(out, ignore_errors=True)
    result = {"command": "python -m benchmarks.transform.s3.ab_trees " + " ".join(argv or sys.argv[1:]),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "latency_ms": args.latency_ms, "objects": job.objects,
              "trees": trees, "wall_s": walls, "cpu_s": cpus}
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
