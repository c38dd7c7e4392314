"""SageMaker-style inference.py scripts, written for the TFS container, run unchanged through
``tfbatch transform`` — pair mode in-process, and a single ``handler`` that POSTs to
``context.rest_uri`` (a live loopback TFS REST endpoint)."""

import io
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from PIL import Image

from tfbatch.artifact import package
from tfbatch.testing.models import make_image_bytes_model

PAIR = """
import base64, json

def input_handler(data, context):
    if context.request_content_type == "application/x-image":
        return json.dumps({"instances": [{"b64": base64.b64encode(data.read()).decode("utf-8")}]})
    raise ValueError("unsupported content type " + context.request_content_type)

def output_handler(response, context):
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8"))
    return response.content, context.accept_header
"""

HANDLER = """
import base64, json
import requests

def handler(data, context):
    payload = {"instances": [{"b64": base64.b64encode(data.read()).decode("utf-8")}]}
    response = requests.post(context.rest_uri, data=json.dumps(payload))
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8"))
    prediction = response.json()["predictions"][0]
    return json.dumps({"label": int(prediction["classes"])}), "application/json"
"""

# Seed 003's way: a PredictRequest over gRPC, a new channel per record with the message limits
# raised, Predict.future(...).result(), the output read from float_val and reshaped.
GRPC_HANDLER = """
import json
import grpc
import numpy as np
from tensorflow.compat.v1 import make_tensor_proto
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

def handler(data, context):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "model"
    request.model_spec.signature_name = "serving_default"
    request.inputs["image_bytes"].CopyFrom(make_tensor_proto([data.read()]))
    options = [("grpc.max_send_message_length", 200 << 20), ("grpc.max_receive_message_length", 200 << 20)]
    channel = grpc.insecure_channel(f"0.0.0.0:{context.grpc_port}", options=options)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    try:
        result = stub.Predict.future(request, 30).result()
    except grpc.RpcError as err:
        raise ValueError(f"{err.code()}: {err.details()}")
    classes = result.outputs["classes"]
    label = np.array(classes.int64_val).reshape([d.size for d in classes.tensor_shape.dim])[0]
    return json.dumps({"label": int(label)}), "application/json"
"""


def _png(value: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8), value, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def savedmodel(tmp_path_factory):
    return make_image_bytes_model(tmp_path_factory.mktemp("sm") / "1")


def _archive(tmp_path, savedmodel, script: str):
    code = tmp_path / "code"
    code.mkdir()
    (code / "inference.py").write_text(textwrap.dedent(script))
    return package([savedmodel], tmp_path / "model.tar.gz", code_dir=code)


def _inputs(tmp_path):
    root = tmp_path / "in"
    (root / "sub").mkdir(parents=True)
    files = {"a.png": _png(0), "b.png": _png(128), "sub/c.png": _png(255), "bad.png": b"not an image"}
    for key, data in files.items():
        (root / key).write_bytes(data)
    return root


def _run(*args):
    return subprocess.run([sys.executable, "-m", "tfbatch", "transform", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("script,flags", [
    (PAIR, []), (HANDLER, []), (GRPC_HANDLER, []),
    # in a handler worker process, the gRPC calls go over the socket to the job's process
    (GRPC_HANDLER, ["--handler-workers", "1"]),
], ids=["pair", "handler-posting-to-rest_uri", "handler-calling-grpc_port", "grpc-handler-in-a-worker"])
def test_sagemaker_script_runs_unchanged(tmp_path, savedmodel, script, flags):
    archive = _archive(tmp_path, savedmodel, script)
    inp, out = _inputs(tmp_path), tmp_path / "out"
    proc = _run("--model", str(archive), "--input", str(inp), "--output", str(out),
                "--content-type", "application/x-image", "--accept", "application/json", *flags)
    # One undecodable file: the job reports failure, but every other file has its output.
    assert proc.returncode == 1, proc.stderr
    assert "3/4 objects succeeded" in proc.stdout
    produced = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.out"))
    assert produced == ["a.png.out", "b.png.out", "sub/c.png.out"]
    for key in produced:
        body = json.loads((out / key).read_bytes())
        if script is PAIR:
            (prediction,) = body["predictions"]
            assert len(prediction["probabilities"]) == 10
        else:
            assert body["label"] == _label(savedmodel, (inp / key.removesuffix(".out")).read_bytes())


def _label(savedmodel, image: bytes) -> int:
    """The model's own class for ``image``, run here directly."""
    import tensorflow as tf

    serve = tf.saved_model.load(str(savedmodel)).signatures["serving_default"]
    return int(serve(image_bytes=tf.constant([image]))["classes"].numpy()[0])


# Each call meets one other at a barrier (pairs of calls in flight at once), counts the calls
# in flight, and answers with the most it saw. Calls made one after another never meet: the
# first wait times out and breaks the barrier, after which no call waits again.
CONCURRENT_HANDLER = """
import json, threading
import requests

_lock = threading.Lock()
_pair = threading.Barrier(2, timeout=5)
_now = 0
_peak = 0

def handler(data, context):
    global _now, _peak
    with _lock:
        _now += 1
        _peak = max(_peak, _now)
    try:
        try:
            _pair.wait()
        except threading.BrokenBarrierError:
            pass
        payload = {"instances": [{"b64": __import__("base64").b64encode(data.read()).decode()}]}
        response = requests.post(context.rest_uri, data=json.dumps(payload))
        if response.status_code != 200:
            raise ValueError(response.content.decode("utf-8"))
    finally:
        with _lock:
            _now -= 1
    return json.dumps({"peak": _peak}), "application/json"
"""


@pytest.mark.parametrize("workers", [None, "1"], ids=["default-pool", "worker-process"])
@pytest.mark.parametrize("worker_class", [None, "sync"])
def test_handler_calls_of_a_hop_run_concurrently(tmp_path, savedmodel, workers, worker_class):
    # A handler waits on its own model call: one at a time, the loopback server batches
    # nothing. As the container's gevent workers do, calls overlap, unless the job asks for
    # the container's sync workers.
    archive = _archive(tmp_path, savedmodel, CONCURRENT_HANDLER)
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    for n in range(24):
        (inp / f"{n:02d}.png").write_bytes(_png(n * 10))
    env = ["--env", f"SAGEMAKER_GUNICORN_WORKER_CLASS={worker_class}"] if worker_class else []
    pool = ["--handler-workers", workers] if workers else []  # default: in process below 3 cores
    # Hops of up to 8 records (no batch-size probe), so that a hop has calls to overlap.
    proc = _run("--model", str(archive), "--input", str(inp), "--output", str(out), *pool, "--max-batch-size", "8",
                "--content-type", "application/x-image", *env)
    assert proc.returncode == 0, proc.stderr
    peaks = [json.loads(p.read_bytes())["peak"] for p in sorted(out.glob("*.out"))]
    assert len(peaks) == 24
    if worker_class == "sync":
        assert max(peaks) == 1
    else:
        assert max(peaks) >= 2


# HANDLER with json=: the call goes through the thread's requests.Session, which the calls
# taking turns on one thread share.
JSON_HANDLER = HANDLER.replace("data=json.dumps(payload)", "json=payload")
assert JSON_HANDLER != HANDLER
# HANDLER, after a call to "another service" that blocks the calling thread for 30 ms.
BLOCKING_HANDLER = HANDLER.replace("def handler(data, context):\n",
                                   "def handler(data, context):\n    __import__('time').sleep(0.03)\n")

# HANDLER through urllib, which reaches the job's loopback endpoint over a socket: the model
# call runs on the endpoint's thread, so a call here never pauses for it.
URLLIB_HANDLER = """
import base64, json
import urllib.request

def handler(data, context):
    payload = {"instances": [{"b64": base64.b64encode(data.read()).decode("utf-8")}]}
    request = urllib.request.Request(context.rest_uri, data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as response:
        prediction = json.loads(response.read())["predictions"][0]
    return json.dumps({"label": int(prediction["classes"])}), "application/json"
"""


def _report_batches(out):
    (stats,) = json.loads((out / "_tfbatch" / "report.json").read_text())["batches"].values()
    return stats


@pytest.mark.parametrize("script,worker_class,calls", [
    (HANDLER, None, "taking turns on the hop's thread"),
    (JSON_HANDLER, None, "taking turns on the hop's thread"),
    (GRPC_HANDLER, "gevent", "taking turns on the hop's thread"),
    # blocked outside the model: the turns stop and later calls get a thread each
    (BLOCKING_HANDLER, None, "a thread each, after taking turns on the hop's thread blocked"),
    (HANDLER, "gthread", "a thread each"),
    # calls that never pause for the model: turns would only queue them on one thread. On a
    # loaded machine the waits can count as blocked before 32 calls have shown no pause.
    (URLLIB_HANDLER, None, "a thread each, after taking turns on the hop's thread"),
], ids=["rest", "rest-json-session", "grpc-gevent", "blocking", "gthread", "urllib-not-pausing"])
def test_a_single_handlers_calls_take_turns_on_their_hops_thread(tmp_path, savedmodel, script, worker_class, calls):
    # In the job's process, a hop's handler calls take turns on its thread, pausing where they
    # wait for the model (batching/cooperative.py), as under the container's gevent workers.
    env = ["--env", f"SAGEMAKER_GUNICORN_WORKER_CLASS={worker_class}"] if worker_class else []
    images, out = _forty_images_through(tmp_path, savedmodel, script, *env)
    stats = _report_batches(out)
    assert stats["hooks"].startswith("in-process")
    assert stats["handler_calls"].startswith(calls), stats["handler_calls"]
    if script is URLLIB_HANDLER:
        assert ", 0 of them paused for the model" in stats["handler_calls"], stats["handler_calls"]
    for key, label in zip(images, _labels(savedmodel, images)):
        assert json.loads((out / f"{key}.out").read_bytes()) == {"label": label}


def _forty_images_through(tmp_path, savedmodel, script: str, *flags: str):
    """({key: PNG}, output folder) of a job over 40 PNGs with ``script``, in hops of 8."""
    archive = _archive(tmp_path, savedmodel, script)
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    images = {f"{n:02d}.png": _png(n * 6) for n in range(40)}
    for key, data in images.items():
        (inp / key).write_bytes(data)
    proc = _run("--model", str(archive), "--input", str(inp), "--output", str(out), "--max-batch-size", "8",
                "--content-type", "application/x-image", *flags)
    assert proc.returncode == 0, proc.stderr
    return images, out


def _labels(savedmodel, images: dict[str, bytes]) -> list[int]:
    """The model's own class for each image, run here directly."""
    import tensorflow as tf

    serve = tf.saved_model.load(str(savedmodel)).signatures["serving_default"]
    return [int(label) for label in serve(image_bytes=tf.constant(list(images.values())))["classes"].numpy()]


# Per-call state on a threading.local, read back after the model call: right under the
# container's gevent workers (which make threading.local a greenlet's own) and with a thread a
# call; calls taking turns on one thread would all see the last one's image (290 of 300 JPEGs).
THREAD_LOCAL_HANDLER = """
import base64, hashlib, json, threading
import requests

_call = threading.local()

def handler(data, context):
    _call.image = data.read()
    payload = {"instances": [{"b64": base64.b64encode(_call.image).decode("utf-8")}]}
    response = requests.post(context.rest_uri, data=json.dumps(payload))
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8"))
    label = int(response.json()["predictions"][0]["classes"])
    return json.dumps({"label": label, "md5": hashlib.md5(_call.image).hexdigest()}), "application/json"
"""
# One model call at a time, under a lock held across it: calls taking turns on one thread
# would wait for good on the lock a paused call of their own thread holds (the job hung).
LOCKED_HANDLER = HANDLER.replace("import requests\n", "import requests\nfrom threading import Lock\n_one = Lock()\n")
LOCKED_HANDLER = LOCKED_HANDLER.replace("    response = requests.post(", "    with _one:\n        response = requests.post(")
assert LOCKED_HANDLER.count("_one") == 2


@pytest.mark.parametrize("script,where", [
    (THREAD_LOCAL_HANDLER, "threading.local at inference.py:5"),
    (LOCKED_HANDLER, "threading.Lock at inference.py:4"),
], ids=["threading-local", "lock-across-the-model-call"])
def test_a_handler_using_thread_primitives_gets_a_thread_a_call(tmp_path, savedmodel, script, where):
    import hashlib

    images, out = _forty_images_through(tmp_path, savedmodel, script)
    for (key, image), label in zip(images.items(), _labels(savedmodel, images)):
        expected = {"label": label}
        if script is THREAD_LOCAL_HANDLER:
            expected["md5"] = hashlib.md5(image).hexdigest()
        assert json.loads((out / f"{key}.out").read_bytes()) == expected
    calls = _report_batches(out)["handler_calls"]
    assert calls.startswith(f"a thread each: the script uses what threads share or wait on ({where})"), calls
