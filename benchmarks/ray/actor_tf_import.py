"""TensorFlow's import and a SavedModel load in a fresh Ray actor vs in a plain child process.

``python -m benchmarks.ray.actor_tf_import --rounds 3 [--model DIR]``

Starts a two-raylet ``LocalRayCluster`` (one CPU each), then alternates: an actor submitted by
this driver imports TensorFlow the way tfbatch does (``runtime.tf_import``) and loads the model
in its ``__init__``; then a plain ``python -c`` child does the same. Prints, per round, the
actor's submitted -> ``__init__`` delay, both import and load times, and the actor's
``OMP_NUM_THREADS`` (Ray sets it to the actor's CPUs), the import's own CPU seconds, and how
many cores every other process kept busy meanwhile (``/proc/stat``). The first round includes
cold caches.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")

MEASURE = r'''
import json, os, sys, time

def busy():  # the machine's busy CPU seconds so far (/proc/stat: all but idle and iowait)
    fields = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")

b0, c0, t0 = busy(), time.process_time(), time.time()
sys.path.insert(0, {src!r})
from tfbatch.runtime.tf_import import import_tensorflow
tf = import_tensorflow()
b1, c1, t1 = busy(), time.process_time(), time.time()
tf.saved_model.load({model!r})
t2 = time.time()
print(json.dumps({{"import_s": round(t1 - t0, 3), "load_s": round(t2 - t1, 3),
                  "import_cpu_s": round(c1 - c0, 3),
                  "other_cores_busy": round(((b1 - b0) - (c1 - c0)) / (t1 - t0), 2),
                  "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}}))
'''


def _probe_class(code: str):
    import ray

    @ray.remote(num_cpus=1)
    class Probe:
        def __init__(self, submitted: float):
            self.delay = time.time() - submitted
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(code, {})  # noqa: S102 - this benchmark's own fixed code
            self.result = {"submitted_to_init_s": round(self.delay, 3), **json.loads(out.getvalue())}

        def get(self) -> dict:
            return self.result

    return Probe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="/tmp/bench-final/models/tiny/savedmodel/1",
                        help="a SavedModel folder (the shape bench's tiny model by default)")
    args = parser.parse_args(argv)
    code = MEASURE.format(src=SRC, model=args.model)
    sys.path.insert(0, SRC)
    from tfbatch.testing.ray_cluster import LocalRayCluster

    rows = []
    with LocalRayCluster(nodes=2, num_cpus=1) as cluster:
        cluster.wait_for_nodes()
        # Ray is imported once the cluster has set this process's auth token (ray_cluster.py).
        Probe = _probe_class(code)
        import ray

        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        for r in range(args.rounds):
            actor = Probe.remote(time.time())
            in_actor = ray.get(actor.get.remote())
            ray.kill(actor)
            child = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                              check=True).stdout)
            rows.append({"round": r, "actor": in_actor, "child": child})
            print(json.dumps(rows[-1]), flush=True)
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
