"""Where tfbatch's time goes per record, by dataflow stage, for each job shape of :mod:`..shapes`.

Runs contender (a) of each shape under ``py-spy record --threads --subprocesses -f raw`` (handler
worker processes included) and puts every sample in one stage: the first stage in STAGES
(a priority order, not leaf-first) with a marker in any frame of the sample. So a
``json.dumps`` inside the user's ``input_handler`` is charged to the handler, and a thread
that imports a module inside any stage is charged to start-up.

What the numbers are: py-spy's active samples / rate = thread-seconds of *Python* threads
(threads that hold or wait for the GIL, or are blocked in a Python-level wait py-spy does not
call idle). TensorFlow's own C++ thread pools (the model's conv kernels, in-graph decode) have
no Python frames and are not sampled: their CPU shows up only as the gap between the measured
CPU per record (psutil, from the same run) and the sampled Python thread time, reported as
"unsampled". Percentages are of the steady part: start-up stages are listed apart.

    python -m benchmarks.transform.profile.shape_stages --shapes all --scale 0.2 \\
        --out benchmarks/transform/profile/shapes-before.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchmarks.transform.profile.pyspy_raw import samples, split_process

NATIVE = "no Python frame (interpreter start/exit, native code)"
WAITING = "blocked (lock/condition waits, pipe reads, idle event loops and servers)"
STARTUP = ("start-up: imports", "start-up: model load", NATIVE)  # model load includes loopback servers and exit
APART = STARTUP + (WAITING,)  # listed, but not in the steady shares: no CPU, or not per record
# A sample whose innermost frame is one of these is a thread parked, not working: py-spy's
# "active" filter still counts such Python-level waits.
WAIT_LEAVES = ("Condition.wait", "_wait_for_tstate_lock", "Popen._wait", "Runner.run (asyncio", "_serve (grpc",
               "recv_into", "_make_invoke_excepthook", "_worker (concurrent", "Event.wait", "Queue.get",
               "select (selectors", "poll (", "sleep (", "accept (", "Thread.join")
STAGES = [
    ("start-up: imports", ("<frozen importlib", "_find_and_load")),
    ("start-up: model load", ("artifact/", "Servable.load", "ModelServer._load", "load_saved", "warmup", "build_stack",
                              "LoopbackEndpoints", "start_grpc_server", "_python_exit")),
    ("user handler (input_handler / output_handler)", ("input_handler", "output_handler", "inference.py")),
    ("model call (TensorFlow, Python side)", ("_call_flat", "quick_execute", "run_prepared", "tensorflow/python")),
    ("image decode + resize on host (PIL, header checks)", ("decode_image", "image_inputs", "PIL/", "records/images.py")),
    ("request/response codecs (JSON, CSV, base64)", ("json_request", "jsonenc", "tfs/codec", "tfs/rest",
                                                      "decode_predict", "encode_predict", "b64", "json/", "csv",
                                                      "table_tensors", "_json_lines_bulk", "_npyio_impl")),
    ("handler pool hops (pipes, pickling)", ("handlers/pool", "handlers/wire", "sockio", "pool_worker", "pickle")),
    ("write outputs + commit (atomic write, fsync, ledger)", ("atomic_write", "fsync", "_syncfs", "ledger.py",
                                                              "journal.py")),
    ("read objects", ("open_read", "read_small", "read_bytes", "readinto", "compression.py", "storage/io.py")),
    ("split records", ("records/framing.py",)),
    ("payloads, filters, join, assemble", ("records/payloads.py", "records/join.py", "records/jsonpath.py",
                                           "records/assemble.py")),
    ("listing + plan", ("storage/listing", "local_walk", "transform/plan.py", "keyindex.py")),
    ("batcher + thread hand-offs (queues, futures, waits)", ("batching/", "concurrent/futures", "threading.py",
                                                             "queue.py", "invoke.py", "lookahead.py")),
    ("lanes / pipeline bookkeeping (transform/)", ("transform/", "engines/")),
]
OTHER = "other (interpreter, GC, native frames)"


def stage_of(frames: list[str]) -> str:
    if not frames:  # mostly the interpreter starting and exiting: listed apart, like start-up
        return NATIVE
    if any(leaf in frames[-1] for leaf in WAIT_LEAVES) and not any(
            m in frame for frame in frames for m in STAGES[0][1]):
        return WAITING
    for stage, markers in STAGES:
        if any(m in frame for frame in frames for m in markers):
            return stage
    return OTHER


def breakdown(raw: str, rate: float, records: int, cpu_ms_per_record: float | None) -> dict:
    by_stage: Counter[str] = Counter()
    for frames, n in samples(raw):
        # Process and thread frames name command lines (input paths): only code frames count.
        by_stage[stage_of(split_process(frames)[1])] += n
    steady = {k: v for k, v in by_stage.items() if k not in APART}
    steady_total = sum(steady.values()) or 1
    ms = {k: 1000 * v / rate / records for k, v in by_stage.most_common()}
    sampled_steady_ms = sum(v for k, v in ms.items() if k not in APART)
    return {
        "records": records,
        "thread_ms_per_record": {k: round(v, 3) for k, v in ms.items()},
        "steady_share": {k: round(v / steady_total, 3) for k, v in sorted(steady.items(), key=lambda kv: -kv[1])},
        "cpu_ms_per_record_measured": cpu_ms_per_record,
        "unsampled_ms_per_record": None if cpu_ms_per_record is None else round(cpu_ms_per_record - sampled_steady_ms, 3),
    }


def main(argv: list[str] | None = None) -> int:
    from benchmarks.transform import shape_runner
    from benchmarks.transform.shapes import SHAPES, Scale

    names = [s.name for s in SHAPES]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transform.profile.shape_stages",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="all")
    parser.add_argument("--scale", type=float, default=0.2)
    parser.add_argument("--table-scale", type=float, default=1.0, help="--scale of the CSV and JSON Lines shapes")
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second per thread")
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "tfbatch-bench-shapes"))
    parser.add_argument("--out", default="benchmarks/transform/profile/shapes-stages.json")
    parser.add_argument("--reuse", metavar="JSON",
                        help="re-read the raw py-spy files of an earlier run (in --workdir) with these stages; "
                             "its measured CPU per record is kept")
    args = parser.parse_args(argv)
    if args.reuse:
        return reanalyse(Path(args.reuse), Path(args.workdir), args.rate)
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    chosen = names if args.shapes == "all" else args.shapes.split(",")
    workdir = Path(args.workdir)
    result: dict = {"command": "python -m benchmarks.transform.profile.shape_stages " + " ".join(argv or sys.argv[1:]),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_average_before": os.getloadavg(),
                    "shapes": {}}
    for shape in SHAPES:
        if shape.name not in chosen:
            continue
        job = shape.build(workdir, Scale(args.scale, args.table_scale))
        # The same job once without py-spy, for the CPU per record py-spy itself does not disturb.
        plain = shape_runner.run("a", job, workdir / "profile" / shape.name / "plain", workdir / "logs",
                                 f"profile-{shape.name}", 1800)
        raw = workdir / "profile" / f"{shape.name}.raw"
        output = workdir / "profile" / shape.name / "spied"
        shutil.rmtree(output, ignore_errors=True)
        cmd = [pyspy, "record", "--threads", "--subprocesses", "--nonblocking", "-r", str(args.rate), "-f", "raw",
               "-o", str(raw), "--", *job.a, "--output", str(output)]
        done = subprocess.run(cmd, env=shape_runner._env(), capture_output=True, text=True)
        if done.returncode != 0:
            print(f"[{shape.name}] py-spy run failed: {done.stderr[-500:]}", flush=True)
            continue
        entry = breakdown(str(raw), args.rate, job.records, plain.get("cpu_ms_per_record"))
        entry["plain_run_ok"] = plain["ok"]
        result["shapes"][shape.name] = entry
        print(f"[{shape.name}] " + json.dumps(entry["steady_share"]), flush=True)
    result["load_average_after"] = os.getloadavg()
    out = Path(args.out)
    out.write_text(json.dumps(result, indent=1))
    out.with_suffix(".md").write_text(markdown(result))
    print(out.with_suffix(".md").read_text())
    return 0


def reanalyse(previous: Path, workdir: Path, rate: int) -> int:
    result = json.loads(previous.read_text())
    for name, entry in result["shapes"].items():
        fresh = breakdown(str(workdir / "profile" / f"{name}.raw"), rate, entry["records"],
                          entry["cpu_ms_per_record_measured"])
        result["shapes"][name] = {**fresh, "plain_run_ok": entry.get("plain_run_ok")}
    previous.write_text(json.dumps(result, indent=1))
    previous.with_suffix(".md").write_text(markdown(result))
    print(previous.with_suffix(".md").read_text())
    return 0


def markdown(result: dict) -> str:
    stages = [s for s, _ in STAGES if s not in STARTUP] + [OTHER]
    shapes = list(result["shapes"])
    lines = ["# tfbatch thread time per record by stage, per job shape", "", f"`{result['command']}`", "",
             f"{result['started']}; load average {result['load_average_before'][0]:.1f} before, "
             f"{result['load_average_after'][0]:.1f} after (shared 2-core VM). Cells: Python thread-ms per record "
             "(share of steady sampled time). `CPU measured` is the whole job's CPU ms/record (start-up "
             "included) from an unprofiled run of the same job; `unsampled` = measured minus sampled steady "
             "thread time (blocked threads left out), mostly TensorFlow's C++ pools (model, in-graph decode) "
             "and the kernel's side of file and pipe I/O.", "",
             "| stage | " + " | ".join(shapes) + " |", "|---|" + "---:|" * len(shapes)]
    for stage in list(APART) + stages:
        cells = []
        for name in shapes:
            entry = result["shapes"][name]
            ms = entry["thread_ms_per_record"].get(stage)
            share = entry["steady_share"].get(stage)
            cells.append("" if ms is None else f"{ms:.3f}" + ("" if share is None else f" ({100 * share:.0f}%)"))
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    for label, key in (("CPU measured (ms/record)", "cpu_ms_per_record_measured"), ("unsampled", "unsampled_ms_per_record")):
        lines.append(f"| **{label}** | " + " | ".join(
            "–" if result["shapes"][n][key] is None else f"{result['shapes'][n][key]:.3f}" for n in shapes) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
