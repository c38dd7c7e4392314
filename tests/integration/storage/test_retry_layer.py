"""One retry layer: requests counted on the wire, at a 503-injecting proxy in front of moto.

s3fs and botocore are configured for one attempt per call, so an operation against a failing
endpoint costs exactly TFBATCH_STORAGE_ATTEMPTS requests (not s3fs x botocore x tfbatch).
"""

from __future__ import annotations

import logging

import pytest

from tfbatch.storage import read_bytes
from tfbatch.storage.io import atomic_write, open_read, write_text
from tfbatch.storage.uri import clear_cache
from tfbatch.testing.fault_proxy import FaultProxy


@pytest.fixture
def proxied(s3_server, monkeypatch):
    """A FaultProxy in front of the session's moto server, with tfbatch's S3 client pointed at it."""
    proxy = FaultProxy(s3_server.endpoint_url).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
    monkeypatch.setenv("TFBATCH_STORAGE_ATTEMPTS", "4")
    clear_cache()
    yield proxy
    proxy.stop()
    clear_cache()


def test_a_few_503s_are_ridden_out_with_one_request_per_attempt(proxied, s3_bucket, caplog):
    key = f"/{s3_bucket}/a.txt"
    proxied.match = lambda method, path: method == "PUT" and path.startswith(key)
    proxied.failures = 2
    with caplog.at_level(logging.WARNING, logger="tfbatch.storage"):
        write_text(f"s3://{s3_bucket}/a.txt", "hello")
    assert proxied.count("PUT", key) == 3  # 2 refused + 1 that landed
    assert len([r for r in caplog.records if "retrying" in r.getMessage()]) == 2
    assert read_bytes(f"s3://{s3_bucket}/a.txt") == b"hello"


def test_a_failing_endpoint_costs_exactly_the_attempt_budget(proxied, s3_bucket, caplog):
    write_text(f"s3://{s3_bucket}/b.txt", "data")
    key = f"/{s3_bucket}/b.txt"
    proxied.match = lambda method, path: method == "GET" and path.startswith(key)
    proxied.failures = 1000
    with caplog.at_level(logging.WARNING, logger="tfbatch.storage"), pytest.raises(OSError):
        read_bytes(f"s3://{s3_bucket}/b.txt")
    assert proxied.count("GET", key) == 4  # TFBATCH_STORAGE_ATTEMPTS, nothing stacked under it
    assert any("giving up after 4 attempts" in r.getMessage() for r in caplog.records)


def test_a_streaming_read_reopens_at_its_offset_within_the_same_budget(proxied, s3_bucket):
    payload = bytes(range(256)) * 4096  # 1 MiB
    atomic_write(f"s3://{s3_bucket}/c.bin", payload)
    key = f"/{s3_bucket}/c.bin"
    proxied.match = lambda method, path: method == "GET" and path.startswith(key)
    proxied.failures = 2
    with open_read(f"s3://{s3_bucket}/c.bin") as f:
        assert f.read() == payload
    assert proxied.count("GET", key) == 3


def test_a_budget_of_one_means_one_request(proxied, s3_bucket, monkeypatch):
    monkeypatch.setenv("TFBATCH_STORAGE_ATTEMPTS", "1")
    key = f"/{s3_bucket}/d.txt"
    proxied.match = lambda method, path: method == "PUT" and path.startswith(key)
    proxied.failures = 1000
    with pytest.raises(OSError):
        write_text(f"s3://{s3_bucket}/d.txt", "x")
    assert proxied.count("PUT", key) == 1
