"""The batch dataflow: every object of an instance, many at a time, from listing to commit.

One list of stages, each a method below, run batch at a time by a few dataflow threads:

    chunks of objects (bounded by count and bytes)   _chunks
 -> read the chunk's objects in parallel             _read      (I/O threads; local and S3)
 -> split into records, form payloads                _split     (None/Line/RecordIO/TFRecord, gzip, caps;
                                                                 ObjectPipeline.object_payloads)
 -> form requests                                    _requests  (input_filter)
 -> predict, across objects, many requests per hop   _predict   (a stage choice, see below)
 -> responses to records, assemble, write, commit    ObjectPipeline.complete (split_multi_response,
                                                     output_filter / JoinSource, Assembler in record
                                                     order, atomic write, ledger group commit)

The predict stage is a choice made once per job (``InstanceRunner``): the handler pool's
``PooledService.invoke_many`` (``input_handler``, the request decode, ``output_handler`` in
worker processes, one joint model call per hop), or the in-process ``InferenceService``
with the hop's requests in flight together so the model server's batcher joins them.
Either way a request answers exactly what ``invoke`` answers for it alone.

The last stage is fed answers: a failed one gets the Invoker's retries (transient
statuses) and isolation (a 400 rerun unbatched), a MultiRecord payload record-by-record
reruns and error lines, so a bad record costs one line and good records never run twice.

An object this flow cannot hold whole (larger than ``max_object_bytes`` raw or split,
unreadable, or a stream that breaks while splitting) goes through the same stages a hop at a
time (``_streamed``): read again from its first byte, split, its requests sent in hops of
the tuner's size to the same predict stage, a few hops ahead, and its answers written in
order as they come (``ObjectPipeline.stream``), in bounded memory whatever its size.
"""

from __future__ import annotations

import io
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from tfbatch.errors import TfbatchError
from tfbatch.handlers.service import InvocationRequest, InvocationResponse
from tfbatch.records import Payload
from tfbatch.storage import ObjectRef
from tfbatch.storage.io import STORE_REQUESTS_IN_FLIGHT, read_small, read_small_many
from tfbatch.storage.uri import is_local
from tfbatch.transform.pipeline import Answer
from tfbatch.transform.report import ObjectResult, RecordFailure

log = logging.getLogger(__name__)

Finished = Callable[[ObjectResult], None]

MAX_OBJECT_BYTES = 64 * 1024 * 1024  # raw or split: larger objects stream, a hop at a time (_streamed)
CHUNK_BYTES = 16 * 1024 * 1024  # a chunk closes at this many listed bytes (or batch_size objects)
HOP_BYTES = 8 * 1024 * 1024  # request bytes per predict hop (or batch_size requests)
STREAM_AHEAD_BYTES = 4 * HOP_BYTES  # request bytes a streamed object keeps in flight (and at least one hop)
LOCAL_WRITERS = 1  # threads that assemble and write local outputs (see Dataflow.__init__)
LOCAL_IO_THREADS = 8  # threads reading a chunk's local files (each a run of them)
REMOTE_IO_THREADS = STORE_REQUESTS_IN_FLIGHT  # requests in flight to a store, reads and writes each


def _answered(part: list[tuple[Payload, TfbatchError | None]],
              answer: list[InvocationResponse] | Future) -> Iterator[Answer]:
    """A hop's payloads with their answers: a response each for those sent, in order."""
    responses = iter(answer.result() if isinstance(answer, Future) else answer)
    for payload, error in part:
        yield (payload, None, error) if error is not None else (payload, next(responses), None)


class _Object:
    """One input object in flight: its payloads, request bodies, then its output parts."""

    __slots__ = ("ref", "had_error_file", "data", "payloads", "bodies", "errors", "responses")

    def __init__(self, ref: ObjectRef, had_error_file: bool):
        self.ref = ref
        self.had_error_file = had_error_file
        self.data: bytes | None = None
        self.payloads: list[Payload] | None = None
        self.bodies: list[tuple[bytes, str]] = []  # (body, content type) per payload that reaches the model
        self.errors: list[TfbatchError | None] = []  # one per payload
        self.responses: list[InvocationResponse] = []  # one per body


class Dataflow:
    """Runs one instance's objects through the stages; ``predict`` has ``invoke_many``."""

    def __init__(self, spec: Any, predict: Any, pipeline: Any, *, batch_size: int, threads: int,
                 io_threads: int | None = None, max_object_bytes: int | None = None, max_in_flight: int | None = None,
                 stats: Callable[[], dict] | None = None, chosen_by: dict[str, str] | None = None):
        self.spec = spec
        self.predict = predict
        self.pipeline = pipeline  # assembles, writes and records each object (transform/pipeline.py)
        self.batch_size = max(1, batch_size)
        self.threads = max(1, threads)
        # Reads: LOCAL_IO_THREADS runs of a chunk for local files; for objects in a store, one
        # task per chunk with up to REMOTE_IO_THREADS requests in flight (``io_threads`` sets
        # both). Each kind has its own pool, whose threads start only when it is used.
        self.io_threads = max(1, io_threads or LOCAL_IO_THREADS)
        self.remote_io_threads = max(1, io_threads or REMOTE_IO_THREADS)
        self.max_object_bytes = max_object_bytes or MAX_OBJECT_BYTES
        self.limit = spec.max_payload_bytes or 0
        # MaxConcurrentTransforms, when given, caps the objects in flight (never below one chunk).
        self.max_in_flight = max_in_flight
        self.extra = stats or dict  # the predict stage's own figures (pool hops, batch sizes), read at the end
        self.chosen_by = chosen_by  # for the report: which flag, default or the tuner set each knob
        self._lock = threading.Lock()
        self.hops = 0
        self.requests = 0
        self.objects = 0
        self.streamed = 0
        self._hop_pool: ThreadPoolExecutor | None = None  # set while run() runs
        # Writer tasks per chunk: one for local outputs, one per I/O thread for remote ones (S3),
        # where each object's write is a round trip. Local outputs also get one writer thread
        # for the whole job: creating many small files in a folder from many threads is slower
        # in sum than from one (the folder's lock, and a GIL hand-off at every system call). On
        # 16 cores the job's 16 writer threads took 5.5 ms a file (4,100 JPEGs/s; tf.data, with
        # one writer, 16,300); there 20,000 O_TMPFILE writes took 24 us each from one thread,
        # 61 from 4, 153 from 16 (benchmarks/transform/profile/sixteen-cores.md).
        local = is_local(getattr(spec, "output", None) or "")
        self.write_runs = 1 if local else self.remote_io_threads
        self.writers = LOCAL_WRITERS if local else max(self.threads, self.write_runs)

    # ---- stages -----------------------------------------------------------------------

    def _next_size(self) -> int:
        """Objects per chunk and requests per hop: the tuner's current size, else ``batch_size``."""
        pick = getattr(self.predict, "next_size", None)
        return pick(self.batch_size) if pick is not None else self.batch_size

    def _chunks(self, refs: Iterable[tuple[ObjectRef, bool]]) -> Iterator[tuple[list[_Object], int]]:
        chunk: list[_Object] = []
        size, want = 0, self._next_size()
        for ref, had_error in refs:
            chunk.append(_Object(ref, had_error))
            size += ref.size or 0
            if len(chunk) >= want or size >= CHUNK_BYTES:
                yield chunk, want
                chunk, size, want = [], 0, self._next_size()
        if chunk:
            yield chunk, want

    def _held(self, obj: _Object) -> bool:
        """Whether this stage reads the object whole: not listed as larger than it holds."""
        return obj.ref.size is None or obj.ref.size <= self.max_object_bytes

    def _keep(self, obj: _Object, data: bytes | Exception) -> None:
        """The object's bytes, unless its read failed or it grew past what this stage holds."""
        obj.data = data if isinstance(data, bytes) and len(data) <= self.max_object_bytes else None

    def _read(self, obj: _Object) -> None:
        """The whole object, or nothing when it is larger than this stage holds (or unreadable)."""
        try:
            if self._held(obj):
                self._keep(obj, read_small(obj.ref.uri, obj.ref.size))
        except Exception:  # noqa: BLE001 - streamed instead (_streamed), which reports it
            obj.data = None

    def _read_all(self, objs: list[_Object]) -> None:
        for obj in objs:
            self._read(obj)

    def _split(self, obj: _Object) -> None:
        """Payloads as the last stage expects them; None if the stream breaks or they grow too large."""
        obj.payloads = None
        try:
            payloads, total = [], 0
            for payload in self.pipeline.object_payloads(io.BytesIO(obj.data), obj.ref.key):
                total += len(payload.body)
                if total > self.max_object_bytes:
                    return  # e.g. a gzip body too large to hold: streamed instead
                payloads.append(payload)
        except Exception:  # noqa: BLE001 - e.g. a corrupt gzip stream: streamed, which reports it
            return
        finally:
            obj.data = None  # the payloads hold what is needed from here on
        obj.payloads = payloads

    def _requests(self, obj: _Object) -> None:
        """A body per payload that reaches the model; an error for one that cannot (bad record, filter)."""
        obj.bodies, obj.errors = [], []
        for payload in obj.payloads:
            body, error = self._request(payload)
            if body is not None:
                obj.bodies.append(body)
            obj.errors.append(error)

    def _request(self, payload: Payload) -> tuple[tuple[bytes, str] | None, TfbatchError | None]:
        """(the request body and its content type, None), or (None, why the payload cannot reach the model)."""
        if payload.error is not None:
            return None, payload.error
        try:
            return (self.pipeline.request_body(payload), payload.content_type or self.spec.content_type), None
        except TfbatchError as exc:
            return None, exc

    def _predict(self, objs: Iterator[_Object], hop: int, done: Callable[[list[_Object]], None]) -> None:
        """Every request of the chunk, across objects, in hops of ``hop`` requests (the first;
        later ones as the tuner says); ``done`` gets the objects each answered hop completes.

        ``objs`` are split as the hops need their requests, a hop's count and ``HOP_BYTES`` ahead
        (splitting one object at a time between hops ran 100,000 CSV lines 0.7 s slower: each
        split held up the next hop). A chunk of a few large objects
        (TFRecord or RecordIO shards, CSV files) holds many hops: up to ``threads`` of them run
        at once on the hop threads, so splitting, decode, the model, the handler workers and
        the writes overlap instead of taking turns: an object is written once the hop holding
        its last request has answered, while later hops run. Responses keep request order.
        """
        flat: deque[tuple[_Object, tuple[bytes, str]]] = deque()  # requests not yet sent
        running: deque[tuple[list[tuple[_Object, tuple[bytes, str]]], Any]] = deque()
        formed: deque[_Object] = deque()  # split, not yet completed, in order
        sent = 0

        def deliver() -> None:
            part, answer = running.popleft()
            responses = answer.result() if isinstance(answer, Future) else answer
            for (obj, _), response in zip(part, responses):
                obj.responses.append(response)
            complete = []
            # An object comes out of ``objs`` with all its requests formed: it is complete once
            # each has its answer (at once for one with none: bad records, filtered, empty).
            while formed and len(formed[0].responses) == len(formed[0].bodies):
                complete.append(formed.popleft())
            if complete:
                done(complete)

        exhausted = False
        source = iter(objs)
        waiting = 0  # bytes of the requests in flat
        while True:
            while not exhausted and (len(flat) < hop or waiting < HOP_BYTES):
                obj = next(source, None)
                if obj is None:
                    exhausted = True
                    break
                formed.append(obj)
                flat.extend((obj, body) for body in obj.bodies)
                waiting += sum(len(body[0]) for body in obj.bodies)
            if not flat:
                break
            if sent:
                # A chunk of shards holds many hops. Each later one is formed only when a hop
                # thread can take it, at the size the tuner hands out then, so the probe times
                # sizes on a job of a few large objects as it does on one of many small ones.
                hop = self._next_size()
            part, size = [], 0
            while flat and len(part) < hop and (not part or size < HOP_BYTES):
                part.append(flat.popleft())
                size += len(part[-1][1][0])
            waiting -= size
            bodies = [body for _, body in part]
            if self._hop_pool is None or (not sent and not flat and exhausted):
                # One hop for the whole chunk (or no hop threads): run it on this thread.
                running.append((part, self._hop(bodies)))
            else:
                running.append((part, self._hop_pool.submit(self._hop, bodies)))
            sent += 1
            while len(running) >= self.threads or running and not isinstance(running[0][1], Future):
                deliver()
        while running:
            deliver()
        if formed:  # objects with no request at all after the last hop (bad records, filtered, empty)
            done(list(formed))

    def _hop(self, bodies: list[tuple[bytes, str]]) -> list[InvocationResponse]:
        reqs = [InvocationRequest(body=body, content_type=content_type, accept=self.spec.accept)
                for body, content_type in bodies]
        responses = self.predict.invoke_many(reqs, timeout_s=self.spec.invocations_timeout)
        with self._lock:
            self.hops += 1
            self.requests += len(reqs)
        return responses

    def _streamed(self, obj: _Object) -> ObjectResult:
        """The object read again from its first byte and run through the same stages a hop at
        a time: split, requests, hops of the tuner's size (or ``HOP_BYTES``) to the predict
        stage on the hop threads, up to ``threads`` hops or ``STREAM_AHEAD_BYTES`` ahead of
        the output, which is written in record order as the answers come."""
        def answers(raw) -> Iterator[Answer]:
            ahead: deque[tuple[list[tuple[Payload, TfbatchError | None]], Any, int]] = deque()
            part: list[tuple[Payload, TfbatchError | None]] = []
            bodies: list[tuple[bytes, str]] = []
            size = in_flight = 0
            hop = self._next_size()
            for payload in self.pipeline.object_payloads(raw, obj.ref.key):
                body, error = self._request(payload)
                part.append((payload, error))
                if body is not None:
                    bodies.append(body)
                    size += len(body[0])
                # By payloads, not requests: a run of bad records is held a hop at a time too.
                if len(part) >= hop or size >= HOP_BYTES:
                    ahead.append((part, self._send(bodies), size))
                    in_flight += size
                    part, bodies, size, hop = [], [], 0, self._next_size()
                    while len(ahead) > self.threads or len(ahead) > 1 and in_flight > STREAM_AHEAD_BYTES:
                        done, answer, sent = ahead.popleft()
                        in_flight -= sent
                        yield from _answered(done, answer)
            if part:
                ahead.append((part, self._send(bodies), size))
            while ahead:
                done, answer, _ = ahead.popleft()
                yield from _answered(done, answer)

        with self._lock:
            self.streamed += 1
        try:
            return self.pipeline.stream(obj.ref, answers, had_error_file=obj.had_error_file)
        except Exception as exc:  # e.g. the ledger write failed after retries
            return self._failed(obj.ref, exc)

    def _send(self, bodies: list[tuple[bytes, str]]) -> list[InvocationResponse] | Future:
        """One hop of a streamed object: on the hop threads, or here when there are none."""
        if not bodies:
            return []
        if self._hop_pool is None:
            return self._hop(bodies)
        return self._hop_pool.submit(self._hop, bodies)

    # ---- driver -----------------------------------------------------------------------

    def _start_reads(self, objs: list[_Object], reader: ThreadPoolExecutor, fetcher: ThreadPoolExecutor
                     ) -> list[Future]:
        # One task per I/O thread, each reading a run of the chunk's objects: a task per object
        # cost a Future, a queue hand-off and a wake-up each, more CPU than reading a small file.
        # Objects in a store (S3): one task per chunk, whose GETs are in flight together
        # (``_fetch_all``), since each is a round trip, not CPU.
        # Started when the chunk is submitted, so a chunk waiting for a dataflow thread is read
        # while the others run the model.
        if not is_local(objs[0].ref.uri):
            return [fetcher.submit(self._fetch_all, objs)]
        runs = min(self.io_threads, len(objs))
        return [reader.submit(self._read_all, objs[k::runs]) for k in range(runs)]

    def _fetch_all(self, objs: list[_Object]) -> None:
        """A chunk of objects in a store: their GETs in flight together, ``remote_io_threads``
        at most (``storage.io.read_small_many``); what fails is streamed, as in ``_read``."""
        wanted = [obj for obj in objs if self._held(obj)]
        got = read_small_many([(obj.ref.uri, obj.ref.size) for obj in wanted], self.remote_io_threads)
        for obj, data in zip(wanted, got):
            self._keep(obj, data)

    def _chunk(self, objs: list[_Object], hop: int, reads: list[Future], finished: Finished,
               writer: ThreadPoolExecutor) -> list[Future]:
        for f in reads:
            f.result()
        writes: list[Future] = []

        def formed() -> Iterator[_Object]:
            for obj in objs:
                if obj.data is not None:
                    self._split(obj)
                if obj.payloads is None:
                    # Nothing of it reached user code or the model: streamed from its first byte.
                    finished(self._streamed(obj))
                else:
                    self._requests(obj)
                    yield obj

        def done(complete: list[_Object]) -> None:
            # The last stage (assemble, write, record) on the writer threads: this thread goes
            # on to the next hops meanwhile, as a tf.data script's writer thread. Local outputs:
            # one task per run of objects (the kernel serialises creations in one folder
            # anyway); remote ones: a run per writer thread, so PUTs overlap.
            runs = max(1, min(self.write_runs, len(complete)))
            writes.extend(writer.submit(self._complete_all, complete[k::runs], finished) for k in range(runs))

        self._predict(formed(), hop, done)
        return writes

    def _complete_all(self, formed: list[_Object], finished: Finished) -> None:
        for obj in formed:
            answers = iter(obj.responses)
            answered = [(p, None, err) if err is not None else (p, next(answers), None)
                        for p, err in zip(obj.payloads, obj.errors)]
            result = self._complete(obj, answered)
            with self._lock:
                self.objects += 1
            finished(result)
            obj.payloads = obj.bodies = obj.responses = obj.errors = None  # type: ignore[assignment]

    def _complete(self, obj: _Object, answered: list) -> ObjectResult:
        """Assemble, write and record the object; failed answers are retried or isolated there."""
        try:
            return self.pipeline.complete(obj.ref, answered, had_error_file=obj.had_error_file)
        except Exception as exc:  # e.g. the ledger write failed after retries
            return self._failed(obj.ref, exc)

    @staticmethod
    def _failed(ref: ObjectRef, exc: Exception) -> ObjectResult:
        log.exception("object %s failed", ref.key)
        failure = RecordFailure.from_exception(ref.key, None, None, exc)
        return ObjectResult(key=ref.key, ok=False, failed_records=1, failures=[failure])

    def run(self, refs: Iterable[tuple[ObjectRef, bool]], finished: Finished) -> None:
        """``refs`` yields (object, had an error file); every object ends in ``finished`` once.

        ``threads`` chunks run at once (reads, splitting and the model overlap: TensorFlow and
        the handler pool work off the GIL), one more is being read and one more written, so
        memory is bounded by chunks (``in_flight_objects``).
        """
        pending: deque[tuple[int, Future]] = deque()

        def settle() -> None:
            for written in pending.popleft()[1].result():  # the chunk's run, then its writes
                written.result()

        # The hop pool is entered first so it shuts down last, after every chunk that uses it;
        # the writer pool outlives the dataflow threads that submit to it.
        # As many hops in flight as chunks: memory stays bounded by what the chunks hold.
        with ThreadPoolExecutor(self.threads, thread_name_prefix="dataflow-hop") as hops, \
                ThreadPoolExecutor(self.writers, thread_name_prefix="dataflow-write") as writer, \
                ThreadPoolExecutor(self.threads, thread_name_prefix="dataflow") as flows, \
                ThreadPoolExecutor(self.io_threads, thread_name_prefix="dataflow-read") as reader, \
                ThreadPoolExecutor(self.threads + 2, thread_name_prefix="dataflow-fetch") as fetcher:
            self._hop_pool = hops
            for chunk, hop in self._chunks(refs):
                # Room first, then the chunk's reads: at most threads + 2 chunks hold data at once
                # (``in_flight_objects``), and MaxConcurrentTransforms objects when it is given.
                while pending and (len(pending) >= self.threads + 2 or self.max_in_flight
                                   and sum(n for n, _ in pending) + len(chunk) > self.max_in_flight):
                    settle()
                reads = self._start_reads(chunk, reader, fetcher)
                pending.append((len(chunk), flows.submit(self._chunk, chunk, hop, reads, finished, writer)))
            while pending:
                settle()

    @property
    def in_flight_objects(self) -> int:
        """Objects read or being run at most at once: the chunks the driver keeps submitted."""
        tuner = getattr(self.predict, "tuner", None)
        size = self.batch_size if tuner is None else tuner.chosen
        natural = size * (self.threads + 2)
        return min(natural, max(size, self.max_in_flight)) if self.max_in_flight else natural

    @property
    def stats(self) -> dict[str, Any]:
        tuner = getattr(self.predict, "tuner", None)
        extra = self.extra()
        return {"lane": "dataflow", "predict": getattr(self.predict, "name", "handler-pool"),
                "batches": self.hops, "rows": self.requests, "objects": self.objects,
                "max_batch_size": self.batch_size if tuner is None else tuner.chosen,
                "workers": self.threads, "in_flight_objects": self.in_flight_objects, "chosen_by": self.chosen_by,
                **extra, "objects_run_alone": extra.get("objects_run_alone", 0), "objects_streamed": self.streamed}
