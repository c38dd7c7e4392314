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


def test_slow_model_sleeps_once_per_batch(tmp_path):
    import tensorflow as tf

    path = models.make_slow_model(tmp_path / "slow", 0.2)
    s = Servable.load("slow", 1, path)
    out = s.run(None, {"x": np.ones((3, 2), np.float32)})
    assert out["y"].tolist() == [[2.0, 2.0]] * 3
    # Read from the saved graph rather than timed: a real sleep op of 0.2 s over a dataset
    # of one element (the whole batch), so it sleeps once per call whatever the batch size.
    graph = tf.saved_model.load(str(path)).signatures["serving_default"].graph.as_graph_def()
    nodes = {n.name: n for f in graph.library.function for n in f.node_def}
    sleeps = [n for n in nodes.values() if n.op == "SleepDataset"]
    assert len(sleeps) == 1
    source, micros = (nodes[name.split(":")[0]] for name in sleeps[0].input[:2])
    assert source.op == "TensorDataset"
    assert micros.attr["value"].tensor.int64_val == [200_000]
