"""What JSON helper processes buy on the encode alone, with no client on the machine.

Writes the 10.5 MB detection answer (one float32 output of 2,625,000 values, 27 MB of JSON) as
the server streams it, ``b"".join(jsonstream.plan(...))``, with 0, 1, ... helper processes,
in interleaved rounds so that load drift hits every count alike. Reports the median time and
this process's plus the helpers' CPU per answer.

    PYTHONPATH=src:. python -m benchmarks.latency.json_helpers --helpers 0 1 --rounds 15
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from benchmarks.common.measure import tree_cpu_seconds

from tfbatch.runtime import jsonenc
from tfbatch.tfs import jsonstream
from tfbatch.tfs.json_helpers import JsonHelpers


def detection_answer(values: int) -> dict:
    ramp = np.arange(values, dtype=np.float32) / np.float32(values)
    return {"predictions": (np.float32(0.0004) + ramp)[None, :]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--helpers", type=int, nargs="+", default=[0, 1])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--values", type=int, default=2_625_000)
    args = p.parse_args(argv)
    value = detection_answer(args.values)
    want = jsonenc.dumps(value)
    pools = {n: JsonHelpers(n) if n else None for n in args.helpers}
    try:
        for n, pool in pools.items():
            if pool is not None and pool.start(wait_s=60) != n:
                raise SystemExit(f"{n} helper processes did not start")
        samples: dict[int, list[tuple[float, float]]] = {n: [] for n in pools}
        for round_ in range(args.rounds + 1):
            for n, pool in pools.items():
                # This process and its children: the helpers (an idle pool's add nothing).
                cpu0, t0 = tree_cpu_seconds(os.getpid()), time.perf_counter()
                text = b"".join(jsonstream.plan(value, helpers=pool))
                wall, cpu = time.perf_counter() - t0, tree_cpu_seconds(os.getpid()) - cpu0
                assert text == want
                if round_:  # the first round warms every path
                    samples[n].append((wall, cpu))
    finally:
        for pool in pools.values():
            if pool is not None:
                pool.close()
    base = float(np.median([w for w, _ in samples[args.helpers[0]]]))
    print(f"{len(want):,} bytes of JSON, {args.rounds} interleaved rounds, medians:")
    for n, rows in samples.items():
        wall = float(np.median([w for w, _ in rows]))
        cpu = float(np.median([c for _, c in rows]))
        print(f"  {n} helper(s): {wall * 1000:.1f} ms ({wall / base:.2f}x of {args.helpers[0]}), "
              f"CPU {cpu * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
