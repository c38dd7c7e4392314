"""``tfbatch api`` as a real server process on a free loopback port, and boto3 clients for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tfbatch.ports import free_ports

ACCESS_KEY = "AKIDTFBATCHTEST"
SECRET_KEY = "tfbatch-test-secret"
REGION = "us-east-1"


class ApiProcess:
    """Start/kill/restart ``python -m tfbatch api`` over one state folder."""

    def __init__(self, state_dir: Path, log_path: Path, env: dict[str, str] | None = None):
        self.state_dir = state_dir
        self.log_path = log_path
        self.extra_env = env or {}
        self.port = free_ports(1)[0]
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                    AWS_DEFAULT_REGION=REGION, TF_CPP_MIN_LOG_LEVEL="2", **self.extra_env)

    def start(self, timeout: float = 60) -> "ApiProcess":
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tfbatch", "api", "--port", str(self.port), "--state-dir", str(self.state_dir)],
            env=self.env(), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        client = self.client("sagemaker")
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tfbatch api exited with {self.proc.returncode}:\n{self.output()}")
            try:
                client.list_endpoints()
                return self
            except Exception:  # noqa: BLE001 - not listening yet; the deadline is the failure guard
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tfbatch api did not answer within {timeout} s:\n{self.output()}")
                time.sleep(0.1)

    def output(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def client(self, service: str, **kwargs):
        import boto3
        from botocore.config import Config

        return boto3.client(service, endpoint_url=self.url, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY,
                            config=Config(retries={"max_attempts": 1, "mode": "standard"}, **kwargs))
