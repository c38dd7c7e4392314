"""Invocations for a batch job: bounded in flight, timed out, retried, isolated on failure.

Requests run on a shared thread pool against the in-process InferenceService, whose
model server batches rows across every request in flight — so the number in flight is
what lets the batcher fill model batches. The waiting side enforces
InvocationsTimeoutInSeconds (a Python call cannot be interrupted; a stuck call keeps its
thread, the payload is retried or failed) and InvocationsMaxRetries (transient failures
only: 429/503/504 — a 400 stays a 400).

A batched model call that fails fails every request in that batch, including innocent
ones from other records and files. So a request that failed (400 or a non-transient 5xx)
is run once more on its own, unbatched: if it succeeds, a neighbour was to blame; if not, the
failure is its own.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from tfbatch.errors import RequestTimeout
from tfbatch.handlers.service import InferenceService, InvocationRequest, InvocationResponse
from tfbatch.transform.report import TRANSIENT_STATUS

# Besides server errors, a 400: TensorFlow reports a bad value in one row of a batch
# (InvalidArgumentError) as a 400 for every request in that batch.
ISOLATE_STATUS = frozenset({400})

# Requests sent together to one ``invoke_many`` (the records of a failed payload, retries,
# isolated reruns), at most this many to a group.
RERUN_GROUP = 128


class _Isolation:
    """The same service over an unbatched view of its model server (``ModelServer.unbatched``).

    Scripts that POST to ``context.rest_uri`` need loopback endpoints over that view too;
    they are started on the first failure only, since most jobs never need them.
    """

    def __init__(self, service: InferenceService):
        self.service = service
        settings = getattr(service.model_server, "settings", None)
        self.needed = bool(settings is not None and getattr(settings, "enable_batching", False))
        self._isolated: InferenceService | None = None
        self._endpoints = None
        self._lock = threading.Lock()

    def get(self) -> InferenceService:
        with self._lock:
            if self._isolated is None:
                view = self.service.model_server.unbatched()
                ports: dict[str, int | None] = {}
                if self.service.rest_port is not None or self.service.grpc_port is not None:
                    from tfbatch.tfs.loopback import LoopbackEndpoints

                    self._endpoints = LoopbackEndpoints(view).start()
                    ports = {"rest_port": self._endpoints.rest_port, "grpc_port": self._endpoints.grpc_port}
                self._isolated = self.service.with_model_server(view, **ports)
            return self._isolated

    def close(self) -> None:
        with self._lock:
            if self._endpoints is not None:
                self._endpoints.stop()
                self._endpoints = None


class _Call:
    __slots__ = ("request", "future", "started", "attempt", "isolated")

    def __init__(self, request: InvocationRequest, attempt: int, isolated: bool):
        self.request = request
        self.future: Future | None = None
        self.started: float | None = None
        self.attempt = attempt
        self.isolated = isolated


class Invoker:
    def __init__(
        self,
        service: InferenceService,
        *,
        concurrency: int,
        timeout_s: float,
        max_retries: int,
        content_type: str | None,
        accept: str | None,
        retry_delay_s: float = 0.05,
    ):
        self.service = service
        self.isolation = _Isolation(service)
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.content_type = content_type
        self.accept = accept
        self.retry_delay_s = retry_delay_s
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="invoke")
        # Bounds requests submitted but not finished: bodies in memory, and the pool queue.
        self._slots = threading.BoundedSemaphore(concurrency * 2)
        self.retries = 0
        self.isolations = 0

    def _request(self, body: bytes, content_type: str | None = None) -> InvocationRequest:
        """``body`` as a request of the job's content type, or of ``content_type`` when given."""
        return InvocationRequest(body=body, content_type=content_type or self.content_type, accept=self.accept)

    def submit_many(self, bodies: list[tuple[bytes, str | None]]) -> list[_Call]:
        """Calls for many (body, content type) pairs, submitted at once, RERUN_GROUP to a group
        (``_submit_group``). ``result`` and ``results`` apply the same timeouts, retries and
        isolation to each as to a call submitted alone."""
        return self._submit_groups([_Call(self._request(body, content_type), 0, False)
                                    for body, content_type in bodies])

    def _submit_groups(self, calls: list[_Call]) -> list[_Call]:
        """``calls`` (all isolated or none), RERUN_GROUP to a ``_submit_group``; each call gets its future."""
        for start in range(0, len(calls), RERUN_GROUP):
            self._submit_group(calls[start:start + RERUN_GROUP])
        return calls

    def _submit(self, call: _Call) -> _Call:
        self._slots.acquire()
        service = self.isolation.get() if call.isolated else self.service
        try:
            call.future = self.pool.submit(self._run, call, service)
        except BaseException:
            self._slots.release()
            raise
        call.future.add_done_callback(lambda _f: self._slots.release())
        return call

    def _submit_group(self, calls: list[_Call]) -> None:
        """``calls`` (all isolated or none) answered by one ``invoke_many`` of their service where
        it has one (a handler pool: one round trip per worker process for all of them, each
        request still answered alone), else each submitted alone."""
        if not calls:
            return
        service = self.isolation.get() if calls[0].isolated else self.service
        many = getattr(service, "invoke_many", None)
        if many is None or len(calls) < 2:
            for call in calls:
                self._submit(call)
            return
        for call in calls:
            call.future = Future()
        self._slots.acquire()
        try:
            group = self.pool.submit(self._run_many, calls, many)
        except BaseException:
            self._slots.release()
            raise
        group.add_done_callback(lambda _f: self._slots.release())

    def answered(self, response: InvocationResponse, body: bytes) -> _Call:
        """A call whose first attempt already ran elsewhere (the dataflow's hop): ``result``
        applies the same retries and isolation to it as to one submitted here."""
        call = _Call(self._request(body), 0, False)
        call.future = Future()
        call.future.set_result(response)
        call.started = time.monotonic()
        return call

    @staticmethod
    def _run(call: _Call, service: InferenceService) -> InvocationResponse:
        call.started = time.monotonic()
        return service.invoke(call.request)

    def _run_many(self, calls: list[_Call], many) -> None:
        started = time.monotonic()
        for call in calls:
            call.started = started
        try:
            responses = many([call.request for call in calls], timeout_s=self.timeout_s)
        except BaseException as exc:  # invoke_many answers every request; should it raise, each call does
            for call in calls:
                call.future.set_exception(exc)
            raise
        for call, response in zip(calls, responses):
            call.future.set_result(response)

    def _again(self, call: _Call, response: InvocationResponse) -> _Call | None:
        """The call to run next for ``response`` (a retry, or the request isolated), or None:
        the response is final."""
        if response.status in TRANSIENT_STATUS and call.attempt < self.max_retries:
            self.retries += 1
            return _Call(call.request, call.attempt + 1, call.isolated)
        if response.status in ISOLATE_STATUS or response.status >= 500 and response.status not in TRANSIENT_STATUS:
            if call.isolated or not self.isolation.needed or response.own:
                return None
            self.isolations += 1
            return _Call(call.request, call.attempt, True)
        return None

    def _backoff(self, attempts: list[int]) -> None:
        """The pause before a retry's attempt (1, 2, ...); none before an isolated rerun."""
        if attempts and max(attempts) > 0:
            time.sleep(self.retry_delay_s * (2 ** (max(attempts) - 1)))

    def result(self, call: _Call) -> InvocationResponse:
        """The final response for ``call``, after timeouts, retries and isolation."""
        return self.results([call])[0]

    def results(self, calls: list[_Call]) -> list[InvocationResponse]:
        """``result`` of each call, with the reruns of many sent together: a round's retries, and
        its isolated reruns, go in groups (``_submit_groups``). A file of bad
        records had made a round trip to the handler workers for each failed record, one after
        another."""
        out: list[InvocationResponse | None] = [None] * len(calls)
        current = list(calls)
        pending = list(enumerate(current))
        while pending:
            reruns: list[tuple[int, _Call]] = []
            for n, call in pending:
                response = self._wait(call)
                again = self._again(call, response)
                if again is None:
                    out[n] = response
                else:
                    reruns.append((n, again))
            self._backoff([again.attempt for n, again in reruns if again.attempt > current[n].attempt])
            for isolated in (False, True):
                self._submit_groups([again for _, again in reruns if again.isolated is isolated])
            for n, again in reruns:
                current[n] = again
            pending = reruns
        return out  # type: ignore[return-value]

    def _wait(self, call: _Call) -> InvocationResponse:
        assert call.future is not None
        while True:
            started = call.started
            # The clock starts when the request starts running, not while it queues.
            wait = min(self.timeout_s, 1.0) if started is None else started + self.timeout_s - time.monotonic()
            try:
                return call.future.result(timeout=max(wait, 0.0))
            except FutureTimeout:
                if call.started is not None and time.monotonic() - call.started >= self.timeout_s:
                    err = RequestTimeout(
                        f"invocation did not answer within InvocationsTimeoutInSeconds={self.timeout_s:g}"
                    )
                    return InvocationResponse.from_error(err)

    def close(self) -> None:
        # Stuck (timed-out) calls may still hold threads; do not wait for them.
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.isolation.close()
