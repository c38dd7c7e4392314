"""The dataflow's predict stage: one of three, chosen once per job by ``InstanceRunner``.

Each has ``invoke_many(requests, timeout_s) -> responses`` (one per request, in order, never
raising) and answers for every request exactly what ``InferenceService.invoke`` answers for it
alone, so the stages after it cannot tell which one ran:

- ``PooledService`` (handlers/pooled.py): a model with ``code/inference.py``; the hooks and
  the request decode run in the handler worker processes, one joint model call per hop.
- ``ImageBatchPredict``: no script, an image content type and a signature taking encoded
  bytes (one string input, free batch dimension): the hop's bodies go to the model as one
  string tensor, TensorFlow decodes them in the graph (off the GIL), and each row is encoded
  through the same codec as a one-image request.
- ``InProcessPredict``: any other job with no script; the hop's requests are in flight
  together so the model server's dynamic batcher joins their rows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_all
from typing import Any

import numpy as np

from tfbatch.errors import RequestTimeout
from tfbatch.handlers.service import InvocationRequest, InvocationResponse

log = logging.getLogger(__name__)


def image_batch_blocker(spec: Any, service: Any) -> str | None:
    """Why ``ImageBatchPredict`` cannot answer this job (None: it can). Reads the spec and service."""
    from tfbatch.handlers.defaults import is_image

    if service.handlers is not None:
        return "the model has a script (code/inference.py)"
    if not is_image(spec.content_type):
        return f"content type {spec.content_type!r} is not an image type"
    servable = service.model_server.resolve(None)
    sig = servable.signatures[servable.default_signature]
    if len(sig.inputs) != 1 or next(iter(sig.inputs.values())).dtype != "string":
        return "the default signature does not take encoded image bytes (one string input)"
    for info in (*sig.inputs.values(), *sig.outputs.values()):
        if info.shape is None or not info.shape or info.shape[0] is not None:
            return "the signature has no free batch dimension"
    return None


class InProcessPredict:
    """The hop's requests on threads against the in-process service; a stuck call answers a
    timeout (the pipeline's Invoker then retries it as any 504)."""

    name = "in-process"

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

    @property
    def stats(self) -> dict[str, Any]:
        return {"batcher": self.service.model_server.batcher_stats()}

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class ImageBatchPredict:
    """A hop of encoded images as one batch through the default signature, decoded in the graph."""

    name = "image-batch"

    def __init__(self, service: Any, *, max_image_pixels: int, tuner: Any = None):
        self.service = service
        self.servable = service.model_server.resolve(None)
        self.sig = self.servable.signatures[self.servable.default_signature]
        (self.input_key,) = self.sig.inputs
        self.max_image_pixels = max_image_pixels
        self.tuner = tuner
        self._lock = threading.Lock()
        self._alone = None  # the service over an unbatched view, made on the first refused batch
        self.batches = 0
        self.rows = 0
        self.failed_batches = 0
        self.run_alone = 0
        self._histogram: Counter[int] = Counter()

    def invoke_many(self, reqs: list[InvocationRequest], timeout_s: float | None = None) -> list[InvocationResponse]:
        from tfbatch.records.images import check_image

        out: list[InvocationResponse | None] = [None] * len(reqs)
        ready = []
        for n, req in enumerate(reqs):
            try:
                # The header check a one-image request gets (format, pixel budget) before any
                # allocation; an image that fails it is answered alone, with that request's error.
                check_image(req.body, self.max_image_pixels)
                ready.append(n)
            except Exception:  # noqa: BLE001 - the one-request answer below carries the error
                with self._lock:
                    self.run_alone += 1
                out[n] = self.service.invoke(req)
        if ready:
            rows = self._model([reqs[n].body for n in ready])
            for i, n in enumerate(ready):
                out[n] = rows[i] if rows is not None else self._one(reqs[n])
        return out  # type: ignore[return-value]

    def _model(self, bodies: list[bytes]) -> list[InvocationResponse] | None:
        from tfbatch.runtime import jsonenc
        from tfbatch.tfs.codec import encode_predict

        started = time.monotonic()
        try:
            arrays = self.servable.prepare_inputs(self.sig.name, {self.input_key: np.array(bodies, dtype=object)})
            outputs = {k: np.asarray(v) for k, v in self.servable.run_prepared(self.sig.name, arrays).items()}
        except Exception as exc:  # noqa: BLE001 - one bad image fails the batch; each runs alone
            log.debug("batch of %d failed (%s); images run one by one", len(bodies), exc)
            with self._lock:
                self.failed_batches += 1
                self.run_alone += len(bodies)
            return None
        done = time.monotonic()
        with self._lock:
            self.batches += 1
            self.rows += len(bodies)
            self._histogram[len(bodies)] += 1
            if self.tuner is not None:
                self.tuner.observe(len(bodies), done, time.process_time())
        # The one-row slice through the same codec gives the bytes a one-image request gives.
        return [InvocationResponse(status=200, body=jsonenc.dumps(
            encode_predict({k: v[row:row + 1] for k, v in outputs.items()}, "row", self.sig, native=True)))
            for row in range(len(bodies))]

    def _one(self, req: InvocationRequest) -> InvocationResponse:
        """One image alone, unbatched, so a neighbour's bad data cannot fail it."""
        with self._lock:
            if self._alone is None:
                self._alone = self.service.with_model_server(self.service.model_server.unbatched())
            alone = self._alone
        return alone.invoke(req)

    def next_size(self, fallback: int) -> int:
        if self.tuner is None:
            return fallback
        with self._lock:
            return self.tuner.next_size()

    @property
    def stats(self) -> dict[str, Any]:
        return {"name": f"{self.servable.name}/{self.servable.version}/{self.sig.name}",
                "batches": self.batches, "failed_batches": self.failed_batches, "rows": self.rows,
                "batch_sizes": dict(sorted(self._histogram.items())), "objects_run_alone": self.run_alone,
                "autotune": None if self.tuner is None else self.tuner.report()}

    def close(self) -> None:
        return None
