"""The wheel job's user-side checks, run with the fresh venv's python (see scripts/wheel_smoke.sh).

    python wheel_smoke.py WORKDIR

Makes a model.tar.gz with tfbatch.testing (an image classifier over PNG bytes) whose
inference.py dials the loopback TF Serving gRPC endpoint with ``tensorflow_serving.apis``,
as handler scripts written for the SageMaker container do (the fresh venv has no
tensorflow-serving-api: tfbatch's generated modules must answer that import). Then:
``tfbatch inspect``, a one-image ``tfbatch transform``, and ``tfbatch serve`` (start, /ping,
one /invocations, stop). Exits non-zero with the reason on the first failure.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = '''
import json
import grpc
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

def handler(data, context):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = context.model_name
    request.model_spec.signature_name = "serving_default"
    request.inputs["image_bytes"].CopyFrom(tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING, string_val=[data.read()],
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)])))
    stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(f"localhost:{context.grpc_port}"))
    result = stub.Predict(request, 30)
    return json.dumps({"class": int(result.outputs["classes"].int64_val[0])}), "application/json"
'''


def run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    print("+", " ".join(args), flush=True)
    proc = subprocess.run(args, text=True, capture_output=True, timeout=300, **kwargs)
    if proc.returncode != 0:
        sys.exit(f"FAILED ({proc.returncode}): {' '.join(args)}\n{proc.stdout}\n{proc.stderr}")
    return proc


def make_artifact(work: Path) -> tuple[Path, bytes]:
    from PIL import Image

    from tfbatch.artifact import package
    from tfbatch.testing.models import make_image_bytes_model

    make_image_bytes_model(work / "sm" / "1", size=8, channels=1, classes=10)
    (work / "code").mkdir()
    (work / "code" / "inference.py").write_text(SCRIPT)
    archive = package([work / "sm" / "1"], work / "model.tar.gz", code_dir=work / "code")
    buf = io.BytesIO()
    Image.new("L", (8, 8), color=200).save(buf, format="PNG")
    return archive, buf.getvalue()


def serve_smoke(tfbatch: str, archive: Path, png: bytes, work: Path) -> None:
    import requests

    ready = work / "ready.json"
    cmd = [tfbatch, "serve", str(archive), "--port", "0", "--grpc-port", "0", "--ready-file", str(ready)]
    print("+", " ".join(cmd), flush=True)
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 180
        while not ready.exists():  # written atomically once the server listens
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"FAILED: tfbatch serve did not start\n{server.stdout.read() if server.stdout else ''}")
            time.sleep(0.1)
        base = f"http://127.0.0.1:{json.loads(ready.read_text())['port']}"
        ping = requests.get(f"{base}/ping", timeout=30)
        assert ping.status_code == 200, ping.text
        resp = requests.post(f"{base}/invocations", data=png, headers={"Content-Type": "application/x-image"},
                             timeout=60)
        assert resp.status_code == 200 and "class" in resp.json(), resp.text
        print(f"serve: /ping 200, /invocations {resp.json()}", flush=True)
    finally:
        server.terminate()
        server.wait(60)


def main() -> None:
    work = Path(sys.argv[1])
    tfbatch = shutil.which("tfbatch", path=str(Path(sys.executable).parent))
    assert tfbatch, "the wheel installed no tfbatch command"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    print(run(tfbatch, "--version").stdout.strip())
    archive, png = make_artifact(work)
    print(run(tfbatch, "inspect", str(archive)).stdout.strip().splitlines()[0])
    (work / "in").mkdir()
    (work / "in" / "one.png").write_bytes(png)
    run(tfbatch, "transform", "--model", str(archive), "--input", str(work / "in"), "--output",
        str(work / "out"), "--content-type", "application/x-image")
    out = json.loads((work / "out" / "one.png.out").read_text())
    assert "class" in out, out
    print(f"transform: one.png -> {out}")
    serve_smoke(tfbatch, archive, png, work)
    print("wheel smoke test: ok")


if __name__ == "__main__":
    main()
