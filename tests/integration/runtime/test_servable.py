"""Servable: loading, signature description, input checks and error mapping."""

from __future__ import annotations

import numpy as np
import pytest

from tfbatch import errors
from tfbatch.runtime import Servable
from tfbatch.testing import models

from .conftest import png_bytes


@pytest.fixture(scope="module")
def multi(multi_io):
    return Servable.load("multi", 1, multi_io)


@pytest.fixture(scope="module")
def image(image_model):
    return Servable.load("image", 1, image_model)


def test_signatures_read_from_proto(multi):
    assert multi.default_signature == "serving_default"
    assert set(multi.signatures) == {"serving_default", "scaled"}
    sd = multi.signatures["serving_default"]
    assert sd.method_name == "tensorflow/serving/predict"
    assert sd.inputs["a"].dtype == "float32" and sd.inputs["a"].shape == (None, 2)
    assert sd.inputs["b"].dtype == "int64" and sd.inputs["b"].shape == (None,)
    assert sd.inputs["a"].tensor_name.endswith(":0")
    assert set(sd.outputs) == {"sum", "prod"}
    assert sd.outputs["prod"].shape == (None, 2)


def test_run_multi_io_and_second_signature(multi):
    a = np.array([[1, 2], [3, 4]], np.float32)
    b = np.array([10, 20], np.int64)
    out = multi.run(None, {"a": a, "b": b})
    assert out["sum"].tolist() == [13.0, 27.0]
    assert out["prod"].tolist() == [[10.0, 20.0], [60.0, 80.0]]
    scaled = multi.run("scaled", {"a": a, "b": b})
    assert scaled["scaled"].tolist() == [[20.0, 30.0], [50.0, 60.0]]


def test_safe_dtype_conversions(multi):
    # int -> float for 'a', int32 -> int64 for 'b', nested lists accepted
    out = multi.run(None, {"a": [[1, 2]], "b": np.array([3], np.int32)})
    assert out["sum"].tolist() == [6.0]


def test_bfloat16_inputs_take_floats_and_ints_and_answer_in_bfloat16(tmp_path):
    from tfbatch.tfs.codec import encode_predict

    servable = Servable.load("bf16", 1, models.make_bfloat16_model(tmp_path / "1"))
    assert servable.signatures["serving_default"].inputs["x"].dtype == "bfloat16"
    # 1.00390625 (1 + 2^-8) is not a bfloat16: it rounds to nearest even, 1.0.
    out = servable.run(None, {"x": [[1.5, -0.25, 1.00390625], [3, 4, 5]]})
    assert out["doubled"].dtype.name == "bfloat16" and out["total"].dtype == np.float32
    assert out["doubled"].astype(np.float32).tolist() == [[3.0, -0.5, 2.0], [6.0, 8.0, 10.0]]
    assert out["total"].tolist() == [2.25, 12.0]
    # As TF Serving writes bfloat16 in JSON: the values, as numbers.
    assert encode_predict(out, "row", servable.signatures["serving_default"]) == {
        "predictions": [{"doubled": [3.0, -0.5, 2.0], "total": 2.25}, {"doubled": [6.0, 8.0, 10.0], "total": 12.0}]}
    with pytest.raises(errors.InvalidInput, match="expected dtype bfloat16 .*booleans do not convert to floats"):
        servable.run(None, {"x": [[True, False, True]]})


def test_float_into_int_is_refused_with_details(multi):
    with pytest.raises(errors.InvalidInput) as e:
        multi.run(None, {"a": [[1.0, 2.0]], "b": np.array([1.5])})
    msg = str(e.value)
    assert "input 'b' of signature 'serving_default'" in msg
    assert "expected dtype int64 with shape [-1], got float64 with shape [1]" in msg


def test_wrong_shape_names_input_and_shapes(multi):
    with pytest.raises(errors.InvalidInput, match=r"input 'a' of signature 'scaled': expected dtype float32 with shape \[-1, 2\], got int64 with shape \[2, 4\]"):
        multi.run("scaled", {"a": np.zeros((2, 4), np.int64), "b": np.zeros(2, np.int64)})
    with pytest.raises(errors.InvalidInput, match=r"got float32 with shape \[2\]"):
        multi.run(None, {"a": np.zeros(2, np.float32), "b": np.zeros(2, np.int64)})


def test_missing_and_unknown_input_names(multi):
    with pytest.raises(errors.InvalidInput, match=r"missing inputs \['b'\]; unknown inputs \['c'\]; expected inputs \['a', 'b'\]"):
        multi.run(None, {"a": np.zeros((1, 2), np.float32), "c": np.zeros(1)})


def test_unknown_signature_lists_available(multi):
    with pytest.raises(errors.NotFound, match=r"signature 'nope' not found in model 'multi' version 1; available signatures: scaled, serving_default"):
        multi.run("nope", {})


def test_string_tensor_accepts_bytes_and_str_only(image):
    out = image.run(None, {"image_bytes": np.array([png_bytes(), png_bytes(20, 30, "RGB")], dtype=object)})
    assert out["probabilities"].shape == (2, 10)
    np.testing.assert_allclose(out["probabilities"].sum(axis=1), 1.0, rtol=1e-5)
    assert out["classes"].dtype == np.int64
    with pytest.raises(errors.InvalidInput, match="only str or bytes values fit a string tensor"):
        image.run(None, {"image_bytes": np.array([1.0, 2.0])})


def test_undecodable_image_is_invalid_input_with_tf_message(image):
    with pytest.raises(errors.InvalidInput) as e:
        image.run(None, {"image_bytes": np.array([b"not an image"], dtype=object)})
    msg = str(e.value)
    assert "Unknown image file format" in msg
    assert "model 'image' signature 'serving_default'" in msg
    assert "Graph execution error" not in msg


def test_second_image_signature_takes_tensors(image):
    imgs = np.random.default_rng(0).random((3, 8, 8, 1), dtype=np.float32)
    out = image.run("serving_tensor", {"images": imgs})
    assert out["classes"].shape == (3,)


def test_string_outputs_are_bytes_object_arrays(cr_model):
    s = Servable.load("cr", 1, cr_model)
    from tensorflow.core.example import example_pb2

    ex = example_pb2.Example()
    ex.features.feature["x"].float_list.value.extend([1.0, 1.0])
    out = s.run("classify", {"inputs": np.array([ex.SerializeToString()], dtype=object)})
    assert out["classes"].dtype == object and out["classes"].tolist() == [[b"negative", b"positive"]]


def test_runtime_failure_of_failing_model(failing_model):
    s = Servable.load("failing", 1, failing_model)
    assert s.run(None, {"x": [[1.0, 2.0]]})["y"].tolist() == [[2.0, 3.0]]
    with pytest.raises(errors.InvalidInput, match="negative input"):
        s.run(None, {"x": [[-1.0, 2.0]]})


def test_load_missing_dir_is_artifact_error(tmp_path):
    with pytest.raises(errors.ArtifactError, match="no saved_model.pb"):
        Servable.load("m", 1, tmp_path / "nothing")


def test_default_signature_without_serving_default(tmp_path):
    import tensorflow as tf

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def only(self, v):
            return {"w": v * 3}

    m = M()
    tf.saved_model.save(m, str(tmp_path / "m"), signatures={"only_one": m.only})
    s = Servable.load("m", 1, tmp_path / "m")
    assert s.default_signature == "only_one"
    assert s.run(None, {"v": [1.0]})["w"].tolist() == [3.0]
