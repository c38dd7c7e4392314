"""Microseconds a line of a handler worker's input and output steps cost, in this process: the
csv-script job's script on 256 CSV lines, then their answers as one run (runs.md).

    python -m benchmarks.transform.profile.worker_steps --model-dir SAVEDMODEL/1 --script code/inference.py \
        --csv part-00000.csv [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np


def main() -> None:
    from tfbatch.handlers.pool_worker import Worker
    from tfbatch.runtime.servable import Servable

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--script", required=True)
    parser.add_argument("--csv", required=True)
    parser.add_argument("--lines", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    sv = Servable.load("model", 1, args.model_dir)
    w = Worker({"script": args.script, "max_image_pixels": 10**8, "grpc_max_message_bytes": 100 << 20,
                "models": {"model": (sv.version, dict(sv.signatures), sv.default_signature)}})
    lines = open(args.csv, "rb").read().splitlines()[:args.lines]
    items = [(line, "text/csv", "application/json", None, "model", None, "predict", 8080, None) for line in lines]
    head = w.run("input", items)[0]
    outs = {k: np.asarray(v) for k, v in sv.run(head[4], head[1]).items()}
    entries = [((len(line), *items[n][1:]), "outputs-run", (outs, head[5], head[2], head[3], head[4]))
               if n == 0 else ((len(line), *items[n][1:]), "in-run", None) for n, line in enumerate(lines)]
    for step, batch in (("input", items), ("output", entries)):
        began = time.perf_counter()
        for _ in range(args.rounds):
            w.run(step, batch)
        print(f"{step} us/line {(time.perf_counter() - began) / args.rounds / len(lines) * 1e6:.1f}")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(10):
            w.run("input", items)
            w.run("output", entries)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(22)


if __name__ == "__main__":
    main()
