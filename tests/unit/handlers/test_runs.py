"""Runs of requests (handlers/pool_worker.py ``join_runs``): consecutive requests whose tensors
share a model call cross the pipe as one array, and their answers are encoded in one go
(``codec.encode_predict_bodies``). Each request must still get exactly what it gets alone."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tfbatch.handlers.pool_worker import IN_RUN, TENSORS_RUN, join_runs, tensor_layout
from tfbatch.runtime import jsonenc
from tfbatch.tfs.codec import COLUMNAR, ROW, encode_predict, encode_predict_bodies

DTYPES = st.sampled_from([np.float16, np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.uint64,
                          np.bool_])


@st.composite
def outputs_and_sizes(draw):
    sizes = draw(st.lists(st.integers(0, 4), min_size=1, max_size=6))
    # One output, or several (a classifier's "classes" and "probabilities"), each its own
    # shape and dtype; names that JSON must escape, and keys out of order.
    names = draw(st.lists(st.sampled_from(["k", "classes", "probabilities", "a\"b", "z\u00e9", "0"]),
                          min_size=1, max_size=3, unique=True))
    outputs = {}
    for name in names:
        dims = draw(st.sampled_from([(), (1,), (3,), (0,), (2, 2)]))
        outputs[name] = draw(hnp.arrays(draw(DTYPES), (sum(sizes), *dims)))
    return outputs, sizes


def _alone(outputs: dict, sizes: list[int], fmt: str) -> list[bytes]:
    bodies, at = [], 0
    for size in sizes:
        part = {k: v[at:at + size] for k, v in outputs.items()}
        bodies.append(jsonenc.dumps(encode_predict(part, fmt, native=True)))
        at += size
    return bodies


@settings(max_examples=300, deadline=None)
@given(outputs_and_sizes(), st.sampled_from([ROW, COLUMNAR]))
def test_a_runs_bodies_are_each_requests_own(case, fmt):
    outputs, sizes = case
    got = encode_predict_bodies(outputs, sizes, fmt)
    if got is not None:  # None: each request is encoded alone (non-finite floats, 3-D, empty requests)
        assert got == _alone(outputs, sizes, fmt)


def test_the_common_answers_are_encoded_together():
    probs = np.random.default_rng(0).random((7, 10), dtype=np.float32)
    assert encode_predict_bodies({"p": probs}, [1] * 7, ROW) == _alone({"p": probs}, [1] * 7, ROW)
    assert encode_predict_bodies({"c": np.arange(5)}, [2, 3], ROW) == [b'{"predictions":[0,1]}',
                                                                         b'{"predictions":[2,3,4]}']
    nan = probs.copy()
    nan[3, 2] = np.nan
    assert encode_predict_bodies({"p": nan}, [1] * 7, ROW) is None  # NaN: written per request
    classifier = {"probabilities": probs, "classes": np.argmax(probs, axis=1)}
    for sizes in ([1] * 7, [3, 4]):
        for fmt in (ROW, COLUMNAR):
            assert encode_predict_bodies(classifier, sizes, fmt) == _alone(classifier, sizes, fmt)
    assert encode_predict_bodies({"c": np.arange(2), "p": np.eye(2, dtype=np.float32)}, [1, 1], ROW) == [
        b'{"predictions":[{"c":0,"p":[1.0,0.0]}]}', b'{"predictions":[{"c":1,"p":[0.0,1.0]}]}']
    assert encode_predict_bodies({"c": np.arange(2), "p": np.eye(2, dtype=np.float32)}, [2], COLUMNAR) == [
        b'{"outputs":{"c":[0,1],"p":[[1.0,0.0],[0.0,1.0]]}}']
    assert encode_predict_bodies({"a": probs, "b": nan}, [1] * 7, ROW) is None  # NaN in one output
    assert encode_predict_bodies({"a": probs, "b": np.zeros((7, 2, 2))}, [1] * 7, ROW) is None  # 3-D
    assert encode_predict_bodies({"p": probs}, [0, 7], ROW) is None


def _tensors(rows: int, cols: int = 3, dtype=np.float32) -> tuple:
    return ("tensors", {"x": np.arange(rows * cols, dtype=dtype).reshape(rows, cols)}, "row", 1, "serving_default")


def _item(model: str = "model") -> tuple:
    return (b"", "text/csv", "application/json", None, model, None, "predict", None, None)


def test_consecutive_matching_requests_join_and_others_stay_as_they_are():
    final = ("final", 400, b"{}", "application/json")
    firsts = [_tensors(1), _tensors(2), final, _tensors(1), _tensors(1, cols=4), _tensors(1, cols=4),
              _tensors(1, dtype=np.float64), _tensors(1)]
    items = [_item()] * 7 + [_item("other")]
    out = join_runs(firsts, items)
    assert len(out) == len(firsts)
    assert out[0][0] == TENSORS_RUN and out[0][5] == [1, 2] and out[1] == (IN_RUN,)
    np.testing.assert_array_equal(out[0][1]["x"], np.concatenate([firsts[0][1]["x"], firsts[1][1]["x"]]))
    assert out[2] is final
    assert out[3] is firsts[3]  # alone: the next request has another layout
    assert out[4][0] == TENSORS_RUN and out[4][5] == [1, 1] and out[5] == (IN_RUN,)
    assert out[6] is firsts[6] and out[7] is firsts[7]  # another dtype; another model


def test_a_request_whose_rows_cannot_be_counted_never_joins():
    ragged = ("tensors", {"a": np.zeros((1, 2)), "b": np.zeros((2, 2))}, "row", 1, "s")
    scalar = ("tensors", {"a": np.float32(1.0) * np.ones(())}, "row", 1, "s")
    assert tensor_layout(ragged[1]) is None and tensor_layout(scalar[1]) is None
    firsts = [ragged, ragged, scalar, scalar]
    assert join_runs(firsts, [_item()] * 4) is firsts
