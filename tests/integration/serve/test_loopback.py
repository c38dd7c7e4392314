"""The loopback TFS endpoints answer real REST (requests) and gRPC (PredictionServiceStub) clients."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import requests
import tensorflow as tf
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from tfbatch.testing.models import linear_expected

X = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]], dtype=np.float32)


@pytest.fixture(scope="module")
def stub(loopback):
    channel = grpc.insecure_channel(f"127.0.0.1:{loopback.grpc_port}")
    yield prediction_service_pb2_grpc.PredictionServiceStub(channel)
    channel.close()


def test_rest_predict_status_metadata(loopback):
    url = f"{loopback.rest_url}/v1/models/linear"
    r = requests.post(f"{url}:predict", json={"instances": X.tolist()}, timeout=30)
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["predictions"], linear_expected(X), rtol=1e-5)
    r = requests.post(f"{url}/versions/1:predict", json={"inputs": {"x": X.tolist()}}, timeout=30)
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["outputs"], linear_expected(X), rtol=1e-5)
    status = requests.get(url, timeout=30).json()
    assert status["model_version_status"][0]["state"] == "AVAILABLE"
    meta = requests.get(f"{url}/metadata", timeout=30).json()
    assert "serving_default" in meta["metadata"]["signature_def"]["signature_def"]


@pytest.mark.parametrize(
    "method,path,body,status,words",
    [
        ("POST", "/v1/models/nope:predict", {"instances": [[1, 2, 3]]}, 404, "nope"),
        ("POST", "/v1/models/linear/versions/7:predict", {"instances": [[1, 2, 3]]}, 404, "7"),
        ("POST", "/v1/models/linear/versions/x:predict", {"instances": [[1, 2, 3]]}, 400, "integer"),
        ("POST", "/v1/models/linear:explode", {"instances": [[1, 2, 3]]}, 404, "predict"),
        ("POST", "/v1/models/linear:predict", b"{not json", 400, "JSON"),
        ("POST", "/v1/models/linear:predict", [1, 2], 400, "object"),
        ("POST", "/v1/models/linear:predict", {"instances": [[1, 2]]}, 400, "x"),
    ],
)
def test_rest_errors(loopback, method, path, body, status, words):
    kwargs = {"data": body} if isinstance(body, bytes) else {"json": body}
    r = requests.request(method, loopback.rest_url + path, timeout=30, **kwargs)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]


def test_grpc_predict_like_seed_003(stub):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "linear"
    request.model_spec.signature_name = "serving_default"
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(X))
    result = stub.Predict.future(request, 30).result()
    out = tf.make_ndarray(result.outputs["y"])
    np.testing.assert_allclose(out, linear_expected(X), rtol=1e-5)
    assert result.model_spec.name == "linear" and result.model_spec.version.value == 1
    # Seed 003 reads float_val and reshapes it itself, as TF Serving fills that field.
    proto = result.outputs["y"]
    shape = [d.size for d in proto.tensor_shape.dim]
    np.testing.assert_allclose(np.array(proto.float_val).reshape(shape), linear_expected(X), rtol=1e-5)


def test_grpc_errors_carry_status_codes(stub):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "nope"
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(X))
    with pytest.raises(grpc.RpcError) as info:
        stub.Predict(request, timeout=30)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    request.model_spec.name = "linear"
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(X[:, :2]))
    with pytest.raises(grpc.RpcError) as info:
        stub.Predict(request, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # The server survives both.
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(X))
    assert stub.Predict(request, timeout=30).outputs["y"].tensor_shape.dim[0].size == 2


def _examples(rows):
    examples = []
    for x in rows:
        ex = tf.train.Example()
        ex.features.feature["x"].float_list.value.extend(x)
        examples.append(ex)
    return examples


def test_grpc_classify_and_regress(stub):
    rows = [[1.0, 2.0], [-3.0, 0.5]]
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name = "cr"
    request.input.example_list.examples.extend(_examples(rows))
    result = stub.Classify(request, timeout=30).result
    assert len(result.classifications) == 2
    first = result.classifications[0].classes
    assert [c.label for c in first] == ["negative", "positive"]
    assert first[1].score == pytest.approx(1 / (1 + np.exp(-3.0)), rel=1e-5)

    request = regression_pb2.RegressionRequest()
    request.model_spec.name = "cr"
    request.model_spec.signature_name = "regress"
    request.input.example_list.examples.extend(_examples(rows))
    values = [r.value for r in stub.Regress(request, timeout=30).result.regressions]
    assert values == pytest.approx([3.0, -2.5])


def test_grpc_metadata_and_status(loopback, stub):
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "linear"
    request.metadata_field.append("signature_def")
    response = stub.GetModelMetadata(request, timeout=30)
    sigmap = get_model_metadata_pb2.SignatureDefMap()
    response.metadata["signature_def"].Unpack(sigmap)
    x = sigmap.signature_def["serving_default"].inputs["x"]
    assert x.dtype == tf.float32.as_datatype_enum
    assert [d.size for d in x.tensor_shape.dim] == [-1, 3]

    channel = grpc.insecure_channel(f"127.0.0.1:{loopback.grpc_port}")
    status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
        get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "linear"}), timeout=30
    )
    channel.close()
    assert status.model_version_status[0].version == 1
    assert status.model_version_status[0].state == get_model_status_pb2.ModelVersionStatus.AVAILABLE


def test_bound_sockets_say_tcp_so_asyncio_sets_nodelay():
    """asyncio sets TCP_NODELAY on accepted connections only for IPPROTO_TCP listeners; without
    it each REST response stalled ~40 ms on delayed ACKs (measured by bench/latency.py)."""
    import socket

    from tfbatch.tfs.loopback import bind_socket

    sock = bind_socket("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()


def test_both_sides_charge_requests_against_the_model_servers_budget(linear_dir):
    """``tfbatch serve --max-request-mb`` reaches the loopback endpoints through RuntimeSettings."""
    from tfbatch.runtime import ModelServer, RuntimeSettings
    from tfbatch.tfs.loopback import LoopbackEndpoints

    rows = np.ones((1000, 3), np.float32)  # 12,000 bytes, over a 4 KiB budget
    settings = RuntimeSettings(max_request_bytes=4096)
    with ModelServer({"linear": {1: linear_dir / "1"}}, settings) as server, LoopbackEndpoints(server) as ends:
        r = requests.post(f"http://127.0.0.1:{ends.rest_port}/v1/models/linear:predict",
                          json={"instances": rows.tolist()}, timeout=60)
        assert r.status_code == 400 and "--max-request-mb" in r.json()["error"], r.text
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "linear"
        request.inputs["x"].CopyFrom(tf.make_tensor_proto(rows))
        with grpc.insecure_channel(f"127.0.0.1:{ends.grpc_port}") as channel:
            with pytest.raises(grpc.RpcError) as info:
                prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=60)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "--max-request-mb" in info.value.details()
        small = requests.post(f"http://127.0.0.1:{ends.rest_port}/v1/models/linear:predict",
                              json={"instances": rows[:100].tolist()}, timeout=60)
        assert small.status_code == 200, small.text


def test_a_client_that_connects_before_the_loop_runs_is_answered_and_a_stop_closes_the_port(linear_dir):
    """The loopback REST server starts without waiting for uvicorn (its socket listens first)
    and stops without waiting for uvicorn's tick; a client is neither refused early nor
    served after the stop."""
    import socket as _socket

    from tfbatch.runtime import ModelServer, RuntimeSettings
    from tfbatch.tfs.loopback import LoopbackEndpoints

    with ModelServer({"linear": {1: linear_dir / "1"}}, RuntimeSettings()) as server:
        ends = LoopbackEndpoints(server).start()
        rest = ends._rest
        r = requests.post(f"http://127.0.0.1:{ends.rest_port}/v1/models/linear:predict",
                          json={"instances": X.tolist()}, timeout=60)
        assert r.status_code == 200, r.text
        port = ends.rest_port
        ends.stop()
        rest.thread.join(30)
        assert not rest.thread.is_alive() and rest.error is None
        with pytest.raises(ConnectionRefusedError):
            _socket.create_connection(("127.0.0.1", port), timeout=10).close()
