"""The test-model factories produce what their docstrings promise."""

from __future__ import annotations

import numpy as np

from tfbatch.runtime import Servable
from tfbatch.testing import models


def test_linear_matches_expected_helper(linear_v1, linear_v2):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    s1 = Servable.load("linear", 1, linear_v1)
    s2 = Servable.load("linear", 2, linear_v2)
    np.testing.assert_allclose(s1.run(None, {"x": x})["y"], models.linear_expected(x, seed=0), rtol=1e-5)
    np.testing.assert_allclose(s2.run(None, {"x": x})["y"], models.linear_expected(x, seed=1), rtol=1e-5)
    assert not np.allclose(models.linear_expected(x, seed=0), models.linear_expected(x, seed=1))


def test_classify_regress_method_names_are_tf_serving_ones(cr_model):
    s = Servable.load("cr", 1, cr_model)
    assert s.signatures["classify"].method_name == "tensorflow/serving/classify"
    assert s.signatures["regress"].method_name == "tensorflow/serving/regress"
    assert s.signatures["serving_default"].method_name == "tensorflow/serving/predict"


def test_slow_model_sleeps_per_batch(tmp_path):
    import time

    s = Servable.load("slow", 1, models.make_slow_model(tmp_path / "slow", 0.2))
    s.run(None, {"x": np.zeros((1, 2), np.float32)})  # warm-up traces the function
    t0 = time.monotonic()
    out = s.run(None, {"x": np.ones((3, 2), np.float32)})
    assert 0.18 <= time.monotonic() - t0 < 2.0
    assert out["y"].tolist() == [[2.0, 2.0]] * 3
