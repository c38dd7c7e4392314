"""gRPC's concurrency cap (issue 12: "gRPC has no max_concurrent_rpcs"): calls beyond it are
refused at once with RESOURCE_EXHAUSTED instead of queueing without limit.

The calls that hold the slots are real RPCs to a method registered through the server's
``extra_handlers`` hook that waits on an event the test controls, so the test knows, without
sleeping, that the slots are taken.
"""

from __future__ import annotations

import threading

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from tfbatch.testing.models import linear_expected
from tfbatch.tfs.grpc_service import start_grpc_server

X = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)


def test_calls_beyond_max_concurrent_rpcs_are_refused_not_queued(model_server):
    entered = threading.Semaphore(0)
    release = threading.Event()

    def hold(request, context):
        entered.release()
        release.wait(60)
        return b"done"

    holder = grpc.method_handlers_generic_handler("test.Hold", {"Hold": grpc.unary_unary_rpc_method_handler(hold)})
    server, port = start_grpc_server(model_server, max_workers=4, max_concurrent_rpcs=2, extra_handlers=[holder])
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "linear"
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(X))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            held = [channel.unary_unary("/test.Hold/Hold").future(b"", timeout=60) for _ in range(2)]
            for _ in held:
                assert entered.acquire(timeout=60)
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            with pytest.raises(grpc.RpcError) as info:
                stub.Predict(request, timeout=60)
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            release.set()
            assert [f.result() for f in held] == [b"done", b"done"]
            out = tf.make_ndarray(stub.Predict(request, timeout=60).outputs["y"])
            np.testing.assert_allclose(out, linear_expected(X), rtol=1e-5)
    finally:
        release.set()
        server.stop(0)
