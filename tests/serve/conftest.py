"""Fixtures for the serving tests: tiny real SavedModels laid out as model artifacts."""

from __future__ import annotations

import pytest

from tfbatch.testing import models


@pytest.fixture(scope="session")
def linear_dir(tmp_path_factory):
    """A single-model artifact directory: <root>/1/saved_model.pb."""
    root = tmp_path_factory.mktemp("linear")
    models.make_linear_model(root / "1")
    return root


@pytest.fixture(scope="session")
def classify_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("classify")
    models.make_classify_regress_model(root / "1")
    return root


@pytest.fixture(scope="session")
def model_server(linear_dir, classify_dir):
    from tfbatch.runtime import ModelServer

    server = ModelServer({"linear": {1: linear_dir / "1"}, "cr": {1: classify_dir / "1"}}, default_model="linear")
    yield server
    server.close()


@pytest.fixture(scope="session")
def loopback(model_server):
    from tfbatch.serve.loopback import LoopbackEndpoints

    with LoopbackEndpoints(model_server) as endpoints:
        yield endpoints
