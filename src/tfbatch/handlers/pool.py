"""Handler worker processes for batch jobs: user script code off the model-feeding process.

``code/inference.py`` hooks are Python that holds the GIL for every record (base64, JSON,
PIL...). Run in the process that also reads objects and feeds TensorFlow, they cap a job at
one core. The pool keeps ``size`` child processes (``python -m tfbatch.handlers.pool_worker``,
started fresh, never forked), each with the script imported, and one dispatcher thread per process that ships *hops*:
every job queued for that process when it becomes free goes in one pickled message, so a
batch of records costs one round trip, and requests submitted one by one from many threads
coalesce the same way.

With ``start`` (the default when the job does not say how many), the pool starts that many
processes and adds one at a time, up to ``size``, while the started ones are busy nearly all
the time: each process costs 0.6-1.3 s of CPU to start (Python, tfbatch's and the script's
imports), which a job whose hooks are cheap never earns back on a many-core machine
(benchmarks/transform/profile/pool-growth.md: 16 processes on 16 cores took 2.5x the CPU and
1.24x the wall time of one, on 2,000 images).

A worker that dies mid-hop (the script calls ``os._exit``, segfaults, is killed) fails only
the records of that hop, as :data:`LOST` results, and is replaced before the next hop. The
caller turns LOST into a 503 (Unavailable), which a batch job retries and, failing that,
leaves for a resumed run (docs/errors.md). An ``output`` step is sent to the process that ran
the record's ``input`` step, as in the container, where one process sees a request through;
if that process was replaced in between, the record is LOST too.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from tfbatch.handlers import wire
from tfbatch.runtime.blas import one_blas_thread

log = logging.getLogger(__name__)

LOST = "lost"
MAX_ITEMS_PER_HOP = 256
MAX_FAILED_STARTS = 3  # in a row: the script cannot start in a child, every later hop is LOST
# Growth: over a window of at least GROW_WINDOW_S, the started processes spent this share of
# their time in hops (a hop in flight counts): the hooks are what the job waits on.
GROW_WINDOW_S = 0.5
GROW_BUSY = 0.85
START_WORKERS = 2  # what a job that does not say starts with (transform/instance.py)


def worker_env(parent: dict[str, str] | os._Environ) -> dict[str, str]:
    """A worker process's environment: the parent's, with the GPUs hidden.

    The model runs in the parent and owns the GPUs. A worker that runs TensorFlow ops (a
    script that imports TensorFlow, or the default image decode of a job with no script)
    would otherwise open a CUDA context of its own on every visible GPU, each holding device
    memory, and by TensorFlow's default reserve nearly all of it, leaving the model short.
    Hooks that need a GPU can run in the instance's own process (``--handler-workers 0``).
    NumPy's OpenBLAS gets one thread where the parent's environment names no count
    (``runtime.blas.one_blas_thread``): the pool has a process per core already.
    """
    return {**parent, "CUDA_VISIBLE_DEVICES": "-1", **one_blas_thread(parent)}


class _Slot:
    """One worker process, its pipe, its queue of jobs and the thread that ships them."""

    def __init__(self, pool: "HandlerPool", index: int):
        self.pool = pool
        self.index = index
        self.generation = 0  # bumped on every replacement; output steps check it
        self.jobs: deque[tuple[str, list, Future, int | None]] = deque()
        self.queued = 0
        self.cond = threading.Condition()
        self.proc = None
        self.conn = None
        self.closing = False
        self.busy = False
        self.busy_s = 0.0  # time spent in hops; with hop_started, what growth reads
        self.hop_started = 0.0
        self.ready = threading.Event()  # its first start is over (taking hops, or failed)
        self.spawned: tuple[subprocess.Popen, socket.socket] | None = None  # by start(), before its handshake
        self.starting: subprocess.Popen | None = None  # a process in its handshake (importing the script)
        self.thread = threading.Thread(target=self._loop, name=f"handler-pool-{index}", daemon=True)

    def submit(self, step: str, items: list, future: Future, generation: int | None) -> None:
        with self.cond:
            self.jobs.append((step, items, future, generation))
            self.queued += len(items)
            self.cond.notify()

    def _spawn(self) -> tuple[subprocess.Popen, socket.socket] | None:
        # A plain child process (not multiprocessing.Process): a local engine's instance is a
        # daemonic process, which multiprocessing forbids to have children; and never a fork of
        # a process that runs TensorFlow threads. The socket is the pipe both ways.
        parent, child = socket.socketpair()
        try:
            proc = subprocess.Popen([sys.executable, "-m", "tfbatch.handlers.pool_worker", str(child.fileno())],
                                    pass_fds=(child.fileno(),), env=worker_env(os.environ))
        except OSError as exc:
            log.error("handler worker %d could not start: %s", self.index, exc)
            parent.close()
            return None
        finally:
            child.close()
        self.pool._count_spawn()
        return proc, parent

    def _start(self) -> bool:
        spawned, self.spawned = self.spawned, None
        spawned = spawned or self._spawn()
        if spawned is None:
            return False
        proc, conn = spawned
        with self.cond:
            if self.closing:  # closed before the handshake began: stop() saw no process to end
                proc.terminate()
            self.starting = proc
        try:
            wire.send(conn, ("init", self.pool.init))
            kind, detail = wire.recv(conn)
            if kind == "ready":
                # The models' signatures come once the model has loaded: the process imported
                # the script meanwhile. A replacement gets them at once.
                wire.send(conn, ("models", self.pool.wait_models()))
                kind, detail = wire.recv(conn)
        except (EOFError, OSError) as exc:
            kind, detail = "failed", f"exited at start ({exc or proc.poll()})"
        finally:
            with self.cond:
                self.starting = None
        if kind != "ready":
            if not self.closing:
                log.error("handler worker %d could not start: %s", self.index, detail)
            conn.close()
            _end(proc)
            return False
        self.proc, self.conn = proc, conn
        self.generation += 1
        return True

    def _take(self) -> list[tuple[str, list, Future, int | None]] | None:
        with self.cond:
            while not self.jobs and not self.closing:
                self.cond.wait()
            if not self.jobs:
                return None
            taken = [self.jobs.popleft()]
            count = len(taken[0][1])
            while self.jobs and count + len(self.jobs[0][1]) <= MAX_ITEMS_PER_HOP:
                taken.append(self.jobs.popleft())
                count += len(taken[-1][1])
            self.queued -= count
            return taken

    def _loop(self) -> None:
        # Start the process now, while the parent is still busy elsewhere.
        self.pool._started(self, self._replace())
        while True:
            taken = self._take()
            if taken is None:
                return
            try:
                self._hop(taken)
            except Exception as exc:  # noqa: BLE001 - this thread must outlive any one hop
                log.exception("handler worker %d: hop failed", self.index)
                self.busy = False
                _settle(taken, None, self.index, self.generation,
                        f"handler pool failed: {type(exc).__name__}: {exc}")

    def _hop(self, taken: list) -> None:
        if self.conn is None and not self._replace():
            _settle(taken, None, self.index, self.generation, "handler worker process could not start")
            return
        generation = self.generation
        stale = [job for job in taken if job[3] is not None and job[3] != generation]
        if stale:
            _settle(stale, None, self.index, generation,
                    "handler worker process was replaced while running this record")
            taken = [job for job in taken if job not in stale]
            if not taken:
                return
        try:
            self.hop_started = self.pool.clock()
            self.busy = True
            wire.send(self.conn, [(step, items) for step, items, _, _ in taken])
            results = wire.recv(self.conn)
        except (EOFError, OSError):
            self.busy = False
            self.busy_s += self.pool.clock() - self.hop_started
            code = self._reap()
            self.pool.restarts += 1
            _settle(taken, None, self.index, generation,
                    f"handler worker process exited (exit code {code}) while running this record")
            return
        self.busy = False
        self.busy_s += self.pool.clock() - self.hop_started
        self.pool.hops += 1
        _settle(taken, results, self.index, generation, "")

    def _replace(self) -> bool:
        for _ in range(MAX_FAILED_STARTS):
            if self.closing:
                return False
            try:
                if self._start():
                    return True
            except Exception:  # noqa: BLE001 - counted as a failed start
                log.exception("handler worker %d could not start", self.index)
        return False

    def _reap(self):
        proc, self.proc = self.proc, None
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if proc is None:
            return None
        return _end(proc)

    def busy_until(self, now: float) -> float:
        return self.busy_s + (now - self.hop_started if self.busy else 0.0)

    def stop(self) -> None:
        if self.thread.ident is None:
            return  # a process the pool never grew to (its thread never started)
        with self.cond:
            self.closing = True
            self.cond.notify()
            starting = self.starting
        if starting is not None:
            # Still importing the script (TensorFlow: seconds), for a job that is over (a pool
            # started as the job ended, adaptive_pool.py): it has taken no record, so it is
            # ended instead of waited for.
            starting.terminate()
        proc = self.proc
        if self.busy and proc is not None:
            # Still running a hop the job gave up on (a stuck hook, past its timeout): the
            # job does not wait for it, as it does not wait for a stuck invocation thread.
            proc.terminate()
        self.thread.join(30)
        if self.conn is not None:
            try:
                wire.send(self.conn, None)
            except OSError:
                pass
        self._reap()


def _end(proc: subprocess.Popen, grace_s: float = 5.0):
    """The exit code of ``proc``, terminating it if it does not exit within ``grace_s``."""
    try:
        return proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            return proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


def _settle(taken, results, index: int, generation: int, lost: str) -> None:
    """Resolve each job's Future with its per-record results, tagged with where they ran."""
    for n, (_, items, future, _) in enumerate(taken):
        if future.done():
            continue
        future.where = (index, generation)  # before the result: a waiter reads it at once
        future.set_result([(LOST, lost)] * len(items) if results is None else results[n])


class HandlerPool:
    """Up to ``size`` handler worker processes for one script; ``submit`` ships records to them.

    ``start``: how many processes start at once (all ``size`` when None); the pool then adds
    one at a time while those are busy (see the module's docstring). ``size`` is the number
    of processes taking hops now, ``max_size`` the most it may grow to. ``clock`` times the
    hops for that (a test's fake clock).
    """

    def __init__(self, init: dict[str, Any], size: int, *, start: int | None = None,
                 clock: Callable[[], float] = time.monotonic):
        if size < 1:
            raise ValueError(f"a handler pool needs at least one process, got {size}")
        self.init = init
        self.clock = clock
        self.max_size = size
        self.size = size if start is None else max(1, min(start, size))
        self.hops = 0
        self.restarts = 0
        self.started_before_models = 0  # processes started while the model was still loading
        self._models: dict[str, Any] | None = init.get("models")  # given now, or by set_models
        self._models_set = threading.Event()
        if self._models is not None:
            self._models_set.set()
        self._slots = [_Slot(self, i) for i in range(size)]
        self._next = 0
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._growing = False
        self._closed = False
        self._window: tuple[float, float] | None = None  # (since, busy seconds then)

    def start(self) -> "HandlerPool":
        """Start the first processes now; each imports the script on its own while this one goes on."""
        for slot in self._slots[:self.size]:
            slot.spawned = slot._spawn()
            slot.thread.start()  # the handshake, then hops
        return self

    def _count_spawn(self) -> None:
        if not self._models_set.is_set():
            # Its own lock: a process the pool grows to is spawned under self._lock (submit).
            with self._count_lock:
                self.started_before_models += 1

    def set_models(self, models: dict[str, Any]) -> None:
        """The loaded models' signatures (``models_init``): workers can decode requests from now on."""
        self._models = models
        self._models_set.set()

    def wait_models(self) -> dict[str, Any]:
        self._models_set.wait()
        if self._models is None:
            raise OSError("the handler pool closed before the model loaded")
        return self._models

    def submit(self, step: str, items: list, where: tuple[int, int] | None = None) -> Future:
        """A Future of one result per item. ``where`` (from an input step's Future) pins the process."""
        future: Future = Future()
        if where is not None:
            slot = self._slots[where[0]]
        else:
            with self._lock:
                # The least-loaded process; ties go round-robin so idle processes all get work.
                live = self._slots[:self.size]
                start = self._next % len(live)
                slot = min(live[start:] + live[:start], key=lambda s: s.queued)
                self._next = (slot.index + 1) % len(live)
                grow = self._to_grow()
                if grow is not None:  # under the lock, so that close() sees its thread
                    grow.spawned = grow._spawn()
                    grow.thread.start()  # takes hops once its handshake is done (_started)
        slot.submit(step, items, future, None if where is None else where[1])
        return future

    def _to_grow(self) -> "_Slot | None":
        """The next process to start, when the started ones were busy nearly all the last
        window; called under the lock, on every submit."""
        if self._growing or self._closed or self.size >= self.max_size:
            return None
        now = self.clock()
        if self._window is not None and now - self._window[0] < GROW_WINDOW_S:
            return None  # most submits: the window is still open
        busy = sum(s.busy_until(now) for s in self._slots[:self.size])
        if self._window is None:
            self._window = (now, busy)
            return None
        since, busy_then = self._window
        self._window = (now, busy)
        if (busy - busy_then) < GROW_BUSY * (now - since) * self.size:
            return None
        self._growing = True
        return self._slots[self.size]

    def _started(self, slot: "_Slot", ok: bool) -> None:
        """A process's first start is over: a process the pool grew to takes hops from now on."""
        with self._lock:
            if slot.index == self.size and self._growing:  # not one of the first ones
                if ok:
                    self.size += 1
                else:
                    self.max_size = self.size  # it cannot start: the pool stays as it is
                self._growing = False
                self._window = None
        slot.ready.set()

    def started(self, timeout_s: float | None = 0.0) -> int | None:
        """How many of the processes started first are taking hops; None while any is still
        starting after ``timeout_s`` (0: do not wait; None: wait until all have)."""
        first = self._slots[:self.size]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for slot in first:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not slot.ready.wait(left):
                return None
        return sum(1 for slot in first if slot.conn is not None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        for slot in self._slots:
            slot.closing = True
        self._models_set.set()  # a handshake still waiting for the model gives up
        for slot in self._slots:
            slot.stop()

    @property
    def stats(self) -> dict[str, int]:
        return {"handler_workers": self.size, "handler_workers_max": self.max_size, "hops": self.hops,
                "worker_restarts": self.restarts,
                "workers_started_before_model_loaded": self.started_before_models}
