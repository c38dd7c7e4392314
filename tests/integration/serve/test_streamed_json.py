"""Large JSON answers streamed with chunked transfer by a real ``tfbatch serve``: the bytes a
single encode would give, auth in front of them, and clients that leave mid-stream."""

from __future__ import annotations

import json
import socket

import pytest
import requests

from tfbatch.runtime import jsonenc
from tfbatch.tfs.jsonstream import CHUNK_VALUES

from .conftest import ServerProcess

WIDTH = CHUNK_VALUES + 4_465  # one row is more than a chunk: cut inside rows as well as between them
TOKEN = "stream-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def make_wide_model(path):
    import tensorflow as tf

    class Wide(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def serve(self, x):
            wide = x[:, None] * (tf.range(WIDTH, dtype=tf.float32) / 7.0)[None, :]
            return {"wide": wide, "counts": tf.cast(tf.round(wide * 3.0), tf.int64),
                    "flags": wide > 1.0, "scale": x * 2.0, "wide64": tf.cast(wide, tf.float64) / 3.0}

    module = Wide()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


@pytest.fixture(scope="module")
def wide_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("wide")
    make_wide_model(root / "1")
    return root


@pytest.fixture(scope="module")
def local_server(wide_dir):
    from tfbatch.runtime import ModelServer

    server = ModelServer({"model": {1: wide_dir / "1"}})
    yield server
    server.close()


@pytest.fixture(scope="module")
def expected(local_server):
    """What the non-streamed path writes for a request: jsonenc.dumps of the TFS answer, in-process."""
    from tfbatch.tfs.api import TfsApi

    return lambda body: jsonenc.dumps(TfsApi(local_server).call("predict", body, "model"))


@pytest.fixture(scope="module")
def server(wide_dir, tmp_path_factory):
    srv = ServerProcess(wide_dir, tmp_path_factory.mktemp("srv"), "--auth-token", TOKEN).wait_ready()
    yield srv
    assert srv.stop() == 0, srv.output()


BODIES = [
    {"instances": [1.0, 2.5]},
    {"instances": [0.3]},
    {"inputs": [1.0, -2.0, 0.1]},
    {"instances": [float("nan"), 1.0]},  # a NaN row: TF Serving's NaN tokens, as before
    {"inputs": [float("inf")]},
]


@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_streamed_answers_are_the_single_encode(server, expected, body):
    data = json.dumps(body).encode()  # NaN / Infinity tokens as a TFS client sends them
    want = expected(jsonenc.loads(data))
    for path in ("/invocations", "/v1/models/model:predict"):
        r = requests.post(f"{server.url}{path}", data=data, headers={**AUTH, "Content-Type": "application/json"},
                          timeout=60)
        assert r.status_code == 200, r.text[:500]
        assert r.headers.get("transfer-encoding") == "chunked" and "content-length" not in r.headers
        assert r.content == want
    if b"NaN" in data:
        assert b"NaN" in want


def test_small_answers_keep_a_content_length(server):
    r = requests.get(f"{server.url}/v1/models/model", headers=AUTH, timeout=30)
    assert r.status_code == 200 and r.headers["content-length"] == str(len(r.content))


def test_auth_covers_streamed_routes(server):
    for path in ("/invocations", "/v1/models/model:predict"):
        r = requests.post(f"{server.url}{path}", json={"instances": [1.0]}, timeout=30)
        assert r.status_code == 401
        assert "transfer-encoding" not in r.headers


def _leave_mid_stream(server, path: str, keep: int) -> int:
    """Send a request, read ``keep`` bytes of the answer, close the socket; returns bytes read."""
    body = b'{"instances": [1.0, 2.0, 3.0, 4.0]}'
    request = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               f"Authorization: Bearer {TOKEN}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the server's writes back up quickly
        sock.sendall(request)
        got = b""
        while len(got) < keep:
            data = sock.recv(4096)
            if not data:
                break
            got += data
    assert got.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in got.lower()
    return len(got)


def test_clients_leaving_mid_stream_do_not_break_the_server(server, expected):
    for n in range(6):
        _leave_mid_stream(server, ("/invocations", "/v1/models/model:predict")[n % 2], keep=20_000)
    body = {"instances": [1.0, 2.5]}
    r = requests.post(f"{server.url}/invocations", json=body, headers=AUTH, timeout=60)
    assert r.status_code == 200 and r.content == expected(body)
    assert server.proc.poll() is None
    assert "Exception in ASGI application" not in server.output()
    assert "Traceback" not in server.output()


def test_several_outputs_cannot_be_one_npy_answer(server):
    for path in ("/invocations", "/v1/models/model:predict"):
        r = requests.post(f"{server.url}{path}", json={"instances": [1.0]}, timeout=30,
                          headers={**AUTH, "Accept": "application/x-npy"})
        assert r.status_code == 406, r.text[:300]
        assert "carries one tensor" in r.json()["error"] and "'wide'" in r.json()["error"]


@pytest.mark.parametrize("path", ["/invocations", "/v1/models/model:predict"])
def test_a_disconnect_stops_the_stream(local_server, expected, path):
    """The app itself, called as uvicorn calls it: after the first body chunk the client is gone."""
    import anyio

    from tests.support import asgi
    from tfbatch.handlers.service import InferenceService
    from tfbatch.serve.app import build_app
    from tfbatch.serve.settings import ServeSettings

    app = build_app(InferenceService(local_server), ServeSettings(request_timeout_s=60))
    body = b'{"instances": [1.0, 2.0, 3.0, 4.0]}'
    total = len(expected(json.loads(body)))
    sent = anyio.run(lambda: asgi.call(app, "POST", path, body, headers=[(b"content-type", b"application/json")],
                                       leave_after_first=True))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    streamed_bytes = sum(len(m.get("body", b"")) for m in sent[1:])
    assert 0 < streamed_bytes < total / 4, (streamed_bytes, total)
    assert not any(m.get("more_body") is False for m in sent[1:])  # never claimed to be complete
