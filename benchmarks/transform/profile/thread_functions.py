"""Where one group of threads spends its samples, by function, from ``py-spy record --threads -f raw``.

    python -m benchmarks.transform.profile.thread_functions PROFILE.txt[.gz] --thread dataflow_ [--top 25]

Samples of threads whose name starts with ``--thread`` (``dataflow_`` matches ``dataflow_0``,
not ``dataflow-write_0``) are counted twice over: by the deepest tfbatch frame of each sample
(the function of ours that was running or had called out: "self"), and by every function on
the stack once ("inclusive"). Samples that wait for work (``pyspy_raw.is_idle``, the same
test ``thread_busy`` counts idle samples by) are left out, so the shares are of the thread's
busy time.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

from benchmarks.transform.profile.pyspy_raw import is_idle, samples, split_thread

_FRAME = re.compile(r"\s*(.*?) \((.*?):(\d+)\)")


def _name(frame: str, line: bool = False) -> str:
    m = _FRAME.match(frame)
    if m is None:
        return frame.strip()
    where = m.group(2).rsplit("/", 1)[-1]
    return f"{m.group(1)} ({where}:{m.group(3)})" if line else f"{m.group(1)} ({where})"


def summarise(path: str, thread: str) -> tuple[int, Counter, Counter]:
    own: Counter = Counter()
    inclusive: Counter = Counter()
    total = 0
    for frames, count in samples(path):
        name, stack = split_thread(frames)
        if name is None or not name.startswith(thread):
            continue
        if is_idle(stack):
            continue
        total += count
        ours = [f for f in stack if "tfbatch/" in f]
        own[_name(ours[-1], line=True) if ours else "(outside tfbatch)"] += count
        for key in {_name(f) for f in stack}:
            inclusive[key] += count
    return total, own, inclusive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--thread", required=True, help="thread name prefix, e.g. dataflow_")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    total, own, inclusive = summarise(args.profile, args.thread)
    print(f"{total} busy samples of threads {args.thread}*\n")
    print("| self: deepest tfbatch frame | samples | share |\n|---|---:|---:|")
    for key, n in own.most_common(args.top):
        print(f"| `{key}` | {n} | {n / max(total, 1):.0%} |")
    print("\n| inclusive: function | samples | share |\n|---|---:|---:|")
    for key, n in inclusive.most_common(args.top + 12):
        if "threading.py" in key or "thread.py" in key:
            continue
        print(f"| `{key}` | {n} | {n / max(total, 1):.0%} |")


if __name__ == "__main__":
    main()
