"""The shipped inference.py, driven as the TFS container drives it, against a real
HTTP server that runs the exported SavedModel the way TFS's REST predict API does."""

from __future__ import annotations

import base64
import collections
import importlib.util
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import requests
import tensorflow as tf

from tfbatch.train.export import export_servable
from tfbatch.train.inference_template import INFERENCE_SCRIPT, write_inference_script

Context = collections.namedtuple(
    "Context",
    "model_name model_version method rest_uri grpc_port channel custom_attributes "
    "request_content_type accept_header content_length",
)


def _load_script(path):
    spec = importlib.util.spec_from_file_location("inference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tfs_like_server(tmp_path_factory, tiny_rgb_model):
    path = export_servable(
        tiny_rgb_model, tmp_path_factory.mktemp("m"), image_size=(16, 16), channels=3,
        include_classes=False,
    )
    signature = tf.saved_model.load(str(path)).signatures["serving_default"]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            try:
                blobs = [base64.b64decode(item["b64"]) for item in body["instances"]]
                probs = signature(image_bytes=tf.constant(blobs))["probabilities"].numpy()
                status, payload = 200, {"predictions": probs.tolist()}
            except Exception as exc:  # the server answers errors as TFS does
                status, payload = 400, {"error": str(exc).splitlines()[0]}
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/models/model:predict"
    server.shutdown()


def _context(rest_uri, content_type):
    return Context("model", None, "predict", rest_uri, None, None, "", content_type,
                   "application/json", None)


def _invoke(script, rest_uri, body, content_type):
    ctx = _context(rest_uri, content_type)
    request_body = script.input_handler(io.BytesIO(body), ctx)
    response = requests.post(rest_uri, data=request_body, timeout=30)
    return script.output_handler(response, ctx)


def test_written_script_is_the_constant(tmp_path):
    path = write_inference_script(tmp_path / "code")
    assert path == tmp_path / "code" / "inference.py"
    assert path.read_text() == INFERENCE_SCRIPT
    compile(INFERENCE_SCRIPT, "inference.py", "exec")


@pytest.mark.parametrize("content_type", ["application/x-image", "image/png", "image/png; q=1"])
def test_image_body_round_trip(tmp_path, tfs_like_server, tiny_rgb_model, encode_png, content_type):
    script = _load_script(write_inference_script(tmp_path / "code"))
    image = np.random.RandomState(3).randint(0, 256, (16, 16, 3), dtype=np.uint8)
    body, out_type = _invoke(script, tfs_like_server, encode_png(image), content_type)
    assert out_type == "application/json"
    predictions = json.loads(body)["predictions"]
    expected = tiny_rgb_model.predict(image[None] / 255.0, verbose=0)
    np.testing.assert_allclose(predictions, expected, atol=1e-6)


def test_json_passes_through(tmp_path, tfs_like_server, encode_png):
    script = _load_script(write_inference_script(tmp_path / "code"))
    image = np.zeros((16, 16, 3), np.uint8)
    request = json.dumps({"instances": [{"b64": base64.b64encode(encode_png(image)).decode()}] * 2})
    body, _ = _invoke(script, tfs_like_server, request.encode(), "application/json")
    assert len(json.loads(body)["predictions"]) == 2


def test_errors_are_raised(tmp_path, tfs_like_server):
    script = _load_script(write_inference_script(tmp_path / "code"))
    with pytest.raises(ValueError, match="error"):
        _invoke(script, tfs_like_server, b"definitely not a png", "image/png")
    with pytest.raises(ValueError, match="Unsupported content type 'text/csv'"):
        script.input_handler(io.BytesIO(b"1,2"), _context(tfs_like_server, "text/csv"))
