"""A real S3-API server process on loopback, for tests and local demos.

moto's standalone server runs as a separate process (not moto's in-process mock), so the
code under test talks plain HTTP to it exactly as it would to AWS or MinIO: s3fs,
aiobotocore and boto3 all go through their real network stacks, and forked or spawned
worker processes reach it too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from tfbatch.errors import Unavailable
from tfbatch.ports import free_ports

TEST_ACCESS_KEY = "testing"
TEST_REGION = "us-east-1"


class S3Server:
    """Start ``python -m moto.server`` on a free loopback port; stop kills it.

    ``env()`` gives the variables a client process needs; the server itself accepts any
    credentials, but botocore refuses to sign without some.
    """

    def __init__(self, host: str = "127.0.0.1", port: int | None = None, start_timeout: float = 30.0):
        self.host = host
        self._requested_port = port
        self.port: int | None = None
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        if self.port is None:
            raise Unavailable("S3Server is not started: call start() or use it as a context manager")
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": TEST_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": TEST_ACCESS_KEY,
            "AWS_DEFAULT_REGION": TEST_REGION,
        }

    def client(self, **kwargs: Any):
        """A boto3 S3 client bound to this server (independent of the process environment)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=TEST_ACCESS_KEY,
            aws_secret_access_key=TEST_ACCESS_KEY,
            region_name=TEST_REGION,
            **kwargs,
        )

    def start(self) -> "S3Server":
        if self.running:
            return self
        # Picking a port and handing it to the child is racy (another process may grab it in
        # between); a retry with a fresh port covers that rare case.
        last_error = ""
        for _ in range(3):
            self.port = self._requested_port or free_ports(1, self.host)[0]
            env = dict(os.environ)
            env.setdefault("MOTO_ALLOW_NONEXISTENT_REGION", "true")
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=env,
            )
            ok, last_error = self._wait_ready()
            if ok:
                return self
            self.stop()
            if self._requested_port:
                break
        raise Unavailable(f"moto S3 server did not start on {self.host}: {last_error}")

    def _wait_ready(self) -> tuple[bool, str]:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        url = f"http://{self.host}:{self.port}/moto-api/"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                return False, f"process exited with {self._proc.returncode}: {err[-2000:]}"
            try:
                with urllib.request.urlopen(url, timeout=1.0) as resp:
                    resp.read()
                # Stop collecting stderr: an unread pipe would eventually block the server.
                self._drain_stderr()
                return True, ""
            except urllib.error.HTTPError:
                self._drain_stderr()
                return True, ""  # any HTTP answer means it is serving
            except OSError:
                time.sleep(0.1)
        return False, f"no HTTP answer on {url} within {self.start_timeout}s"

    def _drain_stderr(self) -> None:
        proc = self._proc
        if proc is None or proc.stderr is None:
            return
        stream = proc.stderr

        def drain() -> None:
            for _ in iter(lambda: stream.read(65536), b""):
                pass

        threading.Thread(target=drain, name="moto-stderr", daemon=True).start()

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __del__(self) -> None:
        try:
            self.stop()
        except Exception:
            pass
