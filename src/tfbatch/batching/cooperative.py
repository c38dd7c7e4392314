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
did from the threads, without a thread switch per call. A call that reaches the model through
:func:`gathered` (``ModelServer.run_signature`` does) hands its inputs to the loop instead,
which gives the batcher the inputs of all such calls as one request once each has paused. The SageMaker container runs handlers
the same way: its default gunicorn workers are gevent's, greenlets on one thread.

A call that blocks elsewhere (on a socket to another service, ``time.sleep``) would hold up
every other call of the hop's thread. The loop therefore times each turn of a call on the
wall clock, the thread's CPU clock and the process's. The caller stops taking turns and goes
back to a thread per call (``Turns.blocking``, ``handlers/pool_worker.py``) in three cases:
once the calls have spent far more time off the CPU outside :func:`wait` than on it, counting
only the time no other thread of the process ran either (while a turn waits for the GIL,
another thread runs); once most calls finish without ever pausing in :func:`wait` (they reach
the model some other way, so turns cannot overlap them); or once one turn has lasted over
``STUCK_S`` (a call waiting on another call of its own thread, which cannot run meanwhile).

Imports no TensorFlow; ``greenlet`` is imported on first use.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_any
from typing import Any

# Turns go back to threads once time off the CPU inside the calls (outside ``wait``), while
# the rest of the process was idle as well, passes both: a call blocking on something other
# than the model. A turn that waits for the GIL (or a core) is off the CPU too, but then
# another thread of the process runs meanwhile, and that time is not counted: on the 2-core
# VM a 20,000-JPEG job's first hop spent 0.22 s off the CPU against 0.02 s on it while the
# process warmed up, and counted as blocked, its calls went to threads for the rest of the
# job. The ratio leaves room for what is left of such waits; a handler sleeping 10 ms a call
# is ~100 times.
BLOCKING_RATIO = 8.0
BLOCKING_MIN_S = 0.1
# ... or once one turn has lasted this long: a call may wait on another call (a lock held
# across its model call, a barrier), which on one thread never comes. The hops that start
# after that take threads, so their calls can still meet it.
STUCK_S = 1.0
# ... or once this many calls have finished and fewer than half of them ever paused for the
# model: calls that reach it some other way (urllib or httpx to the job's own endpoint, whose
# answer another thread computes, or a signature the server does not batch) only wait in
# turn on one thread, where threads would overlap them. A handler posting with urllib to
# ``context.rest_uri``, 1,000 JPEGs: 8.2 s taking turns, 6.2 s on threads.
PAUSE_CHECK_CALLS = 32

_local = threading.local()


def run_queue_wait() -> float:
    """Seconds this thread has been runnable but waiting for a core (Linux's
    ``/proc/thread-self/schedstat``), or 0.0 where that is not known. Time off the CPU spent so
    is other processes' load, not a call blocking (~11 us a read on the dev VM: read per hop)."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


class Turns:
    """Time the calls of :func:`run_all` spent outside the model, summed over every hop so far
    (the hops of one job run on several threads at once), and whether turns should stop.

    ``clock`` (``time.perf_counter``, ~45 ns) times each turn, for ``STUCK_S``. The CPU
    clocks, this thread's ``time.thread_time`` and the process's ``time.process_time``, are
    read at a hop's start and end, and in between only once its time outside the model could
    already count as blocked: read per turn, they held the GIL for 6-9 % of a 20,000-JPEG
    job's samples (each is a system call, the process's a sum over its threads); so is
    ``queue_clock``, the thread's wait for a core (``run_queue_wait``). A hop's time outside
    the model is its wall time less its waits for the model; what of that its thread did not
    spend on the CPU is off it. A test can pass clocks it moves itself.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.thread_time,
                 process_clock: Callable[[], float] = time.process_time,
                 queue_clock: Callable[[], float] = run_queue_wait):
        self.clock, self.cpu_clock, self.process_clock = clock, cpu_clock, process_clock
        self.queue_clock = queue_clock
        # Over the hops that have ended:
        self.cpu_s = 0.0  # their threads' CPU
        self.wall_s = 0.0  # their time outside the model
        # Time off the CPU while no other thread of the process ran either, and not spent
        # waiting for a core (other processes' load: a loaded machine, the job's other processes).
        self.idle_s = 0.0
        self.calls = 0
        self.paused_calls = 0  # finished calls that paused for the model at least once
        # Why the turns stopped, in the words of the report and the log: "blocked", "did not
        # pause for the model", "had a call stuck".
        self.why: str | None = None
        self._stopped = False
        self._open: dict[int, float] = {}  # thread id -> when its turn under way began
        self._lock = threading.Lock()

    def begin(self) -> None:
        self._open[threading.get_ident()] = self.clock()

    def end(self, finished: bool, paused: bool = False) -> None:
        """A turn is over; ``finished``: its call returned, ``paused``: after pausing for the model."""
        self._open.pop(threading.get_ident(), None)
        if finished:
            with self._lock:
                self.calls += 1
                self.paused_calls += paused

    @property
    def off_cpu_s(self) -> float:
        return max(0.0, self.wall_s - self.cpu_s)

    def hop(self) -> _Hop:
        return _Hop(self)

    def hop_ended(self, hop: _Hop) -> None:
        wall, cpu, idle = hop.measure()
        with self._lock:
            self.wall_s += wall
            self.cpu_s += cpu
            self.idle_s += idle

    def blocking(self, hop: _Hop | None = None) -> bool:
        """True once the calls have been seen to block on something other than the model
        (``hop``: the caller's hop under way, whose time counts too): from then on, for good."""
        if not self._stopped:
            now = self.clock()
            if any(now - began > STUCK_S for began in list(self._open.values())):
                self.why = "had a call stuck"
            elif self.calls >= PAUSE_CHECK_CALLS and 2 * self.paused_calls < self.calls:
                self.why = "did not pause for the model"
            elif self._blocked(hop):
                self.why = "blocked"
            self._stopped = self.why is not None
        return self._stopped

    def _blocked(self, hop: _Hop | None) -> bool:
        off, idle, cpu = self.off_cpu_s, self.idle_s, self.cpu_s
        if hop is not None:
            # The hop's wall time outside the model bounds its time off the CPU: below the
            # line, no clock but the wall clock is read.
            if not self._beyond(off + hop.outside_s(), cpu):
                return False
            wall, hop_cpu, hop_idle = hop.measure()
            off, idle, cpu = off + max(0.0, wall - hop_cpu), idle + hop_idle, cpu + hop_cpu
        return self._beyond(off, cpu) and self._beyond(idle, cpu)

    @staticmethod
    def _beyond(off: float, cpu: float) -> bool:
        return off > BLOCKING_MIN_S and off > BLOCKING_RATIO * cpu


class _Hop:
    """One :func:`run_all`: its time outside the model, its thread's CPU, and what the rest of
    the process ran since it began (its CPU less this thread's), which the hop's time off the
    CPU is charged against (a turn waiting for the GIL waits while another thread runs)."""

    def __init__(self, turns: Turns):
        self.turns = turns
        self.waited_s = 0.0  # in the loop's waits for the model
        self.wall0, self.cpu0, self.process0 = turns.clock(), turns.cpu_clock(), turns.process_clock()
        self.queued0 = turns.queue_clock()

    def outside_s(self) -> float:
        return self.turns.clock() - self.wall0 - self.waited_s

    def measure(self) -> tuple[float, float, float]:
        """(time outside the model, this thread's CPU, time off the CPU with the process idle
        and not waiting for a core) so far."""
        turns = self.turns
        wall, cpu, process = self.outside_s(), turns.cpu_clock() - self.cpu0, turns.process_clock()
        others = max(0.0, process - self.process0 - cpu)
        queued = max(0.0, turns.queue_clock() - self.queued0)
        return wall, cpu, max(0.0, wall - cpu - others - queued)


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


class _Gather:
    """What a call of :func:`run_all` hands its loop in :func:`gathered`."""

    __slots__ = ("key", "payload", "flush")

    def __init__(self, key: Hashable, payload: Any, flush: Callable[[list[Any]], Future]):
        self.key, self.payload, self.flush = key, payload, flush


def gathered(key: Hashable, payload: Any, flush: Callable[[list[Any]], Future]) -> Any:
    """``flush([payload]).result()[0]``, where a call of :func:`run_all` instead pauses and its
    loop, once every call under way has paused, calls ``flush`` once for all the payloads its
    calls gathered under one ``key`` (in the order they came), then resumes each call with its
    item of the list the future gives, or with the future's exception.

    A hop's calls to the model become one request to the batcher instead of one each: a
    one-row request cost 18-19 us of the hop thread's CPU, a row of a 64-row request 1.4-1.7
    (``benchmarks/transform/profile/handler-session.md``, ``handler-calls.md``). ``flush`` runs
    on the hop's thread between turns; an exception it raises is each gathered call's, and so
    is a list of results that does not have one item per payload."""
    loop = getattr(_local, "loop", None)
    if loop is None or loop.getcurrent() not in loop.tasks:
        return flush([payload]).result()[0]
    ok, value = loop.hub.switch(_Gather(key, payload, flush))
    if ok:
        return value
    raise value


def _flush_all(gathering: dict[Hashable, tuple[Callable, list]], groups: dict[Future, list],
               ready: deque) -> None:
    """Each key's payloads to its ``flush``: the future it gives joins ``groups`` (its calls
    resume once it is done); a ``flush`` that raises resumes its calls with the exception."""
    for flush, members in gathering.values():
        try:
            future = flush([payload for _, _, payload in members])
        except BaseException as exc:  # noqa: BLE001 - each gathered call raises it
            ready.extend((task, index, (False, exc)) for task, index, _ in members)
            continue
        groups.setdefault(future, []).extend((task, index) for task, index, _ in members)
    gathering.clear()


def _resume_group(future: Future, members: list, ready: deque) -> None:
    try:
        results = future.result()
        if len(results) != len(members):
            raise RuntimeError(f"a flush of {len(members)} gathered calls gave {len(results)} results")
    except BaseException as exc:  # noqa: BLE001 - each gathered call raises it
        ready.extend((task, index, (False, exc)) for task, index in members)
        return
    ready.extend((task, index, (True, result)) for (task, index), result in zip(members, results))


def run_all(fn: Callable[[Any], Any], items: Sequence[Any], limit: int, turns: Turns) -> list[Any]:
    """``[fn(item) for item in items]``, at most ``limit`` calls under way at once, each
    pausing in :func:`wait` or :func:`gathered`. Time spent in the calls' turns is added to
    ``turns``.

    Once ``turns.blocking()``, no further call starts here: the result list then ends early,
    and the caller runs the rest its own way. ``fn`` is expected to catch its own errors; one
    it lets through ends the hop (the calls under way are dropped) and is raised here.
    """
    from greenlet import getcurrent, greenlet

    if getattr(_local, "loop", None) is not None:
        raise RuntimeError("run_all inside run_all on one thread")
    results: list[Any] = [None] * len(items)
    loop = _local.loop = _Loop(getcurrent)
    # (greenlet, index, what to resume it with: None for a new call or one back from ``wait``,
    # else (ok, value) for one back from ``gathered``) to switch into
    ready: deque[tuple[Any, int, Any]] = deque()
    waiting: dict[Future, list[tuple[Any, int]]] = {}
    gathering: dict[Hashable, tuple[Callable, list]] = {}  # key -> (flush, [(greenlet, index, payload)])
    groups: dict[Future, list[tuple[Any, int]]] = {}  # a flush's future -> its calls, in order
    paused: set[int] = set()  # indexes of the calls that have paused for the model
    started = 0
    stop = False
    hop = turns.hop()
    try:
        while True:
            if not ready and not stop and started < len(items) and len(loop.tasks) < limit:
                task = greenlet(fn)
                loop.tasks.add(task)
                ready.append((task, started, None))
                started += 1
            if not ready:
                if gathering:
                    _flush_all(gathering, groups, ready)
                    continue
                if not waiting and not groups:
                    break
                waited = turns.clock()
                done, _ = wait_any([*waiting, *groups], return_when=FIRST_COMPLETED)
                hop.waited_s += turns.clock() - waited
                for future in done:
                    if future in groups:
                        _resume_group(future, groups.pop(future), ready)
                    if future in waiting:
                        ready.extend((task, index, None) for task, index in waiting.pop(future))
                continue
            task, index, resume = ready.popleft()
            turns.begin()
            try:
                if not task:
                    out = task.switch(items[index])
                else:
                    out = task.switch() if resume is None else task.switch(resume)
            finally:
                finished = task.dead
                turns.end(finished, index in paused)
            if finished:
                results[index] = out
                loop.tasks.discard(task)
                stop = stop or turns.blocking(hop)
            else:
                paused.add(index)
                if type(out) is _Gather:
                    gathering.setdefault(out.key, (out.flush, []))[1].append((task, index, out.payload))
                else:
                    waiting.setdefault(out, []).append((task, index))
    finally:
        _local.loop = None
        turns.hop_ended(hop)
        for task in loop.tasks:
            task.throw()  # GreenletExit: a call dropped with its hop ends here, not later
    return results[:started] if stop else results
