"""``threads_summary`` for a job of several processes: py-spy's ``--subprocesses`` profiles,
each sample split by process role (the job's own process, "parent"; a spawned "worker"; or a
process a worker spawned, "worker's child", e.g. the handler pool's processes).

    python -m benchmarks.transform.profile.by_process threads FILE.txt[.gz] [--rate 100]
    python -m benchmarks.transform.profile.by_process gil FILE.txt[.gz] [--rate 100] [--top 25]

``threads`` (a ``record --threads --idle`` file): seconds per (role, thread group) by state,
the states of ``threads_summary.STATES``, then "idle" for other waits; for samples no state
names, the leaf functions. ``gil`` (a ``record --threads --gil`` file): GIL seconds per
process, per role by the stages of ``threads_summary.GIL_STAGES``, and the functions (each of
a sample's last three frames) that held it most outside start-up.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict

from benchmarks.transform.profile.pyspy_raw import is_idle, samples, split_thread
from benchmarks.transform.profile.threads_summary import GIL_STAGES, STATES

START_UP = ("start-up: imports", "start-up: model load")


def _role(frames: list[str]) -> tuple[str, str]:
    procs = [f for f in frames if f.startswith("process ")]
    role = "parent" if len(procs) <= 1 else "worker" if len(procs) == 2 else "worker's child"
    return role, (procs[-1].split(":")[0] if procs else "process ?")


def _state(stack: list[str], states) -> str | None:
    for frame in reversed(stack):
        for state, markers in states:
            if any(marker in frame for marker in markers):
                return state
    return None


def threads(path: str, rate: float) -> None:
    by: dict[tuple[str, str], Counter] = defaultdict(Counter)
    leaves: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for frames, count in samples(path):
        role, _pid = _role(frames)
        name, stack = split_thread(frames)
        group = (role, re.sub(r"_\d+$", "", name or "?"))
        state = _state(stack, STATES) or ("idle" if is_idle(stack) else "other")
        by[group][state] += count
        if state == "other":
            leaves[group][re.sub(r":\d+\)", ")", stack[-1]) if stack else "-"] += count
    print("| role | thread group | thread-seconds | by state (s) |\n|---|---|---:|---|")
    for (role, name), states in sorted(by.items(), key=lambda kv: -sum(kv[1].values())):
        shown = ", ".join(f"{s} {v / rate:.1f}" for s, v in states.most_common(6))
        print(f"| {role} | {name} | {sum(states.values()) / rate:.1f} | {shown} |")
    for group, counts in leaves.items():
        top = "; ".join(f"{leaf[:80]} {v / rate:.1f}" for leaf, v in counts.most_common(3))
        print(f"\n{group[0]} {group[1]}, 'other' leaves: {top}")


def gil(path: str, rate: float, top: int) -> None:
    stages: dict[str, Counter] = defaultdict(Counter)
    functions: dict[str, Counter] = defaultdict(Counter)
    per_process: Counter = Counter()
    for frames, count in samples(path):
        role, pid = _role(frames)
        _name, stack = split_thread(frames)
        stage = _state(stack, GIL_STAGES) or "other"
        stages[role][stage] += count
        per_process[(role, pid)] += count
        if stage not in START_UP:
            for function in {re.sub(r":\d+\)", ")", f) for f in stack[-3:]}:
                functions[role][function] += count
    print("GIL seconds per process: " + ", ".join(f"{r} {p} {v / rate:.2f}" for (r, p), v in sorted(per_process.items())))
    for role in sorted(stages):
        print(f"\n{role}: " + ", ".join(f"{s} {v / rate:.2f}" for s, v in stages[role].most_common()))
        for function, v in functions[role].most_common(top):
            print(f"    {v / rate:6.2f}  {function[:110]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["threads", "gil"])
    parser.add_argument("path")
    parser.add_argument("--rate", type=float, default=100.0, help="py-spy's sampling rate (-r)")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    if args.mode == "threads":
        threads(args.path, args.rate)
    else:
        gil(args.path, args.rate, args.top)


if __name__ == "__main__":
    main()
