"""Ray engine benchmarks: overhead against the local engine, and time to first output.

``python -m benchmarks.ray.bench overhead`` runs one job on both engines (2 instances
each; Ray on a fresh two-node LocalRayCluster) and compares wall time, start-up included,
and checks the outputs are byte-identical.
``python -m benchmarks.ray.bench listing --objects 100000`` fills a moto S3 prefix (many
threads) and measures, on the Ray engine, the time to the first finished output against
the time a full listing of the prefix takes; the job is stopped after its first output.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.common.report import print_and_save


def _linear_job(root: Path, objects: int, lines: int) -> tuple[Path, Path]:
    from tfbatch.testing.models import make_linear_model

    model = root / "model"
    make_linear_model(model / "1", in_dim=3, out_dim=2)
    inputs = root / "in"
    inputs.mkdir(parents=True)
    for n in range(objects):
        rows = "".join(json.dumps([n, i, (n * i) % 7 * 0.5]) + "\n" for i in range(lines))
        (inputs / f"obj{n:05d}.jsonl").write_text(rows)
    return model, inputs


def _outputs(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*.out") if "_tfbatch" not in p.parts}


def overhead(objects: int, lines: int, instances: int, repeats: int) -> dict:
    from tfbatch import run_transform
    from tfbatch.engines.ray import RayEngine, RayOptions
    from tfbatch.testing.ray_cluster import LocalRayCluster
    from tfbatch.transform import TransformSpec

    root = Path(tempfile.mkdtemp(prefix="raybench"))
    try:
        model, inputs = _linear_job(root, objects, lines)

        def spec(out: str) -> TransformSpec:
            return TransformSpec.build(model=str(model), input=str(inputs), output=str(root / out),
                                       content_type="application/jsonlines", split_type="Line",
                                       batch_strategy="MultiRecord", max_payload_mb=1, assemble_with="Line",
                                       instance_count=instances, max_batch_size=64, resume=False)

        runs: dict[str, list[float]] = {"local": [], "ray": []}
        with LocalRayCluster(nodes=instances, num_cpus=1) as cluster:
            for r in range(repeats):
                started = time.perf_counter()
                report = run_transform(spec(f"local{r}"))
                runs["local"].append(time.perf_counter() - started)
                assert report.ok, report.summary()
                started = time.perf_counter()
                report = run_transform(spec(f"ray{r}"), engine=RayEngine(RayOptions.from_env(address=cluster.address)))
                runs["ray"].append(time.perf_counter() - started)
                assert report.ok, report.summary()
        identical = _outputs(root / "local0") == _outputs(root / "ray0")
        best = {k: min(v) for k, v in runs.items()}
        return {
            "benchmark": "ray-overhead", "objects": objects, "records": objects * lines, "instances": instances,
            "seconds": runs, "best_seconds": best,
            "records_per_second": {k: round(objects * lines / v, 1) for k, v in best.items()},
            "ray_overhead_pct": round(100 * (best["ray"] / best["local"] - 1), 1),
            "outputs_identical": identical, "cpus": os.cpu_count(),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


class _FirstOutput(Exception):
    pass


def listing(objects: int, threads: int, page_size: int) -> dict:
    from tfbatch.engines.ray import RayEngine, RayOptions
    from tfbatch.storage import list_prefix
    from tfbatch.testing.models import make_linear_model
    from tfbatch.testing.ray_cluster import LocalRayCluster
    from tfbatch.testing.s3_server import S3Server
    from tfbatch.transform import TransformSpec

    root = Path(tempfile.mkdtemp(prefix="raylist"))
    try:
        model = make_linear_model(root / "model" / "1").parent
        with S3Server() as s3, LocalRayCluster(nodes=2, num_cpus=1) as cluster:
            os.environ.update(s3.env())
            from botocore.config import Config

            client = s3.client(config=Config(max_pool_connections=threads))
            client.create_bucket(Bucket="bench")
            started = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(lambda n: client.put_object(Bucket="bench", Key=f"in/{n:06d}.jsonl",
                                                          Body=b"[1, 2, 3]\n"), range(objects)))
            create_s = time.perf_counter() - started
            started = time.perf_counter()
            listed = sum(1 for _ in list_prefix("s3://bench/in/", page_size=page_size))
            full_list_s = time.perf_counter() - started

            spec = TransformSpec.build(model=str(model), input="s3://bench/in/", output="s3://bench/out/",
                                       content_type="application/jsonlines", split_type="Line",
                                       instance_count=2, engine="ray")
            engine = RayEngine(RayOptions(address=cluster.address, cpus_per_instance=0.5, list_page_size=page_size))
            first: dict = {}

            def emit(result) -> None:
                first["key"] = result.key
                raise _FirstOutput()  # stop the job: only the first output is measured

            started = time.perf_counter()
            try:
                engine.run(spec, emit)
            except _FirstOutput:
                pass
            first_output_s = time.perf_counter() - started
            line = engine.timeline
        return {
            "benchmark": "ray-streaming-listing", "objects": objects, "listed": listed, "page_size": page_size,
            "create_seconds": round(create_s, 1), "full_listing_seconds": round(full_list_s, 2),
            "first_output_seconds_incl_actor_start": round(first_output_s, 2),
            "engine_first_result_s": line.first_result_s, "listed_at_first_result": line.listed_at_first_result,
            "first_output_key": first.get("key"), "cpus": os.cpu_count(),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray.bench")
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("overhead")
    p.add_argument("--objects", type=int, default=200)
    p.add_argument("--lines", type=int, default=500)
    p.add_argument("--instances", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p = sub.add_parser("listing")
    p.add_argument("--objects", type=int, default=100_000)
    p.add_argument("--threads", type=int, default=64)
    p.add_argument("--page-size", type=int, default=1000)
    parser.add_argument("--out", help="write the JSON result here too")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.what == "overhead":
        result = overhead(args.objects, args.lines, args.instances, args.repeats)
    else:
        result = listing(args.objects, args.threads, args.page_size)
    print_and_save(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
