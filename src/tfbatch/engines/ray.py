"""The Ray engine: a job's instances as Ray actors on a cluster, fed by a streaming listing.

Same job, same bytes as the local engine: each actor hosts the unchanged ``InstanceRunner``
(model loaded once per actor, GPU-aware via ``num_gpus``), objects go to instance
``instance_of(key, instance_count)`` as planned, and every object goes through the same
``ObjectPipeline`` with its atomic ``.out`` write and ledger marker.

The driver (this process) lists the input once, lazily (``plan.JobInputs``: the job's own
pass when the job hands it over, actors never list), and hands each actor its objects in
chunks of ``concurrency`` keys, one remote call per chunk. At most ``CHUNKS_IN_FLIGHT`` chunks
per actor are out (the actor runs them on one pool of ``concurrency`` object threads, so
it starts the next chunk's objects while the last ones of a chunk finish) and at most one
more is held, so work starts after the first listing page and memory does not grow with the
prefix. Results come back per object in each call's answer, and are emitted, counted and
recorded per object exactly as the local engine's.

Failures: actors have ``max_restarts`` and ``max_task_retries``, so when a worker process
or a node dies Ray restarts the actor (reloading the model, elsewhere if the node is gone)
and re-runs the calls that were in flight; the driver resubmits a chunk a few more times if
Ray's own retries run out. Re-running an object is harmless: its ``.out`` is replaced
atomically with the same bytes and its marker rewritten, so the job ends with every output
written exactly once and every finished object recorded once in the ledger.

CPU-side work: with ``remote_read`` each chunk's bytes are fetched by a small Ray task that
may run on any node (see ``ray_actor.read_objects``), so a GPU actor's host spends its CPUs
on the model; docs/ray.md describes moving handler code out as well.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar

from tfbatch.errors import DependencyMissing
from tfbatch.settings import Environment
from tfbatch.storage import ObjectRef
from tfbatch.transform.engine import Emit
from tfbatch.transform.ledger import Ledger
from tfbatch.transform.plan import JobInputs
from tfbatch.transform.report import InstanceSummary, ObjectResult, RecordFailure
from tfbatch.transform.spec import TransformSpec

log = logging.getLogger(__name__)

# Environment the driver forwards to actors and reader tasks: S3 endpoint and credentials,
# container settings, TF log level. Ray workers otherwise see only their raylet's environment.
FORWARD_PREFIXES = ("AWS_", "SAGEMAKER_", "TF_CPP_", "TFBATCH_", "FSSPEC_")

# Chunks out per actor: one running while the next waits in the actor, so it never idles
# for a round trip, and the driver's look-ahead stays a few chunks per instance.
CHUNKS_IN_FLIGHT = 2


def _ray():
    try:
        import ray
    except ModuleNotFoundError as exc:
        raise DependencyMissing("engine 'ray' needs Ray: pip install 'tfbatch[ray]' (ray[default])") from exc
    return ray


@dataclass(frozen=True)
class RayOptions:
    address: str | None = None  # None: RAY_ADDRESS, else a local single-node Ray
    gpus_per_instance: float = 0
    cpus_per_instance: float = 1
    remote_read: bool = False  # fetch object bytes in Ray tasks on any node
    reader_cpus: float = 0.25
    max_restarts: int = 3
    max_task_retries: int = 3
    resubmits: int = 2  # after Ray's own retries are spent
    list_page_size: int = 1000
    forward_env: bool = True
    spread: bool = True  # one instance per node where possible, as SageMaker instances are
    log_to_driver: bool = False  # workers' logs on this process's stderr, when this process starts Ray

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides) -> "RayOptions":
        """Options from the ``TFBATCH_RAY_*`` variables; keyword overrides that are not None win."""
        environment = Environment.read(env)
        fields: dict = {
            name.removeprefix("ray_"): value
            for name, value in environment.given(
                "ray_address", "ray_gpus_per_instance", "ray_cpus_per_instance", "ray_reader_cpus", "ray_remote_read"
            ).items()
        }
        if environment.ray_logs is not None:
            fields["log_to_driver"] = environment.ray_logs
        fields.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**fields)


def forwarded_env(env: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {k: v for k, v in env.items() if k.startswith(FORWARD_PREFIXES)}


@dataclass
class RunTimeline:
    """When things happened in the last run (seconds from its start), for streaming checks."""

    first_result_s: float | None = None
    listing_done_s: float | None = None
    listed: int = 0
    listed_at_first_result: int | None = None
    resubmitted: int = 0
    calls: int = 0  # chunk calls the driver submitted to actors (resubmissions included)
    actor_pids: dict[int, int] = field(default_factory=dict)
    # What each actor process says it was handed: {"calls": n, "objects": n}, per instance.
    actor_calls: dict[int, dict[str, int]] = field(default_factory=dict)


class RayEngine:
    """Implements ``tfbatch.transform.Engine`` with the options it is built with
    (``RayOptions.from_env()`` when none are given)."""

    name: ClassVar[str] = "ray"

    def __init__(self, options: RayOptions | None = None):
        self.options = options if options is not None else RayOptions.from_env()
        self.timeline = RunTimeline()

    def run(self, spec: TransformSpec, emit: Emit, stop=None, inputs: JobInputs | None = None
            ) -> list[InstanceSummary]:
        ray = _ray()
        owns = not ray.is_initialized()
        if owns:
            address = self.options.address or os.environ.get("RAY_ADDRESS") or None
            # A Ray started here for this job stays on loopback (Ray still opens some ports on all
            # interfaces; docs/ray.md says how to fence a real cluster).
            extra = {} if address else {"include_dashboard": False, "_node_ip_address": "127.0.0.1"}
            ray.init(address=address, namespace="tfbatch", log_to_driver=self.options.log_to_driver,
                     logging_level=logging.WARNING, **extra)
        try:
            job = _Job(spec, emit, self.options, self.timeline, stop)
            return job.run(inputs)
        finally:
            if owns:
                ray.shutdown()


@dataclass
class _Task:
    """One chunk of an instance's objects, submitted as one actor call."""

    instance: int
    refs: list[ObjectRef]
    attempts: int = 0
    remote_read: bool = False


class _Job:
    def __init__(self, spec: TransformSpec, emit: Emit, options: RayOptions, timeline: RunTimeline, stop=None):
        self.ray = _ray()
        self.stop = stop
        self.spec = spec
        self.emit = emit
        self.options = options
        self.timeline = timeline
        self.n = spec.instance_count
        self.chunk = max(1, spec.concurrency)  # keys per call: what one actor runs at once
        self.summaries = [InstanceSummary(instance=i) for i in range(self.n)]
        self.fatal: dict[int, str] = {}
        self.pending: dict = {}  # ray ObjectRef -> _Task
        self.in_flight = [0] * self.n  # chunk calls out, per instance
        self.filling: list[list[ObjectRef]] = [[] for _ in range(self.n)]  # the next chunk, per instance
        self.backlog: list[deque[_Task]] = [deque() for _ in range(self.n)]  # whole chunks not yet sent
        self.runtime_env = {"env_vars": forwarded_env()} if options.forward_env else None
        self.started = time.monotonic()

    # ---- set-up ---------------------------------------------------------------------------

    def _start_actors(self) -> list:
        from tfbatch.engines.ray_actor import actor_class

        opts = self.options
        cls = actor_class()
        actors = []
        for i in range(self.n):
            kwargs = dict(
                num_cpus=opts.cpus_per_instance, num_gpus=opts.gpus_per_instance,
                max_restarts=opts.max_restarts, max_task_retries=opts.max_task_retries,
                # The chunks in flight run at once (their objects share the actor's object
                # pool), beside the driver's small calls (ready, flush, stats).
                max_concurrency=CHUNKS_IN_FLIGHT + 4,
            )
            if self.runtime_env:
                kwargs["runtime_env"] = self.runtime_env
            if opts.spread:
                kwargs["scheduling_strategy"] = "SPREAD"
            actors.append(cls.options(**kwargs).remote(self.spec.model_dump(), i, self.n))
        return actors

    def _inputs(self, inputs: JobInputs) -> Iterator[tuple[int, ObjectRef]]:
        for pair in inputs:
            self.timeline.listed = inputs.listed
            yield pair
        self.timeline.listed = inputs.listed
        self.timeline.listing_done_s = time.monotonic() - self.started

    # ---- the loop -------------------------------------------------------------------------

    def run(self, inputs: JobInputs | None = None) -> list[InstanceSummary]:
        if inputs is None:
            ledger = Ledger.for_spec(self.spec)
            done = ledger.done_keys(retry_failed=self.spec.retry_failed) if self.spec.resume else set()
            inputs = JobInputs.for_spec(self.spec, done, page_size=self.options.list_page_size)
            self.with_errors = ledger.keys_with_errors()
        else:
            self.with_errors = set()  # the job's pass: the ledger was read once, by the job
        self.actors = self._start_actors()
        self.ready = {a.ready.remote(): i for i, a in enumerate(self.actors)}
        try:
            self._loop(self._inputs(inputs))
            for i, skipped in enumerate(inputs.skipped):
                self.summaries[i].skipped += skipped
            return self._finish()
        finally:
            for actor in self.actors:
                try:
                    self.ray.kill(actor, no_restart=True)
                except Exception:  # already gone
                    pass

    def _loop(self, inputs: Iterator[tuple[int, ObjectRef]]) -> None:
        exhausted = False
        while True:
            while not exhausted:
                if self.stop is not None and self.stop.is_set():
                    exhausted = True  # --max-error-rate: finish what is in flight only
                    for i in range(self.n):
                        self.backlog[i].clear()
                        self.filling[i] = []
                    break
                if any(self.backlog):
                    break  # bounded: an instance has a whole chunk it cannot send yet; wait for it
                pair = next(inputs, None)
                if pair is None:
                    exhausted = True
                    for i in range(self.n):  # the last, partial chunks
                        self._seal(i)
                    break
                i, ref = pair
                self.filling[i].append(ref)
                if len(self.filling[i]) >= self.chunk:
                    self._seal(i)
                    self._send(i)
            for i in range(self.n):
                self._send(i)
            if not self.pending and not self.ready:
                if exhausted and not any(self.backlog):
                    return
                continue
            self._collect()

    def _seal(self, i: int) -> None:
        if self.filling[i]:
            self.backlog[i].append(_Task(i, self.filling[i], remote_read=self.options.remote_read))
            self.filling[i] = []

    def _send(self, i: int) -> None:
        while self.backlog[i] and self.in_flight[i] < CHUNKS_IN_FLIGHT:
            self._submit(self.backlog[i].popleft())

    def _submit(self, task: _Task) -> None:
        i = task.instance
        if i in self.fatal:
            return  # as the local engine: a failed instance's partition is not run
        data = None
        if task.remote_read:
            from tfbatch.engines.ray_actor import read_objects

            kwargs = {"num_cpus": self.options.reader_cpus}
            if self.runtime_env:
                kwargs["runtime_env"] = self.runtime_env
            data = read_objects.options(**kwargs).remote([ref.uri for ref in task.refs])
        items = [(ref.uri, ref.key, ref.size, ref.key in self.with_errors) for ref in task.refs]
        call = self.actors[i].process_chunk.remote(items, data)
        self.pending[call] = task
        self.in_flight[i] += 1
        self.timeline.calls += 1

    def _collect(self) -> None:
        ray = self.ray
        waiting = list(self.pending) + list(self.ready)
        finished, _ = ray.wait(waiting, num_returns=1, timeout=None)
        finished, _ = ray.wait(waiting, num_returns=len(waiting), timeout=0)
        for ref in finished:
            if ref in self.ready:
                self._on_ready(ref, self.ready.pop(ref))
            else:
                self._on_result(ref, self.pending.pop(ref))

    def _on_ready(self, ref, instance: int) -> None:
        try:
            fatal = self.ray.get(ref)
        except Exception as exc:  # the actor could not even be created
            fatal = f"{type(exc).__name__}: {exc}"
        if fatal:
            self.fatal[instance] = fatal
            self.backlog[instance].clear()

    def _on_result(self, ref, task: _Task) -> None:
        ray = self.ray
        i = task.instance
        self.in_flight[i] -= 1
        try:
            results = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            if task.remote_read:
                # The reader task itself failed: let the instance read the chunk itself, so
                # the pipeline reports and records any failure exactly as the local engine does.
                self._retry(replace(task, remote_read=False), exc, count=False)
                return
            self._give_up(task, exc)
            return
        except (ray.exceptions.RayError,) as exc:  # worker/actor/node died, object lost
            self._retry(task, exc)
            return
        if results is None:  # the instance is fatal; its ready() call says why
            return
        if self.timeline.first_result_s is None:
            self.timeline.first_result_s = time.monotonic() - self.started
            self.timeline.listed_at_first_result = self.timeline.listed
        for result in results:
            self._count(i, result)
            self.emit(result)

    def _retry(self, task: _Task, exc: BaseException, *, count: bool = True) -> None:
        if count:
            task.attempts += 1
        if task.attempts > self.options.resubmits or task.instance in self.fatal:
            self._give_up(task, exc)
            return
        log.warning("chunk of %d objects from %s: %s; submitting it again", len(task.refs), task.refs[0].key,
                    type(exc).__name__)
        self.timeline.resubmitted += 1
        self.backlog[task.instance].appendleft(task)

    def _give_up(self, task: _Task, exc: BaseException) -> None:
        for ref in task.refs:
            result = _lost(ref, task.attempts, exc)
            self._count(task.instance, result)
            self.emit(result)

    def _count(self, i: int, result: ObjectResult) -> None:
        self.summaries[i].count(result)

    def _finish(self) -> list[InstanceSummary]:
        seconds = time.monotonic() - self.started
        for i, actor in enumerate(self.actors):
            s = self.summaries[i]
            s.seconds = seconds
            s.fatal = self.fatal.get(i)
            if s.fatal is None:
                try:
                    # The last group commit: entries still queued in the actor are not yet done.
                    self.ray.get(actor.flush_ledger.remote(), timeout=120)
                except Exception:
                    log.warning("instance %d: last ledger commit failed; its objects will be redone", i,
                                exc_info=True)
                try:
                    s.batches = self.ray.get(actor.batch_stats.remote(), timeout=30)
                    self.timeline.actor_pids[i] = self.ray.get(actor.pid.remote(), timeout=30)
                    self.timeline.actor_calls[i] = self.ray.get(actor.calls_received.remote(), timeout=30)
                except Exception:  # stats only; the outputs are written already
                    log.debug("no batch stats from instance %d", i, exc_info=True)
        return self.summaries


def _lost(ref: ObjectRef, attempts: int, exc: BaseException) -> ObjectResult:
    """An object whose every attempt died with its worker: failed, transient, not in the ledger."""
    message = f"object lost with its Ray worker after {attempts} attempts: {type(exc).__name__}: {exc}"
    failure = RecordFailure(ref.key, None, None, message[:2000], 503)
    return ObjectResult(key=ref.key, ok=False, failed_records=1, failures=[failure])
