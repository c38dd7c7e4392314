"""CPU ms per image by process and phase, from ``steady.py``'s JSON and its py-spy window.

py-spy (without ``--idle``) still reports threads that wait inside Python (a Condition, a
blocking socket read), so its samples are thread-time, not CPU. This splits each process's
*CPU* (from /proc, in the JSON) over phases in proportion to its samples that are not
waits; wait samples are counted apart. Samples are put in phases as
:mod:`benchmarks.transform.profile.pyspy_raw` says.

    python -m benchmarks.transform.profile.steady_phases STEADY.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict

from benchmarks.transform.profile.pyspy_raw import phase_of, samples, split_process

WAIT = ("Condition.wait", "Event.wait", "_Slot._take", "Runner.run", "_serve (grpc", "select (", "poll (",
        "_recv (multiprocessing/connection.py", "recv_into (", "recv_into (tfbatch/sockio.py",
        "_ConnectionBase.recv (", "wire.py:recv")
PHASES = [
    ("user hooks (input_handler: b64 encode + json.dumps; output_handler)", ("inference.py",)),
    ("request decode: b64 decode", ("_b64decode", "b64decode")),
    ("request decode: JSON parse, image header, rest", ("parse_handler_body", "check_encoded_images",
                                                        "decode_predict", "Worker._decode")),
    ("response: TFS JSON + requests.Response", ("encode_predict", "make_response", "jsonenc.py")),
    ("model call (TF, Python side)", ("tensorflow/", "Servable.run", "_joint")),
    ("hops: pickle + socket (wire / Connection)", ("wire.py", "sockio.py", "connection.py", "reduction.py", "pickle")),
    ("file read", ("open_read", "read_small")),
    ("output write", ("atomic_write", "Dataflow._write")),
    ("ledger / journal", ("ledger.py", "journal.py")),
    ("pool / lane bookkeeping", ("handlers/pool.py", "pooled.py", "pool_worker.py", "dataflow.py",
                                 "futures/", "threading.py")),
]


# A frame that waits wins over any phase marker in the same frame.
WAIT_FIRST = [("wait", WAIT), *PHASES]
OTHER = "other (interpreter, TF threads' Python, GC)"


def analyse(steady: dict) -> dict:
    by_pid: dict[str, Counter[str]] = defaultdict(Counter)
    for frames, count in samples(steady["py_spy"]):
        process, stack = split_process(frames)
        pid = process.split(":", 1)[0].removeprefix("process ").strip()
        by_pid[pid][phase_of(stack, WAIT_FIRST, OTHER)] += count
    out = {"images": steady["images"], "images_per_s": steady["images_per_s"],
           "job_cpu_ms_per_image": steady["job_cpu_ms_per_image"], "machine": steady["machine"], "processes": []}
    for proc in steady["processes"]:
        counts = by_pid.get(str(proc["pid"]), Counter())
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
