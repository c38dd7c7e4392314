"""The transform job specification, named after SageMaker's CreateTransformJob.

One typed object read from CLI flags, a CreateTransformJob request JSON, or Python keyword
arguments. Flags override the JSON; the model always comes from ``model``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from tfbatch.errors import ConfigError
from tfbatch.limits import MIB
from tfbatch.records.framing import RecordLimit

SplitType = Literal["None", "Line", "RecordIO", "TFRecord"]
BatchStrategy = Literal["SingleRecord", "MultiRecord"]
AssembleWith = Literal["None", "Line"]
Compression = Literal["None", "Gzip"]
JoinSource = Literal["None", "Input"]
OnError = Literal["continue", "fail-object"]


class TransformSpec(BaseModel):
    model_config = {"extra": "forbid"}

    model: str = Field(description="model.tar.gz or model directory, local path or URI")
    input: str | None = Field(default=None, description="S3Prefix-style input prefix (path or URI)")
    manifest: str | None = Field(default=None, description="ManifestFile URI instead of a prefix")
    output: str
    content_type: str | None = None
    compression: Compression = "None"
    split_type: SplitType = "None"
    batch_strategy: BatchStrategy = "SingleRecord"
    max_payload_mb: int = Field(default=6, ge=0, le=100)
    # The hard cap on one record when MaxPayloadInMB is 0 (unlimited) or larger: a gzip bomb
    # or a 2**40 TFRecord length must fail by name, not by exhausting memory.
    max_record_mb: int = Field(default=100, ge=1, le=4096)
    # Images larger than this (width * height, read from the header) are refused undecoded.
    max_image_pixels: int = Field(default=50_000_000, ge=1)
    max_concurrent_transforms: int | None = Field(default=None, ge=1)
    accept: str | None = None
    assemble_with: AssembleWith = "None"
    instance_count: int = Field(default=1, ge=1)
    input_filter: str | None = None
    output_filter: str | None = None
    join_source: JoinSource = "None"
    env: dict[str, str] = Field(default_factory=dict)
    invocations_timeout: int = Field(default=600, ge=1, le=3600)
    invocations_max_retries: int = Field(default=3, ge=0, le=3)
    # Beyond SageMaker: batching across requests and files, error policy, user-requested installs.
    # 16, not larger: on CPUs, MobileNetV2 costs ~18% more CPU per image at 32 than at 8-16
    # (benchmarks/transform/README.md); on a GPU pass --max-batch-size 64 or more.
    max_batch_size: int = Field(default=16, ge=1)
    batch_timeout_ms: float = Field(default=5.0, ge=0)
    on_error: OnError = "continue"
    install_requirements: bool = False
    engine: str = "local"
    # Local input folders: walk into symbolic links to folders (links to files are always listed once).
    follow_symlinks: bool = False
    # Skip objects the output location's ledger records as finished by this same job.
    resume: bool = True
    # TransformOutput.KmsKeyId: outputs are written with SSE-KMS under this key (S3 only)
    kms_key_id: str | None = None
    # Opt-in reduced precision (runtime/precision.py refuses it where the hardware lacks it).
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    # GPUs per instance for the local engine's CUDA_VISIBLE_DEVICES split (runtime/placement.py);
    # None spreads the visible GPUs evenly.
    gpus_per_instance: float | None = Field(default=None, ge=0)
    # Model batch size chosen from the job's first batches (transform/autotune.py); None means
    # "yes unless max_batch_size was given", resolved once when the spec is built.
    autotune: bool | None = None
    # Batches read, decoded (in the graph) and run at once in the batch lane; None: the
    # autotuner's choice, else one per core (at least 3).
    lane_workers: int | None = Field(default=None, ge=1, le=64)
    # Worker processes per instance (Ray: actors), each loads the model and runs a partition
    # of the instance's objects (by hash, or dealt by size where the listing was seen whole);
    # None: one per CORES_PER_PROCESS cores of the instance's share (per 2 for a single-handler
    # script) where no GPU is given to it, each extra one only for MIN_OBJECTS_PER_PROCESS
    # objects (engines/local.processes_per_instance).
    processes: int | None = Field(default=None, ge=1, le=64)
    # Also redo objects an earlier run finished with recorded bad-input failures.
    retry_failed: bool = False
    # Stop the job (resumable) once more than this fraction of objects failed, counted after
    # the first ``error_rate_after`` objects; 1.0 never stops.
    max_error_rate: float = Field(default=0.5, ge=0.0, le=1.0)
    error_rate_after: int = Field(default=100, ge=1)
    # Processes per instance that run code/inference.py's hooks, or with no script the default
    # JSON/CSV parse and image decode (handlers/pool.py); None: the cores divided by the
    # instances, 0: in the instance's own process.
    handler_workers: int | None = Field(default=None, ge=0)
    # Wait for another job holding the output prefix instead of refusing to start.
    wait_lock: bool = False

    @field_validator("env")
    @classmethod
    def _env_limit(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 16:
            raise ValueError(f"Environment holds at most 16 entries (SageMaker's limit), got {len(value)}")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> "TransformSpec":
        if bool(self.input) == bool(self.manifest):
            raise ValueError("give exactly one of input (a prefix) or manifest (a ManifestFile)")
        if self.input:
            _check_output_apart(self.input, self.output)
        if "max_batch_size" not in self.model_fields_set and "SAGEMAKER_TFS_MAX_BATCH_SIZE" in self.env:
            # The job's Environment names a batch size, as for SageMaker's TFS container: honour it
            # as if it were the flag (fixed, not tuned).
            raw = self.env["SAGEMAKER_TFS_MAX_BATCH_SIZE"]
            if not raw.strip().isdigit() or int(raw) < 1:
                raise ValueError(f"Environment SAGEMAKER_TFS_MAX_BATCH_SIZE={raw!r}: expected a whole number >= 1")
            self.max_batch_size = int(raw)
            if self.autotune is None:
                self.autotune = False
        if self.autotune is None:
            self.autotune = "max_batch_size" not in self.model_fields_set
        return self

    @property
    def concurrency(self) -> int:
        """In-flight invocations per instance (MaxConcurrentTransforms, else the default)."""
        return self.max_concurrent_transforms or default_concurrency(self.max_batch_size)

    def fingerprint(self) -> str:
        """A short hash of every field that changes an object's output bytes.

        The ledger is keyed by it, so a re-run of the same job resumes while a changed job
        (other model, filters, split...) redoes everything. Parallelism knobs are left out:
        resuming with more instances or another batch size gives the same bytes.
        """
        import hashlib

        fields = self.model_dump(include=_OUTPUT_FIELDS)
        if self.precision != "fp32":  # only then, so fp32 jobs keep the fingerprints they had
            fields["precision"] = self.precision
        text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def max_payload_bytes(self) -> int | None:
        return None if self.max_payload_mb == 0 else self.max_payload_mb * MIB

    @property
    def record_limit(self) -> RecordLimit:
        """The tighter of MaxPayloadInMB and --max-record-mb, named for error messages."""
        cap = self.max_record_mb * MIB
        payload = self.max_payload_bytes
        if payload is not None and payload <= cap:
            return RecordLimit(payload, f"MaxPayloadInMB={self.max_payload_mb}")
        return RecordLimit(cap, f"--max-record-mb={self.max_record_mb}")

    def container_env(self) -> dict[str, str]:
        """What the model container sees in a batch job, as SageMaker sets it."""
        env = dict(self.env)
        env.update(
            SAGEMAKER_BATCH="true",
            SAGEMAKER_MAX_PAYLOAD_IN_MB=str(self.max_payload_mb),
            SAGEMAKER_BATCH_STRATEGY="MULTI_RECORD" if self.batch_strategy == "MultiRecord" else "SINGLE_RECORD",
        )
        if self.max_concurrent_transforms:
            env["SAGEMAKER_MAX_CONCURRENT_TRANSFORMS"] = str(self.max_concurrent_transforms)
        return env

    @classmethod
    def build(cls, **kwargs: Any) -> "TransformSpec":
        """Validate, turning pydantic's errors into one ConfigError that names each bad field."""
        try:
            return cls(**kwargs)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'job'}: {err['msg']}" for err in exc.errors()
            )
            raise ConfigError(f"invalid transform job: {problems}") from None


def _check_output_apart(input_prefix: str, output_prefix: str) -> None:
    """Refuse an output prefix that is the input prefix or contains it.

    The planner skips listed objects that lie under the output prefix (so an output folder
    *inside* the input works and its ``.out`` files and ``_tfbatch/`` are never re-read);
    when the output is the input, or above it, that rule would skip every input and the job
    would report "0/0 succeeded". Nothing useful can come of it, so it is refused up front.
    """
    from tfbatch.storage.uri import is_local, normalize

    def folder(uri: str) -> str:
        path = normalize(uri)
        if is_local(path):
            path = os.path.realpath(path)  # a symlinked output folder is still the same folder
        return path.rstrip("/") + "/"

    inp, out = folder(input_prefix), folder(output_prefix)
    if inp.startswith(out):
        where = "is the input prefix" if inp == out else "contains the input prefix"
        raise ValueError(
            f"output prefix {output_prefix!r} {where} {input_prefix!r}: outputs and _tfbatch/ would be "
            "listed as inputs; choose an output prefix outside the input (a folder inside it also works)"
        )


def _get(d: dict, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def spec_from_create_transform_job(request: dict | str | Path) -> dict[str, Any]:
    """Map a CreateTransformJob request (dict, JSON text or file) to TransformSpec fields.

    Returns only the fields the request sets, so that CLI flags can override them.
    """
    if isinstance(request, (str, Path)) and not str(request).lstrip().startswith("{"):
        try:
            request = Path(request).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read job file {request}: {exc}") from exc
    if isinstance(request, str):
        try:
            request = json.loads(request)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"job file is not valid JSON (expected a CreateTransformJob request): {exc}") from exc
    if not isinstance(request, dict):
        raise ConfigError("a CreateTransformJob request must be a JSON object")

    for unsupported in ("DataCaptureConfig", "BatchDataCaptureConfig"):
        if request.get(unsupported) is not None:
            raise ConfigError(f"{unsupported} is not supported by tfbatch: remove it from the job "
                               "(inputs and outputs already stay under the input and output prefixes)")
    fields: dict[str, Any] = {}
    ds = _get(request, "TransformInput", "DataSource", "S3DataSource") or {}
    uri, data_type = ds.get("S3Uri"), ds.get("S3DataType", "S3Prefix")
    if uri:
        if data_type == "ManifestFile":
            fields["manifest"] = uri
        elif data_type == "S3Prefix":
            fields["input"] = uri
        else:
            raise ConfigError(f"S3DataType '{data_type}' is not supported; expected S3Prefix or ManifestFile")
    mapping = {
        ("TransformInput", "ContentType"): "content_type",
        ("TransformInput", "CompressionType"): "compression",
        ("TransformInput", "SplitType"): "split_type",
        ("BatchStrategy",): "batch_strategy",
        ("MaxPayloadInMB",): "max_payload_mb",
        ("MaxConcurrentTransforms",): "max_concurrent_transforms",
        ("TransformOutput", "S3OutputPath"): "output",
        ("TransformOutput", "Accept"): "accept",
        ("TransformOutput", "AssembleWith"): "assemble_with",
        ("TransformOutput", "KmsKeyId"): "kms_key_id",
        ("TransformResources", "InstanceCount"): "instance_count",
        ("DataProcessing", "InputFilter"): "input_filter",
        ("DataProcessing", "OutputFilter"): "output_filter",
        ("DataProcessing", "JoinSource"): "join_source",
        ("Environment",): "env",
        ("ModelClientConfig", "InvocationsTimeoutInSeconds"): "invocations_timeout",
        ("ModelClientConfig", "InvocationsMaxRetries"): "invocations_max_retries",
    }
    for path, name in mapping.items():
        value = _get(request, *path)
        if value is not None:
            fields[name] = value
    return fields


_OUTPUT_FIELDS = {
    "model", "input", "manifest", "content_type", "compression", "split_type", "batch_strategy",
    "max_payload_mb", "accept", "assemble_with", "input_filter", "output_filter", "join_source",
    "env", "on_error", "max_record_mb", "max_image_pixels",
}


def default_concurrency(max_batch_size: int = 1) -> int:
    """What /execution-parameters would answer when MaxConcurrentTransforms is unset.

    Invocations are cheap in-process calls; what matters is that enough of them are in
    flight for the batcher to fill a model batch while the previous one runs, hence two
    batches' worth (and never fewer than two per core, for handler work).
    """
    return max(1, (os.cpu_count() or 1) * 2, 2 * max_batch_size)
