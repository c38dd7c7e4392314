"""Endpoint settings: one typed object from flags and the environment.

Environment (flags win): ``SAGEMAKER_BIND_TO_PORT`` (HTTP port, as the SageMaker container),
``TFBATCH_AUTH_TOKEN`` (bearer token), and the ``SAGEMAKER_TFS_*`` batching variables, read
by :meth:`tfbatch.runtime.RuntimeSettings.from_env`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic

from tfbatch.errors import ConfigError
from tfbatch.settings import GRPC_MAX_MESSAGE_MB, MIB, Environment, describe_errors


class ServeSettings(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = pydantic.Field(8080, ge=0, le=65535)
    # 0 picks a free port; -1 turns the public gRPC server off.
    grpc_port: int = pydantic.Field(9000, ge=-1, le=65535)
    workers: int = pydantic.Field(1, ge=1)
    auth_token: str | None = None
    max_body_mb: float = pydantic.Field(100.0, gt=0)
    request_timeout_s: float = pydantic.Field(60.0, gt=0)
    graceful_timeout_s: float = pydantic.Field(30.0, ge=0)
    grpc_max_message_mb: int = pydantic.Field(GRPC_MAX_MESSAGE_MB, ge=1)
    grpc_threads: int = pydantic.Field(16, ge=1)
    # Threads per kind of HTTP work (TFS routes, /invocations); bounds concurrent model calls.
    http_threads: int = pydantic.Field(64, ge=1)
    install_requirements: bool = False
    # Set by the --workers supervisor: each worker process binds the shared ports.
    reuse_port: bool = False
    log_level: str = "info"
    # Batching and threading knobs, as a dict of RuntimeSettings overrides (env fills the rest).
    runtime: dict[str, Any] = pydantic.Field(default_factory=dict)

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * MIB)

    @property
    def grpc_max_message_bytes(self) -> int:
        return self.grpc_max_message_mb * MIB

    def runtime_settings(self, env: Mapping[str, str] | None = None):
        from tfbatch.runtime import RuntimeSettings

        overrides = dict(self.runtime)
        if Environment.read(env).batch_idle_dispatch is None:
            overrides.setdefault("batch_idle_dispatch", True)  # an endpoint is about latency
        return RuntimeSettings.from_env(env, **overrides)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> "ServeSettings":
        """Settings from the environment; keyword overrides (flags) that are not None win."""
        values: dict[str, Any] = Environment.read(env).given("port", "auth_token")
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except pydantic.ValidationError as exc:
            raise ConfigError(f"invalid serve settings: {describe_errors(exc, 'setting')}") from None
