"""The ASGI app: three AWS wire protocols on one port, each request signed with SigV4.

- ``POST /`` with ``X-Amz-Target: SageMaker.<Op>`` or ``Logs_20140328.<Op>``: AWS JSON 1.1
  (SageMaker's control plane, CloudWatch Logs);
- ``POST /endpoints/{EndpointName}/invocations``: SageMaker Runtime's REST-JSON InvokeEndpoint.

Each request: body read up to the configured cap, signature verified, the operation found
in the registry, its input validated against botocore's model, the handler run in a worker
thread (handlers touch SQLite and storage), the answer serialized through the output shape.
Other routes (``GET /``, ``/console/...``) come from modules that ``registry.add_routes``.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tfbatch.apiserver import registry
from tfbatch.apiserver.config import ApiConfig
from tfbatch.apiserver.protocol import ApiError, serialize, service_model, validate_input
from tfbatch.apiserver.sigv4 import verify
from tfbatch.apiserver.state import State

log = logging.getLogger("tfbatch.apiserver")

JSON_SERVICES = ("sagemaker", "logs")
RUNTIME = "sagemaker-runtime"


def _targets() -> dict[str, str]:
    """X-Amz-Target prefix -> botocore service name, from the models' own metadata."""
    return {service_model(s).metadata["targetPrefix"]: s for s in JSON_SERVICES}


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise ApiError("ValidationException", f"Request body of {declared} bytes is larger than the "
                       f"{limit} bytes this server accepts", 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError("ValidationException", f"Request body is larger than the {limit} bytes this "
                           "server accepts", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def _authenticate(request: Request, body: bytes) -> str:
    scope = request.scope
    raw_path = scope.get("raw_path") or scope["path"].encode()
    return verify(request.method, raw_path.decode("latin-1"), scope.get("query_string", b"").decode("latin-1"),
                  [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]], body,
                  request.app.state.credentials)


def _error(exc: ApiError, request_id: str, rest: bool = False) -> Response:
    headers = {"x-amzn-RequestId": request_id, "x-amzn-ErrorType": exc.code}
    # A REST error body may carry more than the message (InvokeEndpoint's ModelError: the model's
    # status, answer and log stream); such an ApiError has them in ``fields``.
    body = {"message": exc.message, **getattr(exc, "fields", {})} if rest else exc.body()
    return Response(json.dumps(body), exc.status, headers=headers,
                    media_type="application/json" if rest else "application/x-amz-json-1.1")


def _context(request: Request, access_key: str | None) -> registry.Context:
    base: registry.Context = request.app.state.context
    return registry.Context(state=base.state, config=base.config, components=base.components,
                            access_key=access_key)


async def _call(service: str, name: str, ctx: registry.Context, params: Any):
    handler = registry.handler_for(service, name)
    model = service_model(service)
    if handler is None or name not in model.operation_names:
        raise ApiError("UnknownOperationException", f"{service} operation {name} is not supported by tfbatch api")
    op = model.operation_model(name)
    params = validate_input(op, params)
    try:
        result = await run_in_threadpool(handler, ctx, params)
    except ApiError:
        raise
    except Exception as exc:  # noqa: BLE001 - an unexpected fault is answered, logged, never a dropped socket
        log.exception("%s:%s failed", service, name)
        raise ApiError("InternalFailure", f"{name} failed inside tfbatch api: {type(exc).__name__}: {exc}",
                       500) from exc
    return op, result or {}


async def json_protocol(request: Request) -> Response:
    ctx = _context(request, None)
    try:
        body = await _read_body(request, request.app.state.context.config.max_body_bytes)
        ctx.access_key = _authenticate(request, body)
        target = request.headers.get("x-amz-target", "")
        prefix, _, name = target.partition(".")
        service = request.app.state.targets.get(prefix)
        if service is None or not name:
            raise ApiError("UnknownOperationException", f"X-Amz-Target {target!r} names no operation this "
                           f"server speaks (expected one of {sorted(request.app.state.targets)}.<Operation>)")
        try:
            params = json.loads(body or b"{}")
        except ValueError as exc:
            raise ApiError("SerializationException", f"request body is not JSON: {exc}") from None
        op, result = await _call(service, name, ctx, params)
        out = serialize(op.output_shape, result) if op.output_shape is not None else {}
        return Response(json.dumps(out), 200, media_type="application/x-amz-json-1.1",
                        headers={"x-amzn-RequestId": ctx.request_id})
    except ApiError as exc:
        return _error(exc, ctx.request_id)


async def runtime_invoke(request: Request) -> Response:
    """InvokeEndpoint: input members from the URI, headers and payload as the model places them."""
    ctx = _context(request, None)
    try:
        body = await _read_body(request, request.app.state.context.config.max_body_bytes)
        ctx.access_key = _authenticate(request, body)
        op = service_model(RUNTIME).operation_model("InvokeEndpoint")
        params: dict[str, Any] = {}
        for member, shape in op.input_shape.members.items():
            where = shape.serialization.get("location")
            if where == "uri":
                params[member] = request.path_params[shape.serialization.get("name", member)]
            elif where == "header":
                value = request.headers.get(shape.serialization.get("name", member))
                if value is not None:
                    params[member] = value
        params[op.input_shape.serialization["payload"]] = body
        _op, result = await _call(RUNTIME, "InvokeEndpoint", ctx, params)
        headers = {"x-amzn-RequestId": ctx.request_id}
        payload = b""
        for member, value in result.items():
            shape = op.output_shape.members.get(member)
            if shape is None:
                raise KeyError(f"InvokeEndpoint output has no member {member!r} (handler bug)")
            if member == op.output_shape.serialization.get("payload"):
                payload = value if isinstance(value, bytes) else str(value).encode()
            elif value is not None:
                headers[shape.serialization.get("name", member)] = str(value)
        return Response(payload, 200, headers=headers)
    except ApiError as exc:
        return _error(exc, ctx.request_id, rest=True)


def build_app(config: ApiConfig, state: State | None = None) -> Starlette:
    """The server's app; ``state`` defaults to the SQLite file under ``config.state_dir``."""
    registry.load()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        own_state = state is None
        store = State(config.state_dir) if own_state else state
        context = registry.Context(state=store, config=config)
        started = []
        try:
            for name, factory in registry.components().items():
                context.components[name] = factory(config, store)
                started.append(context.components[name])
            app.state.context = context
            yield
        finally:
            for part in reversed(started):
                close = getattr(part, "close", None)
                if close is not None:
                    await run_in_threadpool(close)
            if own_state:
                store.close()

    routes = [
        Route("/", json_protocol, methods=["POST"]),
        Route("/endpoints/{EndpointName}/invocations", runtime_invoke, methods=["POST"]),
        *registry.routes(),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.credentials = config.accepted_credentials()
    app.state.targets = _targets()
    return app
