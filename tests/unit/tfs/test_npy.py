"""The opt-in .npy answer: which Accept values ask for it, and what it can carry."""

from __future__ import annotations

import io

import numpy as np
import pytest

from tfbatch.tfs.npy import NPY, NotAcceptable, npy_bytes, wants_npy


@pytest.mark.parametrize("accept, wanted", [
    (None, False), ("", False), ("application/json", False), ("*/*", False), ("text/csv", False),
    ("application/x-npy", True), ("Application/X-NPY", True), ("application/x-npy, application/json;q=0.9", True),
    ("application/json, application/x-npy;q=0.5", False), ("*/*;q=0.1, application/x-npy", True),
    ("application/x-npy, */*", True),
    ("application/x-npy;q=0", False), ("application/x-npy; q=0.0, application/json", False),
    ("application/x-npz", False), ("application/x-npy-ish", False),
])
def test_only_an_accept_naming_npy_asks_for_it(accept, wanted):
    assert wants_npy(accept) is wanted


@pytest.mark.parametrize("arr", [
    np.arange(12, dtype=np.float32).reshape(3, 4) / 7, np.array(2.5, np.float64), np.zeros((0, 3), np.int64),
    np.array([[np.nan, np.inf, -np.inf]], np.float32), np.array([True, False]), np.arange(5, dtype=np.uint16),
    np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3)),
])
def test_one_numeric_output_round_trips_exactly(arr):
    back = np.load(io.BytesIO(npy_bytes({"y": arr})), allow_pickle=False)
    assert back.dtype == arr.dtype and back.shape == arr.shape
    np.testing.assert_array_equal(back, arr)


def test_what_a_npy_file_cannot_carry_is_406_naming_why():
    with pytest.raises(NotAcceptable, match=r"outputs \['a', 'b'\]") as exc:
        npy_bytes({"a": np.zeros(2), "b": np.zeros(2)})
    assert exc.value.status == 406 and "application/json" in str(exc.value)
    with pytest.raises(NotAcceptable, match="dtype object"):
        npy_bytes({"names": np.array([b"x"], dtype=object)})
    assert NPY == "application/x-npy"
