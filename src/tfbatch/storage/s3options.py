"""The options every s3fs filesystem tfbatch builds gets: endpoint, profile, requester-pays,
SSE-KMS on writes, and the retry policy.

Retries have one owner: :func:`tfbatch.storage.backoff.retry` (bounded, jittered, logged).
botocore is told to make one attempt per call and s3fs not to loop on its own, because the
layers multiply: s3fs's 5 tries x botocore's legacy 5 x tfbatch's 5 is 125 requests for one
object against a failing endpoint, silently. Reads from an open object retry the same way
(:class:`tfbatch.storage.backoff.RetryingReader`).

Sources, in order: the job (``set_job_options``: a job's KmsKeyId), then the environment:
``AWS_ENDPOINT_URL(_S3)``, ``AWS_PROFILE``, ``TFBATCH_S3_REQUESTER_PAYS``, ``TFBATCH_S3_SSE_KMS_KEY_ID``.
fsspec's own ``FSSPEC_S3_<OPTION>`` variables (e.g. ``FSSPEC_S3_REQUESTER_PAYS=true``) apply too:
s3fs reads them when the filesystem is built.
"""

from __future__ import annotations

import os
from typing import Any

_TRUE = ("1", "true", "yes", "on")
ENV_NAMES = (
    "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_ACCESS_KEY_ID",
    "AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_REGION", "TFBATCH_S3_REQUESTER_PAYS", "TFBATCH_S3_SSE_KMS_KEY_ID",
)

MAX_POOL_CONNECTIONS = 64

_job: dict[str, Any] = {}


def set_job_options(*, kms_key_id: str | None = None) -> None:
    """Per-job settings (from the job spec) for the filesystems this process builds from now on."""
    _job.clear()
    if kms_key_id:
        _job["kms_key_id"] = kms_key_id


def cache_key() -> tuple[Any, ...]:
    """What decides whether a cached S3 filesystem can be reused."""
    return (*(os.environ.get(name) for name in ENV_NAMES), tuple(sorted(_job.items())))


def new_s3_filesystem() -> Any:
    """An s3fs filesystem with these options, uncached (tfbatch's own cache decides reuse)."""
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3_options())
    # s3fs's retry loop is a class attribute, not a constructor option: one pass per call,
    # tfbatch's retry() owns the policy
    fs.retries = 1
    return fs


def s3_options(env: os._Environ | dict[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments for ``s3fs.S3FileSystem``."""
    env = os.environ if env is None else env
    # botocore >= 1.31 reads AWS_ENDPOINT_URL(_S3) itself, and the aiobotocore that s3fs uses
    # inherits that; passing it explicitly as well keeps older stacks working.
    options: dict[str, Any] = {
        "use_listings_cache": False,
        # Connections per host (aiohttp's limit; botocore's default is 10): the transform's
        # reads and writes to a store each keep up to 32 requests in flight
        # (storage/io.py, STORE_REQUESTS_IN_FLIGHT), and a request waiting for a connection
        # would only queue behind the others' round trips.
        "config_kwargs": {"retries": {"total_max_attempts": 1}, "max_pool_connections": MAX_POOL_CONNECTIONS},
    }
    ignore = env.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() in _TRUE
    endpoint = None if ignore else (env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"))
    if endpoint:
        options["client_kwargs"] = {"endpoint_url": endpoint}
    if env.get("AWS_PROFILE"):
        options["profile"] = env["AWS_PROFILE"]
    if env.get("TFBATCH_S3_REQUESTER_PAYS", "").lower() in _TRUE:
        options["requester_pays"] = True
    kms = _job.get("kms_key_id") or env.get("TFBATCH_S3_SSE_KMS_KEY_ID")
    if kms:
        # s3fs passes these only to the calls that take them (PutObject, CreateMultipartUpload, CopyObject)
        options["s3_additional_kwargs"] = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": kms}
    return options
