"""Endpoint latency benchmark (issue 4 item 8): seed 003's experiment against ``tfbatch serve``.

For each model: the bare in-process model call, then a real ``tfbatch serve`` subprocess
called over REST (``/invocations`` with the JPEG body, TFS ``:predict`` with base64 JSON) and
over gRPC (``PredictionServiceStub.Predict`` with a string tensor): N sequential invocations
(P50/P90/P95/P99/average) and a concurrent load (throughput, against the bare model's
batched throughput).

Client work is the same for both protocols: a sequential call ends when the client holds the
output as a numpy array (REST: ``orjson.loads`` + ``np.asarray``; gRPC: ``tf.make_ndarray``).
``client_parse_ms`` is that step alone (median over the sequential calls), and each path's
P50 is also reported to the received message. The sequential calls take the paths in turn, so
a shared machine's load drifts over REST and gRPC alike. The concurrent load stops at
the received message (bytes / response proto) so that it measures the server, not the 2-CPU
client parsing 64 responses at once. ``encode_*_ms`` time the server's JSON encoding of one
response in-process: ``tolist`` + ``json.dumps`` (per-element Python, the old path) against
``jsonenc.dumps`` over the numpy array (orjson, what the server does).

Models: ``mobilenet_v2`` (224-pixel JPEG -> 1000 probabilities), ``detection`` (a JPEG in,
a detection-sized float32 output of ``--detection-mb`` MB out), ``tiny`` (harness check).

    python -m benchmarks.latency.bench --models mobilenet_v2 detection --n 100 --concurrency 64 \\
        --out benchmarks/latency
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np

PERCENTILES = (50, 90, 95, 99)


def export_detection_model(target: Path, *, output_mb: float, size: int = 64) -> Path:
    """JPEG bytes -> ``detections`` float32 [N, k], k*4 bytes = output_mb: the response is the load."""
    import tensorflow as tf

    k = max(1, int(output_mb * 1_000_000 / 4))

    class Detection(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
        def serve(self, image_bytes):
            def one(encoded):
                image = tf.image.resize(tf.io.decode_jpeg(encoded, channels=3), (size, size))
                return tf.reduce_mean(image)

            means = tf.map_fn(one, image_bytes, fn_output_signature=tf.float32)
            ramp = tf.range(k, dtype=tf.float32) / float(k)
            return {"detections": means[:, None] * 0.001 + ramp[None, :]}

    module = Detection()
    tf.saved_model.save(module, str(target), signatures={"serving_default": module.serve})
    return target


def build_model(name: str, workdir: Path, detection_mb: float) -> Path:
    """``<workdir>/<name>/1`` SavedModel with serving_default on ``image_bytes``; returns the artifact dir."""
    root = workdir / name
    if (root / "1" / "saved_model.pb").exists():
        return root
    if name == "detection":
        export_detection_model(root / "1", output_mb=detection_mb)
    else:
        from benchmarks.common.models import export_savedmodel

        export_savedmodel(name, root / "1")
    return root


def sample_jpeg(size: int = 224) -> bytes:
    """A real photo (scikit-image's), resized to ``size`` pixels, as the seed sends."""
    import io

    from PIL import Image
    from skimage import data

    buf = io.BytesIO()
    Image.fromarray(data.chelsea()).resize((size, size)).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def stats(samples_s: list[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1000
    out = {f"p{p}": float(np.percentile(ms, p)) for p in PERCENTILES}
    out["avg"] = float(ms.mean())
    out["n"] = len(ms)
    return out


def timed(fn: Callable[[], object], n: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return samples


def concurrent(make_call: Callable[[], Callable[[], object]], clients: int, per_client: int) -> float:
    """Requests per second with ``clients`` threads each making ``per_client`` calls."""
    barrier = threading.Barrier(clients + 1)

    def client():
        try:
            call = make_call()
            call()  # warm this client's connection
        except BaseException:
            barrier.abort()  # fail the run instead of leaving the others waiting forever
            raise
        barrier.wait()
        for _ in range(per_client):
            call()

    with ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(client) for _ in range(clients)]
        barrier.wait()
        t = time.perf_counter()
        for f in futures:
            f.result()
        return clients * per_client / (time.perf_counter() - t)


class Server:
    def __init__(self, model_dir: Path, workdir: Path, flags: list[str], env: dict[str, str]):
        self.ready = workdir / f"ready-{model_dir.name}.json"
        self.ready.unlink(missing_ok=True)
        self.log = open(workdir / f"server-{model_dir.name}.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tfbatch.serve", str(model_dir), "--port", "0", "--grpc-port", "0",
             "--ready-file", str(self.ready), "--log-level", "warning", *flags],
            stdout=self.log, stderr=subprocess.STDOUT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env),
        )
        deadline = time.monotonic() + 600
        while not self.ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server failed to start; see {self.log.name}")
            time.sleep(0.2)
        info = json.loads(self.ready.read_text())
        self.url, self.grpc_port = f"http://127.0.0.1:{info['port']}", info["grpc_port"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        self.log.close()


def parse_rest(content: bytes) -> dict[str, np.ndarray]:
    """A REST client's work on a TF Serving row-format answer: every output as a numpy array."""
    import orjson

    predictions = orjson.loads(content)["predictions"]
    if predictions and isinstance(predictions[0], dict):  # several outputs: one object per row
        return {k: np.asarray([row[k] for row in predictions]) for k in predictions[0]}
    return {"": np.asarray(predictions, dtype=np.float32)}


def parse_grpc(response) -> dict[str, np.ndarray]:
    import tensorflow as tf

    return {k: tf.make_ndarray(v) for k, v in response.outputs.items()}


def rest_invocations(url: str, jpeg: bytes, parse: bool = True) -> Callable[[], Callable[[], object]]:
    def make():
        import requests

        session = requests.Session()

        def call():
            r = session.post(f"{url}/invocations", data=jpeg, headers={"Content-Type": "application/x-image"})
            r.raise_for_status()
            return parse_rest(r.content) if parse else r.content

        return call

    return make


def rest_predict(url: str, jpeg: bytes, parse: bool = True) -> Callable[[], Callable[[], object]]:
    body = json.dumps({"instances": [{"b64": base64.b64encode(jpeg).decode()}]})

    def make():
        import requests

        session = requests.Session()

        def call():
            r = session.post(f"{url}/v1/models/model:predict", data=body)
            r.raise_for_status()
            return parse_rest(r.content) if parse else r.content

        return call

    return make


def grpc_predict(port: int, jpeg: bytes, parse: bool = True) -> Callable[[], Callable[[], object]]:
    def make():
        import grpc
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

        limit = 1024 * 1024 * 1024
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[
            ("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit)])
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "model"
        request.inputs["image_bytes"].CopyFrom(tf.make_tensor_proto([jpeg]))

        def call():
            response = stub.Predict(request, 60)
            return parse_grpc(response) if parse else response

        return call

    return make


def encode_times(outputs: dict, sig, reps: int) -> dict[str, float]:
    """Median ms to encode one response as the server's JSON, the old way and the current way."""
    from tfbatch.runtime import jsonenc
    from tfbatch.tfs.codec import encode_predict

    def old():
        return json.dumps(encode_predict(outputs, "row", sig), separators=(",", ":")).encode()

    def new():
        return jsonenc.dumps(encode_predict(outputs, "row", sig, native=True))

    def f32(arrays):  # JSON numbers come back as float64: compare as the float32 they encode
        return {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in arrays.items()}

    body = new()
    a, b = f32(parse_rest(old())), f32(parse_rest(body))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)  # same values either way
    return {"encode_tolist_json_ms": float(np.median(timed(old, reps, 1))) * 1000,
            "encode_orjson_ms": float(np.median(timed(new, reps, 1))) * 1000,
            "response_json_bytes": len(body)}


def bench_model(name: str, args: argparse.Namespace, workdir: Path) -> dict:
    from tfbatch.runtime import ModelServer

    model_dir = build_model(name, workdir, args.detection_mb)
    jpeg = sample_jpeg(224)
    result: dict = {"model": name, "request_bytes": len(jpeg)}
    bare = ModelServer({"model": {1: model_dir / "1"}})
    single = {"image_bytes": np.array([jpeg], dtype=object)}
    outputs = bare.run(single)
    result["response_tensor_bytes"] = int(sum(v.nbytes for v in outputs.values()))
    result["bare"] = stats(timed(lambda: bare.run(single), args.n, args.warmup))
    batch = {"image_bytes": np.array([jpeg] * args.concurrency, dtype=object)}
    per_batch = timed(lambda: bare.run(batch), max(3, args.n // 10), 1)
    result["bare_batched_rps"] = args.concurrency / float(np.median(per_batch))
    servable = bare.resolve("model", None)
    result.update(encode_times(outputs, servable.signatures[servable.default_signature], max(3, args.n // 20)))
    bare.close()

    env = {"SAGEMAKER_TFS_ENABLE_BATCHING": "true", "SAGEMAKER_TFS_MAX_BATCH_SIZE": str(args.concurrency),
           "SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS": str(args.batch_timeout_micros)} if args.batching else {}
    # Every client's call in flight at once must be admitted, not refused as over the gRPC cap.
    flags = ["--grpc-max-concurrent-rpcs", str(2 * args.concurrency), *(args.server_flag or [])]
    server = Server(model_dir, workdir, flags, env)
    try:
        clients = {
            "rest_invocations": (rest_invocations, server.url, parse_rest),
            "rest_predict_b64": (rest_predict, server.url, parse_rest),
            "grpc_predict": (grpc_predict, server.grpc_port, parse_grpc),
        }
        for label, entry in interleaved(clients, jpeg, args.n, args.warmup).items():
            entry["overhead_p50_ms"] = entry["p50"] - result["bare"]["p50"]
            result[label] = entry
        for label, (client, where, parse) in clients.items():
            entry = result[label]
            if label != "rest_predict_b64":
                rps = concurrent(client(where, jpeg, parse=False), args.concurrency, args.per_client)
                entry["concurrent_rps"] = rps
                entry["vs_bare_batched"] = rps / result["bare_batched_rps"]
    finally:
        server.stop()
    rest, grpc_ = result["rest_invocations"], result["grpc_predict"]
    result["rest_over_grpc_p50"] = rest["p50"] / grpc_["p50"]
    result["rest_over_grpc_p50_unparsed"] = rest["unparsed"]["p50"] / grpc_["unparsed"]["p50"]
    return result


def interleaved(clients: dict, jpeg: bytes, n: int, warmup: int) -> dict[str, dict]:
    """Sequential calls of every path in turn (REST, REST, gRPC, REST, ...), so that a shared
    machine's load drifts over all paths alike. Each call is timed to the received message
    (``unparsed``) and through the client's parse into numpy (the headline figures)."""
    callers = {label: (client(where, jpeg, parse=False)(), parse) for label, (client, where, parse) in clients.items()}
    received: dict[str, list[float]] = {label: [] for label in callers}
    parsed: dict[str, list[float]] = {label: [] for label in callers}
    parse_only: dict[str, list[float]] = {label: [] for label in callers}
    for i in range(warmup + n):
        for label, (call, parse) in callers.items():
            t0 = time.perf_counter()
            message = call()
            t1 = time.perf_counter()
            parse(message)
            t2 = time.perf_counter()
            if i >= warmup:
                received[label].append(t1 - t0), parsed[label].append(t2 - t0), parse_only[label].append(t2 - t1)
            del message
    out = {}
    for label in callers:
        entry = stats(parsed[label])
        entry["unparsed"] = stats(received[label])
        entry["client_parse_ms"] = float(np.median(parse_only[label])) * 1000
        out[label] = entry
    return out


def markdown(results: list[dict], command: str) -> str:
    lines = [
        "# Endpoint latency (tfbatch serve)", "", f"Command: `{command}`", "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}", "",
        "Sequential calls include the client's parse into a numpy array (client parse ms: that step alone; "
        "P50 without parse: the same calls timed to the received message). The paths are called in turn "
        "(REST, REST b64, gRPC, REST, ...) so that load drift on a shared machine hits them alike.", "",
        "| model | path | P50 ms | P90 | P95 | P99 | avg | overhead P50 ms | client parse ms | P50 without parse | concurrent req/s | vs bare batched |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for path in ("bare", "rest_invocations", "rest_predict_b64", "grpc_predict"):
            e = r[path]
            conc = f"{e['concurrent_rps']:.1f}" if "concurrent_rps" in e else (
                f"{r['bare_batched_rps']:.1f} (batched)" if path == "bare" else "")
            ratio = f"{e['vs_bare_batched']:.2f}" if "vs_bare_batched" in e else ""
            over = f"{e['overhead_p50_ms']:.2f}" if "overhead_p50_ms" in e else ""
            parse = f"{e['client_parse_ms']:.2f}" if "client_parse_ms" in e else ""
            bare = f"{e['unparsed']['p50']:.2f}" if "unparsed" in e else ""
            lines.append(f"| {r['model']} | {path} | {e['p50']:.2f} | {e['p90']:.2f} | {e['p95']:.2f} | "
                         f"{e['p99']:.2f} | {e['avg']:.2f} | {over} | {parse} | {bare} | {conc} | {ratio} |")
    lines += ["", "Response tensor bytes: " + ", ".join(f"{r['model']} {r['response_tensor_bytes']:,}" for r in results),
              "Response JSON bytes: " + ", ".join(f"{r['model']} {r['response_json_bytes']:,}" for r in results),
              "REST /invocations P50 over gRPC P50 (both parsed): "
              + ", ".join(f"{r['model']} {r['rest_over_grpc_p50']:.2f}x" for r in results),
              "Same, without the client parse (P50 of the same calls to the received message): "
              + ", ".join(f"{r['model']} {r['rest_over_grpc_p50_unparsed']:.2f}x" for r in results),
              "Server JSON encoding of one response, tolist+json.dumps -> orjson over numpy (ms): "
              + ", ".join(f"{r['model']} {r['encode_tolist_json_ms']:.1f} -> {r['encode_orjson_ms']:.1f} "
                          f"({r['encode_tolist_json_ms'] / r['encode_orjson_ms']:.1f}x)" for r in results),
              ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.latency.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["mobilenet_v2", "detection"],
                   choices=["mobilenet_v2", "detection", "tiny", "resnet50"])
    p.add_argument("--n", type=int, default=100, help="sequential invocations per path")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--concurrency", type=int, default=64, help="concurrent clients")
    p.add_argument("--per-client", type=int, default=10, help="requests per concurrent client")
    p.add_argument("--detection-mb", type=float, default=10.5, help="detection model output size")
    p.add_argument("--batching", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--batch-timeout-micros", type=int, default=1000)
    p.add_argument("--server-flag", action="append", help="extra flag for tfbatch serve (repeatable)")
    p.add_argument("--workdir", type=Path, help="where models are built (default: a temp dir)")
    p.add_argument("--out", type=Path, help="folder for latency.json and latency.md")
    p.add_argument("--note", help="a line for the report (e.g. how busy the machine was)")
    args = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tfbatch-latency-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = [bench_model(name, args, workdir) for name in args.models]
    command = "python -m benchmarks.latency.bench " + " ".join(argv if argv is not None else sys.argv[1:])
    report = markdown(results, command)
    if args.note:
        report += f"\nNote: {args.note}\n"
    print(report)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "latency.json").write_text(json.dumps({"command": command, "note": args.note, "results": results}, indent=2))
        (args.out / "latency.md").write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
