"""ImageBatchPredict's per-row bodies: one codec check per batch, then slices, with the bytes the
codec gives each row's one-row slice (the one-image request's answer)."""

from __future__ import annotations

import numpy as np
import pytest

from tfbatch.runtime import jsonenc
from tfbatch.tfs.codec import encode_predict
from tfbatch.transform.predict import row_bodies

RNG = np.random.default_rng(0)
ROWS = 7
SAME = {
    "float32": {"y": RNG.random((ROWS, 10), dtype=np.float32)},
    "float16": {"y": RNG.random((ROWS, 3)).astype(np.float16)},
    "float64, one value per row": {"y": RNG.random(ROWS)},
    "two outputs": {"probabilities": RNG.random((ROWS, 5), dtype=np.float32), "classes": RNG.integers(0, 5, ROWS)},
    "bool and nested": {"a": RNG.random((ROWS, 2, 2), dtype=np.float32), "b": RNG.random(ROWS) > 0.5},
    "uint8": {"y": RNG.integers(0, 255, (ROWS, 4)).astype(np.uint8)},
}
CODEC = {
    "non-finite": {"y": np.array([[1.0, np.nan]] * ROWS, dtype=np.float32)},
    "non-finite in one row of two outputs": {
        "a": np.array([[1.0, np.inf]] + [[0.1, 0.2]] * (ROWS - 1), dtype=np.float32),
        "b": RNG.integers(0, 5, ROWS)},
    "strings": {"y": np.array([b"x"] * ROWS, dtype=object)},
    "mismatched batch": {"a": RNG.random((ROWS, 2)), "b": RNG.random((ROWS + 1, 2))},
}


def _per_row(outputs):
    return [jsonenc.dumps(encode_predict({k: v[r:r + 1] for k, v in outputs.items()}, "row", None, native=True))
            for r in range(ROWS)]


@pytest.mark.parametrize("name", SAME)
def test_rows_are_the_bytes_of_each_rows_own_encoding(name):
    assert row_bodies(SAME[name], ROWS) == _per_row(SAME[name])


@pytest.mark.parametrize("name", CODEC)
def test_batches_the_codec_handles_per_row_are_left_to_it(name):
    assert row_bodies(CODEC[name], ROWS) is None
