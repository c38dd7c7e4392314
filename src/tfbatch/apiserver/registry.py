"""How operations reach the server: a table from (service, operation name) to a handler.

A handler is ``handler(ctx, params) -> dict``: ``params`` is the request already validated
against botocore's input shape, the returned dict is serialized through the output shape
(see ``protocol``), and an ``ApiError`` it raises becomes AWS's error answer. To add
operations, write a module that registers them and list it in ``MODULES``:

    from tfbatch.apiserver.registry import operation

    @operation("sagemaker", "CreateEndpointConfig")
    def create_endpoint_config(ctx, params):
        ...
        return {"EndpointConfigArn": ctx.arn("endpoint-config", params["EndpointConfigName"])}

Long-lived parts a module needs (a job queue, endpoint workers) are *components*: a factory
registered with ``@component("name")`` is called once at start-up with ``(config, state)``,
its result is ``ctx.components["name"]``, and its ``close()`` runs at shut-down.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Handler = Callable[["Context", dict], dict]

# The modules whose import registers operations and components, loaded by the app on start.
MODULES: tuple[str, ...] = (
    "tfbatch.apiserver.models",
    "tfbatch.apiserver.jobs",
    "tfbatch.apiserver.logs",
    "tfbatch.apiserver.tags",
    "tfbatch.apiserver.endpoints",
    "tfbatch.apiserver.runtime",
    "tfbatch.apiserver.console_source",
)

_OPERATIONS: dict[tuple[str, str], Handler] = {}
_COMPONENTS: dict[str, Callable[[Any, Any], Any]] = {}
_ROUTES: list[Any] = []


def operation(service: str, name: str) -> Callable[[Handler], Handler]:
    """Register ``handler`` for botocore service ``service`` (``sagemaker``, ``logs``,
    ``sagemaker-runtime``) and operation ``name`` (``CreateModel``)."""

    def register(handler: Handler) -> Handler:
        key = (service, name)
        if key in _OPERATIONS and _OPERATIONS[key] is not handler:
            raise RuntimeError(f"{service}:{name} is registered twice ({_OPERATIONS[key].__module__}, "
                               f"{handler.__module__})")
        _OPERATIONS[key] = handler
        return handler

    return register


def component(name: str) -> Callable:
    """Register a factory ``(config, state) -> object`` started once with the server."""

    def register(factory: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        _COMPONENTS[name] = factory
        return factory

    return register


def add_routes(routes: list[Any]) -> None:
    """Extra Starlette routes (the console's ``GET /`` and ``/console/...``): the AWS protocols
    own only ``POST /`` and ``POST /endpoints/{name}/invocations``. A route's handler finds the
    server's Context as ``request.app.state.context``."""
    _ROUTES.extend(routes)


def routes() -> list[Any]:
    return list(_ROUTES)


def load(modules: tuple[str, ...] = MODULES) -> None:
    for module in modules:
        importlib.import_module(module)


def handler_for(service: str, name: str) -> Handler | None:
    return _OPERATIONS.get((service, name))


def operations() -> list[tuple[str, str]]:
    return sorted(_OPERATIONS)


def components() -> dict[str, Callable[[Any, Any], Any]]:
    return dict(_COMPONENTS)


@dataclass
class Context:
    """What a handler sees of the server: its state, its components and who is calling."""

    state: Any  # apiserver.state.State
    config: Any  # apiserver.config.ApiConfig
    components: dict[str, Any] = field(default_factory=dict)
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    access_key: str | None = None

    @property
    def region(self) -> str:
        return self.config.region

    @property
    def account(self) -> str:
        return self.config.account_id

    def arn(self, kind: str, name: str, service: str = "sagemaker") -> str:
        """SageMaker's ARN for a resource: AWS lowercases the name part."""
        return f"arn:aws:{service}:{self.region}:{self.account}:{kind}/{name.lower()}"
