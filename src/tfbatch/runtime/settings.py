"""Runtime settings, read from arguments and the SageMaker TFS environment variables.

The variable names and defaults are the SageMaker TFS container's (COMPAT.md §5).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import pydantic

from tfbatch import errors
from tfbatch.runtime.batching_params import read_batching_parameters
from tfbatch.runtime.versions import VersionPolicy
from tfbatch.settings import Environment, EnvironmentValues

log = logging.getLogger(__name__)

_CPUS = os.cpu_count() or 1
BATCH_JOB_MAX_ENQUEUED_BATCHES = 100_000_000

# The RuntimeSettings fields the environment may set (tfbatch.settings names their variables).
ENV_FIELDS = (
    "enable_batching", "max_batch_size", "batch_timeout_micros", "num_batch_threads", "max_enqueued_batches",
    "intra_op_parallelism", "inter_op_parallelism", "default_model_name", "batch_idle_dispatch",
    "model_version_policy", "model_poll_interval_s", "warmup_replays",
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
    # TF Serving's allowed_batch_sizes: a batch is padded up to the next size (with its first
    # row) so the model only ever sees these sizes; the last must equal max_batch_size.
    allowed_batch_sizes: tuple[int, ...] = ()
    # None serves every version the artifact holds (COMPAT.md §1); see VersionPolicy.parse.
    model_version_policy: str | None = None
    # Seconds between scans of each model's folder for new versions; 0 = no hot reload.
    model_poll_interval_s: float = pydantic.Field(0.0, ge=0)
    # How many times each warm-up record is replayed (TF Serving's
    # --num_request_iterations_for_warmup, default 1); 0 skips warm-up.
    warmup_replays: int = pydantic.Field(1, ge=0)
    # What one JSON request's numeric tensors may decode to (``tfbatch serve --max-request-mb``);
    # None: bounded by the body alone, as in a transform job.
    max_request_bytes: int | None = pydantic.Field(None, ge=1)

    @pydantic.field_validator("model_version_policy")
    @classmethod
    def _check_policy(cls, value: str | None) -> str | None:
        if value is not None:
            VersionPolicy.parse(value)  # raises ValueError with what was expected
        return value

    @pydantic.model_validator(mode="after")
    def _check_allowed_sizes(self) -> RuntimeSettings:
        sizes = self.allowed_batch_sizes
        if sizes:
            if any(b <= a for a, b in zip(sizes, sizes[1:])) or sizes[0] < 1:
                raise ValueError(f"allowed_batch_sizes must be increasing and >= 1, got {list(sizes)}")
            if sizes[-1] != self.max_batch_size:
                raise ValueError(
                    f"the last of allowed_batch_sizes ({sizes[-1]}) must equal max_batch_size ({self.max_batch_size})"
                )
        return self

    @property
    def version_policy(self) -> VersionPolicy | None:
        return None if self.model_version_policy is None else VersionPolicy.parse(self.model_version_policy)

    @property
    def batch_timeout_s(self) -> float:
        return self.batch_timeout_micros / 1_000_000

    @property
    def max_queued_rows(self) -> int:
        return self.max_enqueued_batches * self.max_batch_size

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, batching_parameters_file: str | None = None, **overrides: Any
    ) -> RuntimeSettings:
        """Settings from ``env`` (default ``os.environ``); keyword overrides win.

        In a batch job (``SAGEMAKER_BATCH=true``) the queue bound defaults to 100000000
        batches, as in the SageMaker container: a transform job must never be refused.

        A batching parameters file (the argument, else ``TFBATCH_BATCHING_PARAMETERS_FILE``)
        turns batching on and wins over both the variables and the overrides for every field
        it sets: it is TF Serving's single source of batching knobs, and a file that said one
        thing while the server did another would be worse than either. What it replaced is
        logged.
        """
        environment = Environment.read(env)
        values: dict[str, Any] = environment.given(*ENV_FIELDS)
        if "max_enqueued_batches" not in values and environment.batch_job:
            values["max_enqueued_batches"] = BATCH_JOB_MAX_ENQUEUED_BATCHES
        values.update(overrides)
        path = batching_parameters_file or environment.batching_parameters_file
        if path:
            from_file = read_batching_parameters(path)
            replaced = {k: values[k] for k in from_file if k in values and values[k] != from_file[k]}
            if replaced:
                log.warning("batching parameters file %s replaces %s", path, replaced)
            values.update(from_file)
        try:
            return cls(**values)
        except pydantic.ValidationError as exc:
            where = f" (with batching parameters file {path})" if path else ""
            raise errors.ConfigError(_describe(exc) + where) from None


def _describe(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else "?"
        var = EnvironmentValues.variable(field)
        parts.append(f"{field} ({var}): {err['msg']}, got {err.get('input')!r}")
    return "invalid runtime settings: " + "; ".join(parts)
