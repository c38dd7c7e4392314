"""The environment tfbatch reads, in one place: every ``TFBATCH_``/``SAGEMAKER_`` variable,
one boolean parser, and the default limits more than one layer shares.

``Environment.read()`` reads the process environment through pydantic-settings;
``Environment.read(mapping)`` validates a given mapping the same way (tests, a worker's
forwarded environment). Each subsystem's typed settings object (``RuntimeSettings``,
``ServeSettings``, ``RayOptions``) takes its environment part from here and keeps its own
defaults and flag overrides, so a variable is named and parsed once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any

import pydantic
from pydantic_settings import BaseSettings, SettingsConfigDict

from tfbatch.errors import ConfigError

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off", ""})


def parse_bool(value: Any) -> bool:
    """``true/1/yes/on`` or ``false/0/no/off/<empty>``, any case; anything else is an error."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("expected true or false")


def _blank(value: Any) -> bool:
    return isinstance(value, str) and not value.strip()


def _integer(low: int, high: int | None = None):
    # int() rather than pydantic's lax parsing: "1.5" and "8.0" are errors.
    def parse(value: Any) -> int:
        try:
            n = int(value.strip()) if isinstance(value, str) else int(value)
        except (TypeError, ValueError):
            raise ValueError("expected an integer") from None
        if n < low or (high is not None and n > high):
            raise ValueError(f"expected an integer >= {low}" + (f" and <= {high}" if high is not None else ""))
        return n

    return parse


def _optional(parse):
    """A parser for variables where an empty value means "not set"."""
    return lambda value: None if value is None or _blank(value) else parse(value)


def _non_negative_float(value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError("expected a number") from None
    if x < 0:
        raise ValueError("expected a number >= 0")
    return x


def _positive_float(value: Any) -> float:
    x = _non_negative_float(value)
    if x <= 0:
        raise ValueError("expected a number > 0")
    return x


Bool = Annotated[bool | None, pydantic.BeforeValidator(lambda v: None if v is None else parse_bool(v))]
PositiveInt = Annotated[int | None, pydantic.BeforeValidator(lambda v: None if v is None else _integer(1)(v))]
NonNegativeInt = Annotated[int | None, pydantic.BeforeValidator(lambda v: None if v is None else _integer(0)(v))]
Port = Annotated[int | None, pydantic.BeforeValidator(_optional(_integer(0, 65535)))]
Name = Annotated[str | None, pydantic.BeforeValidator(lambda v: (v.strip() or None) if isinstance(v, str) else v)]
Text = Annotated[str | None, pydantic.BeforeValidator(_optional(str))]


def _token(value: Any) -> str | None:
    # Unlike other variables, a set-but-empty token is an error: taken as "not set" it would
    # silently turn authentication off.
    if value is not None and _blank(value):
        raise ValueError("the auth token is empty; give a non-empty token or none at all")
    return value


Token = Annotated[str | None, pydantic.BeforeValidator(_token)]
Amount = Annotated[float | None, pydantic.BeforeValidator(_optional(_non_negative_float))]
PositiveAmount = Annotated[float | None, pydantic.BeforeValidator(_optional(_positive_float))]


def _var(name: str) -> Any:
    return pydantic.Field(None, validation_alias=name)


class EnvironmentValues(pydantic.BaseModel):
    """Every variable tfbatch reads; None means "not set". Field names are the settings' names."""

    model_config = pydantic.ConfigDict(frozen=True, extra="ignore")

    # SageMaker's TF Serving container (COMPAT.md §5)
    enable_batching: Bool = _var("SAGEMAKER_TFS_ENABLE_BATCHING")
    max_batch_size: PositiveInt = _var("SAGEMAKER_TFS_MAX_BATCH_SIZE")
    batch_timeout_micros: NonNegativeInt = _var("SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS")
    num_batch_threads: PositiveInt = _var("SAGEMAKER_TFS_NUM_BATCH_THREADS")
    max_enqueued_batches: PositiveInt = _var("SAGEMAKER_TFS_MAX_ENQUEUED_BATCHES")
    intra_op_parallelism: NonNegativeInt = _var("SAGEMAKER_TFS_INTRA_OP_PARALLELISM")
    inter_op_parallelism: NonNegativeInt = _var("SAGEMAKER_TFS_INTER_OP_PARALLELISM")
    default_model_name: Name = _var("SAGEMAKER_TFS_DEFAULT_MODEL_NAME")
    port: Port = _var("SAGEMAKER_BIND_TO_PORT")
    # Set by SageMaker (and by tfbatch) inside a batch transform job's container.
    batch_job: Bool = _var("SAGEMAKER_BATCH")
    # tfbatch's own
    batch_idle_dispatch: Bool = _var("TFBATCH_BATCH_IDLE_DISPATCH")
    # runtime/tf_import.py: let TensorFlow import Keras, scipy and h5py eagerly
    eager_keras: Bool = _var("TFBATCH_EAGER_KERAS")
    # runtime/exit.end: keep Python's full teardown at exit once TensorFlow is imported (about 1 s)
    full_exit: Bool = _var("TFBATCH_FULL_EXIT")
    # handlers/user_code.py: leave an inference.py's json.dumps/json.loads as the standard library's
    stdlib_json: Bool = _var("TFBATCH_STDLIB_JSON")
    auth_token: Token = _var("TFBATCH_AUTH_TOKEN")
    auth_token_file: Text = _var("TFBATCH_AUTH_TOKEN_FILE")
    ray_address: Text = _var("TFBATCH_RAY_ADDRESS")
    ray_gpus_per_instance: Amount = _var("TFBATCH_RAY_GPUS_PER_INSTANCE")
    ray_cpus_per_instance: Amount = _var("TFBATCH_RAY_CPUS_PER_INSTANCE")
    ray_reader_cpus: Amount = _var("TFBATCH_RAY_READER_CPUS")
    ray_remote_read: Bool = _var("TFBATCH_RAY_REMOTE_READ")
    ray_logs: Bool = _var("TFBATCH_RAY_LOGS")
    ray_keep_warm_s: Amount = _var("TFBATCH_RAY_KEEP_WARM_S")  # engines/ray_warm.py: pooled actors' idle life
    archive_max_members: PositiveInt = _var("TFBATCH_ARCHIVE_MAX_MEMBERS")
    archive_max_bytes: PositiveInt = _var("TFBATCH_ARCHIVE_MAX_BYTES")
    # The resume ledger's group commit (transform/ledger.py): objects per journal record, and
    # the longest a finished object waits for its group's record.
    ledger_group: PositiveInt = _var("TFBATCH_LEDGER_GROUP")
    ledger_interval_s: PositiveAmount = _var("TFBATCH_LEDGER_INTERVAL_S")
    # TF Serving's model features (docs/serving.md)
    batching_parameters_file: Text = _var("TFBATCH_BATCHING_PARAMETERS_FILE")
    model_version_policy: Text = _var("TFBATCH_MODEL_VERSION_POLICY")
    model_poll_interval_s: Amount = _var("TFBATCH_MODEL_POLL_SECONDS")
    warmup_replays: NonNegativeInt = _var("TFBATCH_WARMUP_REPLAYS")
    # The endpoint's JSON helper processes per server process (tfs/json_helpers.py); 0 turns them off.
    json_helpers: NonNegativeInt = _var("TFBATCH_JSON_HELPERS")

    def given(self, *names: str) -> dict[str, Any]:
        """The fields among ``names`` that the environment sets."""
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    @staticmethod
    def variable(field: str) -> str:
        """The environment variable behind a field (the field's own name if it has none)."""
        info = EnvironmentValues.model_fields.get(field)
        return str(info.validation_alias) if info is not None and info.validation_alias else field


class Environment(BaseSettings, EnvironmentValues):
    """The process environment, read by pydantic-settings (exact-case variable names)."""

    model_config = SettingsConfigDict(case_sensitive=True, extra="ignore", frozen=True)

    @staticmethod
    def read(env: Mapping[str, str] | None = None) -> EnvironmentValues:
        """The variables of ``env``, or of this process when None; a bad value is a ConfigError
        naming the variable, the value and what was expected."""
        try:
            if env is None or env is os.environ:
                return Environment()
            return EnvironmentValues.model_validate(dict(env))
        except pydantic.ValidationError as exc:
            raise ConfigError(describe_errors(exc, "environment variable")) from None


def describe_errors(exc: pydantic.ValidationError, what: str) -> str:
    """One line per problem: ``<what> NAME='value': what was expected``."""
    parts = []
    for err in exc.errors():
        name = ".".join(str(p) for p in err["loc"]) or "?"
        message = err["msg"].removeprefix("Value error, ")
        parts.append(f"{what} {name}={err.get('input')!r}: {message}")
    return "; ".join(parts)
