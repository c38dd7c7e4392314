"""Warm-up from ``assets.extra/tf_serving_warmup_requests``, as TF Serving does it.

The file is a TFRecord of ``PredictionLog`` protos (predict, classify or regress logs). Each
request runs once against its own model version before the worker listens, so the first real
requests do not pay for graph tracing and kernel autotuning, and ``/ping`` only answers once
that is done. As in TF Serving, at most 1000 records are read and a record that fails fails
the start, naming the file and the record.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tfbatch.errors import ArtifactError, TfbatchError

log = logging.getLogger(__name__)

WARMUP_FILE = Path("assets.extra") / "tf_serving_warmup_requests"
MAX_RECORDS = 1000


def _run_record(service: Any, record: bytes, name: str, version: int, max_request_bytes: int | None) -> None:
    from tensorflow_serving.apis import prediction_log_pb2

    from tfbatch.tfs.grpc_service import CLASSIFY_METHOD, REGRESS_METHOD
    from tfbatch.tfs.tensors import check_budget, to_ndarray

    entry = prediction_log_pb2.PredictionLog.FromString(record)
    kind = entry.WhichOneof("log_type")
    if kind == "predict_log":
        request = entry.predict_log.request
        servable = service.model_server.resolve(name, version)
        sig = request.model_spec.signature_name or servable.default_signature
        check_budget(request.inputs.items(), max_request_bytes)
        inputs = {k: to_ndarray(p, k) for k, p in request.inputs.items()}
        service.model_server.run(inputs, name, version, sig)
    elif kind in ("classify_log", "regress_log"):
        request = getattr(entry, kind).request
        # The record's own model_spec may name another model; warm-up is for this version.
        request.model_spec.name, request.model_spec.version.value = name, version
        service._run_examples(request, CLASSIFY_METHOD if kind == "classify_log" else REGRESS_METHOD)
    else:
        raise ArtifactError(f"warm-up log type {kind!r} is not supported; expected predict, classify or regress")


def warm_up(model_server: Any, *, max_request_bytes: int | None = None) -> int:
    """Run every version's warm-up records; returns how many ran."""
    import tensorflow as tf
    from google.protobuf.message import DecodeError

    from tfbatch.tfs.grpc_service import PredictionService

    service = PredictionService(model_server, max_request_bytes=max_request_bytes)
    total = 0
    for name in model_server.model_names():
        for version in model_server.versions(name):
            path = Path(model_server.resolve(name, version).path) / WARMUP_FILE
            if not path.is_file():
                continue
            count = 0
            try:
                for record in tf.data.TFRecordDataset(str(path)).take(MAX_RECORDS):
                    _run_record(service, record.numpy(), name, version, max_request_bytes)
                    count += 1
            except (TfbatchError, DecodeError, ValueError, tf.errors.OpError) as exc:
                # A broken warm-up file is a broken artifact: refuse to serve, as TF Serving does.
                raise ArtifactError(f"warm-up record {count} of {path} failed: {exc}") from exc
            log.info("warm-up: %d requests for model %s version %s from %s", count, name, version, path)
            total += count
    return total
