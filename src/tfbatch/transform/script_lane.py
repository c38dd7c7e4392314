"""Whole batches of one-record objects through a scripted model, hooks in the handler pool.

When a job with ``code/inference.py`` sends each object as one request (SplitType None,
SingleRecord, no compression or filters), an object's output is exactly the response
body of one invocation. This lane reads a batch of objects, hands the batch to
``PooledService.invoke_many`` (one hop per handler worker process for ``input_handler``
and the decode, one model call, one hop back for the response JSON and
``output_handler``), and writes each object's body as the per-object path would, byte for
byte. A few lane threads keep the model busy while the workers run the hooks.

Only successes are written here. An object the lane cannot do simply (too large, empty,
unreadable) or whose invocation failed in any way runs again on the per-object path, whose
retries and isolation then report it exactly as before; that path sends it to the same
worker pool, so no user code ever runs in this process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from tfbatch.handlers.service import InvocationRequest
from tfbatch.records import Assembler
from tfbatch.storage import ObjectRef, atomic_write, open_read
from tfbatch.transform.batched import ListSink
from tfbatch.transform.report import ObjectResult

log = logging.getLogger(__name__)

Fallback = Callable[[ObjectRef, bool], ObjectResult]
Finished = Callable[[ObjectResult], None]


def script_lane_blocker(spec: Any, service: Any) -> str | None:
    """Why this job cannot take the script lane (None: it can)."""
    if getattr(service, "pool", None) is None:
        return "no handler worker pool (--handler-workers 0, or no script)"
    if service.handlers.mode != "pair":
        # handler() calls context.rest_uri itself: the model call is an HTTP request back
        # into this process, so there is nothing to batch; it runs per object, in the pool.
        return "the script defines handler(), not the input_handler/output_handler pair"
    if spec.split_type != "None" or spec.batch_strategy != "SingleRecord" or spec.compression != "None":
        return "records are split, batched or compressed"
    if spec.input_filter or spec.output_filter or spec.join_source != "None":
        return "input/output filters or JoinSource are set"
    return None


class ScriptLane:
    """Runs the objects of one instance ``batch_size`` at a time through a PooledService."""

    def __init__(self, spec: Any, service: Any, ledger: Any, *, batch_size: int, threads: int):
        self.spec = spec
        self.service = service
        self.ledger = ledger
        self.batch_size = max(1, batch_size)
        self.threads = max(1, threads)
        self.limit = spec.max_payload_bytes or 0
        self.batches = 0
        self.rows = 0
        self.fallbacks = 0
        self._lock = threading.Lock()

    def _read(self, ref: ObjectRef) -> bytes | None:
        try:
            if self.limit and ref.size is not None and ref.size > self.limit:
                return None
            with open_read(ref.uri) as f:
                body = f.read()
        except Exception:  # noqa: BLE001 - the per-object path reports it properly
            return None
        return body if body and not (self.limit and len(body) > self.limit) else None

    def _batch(self, chunk: list[tuple[ObjectRef, bool]], finished: Finished, fallback: Fallback) -> None:
        started = time.monotonic()
        bodies = [self._read(ref) for ref, _ in chunk]
        ready = [n for n, body in enumerate(bodies) if body is not None]
        reqs = [InvocationRequest(body=bodies[n], content_type=self.spec.content_type, accept=self.spec.accept)
                for n in ready]
        responses = self.service.invoke_many(reqs, timeout_s=self.spec.invocations_timeout) if reqs else []
        with self._lock:
            self.batches += 1
            self.rows += len(reqs)
        answered = dict(zip(ready, responses))
        for n, (ref, had_error) in enumerate(chunk):
            response = answered.get(n)
            result = None
            if response is not None and response.ok:
                try:
                    result = self._write(ref, response.body, started)
                except Exception:  # noqa: BLE001 - e.g. the write failed: the per-object path reports it
                    log.debug("writing %s failed; object runs alone", ref.key, exc_info=True)
            if result is None:
                with self._lock:
                    self.fallbacks += 1
                finished(fallback(ref, had_error))
                continue
            # Written without fsync: the ledger's group commit makes outputs durable first.
            self.ledger.record(result)
            finished(result)

    def _write(self, ref: ObjectRef, body: bytes, started: float) -> ObjectResult:
        from tfbatch.transform.pipeline import output_uri

        parts: list[bytes] = []
        assembler = Assembler(self.spec.assemble_with, ListSink(parts))
        assembler.add(body)
        atomic_write(output_uri(self.spec, ref.key), parts, durable=False)
        return ObjectResult(key=ref.key, ok=True, records=1, output_bytes=assembler.bytes_written,
                            written=True, seconds=time.monotonic() - started)

    def run(self, refs: Iterable[tuple[ObjectRef, bool]], fallback: Fallback, finished: Finished) -> None:
        """``refs`` yields (object, had an error file); every object ends in ``finished`` once."""
        def chunks() -> Iterator[list[tuple[ObjectRef, bool]]]:
            chunk: list[tuple[ObjectRef, bool]] = []
            for entry in refs:
                chunk.append(entry)
                if len(chunk) >= self.batch_size:
                    yield chunk
                    chunk = []
            if chunk:
                yield chunk

        pending: deque[Future] = deque()
        with ThreadPoolExecutor(self.threads, thread_name_prefix="script-lane") as pool:
            for chunk in chunks():
                pending.append(pool.submit(self._batch, chunk, finished, fallback))
                while len(pending) > self.threads:  # bounded: one batch queued behind the running ones
                    pending.popleft().result()
            while pending:
                pending.popleft().result()

    @property
    def stats(self) -> dict[str, Any]:
        return {"lane": "script-batch", "batches": self.batches, "rows": self.rows,
                "max_batch_size": self.batch_size, "lane_threads": self.threads,
                "objects_run_alone": self.fallbacks, **self.service.pool.stats}
