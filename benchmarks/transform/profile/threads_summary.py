"""Where a job's threads spend their time, from ``py-spy record --threads --idle -f raw`` (every
thread, waiting included) and ``py-spy record --threads --gil -f raw`` (only the GIL's holder).

    python -m benchmarks.transform.profile.threads_summary THREADS.txt[.gz] GIL.txt[.gz] --rate 100

Threads are grouped by name without the pool index (``dataflow-write_3`` -> ``dataflow-write``);
each group's samples go to the first state whose marker is in the stack, leaf first. GIL samples
are split into start-up (imports and the model load) and the rest, by stage.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict

from benchmarks.transform.profile.pyspy_raw import phase_of, samples

STATES = [  # (state, markers), searched leaf first
    ("write a file", ["_write_unnamed_local", "_write_all", "_atomic_write_local", "_write_small_local"]),
    ("read a file", ["read_small"]),
    ("list (scandir, stat)", ["_Walk.scan", "walk_local"]),
    ("model call (TensorFlow)", ["quick_execute", "ConcreteFunction", "Servable.run_prepared", "_model"]),
    ("wait: chunk's reads", ["Dataflow._chunk"]),
    ("wait: a chunk's writes", ["Dataflow.run.<locals>.settle"]),
    ("ledger flush", ["Ledger.flush"]),
    ("idle in pool", ["_worker", "Event.wait", "Condition.wait"]),
    ("start-up: imports", ["_find_and_load"]),
]
GIL_STAGES = [
    ("start-up: imports", ["_find_and_load"]),
    ("start-up: model load", ["Loader.__init__", "build_stack", "InstanceRunner.open"]),
    ("model call and its tensors", ["ImageBatchPredict._model", "Servable.run_prepared"]),
    ("form batches (split, requests)", ["Dataflow._split", "Dataflow._requests", "ImageBatchPredict.invoke_many"]),
    ("complete: assemble, write, record", ["Dataflow._complete_all"]),
    ("read inputs", ["Dataflow._read_all"]),
    ("list inputs", ["JobInputs", "_local_walk"]),
    ("pool hand-offs (submit, futures)", ["ThreadPoolExecutor.submit", "Future.", "_WorkItem.run", "_worker"]),
    ("ledger", ["Ledger."]),
    ("progress", ["Progress", "_Recorder"]),
]


def group(thread_frame: str) -> str:
    name = re.sub(r"^thread \(\d+\)(: )?", "", thread_frame) or "(unnamed)"
    return re.sub(r"[_-]\d+$", "", name)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("threads")
    ap.add_argument("gil")
    ap.add_argument("--rate", type=float, default=100.0, help="py-spy's samples per second")
    ap.add_argument("--records", type=int, help="records in the job: GIL time per record")
    args = ap.parse_args()
    per = defaultdict(Counter)
    members = defaultdict(set)
    for frames, n in samples(args.threads):
        g = group(frames[0])
        members[g].add(frames[0])
        per[g][phase_of(frames[1:], STATES, "other")] += n
    print("## Every thread (--idle): seconds per thread group, by state\n")
    print("| thread group | threads | thread-seconds | by state (s) |\n|---|---:|---:|---|")
    for g, states in sorted(per.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(states.values())
        parts = ", ".join(f"{s} {v / args.rate:.1f}" for s, v in states.most_common(5))
        print(f"| {g} | {len(members[g])} | {total / args.rate:.1f} | {parts} |")
    stages = Counter()
    for frames, n in samples(args.gil):
        stages[phase_of(frames[1:], GIL_STAGES, "other")] += n
    total = sum(stages.values())
    startup = sum(v for s, v in stages.items() if s.startswith("start-up"))
    print("\n## The GIL's holder (--gil): seconds by stage\n")
    head = "| stage | s | share of the steady part |" + (" µs per record |" if args.records else "")
    print(head + "\n|---|---:|---:|" + ("---:|" if args.records else ""))
    for s, v in stages.most_common():
        share = "" if s.startswith("start-up") else f"{100 * v / max(1, total - startup):.0f} %"
        row = f"| {s} | {v / args.rate:.2f} | {share} |"
        if args.records:
            row += f" {1e6 * v / args.rate / args.records:.1f} |" if not s.startswith("start-up") else " |"
        print(row)
    print(f"| all | {total / args.rate:.2f} | | " + (f"{1e6 * (total - startup) / args.rate / args.records:.1f} (steady part) |" if args.records else "|"))


if __name__ == "__main__":
    main()
