"""The dataflow's predict stage: one of two, chosen once per job by ``InstanceRunner``.

Each has ``invoke_many(requests, timeout_s) -> responses`` (one per request, in order, never
raising) and answers for every request exactly what ``InferenceService.invoke`` answers for it
alone, so the stages after it cannot tell which one ran:

- ``PooledService`` (handlers/pooled.py): a model with ``code/inference.py``, or no script and
  a job the image batches cannot take; the hooks (or the default handling) and the request
  decode run in the handler worker processes (or in this process, ``InlinePool``), one joint
  model call per hop.
  ``PoolPredict`` puts it behind the batch-size probe when the job did not set a batch size.
- ``ImageBatchPredict``: no script, an image content type and a one-input signature with a
  free batch dimension (or a batch of one) taking encoded bytes (decoded in the graph) or an
  image tensor ``[N, H, W, C]`` (decoded here by TensorFlow ops, off the GIL; H and W fixed,
  or each image at its own size): the hop's images go to the model as one batch (one per
  image size; one call per image for a batch of one), and each row is encoded through the
  same codec as a one-image request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

import numpy as np

from tfbatch.batching.groups import BadRows
from tfbatch.handlers.service import InvocationRequest, InvocationResponse
from tfbatch.records.images import CutShort

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
    if len(sig.inputs) != 1:
        return "the default signature takes more than one input"
    if rows_per_call(sig) == 0:
        return "the signature has neither a free batch dimension nor a batch of one"
    info = next(iter(sig.inputs.values()))
    if info.dtype != "string" and _image_target(info, sig.name) is None:
        return "the default signature takes neither encoded bytes nor an image tensor [N, H, W, C]"
    return None


def rows_per_call(sig: Any) -> int | None:
    """Rows one model call may carry: None (any: every input and output has a free batch
    dimension), 1 (every one is a batch of one, as detection exports often are), 0 (neither)."""
    firsts = set()
    for info in (*sig.inputs.values(), *sig.outputs.values()):
        if info.shape is None or not info.shape:
            return 0
        firsts.add(info.shape[0])
    return None if firsts == {None} else 1 if firsts == {1} else 0


def _image_target(info: Any, signature_name: str):
    """The decode target of an image-tensor input [N, H, W, C] (H and W fixed or not), else None."""
    from tfbatch.errors import InvalidInput
    from tfbatch.records.imagedecode import ImageTarget

    try:
        target = ImageTarget.of(info, signature_name)
    except InvalidInput:
        return None
    return target if len(info.shape) == 4 else None


def row_bodies(outputs: dict[str, np.ndarray], rows: int) -> list[bytes] | None:
    """Each row's TF Serving row-format body, the bytes ``encode_predict`` gives for that row's
    one-row slice; None when the batch needs the per-row codec.

    The checks the codec makes per row (a shared batch dimension, numeric dtypes orjson writes
    natively, finite values) are made once for the batch here, and each row is then only a
    slice handed to orjson: per-row codec calls were the largest Python cost per image after
    the file write. Anything else (strings, non-finite floats, a mismatched output) returns
    None, so those batches keep the codec's exact handling.
    """
    from tfbatch.runtime import jsonenc

    if not outputs:
        return None
    keys = sorted(outputs)
    arrays = []
    for key in keys:
        arr = np.asarray(outputs[key])
        if arr.ndim == 0 or arr.shape[0] != rows or arr.dtype.kind not in "biuf" or \
                (arr.dtype.kind == "f" and arr.dtype not in (np.float16, np.float32, np.float64)):
            return None
        native = jsonenc.native_array(arr)
        if not isinstance(native, np.ndarray):
            return None  # non-finite floats: the codec writes NaN / Infinity per row
        arrays.append(native)
    if len(arrays) == 1:
        (arr,) = arrays
        return [jsonenc.dumps({"predictions": arr[row:row + 1]}) for row in range(rows)]
    return [jsonenc.dumps({"predictions": [dict(zip(keys, (arr[row] for arr in arrays)))]}) for row in range(rows)]


# Requests per hop the probe may pick for the handler pool. Its hops carry fixed costs the image
# lane does not have (a hand-off to the hook thread or worker each way, the script's calls, a
# joint model call and its split), so they pay off at larger sizes: the scripted JPEG job on
# 2 cores ran 1,294 images/s steady at 16 and 2,152 at 128 (benchmarks/transform/profile/pool-hops.md);
# a SingleRecord CSV job's 100,000 scripted lines on a cheap model ran in 10.5 s at 64, 7.7 at
# 256 and 7.3 at 1,024 (benchmarks/transform/profile/pool-sizes.md). A hop also stops at
# HOP_BYTES of requests, whatever its size.
POOL_CANDIDATES = (8, 16, 32, 64, 128, 256, 512)
# Where the probe starts climbing for the pool: the middle size, one step from 16 (where the image
# lane's grid kept MobileNetV2) and from 64 (where the tiny model's hooks ran best).
POOL_START = 32
# ... unless its requests are small: the probe that starts again when the hooks move (the sizes
# of the requests sent so far known by then) starts at the largest size whose hop carries at
# most this many request bytes. A hop's fixed costs (the model call, the pickled hand-offs) are
# paid per hop: a SingleRecord CSV job's ~240-byte lines ran 100,000 in 7.0 s at a fixed 256,
# 6.2 at 512 and 6.0 at 1,024 (benchmarks/transform/profile/runs.md), and at ~30,000 lines a
# second one trial's 0.3 s window spends the whole budget (a tenth of the job), so a climb
# from 128 stopped at 256.
POOL_START_HOP_BYTES = 128 * 1024


def pool_start(candidates: tuple[int, ...], per_request: float | None, at_least: int = POOL_START) -> int:
    """Where the pool's probe starts: ``at_least``, or the largest candidate whose hop of
    ``per_request``-byte requests holds at most ``POOL_START_HOP_BYTES``, whichever is larger."""
    if not per_request:
        return at_least
    return max([at_least, *(c for c in candidates if c * per_request <= POOL_START_HOP_BYTES)])


class RequestBytes:
    """The requests a predict stage has sent and their bodies' bytes: what ``rows_from_bytes``
    divides a split job's listed bytes by. Its own lock: the probe asks while the predict stage
    holds its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = self.bytes = 0

    def add(self, reqs: list[InvocationRequest]) -> None:
        size = sum(len(req.body) for req in reqs)
        with self._lock:
            self.requests += len(reqs)
            self.bytes += size

    def per_request(self) -> float | None:
        """The mean body of the requests sent so far (None before the first)."""
        with self._lock:
            return self.bytes / self.requests if self.requests and self.bytes else None


class PoolPredict:
    """The handler pool's ``invoke_many`` with its hop size picked by the batch-size probe.

    Each hop's requests go through ``PooledService.invoke_many`` unchanged; the probe is told
    when a hop finished (requests, monotonic time, CPU time) and picks the next chunk's or hop's size.
    ``cpu`` gives the CPU seconds spent so far where they are all in this process (hooks run
    in-process); with worker processes it is None and the probe compares wall time.
    """

    name = "handler-pool"

    def __init__(self, service: Any, tuner: Any, stats: Any, cpu: Any = None, restart: Any = None,
                 sent: RequestBytes | None = None):
        self.service = service
        self.tuner = tuner
        self._pool_stats = stats
        self._cpu = cpu
        # A new probe, for when the hooks move to worker processes (AdaptivePool: ``cpu`` then
        # answers None): sizes timed with the hooks in this process are not comparable with
        # sizes timed after, and the probe's choice followed when the move came, not the sizes
        # (benchmarks/transform/profile/pool-sizes.md). The probe starts again from there, at
        # the size the old one had reached (``restart(best)``), not at the bottom again: on a
        # SingleRecord CSV job the second climb from 32 ran a third of the job at 32-128.
        self._restart = restart
        self._cpu_seen = False
        self.restarted_after_move = False
        self._lock = threading.Lock()
        self.sent = sent if sent is not None else RequestBytes()

    def invoke_many(self, reqs: list[InvocationRequest], timeout_s: float | None = None) -> list[InvocationResponse]:
        self.sent.add(reqs)
        out = self.service.invoke_many(reqs, timeout_s=timeout_s)
        done, cpu = time.monotonic(), self._cpu() if self._cpu is not None else None
        with self._lock:
            if cpu is not None:
                self._cpu_seen = True
            elif self._cpu_seen and self._restart is not None and not self.restarted_after_move:
                self.tuner, self.restarted_after_move = self._restart(self.tuner.best()), True
                return out  # a hop sized before the move: the new probe does not count it
            self.tuner.observe(len(reqs), done, cpu)
        return out

    def next_size(self, fallback: int) -> int:
        with self._lock:
            return self.tuner.next_size()

    @property
    def stats(self) -> dict[str, Any]:
        report = self.tuner.report()
        if self.restarted_after_move:
            report["restarted"] = "when the hooks moved to worker processes"
        return {**self._pool_stats(), "autotune": report}

    def close(self) -> None:
        return None


# Pixels decoded at once per hop when the input keeps each image's own size: a hop is decoded
# and run a slice of at most this many pixels at a time, so its 8-bit copies and the float
# copy the model is given stay ~130 MB at 3 channels, whatever the hop size (an image larger
# than this is a slice alone: --max-image-pixels bounds it as it bounds a one-image request).
SLICE_PIXELS = 8_000_000


class ImageBatchPredict:
    """A hop of encoded images as batches through the default signature.

    A string input gets the bodies as they are (the model decodes in its graph); an image
    tensor input [N, H, W, C] gets them decoded, resized and scaled by
    :mod:`tfbatch.records.imagedecode` (TensorFlow ops in parallel shards, off the GIL; its
    docstring states the resize rule), the same decoder a one-image request uses. Where the
    input fixes H and W, the hop is one batch; where it does not (a fully convolutional or
    detection model), each image keeps its size and each size found in the hop is one batch.
    A signature with a batch of one (``[1, ...]``) is called once per image.
    """

    name = "image-batch"

    def __init__(self, service: Any, *, max_image_pixels: int, tuner: Any = None, sent: RequestBytes | None = None,
                 decode_workers: int | None = None):
        self.service = service
        self.servable = service.model_server.resolve(None)
        self.sig = self.servable.signatures[self.servable.default_signature]
        ((self.input_key, info),) = self.sig.inputs.items()
        self.step = rows_per_call(self.sig)
        self.max_image_pixels = max_image_pixels
        self.decoder = None
        if info.dtype != "string":
            from tfbatch.records.imagedecode import decoder_for

            # decode_workers: the instance's share of the cores (every process of a job would
            # otherwise start threads for all of them).
            self.decoder = decoder_for(_image_target(info, self.sig.name), max_image_pixels, decode_workers)
            self.decoder.prepare()  # traced while the job lists and reads its first objects
        self.tuner = tuner
        self._lock = threading.Lock()
        self._alone = None  # the service over an unbatched view, made on the first refused batch
        self.bad_rows = BadRows()  # how finely a failed batch is cut (_again)
        self.cut_short = CutShort()  # which images run alone from the start (_batches)
        self.batches = 0
        self.rows = 0
        self.failed_batches = 0
        self.run_alone = 0
        self._histogram: Counter[int] = Counter()
        self.sent = sent if sent is not None else RequestBytes()

    def invoke_many(self, reqs: list[InvocationRequest], timeout_s: float | None = None) -> list[InvocationResponse]:
        self.sent.add(reqs)
        out: list[InvocationResponse | None] = [None] * len(reqs)
        ready: list[int] = []
        cut: list[int] = []
        done, refused = None, False
        for rows, batch in self._batches(reqs, ready, cut):
            for start in range(0, len(rows), self.step or len(rows)):
                part = slice(start, start + (self.step or len(rows)))
                responses, at = self._model(batch[part])
                done, refused = at or done, refused or responses is None
                if responses is None:
                    responses = self._again(batch[part], [reqs[n] for n in rows[part]])
                for i, n in enumerate(rows[part]):
                    out[n] = responses[i]
        for n in cut:
            # Not counted in ``bad_rows``: it steers the search of batches that hold none of these.
            out[n] = self._one(reqs[n], counted=False)
            self.cut_short.outcome(out[n].ok)
        for n in sorted(set(range(len(reqs))) - set(ready) - set(cut)):
            # Answered alone, through the one-request path: its error reads as it always has.
            with self._lock:
                self.run_alone += 1
            out[n] = self.service.invoke(reqs[n])
            # Its image failed the header check, before any model call (a decoder's reject may
            # yet reach the model there, through the batcher: the Invoker may isolate it).
            out[n].own = self.decoder is None
        if self.tuner is not None and ready and not refused:
            with self._lock:
                self.tuner.observe(len(ready), done, time.process_time())
        return out  # type: ignore[return-value]

    def _batches(self, reqs: list[InvocationRequest], ready: list[int], cut: list[int]):
        """(request indices, batch) to run, in turn; ``ready`` collects the indices as they come,
        ``cut`` those of images the model decodes that end short of a whole file, to run alone."""
        from tfbatch.records.images import check_image, read_header

        if self.decoder is None:
            for n, req in enumerate(reqs):
                try:
                    # The header check a one-image request gets (format, pixel budget) before any
                    # allocation; an image that fails it never enters a batch.
                    header = check_image(req.body, self.max_image_pixels)
                except Exception:  # noqa: BLE001 - the one-request answer carries the error
                    continue
                # Cut short (an interrupted copy), it would fail its batch's call: alone instead.
                (cut if self.cut_short.alone(req.body, header.format == "PNG") else ready).append(n)
            if ready:
                yield list(ready), np.array([reqs[n].body for n in ready], dtype=object)
            return
        if self.decoder.target.fixed:
            decoded = self.decoder.decode([req.body for req in reqs])
            ready.extend(decoded.rows)
            if decoded.rows:
                yield decoded.rows, decoded.array
            return
        # Each image at its own size: a slice of the hop at a time (SLICE_PIXELS), one batch per size.
        start = 0
        while start < len(reqs):
            end, pixels = start, 0
            while end < len(reqs):
                try:
                    size = read_header(reqs[end].body).pixels
                except Exception:  # noqa: BLE001 - the decode below names the bad image
                    size = 0
                if end > start and pixels + size > SLICE_PIXELS:
                    break
                pixels += size
                end += 1
            groups, _ = self.decoder.decode_sized([req.body for req in reqs[start:end]])
            for group in groups:
                rows = [start + r for r in group.rows]
                ready.extend(rows)
                yield rows, group.array
            start = end

    def _model(self, batch: np.ndarray) -> tuple[list[InvocationResponse] | None, float | None]:
        """Each row's response and when the model call ended; (None, None) if the call failed."""
        from tfbatch.runtime import jsonenc
        from tfbatch.tfs.codec import encode_predict

        try:
            arrays = self.servable.prepare_inputs(self.sig.name, {self.input_key: batch})
            outputs = {k: np.asarray(v) for k, v in self.servable.run_prepared(self.sig.name, arrays).items()}
        except Exception as exc:  # noqa: BLE001 - one bad image fails the batch: _again
            log.debug("batch of %d failed (%s); its images go again in parts", len(batch), exc)
            with self._lock:
                self.failed_batches += 1
            return None, None
        done = time.monotonic()
        self.bad_rows.seen(len(batch))
        with self._lock:
            self.batches += 1
            self.rows += len(batch)
            self._histogram[len(batch)] += 1
        bodies = row_bodies(outputs, len(batch))
        if bodies is None:
            # The one-row slice through the same codec gives the bytes a one-image request gives.
            bodies = [jsonenc.dumps(encode_predict({k: v[row:row + 1] for k, v in outputs.items()}, "row", self.sig,
                                                   native=True)) for row in range(len(batch))]
        return [InvocationResponse(status=200, body=body) for body in bodies], done

    def _again(self, batch: np.ndarray, reqs: list[InvocationRequest]) -> list[InvocationResponse]:
        """The answers of a failed batch's images: in parts called again (a part that fails is
        cut again, ``batching.groups``), two or fewer images each alone through the one-request
        path, so a bad image fails only itself, with its own error. Each image of a failed batch
        had run alone: with 10 % damaged images, 4,065 of 5,000 (bad-records.md)."""
        return self.bad_rows.search(list(range(len(reqs))),
                                    lambda rows: self._model(batch[rows[0]:rows[-1] + 1])[0],
                                    lambda row: self._one(reqs[row]))

    def _one(self, req: InvocationRequest, counted: bool = True) -> InvocationResponse:
        """One image alone, unbatched, so a neighbour's bad data cannot fail it; ``counted``: a
        failure counts in ``bad_rows`` (an image of a failed batch)."""
        with self._lock:
            if self._alone is None:
                self._alone = self.service.with_model_server(self.service.model_server.unbatched())
            alone = self._alone
            self.run_alone += 1
        response = alone.invoke(req)
        response.own = True  # unbatched: the Invoker's isolation would run it the same way
        if counted and not response.ok:
            self.bad_rows.failed_alone(1)
        return response

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
                "decode_workers": None if self.decoder is None else self.decoder.workers,
                "autotune": None if self.tuner is None else self.tuner.report()}

    def close(self) -> None:
        return None
