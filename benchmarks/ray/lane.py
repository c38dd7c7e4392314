"""The batch-lane job on Ray against the local engine, same instance count, same run.

``python -m benchmarks.ray.lane --images 2000 --instances 1 2 --repeats 2`` builds (once,
cached under ``--workdir``) the project bench's JPEG dataset and its tiny model exported with
no script (``serving_default`` takes encoded JPEG strings: the batch lane), starts a
two-node ``LocalRayCluster`` (one CPU per raylet) and keeps it running, then, for every
instance count and round, runs the job on the local engine and on that cluster one after
the other. Before the first timed round each engine runs the job once untimed, so Ray's
worker processes and both engines' imports are warm, as on a cluster already in use.

Figures per run: whole-job wall time (``run_transform`` call, model loading included) and the
steady rate from the outputs' write times (the first 10 % left out, as in
``benchmarks/transform``). Outputs of the two engines are compared byte for byte.

``--profile DIR`` runs one extra Ray job under ``py-spy record --threads`` on the driver and
on each actor process (raw collapsed stacks, for ``benchmarks/ray/breakdown.py``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.common.dataset import ensure_dataset
from benchmarks.common.measure import output_timing
from benchmarks.common.models import ensure_artifact, scriptless_archive
from benchmarks.common.report import print_and_save


def _outputs(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*.out") if "_tfbatch" not in p.parts}


def _spec(archive: Path, inputs: Path, output: Path, instances: int):
    from tfbatch.transform import TransformSpec

    return TransformSpec.build(model=str(archive), input=str(inputs), output=str(output),
                               content_type="application/x-image", instance_count=instances, resume=False)


def _one(engine_name: str, archive: Path, inputs: Path, output: Path, instances: int, address: str) -> dict:
    from tfbatch import run_transform
    from tfbatch.engines.ray import RayEngine, RayOptions

    shutil.rmtree(output, ignore_errors=True)
    (output / "_tfbatch").mkdir(parents=True)
    engine = RayEngine(RayOptions(address=address)) if engine_name == "ray" else None
    started, cpu = time.time(), time.process_time()
    report = run_transform(_spec(archive, inputs, output, instances), engine=engine)
    ended, cpu = time.time(), time.process_time() - cpu
    assert report.ok, report.summary()
    timing = output_timing(output)
    lanes = sorted({str(b.get("lane")) for b in (report.batches or {}).values() if isinstance(b, dict)})
    return {"engine": engine_name, "instances": instances, "wall_s": round(ended - started, 2),
            "images_per_s": round(timing.outputs / (ended - started), 1),
            "steady_images_per_s": None if timing.steady_images_per_s is None else round(timing.steady_images_per_s, 1),
            "outputs": timing.outputs, "lanes": lanes,
            # Start to first output: process start-up, imports, model load, first batch.
            "first_output_s": None if timing.first_output is None else round(timing.first_output - started, 2),
            # CPU of this process: for Ray, the driver alone (listing, feeding, answers).
            "this_process_cpu_ms_per_image": round(1000 * cpu / max(1, timing.outputs), 3)}


def _one_cli(engine_name: str, archive: Path, inputs: Path, output: Path, instances: int, address: str) -> dict:
    """The same job as a whole ``tfbatch transform`` process (start-up included), as a user runs it."""
    shutil.rmtree(output, ignore_errors=True)
    cmd = [sys.executable, "-m", "tfbatch", "transform", "--model", str(archive), "--input", str(inputs),
           "--output", str(output), "--content-type", "application/x-image", "--instance-count", str(instances),
           "--no-resume", "--progress", "off", "--engine", engine_name]
    if engine_name == "ray":
        cmd += ["--ray-address", address]
    started = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    ended = time.time()
    assert proc.returncode == 0, proc.stderr[-3000:]
    timing = output_timing(output)
    return {"engine": engine_name, "instances": instances, "mode": "cli", "wall_s": round(ended - started, 2),
            "images_per_s": round(timing.outputs / (ended - started), 1),
            "steady_images_per_s": None if timing.steady_images_per_s is None else round(timing.steady_images_per_s, 1),
            "outputs": timing.outputs,
            "first_output_s": None if timing.first_output is None else round(timing.first_output - started, 2)}


def _profile(archive: Path, inputs: Path, out: Path, instances: int, address: str, cluster, pdir: Path) -> dict:
    """One Ray job with py-spy on the driver and on every actor process, all threads."""
    pdir.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    seen: set[int] = set()
    done = threading.Event()

    def attach(pid: int, name: str) -> None:
        procs.append(subprocess.Popen(
            [shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy"), "record",
             "--threads", "--idle", "--rate", "100", "--format", "raw",
             "--pid", str(pid), "-o", str(pdir / f"{name}.txt")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def watch() -> None:  # actors start after the job does: attach as they appear
        while not done.is_set():
            for pid in cluster.worker_pids("InstanceActor"):
                if pid not in seen:
                    seen.add(pid)
                    attach(pid, f"actor-{len(seen) - 1}")
            done.wait(0.2)

    attach(os.getpid(), "driver")
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        run = _one("ray", archive, inputs, out, instances, address)
    finally:
        done.set()
        watcher.join()
        for p in procs:
            p.send_signal(2)  # py-spy writes its file on SIGINT
        for p in procs:
            p.wait(timeout=60)
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray.lane")
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--instances", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--workdir", default="/tmp/tfbatch-raybench")
    parser.add_argument("--profile", help="folder for py-spy stacks of one extra Ray run (driver and actors)")
    parser.add_argument("--profile-instances", type=int, default=1)
    parser.add_argument("--cli", action="store_true",
                        help="run every job as a whole `tfbatch transform` process (both engines start cold)")
    parser.add_argument("--out", help="write the JSON result here too")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tfbatch.testing.ray_cluster import LocalRayCluster

    work = Path(args.workdir)
    inputs = ensure_dataset(work / f"dataset-{args.images}-0", args.images)
    archive = scriptless_archive(ensure_artifact("tiny", work))
    one = _one_cli if args.cli else _one
    runs: list[dict] = []
    identical: dict[int, bool] = {}
    with LocalRayCluster(nodes=args.nodes, num_cpus=1) as cluster:
        for engine in ("local", "ray"):  # untimed warm-up: imports, Ray's worker processes
            one(engine, archive, inputs, work / f"out-warm-{engine}", max(args.instances), cluster.address)
        for r in range(args.repeats):
            for n in args.instances:
                for engine in (("local", "ray") if r % 2 == 0 else ("ray", "local")):
                    # A new folder per run: the in-process instance remembers folders it made.
                    out = work / f"out-{engine}-{n}-r{r}"
                    run = one(engine, archive, inputs, out, n, cluster.address)
                    run["round"] = r
                    runs.append(run)
                    print(run, flush=True)
                identical[n] = _outputs(work / f"out-local-{n}-r{r}") == _outputs(work / f"out-ray-{n}-r{r}")
        profiled = None
        if args.profile:
            profiled = _profile(archive, inputs, work / "out-prof", args.profile_instances, cluster.address, cluster,
                                Path(args.profile))

    def best(engine: str, n: int, key: str) -> float:
        return max(r[key] or 0 for r in runs if r["engine"] == engine and r["instances"] == n)

    per_count = {}
    for n in args.instances:
        per_count[n] = {
            "local_images_per_s": best("local", n, "images_per_s"),
            "ray_images_per_s": best("ray", n, "images_per_s"),
            "ray_over_local_whole_job": round(best("ray", n, "images_per_s") / best("local", n, "images_per_s"), 3),
            "local_steady": best("local", n, "steady_images_per_s"),
            "ray_steady": best("ray", n, "steady_images_per_s"),
            "ray_over_local_steady": round(best("ray", n, "steady_images_per_s")
                                           / best("local", n, "steady_images_per_s"), 3),
            "outputs_identical": identical.get(n),
        }
    result = {"benchmark": "ray-batch-lane", "mode": "cli" if args.cli else "in-process", "images": args.images,
              "nodes": args.nodes, "cpus_per_node": 1,
              "machine_cpus": os.cpu_count(), "best_of": args.repeats, "per_instance_count": per_count,
              "runs": runs, "profiled_run": profiled}
    print_and_save(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
