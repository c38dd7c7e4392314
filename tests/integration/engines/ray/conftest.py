"""Ray engine fixtures; the session's two-node Ray cluster (``ray_cluster``) is in tests/conftest.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest



@pytest.fixture(autouse=True)
def _no_leftover_driver() -> Iterator[None]:
    """Each test connects on its own; a failed one must not leave the next one attached."""
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="session")
def linear_model(tmp_path_factory) -> Path:
    from tfbatch.testing.models import make_linear_model

    root = tmp_path_factory.mktemp("linear")
    make_linear_model(root / "1", in_dim=3, out_dim=2)
    return root


def _write_jsonl_inputs(root: Path, objects: int, lines: int = 3) -> Path:
    """``objects`` JSON Lines files of 3-vectors, some in sub-folders (keys keep the layout)."""
    for n in range(objects):
        sub = root / (f"part{n % 3}" if n % 2 else "")
        sub.mkdir(parents=True, exist_ok=True)
        rows = [[n, i, n * 0.5 + i] for i in range(lines)]
        (sub / f"obj{n:04d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def _outputs(root: Path) -> dict[str, bytes]:
    """Every ``.out`` under ``root`` (the job's own bookkeeping excluded), by relative key."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*.out"))
        if "_tfbatch" not in p.parts
    }


@pytest.fixture
def write_inputs():
    return _write_jsonl_inputs


def _slow_job(root: Path, objects: int) -> tuple[Path, Path, Path]:
    """A model that takes a quarter second a batch, ``objects`` one-row JSON inputs, the output folder:
    with batches of one, a job still running when a test kills one of its processes."""
    from tfbatch.testing.models import make_slow_model

    model = make_slow_model(root / "model" / "1", 0.25).parent
    inputs = root / "in"
    inputs.mkdir()
    for n in range(objects):
        (inputs / f"x{n:03d}.json").write_text(json.dumps({"instances": [[n, n + 1]]}))
    return model, inputs, root / "out"


@pytest.fixture
def slow_job():
    """``slow_job(tmp_path, objects)`` -> (model, inputs, output folder); see ``_slow_job``."""
    return _slow_job


@pytest.fixture
def read_outputs():
    return _outputs
