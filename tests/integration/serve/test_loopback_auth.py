"""The loopback TFS endpoints answer the job's own processes and token holders, nobody else.

A ``tfbatch serve`` subprocess (and a ``tfbatch transform`` subprocess) is the job. Probes come
from a sibling process, outside the job's process tree, with real requests and gRPC clients.
An unchanged SageMaker handler script (bare ``requests.post(context.rest_uri)``, its own
``grpc.insecure_channel('0.0.0.0:<grpc_port>')``, and a child process of its own doing both)
keeps working in both.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import requests
import tensorflow as tf
from tensorflow_serving.apis import get_model_metadata_pb2, get_model_status_pb2, predict_pb2

from tests.integration.serve.conftest import ServerProcess
from tfbatch.testing.models import linear_expected, make_linear_model

X = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]], dtype=np.float32)

# Real clients with no TensorFlow (a foreign process need not be a TF program): raw gRPC
# bytes in and out, so requests are built and read by the test.
BARE_CLIENT = '''
import json, sys
import grpc, requests

spec = json.load(sys.stdin)
headers = {"Authorization": "Bearer " + spec["bearer"]} if spec.get("bearer") else {}
out = {"rest": {}, "grpc": {}}
for name, (method, path, body) in spec["rest"].items():
    r = requests.request(method, spec["rest_base"] + path, data=body, headers=headers, timeout=60)
    out["rest"][name] = [r.status_code, r.text[:400]]
metadata = [("authorization", "Bearer " + spec["bearer"])] if spec.get("bearer") else None
with grpc.insecure_channel(spec["grpc_target"]) as channel:
    for name, (path, request_hex) in spec["grpc"].items():
        try:
            reply = channel.unary_unary(path)(bytes.fromhex(request_hex), timeout=60, metadata=metadata)
            out["grpc"][name] = ["OK", reply.hex()]
        except grpc.RpcError as err:
            out["grpc"][name] = [err.code().name, err.details()]
json.dump(out, sys.stdout)
'''

# The handler as SageMaker's TFS container runs it: no token anywhere. It also starts a child
# process that calls both endpoints bare, as a handler worker process of the job would.
HANDLER = '''
import json, os, subprocess, sys

import grpc
import numpy as np
import requests
from tensorflow.compat.v1 import make_tensor_proto
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc


def handler(data, context):
    x = np.array(json.loads(data.read().decode("utf-8"))["x"], dtype=np.float32)
    r = requests.post(context.rest_uri, data=json.dumps({"instances": x.tolist()}))
    if r.status_code != 200:
        raise ValueError("rest: %s %s" % (r.status_code, r.text))
    request = predict_pb2.PredictRequest()
    request.model_spec.name = context.model_name
    request.model_spec.signature_name = "serving_default"
    request.inputs["x"].CopyFrom(make_tensor_proto(x))
    channel = grpc.insecure_channel("0.0.0.0:{}".format(context.grpc_port))
    out = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, 30).outputs["y"]
    stub = np.array(out.float_val).reshape([d.size for d in out.tensor_shape.dim])
    base, _, path = context.rest_uri.partition("/v1/")
    spec = {"rest_base": base, "grpc_target": "localhost:{}".format(context.grpc_port),
            "rest": {"predict": ["POST", "/v1/" + path, json.dumps({"instances": x.tolist()})]},
            "grpc": {"predict": ["/tensorflow.serving.PredictionService/Predict", request.SerializeToString().hex()]}}
    client = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bare_client.py")
    child = json.loads(subprocess.run([sys.executable, client], input=json.dumps(spec), capture_output=True,
                                      text=True, check=True).stdout)
    if child["rest"]["predict"][0] != 200 or child["grpc"]["predict"][0] != "OK":
        raise ValueError("child process refused: %s" % child)
    reply = predict_pb2.PredictResponse.FromString(bytes.fromhex(child["grpc"]["predict"][1])).outputs["y"]
    return json.dumps({"rest": r.json()["predictions"], "stub": stub.tolist(),
                       "child_rest": json.loads(child["rest"]["predict"][1])["predictions"],
                       "child_grpc": list(reply.float_val)}), "application/json"
'''


@pytest.fixture(scope="module")
def script_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("loopauth")
    make_linear_model(root / "1", seed=0)
    (root / "code").mkdir()
    (root / "code" / "inference.py").write_text(HANDLER)
    (root / "code" / "bare_client.py").write_text(BARE_CLIENT)
    return root


def _hex(message) -> str:
    return message.SerializeToString().hex()


def _probes() -> dict:
    """Every REST route and every gRPC method the loopback endpoints serve."""
    predict = predict_pb2.PredictRequest()
    predict.model_spec.name = "model"
    predict.inputs["x"].CopyFrom(tf.make_tensor_proto(X))
    meta = get_model_metadata_pb2.GetModelMetadataRequest()
    meta.model_spec.name = "model"
    meta.metadata_field.append("signature_def")
    status = get_model_status_pb2.GetModelStatusRequest()
    status.model_spec.name = "model"
    body = json.dumps({"instances": X.tolist()})
    examples = json.dumps({"examples": [{"x": [1.0, 2.0]}]})
    svc = "/tensorflow.serving.PredictionService/"
    return {
        "rest": {
            "predict": ["POST", "/v1/models/model:predict", body],
            "predict_version": ["POST", "/v1/models/model/versions/1:predict", body],
            "classify": ["POST", "/v1/models/model:classify", examples],
            "regress": ["POST", "/v1/models/model:regress", examples],
            "status": ["GET", "/v1/models/model", None],
            "status_version": ["GET", "/v1/models/model/versions/1", None],
            "metadata": ["GET", "/v1/models/model/metadata", None],
            "unknown_path": ["GET", "/", None],
        },
        "grpc": {
            "Predict": [svc + "Predict", _hex(predict)],
            "Classify": [svc + "Classify", ""],
            "Regress": [svc + "Regress", ""],
            "MultiInference": [svc + "MultiInference", ""],
            "GetModelMetadata": [svc + "GetModelMetadata", _hex(meta)],
            "GetModelStatus": ["/tensorflow.serving.ModelService/GetModelStatus", _hex(status)],
            "HandleReloadConfigRequest": ["/tensorflow.serving.ModelService/HandleReloadConfigRequest", ""],
        },
    }


def _foreign(loopback: dict, *, bearer: str | None = None, basic: str | None = None) -> dict:
    """Run the probes from a process outside the job's tree (the test's own child, a sibling of the job)."""
    auth = f"tfbatch:{basic}@" if basic else ""
    spec = {**_probes(), "rest_base": f"http://{auth}127.0.0.1:{loopback['rest_port']}",
            "grpc_target": f"127.0.0.1:{loopback['grpc_port']}", "bearer": bearer}
    done = subprocess.run([sys.executable, "-c", BARE_CLIENT], input=json.dumps(spec), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _assert_all_refused(result: dict) -> None:
    for name, (status, text) in result["rest"].items():
        assert status == 401, (name, status, text)
        assert "loopback TFS endpoint answers only this job's processes" in json.loads(text)["error"]
    for name, (code, details) in result["grpc"].items():
        assert code == "UNAUTHENTICATED", (name, code, details)


def _assert_served(result: dict) -> None:
    rest, grpc_ = result["rest"], result["grpc"]
    assert rest["predict"][0] == 200, rest["predict"]
    np.testing.assert_allclose(json.loads(rest["predict"][1])["predictions"], linear_expected(X), rtol=1e-5)
    assert rest["status"][0] == 200 and rest["metadata"][0] == 200
    assert rest["unknown_path"][0] == 404  # past the guard, the router answers
    assert grpc_["Predict"][0] == "OK", grpc_["Predict"]
    reply = predict_pb2.PredictResponse.FromString(bytes.fromhex(grpc_["Predict"][1]))
    np.testing.assert_allclose(tf.make_ndarray(reply.outputs["y"]), linear_expected(X), rtol=1e-5)
    assert grpc_["GetModelStatus"][0] == "OK" and grpc_["GetModelMetadata"][0] == "OK"
    for name, (code, _) in grpc_.items():
        assert code != "UNAUTHENTICATED", name


def _check_script(srv: ServerProcess, headers: dict) -> None:
    r = requests.post(f"{srv.url}/invocations", json={"x": X.tolist()}, headers=headers, timeout=120)
    assert r.status_code == 200, (r.text, srv.output())
    body = r.json()
    for key in ("rest", "stub", "child_rest"):
        np.testing.assert_allclose(body[key], linear_expected(X), rtol=1e-5)
    np.testing.assert_allclose(body["child_grpc"], linear_expected(X).reshape(-1), rtol=1e-5)


@pytest.fixture(scope="module")
def token_server(script_dir, tmp_path_factory):
    srv = ServerProcess(script_dir, tmp_path_factory.mktemp("la-tok"), env={"TFBATCH_AUTH_TOKEN": "tok"})
    srv.wait_ready(timeout=180)
    yield srv
    assert srv.stop() == 0, srv.output()


def _loopback(srv: ServerProcess) -> dict:
    return json.loads(srv.ready_file.read_text())["loopback"]


def test_foreign_process_without_token_is_refused_everywhere(token_server):
    _assert_all_refused(_foreign(_loopback(token_server)))
    _assert_all_refused(_foreign(_loopback(token_server), bearer="wrong"))


def test_foreign_process_with_the_endpoint_token_is_served(token_server):
    _assert_served(_foreign(_loopback(token_server), bearer="tok"))
    # requests turns credentials in the URL into Basic auth; the token is the password.
    assert _foreign(_loopback(token_server), basic="tok")["rest"]["predict"][0] == 200


def test_unchanged_script_and_its_child_process_work_under_serve(token_server):
    _check_script(token_server, {"Authorization": "Bearer tok"})


def test_without_an_endpoint_token_the_loopback_still_refuses_strangers(script_dir, tmp_path):
    srv = ServerProcess(script_dir, tmp_path, "--grpc-port", "-1").wait_ready(timeout=180)
    try:
        _check_script(srv, {})
        _assert_all_refused(_foreign(_loopback(srv)))
        _assert_all_refused(_foreign(_loopback(srv), bearer="tok"))
    finally:
        assert srv.stop() == 0, srv.output()


def test_unchanged_script_works_in_a_transform_job(script_dir, tmp_path):
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    for i in range(3):
        (inp / f"{i}.json").write_text(json.dumps({"x": (X + i).tolist()}))
    proc = subprocess.run(
        [sys.executable, "-m", "tfbatch", "transform", "--model", str(script_dir), "--input", str(inp),
         "--output", str(out), "--content-type", "application/json", "--accept", "application/json"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for i in range(3):
        body = json.loads((out / f"{i}.json.out").read_text())
        for key in ("rest", "stub", "child_rest"):
            np.testing.assert_allclose(body[key], linear_expected(X + i), rtol=1e-5)
        np.testing.assert_allclose(body["child_grpc"], linear_expected(X + i).reshape(-1), rtol=1e-5)
