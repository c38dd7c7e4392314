"""CPU ms per image by process and phase, from ``steady.py``'s JSON and its py-spy window.

py-spy (without ``--idle``) still reports threads that wait inside Python (a Condition, a
blocking socket read), so its samples are thread-time, not CPU. This splits each process's
*CPU* (from /proc, in the JSON) over phases in proportion to its samples that are not
waits; wait samples are counted apart. A sample goes to the first phase whose marker
appears in its stack, searched from the leaf up.

    python -m benchmarks.transform.profile.steady_phases STEADY.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict

WAIT = ("Condition.wait", "Event.wait", "_Slot._take", "Runner.run", "_serve (grpc", "select (", "poll (",
        "_recv (multiprocessing/connection.py", "recv_into (", "_recv_into (tfbatch/handlers/wire.py",
        "_ConnectionBase.recv (", "wire.py:recv")
PHASES = [
    ("user hooks (input_handler: b64 encode + json.dumps; output_handler)", ("inference.py",)),
    ("request decode: b64 decode", ("_b64decode", "b64decode")),
    ("request decode: JSON parse, image header, rest", ("parse_handler_body", "check_encoded_images",
                                                        "decode_predict", "Worker._decode")),
    ("response: TFS JSON + requests.Response", ("encode_predict", "make_response", "jsonenc.py")),
    ("model call (TF, Python side)", ("tensorflow/", "Servable.run", "_joint")),
    ("hops: pickle + socket (wire / Connection)", ("wire.py", "connection.py", "reduction.py", "pickle")),
    ("file read", ("open_read", "ScriptLane._read")),
    ("output write", ("atomic_write", "ScriptLane._write")),
    ("ledger / journal", ("ledger.py", "journal.py")),
    ("pool / lane bookkeeping", ("handlers/pool.py", "pooled.py", "pool_worker.py", "script_lane.py",
                                 "futures/", "threading.py")),
]


def _phase(frames: list[str]) -> str:
    for frame in reversed(frames):
        if any(m in frame for m in WAIT):
            return "wait"
        for phase, markers in PHASES:
            if any(m in frame for m in markers):
                return phase
    return "other (interpreter, TF threads' Python, GC)"


def analyse(steady: dict) -> dict:
    samples: dict[str, Counter[str]] = defaultdict(Counter)
    for line in open(steady["py_spy"], encoding="utf-8", errors="replace"):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        depth = 0
        while depth + 1 < len(frames) and frames[depth + 1].startswith("process "):
            depth += 1
        pid = frames[depth].split(":", 1)[0].removeprefix("process ").strip()
        samples[pid][_phase(frames[depth + 2:])] += int(count)
    out = {"images": steady["images"], "images_per_s": steady["images_per_s"],
           "job_cpu_ms_per_image": steady["job_cpu_ms_per_image"], "machine": steady["machine"], "processes": []}
    for proc in steady["processes"]:
        counts = samples.get(str(proc["pid"]), Counter())
        working = sum(n for p, n in counts.items() if p != "wait")
        cpu = proc["cpu_ms_per_image"]
        # TF's own threads run no Python: py-spy cannot see them, /proc can.
        tf_threads = sum(ms for name, ms in proc["threads_ms_per_image"].items() if name.startswith("tf_"))
        python_cpu = cpu - tf_threads
        phases = {"TF kernels on TF's threads (/proc)": round(tf_threads, 3)} if tf_threads else {}
        for phase, n in counts.most_common():
            if phase != "wait" and working:
                phases[phase] = round(python_cpu * n / working, 3)
        out["processes"].append({"pid": proc["pid"], "role": proc["role"], "cpu_ms_per_image": cpu,
                                 "cores_busy": proc["cores_busy"], "phases_cpu_ms_per_image": phases,
                                 "py_spy_wait_share": round(counts["wait"] / max(1, sum(counts.values())), 2)})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("steady", help="steady.py's JSON (run with --py-spy)")
    args = parser.parse_args(argv)
    print(json.dumps(analyse(json.load(open(args.steady))), indent=1))


if __name__ == "__main__":
    main()
