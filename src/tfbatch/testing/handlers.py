"""Unit-testing a user's ``inference.py`` against their model.tar.gz, as production runs it.

    from tfbatch.testing import LocalModel

    with LocalModel("model.tar.gz") as model:
        assert model.invoke(b'{"instances": [[1, 2, 3]]}').json()["predictions"]

The artifact goes through the stack that ``tfbatch transform`` and ``tfbatch serve`` build
(:func:`tfbatch.handlers.stack.build_stack`): the script is imported the same way, its handlers
get the same ``context`` namedtuple, scripts that POST to ``context.rest_uri`` or dial
``context.grpc_port`` reach live loopback TF Serving endpoints, and without a script the same
default JSON / CSV / image handling answers. The pytest plugin (``tfbatch_model`` fixture,
:mod:`tfbatch.pytest_plugin`) wraps this class.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class HandlerResult:
    """What the handlers answered: the status, body and content type /invocations would send."""

    status: int
    body: bytes
    content_type: str

    @property
    def ok(self) -> bool:
        """A 2xx status."""
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        """The body decoded as UTF-8."""
        return self.body.decode("utf-8")

    def json(self) -> Any:
        """The body parsed as JSON (raises AssertionError naming the status when it failed)."""
        assert self.ok, f"invocation failed with {self.status}: {self.body[:500]!r}"
        return json.loads(self.body)


class LocalModel:
    """An artifact loaded in this process with production's handler stack; ``close()`` releases it."""

    def __init__(self, model_data: str | os.PathLike, *, env: Mapping[str, str] | None = None,
                 install_requirements: bool = False):
        from tfbatch.handlers.stack import build_stack

        env = dict(env or {})
        # build_stack exports env for the script's import-time code; put the process back after
        self._saved_env = {key: os.environ.get(key) for key in env}
        self._stack = build_stack(str(model_data), env=env, install_requirements=install_requirements)

    @property
    def service(self):
        """The InferenceService (``.handlers``, ``.model_server``) for deeper assertions."""
        return self._stack.service

    def invoke(self, body: bytes | str | Any, content_type: str = "application/json",
               accept: str = "application/json", custom_attributes: str | None = None) -> HandlerResult:
        """One /invocations request: bytes/str as the body, anything else JSON-encoded."""
        from tfbatch.handlers.service import InvocationRequest

        if isinstance(body, str):
            body = body.encode()
        elif not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
        resp = self._stack.service.invoke(InvocationRequest(
            body=bytes(body), content_type=content_type, accept=accept, custom_attributes=custom_attributes))
        return HandlerResult(resp.status, resp.body, resp.content_type)

    def context(self, content_type: str = "application/json", accept: str = "application/json",
                custom_attributes: str | None = None, body: bytes = b""):
        """The ``context`` a handler would get for such a request (to call a handler directly)."""
        from tfbatch.handlers.service import InvocationRequest

        req = InvocationRequest(body=body, content_type=content_type, accept=accept,
                                custom_attributes=custom_attributes)
        service = self._stack.service
        name, version, method = service._target(req)
        return service._context(req, name, version, method)

    def close(self) -> None:
        """Release the model, the loopback endpoints and the extracted archive; restore the env."""
        if self._stack is None:
            return
        self._stack.close()
        self._stack = None
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def __enter__(self) -> "LocalModel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
