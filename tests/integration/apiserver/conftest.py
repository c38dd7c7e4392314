"""A real ``tfbatch api`` server process on a free loopback port, and boto3 clients for it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfbatch.ports import free_ports
from tfbatch.testing.models import make_failing_model, make_linear_model, make_slow_model



class ApiServer:
    """``python -m tfbatch api`` with its own state folder; restartable (``kill -9`` included)."""

    def __init__(self, state_dir: Path, extra_env: dict[str, str] | None = None, *args: str):
        self.state_dir = state_dir
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        # The server's own credentials (here the S3 test server's) are the ones it accepts.
        self.env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "PYTHONUNBUFFERED": "1", **(extra_env or {})}
        self.access_key, self.secret = self.env["AWS_ACCESS_KEY_ID"], self.env["AWS_SECRET_ACCESS_KEY"]
        self.args = list(args)
        self.proc: subprocess.Popen | None = None
        self.log = state_dir.parent / f"api-{self.port}.log"

    def start(self) -> "ApiServer":
        self.state_dir.mkdir(parents=True, exist_ok=True)
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tfbatch", "api", "--port", str(self.port), "--state-dir", str(self.state_dir),
             *self.args], stdout=out, stderr=subprocess.STDOUT, env=self.env)
        out.close()
        client = self.client("sagemaker")
        deadline = time.monotonic() + 60  # a failure guard, not a timing assertion
        while True:
            try:
                client.list_models()
                return self
            except Exception:  # noqa: BLE001 - not listening yet
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"tfbatch api did not start:\n{self.log.read_text()[-4000:]}") from None
                time.sleep(0.1)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def client(self, service: str, **kwargs):
        import boto3
        from botocore.config import Config

        options = dict(region_name="us-east-1", aws_access_key_id=self.access_key,
                       aws_secret_access_key=self.secret,
                       config=Config(retries={"max_attempts": 1}))
        options.update(kwargs)
        return boto3.client(service, endpoint_url=self.url, **options)


@pytest.fixture(scope="session")
def api_linear_model(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("api-linear")
    make_linear_model(root / "1")
    return root


@pytest.fixture(scope="session")
def api_failing_model(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("api-failing")
    make_failing_model(root / "1")
    return root


@pytest.fixture(scope="session")
def api_slow_model(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("api-slow")
    make_slow_model(root / "1", 0.25)
    return root


@pytest.fixture
def api_server(tmp_path, s3_server) -> Iterator[ApiServer]:
    server = ApiServer(tmp_path / "state", s3_server.env()).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def make_api_server(tmp_path, s3_server):
    started: list[ApiServer] = []

    def make(state_dir: Path | None = None, *args: str) -> ApiServer:
        server = ApiServer(state_dir or tmp_path / "state", s3_server.env(), *args)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()
