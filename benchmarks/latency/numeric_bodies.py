"""REST requests whose body is numbers alone, read from their bytes or parsed first.

A ``tfbatch serve`` process (loopback, ephemeral port) serves one Keras model of float inputs;
a ``requests.Session`` sends the same numbers two ways, alternating: ``{"instances": rows}``,
which the server reads from its bytes (``TfsApi.numeric_predict`` -> ``codec.decode_numeric``),
and ``{"signature_name": "serving_default", "instances": rows}``, which it parses into Python
lists first (``decode_json_object`` -> ``decode_predict``), the way every body went before. So
the ratio is of one server in one run, the decode path the only difference. Reported: the
median wall time per request of each, over ``--n`` requests each, after 3 warm-ups, for TF
Serving's ``:predict`` and SageMaker's ``/invocations``, and the server's CPU per request.

    python -m benchmarks.latency.numeric_bodies --workdir /tmp/bench-numeric --n 40 \
        --out benchmarks/latency/numeric_bodies.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CASES = [  # model, rows per request
    ("float64", 1),   # a 64x64x3 float image: 12,288 numbers
    ("float64", 16),
    ("vec32", 1),     # 32 numbers a row (the CSV shapes' model)
    ("vec32", 256),
]


def process_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve(model_dir: Path, workdir: Path) -> tuple[subprocess.Popen, str]:
    ready = workdir / f"ready-{model_dir.parent.parent.name}.json"
    ready.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfbatch.serve", str(model_dir.parent), "--port", "0", "--grpc-port", "0",
         "--ready-file", str(ready), "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    deadline = time.monotonic() + 180
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"server for {model_dir} did not start (exit {proc.poll()})")
        time.sleep(0.1)
    return proc, f"http://127.0.0.1:{json.loads(ready.read_text())['port']}"


def run_case(url: str, pid: int, shape: tuple[int, ...], rows: int, n: int) -> dict:
    import requests

    rng = np.random.default_rng(0)
    values = rng.random((rows, *shape), dtype=np.float32).round(4).tolist()
    bodies = {
        "numbers alone": json.dumps({"instances": values}).encode(),
        "parsed first": json.dumps({"signature_name": "serving_default", "instances": values}).encode(),
    }
    session = requests.Session()
    headers = {"Content-Type": "application/json"}
    out: dict = {"rows": rows, "body_bytes": len(bodies["numbers alone"]), "paths": {}}
    for path in ("/v1/models/model:predict", "/invocations"):
        answers = {}
        for name, body in bodies.items():  # warm-ups, and both answers must be the same
            for _ in range(3):
                r = session.post(url + path, data=body, headers=headers, timeout=120)
                assert r.status_code == 200, r.text[:300]
            answers[name] = r.content
        assert answers["numbers alone"] == answers["parsed first"], path
        times: dict[str, list[float]] = {name: [] for name in bodies}
        cpu: dict[str, float] = {name: 0.0 for name in bodies}
        for _ in range(n):
            for name, body in bodies.items():
                c0, t0 = process_cpu(pid), time.perf_counter()
                session.post(url + path, data=body, headers=headers, timeout=120).raise_for_status()
                times[name].append(time.perf_counter() - t0)
                cpu[name] += process_cpu(pid) - c0
        med = {name: float(np.median(t)) * 1000 for name, t in times.items()}
        out["paths"][path] = {
            "median_ms": med,
            "server_cpu_ms_per_request": {name: cpu[name] / n * 1000 for name in bodies},
            "speedup": med["parsed first"] / med["numbers alone"],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/bench-numeric"))
    ap.add_argument("--n", type=int, default=40, help="requests of each kind per case")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    from benchmarks.transform import shape_data

    shapes = {"float64": (64, 64, 3), "vec32": (shape_data.COLUMNS,)}
    result = {"command": "python -m benchmarks.latency.numeric_bodies " + " ".join(argv or sys.argv[1:]),
              "cpu_model": _cpu_model(), "cores": os.cpu_count(), "cases": []}
    for model in dict.fromkeys(m for m, _ in CASES):
        folder = shape_data.keras_artifact(model, args.workdir)
        proc, url = serve(folder / "savedmodel" / "1", args.workdir)
        try:
            for name, rows in CASES:
                if name == model:
                    case = {"model": model, **run_case(url, proc.pid, shapes[model], rows, args.n)}
                    result["cases"].append(case)
                    for path, p in case["paths"].items():
                        print(f"{model:8} rows {rows:4} {case['body_bytes']:>9,} B  {path:26} "
                              f"numbers alone {p['median_ms']['numbers alone']:8.2f} ms, parsed first "
                              f"{p['median_ms']['parsed first']:8.2f} ms: {p['speedup']:.2f}x; server CPU "
                              f"{p['server_cpu_ms_per_request']['numbers alone']:.2f} vs "
                              f"{p['server_cpu_ms_per_request']['parsed first']:.2f} ms", flush=True)
        finally:
            proc.terminate()
            proc.wait(30)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


if __name__ == "__main__":
    raise SystemExit(main())
