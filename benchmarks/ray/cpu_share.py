"""Where a machine's cores go during the steady part of a job: local engine vs Ray engine.

``python -m benchmarks.ray.cpu_share --shape jpeg-bytes --scale 4 --repeat 2`` builds the shape's
inputs as ``benchmarks.transform.shapes`` does (cached under ``--workdir``), starts the same
two-raylet ``LocalRayCluster`` as ``benchmarks.ray.shapes``, then runs the job alternately on
the local engine and on the Ray engine (fresh actors). While a job runs it counts the outputs
every 0.25 s; between ``--from`` and ``--to`` of the outputs it reads every process's CPU time
on the machine (``/proc``) and sorts it by role:

- ``job``: the local engine's process, or the Ray instance actor's process, and their handler
  worker processes;
- ``driver``: the Ray driver (the ``tfbatch transform`` process on the Ray engine);
- ``ray``: the cluster's own processes (raylets, GCS, agents, log monitors, idle workers);
- ``other``: everything else on the machine (other sessions).

Per run: images/s in the window, each role's cores busy and CPU ms per image. So a gap in rate
can be split into "the job costs more per image" and "the job got fewer cores".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from benchmarks.transform.shape_runner import empty_trash, set_aside

TICK = os.sysconf("SC_CLK_TCK")
RAY_MARKERS = ("raylet", "gcs_server", "ray::", "log_monitor", "dashboard", "runtime_env", "ray.util.client",
               "default_worker.py", "monitor.py")


def _processes() -> dict[int, tuple[float, str]]:
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rfind(")") + 2:].split()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        out[int(entry)] = ((int(fields[11]) + int(fields[12])) / TICK, cmd)
    return out


def _role(pid: int, cmd: str, job_pid: int, engine: str) -> str:
    if "InstanceActor" in cmd or "tfbatch.handlers.pool_worker" in cmd:
        return "job"  # the instance, and its handler worker processes
    if pid == job_pid:
        return "job" if engine == "local" else "driver"
    if any(m in cmd for m in RAY_MARKERS):
        return "ray"
    return "other"


def _count(folder: Path) -> int:
    try:
        return sum(1 for name in os.listdir(folder) if name.endswith(".out"))
    except OSError:
        return 0


def run_one(cmd: list[str], output: Path, engine: str, start: int, end: int, env: dict) -> dict:
    # The last run's outputs are set aside, not deleted: on this VM's ext4, files created soon
    # after a mass deletion cost far more CPU (benchmarks/transform/profile/writes.md).
    set_aside(output)
    began = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        while _count(output) < start and proc.poll() is None:
            time.sleep(0.25)
        t0, n0, p0 = time.monotonic(), _count(output), _processes()
        while _count(output) < end and proc.poll() is None:
            time.sleep(0.25)
        t1, n1, p1 = time.monotonic(), _count(output), _processes()
    finally:
        _, err = proc.communicate(timeout=1200)
    wall = time.monotonic() - began
    if proc.returncode != 0 or n1 <= n0:
        return {"engine": engine, "ok": False, "error": (err or b"")[-1500:].decode(errors="replace")}
    seconds, images = t1 - t0, n1 - n0
    try:
        report = json.loads((output / "_tfbatch" / "report.json").read_text())
        (lane,) = report["batches"].values()
        tuned = {"batch_sizes": lane.get("batch_sizes"), "choices": (lane.get("autotune") or {}).get("choices")}
    except (OSError, ValueError, KeyError):
        tuned = {}
    roles: dict[str, float] = defaultdict(float)
    for pid, (cpu, cmd_line) in p1.items():
        then = p0.get(pid, (0.0, ""))[0]
        roles[_role(pid, cmd_line, proc.pid, engine)] += max(0.0, cpu - then)
    return {"engine": engine, "ok": True, "wall_s": round(wall, 2), "window_s": round(seconds, 2),
            "images": images, "images_per_s": round(images / seconds, 1),
            "cores_busy": {k: round(v / seconds, 3) for k, v in sorted(roles.items())},
            "cpu_ms_per_image": {k: round(1000 * v / images, 3) for k, v in sorted(roles.items())}, **tuned}


def render(results: dict) -> str:
    lines = ["# Cores during the steady window: local engine vs Ray engine", "",
             f"`{results['command']}`", "",
             f"{results['started']}, {results['machine']}, window: outputs {results['from']} to {results['to']} "
             f"of {results['images']}. Roles: `job` (the local process, or the Ray actor), `driver` (Ray's "
             "driver), `ray` (raylets, GCS, agents, idle workers), `other` (anything else on the machine).", "",
             "| round | engine | images/s | cores busy: job / driver / ray / other | CPU ms per image: job / driver / ray "
             "| batch sizes the probe chose |",
             "|---:|---|---:|---|---|---|"]
    for run in results["runs"]:
        if not run["ok"]:
            lines.append(f"| {run['round']} | {run['engine']} | failed | | |")
            continue
        c, m = run["cores_busy"], run["cpu_ms_per_image"]
        lines.append(f"| {run['round']} | {run['engine']} | {run['images_per_s']:,.0f} | "
                     + " / ".join(f"{c.get(k, 0):.2f}" for k in ("job", "driver", "ray", "other")) + " | "
                     + " / ".join(f"{m.get(k, 0):.3f}" for k in ("job", "driver", "ray")) + " | "
                     + ", ".join(str(c) for c in run.get("choices") or []) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="jpeg-bytes")
    parser.add_argument("--scale", type=float, default=4)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--from", dest="start", type=float, default=0.2, help="share of the outputs")
    parser.add_argument("--to", dest="end", type=float, default=0.8)
    parser.add_argument("--workdir", default="/tmp/tfbatch-ray-shapes")
    parser.add_argument("--out", default="benchmarks/ray/cpu-share.json")
    args = parser.parse_args(argv)
    from benchmarks.ray.shapes import use_this_checkout

    use_this_checkout()
    from benchmarks.transform.bench import machine
    from benchmarks.transform.shapes import SHAPES, Scale
    from tfbatch.testing.ray_cluster import LocalRayCluster

    work = Path(args.workdir)
    (shape,) = [s for s in SHAPES if s.name == args.shape]
    job = shape.build(work, Scale(args.scale, 1.0))
    start, end = int(job.objects * args.start), int(job.objects * args.end)
    results = {"command": "python -m benchmarks.ray.cpu_share " + " ".join(argv if argv is not None else sys.argv[1:]),
               "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(), "images": job.objects,
               "from": start, "to": end, "runs": []}
    at = job.a.index("tfbatch")
    flags = job.a[at + 2:]
    with LocalRayCluster(nodes=2, num_cpus=2) as cluster:
        cluster.wait_for_nodes()
        env = {**os.environ, "TFBATCH_RAY_KEEP_WARM_S": "0"}
        for round_ in range(args.repeat):
            order = ("local", "ray") if round_ % 2 == 0 else ("ray", "local")
            for engine in order:
                output = work / "outputs" / f"cpu-share-{engine}"
                cmd = [sys.executable, "-m", "tfbatch", "transform", *flags, "--output", str(output), "--no-resume"]
                if engine == "ray":
                    cmd += ["--engine", "ray", "--ray-address", cluster.address]
                run = {"round": round_, **run_one(cmd, output, engine, start, end, env)}
                print(json.dumps(run), flush=True)
                results["runs"].append(run)
    empty_trash(work / "outputs")
    Path(args.out).write_text(json.dumps(results, indent=1))
    Path(args.out).with_suffix(".md").write_text(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
