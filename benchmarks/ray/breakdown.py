"""Where a Ray job's processes spend their time, from ``py-spy record --threads --format raw``.

``python -m benchmarks.ray.breakdown DIR [DIR...]`` reads ``driver.txt`` and ``actor-*.txt``
(written by ``benchmarks.ray.lane --profile DIR``) and prints, per process, how the sampled
thread time splits into stages. A sample is *waiting* when its innermost frame is a block
(lock, queue, condition, future, select, sleep); busy samples go to the first stage whose
marker appears in the stack, innermost frame first. py-spy samples Python threads only:
time inside a TensorFlow call shows as the Python thread that waits for it ("model").
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

# (stage, markers in "function (file:line)" frames); the first stage whose marker is in the
# stack, innermost frame first, gets the sample.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("start-up: import, model load", ("InstanceActor.__init__", "InstanceRunner.open", "_find_and_load")),
    ("model call (TensorFlow)", ("run_prepared", "_call_flat", "prepare_inputs", "tensorflow/")),
    ("batcher hand-offs", ("tfbatch/batching/",)),
    ("read input", ("read_small", "open_read", "read_bytes", "fsspec/")),
    ("write output", ("atomic_write",)),
    ("ledger commit", ("tfbatch/transform/ledger.py", "tfbatch/transform/journal.py", "sync_local")),
    ("encode response", ("jsonenc", "encode_predict", "tfbatch/tfs/")),
    ("handlers, image checks", ("tfbatch/handlers/", "tfbatch/records/")),
    ("per-object pipeline", ("tfbatch/transform/pipeline.py", "tfbatch/transform/invoke.py")),
    ("batch lane", ("tfbatch/transform/dataflow.py", "tfbatch/transform/predict.py",
                    "tfbatch/transform/batched.py", "tfbatch/transform/script_lane.py")),
    ("engine: actor/driver calls", ("tfbatch/engines/",)),
    ("bench harness (finding actor pids)", ("psutil/",)),
    ("Ray runtime", ("ray/_private", "ray/_raylet", "ray/util", "ray/actor", "ray/remote_function")),
]
WAITS = re.compile(r"^(wait|acquire|_wait_for_tstate_lock|get|result|select|poll|sleep|_worker|main_loop|"
                   r"recv|recv_into|accept|join|_recv|readinto|_wait|wait_for|epoll|run_forever|_run_once|"
                   r"listen_error_messages)\b")  # Ray's error listener blocks in native code


def parse(path: Path) -> Counter:
    """Samples per (thread name, frames innermost-last) line of a raw py-spy file."""
    counts: Counter = Counter()
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            counts[stack] += int(n)
    return counts


def classify(stack: str) -> str:
    frames = stack.split(";")
    leaf = frames[-1]
    if len(frames) == 1 or " (" not in leaf:
        return "waiting (idle thread)"  # a thread with no Python frame: native, parked
    function = leaf.split(" (", 1)[0].rsplit(".", 1)[-1]
    if WAITS.match(function) and "tensorflow/" not in leaf:
        return "waiting (idle thread)"
    inner_first = frames[::-1]
    for stage, markers in STAGES:
        if any(m in f for f in inner_first for m in markers):
            return stage
    return "other Python"


def breakdown(path: Path) -> dict:
    counts = parse(path)
    total = sum(counts.values())
    stages: Counter = Counter()
    for stack, n in counts.items():
        stages[classify(stack)] += n
    busy = total - stages["waiting (idle thread)"]
    return {
        "samples": total,
        "busy_samples": busy,
        "busy_share": {k: round(v / busy, 3) for k, v in stages.most_common() if k != "waiting (idle thread)"}
        if busy else {},
        "threads": len({s.split(";", 1)[0] for s in counts}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray.breakdown")
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    result = {folder: {p.stem: breakdown(p) for p in sorted(Path(folder).glob("*.txt"))} for folder in args.folders}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
