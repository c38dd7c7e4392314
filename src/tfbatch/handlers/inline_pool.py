"""The handler pool's interface with the hooks run in this process, a hop at a time.

A worker process pays for every module the script imports. A script that imports TensorFlow
(to parse a ``tf.train.Example``, say) costs each worker seconds of CPU before its first
record: on a small machine that start-up is most of a job's CPU (measured in
benchmarks/transform/profile/perf.md). This process has TensorFlow loaded already, so there
the hooks cost only their own work. ``InlinePool`` runs the same ``Worker`` steps as a worker
process (pool_worker.py) on a hook thread, not the caller's (so a request's timeout still
holds), so the answers are the ones the pool gives:
``PooledService`` still decodes a whole hop, makes one joint model call and encodes the
hop's responses, and only the process the hooks run in changes. On 2 or more cores
``AdaptivePool`` (adaptive_pool.py) moves the hooks to worker processes once they turn out to
be most of this process's CPU.
"""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from queue import Empty, SimpleQueue
from types import ModuleType
from typing import Any


# The one "process" every step runs in; output steps are pinned to it. Not a slot index, so a
# pool that hands hops to both (adaptive_pool.py) tells its output steps apart.
WHERE = ("in-process", 0)
# Worker processes pay off from this many cores per instance: below it the model's own thread
# pools and this process's reads and writes already fill the cores, and every record would
# also pay two pickled hops between processes (measured in
# benchmarks/transform/profile/script-before.md: pipes and pickling were the largest stage
# of the scripted JPEG job on 2 cores).
MIN_CORES_FOR_WORKERS = 3
# ... and for hooks that are heavy by the job's shape or the script's imports
# (in_process_reason): one core runs the hooks while the other feeds the model.
MIN_CORES_FOR_HEAVY_HOOKS = 2
# Image libraries: a script holding one decodes images in its hooks.
IMAGE_LIBRARIES = ("PIL", "cv2", "imageio", "skimage")


def _module_names(module: ModuleType):
    """The module of every value the script holds: a module's own name, else where it was defined."""
    for value in vars(module).values():
        name = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
        if isinstance(name, str):
            yield name


def imports_tensorflow(module: ModuleType) -> bool:
    """Whether the script holds TensorFlow (the package, a submodule, or a name from it)."""
    return any(name == "tensorflow" or name.startswith(("tensorflow.", "keras")) for name in _module_names(module))


def decodes_images(module: ModuleType) -> bool:
    """Whether the script holds an image library (PIL, OpenCV, imageio, scikit-image), or a name from one."""
    return any(name.split(".")[0] in IMAGE_LIBRARIES for name in _module_names(module))


def in_process_reason(module: ModuleType, cores: int, *, single_handler: bool = False,
                      many_records: bool = False) -> str | None:
    """Why a script's hooks should run in this process by default (None: in worker processes).

    ``cores`` is this instance's share of the machine. ``--handler-workers N`` overrides this.
    A single ``handler`` stays here on any number of cores: its model calls are answered in
    this process (``local_rest``), while from a worker process each is an HTTP request that
    this process serves anyway, which cost it more CPU than the whole job does here (2,000
    JPEGs, 1 or 2 workers: 9.3-12.0 s of this process's CPU against 6.6-8.4 s in all;
    benchmarks/transform/profile/handler.md), so more cores would not make workers faster.

    ``many_records`` (BatchStrategy MultiRecord with a SplitType): every request carries up to MaxPayloadInMB
    of records, and the hooks loop over all of them (a CSV payload's 5,000 lines turned into
    JSON, a RecordIO payload's 45 images base64-wrapped), which costs far more than the two
    pickled hops of the payload's bytes. So the hooks go to worker processes from 2 cores on,
    from the start. On 2 cores: ``csv-script`` 9.2-10.5 s against 11.4-12.2 s (in process, its 6
    hops never filled the adaptive pool's window), ``recordio-multi`` 9.9-10.1 s against
    10.2-11.1 s (moved after 3.2-4.6 s); benchmarks/transform/profile/multirecord-hooks.md.

    A script that holds an image library (``decodes_images``) decodes an image in its hooks for
    every record, which costs more than the trip of its bytes to a worker: its hooks go to
    worker processes from 2 cores on too, where the adaptive pool moved them after a second or
    more of running them here at half speed (seed 002's ``png-cifar-script``: 22.3-22.6 s
    against 23.3-24.4 s; ``jpeg-float-script``: 94.9-99.4 s against 99.5-102.6 s; same file).
    """
    if imports_tensorflow(module):
        return "the script imports TensorFlow"
    if single_handler:
        return "a single handler's model calls are answered in this process (worker processes would each call it over HTTP)"
    least = MIN_CORES_FOR_HEAVY_HOOKS if many_records or decodes_images(module) else MIN_CORES_FOR_WORKERS
    if cores < least:
        return f"{cores} core(s) for this instance, fewer than the {least} worker processes pay off on"
    return None


class InlinePool:
    """What ``PooledService`` needs of a ``HandlerPool``: ``size``, ``max_size``, ``submit``, ``set_models``."""

    size = max_size = 1

    def __init__(self, init: dict[str, Any], reason: str = "the script imports TensorFlow"):
        from tfbatch.handlers.pool_worker import Worker

        # The script is imported once per process (user_code.load_module): this reuses the
        # module the service already loaded, so its module-level code does not run again.
        self.worker = Worker(init)
        # A single handler's model calls are answered in this process: its calls can take
        # turns on a hop's thread, pausing for the model (batching/cooperative.py).
        self.worker.take_turns()
        self.reason = reason
        self.hops = 0
        # CPU the hook threads spent in steps (with the worker's handler threads, which a
        # single ``handler`` runs on): what worker processes would take.
        self.hook_cpu_s = 0.0
        self._lock = threading.Lock()
        self._threads = HookThreads()

    def set_models(self, models: dict[str, Any]) -> None:
        self.worker.models = models

    def submit(self, step: str, items: list, where: tuple[int, int] | None = None) -> Future:
        if step == "input":
            # A worker process receives the out-of-band body as a memoryview: the same here.
            items = [(_view(item[0]), *item[1:]) for item in items]
        future: Future = Future()
        future.where = WHERE  # type: ignore[attr-defined]

        def run() -> None:
            began = time.thread_time()
            try:
                results = self.worker.run(step, items)
            except BaseException as exc:  # noqa: BLE001 - the caller's result() raises it, as a worker's would
                with self._lock:
                    self.hook_cpu_s += time.thread_time() - began
                future.set_exception(exc)
                return
            with self._lock:
                self.hops += 1
                self.hook_cpu_s += time.thread_time() - began
            future.set_result(results)

        # Each hop on a hook thread, not the caller's, so the caller's wait keeps
        # InvocationsTimeoutInSeconds for a hook that never returns: the request then answers
        # 504 (retried, then an error line), as with a worker process. Unlike a worker, a stuck
        # thread cannot be killed; it is a daemon and its late result is dropped.
        self._threads.run(run)
        return future

    @staticmethod
    def cpu() -> float:
        """This process's CPU seconds: the hooks' CPU is in them (the batch-size probe reads it)."""
        return time.process_time()

    def spent(self) -> tuple[float, int]:
        """(CPU seconds the hook threads spent in steps, steps run) so far."""
        with self._lock:
            return self.hook_cpu_s + self.worker.handler_cpu_s, self.hops

    def close(self) -> None:
        self._threads.close()
        self.worker.close()

    @property
    def stats(self) -> dict[str, Any]:
        return {"handler_workers": 0, "hooks": f"in-process ({self.reason})", "hops": self.hops,
                "hook_threads": self._threads.started, "worker_restarts": 0, "workers_started_before_model_loaded": 0,
                **({"handler_calls": self.worker.handler_calls()} if self.worker.single_handler else {})}


class HookThreads:
    """Threads that run hops, kept between hops: a hop goes to an idle one, else a new one.

    A thread per hop cost the caller a ``Thread.start``, which waits until the new thread has
    taken the GIL once: behind the hooks and the model's Python, a quarter of a dataflow
    thread's time on the scripted JPEG job (benchmarks/transform/profile/writes.md). A thread
    whose hook never returns is never idle again, so it cannot hold up later hops: they get
    another thread. An idle thread ends after ``idle_s``, and every idle one at ``close``.
    """

    def __init__(self, idle_s: float = 30.0, name: str = "inline-hooks"):
        self.idle_s = idle_s
        self.name = name
        self.started = 0  # threads started so far (hops reuse them)
        self._idle: list[SimpleQueue] = []
        self._lock = threading.Lock()
        self._closed = False

    def run(self, fn: Callable[[], None]) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
            if inbox is None:
                self.started += 1
        if inbox is None:
            inbox = SimpleQueue()
            threading.Thread(target=self._loop, args=(inbox,), name=self.name, daemon=True).start()
        inbox.put(fn)

    def _loop(self, inbox: SimpleQueue) -> None:
        while True:
            try:
                fn = inbox.get(timeout=self.idle_s)
            except Empty:
                with self._lock:
                    if inbox in self._idle:  # still idle (not handed a hop meanwhile): end
                        self._idle.remove(inbox)
                        return
                continue  # handed a hop as the wait ended: it is in the inbox
            if fn is None:
                return
            fn()
            with self._lock:
                if self._closed:
                    return
                self._idle.append(inbox)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for inbox in idle:
            inbox.put(None)


def _view(body: Any) -> Any:
    return body.raw() if isinstance(body, pickle.PickleBuffer) else body
