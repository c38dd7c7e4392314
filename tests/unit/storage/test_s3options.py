"""What every tfbatch s3fs filesystem is built with: one retry owner, profile, requester-pays, SSE-KMS."""

from __future__ import annotations

import pytest

from tfbatch.storage import s3options
from tfbatch.storage.backoff import default_attempts


@pytest.fixture(autouse=True)
def _no_job_options():
    s3options.set_job_options()
    yield
    s3options.set_job_options()


def test_botocore_makes_one_attempt_per_call():
    options = s3options.s3_options({})
    assert options["config_kwargs"]["retries"] == {"total_max_attempts": 1}
    assert "s3_additional_kwargs" not in options and "profile" not in options


def test_the_connection_pool_holds_the_requests_a_transform_keeps_in_flight():
    from tfbatch.storage.io import STORE_REQUESTS_IN_FLIGHT

    options = s3options.s3_options({})
    assert options["config_kwargs"]["max_pool_connections"] >= 2 * STORE_REQUESTS_IN_FLIGHT  # reads and writes
    fs = s3options.new_s3_filesystem()
    assert fs.config_kwargs["max_pool_connections"] == s3options.MAX_POOL_CONNECTIONS


def test_endpoint_profile_and_requester_pays_come_from_the_environment():
    options = s3options.s3_options({"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_PROFILE": "analytics",
                                    "TFBATCH_S3_REQUESTER_PAYS": "true"})
    assert options["client_kwargs"] == {"endpoint_url": "http://127.0.0.1:9"}
    assert options["profile"] == "analytics"
    assert options["requester_pays"] is True


def test_a_jobs_kms_key_means_sse_kms_on_writes_and_a_new_cache_key():
    before = s3options.cache_key()
    s3options.set_job_options(kms_key_id="arn:aws:kms:us-east-1:111122223333:key/abc")
    assert s3options.s3_options({})["s3_additional_kwargs"] == {
        "ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "arn:aws:kms:us-east-1:111122223333:key/abc"}
    assert s3options.cache_key() != before


@pytest.mark.parametrize("raw", ["0", "-2", "many"])
def test_storage_attempts_must_be_a_positive_whole_number(monkeypatch, raw):
    monkeypatch.setenv("TFBATCH_STORAGE_ATTEMPTS", raw)
    with pytest.raises(ValueError, match="TFBATCH_STORAGE_ATTEMPTS"):
        default_attempts()
