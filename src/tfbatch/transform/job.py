"""A transform job on one instance: list -> read -> invoke -> write ``<key>.out``.

This first engine handles SplitType None (one request per object). Requests from many
objects run concurrently (``max_concurrent_transforms``) into one in-process model server
whose dynamic batcher coalesces them into model batches across files.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterator

from tfbatch.errors import JobSpecError
from tfbatch.handlers.service import InvocationRequest
from tfbatch.transform.spec import TransformSpec, default_concurrency

log = logging.getLogger(__name__)


@dataclass
class ObjectResult:
    key: str
    ok: bool
    error: str | None = None


@dataclass
class JobReport:
    objects: int = 0
    succeeded: int = 0
    failed: int = 0
    seconds: float = 0.0
    errors: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failed == 0


def iter_inputs(spec: TransformSpec) -> Iterator:
    from tfbatch.storage import list_manifest, list_prefix

    return list_manifest(spec.manifest) if spec.manifest else list_prefix(spec.input)


def output_uri(spec: TransformSpec, key: str) -> str:
    from tfbatch.storage import join

    return join(spec.output, key + ".out")


def run_transform(spec: TransformSpec) -> JobReport:
    from tfbatch.handlers.stack import build_stack
    from tfbatch.runtime import RuntimeSettings
    from tfbatch.storage import atomic_write, read_bytes

    if spec.split_type != "None":
        raise JobSpecError(f"SplitType {spec.split_type} is not supported by this engine yet")
    env = spec.container_env()
    settings = RuntimeSettings.from_env(
        {**os.environ, **env},
        enable_batching=True,
        max_batch_size=spec.max_batch_size,
        batch_timeout_micros=int(spec.batch_timeout_ms * 1000),
    )
    concurrency = spec.max_concurrent_transforms or default_concurrency()
    report = JobReport()
    started = time.monotonic()
    with build_stack(spec.model, settings, install_requirements=spec.install_requirements, env=env) as stack:

        def one(obj) -> ObjectResult:
            try:
                body = read_bytes(obj.uri)
                response = stack.service.invoke(
                    InvocationRequest(body=body, content_type=spec.content_type, accept=spec.accept)
                )
                if not response.ok:
                    return ObjectResult(obj.key, False, f"HTTP {response.status}: {response.body.decode(errors='replace')}")
                atomic_write(output_uri(spec, obj.key), response.body)
                return ObjectResult(obj.key, True)
            except Exception as exc:  # one object's failure never stops the others
                return ObjectResult(obj.key, False, f"{type(exc).__name__}: {exc}")

        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="transform") as pool:
            for result in pool.map(one, iter_inputs(spec)):
                report.objects += 1
                if result.ok:
                    report.succeeded += 1
                else:
                    report.failed += 1
                    report.errors.append({"object": result.key, "error": result.error})
                    log.warning("%s failed: %s", result.key, result.error)
    report.seconds = time.monotonic() - started
    return report
