"""Runtime settings, read from arguments and the SageMaker TFS environment variables.

The variable names and defaults are the SageMaker TFS container's (COMPAT.md §5).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import pydantic

from tfbatch import errors

_CPUS = os.cpu_count() or 1
BATCH_JOB_MAX_ENQUEUED_BATCHES = 100_000_000

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


def _parse_bool(value: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError("expected true or false")


def _parse_positive_int(value: str) -> int:
    n = int(value.strip())
    if n < 1:
        raise ValueError("expected an integer >= 1")
    return n


def _parse_non_negative_int(value: str) -> int:
    n = int(value.strip())
    if n < 0:
        raise ValueError("expected an integer >= 0")
    return n


def _parse_name(value: str) -> str | None:
    return value.strip() or None


# field name -> (environment variable, parser)
ENV_VARS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "enable_batching": ("SAGEMAKER_TFS_ENABLE_BATCHING", _parse_bool),
    "max_batch_size": ("SAGEMAKER_TFS_MAX_BATCH_SIZE", _parse_positive_int),
    "batch_timeout_micros": ("SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS", _parse_non_negative_int),
    "num_batch_threads": ("SAGEMAKER_TFS_NUM_BATCH_THREADS", _parse_positive_int),
    "max_enqueued_batches": ("SAGEMAKER_TFS_MAX_ENQUEUED_BATCHES", _parse_positive_int),
    "intra_op_parallelism": ("SAGEMAKER_TFS_INTRA_OP_PARALLELISM", _parse_non_negative_int),
    "inter_op_parallelism": ("SAGEMAKER_TFS_INTER_OP_PARALLELISM", _parse_non_negative_int),
    "default_model_name": ("SAGEMAKER_TFS_DEFAULT_MODEL_NAME", _parse_name),
    "batch_idle_dispatch": ("TFBATCH_BATCH_IDLE_DISPATCH", _parse_bool),
}


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
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for field, (var, parse) in ENV_VARS.items():
            raw = env.get(var)
            if raw is None:
                continue
            try:
                values[field] = parse(raw)
            except ValueError as exc:
                raise errors.JobSpecError(f"environment variable {var}={raw!r}: {exc}") from None
        if "max_enqueued_batches" not in values and _is_batch_job(env):
            values["max_enqueued_batches"] = BATCH_JOB_MAX_ENQUEUED_BATCHES
        values.update(overrides)
        try:
            return cls(**values)
        except pydantic.ValidationError as exc:
            raise errors.JobSpecError(_describe(exc)) from None


def _is_batch_job(env: Mapping[str, str]) -> bool:
    return env.get("SAGEMAKER_BATCH", "").strip().lower() == "true"


def _describe(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else "?"
        var = ENV_VARS.get(field, (field, None))[0]
        parts.append(f"{field} ({var}): {err['msg']}, got {err.get('input')!r}")
    return "invalid runtime settings: " + "; ".join(parts)
