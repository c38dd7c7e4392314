"""AWS Signature Version 4, checked on every request the API server takes.

The server recomputes the signature a client made with its secret (the canonical request,
the string to sign, the HMAC chain of date, region and service) and compares it in
constant time. Failures answer 403 with the codes AWS uses, so botocore raises the same
ClientError it would against AWS. Secrets stay in memory: nothing here logs or stores one,
and error messages name only the access key id.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import posixpath
from collections.abc import Iterable
from urllib.parse import quote

from tfbatch.apiserver.protocol import ApiError

ALGORITHM = "AWS4-HMAC-SHA256"
# AWS refuses a request whose X-Amz-Date is further than this from its clock.
MAX_SKEW = dt.timedelta(minutes=15)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = _hmac(("AWS4" + secret).encode(), date)
    key = _hmac(key, region)
    key = _hmac(key, service)
    return _hmac(key, "aws4_request")


def canonical_uri(raw_path: str) -> str:
    # As botocore signs it: the (already percent-encoded) path, dot segments removed, encoded
    # once more; "/" stays "/".
    path = posixpath.normpath(raw_path) if raw_path not in ("", "/") else "/"
    if raw_path.endswith("/") and path != "/":
        path += "/"
    return quote(path, safe="/~")


def canonical_query(query: str) -> str:
    pairs = []
    for part in query.split("&") if query else []:
        key, _, value = part.partition("=")
        pairs.append((key, value))
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def canonical_request(method: str, raw_path: str, query: str, headers: dict[str, list[str]],
                      signed: list[str], payload_hash: str) -> str:
    lines = []
    for name in signed:
        values = headers.get(name, [])
        lines.append(f"{name}:{','.join(' '.join(v.split()) for v in values)}")
    return "\n".join([method.upper(), canonical_uri(raw_path), canonical_query(query),
                      "\n".join(lines) + "\n", ";".join(signed), payload_hash])


def _parse_authorization(value: str) -> tuple[list[str], list[str], str]:
    """(credential scope parts, signed header names, signature) of an Authorization header."""
    if not value.startswith(ALGORITHM + " "):
        raise ApiError("IncompleteSignatureException",
                       f"Authorization header requires the {ALGORITHM} algorithm", 403)
    fields: dict[str, str] = {}
    for item in value[len(ALGORITHM) + 1:].split(","):
        key, sep, val = item.strip().partition("=")
        if sep:
            fields[key] = val
    missing = [k for k in ("Credential", "SignedHeaders", "Signature") if not fields.get(k)]
    if missing:
        raise ApiError("IncompleteSignatureException",
                       f"Authorization header requires '{', '.join(missing)}' parameter(s). "
                       f"Authorization={ALGORITHM} ...", 403)
    scope = fields["Credential"].split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        raise ApiError("IncompleteSignatureException",
                       "Credential must have the form <access key>/<date>/<region>/<service>/aws4_request", 403)
    return scope, fields["SignedHeaders"].split(";"), fields["Signature"]


def verify(method: str, raw_path: str, query: str, header_items: Iterable[tuple[str, str]], body: bytes,
           credentials: dict[str, str], now: dt.datetime | None = None) -> str:
    """Check a request's SigV4 signature; returns the caller's access key id or raises ApiError (403)."""
    headers: dict[str, list[str]] = {}
    for name, value in header_items:
        headers.setdefault(name.lower(), []).append(value)
    auth = headers.get("authorization", [None])[0]
    if not auth:
        raise ApiError("MissingAuthenticationTokenException", "Missing Authentication Token", 403)
    scope, signed, signature = _parse_authorization(auth)
    access_key, date, region, service = scope[:4]
    if "host" not in signed:
        raise ApiError("IncompleteSignatureException", "SignedHeaders must include host", 403)
    amz_date = (headers.get("x-amz-date") or [None])[0]
    if not amz_date:
        raise ApiError("IncompleteSignatureException", "Authorization requires an X-Amz-Date header", 403)
    try:
        when = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        raise ApiError("IncompleteSignatureException",
                       f"X-Amz-Date {amz_date!r} is not in the form YYYYMMDD'T'HHMMSS'Z'", 403) from None
    now = now or dt.datetime.now(dt.timezone.utc)
    if abs(now - when) > MAX_SKEW:
        stamp = "%Y%m%dT%H%M%SZ"
        raise ApiError("InvalidSignatureException",
                       f"Signature expired: {amz_date} is now earlier than {(now - MAX_SKEW).strftime(stamp)} "
                       f"({now.strftime(stamp)} - 15 min.)" if when < now else
                       f"Signature not yet current: {amz_date} is still later than "
                       f"{(now + MAX_SKEW).strftime(stamp)} ({now.strftime(stamp)} + 15 min.)", 403)
    if date != amz_date[:8]:
        raise ApiError("InvalidSignatureException",
                       f"Credential should be scoped to a valid date: {date} is not {amz_date[:8]}", 403)
    secret = credentials.get(access_key)
    if secret is None:
        raise ApiError("UnrecognizedClientException", "The security token included in the request is invalid.", 403)
    body_hash = _sha256(body)
    declared = (headers.get("x-amz-content-sha256") or [None])[0]
    payload_hash = declared if declared == "UNSIGNED-PAYLOAD" else body_hash
    if declared not in (None, "UNSIGNED-PAYLOAD", body_hash):
        raise ApiError("InvalidSignatureException", "The provided x-amz-content-sha256 header does not match "
                       "what was computed.", 403)
    request = canonical_request(method, raw_path, query, headers, signed, payload_hash)
    to_sign = "\n".join([ALGORITHM, amz_date, "/".join(scope[1:]), _sha256(request.encode())])
    expected = hmac.new(signing_key(secret, date, region, service), to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        raise ApiError("InvalidSignatureException",
                       "The request signature we calculated does not match the signature you provided. "
                       "Check your AWS Secret Access Key and signing method. Consult the service "
                       "documentation for details.", 403)
    return access_key
