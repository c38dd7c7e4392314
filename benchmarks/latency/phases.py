"""Where the REST time goes on the 10.5 MB output, phase by phase, beside gRPC on the same server.

Phases of one ``/invocations`` call (detection model, one float32 output of 2,625,000 values):

- ``predict``: the model call alone, in this process (``ModelServer.run``);
- ``encode``: the server's JSON encoding of that output, in this process (``jsonenc.dumps``);
- ``first byte``: client sends -> response headers received (``requests`` with ``stream=True``);
  the server's request handling, predict, and (when the body is not streamed) its whole encode;
- ``read``: headers -> last body byte in the client (the server's send and the client's read,
  and with a streamed body the server's encode overlapping them);
- ``parse``: ``orjson.loads`` + ``np.asarray`` of the body, as the latency bench's client does.

gRPC on the same server: the whole ``Predict`` call, then ``tf.make_ndarray``. The paths are
called in turn (REST, gRPC, [REST .npy], REST, ...) and each phase's median is reported. With ``--spy``,
py-spy samples every thread of the server while REST requests run (raw stacks to that file).

    python -m benchmarks.latency.phases --n 20 --npy --spy /tmp/rest-spy.txt
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common.measure import tree_cpu_seconds
from benchmarks.latency import bench
from benchmarks.latency.profile_rest import summarise


def median_ms(samples: list[float]) -> float:
    return float(np.median(samples)) * 1000


def parse_npy(body: bytes) -> np.ndarray:
    import io

    return np.load(io.BytesIO(body), allow_pickle=False)


def rest_call(url: str, jpeg: bytes, npy: bool = False):
    """One ``/invocations`` call timed by phase; ``npy``: the opt-in ``Accept: application/x-npy``
    answer, parsed by ``np.load``."""
    import requests

    session = requests.Session()
    headers = {"Content-Type": "application/x-image", **({"Accept": "application/x-npy"} if npy else {})}
    parse_body = parse_npy if npy else bench.parse_rest

    def call() -> dict:
        t0 = time.perf_counter()
        r = session.post(f"{url}/invocations", data=jpeg, headers=headers, stream=True)
        t1 = time.perf_counter()
        body = r.content
        t2 = time.perf_counter()
        parse_body(body)
        t3 = time.perf_counter()
        r.raise_for_status()
        return {"first_byte": t1 - t0, "read": t2 - t1, "parse": t3 - t2, "unparsed": t2 - t0, "total": t3 - t0,
                "chunked": r.headers.get("transfer-encoding") == "chunked", "body_bytes": len(body)}

    return call


def grpc_call(port: int, jpeg: bytes):
    stub_call = bench.grpc_predict(port, jpeg, parse=False)()

    def call() -> dict:
        t0 = time.perf_counter()
        response = stub_call()
        t1 = time.perf_counter()
        bench.parse_grpc(response)
        t2 = time.perf_counter()
        return {"unparsed": t1 - t0, "parse": t2 - t1, "total": t2 - t0}

    return call


def interleaved(calls: dict, n: int, server_pids: dict[str, int] | None = None) -> dict[str, dict]:
    """Median of every phase, the paths called in turn so that load drift hits them alike.

    With ``server_pids`` (per call label), each call also gets its CPU: ``client_cpu`` (this
    process, all threads, the parse included) and ``server_cpu`` (the server and its children)."""
    servers = server_pids or {}
    samples: dict[str, list[dict]] = {label: [] for label in calls}
    for i in range(n + 2):
        for label, call in calls.items():
            server = servers.get(label)
            client0 = time.process_time()
            server0 = tree_cpu_seconds(server) if server else 0.0
            phases = call()
            phases["client_cpu"] = time.process_time() - client0
            phases["server_cpu"] = (tree_cpu_seconds(server) - server0) if server else 0.0
            if i >= 2:  # the first two rounds warm connections and the server
                samples[label].append(phases)
    out = {}
    for label, rows in samples.items():
        out[label] = {k: (median_ms([r[k] for r in rows]) if isinstance(v, float) else v) for k, v in rows[-1].items()}
    return out


def in_process(model_dir: Path, jpeg: bytes, n: int) -> dict[str, float]:
    from tfbatch.runtime import ModelServer, jsonenc
    from tfbatch.tfs.codec import encode_predict

    server = ModelServer({"model": {1: model_dir / "1"}})
    try:
        inputs = {"image_bytes": np.array([jpeg], dtype=object)}
        sig = server.resolve("model", None).signatures["serving_default"]
        outputs = server.run(inputs)
        predict = bench.timed(lambda: server.run(inputs), n, 2)
        encode = bench.timed(lambda: jsonenc.dumps(encode_predict(outputs, "row", sig, native=True)), n, 1)
        return {"predict_ms": median_ms(predict), "encode_ms": median_ms(encode)}
    finally:
        server.close()


def spy(pid: int, out: Path, seconds: float, work) -> str:
    spy = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "-p", str(pid),
                            "-o", str(out), "-f", "raw", "-t", "-r", "200", "-d", str(int(seconds + 2))],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)  # py-spy attaching
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        work()
    spy.wait()
    return summarise(out, top=16)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=20)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/tfbatch-latency-phases"))
    p.add_argument("--spy", type=Path, help="also py-spy the server (raw stacks to this file)")
    p.add_argument("--seconds", type=float, default=8)
    p.add_argument("--npy", action="store_true", help="also time the opt-in Accept: application/x-npy answer")
    p.add_argument("--server-flag", action="append", help="extra flag for tfbatch serve (repeatable)")
    p.add_argument("--b-flag", action="append",
                   help="start a second server with this flag (repeatable) and time its REST path in the same "
                        "rounds, e.g. --b-flag=--json-helpers=0")
    args = p.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args.workdir.mkdir(parents=True, exist_ok=True)
    model_dir = bench.build_model("detection", args.workdir, 10.5)
    jpeg = bench.sample_jpeg(224)
    local = in_process(model_dir, jpeg, args.n)
    server = bench.Server(model_dir, args.workdir, args.server_flag or [], {})
    other = None
    try:
        calls = {"rest": rest_call(server.url, jpeg), "grpc": grpc_call(server.grpc_port, jpeg)}
        if args.npy:
            calls["npy"] = rest_call(server.url, jpeg, npy=True)
        if args.b_flag:
            b_dir = args.workdir / "b"
            b_dir.mkdir(exist_ok=True)
            other = bench.Server(model_dir, b_dir, [*(args.server_flag or []), *args.b_flag], {})
            calls["rest_b"] = rest_call(other.url, jpeg)
        # Each call's server CPU is read from the server it went to.
        got = interleaved(calls, args.n, {label: (other if label == "rest_b" else server).proc.pid for label in calls})
        rest, grpc_, binary = got["rest"], got["grpc"], got.get("npy")
        profile = None
        if args.spy:
            call = bench.rest_invocations(server.url, jpeg, parse=False)()
            profile = spy(server.proc.pid, args.spy, args.seconds, call)
    finally:
        server.stop()
        if other is not None:
            other.stop()
    print(f"in process: predict {local['predict_ms']:.1f} ms, JSON encode {local['encode_ms']:.1f} ms")
    print(f"REST /invocations ({rest['body_bytes']:,} bytes, chunked={rest['chunked']}): "
          f"first byte {rest['first_byte']:.1f} ms, read {rest['read']:.1f} ms, "
          f"parse {rest['parse']:.1f} ms; total {rest['total']:.1f} ms, without parse {rest['unparsed']:.1f} ms")
    print(f"gRPC Predict: call {grpc_['unparsed']:.1f} ms, parse {grpc_['parse']:.1f} ms; total {grpc_['total']:.1f} ms")
    for label, row in got.items():
        print(f"CPU per call, {label}: server (with its helper processes) {row['server_cpu']:.1f} ms, "
              f"client (parse included) {row['client_cpu']:.1f} ms")
    print(f"REST/gRPC medians: with parse {rest['total'] / grpc_['total']:.2f}x, "
          f"without {rest['unparsed'] / grpc_['unparsed']:.2f}x")
    if "rest_b" in got:
        b = got["rest_b"]
        print(f"REST /invocations on the second server ({' '.join(args.b_flag)}): first byte {b['first_byte']:.1f} ms, "
              f"read {b['read']:.1f} ms; without parse {b['unparsed']:.1f} ms "
              f"({b['unparsed'] / grpc_['unparsed']:.2f}x gRPC); the first server's REST over it: "
              f"{rest['unparsed'] / b['unparsed']:.2f}x")
    if binary:
        print(f"REST /invocations, Accept: application/x-npy ({binary['body_bytes']:,} bytes): first byte "
              f"{binary['first_byte']:.1f} ms, read {binary['read']:.1f} ms, parse (np.load) "
              f"{binary['parse']:.1f} ms; total {binary['total']:.1f} ms "
              f"({binary['total'] / grpc_['total']:.2f}x gRPC with parse, "
              f"{binary['unparsed'] / grpc_['unparsed']:.2f}x without)")
    if profile:
        print(profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
