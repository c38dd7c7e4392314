"""Job shapes on the Ray engine against the local engine: same job, same instance count, same run.

``python -m benchmarks.ray.shapes --shapes jpeg-bytes,jpeg-float,csv --instances 1 2 --repeat 2``
builds each shape's inputs and model as ``benchmarks.transform.shapes`` does (cached under
``--workdir``), starts one two-node ``LocalRayCluster`` (one CPU per raylet) that stays up
(a cluster already running), and runs every job as a whole process
(``benchmarks.ray.onejob``: ``tfbatch transform``'s own flag parsing and engine, plus a
start-up timeline) on three contenders:

- ``local``: ``--engine local`` (instance 0 in the process; N > 1: N worker processes);
- ``ray``: ``--engine ray`` with fresh actors per job (the default);
- ``ray-warm``: ``--engine ray`` with ``TFBATCH_RAY_KEEP_WARM_S``: the job after one that
  left its pooled actors warm (an untimed run of the same job first, per instance count).

With ``--storage s3 [--s3-latency-ms N]`` the inputs are on a moto S3 server process
(``benchmarks.transform.s3_inputs``; started before the cluster, so the raylets and their
actors have its ``AWS_*`` variables) and every contender reads them there; outputs stay local.

Order rotates every round. Figures per run: wall time from launch to exit, records/s over
it, the steady rate from output finish times (shapes with at least 100 objects; the first
10 % left out), time to first output, and the timeline marks. Every Ray run's outputs are
compared with the local run's of the same round (same rows within float rounding).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

from benchmarks.transform.shape_outputs import agreement, read_outputs, steady_rate
from benchmarks.transform.shape_runner import empty_trash, set_aside
from benchmarks.transform.shapes import SHAPES, Scale

CONTENDERS = ("local", "ray", "ray-warm")


def _command(job, output: Path, engine: str, instances: int, address: str, timeline: Path) -> list[str]:
    at = job.a.index("tfbatch")  # [python, -m, tfbatch, transform, flags...]
    flags = job.a[at + 2:]
    cmd = [sys.executable, "-m", "benchmarks.ray.onejob", *flags, "--output", str(output), "--no-resume",
           "--instance-count", str(instances), "--engine", "ray" if engine.startswith("ray") else "local",
           "--timeline", str(timeline)]
    if engine.startswith("ray"):
        cmd += ["--ray-address", address]
    return cmd


def _env(engine: str, keep_warm_s: float) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["TFBATCH_RAY_KEEP_WARM_S"] = str(keep_warm_s if engine == "ray-warm" else 0)
    return env


def run_one(job, engine: str, instances: int, address: str, work: Path, tag: str, keep_warm_s: float) -> dict:
    out = work / "outputs" / tag
    timeline = work / "timelines" / f"{tag}.json"
    timeline.parent.mkdir(parents=True, exist_ok=True)
    set_aside(out)  # not deleted: files created right after a mass deletion cost more here
    cmd = _command(job, out, engine, instances, address, timeline)
    launched = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(engine, keep_warm_s), timeout=1200)
    ended = time.time()
    result: dict = {"engine": engine, "instances": instances, "ok": proc.returncode == 0,
                    "wall_s": round(ended - launched, 2)}
    if proc.returncode != 0:
        result["error"] = proc.stderr[-2000:]
        return result
    rows = read_outputs(out)
    finished = [((out / name).stat().st_mtime, len(r)) for name, r in rows.items()]
    records = sum(len(r) for r in rows.values())
    rate = steady_rate(finished)[0] if len(rows) >= 100 else None
    result.update({"objects": len(rows), "records": records, "records_per_s": round(records / (ended - launched), 1),
                   "steady_per_s": None if rate is None else round(rate, 1),
                   "first_output_s": round(min(t for t, _ in finished) - launched, 2) if finished else None})
    if timeline.exists():
        data = json.loads(timeline.read_text())
        t0 = data["marks"]["process_start"]
        marks = {f"proc:{k}": v for k, v in data["marks"].items()}
        marks.update({f"driver:{k}": v for k, v in data.get("driver_marks", {}).items()})
        for i, m in data.get("actor_marks", {}).items():
            marks.update({f"actor{i}:{k}": v for k, v in m.items()})
        result["timeline_s"] = {k: round(v - t0, 2) for k, v in sorted(marks.items(), key=lambda kv: kv[1])}
    result["_rows"] = rows
    return result


def _ratio(a, b):
    return None if not a or not b else round(a / b, 3)


def use_this_checkout() -> None:
    """Ray's worker processes import tfbatch from the cluster's environment: make it this checkout's."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    root = str(Path(__file__).resolve().parents[2])
    os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(root) / "src"), root, os.environ.get("PYTHONPATH", "")])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray.shapes")
    parser.add_argument("--shapes", default="jpeg-bytes,jpeg-float,jpeg-script,tfrecord,csv")
    parser.add_argument("--scale", type=float, default=0.4)
    parser.add_argument("--table-scale", type=float, default=1.0)
    parser.add_argument("--instances", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cpus-per-node", type=float, default=2,
                        help="logical CPUs per raylet: 2 lets a warm pool and a fresh job's actors coexist "
                             "(else the fresh job evicts the idle pool, as it should)")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--keep-warm-s", type=float, default=300)
    parser.add_argument("--workdir", default="/tmp/tfbatch-ray-shapes")
    parser.add_argument("--out", default="benchmarks/ray/shapes.json")
    parser.add_argument("--note", default="")
    parser.add_argument("--storage", choices=["local", "s3"], default="local",
                        help="s3: inputs on a moto S3 server on loopback (benchmarks/transform/s3_inputs.py)")
    parser.add_argument("--s3-latency-ms", type=float, default=0.0,
                        help="--storage s3: a proxy in front of the server delays every request this long")
    args = parser.parse_args(argv)
    use_this_checkout()
    work = Path(args.workdir)
    chosen = [s.strip() for s in args.shapes.split(",") if s.strip()]
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    with contextlib.ExitStack() as stack:
        if args.storage == "s3":
            from benchmarks.transform.s3_inputs import Storage

            stack.enter_context(Storage(args.s3_latency_ms))
        return _run(args, argv, work, chosen, contenders)


def _run(args: argparse.Namespace, argv: list[str] | None, work: Path, chosen: list[str], contenders: list[str]) -> int:
    from benchmarks.transform.bench import machine
    from benchmarks.transform.shapes import on_s3
    from tfbatch.testing.ray_cluster import LocalRayCluster

    jobs = {s.name: s.build(work, Scale(args.scale, args.table_scale)) for s in SHAPES if s.name in chosen}
    if args.storage == "s3":
        jobs = {name: on_s3(job, name) for name, job in jobs.items()}
    results: dict = {"benchmark": "ray-vs-local-shapes", "command": "python -m benchmarks.ray.shapes "
                     + " ".join(argv if argv is not None else sys.argv[1:]),
                     "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(), "nodes": args.nodes,
                     "cpus_per_node": args.cpus_per_node, "load_average_before": os.getloadavg(), "note": args.note,
                     "storage": args.storage if args.storage == "local"
                     else {"kind": "s3", "latency_ms": args.s3_latency_ms}, "shapes": {}}
    with LocalRayCluster(nodes=args.nodes, num_cpus=args.cpus_per_node) as cluster:
        cluster.wait_for_nodes()
        for name, job in jobs.items():
            runs: list[dict] = []
            for n in args.instances:
                _drop_pool(cluster.address)
                if "ray-warm" in contenders:  # leave this job's pooled actors warm, untimed
                    warm = run_one(job, "ray-warm", n, cluster.address, work, f"{name}-{n}-warmup", args.keep_warm_s)
                    if not warm["ok"]:
                        print("warm-up failed:", warm.get("error"), flush=True)
                for r in range(args.repeat):
                    order = contenders[r % len(contenders):] + contenders[:r % len(contenders)]
                    by: dict[str, dict] = {}
                    for engine in order:
                        run = run_one(job, engine, n, cluster.address, work, f"{name}-{n}-{engine}", args.keep_warm_s)
                        run["round"] = r
                        by[engine] = run
                        print(name, {k: v for k, v in run.items() if k not in ("_rows", "timeline_s")}, flush=True)
                    base = by.get("local")
                    for engine, run in by.items():
                        if engine != "local" and base and base["ok"] and run["ok"]:
                            run["agrees_with_local"] = agreement(base["_rows"], run["_rows"])["same"]
                    runs.extend({k: v for k, v in run.items() if k != "_rows"} for run in by.values())
            _drop_pool(cluster.address)
            results["shapes"][name] = {"objects": job.objects, "records": job.records, "runs": runs,
                                       "summary": _summary(runs, args.instances, contenders)}
    results["load_average_after"] = os.getloadavg()
    empty_trash(work / "outputs")
    out = Path(args.out)
    out.write_text(json.dumps(results, indent=1, default=str))
    out.with_suffix(".md").write_text(markdown(results))
    print(out.with_suffix(".md").read_text())
    return 0


def _drop_pool(address: str) -> None:
    code = ("import ray\nfrom tfbatch.engines.ray_warm import drop_warm_actors\n"
            f"ray.init(address={address!r}, logging_level='ERROR', log_to_driver=False)\n"
            "print(drop_warm_actors())\n")
    subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def _summary(runs: list[dict], counts: list[int], contenders: list[str]) -> dict:
    """Per instance count: median over rounds of each Ray contender's ratio to local in the same round."""
    out: dict = {}
    for n in counts:
        per: dict = {}
        rounds = sorted({r["round"] for r in runs if r["instances"] == n})
        for engine in contenders:
            if engine == "local":
                continue
            whole, steady, agree = [], [], []
            for k in rounds:
                by = {r["engine"]: r for r in runs if r["instances"] == n and r["round"] == k and r["ok"]}
                if "local" in by and engine in by:
                    whole.append(_ratio(by["local"]["wall_s"], by[engine]["wall_s"]))
                    if by[engine].get("steady_per_s") and by["local"].get("steady_per_s"):
                        steady.append(_ratio(by[engine]["steady_per_s"], by["local"]["steady_per_s"]))
                    agree.append(by[engine].get("agrees_with_local"))
            per[engine] = {"whole_vs_local": median(whole) if whole else None,
                           "whole_per_round": whole,
                           "steady_vs_local": median(steady) if steady else None,
                           "outputs_agree": all(agree) if agree else None}
        per["wall_s"] = {e: [r["wall_s"] for r in runs if r["instances"] == n and r["engine"] == e and r["ok"]]
                         for e in contenders}
        out[str(n)] = per
    return out


def markdown(results: dict) -> str:
    lines = ["# Ray engine vs local engine, whole processes, by job shape", "",
             f"`{results['command']}`", "",
             f"{results['started']}, {results['machine'].get('cpus')} CPUs, commit {results['machine'].get('git_commit')}, "
             f"{results['nodes']} raylets x {results['cpus_per_node']:g} logical CPUs on this machine, load average before "
             f"{results['load_average_before'][0]:.2f}, after {results['load_average_after'][0]:.2f}. {results['note']}", "",
             *(["Inputs on a moto S3 server on loopback"
                + (f" behind a proxy adding {results['storage']['latency_ms']:g} ms to every request"
                   if results["storage"].get("latency_ms") else "") + "; outputs local.", ""]
               if isinstance(results.get("storage"), dict) else []),
             "Ratios are Ray's speed over local's in the same round (local wall / Ray wall; steady: Ray rate / local "
             "rate), median over rounds; above 1: Ray faster. `ray`: fresh actors per job (default); `ray-warm`: "
             "pooled actors left by the previous job (TFBATCH_RAY_KEEP_WARM_S). Wall: seconds per round.", "",
             "| shape | records | N | wall local (s) | wall ray | wall ray-warm | ray whole | ray-warm whole "
             "| ray steady | ray-warm steady | outputs agree |",
             "|---|---:|---:|---|---|---|---:|---:|---:|---:|---|"]
    f = lambda v: "–" if v is None else f"{v:.2f}"  # noqa: E731
    for name, shape in results["shapes"].items():
        for n, s in shape["summary"].items():
            walls = s["wall_s"]
            ray, warm = s.get("ray", {}), s.get("ray-warm", {})
            agree = all(x.get("outputs_agree") for x in (ray, warm) if x)
            lines.append(f"| {name} | {shape['records']} | {n} | "
                         + " | ".join(", ".join(f"{w:.1f}" for w in walls.get(e, [])) or "–"
                                      for e in ("local", "ray", "ray-warm"))
                         + f" | {f(ray.get('whole_vs_local'))}× | {f(warm.get('whole_vs_local'))}× "
                         f"| {f(ray.get('steady_vs_local'))}× | {f(warm.get('steady_vs_local'))}× "
                         f"| {'yes' if agree else 'NO'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
