"""The ``tfbatch`` command line: inspect and package on a real SavedModel, errors exit 2."""

import json
import subprocess
import sys

import pytest

from tfbatch.testing.models import make_multi_io_model


def tfbatch(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "tfbatch", *args], capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    make_multi_io_model(root / "sm")
    code = root / "code"
    code.mkdir()
    (code / "inference.py").write_text("def handler(data, context):\n    return data.read(), 'text/plain'\n")
    out = root / "model.tar.gz"
    proc = tfbatch("package", str(root / "sm"), "--code", str(code), "-o", str(out))
    assert proc.stdout.strip() == str(out)
    return out


def test_inspect_json_lists_models_versions_signatures(archive):
    info = json.loads(tfbatch("inspect", str(archive), "--json").stdout)
    assert info["default_model"] == "model"
    version = info["models"]["model"]["versions"]["1"]
    sig = version["signatures"]["serving_default"]
    assert sig["inputs"]["a"]["dtype"] == "float32"
    assert sig["inputs"]["a"]["shape"] == [-1, 2]
    assert sig["inputs"]["b"]["dtype"] == "int64"
    assert set(sig["outputs"]) == {"sum", "prod"}
    assert "scaled" in version["signatures"]
    assert info["code"]["inference_script"] is True


def test_inspect_text_names_inputs_and_outputs(archive):
    text = tfbatch("inspect", str(archive)).stdout
    for word in ("serving_default", "scaled", "float32", "int64", "sum", "prod"):
        assert word in text


def test_unsafe_or_missing_model_is_a_clear_error(tmp_path):
    proc = tfbatch("inspect", str(tmp_path / "missing.tar.gz"), check=False)
    assert proc.returncode == 2
    assert "missing.tar.gz" in proc.stderr
    assert "Traceback" not in proc.stderr
