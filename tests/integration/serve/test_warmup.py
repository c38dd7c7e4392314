"""TF Serving warm-up files replayed before a version serves; version status over gRPC."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from tfbatch.errors import ArtifactError
from tfbatch.records.writers import frame_tfrecord, write_tfrecord
from tfbatch.runtime import ModelServer, RuntimeSettings
from tfbatch.testing import models
from tfbatch.tfs.warmup import WARMUP_FILE, prediction_log_pb2, warm_up


def make_counting_model(path):
    """``serving_default``: x float32 [None, 1] -> y = 2x, counting its calls;
    ``calls``: x -> the number of serving_default calls so far, one per row."""
    import tensorflow as tf

    class Counting(tf.Module):
        def __init__(self):
            super().__init__()
            self.calls = tf.Variable(0, dtype=tf.int64)

        @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32, name="x")])
        def serve(self, x):
            self.calls.assign_add(1)
            return {"y": 2 * x}

        @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32, name="x")])
        def count(self, x):
            return {"calls": tf.fill([tf.shape(x)[0]], self.calls.read_value())}

    module = Counting()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve, "calls": module.count})
    return path


def predict_log(inputs, signature_name=""):
    import tensorflow as tf

    pb2 = prediction_log_pb2()
    entry = pb2.PredictionLog()
    entry.predict_log.request.model_spec.name = "m"
    entry.predict_log.request.model_spec.signature_name = signature_name
    for key, value in inputs.items():
        entry.predict_log.request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    return entry


def examples_log(kind, values):
    pb2 = prediction_log_pb2()
    entry = pb2.PredictionLog()
    request = getattr(entry, kind).request
    for x in values:
        example = request.input.example_list.examples.add()
        example.features.feature["x"].float_list.value.extend(x)
    return entry


def write_warmup(model_dir, entries=None, raw=None):
    path = model_dir / WARMUP_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw if raw is not None else write_tfrecord(e.SerializeToString() for e in entries))
    return path


@pytest.fixture(scope="module")
def counting_source(tmp_path_factory):
    return make_counting_model(tmp_path_factory.mktemp("counting") / "1")


@pytest.fixture
def counting(counting_source, tmp_path):
    model = tmp_path / "counting" / "1"
    shutil.copytree(counting_source, model)
    return model


def _calls(server):
    return int(server.run({"x": np.zeros((1, 1), np.float32)}, signature_name="calls")["calls"][0])


@pytest.mark.parametrize("replays", [1, 3, 0])
def test_warmup_requests_run_before_the_server_is_built(counting, replays):
    x = np.ones((2, 1), np.float32)
    write_warmup(counting, [predict_log({"x": x}), predict_log({"x": x}, "serving_default")])
    settings = RuntimeSettings(warmup_replays=replays)
    with ModelServer({"m": {1: counting}}, settings, warmup=warm_up) as server:
        assert server.ready
        assert _calls(server) == 2 * replays


def test_classify_and_regress_records_are_replayed(tmp_path):
    model = models.make_classify_regress_model(tmp_path / "cr" / "1")
    write_warmup(model, [examples_log("classify_log", [[1.0, 2.0]]), examples_log("regress_log", [[0.5, 0.5]] * 3)])
    with ModelServer({"cr": {1: model}}) as server:
        assert warm_up(server.resolve("cr"), replays=2) == 4
    # a classify record against a model without a classify signature fails, so it really ran
    linear = models.make_linear_model(tmp_path / "linear" / "1")
    write_warmup(linear, [examples_log("classify_log", [[1.0, 2.0]])])
    with pytest.raises(ArtifactError, match=r"record 0 \(classify_log\) failed on model 'linear' version 1"):
        ModelServer({"linear": {1: linear}}, warmup=warm_up)


def test_without_a_warmup_file_nothing_runs(counting):
    with ModelServer({"m": {1: counting}}, warmup=warm_up) as server:
        assert warm_up(server.resolve("m")) == 0
        assert _calls(server) == 0


def _huge_record_header():
    import struct

    from tfbatch.records.crc32c import masked_crc32c

    length = struct.pack("<Q", 4 << 30)
    return length + struct.pack("<I", masked_crc32c(length)) + b"\0" * 64


def _session_run_log():
    entry = prediction_log_pb2().PredictionLog()
    entry.session_run_log.request.feed.add()
    return entry


@pytest.mark.parametrize(
    "content, message",
    [
        (lambda: write_tfrecord([predict_log({"x": np.ones((1, 1), np.float32)}).SerializeToString()])[:-3],
         r"record 0: .*truncated TFRecord"),
        (lambda: write_tfrecord([predict_log({"x": np.ones((1, 1), np.float32)}).SerializeToString(), b"\xff\xff"]),
         r"record 1: not a tensorflow.serving.PredictionLog proto"),
        (lambda: write_tfrecord([_session_run_log().SerializeToString()]),
         r"record 0: holds session_run_log; expected one of predict_log, classify_log, regress_log"),
        (lambda: write_tfrecord([prediction_log_pb2().PredictionLog().SerializeToString()]),
         r"record 0: holds no request"),
        (lambda: write_tfrecord([predict_log({"z": np.ones((1, 1), np.float32)}).SerializeToString()]),
         r"record 0 \(predict_log\) failed on model 'm' version 1: .*missing inputs \['x'\]"),
        (lambda: frame_tfrecord(predict_log({"x": np.ones((1, 1), np.float32)}).SerializeToString()) * 1001,
         r"has more than 1000 records"),
        # a length field claiming 4 GiB: refused from the header, nothing that size is read
        (lambda: _huge_record_header(), r"record 0: .*exceeds the record limit of 104857600 bytes"),
    ],
)
def test_a_malformed_warmup_file_fails_the_load_naming_file_and_record(counting, content, message):
    path = write_warmup(counting, raw=content())
    with pytest.raises(ArtifactError, match=message) as info:
        ModelServer({"m": {1: counting}}, warmup=warm_up)
    assert str(path) in str(info.value)


def test_grpc_model_status_reports_swapped_versions(tmp_path):
    import grpc
    from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

    from tfbatch.tfs.grpc_service import start_grpc_server

    base = tmp_path / "m"
    models.make_linear_model(base / "1", seed=0)
    settings = RuntimeSettings(model_version_policy="latest")
    with ModelServer({"m": {1: base / "1"}}, settings, base_paths={"m": base}, warmup=warm_up) as server:
        grpc_server, port = start_grpc_server(server, port=0)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = model_service_pb2_grpc.ModelServiceStub(channel)

                def states():
                    response = stub.GetModelStatus(
                        get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "m"}), timeout=30
                    )
                    return [(s.version, get_model_status_pb2.ModelVersionStatus.State.Name(s.state))
                            for s in response.model_version_status]

                assert states() == [(1, "AVAILABLE")]
                staged = models.make_linear_model(tmp_path / "stage", seed=1)
                write_warmup(staged, [predict_log({"x": np.ones((1, 3), np.float32)})])
                shutil.move(str(staged), str(base / "2"))
                server.poll_versions()
                assert states() == [(2, "AVAILABLE"), (1, "END")]
        finally:
            grpc_server.stop(None)


def test_serve_process_warms_up_before_ping_and_takes_a_batching_file(counting, tmp_path):
    import requests

    from .conftest import ServerProcess

    write_warmup(counting, [predict_log({"x": np.ones((1, 1), np.float32)})] * 3)
    batching = tmp_path / "batching.txt"
    batching.write_text("max_batch_size { value: 4 }\nbatch_timeout_micros { value: 100 }\n")
    srv = ServerProcess(counting.parent, tmp_path, "--grpc-port", "-1", "--warmup-replays", "2",
                        "--batching-parameters-file", str(batching), "--model-version-policy", "latest")
    try:
        srv.wait_ready()  # /ping answered 200
        r = requests.post(f"{srv.url}/v1/models/model:predict",
                          json={"signature_name": "calls", "instances": [[0.0]]}, timeout=30)
        assert r.status_code == 200, r.text
        assert r.json()["predictions"] == [6]
        status = requests.get(f"{srv.url}/v1/models/model", timeout=30).json()
        assert [(s["version"], s["state"]) for s in status["model_version_status"]] == [("1", "AVAILABLE")]
        # The file's max_batch_size took effect (it turns batching on, as in TF Serving): one
        # worker advertises that many concurrent transforms; without the file it would be 1.
        params = requests.get(f"{srv.url}/execution-parameters", timeout=30).json()
        assert params["MaxConcurrentTransforms"] == 4
    finally:
        assert srv.stop() == 0


def test_serve_process_refuses_a_bad_batching_file(counting, tmp_path):
    from .conftest import ServerProcess

    batching = tmp_path / "batching.txt"
    batching.write_text("max_batch_size { value: 4 }\nmax_batch_sise { value: 4 }\n")
    srv = ServerProcess(counting.parent, tmp_path, "--grpc-port", "-1", "--batching-parameters-file", str(batching))
    assert srv.proc.wait(120) != 0
    assert f"{batching}:2: unknown field 'max_batch_sise'" in srv.output()
