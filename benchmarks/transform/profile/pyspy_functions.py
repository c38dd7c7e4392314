"""Inclusive samples per function of a ``py-spy record -f raw`` profile, start-up left out.

    python -m benchmarks.transform.profile.pyspy_functions PROFILE [--top 45] [--leaves 30]

A sample counts once for every function on its stack (inclusive), so a stage's entry function
shows the whole stage; the leaf table shows where the samples end. Samples whose stack holds
the TensorFlow import, the model's load or a module import are start-up and left out, so on a
long job the shares are the steady state's. With ``--gil`` profiles (the thread holding the
GIL), the counts are the Python work each stage costs the interpreter everyone shares.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

from benchmarks.transform.profile.pyspy_raw import samples

START_UP = ("import_tensorflow", "Servable.load", "_find_and_load")
_WHERE = re.compile(r" \(.*")
_SITE = re.compile(r"\(/\S*?/site-packages/")


def tally(path: str) -> tuple[int, Counter, Counter]:
    """(samples kept, inclusive samples per function name, samples per leaf frame)."""
    total, inclusive, leaves = 0, Counter(), Counter()
    for frames, count in samples(path):
        if any(marker in frame for frame in frames for marker in START_UP):
            continue
        total += count
        for name in {_WHERE.sub("", frame) for frame in frames}:
            inclusive[name] += count
        leaves[_SITE.sub("(", frames[-1])] += count
    return total, inclusive, leaves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--top", type=int, default=45)
    parser.add_argument("--leaves", type=int, default=30)
    args = parser.parse_args()
    total, inclusive, leaves = tally(args.profile)
    print(f"samples after start-up: {total}")
    for name, count in inclusive.most_common(args.top):
        print(f"{count:7d}  {name}")
    print("--- leaves")
    for name, count in leaves.most_common(args.leaves):
        print(f"{count:7d}  {name}")


if __name__ == "__main__":
    main()
