"""Real clients (requests, boto3 sagemaker-runtime, TFS PredictionServiceStub) against a real
``python -m tfbatch.serve`` subprocess on ephemeral loopback ports."""

from __future__ import annotations

import json
import re

import boto3
import grpc
import numpy as np
import pytest
import requests
import tensorflow as tf
from botocore.config import Config
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from tfbatch.testing.models import linear_expected

from .conftest import ServerProcess

X = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], dtype=np.float32)
ATTR = "X-Amzn-SageMaker-Custom-Attributes"


@pytest.fixture(scope="module")
def server(multi_dir, tmp_path_factory):
    srv = ServerProcess(
        multi_dir, tmp_path_factory.mktemp("srv"), "--max-body-mb", "1",
        env={"SAGEMAKER_TFS_ENABLE_BATCHING": "true", "SAGEMAKER_TFS_MAX_BATCH_SIZE": "2",
             "SAGEMAKER_TFS_DEFAULT_MODEL_NAME": "m1"},
    ).wait_ready()
    yield srv
    assert srv.stop() == 0, srv.output()


@pytest.fixture(scope="module")
def sagemaker_runtime(server, monkeypatch_module):
    return boto3.client(
        "sagemaker-runtime", endpoint_url=server.url, region_name="us-east-1",
        aws_access_key_id="test", aws_secret_access_key="test",
        config=Config(retries={"max_attempts": 1}),
    )


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_requests_invocations_and_custom_attributes(server):
    r = requests.post(f"{server.url}/invocations", json={"instances": X.tolist()}, timeout=30)
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["predictions"], linear_expected(X, seed=0), rtol=1e-5)
    for attrs, seed in [("tfs-model-name=m2", 2), ("tfs-model-name=m2,tfs-model-version=1", 1)]:
        r = requests.post(f"{server.url}/invocations", json={"instances": X.tolist()}, headers={ATTR: attrs}, timeout=30)
        np.testing.assert_allclose(r.json()["predictions"], linear_expected(X, seed=seed), rtol=1e-5)


def test_boto3_invoke_endpoint(sagemaker_runtime):
    response = sagemaker_runtime.invoke_endpoint(
        EndpointName="my-endpoint", ContentType="text/csv", Accept="application/json",
        Body="1,2,3\n0.5,-1,2\n", CustomAttributes="tfs-model-name=m2,tfs-model-version=1",
    )
    assert response["ContentType"] == "application/json"
    assert response["InvokedProductionVariant"] == "AllTraffic"
    np.testing.assert_allclose(json.loads(response["Body"].read())["predictions"], linear_expected(X, seed=1), rtol=1e-5)
    with pytest.raises(sagemaker_runtime.exceptions.ModelError) as info:
        sagemaker_runtime.invoke_endpoint(EndpointName="e", ContentType="application/json", Body=b'{"instances": [[1]]}')
    assert info.value.response["OriginalStatusCode"] == 400
    assert "x" in info.value.response["OriginalMessage"]


def test_prediction_service_stub(server):
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "m2"
        request.model_spec.version.value = 1
        request.inputs["x"].CopyFrom(tf.make_tensor_proto(X))
        result = stub.Predict(request, timeout=30)
    np.testing.assert_allclose(tf.make_ndarray(result.outputs["y"]), linear_expected(X, seed=1), rtol=1e-5)
    assert result.model_spec.version.value == 1


def test_oversized_request_is_split_into_batches(server):
    rows = np.arange(21, dtype=np.float32).reshape(7, 3)
    r = requests.post(f"{server.url}/v1/models/m1:predict", json={"instances": rows.tolist()}, timeout=30)
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["predictions"], linear_expected(rows, seed=0), rtol=1e-5)
    metrics = requests.get(f"{server.url}/metrics", timeout=30).text
    # 7 rows with max batch size 2: batches of at most 2 rows, none larger.
    big = re.findall(r'tfbatch_batch_size_bucket\{batcher="m1/1/serving_default",le="2"\} (\S+)', metrics)
    total = re.findall(r'tfbatch_batch_size_count\{batcher="m1/1/serving_default"\} (\S+)', metrics)
    assert big and total and float(big[0]) == float(total[0]) >= 4


def test_malformed_and_oversized_bodies_do_not_kill_the_worker(server):
    cases = [
        (b"{not json", "application/json", 400),
        (b'{"instances": [[1, 2]]}', "application/json", 400),
        (b'{"instances": [["a", "b", "c"]]}', "application/json", 400),
        (b"\xff\xfe", "text/csv", 400),
        (b"\x00\x01", "application/octet-stream", 415),
        (b"1" * (2 * 1024 * 1024), "application/json", 413),
    ]
    for body, content_type, status in cases:
        r = requests.post(f"{server.url}/invocations", data=body, headers={"Content-Type": content_type}, timeout=30)
        assert r.status_code == status, (body[:20], r.text)
        assert r.json()["error"]
    assert requests.get(f"{server.url}/ping", timeout=10).status_code == 200
    r = requests.post(f"{server.url}/invocations", json={"instances": X.tolist()}, timeout=30)
    assert r.status_code == 200


def test_execution_parameters_and_metrics(server):
    params = requests.get(f"{server.url}/execution-parameters", timeout=10).json()
    assert params == {"MaxConcurrentTransforms": 2, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 1}
    text = requests.get(f"{server.url}/metrics", timeout=10).text
    assert 'route="/invocations",status="200"' in text
    assert 'tfbatch_errors_total{route="/invocations",status="413"}' in text


@pytest.fixture(scope="module")
def handler_server(handler_dir, tmp_path_factory):
    srv = ServerProcess(
        handler_dir, tmp_path_factory.mktemp("hsrv"), "--workers", "2", env={"TFBATCH_AUTH_TOKEN": "tok"}
    ).wait_ready(timeout=180)
    yield srv
    assert srv.stop() == 0, srv.output()


AUTH = {"Authorization": "Bearer tok"}


@pytest.mark.parametrize("client", ["stub", "channel", "rest"])
def test_handler_script_calls_tfs_inside_the_endpoint(handler_server, client):
    r = requests.post(
        f"{handler_server.url}/invocations", json={"x": X.tolist()},
        headers={**AUTH, ATTR: f"client={client}"}, timeout=60,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["via"] == client
    np.testing.assert_allclose(body["predictions"], linear_expected(X), rtol=1e-5)


def test_auth_on_http_and_grpc(handler_server):
    assert requests.get(f"{handler_server.url}/ping", timeout=10).status_code == 200
    r = requests.post(f"{handler_server.url}/invocations", json={"x": X.tolist()}, timeout=30)
    assert r.status_code == 401
    assert requests.get(f"{handler_server.url}/metrics", timeout=10).status_code == 401
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "model"
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(X))
    with grpc.insecure_channel(f"127.0.0.1:{handler_server.grpc_port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.Predict(request, timeout=30)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        result = stub.Predict(request, timeout=30, metadata=[("authorization", "Bearer tok")])
    assert [d.size for d in result.outputs["y"].tensor_shape.dim] == [2, 2]


GRPC_METHODS = [
    "/tensorflow.serving.PredictionService/Predict", "/tensorflow.serving.PredictionService/Classify",
    "/tensorflow.serving.PredictionService/Regress", "/tensorflow.serving.PredictionService/MultiInference",
    "/tensorflow.serving.PredictionService/GetModelMetadata", "/tensorflow.serving.ModelService/GetModelStatus",
    "/tensorflow.serving.ModelService/HandleReloadConfigRequest",
]


def test_every_public_grpc_method_but_health_needs_the_token(handler_server):
    from tensorflow_serving.apis import get_model_status_pb2

    with grpc.insecure_channel(f"127.0.0.1:{handler_server.grpc_port}") as channel:
        for method in GRPC_METHODS:
            for metadata in (None, [("authorization", "Bearer wrong")]):
                with pytest.raises(grpc.RpcError) as info:
                    channel.unary_unary(method)(b"", timeout=30, metadata=metadata)
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, (method, metadata)
        status = get_model_status_pb2.GetModelStatusRequest()
        status.model_spec.name = "model"
        reply = channel.unary_unary("/tensorflow.serving.ModelService/GetModelStatus")(
            status.SerializeToString(), timeout=30, metadata=[("authorization", "Bearer tok")])
        assert get_model_status_pb2.GetModelStatusResponse.FromString(reply).model_version_status
        # health stays open to probes without credentials
        channel.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=30)


def test_two_workers_share_the_port(handler_server):
    pids = set()
    for _ in range(30):
        # A new connection each time, so the kernel may pick either worker.
        r = requests.get(f"{handler_server.url}/metrics", headers={**AUTH, "Connection": "close"}, timeout=10)
        pids.update(re.findall(r'tfbatch_worker_info\{pid="(\d+)"\}', r.text))
    assert len(pids) == 2


def _gate_model(path):
    """``gate``: [a FIFO path prefix] -> its length, once the model has written to
    ``<gate>.entered`` and then to ``<gate>.release``. Opening a FIFO to write waits for a
    reader, so the test knows the call is inside the model and decides when it ends.
    (``read_file`` would not do: TensorFlow sizes the file first and reads nothing.)"""
    class Gate(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="gate")])
        def serve(self, gate):
            tf.io.write_file(gate[0] + ".entered", "x")  # stateful ops run in program order
            tf.io.write_file(gate[0] + ".release", "x")
            return {"y": tf.strings.length(gate)}

    module = Gate()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})


def _open_fifo(path: str, mode: str, srv):
    """open() of a FIFO waits for the other end; if the server never opens it, fail instead."""
    import os
    import threading

    opened = {}
    opener = threading.Thread(target=lambda: opened.setdefault("f", open(path, mode)), daemon=True)
    opener.start()
    opener.join(120)  # a bound for a broken server, not a wait a passing run ever uses up
    if opener.is_alive():
        os.close(os.open(path, os.O_RDWR))  # lets the stuck open() return
        opener.join()
        opened["f"].close()
        raise AssertionError(f"the server never opened {path}:\n{srv.output()}")
    return opened["f"]


@pytest.fixture(scope="module")
def gate_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("gateart")
    _gate_model(root / "1")
    return root


def _gated_server(gate_dir, tmp) -> tuple[ServerProcess, str]:
    """A serve process over the gate model, and a fresh gate (two FIFOs) for one call."""
    import os

    gate = str(tmp / "gate")
    os.mkfifo(gate + ".entered")
    os.mkfifo(gate + ".release")
    return ServerProcess(gate_dir, tmp).wait_ready(), gate


def _pass(gate: str, which: str, srv: ServerProcess) -> None:
    """Let the held call past ``<gate>.entered`` (then it is inside the model) or ``.release``."""
    with _open_fifo(f"{gate}.{which}", "r", srv) as fifo:
        assert fifo.read() == "x"


def test_graceful_shutdown_finishes_in_flight_requests(gate_dir, tmp_path):
    import signal
    import threading

    from tfbatch.serve.grpc_health import NOT_SERVING, SERVING, HealthCheckRequest, HealthCheckResponse

    srv, gate = _gated_server(gate_dir, tmp_path)
    result = {}

    def call():
        result["r"] = requests.post(f"{srv.url}/v1/models/model:predict", json={"instances": [gate]}, timeout=120)

    worker = threading.Thread(target=call)
    worker.start()
    _pass(gate, "entered", srv)
    with grpc.insecure_channel(f"127.0.0.1:{srv.grpc_port}") as channel:
        watch = channel.unary_stream("/grpc.health.v1.Health/Watch",
                                     request_serializer=HealthCheckRequest.SerializeToString,
                                     response_deserializer=HealthCheckResponse.FromString)
        stream = watch(HealthCheckRequest(service=""), timeout=120)
        assert next(stream).status == SERVING
        srv.proc.send_signal(signal.SIGTERM)
        # Probes learn of the shutdown when the drain starts, while the request is still held.
        assert next(stream).status == NOT_SERVING
        stream.cancel()
    assert worker.is_alive() and srv.proc.poll() is None, (result["r"].status_code, result["r"].text[:500])
    _pass(gate, "release", srv)
    worker.join()
    assert srv.proc.wait(120) == 0, srv.output()
    assert result["r"].status_code == 200, result["r"].text
    assert result["r"].json()["predictions"] == [len(gate)]


def test_grpc_calls_in_flight_finish_when_the_server_stops(gate_dir, tmp_path):
    import signal
    import threading

    srv, gate = _gated_server(gate_dir, tmp_path)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "model"
    request.inputs["gate"].CopyFrom(tf.make_tensor_proto([gate]))
    address = f"127.0.0.1:{srv.grpc_port}"
    with grpc.insecure_channel(address) as held, grpc.insecure_channel(address) as watcher:
        future = prediction_service_pb2_grpc.PredictionServiceStub(held).Predict.future(request, timeout=120)
        _pass(gate, "entered", srv)
        # A second connection, READY, learns when the gRPC server begins to stop: its GOAWAY.
        watcher.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=30)
        stopping = threading.Event()
        watcher.subscribe(lambda state: state is not grpc.ChannelConnectivity.READY and stopping.set())
        srv.proc.send_signal(signal.SIGTERM)
        assert stopping.wait(120), srv.output()
        assert not future.done()
        _pass(gate, "release", srv)
        reply = future.result()
    assert tf.make_ndarray(reply.outputs["y"]).tolist() == [len(gate)]
    assert srv.proc.wait(120) == 0, srv.output()
