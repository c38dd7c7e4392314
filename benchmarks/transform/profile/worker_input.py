"""Microseconds an image a handler worker's input step costs, in a process without TensorFlow as
the pool's workers are: a script's ``input_handler`` and the decode of what it returns
(worker-gc.md), with the collector as Python leaves it or as the workers set it.

    python -m benchmarks.transform.profile.worker_input --model-dir SAVEDMODEL/1 --script code/inference.py \\
        --input FOLDER --content-type application/x-image [--gc default|freeze|threshold|both] [--profile]

The model's signatures are read in a child process (that import brings TensorFlow).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pickle
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_SIGNATURES = """
import pickle, sys
from tfbatch.runtime.servable import Servable
sv = Servable.load("model", 1, sys.argv[1])
with open(sys.argv[2], "wb") as out:
    pickle.dump({"model": (sv.version, dict(sv.signatures), sv.default_signature)}, out)
"""


def _models(model_dir: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "models.pkl"
        subprocess.run([sys.executable, "-c", _SIGNATURES, model_dir, str(path)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return pickle.loads(path.read_bytes())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--script", required=True)
    parser.add_argument("--input", required=True, help="a folder of request bodies (one a file)")
    parser.add_argument("--content-type", default="application/x-image")
    parser.add_argument("--count", type=int, default=64, help="bodies a hop")
    parser.add_argument("--rounds", type=int, default=5, help="hops a reading")
    parser.add_argument("--readings", type=int, default=3)
    parser.add_argument("--gc", choices=("default", "freeze", "threshold", "both"), default="default")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    models = _models(args.model_dir)

    from tfbatch.handlers.pool_worker import WORKER_GC_THRESHOLDS, Worker

    worker = Worker({"script": args.script, "max_image_pixels": 10**8, "grpc_max_message_bytes": 100 << 20,
                     "models": models})
    files = sorted(p for p in Path(args.input).iterdir() if p.is_file())[:args.count]
    items = [(p.read_bytes(), args.content_type, "application/json", None, "model", None, "predict", 8080, None)
             for p in files]
    worker.run("input", items)
    if args.gc in ("freeze", "both"):
        gc.freeze()
    if args.gc in ("threshold", "both"):
        gc.set_threshold(*WORKER_GC_THRESHOLDS)
    assert "tensorflow" not in sys.modules
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(args.readings):
        began = time.perf_counter()
        for _ in range(args.rounds):
            worker.run("input", items)
        print(f"input us/body {(time.perf_counter() - began) / args.rounds / len(items) * 1e6:.0f}")
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    print(f"page faults/body {faults / (args.readings * args.rounds * len(items)):.1f}")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.rounds):
            worker.run("input", items)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
