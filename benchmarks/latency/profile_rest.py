"""py-spy profile of the REST response path on the 10.5 MB output (the detection model).

Starts ``tfbatch serve`` on the detection model, samples it with py-spy for 12 s while this
process sends sequential ``/invocations`` requests, and writes py-spy's raw (collapsed) stacks
to ``--out``; then times gRPC on the same server for comparison. Summarised in profile_rest.md.

    python -m benchmarks.latency.profile_rest --out /tmp/rest.txt
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks.latency import bench


def summarise(raw: Path, top: int = 12) -> str:
    """Samples per thread, and the functions with the most samples on top of the stack."""
    threads, leaves = Counter(), Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        threads[frames[0]] += int(count)
        leaves[frames[-1]] += int(count)
    lines = ["samples per thread:"] + [f"  {n:6d}  {t}" for t, n in threads.most_common()]
    lines += ["top of stack:"] + [f"  {n:6d}  {f}" for f, n in leaves.most_common(top)]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/tfbatch-profile-rest"))
    p.add_argument("--seconds", type=float, default=9)
    args = p.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    model_dir = bench.build_model("detection", args.workdir, 10.5)
    jpeg = bench.sample_jpeg(224)
    server = bench.Server(model_dir, args.workdir, [], {})
    try:
        rest = bench.rest_invocations(server.url, jpeg, parse=False)()
        for _ in range(5):
            rest()
        spy = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "-p",
                                str(server.proc.pid), "-o", str(args.out), "-f", "raw", "-t", "-r", "200",
                                "-d", str(int(args.seconds + 3))])
        time.sleep(1.5)  # py-spy attaching; the samples below are what is summarised
        for label, call in (("rest", rest), ("grpc", bench.grpc_predict(server.grpc_port, jpeg, parse=False)())):
            n, started = 0, time.perf_counter()
            while time.perf_counter() - started < args.seconds:
                call()
                n += 1
            print(f"{label}: {n} requests, {(time.perf_counter() - started) / n * 1000:.1f} ms each")
            if label == "rest":
                spy.wait()
    finally:
        server.stop()
    print(summarise(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
