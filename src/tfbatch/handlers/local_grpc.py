"""gRPC calls to ``context.grpc_port`` from a handler in the model's own process, answered
without the socket.

The gRPC half of ``local_rest``. A single ``handler`` written for the SageMaker TFS container
often calls the model over gRPC (seed 003, COMPAT.md §2): it builds a ``PredictRequest``,
opens ``grpc.insecure_channel(f"0.0.0.0:{context.grpc_port}")`` (often a new channel per
record) and calls ``PredictionServiceStub(channel).Predict`` or ``.Predict.future(...)``.
Where that handler runs in the process holding the model (every batch job's single handler,
``tfbatch serve``), each call went out through a TCP connection, grpc's polling thread, the
loopback guard's look-up of the caller's socket and a server thread, and came back the same
way: on the dev VM a 5,000-JPEG job took 13.4 s over gRPC against 8.9 s over REST, whose
calls ``local_rest`` already answers in process.

Once a service with a handler registers its loopback gRPC port here, ``grpc.insecure_channel``
for that port on a loopback host (``localhost``, ``127.0.0.1``, ``0.0.0.0``; with or without
``dns:``/``ipv4:``) returns a :class:`LocalChannel`: a unary call serializes its request with
the stub's serializer, hands the bytes to the very method handler the gRPC endpoint runs
(``tfs/grpc_service.method_handlers``: the same servicer, request budget and errors), and
gives back the response read by the stub's deserializer, so the script gets its own message
classes, as over the wire. What the wire would refuse is refused the same way, with the same
status: a message past either side's size limit (RESOURCE_EXHAUSTED; the channel's
``grpc.max_send_message_length``/``grpc.max_receive_message_length`` options and the server's
limit), a deadline passed (DEADLINE_EXCEEDED), an error of the servicer (its status and
details), a message that does not serialize or parse (INTERNAL, in grpc's words for the step). Errors are raised as ``grpc.RpcError`` objects that are also ``grpc.Call`` and
``grpc.Future``, like grpc's own. ``.future()`` runs the call on a thread of a small pool.
Streaming methods, other ports and hosts, ``secure_channel`` and ``grpc.aio`` go to grpc as
before; so does a name bound by ``from grpc import insecure_channel`` before the service
registered (scripts are imported first).
"""

from __future__ import annotations

import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import grpc

from tfbatch.batching import cooperative

_LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "0.0.0.0")
# grpc's own default for what a client channel may receive; sending is unlimited by default.
DEFAULT_CLIENT_MAX_RECEIVE = 4 * 1024 * 1024


class _Endpoint:
    """A registered port: its method handlers and the server's message limit."""

    def __init__(self, methods: dict[str, Any], max_message_bytes: int):
        self.methods, self.max_message_bytes = methods, max_message_bytes


_endpoints: dict[int, _Endpoint] = {}
_lock = threading.RLock()  # a finalizer (below) may run while this thread holds it
_original_insecure_channel: Callable | None = None


def register(port: int, methods: dict[str, Any], max_message_bytes: int, owner: Any) -> None:
    """Answer ``grpc.insecure_channel`` calls to a loopback host's ``port`` in process with
    ``methods`` (full method name -> ``grpc.RpcMethodHandler``), while ``owner`` lives."""
    with _lock:
        endpoint = _endpoints[port] = _Endpoint(methods, max_message_bytes)
        weakref.finalize(owner, _forget, port, endpoint)
        install()


def unregister(port: int) -> None:
    """Stop answering calls to ``port`` in process (its endpoints are closing)."""
    with _lock:
        _endpoints.pop(port, None)


def _forget(port: int, endpoint: _Endpoint) -> None:
    with _lock:
        if _endpoints.get(port) is endpoint:
            del _endpoints[port]


def endpoint_for(target: str) -> _Endpoint | None:
    """The registered endpoint a channel target names, or None."""
    if not _endpoints or not isinstance(target, str):
        return None
    for scheme in ("dns:///", "dns:", "ipv4:"):
        if target.startswith(scheme):
            target = target[len(scheme):]
            break
    host, _, port = target.rpartition(":")
    if host not in _LOOPBACK_HOSTS or not port.isdigit():
        return None
    return _endpoints.get(int(port))


def install() -> None:
    """Put the diverting ``grpc.insecure_channel`` in place (it diverts registered ports only).
    Called before a script is imported, so that ``from grpc import insecure_channel`` gets it."""
    global _original_insecure_channel
    with _lock:
        if _original_insecure_channel is not None:
            return
        original = _original_insecure_channel = grpc.insecure_channel

        def insecure_channel(target, options=None, compression=None):
            endpoint = endpoint_for(target)
            if endpoint is None:
                return original(target, options, compression)
            return LocalChannel(target, options, compression, endpoint, original)

        insecure_channel.__doc__ = original.__doc__
        grpc.insecure_channel = insecure_channel


def _option(options: Any, name: str, default: int) -> int:
    """A channel option's value (the last one given), or ``default``; a negative one is no limit."""
    value = default
    for key, given in options or ():
        if key == name:
            value = given
    return value


class LocalChannel(grpc.Channel):
    """A channel whose unary calls are answered in this process (see the module's docstring)."""

    def __init__(self, target: str, options: Any, compression: Any, endpoint: _Endpoint, original: Callable):
        self._target, self._options, self._compression = target, options, compression
        self._endpoint, self._original = endpoint, original
        self._wire: grpc.Channel | None = None
        self._wire_lock = threading.Lock()
        self.max_send = _option(options, "grpc.max_send_message_length", -1)
        self.max_receive = _option(options, "grpc.max_receive_message_length", DEFAULT_CLIENT_MAX_RECEIVE)

    def _wire_channel(self) -> grpc.Channel:
        """A real channel to the same target, for what is not answered here (streams)."""
        with self._wire_lock:
            if self._wire is None:
                self._wire = self._original(self._target, self._options, self._compression)
            return self._wire

    def subscribe(self, callback, try_to_connect=False):
        callback(grpc.ChannelConnectivity.READY)  # nothing to connect: ready at once

    def unsubscribe(self, callback):
        pass

    def unary_unary(self, method, request_serializer=None, response_deserializer=None, _registered_method=False):
        return _UnaryUnary(self, method, request_serializer, response_deserializer)

    def unary_stream(self, method, request_serializer=None, response_deserializer=None, _registered_method=False):
        return self._wire_channel().unary_stream(method, request_serializer, response_deserializer)

    def stream_unary(self, method, request_serializer=None, response_deserializer=None, _registered_method=False):
        return self._wire_channel().stream_unary(method, request_serializer, response_deserializer)

    def stream_stream(self, method, request_serializer=None, response_deserializer=None, _registered_method=False):
        return self._wire_channel().stream_stream(method, request_serializer, response_deserializer)

    def close(self):
        with self._wire_lock:
            if self._wire is not None:
                self._wire.close()
                self._wire = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()
        return False


class _Aborted(Exception):
    """Raised by :meth:`_ServicerContext.abort`, as grpc's own ``abort`` raises."""


class _ServicerContext(grpc.ServicerContext):
    """What a servicer method gets for an in-process call: the deadline, the metadata, abort."""

    def __init__(self, deadline: float | None, metadata: Any):
        self._deadline, self._metadata = deadline, tuple(metadata or ())
        self._code, self._details = None, None

    def abort(self, code, details):
        self._code, self._details = code, details
        raise _Aborted(details)

    def abort_with_status(self, status):
        self.abort(status.code, status.details)

    def set_code(self, code):
        self._code = code

    def set_details(self, details):
        self._details = details

    def code(self):
        return self._code

    def details(self):
        return self._details

    def time_remaining(self):
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def invocation_metadata(self):
        return self._metadata

    def peer(self):
        return "local:in-process"

    def peer_identities(self):
        return None

    def peer_identity_key(self):
        return None

    def auth_context(self):
        return {}

    def is_active(self):
        return True

    def add_callback(self, callback):
        return False

    def cancel(self):
        pass

    def send_initial_metadata(self, initial_metadata):
        pass

    def set_trailing_metadata(self, trailing_metadata):
        pass

    def set_compression(self, compression):
        pass

    def disable_next_message_compression(self):
        pass


def _too_large(size: int, limit: int, words: str) -> tuple[Any, str] | None:
    """RESOURCE_EXHAUSTED with grpc's own details (``words`` holds ``{}`` for the sizes)."""
    if 0 <= limit < size:
        return grpc.StatusCode.RESOURCE_EXHAUSTED, words.format(f"{size} vs. {limit}")
    return None


def _transformed(transform: Callable[[Any], Any], message: Any) -> Any:
    """``transform(message)``, or None where it raises (grpc's own ``_common._transform``:
    the caller then answers INTERNAL with grpc's words for the step)."""
    try:
        return transform(message)
    except Exception:  # noqa: BLE001 - a message that cannot be (de)serialized is the call's failure
        return None


class _UnaryUnary(grpc.UnaryUnaryMultiCallable):
    def __init__(self, channel: LocalChannel, method: str, serializer: Any, deserializer: Any):
        self._channel, self._method = channel, method
        self._serialize = serializer or (lambda message: message)
        self._deserialize = deserializer or (lambda data: data)

    def _run(self, request: Any, timeout: float | None, metadata: Any) -> "_Call":
        """The whole call, in this thread: its response, or the status grpc would give."""
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        channel, endpoint = self._channel, self._channel._endpoint
        handler = endpoint.methods.get(self._method)
        if handler is None or handler.unary_unary is None:
            return _Call(None, grpc.StatusCode.UNIMPLEMENTED, f"Method not found: {self._method}", deadline)
        data = _transformed(self._serialize, request)
        if data is None:
            return _Call(None, grpc.StatusCode.INTERNAL, "Exception serializing request!", deadline)
        refused = (_too_large(len(data), channel.max_send, "CLIENT: Sent message larger than max ({})")
                   or _too_large(len(data), endpoint.max_message_bytes, "SERVER: Received message larger than max ({})"))
        if refused:
            return _Call(None, *refused, deadline)
        context = _ServicerContext(deadline, metadata)
        received = _transformed(handler.request_deserializer, data)
        if received is None:
            return _Call(None, grpc.StatusCode.INTERNAL, "Exception deserializing request!", deadline)
        try:
            answer = handler.unary_unary(received, context)
        except _Aborted:
            return _Call(None, context.code(), context.details() or "", deadline)
        except Exception as exc:  # noqa: BLE001 - what grpc's server tells the client
            return _Call(None, grpc.StatusCode.UNKNOWN, f"Exception calling application: {exc}", deadline)
        if deadline is not None and time.monotonic() > deadline:
            return _Call(None, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", deadline)
        if context.code() not in (None, grpc.StatusCode.OK):
            return _Call(None, context.code(), context.details() or "", deadline)
        out = _transformed(handler.response_serializer, answer)
        if out is None:
            return _Call(None, grpc.StatusCode.INTERNAL, "Failed to serialize response!", deadline)
        refused = (_too_large(len(out), endpoint.max_message_bytes, "SERVER: Sent message larger than max ({})")
                   or _too_large(len(out), channel.max_receive,
                                 "Stream removed (CLIENT: Received message larger than max ({}))"))
        if refused:
            return _Call(None, *refused, deadline)
        response = _transformed(self._deserialize, out)
        if response is None:
            return _Call(None, grpc.StatusCode.INTERNAL, "Exception deserializing response!", deadline)
        return _Call(response, grpc.StatusCode.OK, "", deadline)

    def __call__(self, request, timeout=None, metadata=None, credentials=None, wait_for_ready=None,
                 compression=None):
        call = self._run(request, timeout, metadata)
        if call.code() is not grpc.StatusCode.OK:
            raise call
        return call.result()

    def with_call(self, request, timeout=None, metadata=None, credentials=None, wait_for_ready=None,
                  compression=None):
        call = self._run(request, timeout, metadata)
        if call.code() is not grpc.StatusCode.OK:
            raise call
        return call.result(), call

    def future(self, request, timeout=None, metadata=None, credentials=None, wait_for_ready=None,
               compression=None):
        if cooperative.inside():
            # A call taking turns with its hop's others (batching/cooperative.py) runs here: it
            # pauses at the model's batcher, so a pool thread would only add two switches.
            pending: Future = Future()
            try:
                pending.set_result(self._run(request, timeout, metadata))
            except Exception as exc:  # noqa: BLE001 - raised by result(), as from the pool
                pending.set_exception(exc)
            return _FutureCall(pending)
        return _FutureCall(_pool().submit(self._run, request, timeout, metadata))


_executor: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    """Threads for ``.future()`` calls (each waits on the model's batcher), made on first use."""
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=64, thread_name_prefix="tfbatch-local-grpc")
        return _executor


class _Call(grpc.RpcError, grpc.Call, grpc.Future):
    """A finished call: what ``with_call`` returns, what a failed call raises, and what a
    ``.future()`` resolves to (grpc's own objects play all three parts too)."""

    def __init__(self, response: Any, code: Any, details: str, deadline: float | None):
        super().__init__()
        self._response, self._code, self._details, self._deadline = response, code, details, deadline

    # grpc.Call
    def code(self):
        return self._code

    def details(self):
        return self._details

    def initial_metadata(self):
        return ()

    def trailing_metadata(self):
        return ()

    def debug_error_string(self):
        return f"in-process call: {self._code}: {self._details}"

    # grpc.RpcContext
    def is_active(self):
        return False

    def time_remaining(self):
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def add_callback(self, callback):
        return False  # already over: grpc's answer for a finished call

    # grpc.Future
    def cancel(self):
        return False

    def cancelled(self):
        return False

    def running(self):
        return False

    def done(self):
        return True

    def result(self, timeout=None):
        if self._code is not grpc.StatusCode.OK:
            raise self
        return self._response

    def exception(self, timeout=None):
        return None if self._code is grpc.StatusCode.OK else self

    def traceback(self, timeout=None):
        return None if self._code is grpc.StatusCode.OK else self.__traceback__

    def add_done_callback(self, fn):
        fn(self)

    def __str__(self):
        return (f"<{type(self).__name__} of RPC that terminated with:\n\tstatus = {self._code}\n"
                f"\tdetails = \"{self._details}\"\n>")

    __repr__ = __str__


class _FutureCall(grpc.RpcError, grpc.Call, grpc.Future):
    """A ``.future()`` call still running on the pool; once over, it answers as its :class:`_Call`."""

    def __init__(self, pending: Future):
        super().__init__()
        self._pending = pending

    def _call(self, timeout: float | None = None) -> _Call:
        try:
            return self._pending.result(timeout)
        except TimeoutError:
            raise grpc.FutureTimeoutError() from None

    def code(self):
        return self._call().code()

    def details(self):
        return self._call().details()

    def initial_metadata(self):
        return ()

    def trailing_metadata(self):
        return ()

    def debug_error_string(self):
        return self._call().debug_error_string()

    def is_active(self):
        return not self._pending.done()

    def time_remaining(self):
        return self._call().time_remaining() if self._pending.done() else None

    def add_callback(self, callback):
        if self._pending.done():
            return False
        self._pending.add_done_callback(lambda _: callback())
        return True

    def cancel(self):
        return False  # the call is the model's already: it runs to its end

    def cancelled(self):
        return False

    def running(self):
        return not self._pending.done()

    def done(self):
        return self._pending.done()

    def result(self, timeout=None):
        call = self._call(timeout)
        if call.code() is not grpc.StatusCode.OK:
            raise self
        return call.result()

    def exception(self, timeout=None):
        return None if self._call(timeout).code() is grpc.StatusCode.OK else self

    def traceback(self, timeout=None):
        return self._call(timeout).traceback()

    def add_done_callback(self, fn):
        self._pending.add_done_callback(lambda _: fn(self))

    def __str__(self):
        return str(self._call()) if self._pending.done() else f"<{type(self).__name__} of RPC still running>"

    __repr__ = __str__


def wire_channel(target: str, options: Any = None, compression: Any = None) -> grpc.Channel:
    """A channel over the socket to ``target`` whatever is registered here: what
    ``grpc.insecure_channel`` returned before :func:`install`."""
    return (_original_insecure_channel or grpc.insecure_channel)(target, options, compression)
