import textwrap
from pathlib import Path

import pytest

from tfbatch.testing import models


@pytest.fixture(scope="session")
def linear_dir(tmp_path_factory) -> Path:
    """A model folder with versions 1 and 2 of the linear model (different weights)."""
    root = tmp_path_factory.mktemp("linear")
    models.make_linear_model(root / "1", seed=0)
    models.make_linear_model(root / "2", seed=1)
    return root


@pytest.fixture(scope="session")
def image_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("image")
    models.make_image_bytes_model(root / "1", size=8, channels=1, classes=10)
    return root


@pytest.fixture(scope="session")
def linear_server(linear_dir):
    from tfbatch.runtime import ModelServer

    server = ModelServer({"model": {1: linear_dir / "1", 2: linear_dir / "2"}})
    yield server
    server.close()


@pytest.fixture(scope="session")
def image_server(image_dir):
    from tfbatch.runtime import ModelServer

    server = ModelServer({"model": {1: image_dir / "1"}})
    yield server
    server.close()


def _write_script(directory: Path, source: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "inference.py"
    path.write_text(textwrap.dedent(source))
    return path


@pytest.fixture
def write_script():
    """write_script(folder, source) -> path of folder/inference.py."""
    return _write_script
