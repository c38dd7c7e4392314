"""Fixtures shared by the integration tests' folders."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import pytest

from tfbatch.artifact import package


def _with_script(tmp_path: Path, model_root: Path, script: str) -> Path:
    code = tmp_path / f"code-{uuid.uuid4().hex[:6]}"
    code.mkdir()
    (code / "inference.py").write_text(textwrap.dedent(script))
    return package([model_root / "1"], tmp_path / f"model-{uuid.uuid4().hex[:6]}.tar.gz", code_dir=code)


@pytest.fixture
def with_script():
    """``with_script(tmp_path, model_root, script)``: model.tar.gz of version 1 plus code/inference.py."""
    return _with_script
