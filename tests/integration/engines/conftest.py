from pathlib import Path

import pytest

from tfbatch.testing.models import make_linear_model


@pytest.fixture(scope="session")
def linear_model(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("linear")
    make_linear_model(root / "1")
    return root
