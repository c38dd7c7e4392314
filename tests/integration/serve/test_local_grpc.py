"""A handler's gRPC calls to the loopback port from the model's own process are answered in
process (handlers/local_grpc.py), and answer what the socket answers: the same messages, the
same statuses and details, through the stubs scripts use."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from tfbatch.handlers import local_grpc
from tfbatch.testing.models import linear_expected

X = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]], dtype=np.float32)


@pytest.fixture(scope="module")
def registered(loopback):
    local_grpc.register(loopback.grpc_port, loopback.grpc_methods, loopback.grpc_max_message_bytes, loopback)
    try:
        yield loopback
    finally:
        local_grpc.unregister(loopback.grpc_port)


def _channels(port, options=None):
    """(socket, in process) channels to the same port, the second as a script opens it."""
    wire = local_grpc.wire_channel(f"127.0.0.1:{port}", options)
    local = grpc.insecure_channel(f"0.0.0.0:{port}", options=options)
    assert isinstance(local, local_grpc.LocalChannel) and not isinstance(wire, local_grpc.LocalChannel)
    return wire, local


def _outcome(call):
    """What a call gave: the response's bytes, or the status and details it raised."""
    try:
        return "ok", call().SerializeToString(deterministic=True)
    except grpc.RpcError as err:
        assert isinstance(err, grpc.Call) and isinstance(err, grpc.Future)
        return "error", err.code(), err.details()


def _predict(name="linear", x=X, signature="serving_default"):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    request.model_spec.signature_name = signature
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(x))
    return request


@pytest.mark.parametrize("request_", [
    _predict(), _predict(name="nope"), _predict(x=X[:, :2]), _predict(signature="missing"),
    _predict(x=np.array([["a", "b", "c"]])),
], ids=["ok", "unknown-model", "wrong-shape", "unknown-signature", "wrong-dtype"])
def test_predict_answers_what_the_socket_answers(registered, request_):
    wire, local = _channels(registered.grpc_port)
    answers = [_outcome(lambda: prediction_service_pb2_grpc.PredictionServiceStub(c).Predict(request_, 30))
               for c in (wire, local)]
    assert answers[0] == answers[1]
    if answers[0][0] == "ok":
        response = prediction_service_pb2_grpc.PredictionServiceStub(local).Predict(request_, 30)
        np.testing.assert_allclose(tf.make_ndarray(response.outputs["y"]), linear_expected(X), rtol=1e-5)
    wire.close()


def test_future_with_call_and_the_other_services(registered):
    wire, local = _channels(registered.grpc_port)
    stubs = [prediction_service_pb2_grpc.PredictionServiceStub(c) for c in (wire, local)]
    # seed 003's way: a future, then its result
    assert len({s.Predict.future(_predict(), 30).result().SerializeToString() for s in stubs}) == 1
    failed = [s.Predict.future(_predict(name="nope"), 30) for s in stubs]
    assert [f.exception().code() for f in failed] == [grpc.StatusCode.NOT_FOUND] * 2
    with pytest.raises(grpc.RpcError):
        failed[1].result()
    done = []
    failed[1].add_done_callback(done.append)
    assert done == [failed[1]] and failed[1].done()
    response, call = stubs[1].Predict.with_call(_predict(), timeout=30)
    assert call.code() == grpc.StatusCode.OK and response.outputs["y"].tensor_shape.dim[0].size == 2

    examples = classification_pb2.ClassificationRequest()
    examples.model_spec.name = "cr"
    for row in ([1.0, 2.0], [-3.0, 0.5]):
        example = examples.input.example_list.examples.add()
        example.features.feature["x"].float_list.value.extend(row)
    metadata = get_model_metadata_pb2.GetModelMetadataRequest()
    metadata.model_spec.name = "linear"
    metadata.metadata_field.append("signature_def")
    status = get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "linear"})
    for call in (lambda s, c: s.Classify(examples, 30), lambda s, c: s.GetModelMetadata(metadata, 30),
                 lambda s, c: model_service_pb2_grpc.ModelServiceStub(c).GetModelStatus(status, 30)):
        assert _outcome(lambda: call(stubs[0], wire)) == _outcome(lambda: call(stubs[1], local))
    grpc.channel_ready_future(local).result(timeout=5)
    wire.close()


def test_message_limits_refuse_as_the_socket_does(model_server):
    from tfbatch.tfs.loopback import LoopbackEndpoints

    with LoopbackEndpoints(model_server, grpc_max_message_bytes=2000) as small:
        local_grpc.register(small.grpc_port, small.grpc_methods, small.grpc_max_message_bytes, small)
        try:
            big = _predict(x=np.ones((200, 3), dtype=np.float32))  # ~2.4 KB: past the server's 2,000
            cases = [
                (None, lambda s: s.Predict(big, 30)),
                ([("grpc.max_receive_message_length", 20)], lambda s: s.Predict(_predict(), 30)),
                ([("grpc.max_send_message_length", 50)], lambda s: s.Predict(_predict(), 30)),
            ]
            for options, call in cases:
                wire, local = _channels(small.grpc_port, options)
                answers = [_outcome(lambda: call(prediction_service_pb2_grpc.PredictionServiceStub(c)))
                           for c in (wire, local)]
                assert answers[0] == answers[1], (options, answers)
                assert answers[0][1] == grpc.StatusCode.RESOURCE_EXHAUSTED
                wire.close()
            # A deadline already passed: the servicer refuses to start (over the socket the
            # client or the server may see it first, or neither, so it is not compared there).
            local = grpc.insecure_channel(f"localhost:{small.grpc_port}")
            with pytest.raises(grpc.RpcError) as info:
                prediction_service_pb2_grpc.PredictionServiceStub(local).Predict(_predict(), timeout=0)
            assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        finally:
            local_grpc.unregister(small.grpc_port)


def test_other_targets_and_unregistered_ports_use_the_socket(registered):
    port = registered.grpc_port
    for target in (f"[::1]:{port}", f"127.0.0.2:{port}", f"127.0.0.1:{port + 1}", "example.invalid:80"):
        channel = grpc.insecure_channel(target)
        assert not isinstance(channel, local_grpc.LocalChannel), target
        channel.close()
    for target in (f"localhost:{port}", f"dns:///localhost:{port}", f"ipv4:127.0.0.1:{port}"):
        assert isinstance(grpc.insecure_channel(target), local_grpc.LocalChannel), target


def test_messages_that_do_not_serialize_fail_as_over_the_socket(registered):
    method = "/tensorflow.serving.PredictionService/Predict"
    wire, local = _channels(registered.grpc_port)

    def broken(message):
        raise ValueError("cannot write this")

    for serializer, request in ((broken, _predict()), (None, b"\xff\xfe not a PredictRequest")):
        answers = []
        for channel in (wire, local):
            call = channel.unary_unary(method, request_serializer=serializer,
                                       response_deserializer=predict_pb2.PredictResponse.FromString)
            try:
                call(request, timeout=30)
                answers.append("ok")
            except grpc.RpcError as err:
                answers.append((err.code(), err.details()))
        assert answers[0] == answers[1] and answers[0][0] == grpc.StatusCode.INTERNAL, answers
    wire.close()
