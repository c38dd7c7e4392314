"""SageMaker-SDK-shaped entry points: ``Transformer`` for batch jobs, ``Model.deploy()`` for an endpoint.

Code written against ``sagemaker.transformer.Transformer`` / ``sagemaker.tensorflow.TensorFlowModel``
moves to tfbatch by changing the import: the constructor and ``transform()`` take the same
keyword names and mean the same CreateTransformJob fields. Arguments that only make sense
on AWS (``instance_type``, ``tags``, ``sagemaker_session``, ...) are accepted and ignored;
settings tfbatch cannot honour (data capture) are refused rather than dropped.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from tfbatch.errors import ConfigError, TfbatchError, Unavailable

log = logging.getLogger(__name__)

_IGNORED_ON_LOCAL = ("instance_type", "tags", "sagemaker_session", "base_transform_job_name",
                     "volume_kms_key", "role", "name", "model_name", "job_name", "experiment_config",
                     "logs", "framework_version", "endpoint_name", "serializer", "deserializer")


def _ignore(kwargs: Mapping[str, Any]) -> None:
    unknown = [k for k in kwargs if k not in _IGNORED_ON_LOCAL]
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    if kwargs:
        log.debug("ignored (AWS-only) arguments: %s", ", ".join(sorted(kwargs)))


def _run_transform_job(fields: dict[str, Any]):
    """The one call into the batch engine (the Python API's ``run_transform``)."""
    from tfbatch.api import run_transform

    return run_transform(**fields)


class Transformer:
    """A batch transform job template, as ``sagemaker.transformer.Transformer``.

    ``model_data`` is the model.tar.gz (or model folder), local or any fsspec URI; the other
    arguments are CreateTransformJob's: ``strategy`` (BatchStrategy), ``assemble_with``,
    ``output_path`` (S3OutputPath), ``max_payload`` (MB), ``max_concurrent_transforms``,
    ``accept``, ``env`` (Environment), ``instance_count`` (worker processes, or Ray actors with
    ``engine="ray"``). ``output_kms_key`` becomes SSE-KMS on S3 outputs.
    """

    def __init__(self, model_data: str | os.PathLike, instance_count: int = 1, strategy: str | None = None,
                 assemble_with: str | None = None, output_path: str | os.PathLike | None = None,
                 max_payload: int | None = None, max_concurrent_transforms: int | None = None,
                 accept: str | None = None, env: Mapping[str, str] | None = None,
                 output_kms_key: str | None = None, engine: str | None = None, **aws_only: Any):
        _ignore(aws_only)
        self.model_data = str(model_data)
        self.instance_count = instance_count
        self.strategy = strategy
        self.assemble_with = assemble_with
        self.output_path = None if output_path is None else str(output_path)
        self.max_payload = max_payload
        self.max_concurrent_transforms = max_concurrent_transforms
        self.accept = accept
        self.env = dict(env or {})
        self.output_kms_key = output_kms_key
        self.engine = engine
        self.latest_transform_job: TransformJob | None = None

    def transform(self, data: str | os.PathLike, data_type: str = "S3Prefix", content_type: str | None = None,
                  compression_type: str | None = None, split_type: str | None = None,
                  input_filter: str | None = None, output_filter: str | None = None,
                  join_source: str | None = None, wait: bool = True,
                  batch_data_capture_config: Any = None, model_client_config: Mapping[str, int] | None = None,
                  **aws_only: Any):
        """Run the job over ``data`` (a prefix, or a manifest with ``data_type="ManifestFile"``).

        Returns the JobReport when ``wait`` is true; otherwise the job runs in a background
        thread and ``latest_transform_job.wait()`` returns the report.
        """
        _ignore(aws_only)
        if batch_data_capture_config is not None:
            raise ConfigError("batch_data_capture_config (DataCaptureConfig) is not supported by tfbatch; "
                               "the inputs and outputs are already under the input and output prefixes")
        if self.output_path is None:
            raise ConfigError("Transformer needs output_path (S3OutputPath): where the .out objects go")
        if data_type not in ("S3Prefix", "ManifestFile"):
            raise ConfigError(f"data_type '{data_type}' is not supported; expected S3Prefix or ManifestFile")
        fields: dict[str, Any] = {
            "model": self.model_data,
            "manifest" if data_type == "ManifestFile" else "input": str(data),
            "output": self.output_path,
            "instance_count": self.instance_count,
            "env": self.env,
        }
        optional = {
            "batch_strategy": self.strategy, "assemble_with": self.assemble_with,
            "max_payload_mb": self.max_payload, "max_concurrent_transforms": self.max_concurrent_transforms,
            "accept": self.accept, "content_type": content_type, "compression": compression_type,
            "split_type": split_type, "input_filter": input_filter, "output_filter": output_filter,
            "join_source": join_source, "engine": self.engine,
        }
        if self.output_kms_key:
            optional["kms_key_id"] = self.output_kms_key
        if model_client_config:
            optional["invocations_timeout"] = model_client_config.get("InvocationsTimeoutInSeconds")
            optional["invocations_max_retries"] = model_client_config.get("InvocationsMaxRetries")
        fields.update({k: v for k, v in optional.items() if v is not None})
        job = TransformJob(fields)
        self.latest_transform_job = job
        if wait:
            return job.wait()
        job.start()
        return job


class TransformJob:
    """One run of a Transformer; ``wait()`` returns its JobReport (or raises what the job raised)."""

    def __init__(self, fields: dict[str, Any]):
        self.fields = fields
        self._report = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Run the job in a background thread (``wait()`` collects the report)."""
        self._thread = threading.Thread(target=self._run, name="tfbatch-transform", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._report = _run_transform_job(self.fields)
        except BaseException as exc:  # handed to wait()
            self._error = exc

    def wait(self):
        """Block until the job ends; returns its JobReport."""
        if self._thread is None:
            self._run()
        else:
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self._report


class Model:
    """A model artifact, as ``sagemaker.tensorflow.TensorFlowModel``; ``deploy()`` serves it locally."""

    def __init__(self, model_data: str | os.PathLike, env: Mapping[str, str] | None = None, **aws_only: Any):
        _ignore(aws_only)
        self.model_data = str(model_data)
        self.env = dict(env or {})

    def deploy(self, initial_instance_count: int = 1, port: int = 0, grpc_port: int = -1,
               startup_timeout: float = 300.0, **aws_only: Any) -> "LocalEndpoint":
        """Start ``tfbatch serve`` on 127.0.0.1 (``initial_instance_count`` worker processes)."""
        _ignore(aws_only)
        return LocalEndpoint.start(self.model_data, workers=initial_instance_count, port=port,
                                   grpc_port=grpc_port, env=self.env, startup_timeout=startup_timeout)

    def transformer(self, instance_count: int = 1, **kwargs: Any) -> Transformer:
        """A Transformer for this model, as ``Model.transformer`` in the SageMaker SDK."""
        kwargs.setdefault("env", self.env)
        return Transformer(self.model_data, instance_count=instance_count, **kwargs)


class LocalEndpoint:
    """A running ``tfbatch serve`` process; ``predict()`` calls /invocations with a bearer token."""

    def __init__(self, process: subprocess.Popen, url: str, token: str, info: dict[str, Any], workdir: Path):
        self.process = process
        self.url = url
        self.info = info
        self._token = token
        self._workdir = workdir

    @classmethod
    def start(cls, model_data: str, *, workers: int = 1, port: int = 0, grpc_port: int = -1,
              env: Mapping[str, str] | None = None, startup_timeout: float = 300.0) -> "LocalEndpoint":
        """Start ``tfbatch serve`` on 127.0.0.1 with a random bearer token; returns once it listens."""
        workdir = Path(tempfile.mkdtemp(prefix="tfbatch-endpoint-"))
        ready = workdir / "ready.json"
        token = secrets.token_urlsafe(24)
        child_env = {**os.environ, **(env or {}), "TFBATCH_AUTH_TOKEN": token}
        child_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        cmd = [sys.executable, "-m", "tfbatch", "serve", model_data, "--host", "127.0.0.1", "--port", str(port),
               "--grpc-port", str(grpc_port), "--workers", str(workers), "--ready-file", str(ready)]
        log_file = open(workdir / "serve.log", "wb")
        process = subprocess.Popen(cmd, env=child_env, stdout=log_file, stderr=subprocess.STDOUT)
        log_file.close()
        deadline = time.monotonic() + startup_timeout
        # the server writes the ready file atomically once it listens; the child exiting ends the wait
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                process.wait()
                tail = (workdir / "serve.log").read_text(errors="replace")[-2000:]
                raise Unavailable(f"tfbatch serve {model_data} did not start:\n{tail}")
            time.sleep(0.05)
        info = json.loads(ready.read_text())
        return cls(process, f"http://127.0.0.1:{info['port']}", token, info, workdir)

    def predict(self, data: Any, initial_args: Mapping[str, str] | None = None) -> Any:
        """POST ``data`` to /invocations: bytes/str as they are, anything else as JSON.

        ``initial_args`` takes InvokeEndpoint's ContentType, Accept and CustomAttributes. A JSON
        response is decoded; any other comes back as bytes. An error status raises TfbatchError.
        """
        import requests

        args = dict(initial_args or {})
        if isinstance(data, (bytes, bytearray, str)):
            body = data.encode() if isinstance(data, str) else bytes(data)
        else:
            body = json.dumps(data).encode()
        headers = {"Content-Type": args.get("ContentType", "application/json"),
                   "Accept": args.get("Accept", "application/json"),
                   "Authorization": f"Bearer {self._token}"}
        if "CustomAttributes" in args:
            headers["X-Amzn-SageMaker-Custom-Attributes"] = args["CustomAttributes"]
        resp = requests.post(f"{self.url}/invocations", data=body, headers=headers, timeout=600)
        if resp.status_code >= 400:
            raise TfbatchError(f"/invocations answered {resp.status_code}: {resp.text[:500]}")
        if resp.headers.get("Content-Type", "").startswith("application/json"):
            return resp.json()
        return resp.content

    def delete_endpoint(self, timeout: float = 60.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``) and remove its files."""
        import shutil

        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> "LocalEndpoint":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.delete_endpoint()
