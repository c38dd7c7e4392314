"""The Ray engine's driver loop: feeding each instance actor its keys, collecting its answers.

``RayEngine.run`` (ray.py) builds one ``RayJob`` per run; the module docstring there
describes the protocol (feed, take, end) and how an actor's death is survived.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from tfbatch.engines.ray import RayOptions, RunTimeline, _ray, forwarded_env
from tfbatch.storage import ObjectRef
from tfbatch.transform.engine import Emit
from tfbatch.transform.ledger import Ledger
from tfbatch.transform.plan import JobInputs
from tfbatch.transform.report import InstanceSummary, ObjectResult, RecordFailure
from tfbatch.transform.spec import TransformSpec

log = logging.getLogger(__name__)

# Keys per feed call at most: past this a call's cost is negligible, and a longer chunk only
# adds look-ahead (the local engine hands its workers chunks of the same size).
MAX_CHUNK = 256
# Keys the driver keeps ahead of an actor's runner (key-only chunks; see inbox_size).
INBOX_KEYS = 256
# Tries of the call that waits for a restarted actor (each waits for Ray to report the actor
# alive or restarting again); past them the actor is taken as gone.
REVIVE_RETRIES = 100


def job_inputs(spec: TransformSpec, options: RayOptions) -> JobInputs:
    """The listing pass the driver makes when the job did not hand it one."""
    done = Ledger.for_spec(spec).done_keys(retry_failed=spec.retry_failed) if spec.resume else set()
    return JobInputs.for_spec(spec, done, page_size=options.list_page_size)


@dataclass
class _Instance:
    """The driver's side of one actor: what it was fed, what came back, what waits to go."""

    index: int
    actor: object = None
    epoch: int = 0  # bumped at each restart the driver handles; answers of older calls are ignored
    incarnation: str | None = None
    outstanding: dict = field(default_factory=dict)  # key -> ObjectRef: fed, result not yet back
    fed: int = 0  # objects fed to the current incarnation
    taken: int = 0  # of those, pulled by its runner
    filling: list = field(default_factory=list)  # the next chunk
    backlog: deque = field(default_factory=deque)  # whole chunks (lists of ObjectRef) not yet fed
    ended: bool = False  # end() sent to the current incarnation
    done: bool = False  # its run is over (summary received), or it is given up
    restarts: int = 0
    taking: bool = False  # a take() call is out
    reviving: bool = False  # restarted: waiting for the new process's first answer
    pooled: bool = False  # a pooled (warm) actor this job leased (ray_warm.py)


class RayJob:
    """One run of a job on the cluster: the actors, the feeding loop, the answers."""

    def __init__(self, spec: TransformSpec, emit: Emit, options: RayOptions, timeline: RunTimeline, stop=None):
        self.ray = _ray()
        self.stop = stop
        self.spec = spec
        self.emit = emit
        self.options = options
        self.timeline = timeline
        self.n = spec.instance_count
        self.chunk = chunk_size(spec)
        self.inbox = inbox_size(spec, self.chunk, self.options.remote_read)
        self.summaries = [InstanceSummary(instance=i) for i in range(self.n)]
        self.fatal: dict[int, str] = {}
        self.calls: dict = {}  # ray ObjectRef -> (kind, instance, epoch, chunk or None)
        self.inst = [_Instance(i) for i in range(self.n)]
        self.exhausted = False
        # The forwarded environment travels as an argument that the actor (and reader task) applies
        # first thing, not as a runtime_env: an actor with a runtime_env of its own never takes an
        # idle worker process of the job, and the one started for it waits on Ray's runtime-env
        # agent (0.4 s more per job, benchmarks/ray/fresh-actors.md).
        self.env = forwarded_env() if options.forward_env else None
        self.started = time.monotonic()
        self.pool_key = None
        if options.keep_warm_s > 0:
            from tfbatch.engines.ray_warm import pool_key

            resources = {"cpus": options.cpus_per_instance, "gpus": options.gpus_per_instance,
                         "spread": options.spread, "max_restarts": options.max_restarts}
            self.pool_key = pool_key(spec, resources, forwarded_env() if options.forward_env else {})
        self.token = uuid.uuid4().hex  # this job, to the pooled actors it leases
        self.job_id = self.ray.get_runtime_context().get_job_id()

    # ---- set-up ---------------------------------------------------------------------------

    def _actor_options(self) -> dict:
        opts = self.options
        kwargs = dict(
            num_cpus=opts.cpus_per_instance, num_gpus=opts.gpus_per_instance,
            # Ray restarts a dead actor; its calls are not re-run by Ray (max_task_retries=0):
            # the driver knows which objects the dead process held and feeds them again.
            max_restarts=opts.max_restarts, max_task_retries=0,
            # A take() long-polls beside feed() and end() calls.
            max_concurrency=8,
        )
        if opts.spread:
            kwargs["scheduling_strategy"] = "SPREAD"
        return kwargs

    def _start_actors(self) -> None:
        from tfbatch.engines.ray_actor import actor_class

        cls = actor_class()
        try:
            from tfbatch.engines.ray_warm import make_room

            make_room(self.n * self.options.cpus_per_instance, self.n * self.options.gpus_per_instance,
                      keep_key=self.pool_key)
        except Exception:  # noqa: BLE001 - only an optimisation: the actors then wait for resources
            log.debug("could not make room for this job's actors", exc_info=True)
        for st in self.inst:
            if self.pool_key is not None:
                from tfbatch.engines.ray_warm import NAMESPACE, actor_name

                # The pool's actor for this instance, started now if there is none: either way
                # it is leased before anything is fed (reviving until the lease answers).
                st.actor = cls.options(**self._actor_options(), name=actor_name(self.pool_key, st.index, self.n),
                                       namespace=NAMESPACE, lifetime="detached", get_if_exists=True).remote(
                    self.spec.model_dump(), st.index, self.n, self.options.keep_warm_s, env=self.env)
                st.pooled = st.reviving = True
                self._lease(st)
            else:
                self._start_fresh(st, cls)
        self.timeline.mark("actors_submitted")

    def _lease(self, st: _Instance, retries: int = 0) -> None:
        call = st.actor.lease.options(max_task_retries=retries) if retries else st.actor.lease
        self._call("lease", st, call.remote(self.token, self.job_id, self.spec.model_dump()))

    def _start_fresh(self, st: _Instance, cls=None) -> None:
        """An actor of this job alone, ended with it (no pool)."""
        if cls is None:
            from tfbatch.engines.ray_actor import actor_class

            cls = actor_class()
        st.pooled = False
        st.actor = cls.options(**self._actor_options()).remote(self.spec.model_dump(), st.index, self.n, env=self.env)
        self._call("ready", st, st.actor.ready.remote())

    def _inputs(self, inputs: JobInputs) -> Iterator[tuple[int, ObjectRef]]:
        for pair in inputs:
            self.timeline.listed = inputs.listed
            yield pair
        self.timeline.listed = inputs.listed
        self.timeline.listing_done_s = time.monotonic() - self.started
        self.timeline.mark("listing_done")

    # ---- the loop -------------------------------------------------------------------------

    def run(self, inputs: JobInputs | None = None) -> list[InstanceSummary]:
        # The actors first: their worker start, TensorFlow import and model load (seconds) go on
        # while this process reads the ledger and lists the first page.
        self._start_actors()
        try:
            if inputs is None:
                inputs = job_inputs(self.spec, self.options)
            self._loop(self._inputs(inputs))
            for i, skipped in enumerate(inputs.skipped):
                self.summaries[i].skipped += skipped
            return self._finish()
        finally:
            self._let_go()

    def _let_go(self) -> None:
        """End the job's actors: release pooled ones whose run is over, kill the rest."""
        releases = {}
        for st in self.inst:
            if st.pooled and st.done and st.index not in self.fatal and st.incarnation is not None:
                try:
                    releases[st.index] = st.actor.release.remote(self.token)
                except Exception:  # noqa: BLE001 - gone: killed below
                    pass
        for st in self.inst:
            released = False
            if st.index in releases:
                try:
                    released = bool(self.ray.get(releases[st.index], timeout=30))
                except Exception:  # noqa: BLE001 - not released: killed
                    released = False
            if not released and st.actor is not None:
                try:
                    self.ray.kill(st.actor, no_restart=True)
                except Exception:  # already gone
                    pass

    def _loop(self, inputs: Iterator[tuple[int, ObjectRef]]) -> None:
        for st in self.inst:
            self._take(st)
        while not all(st.done for st in self.inst):
            self._pull(inputs)
            for st in self.inst:
                self._send(st)
            waiting = sum(len(st.filling) + sum(map(len, st.backlog)) + st.fed - st.taken for st in self.inst)
            self.timeline.max_waiting = max(self.timeline.max_waiting, waiting)
            self._collect()

    def _pull(self, inputs: Iterator[tuple[int, ObjectRef]]) -> None:
        """Read the listing until some instance holds a whole chunk it cannot feed yet (the bound)."""
        while not self.exhausted:
            if self.stop is not None and self.stop.is_set():
                self.exhausted = True  # --max-error-rate: finish what is in flight only
                for st in self.inst:
                    st.backlog.clear()
                    st.filling = []
                break
            if any(st.backlog for st in self.inst):
                break
            pair = next(inputs, None)
            if pair is None:
                self.exhausted = True
                for st in self.inst:  # the last, partial chunks
                    self._seal(st)
                break
            i, ref = pair
            st = self.inst[i]
            if st.done:  # a failed instance's partition is not run, as on the local engine
                if i not in self.fatal:
                    self._give_up_refs(st, [ref], "instance given up")
                continue
            st.filling.append(ref)
            if len(st.filling) >= self.chunk:
                self._seal(st)
                self._send(st)

    def _seal(self, st: _Instance) -> None:
        if st.filling:
            st.backlog.append(st.filling)
            st.filling = []

    def _send(self, st: _Instance) -> None:
        if st.done or st.reviving or st.incarnation is None and st.fed:
            return  # not started (or restarting): the first answer says which process it is
        # Keep ``inbox`` keys waiting in the actor's inbox: its runner pulls from there as its
        # dataflow has room, and each chunk it takes wakes a take() that brings the next.
        while st.backlog and st.fed - st.taken < self.inbox:
            self._feed(st, st.backlog.popleft())
        if self.exhausted and not st.backlog and not st.filling and not st.ended:
            st.ended = True
            self._call("end", st, st.actor.end.remote(st.fed))

    def _feed(self, st: _Instance, refs: list[ObjectRef]) -> None:
        data = None
        if self.options.remote_read:
            from tfbatch.engines.ray_actor import read_objects

            data = read_objects.options(num_cpus=self.options.reader_cpus).remote(
                [(ref.uri, ref.size) for ref in refs], self.env)
        items = [(ref.uri, ref.key, ref.size) for ref in refs]
        for ref in refs:
            st.outstanding[ref.key] = ref
        st.fed += len(refs)
        self._call("feed", st, st.actor.feed.remote(items, data), refs)
        self.timeline.calls += 1
        self.timeline.mark("first_feed")

    def _take(self, st: _Instance) -> None:
        if not st.done and not st.taking and not st.reviving:
            st.taking = True
            self._call("take", st, st.actor.take.remote())

    def _call(self, kind: str, st: _Instance, ref, refs: list[ObjectRef] | None = None) -> None:
        self.calls[ref] = (kind, st.index, st.epoch, refs)

    def _collect(self) -> None:
        waiting = list(self.calls)
        if not waiting:
            return
        self.ray.wait(waiting, num_returns=1, timeout=None)
        finished, _ = self.ray.wait(waiting, num_returns=len(waiting), timeout=0)
        for ref in finished:
            kind, i, epoch, refs = self.calls.pop(ref)
            st = self.inst[i]
            if kind == "take" and epoch == st.epoch:
                st.taking = False
            try:
                answer = self.ray.get(ref)
            except self.ray.exceptions.RayError as exc:
                self._on_error(st, kind, epoch, refs, exc)
                continue
            if epoch != st.epoch or st.done:
                continue  # an answer from before a restart the driver already handled
            if kind == "ready":
                self.timeline.mark(f"ready_{i}")
                if answer:
                    self.fatal[i] = answer
            elif kind == "lease":
                self.timeline.mark(f"ready_{i}")
                if answer is None:
                    # Another job holds the pooled actor: this instance runs on one of its own.
                    log.info("instance %d: the pooled actor is busy with another job; starting a fresh one", i)
                    st.reviving, st.incarnation = False, None
                    self._start_fresh(st)
                    continue
                self._on_answer(st, answer)
            elif kind in ("feed", "take"):
                self._on_answer(st, answer)
            self._take(st)  # one take always out (none while reviving, or once done)

    def _on_answer(self, st: _Instance, answer) -> None:
        if st.incarnation is None:
            st.incarnation = answer.incarnation
            st.reviving = False
        elif answer.incarnation != st.incarnation:
            # Restarted between calls, with no call failing: its inbox and run are new.
            self._restart(st, f"instance {st.index} restarted")
            return
        st.taken = max(st.taken, answer.taken)
        for result in answer.results:
            if st.outstanding.pop(result.key, None) is None:
                continue  # a copy from a re-fed chunk: the object was counted already
            self._result(st.index, result)
        if answer.summary is not None:
            st.done = True
            if answer.summary.fatal:
                self.fatal[st.index] = answer.summary.fatal
            elif st.outstanding:  # never expected: the run ended without answering for some objects
                log.error("instance %d ended with %d objects unanswered", st.index, len(st.outstanding))
                self._give_up_refs(st, list(st.outstanding.values()), "the instance ended without answering")
            # A fatal instance's objects are not reported, as on the local engine.
            st.outstanding.clear()
            st.backlog.clear()
            st.filling = []
            self.summaries[st.index].batches = answer.summary.batches

    def _on_error(self, st: _Instance, kind: str, epoch: int, refs, exc: BaseException) -> None:
        ray = self.ray
        if kind == "feed" and refs and self.options.remote_read and isinstance(exc, ray.exceptions.RayTaskError):
            # The reader task failed, not the actor: the chunk goes again, read by the actor
            # itself, so the dataflow reports any failure exactly as the local engine does.
            for ref in refs:
                st.outstanding.pop(ref.key, None)
            st.fed -= len(refs)
            st.backlog.appendleft(list(refs))
            return
        if epoch != st.epoch or st.done:
            return  # the same death, already handled through another call
        if kind == "ready":
            self.fatal[st.index] = f"{type(exc).__name__}: {exc}"
            self._give_up(st, exc)
            return
        self._restart(st, f"{type(exc).__name__}: {exc}")

    def _restart(self, st: _Instance, why: str) -> None:
        """The actor's process died (Ray restarts it): feed everything it held to the new one."""
        st.restarts += 1
        st.epoch += 1
        if st.restarts > self.options.max_restarts + self.options.resubmits:
            self._give_up(st, RuntimeError(why))
            return
        held = list(st.outstanding.values())
        log.warning("instance %d: %s; feeding its %d unfinished objects again", st.index, why[:300], len(held))
        self.timeline.resubmitted += len(held)
        st.outstanding.clear()
        st.incarnation, st.fed, st.taken, st.ended, st.taking = None, 0, 0, False, False
        chunks = [held[k:k + self.chunk] for k in range(0, len(held), self.chunk)]
        st.backlog.extendleft(reversed(chunks))
        # Calls made while Ray restarts the actor fail at once, so one empty feed that Ray
        # retries until the new process answers goes first; its answer names the new
        # incarnation, and only then do the chunks (and a take) follow.
        st.reviving = True
        if st.pooled:
            self._lease(st, REVIVE_RETRIES)  # the new process is not this job's until leased
            return
        probe = st.actor.feed.options(max_task_retries=REVIVE_RETRIES).remote([], None)
        self._call("feed", st, probe)

    def _give_up(self, st: _Instance, exc: BaseException) -> None:
        st.done = True
        held = list(st.outstanding.values()) + [ref for chunk in st.backlog for ref in chunk] + st.filling
        st.outstanding.clear()
        st.backlog.clear()
        st.filling = []
        if st.index not in self.fatal:
            self._give_up_refs(st, held, f"{type(exc).__name__}: {exc}")

    def _give_up_refs(self, st: _Instance, refs: list[ObjectRef], why: str) -> None:
        for ref in refs:
            self._result(st.index, _lost(ref, st.restarts, why))

    def _result(self, i: int, result: ObjectResult) -> None:
        if self.timeline.first_result_s is None:
            self.timeline.first_result_s = time.monotonic() - self.started
            self.timeline.listed_at_first_result = self.timeline.listed
            self.timeline.mark("first_result")
        self.summaries[i].count(result)
        self.emit(result)

    def _finish(self) -> list[InstanceSummary]:
        seconds = time.monotonic() - self.started
        self.timeline.mark("end")
        for st in self.inst:
            s = self.summaries[st.index]
            s.seconds = seconds
            s.fatal = self.fatal.get(st.index)
        # Facts for the timeline only (the outputs and the ledger are complete): every actor is
        # asked at once, one round trip rather than three per actor.
        asked = {}
        for st in self.inst:
            if st.index not in self.fatal:
                try:
                    asked[st.index] = [st.actor.pid.remote(), st.actor.calls_received.remote(), st.actor.marks.remote()]
                except Exception:
                    log.debug("no timeline facts from instance %d", st.index, exc_info=True)
        for i, refs in asked.items():
            try:
                pid, calls, marks = self.ray.get(refs, timeout=30)
                self.timeline.actor_pids[i], self.timeline.actor_calls[i], self.timeline.actor_marks[i] = pid, calls, marks
                self.timeline.reused[i] = calls.get("jobs", 1) > 1
            except Exception:
                log.debug("no timeline facts from instance %d", i, exc_info=True)
        return self.summaries


def inbox_size(spec: TransformSpec, chunk: int, remote_read: bool) -> int:
    """Keys the driver keeps waiting in an actor's inbox: ``INBOX_KEYS``, or MaxConcurrentTransforms
    when the job gives it (it bounds the objects in flight), never under two chunks; two chunks
    when the chunks carry their objects' bytes (``remote_read``), so memory stays as it was.

    Two chunks of 32 keys starved the actor's dataflow, which holds up to batch size x
    (workers + 2) objects (256 at 64): it waited for the driver's next feed between chunks, and
    the batch-size probe, timing that wait, kept 8 or 16 (benchmarks/ray/inbox.md).
    """
    if remote_read:
        return 2 * chunk
    return max(2 * chunk, spec.max_concurrent_transforms or INBOX_KEYS)


def chunk_size(spec: TransformSpec) -> int:
    """Keys per feed call: a model batch's worth (or the in-flight invocations), at most ``MAX_CHUNK``."""
    return max(1, min(MAX_CHUNK, max(spec.concurrency, spec.max_batch_size)))


def _lost(ref: ObjectRef, attempts: int, why: str) -> ObjectResult:
    """An object whose every attempt died with its worker: failed, transient, not in the ledger."""
    message = f"object lost with its Ray worker after {attempts} restarts: {why}"
    failure = RecordFailure(ref.key, None, None, message[:2000], 503)
    return ObjectResult(key=ref.key, ok=False, failed_records=1, failures=[failure])
