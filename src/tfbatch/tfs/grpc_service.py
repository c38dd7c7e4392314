"""TF Serving's gRPC API over a ModelServer, with the protos generated into :mod:`tfbatch.tfs.protos`.

PredictionService: Predict, Classify, Regress, GetModelMetadata. ModelService: GetModelStatus.
Handler scripts written for the SageMaker TFS container build a ``PredictionServiceStub`` on
``context.grpc_port``; this is what answers them. Errors are TfbatchErrors mapped to their
``grpc_code`` in one place (:func:`_abort`).
"""

from __future__ import annotations

import logging
import time
from concurrent import futures
from typing import Any, Callable, Sequence

import grpc
import numpy as np
from google.protobuf import json_format
from tensorflow.core.example import example_pb2
from tensorflow.core.protobuf import meta_graph_pb2
from tfbatch.tfs.protos.tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from tfbatch.errors import InvalidInput, NotFound, RequestTimeout, TfbatchError, from_exception
from tfbatch.limits import GRPC_MAX_MESSAGE_MB, MAX_BODY_MB, MIB
from tfbatch.runtime.signature import CLASSIFY_METHOD, REGRESS_METHOD
from tfbatch.tfs.api import TfsApi
from tfbatch.tfs.tensors import check_budget, dtype_enum, from_ndarray, shape_proto, to_ndarray

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = GRPC_MAX_MESSAGE_MB * MIB
# What a request's input tensors may decode to in total (a shape plus one value fills a tensor).
DEFAULT_MAX_REQUEST_BYTES = MAX_BODY_MB * MIB
DEFAULT_SIGNATURE = "serving_default"


def _abort(context: grpc.ServicerContext, exc: BaseException) -> None:
    err = from_exception(exc)
    if not isinstance(exc, TfbatchError):
        log.exception("gRPC call failed")
    code = getattr(grpc.StatusCode, err.grpc_code, grpc.StatusCode.INTERNAL)
    context.abort(code, err.message)


def _guarded(fn: Callable) -> Callable:
    """Run one RPC; whatever it raises becomes a gRPC status, never a dead worker thread."""

    def wrapper(self, request, context):
        try:
            return fn(self, request, context)
        except Exception as exc:
            _abort(context, exc)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def _version(spec) -> int | None:
    if spec.HasField("version"):
        return spec.version.value
    if spec.version_label:
        if spec.version_label.isdigit():
            return int(spec.version_label)
        raise NotFound(f"model '{spec.name}': version labels are not supported, got '{spec.version_label}'")
    return None


def _fill_spec(out_spec, servable: Any, signature_name: str) -> None:
    out_spec.name = servable.name
    out_spec.version.value = int(servable.version)
    out_spec.signature_name = signature_name


def pick_signature(servable: Any, requested: str, method: str) -> str:
    """The signature for a classify/regress call.

    TF Serving insists on ``serving_default`` unless one is named; models exported with a
    predict default and a separate classify/regress signature are common, so when nothing is
    named we take the one signature whose method matches.
    """
    sigs = servable.signatures
    if requested:
        if requested not in sigs:
            raise NotFound(
                f"model '{servable.name}' version {servable.version} has no signature '{requested}'; "
                f"it has {sorted(sigs)}"
            )
        return requested
    default = servable.default_signature
    if default in sigs and sigs[default].method_name == method:
        return default
    matching = sorted(name for name, sig in sigs.items() if sig.method_name == method)
    if len(matching) == 1:
        return matching[0]
    raise InvalidInput(
        f"model '{servable.name}' version {servable.version}: name the signature for {method.rsplit('/', 1)[-1]} "
        f"(signatures with that method: {matching or 'none'}; all signatures: {sorted(sigs)})"
    )


def _serialized_examples(inp) -> np.ndarray:
    kind = inp.WhichOneof("kind")
    if kind == "example_list":
        examples = list(inp.example_list.examples)
    elif kind == "example_list_with_context":
        ctx = inp.example_list_with_context.context
        examples = []
        for ex in inp.example_list_with_context.examples:
            merged = example_pb2.Example()
            merged.CopyFrom(ctx)
            for key, feature in ex.features.feature.items():
                merged.features.feature[key].CopyFrom(feature)
            examples.append(merged)
    else:
        raise InvalidInput("Input must contain example_list or example_list_with_context")
    if not examples:
        raise InvalidInput("Input has no examples")
    return np.array([ex.SerializeToString() for ex in examples], dtype=object)


def signature_def_map(servable: Any) -> get_model_metadata_pb2.SignatureDefMap:
    out = get_model_metadata_pb2.SignatureDefMap()
    for name, sig in servable.signatures.items():
        sd = out.signature_def[name]
        sd.method_name = sig.method_name
        for group, tensors in (("inputs", sig.inputs), ("outputs", sig.outputs)):
            for key, info in tensors.items():
                ti = meta_graph_pb2.TensorInfo(name=info.tensor_name, dtype=dtype_enum(info.dtype))
                ti.tensor_shape.CopyFrom(shape_proto(info.shape))
                getattr(sd, group)[key].CopyFrom(ti)
    return out


def _check_deadline(context: grpc.ServicerContext, started: float, timeout_s: float | None) -> None:
    """Refuse to start model work for a call whose client deadline or the server's has passed.

    Work already running is never interrupted (a thread cannot be killed); it keeps its
    executor thread, so ``max_workers`` counts model work, timed-out calls included.
    """
    remaining = context.time_remaining() if context is not None else None
    if remaining is not None and remaining <= 0:
        raise RequestTimeout("the call's deadline passed before its model work could start")
    if timeout_s is not None and time.monotonic() - started > timeout_s:
        raise RequestTimeout(
            f"the call waited longer than the server's deadline of {timeout_s:g} s (--request-timeout) "
            "before its model work could start"
        )


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(
        self,
        model_server: Any,
        *,
        max_request_bytes: int | None = DEFAULT_MAX_REQUEST_BYTES,
        timeout_s: float | None = None,
    ):
        self.model_server = model_server
        self.max_request_bytes = max_request_bytes
        self.timeout_s = timeout_s

    def _run_examples(self, request, method: str, context=None):
        started = time.monotonic()
        spec = request.model_spec
        servable = self.model_server.resolve(spec.name or None, _version(spec))
        sig_name = pick_signature(servable, spec.signature_name, method)
        sig = servable.signatures[sig_name]
        if len(sig.inputs) != 1:
            raise InvalidInput(f"signature '{sig_name}' must take one input of serialized Examples")
        (key,) = sig.inputs
        examples = _serialized_examples(request.input)
        _check_deadline(context, started, self.timeout_s)
        outputs = self.model_server.run(
            {key: examples}, servable.name, servable.version, sig_name
        )
        return servable, sig_name, outputs

    @_guarded
    def Predict(self, request, context):
        spec = request.model_spec
        servable = self.model_server.resolve(spec.name or None, _version(spec))
        sig_name = spec.signature_name or servable.default_signature
        if sig_name not in servable.signatures:
            raise NotFound(
                f"model '{servable.name}' version {servable.version} has no signature '{sig_name}'; "
                f"it has {sorted(servable.signatures)}"
            )
        started = time.monotonic()
        check_budget(request.inputs.items(), self.max_request_bytes)
        inputs = {key: to_ndarray(proto, key) for key, proto in request.inputs.items()}
        _check_deadline(context, started, self.timeout_s)
        outputs = self.model_server.run(inputs, servable.name, servable.version, sig_name)
        wanted = list(request.output_filter) or list(outputs)
        missing = [k for k in wanted if k not in outputs]
        if missing:
            raise InvalidInput(
                f"output_filter names {missing}, not outputs of signature '{sig_name}' ({sorted(outputs)})"
            )
        response = predict_pb2.PredictResponse()
        _fill_spec(response.model_spec, servable, sig_name)
        for key in wanted:
            response.outputs[key].CopyFrom(from_ndarray(outputs[key]))
        return response

    @_guarded
    def Classify(self, request, context):
        servable, sig_name, outputs = self._run_examples(request, CLASSIFY_METHOD, context)
        classes, scores = outputs.get("classes"), outputs.get("scores")
        if classes is None and scores is None:
            raise InvalidInput(f"classify signature '{sig_name}' has neither 'classes' nor 'scores' outputs")
        rows = len(classes if classes is not None else scores)
        response = classification_pb2.ClassificationResponse()
        _fill_spec(response.model_spec, servable, sig_name)
        for i in range(rows):
            row = response.result.classifications.add()
            labels = np.asarray(classes[i]).reshape(-1) if classes is not None else None
            values = np.asarray(scores[i], dtype=np.float64).reshape(-1) if scores is not None else None
            for j in range(len(labels) if labels is not None else len(values)):
                cls = row.classes.add()
                if labels is not None:
                    label = labels[j]
                    cls.label = label.decode("utf-8", "replace") if isinstance(label, bytes) else str(label)
                if values is not None:
                    cls.score = float(values[j])
        return response

    @_guarded
    def Regress(self, request, context):
        servable, sig_name, outputs = self._run_examples(request, REGRESS_METHOD, context)
        if "outputs" in outputs:
            values = outputs["outputs"]
        elif len(outputs) == 1:
            (values,) = outputs.values()
        else:
            raise InvalidInput(f"regress signature '{sig_name}' must have one output 'outputs', has {sorted(outputs)}")
        values = np.asarray(values, dtype=np.float64)
        values = values.reshape(values.shape[0], -1)
        if values.shape[1] != 1:
            raise InvalidInput(f"regress signature '{sig_name}' must give one value per example, got shape {list(values.shape)}")
        response = regression_pb2.RegressionResponse()
        _fill_spec(response.model_spec, servable, sig_name)
        for v in values[:, 0]:
            response.result.regressions.add(value=float(v))
        return response

    @_guarded
    def GetModelMetadata(self, request, context):
        fields = list(request.metadata_field)
        if not fields:
            raise InvalidInput("GetModelMetadataRequest must specify at least one metadata_field")
        unknown = [f for f in fields if f != "signature_def"]
        if unknown:
            raise InvalidInput(f"metadata_field {unknown} is not supported; expected 'signature_def'")
        spec = request.model_spec
        servable = self.model_server.resolve(spec.name or None, _version(spec))
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name = servable.name
        response.model_spec.version.value = int(servable.version)
        response.metadata["signature_def"].Pack(signature_def_map(servable))
        return response


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, model_server: Any):
        self.model_server = model_server

    @_guarded
    def GetModelStatus(self, request, context):
        spec = request.model_spec
        status = TfsApi(self.model_server).status(spec.name, _version(spec))
        return json_format.ParseDict(
            status, get_model_status_pb2.GetModelStatusResponse(), ignore_unknown_fields=True
        )


def start_grpc_server(
    model_server: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    max_workers: int = 16,
    reuse_port: bool = False,
    interceptors: Sequence[grpc.ServerInterceptor] = (),
    max_request_bytes: int | None = DEFAULT_MAX_REQUEST_BYTES,
    max_concurrent_rpcs: int | None = None,
    timeout_s: float | None = None,
    extra_handlers: Sequence[grpc.GenericRpcHandler] = (),
) -> tuple[grpc.Server, int]:
    """Start a PredictionService + ModelService server; returns it and its bound port.

    ``max_concurrent_rpcs`` bounds calls running plus queued for a thread; beyond it gRPC
    answers RESOURCE_EXHAUSTED at once instead of queueing without limit. Default: twice
    ``max_workers``.
    """
    options = [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        # Several worker processes share one port only when asked; otherwise a clash is an error.
        ("grpc.so_reuseport", 1 if reuse_port else 0),
    ]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="tfbatch-grpc"),
        options=options,
        interceptors=list(interceptors),
        maximum_concurrent_rpcs=max_concurrent_rpcs or 2 * max_workers,
    )
    service = PredictionService(model_server, max_request_bytes=max_request_bytes, timeout_s=timeout_s)
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(service, server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(model_server), server)
    if extra_handlers:
        server.add_generic_rpc_handlers(tuple(extra_handlers))
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError:  # grpcio >= 1.5x raises instead of returning 0
        bound = 0
    if bound == 0:
        raise OSError(f"cannot bind the gRPC server to {host}:{port}")
    server.start()
    return server, bound


class _MethodTable:
    """What the generated ``add_*Servicer_to_server`` functions need of a server, keeping the
    method handlers they register by full method name (``/package.Service/Method``)."""

    def __init__(self) -> None:
        self.methods: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers) -> None:
        pass  # the same handlers arrive by name below

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        self.methods.update({f"/{service}/{name}": handler for name, handler in handlers.items()})


def method_handlers(
    model_server: Any, *, max_request_bytes: int | None = DEFAULT_MAX_REQUEST_BYTES, timeout_s: float | None = None
) -> dict[str, grpc.RpcMethodHandler]:
    """The handlers ``start_grpc_server`` serves (PredictionService, ModelService) by full method
    name, with the same servicers and limits, for callers in this process that skip the socket
    (``handlers/local_grpc.py``)."""
    table = _MethodTable()
    service = PredictionService(model_server, max_request_bytes=max_request_bytes, timeout_s=timeout_s)
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(service, table)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(model_server), table)
    return table.methods
