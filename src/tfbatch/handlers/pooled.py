"""Invocations of a scripted model for batch jobs, with the script's hooks in the handler pool.

``PooledService`` answers exactly what ``InferenceService.invoke`` answers, but the parent
process does only the model call: ``input_handler`` and the request decode run in a worker
(:mod:`tfbatch.handlers.pool_worker`), which hands back tensors; the outputs go back to the
same worker for the response JSON and ``output_handler``. Bytes cross the pipe once each
way and are decoded or encoded once, in the worker.

``invoke_many`` takes a whole batch of requests: one hop per worker for the input step,
one model call for every request that decoded to the same signature (split back per
request), one hop per worker for the output step. If the joint model call fails, the
requests are cut in parts (halves while bad rows are rare in the job) and each part called
jointly again, down to requests run alone, so a bad record fails only itself, with its own
error. Every model call here is direct, not through the model server's dynamic batcher, but
a request alone in its hop's (which the batcher cuts to MaxBatchSize rows a call); the other
answers are marked as their request's own, and the Invoker does not run them again isolated.
``invoke`` is ``invoke_many`` of one request.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections import defaultdict
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import numpy as np

from tfbatch.batching.groups import BadRows
from tfbatch.errors import RequestTimeout, TfbatchError, Unavailable, from_exception
from tfbatch.handlers.pool import LOST, HandlerPool
from tfbatch.handlers.pool_worker import IN_RUN, OUTPUTS_RUN, TENSORS_RUN, cut_rows, row_count, tensor_layout
from tfbatch.handlers.wire import OUT_OF_BAND_MIN
from tfbatch.handlers.service import InferenceService, InvocationRequest, InvocationResponse
from tfbatch.limits import GRPC_MAX_MESSAGE_MB, MIB
from tfbatch.records.images import CutShort, sniff

log = logging.getLogger(__name__)

def script_init(script: Any, max_image_pixels: int, grpc_max_message_bytes: int = GRPC_MAX_MESSAGE_MB * MIB) -> dict:
    """What a worker needs to start: the script (None: default handling) and the limits (the
    models come later)."""
    return {"script": None if script is None else str(script), "max_image_pixels": max_image_pixels,
            "grpc_max_message_bytes": grpc_max_message_bytes}


def models_init(service: InferenceService) -> dict[str, Any]:
    """Each model's default version and its signatures, once the model server has loaded them."""
    server = service.model_server
    models = {}
    for name in server.model_names():
        servable = server.resolve(name, None)
        models[name] = (servable.version, dict(servable.signatures), servable.default_signature)
    return models


class PooledService:
    def __init__(self, service: InferenceService, pool: HandlerPool):
        self.service = service
        self.pool = pool
        # For the job's report: joint model calls that failed (a bad request among them), and
        # the requests of those that then ran alone.
        self._counts_lock = threading.Lock()
        self.failed_joint_calls = 0
        self.requests_run_alone = 0
        # How common bad rows are in this job, for how finely a failed joint call is cut.
        self.bad_rows = BadRows()
        # Which requests run alone from the start: those holding an image cut short.
        self.cut_short = CutShort()

    @property
    def stats(self) -> dict[str, int]:
        return {"failed_joint_calls": self.failed_joint_calls, "requests_run_alone": self.requests_run_alone}

    # What the Invoker and the lanes read from a service.
    handlers = property(lambda self: self.service.handlers)
    model_server = property(lambda self: self.service.model_server)
    rest_port = property(lambda self: self.service.rest_port)
    grpc_port = property(lambda self: self.service.grpc_port)
    max_image_pixels = property(lambda self: self.service.max_image_pixels)

    def with_model_server(self, model_server: Any, *, rest_port: int | None = None,
                          grpc_port: int | None = None) -> "PooledService":
        return PooledService(self.service.with_model_server(model_server, rest_port=rest_port,
                                                            grpc_port=grpc_port), self.pool)

    def invoke(self, req: InvocationRequest) -> InvocationResponse:
        return self.invoke_many([req])[0]

    def invoke_many(self, reqs: list[InvocationRequest], timeout_s: float | None = None) -> list[InvocationResponse]:
        """One response per request, in order; never raises."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        responses: list[InvocationResponse | None] = [None] * len(reqs)
        items: list[tuple | None] = [None] * len(reqs)
        for n, req in enumerate(reqs):
            try:
                name, version, method = self.service._target(req)
            except TfbatchError as err:
                responses[n] = InvocationResponse.from_error(err)
                continue
            # A large body crosses to the worker out of band (wire.py): no copy into the pickle.
            body = req.body if type(req.body) is bytes and len(req.body) < OUT_OF_BAND_MIN \
                else pickle.PickleBuffer(req.body)
            items[n] = (body, req.content_type, req.accept, req.custom_attributes,
                        name, version, method, self.service.rest_port, self.service.grpc_port)
        todo = [n for n in range(len(reqs)) if items[n] is not None]
        firsts = self._input(todo, items, deadline)
        shared: set[int] = set()
        outputs = self._model(firsts, items, shared)
        self._output(outputs, items, responses, deadline)
        for n, first in firsts.items():
            if responses[n] is None:
                responses[n] = _response(first[1])
        # Each answer is its request's own (the Invoker need not run it again isolated) but
        # where its model call went through the dynamic batcher, or a single handler's did.
        handlers = self.service.handlers
        if handlers is None or handlers.mode == "pair":
            for n in todo:
                if n not in shared and responses[n] is not None:
                    responses[n].own = True  # type: ignore[union-attr]
        return [r if r is not None else _response(("final", 500, b"", "application/json")) for r in responses]

    # ---- steps ------------------------------------------------------------------------

    def _input(self, todo: list[int], items: list, deadline: float | None) -> dict[int, tuple]:
        """{request index: (where, input-step result)}: the work split evenly over the processes."""
        per = max(1, -(-len(todo) // self.pool.size))
        jobs = []
        for start in range(0, len(todo), per):
            chunk = todo[start:start + per]
            jobs.append((chunk, self.pool.submit("input", [items[n] for n in chunk])))
        firsts = {}
        for chunk, future in jobs:
            results = _wait(future, deadline, len(chunk))
            where = getattr(future, "where", None)
            for i, (n, result) in enumerate(zip(chunk, results)):
                if result[0] == TENSORS_RUN:  # the requests of the run: this one and the next in the chunk
                    result = (*result, chunk[i:i + len(result[5])])
                firsts[n] = (where, result)
        return firsts

    def _model(self, firsts: dict[int, tuple], items: list, shared: set[int]) -> dict[int, tuple]:
        """{request index: (where, output-step payload)} for every request that reached the model.

        A part is one request's tensors, or a run of them a worker joined (``join_runs``); the
        parts that match go to one model call, and each takes its rows back. ``shared`` gets
        the requests whose call went through the dynamic batcher, with other requests' rows."""
        groups: dict[tuple, list[tuple[list[int], list[int] | None, dict]]] = defaultdict(list)
        out: dict[int, tuple] = {}
        for n, (where, result) in firsts.items():
            kind = result[0]
            if kind == "tensors" or kind == TENSORS_RUN:
                tensors, fmt, version, sig_name = result[1:5]
                members = result[6] if kind == TENSORS_RUN else [n]
                sizes = result[5] if kind == TENSORS_RUN else None
                key = (items[n][4], version, sig_name, fmt, tensor_layout(tensors))
                if not self._cut_short(tensors):
                    groups[key].append((members, sizes, tensors))
                    continue
                # An encoded image cut short would fail the joint call of every request with it:
                # its request runs alone, directly; the others of its run go on, each on its own.
                for m, part in _requests(members, sizes, tensors):
                    if self._cut_short(part):
                        out[m] = (where, self._alone_cut_short(key, fmt, part))
                    else:
                        groups[key].append(([m], None, part))
            elif kind == "json":
                shared.add(n)
                out[n] = (where, self._json(items[n], result[1]))
        for (name, version, sig_name, fmt, layout), parts in groups.items():
            if layout is not None:
                self.bad_rows.seen(sum(row_count(tensors) for _, _, tensors in parts))
            tried = layout is not None and (len(parts) > 1 or parts[0][1] is not None)
            joint = self._joint(name, version, sig_name, [tensors for _, _, tensors in parts]) if tried else None
            if tried and joint is None:
                self._after_failed_joint(name, version, sig_name, fmt, parts, firsts, out)
                continue
            for i, (members, sizes, tensors) in enumerate(parts):
                where = firsts[members[0]][0]
                if joint is None:  # not called jointly (alone in its group, or rows not countable)
                    for m, part in _requests(members, sizes, tensors):
                        shared.add(m)
                        out[m] = (where, self._alone(name, version, sig_name, fmt, part))
                elif sizes is None:
                    out[members[0]] = (where, ("outputs", (joint[i], fmt, version, sig_name)))
                else:
                    out[members[0]] = (where, (OUTPUTS_RUN, (joint[i], sizes, fmt, version, sig_name)))
                    for m in members[1:]:
                        out[m] = (where, (IN_RUN, None))
        return out

    def _after_failed_joint(self, name, version, sig_name, fmt, parts, firsts, out: dict[int, tuple]) -> None:
        """Every request of ``parts`` (a run cut back into its requests) once their joint call
        failed: in parts called jointly again, each part that fails cut in turn, the rest
        alone, so a bad request fails only itself, with its own error, as in invoke. Where bad
        rows are rare, the parts are halves: one bad request among 64 costs about two calls a
        halving, not 64 (a model refusing a value, an id past its vocabulary: rows cheap, calls
        not). Where they are common, the parts are smaller (``batching.groups``), so good rows
        are not run again at every level (benchmarks/transform/profile/bad-records.md)."""
        flat = [(m, firsts[members[0]][0], part) for members, sizes, tensors in parts
                for m, part in _requests(members, sizes, tensors)]
        rows = self.bad_rows.search([part for _, _, part in flat],
                                    lambda some: self._joint(name, version, sig_name, some),
                                    lambda _: None, row_count)
        failed = 0
        for (m, where, part), got in zip(flat, rows):
            if got is None:
                got = self._alone(name, version, sig_name, fmt, part, direct=True)
                failed += got[0] == "error"
                out[m] = (where, got)
            else:
                out[m] = (where, ("outputs", (got, fmt, version, sig_name)))
        with self._counts_lock:
            self.requests_run_alone += sum(got is None for got in rows)
        self.bad_rows.failed_alone(failed)

    def _cut_short(self, tensors: dict) -> bool:
        """Whether a string input holds a JPEG or PNG that does not end whole and is to run alone
        (``records.images.CutShort``: a file cut short, while such files mostly fail)."""
        for array in tensors.values():
            if isinstance(array, np.ndarray) and array.dtype.kind in "OS":
                for value in array.flat:
                    if isinstance(value, bytes) and (kind := sniff(value)) in ("JPEG", "PNG") \
                            and self.cut_short.alone(value, kind == "PNG"):
                        return True
        return False

    def _alone_cut_short(self, key: tuple, fmt, tensors: dict) -> tuple:
        """A request :meth:`_cut_short` picked, run alone; not counted in ``bad_rows``, which
        steers the search of joint calls that hold none of these."""
        name, version, sig_name = key[:3]
        got = self._alone(name, version, sig_name, fmt, tensors, direct=True)
        self.cut_short.outcome(got[0] != "error")
        with self._counts_lock:
            self.requests_run_alone += 1
        return got

    def _json(self, item: tuple, body: dict) -> tuple:
        from tfbatch.tfs.api import TfsApi

        _, _, _, _, name, version, method, _, _ = item
        try:
            return ("result", TfsApi(self.service.model_server).call(method, body, name, version))
        except TfbatchError as err:
            return ("error", (err.status, err.to_json()))

    def _alone(self, name, version, sig_name, fmt, tensors, *, direct: bool = False) -> tuple:
        """One request's model call on its own: its answer or error is its own.

        ``direct``: after a joint call that held this request failed, not through the dynamic
        batcher (the joint call ran its rows and more in one call already). Through the
        batcher, each request of such a hop (one truncated JPEG among 64) waited out a batch
        window, one after another. A request alone in its hop goes through the batcher, which
        cuts a request of many rows to MaxBatchSize per call."""
        server = self.service.model_server
        try:
            servable = server.resolve(name, version)
            outputs = servable.run(sig_name, tensors) if direct else \
                server.run_signature(servable, servable.signature(sig_name), tensors)
        except TfbatchError as err:
            return ("error", (err.status, err.to_json()))
        return ("outputs", (outputs, fmt, version, sig_name))

    def _joint(self, name, version, sig_name, requests: list[dict]) -> list[dict] | None:
        """One model call for many requests' tensors, split back; None if it fails or cannot be split."""
        sizes = [row_count(t) for t in requests]
        try:
            servable = self.service.model_server.resolve(name, version)
            joined = requests[0] if len(requests) == 1 else \
                {k: np.concatenate([t[k] for t in requests]) for k in requests[0]}
            outputs = servable.run(sig_name, joined)
        except Exception as exc:  # noqa: BLE001 - every request runs alone and gets its own error
            log.debug("joint model call of %d requests failed (%s); each runs alone", len(requests), exc)
            with self._counts_lock:
                self.failed_joint_calls += 1
            return None
        total = sum(sizes)
        arrays = {k: np.asarray(v) for k, v in outputs.items()}
        if any(a.ndim == 0 or a.shape[0] != total for a in arrays.values()):
            return None
        return cut_rows(arrays, sizes)

    def _output(self, outputs: dict[int, tuple], items: list, responses: list, deadline: float | None) -> None:
        by_where: dict[Any, list[int]] = defaultdict(list)
        for n, (where, _) in outputs.items():
            by_where[where].append(n)
        jobs = []
        for where, members in by_where.items():
            members.sort()  # a run's first request, then the others of the run (request order)
            # The worker needs the body's length for the context, not the bytes again.
            entries = [((_length(items[n][0]), *items[n][1:]), *outputs[n][1]) for n in members]
            jobs.append((members, self.pool.submit("output", entries, where)))
        for members, future in jobs:
            for n, result in zip(members, _wait(future, deadline, len(members))):
                responses[n] = _response(result)


def _requests(members: list[int], sizes: list[int] | None, tensors: dict):
    """(request index, its tensors) for each request of a part: one request, or a run cut back."""
    return zip(members, [tensors] if sizes is None else cut_rows(tensors, sizes))


def _length(body: Any) -> int:
    return len(body.raw()) if isinstance(body, pickle.PickleBuffer) else len(body)


def _wait(future, deadline: float | None, count: int, timeout_s: float = 0.0) -> list:
    try:
        return future.result(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
    except FutureTimeout:
        err = RequestTimeout(f"invocation did not answer within InvocationsTimeoutInSeconds={timeout_s:g}")
        return [("final", err.status, err.to_json(), "application/json")] * count


def _response(result: tuple) -> InvocationResponse:
    kind = result[0]
    if kind == "final":
        _, status, body, content_type = result
        return InvocationResponse(status=status, body=body, content_type=content_type)
    if kind == LOST:
        return InvocationResponse.from_error(Unavailable(result[1]))
    return InvocationResponse.from_error(from_exception(RuntimeError(f"unexpected handler result {kind!r}")))
