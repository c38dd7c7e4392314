"""The child side of the handler pool: a user script's hooks, and the JSON/base64 work around them.

A worker process imports ``code/inference.py`` once and then answers hops from the parent.
A hop carries many requests; for each it runs ``input_handler`` and turns what the hook
returned into model-ready tensors (JSON parse, image header checks, base64 decode), or, on
the way back, turns model outputs into the TFS response body and runs ``output_handler``.
So the parent process only reads, batches and runs the model: every step that holds the GIL
per record runs here, in as many processes as there are cores.

Each step mirrors ``InferenceService.invoke`` / ``local_post`` line for line (the same helper
functions), so a record's response and error text are the ones the in-process path gives.

Wire format (:mod:`tfbatch.handlers.wire` messages over a socket pair):

- request: ``(body, content_type, accept, custom_attributes, name, version, method, rest_port, grpc_port)``;
  ``body`` arrives as a ``memoryview`` (sent out of band) in an ``input`` step, and as its
  length in an ``output`` step (the context needs only that: the bytes do not cross again)
- ``input`` step result: ``("final", status, body, content_type)`` (handler mode, or the
  request ended before the model), ``("tensors", tensors, fmt, version, sig_name)`` or
  ``("json", body)`` (the parent runs TfsApi on a body this side could not decode alone)
- ``output`` step item: ``(request, kind, payload)``, kind ``outputs`` (``(outputs, fmt,
  version, sig_name)``), ``result`` (a TFS response dict) or ``error`` (``(status, content)``);
  its result is always ``("final", ...)``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tfbatch.batching.cooperative import Turns, run_all
from tfbatch.errors import InvalidInput, TfbatchError, from_exception
from tfbatch.handlers import defaults, wire
from tfbatch.handlers.context import Context
from tfbatch.handlers.service import (
    InvocationRequest,
    InvocationResponse,
    _Body,
    call_user,
    make_context,
    make_response,
    parse_handler_body,
    user_result,
)
from tfbatch.records.images import check_image, sniff
from tfbatch.runtime import jsonenc
from tfbatch.runtime.jsonenc import written_numbers
from tfbatch.runtime.servable import coerce
from tfbatch.tfs.codec import (
    ALONE,
    decode_numeric,
    decode_numeric_many,
    decode_written,
    encode_predict,
    encode_predict_bodies,
    fast_b64decode,
    strict_b64decode,
)

log = logging.getLogger(__name__)

# A single ``handler`` calls the model itself (a POST to ``context.rest_uri`` or a gRPC call)
# and waits for the answer: called one after another, a worker hands the loopback server one
# request at a time and the model sees batches of one or two. The SageMaker container runs
# handlers concurrently too (gunicorn's default ``gevent`` worker class), so a hop's handler
# calls run on up to this many threads of the worker, and the model server batches what
# arrives together. ``SAGEMAKER_GUNICORN_WORKER_CLASS=sync``, the container's way to run one
# request at a time per worker, keeps them one at a time here as well. 32: on the 2-core VM
# the single-handler job ran 5,000 JPEGs in 6.1-6.6 s with 32 threads against 6.5-7.6 s with
# 16 (6 rounds), 10,000 in 9.2-10.1 s against 10.1-11.3 s (3 rounds), with less CPU: the model
# sees batches twice as large (benchmarks/transform/profile/handler.md).
HANDLER_CONCURRENCY = 32

# The collector's young-generation threshold in a worker process (Python's own: 700). A script's
# ``pixels.tolist()`` of a 64 x 64 x 3 image makes 4,160 lists (tracked objects), six young
# collections an image at 700, and every tenth of those walked the middle generation too; with
# what the worker imported (~27,000 objects) out of every collection (``gc.freeze``), its input
# step on such an image took ~3.2 ms instead of ~3.6 (benchmarks/transform/profile/worker-gc.md).
# The job's own process does the same (``transform/instance.JOB_GC_THRESHOLDS``).
WORKER_GC_THRESHOLDS = (10_000, 10, 10)


def _worker_class(env) -> str:
    return env.get("SAGEMAKER_GUNICORN_WORKER_CLASS", "").strip().lower()


def handler_concurrency(env=os.environ) -> int:
    """Handler calls a worker runs at once: 1 where the job asks for the container's ``sync`` workers."""
    return 1 if _worker_class(env) == "sync" else HANDLER_CONCURRENCY


def handler_turns(env=os.environ) -> bool:
    """Whether a single handler's concurrent calls may take turns on their hop's thread
    (``batching/cooperative.py``): under the container's default worker class, gevent's
    greenlets (or eventlet's), as there. Another class (``gthread``) keeps a thread a call."""
    return _worker_class(env) in ("", "gevent", "eventlet")


class Worker:
    """What one worker process keeps between hops: the hooks, signatures, gRPC channels."""

    def __init__(self, init: dict[str, Any]):
        from tfbatch.handlers.user_code import load_handlers
        from tfbatch.records.images import limit_pil

        self.max_image_pixels = init["max_image_pixels"]
        self.grpc_max = init["grpc_max_message_bytes"]
        # {model name: (version, {signature name: SignatureInfo}, default signature)} of the
        # versions the parent resolves for requests naming no version; sent once the model has
        # loaded (this process starts, and imports the script, while it loads).
        self.models: dict[str, tuple[int, dict, str]] = init.get("models") or {}
        limit_pil(self.max_image_pixels)
        # No script: the default handling's decode and encode (JSON, CSV, JSON Lines, images)
        # run here instead, off the process that feeds the model.
        self.handlers = load_handlers(Path(init["script"])) if init.get("script") else None
        self._channels: dict[int, Any] = {}
        self._contexts: dict[tuple, tuple] = {}  # a request's fields but its body -> its context's (``context``)
        self._threads: ThreadPoolExecutor | None = None
        self._serial = threading.Lock()
        # Where this process answers the model calls of a single handler itself (an in-process
        # pool), a hop's calls take turns on its thread (batching/cooperative.py); None: a
        # thread each (a worker process, whose calls cross a socket).
        self.turns: Turns | None = None
        self.threads_because: str | None = None  # why a single handler's calls did not take turns
        # CPU the handler threads spent (an in-process pool counts it as the hooks' CPU).
        self.handler_cpu_s = 0.0
        self._cpu_lock = threading.Lock()

    def close(self) -> None:
        """Lets the handler threads end (an in-process pool's worker outlives no job); a call
        that never returns is not waited for, as a hook thread's is not."""
        threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=False, cancel_futures=True)

    def channel(self, port: int | None):
        if port is None:
            return None
        channel = self._channels.get(port)
        if channel is None:
            import grpc

            channel = self._channels[port] = grpc.insecure_channel(
                f"localhost:{port}",
                options=[("grpc.max_send_message_length", self.grpc_max),
                         ("grpc.max_receive_message_length", self.grpc_max)],
            )
        return channel

    def context(self, item: tuple):
        """The record's context: all but its length are the same for most records of a job, so
        they are built once per kind of request (two contexts a record were a tenth of its CPU)."""
        body = item[0]
        size = body if isinstance(body, int) else len(body)
        head = self._contexts.get(item[1:])
        if head is None:
            _, content_type, accept, attrs, name, version, method, rest_port, grpc_port = item
            req = InvocationRequest(body=b"", content_type=content_type, accept=accept, custom_attributes=attrs)
            head = tuple(make_context(req, name, version, method, rest_port, grpc_port, self.channel(grpc_port),
                                      content_length=0))[:-1]
            if len(self._contexts) >= 64:
                self._contexts.clear()
            self._contexts[item[1:]] = head
        return Context._make(head + (size,))

    # ---- steps ------------------------------------------------------------------------

    def run(self, step: str, items: list) -> list:
        if step != "input":
            return self._outputs(items)
        if self.single_handler:
            concurrency = handler_concurrency()
            if concurrency == 1:
                # One call at a time in this process, also across the hop threads of an
                # in-process pool.
                with self._serial:
                    return [_guarded(self._input, item) for item in items]
            if len(items) > 1:
                done: list = []
                if self.turns is not None and not self.turns.blocking():
                    done = run_all(self._guarded_input, items, concurrency, self.turns)
                    if len(done) == len(items):
                        return done
                    log.info("the handler's calls taking turns %s (%d calls, %d paused for the model; %.2f s off "
                             "the CPU with the process idle, %.2f s on it): its calls go to threads from here on",
                             self.turns.why, self.turns.calls, self.turns.paused_calls, self.turns.idle_s,
                             self.turns.cpu_s)
                if self._threads is None:
                    self._threads = ThreadPoolExecutor(concurrency, thread_name_prefix="handler")
                return done + list(self._threads.map(self._timed_input, items[len(done):]))
        firsts = [_guarded(self._input, item) for item in items]
        # Small bodies of numbers (a line each), read together: one parse and one coerce for
        # those that share a shape. Before the images: a body read the general way may be one.
        waiting = [(n, first) for n, first in enumerate(firsts) if type(first) is _Numbers]
        if waiting:
            by_sig: dict[int, list] = {}
            for n, numbers in waiting:
                by_sig.setdefault(id(numbers.sig), []).append((n, numbers))
            for group in by_sig.values():
                found = decode_numeric_many([numbers.text for _, numbers in group], group[0][1].sig)
                for (n, numbers), read in zip(group, found):
                    firsts[n] = _guarded(self._finish_numbers, (numbers, read))
        # The base64 images of every request that takes the fast decode, decoded together:
        # pybase64 lets go of the GIL for each call, and taking it back behind the threads
        # that hold it cost more than the decode (profile/pool-hops.md). One call per hop.
        waiting = [(n, first) for n, first in enumerate(firsts) if type(first) is _Images]
        if waiting:
            decoded = b64decode_all([text for _, images in waiting for text in images.texts])
            at = 0
            for n, images in waiting:
                firsts[n] = _guarded(self._finish, (images, decoded[at:at + len(images.texts)]))
                at += len(images.texts)
        return join_runs(firsts, items)

    def _guarded_input(self, item: tuple) -> tuple:
        return _guarded(self._input, item)

    @property
    def single_handler(self) -> bool:
        return self.handlers is not None and self.handlers.mode == "handler"

    def take_turns(self) -> None:
        """Let a single handler's calls take turns on their hop's thread (batching/cooperative.py):
        for a pool in the process that answers their model calls. Not under a worker class
        other than gevent's (``handler_turns``), nor for a script that uses thread-local state,
        locks, events or queues, which calls on one thread would share or wait on forever
        (``user_code.thread_primitives``)."""
        from tfbatch.handlers.user_code import thread_primitives

        if not self.single_handler or not handler_turns():
            return
        where = thread_primitives(self.handlers.script)
        if where is not None:
            self.threads_because = (f"the script uses what threads share or wait on ({where}): calls taking "
                                    "turns on one thread would share it, or wait on each other for good")
            log.info("a single handler's calls get a thread each: %s", self.threads_because)
            return
        self.turns = Turns()

    def handler_calls(self) -> str:
        """How a single handler's calls run, for the report."""
        turns = self.turns
        if turns is None:
            return "a thread each" + (f": {self.threads_because}" if self.threads_because else "")
        spent = (f"{turns.calls} calls taking turns, {turns.paused_calls} of them paused for the model, spent "
                 f"{turns.cpu_s:.2f} s on the CPU and {turns.off_cpu_s:.2f} s off it outside the model, "
                 f"{turns.idle_s:.2f} s of that with the rest of the process idle")
        if turns.blocking():
            return f"a thread each, after taking turns on the hop's thread {turns.why} ({spent})"
        return f"taking turns on the hop's thread, each pausing for the model ({spent})"

    def _timed_input(self, item: tuple) -> tuple:
        """``_guarded(self._input, item)`` on a handler thread, its CPU added to ``handler_cpu_s``
        (the calling thread's own CPU clock does not see it)."""
        began = time.thread_time()
        try:
            return _guarded(self._input, item)
        finally:
            spent = time.thread_time() - began
            with self._cpu_lock:
                self.handler_cpu_s += spent

    def _input(self, item: tuple) -> tuple | "_Images":
        ctx = self.context(item)
        if self.handlers is None:
            return self._default(item[0], item[1], ctx)
        if self.handlers.mode == "handler":
            return _final(user_result(call_user("handler", self.handlers.handler, _Body(item[0]), ctx)))
        processed = call_user("input_handler", self.handlers.input_handler, _Body(item[0]), ctx)

        def respond(err: TfbatchError) -> tuple:
            # As in local_post: the error is the model's answer, and output_handler sees it.
            return self._respond(ctx, err.status, err.to_json())

        def general() -> tuple | "_Images":
            return self._general_input(processed, ctx)

        try:
            numeric = self._numeric(processed, ctx, general, respond)
        except TfbatchError as err:
            return respond(err)
        return numeric if numeric is not None else general()

    def _general_input(self, processed: Any, ctx) -> tuple | "_Images":
        """What an ``input_handler``'s result becomes when it is not a body of numbers alone."""
        try:
            body = parse_handler_body(processed)
            decoded = self._decode(body, ctx)
        except TfbatchError as err:
            return self._respond(ctx, err.status, err.to_json())
        if type(decoded) is _Images:
            decoded.respond = True
        return decoded

    def _finish_numbers(self, waiting: tuple) -> tuple:
        """A ``_Numbers`` request's result, given what ``decode_numeric_many`` read for it."""
        numbers, found = waiting
        if found is ALONE:
            try:
                found = decode_numeric(numbers.text, numbers.sig)
            except TfbatchError as err:
                if numbers.respond is None:
                    raise
                return numbers.respond(err)
        if found is None:
            return numbers.general()  # outside the try: an output_handler it runs is not run twice
        tensors, fmt = found
        return ("tensors", tensors, fmt, numbers.version, numbers.sig.name)

    def _finish(self, waiting: tuple) -> tuple:
        """A fast-path request's tensors from its decoded images (None: a value the decoder
        refused, so the general path decides the whole body, as it did before)."""
        images, values = waiting
        try:
            if any(v is None for v in values):
                return self._general(images.body, images.ctx)
            return ("tensors", b64_tensors(values, images.key, images.info, images.sig, self.max_image_pixels),
                    "row", images.version, images.sig.name)
        except TfbatchError as err:
            if not images.respond:
                raise
            return self._respond(images.ctx, err.status, err.to_json())

    def _decode(self, body: dict, ctx) -> tuple | "_Images":
        """Tensors for the model, or ``_Images`` when the body takes the fast decode (``b64_texts``)."""
        known = self.models.get(ctx.model_name)
        if ctx.method == "predict" and ctx.model_version is None and known is not None:
            version, signatures, default = known
            sig = signatures.get(default)
            found = b64_texts(body, sig) if sig is not None else None
            if found is not None:
                return _Images(body, ctx, version, sig, *found)
        return self._general(body, ctx)

    def _numeric(self, text: Any, ctx, general: Callable[[], Any] | None = None,
                 respond: Callable[[TfbatchError], tuple] | None = None) -> tuple | "_Numbers" | None:
        """The tensors of a body of numbers alone for the default signature, read from its text
        (``codec.decode_numeric``: no Python object per number), or None: the general way.

        Given ``general`` (the general way for this body), a small text is left to be read
        with the hop's others (``_Numbers``, ``codec.decode_numeric_many``); ``respond``
        then turns its read's error into the request's result (None: the error is raised)."""
        known = self.models.get(ctx.model_name)
        if ctx.method != "predict" or ctx.model_version is not None or known is None:
            return None
        version, signatures, default = known
        sig = signatures.get(default)
        if sig is None:
            return None
        # The script's json.dumps (jsonenc's look-alike) noted the numbers as it wrote them,
        # and the signature the request names, if it names one.
        written = written_numbers(text)
        if written is not None:
            key, array, named = written
            if named:  # as TF Serving: an empty name is the default signature
                sig = signatures.get(named)
                if sig is None:
                    return None  # the general way names the signature the model lacks
            found = decode_written(key, array, sig)
        else:
            if isinstance(text, str):
                try:
                    text = text.encode("utf-8")
                except UnicodeEncodeError:
                    return None
            elif isinstance(text, (bytearray, memoryview)):
                text = bytes(text)
            elif not isinstance(text, bytes):
                return None
            if general is not None and len(text) <= _NUMBERS_TOGETHER:
                return _Numbers(text, sig, version, general, respond)
            found = decode_numeric(text, sig)
        if found is None:
            return None
        tensors, fmt = found
        return ("tensors", tensors, fmt, version, sig.name)

    def _general(self, body: dict, ctx) -> tuple:
        from tfbatch.records.images import check_encoded_images
        from tfbatch.tfs.api import _signature_name
        from tfbatch.tfs.codec import decode_predict

        known = self.models.get(ctx.model_name)
        check_encoded_images(body, self.max_image_pixels)
        if ctx.method != "predict" or ctx.model_version is not None or known is None:
            return ("json", body)  # the parent resolves it exactly as TfsApi does
        version, signatures, default = known
        sig = signatures.get(_signature_name(body) or default)
        if sig is None:
            return ("json", body)  # the parent's NotFound names the model's signatures
        tensors, fmt = decode_predict(body, sig)
        return ("tensors", tensors, fmt, version, sig.name)

    def _default(self, data, content_type: str | None, ctx) -> tuple:
        """``InferenceService._invoke_default`` up to the model call; its errors are the answer."""
        if not defaults.is_image(content_type):
            tensors = self._table(data, content_type, ctx)
            if tensors is not None:
                return tensors
            body = bytes(data)
            def general() -> tuple | "_Images":
                return self._decode(defaults.json_request(body, content_type), ctx)

            if defaults.media_type(content_type) in defaults.JSON_TYPES:
                tensors = self._numeric(body, ctx, general)
                if tensors is not None:
                    return tensors
            return general()
        if ctx.method != "predict":
            raise InvalidInput(f"an image body can only be sent to predict, not {ctx.method}")
        known = self.models.get(ctx.model_name)
        if known is None or ctx.model_version is not None:
            # The parent resolves versions; the dataflow never names one, so this is a guard.
            raise InvalidInput("an image body for a named model version needs the in-process service")
        version, signatures, default = known
        sig = signatures[default]
        return ("tensors", defaults.image_inputs(bytes(data), sig, self.max_image_pixels), "row", version, sig.name)

    def _table(self, data, content_type: str | None, ctx) -> tuple | None:
        """A plain numeric CSV body for the default signature, parsed in bulk
        (``defaults.table_tensors``: the tensor ``_decode`` would build); None: the general path."""
        known = self.models.get(ctx.model_name)
        if ctx.method != "predict" or ctx.model_version is not None or known is None:
            return None
        version, signatures, default = known
        tensors = defaults.table_tensors(bytes(data), content_type, signatures[default])
        return None if tensors is None else ("tensors", tensors, "row", version, signatures[default].name)

    def _outputs(self, entries: list) -> list:
        """The output step of each entry; a run's (``join_runs``) bodies are encoded together."""
        results, bodies = [], iter(())
        for entry in entries:
            kind = entry[1]
            if kind == OUTPUTS_RUN:
                try:
                    bodies = iter(self._run_bodies(entry))
                except Exception as exc:  # noqa: BLE001 - defensive: each request of the run answers it
                    log.exception("output step of a run failed")
                    err = from_exception(exc)
                    bodies = iter([(err.status, err.to_json())] * len(entry[2][1]))
            if kind == OUTPUTS_RUN or kind == IN_RUN:
                results.append(_guarded(self._run_output, (entry[0], next(bodies, None))))
            else:
                results.append(_guarded(self.output, entry))
        return results

    def _run_bodies(self, entry: tuple) -> list[tuple]:
        """(status, content) of each request of a run, in order: one encode for all of them
        (``codec.encode_predict_bodies``), else each request's own, as ``output`` does it."""
        outputs, sizes, fmt, version, sig_name = entry[2]
        try:
            bodies = encode_predict_bodies(outputs, sizes, fmt)
        except Exception:  # noqa: BLE001 - each request's own encode names what is wrong
            bodies = None
        if bodies is not None:
            return [(200, body) for body in bodies]
        return [self._content(entry[0], "outputs", (part, fmt, version, sig_name))
                for part in cut_rows(outputs, sizes)]

    def _run_output(self, item_body: tuple) -> tuple:
        item, answer = item_body
        if answer is None:
            raise RuntimeError("an output step entry of a run came without its run's first")
        return self._respond(self.context(item), *answer)

    def output(self, entry: tuple) -> tuple:
        item, kind, payload = entry
        status, content = self._content(item, kind, payload)
        return self._respond(self.context(item), status, content)

    def _content(self, item: tuple, kind: str, payload: Any) -> tuple[int, bytes]:
        """(status, body) of the TFS answer an output step entry stands for."""
        if kind == "outputs":
            outputs, fmt, version, sig_name = payload
            sig = self.models[item[4]][1][sig_name]
            try:
                return 200, jsonenc.dumps(encode_predict(outputs, fmt, sig, native=True))
            except TfbatchError as err:
                return err.status, err.to_json()
        if kind == "result":
            return 200, jsonenc.dumps(payload)
        return payload

    def _respond(self, ctx, status: int, content: bytes) -> tuple:
        if self.handlers is None:
            return ("final", status, content, "application/json")
        response = make_response(status, content, ctx.rest_uri)
        return _final(user_result(call_user("output_handler", self.handlers.output_handler, response, ctx)))


# A run (``join_runs``): consecutive requests of a hop whose tensors one model call takes
# together cross the pipe as one array each way. Its first request's input step result is
# ``(TENSORS_RUN, tensors, fmt, version, sig_name, sizes)`` (``sizes``: each request's rows),
# each later one's is ``(IN_RUN,)``; on the way back the first's output entry is
# ``(item, OUTPUTS_RUN, (outputs, sizes, fmt, version, sig_name))``, the others'
# ``(item, IN_RUN, None)``. A batch of one-line requests (SingleRecord CSV through a script)
# otherwise sent two small arrays per request through pickle, and the parent, which feeds
# the model, concatenated and cut them one request at a time.
TENSORS_RUN, OUTPUTS_RUN = "tensors-run", "outputs-run"
IN_RUN = "in-run"


def tensor_layout(tensors: dict) -> tuple | None:
    """What must match for requests to share a model call; None when rows cannot be counted."""
    if len(tensors) == 1:
        ((key, a),) = tensors.items()
        return ((key, a.dtype.str, a.shape[1:]),) if a.ndim else None
    sizes = {a.shape[0] if a.ndim else None for a in tensors.values()}
    if len(sizes) != 1 or None in sizes:
        return None
    return tuple(sorted((k, a.dtype.str, a.shape[1:]) for k, a in tensors.items()))


def row_count(tensors: dict) -> int:
    """The rows of tensors whose ``tensor_layout`` is not None (they all have as many)."""
    return next(iter(tensors.values())).shape[0]


def cut_rows(tensors: dict, sizes: list[int]) -> list[dict]:
    """``tensors`` cut along their first axis into parts of ``sizes`` rows, in order."""
    parts, at = [], 0
    for size in sizes:
        parts.append({k: v[at:at + size] for k, v in tensors.items()})
        at += size
    return parts


def join_runs(firsts: list, items: list) -> list:
    """``firsts`` with each run of two or more consecutive ``tensors`` results for the same
    model, version, signature, format and layout joined into one (see ``TENSORS_RUN``)."""
    layouts = [tensor_layout(r[1]) if r[0] == "tensors" else None for r in firsts]
    out, n = firsts, 0
    while n < len(firsts):
        first, layout = firsts[n], layouts[n]
        end = n + 1
        if layout is not None:
            key = (items[n][4], first[2], first[3], first[4])
            while end < len(firsts) and layouts[end] == layout and (items[end][4], *firsts[end][2:5]) == key:
                end += 1
        if end - n > 1:
            members = firsts[n:end]
            sizes = [row_count(r[1]) for r in members]
            joined = {k: np.concatenate([r[1][k] for r in members]) for k in first[1]}
            if out is firsts:
                out = list(firsts)
            out[n] = (TENSORS_RUN, joined, first[2], first[3], first[4], sizes)
            out[n + 1:end] = [(IN_RUN,)] * (end - n - 1)
        n = end
    return out


# pybase64's SIMD decoder where installed (tfs/codec.py), binascii's strict one otherwise.
_b64decode, _strict_b64decode = fast_b64decode, strict_b64decode


# Bodies of numbers up to this size wait to be read with the hop's others (``_Numbers``);
# larger ones are read at once, where one parse's fixed cost is small beside the numbers'.
_NUMBERS_TOGETHER = 4096


class _Numbers:
    """A request whose body may be numbers alone, waiting to be read with the hop's others:
    its text, the signature, what else to do with it (``general``) and with a read's error
    (``respond``; None: raise it)."""

    __slots__ = ("text", "sig", "version", "general", "respond")

    def __init__(self, text, sig, version, general, respond):
        self.text, self.sig, self.version, self.general, self.respond = text, sig, version, general, respond


class _Images:
    """A request whose body takes the fast decode, waiting for its images to be decoded with
    the hop's others; ``respond``: its errors go to ``output_handler`` (a script's input step)."""

    __slots__ = ("body", "ctx", "version", "sig", "key", "info", "texts", "respond")

    def __init__(self, body, ctx, version, sig, key, info, texts):
        self.body, self.ctx, self.version, self.sig = body, ctx, version, sig
        self.key, self.info, self.texts = key, info, texts
        self.respond = False


def b64decode_all(texts: list[str]) -> list[bytes | None]:
    """Each text decoded as ``_b64decode`` decodes it alone, None where it refuses it.

    With pybase64, the texts are decoded in one call: all but the last four characters of
    each, joined, then each last quantum (which may hold padding) by binascii's strict
    decoder, which keeps the GIL. Base64 decodes four characters at a time, so the bytes are
    the same as one call per text. Anything unusual (a length not a multiple of four, ``=``
    before the last quantum, a refused character, a tail binascii refuses) falls back to one
    call per text, which decides it as before.
    """
    import binascii

    if len(texts) > 1 and _b64decode is not _strict_b64decode and \
            all(len(t) >= 4 and not len(t) % 4 for t in texts):
        heads = "".join([t[:-4] for t in texts])
        if "=" not in heads:
            try:
                joint = memoryview(_b64decode(heads))
                tails = [_strict_b64decode(t[-4:]) for t in texts]
            except (binascii.Error, ValueError):
                pass
            else:
                out, at = [], 0
                for text, tail in zip(texts, tails):
                    size = (len(text) - 4) // 4 * 3
                    out.append(b"".join((joint[at:at + size], tail)))
                    at += size
                return out
    out = []
    for text in texts:
        try:
            out.append(_b64decode(text))
        except (binascii.Error, ValueError):
            out.append(None)
    return out


def b64_texts(body: Any, sig: Any) -> tuple[str, Any, list[str]] | None:
    """(input key, its TensorInfo, the base64 texts) of ``{"instances": [{"b64": ...}, ...]}``
    for a one-string-input signature, or None for any other body (the general path's).

    What the scripts around image models send (``input_handler`` base64-wraps each image),
    and what the general path spends most of a record's decode on: it walks the body twice,
    base64-decodes each image's first bytes to check its header, then the whole value again
    in the codec. The fast path (``Worker.run``): these texts, decoded once with the hop's
    others (``b64decode_all``, which accepts only what ``b64decode(validate=True)`` accepts;
    a value it refuses sends the whole body the general way), then ``b64_tensors`` checks each
    header on the decoded bytes with the same check, limits and path in the message. The
    tensors are the ones ``decode_predict`` gives (tests/unit/handlers/test_b64_rows.py)."""
    if type(body) is not dict or len(body) != 1 or len(sig.inputs) != 1:
        return None
    instances = body.get("instances")
    (key, info), = sig.inputs.items()
    if type(instances) is not list or not instances or not info.is_string or \
            (info.shape is not None and len(info.shape) != 1):
        return None
    texts = []
    for instance in instances:
        if type(instance) is not dict or len(instance) != 1:
            return None
        text = instance.get("b64")
        if type(text) is not str or text.endswith("==="):
            return None
        texts.append(text)
    return key, info, texts


def b64_request(body: Any, sig: Any, max_pixels: int) -> tuple[int, dict[str, Any]] | None:
    """One body through the fast decode on its own (a script's in-process REST call, not a
    hop's requests together): (its rows, its tensors), or None where the general path decides
    (any other body, or base64 the decoder refuses)."""
    found = b64_texts(body, sig)
    if found is None:
        return None
    key, info, texts = found
    values = b64decode_all(texts)
    if any(value is None for value in values):
        return None
    return len(texts), b64_tensors(values, key, info, sig, max_pixels)


def b64_tensors(values: list[bytes], key: str, info: Any, sig: Any, max_pixels: int) -> dict[str, Any]:
    """The request's tensor from its decoded values, each image's header checked first."""
    array = np.empty(len(values), dtype=object)
    for n, data in enumerate(values):
        if sniff(data) is not None:  # bytes that are no image (a tf.Example, text) pass, as there
            check_image(data, max_pixels, f"request.instances[{n}]", formats=None)
        array[n] = data
    return {key: coerce(array, info, sig.name)}


def _final(response: InvocationResponse) -> tuple:
    return ("final", response.status, response.body, response.content_type)


def _guarded(step, item) -> tuple:
    """One record's step, never raising: as in ``invoke``, a failure is that record's response."""
    try:
        return step(item)
    except TfbatchError as err:
        return _final(InvocationResponse.from_error(err))
    except Exception as exc:  # defensive: nothing escapes a record
        log.exception("invocation failed")
        return _final(InvocationResponse.from_error(from_exception(exc)))


def _settle_heap() -> None:
    """Leave what the worker holds for good (its imports and the script's) out of every later
    collection, and collect the young generation less often (``WORKER_GC_THRESHOLDS``). Once,
    after start-up: a later freeze would keep for good whatever garbage was waiting then. A
    reference cycle made while hops run is still collected."""
    import gc

    gc.freeze()
    gc.set_threshold(*WORKER_GC_THRESHOLDS)


def main(conn) -> None:
    """The worker process: ``("init", {...})``, ``("models", {...})``, then hops until EOF.

    A hop is ``[(step, [items]), ...]``; ``("models", ...)`` may come again (it replaces them).
    """
    kind, init = wire.recv(conn)
    try:
        worker = Worker(init)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the hop
        wire.send(conn, ("failed", f"{type(exc).__name__}: {exc}"))
        return
    _settle_heap()
    wire.send(conn, ("ready", None))
    while True:
        try:
            message = wire.recv(conn)
        except EOFError:
            return
        if message is None:
            return
        if type(message) is tuple and message[0] == "models":
            worker.models = message[1]
            wire.send(conn, ("ready", None))
            continue
        wire.send(conn, [worker.run(step, items) for step, items in message])


if __name__ == "__main__":
    import socket
    import sys

    from tfbatch.runtime.exit import end

    main(socket.socket(fileno=int(sys.argv[1])))
    end(0)
