"""Everything one worker needs to answer invocations, built in a fixed order.

artifact -> ModelServer -> (user script) -> loopback TFS endpoints -> InferenceService.
Serving and batch jobs both build this; loopback endpoints are started only when a user
script exists, since only scripts POST to ``context.rest_uri`` or dial ``context.grpc_port``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tfbatch.handlers.service import InferenceService
from tfbatch.handlers.user_code import UserHandlers, load_handlers
from tfbatch.limits import GRPC_MAX_MESSAGE_MB, MIB
from tfbatch.records.images import DEFAULT_MAX_IMAGE_PIXELS

log = logging.getLogger(__name__)


@dataclass
class ServiceStack:
    artifact: Any
    model_server: Any
    service: InferenceService
    endpoints: Any = None

    def close(self) -> None:
        if self.endpoints is not None:
            if self.endpoints.rest_port is not None:
                from tfbatch.handlers import local_rest

                local_rest.unregister(self.endpoints.rest_port)
            if self.endpoints.grpc_port is not None:
                from tfbatch.handlers import local_grpc

                local_grpc.unregister(self.endpoints.grpc_port)
            self.endpoints.stop()
        self.model_server.close()
        self.artifact.cleanup()  # the extracted archive, when open_artifact made a temp folder

    def __enter__(self) -> "ServiceStack":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def build_stack(
    model_uri: str,
    settings: Any = None,
    *,
    install_requirements: bool = False,
    env: Mapping[str, str] | None = None,
    loopback: bool = True,
    workdir: str | None = None,
    grpc_max_message_bytes: int = GRPC_MAX_MESSAGE_MB * MIB,
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    loopback_token: str | None = None,
    on_script: Callable[[UserHandlers, dict[str, Any]], None] | None = None,
    artifact: Any = None,
) -> ServiceStack:
    """Open ``model_uri`` and make a ready InferenceService.

    ``env`` is exported before the user script is imported, so module-level code sees it
    (SageMaker passes a job's Environment to the container the same way). The script is
    imported before the model loads, and ``on_script`` is called then with it and the init
    of a handler worker process (:func:`tfbatch.handlers.pooled.script_init`, carrying this
    call's limits): a batch job starts its handler worker processes there, so they import
    the script while the model loads, with the same message cap and image budget as here.
    ``artifact``: ``model_uri`` already opened by the caller (``open_artifact``); the stack
    owns it from here, as if it had opened it.
    """
    from tfbatch.artifact import open_artifact
    from tfbatch.runtime import ModelServer, RuntimeSettings

    if env:
        os.environ.update(env)
    settings = settings or RuntimeSettings.from_env()
    if artifact is None:
        artifact = open_artifact(model_uri, workdir=workdir)
    model_server = endpoints = None
    try:
        from tfbatch.tfs.warmup import warm_up

        handlers = None
        if artifact.inference_script is not None:
            if loopback:
                from tfbatch.handlers import local_grpc

                local_grpc.install()  # before the import: the script's own name for insecure_channel
            handlers = load_handlers(artifact.inference_script, install=install_requirements)
            log.info("loaded %s (%s mode)", artifact.inference_script, handlers.mode)
            if on_script is not None:
                from tfbatch.handlers.pooled import script_init

                on_script(handlers, script_init(handlers.script, max_image_pixels, grpc_max_message_bytes))
        # Applies the thread settings; each version replays its TFS warm-up requests before it serves.
        model_server = ModelServer.from_artifact(artifact, settings, warmup=warm_up)
        if handlers is not None and loopback:
            from tfbatch.tfs.loopback import LoopbackEndpoints

            endpoints = LoopbackEndpoints(
                model_server, grpc_max_message_bytes=grpc_max_message_bytes, token=loopback_token
            ).start()
            if handlers.mode == "handler" and endpoints.grpc_port is not None:
                # The handler's gRPC calls to context.grpc_port in this process skip the socket.
                from tfbatch.handlers import local_grpc

                local_grpc.register(endpoints.grpc_port, endpoints.grpc_methods, grpc_max_message_bytes, endpoints)
        service = InferenceService(
            model_server,
            handlers,
            rest_port=endpoints.rest_port if endpoints else None,
            grpc_port=endpoints.grpc_port if endpoints else None,
            grpc_max_message_bytes=grpc_max_message_bytes,
            max_image_pixels=max_image_pixels,
        )
    except BaseException:
        if model_server is not None:
            model_server.close()
        artifact.cleanup()
        raise
    return ServiceStack(artifact=artifact, model_server=model_server, service=service, endpoints=endpoints)
