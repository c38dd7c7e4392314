"""The endpoint's ASGI app: SageMaker container routes, SageMaker Runtime route, TFS REST, metrics.

Middleware order, outermost first: metrics (sees every answer, 401/413/504 included) ->
bearer auth -> body limit -> request timeout -> routes.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tfbatch.errors import TfbatchError
from tfbatch.handlers.service import InferenceService, InvocationRequest, InvocationResponse
from tfbatch.serve.auth import BearerAuthMiddleware
from tfbatch.tfs.blocking import Limiters, run_blocking
from tfbatch.serve.limits import BodyLimitMiddleware, TimeoutMiddleware
from tfbatch.serve.metrics import MetricsMiddleware, ServeMetrics
from tfbatch.serve.settings import ServeSettings
from tfbatch.tfs.rest import error_response, tfs_routes
from tfbatch.tfs.streaming import streamed

CUSTOM_ATTRIBUTES = "x-amzn-sagemaker-custom-attributes"
PRODUCTION_VARIANT = "AllTraffic"


def _invocation_request(request: Request, body: bytes) -> InvocationRequest:
    headers = request.headers
    return InvocationRequest(
        body=body,
        content_type=headers.get("content-type"),
        accept=headers.get("accept"),
        custom_attributes=headers.get(CUSTOM_ATTRIBUTES),
    )


def _response(result: InvocationResponse, extra: dict[str, str] | None = None, limiter: Any = None,
              json_helpers: Any = None) -> Response:
    headers = dict(result.headers)
    headers.update(extra or {})
    if result.chunks is not None:  # a large JSON answer: encoded while it is being sent
        return streamed(result.chunks, status_code=result.status, media_type=result.content_type,
                        headers=headers, limiter=limiter, helpers=json_helpers)
    return Response(result.body, status_code=result.status, media_type=result.content_type, headers=headers)


def model_error(result: InvocationResponse) -> Response:
    """How SageMaker Runtime reports a container's non-2xx answer: 424 ModelError.

    boto3 raises ``client.exceptions.ModelError`` with OriginalStatusCode/OriginalMessage.
    """
    kind = "client" if result.status < 500 else "server"
    original = result.body.decode("utf-8", "replace")
    body = {
        "ErrorCode": f"{kind.upper()}_ERROR_FROM_MODEL",
        "Message": f'Received {kind} error ({result.status}) from primary with message "{original}".',
        "OriginalStatusCode": result.status,
        "OriginalMessage": original,
    }
    return Response(
        json.dumps(body).encode(),
        status_code=424,
        media_type="application/json",
        headers={"x-amzn-ErrorType": "ModelError", "x-Amzn-Invoked-Production-Variant": PRODUCTION_VARIANT},
    )


class EndpointRoutes:
    def __init__(
        self,
        service: InferenceService,
        settings: ServeSettings,
        metrics: ServeMetrics,
        limiters: Limiters,
        ready: Callable[[], bool],
        json_helpers: Any = None,
    ):
        self.service = service
        self.json_helpers = json_helpers
        self.settings = settings
        self.metrics = metrics
        self.limiters = limiters
        self.ready = ready

    async def ping(self, request: Request) -> Response:
        return Response(b"", status_code=200 if self.ready() else 503)

    async def _invoke(self, request: Request) -> InvocationResponse:
        body = await request.body()
        req = _invocation_request(request, body)
        limiter = self.limiters["invocations"]
        # The default handling can stream JSON and answer .npy; a script's answer is its own bytes.
        if self.service.handlers is None:
            return await run_blocking(lambda: self.service.invoke(req, endpoint=True), limiter=limiter)
        return await run_blocking(self.service.invoke, req, limiter=limiter)

    async def invocations(self, request: Request) -> Response:
        try:
            return _response(await self._invoke(request), limiter=self.limiters["invocations"],
                             json_helpers=self.json_helpers)
        except TfbatchError as err:  # body limit hit while reading
            return error_response(err)

    async def runtime_invocations(self, request: Request) -> Response:
        """SageMaker Runtime's InvokeEndpoint, as boto3's ``invoke_endpoint`` calls it."""
        try:
            result = await self._invoke(request)
        except TfbatchError as err:
            return error_response(err)
        if not result.ok:
            return model_error(result)
        return _response(result, {"x-Amzn-Invoked-Production-Variant": PRODUCTION_VARIANT},
                         limiter=self.limiters["invocations"], json_helpers=self.json_helpers)

    async def execution_parameters(self, request: Request) -> Response:
        runtime = self.service.model_server.settings
        per_worker = runtime.max_batch_size if runtime.enable_batching else 1
        body = {
            "MaxConcurrentTransforms": self.settings.workers * per_worker,
            "BatchStrategy": "MULTI_RECORD",
            "MaxPayloadInMB": max(1, min(100, int(self.settings.max_body_mb))),
        }
        return Response(json.dumps(body).encode(), media_type="application/json")

    async def metrics_route(self, request: Request) -> Response:
        content, content_type = self.metrics.render()
        return Response(content, headers={"content-type": content_type})

    def routes(self) -> list[Route]:
        return [
            Route("/ping", self.ping, methods=["GET"]),
            Route("/invocations", self.invocations, methods=["POST"]),
            Route("/endpoints/{name}/invocations", self.runtime_invocations, methods=["POST"]),
            Route("/execution-parameters", self.execution_parameters, methods=["GET"]),
            Route("/metrics", self.metrics_route, methods=["GET"]),
        ]


def build_app(
    service: InferenceService,
    settings: ServeSettings | None = None,
    *,
    metrics: ServeMetrics | None = None,
    ready: Callable[[], bool] = lambda: True,
    json_helpers: Any = None,
) -> Any:
    """The whole endpoint as an ASGI app (serve it with uvicorn, or test it with httpx.ASGITransport).

    ``json_helpers`` (:class:`tfbatch.tfs.json_helpers.JsonHelpers`, owned by the caller) write
    parts of large JSON answers in other processes."""
    settings = settings or ServeSettings()
    metrics = metrics or ServeMetrics(service.model_server)
    limiters = Limiters(settings.http_threads)
    endpoints = EndpointRoutes(service, settings, metrics, limiters, ready, json_helpers)
    app: Any = Starlette(routes=endpoints.routes() + tfs_routes(service.model_server, limiters, json_helpers))
    app = TimeoutMiddleware(app, settings.request_timeout_s)
    app = BodyLimitMiddleware(app, settings.max_body_bytes, settings.body_timeout_s)
    if settings.auth_token:
        app = BearerAuthMiddleware(app, settings.auth_token)
    return MetricsMiddleware(app, metrics)
