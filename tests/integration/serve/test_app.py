"""In-process checks of the ASGI app through httpx.ASGITransport (no sockets)."""

from __future__ import annotations

import json

import anyio
import httpx
import numpy as np
import pytest

from tfbatch.handlers.service import InferenceService
from tfbatch.serve.app import build_app
from tfbatch.serve.metrics import route_label
from tfbatch.serve.settings import ServeSettings
from tfbatch.testing.models import linear_expected

X = [[1.0, 2.0, 3.0], [0.0, -1.0, 2.0]]


def call(app, method, path, **kwargs) -> httpx.Response:
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            return await client.request(method, path, **kwargs)

    return anyio.run(go)


@pytest.fixture(scope="module")
def app(model_server):
    return build_app(InferenceService(model_server), ServeSettings(max_body_mb=0.01, request_timeout_s=30))


def test_ping_and_execution_parameters(app):
    assert call(app, "GET", "/ping").status_code == 200
    params = call(app, "GET", "/execution-parameters").json()
    assert params["BatchStrategy"] == "MULTI_RECORD" and params["MaxConcurrentTransforms"] >= 1
    assert params["MaxPayloadInMB"] == 1


def test_not_ready_ping_is_503(model_server):
    app = build_app(InferenceService(model_server), ready=lambda: False)
    assert call(app, "GET", "/ping").status_code == 503


@pytest.mark.parametrize("path", ["/invocations", "/endpoints/anything/invocations"])
def test_invocations_json_and_csv(app, path):
    r = call(app, "POST", path, json={"instances": X})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["predictions"], linear_expected(np.array(X)), rtol=1e-5)
    r = call(app, "POST", path, content=b"1,2,3\n0,-1,2\n", headers={"content-type": "text/csv"})
    np.testing.assert_allclose(r.json()["predictions"], linear_expected(np.array(X)), rtol=1e-5)


def test_custom_attributes_route_to_another_model(app):
    body = {"examples": [{"x": [1.0, 2.0]}]}
    r = call(app, "POST", "/invocations", json=body,
             headers={"X-Amzn-SageMaker-Custom-Attributes": "tfs-model-name=cr,tfs-method=regress"})
    assert r.status_code == 200, r.text
    assert r.json()["results"] == pytest.approx([3.0])


def test_errors_are_4xx_json(app):
    r = call(app, "POST", "/invocations", content=b"{broken", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]
    r = call(app, "POST", "/invocations", content=b"x", headers={"content-type": "application/x-npy"})
    assert r.status_code == 415 and r.json()["error"] == "Unsupported Media Type: application/x-npy"
    r = call(app, "POST", "/invocations", json={"instances": X},
             headers={"X-Amzn-SageMaker-Custom-Attributes": "tfs-model-name=ghost"})
    assert r.status_code == 404 and "ghost" in r.json()["error"]


def test_runtime_route_wraps_errors_as_model_error(app):
    r = call(app, "POST", "/endpoints/ep/invocations", content=b"{broken", headers={"content-type": "application/json"})
    assert r.status_code == 424 and r.headers["x-amzn-errortype"] == "ModelError"
    assert r.json()["OriginalStatusCode"] == 400


def test_body_limit_413_by_length_and_by_stream(app):
    big = b"[" + b"1," * 10000 + b"1]"
    r = call(app, "POST", "/invocations", content=big)
    assert r.status_code == 413 and "limit of 10485 bytes" in r.json()["error"]

    async def chunks():  # no Content-Length: the limit must hold on the bytes received
        for _ in range(20):
            yield b" " * 1000

    r = call(app, "POST", "/v1/models/linear:predict", content=chunks())
    assert r.status_code == 413


def test_tfs_routes_inside_the_app(app):
    r = call(app, "POST", "/v1/models/linear/versions/1:predict", json={"instances": X})
    assert r.status_code == 200
    assert call(app, "GET", "/v1/models/linear").json()["model_version_status"][0]["state"] == "AVAILABLE"
    assert call(app, "GET", "/v1/models/ghost").status_code == 404


def test_auth_everywhere_but_ping(model_server):
    app = build_app(InferenceService(model_server), ServeSettings(auth_token="s3cret"))
    assert call(app, "GET", "/ping").status_code == 200
    for method, path in [("POST", "/invocations"), ("GET", "/metrics"), ("GET", "/v1/models/linear"),
                         ("GET", "/execution-parameters")]:
        r = call(app, method, path, json={"instances": X})
        assert r.status_code == 401, path
        assert "bearer token" in r.json()["error"]
        r = call(app, method, path, json={"instances": X}, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
    r = call(app, "POST", "/invocations", json={"instances": X}, headers={"Authorization": "Bearer s3cret"})
    assert r.status_code == 200


EVERY_ROUTE = [
    ("POST", "/invocations"), ("POST", "/endpoints/ep/invocations"), ("GET", "/execution-parameters"),
    ("GET", "/metrics"), ("POST", "/v1/models/linear:predict"), ("POST", "/v1/models/linear/versions/1:predict"),
    ("POST", "/v1/models/cr:classify"), ("POST", "/v1/models/cr:regress"), ("GET", "/v1/models/linear"),
    ("GET", "/v1/models/linear/versions/1"), ("GET", "/v1/models/linear/metadata"),
    ("GET", "/no/such/route"),  # answered 401, not 404: nothing is learnt without the token
]


@pytest.mark.parametrize("method, path", EVERY_ROUTE)
def test_every_route_but_ping_needs_the_token(model_server, method, path):
    app = build_app(InferenceService(model_server), ServeSettings(auth_token="s3cret"))
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic czNjcmV0"}):
        r = call(app, method, path, json={"instances": X}, headers=headers)
        assert r.status_code == 401, (path, headers, r.text)
    r = call(app, method, path, json={"instances": X}, headers={"Authorization": "Bearer s3cret"})
    assert r.status_code != 401, path


def test_timeout_504(tmp_path_factory):
    from tfbatch.runtime import ModelServer
    from tfbatch.testing.models import make_slow_model

    path = make_slow_model(tmp_path_factory.mktemp("slow") / "1", delay_s=1.0)
    server = ModelServer({"slow": {1: path}})
    app = build_app(InferenceService(server), ServeSettings(request_timeout_s=0.2))
    r = call(app, "POST", "/invocations", json={"instances": [[1.0, 2.0]]})
    assert r.status_code == 504 and "request timeout" in r.json()["error"]
    server.close()


# A handler whose model call the test holds open: it records that it started, then waits.
GATED_SCRIPT = """
import threading

STARTED = []
GATE = threading.Event()


def handler(data, context):
    STARTED.append(1)
    GATE.wait(120)
    return b"{}", "application/json"
"""


def test_a_504_keeps_the_model_slot_until_the_work_ends(model_server, tmp_path):
    """Issue 12's probe: after a 504 the limiter slot went back while the model call still ran,
    so timed-out work piled up beyond the limit. With one slot, the next request must not start
    model work until the abandoned call has finished."""
    from tfbatch.handlers.user_code import load_handlers, load_module

    script = tmp_path / "code" / "inference.py"
    script.parent.mkdir()
    script.write_text(GATED_SCRIPT)
    handlers = load_handlers(script)
    module = load_module(script)
    app = build_app(InferenceService(model_server, handlers), ServeSettings(http_threads=1, request_timeout_s=3))

    async def scenario():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            try:
                first = await client.post("/invocations", content=b"{}")
                assert first.status_code == 504, first.text
                assert module.STARTED == [1]  # it timed out inside the model call, which runs on
                second = await client.post("/invocations", content=b"{}")
                assert second.status_code == 504, second.text
                assert module.STARTED == [1]  # it waited for the slot and never started
            finally:
                module.GATE.set()
            third = await client.post("/invocations", content=b"{}")  # the slot comes back
            assert third.status_code == 200, third.text
            assert module.STARTED == [1, 1]

    anyio.run(scenario)


def test_metrics(app):
    call(app, "POST", "/invocations", json={"instances": X})
    call(app, "POST", "/invocations", content=b"{broken")
    text = call(app, "GET", "/metrics").text
    assert 'tfbatch_requests_total{method="POST",route="/invocations",status="200"}' in text
    assert 'tfbatch_errors_total{route="/invocations",status="400"}' in text
    assert "tfbatch_request_duration_seconds_bucket" in text
    assert "tfbatch_requests_in_flight" in text


def test_route_labels_are_bounded():
    assert route_label("/v1/models/abc/versions/3:predict") == "/v1/models/{model}:predict"
    assert route_label("/endpoints/my-ep/invocations") == "/endpoints/{name}/invocations"
    assert route_label("/wp-admin") == "other"
