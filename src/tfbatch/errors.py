"""One error hierarchy for the whole package.

Every error carries the HTTP status and gRPC status code it maps to, so the HTTP
app, the gRPC service and the batch job's error report all translate it in one
place. Errors are plain picklable exceptions (message only): they cross process
boundaries (worker pools, Ray actors) without losing their type.
"""

from __future__ import annotations

import json
from typing import Any


class TfbatchError(Exception):
    """Base class. ``status`` is the HTTP status; ``grpc_code`` a grpc.StatusCode name."""

    status: int = 500
    grpc_code: str = "INTERNAL"

    def __init__(self, message: str = ""):
        super().__init__(message)
        self.message = message

    def __reduce__(self):
        return (type(self), (self.message,))

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.message}

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict()).encode()


class InvalidInput(TfbatchError):
    """The request or record does not match what the model or handler expects."""

    status = 400
    grpc_code = "INVALID_ARGUMENT"


class NotFound(TfbatchError):
    """Unknown model, version, signature or route."""

    status = 404
    grpc_code = "NOT_FOUND"


class UnsupportedMediaType(TfbatchError):
    status = 415
    grpc_code = "INVALID_ARGUMENT"


class PayloadTooLarge(TfbatchError):
    status = 413
    grpc_code = "RESOURCE_EXHAUSTED"


class Unauthorized(TfbatchError):
    status = 401
    grpc_code = "UNAUTHENTICATED"


class RequestTimeout(TfbatchError):
    status = 504
    grpc_code = "DEADLINE_EXCEEDED"


class Unavailable(TfbatchError):
    """Not ready yet, shutting down, or the queue is full."""

    status = 503
    grpc_code = "UNAVAILABLE"


class ArtifactError(TfbatchError):
    """A model artifact (archive or directory) is malformed or missing."""

    status = 500
    grpc_code = "FAILED_PRECONDITION"


class UnsafeArchive(ArtifactError):
    """An archive member would land outside the extraction folder, or is a device/link."""


class HandlerError(TfbatchError):
    """User code in inference.py raised, or returned something outside the contract.

    The message is ``str(e)`` of the user's exception, as the SageMaker container reports it.
    """

    status = 500
    grpc_code = "INTERNAL"


class ModelError(TfbatchError):
    """The model itself failed while running a batch."""

    status = 500
    grpc_code = "INTERNAL"


class DependencyMissing(TfbatchError):
    """An optional dependency or a package named in code/requirements.txt is not installed."""

    status = 500
    grpc_code = "FAILED_PRECONDITION"


class RecordError(InvalidInput):
    """A record in an input object cannot be framed or decoded (bad CRC, truncated, ...)."""


class ConfigError(InvalidInput):
    """Configuration is invalid: a job specification (flags, CreateTransformJob JSON, keyword
    arguments), a settings value, an environment variable, or an unknown engine."""


def from_exception(exc: BaseException) -> TfbatchError:
    """Wrap any exception as a TfbatchError, keeping ours as they are."""
    if isinstance(exc, TfbatchError):
        return exc
    return TfbatchError(f"{type(exc).__name__}: {exc}")
