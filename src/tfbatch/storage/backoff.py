"""Retries with exponential backoff and equal jitter, for transient storage failures only.

A 403 or 404 will not heal by waiting, so retrying it only delays the real error; a dropped
connection, a timeout, a 5xx or a SlowDown usually does heal. Errors are classified by
walking the exception's cause chain, because s3fs re-raises botocore's ClientError as a
plain OSError with the original kept as ``__cause__``.

This is the only retry layer for storage: s3fs and botocore are configured to make one
attempt per call (see :mod:`tfbatch.storage.s3options`), so one operation costs at most
``attempts`` requests (``TFBATCH_STORAGE_ATTEMPTS``, default 5), and every retry is logged.
Reads from an open object (storage/io.py's reader) reopen at the offset under the same bound.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from typing import TypeVar

from tfbatch.errors import RequestTimeout, TfbatchError, Unavailable

T = TypeVar("T")
log = logging.getLogger(__name__)


def default_attempts() -> int:
    """Attempts per storage operation: TFBATCH_STORAGE_ATTEMPTS, else 5."""
    raw = os.environ.get("TFBATCH_STORAGE_ATTEMPTS", "5")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"TFBATCH_STORAGE_ATTEMPTS: expected a whole number >= 1, got '{raw}'") from None
    if value < 1:
        raise ValueError(f"TFBATCH_STORAGE_ATTEMPTS: expected a whole number >= 1, got {value}")
    return value

TRANSIENT_HTTP_STATUS = frozenset({500, 502, 503, 504})
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "500",
        "502",
        "503",
        "504",
    }
)
# Network-level exception class names from botocore/urllib3/aiohttp, matched by name so this
# module imports none of those packages.
_TRANSIENT_CLASS_NAMES = frozenset(
    {
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "ResponseStreamingError",
        "IncompleteReadError",
        "ProtocolError",
        "ClientConnectionError",
        "ClientConnectorError",
        "ServerDisconnectedError",
        "ClientPayloadError",
        "ServerTimeoutError",
        "IncompleteRead",
    }
)


def _one_is_transient(exc: BaseException) -> bool | None:
    """True/False when ``exc`` alone decides it, None to keep looking down the chain."""
    if isinstance(exc, TfbatchError):
        return isinstance(exc, (Unavailable, RequestTimeout))
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    if any(cls.__name__ in _TRANSIENT_CLASS_NAMES for cls in type(exc).__mro__):
        return True
    response = getattr(exc, "response", None)
    if isinstance(response, dict):  # botocore ClientError
        error = response.get("Error") or {}
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        code = str(error.get("Code", ""))
        return code in TRANSIENT_CODES or status in TRANSIENT_HTTP_STATUS
    status = getattr(exc, "status_code", None) or getattr(exc, "code", None)
    if isinstance(status, int) and 100 <= status < 600:  # requests / urllib HTTP errors
        return status in TRANSIENT_HTTP_STATUS
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether waiting and trying again may succeed."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        verdict = _one_is_transient(current)
        if verdict is not None:
            return verdict
        current = current.__cause__ or current.__context__
    return False


# Equal jitter (half fixed, half random): spreads clients out like full jitter, but keeps a
# floor, so the 5 default attempts always span >= 1.9 s and ride out a short outage.
BASE_DELAY = 0.25
MAX_DELAY = 5.0


def backoff_delay(attempt: int, base_delay: float = BASE_DELAY, max_delay: float = MAX_DELAY) -> float:
    """Equal jitter: uniform in [cap/2, cap], cap = min(max_delay, base_delay * 2**attempt)."""
    cap = min(max_delay, base_delay * (2**attempt))
    return cap / 2 + random.uniform(0.0, cap / 2)


def retry(
    fn: Callable[[], T],
    *,
    attempts: int | None = None,
    base_delay: float = BASE_DELAY,
    max_delay: float = MAX_DELAY,
    is_transient: Callable[[BaseException], bool] = is_transient,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``fn()`` until it returns, retrying transient errors up to ``attempts`` calls.

    A non-transient error, or the last transient one, propagates unchanged.
    ``attempts`` defaults to :func:`default_attempts`.
    """
    if attempts is None:
        attempts = default_attempts()
    if attempts < 1:
        raise ValueError(f"attempts: expected >= 1, got {attempts}")
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as exc:
            if not is_transient(exc):
                raise
            if attempt == attempts - 1:
                log.warning("storage: giving up after %d attempts: %s: %s", attempts, type(exc).__name__, exc)
                raise
            delay = backoff_delay(attempt, base_delay, max_delay)
            log.warning("storage: attempt %d/%d failed (%s: %s); retrying in %.2fs",
                        attempt + 1, attempts, type(exc).__name__, exc, delay)
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
