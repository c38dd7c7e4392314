"""Fixtures for the artifact tests.

Discovery and packaging only look at file names, so most tests use placeholder
SavedModel folders; the one real TensorFlow model is built once per module that asks.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Callable

import pytest


def _make_fake(path: Path, pbtxt: bool = False) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / ("saved_model.pbtxt" if pbtxt else "saved_model.pb")).write_bytes(b"placeholder")
    (path / "variables").mkdir(exist_ok=True)
    (path / "variables" / "variables.index").write_bytes(b"idx")
    return path


@pytest.fixture
def fake_savedmodel() -> Callable[..., Path]:
    """fake_savedmodel(path, pbtxt=False): a folder that looks like a SavedModel."""
    return _make_fake


@pytest.fixture
def tar_builder() -> Callable[..., Path]:
    """tar_builder(path, members): write a tar.gz from (TarInfo kwargs, bytes|None) pairs."""

    def build(path: Path, members: list[tuple[dict, bytes | None]], mode: str = "w:gz") -> Path:
        with tarfile.open(path, mode) as tar:
            for fields, data in members:
                info = tarfile.TarInfo(fields.pop("name"))
                for k, v in fields.items():
                    setattr(info, k, v)
                if data is not None:
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                else:
                    tar.addfile(info)
        return path

    return build


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
