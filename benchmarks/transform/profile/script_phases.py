"""GIL-held milliseconds per image, by process and phase, for a job with ``code/inference.py``.

Reads ``py-spy record --gil --threads --subprocesses -r RATE -f raw`` output. With ``--gil``
py-spy samples only the thread holding each process's GIL, so samples / rate is the time
that process's Python was running: for the job's main process, the serial budget that caps
its rate (1000 / main-ms-per-image images per second at most), and for the handler worker
processes, work moved off that budget. TensorFlow's own kernels run without the GIL and do
not show here (the bench's CPU ms/image counts them). Samples are put in phases as
:mod:`benchmarks.transform.profile.pyspy_raw` says.

    python -m benchmarks.transform.profile.script_phases FILE --rate 200 --images 500
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict

from benchmarks.transform.profile.pyspy_raw import phase_of, samples, split_process

PHASES = [
    ("start-up (imports, model load, script import)", ("_find_and_load", "build_stack", "Servable.load",
                                                       "load_handlers", "load_module", "warm_up")),
    ("user hooks (inference.py: b64 encode, json.dumps)", ("inference.py", "input_handler", "output_handler")),
    ("request decode (JSON parse, b64 decode, image header)", ("decode_predict", "parse_handler_body",
                                                               "check_encoded_images", "loads (", "_b64")),
    ("response encode (encode_predict, JSON dumps)", ("encode_predict", "dumps (", "make_response")),
    ("model call (TF: decode+resize+conv)", ("run_prepared", "_call_flat", "quick_execute", "convert_to_tensor",
                                             "prepare_inputs")),
    ("pool hops (pickle, pipe)", ("connection.py", "handlers/pool.py", "pooled.py", "pool_worker.py")),
    ("file read", ("open_read",)),
    ("output write (atomic_write)", ("atomic_write",)),
    ("ledger / journal", ("ledger.py", "journal.py")),
    ("batcher / futures / thread hand-offs", ("batcher.py", "futures/", "threading.py", "invoke.py", "queue.py")),
    ("pipeline / lane bookkeeping", ("pipeline.py", "records/", "instance.py", "dataflow.py", "predict.py",
                                    "batched.py")),
    ("loopback TFS servers", ("socketserver", "tfs/rest.py", "grpc")),
]


OTHER = "other (interpreter, GC)"


def analyse(path: str, rate: float, images: int) -> dict:
    by_role: dict[str, Counter[str]] = defaultdict(Counter)
    pids: dict[str, set[str]] = defaultdict(set)
    for frames, count in samples(path):
        process, stack = split_process(frames)
        role = "handler workers" if "spawn_main" in process else "main process"
        pids[role].add(process.split(":", 1)[0])
        by_role[role][phase_of(stack, PHASES, OTHER)] += count
    out: dict = {"file": path, "rate_hz": rate, "images": images, "gil_ms_per_image": {}, "processes": {}}
    for role, phases in by_role.items():
        total = sum(phases.values())
        steady = total - sum(n for p, n in phases.items() if p.startswith("start-up"))
        out["processes"][role] = len(pids[role])
        out["gil_ms_per_image"][role] = {
            "total": round(1000 * total / rate / images, 2),
            "steady (without start-up)": round(1000 * steady / rate / images, 2),
            **{p: round(1000 * n / rate / images, 2) for p, n in phases.most_common()},
        }
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--images", type=int, required=True)
    args = parser.parse_args(argv)
    print(json.dumps([analyse(f, args.rate, args.images) for f in args.files], indent=1))


if __name__ == "__main__":
    main()
