"""scripts/check_layers.py: the tree has no upward import and no cycle, and the checker
would say so if it had (shown on a small package of its own under tmp_path)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_layers.py"


@pytest.fixture(scope="module")
def checker():
    spec = importlib.util.spec_from_file_location("check_layers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("check_layers", module)
    spec.loader.exec_module(module)
    return module


def _tree(root: Path, files: dict[str, str]) -> Path:
    """A fake ``tfbatch`` package: ``{relative path: source}``; returns its folder."""
    package = root / "tfbatch"
    for rel, source in files.items():
        path = package / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    for folder in {p.parent for p in package.rglob("*.py")}:
        (folder / "__init__.py").touch()
    return package


def test_source_tree_has_no_layering_problems(checker):
    assert checker.check() == []


def test_every_package_in_src_has_a_layer(checker):
    units = {checker.unit_of(checker.module_name(p)) for p in checker.ROOT.rglob("*.py")}
    assert units - set(checker.LAYERS) <= {"tfbatch"}


def test_downward_imports_pass(checker, tmp_path):
    root = _tree(tmp_path, {
        "storage/io.py": "from tfbatch.errors import ConfigError\n",
        "errors.py": "class ConfigError(Exception):\n    pass\n",
        "transform/job.py": "from tfbatch.storage import io\n",
    })
    assert checker.check(root) == []


def test_upward_import_is_reported_even_when_lazy(checker, tmp_path):
    root = _tree(tmp_path, {
        "storage/io.py": "def f():\n    from tfbatch.transform import job\n    return job\n",
        "transform/job.py": "X = 1\n",
    })
    problems = checker.check(root)
    assert problems and all("storage/io.py:2: storage (level 2) imports tfbatch.transform" in p for p in problems)
    assert all(p.endswith("(transform, level 9)") for p in problems)


def test_same_level_packages_may_not_import_each_other(checker, tmp_path):
    root = _tree(tmp_path, {
        "train/fit.py": "from tfbatch.evaluate.metrics import score\n",
        "evaluate/metrics.py": "def score():\n    return 1\n",
    })
    (problem,) = checker.check(root)
    assert "train (level 12) imports tfbatch.evaluate.metrics (evaluate, level 12)" in problem


def test_import_cycle_is_reported(checker, tmp_path):
    root = _tree(tmp_path, {
        "records/a.py": "from tfbatch.records import b\n",
        "records/b.py": "from tfbatch.records.c import thing\n",
        "records/c.py": "from tfbatch.records.a import *\nthing = 1\n",
    })
    problems = checker.check(root)
    assert problems == ["import cycle: tfbatch.records.a -> tfbatch.records.b -> tfbatch.records.c"]


def test_lazy_imports_do_not_make_cycles(checker, tmp_path):
    root = _tree(tmp_path, {
        "records/a.py": "from tfbatch.records import b\n",
        "records/b.py": "def f():\n    from tfbatch.records import a\n    return a\n",
    })
    assert checker.check(root) == []


def test_package_without_a_layer_is_reported(checker, tmp_path):
    root = _tree(tmp_path, {"newthing/x.py": "X = 1\n"})
    problems = checker.check(root)
    assert problems and all("package 'newthing' has no layer" in p for p in problems)
