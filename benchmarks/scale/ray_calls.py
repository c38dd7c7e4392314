"""Many small objects on the Ray engine: job time and actor calls per object.

One LocalRayCluster (two nodes, one CPU each), one tiny JSON Lines object per key, two
instances; the job runs ``--repeats`` times on the same cluster (actor start and model load
included, as a user's job pays them). Run it with ``PYTHONPATH`` on two checkouts to compare
code versions on the same machine, alternately:

    PYTHONPATH=BASE/src:. python -m benchmarks.scale.ray_calls --objects 2000 --label main
    PYTHONPATH=src:. python -m benchmarks.scale.ray_calls --objects 2000 --label chunks

``calls`` is what the engine reports submitting (``RunTimeline.calls``); code without that
counter made one call per object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path


def run(objects: int, repeats: int, label: str) -> dict:
    from tfbatch import run_transform
    from tfbatch.engines.ray import RayEngine, RayOptions
    from tfbatch.testing.models import make_linear_model
    from tfbatch.testing.ray_cluster import LocalRayCluster

    root = Path(tempfile.mkdtemp(prefix="raycalls"))
    try:
        model = make_linear_model(root / "model" / "1", in_dim=3, out_dim=2).parent
        inputs = root / "in"
        inputs.mkdir()
        for n in range(objects):
            (inputs / f"obj{n:06d}.jsonl").write_text(json.dumps([n, 1, 2]) + "\n")
        runs = []
        with LocalRayCluster(nodes=2, num_cpus=1) as cluster:
            for r in range(repeats):
                engine = RayEngine(RayOptions(address=cluster.address, cpus_per_instance=0.5))
                wall, cpu = time.perf_counter(), time.process_time()
                report = run_transform(model=str(model), input=str(inputs), output=str(root / f"out{r}"),
                                       content_type="application/jsonlines", split_type="Line",
                                       instance_count=2, engine=engine, resume=False)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                assert report.ok and report.objects == objects, report.summary()
                calls = getattr(engine.timeline, "calls", None)
                runs.append({"seconds": round(wall, 2), "driver_cpu_s": round(cpu, 2),
                             "objects_per_second": round(objects / wall, 1),
                             "calls": calls if calls is not None else objects})
        return {"benchmark": "ray-calls", "label": label, "objects": objects, "runs": runs,
                "load_average_1m": round(os.getloadavg()[0], 1), "cpus": os.cpu_count()}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--objects", type=int, default=3000)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--label", default="this checkout")
    p.add_argument("--json", help="append the result, one JSON line, to this file")
    args = p.parse_args(argv)
    result = run(args.objects, args.repeats, args.label)
    print(json.dumps(result))
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
