"""Busy and idle samples per thread group, from ``py-spy record --threads -f raw`` (with or
without ``--subprocesses`` or ``--gil``), and each group's commonest leaves.

    python -m benchmarks.transform.profile.thread_busy PROFILE.txt[.gz] [--leaves 8]

Threads are grouped by name with a trailing ``_<n>`` dropped (``dataflow_0`` and
``dataflow_1`` are ``dataflow_N``). A sample is idle when its leaf is a wait (a condition,
an event, an idle executor worker, ``select``/``poll``); a thread blocked in any other
system call, or waiting for the GIL after one (``os.read`` returning), counts as busy, so
with ``--gil`` (only the thread holding the GIL is sampled) the busy counts are GIL time.
A leaf is shown as the deepest tfbatch frame || the frame that was running.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict

from benchmarks.transform.profile.pyspy_raw import is_idle, samples, split_thread


def summarise(path: str) -> tuple[Counter, Counter, dict[str, Counter]]:
    busy: Counter = Counter()
    idle: Counter = Counter()
    leaves: dict[str, Counter] = defaultdict(Counter)
    for frames, count in samples(path):
        name, stack = split_thread(frames)
        if name is None:
            continue
        name = re.sub(r"_\d+$", "_N", name)
        if is_idle(stack):
            idle[name] += count
            continue
        busy[name] += count
        ours = [f for f in stack if "tfbatch/" in f]
        leaves[name][f"{ours[-1].strip() if ours else '-'} || {stack[-1].strip()}"] += count
    return busy, idle, leaves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--leaves", type=int, default=8)
    args = parser.parse_args()
    busy, idle, leaves = summarise(args.profile)
    print("| thread group | busy samples | idle samples |\n|---|---:|---:|")
    for name, n in busy.most_common():
        print(f"| `{name}` | {n} | {idle[name]} |")
    for name, _ in busy.most_common():
        print(f"\n{name}:")
        for leaf, n in leaves[name].most_common(args.leaves):
            print(f"  {n:6d}  {leaf[:200]}")


if __name__ == "__main__":
    main()
