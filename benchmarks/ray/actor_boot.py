"""How long a fresh driver's actor takes to start, with the environment as a runtime_env or as an argument.

``python -m benchmarks.ray.actor_boot --rounds 6``

A bare actor (no TensorFlow, no tfbatch) on a running two-raylet ``LocalRayCluster``, one new
driver process per job as ``tfbatch transform`` is, the two ways interleaved:

- ``runtime_env``: ``.options(runtime_env={"env_vars": env})``, as the Ray engine did;
- ``argument``: the same variables passed to ``__init__``, which sets them itself.

Per job: ``ray.init`` (connect), submitted -> ``__init__`` runs (``boot``), whether the actor
took a worker process that already existed when it was submitted, and ``ray.shutdown``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from statistics import median

DRIVER = r'''
import json, os, sys, time
t0 = time.time()
import psutil, ray
mode = sys.argv[2]
ray.init(address=sys.argv[1], namespace="actor-boot", log_to_driver=False, logging_level="ERROR")
t1 = time.time()

@ray.remote
class Bare:
    def __init__(self, env=None):
        self.started = time.time()
        if env:
            os.environ.update(env)

    def facts(self):
        return self.started, os.getpid()

def workers():
    # A Ray worker process's title is "ray::IDLE" (or its actor's name) once it has started.
    found = set()
    for p in psutil.process_iter(["cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        if "default_worker" in line or line.startswith("ray::"):
            found.add(p.pid)
    return found

env = {"TF_CPP_MIN_LOG_LEVEL": "2", "TFBATCH_ACTOR_BOOT": "1"}
options = dict(num_cpus=1, max_restarts=3, max_task_retries=0, max_concurrency=8, scheduling_strategy="SPREAD")
existing = workers()
t2 = time.time()
if mode == "runtime_env":
    actor = Bare.options(runtime_env={"env_vars": env}, **options).remote()
else:
    actor = Bare.options(**options).remote(env)
started, pid = ray.get(actor.facts.remote())
ray.kill(actor, no_restart=True)
t3 = time.time()
ray.shutdown()
t4 = time.time()
print(json.dumps({"mode": mode, "connect": t1 - t0, "boot": started - t2, "idle_worker": pid in existing,
                  "shutdown": t4 - t3}))
'''

MODES = ("runtime_env", "argument")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray.actor_boot")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    from tfbatch.testing.ray_cluster import LocalRayCluster

    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    with LocalRayCluster(nodes=2, num_cpus=2) as cluster:
        cluster.wait_for_nodes()
        for r in range(args.rounds):
            for mode in MODES[r % 2:] + MODES[:r % 2]:
                proc = subprocess.run([sys.executable, "-c", DRIVER, cluster.address, mode], capture_output=True,
                                      text=True, timeout=120, env=dict(os.environ))
                lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
                if not lines:
                    print("failed:", proc.stderr[-1500:], flush=True)
                    continue
                runs[mode].append(json.loads(lines[-1]))
                print(runs[mode][-1], flush=True)
    print("| mode | jobs | connect s | submitted -> __init__ s (median; all) | took an idle worker | shutdown s |")
    print("|---|---:|---:|---|---:|---:|")
    for mode, rs in runs.items():
        if rs:
            boots = ", ".join(f"{r['boot']:.2f}" for r in sorted(rs, key=lambda r: r["boot"]))
            print(f"| {mode} | {len(rs)} | {median(r['connect'] for r in rs):.2f} | "
                  f"{median(r['boot'] for r in rs):.2f}; {boots} | {sum(r['idle_worker'] for r in rs)} "
                  f"| {median(r['shutdown'] for r in rs):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
