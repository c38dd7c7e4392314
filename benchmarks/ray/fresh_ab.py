"""Fresh-actor Ray jobs from two versions of tfbatch, interleaved in one run, against the local engine.

``python -m benchmarks.ray.fresh_ab --before main --shapes jpeg-bytes --rounds 4 --out benchmarks/ray/fresh-ab.json``

A Ray worker imports tfbatch from its raylet's environment, so each version gets its own
running two-raylet ``LocalRayCluster`` whose ``PYTHONPATH`` is that version's tree (``--before``:
a ``git archive`` of the ref under ``--workdir``; ``after``: this checkout). Both clusters stay
up for the whole run; each round runs the job once per contender, order rotated per round:
``local`` (this checkout, ``--engine local``), ``ray-before`` and ``ray-after`` (fresh actors,
the default). Every job is a whole ``tfbatch transform`` process (``benchmarks.ray.onejob``)
with its start-up timeline; outputs of each Ray run are compared with the same round's local run.
The machine is shared, so the figures to read are medians of same-round ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

from benchmarks.ray.shapes import _ratio, run_one
from benchmarks.ray.startup_breakdown import STEPS
from benchmarks.transform.shape_outputs import agreement
from benchmarks.transform.shapes import SHAPES, Scale

ROOT = Path(__file__).resolve().parents[2]


def _tree(ref: str, work: Path) -> Path:
    """This repository at ``ref``, unpacked once under ``work``."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], check=True, capture_output=True,
                            text=True).stdout.strip()
    tree = work / f"tree-{commit}"
    if not (tree / "src" / "tfbatch").exists():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def _pythonpath(tree: Path) -> str:
    return os.pathsep.join([str(tree / "src"), str(tree)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray.fresh_ab")
    parser.add_argument("--before", default="main", help="git ref of the 'before' version")
    parser.add_argument("--shapes", default="jpeg-bytes")
    parser.add_argument("--scale", type=float, default=0.4)
    parser.add_argument("--instances", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--cpus-per-node", type=float, default=2)
    parser.add_argument("--workdir", default="/tmp/tfbatch-ray-fresh-ab")
    parser.add_argument("--out", default="benchmarks/ray/fresh-ab.json")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from benchmarks.transform.bench import machine
    from tfbatch.testing.ray_cluster import LocalRayCluster

    work = Path(args.workdir)
    trees = {"ray-before": _tree(args.before, work), "ray-after": ROOT, "local": ROOT}
    chosen = [s.strip() for s in args.shapes.split(",") if s.strip()]
    jobs = {s.name: s.build(work, Scale(args.scale)) for s in SHAPES if s.name in chosen}
    results: dict = {"benchmark": "ray-fresh-actors-ab", "command": "python -m benchmarks.ray.fresh_ab "
                     + " ".join(argv if argv is not None else sys.argv[1:]),
                     "before": subprocess.run(["git", "-C", str(ROOT), "rev-parse", args.before], capture_output=True,
                                              text=True).stdout.strip(),
                     "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(),
                     "load_average_before": os.getloadavg(), "shapes": {}}
    saved = os.environ.get("PYTHONPATH", "")
    clusters = {}
    try:
        for name in ("ray-before", "ray-after"):
            os.environ["PYTHONPATH"] = _pythonpath(trees[name])
            clusters[name] = LocalRayCluster(nodes=2, num_cpus=args.cpus_per_node,
                                             env={"PYTHONPATH": _pythonpath(trees[name])}).start()
            clusters[name].wait_for_nodes()
        contenders = ["local", "ray-before", "ray-after"]
        for shape, job in jobs.items():
            runs: list[dict] = []
            for r in range(args.rounds):
                order = contenders[r % 3:] + contenders[:r % 3]
                by: dict[str, dict] = {}
                for name in order:
                    os.environ["PYTHONPATH"] = _pythonpath(trees[name])
                    address = clusters["ray-after" if name == "local" else name].address
                    run = run_one(job, "ray" if name != "local" else "local", args.instances, address, work,
                                  f"{shape}-{name}", 0)
                    run["contender"], run["round"] = name, r
                    by[name] = run
                    print(shape, name, {k: v for k, v in run.items() if k not in ("_rows", "timeline_s")}, flush=True)
                base = by["local"]
                for name, run in by.items():
                    if name != "local" and base["ok"] and run["ok"]:
                        run["agrees_with_local"] = agreement(base["_rows"], run["_rows"])["same"]
                runs.extend({k: v for k, v in run.items() if k != "_rows"} for run in by.values())
            results["shapes"][shape] = {"objects": job.objects, "records": job.records, "runs": runs}
    finally:
        os.environ["PYTHONPATH"] = saved
        for cluster in clusters.values():
            cluster.stop()
    results["load_average_after"] = os.getloadavg()
    out = Path(args.out)
    out.write_text(json.dumps(results, indent=1, default=str))
    text = markdown(results)
    out.with_suffix(".md").write_text(text)
    print(text)
    return 0


def markdown(results: dict) -> str:
    lines = ["# Fresh Ray actors, before vs after, interleaved", "", f"`{results['command']}`", "",
             f"{results['started']}, before = {results['before'][:10]}, {results['machine'].get('cpus')} CPUs, load "
             f"average {results['load_average_before'][0]:.1f} before, {results['load_average_after'][0]:.1f} after.",
             ""]
    for shape, data in results["shapes"].items():
        runs = [r for r in data["runs"] if r["ok"]]
        rounds = sorted({r["round"] for r in runs})
        lines += [f"## {shape} ({data['objects']} objects)", "",
                  "| contender | wall s per round | median wall s | local wall / its wall (median of rounds) "
                  "| outputs agree |", "|---|---|---:|---:|---|"]
        for name in ("local", "ray-before", "ray-after"):
            mine = {r["round"]: r for r in runs if r["contender"] == name}
            local = {r["round"]: r for r in runs if r["contender"] == "local"}
            ratios = [_ratio(local[k]["wall_s"], mine[k]["wall_s"]) for k in rounds if k in mine and k in local]
            agree = [mine[k].get("agrees_with_local") for k in mine] if name != "local" else []
            walls = ", ".join(f"{mine[k]['wall_s']:.1f}" for k in sorted(mine))
            lines.append(f"| {name} | {walls} | "
                         f"{median(r['wall_s'] for r in mine.values()):.2f} | "
                         f"{median(ratios) if ratios else float('nan'):.2f}x | "
                         f"{'–' if name == 'local' else ('yes' if agree and all(agree) else 'NO')} |")
        lines += ["", "Start-up steps, median seconds over rounds (instance 0's actor):", "",
                  "| step | ray-before | ray-after |", "|---|---:|---:|"]
        for title, a, b in STEPS["ray"]:
            cells = []
            for name in ("ray-before", "ray-after"):
                values = [r["timeline_s"][b] - r["timeline_s"][a] for r in runs if r["contender"] == name
                          and a in r.get("timeline_s", {}) and b in r.get("timeline_s", {})]
                cells.append(f"{median(values):.2f}" if values else "–")
            lines.append(f"| {title} | {' | '.join(cells)} |")
        lines.append("")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
