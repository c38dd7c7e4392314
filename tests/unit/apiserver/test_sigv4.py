"""SigV4 verification against requests signed by botocore's own signer (the real client's)."""

from __future__ import annotations

import datetime as dt

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tfbatch.apiserver.protocol import ApiError
from tfbatch.apiserver.sigv4 import verify

KEY, SECRET = "AKIDTFBATCHTEST", "s3cr3t/with+odd=chars"
ACCEPTED = {KEY: SECRET}


def _signed(body: bytes = b'{"MaxResults": 2}', *, url: str = "http://127.0.0.1:8000/", key: str = KEY,
            secret: str = SECRET, service: str = "sagemaker", headers: dict | None = None,
            when: dt.datetime | None = None):
    request = AWSRequest(method="POST", url=url, data=body,
                         headers={"X-Amz-Target": "SageMaker.ListModels",
                                  "Content-Type": "application/x-amz-json-1.1", **(headers or {})})
    signer = SigV4Auth(Credentials(key, secret), service, "us-east-1")
    if when is None:
        signer.add_auth(request)
    else:
        # botocore stamps the request with its clock; sign as of ``when`` for the clock-skew cases.
        import botocore.auth

        saved = botocore.auth.get_current_datetime
        botocore.auth.get_current_datetime = lambda: when.replace(tzinfo=None)
        try:
            signer.add_auth(request)
        finally:
            botocore.auth.get_current_datetime = saved
    host = url.split("/")[2]
    items = [(k, v) for k, v in request.headers.items()] + [("Host", host)]
    path = url.split(host, 1)[1].split("?")[0]
    query = url.split("?", 1)[1] if "?" in url else ""
    return path, query, items, body


def _code(call) -> str:
    with pytest.raises(ApiError) as info:
        call()
    assert info.value.status == 403
    return info.value.code


def test_a_request_signed_by_botocore_verifies():
    path, query, headers, body = _signed()
    assert verify("POST", path, query, headers, body, ACCEPTED) == KEY


def test_runtime_route_with_query_and_headers_verifies():
    path, query, headers, body = _signed(b"\x00\x01binary",
                                         url="http://localhost:9/endpoints/my-ep/invocations?a=1&b=x",
                                         headers={"X-Amzn-SageMaker-Custom-Attributes": "tfs-method=predict"})
    assert verify("POST", path, query, headers, body, ACCEPTED) == KEY


def test_wrong_secret_changed_body_or_header_is_refused():
    path, query, headers, body = _signed(secret="not-the-secret")
    assert _code(lambda: verify("POST", path, query, headers, body, ACCEPTED)) == "InvalidSignatureException"
    path, query, headers, body = _signed()
    assert _code(lambda: verify("POST", path, query, headers, body + b" ", ACCEPTED)) == "InvalidSignatureException"
    tampered = [(k, "SageMaker.DeleteModel" if k == "X-Amz-Target" else v) for k, v in headers]
    assert _code(lambda: verify("POST", path, query, tampered, body, ACCEPTED)) == "InvalidSignatureException"


def test_unknown_key_missing_header_and_malformed_header():
    path, query, headers, body = _signed(key="AKIDSTRANGER")
    assert _code(lambda: verify("POST", path, query, headers, body, ACCEPTED)) == "UnrecognizedClientException"
    bare = [(k, v) for k, v in headers if k != "Authorization"]
    assert _code(lambda: verify("POST", path, query, bare, body, ACCEPTED)) == "MissingAuthenticationTokenException"
    broken = bare + [("Authorization", "AWS4-HMAC-SHA256 Credential=x")]
    assert _code(lambda: verify("POST", path, query, broken, body, ACCEPTED)) == "IncompleteSignatureException"
    basic = bare + [("Authorization", "Basic dXNlcjpwYXNz")]
    assert _code(lambda: verify("POST", path, query, basic, body, ACCEPTED)) == "IncompleteSignatureException"


def test_expired_and_future_signatures_are_refused():
    now = dt.datetime(2026, 1, 2, 12, 0, 0, tzinfo=dt.timezone.utc)
    for offset, word in ((-16, "expired"), (16, "not yet current")):
        path, query, headers, body = _signed(when=now + dt.timedelta(minutes=offset))
        with pytest.raises(ApiError) as info:
            verify("POST", path, query, headers, body, ACCEPTED, now=now)
        assert info.value.code == "InvalidSignatureException" and word in info.value.message
    path, query, headers, body = _signed(when=now - dt.timedelta(minutes=14))
    assert verify("POST", path, query, headers, body, ACCEPTED, now=now) == KEY


def test_the_secret_never_appears_in_an_error():
    path, query, headers, body = _signed(secret="not-the-secret")
    with pytest.raises(ApiError) as info:
        verify("POST", path, query, headers, body, ACCEPTED)
    assert SECRET not in info.value.message and "not-the-secret" not in info.value.message
