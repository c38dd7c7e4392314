"""What runs inside the Ray cluster: the instance actor and the reader task.

``InstanceActor`` is one instance of the job, run exactly as a local worker process runs
one: a single ``InstanceRunner.run`` over a stream of keys, started when the actor starts
and ended by the driver's ``end()``. So a Ray instance gets the same dataflow as a local one:
the batch lanes form batches across objects (and across the driver's chunks), outputs are
written a batch at a time and the ledger commits them in groups.

The stream is an inbox of key chunks the driver fills with ``feed``. The runner pulls keys
only as fast as its dataflow has room for them (the lanes bound their own in-flight
objects), so the inbox is the only look-ahead beyond that: each chunk the runner takes
wakes the driver's long-polling ``take`` call, which tops the inbox up.

``take`` is also how results leave: it hands back the objects finished since the last call,
but only once their ledger entries are committed (a forced group commit when a whole group
is waiting, when the oldest result has waited ``DELIVER_AFTER_S``, or at the end). The driver
counts an object done only from such an answer, so an actor killed at any point takes with
it only objects the driver still holds as outstanding, and those it feeds again to the
restarted actor. Every answer names the actor's incarnation: a restart the driver did not
see fail a call still shows.

``read_objects`` is the CPU/IO-side stage that may run on any node: it fetches a chunk's
bytes so the model actor does not spend its own host's CPUs and network on them. They are
handed to the unchanged dataflow as in-process ``memory://`` objects (fsspec's memory
filesystem is local to the actor process); an object the reader could not fetch is read by
the actor itself, so its failure is reported exactly as the local engine reports it.

This module imports ray at import time; ``tfbatch.engines.ray`` imports it lazily.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import fsspec
import ray

from tfbatch.engines.ray import FORWARD_PREFIXES
from tfbatch.storage import ObjectRef
from tfbatch.storage.io import read_small_many
from tfbatch.transform.report import InstanceSummary, ObjectResult, RecordFailure
from tfbatch.transform.spec import TransformSpec

# The forwarded variables this worker process started with (its raylet's), before any job set its own.
_STARTED_WITH = {k: v for k, v in os.environ.items() if k.startswith(FORWARD_PREFIXES)}
# Inputs handed over from reader tasks live here, in the actor process's memory filesystem.
STAGING = "memory://tfbatch-ray-staging"
# Results go back once this many wait, or once the oldest has waited this long: the ledger's
# own group rhythm, so delivering never forces more commits (syncs) than a local worker makes.
DELIVER_GROUP = 256
DELIVER_AFTER_S = 1.0
# A take with nothing to say still answers after this long, so a driver whose call went to
# a restarted actor learns the new incarnation even if nothing else would wake it.
TAKE_TIMEOUT_S = 5.0
# How often a pooled actor checks its lessee's driver and its own idle time.
WATCH_EVERY_S = 0.5



@dataclass(frozen=True)
class _End:
    """The inbox's last message: the driver fed ``fed`` objects to this incarnation in all."""

    fed: int

# (uri, key, size): one object of a chunk, as the driver sends it.
Item = tuple[str, str, "int | None"]


def apply_env(env: dict[str, str] | None) -> None:
    """Make the driver's forwarded environment (``engines.ray.forwarded_env``) this process's.

    It comes as an argument rather than a Ray runtime_env, so the actor or task can start on an
    idle worker process of the job, or else on a plain new one, instead of one that Ray's
    runtime-env agent prepares for that environment (benchmarks/ray/fresh-actors.md). Same
    result as a runtime_env: the worker's own variables with the forwarded ones over them. A worker process Ray reuses within one driver's Ray job
    (a reader task's, then an actor's) may carry an earlier tfbatch job's variables, so the
    forwarded names go back to what the process started with before the new ones are set.
    Applied before anything reads them: TensorFlow (``TF_CPP_*``) and boto/s3fs (``AWS_*``) are
    imported later, in the runner; fsspec read its ``FSSPEC_*`` settings when this module
    imported it, so it reads them again if they changed. Processes started later (handler
    workers) inherit the result."""
    if env is None:
        return
    fsspec_before = {k: v for k, v in os.environ.items() if k.startswith("FSSPEC")}
    for name in [k for k in os.environ if k.startswith(FORWARD_PREFIXES) and k not in _STARTED_WITH]:
        del os.environ[name]
    os.environ.update(_STARTED_WITH)
    os.environ.update(env)
    if {k: v for k, v in os.environ.items() if k.startswith("FSSPEC")} != fsspec_before:
        from fsspec import config

        # What importing fsspec does, with the environment as it is now.
        config.conf.clear()
        config.conf_dir = os.environ.get("FSSPEC_CONFIG_DIR", config.default_conf_dir)
        config.set_conf_files(config.conf_dir, config.conf)
        config.set_conf_env(config.conf, os.environ)


@ray.remote
def read_objects(items: list[tuple[str, int | None]], env: dict[str, str] | None = None) -> list[bytes | None]:
    """Each ``(uri, listed size)``'s bytes, or None where reading failed (the actor then reads
    it and reports why).

    Read as the dataflow reads a chunk from a store (``storage.io.read_small_many``): the GETs in
    flight together, one per object, with no HEAD for the listed size. One at a time, a chunk
    of 32 small objects cost 32 round trips end to end."""
    apply_env(env)
    return [data if isinstance(data, bytes) else None for data in read_small_many(items)]


@dataclass
class Answer:
    """What ``take`` (and ``feed``) tell the driver."""

    incarnation: str
    taken: int  # objects the runner has pulled from the inbox so far, in this incarnation
    results: list[ObjectResult] = field(default_factory=list)
    summary: InstanceSummary | None = None  # set once the run is over (or could not start)


class InstanceActor:
    """One instance of the job; no method raises for an object's failure (failures are results)."""

    def __init__(self, spec_fields: dict, instance: int, instance_count: int, keep_warm_s: float = 0.0,
                 env: dict[str, str] | None = None):
        self._marks = {"process_start": _process_start(), "init": time.time()}
        apply_env(env)  # first: the runner's imports and the model load read it
        from tfbatch.transform.instance import InstanceRunner

        self.instance = instance
        self.incarnation = uuid.uuid4().hex
        self.fatal: str | None = None
        # keep_warm_s > 0: a pooled actor (warm.py). Its model stays loaded between jobs; each
        # job leases it, runs, releases it; idle that long, or its lessee's driver gone, it exits.
        self.keep_warm_s = keep_warm_s
        self.lessee: str | None = None  # the leasing job's token
        self.lessee_job: str | None = None  # and its Ray job id, watched while leased
        self._idle_since = time.monotonic()
        self.jobs = 0  # runs this process has made (a pooled actor: more than one)
        spec = TransformSpec(**spec_fields)
        self.runner = InstanceRunner(spec, instance, instance_count, host_instances=_host_instances(instance_count))
        self._inbox: queue.Queue = queue.Queue()  # bounded by the driver: it feeds only what is taken
        self._cond = threading.Condition()
        self._outbox: list[ObjectResult] = []
        self._oldest: float | None = None  # when the oldest undelivered result was finished
        self._taken = 0
        self._took_chunk = False  # the runner took a chunk since the last answer: the driver refills
        self._summary: InstanceSummary | None = None
        self._running = False
        self._staged: dict[str, str] = {}  # key -> memory:// copy of a pre-read object
        self.received = {"calls": 0, "objects": 0}
        try:
            self.runner.open()
        except Exception as exc:  # reported by ready() and take(); the engine skips this partition
            self.runner.close()
            self.fatal = f"{type(exc).__name__}: {exc}"
            self._summary = InstanceSummary(instance=instance, fatal=self.fatal)
            return
        self._marks["opened"] = time.time()
        if keep_warm_s > 0:
            threading.Thread(target=self._watch, daemon=True, name="warm-watch").start()
        else:
            self._start_run()

    def _start_run(self) -> None:
        """A new run: empty inbox and outbox, counts from zero (the caller holds no lock)."""
        with self._cond:
            self._inbox = queue.Queue()
            self._outbox, self._oldest, self._taken, self._took_chunk = [], None, 0, False
            self._summary = None
            self._running = True
            self.jobs += 1
            self.received = {"calls": 0, "objects": 0}
        threading.Thread(target=self._run, daemon=True, name=f"instance-{self.instance}").start()

    # ---- the one run ---------------------------------------------------------------------

    def _keys(self) -> Iterator[ObjectRef]:
        # Ray runs a threaded actor's calls in no fixed order, so end() may land before the
        # last feed(): it says how many objects the driver fed, and the stream ends only once
        # that many have been taken.
        end_at: int | None = None
        while end_at is None or self._taken < end_at:
            chunk = self._inbox.get()
            if isinstance(chunk, _End):
                end_at = chunk.fed
                continue
            with self._cond:
                self._marks.setdefault("first_key", time.time())
                self._taken += len(chunk)
                self._took_chunk = True
                self._cond.notify_all()
            yield from chunk

    def _run(self) -> None:
        failed = False
        try:
            summary = self.runner.run(self._finished, refs=self._keys())
        except BaseException as exc:  # noqa: BLE001 - the instance's failure, reported to the driver
            failed = True
            summary = InstanceSummary(instance=self.instance, fatal=f"{type(exc).__name__}: {exc}")
        finally:
            if self.keep_warm_s <= 0:
                self.runner.close()
        with self._cond:
            self._marks["run_end"] = time.time()
            self._summary = summary
            self._running = False
            if failed and self.keep_warm_s > 0:
                self.fatal = summary.fatal  # not leased again: its runner may be broken
            self._cond.notify_all()

    # ---- a pooled (warm) actor -------------------------------------------------------------

    def lease(self, token: str, job_id: str, spec_fields: dict) -> Answer | None:
        """Run the job ``spec_fields`` next, for the driver ``token`` of Ray job ``job_id``; None if busy.

        The caller (warm.py) only leases an actor whose name says the spec matches the one it
        was opened with in everything but where the job reads and writes."""
        with self._cond:
            if self.fatal is not None:
                return Answer(self.incarnation, 0, summary=InstanceSummary(instance=self.instance, fatal=self.fatal))
            if self.lessee is not None or self._running:
                return None
            self.lessee, self.lessee_job = token, job_id
            self.incarnation = uuid.uuid4().hex  # answers from an earlier job's run cannot match
            self._marks = {"process_start": self._marks["process_start"], "init": self._marks["init"],
                           "opened": self._marks.get("opened", 0.0), "leased": time.time()}
        for staged in self._staged.values():
            fsspec.filesystem("memory").rm_file(staged)
        self._staged = {}
        try:
            self.runner.rebind(TransformSpec(**spec_fields))
        except Exception as exc:  # noqa: BLE001 - reported as the instance's failure
            with self._cond:
                self.fatal = f"{type(exc).__name__}: {exc}"
                return Answer(self.incarnation, 0, summary=InstanceSummary(instance=self.instance, fatal=self.fatal))
        self._start_run()
        return Answer(self.incarnation, 0)

    def release(self, token: str) -> bool:
        """The job ``token`` is over: idle (warm) again. False if it was not the lessee or its run is not over."""
        with self._cond:
            if self.lessee != token or self._running:
                return False
            self.lessee = self.lessee_job = None
            self._idle_since = time.monotonic()
            return True

    def evict(self) -> bool:
        """Exit now if idle (another job needs the resources this actor holds); False if busy."""
        with self._cond:
            if self.lessee is not None or self._running:
                return False
            self.lessee = "exiting"

        def leave() -> None:
            self.runner.close()
            self._exit("evicted for another job")

        threading.Thread(target=leave, daemon=True, name="evict").start()
        return True

    def _watch(self) -> None:
        """Exit for good once idle ``keep_warm_s``, or at once when the leasing driver is gone.

        A driver killed mid-job leaves no run behind writing outputs (as a local worker exits
        with its parent): its resumed run may start as soon as it likes."""
        while True:
            time.sleep(WATCH_EVERY_S)
            with self._cond:
                job, idle = self.lessee_job, self.lessee is None and not self._running
                idle_for = time.monotonic() - self._idle_since
            if job is not None and _job_is_dead(job):
                self._exit(f"its job {job} ended without releasing it")
            if idle and idle_for >= self.keep_warm_s:
                with self._cond:  # a lease may have come in meanwhile
                    if self.lessee is None and not self._running:
                        self.lessee = "exiting"
                    else:
                        continue
                self.runner.close()  # handler worker processes and the model, before the process goes
                self._exit(f"idle {idle_for:.0f} s")

    def _exit(self, why: str) -> None:
        import logging

        logging.getLogger(__name__).info("pooled instance actor exits: %s", why)
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
        time.sleep(10)  # the kill lands first (an exit of our own would be taken for a crash and restarted)
        os._exit(0)

    def _finished(self, result: ObjectResult) -> None:
        staged = self._staged.pop(result.key, None)
        if staged is not None:
            fsspec.filesystem("memory").rm_file(staged)
        with self._cond:
            self._marks.setdefault("first_result", time.time())
            self._outbox.append(result)
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._outbox) >= DELIVER_GROUP:
                self._cond.notify_all()

    # ---- the driver's calls --------------------------------------------------------------

    def ready(self) -> str | None:
        """None once the model is loaded, else why it could not be."""
        return self.fatal

    def feed(self, items: list[Item], data: list[bytes | None] | None = None) -> Answer:
        """Queue a chunk of keys for the run (``data``: their bytes, read by a reader task)."""
        refs = []
        for n, (uri, key, size) in enumerate(items):
            blob = data[n] if data is not None else None
            if blob is not None:
                staged = f"{STAGING}/{uuid.uuid4().hex}"
                fsspec.filesystem("memory").pipe_file(staged, blob)
                self._staged[key] = staged
                uri, size = staged, len(blob)
            refs.append(ObjectRef(uri, key, size))
        with self._cond:
            self.received["calls"] += 1
            self.received["objects"] += len(items)
            taken = self._taken
        if self.fatal is None:
            self._inbox.put(refs)
        return Answer(self.incarnation, taken)

    def end(self, fed: int) -> None:
        """No more keys after ``fed`` in all: the run finishes them (partial batches included) and ends."""
        self._inbox.put(_End(fed))

    def take(self) -> Answer:
        """Wait for something to say: a chunk taken, results due, or the end of the run."""
        deadline = time.monotonic() + TAKE_TIMEOUT_S
        with self._cond:
            while True:
                now = time.monotonic()
                due = self._oldest is not None and (len(self._outbox) >= DELIVER_GROUP
                                                    or now - self._oldest >= DELIVER_AFTER_S)
                if due or self._summary is not None or self._took_chunk or now >= deadline:
                    break
                wake = deadline if self._oldest is None else min(deadline, self._oldest + DELIVER_AFTER_S)
                self._cond.wait(max(0.0, wake - now))
            self._took_chunk = False
            summary = self._summary
            results: list[ObjectResult] = []
            if due or summary is not None:
                results, self._outbox, self._oldest = self._outbox, [], None
            taken = self._taken
        if results and summary is None:
            results = self._commit(results)
        # After the run the ledger is closed, and closing it committed everything.
        return Answer(self.incarnation, taken, results, summary)

    def _commit(self, results: list[ObjectResult]) -> list[ObjectResult]:
        """Commit the ledger entries of ``results`` before they leave; if that fails, they are not done."""
        try:
            self.runner.ledger.flush()
        except Exception as exc:  # noqa: BLE001 - the objects run again on resume
            return [ObjectResult(key=r.key, ok=False, failed_records=1,
                                 failures=[RecordFailure.from_exception(r.key, None, None, exc)])
                    for r in results]
        return results

    # ---- facts for the driver's timeline -------------------------------------------------

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def marks(self) -> dict[str, float]:
        """Wall-clock times of this process's steps (process start, model loaded, first key, ...)."""
        with self._cond:
            return dict(self._marks)

    def calls_received(self) -> dict[str, int]:
        """Feed calls and objects this actor process was handed (since its last restart)."""
        with self._cond:
            return {**self.received, "jobs": self.jobs}


def _host_instances(count: int) -> int:
    """How many of the job's ``count`` instances share this machine's cores: actors are spread
    over the alive nodes (at most ceil(count / nodes) per node), and a machine may run several
    nodes (a test cluster on one host). Sizes the handler worker pool as the local engine does."""
    import math

    try:
        here = ray.util.get_node_ip_address()
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        on_host = sum(1 for n in nodes if n.get("NodeManagerAddress") == here) or 1
        return max(1, min(count, math.ceil(count / max(1, len(nodes))) * on_host))
    except Exception:  # noqa: BLE001 - unknown: share the machine with every instance, as locally
        return count


def _job_is_dead(job_id: str) -> bool:
    try:
        gcs = ray._private.worker.global_worker.gcs_client
        infos = gcs.get_all_job_info(job_or_submission_id=job_id, skip_submission_job_info_field=True,
                                     skip_is_running_tasks_field=True, timeout=10)
    except Exception:  # noqa: BLE001 - the GCS briefly unreachable is not the job's death
        return False
    for info in infos.values():
        if info.job_id.hex() == job_id:
            return bool(info.is_dead)
    return False


def _process_start() -> float:
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:  # noqa: BLE001 - a timeline fact only
        return time.time()


def actor_class():
    return ray.remote(InstanceActor)
