"""Session-scoped tiny SavedModels and one ModelServer over them (TF work stays small)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from tfbatch.testing import models


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("runtime_models")


@pytest.fixture(scope="session")
def linear_v1(model_dir):
    return models.make_linear_model(model_dir / "linear" / "1", seed=0)


@pytest.fixture(scope="session")
def linear_v2(model_dir):
    return models.make_linear_model(model_dir / "linear" / "2", seed=1)


@pytest.fixture(scope="session")
def multi_io(model_dir):
    return models.make_multi_io_model(model_dir / "multi" / "1")


@pytest.fixture(scope="session")
def image_model(model_dir):
    return models.make_image_bytes_model(model_dir / "image" / "1")


@pytest.fixture(scope="session")
def cr_model(model_dir):
    return models.make_classify_regress_model(model_dir / "cr" / "1")


@pytest.fixture(scope="session")
def failing_model(model_dir):
    return models.make_failing_model(model_dir / "failing" / "1")


@pytest.fixture(scope="session")
def all_models(linear_v1, linear_v2, multi_io, image_model, cr_model, failing_model):
    return {
        "linear": {1: linear_v1, 2: linear_v2},
        "multi": {1: multi_io},
        "image": {1: image_model},
        "cr": {1: cr_model},
        "failing": {1: failing_model},
    }


@pytest.fixture(scope="session")
def server(all_models):
    from tfbatch.runtime import ModelServer

    srv = ModelServer(all_models, default_model="linear")
    yield srv
    srv.close()


def png_bytes(h: int = 12, w: int = 9, mode: str = "L", seed: int = 0) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    shape = (h, w) if mode == "L" else (h, w, 3)
    img = Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()
