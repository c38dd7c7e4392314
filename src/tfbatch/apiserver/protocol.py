"""AWS wire shapes from botocore's shipped service models: validate requests, shape answers.

Nothing here is hand-written per operation: every operation's input is checked against its
botocore input shape (required members, types, enums, patterns, min/max) and every answer is
serialized through its output shape, so a field the model does not have never reaches a
client and a field a client sends that AWS would refuse is refused here with the message
AWS gives ("1 validation error detected: Value ... at 'modelName' failed to satisfy ...").
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import re
from typing import Any

from botocore.model import OperationModel, ServiceModel, Shape

# Codes every AWS JSON service may answer although its model does not list them.
COMMON_ERRORS = {
    "ValidationException": 400, "SerializationException": 400, "UnknownOperationException": 400,
    "AccessDeniedException": 403, "MissingAuthenticationTokenException": 403, "IncompleteSignature": 403,
    "InvalidSignatureException": 403, "UnrecognizedClientException": 403, "ThrottlingException": 400,
    "InternalFailure": 500, "ServiceUnavailable": 503,
}


class ApiError(Exception):
    """An error answered in AWS's shape: ``code`` is the AWS error code (the `__type`)."""

    def __init__(self, code: str, message: str, status: int | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status or COMMON_ERRORS.get(code, 400)

    def body(self) -> dict[str, str]:
        return {"__type": self.code, "message": self.message}


def validation(message: str) -> ApiError:
    return ApiError("ValidationException", message, 400)


def not_found(kind: str, name: str, arn: str) -> ApiError:
    """What AWS answers to a Describe of something that does not exist (a ValidationException,
    not ResourceNotFound: botocore's waiters match on exactly this)."""
    return validation(f'Could not find {kind} "{arn}".' if arn else f'Could not find {kind} "{name}".')


@functools.lru_cache(maxsize=None)
def service_model(name: str) -> ServiceModel:
    import botocore.session

    return botocore.session.get_session().get_service_model(name)


@functools.lru_cache(maxsize=None)
def _compiled(pattern: str):
    # Some model patterns use Java's \p{...} classes, which `re` lacks; the `regex` module
    # has them when installed. A pattern neither can compile is not enforced.
    try:
        return re.compile(pattern)
    except re.error:
        try:
            import regex  # type: ignore[import-not-found]

            return regex.compile(pattern)
        except Exception:  # noqa: BLE001 - skip what cannot be compiled, never fail the request
            return None


# Where tfbatch deliberately goes beyond AWS: these members (AWS's pattern allows only s3:// or
# https://) also take file:// URIs, so a laptop's folders work as model, input and output.
LOCAL_URI_MEMBERS = {"modelDataUrl", "s3Uri", "s3OutputPath"}


def _camel(name: str) -> str:
    return name[:1].lower() + name[1:]


class _Checker:
    """Collects every problem in one pass, as AWS reports "N validation errors detected"."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, value: Any, path: str, constraint: str) -> None:
        shown = value if isinstance(value, (str, int, float, bool)) else "null" if value is None else "..."
        self.problems.append(f"Value '{shown}' at '{path}' failed to satisfy constraint: {constraint}")

    def check(self, shape: Shape, value: Any, path: str) -> None:
        kind = shape.type_name
        meta = shape.metadata
        if kind == "structure":
            if not isinstance(value, dict):
                return self.fail(value, path, "Member must be a structure")
            for name in shape.required_members:
                if value.get(name) is None:
                    self.fail(None, self._join(path, name), "Member must not be null")
            for name, item in value.items():
                if name not in shape.members:
                    self.problems.append(f"Unknown parameter '{self._join(path, name)}'")
                elif item is not None:
                    self.check(shape.members[name], item, self._join(path, name))
        elif kind == "list":
            if not isinstance(value, list):
                return self.fail(value, path, "Member must be a list")
            self._length(value, len(value), meta, path)
            for i, item in enumerate(value):
                self.check(shape.member, item, f"{path}.{i + 1}.member")
        elif kind == "map":
            if not isinstance(value, dict):
                return self.fail(value, path, "Member must be a map")
            self._length(value, len(value), meta, path)
            for key, item in value.items():
                self.check(shape.key, key, f"{path}.{key}.key")
                self.check(shape.value, item, f"{path}.{key}.value")
        elif kind == "string":
            if not isinstance(value, str):
                return self.fail(value, path, "Member must be a string")
            self._length(value, len(value), meta, path)
            if "enum" in meta and value not in meta["enum"]:
                self.fail(value, path, f"Member must satisfy enum value set: [{', '.join(meta['enum'])}]")
            pattern = meta.get("pattern")
            compiled = _compiled(pattern) if pattern else None
            local_ok = value.startswith("file://") and path.rsplit(".", 1)[-1] in LOCAL_URI_MEMBERS
            if compiled is not None and not compiled.fullmatch(value) and not local_ok:
                self.fail(value, path, f"Member must satisfy regular expression pattern: {pattern}")
        elif kind in ("integer", "long"):
            if isinstance(value, bool) or not isinstance(value, int):
                return self.fail(value, path, "Member must be an integer")
            if "min" in meta and value < meta["min"]:
                self.fail(value, path, f"Member must have value greater than or equal to {meta['min']}")
            if "max" in meta and value > meta["max"]:
                self.fail(value, path, f"Member must have value less than or equal to {meta['max']}")
        elif kind in ("float", "double"):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self.fail(value, path, "Member must be a number")
        elif kind == "boolean":
            if not isinstance(value, bool):
                self.fail(value, path, "Member must be a boolean")
        elif kind == "timestamp":
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                self.fail(value, path, "Member must be a timestamp")
        return None

    def _length(self, value: Any, n: int, meta: dict, path: str) -> None:
        if "min" in meta and n < meta["min"]:
            self.fail(value, path, f"Member must have length greater than or equal to {meta['min']}")
        if "max" in meta and n > meta["max"]:
            self.fail(value, path, f"Member must have length less than or equal to {meta['max']}")

    @staticmethod
    def _join(path: str, name: str) -> str:
        return f"{path}.{_camel(name)}" if path else _camel(name)


def validate_input(op: OperationModel, params: Any) -> dict[str, Any]:
    """``params`` checked against the operation's input shape; raises ValidationException."""
    if op.input_shape is None:
        return {}
    if not isinstance(params, dict):
        raise ApiError("SerializationException", f"{op.name} expects a JSON object as its request body")
    checker = _Checker()
    checker.check(op.input_shape, params, "")
    if checker.problems:
        n = len(checker.problems)
        head = f"{n} validation error{'s' if n > 1 else ''} detected: "
        raise validation(head + "; ".join(checker.problems))
    return params


def parse_timestamp(value: Any) -> dt.datetime:
    """A request timestamp (epoch seconds, as botocore sends for JSON 1.1, or ISO 8601)."""
    if isinstance(value, (int, float)):
        return dt.datetime.fromtimestamp(value, dt.timezone.utc)
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def serialize(shape: Shape | None, value: Any) -> Any:
    """A handler's answer, shaped by ``shape`` for JSON 1.1: members the shape lacks are a bug."""
    if shape is None or value is None:
        return value
    kind = shape.type_name
    if kind == "structure":
        out = {}
        for name, item in value.items():
            if name not in shape.members:
                raise KeyError(f"{shape.name} has no member {name!r} (handler bug)")
            if item is not None:
                out[name] = serialize(shape.members[name], item)
        return out
    if kind == "list":
        return [serialize(shape.member, item) for item in value]
    if kind == "map":
        return {k: serialize(shape.value, v) for k, v in value.items()}
    if kind == "timestamp":
        if isinstance(value, dt.datetime):
            return value.timestamp()
        return float(value)
    if kind == "blob":
        return base64.b64encode(value).decode() if isinstance(value, (bytes, bytearray)) else value
    return value

