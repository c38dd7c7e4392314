"""Time the garbage collector inside one ``tfbatch`` command, per generation.

    python -m benchmarks.transform.profile.gc_time [--thresholds 700,10,10] -- transform --model M ...

Runs the command in this process with a ``gc.callbacks`` hook and prints, on stderr, the number
of collections and the seconds they took for each generation. ``--thresholds`` sets the
collector's thresholds first; a job sets its own while it runs (``JOB_GC_THRESHOLDS`` in
``tfbatch/transform/instance.py``), so to time other values there, change that constant. The
figures in single-groups.md#the-garbage-collector came from this hook.
"""

from __future__ import annotations

import argparse
import gc
import sys
import threading
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--thresholds", help="young,middle,full thresholds to set before the command")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the tfbatch command line, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    stats = {g: [0, 0.0] for g in range(3)}
    started: dict[int, float] = {}

    def hook(phase: str, info: dict) -> None:
        if phase == "start":
            started[threading.get_ident()] = time.perf_counter()
            return
        begun = started.pop(threading.get_ident(), None)
        if begun is not None:
            stats[info["generation"]][0] += 1
            stats[info["generation"]][1] += time.perf_counter() - begun

    gc.callbacks.append(hook)
    if args.thresholds:
        gc.set_threshold(*(int(v) for v in args.thresholds.split(",")))
    sys.argv = ["tfbatch", *command]
    from tfbatch.cli import main as tfbatch_main
    from tfbatch.runtime.exit import end

    code = tfbatch_main()
    for generation, (count, seconds) in stats.items():
        print(f"gc generation {generation}: {count} collections, {seconds:.3f} s", file=sys.stderr)
    end(code)  # as ``tfbatch`` ends: no teardown of TensorFlow


if __name__ == "__main__":
    main()
