"""Fixtures for the serving tests: tiny real SavedModels laid out as model artifacts."""

from __future__ import annotations

import pytest

from tfbatch.testing import models


@pytest.fixture(scope="session")
def linear_dir(tmp_path_factory):
    """A single-model artifact directory: <root>/1/saved_model.pb."""
    root = tmp_path_factory.mktemp("linear")
    models.make_linear_model(root / "1")
    return root


@pytest.fixture(scope="session")
def classify_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("classify")
    models.make_classify_regress_model(root / "1")
    return root


@pytest.fixture(scope="session")
def model_server(linear_dir, classify_dir):
    from tfbatch.runtime import ModelServer

    server = ModelServer({"linear": {1: linear_dir / "1"}, "cr": {1: classify_dir / "1"}}, default_model="linear")
    yield server
    server.close()


@pytest.fixture(scope="session")
def loopback(model_server):
    from tfbatch.tfs.loopback import LoopbackEndpoints

    with LoopbackEndpoints(model_server) as endpoints:
        yield endpoints


class ServerProcess:
    """``python -m tfbatch.serve`` on ephemeral loopback ports, waited for via /ping."""

    def __init__(self, model_dir, tmp_path, *flags, env=None):
        import os
        import subprocess
        import sys

        self.ready_file = tmp_path / "ready.json"
        self.log = open(tmp_path / "server.log", "w+")
        full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tfbatch.serve", str(model_dir), "--port", "0", "--grpc-port", "0",
             "--ready-file", str(self.ready_file), "--log-level", "warning", *flags],
            stdout=self.log, stderr=subprocess.STDOUT, env=full_env,
        )

    def wait_ready(self, timeout=120):
        import json
        import time

        import requests

        deadline = time.monotonic() + timeout
        while not self.ready_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start (exit {self.proc.poll()}):\n{self.output()}")
            time.sleep(0.1)
        info = json.loads(self.ready_file.read_text())
        self.port, self.grpc_port = info["port"], info["grpc_port"]
        self.url = f"http://127.0.0.1:{self.port}"
        assert requests.get(f"{self.url}/ping", timeout=10).status_code == 200
        return self

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self, timeout=30) -> int:
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


HANDLER_SCRIPT = '''
"""A SageMaker-style handler: its own gRPC stub on context.grpc_port (seed 003), context.channel,
or a POST to context.rest_uri, chosen by a custom attribute."""
import json

import grpc
import numpy as np
import requests
from tensorflow.compat.v1 import make_tensor_proto
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

MAX_GRPC_MESSAGE_LENGTH = 512 * 1024 * 1024
LOADS = []
LOADS.append(1)  # module code runs once per worker


def handler(data, context):
    x = np.array(json.loads(data.read().decode("utf-8"))["x"], dtype=np.float32)
    how = "stub"
    if "client=rest" in (context.custom_attributes or ""):
        r = requests.post(context.rest_uri, data=json.dumps({"instances": x.tolist()}))
        return json.dumps({"predictions": r.json()["predictions"], "via": "rest", "loads": len(LOADS)}), "application/json"
    request = predict_pb2.PredictRequest()
    request.model_spec.name = context.model_name
    if context.model_version:
        request.model_spec.version.value = int(context.model_version)
    request.model_spec.signature_name = "serving_default"
    request.inputs["x"].CopyFrom(make_tensor_proto(x))
    if "client=channel" in (context.custom_attributes or ""):
        channel, how = context.channel, "channel"
    else:
        options = [("grpc.max_send_message_length", MAX_GRPC_MESSAGE_LENGTH),
                   ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_LENGTH)]
        channel = grpc.insecure_channel(f"0.0.0.0:{context.grpc_port}", options=options)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    result = stub.Predict.future(request, 30).result()
    out = result.outputs["y"]
    shape = [dim.size for dim in out.tensor_shape.dim]
    y = np.array(out.float_val).reshape(shape)
    body = {"predictions": y.tolist(), "via": how, "version": result.model_spec.version.value}
    return json.dumps(body), "application/json"
'''


@pytest.fixture(scope="session")
def multi_dir(tmp_path_factory):
    """Multi-model, multi-version artifact: m1/1 (seed 0), m2/1 (seed 1), m2/2 (seed 2)."""
    root = tmp_path_factory.mktemp("multi")
    models.make_linear_model(root / "m1" / "1", seed=0)
    models.make_linear_model(root / "m2" / "1", seed=1)
    models.make_linear_model(root / "m2" / "2", seed=2)
    return root


@pytest.fixture(scope="session")
def handler_dir(tmp_path_factory):
    """A single model plus code/inference.py with a gRPC handler."""
    root = tmp_path_factory.mktemp("handler")
    models.make_linear_model(root / "1", seed=0)
    (root / "code").mkdir()
    (root / "code" / "inference.py").write_text(HANDLER_SCRIPT)
    return root
