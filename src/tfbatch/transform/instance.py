"""One instance of a transform job: the model loaded once, its share of objects run through it.

An instance runs the objects an engine hands it from the job's one listing pass (see
plan.py: done objects already dropped), or, given none, lists the input itself, keeps the
objects that hash to it and skips those the ledger records as finished. Every object goes
through the instance's one dataflow (dataflow.py), whose predict stage is chosen here once
(predict.py); the listing is consumed lazily and the dataflow keeps a bounded number of
chunks in flight, so memory does not grow with the number of input objects.

The runner needs only the spec and its (instance, count) pair, so a Ray actor can host it
exactly as a local worker process does.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from tfbatch.storage import ObjectRef
from tfbatch.transform.invoke import Invoker
from tfbatch.transform.ledger import Ledger
from tfbatch.transform.lookahead import CountAhead, Prefetch, rows_from_bytes
from tfbatch.transform.pipeline import ObjectPipeline
from tfbatch.transform.plan import iter_partition
from tfbatch.transform.report import InstanceSummary, ObjectResult
from tfbatch.transform.spec import TransformSpec

log = logging.getLogger(__name__)
# Batches of an image job (no script) in flight at once, at least: on 2 cores a third keeps
# the cores busier while the other two wait on the model call or the writes (jpeg-float at
# 20,000 images: 1,391-1,398 -> 1,544-1,550 images/s steady, 1.11 -> 1.04 ms CPU per image;
# jpeg-bytes +3 %; benchmarks/transform/profile/lane-threads.md). --lane-workers overrides it.
MIN_LANE_THREADS = 3
# A job split into records sizes its probe's budget from its bytes (lookahead.rows_from_bytes)
# only where that gives more than the fixed budget did (BatchSizeProbe's budget_rows, 1,000, is
# a tenth of 10,000 rows): a small job keeps the probe it had.
SPLIT_FLOOR_ROWS = 10_000

Emit = Callable[[ObjectResult], None]


def runtime_settings(spec: TransformSpec):
    """The model server's settings for a batch job: batching on, with the job's batch knobs."""
    from tfbatch.runtime import RuntimeSettings

    return RuntimeSettings.from_env(
        {**os.environ, **spec.container_env()},
        enable_batching=True,
        max_batch_size=spec.max_batch_size,
        batch_timeout_micros=int(spec.batch_timeout_ms * 1000),
    )


def _freeze_heap() -> None:
    """Leave the loaded model's objects out of every later garbage collection, and collect
    the young generation every ``JOB_GC_THRESHOLDS[0]`` allocations while the job runs.

    TensorFlow and a loaded SavedModel are a few hundred thousand Python objects that live
    as long as the job. Each full collection walks all of them, and per-record work (a
    Record per CSV line, a response row per record) triggers collections all the time: it
    made splitting a 1 MB CSV payload 4x dearer here than in a process without TensorFlow
    (benchmarks/transform/profile/table-profile.md). ``gc.freeze`` moves what exists now to a
    generation the collector skips; what is created later is collected as before. (No
    ``gc.collect`` first: walking that heap once costs more start-up than the few cycles of
    garbage the load left would ever cost in memory.)
    """
    import gc

    global _FROZEN, _THRESHOLDS
    with _FREEZE_LOCK:
        _FROZEN += 1
        gc.freeze()
        if _FROZEN == 1:
            _THRESHOLDS = gc.get_threshold()
            gc.set_threshold(*JOB_GC_THRESHOLDS)


def _thaw_heap() -> None:
    """Undo ``_freeze_heap`` once the last open runner of this process closes.

    A process that runs job after job (a notebook, the SDK, a pooled Ray actor) would otherwise
    keep for good whatever garbage the earlier jobs left in reference cycles at the time of a
    freeze, a previous job's model included: unfrozen, the collector frees it as usual."""
    import gc

    global _FROZEN, _THRESHOLDS
    with _FREEZE_LOCK:
        _FROZEN = max(0, _FROZEN - 1)
        if _FROZEN == 0:
            gc.unfreeze()
            if _THRESHOLDS is not None:
                gc.set_threshold(*_THRESHOLDS)
                _THRESHOLDS = None


_FROZEN = 0  # open runners of this process that froze the heap
_THRESHOLDS: tuple[int, ...] | None = None  # the process's own, while a runner is open
# The collector's thresholds while a job runs (Python's own: 700, 10, 10). A line job's records
# and payloads are tracked objects that live while their object is in flight (hundreds of
# thousands of them): each collection of the older generations walked them all again, ~2 s of
# GIL in a 13-15 s million-row CSV job (141 young and 10 full collections; gen0 alone ~0.5 s).
# Ten thousand allocations a young collection: 9 middle and no full ones in that job, ~1.2 s
# (benchmarks/transform/profile/single-groups.md#the-garbage-collector). Cycles are still found.
JOB_GC_THRESHOLDS = (10_000, 10, 10)
_FREEZE_LOCK = threading.Lock()


def join_kind(spec: TransformSpec, service, filtering: bool) -> str | None:
    """How this job's SingleRecord lines may be joined into requests of many (records/payloads.py
    ``join_single``), or None: they go one per request.

    Only where nothing but the default handling sees a request (no script), for CSV, JSON
    Lines and JSON lines, and a default signature whose inputs are all numbers with a free
    batch dimension: there a joined request's rows are the records' own rows, so each record
    gets the answer it gets alone. With DataProcessing (``filtering``) CSV and JSON Lines
    only: the InputFilter reads their joined body row by row, and each record's answer is cut
    from the joined one before its JoinSource/OutputFilter, as alone; JSON lines join into a
    JSON Lines body, which an ``application/json`` InputFilter cannot read.
    """
    from tfbatch.handlers.defaults import CSV_TYPES, JSON_TYPES, JSONLINES_TYPES, media_type
    from tfbatch.records import normalize_split_type, normalize_strategy
    from tfbatch.transform.predict import rows_per_call

    if service.handlers is not None:
        return None
    if normalize_strategy(spec.batch_strategy) != "SingleRecord" or normalize_split_type(spec.split_type) != "Line":
        return None
    media = media_type(spec.content_type)
    kind = "csv" if media in CSV_TYPES else "jsonl" if media in JSONLINES_TYPES else "json" if media in JSON_TYPES else None
    if kind is None or (filtering and kind == "json"):
        return None
    try:
        servable = service.model_server.resolve(None)
        sig = servable.signatures[servable.default_signature]
    except Exception:  # noqa: BLE001 - no default model or signature: every request names its own
        return None
    if any(info.dtype in ("string", "bool") for info in sig.inputs.values()) or rows_per_call(sig) is not None:
        return None
    return kind


class InstanceRunner:
    def __init__(self, spec: TransformSpec, instance: int = 0, instance_count: int | None = None,
                 host_instances: int | None = None, artifact_dir: str | None = None):
        self.spec = spec
        # The job's model artifact already extracted (or downloaded) by the engine, used in
        # place: N processes of a job open it once, not N times. None: open spec.model here.
        self.artifact_dir = artifact_dir
        self.instance = instance
        self.instance_count = instance_count or spec.instance_count
        # Instances of this job sharing this machine's cores (default: all of them, as local
        # instances do); a Ray actor on a cluster of machines shares its node with fewer.
        self.host_instances = host_instances or self.instance_count
        self._froze = False  # this runner froze the heap at open (_freeze_heap)
        self.ledger = Ledger.for_spec(spec, instance=instance)
        self.stack = None
        self.invoker: Invoker | None = None
        self.pool = None  # handler worker processes, for a model with code/inference.py
        self.pipeline: ObjectPipeline | None = None
        self._saved_env: dict[str, str | None] = {}
        self.precision_options: dict[str, bool] = {}
        self._predict = None  # the dataflow's in-process predict stage, when it has one

    def open(self) -> "InstanceRunner":
        import gc

        # The cyclic collector waits while the model loads, until _freeze_heap leaves what the
        # load made out of every later collection: each collection during the load walked the
        # few hundred thousand objects TensorFlow's import had just made. Loading seed 002's
        # CIFAR-10 CNN took 0.28-0.67 s of CPU with it and 0.14-0.15 s without, and left 108
        # objects of cyclic garbage (benchmarks/transform/profile/startup-gc.md).
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            return self._open()
        finally:
            if paused:
                gc.enable()

    def _open(self) -> "InstanceRunner":
        from tfbatch.handlers.stack import build_stack
        from tfbatch.runtime.precision import apply_precision, enable_memory_growth
        from tfbatch.runtime.threads import configure_threads
        from tfbatch.storage.s3options import set_job_options

        set_job_options(kms_key_id=self.spec.kms_key_id)  # SSE-KMS on this worker's S3 writes
        env = self.spec.container_env()
        self._saved_env = {k: os.environ.get(k) for k in env}

        settings = runtime_settings(self.spec)
        os.environ.update(env)  # as build_stack does first: opening the artifact may read it (S3)
        artifact = self._open_artifact()
        handed = False
        try:
            # Thread pools, GPU memory growth and graph rewrites are all fixed when TensorFlow
            # first runs anything, so all three are set here, before the model loads.
            if settings.intra_op_parallelism is None:  # SAGEMAKER_TFS_INTRA_OP_PARALLELISM wins
                ours = settings.model_copy(update={"intra_op_parallelism": self.intra_op_threads()})
                # Where TensorFlow already runs in this process (a notebook's earlier work), its
                # pools stay as they are, without a warning: the job did not ask for a size.
                if configure_threads(ours, quiet=True):
                    settings = ours
            configure_threads(settings)
            gpus = enable_memory_growth()
            self.precision_options = apply_precision(self.spec.precision, gpus)
            handed = True  # build_stack owns the artifact now (and cleans it up if it fails)
            self.stack = build_stack(
                self.spec.model, settings, install_requirements=self.spec.install_requirements, env=env,
                max_image_pixels=self.spec.max_image_pixels, on_script=self._start_pool, artifact=artifact,
            )
        except BaseException:
            if self.pool is not None:
                self.pool.close()
                self.pool = None
            if not handed:
                artifact.cleanup()
            raise
        service = self.stack.service
        if self.pool is None and service.handlers is None:
            self._start_default_pool(service)
        if self.pool is not None:
            # The script's hooks run in worker processes: this one only reads and feeds the model.
            from tfbatch.handlers.pooled import PooledService, models_init

            self.pool.set_models(models_init(service))
            service = PooledService(service, self.pool)
        self.invoker = Invoker(
            service,
            concurrency=self.spec.concurrency,
            timeout_s=self.spec.invocations_timeout,
            max_retries=self.spec.invocations_max_retries,
            content_type=self.spec.content_type,
            accept=self.spec.accept,
        )
        self.pipeline = self._pipeline(self.spec)
        _freeze_heap()
        self._froze = True
        return self

    def _open_artifact(self):
        """The model artifact, opened before TensorFlow is imported (that takes seconds).

        With no script and a content type that is not an image, the job's default handling
        runs in handler worker processes whatever the model's signature
        (``_start_default_pool``): they start here, and import their modules on the other
        cores while this process imports TensorFlow and loads the model, instead of after.
        """
        from tfbatch.artifact import open_artifact
        from tfbatch.handlers.defaults import is_image

        artifact = open_artifact(self.artifact_dir or self.spec.model)
        if artifact.inference_script is None and not is_image(self.spec.content_type):
            from tfbatch.handlers.pooled import script_init

            self.pool = self._handler_pool(script_init(None, self.spec.max_image_pixels))
        return artifact

    def rebind(self, spec: TransformSpec) -> "InstanceRunner":
        """Run another job on the loaded model (a pooled Ray actor): ``spec`` must equal the one
        opened with in all but where the job reads and writes (the caller checks). The ledger,
        the pipeline (the last stage) and the predict stage are the new job's own."""
        from tfbatch.storage.s3options import set_job_options

        assert self.invoker is not None, "call open() first"
        if self._predict is not None:
            self._predict.close()
            self._predict = None
        self.spec = spec
        set_job_options(kms_key_id=spec.kms_key_id)
        self.ledger = Ledger.for_spec(spec, instance=self.instance)
        self.pipeline = self._pipeline(spec)
        return self

    def _pipeline(self, spec: TransformSpec) -> ObjectPipeline:
        """The job's last stage, told what the service lets it take short cuts on."""
        pipeline = ObjectPipeline(spec, self.invoker, self.ledger)
        pipeline.join_kind = join_kind(spec, self.stack.service, pipeline.processor.active)
        pipeline.own_answers = self.stack.service.handlers is None
        return pipeline

    def _start_pool(self, handlers, init: dict) -> None:
        """Called with the script before the model loads: the workers import it meanwhile."""
        if self.spec.handler_workers is None:
            from tfbatch.handlers.inline_pool import InlinePool, in_process_reason
            from tfbatch.handlers.user_code import load_module

            # A worker process re-imports what the script imports (TensorFlow: seconds of CPU
            # each) and costs two pickled hops per record; on few cores that is more than it
            # gives back (handlers/inline_pool.py). --handler-workers N still asks for workers.
            from tfbatch.records import normalize_split_type, normalize_strategy

            # MultiRecord with a SplitType: each request is a payload of many records. (With
            # SplitType None, MultiRecord, the default, still sends one object per request.)
            many_records = (normalize_split_type(self.spec.split_type) is not None
                            and normalize_strategy(self.spec.batch_strategy) == "MultiRecord")
            reason = in_process_reason(load_module(handlers.script), self.handler_workers(),
                                       single_handler=handlers.mode == "handler", many_records=many_records)
            if reason is not None:
                log.info("the script's hooks run in this process, a hop at a time: %s", reason)
                self.pool = InlinePool(init, reason)
                # A single handler's model calls are answered in this process
                # (handlers/local_rest.py); from a worker process each is an HTTP round trip,
                # which costs more than the hooks' share of the GIL (profile/handler.md).
                if self.handler_workers() >= 2 and handlers.mode != "handler":
                    # ... until they turn out to be most of this process's CPU (a script that
                    # decodes images with PIL, say): then in worker processes (adaptive_pool.py).
                    from tfbatch.handlers.adaptive_pool import AdaptivePool

                    self.pool = AdaptivePool(self.pool, lambda: self._handler_pool(init),
                                             max_size=self.handler_workers())
                return
        self.pool = self._handler_pool(init)

    def _start_default_pool(self, service) -> None:
        """No script: the default handling's JSON/CSV parse and image decode go to worker
        processes too (they hold the GIL per record), unless the model decodes the images
        itself in its graph (``ImageBatchPredict``), which needs no worker."""
        from tfbatch.handlers.pooled import script_init
        from tfbatch.transform.predict import image_batch_blocker

        if image_batch_blocker(self.spec, service) is None:
            return
        self.pool = self._handler_pool(script_init(None, self.spec.max_image_pixels))

    def _handler_pool(self, init: dict):
        """Handler worker processes, started: --handler-workers N of them, else the first
        START_WORKERS of this instance's share of the cores, more as they turn out busy.

        --handler-workers 0: none; the hooks (or, with no script, the default decode and
        encode) run in this process, a hop at a time, on the same dataflow (``InlinePool``):
        what hooks that need the job's GPU ask for. It used to send each request alone through
        the in-process service and its dynamic batcher (batches of 16 at most, as many in
        flight as --concurrency): 100,000 SingleRecord CSV lines through a script took 30 s
        against 7 s for the default (benchmarks/transform/profile/handler-workers-0.md).
        """
        from tfbatch.handlers.pool import START_WORKERS, HandlerPool

        if self.handler_workers() <= 0:
            from tfbatch.handlers.inline_pool import InlinePool

            return InlinePool(init, "--handler-workers 0")
        start = None if self.spec.handler_workers is not None else START_WORKERS
        return HandlerPool(init, self.handler_workers(), start=start).start()

    def cores(self) -> int:
        """This instance's share of the machine's cores: local instances (and the processes of
        one, engines/local.py) share one machine, and N of them x all cores would oversubscribe it."""
        from tfbatch.runtime.placement import usable_cores

        return max(1, usable_cores() // max(1, self.host_instances))

    def intra_op_threads(self) -> int:
        """TensorFlow's intra-op pool for this instance, where the job names no size: its share
        of the cores over the hops it runs at once, at least one thread.

        TensorFlow's default is every core of the machine for each op. The dataflow runs at
        least ``MIN_LANE_THREADS`` hops at once (each its own decode and model call), and the
        image lane one per core of the share: the cores are filled by hops side by side, and
        splitting each op across the pool only added hand-offs and spinning threads. With one
        thread (2-core VM, trees alternating, 3 rounds): 5,000 JPEGs decoded by TensorFlow ops
        for a float model 5.21 -> 4.81 s, each at its own size through a fully convolutional
        model 14.39 -> 12.29 s, 1,000 large photos 4.11 -> 3.97 s; seven other jobs,
        MobileNetV2 among them, within the machine's noise either way
        (benchmarks/transform/profile/intra-op.md). ``--lane-workers`` and
        MaxConcurrentTransforms below that count leave fewer hops side by side, and each op
        then gets more of the cores. Instances sharing a machine each divide their own share.
        """
        hops = MIN_LANE_THREADS
        for bound in (self.spec.lane_workers, self.spec.max_concurrent_transforms):
            if bound:
                hops = min(hops, bound)
        return max(1, self.cores() // hops)

    def handler_workers(self) -> int:
        """--handler-workers, else this instance's share of the cores (0: the hooks run in this process)."""
        if self.spec.handler_workers is not None:
            return self.spec.handler_workers
        return self.cores()

    def close(self) -> None:
        if self._froze:
            self._froze = False
            _thaw_heap()
        if self._predict is not None:
            self._predict.close()
            self._predict = None
        if self.invoker is not None:
            self.invoker.close()
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self.stack is not None:
            self.stack.close()
            self.stack = None
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def __enter__(self) -> "InstanceRunner":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- work -------------------------------------------------------------------------

    def _job_rows(self, counted, sent):
        """What the batch-size probe counts the job's rows with (its budget is a share of
        them): the objects listed ahead, where each is one request; for objects split into
        records (lines, RecordIO, TFRecord), their listed bytes over the bytes per request sent
        so far (``sent``), raising the fixed budget only: a 100,000-line SingleRecord job had
        1,000 requests and stopped at 64, where 256 ran it in three quarters of the time."""
        if counted is None:
            return None
        if self.spec.split_type == "None":
            return counted.rows
        return lambda want: rows_from_bytes(counted, sent.per_request(), want, SPLIT_FLOOR_ROWS)

    def _dataflow(self, counted=None):
        """The job's dataflow with its predict stage (transform/predict.py), chosen once here.

        A handler pool (a script's hooks, or with no script the default decode and encode, in
        worker processes): ``PooledService.invoke_many``. No script, an image content type and
        a signature taking image bytes or an image tensor: ``ImageBatchPredict`` (decode in the
        graph or by TensorFlow ops here, batch size tuned on the job). --handler-workers 0: the
        same pool interface with the hooks in this process (``InlinePool``).
        """
        from tfbatch.transform.autotune import BatchSizeProbe
        from tfbatch.transform.dataflow import Dataflow
        from tfbatch.transform.predict import ImageBatchPredict, RequestBytes, image_batch_blocker

        assert self.stack is not None and self.invoker is not None, "call open() first"
        if self.pool is not None:
            # One chunk in the model while each worker process holds another; at least the
            # image lane's three, so hooks in this process (a pool of size 1) work on one chunk
            # while the model runs another and a third waits its turn: on the scripted JPEG job
            # 2 threads left the hooks and the model taking turns (20,000 JPEGs, 3 alternating
            # rounds: 10.82-11.33 s -> 10.52-10.83 s; benchmarks/transform/profile/lane-threads.md).
            # Counted for the most processes the pool may grow to, not the ones it starts with:
            # it grows only while those are busy, and with chunks for two they never were (16
            # cores, 4 job processes: each pool's 2 processes were busy 55 % of the time, so no
            # pool grew past 2 of its 4, and 10 of the 16 cores ran; profile/sixteen-cores.md).
            pool, threads = self.pool, max(MIN_LANE_THREADS, self.pool.max_size + 1)
            service = pooled = self.invoker.service
            # The pool's workers and hops, and the model calls a bad request made fail (PooledService).
            stats, chosen_by = (lambda: {**pool.stats, **pooled.stats}), None
            from tfbatch.transform.predict import POOL_CANDIDATES, POOL_START, PoolPredict, pool_start

            # MaxConcurrentTransforms, when given, also bounds the sizes the probe may try.
            cap = self.spec.max_concurrent_transforms
            candidates = tuple(c for c in POOL_CANDIDATES if not cap or c <= cap)
            if self.spec.autotune and candidates:
                from tfbatch.transform.autotune import POOL_MIN_WINDOW_S

                sent = RequestBytes()
                job_rows = self._job_rows(counted, sent)

                def probe(start: int = POOL_START):
                    start = pool_start(candidates, sent.per_request(), start)
                    return BatchSizeProbe(candidates, fallback=start, cores=self.cores(), job_rows=job_rows,
                                          in_flight=threads, min_window_s=POOL_MIN_WINDOW_S)

                # Hooks in this process (InlinePool, AdaptivePool until it moves them): the probe
                # compares its CPU; a worker pool's CPU is elsewhere, so it compares wall time.
                cpu = getattr(pool, "cpu", None)
                tuned = service = PoolPredict(pooled, probe(), stats, cpu, restart=probe, sent=sent)
                stats = lambda: tuned.stats  # noqa: E731
                chosen_by = {"max_batch_size": "tuner"}
            return Dataflow(self.spec, service, self.pipeline, batch_size=self.spec.max_batch_size,
                            threads=threads, max_in_flight=self.spec.max_concurrent_transforms,
                            stats=stats, chosen_by=chosen_by)
        # With no pool, open() found the job fit for the image batches (_start_default_pool).
        assert image_batch_blocker(self.spec, self.stack.service) is None
        tuner, sent = None, RequestBytes()
        if self.spec.autotune:
            from tfbatch.transform.autotune import MIN_WINDOW_S

            tuner = BatchSizeProbe(fallback=self.spec.max_batch_size, cores=self.cores(),
                                   job_rows=self._job_rows(counted, sent), min_window_s=MIN_WINDOW_S)
        chosen_by = {"max_batch_size": "tuner" if tuner is not None else "flag",
                     "workers": "flag" if self.spec.lane_workers
                     else f"default (one per core of the instance's share, at least {MIN_LANE_THREADS})",
                     "in_flight_objects": "flag" if self.spec.max_concurrent_transforms
                     else "batch size x (workers + 2)"}
        predict = self._predict = ImageBatchPredict(self.stack.service, max_image_pixels=self.spec.max_image_pixels,
                                                    tuner=tuner, sent=sent, decode_workers=self.cores())
        return Dataflow(self.spec, predict, self.pipeline, batch_size=self.spec.max_batch_size,
                        threads=self.spec.lane_workers or max(MIN_LANE_THREADS, self.cores()),
                        max_in_flight=self.spec.max_concurrent_transforms, stats=lambda: predict.stats,
                        chosen_by=chosen_by)

    def run(self, emit: Emit, refs: Iterable[ObjectRef] | None = None, stop=None,
            prefetch: bool | None = None) -> InstanceSummary:
        """Every object of this instance's partition (or of ``refs``) once; the summary at the end.

        ``stop`` (the job's --max-error-rate guard): once set, nothing new starts. ``prefetch``:
        iterate the listing (this instance's own, or ``refs`` where that is a listing) on a
        thread of its own, ahead of the chunks (``lookahead.Prefetch``); by default only for
        its own listing. Not for refs that a driver hands out on demand (Ray's actors), which
        reading ahead would take from the other instances.
        """
        started = time.monotonic()
        summary = InstanceSummary(instance=self.instance)
        partition = listing = None
        if refs is not None:
            # The job's listing pass (engines) already dropped done objects after reading the
            # ledger once; reading it again per instance costs a listing and its journals.
            done, with_errors = set(), set()
        else:
            done = self.ledger.done_keys(retry_failed=self.spec.retry_failed) if self.spec.resume else set()
            with_errors = self.ledger.keys_with_errors()
            # Done objects are filtered page by page against the ledger's index (not one lookup each).
            refs = partition = iter_partition(self.spec, self.instance, self.instance_count, done)
        if prefetch or (prefetch is None and partition is not None):
            # The listing (a stat per local file, a page per request on S3) on a thread of its
            # own, ahead of the chunks, rather than in turns with submitting them.
            refs = listing = Prefetch(refs)
        # The tuner's probe is a share of the job: it may count the listing ahead to know the job's size.
        refs = counted = CountAhead(refs)
        lock = threading.Lock()

        def finished(result: ObjectResult) -> None:
            with lock:
                summary.count(result)
            emit(result)

        def todo() -> Iterator[ObjectRef]:
            for ref in refs:
                if stop is not None and stop.is_set():
                    return  # --max-error-rate: what is in flight finishes, nothing new starts
                if partition is None and ref.key in done:
                    summary.skipped += 1
                    continue
                yield ref

        flow = self._dataflow(counted)
        try:
            flow.run(((ref, ref.key in with_errors) for ref in todo()), finished)
            stats = flow.stats
            name = stats.pop("name", None) or self._signature_name()
            summary.batches = {name: {**stats, "precision": self.spec.precision}}
        finally:
            if listing is not None:
                listing.close()
            self.ledger.close()  # the last group's commit
        if partition is not None:
            summary.skipped += partition.skipped
        summary.seconds = time.monotonic() - started
        return summary

    def _signature_name(self) -> str:
        servable = self.stack.model_server.resolve(None)
        return f"{servable.name}/{servable.version}/{servable.default_signature}"
