"""inspect_artifact reads signatures from the protobuf of a real SavedModel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tfbatch.artifact import format_inspect, inspect_artifact, open_artifact, package
from tfbatch.artifact.inspect import read_saved_model
from tfbatch.errors import ArtifactError


@pytest.fixture(scope="module")
def info(real_savedmodel, tmp_path_factory):
    work = tmp_path_factory.mktemp("inspect")
    code = work / "code"
    code.mkdir()
    (code / "inference.py").write_text("def handler(data, context):\n    return b'', 'text/plain'\n")
    out = package([real_savedmodel], work / "model.tar.gz", code_dir=code, versions=[3])
    return inspect_artifact(open_artifact(out, workdir=work / "x"))


def test_structure_and_json(info):
    json.dumps(info)  # must be JSON-able as it is
    assert info["default_model"] == "model"
    assert list(info["models"]) == ["model"]
    assert list(info["models"]["model"]["versions"]) == ["3"]
    assert info["code"] == {"inference_script": True, "requirements": False, "lib": False}


def test_tags_and_signature_names(info):
    v = info["models"]["model"]["versions"]["3"]
    assert v["tags"] == ["serve"]
    assert v["path"].endswith("3")
    assert set(v["signatures"]) == {"serving_default", "lengths"}  # no __saved_model_init_op


def test_float_signature(info):
    sig = info["models"]["model"]["versions"]["3"]["signatures"]["serving_default"]
    assert sig["method_name"] == "tensorflow/serving/predict"
    x = sig["inputs"]["x"]
    assert x == {"name": "serving_default_x:0", "dtype": "float32", "dtype_enum": "DT_FLOAT", "shape": [-1, 3]}
    y = sig["outputs"]["y"]
    assert (y["dtype"], y["dtype_enum"], y["shape"]) == ("float32", "DT_FLOAT", [-1, 1])
    assert y["name"].endswith(":0")


def test_string_signature(info):
    sig = info["models"]["model"]["versions"]["3"]["signatures"]["lengths"]
    assert sig["inputs"]["text"] == {
        "name": "lengths_text:0", "dtype": "string", "dtype_enum": "DT_STRING", "shape": [-1],
    }
    assert sig["outputs"]["length"]["dtype"] == "int32"
    assert sig["outputs"]["upper"]["dtype_enum"] == "DT_STRING"
    assert list(sig["outputs"]) == ["length", "upper"]


def test_format(info):
    text = format_inspect(info)
    assert "Model 'model' (default)" in text
    assert "Version 3:" in text
    assert "signature 'serving_default' method tensorflow/serving/predict" in text
    assert "x: float32 (DT_FLOAT) shape (-1, 3)  name: serving_default_x:0" in text
    assert "text: string (DT_STRING) shape (-1,)  name: lengths_text:0" in text
    assert "Code: inference.py yes, requirements.txt no, lib/ no" in text


def test_pbtxt_and_unknown_rank(real_savedmodel, tmp_path):
    from google.protobuf import text_format

    msg = read_saved_model(real_savedmodel)
    sig = msg.meta_graphs[0].signature_def["serving_default"]
    sig.inputs["x"].tensor_shape.Clear()
    sig.inputs["x"].tensor_shape.unknown_rank = True
    version = tmp_path / "m" / "7"
    version.mkdir(parents=True)
    (version / "saved_model.pbtxt").write_text(text_format.MessageToString(msg))
    info = inspect_artifact(tmp_path)  # a path works too
    x = info["models"]["m"]["versions"]["7"]["signatures"]["serving_default"]["inputs"]["x"]
    assert x["shape"] is None and x["dtype"] == "float32"
    assert "shape unknown rank" in format_inspect(info)


def test_corrupt_pb_names_the_folder(real_savedmodel, tmp_path):
    version = tmp_path / "1"
    shutil.copytree(real_savedmodel, version)
    (version / "saved_model.pb").write_bytes(b"\xff\xff\xff garbage")
    with pytest.raises(ArtifactError, match=r"cannot parse the SavedModel in '.*1'"):
        inspect_artifact(tmp_path)


def test_inspecting_an_archive_leaves_no_folder_behind(real_savedmodel, tmp_path):
    # `tfbatch inspect model.tar.gz` extracts into a temporary folder; it had stayed in /tmp.
    archive = package([real_savedmodel], tmp_path / "model.tar.gz", versions=[1])
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    done = subprocess.run([sys.executable, "-m", "tfbatch", "inspect", "--json", str(archive)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert list(json.loads(done.stdout)["models"]) == ["model"]
    assert list(scratch.iterdir()) == []
