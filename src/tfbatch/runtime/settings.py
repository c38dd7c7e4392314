"""Runtime settings, read from arguments and the SageMaker TFS environment variables.

The variable names and defaults are the SageMaker TFS container's (COMPAT.md §5).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pydantic

from tfbatch import errors
from tfbatch.settings import Environment, EnvironmentValues

_CPUS = os.cpu_count() or 1
BATCH_JOB_MAX_ENQUEUED_BATCHES = 100_000_000

# The RuntimeSettings fields the environment may set (tfbatch.settings names their variables).
ENV_FIELDS = (
    "enable_batching", "max_batch_size", "batch_timeout_micros", "num_batch_threads", "max_enqueued_batches",
    "intra_op_parallelism", "inter_op_parallelism", "default_model_name", "batch_idle_dispatch",
)


class RuntimeSettings(pydantic.BaseModel):
    """How models are run: batching knobs, TF thread pools, default model."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    enable_batching: bool = False
    max_batch_size: int = pydantic.Field(8, ge=1)
    batch_timeout_micros: int = pydantic.Field(1000, ge=0)
    num_batch_threads: int = pydantic.Field(_CPUS, ge=1)
    max_enqueued_batches: int = pydantic.Field(_CPUS, ge=1)
    intra_op_parallelism: int | None = pydantic.Field(None, ge=0)
    inter_op_parallelism: int | None = pydantic.Field(None, ge=0)
    default_model_name: str | None = None
    # Run a request at once when no batch is running instead of waiting for the batch
    # timeout (TF Serving always waits). ``tfbatch serve`` turns it on for latency.
    batch_idle_dispatch: bool = False

    @property
    def batch_timeout_s(self) -> float:
        return self.batch_timeout_micros / 1_000_000

    @property
    def max_queued_rows(self) -> int:
        return self.max_enqueued_batches * self.max_batch_size

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> RuntimeSettings:
        """Settings from ``env`` (default ``os.environ``); keyword overrides win.

        In a batch job (``SAGEMAKER_BATCH=true``) the queue bound defaults to 100000000
        batches, as in the SageMaker container: a transform job must never be refused.
        """
        environment = Environment.read(env)
        values: dict[str, Any] = environment.given(*ENV_FIELDS)
        if "max_enqueued_batches" not in values and environment.batch_job:
            values["max_enqueued_batches"] = BATCH_JOB_MAX_ENQUEUED_BATCHES
        values.update(overrides)
        try:
            return cls(**values)
        except pydantic.ValidationError as exc:
            raise errors.ConfigError(_describe(exc)) from None


def _describe(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else "?"
        var = EnvironmentValues.variable(field)
        parts.append(f"{field} ({var}): {err['msg']}, got {err.get('input')!r}")
    return "invalid runtime settings: " + "; ".join(parts)
