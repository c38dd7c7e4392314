"""Alternate two source trees on the same tfbatch jobs: wall, CPU and first output per run.

    python -m benchmarks.transform.profile.alternate_trees --before /path/to/old/src --after src \\
        --rounds 3 --job "csv-id=--model M --input I --content-type text/csv ..." [--job ...] \
        [--failed-records]

Each round runs every job with both trees (the order flips every round), each in a fresh
``python -m tfbatch transform`` with ``PYTHONPATH`` set to the tree, writing to its own folder
under ``--workdir``. Reported per run: wall seconds, CPU seconds of the process and its children,
and the seconds from launch to the first ``.out`` file. A worktree of an older commit
(``git worktree add /tmp/before <commit>``) gives the ``--before`` tree.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.transform.shape_runner import empty_trash, set_aside


def run_once(tree: str, args: list[str], out: Path, failed_records: bool = False) -> tuple[float, float, float]:
    # Set aside, not deleted: on ext4 (without a journal, as on the dev VM) a file created
    # within minutes of thousands of deletions costs many times the kernel CPU (the inode
    # allocator steps over every recently freed inode), so each run paid for the last one's
    # rmtree: 20,000-image runs swung 7.5-14 s. Deleted once, after the last run.
    set_aside(out)
    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
    cmd = [sys.executable, "-m", "tfbatch", "transform", *args, "--output", str(out), "--progress", "off"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    launched, wall_start = time.time(), time.monotonic()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.monotonic() - wall_start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Exit 1 is a job whose report is not ok: expected where the inputs hold bad records.
    if proc.returncode != 0 and not (failed_records and proc.returncode == 1):
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr.decode(errors='replace')[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    outs = [p for p in out.rglob("*.out")]
    first = min(p.stat().st_mtime for p in outs) - launched if outs else float("nan")
    return wall, cpu, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the older tree's src folder")
    parser.add_argument("--after", required=True, help="the newer tree's src folder")
    parser.add_argument("--job", action="append", required=True, metavar="NAME=ARGS",
                        help="a name and the transform arguments before --output")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--failed-records", action="store_true",
                        help="the inputs hold bad records: a job that reports them (exit 1) still counts")
    parser.add_argument("--workdir", default="/tmp/alternate-trees")
    args = parser.parse_args()
    jobs = dict(spec.split("=", 1) for spec in args.job)
    trees = {"before": args.before, "after": args.after}
    results: dict[str, dict[str, list[tuple[float, float, float]]]] = {}
    for r in range(args.rounds):
        for name, job in jobs.items():
            for label in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
                got = run_once(trees[label], shlex.split(job), Path(args.workdir) / f"{name}-{label}",
                               args.failed_records)
                results.setdefault(name, {}).setdefault(label, []).append(got)
                print(f"{name} {label}: wall {got[0]:.2f} s, CPU {got[1]:.2f} s, first output {got[2]:.2f} s",
                      flush=True)
    empty_trash(Path(args.workdir))
    for name, by_tree in results.items():
        for label, runs in by_tree.items():
            walls = sorted(w for w, _, _ in runs)
            print(f"{name} {label}: walls {[round(w, 2) for w, _, _ in runs]}, median {walls[len(walls) // 2]:.2f} s, "
                  f"CPU {[round(c, 2) for _, c, _ in runs]}")


if __name__ == "__main__":
    main()
