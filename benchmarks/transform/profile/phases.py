"""Thread-time per image by phase from a ``py-spy record --threads [--idle] -f raw`` file.

Each sample is one thread seen at the sampling rate, so samples / rate = thread-seconds.
py-spy's "active" filter (no ``--idle``) still counts threads blocked on a futex inside
Python code (lock and Future waits), so these are thread-seconds, not CPU seconds: a phase
full of waiting threads shows how many threads the design keeps parked there. CPU seconds
per image come from the benchmark (psutil over the process tree). Samples are put in the
phase as :mod:`benchmarks.transform.profile.pyspy_raw` says.

    python -m benchmarks.transform.profile.phases FILE --rate 200 --images 500
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from benchmarks.transform.profile.pyspy_raw import phase_of, samples

# (phase, markers): checked leaf-first; the first frame matching any marker wins.
PHASES = [
    ("start-up: imports", ("<frozen importlib._bootstrap>", "_find_and_load")),
    ("start-up: model load", ("Servable.load", "build_stack", "load_saved", "saved_model")),
    ("user handler (b64 + json.dumps)", ("input_handler", "output_handler", "b64encode")),
    ("our JSON/b64 decode (local_post, codec)", ("local_post", "decode_predict", "jsonenc.loads", "_b64")),
    ("output encode (JSON dumps)", ("encode_predict", "jsonenc.dumps", "dumps (")),
    ("model call (TF: decode+resize+conv)", ("run_prepared", "_call_flat", "quick_execute", "convert_to_tensor")),
    ("file read", ("open_read", "read (", "_read")),
    ("output write + fsync (storage/io)", ("atomic_write", "fsync", "rename", "replace")),
    ("ledger markers", ("Ledger", "mark_done", "save_failures")),
    ("batcher / futures / thread hand-offs", ("batcher.py", "futures/", "threading.py", "Semaphore", "invoke.py",
                                              "queue.py")),
    ("pipeline / records bookkeeping", ("pipeline.py", "records/", "instance.py", "dataflow.py", "predict.py",
                                       "batched.py")),
]


OTHER = "other (interpreter, GC, TF runtime threads)"


def analyse(path: str, rate: float, images: int) -> dict:
    by_phase: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    for frames, n in samples(path):
        by_phase[phase_of(frames[1:], PHASES, OTHER)] += n
        name = frames[0].split(": ", 1)[-1]
        threads["native (no Python frame)" if name.startswith("thread (") else name.rstrip("0123456789_-")] += n
    total = sum(by_phase.values())
    return {
        "file": path,
        "thread_s_total": total / rate,
        "thread_ms_per_image_by_phase": {k: round(v / rate / images * 1000, 3) for k, v in by_phase.most_common()},
        "thread_s_by_thread_kind": {k: round(v / rate, 2) for k, v in threads.most_common(12)},
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("files", nargs="+")
    p.add_argument("--rate", type=float, default=200)
    p.add_argument("--images", type=int, required=True)
    args = p.parse_args()
    print(json.dumps([analyse(f, args.rate, args.images) for f in args.files], indent=1))


if __name__ == "__main__":
    main()
