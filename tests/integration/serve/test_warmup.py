"""Warm-up records (TF Serving's assets.extra/tf_serving_warmup_requests) run before serving."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import requests
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

from tfbatch.testing import models

from .conftest import ServerProcess


def _write_warmup(version_dir, input_name: str, n: int) -> None:
    extra = version_dir / "assets.extra"
    extra.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(extra / "tf_serving_warmup_requests")) as writer:
        for _ in range(n):
            request = predict_pb2.PredictRequest()
            request.model_spec.name = "model"
            request.inputs[input_name].CopyFrom(tf.make_tensor_proto(np.ones((2, 3), np.float32)))
            entry = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(entry.SerializeToString())


@pytest.fixture(scope="module")
def model_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("warm")
    models.make_linear_model(root / "1")
    return root


def test_warmup_records_run_before_the_server_is_ready(model_root, tmp_path):
    root = tmp_path / "good"
    shutil.copytree(model_root, root)
    _write_warmup(root / "1", "x", 3)
    srv = ServerProcess(root, tmp_path, "--log-level", "info").wait_ready()
    try:
        assert "warm-up: 3 requests for model model version 1" in srv.output()
        r = requests.post(f"{srv.url}/invocations", json={"instances": [[1.0, 2.0, 3.0]]}, timeout=60)
        assert r.status_code == 200
    finally:
        assert srv.stop() == 0


def test_a_broken_warmup_record_refuses_to_serve(model_root, tmp_path):
    root = tmp_path / "bad"
    shutil.copytree(model_root, root)
    _write_warmup(root / "1", "not_an_input", 1)
    srv = ServerProcess(root, tmp_path)
    assert srv.proc.wait(180) != 0
    out = srv.output()
    assert "warm-up record 0" in out and "tf_serving_warmup_requests" in out
