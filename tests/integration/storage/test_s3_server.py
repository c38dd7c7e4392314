import os
import socket

import pytest

from tfbatch.errors import Unavailable
from tfbatch.testing.s3_server import S3Server


def test_server_is_a_separate_process_and_stop_kills_it():
    server = S3Server()
    with pytest.raises(Unavailable, match="not started"):
        server.endpoint_url
    with server:
        proc = server._proc
        assert proc is not None and proc.pid != os.getpid()
        assert server.running
        env = server.env()
        assert env["AWS_ENDPOINT_URL"] == server.endpoint_url.rstrip("/")
        assert env["AWS_ACCESS_KEY_ID"] == env["AWS_SECRET_ACCESS_KEY"] == "testing"
        assert env["AWS_DEFAULT_REGION"] == "us-east-1"
        client = server.client()
        client.create_bucket(Bucket="alive")
        assert [b["Name"] for b in client.list_buckets()["Buckets"]] == ["alive"]
        port = server.port
    assert proc.poll() is not None  # the process is gone
    assert not server.running
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_server_on_a_busy_port_reports_why():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        server = S3Server(port=busy.getsockname()[1], start_timeout=10)
        with pytest.raises(Unavailable, match="did not start"):
            server.start()
    assert not server.running
