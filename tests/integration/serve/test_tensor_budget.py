"""A TensorProto's decoded size is checked from its header, before anything is allocated."""

from __future__ import annotations

import numpy as np
import pytest
from tensorflow.core.framework import tensor_pb2, types_pb2

from tfbatch.errors import InvalidInput
from tfbatch.tfs.tensors import check_budget, decoded_nbytes, to_ndarray

MIB = 1024 * 1024

# Every value field a request can fill, with one value each: TF's rule that one value fills
# the whole shape is what lets a few bytes ask for gigabytes.
ONE_VALUE = {
    types_pb2.DT_FLOAT: ("float_val", 1.0, 4),
    types_pb2.DT_DOUBLE: ("double_val", 1.0, 8),
    types_pb2.DT_INT32: ("int_val", 1, 4),
    types_pb2.DT_UINT8: ("int_val", 1, 1),
    types_pb2.DT_INT16: ("int_val", 1, 2),
    types_pb2.DT_INT8: ("int_val", 1, 1),
    types_pb2.DT_UINT16: ("int_val", 1, 2),
    types_pb2.DT_INT64: ("int64_val", 1, 8),
    types_pb2.DT_UINT32: ("uint32_val", 1, 4),
    types_pb2.DT_UINT64: ("uint64_val", 1, 8),
    types_pb2.DT_BOOL: ("bool_val", True, 1),
    types_pb2.DT_STRING: ("string_val", b"x", 8),
    types_pb2.DT_HALF: ("half_val", 15360, 2),
    types_pb2.DT_BFLOAT16: ("half_val", 16256, 2),
    types_pb2.DT_COMPLEX64: ("scomplex_val", 1.0, 8),
    types_pb2.DT_COMPLEX128: ("dcomplex_val", 1.0, 16),
}


def _proto(dtype: int, shape, field: str | None = None, value=None) -> tensor_pb2.TensorProto:
    proto = tensor_pb2.TensorProto(dtype=dtype)
    for size in shape:
        proto.tensor_shape.dim.add(size=size)
    if field is not None:
        getattr(proto, field).append(value)
    return proto


def test_the_22_byte_gigabyte_is_refused_before_np_full():
    proto = _proto(types_pb2.DT_FLOAT, [16384, 16384], "float_val", 1.0)
    assert len(proto.SerializeToString()) <= 22
    with pytest.raises(InvalidInput, match=r"1073741824 bytes.*--max-request-mb"):
        to_ndarray(proto, "x", max_bytes=100 * MIB)


@pytest.mark.parametrize("dtype", sorted(ONE_VALUE), ids=lambda d: types_pb2.DataType.Name(d))
def test_every_dtype_is_charged_before_decoding(dtype):
    field, value, itemsize = ONE_VALUE[dtype]
    huge = _proto(dtype, [1 << 20, 1 << 10], field, value)
    assert decoded_nbytes(huge, "x") == (1 << 30) * itemsize
    with pytest.raises(InvalidInput, match="over the limit"):
        to_ndarray(huge, "x", max_bytes=64 * MIB)
    small = _proto(dtype, [2, 3], field, value)
    assert to_ndarray(small, "x", max_bytes=64 * MIB).shape == (2, 3)


def test_shapes_that_overflow_int64_are_not_mistaken_for_small_ones():
    # 2**32 * 2**32 wraps to 0 in int64 arithmetic.
    proto = _proto(types_pb2.DT_FLOAT, [1 << 32, 1 << 32], "float_val", 1.0)
    with pytest.raises(InvalidInput, match="over the limit"):
        to_ndarray(proto, "x", max_bytes=MIB)


def test_the_budget_covers_all_inputs_of_a_request_together():
    a = _proto(types_pb2.DT_FLOAT, [1024, 256], "float_val", 1.0)  # 1 MiB each
    b = _proto(types_pb2.DT_FLOAT, [1024, 256], "float_val", 1.0)
    check_budget([("a", a)], MIB)
    with pytest.raises(InvalidInput, match="input 'b'"):
        check_budget([("a", a), ("b", b)], MIB)


@pytest.mark.parametrize(
    "proto, reason",
    [
        (_proto(types_pb2.DT_FLOAT, [-1, 3], "float_val", 1.0), "negative dimension"),
        (tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape={"unknown_rank": True}), "known shape"),
        (tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape={"dim": [{"size": 4}]},
                                tensor_content=b"\0" * 12), "tensor_content has 12 bytes"),
        (tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape={"dim": [{"size": 2}]},
                                float_val=[1, 2, 3]), "needs 2 values, got 3"),
        (tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, tensor_shape={"dim": [{"size": 3}]},
                                string_val=[b"a", b"b"]), "needs 3 values, got 2"),
    ],
    ids=["negative-dim", "unknown-rank", "content-length", "too-many-values", "string-count"],
)
def test_inconsistent_protos_are_refused_with_the_reason(proto, reason):
    with pytest.raises(InvalidInput, match=reason):
        to_ndarray(proto, "x", max_bytes=MIB)


def test_legitimate_tensors_still_decode():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_content=x.tobytes())
    proto.tensor_shape.dim.add(size=3)
    proto.tensor_shape.dim.add(size=4)
    np.testing.assert_array_equal(to_ndarray(proto, "x", max_bytes=x.nbytes), x)


def test_grpc_refuses_to_start_model_work_past_the_server_deadline(model_server):
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from tfbatch.tfs.grpc_service import start_grpc_server

    # A deadline that has always passed by the time inputs are decoded: the model never runs.
    server, port = start_grpc_server(model_server, timeout_s=1e-9)
    try:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "linear"
        request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.ones((1, 3), np.float32)))
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.RpcError) as info:
                prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=60)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "--request-timeout" in info.value.details()
    finally:
        server.stop(0)
