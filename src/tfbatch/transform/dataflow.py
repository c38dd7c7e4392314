"""The batch dataflow: every object of an instance, many at a time, from listing to commit.

One list of stages, each a method below, run batch at a time by a few dataflow threads:

    chunks of objects (bounded by count and bytes)   _chunks
 -> read the chunk's objects in parallel             _read      (I/O threads; local and S3)
 -> split into records, form payloads                _split     (None/Line/RecordIO/TFRecord, gzip, caps)
 -> form requests                                    _requests  (input_filter)
 -> predict, many requests per hop                   _predict   (a stage choice, see below)
 -> responses back to records                        _outputs   (split_multi_response, output_filter / JoinSource)
 -> assemble each object in record order, write      _write     (atomic, not fsynced)
 -> group commit                                     ledger.record (one syncfs + journal per group)

The predict stage is a choice made once per job (``InstanceRunner``): the handler pool's
``PooledService.invoke_many`` (``input_handler``, the request decode, ``output_handler`` in
worker processes, one joint model call per hop), or the in-process ``InferenceService``
with the hop's requests in flight together so the model server's batcher joins them.
Either way a request answers exactly what ``invoke`` answers for it alone, and the stages
around it are the per-object pipeline's own functions, so outputs are byte for byte the same.

Only the plain case is done here: an object whose every payload was answered 200 and
whose outputs all post-processed. Anything else (unreadable, too large to hold, a payload
error, a failed request, a bad output) runs again, from its first byte, through the
per-object pipeline, whose retries, isolation and error lines report it exactly as
before; nothing of such an object is written here. Objects larger than ``max_object_bytes``
(compressed or not) also go there, because that pipeline streams them in bounded memory.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_all
from typing import Any

from tfbatch.errors import RequestTimeout, TfbatchError
from tfbatch.handlers.service import InvocationRequest, InvocationResponse
from tfbatch.records import Assembler, DataProcessor, Payload, form_payloads, iter_records, open_input, \
    split_multi_response
from tfbatch.storage import ObjectRef, atomic_write
from tfbatch.storage.io import read_small
from tfbatch.transform.report import ObjectResult

log = logging.getLogger(__name__)

Fallback = Callable[[ObjectRef, bool], ObjectResult]
Finished = Callable[[ObjectResult], None]

MAX_OBJECT_BYTES = 64 * 1024 * 1024  # raw or split: larger objects stream through the per-object pipeline
CHUNK_BYTES = 16 * 1024 * 1024  # a chunk closes at this many listed bytes (or batch_size objects)
HOP_BYTES = 8 * 1024 * 1024  # request bytes per predict hop (or batch_size requests)


class _Object:
    """One input object in flight: its payloads, request bodies, then its output parts."""

    __slots__ = ("ref", "had_error_file", "data", "payloads", "bodies", "responses", "started")

    def __init__(self, ref: ObjectRef, had_error_file: bool):
        self.ref = ref
        self.had_error_file = had_error_file
        self.data: bytes | None = None
        self.payloads: list[Payload] | None = None
        self.bodies: list[bytes] = []
        self.responses: list[InvocationResponse] = []
        self.started = time.monotonic()


class InProcessPredict:
    """The predict stage without a handler pool: the hop's requests in flight together.

    ``InferenceService.invoke`` one request per thread, so the model server's dynamic
    batcher joins their rows into model batches; a stuck call answers a timeout (the
    per-object pipeline then runs that object again, with its own timeout and retries).
    """

    def __init__(self, service: Any, threads: int):
        self.service = service
        self.pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="predict")

    def invoke_many(self, reqs: list[InvocationRequest], timeout_s: float | None = None) -> list[InvocationResponse]:
        futures = [self.pool.submit(self.service.invoke, req) for req in reqs]
        wait_all(futures, timeout=timeout_s)
        out = []
        for future in futures:
            try:
                out.append(future.result(timeout=0))
            except FutureTimeout:
                err = RequestTimeout(f"invocation did not answer within InvocationsTimeoutInSeconds={timeout_s:g}")
                out.append(InvocationResponse.from_error(err))
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class Dataflow:
    """Runs one instance's objects through the stages; ``predict`` has ``invoke_many``."""

    def __init__(self, spec: Any, predict: Any, ledger: Any, *, batch_size: int, threads: int,
                 io_threads: int = 8, max_object_bytes: int = MAX_OBJECT_BYTES,
                 stats: Callable[[], dict] | None = None):
        self.spec = spec
        self.predict = predict
        self.ledger = ledger
        self.batch_size = max(1, batch_size)
        self.threads = max(1, threads)
        self.io_threads = max(1, io_threads)
        self.max_object_bytes = max_object_bytes
        self.processor = DataProcessor(spec.input_filter, spec.output_filter, spec.join_source,
                                       spec.content_type, spec.accept)
        self.limit = spec.max_payload_bytes or 0
        self.extra = stats or dict  # the predict stage's own figures (the handler pool's hops), read at the end
        self._lock = threading.Lock()
        self.hops = 0
        self.requests = 0
        self.objects = 0
        self.fallbacks = 0

    # ---- stages -----------------------------------------------------------------------

    def _chunks(self, refs: Iterable[tuple[ObjectRef, bool]]) -> Iterator[list[_Object]]:
        chunk: list[_Object] = []
        size = 0
        for ref, had_error in refs:
            chunk.append(_Object(ref, had_error))
            size += ref.size or 0
            if len(chunk) >= self.batch_size or size >= CHUNK_BYTES:
                yield chunk
                chunk, size = [], 0
        if chunk:
            yield chunk

    def _read(self, obj: _Object) -> None:
        """The whole object, or nothing when it is larger than this stage holds (or unreadable)."""
        try:
            if obj.ref.size is not None and obj.ref.size > self.max_object_bytes:
                return
            data = read_small(obj.ref.uri, obj.ref.size)
            obj.data = data if len(data) <= self.max_object_bytes else None
        except Exception:  # noqa: BLE001 - the per-object pipeline reports it
            obj.data = None

    def _split(self, obj: _Object) -> None:
        """Payloads as the per-object pipeline forms them; None if any is bad or they grow too large."""
        spec, key = self.spec, obj.ref.key
        obj.payloads = None
        try:
            stream = open_input(io.BytesIO(obj.data), spec.compression, source=key)
            records = iter_records(stream, spec.split_type, source=key, limit=spec.record_limit)
            payloads, total = [], 0
            for payload in form_payloads(records, spec.batch_strategy, spec.max_payload_bytes, source=key):
                total += len(payload.body)
                if payload.error is not None or total > self.max_object_bytes:
                    return  # a bad record, or a gzip body too large to hold: the pipeline streams it
                payloads.append(payload)
        except Exception:  # noqa: BLE001 - e.g. a corrupt gzip stream: reported by the pipeline
            return
        finally:
            obj.data = None  # the payloads hold what is needed from here on
        if spec.split_type == "None" and not payloads:
            return  # an empty body is bad input: the pipeline says so
        obj.payloads = payloads

    def _requests(self, obj: _Object) -> bool:
        try:
            obj.bodies = [self.processor.filter_input(p.body) if self.processor.active else p.body
                          for p in obj.payloads]
        except TfbatchError:
            return False
        return True

    def _predict(self, objs: list[_Object]) -> None:
        """Every request of the chunk, across objects, in hops of ``batch_size`` requests."""
        flat = [(obj, body) for obj in objs for body in obj.bodies]
        start = 0
        while start < len(flat):
            end, size = start, 0
            while end < len(flat) and end - start < self.batch_size and (end == start or size < HOP_BYTES):
                size += len(flat[end][1])
                end += 1
            reqs = [InvocationRequest(body=body, content_type=self.spec.content_type, accept=self.spec.accept)
                    for _, body in flat[start:end]]
            responses = self.predict.invoke_many(reqs, timeout_s=self.spec.invocations_timeout)
            for (obj, _), response in zip(flat[start:end], responses):
                obj.responses.append(response)
            with self._lock:
                self.hops += 1
                self.requests += len(reqs)
            start = end

    def _outputs(self, obj: _Object) -> list[bytes] | None:
        """The object's output parts in record order, as the per-object pipeline adds them."""
        parts: list[bytes] = []
        for payload, response in zip(obj.payloads, obj.responses):
            if not response.ok:
                return None
            outputs = split_multi_response(payload, response.body)
            try:
                if outputs is None:  # the response answers the payload as a whole
                    parts.append(self._post(payload.body, response.body))
                else:
                    parts.extend(self._post(r.data, out) for r, out in zip(payload.records, outputs))
            except TfbatchError:
                return None
        return parts

    def _post(self, record_data: bytes, output: bytes) -> bytes:
        return self.processor.process_output(record_data, output) if self.processor.active else output

    def _write(self, obj: _Object, outputs: list[bytes]) -> ObjectResult:
        from tfbatch.transform.batched import ListSink
        from tfbatch.transform.pipeline import output_uri

        parts: list[bytes] = []
        assembler = Assembler(self.spec.assemble_with, ListSink(parts))
        for output in outputs:
            assembler.add(output)
        # Not fsynced: the ledger's group commit makes the group's outputs durable before
        # its journal says they are done.
        atomic_write(output_uri(self.spec, obj.ref.key), parts, durable=False)
        return ObjectResult(key=obj.ref.key, ok=True, records=sum(len(p.records) for p in obj.payloads),
                            output_bytes=assembler.bytes_written, written=True,
                            seconds=time.monotonic() - obj.started)

    # ---- driver -----------------------------------------------------------------------

    def _chunk(self, objs: list[_Object], reader: ThreadPoolExecutor, finished: Finished,
               fallback: Fallback) -> None:
        for _ in reader.map(self._read, objs):
            pass
        plain: list[_Object] = []
        for obj in objs:
            if obj.data is not None:
                self._split(obj)
            if obj.payloads is not None and self._requests(obj):
                plain.append(obj)
            else:
                self._fallback(obj, finished, fallback)
        self._predict(plain)
        for obj in plain:
            outputs = self._outputs(obj)
            result = None
            if outputs is not None:
                try:
                    result = self._write(obj, outputs)
                except Exception:  # noqa: BLE001 - e.g. the write failed: the pipeline reports it
                    log.debug("writing %s failed; object runs alone", obj.ref.key, exc_info=True)
            if result is None:
                self._fallback(obj, finished, fallback)
                continue
            self.ledger.record(result)
            with self._lock:
                self.objects += 1
            finished(result)
        for obj in objs:
            obj.payloads = obj.bodies = obj.responses = None  # type: ignore[assignment]

    def _fallback(self, obj: _Object, finished: Finished, fallback: Fallback) -> None:
        with self._lock:
            self.fallbacks += 1
        finished(fallback(obj.ref, obj.had_error_file))

    def run(self, refs: Iterable[tuple[ObjectRef, bool]], fallback: Fallback, finished: Finished) -> None:
        """``refs`` yields (object, had an error file); every object ends in ``finished`` once."""
        pending: deque[Future] = deque()
        with ThreadPoolExecutor(self.threads, thread_name_prefix="dataflow") as flows, \
                ThreadPoolExecutor(self.io_threads, thread_name_prefix="dataflow-read") as reader:
            for chunk in self._chunks(refs):
                pending.append(flows.submit(self._chunk, chunk, reader, finished, fallback))
                while len(pending) > self.threads:  # bounded: one chunk queued behind the running ones
                    pending.popleft().result()
            while pending:
                pending.popleft().result()

    @property
    def stats(self) -> dict[str, Any]:
        return {"lane": "dataflow", "batches": self.hops, "rows": self.requests, "objects": self.objects,
                "max_batch_size": self.batch_size, "lane_threads": self.threads,
                "objects_run_alone": self.fallbacks, **self.extra()}
