"""Transform fixtures: tiny real SavedModels, model archives with scripts, a moto S3 server."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import pytest

from tfbatch.artifact import package
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


def _with_script(tmp_path: Path, model_root: Path, script: str) -> Path:
    code = tmp_path / f"code-{uuid.uuid4().hex[:6]}"
    code.mkdir()
    (code / "inference.py").write_text(textwrap.dedent(script))
    return package([model_root / "1"], tmp_path / f"model-{uuid.uuid4().hex[:6]}.tar.gz", code_dir=code)


@pytest.fixture
def with_script():
    """``with_script(tmp_path, model_root, script)``: model.tar.gz of version 1 plus code/inference.py."""
    return _with_script
