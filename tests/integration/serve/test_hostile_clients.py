"""Hostile and careless clients against a real ``python -m tfbatch.serve`` process.

Bounded in count and time so it runs in CI: the load test is 200 slow + 64 normal clients on
loopback, and asserts outcomes only (every normal request answered 200, every slow connection
closed by the server's header deadline, the worker still the same process). Its latency ratio
is measured by benchmarks/latency/slow_clients.py, not here.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import socket
import threading

import grpc
import numpy as np
import pytest
import requests
from tensorflow.core.framework import tensor_pb2, types_pb2
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from .conftest import ServerProcess

X = [[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]]
SLOW_CLIENTS = 200
NORMAL_CLIENTS = 64


@pytest.fixture(scope="module")
def server(linear_dir, tmp_path_factory):
    srv = ServerProcess(
        linear_dir, tmp_path_factory.mktemp("hostile"),
        "--max-body-mb", "1", "--max-request-mb", "1", "--header-timeout", "2", "--max-connections", "400",
        "--body-timeout", "2",
    ).wait_ready()
    yield srv
    assert srv.stop() == 0, srv.output()


def _peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


def _stub(server):
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    return channel, prediction_service_pb2_grpc.PredictionServiceStub(channel)


def _predict(inputs: dict[str, tensor_pb2.TensorProto]) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "model"
    for key, proto in inputs.items():
        request.inputs[key].CopyFrom(proto)
    return request


def _tensor(dtype, shape, **fields) -> tensor_pb2.TensorProto:
    return tensor_pb2.TensorProto(dtype=dtype, tensor_shape={"dim": [{"size": s} for s in shape]}, **fields)


def test_a_22_byte_gigabyte_tensor_is_refused_without_allocating(server):
    pid = server.proc.pid
    before = _peak_rss(pid)
    hostile = _tensor(types_pb2.DT_FLOAT, [16384, 16384], float_val=[1.0])
    assert len(hostile.SerializeToString()) <= 22
    channel, stub = _stub(server)
    with channel:
        for _ in range(3):
            with pytest.raises(grpc.RpcError) as info:
                stub.Predict(_predict({"x": hostile}), timeout=60)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "--max-request-mb" in info.value.details()
    # np.full would have raised the peak by 1 GiB; leave a wide margin for allocator noise.
    assert _peak_rss(pid) - before < 128 * 1024 * 1024
    assert server.proc.poll() is None


def test_grpc_message_limit_equals_the_http_body_limit(server):
    big = _tensor(types_pb2.DT_FLOAT, [2 * 1024 * 1024 // 12, 3], tensor_content=b"\0" * (2 * 1024 * 1024 // 12 * 12))
    channel, stub = _stub(server)
    with channel:
        with pytest.raises(grpc.RpcError) as info:
            stub.Predict(_predict({"x": big}), timeout=60)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    r = requests.post(f"{server.url}/v1/models/model:predict", data=b"1" * (2 * 1024 * 1024), timeout=30)
    assert r.status_code == 413


@pytest.mark.parametrize("route", ["/invocations", "/v1/models/model:predict"])
def test_a_json_body_under_the_body_limit_is_charged_against_the_request_budget(server, route):
    # 800 KB of text (under --max-body-mb 1) that decodes to 300,000 float32 values, 1.2 MB
    # (over --max-request-mb 1): refused before the arrays are made, as gRPC refuses it.
    body = b'{"instances": [' + b",".join([b"[0,0,0]"] * 100_000) + b"]}"
    assert len(body) < 1024 * 1024
    r = requests.post(f"{server.url}{route}", data=body, headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status_code == 400, r.text[:300]
    assert "--max-request-mb" in r.json()["error"]


GRPC_MALFORMED = {
    "huge-shape": {"x": _tensor(types_pb2.DT_FLOAT, [1 << 40, 3], float_val=[1.0])},
    "negative-dim": {"x": _tensor(types_pb2.DT_FLOAT, [-1, 3], float_val=[1.0])},
    "content-vs-shape": {"x": _tensor(types_pb2.DT_FLOAT, [4, 3], tensor_content=b"\0" * 10)},
    "too-many-values": {"x": _tensor(types_pb2.DT_FLOAT, [1, 3], float_val=[1, 2, 3, 4])},
    "wrong-dtype": {"x": _tensor(types_pb2.DT_STRING, [1, 3], string_val=[b"a", b"b", b"c"])},
    "wrong-rank": {"x": _tensor(types_pb2.DT_FLOAT, [3], float_val=[1, 2, 3])},
    "unknown-input": {"nope": _tensor(types_pb2.DT_FLOAT, [1, 3], float_val=[1, 2, 3])},
    "no-inputs": {},
}


@pytest.mark.parametrize("case", sorted(GRPC_MALFORMED))
def test_malformed_grpc_requests_are_invalid_argument(server, case):
    channel, stub = _stub(server)
    with channel:
        with pytest.raises(grpc.RpcError) as info:
            stub.Predict(_predict(GRPC_MALFORMED[case]), timeout=60)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()


REST_MALFORMED = {
    "truncated-json": (b'{"instances": [[1.0, 2.0', "application/json"),
    "bare-string": (b'"text"', "application/json"),
    "wrong-dtype": (b'{"instances": [["a", "b", "c"]]}', "application/json"),
    "ragged": (b'{"instances": [[1, 2, 3], [1, 2]]}', "application/json"),
    "ragged-columnar": (b'{"inputs": {"x": [[1, 2, 3], [1]]}}', "application/json"),
    "wrong-width": (b'{"instances": [[1, 2]]}', "application/json"),
    "deep-nesting": (b'{"instances": ' + b"[" * 5000 + b"]" * 5000 + b"}", "application/json"),
    "b64-garbage": (b'{"instances": [{"b64": "!!not base64!!"}]}', "application/json"),
    "b64-for-floats": (b'{"instances": [{"b64": "AAAA"}]}', "application/json"),
    "both-keys": (b'{"instances": [[1, 2, 3]], "inputs": [[1, 2, 3]]}', "application/json"),
    "neither-key": (b'{"rows": [[1, 2, 3]]}', "application/json"),
    "invalid-utf8": (b'{"instances": "\xff\xfe"}', "application/json"),
    "null-values": (b'{"instances": [[null, 1, 2]]}', "application/json"),
    "object-values": (b'{"instances": [[{"a": 1}, 1, 2]]}', "application/json"),
    "empty-body": (b"", "application/json"),
    "wrong-content-type": (b"\x00\x01\x02", "application/octet-stream"),
    "csv-garbage": (b"a,b,\xff", "text/csv"),
}


@pytest.mark.parametrize("route", ["/invocations", "/v1/models/model:predict"])
@pytest.mark.parametrize("case", sorted(REST_MALFORMED))
def test_malformed_rest_requests_are_4xx_never_5xx(server, route, case):
    body, content_type = REST_MALFORMED[case]
    if route.startswith("/v1/") and content_type != "application/json":
        pytest.skip("the TFS REST API reads every body as JSON")
    r = requests.post(f"{server.url}{route}", data=body, headers={"Content-Type": content_type}, timeout=60)
    assert 400 <= r.status_code < 500, (case, r.status_code, r.text[:300])
    assert r.json()["error"]


def _slow_client(port: int, closed: list, stop: threading.Event, connected: threading.Barrier) -> None:
    """Sends a request's headers one byte at a time, and never finishes them."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        request = b"POST /invocations HTTP/1.1\r\nHost: x\r\n" + b"X-Padding: " + b"a" * 10_000
        sock.sendall(request[:1])
        connected.wait(60)  # the normal clients start only once every slow one is connected
        for byte in request[1:]:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            sock.settimeout(0.05)
            try:
                if sock.recv(1) == b"":
                    break
            except socket.timeout:
                continue
            except OSError:
                break
        sock.settimeout(60)
        try:
            closed.append(sock.recv(1) == b"")
        except OSError:
            closed.append(True)  # reset by the server: closed too
    finally:
        sock.close()


def test_slow_clients_neither_starve_normal_ones_nor_hold_connections(server):
    pid = server.proc.pid
    peak_before = _peak_rss(pid)
    closed: list[bool] = []
    stop = threading.Event()
    connected = threading.Barrier(SLOW_CLIENTS + 1)
    slow = [threading.Thread(target=_slow_client, args=(server.port, closed, stop, connected), daemon=True)
            for _ in range(SLOW_CLIENTS)]
    for t in slow:
        t.start()
    connected.wait(120)

    def normal(i: int) -> int:
        r = requests.post(f"{server.url}/invocations", json={"instances": X}, timeout=60)
        return r.status_code

    # One thread per normal client: all 64 are in flight together, beside the 200 slow ones.
    with concurrent.futures.ThreadPoolExecutor(NORMAL_CLIENTS) as pool:
        statuses = list(pool.map(normal, range(NORMAL_CLIENTS)))
    assert statuses == [200] * NORMAL_CLIENTS
    for t in slow:
        t.join(120)
    assert not any(t.is_alive() for t in slow)
    # Every slow connection was closed by the server, none by the client giving up.
    assert closed == [True] * SLOW_CLIENTS
    assert server.proc.poll() is None and server.proc.pid == pid
    assert requests.get(f"{server.url}/ping", timeout=10).status_code == 200
    # 264 connections' buffers and requests are a few MiB; a wide margin for allocator noise.
    assert _peak_rss(pid) - peak_before < 128 * 1024 * 1024


def _read_response(sock: socket.socket) -> tuple[int, bytes]:
    """One HTTP/1.1 response with a Content-Length: (status, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside the body"
        body += chunk
    return int(head.split(b" ", 2)[1]), body[:length]


def test_a_stalled_body_is_answered_408_not_held_until_the_request_timeout(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=120) as sock:
        sock.sendall(b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n" + b'{"instances": ')
        # Nothing more is sent: the server must give up after --body-timeout (2 s), well before
        # --request-timeout (60 s, which would answer 504).
        status, body = _read_response(sock)
    assert status == 408, body
    assert "--body-timeout" in json.loads(body)["error"]
    assert server.proc.poll() is None


@pytest.fixture(scope="module")
def capped(linear_dir, tmp_path_factory):
    srv = ServerProcess(
        linear_dir, tmp_path_factory.mktemp("capped"), "--grpc-port", "-1", "--max-connections", "3",
        "--header-timeout", "60",
    ).wait_ready()
    yield srv
    assert srv.stop() == 0, srv.output()


def _held_connection(port: int) -> socket.socket:
    """A connection the server has certainly accepted (it answered on it), then kept busy with
    an unfinished request so that neither side closes it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    assert _read_response(sock)[0] == 200
    sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n")
    return sock


def test_connections_beyond_max_connections_get_503(capped):
    # uvicorn counts the asking connection too: with a cap of 3, two others may be open. The
    # second held connection's own /ping (200, in _held_connection) is the request under the cap.
    held = []
    try:
        held += [_held_connection(capped.port), _held_connection(capped.port)]
        r = requests.get(f"{capped.url}/ping", timeout=30)
        assert r.status_code == 503, r.text
    finally:
        for sock in held:
            sock.close()
    assert capped.proc.poll() is None
