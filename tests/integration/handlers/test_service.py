import io
import json

import numpy as np
import pytest
from PIL import Image

from tfbatch.handlers.service import InferenceService, InvocationRequest
from tfbatch.handlers.user_code import load_handlers
from tfbatch.testing.models import linear_expected


def _png(value: int, size: int = 8) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((size, size), value, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def test_default_json_predict(linear_server):
    service = InferenceService(linear_server)
    x = [[1.0, 2.0, 3.0], [0.5, 0.0, -1.0]]
    resp = service.invoke(InvocationRequest(body=json.dumps({"instances": x}).encode()))
    assert resp.status == 200, resp.body
    got = np.array(json.loads(resp.body)["predictions"])
    np.testing.assert_allclose(got, linear_expected(np.array(x), seed=1), rtol=1e-5)  # latest = v2 (seed 1)


@pytest.mark.parametrize("content_type", ["application/json", "application/jsonlines"])
def test_json_bodies_as_the_container_reads_them(linear_server, content_type):
    # A bare array of rows (the SDK's JSONSerializer of a 2-D numpy array) and JSON lines sent
    # as application/json are lists of instances, as the SageMaker container reads them.
    service = InferenceService(linear_server)
    x = [[1.0, 2.0, 3.0], [0.5, 0.0, -1.0]]
    bodies = [b"\n".join(json.dumps(row).encode() for row in x)]
    if content_type == "application/json":
        bodies.append(json.dumps(x).encode())
    for body in bodies:
        resp = service.invoke(InvocationRequest(body=body, content_type=content_type))
        assert resp.status == 200, resp.body
        got = np.array(json.loads(resp.body)["predictions"])
        np.testing.assert_allclose(got, linear_expected(np.array(x), seed=1), rtol=1e-5)


def test_custom_attributes_select_version(linear_server):
    service = InferenceService(linear_server)
    resp = service.invoke(InvocationRequest(body=b"1,2,3\n", content_type="text/csv",
                                            custom_attributes="tfs-model-version=1"))
    assert resp.status == 200, resp.body
    np.testing.assert_allclose(json.loads(resp.body)["predictions"], linear_expected(np.array([[1, 2, 3.0]]), seed=0), rtol=1e-5)


def test_unknown_version_is_404(linear_server):
    resp = InferenceService(linear_server).invoke(
        InvocationRequest(body=b"[1,2,3]", custom_attributes="tfs-model-version=9"))
    assert resp.status == 404
    assert "9" in json.loads(resp.body)["error"]


def test_bad_method_and_media_type(linear_server):
    service = InferenceService(linear_server)
    resp = service.invoke(InvocationRequest(body=b"[1,2,3]", custom_attributes="tfs-method=explain"))
    assert resp.status == 400 and "explain" in json.loads(resp.body)["error"]
    resp = service.invoke(InvocationRequest(body=b"x", content_type="application/x-npy"))
    assert resp.status == 415
    assert json.loads(resp.body) == {"error": "Unsupported Media Type: application/x-npy"}


def test_wrong_shape_is_400_saying_what_was_expected(linear_server):
    resp = InferenceService(linear_server).invoke(InvocationRequest(body=b'{"instances": [[1, 2]]}'))
    assert resp.status == 400
    assert "x" in json.loads(resp.body)["error"]


def test_image_body_without_script_string_input(image_server):
    resp = InferenceService(image_server).invoke(InvocationRequest(body=_png(255), content_type="image/png"))
    assert resp.status == 200, resp.body
    (prediction,) = json.loads(resp.body)["predictions"]
    assert set(prediction) == {"probabilities", "classes"}
    assert len(prediction["probabilities"]) == 10


def test_image_body_without_script_tensor_input_matches_bytes_signature(image_dir, image_server):
    """The tensor signature, fed by our host-side decode+resize, agrees with in-graph decoding."""
    from tfbatch.runtime import ModelServer

    server = ModelServer({"model": {1: image_dir / "1"}})
    # Make serving_tensor the only signature the default path can pick by asking via a copy of it.
    servable = server.resolve()
    sig = servable.signatures["serving_tensor"]
    from tfbatch.handlers.defaults import image_inputs

    big = _png(128, size=16)  # resized 16x16 -> 8x8 on the host
    tensors = image_inputs(big, sig)
    assert tensors["images"].shape == (1, 8, 8, 1)
    assert tensors["images"].dtype == np.float32
    np.testing.assert_allclose(tensors["images"], 128 / 255.0, atol=1e-6)
    out_tensor = server.run(tensors, signature_name="serving_tensor")
    out_bytes = server.run({"image_bytes": np.array([_png(128)], dtype=object)})
    np.testing.assert_allclose(out_tensor["probabilities"], out_bytes["probabilities"], atol=1e-5)
    server.close()


def test_undecodable_image_is_400(image_server):
    resp = InferenceService(image_server).invoke(InvocationRequest(body=b"not a png", content_type="image/png"))
    assert resp.status == 400, resp.body


PAIR_SCRIPT = """
    import base64, json
    import requests

    SEEN = []

    def input_handler(data, context):
        assert context.request_content_type == "application/x-image"
        assert context.rest_uri is None or context.rest_uri.endswith(":predict")
        return json.dumps({"instances": [{"b64": base64.b64encode(data.read()).decode()}]})

    def output_handler(response, context):
        assert isinstance(response, requests.Response)
        SEEN.append((response.status_code, response.text, response.json()))
        if response.status_code != 200:
            raise ValueError("model said: " + response.json()["error"])
        return response.content, "application/json"
"""


def test_pair_mode_in_process_gives_a_requests_response(write_script, tmp_path, image_server):
    handlers = load_handlers(write_script(tmp_path / "code", PAIR_SCRIPT))
    service = InferenceService(image_server, handlers)
    resp = service.invoke(InvocationRequest(body=_png(10), content_type="application/x-image"))
    assert resp.status == 200, resp.body
    assert resp.content_type == "application/json"
    module = __import__("sys").modules["inference"]
    status, text, parsed = module.SEEN[-1]
    assert status == 200 and json.loads(text) == parsed == json.loads(resp.body)


def test_pair_mode_non_200_reaches_output_handler_and_user_error_is_500(write_script, tmp_path, image_server):
    handlers = load_handlers(write_script(tmp_path / "code", PAIR_SCRIPT))
    resp = InferenceService(image_server, handlers).invoke(
        InvocationRequest(body=b"garbage", content_type="application/x-image"))
    module = __import__("sys").modules["inference"]
    assert module.SEEN[-1][0] == 400  # the model's 400 went to output_handler
    assert resp.status == 500
    assert json.loads(resp.body)["error"].startswith("model said: ")


def test_handler_returning_wrong_shape_is_500_naming_the_contract(write_script, tmp_path, linear_server):
    handlers = load_handlers(write_script(tmp_path / "code", "def handler(d, c): return b'x'\n"))
    resp = InferenceService(linear_server, handlers).invoke(InvocationRequest(body=b""))
    assert resp.status == 500
    assert "(body, content_type)" in json.loads(resp.body)["error"]


def test_context_values_seen_by_handler(write_script, tmp_path, linear_server):
    handlers = load_handlers(write_script(tmp_path / "code", """
        import json
        def handler(data, context):
            return json.dumps(dict(context._asdict(), channel=None, body=data.read().decode())), "application/json"
    """))
    service = InferenceService(linear_server, handlers, rest_port=8501)
    resp = service.invoke(InvocationRequest(body=b"abc", content_type="text/csv", accept="text/csv",
                                            custom_attributes="tfs-model-version=2,tfs-method=regress"))
    ctx = json.loads(resp.body)
    assert ctx == {
        "model_name": "model", "model_version": "2", "method": "regress",
        "rest_uri": "http://localhost:8501/v1/models/model/versions/2:regress", "grpc_port": None,
        "channel": None, "custom_attributes": "tfs-model-version=2,tfs-method=regress",
        "request_content_type": "text/csv", "accept_header": "text/csv", "content_length": 3, "body": "abc",
    }


def test_stack_close_removes_the_extracted_archive(tmp_path, image_dir):
    from tfbatch.artifact import package
    from tfbatch.handlers.stack import build_stack

    archive = package([image_dir / "1"], tmp_path / "model.tar.gz")
    stack = build_stack(str(archive))
    root = stack.artifact.root
    assert (root / "1" / "saved_model.pb").exists()
    resp = stack.service.invoke(InvocationRequest(body=_png(3), content_type="image/png"))
    assert resp.status == 200, resp.body
    stack.close()
    assert not root.exists()
