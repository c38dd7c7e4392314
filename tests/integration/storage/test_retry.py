import socket
import threading

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError

from tfbatch.errors import InvalidInput, NotFound, Unavailable
from tfbatch.storage import ObjectNotFound, is_transient, read_bytes, retry
from tfbatch.testing.s3_server import S3Server


def client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "GetObject",
    )


def flaky(failures: list[BaseException], result="ok"):
    calls = []

    def fn():
        calls.append(len(calls))
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return result

    return fn, calls


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError("refused"),
        TimeoutError("timed out"),
        client_error("SlowDown", 503),
        client_error("Throttling", 400),
        client_error("InternalError", 500),
        client_error("BadGateway", 502),
        client_error("GatewayTimeout", 504),
        EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
        Unavailable("busy"),
    ],
)
def test_transient_errors_are_retried(exc):
    fn, calls = flaky([exc, exc])
    assert retry(fn, base_delay=0.001) == "ok"
    assert len(calls) == 3


@pytest.mark.parametrize(
    "exc",
    [
        client_error("AccessDenied", 403),
        client_error("NoSuchKey", 404),
        FileNotFoundError("missing"),
        PermissionError("denied"),
        ObjectNotFound("missing"),
        NotFound("missing"),
        InvalidInput("bad"),
        ValueError("bug"),
    ],
)
def test_permanent_errors_are_not_retried(exc):
    fn, calls = flaky([exc])
    with pytest.raises(type(exc)):
        retry(fn, base_delay=0.001)
    assert len(calls) == 1


def test_s3fs_style_wrapped_error_is_classified_by_its_cause():
    wrapped = OSError(16, "Please reduce your request rate")
    wrapped.__cause__ = client_error("SlowDown", 503)
    assert is_transient(wrapped)
    missing = FileNotFoundError("The specified key does not exist")
    missing.__cause__ = client_error("NoSuchKey", 404)
    assert not is_transient(missing)


def test_gives_up_after_attempts_with_growing_capped_delays():
    delays: list[float] = []
    fn, calls = flaky([ConnectionResetError("reset")] * 10)
    with pytest.raises(ConnectionResetError):
        retry(fn, attempts=4, base_delay=0.5, max_delay=1.0, sleep=delays.append)
    assert len(calls) == 4
    assert len(delays) == 3
    assert all(0 <= d <= cap for d, cap in zip(delays, [0.5, 1.0, 1.0]))


def test_retry_rides_out_a_server_that_starts_late(tmp_path):
    """Real HTTP: connections are refused until a moto server comes up on that port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = S3Server(port=port)
    starter = threading.Thread(target=server.start)
    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=1),
    )
    attempts = []

    def call():
        attempts.append(1)
        if len(attempts) == 2:
            starter.start()  # boots in the background while retry keeps knocking
        return client.list_buckets()

    try:
        result = retry(call, attempts=60, base_delay=0.05, max_delay=0.3)
        assert "Buckets" in result
        assert len(attempts) >= 2  # the first call was refused: no server existed yet
    finally:
        if starter.ident is not None:
            starter.join()
        server.stop()


def test_missing_s3_object_fails_fast(s3_bucket, monkeypatch):
    from tfbatch.storage.uri import get_fs

    uri = f"s3://{s3_bucket}/missing"
    fs, _ = get_fs(uri)
    requests = []
    real_cat_file = fs.cat_file

    def counting_cat_file(*args, **kwargs):  # at the fsspec boundary: one call per attempt
        requests.append(args)
        return real_cat_file(*args, **kwargs)

    monkeypatch.setattr(fs, "cat_file", counting_cat_file)
    with pytest.raises(ObjectNotFound, match="does not exist"):
        read_bytes(uri)
    assert len(requests) == 1  # a 404 is not retried
