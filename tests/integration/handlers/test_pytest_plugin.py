"""A user's test of their inference.py against their model.tar.gz, through the pytest plugin."""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest

from tfbatch.testing import LocalModel
from tfbatch.testing.models import linear_expected, scripted_archive

pytest_plugins = ["pytester"]

# A handler written for the SageMaker container: it POSTs to the TFS REST endpoint it is given.
SCRIPT = """
import json
import requests

def handler(data, context):
    assert context.request_content_type == "application/json"
    rows = json.loads(data.read())
    resp = requests.post(context.rest_uri, json={"instances": rows})
    preds = resp.json()["predictions"]
    return json.dumps({"argmax": [max(range(len(p)), key=p.__getitem__) for p in preds]}), "application/json"
"""

USER_TEST = """
def test_my_handler(tfbatch_model):
    model = tfbatch_model("model.tar.gz")
    assert model.invoke([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]).json()["argmax"] == EXPECTED

def test_a_bad_request_gets_the_status_production_gives(tfbatch_model):
    assert tfbatch_model("model.tar.gz").invoke(b"{not json").status == 500
"""


@pytest.fixture(scope="module")
def archive(tmp_path_factory, linear_dir):
    return scripted_archive([linear_dir / "1"], SCRIPT, tmp_path_factory.mktemp("plugin"))


def _expected() -> list[int]:
    preds = linear_expected(np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], np.float32), seed=0)
    return [int(i) for i in preds.argmax(axis=1)]


def test_three_lines_in_a_users_project(pytester, archive, linear_dir):
    (pytester.path / "model.tar.gz").write_bytes(archive.read_bytes())
    pytester.makepyfile(test_user=f"EXPECTED = {_expected()!r}\n" + USER_TEST)
    autoloaded = any(ep.value == "tfbatch.pytest_plugin" for ep in importlib.metadata.entry_points(group="pytest11"))
    result = pytester.runpytest_subprocess(*([] if autoloaded else ["-p", "tfbatch.pytest_plugin"]))
    result.assert_outcomes(passed=2)


def test_local_model_gives_handlers_the_production_context(archive):
    with LocalModel(archive) as model:
        ctx = model.context(content_type="text/csv", custom_attributes="tfs-model-version=1")
        assert ctx.model_name == "model" and ctx.model_version == "1" and ctx.method == "predict"
        assert ctx.rest_uri.startswith("http://") and ctx.rest_uri.endswith("/v1/models/model/versions/1:predict")
        assert ctx.grpc_port and ctx.request_content_type == "text/csv"
        assert model.service.handlers.mode == "handler"
