"""The Ray engine: a job's instances as Ray actors on a cluster, fed by a streaming listing.

Same job, same dataflow, same bytes as the local engine: each actor is one instance and runs
one ``InstanceRunner.run`` over a stream of keys, exactly as a local worker process does
(model loaded once per actor, GPU-aware via ``num_gpus``). So the batch lanes form batches
across objects, outputs are written a batch at a time and the ledger commits them in groups
(ray_actor.py describes the actor's side). Objects go to the instance the listing pass
assigns: ``instance_of(key, instance_count)``, or, where an instance is several actors and the
pass saw the whole listing first, dealt by size among that instance's actors
(``plan.JobInputs.replanned``).

The driver (this process) lists the input once, lazily (``plan.JobInputs``: the job's own
pass when the job hands it over, actors never list), and feeds each actor its keys in chunks
(``chunk_size``: a model batch's worth) into the actor's inbox. It keeps at most two chunks
waiting there beyond what the actor's dataflow has pulled, so the look-ahead is what the
dataflow holds plus two chunks, work starts after the first listing page, and memory does
not grow with the prefix. One long-polling ``take`` call per actor brings back finished
objects (only once the actor's ledger has committed them) and how many keys the dataflow
has pulled, which is when the driver feeds the next chunk. Results are emitted, counted and
recorded per object exactly as the local engine's; ``end()`` after the last chunk lets the
run finish its partial batches.

Failures: actors have ``max_restarts``, so when a worker process or a node dies Ray restarts
the actor (reloading the model, elsewhere if the node is gone). Ray does not re-run the calls
(``max_task_retries=0``): the driver knows which objects the dead process held (fed, not
answered) and feeds them to the restarted actor, a few more times than Ray restarts it
(``resubmits``) before it reports them lost. Re-running an object is harmless: its ``.out``
is replaced atomically with the same bytes, and a copy of a result that comes back twice is
counted once.

An instance may be several actors, as on the local engine it may be several processes, by the
same rule (``RayEngine._with_processes``): ``--processes``, else by the cluster's CPUs per
instance and the job's size; each actor is then an instance of its own to the rest of the job.

CPU-side work: with ``remote_read`` each chunk's bytes are fetched by a small Ray task that
may run on any node (see ``ray_actor.read_objects``), so a GPU actor's host spends its CPUs
on the model; docs/ray.md describes moving handler code out as well.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from tfbatch.errors import ConfigError, DependencyMissing
from tfbatch.settings import Environment
from tfbatch.transform.engine import Emit
from tfbatch.transform.plan import JobInputs
from tfbatch.transform.report import InstanceSummary
from tfbatch.transform.spec import TransformSpec

log = logging.getLogger(__name__)

# Environment the driver forwards to actors and reader tasks: S3 endpoint and credentials,
# container settings, TF log level. Ray workers otherwise see only their raylet's environment.
FORWARD_PREFIXES = ("AWS_", "SAGEMAKER_", "TF_CPP_", "TFBATCH_", "FSSPEC_")


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
    max_task_retries: int = 3  # unused now (the driver re-feeds a dead actor's objects); kept: public field
    resubmits: int = 2  # deaths survived beyond max_restarts before held objects are reported lost
    list_page_size: int = 1000
    forward_env: bool = True
    spread: bool = True  # one instance per node where possible, as SageMaker instances are
    log_to_driver: bool = False  # workers' logs on this process's stderr, when this process starts Ray
    # > 0: instance actors stay on the cluster, model loaded, this long after their job, and the
    # next job with the same model and settings reuses them (ray_warm.py); 0: one set per job.
    keep_warm_s: float = 0.0

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
        if environment.ray_keep_warm_s is not None:
            fields["keep_warm_s"] = environment.ray_keep_warm_s
        fields.update({k: v for k, v in overrides.items() if v is not None})
        options = cls(**fields)
        if not options.keep_warm_s >= 0:
            raise ConfigError(f"keep_warm_s: expected seconds >= 0, got {options.keep_warm_s}")
        return options


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
    # The most keys listed but not yet pulled by an instance's dataflow (held by the driver or
    # waiting in an actor's inbox) at any time: the look-ahead the feeding adds.
    max_waiting: int = 0
    actor_pids: dict[int, int] = field(default_factory=dict)
    # What each actor process says it was handed: {"calls": n, "objects": n}, per instance.
    actor_calls: dict[int, dict[str, int]] = field(default_factory=dict)
    # Wall-clock times (time.time()) of the run's steps, for start-up breakdowns: the driver's
    # ("run", "connected", "actors_submitted", "ready_<i>", "first_feed", "first_result", "end")
    # and each actor's own (``InstanceActor.marks``: process start, model loaded, first key ...).
    marks: dict[str, float] = field(default_factory=dict)
    actor_marks: dict[int, dict[str, float]] = field(default_factory=dict)
    # Per instance: True when it ran on a pooled actor that had already run another job (warm).
    reused: dict[int, bool] = field(default_factory=dict)

    def mark(self, name: str) -> None:
        """Record when ``name`` first happened (later calls keep the first time)."""
        self.marks.setdefault(name, time.time())


TASK_EVENTS_VAR = "RAY_task_events_report_interval_ms"


def cluster_cpus() -> int:
    """The cluster's CPUs (alive nodes), held or not: what the job's actors may be placed on.
    Not the free ones: idle warm actors hold CPUs that their next job reuses, or that
    ``make_room`` frees, and the rule must give a job the same actors each time it runs, or
    its warm actors would never match it."""
    return int(_ray().cluster_resources().get("CPU", 0))


class RayEngine:
    """Implements ``tfbatch.transform.Engine`` with the options it is built with
    (``RayOptions.from_env()`` when none are given)."""

    name: ClassVar[str] = "ray"

    def __init__(self, options: RayOptions | None = None):
        self.options = options if options is not None else RayOptions.from_env()
        self.timeline = RunTimeline()

    def run(self, spec: TransformSpec, emit: Emit, stop=None, inputs: JobInputs | None = None
            ) -> list[InstanceSummary]:
        self.timeline = RunTimeline()
        self.timeline.mark("run")
        ray = _ray()
        owns = not ray.is_initialized()
        if owns:
            address = self.options.address or os.environ.get("RAY_ADDRESS") or None
            # A Ray started here for this job stays on loopback (Ray still opens some ports on all
            # interfaces; docs/ray.md says how to fence a real cluster).
            extra = {} if address else {"include_dashboard": False, "_node_ip_address": "127.0.0.1"}
            # The driver's own task events (its submissions, for the dashboard's task list; the
            # actors still report what they run) are flushed by ray.shutdown(), which then waits
            # ~0.25 s: 0.27-0.29 s -> 0.02-0.04 s a job without them (benchmarks/ray/README.md).
            # Read by the core worker ray.init creates, so set only around it, and only where the
            # user has not set it.
            preset = TASK_EVENTS_VAR in os.environ
            if not preset:
                os.environ[TASK_EVENTS_VAR] = "0"
            try:
                ray.init(address=address, namespace="tfbatch", log_to_driver=self.options.log_to_driver,
                         logging_level=logging.WARNING, **extra)
            finally:
                if not preset:
                    os.environ.pop(TASK_EVENTS_VAR, None)
        self.timeline.mark("connected")
        job = None
        try:
            from tfbatch.engines.ray_job import RayJob

            spec, inputs = self._with_processes(spec, inputs)
            self.timeline.mark("planned")
            job = RayJob(spec, emit, self.options, self.timeline, stop)
            return job.run(inputs)
        finally:
            if owns:
                # Ray ends the whole process when an actor handle or object ref is freed after
                # ray.shutdown() (core_worker_process.cc: "The core worker has already been
                # shutdown ... The process will exit"), on whatever thread frees it: the job's
                # handles and refs (some in reference cycles) go while Ray is still up.
                job = None
                gc.collect()
                ray.shutdown()

    def _with_processes(self, spec: TransformSpec, inputs: JobInputs | None
                        ) -> tuple[TransformSpec, JobInputs | None]:
        """Several actors per instance where the local engine would run several processes
        (``engines.local.processes_per_instance``, the same rule): ``--processes``, else by the
        cluster's CPUs per instance, a single ``handler`` read from a local artifact, and
        the job's size (the start of its listing). Each actor is then an instance of its own to
        the rest of the job, as each local process is."""
        from tfbatch.artifact.discover import read_inference_script
        from tfbatch.engines.local import defines_handler, processes_for_job
        from tfbatch.engines.ray_job import job_inputs

        n = spec.instance_count
        devices = [["gpu"] if self.options.gpus_per_instance else []] * n
        cpus = cap = 0
        handler = False
        if spec.processes is None and not any(devices):
            cpus = cluster_cpus()
            # Each actor holds cpus_per_instance: no more than the cluster holds (an actor Ray
            # can never place would hold its partition back for good).
            cap = int(cpus // max(self.options.cpus_per_instance, 1e-9)) // n
            handler = cpus >= 2 * n and defines_handler(read_inference_script(spec.model))
        per, inputs = processes_for_job(spec, cpus, devices, inputs, lambda: job_inputs(spec, self.options),
                                        single_handler=handler, cap=cap)
        if per <= 1:
            return spec, inputs
        spec = spec.model_copy(update={"instance_count": n * per})
        return spec, (inputs.replanned(spec.instance_count) if inputs is not None else None)
