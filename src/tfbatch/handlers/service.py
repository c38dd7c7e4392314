"""One invocation, end to end: what ``POST /invocations`` does, shared by serving and batch jobs.

The order is fixed: resolve target -> (handler | input_handler -> model -> output_handler |
default handling) -> (body, content type). In pair mode the model call happens in-process,
with no HTTP hop, and ``output_handler`` still receives a real ``requests.Response``.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # requests is imported on the first handler call: jobs with no script never need it
    import requests

from tfbatch.errors import HandlerError, InvalidInput, TfbatchError, from_exception
from tfbatch.handlers import defaults
from tfbatch.handlers.context import METHODS, Context, parse_custom_attributes, rest_uri
from tfbatch.handlers.user_code import UserHandlers
from tfbatch.limits import GRPC_MAX_MESSAGE_MB, MIB
from tfbatch.records.images import DEFAULT_MAX_IMAGE_PIXELS, check_encoded_images, limit_pil
from tfbatch.runtime import jsonenc
from tfbatch.tfs.api import TfsApi

log = logging.getLogger(__name__)


@dataclass
class InvocationRequest:
    body: bytes
    content_type: str | None = "application/json"
    accept: str | None = "application/json"
    custom_attributes: str | None = None
    # Explicit routing (e.g. from a TFS URL); custom attributes fill what is left as None.
    model_name: str | None = None
    model_version: str | None = None
    method: str | None = None


@dataclass
class InvocationResponse:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    # Set only by invoke(endpoint=True) on a large default JSON answer: the body as chunks to
    # send with chunked transfer (tfbatch.tfs.jsonstream); ``body`` is then empty.
    chunks: Any = None
    # The answer is this request's alone: no other request's rows were in a model call it
    # depended on, so running it again isolated (Invoker) would answer the same.
    own: bool = False

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @classmethod
    def from_error(cls, err: TfbatchError) -> "InvocationResponse":
        return cls(status=err.status, body=err.to_json())


class _Body(io.BytesIO):
    """The ``data`` argument: a stream whose ``read()`` returns the request body."""


class InferenceService:
    """Runs invocations against a ModelServer, with or without a user script.

    ``rest_port``/``grpc_port`` are live loopback TFS endpoints backed by the same model server,
    so that scripts which POST to ``context.rest_uri`` or call ``context.grpc_port`` work.
    """

    def __init__(
        self,
        model_server: Any,
        handlers: UserHandlers | None = None,
        *,
        rest_port: int | None = None,
        grpc_port: int | None = None,
        grpc_max_message_bytes: int = GRPC_MAX_MESSAGE_MB * MIB,
        max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    ):
        self.model_server = model_server
        self.handlers = handlers
        self.rest_port = rest_port
        self.grpc_port = grpc_port
        self._grpc_max = grpc_max_message_bytes
        self.max_image_pixels = max_image_pixels
        if handlers is not None:
            limit_pil(max_image_pixels)  # user scripts that decode with PIL get the same budget
        self._channel = None
        self._channel_lock = threading.Lock()
        if handlers is not None and handlers.mode == "handler" and rest_port is not None:
            # The handler's requests.post(context.rest_uri) in this process skips the HTTP hop.
            from tfbatch.handlers import local_rest

            local_rest.register(rest_port, self)

    def with_model_server(
        self, model_server: Any, *, rest_port: int | None = None, grpc_port: int | None = None
    ) -> "InferenceService":
        """The same handlers over another model server (and its own loopback endpoints)."""
        return InferenceService(
            model_server, self.handlers, rest_port=rest_port, grpc_port=grpc_port,
            grpc_max_message_bytes=self._grpc_max, max_image_pixels=self.max_image_pixels,
        )

    # -- routing ---------------------------------------------------------------------------
    def _target(self, req: InvocationRequest) -> tuple[str, str | None, str]:
        attrs = parse_custom_attributes(req.custom_attributes)
        name = req.model_name or attrs.get("tfs-model-name") or self.model_server.resolve(None).name
        version = req.model_version or attrs.get("tfs-model-version") or None
        method = req.method or attrs.get("tfs-method") or "predict"
        if method not in METHODS:
            raise InvalidInput(f"tfs-method '{method}' is not supported; expected one of {', '.join(METHODS)}")
        return name, version, method

    def _context(self, req: InvocationRequest, name: str, version: str | None, method: str) -> Context:
        return make_context(req, name, version, method, self.rest_port, self.grpc_port, self.channel)

    @property
    def channel(self):
        """A gRPC channel to the loopback PredictionService, created on first use."""
        if self.grpc_port is None:
            return None
        with self._channel_lock:
            if self._channel is None:
                import grpc

                self._channel = grpc.insecure_channel(
                    f"localhost:{self.grpc_port}",
                    options=[
                        ("grpc.max_send_message_length", self._grpc_max),
                        ("grpc.max_receive_message_length", self._grpc_max),
                    ],
                )
            return self._channel

    # -- invocation ------------------------------------------------------------------------
    def invoke(self, req: InvocationRequest, *, endpoint: bool = False) -> InvocationResponse:
        """Never raises: every failure becomes a response carrying its status and message.

        ``endpoint`` (the HTTP endpoint's options for the default handling): a large JSON
        answer may come back as ``chunks``, sent as they are encoded, instead of ``body``;
        ``Accept: application/x-npy`` gets the output as .npy bytes (tfbatch.tfs.npy).
        """
        try:
            name, version, method = self._target(req)
            if self.handlers is None:
                return self._invoke_default(req, name, version, method, endpoint)
            ctx = self._context(req, name, version, method)
            if self.handlers.mode == "handler":
                result = call_user("handler", self.handlers.handler, _Body(req.body), ctx)
            else:
                processed = call_user("input_handler", self.handlers.input_handler, _Body(req.body), ctx)
                response = self.local_post(processed, ctx)
                result = call_user("output_handler", self.handlers.output_handler, response, ctx)
            return user_result(result)
        except TfbatchError as err:
            return InvocationResponse.from_error(err)
        except Exception as exc:  # defensive: nothing escapes a request
            log.exception("invocation failed")
            return InvocationResponse.from_error(from_exception(exc))

    def _invoke_default(self, req, name, version, method, endpoint=False) -> InvocationResponse:
        from tfbatch.tfs import npy
        from tfbatch.tfs.codec import encode_predict

        as_npy = endpoint and npy.wants_npy(req.accept)
        if as_npy and method != "predict":
            raise npy.not_for(method)
        found = None  # (outputs, format, signature) of a body run without parsing it as JSON
        if defaults.is_image(req.content_type):
            if method != "predict":
                raise InvalidInput(f"an image body can only be sent to predict, not {method}")
            servable = self.model_server.resolve(name, version)
            sig = servable.signatures[servable.default_signature]
            outputs = self.model_server.run(defaults.image_inputs(req.body, sig, self.max_image_pixels), name, version, sig.name)
            found = outputs, "row", sig
        elif method == "predict" and defaults.media_type(req.content_type) in defaults.JSON_TYPES:
            # A body of numbers alone is read from its bytes (TfsApi.numeric_predict); None for
            # anything else, which is parsed below and goes the general way, as before.
            found = TfsApi(self.model_server).numeric_predict(bytes(req.body), name, version)
        if found is not None:
            outputs, fmt, sig = found
            if as_npy:
                return InvocationResponse(status=200, body=npy.npy_bytes(outputs), content_type=npy.NPY)
            result = encode_predict(outputs, fmt, sig, native=True)
        else:
            body = defaults.json_request(req.body, req.content_type)
            if as_npy:
                check_encoded_images(body, self.max_image_pixels)
                outputs, _, _ = TfsApi(self.model_server).predict_arrays(body, name, version)
                return InvocationResponse(status=200, body=npy.npy_bytes(outputs), content_type=npy.NPY)
            result = self._call_model(body, name, version, method)
        if endpoint:
            from tfbatch.tfs import jsonstream

            encoded = jsonstream.encode(result)
            if isinstance(encoded, jsonstream.Plan):
                return InvocationResponse(status=200, body=b"", chunks=encoded)
            return InvocationResponse(status=200, body=encoded)
        return InvocationResponse(status=200, body=jsonenc.dumps(result))

    def model_answer(self, body: Any, name: str, version: str | None, method: str) -> bytes:
        """The JSON text the model's REST endpoint answers a parsed request ``body`` with, for
        a script's in-process call (``local_post``, ``local_rest``): what ``jsonenc.dumps`` of
        ``_call_model`` gives, through ``_b64_answer`` where the body is base64 images."""
        if method == "predict":
            fast = self._b64_answer(body, name, version)
            if fast is not None:
                return fast
        return jsonenc.dumps(self._call_model(body, name, version, method))

    def _b64_answer(self, body: Any, name: str, version: str | None) -> bytes | None:
        """The answer to ``{"instances": [{"b64": ...}, ...]}`` for a default signature of one
        string input (a single ``handler`` POSTing the image it was given), or None for any
        other body, which ``_call_model`` reads.

        The handler worker processes' fast decode (``pool_worker.b64_texts``): each image
        base64-decoded once and its header checked on the decoded bytes, where the general
        path decodes each header's bytes, walks the body again in the codec and decodes the
        whole value a second time; the same tensors and the same errors
        (tests/unit/handlers/test_b64_rows.py). The answer is encoded from the outputs' text
        (``codec.encode_predict_bodies``), the bytes ``encode_predict`` gives.
        """
        if type(body) is not dict or len(body) != 1 or "instances" not in body:
            return None
        from tfbatch.handlers.pool_worker import b64_request
        from tfbatch.tfs.codec import ROW, encode_predict, encode_predict_bodies

        try:
            servable = self.model_server.resolve(name, version)
            sig = servable.signature(None)
        except TfbatchError:
            return None  # the general path names what is missing
        found = b64_request(body, sig, self.max_image_pixels)
        if found is None:
            return None  # another body, or base64 the decoder refuses: the codec words the error
        rows, tensors = found
        outputs = self.model_server.run_signature(servable, sig, tensors)
        bodies = encode_predict_bodies(outputs, [rows], ROW)
        return bodies[0] if bodies else jsonenc.dumps(encode_predict(outputs, ROW, sig, native=True))

    def _call_model(self, body: dict, name: str, version: str | None, method: str) -> dict:
        # Encoded images inside the JSON go to a string input the model decodes in its graph.
        check_encoded_images(body, self.max_image_pixels)
        return TfsApi(self.model_server).call(method, body, name, version)

    def local_post(self, data: Any, ctx: Context) -> requests.Response:
        """What ``requests.post(ctx.rest_uri, data=data)`` would return, without the HTTP hop."""
        try:
            found = None
            if ctx.method == "predict" and isinstance(data, (str, bytes)):
                # A body of numbers alone (what a script's json.dumps of a list makes) goes as
                # the array its json.dumps noted, else is read from its text, as the handler
                # worker processes do (pool_worker.Worker._numeric).
                raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
                found = TfsApi(self.model_server).numeric_predict(raw, ctx.model_name, ctx.model_version, noted=data)
            if found is not None:
                from tfbatch.tfs.codec import encode_predict

                content = jsonenc.dumps(encode_predict(*found, native=True))
            else:
                content = self.model_answer(parse_handler_body(data), ctx.model_name, ctx.model_version, ctx.method)
            status = 200
        except TfbatchError as err:
            status, content = err.status, err.to_json()
        return make_response(status, content, ctx.rest_uri)


def make_response(status: int, content: bytes, url: str | None) -> requests.Response:
    import requests

    response = requests.Response()
    response.status_code = status
    response._content = content
    response.encoding = "utf-8"
    response.headers["Content-Type"] = "application/json"
    response.headers["Content-Length"] = str(len(content))
    reason = _REASONS.get(status)
    if reason is None:
        reason = _REASONS[status] = requests.status_codes._codes.get(status, ("",))[0].upper().replace("_", " ")
    response.reason = reason
    response.url = url or ""
    return response


# The reason phrase of each status answered so far (``make_response``).
_REASONS: dict[int, str] = {}


def make_context(req: InvocationRequest, name: str, version: str | None, method: str,
                 rest_port: int | None, grpc_port: int | None, channel: Any,
                 content_length: int | None = None) -> Context:
    """The ``context`` a script sees; handler worker processes build it with this too."""
    return Context(
        model_name=name,
        model_version=version,
        method=method,
        rest_uri=rest_uri(rest_port, name, version, method),
        grpc_port=grpc_port,
        channel=channel,
        custom_attributes=req.custom_attributes,
        request_content_type=req.content_type or "application/json",
        accept_header=req.accept or "application/json",
        content_length=len(req.body) if content_length is None else content_length,
    )


def call_user(hook: str, fn, arg, ctx: Context):
    """Run one user hook; what it raises becomes the error the SageMaker container reports."""
    try:
        return fn(arg, ctx)
    except TfbatchError:
        raise
    except Exception as exc:
        if type(exc).__name__ == "DecompressionBombError":  # PIL's, under limit_pil's budget
            raise InvalidInput(f"{hook}: image over the pixel budget: {exc}") from exc
        # The container answers {"error": str(e)}; the log names the hook that broke.
        log.info("%s raised %s: %s", hook, type(exc).__name__, exc)
        raise HandlerError(str(exc)) from exc


def user_result(result: Any) -> InvocationResponse:
    """A handler's ``(body, content_type)`` as a response, or HandlerError naming what is wrong."""
    if not (isinstance(result, tuple) and len(result) == 2):
        raise HandlerError(
            f"handler must return a (body, content_type) tuple, got {type(result).__name__}"
        )
    body, content_type = result
    if isinstance(body, str):
        body = body.encode("utf-8")
    elif body is None:
        body = b""
    elif not isinstance(body, (bytes, bytearray, memoryview)):
        raise HandlerError(
            f"handler must return the body as bytes or str, got {type(body).__name__}"
        )
    return InvocationResponse(status=200, body=bytes(body), content_type=str(content_type))


def parse_handler_body(data: Any) -> dict:
    """What ``input_handler`` returned, as the TFS request body it stands for (InvalidInput if not one)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = bytes(data).decode("utf-8")
    if isinstance(data, str):
        try:
            data = jsonenc.loads(data)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"input_handler returned a body that is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidInput(
            f"input_handler must return a JSON object for the model, got {type(data).__name__}"
        )
    return data
