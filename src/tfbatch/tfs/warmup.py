"""TF Serving's SavedModel warm-up: replay ``assets.extra/tf_serving_warmup_requests``.

The file is a TFRecord of ``tensorflow.serving.PredictionLog`` protos, each holding one
predict, classify or regress request. Replaying them right after a version loads runs
TensorFlow's first-call work (graph optimisation, kernel selection, allocator growth)
before the version is published, so the first real requests do not pay for it.

As in TF Serving, a bad file or a request that fails makes the version fail to load: a
version that cannot answer its own warm-up requests would not answer clients either. The
records are read and checked before any is run.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tfbatch.errors import ArtifactError, TfbatchError
from tfbatch.limits import GRPC_MAX_MESSAGE_MB, MIB
from tfbatch.records.framing import RecordLimit, iter_records
from tfbatch.runtime import Servable
from tfbatch.runtime.signature import CLASSIFY_METHOD, REGRESS_METHOD

log = logging.getLogger(__name__)

WARMUP_FILE = Path("assets.extra") / "tf_serving_warmup_requests"
# TF Serving's own cap: a warm-up file is a handful of representative requests, not a dataset.
MAX_RECORDS = 1000
_KINDS = ("predict_log", "classify_log", "regress_log")
# A warm-up request is a request: none larger than the server would take over gRPC, checked
# from the record's length field before its bytes are read.
RECORD_LIMIT = RecordLimit(GRPC_MAX_MESSAGE_MB * MIB, "the gRPC message limit")


def prediction_log_pb2() -> Any:
    """The module with ``PredictionLog``; the one place that says where TFS protos come from."""
    from tensorflow_serving.apis import prediction_log_pb2 as module

    return module


def read_warmup_requests(path: str | Path) -> list[Any]:
    """The PredictionLogs of a warm-up file; ArtifactError names the file and record on damage."""
    path = Path(path)
    pb2 = prediction_log_pb2()
    logs = []
    try:
        with open(path, "rb") as stream:
            for record in iter_records(stream, "TFRecord", source=str(path), limit=RECORD_LIMIT):
                where = f"warm-up file {path} record {record.index}"
                if record.error is not None:
                    raise ArtifactError(f"{where}: {record.error}")
                if len(logs) == MAX_RECORDS:
                    raise ArtifactError(f"warm-up file {path} has more than {MAX_RECORDS} records")
                entry = pb2.PredictionLog()
                try:
                    entry.ParseFromString(record.data)
                except Exception:  # noqa: BLE001 - DecodeError has no stable import path
                    raise ArtifactError(f"{where}: not a tensorflow.serving.PredictionLog proto") from None
                kind = entry.WhichOneof("log_type")
                if kind not in _KINDS:
                    raise ArtifactError(
                        f"{where}: holds {kind or 'no request'}; expected one of {', '.join(_KINDS)}"
                    )
                logs.append(entry)
    except OSError as exc:
        raise ArtifactError(f"cannot read warm-up file {path}: {exc}") from None
    return logs


def _replay(servable: Servable, entry: Any) -> None:
    # Imported here: the gRPC module carries the proto -> request conversions warm-up shares.
    from tfbatch.tfs.grpc_service import _serialized_examples, pick_signature
    from tfbatch.tfs.tensors import to_ndarray

    kind = entry.WhichOneof("log_type")
    request = getattr(entry, kind).request
    if kind == "predict_log":
        sig = servable.signature(request.model_spec.signature_name or None)
        servable.run(sig.name, {k: to_ndarray(v, k) for k, v in request.inputs.items()})
        return
    method = CLASSIFY_METHOD if kind == "classify_log" else REGRESS_METHOD
    sig_name = pick_signature(servable, request.model_spec.signature_name, method)
    (key,) = servable.signature(sig_name).inputs
    servable.run(sig_name, {key: _serialized_examples(request.input)})


def warm_up(servable: Servable, replays: int = 1) -> int:
    """Replay the servable's warm-up requests ``replays`` times each; returns how many ran.

    A version without the file is ready at once (returns 0).
    """
    path = servable.path / WARMUP_FILE
    if not path.is_file():
        return 0
    logs = read_warmup_requests(path)
    for index, entry in enumerate(logs):
        for _ in range(replays):
            try:
                _replay(servable, entry)
            except TfbatchError as exc:
                raise ArtifactError(
                    f"warm-up file {path} record {index} ({entry.WhichOneof('log_type')}) failed on "
                    f"model {servable.name!r} version {servable.version}: {exc}"
                ) from None
    log.info("model %s version %s: replayed %d warm-up requests x%d", servable.name, servable.version,
             len(logs), replays)
    return len(logs) * replays
