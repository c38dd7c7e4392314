"""A bfloat16 output (a model run with --precision bf16, or exported so) is written as TF Serving
writes it: each value exactly, as float32 would print it, in both formats and in a run's bodies."""

from __future__ import annotations

import numpy as np
import pytest

from tfbatch.runtime import jsonenc
from tfbatch.tfs.codec import COLUMNAR, ROW, encode_predict, to_json_value

ml_dtypes = pytest.importorskip("ml_dtypes")  # TensorFlow's own numpy bfloat16


def test_bfloat16_values_are_written_as_their_float32_values():
    values = np.array([[1.5, -0.0078125], [3.0, 256.0]], dtype=ml_dtypes.bfloat16)
    assert to_json_value(values) == [[1.5, -0.0078125], [3.0, 256.0]]
    assert jsonenc.dumps(encode_predict({"y": values}, ROW, native=True)) == \
        b'{"predictions":[[1.5,-0.0078125],[3.0,256.0]]}'
    assert jsonenc.dumps(encode_predict({"y": values, "c": np.arange(2)}, COLUMNAR, native=True)) == \
        b'{"outputs":{"c":[0,1],"y":[[1.5,-0.0078125],[3.0,256.0]]}}'


def test_other_void_dtypes_are_refused_by_name():
    with pytest.raises(Exception, match="JSON cannot represent"):
        to_json_value(np.zeros(2, dtype="V4"), "blob")
