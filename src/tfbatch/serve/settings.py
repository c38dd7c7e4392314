"""Endpoint settings: one typed object from flags and the environment.

Environment (flags win): ``SAGEMAKER_BIND_TO_PORT`` (HTTP port, as the SageMaker container),
``TFBATCH_AUTH_TOKEN`` / ``TFBATCH_AUTH_TOKEN_FILE`` (bearer token, kept out of ``ps``),
``TFBATCH_JSON_HELPERS`` (processes that write large JSON answers), and
the ``SAGEMAKER_TFS_*`` batching variables, read by
:meth:`tfbatch.runtime.RuntimeSettings.from_env`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

import pydantic

from tfbatch.errors import ConfigError
from tfbatch.limits import MAX_BODY_MB, MIB
from tfbatch.settings import Environment, describe_errors

# SageMaker Runtime's InvokeEndpoint refuses bodies over 6 MB; --sagemaker-body-limit mirrors it.
SAGEMAKER_MAX_BODY_MB = 6.0


class ServeSettings(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = pydantic.Field(8080, ge=0, le=65535)
    # 0 picks a free port; -1 turns the public gRPC server off.
    grpc_port: int = pydantic.Field(9000, ge=-1, le=65535)
    workers: int = pydantic.Field(1, ge=1)
    auth_token: str | None = None
    # Accepted only when the endpoint is deliberately open on a non-loopback address.
    insecure: bool = False
    max_body_mb: float = pydantic.Field(float(MAX_BODY_MB), gt=0)
    # What one request's input tensors may decode to in total, checked before allocating them.
    max_request_mb: float = pydantic.Field(float(MAX_BODY_MB), gt=0)
    request_timeout_s: float = pydantic.Field(60.0, gt=0)
    graceful_timeout_s: float = pydantic.Field(30.0, ge=0)
    # Unset: equal to the HTTP body limit, so both protocols accept the same requests.
    grpc_max_message_mb: float | None = pydantic.Field(None, gt=0)
    grpc_threads: int = pydantic.Field(16, ge=1)
    # gRPC calls running plus queued; beyond it RESOURCE_EXHAUSTED (unset: 2 x grpc_threads).
    grpc_max_concurrent_rpcs: int | None = pydantic.Field(None, ge=1)
    # HTTP connections plus requests in progress; beyond it uvicorn answers 503.
    max_connections: int = pydantic.Field(1024, ge=1)
    # A request's headers must arrive within this; its body must not stall longer than body_timeout_s.
    header_timeout_s: float = pydantic.Field(10.0, gt=0)
    body_timeout_s: float = pydantic.Field(30.0, gt=0)
    keep_alive_s: float = pydantic.Field(75.0, gt=0)  # above typical load-balancer idle timeouts (60 s)
    # Threads per kind of HTTP work (TFS routes, /invocations); bounds concurrent model calls.
    http_threads: int = pydantic.Field(64, ge=1)
    # Processes per server process that write parts of large JSON answers (tfs/json_helpers.py);
    # unset: the cores a worker process has beyond its own, at most 3; 0: none.
    json_helpers: int | None = pydantic.Field(None, ge=0)
    install_requirements: bool = False
    # Set by the --workers supervisor: each worker process binds the shared ports.
    reuse_port: bool = False
    log_level: str = "info"
    log_format: str = pydantic.Field("plain", pattern="^(plain|json)$")
    # Batching and threading knobs, as a dict of RuntimeSettings overrides (env fills the rest).
    runtime: dict[str, Any] = pydantic.Field(default_factory=dict)

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * MIB)

    @property
    def max_request_bytes(self) -> int:
        return int(self.max_request_mb * MIB)

    @property
    def grpc_max_message_bytes(self) -> int:
        return int((self.grpc_max_message_mb or self.max_body_mb) * MIB)

    @pydantic.field_validator("auth_token")
    @classmethod
    def _token_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("the auth token is empty; give a non-empty token or none at all")
        return value

    @property
    def exposed_without_auth(self) -> bool:
        """Bound beyond loopback with no token and without --insecure: worth a warning."""
        if self.auth_token or self.insecure:
            return False
        try:
            return not ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return self.host != "localhost"

    def runtime_settings(self, env: Mapping[str, str] | None = None):
        from tfbatch.runtime import RuntimeSettings

        overrides = dict(self.runtime)
        if Environment.read(env).batch_idle_dispatch is None:
            overrides.setdefault("batch_idle_dispatch", True)  # an endpoint is about latency
        return RuntimeSettings.from_env(env, **overrides)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> "ServeSettings":
        """Settings from the environment; keyword overrides (flags) that are not None win."""
        environment = Environment.read(env)
        values: dict[str, Any] = environment.given("port", "json_helpers")
        if environment.auth_token_file is not None:
            values["auth_token"] = read_token_file(environment.auth_token_file)
        if environment.auth_token is not None:
            values["auth_token"] = environment.auth_token
        token_file = overrides.pop("auth_token_file", None)
        if token_file is not None:
            values["auth_token"] = read_token_file(token_file)
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except pydantic.ValidationError as exc:
            raise ConfigError(f"invalid serve settings: {describe_errors(exc, 'setting')}") from None


def read_token_file(path: str) -> str:
    """The bearer token from a file (one line; surrounding whitespace and the newline dropped)."""
    try:
        token = open(path, encoding="utf-8").read().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the auth token file {path!r}: {exc.strerror or exc}") from None
    if not token:
        raise ConfigError(f"the auth token file {path!r} is empty")
    return token
