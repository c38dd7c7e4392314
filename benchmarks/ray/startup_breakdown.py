"""Where a Ray job's extra wall time goes, from the timelines ``benchmarks.ray.shapes`` records.

``python -m benchmarks.ray.startup_breakdown benchmarks/ray/shapes.json --out benchmarks/ray/startup-breakdown.md``

Each run's timeline holds wall-clock marks (seconds from the process's start): the process's
own (``proc:imported``: tfbatch imported and the spec built; ``proc:job_end``), the Ray
driver's (``driver:run``, ``connected``, ``actors_submitted``, ``first_feed``,
``first_result``, ``end``) and each actor's (``actor0:init``: its worker process runs our
code; ``opened``: TensorFlow imported and the model loaded; ``leased``; ``first_key``;
``first_result``; ``run_end``). The table gives the median of each step's duration per
contender, instance 0's actor.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import median

STEPS = {
    "ray": [
        ("python start + tfbatch imports + spec", "proc:process_start", "driver:run"),
        ("ray.init (connect to the running cluster)", "driver:run", "driver:connected"),
        ("actor submitted -> actor's __init__ runs (worker process boot)", "driver:actors_submitted", "actor0:init"),
        ("actor: TensorFlow import + model load", "actor0:init", "actor0:opened"),
        ("model loaded -> first key in the actor", "actor0:opened", "actor0:first_key"),
        ("first key -> first result (actor)", "actor0:first_key", "actor0:first_result"),
        ("first result -> run over (the work)", "actor0:first_result", "actor0:run_end"),
        ("run over -> driver done (last answer, release/kill)", "actor0:run_end", "proc:job_end"),
    ],
    "ray-warm": [
        ("python start + tfbatch imports + spec", "proc:process_start", "driver:run"),
        ("ray.init (connect to the running cluster)", "driver:run", "driver:connected"),
        ("connected -> pooled actor leased", "driver:connected", "actor0:leased"),
        ("leased -> first key", "actor0:leased", "actor0:first_key"),
        ("first key -> first result (actor)", "actor0:first_key", "actor0:first_result"),
        ("first result -> run over (the work)", "actor0:first_result", "actor0:run_end"),
        ("run over -> driver done (last answer, release/kill)", "actor0:run_end", "proc:job_end"),
    ],
    "local": [
        ("python start + tfbatch imports + spec", "proc:process_start", "proc:imported"),
        ("imported -> job over (TF import, model load, the work)", "proc:imported", "proc:job_end"),
    ],
}


def breakdown(results: dict, instances: str = "1") -> str:
    lines = ["# Ray job start-up: where the extra wall time goes", "",
             f"From `{results['command']}` ({results['started']}, load average "
             f"{results['load_average_before'][0]:.1f} before, {results['load_average_after'][0]:.1f} after; "
             f"{results['nodes']} raylets x {results.get('cpus_per_node', 1):g} logical CPUs on a {results['machine'].get('cpus')}-CPU VM shared with other work). "
             f"Median seconds over every run of every shape at {instances} instance(s); `n` = runs.", ""]
    for engine, steps in STEPS.items():
        runs = [r for shape in results["shapes"].values() for r in shape["runs"]
                if r["engine"] == engine and str(r["instances"]) == instances and r.get("ok") and r.get("timeline_s")]
        if not runs:
            continue
        lines += [f"## {engine} ({len(runs)} runs)", "", "| step | median s | min s | max s | n |", "|---|---:|---:|---:|---:|"]
        for title, a, b in steps:
            values = [r["timeline_s"][b] - r["timeline_s"][a] for r in runs
                      if a in r["timeline_s"] and b in r["timeline_s"]]
            if values:
                lines.append(f"| {title} | {median(values):.2f} | {min(values):.2f} | {max(values):.2f} | {len(values)} |")
        walls = [r["wall_s"] for r in runs]
        lines += [f"| **whole process (launch to exit)** | {median(walls):.2f} | {min(walls):.2f} | {max(walls):.2f} "
                  f"| {len(walls)} |", ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray.startup_breakdown")
    parser.add_argument("results")
    parser.add_argument("--instances", default="1")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    text = breakdown(json.loads(Path(args.results).read_text()), args.instances)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
