"""The SageMaker container entrypoint as a process, with the environment a container gets.

Docker images cannot be built on these machines; what the image runs (``python -m
tfbatch.serve.container serve``) is started here with SM_MODEL_DIR, SAGEMAKER_BIND_TO_PORT,
SAGEMAKER_SAFE_PORT_RANGE and SAGEMAKER_TFS_* set as SageMaker sets them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import grpc
import pytest
import requests
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from tfbatch.testing import models

X = [[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def container(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("opt_ml_model")
    models.make_linear_model(model_dir / "1")
    http_port, grpc_port = _free_port(), _free_port()
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        SM_MODEL_DIR=str(model_dir),
        SAGEMAKER_BIND_TO_PORT=str(http_port),
        SAGEMAKER_SAFE_PORT_RANGE=f"{grpc_port}-{grpc_port + 10}",
        SAGEMAKER_TFS_ENABLE_BATCHING="true",
        SAGEMAKER_TFS_MAX_BATCH_SIZE="4",
        # Only so the test does not open a port on every interface; the image leaves it unset.
        TFBATCH_SERVE_HOST="127.0.0.1",
    )
    log = open(tmp_path_factory.mktemp("log") / "container.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "tfbatch.serve.container", "serve"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{http_port}"
    deadline = time.monotonic() + 180
    while True:
        assert proc.poll() is None, log.seek(0) or log.read()
        assert time.monotonic() < deadline, "the container did not answer /ping"
        try:
            if requests.get(f"{url}/ping", timeout=5).status_code == 200:
                break
        except requests.ConnectionError:
            time.sleep(0.2)  # polling a process that has no other way to say it is up
    yield url, grpc_port, proc
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    log.close()


def test_ping_invocations_and_execution_parameters(container):
    url, _, _ = container
    r = requests.post(f"{url}/invocations", json={"instances": X}, timeout=60)
    assert r.status_code == 200 and len(r.json()["predictions"]) == 2
    params = requests.get(f"{url}/execution-parameters", timeout=10).json()
    assert params == {"MaxConcurrentTransforms": 4, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 100}


def test_grpc_listens_on_the_first_safe_port(container):
    _, grpc_port, _ = container
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "model"
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(X, dtype=tf.float32))
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        result = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=60)
    assert [d.size for d in result.outputs["y"].tensor_shape.dim] == [2, 2]


def test_other_commands_are_refused():
    proc = subprocess.run([sys.executable, "-m", "tfbatch.serve.container", "train"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "serve" in proc.stderr
