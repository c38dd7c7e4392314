"""Whole batches from reader to model to writer, for image jobs with no user script.

The general path (pipeline.py) gives every object a thread, every payload a Future, and
funnels them through the model server's dynamic batcher: right for scripts, splitting and
filters, but on a cheap model its per-image hand-offs cost more CPU than the model. When a
job is one image per object, SingleRecord, with no script and no filters, every object's
answer is exactly ``default handling(one image)``, so this lane reads a batch of objects,
runs the model once on all of them and writes each object's row as the general path would
have written it, byte for byte (same codec, same one-row slice, same Assembler).

Stages hand over whole batches: a few lane threads each read a batch and run the model on
it (TensorFlow decodes in the graph and releases the GIL, so batches overlap on the cores),
one writer thread encodes rows, writes outputs, makes them durable once per batch and then
writes the ledger entries. Any object the lane
cannot answer the simple way (too large, unreadable, empty, or in a batch the model
refused) goes through the general path on its own, so every error is reported exactly as
before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from tfbatch.records import Assembler
from tfbatch.records.images import check_image
from tfbatch.storage import ObjectRef, atomic_write
from tfbatch.storage.io import read_small
from tfbatch.transform.report import ObjectResult

log = logging.getLogger(__name__)

Fallback = Callable[[ObjectRef], ObjectResult]
Finished = Callable[[ObjectResult], None]


def lane_blocker(spec: Any, service: Any) -> str | None:
    """Why this job cannot take the batch lane (None: it can). Pure: reads the spec and service."""
    from tfbatch.handlers.defaults import is_image

    if service.handlers is not None:
        return "the model has a script (code/inference.py)"
    if not is_image(spec.content_type):
        return f"content type {spec.content_type!r} is not an image type"
    if spec.split_type != "None" or spec.batch_strategy != "SingleRecord" or spec.compression != "None":
        return "records are split, batched or compressed"
    if spec.input_filter or spec.output_filter or spec.join_source != "None":
        return "input/output filters or JoinSource are set"
    servable = service.model_server.resolve(None)
    sig = servable.signatures[servable.default_signature]
    if len(sig.inputs) != 1 or next(iter(sig.inputs.values())).dtype != "string":
        return "the default signature does not take encoded image bytes (one string input)"
    for info in (*sig.inputs.values(), *sig.outputs.values()):
        if info.shape is None or not info.shape or info.shape[0] is not None:
            return "the signature has no free batch dimension"
    return None


class _Item:
    __slots__ = ("ref", "body", "had_error_file")

    def __init__(self, ref: ObjectRef, had_error_file: bool):
        self.ref = ref
        self.body: bytes | None = None
        self.had_error_file = had_error_file


class BatchLane:
    """Runs the objects of one instance in batches of ``batch_size`` through one servable."""

    def __init__(self, spec: Any, service: Any, ledger: Any, *, batch_size: int, workers: int,
                 batches_ahead: int = 1, tuner: Any = None, max_in_flight: int | None = None,
                 chosen_by: dict[str, str] | None = None):
        self.spec = spec
        self.ledger = ledger
        self.batch_size = max(1, batch_size)
        self.workers = max(1, workers)
        self.tuner = tuner
        self.chosen_by = chosen_by  # for the report: which flag, default or the tuner set each knob
        self._lock = threading.Lock()
        self.batches_ahead = max(1, batches_ahead)
        # MaxConcurrentTransforms, when given, caps the objects submitted at once (never below one batch).
        self.max_in_flight = max_in_flight
        self.servable = service.model_server.resolve(None)
        self.sig = self.servable.signatures[self.servable.default_signature]
        (self.input_key,) = self.sig.inputs
        self.limit = spec.max_payload_bytes or 0
        self.max_image_pixels = spec.max_image_pixels
        self.batches = 0
        self.rows = 0
        self.failed_batches = 0
        self.fallbacks = 0
        self._histogram: Counter[int] = Counter()

    # ---- stages -----------------------------------------------------------------------

    def _read(self, items: list[_Item]) -> list[_Item]:
        """One reader task: a whole batch, read (and decoded for tensor inputs) in order."""
        for item in items:
            try:
                if self.limit and item.ref.size is not None and item.ref.size > self.limit:
                    continue
                body = read_small(item.ref.uri, item.ref.size)
                if not body or (self.limit and len(body) > self.limit):
                    continue
                # The same header check as the one-object path (format, pixel budget); an image
                # that fails it goes there to be reported, never into a model batch.
                check_image(body, self.max_image_pixels)
                item.body = body
            except Exception:  # noqa: BLE001 - the general path reports it properly
                item.body = None
        return items

    def next_batch_size(self) -> int:
        if self.tuner is None:
            return self.batch_size
        with self._lock:
            return self.tuner.next_size()

    def _ready(self, item: _Item) -> bool:
        return item.body is not None

    def _model(self, items: list[_Item]) -> dict[str, np.ndarray] | None:
        inputs = {self.input_key: np.array([i.body for i in items], dtype=object)}
        started = time.monotonic()
        try:
            arrays = self.servable.prepare_inputs(self.sig.name, inputs)
            outputs = self.servable.run_prepared(self.sig.name, arrays)
        except Exception as exc:  # noqa: BLE001 - one bad image fails the batch; isolate below
            log.debug("batch of %d failed (%s); objects run one by one", len(items), exc)
            with self._lock:
                self.failed_batches += 1
            return None
        seconds = time.monotonic() - started
        with self._lock:
            self.batches += 1
            self.rows += len(items)
            self._histogram[len(items)] += 1
            if self.tuner is not None:
                self.tuner.observe(len(items), started + seconds, time.process_time())  # completions
        return {k: np.asarray(v) for k, v in outputs.items()}

    def _write(self, items: list[_Item], outputs: dict[str, np.ndarray], started: float,
               finished: Finished, fallback: Fallback) -> None:
        from tfbatch.runtime import jsonenc
        from tfbatch.tfs.codec import encode_predict
        from tfbatch.transform.pipeline import output_uri

        written: list[tuple[_Item, ObjectResult]] = []
        for row, item in enumerate(items):
            try:
                written.append((item, self._write_one(item, {k: v[row:row + 1] for k, v in outputs.items()},
                                                      started, jsonenc, encode_predict, output_uri)))
            except Exception:  # noqa: BLE001 - e.g. the write failed: the general path reports it
                log.debug("writing %s failed; object runs alone", item.ref.key, exc_info=True)
                with self._lock:
                    self.fallbacks += 1
                finished(fallback(item.ref, item.had_error_file))
        if not written:
            return
        # Outputs were written without fsync; the ledger's group commit makes them durable
        # (one syncfs) before the journal record that says they are done.
        for _, result in written:
            self.ledger.record(result)
            finished(result)

    def _write_one(self, item: _Item, row: dict[str, np.ndarray], started: float, jsonenc, encode_predict,
                   output_uri) -> ObjectResult:
        # The one-row slice through the same codec gives the bytes a one-image request gives.
        body = jsonenc.dumps(encode_predict(row, "row", self.sig, native=True))
        parts: list[bytes] = []
        assembler = Assembler(self.spec.assemble_with, ListSink(parts))
        assembler.add(body)
        atomic_write(output_uri(self.spec, item.ref.key), parts, durable=False)
        return ObjectResult(key=item.ref.key, ok=True, records=1, output_bytes=assembler.bytes_written,
                            written=True, seconds=time.monotonic() - started)

    # ---- driver -----------------------------------------------------------------------

    def run(self, refs: Iterable[tuple[ObjectRef, bool]], fallback: Fallback, finished: Finished) -> None:
        """``refs`` yields (object, had an error file); every object ends in ``finished`` once.

        ``workers`` threads each take a whole batch: read it, run the model on it (TensorFlow
        releases the GIL, so batches overlap on the cores), then hand it to the one writer.
        """
        def chunks() -> Iterator[list[_Item]]:
            chunk: list[_Item] = []
            size = self.next_batch_size()
            for ref, had_error in refs:
                chunk.append(_Item(ref, had_error))
                if len(chunk) >= size:
                    yield chunk
                    chunk = []
                    size = self.next_batch_size()
            if chunk:
                yield chunk

        def slow(items: Iterable[_Item]) -> None:
            for item in items:
                with self._lock:
                    self.fallbacks += 1
                finished(fallback(item.ref, item.had_error_file))

        def one_batch(chunk: list[_Item]) -> Future | None:
            started = time.monotonic()
            items = self._read(chunk)
            good = [i for i in items if self._ready(i)]
            slow(i for i in items if not self._ready(i))
            if not good:
                return None
            outputs = self._model(good)
            if outputs is None:
                slow(good)
                return None
            return writer.submit(self._write, good, outputs, started, finished, fallback)

        batches: deque[tuple[int, Future]] = deque()
        writes: deque[Future] = deque()
        with ThreadPoolExecutor(self.workers, thread_name_prefix="lane") as workers, \
                ThreadPoolExecutor(1, thread_name_prefix="lane-write") as writer:
            def settle_one() -> None:
                write = batches.popleft()[1].result()
                if write is not None:
                    writes.append(write)
                while writes and (writes[0].done() or len(writes) > self.workers + 1):
                    writes.popleft().result()

            for chunk in chunks():
                while self.max_in_flight and batches and \
                        sum(n for n, _ in batches) + len(chunk) > self.max_in_flight:
                    settle_one()
                batches.append((len(chunk), workers.submit(one_batch, chunk)))
                # Bounded: a few batches being read or run, plus a couple waiting for the disk.
                while len(batches) >= self.workers + self.batches_ahead:
                    settle_one()
            while batches:
                settle_one()
            for write in writes:
                write.result()

    @property
    def in_flight_objects(self) -> int:
        """Objects read or being run at most at once: the batches the driver keeps submitted."""
        size = self.batch_size if self.tuner is None else self.tuner.chosen
        natural = size * (self.workers + self.batches_ahead)
        return min(natural, max(size, self.max_in_flight)) if self.max_in_flight else natural

    @property
    def stats(self) -> dict[str, Any]:
        return {
            "name": f"{self.servable.name}/{self.servable.version}/{self.sig.name}",
            "lane": "batch",
            "batches": self.batches,
            "failed_batches": self.failed_batches,
            "rows": self.rows,
            "batch_sizes": dict(sorted(self._histogram.items())),
            "max_batch_size": self.batch_size if self.tuner is None else self.tuner.chosen,
            "autotune": None if self.tuner is None else self.tuner.report(),
            "workers": self.workers,
            "in_flight_objects": self.in_flight_objects,
            "objects_run_alone": self.fallbacks,
            "chosen_by": self.chosen_by,
        }


class ListSink:
    """A file-like sink for an Assembler that keeps the parts (both batch lanes write whole outputs at once)."""

    def __init__(self, parts: list[bytes]):
        self.parts = parts

    def write(self, data: bytes) -> int:
        self.parts.append(data)
        return len(data)

