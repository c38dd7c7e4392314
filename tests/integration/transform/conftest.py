"""Transform fixtures: tiny real SavedModels, a moto S3 server (archives with scripts:
``with_script``, in tests/integration/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfbatch.testing.models import make_failing_model, make_linear_model, make_slow_model


@pytest.fixture(scope="session")
def linear_model(tmp_path_factory) -> Path:
    """A model directory: ``model/1`` holding x float32 [None, 3] -> y float32 [None, 2]."""
    root = tmp_path_factory.mktemp("linear")
    make_linear_model(root / "1")
    return root


@pytest.fixture(scope="session")
def failing_model(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("failing")
    make_failing_model(root / "1")
    return root


@pytest.fixture(scope="session")
def slow_model(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("slow")
    make_slow_model(root / "1", 0.25)
    return root
