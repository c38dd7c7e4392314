"""Operations against a real two-worker ``python -m tfbatch.serve``: metrics that add up over
workers, bounded labels, access logs in JSON, gRPC health, and the token from a file."""

from __future__ import annotations

import json
import re

import grpc
import pytest
import requests

from tfbatch.serve.grpc_health import SERVING, HealthCheckRequest, HealthCheckResponse

from .conftest import ServerProcess

X = [[1.0, 2.0, 3.0]]
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
REQUESTS = 24


@pytest.fixture(scope="module")
def server(linear_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ops")
    token_file = tmp / "token"
    token_file.write_text(TOKEN + "\n")
    srv = ServerProcess(
        linear_dir, tmp, "--workers", "2", "--auth-token-file", str(token_file),
        "--log-format", "json", "--log-level", "info",
    ).wait_ready(timeout=180)
    yield srv
    assert srv.stop() == 0, srv.output()


def _count(text: str, route: str, method: str, status: str) -> float:
    pattern = (r'tfbatch_requests_total\{method="%s",route="%s",status="%s"\} ([0-9.e+]+)'
               % (re.escape(method), re.escape(route), status))
    match = re.search(pattern, text)
    return float(match.group(1)) if match else 0.0


def test_metrics_count_every_workers_requests(server):
    pids = set()
    for _ in range(REQUESTS):
        # A new connection each time, so both workers take some of them.
        r = requests.post(f"{server.url}/invocations", json={"instances": X},
                          headers={**AUTH, "Connection": "close"}, timeout=60)
        assert r.status_code == 200, r.text
    for _ in range(6):
        text = requests.get(f"{server.url}/metrics", headers={**AUTH, "Connection": "close"}, timeout=30).text
        # Whichever worker answers the scrape, it reports all requests of both.
        assert _count(text, "/invocations", "POST", "200") == REQUESTS
        pids.update(re.findall(r'tfbatch_worker_info\{pid="(\d+)"\} 1(?:\.0)?\b', text))
    assert len(pids) == 2


def test_method_label_is_bounded(server):
    # Methods the HTTP parser accepts but no route knows: each would be a new series.
    unusual = ["PROPFIND", "MKCOL", "PURGE", "LOCK", "SEARCH"]
    for method in unusual:
        r = requests.request(method, f"{server.url}/invocations", headers={**AUTH, "Connection": "close"}, timeout=30)
        assert r.status_code == 405
    text = requests.get(f"{server.url}/metrics", headers=AUTH, timeout=30).text
    assert not any(f'method="{m}"' in text for m in unusual)
    assert _count(text, "/invocations", "other", "405") == len(unusual)


def test_access_log_lines_are_json_with_request_id(server):
    r = requests.post(f"{server.url}/invocations", json={"instances": X},
                      headers={**AUTH, "X-Request-Id": "trace-me-42"}, timeout=60)
    assert r.headers["x-request-id"] == "trace-me-42"
    minted = requests.get(f"{server.url}/ping", timeout=10).headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", minted)
    requests.get(f"{server.url}/metrics", headers=AUTH, timeout=30)  # a later line, so ours was flushed
    lines = [json.loads(line) for line in server.output().splitlines() if line.startswith("{")]
    access = [e for e in lines if e.get("logger") == "tfbatch.access"]
    ours = [e for e in access if e.get("request_id") == "trace-me-42"]
    assert len(ours) == 1, access[-5:]
    entry = ours[0]
    assert entry["status"] == 200 and entry["method"] == "POST" and entry["path"] == "/invocations"
    assert entry["bytes"] == len(r.content) and entry["latency_ms"] >= 0


def test_grpc_health_is_open_and_serving(server):
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=HealthCheckRequest.SerializeToString,
            response_deserializer=HealthCheckResponse.FromString,
        )
        assert check(HealthCheckRequest(service=""), timeout=30).status == SERVING
        assert check(HealthCheckRequest(service="tensorflow.serving.PredictionService"), timeout=30).status == SERVING
        with pytest.raises(grpc.RpcError) as info:
            check(HealthCheckRequest(service="no.such.Service"), timeout=30)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        watch = channel.unary_stream(
            "/grpc.health.v1.Health/Watch",
            request_serializer=HealthCheckRequest.SerializeToString,
            response_deserializer=HealthCheckResponse.FromString,
        )
        stream = watch(HealthCheckRequest(service=""), timeout=30)
        assert next(stream).status == SERVING
        stream.cancel()


def test_token_from_file_guards_http(server):
    assert requests.post(f"{server.url}/invocations", json={"instances": X}, timeout=30).status_code == 401
    assert requests.post(f"{server.url}/invocations", json={"instances": X}, headers=AUTH, timeout=60).ok
    assert TOKEN not in " ".join(server.proc.args)


@pytest.mark.parametrize(
    "flags, env, warned",
    [
        (["--host", "192.0.2.1"], {}, True),
        (["--host", "192.0.2.1", "--insecure"], {}, False),
        (["--host", "192.0.2.1"], {"TFBATCH_AUTH_TOKEN": "tok"}, False),
        (["--host", "127.0.0.1"], {}, False),
    ],
    ids=["open", "insecure", "token", "loopback"],
)
def test_serving_beyond_loopback_without_a_token_warns_unless_insecure(tmp_path, flags, env, warned):
    """The warning comes before anything binds: a missing model (and TEST-NET-1, an address no
    host has) makes the process stop right after it, so nothing listens beyond loopback."""
    import os
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "tfbatch.serve", str(tmp_path / "no-model"), "--port", "0", "--grpc-port", "-1", *flags],
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode != 0 and "does not exist" in proc.stderr, proc.stderr[-2000:]
    assert ("serving 192.0.2.1 without an auth token" in proc.stderr) is warned, proc.stderr[-2000:]
