"""``requests`` calls to ``context.rest_uri`` from a handler in the model's own process, answered
without the HTTP hop.

A single ``handler`` calls the model itself, usually ``requests.post(context.rest_uri, ...)``.
Where the handler runs in the process that holds the model (a batch job's in-process hooks,
``tfbatch serve``), that request would go out through a TCP connection, uvicorn and the
loopback guard, and come back the same way, all on the one GIL the model call and the handler
share: on the dev VM the HTTP hop cost more CPU than the rest of the record. Once a service
with a handler registers its loopback port here, a ``requests`` call whose URL is that port
on the loopback host is answered by the same code the loopback endpoint runs (path parsing,
the TFS API, the encoded-image budget), in the calling thread, with a real
``requests.Response``; the model server batches concurrent calls as it batches the endpoint's.

Only ``requests`` is diverted (``Session.get_adapter``, ``Session.request`` and
``requests.api.request``, for registered ports only); any other
client (urllib3, http.client, aiohttp, gRPC on ``context.grpc_port``), another process (a
handler worker) and every other URL still reach the live loopback endpoints.
"""

from __future__ import annotations

import datetime
import threading
import time
import weakref
from typing import Any
from urllib.parse import urlsplit

# This module is imported only where a handler script is registered (service.py), so requests,
# which jobs without a script never import, is loaded here only when it is needed.
from requests.adapters import BaseAdapter
from requests.compat import json as complexjson
from requests.models import PreparedRequest
from requests.sessions import merge_setting
from requests.structures import CaseInsensitiveDict

from tfbatch.errors import TfbatchError, from_exception
from tfbatch.runtime import jsonenc

_LOOPBACK_HOSTS = ("localhost", "127.0.0.1")  # the hosts the loopback endpoints answer on
_services: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_lock = threading.Lock()
_installed = False


def register(port: int, service: Any) -> None:
    """Answer ``requests`` calls to ``http://localhost:<port>/...`` in process, with ``service``
    (an ``InferenceService``: its model server and image budget). Kept while the service lives."""
    with _lock:
        _services[port] = service
        _install()


def unregister(port: int) -> None:
    """Stop answering calls to ``port`` in process (its endpoints are closing)."""
    with _lock:
        _services.pop(port, None)


def service_for(url: str) -> Any:
    """The registered service a URL names, or None."""
    if not _services:
        return None
    port = _url_parts(url)[0]
    return None if port is None else _services.get(port)


def _url_parts(url: Any) -> tuple[int | None, str]:
    """(the port of an ``http://localhost:<port>`` or 127.0.0.1 URL, else None; its path)."""
    try:
        return _read_urls[url]
    except KeyError:
        parts = _read_url(url)
        if len(_read_urls) < _READ_URLS_KEPT:
            _read_urls[url] = parts
        return parts
    except TypeError:  # an unhashable URL: requests refuses it later
        return _read_url(url)


def _read_url(url: Any) -> tuple[int | None, str]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except (ValueError, TypeError, AttributeError):
        return None, ""
    if parts.scheme != "http" or parts.hostname not in _LOOPBACK_HOSTS:
        return None, parts.path
    return port, parts.path


# Each URL's port and path, as read the first time: a handler calls ``context.rest_uri`` (a
# few URLs) per record, and splitting it cost ~2.5 us, three times a call. Which service a port
# has is looked up per call (services come and go). Bounded: a script calling other URLs
# without end only reads them each time.
_read_urls: dict[Any, tuple[int | None, str]] = {}
_READ_URLS_KEPT = 256


_sessions = threading.local()


def _install() -> None:
    """Route registered URLs to :class:`LocalAdapter`, from any ``Session``; and let the
    module-level calls (``requests.post(url)``, which builds a Session, two connection pools
    and the proxy and netrc settings from the environment per call, a third of the handler's
    CPU) use one Session per thread for those URLs, which reach no network."""
    global _installed
    if _installed:
        return
    import requests
    import requests.api

    original_adapter = requests.Session.get_adapter
    original_request = requests.api.request
    adapter = LocalAdapter()

    def get_adapter(self, url):
        return adapter if service_for(url) is not None else original_adapter(self, url)

    def request(method, url, **kwargs):
        service = service_for(url)
        if service is None:
            return original_request(method, url, **kwargs)
        session = getattr(_sessions, "session", None)
        if session is None:
            session = _sessions.session = requests.Session()
            session.trust_env = False  # no proxy or netrc lookup for a call that stays in process
        # The thread's Session is plain for good (no auth, params, cookies or hooks: nothing
        # but this function reaches it, and no answer in process sets a cookie), so a plain
        # call is answered as session_request would answer it, without its checks.
        if kwargs.keys() <= _DIRECT_KWARGS and type(session) is requests.Session:
            response = _direct(service, adapter, method, url, kwargs, session.headers)
            if response is not None:
                return response
        return session.request(method=method, url=url, **kwargs)

    original_session_request = requests.Session.request

    def session_request(self, method, url, *args, **kwargs):
        # Registered URLs only: no other call of the process looks at its Session here.
        service = service_for(url) if not args and kwargs.keys() <= _DIRECT_KWARGS else None
        if service is not None and _plain_session(self, requests.Session):
            response = _direct(service, adapter, method, url, kwargs, self.headers)
            if response is not None:
                return response
        return original_session_request(self, method, url, *args, **kwargs)

    requests.Session.get_adapter = get_adapter
    requests.Session.request = session_request
    requests.api.request = request
    _installed = True


# A plain call to a registered URL is answered without the Session's request preparation:
# requests.post(url, data=body) or (json=obj), requests.get(url), from requests' module-level
# functions (which use one Session per thread here) or from a script's own Session (made at
# import, ``session.post(...)`` per record: the usual way to reuse connections). The
# preparation took ~190 us of the GIL per call on the dev VM, more than the in-process
# answer's own Python (benchmarks/transform/profile/handler.md); a script's own Session, with
# its environment's proxy and netrc look-ups, ~0.5 ms of the handler's CPU a call in a
# 5,000-JPEG job, and a json= body ~0.25 ms (benchmarks/transform/profile/handler-session.md).
# Plain: nothing of the Session would change the request or its answer (no auth, cookies,
# params or response hooks, and the Session's own steps not overridden); headers and timeout
# change nothing in process, nor does what the transport takes (stream, verify, cert,
# proxies), as LocalAdapter shows; params only as None or empty (requests.get passes it);
# nothing redirects in process.
_DIRECT_KWARGS = frozenset({"data", "json", "params", "headers", "timeout", "allow_redirects",
                            "stream", "verify", "cert", "proxies"})
_SESSION_STEPS = ("send", "prepare_request", "merge_environment_settings", "get_adapter")


def _plain_session(session: Any, base: type) -> bool:
    """Whether ``session`` would prepare a call to a registered URL as ``_direct`` does."""
    cls = type(session)
    if cls is not base and any(getattr(cls, step) is not getattr(base, step) for step in _SESSION_STEPS):
        return False
    hooks = session.hooks
    return (session.auth is None and not session.params and not session.cookies
            and not any(hooks.values()) and hooks.keys() <= {"response"})


def _direct(service: Any, adapter: "LocalAdapter", method: str, url: str, kwargs: dict,
            session_headers: Any) -> Any:
    """What ``Session.request`` returns for a plain call, or None where it must go that way
    (``params``, a body other than bytes or text, a ``json=`` body JSON refuses, a query
    string, a URL it would rewrite). ``session_headers``: the calling Session's headers."""
    from tfbatch.handlers.service import make_response  # service imports this module

    body = kwargs.get("data") or None  # as requests: an empty body is no body
    if kwargs.get("params"):
        return None
    if body is not None and not isinstance(body, (bytes, str)):
        return None
    if not isinstance(url, str) or not url.isascii() or "?" in url or "#" in url or " " in url:
        return None
    content_type = None
    if body is None and kwargs.get("json") is not None:
        # As PreparedRequest.prepare_body: requests' JSON module, NaN refused, UTF-8 bytes.
        try:
            text = complexjson.dumps(kwargs["json"], allow_nan=False)
        except (TypeError, ValueError):
            return None  # the Session raises what requests raises
        body = text if isinstance(text, bytes) else text.encode("utf-8")
        content_type = "application/json"
    started = time.perf_counter()
    raw = body.encode("utf-8") if isinstance(body, str) else body  # encoded once: the answer and the length
    status, content = _answer(service, method.upper(), _url_parts(url)[1], raw, sent=body)
    prepared = PreparedRequest()
    prepared.method, prepared.url, prepared.body = method.upper(), url, body
    # As Session.prepare_request merges them: the call's headers over the Session's, a header
    # set to None dropped.
    prepared.headers = CaseInsensitiveDict(merge_setting(
        kwargs.get("headers"), session_headers, dict_class=CaseInsensitiveDict))
    if raw is not None:
        prepared.headers["Content-Length"] = str(len(raw))
    if content_type is not None and "content-type" not in prepared.headers:
        prepared.headers["Content-Type"] = content_type
    response = make_response(status, content, url)
    response.request, response.connection = prepared, adapter
    response.elapsed = datetime.timedelta(seconds=time.perf_counter() - started)
    return response


class LocalAdapter(BaseAdapter):
    """A ``requests`` transport that calls the registered service instead of opening a socket."""

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
        from tfbatch.handlers.service import make_response

        service = service_for(request.url)
        status, content = _answer(service, request.method or "GET", urlsplit(request.url).path, request.body)
        response = make_response(status, content, request.url)
        response.request = request
        response.connection = self
        return response

    def close(self) -> None:
        pass


def _answer(service: Any, method: str, path: str, body: Any, sent: Any = None) -> tuple[int, bytes]:
    """(status, JSON body) as the loopback REST endpoint answers ``method path``. ``sent``: the
    body as the script passed it (``data=``), which may be the very text its ``json.dumps``
    noted (``jsonenc.written_numbers``): then its numbers go to the model as the array they
    were written from, where reading a MultiRecord payload's megabyte of JSON back took ~20 ms."""
    from tfbatch.tfs.api import TfsApi
    from tfbatch.tfs.codec import encode_predict
    from tfbatch.tfs.rest import call_model_server, decode_json_object, parse_path

    passed = body if sent is None else sent
    try:
        if service is None:
            raise TfbatchError("the model service is gone")
        target = parse_path(path, method.upper())
        if target.action in ("status", "metadata"):
            return 200, call_model_server(service.model_server, target, b"")
        if isinstance(body, str):
            body = body.encode("utf-8")
        elif body is not None and not isinstance(body, bytes):
            body = b"".join(body)  # a generator or file-like body: requests streams it
        if target.action == "predict":
            # As the endpoint (rest.call_model_server): a body of numbers alone is read from its
            # text, or taken as the array its json.dumps noted, before the general way parses it.
            found = TfsApi(service.model_server).numeric_predict(body, target.name, target.version, noted=passed)
            if found is not None:
                return 200, jsonenc.dumps(encode_predict(*found, native=True))
        request = decode_json_object(body or b"", f":{target.action}")
        return 200, service.model_answer(request, target.name, target.version, target.action)
    except TfbatchError as err:
        return err.status, err.to_json()
    except Exception as exc:  # noqa: BLE001 - as the endpoint: a failure is the caller's 500
        err = from_exception(exc)
        return err.status, err.to_json()
