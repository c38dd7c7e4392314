"""A hop's single-``handler`` calls taken in turns on one thread, each pausing where it waits
for the model.

A single ``handler`` calls the model itself (a POST to ``context.rest_uri`` or a gRPC call,
both answered in the job's process) and waits for the answer. On a thread per call, every
record cost a round of thread switches: the handler thread woke, its call went to the
batcher's thread (a gRPC ``.future()`` through a pool thread first), the answer woke the
handler thread again, and 32 such threads took turns at the GIL: 13-18 context switches a
record on the 2-core VM, whose cores stood a third idle
(``benchmarks/transform/profile/cooperative-handlers.md``).

:func:`run_all` runs each call of a hop in a greenlet on the hop's own thread. Where a call
would block on the model's batcher, :func:`wait` hands control back to the hop's loop instead,
which starts the next call. Once every running call waits, the loop waits once, for the first
answer, and then resumes the calls it answered. The batcher sees a hop's calls at once, as it
did from the threads, without a thread switch per call. The SageMaker container runs handlers
the same way: its default gunicorn workers are gevent's, greenlets on one thread.

A call that blocks elsewhere (on a socket to another service, ``time.sleep``) would hold up
every other call of the hop's thread. The loop therefore times each turn of a call on the
wall clock and on the thread's CPU clock; once the calls have spent far more time off the CPU
outside :func:`wait` than on it, or once one turn has lasted over ``STUCK_S`` (a call waiting
on another call of its own thread, which cannot run meanwhile), the caller stops taking turns
and goes back to a thread per call (``Turns.blocking``, ``handlers/pool_worker.py``).

Imports no TensorFlow; ``greenlet`` is imported on first use.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_any
from typing import Any

# Turns go back to threads once time off the CPU inside the calls (outside ``wait``) passes
# both: a call blocking on something other than the model. A turn that lost the GIL to
# another thread for a while is off the CPU too, so the ratio leaves room for that: on the
# 2-core VM the in-process handler jobs measured ~0.2-1.6 times as much time off the CPU as on
# it, and a handler sleeping 10 ms a call ~100 times.
BLOCKING_RATIO = 8.0
BLOCKING_MIN_S = 0.1
# ... or once one turn has lasted this long: a call may wait on another call (a lock held
# across its model call, a barrier), which on one thread never comes. The hops that start
# after that take threads, so their calls can still meet it.
STUCK_S = 1.0

_local = threading.local()


class Turns:
    """Time the calls of :func:`run_all` spent in their turns, summed over every hop so far
    (the hops of one job run on several threads at once), and whether turns should stop.

    ``clock`` and ``cpu_clock`` are where turns are timed (``time.perf_counter`` and this
    thread's ``time.thread_time``); a test can pass clocks it moves itself.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.thread_time):
        self.clock, self.cpu_clock = clock, cpu_clock
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self.calls = 0
        self._stopped = False
        self._open: dict[int, float] = {}  # thread id -> when its turn under way began
        self._lock = threading.Lock()

    def begin(self) -> tuple[float, float]:
        began = self.clock(), self.cpu_clock()
        self._open[threading.get_ident()] = began[0]
        return began

    def end(self, began: tuple[float, float], finished: bool) -> None:
        wall, cpu = self.clock() - began[0], self.cpu_clock() - began[1]
        self._open.pop(threading.get_ident(), None)
        with self._lock:
            self.wall_s += wall
            self.cpu_s += cpu
            self.calls += finished

    @property
    def off_cpu_s(self) -> float:
        return max(0.0, self.wall_s - self.cpu_s)

    def blocking(self) -> bool:
        """True once the calls have been seen to block on something other than the model:
        from then on, for good."""
        if not self._stopped:
            off = self.off_cpu_s
            now = self.clock()
            stuck = any(now - began > STUCK_S for began in list(self._open.values()))
            self._stopped = stuck or (off > BLOCKING_MIN_S and off > BLOCKING_RATIO * self.cpu_s)
        return self._stopped


class _Loop:
    def __init__(self, getcurrent: Callable[[], Any]):
        self.getcurrent = getcurrent  # greenlet's, kept here: an import per wait costs ~0.5 us
        self.hub = getcurrent()
        self.tasks: set[Any] = set()


def inside() -> bool:
    """Whether the caller is a call of a :func:`run_all` on this thread."""
    loop = getattr(_local, "loop", None)
    return loop is not None and loop.getcurrent() in loop.tasks


def wait(future: Future) -> Any:
    """``future.result()``; a call of :func:`run_all` lets the hop's other calls run meanwhile."""
    if not future.done() and inside():
        _local.loop.hub.switch(future)
    return future.result()


def run_all(fn: Callable[[Any], Any], items: Sequence[Any], limit: int, turns: Turns) -> list[Any]:
    """``[fn(item) for item in items]``, at most ``limit`` calls under way at once, each
    pausing in :func:`wait`. Time spent in the calls' turns is added to ``turns``.

    Once ``turns.blocking()``, no further call starts here: the result list then ends early,
    and the caller runs the rest its own way. ``fn`` is expected to catch its own errors; one
    it lets through ends the hop (the calls under way are dropped) and is raised here.
    """
    from greenlet import getcurrent, greenlet

    if getattr(_local, "loop", None) is not None:
        raise RuntimeError("run_all inside run_all on one thread")
    results: list[Any] = [None] * len(items)
    loop = _local.loop = _Loop(getcurrent)
    ready: deque[tuple[Any, int]] = deque()  # (greenlet, index) to switch into
    waiting: dict[Future, list[tuple[Any, int]]] = {}
    started = 0
    stop = False
    try:
        while True:
            if not ready and not stop and started < len(items) and len(loop.tasks) < limit:
                task = greenlet(fn)
                loop.tasks.add(task)
                ready.append((task, started))
                started += 1
            if not ready:
                if not waiting:
                    break
                done, _ = wait_any(list(waiting), return_when=FIRST_COMPLETED)
                for future in done:
                    ready.extend(waiting.pop(future))
                continue
            task, index = ready.popleft()
            began = turns.begin()
            try:
                out = task.switch(items[index]) if not task else task.switch()
            finally:
                finished = task.dead
                turns.end(began, finished)
            if finished:
                results[index] = out
                loop.tasks.discard(task)
                stop = stop or turns.blocking()
            else:
                waiting.setdefault(out, []).append((task, index))
    finally:
        _local.loop = None
        for task in loop.tasks:
            task.throw()  # GreenletExit: a call dropped with its hop ends here, not later
    return results[:started] if stop else results
