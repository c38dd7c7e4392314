"""pytest plugin (registered as ``pytest11`` entry point ``tfbatch``): the ``tfbatch_model`` fixture.

    def test_my_handler(tfbatch_model):
        model = tfbatch_model("model.tar.gz")
        assert model.invoke({"instances": [[1, 2, 3]]}).json()["predictions"] == [[0.5, 1.5]]

``tfbatch_model(path, env=None)`` loads the artifact with production's handler stack (see
:class:`tfbatch.testing.LocalModel`) and releases it when the test ends. Relative paths are
taken from the test file's folder, so a test next to its model.tar.gz needs no fixtures of its own.
Installed with tfbatch; this module imports nothing heavy until the fixture is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest


@pytest.fixture
def tfbatch_model(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """Factory: ``tfbatch_model("model.tar.gz", env={...})`` -> a loaded :class:`LocalModel`."""
    from tfbatch.testing.handlers import LocalModel

    opened: list[LocalModel] = []

    def load(model_data: str | Path, **kwargs: Any) -> LocalModel:
        path = Path(model_data)
        if not path.is_absolute() and "://" not in str(model_data):
            here = Path(str(request.node.fspath)).parent
            if (here / path).exists():
                path = here / path
        model = LocalModel(path if "://" not in str(model_data) else str(model_data), **kwargs)
        opened.append(model)
        return model

    yield load
    for model in reversed(opened):
        model.close()
