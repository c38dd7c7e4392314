"""The local engine: a job's instances as worker processes on this machine.

One instance runs in the calling process (no start-up cost beyond loading the model).
``instance_count`` N > 1 starts N processes with the *spawn* context — TensorFlow's
threads do not survive ``fork`` — and each loads the model once and runs its partition.
An instance may itself be several such processes (``processes_per_instance``): one process
keeps only a few cores busy, whatever its thread counts, because every record passes
through Python under its one GIL (benchmarks/transform/profile/sixteen-cores.md: ~4.4 of
16 cores); on a machine with many cores and no GPU each instance runs as one process per
``CORES_PER_PROCESS`` cores (per ``HANDLER_CORES_PER_PROCESS`` for a script with a single
``handler``), each on its own hash partition of the instance's objects, but only as many as
the job has ``MIN_OBJECTS_PER_PROCESS`` objects for (the engine looks at the start of the
listing before it starts them). The model artifact is opened (extracted, downloaded) once,
here, and its folder handed to every process.

The input is listed once, here in the parent (``plan.JobInputs``): a feeder thread hands
each worker its objects in chunks down a bounded queue of its own, so no worker lists the
prefix, and memory stays flat however long the listing (at most ``CHUNKS_QUEUED`` chunks
per worker in flight). Workers still read the ledger for their own group commits, and a
resumed job drops done objects in the parent before they are sent.

Workers send typed, picklable messages back over one queue: their ``ObjectResult``s in lists
(``_ResultBatches``: every 20 ms, every 256 results or at a failure) and an ``InstanceSummary``
at the end (a failure to even start becomes a summary with
``fatal`` set). A worker whose parent dies (SIGKILL of the CLI) exits on its own, so a
killed job leaves no orphans writing outputs behind a resumed run's back.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tfbatch.errors import ConfigError
from tfbatch.runtime.placement import count_nvidia_gpus, instance_env, partition_gpus, usable_cores, visible_gpus
from tfbatch.storage import ObjectRef
from tfbatch.transform.engine import Emit
from tfbatch.transform.plan import JobInputs, iter_chunks, refs_from_chunks
from tfbatch.transform.report import InstanceSummary, ObjectResult
from tfbatch.transform.spec import TransformSpec

log = logging.getLogger(__name__)

CHUNK = 256  # objects per message to a worker
# Cores one worker process is given before the next one is started (no GPU, no --processes).
# One process of the image dataflow kept 4.4 of 16 cores busy on the tiny model, its GIL
# holder at 115 us per record (sixteen-cores.md); a model that is dearer per record keeps
# more cores busy in TensorFlow's own threads, which more processes share out the same way.
CORES_PER_PROCESS = 4
# A single ``handler`` keeps ~1.3 cores busy from one process (dev VM, jpeg-handler): it gets
# one process per 2 cores, and 2 from 2 cores on (on the 2-core VM 2 processes ran 20,000
# JPEGs in 20 % less time than 1), where the job has the objects to pay for them (below).
HANDLER_CORES_PER_PROCESS = 2
MAX_AUTO_PROCESSES = 8  # each process holds its own TensorFlow runtime and copy of the model
# Objects each process must have before another is started: below it the extra start-up is
# not paid back. Two spawned processes (each importing TensorFlow and loading the model) cost
# ~4 s more CPU than one in the job's own process; on the 2-core VM a single handler ran 200
# JPEGs 1-1.5 s slower with 2 processes than with 1, 2,000 and 5,000 about as fast, 10,000
# 9 % and 20,000 20-25 % faster (benchmarks/transform/profile/processes.md).
MIN_OBJECTS_PER_PROCESS = 4000
# ... or bytes: a few large objects (TFRecord shards, CSV files) hold as much work as
# thousands of images. 4,000 JPEGs of ~22 KB are ~88 MB; on the sixteen-core lease ten
# 120 MB TFRecord shards (50,000 records) ran as one process, its GIL busy with the script's
# hooks the whole job while 12 of 16 cores idled (profile/sixteen-cores.md). A process needs
# at least one object: objects are handed out whole.
MIN_BYTES_PER_PROCESS = 64 * 1024 * 1024
# ... or, for a single handler on lines (SplitType Line), fewer bytes: a line of text is a
# record, and with SingleRecord each is a call of the handler (~0.2 ms of the process's GIL
# for a CSV line of 32 floats posted to context.rest_uri, where a 22 KB JPEG's call is ~0.6),
# with MultiRecord each payload's lines are parsed by the handler's Python. On the 2-core VM
# (20 x 5,000 CSV lines of ~250 bytes, benchmarks/transform/profile/handler-session.md):
# SingleRecord, 4.6 MB ran as fast with 2 processes as with 1 (5.7-5.9 s against 5.6-6.1),
# 25 MB in 14.8 s against 20.9; MultiRecord, 12.5 MB slower (4.8 s against 4.2-4.4), 25 MB
# faster (5.6 s against 6.4). As with the objects, each process needs this share, so 2 start
# from twice it.
MIN_LINE_BYTES_PER_HANDLER_PROCESS = {"SingleRecord": 4 * 1024 * 1024, "MultiRecord": 10 * 1024 * 1024}
# How long the engine lists before it decides: a listing slower than this is taken as long.
PEEK_SECONDS = 0.5
CHUNKS_QUEUED = 4  # per worker: a worker never starves while the feeder lists the next page
END = None  # the last message on a worker's key queue


def job_inputs(spec: TransformSpec) -> JobInputs:
    """The listing pass an engine makes when the job did not hand it one."""
    from tfbatch.transform.ledger import Ledger

    done = Ledger.for_spec(spec).done_keys(retry_failed=spec.retry_failed) if spec.resume else set()
    return JobInputs.for_spec(spec, done)


@dataclass(frozen=True)
class LocalEngine:
    """Implements ``tfbatch.transform.Engine``; the spec's ``instance_count`` is all it needs.

    ``isolated``: run a one-instance job in a spawned worker process too, as N-instance jobs
    run, so the job's container environment (``Environment``, ``SAGEMAKER_*``), its TensorFlow
    settings and its model never enter the calling process: ``tfbatch api`` runs many jobs at
    once, and starts endpoints, from one process.
    """

    name: ClassVar[str] = "local"
    isolated: bool = False

    def run(self, spec: TransformSpec, emit: Emit, stop=None, inputs: JobInputs | None = None
            ) -> list[InstanceSummary]:
        devices = gpu_plan(spec)
        artifact = _open_once(spec)
        try:
            return self._run(spec, emit, stop, inputs, devices, artifact)
        finally:
            if artifact is not None:
                artifact.cleanup()

    def _run(self, spec: TransformSpec, emit: Emit, stop, inputs: JobInputs | None, devices: list[list[str]],
             artifact) -> list[InstanceSummary]:
        folder = str(artifact.root) if artifact is not None else None
        per, inputs = processes_for_job(spec, usable_cores(), devices, inputs, lambda: job_inputs(spec),
                                        single_handler=artifact is not None and single_handler(artifact))
        if per > 1:
            # Each process is an instance of its own to the rest of the job (its partition,
            # its journal, its summary); the instance's GPUs, if any were given, go to all of them.
            devices = [d for d in devices for _ in range(per)]
            spec = spec.model_copy(update={"instance_count": spec.instance_count * per})
            if inputs is not None:
                inputs = inputs.replanned(spec.instance_count)
        inputs = inputs if inputs is not None else job_inputs(spec)
        if spec.instance_count == 1 and not self.isolated:
            if spec.gpus_per_instance is not None and "tensorflow" not in sys.modules:
                os.environ.update(instance_env(devices[0]))
            # The listing runs here, lazily: the instance iterates it on a thread of its own.
            summary = _run_instance(spec, 0, 1, emit, stop, (ref for _i, ref in inputs), prefetch=True,
                                    artifact_dir=folder)
            summary.skipped += inputs.skipped[0]
            return [summary]
        summaries = self._run_processes(spec, emit, devices, stop, inputs, folder)
        for s in summaries:
            s.skipped += inputs.skipped[s.instance]
        return summaries

    def _run_processes(self, spec: TransformSpec, emit: Emit, devices: list[list[str]], stop,
                       inputs: JobInputs, artifact_dir: str | None = None) -> list[InstanceSummary]:
        ctx = mp.get_context("spawn")
        messages = ctx.Queue()
        shared_stop = ctx.Event()
        keys = [ctx.Queue(maxsize=CHUNKS_QUEUED) for _ in range(spec.instance_count)]
        for q in keys:
            q.cancel_join_thread()  # a worker that died never drains its queue; do not wait on it at exit
        procs = [
            ctx.Process(
                target=_worker_main,
                args=(spec.model_dump(), i, spec.instance_count, messages, os.getpid(), instance_env(devices[i]),
                      shared_stop, keys[i], artifact_dir),
                name=f"tfbatch-instance-{i}",
                daemon=True,
            )
            for i in range(spec.instance_count)
        ]
        for p in procs:
            p.start()
        feeder = _Feeder(inputs, keys, procs, shared_stop)
        threading.Thread(target=feeder.run, daemon=True, name="list-inputs").start()
        summaries: dict[int, InstanceSummary] = {}
        try:
            while len(summaries) < len(procs):
                if stop is not None and stop.is_set():
                    shared_stop.set()
                try:
                    message = messages.get(timeout=0.5)
                except queue.Empty:
                    self._check_dead(procs, summaries)
                    continue
                if isinstance(message, list):  # a worker's results, a batch at a time (_ResultBatches)
                    for result in message:
                        emit(result)
                elif isinstance(message, InstanceSummary):
                    summaries[message.instance] = message
        finally:
            feeder.abandon.set()
            for p in procs:
                p.join(timeout=10)
                if p.is_alive():
                    p.terminate()
        return [summaries[i] for i in sorted(summaries)]

    @staticmethod
    def _check_dead(procs: list, summaries: dict[int, InstanceSummary]) -> None:
        for i, p in enumerate(procs):
            if i not in summaries and not p.is_alive():
                # Exited without a summary: killed, or crashed in native code.
                time.sleep(0.2)  # a summary put just before exit may still be in the pipe
                if i not in summaries:
                    summaries[i] = InstanceSummary(instance=i, fatal=f"instance {i} exited with code {p.exitcode}")


class _Feeder:
    """Walks the job's listing once and puts each worker's chunks on that worker's queue.

    A put waits while the worker's queue is full (that is the memory bound), but gives up on
    a worker that has exited (its partition is not run, as before) and stops listing once
    the job stops. A listing error goes to every worker, which reports it as its failure.
    """

    def __init__(self, inputs: JobInputs, queues: list, procs: list, stop):
        self.inputs, self.queues, self.procs, self.stop = inputs, queues, procs, stop
        self.abandon = threading.Event()  # the parent is done with the workers

    def _put(self, i: int, message) -> None:
        while not self.abandon.is_set():
            try:
                self.queues[i].put(message, timeout=0.2)
                return
            except queue.Full:
                if not self.procs[i].is_alive():
                    return

    def run(self) -> None:
        end = END
        try:
            for i, chunk in iter_chunks(self.inputs, len(self.queues), CHUNK):
                if self.stop.is_set() or self.abandon.is_set():
                    break
                self._put(i, chunk)
        except Exception as exc:  # noqa: BLE001 - the listing failed: every instance reports it
            log.debug("listing failed", exc_info=True)
            end = f"listing {type(exc).__name__}: {exc}"
        for i in range(len(self.queues)):
            self._put(i, end)


class ListingFailed(RuntimeError):
    """The parent's listing of the input failed; the worker reports it as its fatal error."""


def _chunks_from(keys) -> Iterator[list]:
    while True:
        message = keys.get()
        if message is END:
            return
        if isinstance(message, str):
            raise ListingFailed(message)
        yield message


def _run_instance(spec: TransformSpec, instance: int, count: int, emit: Emit, stop=None,
                  refs: Iterable[ObjectRef] | None = None, prefetch: bool | None = None,
                  artifact_dir: str | None = None) -> InstanceSummary:
    from tfbatch.transform.instance import InstanceRunner

    runner = InstanceRunner(spec, instance, count, artifact_dir=artifact_dir)
    try:
        runner.open()
    except Exception as exc:
        runner.close()
        return InstanceSummary(instance=instance, fatal=f"{type(exc).__name__}: {exc}")
    try:
        return runner.run(emit, refs=refs, stop=stop, prefetch=prefetch)
    finally:
        runner.close()


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(3)


def processes_per_instance(spec: TransformSpec, cores: int, devices: list[list[str]], *,
                           single_handler: bool = False, objects: int | None = None, size: int = 0) -> int:
    """Worker processes for each of the job's instances: ``--processes``, else 1 where a GPU
    is given to an instance (one process drives it), else one per ``CORES_PER_PROCESS`` of
    the instance's share of ``cores``, so 1 below 8 cores; for a script with a single
    ``handler``, whose Python (model calls included) all runs on its process's GIL, one per
    ``HANDLER_CORES_PER_PROCESS`` and 2 from 2 cores on; at most ``MAX_AUTO_PROCESSES``, and
    where the number of ``objects`` per instance is known, at most one per
    ``MIN_OBJECTS_PER_PROCESS`` of them or per ``MIN_BYTES_PER_PROCESS`` of their ``size``
    (bytes; a single handler on lines: ``MIN_LINE_BYTES_PER_HANDLER_PROCESS``), whichever
    allows more, but never more than there are objects."""
    if spec.processes is not None:
        return spec.processes
    if any(devices):
        return 1
    share = cores // spec.instance_count
    if single_handler:
        per = max(min(share, 2), share // HANDLER_CORES_PER_PROCESS)
    else:
        per = share // CORES_PER_PROCESS
    if objects is not None:
        per_bytes = MIN_BYTES_PER_PROCESS
        if single_handler and spec.split_type == "Line":
            per_bytes = MIN_LINE_BYTES_PER_HANDLER_PROCESS.get(spec.batch_strategy, per_bytes)
        per = min(per, max(objects // MIN_OBJECTS_PER_PROCESS, min(objects, size // per_bytes)))
    return max(1, min(MAX_AUTO_PROCESSES, per))


def processes_for_job(spec: TransformSpec, cores: int, devices: list[list[str]], inputs: JobInputs | None,
                      make_inputs: Callable[[], JobInputs], *, single_handler: bool = False,
                      cap: int | None = None) -> tuple[int, JobInputs | None]:
    """``processes_per_instance`` for this job, and its listing pass (made with ``make_inputs``
    where it was needed and not given). Where the rule (at most ``cap``) gives more than one
    and ``--processes`` is not set, the start of the listing is looked at first: each extra
    process costs a TensorFlow start-up and a model load, so a job with few objects keeps
    fewer. The listing is still made once. Shared by the local and Ray engines.

    With ``--processes N`` the listing's start is looked at too: where it ends there, the
    processes get the objects by size (``JobInputs.replanned``), not by hash."""
    per = processes_per_instance(spec, cores, devices, single_handler=single_handler)
    chosen = spec.processes is not None
    if cap is not None and not chosen:
        per = min(per, cap)
    if per > 1:
        inputs = inputs if inputs is not None else make_inputs()
        todo = inputs.peek(per * spec.instance_count * MIN_OBJECTS_PER_PROCESS, PEEK_SECONDS)
        if todo is not None and not chosen:
            per = min(per, processes_per_instance(spec, cores, devices, single_handler=single_handler,
                                                  objects=todo.objects // spec.instance_count,
                                                  size=todo.bytes // spec.instance_count))
    return max(1, per), inputs


def _open_once(spec: TransformSpec):
    """The job's artifact, extracted (or downloaded) here once for every process of the job,
    or None where that fails: each instance then opens it itself and reports the error as
    its own failure, as it always has."""
    from tfbatch.artifact import open_artifact

    try:
        return open_artifact(spec.model)
    except Exception:  # noqa: BLE001 - the instances open it again and say why it failed
        log.debug("opening %s in the engine failed; the instances will", spec.model, exc_info=True)
        return None


def single_handler(artifact) -> bool:
    """Whether the artifact's ``inference.py`` defines a top-level ``handler`` (which SageMaker
    prefers to an input/output pair), read without running it."""
    script = artifact.inference_script
    if script is None:
        return False
    try:
        return defines_handler(Path(script).read_bytes())
    except OSError:
        return False


def defines_handler(source: bytes | None) -> bool:
    """Whether the script ``source`` defines a top-level ``handler``, parsed, not run (a script
    that does not parse: False; its instance will say why)."""
    import ast

    if source is None:
        return False
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "handler"
               for node in tree.body)


def gpu_plan(spec: TransformSpec) -> list[list[str]]:
    """Each instance's GPUs: disjoint CUDA_VISIBLE_DEVICES lists (runtime/placement.py).

    GPUs asked for (``--gpus-per-instance``) on a GPU host whose TensorFlow is the CPU wheel
    would be handed out and then not used: the job would run on the CPU, silently. Refused.
    Not asked for, such a host is planned as the CPU machine it is to TensorFlow: no device
    lists, so the instance gets its processes by the cores (``processes_per_instance``). The
    sixteen-core lease of the twenty-first session (an H200 host, TensorFlow's CPU wheel) ran
    every job as one process because the ``/dev/nvidia0`` node counted as a GPU given.
    """
    gpus = visible_gpus(os.environ, count_nvidia_gpus())
    if gpus and spec.gpus_per_instance != 0:
        from tfbatch.runtime.precision import tensorflow_gpu_build

        if not tensorflow_gpu_build():
            if spec.gpus_per_instance:
                raise ConfigError(
                    f"--gpus-per-instance {spec.gpus_per_instance:g} asks for GPUs, but the installed TensorFlow is "
                    "a CPU build, which would run the job on the CPU (pip install 'tfbatch[gpu]')"
                )
            gpus = []
    return partition_gpus(gpus, spec.instance_count, spec.gpus_per_instance)


class _ResultBatches:
    """A worker's ``ObjectResult`` messages, sent as lists: one every ``FLUSH_S``, every
    ``FLUSH_AT`` results or at a failure, whichever comes first. Per message the parent pays a
    poll, a pipe read and an unpickle: with one message per object that was most of its 53 us
    per object on the dev VM, which at the thousands of objects per second of several
    processes is most of a core (~25 us with lists)."""

    FLUSH_S = 0.02
    FLUSH_AT = 256

    def __init__(self, put):
        self.put, self.lock, self.pending = put, threading.Lock(), []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True, name="results-out")
        self.thread.start()

    def __call__(self, result: ObjectResult) -> None:
        with self.lock:
            self.pending.append(result)
            # A failure goes at once: the parent's --max-error-rate guard counts it.
            now = len(self.pending) >= self.FLUSH_AT or not result.ok or bool(result.failures)
        if now:
            self.flush()

    def flush(self) -> None:
        with self.lock:
            batch, self.pending = self.pending, []
            if batch:  # under the lock: batches leave in the order their results came
                self.put(batch)

    def _loop(self) -> None:
        while not self.done.wait(self.FLUSH_S):
            self.flush()

    def close(self) -> None:
        """Stop the timer and send what is left (before the summary, which must come last)."""
        self.done.set()
        self.thread.join()
        self.flush()


def _worker_main(spec_fields: dict, instance: int, count: int, messages, parent_pid: int,
                 env: dict[str, str] | None = None, stop=None, keys=None, artifact_dir: str | None = None) -> None:
    # Spawned, so TensorFlow is not imported yet: it reads CUDA_VISIBLE_DEVICES on first use.
    os.environ.update(env or {})
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="parent-watch").start()
    results = _ResultBatches(messages.put)
    try:
        spec = TransformSpec(**spec_fields)
        refs = refs_from_chunks(_chunks_from(keys)) if keys is not None else None
        summary = _run_instance(spec, instance, count, results, stop, refs, artifact_dir=artifact_dir)
    except BaseException as exc:  # noqa: BLE001 - reported as the instance's failure
        summary = InstanceSummary(instance=instance, fatal=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    results.close()
    messages.put(summary)
    messages.close()
    messages.join_thread()
    # Everything the parent needs is sent: end without the interpreter's teardown of
    # TensorFlow (runtime/exit.py), which the parent's join would wait for. On a 20,000-image
    # two-process job it waited 0.52 and 0.82 s for them
    # (benchmarks/transform/profile/startup-gc.md#the-instance-processes-exit).
    from tfbatch.runtime.exit import end

    end(0)
