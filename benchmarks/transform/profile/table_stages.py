"""CPU per record of each step a CSV / JSON Lines job's default path takes, one payload at a time.

The shapes benchmark's ``csv`` and ``jsonl`` jobs (Line, MultiRecord 1 MB, float-input model,
no script) spend a few microseconds per record in each of a dozen steps spread over three
processes and several threads; a sampling profiler on a loaded 2-core machine charges GIL
waits to whatever Python frame is waiting. Here each step runs alone, in this one process, on
the benchmark's own files and model, and ``time.process_time`` says what it costs: the
load-robust reading (it does not count time other processes take). Each step runs where the
job runs it: the parent's steps in a process that has loaded the model (TensorFlow's heap is
what its garbage collections walk, and ``gc.freeze`` is applied when the job applies it), the
handler worker's steps in a spawned process without TensorFlow. The hops to the handler
workers are measured as a real socket pair round trip of the same messages (both ends' CPU).

    PYTHONPATH=src python -m benchmarks.transform.profile.table_stages --workdir /tmp/table-bench \\
        --out benchmarks/transform/profile/table-before.json
"""

from __future__ import annotations

import argparse
import io
import json
import pickle
import socket
import threading
import time
from pathlib import Path


def _cpu(fn, repeat: int) -> tuple[float, object]:
    fn()  # warm: first-call imports and tracing are start-up, not per record
    start = time.process_time()
    for _ in range(repeat):
        result = fn()
    return (time.process_time() - start) / repeat, result


def _round_trip(message) -> None:
    """``message`` through the handler pool's wire format to a reader thread and back in."""
    from tfbatch.handlers import wire

    a, b = socket.socketpair()
    got = []
    reader = threading.Thread(target=lambda: got.append(wire.recv(b)))
    reader.start()
    wire.send(a, message)
    reader.join()
    a.close()
    b.close()


def _worker_decode(bodies: list[bytes], content_type: str, sig, repeat: int) -> tuple[float, list]:
    """In the spawned worker-like process: the request decode the handler worker runs."""
    from tfbatch.handlers import defaults
    from tfbatch.tfs.codec import decode_predict

    bulk = getattr(defaults, "table_tensors", lambda *_: None)  # what the handler worker tries first

    def parse():
        return [bulk(b, content_type, sig) or decode_predict(defaults.json_request(b, content_type), sig)[0]
                for b in bodies]

    return _cpu(parse, repeat)


def _worker_encode(outputs: list[dict], sig, repeat: int) -> tuple[float, list]:
    from tfbatch.runtime import jsonenc
    from tfbatch.tfs.codec import encode_predict

    return _cpu(lambda: [jsonenc.dumps(encode_predict(o, "row", sig, native=True)) for o in outputs], repeat)


def stages(workdir: Path, framing: str, repeat: int, worker) -> dict:
    from benchmarks.transform import shape_data as data
    from benchmarks.transform.shapes import TABLE_ROWS
    from tfbatch.records import form_payloads, iter_records, split_multi_response
    from tfbatch.records.assemble import Assembler
    from tfbatch.runtime.servable import Servable

    inputs = data.table(workdir, framing, TABLE_ROWS)
    model = data.keras_artifact("vec32", workdir)
    servable = Servable.load("model", 1, model / "savedmodel" / "1")
    try:  # as the job's parent process does once its model has loaded, where it does
        from tfbatch.transform.instance import _freeze_heap
    except ImportError:
        pass
    else:
        _freeze_heap()
    sig = servable.signatures[servable.default_signature]
    content_type = "text/csv" if framing == "csv" else "application/jsonlines"
    raw = sorted(inputs.iterdir())[0].read_bytes()

    def split():
        records = iter_records(io.BytesIO(raw), "Line", source="k")
        return list(form_payloads(records, "MultiRecord", 1 << 20, source="k"))

    cost: dict[str, float] = {}
    t, payloads = _cpu(split, repeat)
    records = sum(len(p.records) for p in payloads)
    cost["split lines + MultiRecord payloads (parent)"] = t
    bodies = [p.body for p in payloads]
    items = [(pickle.PickleBuffer(b), content_type, "application/json", None, "model", None, "predict", None, None)
             for b in bodies]
    cost["hop: bodies to a worker (wire)"] = _cpu(lambda: _round_trip([("input", items)]), repeat)[0]
    t, tensors = worker.submit(_worker_decode, bodies, content_type, sig, repeat).result()
    cost["request decode: body -> float32 tensor (worker)"] = t
    cost["hop: tensors back to the parent (wire)"] = _cpu(
        lambda: _round_trip([[("tensors", x, "row", 1, sig.name) for x in tensors]]), repeat)[0]
    t, outputs = _cpu(lambda: [servable.run(sig.name, x) for x in tensors], repeat)
    cost["model call (parent)"] = t
    cost["hop: outputs to a worker (wire)"] = _cpu(lambda: _round_trip([("output", outputs)]), repeat)[0]
    t, answers = worker.submit(_worker_encode, outputs, sig, repeat).result()
    cost["response encode: outputs -> JSON (worker)"] = t
    cost["hop: responses back to the parent (wire)"] = _cpu(lambda: _round_trip([("final", 200, a) for a in answers]),
                                                            repeat)[0]
    t, parts = _cpu(lambda: [split_multi_response(p, a) for p, a in zip(payloads, answers)], repeat)
    cost["response split per record (parent)"] = t

    def assemble():
        sink = io.BytesIO()
        assembler = Assembler("Line", sink)
        for part in parts:
            for output in part:
                assembler.add(output)
        return sink.getvalue()

    cost["assemble lines (parent)"] = _cpu(assemble, repeat)[0]
    total = sum(cost.values())
    return {"records": records, "payloads": len(payloads), "bytes": len(raw),
            "us_per_record": {k: round(1e6 * v / records, 3) for k, v in cost.items()},
            "total_us_per_record": round(1e6 * total / records, 3),
            "share": {k: round(v / total, 3) for k, v in cost.items()}}


def markdown(result: dict) -> str:
    names = list(result["shapes"])
    first = result["shapes"][names[0]]
    lines = [f"`{result['command']}`", "", "CPU µs per record (share of the sum), each step alone in one process:", "",
             "| step | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for step in first["us_per_record"]:
        lines.append(f"| {step} | " + " | ".join(
            f"{result['shapes'][n]['us_per_record'][step]:.2f} ({100 * result['shapes'][n]['share'][step]:.0f}%)"
            for n in names) + " |")
    lines.append("| **sum** | " + " | ".join(f"**{result['shapes'][n]['total_us_per_record']:.2f}**" for n in names)
                 + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import sys

    parser = argparse.ArgumentParser(prog="python -m benchmarks.transform.profile.table_stages",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # The worker's steps in a fresh interpreter that never imports TensorFlow, as a handler worker.
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as worker:
        result = {"command": "python -m benchmarks.transform.profile.table_stages " + " ".join(argv or sys.argv[1:]),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  "shapes": {f: stages(Path(args.workdir), f, args.repeat, worker) for f in ("csv", "jsonl")}}
    out = Path(args.out)
    out.write_text(json.dumps(result, indent=1))
    out.with_suffix(".md").write_text(markdown(result))
    print(out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
