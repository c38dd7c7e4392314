"""Fixtures for the artifact tests that need TensorFlow: one tiny real SavedModel per module
that asks, plus the placeholder ones the fast tier uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.artifact_fixtures import fake_savedmodel, tar_builder  # noqa: F401 - fixtures


@pytest.fixture(scope="module")
def real_savedmodel(tmp_path_factory) -> Path:
    """A tiny real SavedModel with a float signature and a string signature."""
    import tensorflow as tf

    class Tiny(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable([[1.0], [2.0], [3.0]])

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def predict(self, x):
            return {"y": tf.matmul(x, self.w)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def lengths(self, text):
            return {"length": tf.strings.length(text), "upper": tf.strings.upper(text)}

    module = Tiny()
    path = tmp_path_factory.mktemp("real") / "tiny"
    tf.saved_model.save(
        module, str(path), signatures={"serving_default": module.predict, "lengths": module.lengths}
    )
    return path
