"""Connection-level limits uvicorn lacks: a deadline for each request's headers.

uvicorn closes idle keep-alive connections, but a client that sends its headers one byte at a
time is never idle and never finishes a request, so it holds a connection (and a slot under
``limit_concurrency``) for as long as it likes. Each request here must complete its headers
within ``header_timeout_s`` of the connection opening or of its first byte; otherwise the
connection is closed. The body then falls under the request timeout and the body read timeout
(:mod:`tfbatch.serve.limits`).
"""

from __future__ import annotations

import asyncio
from typing import Any


def _default_base() -> type:
    # The same choice as uvicorn's http="auto": the C parser when it is installed.
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol


def header_timeout_protocol(header_timeout_s: float, base: type | None = None) -> type:
    """A uvicorn HTTP protocol class (``uvicorn.Config(http=...)``) with a header deadline."""
    base = base or _default_base()

    class HeaderTimeoutProtocol(base):  # type: ignore[misc, valid-type]
        _header_timer: asyncio.TimerHandle | None = None
        _cycle_when_armed: Any = None

        def _arm(self) -> None:
            self._cycle_when_armed = self.cycle
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.logger.info("closing a connection whose request headers took over %g s", header_timeout_s)
                self.transport.close()

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            between_requests = self.cycle is None or self.cycle.response_complete
            if self._header_timer is None and between_requests:
                self._arm()  # the first byte of the next request on a kept-alive connection
            super().data_received(data)
            if self._header_timer is not None and self.cycle is not self._cycle_when_armed:
                self._disarm()  # a new request's headers are complete

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderTimeoutProtocol
