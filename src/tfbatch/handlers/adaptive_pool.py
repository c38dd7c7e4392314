"""A script's hooks in this process first, in worker processes once they prove heavy.

On a machine with few cores per instance the hooks start in this process (inline_pool.py):
for cheap hooks (base64-wrap a JPEG) two pickled hops per record cost more than they give back.
Heavy hooks are another matter: a script that decodes and resizes each image with PIL and
sends 12,288 JSON floats spends ~10 ms of CPU per record under this process's GIL, so the job
runs on one core however many it has (the float-input JPEG job with its SageMaker script,
2,000 images on 2 cores: 23.8 s in process, 14.9 s with two worker processes;
benchmarks/transform/profile/adaptive-hooks.md).

``AdaptivePool`` measures, over windows of at least ``WINDOW_S`` seconds, the share of this
process's CPU the hook threads spent in steps (the work a worker process would take away:
the hooks and the request decode and response encode around them). Once a window's share
reaches ``MOVE_SHARE``, it starts a ``HandlerPool`` (two processes, growing as that pool does)
and, when their start is over, sends every later input step to them; output steps go back to
the pool that ran the record's input step. It moves once and never back; if the processes
cannot start, the hooks stay in this process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from tfbatch.handlers import inline_pool

log = logging.getLogger(__name__)

# A window is at least this long (and holds some hops), so a slow first hop (the model's
# first call traces it) does not decide alone. 0.5 s, not the 1 s it was: every window the
# hooks stay in process before the move runs at about a third of the rate after it (the
# SingleRecord CSV job through a script: 1.7 -> 1.1 s in process, 5.9-6.1 -> 5.8-5.9 s whole;
# the scripted JPEG job's cheap hooks still read 0.22-0.24 and stay;
# benchmarks/transform/profile/runs.md).
WINDOW_S = 0.5
MIN_WINDOW_HOPS = 4
# The hooks' share of this process's CPU from which worker processes take over. On 2 cores
# the scripted JPEG job (cheap hooks) measured 0.2-0.3 and runs best in process; the PIL +
# JSON-floats script measured ~0.9 (benchmarks/transform/profile/adaptive-hooks.md).
MOVE_SHARE = 0.4


class AdaptivePool:
    """What ``PooledService`` needs of a pool (``size``, ``max_size``, ``submit``, ``set_models``), first
    from an ``InlinePool``, then from the ``HandlerPool`` ``workers()`` starts, if the hooks
    turn out to be most of this process's CPU. ``clock`` and ``process_cpu`` are the wall
    and CPU clocks the windows are read with (a test's fake ones)."""

    def __init__(self, inline: inline_pool.InlinePool, workers: Callable[[], Any], *,
                 clock: Callable[[], float] = time.monotonic,
                 process_cpu: Callable[[], float] = time.process_time,
                 move_share: float | None = None, window_s: float = WINDOW_S, max_size: int = 1):
        self.inline = inline
        self.max_size = max(1, max_size)  # the most processes ``workers()``'s pool may grow to
        self._workers_factory = workers
        self.clock = clock
        self.process_cpu = process_cpu
        self.move_share = MOVE_SHARE if move_share is None else move_share
        self.window_s = window_s
        self.workers = None  # the HandlerPool, once started
        self.moved = False  # input steps go to the workers
        self.moved_after_s: float | None = None
        self.last_share: float | None = None
        self.reason = inline.reason
        self._models: dict[str, Any] | None = None
        self._began = clock()
        self._window: tuple[float, float, float, int] | None = None  # (wall, process CPU, hook CPU, hops)
        self._lock = threading.Lock()
        self._closed = False

    @property
    def size(self) -> int:
        return self.workers.size if self.moved else 1

    def set_models(self, models: dict[str, Any]) -> None:
        self._models = models
        self.inline.set_models(models)
        if self.workers is not None:
            self.workers.set_models(models)

    def cpu(self) -> float | None:
        """This process's CPU seconds while the hooks run in it; None once workers have them
        (the batch-size probe then compares wall time, as it does for any worker pool)."""
        return None if self.moved else self.process_cpu()

    def submit(self, step: str, items: list, where: tuple | None = None) -> Future:
        if step != "input":
            # To where the record's input step ran: this process, or a worker process.
            in_process = where == inline_pool.WHERE or self.workers is None
            return (self.inline if in_process else self.workers).submit(step, items, where)
        with self._lock:
            if not self.moved:
                self._check()
            pool = self.workers if self.moved else self.inline
        return pool.submit(step, items)

    def _check(self) -> None:
        """Under the lock, on an input step while the hooks are in process."""
        if self.workers is not None:
            started = self.workers.started()
            if started is None:
                return  # still starting: the hooks go on here meanwhile
            if started == 0:
                log.warning("handler worker processes could not start; the script's hooks stay in this process")
                self.workers.close()
                self.workers = None
                self._window = (float("inf"), 0.0, 0.0, 0)  # never again
                return
            self.moved = True
            self.moved_after_s = self.clock() - self._began
            log.info("the script's hooks took %.0f%% of this process's CPU; they run in %d worker processes now",
                     100 * (self.last_share or 0), started)
            return
        now = self.clock()
        if self._window is not None and now - self._window[0] < self.window_s:
            return  # most input steps: the window is still open
        cpu = self.process_cpu()
        hook_cpu, hops = self.inline.spent()
        if self._window is None:
            self._window = (now, cpu, hook_cpu, hops)
            return
        since, cpu_then, hook_then, hops_then = self._window
        if hops - hops_then < MIN_WINDOW_HOPS:
            return
        self._window = (now, cpu, hook_cpu, hops)
        if cpu <= cpu_then:
            return
        self.last_share = (hook_cpu - hook_then) / (cpu - cpu_then)
        if self.last_share >= self.move_share and not self._closed:
            self.workers = self._workers_factory()
            if self._models is not None:
                self.workers.set_models(self._models)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers = self.workers
        self.inline.close()
        if workers is not None:
            workers.close()

    @property
    def stats(self) -> dict[str, Any]:
        inline = self.inline.stats
        if not self.moved:
            return {**inline, "hook_cpu_share": _round(self.last_share)}
        workers = self.workers.stats
        return {**workers, "hops": workers["hops"] + inline["hops"], "hook_threads": inline["hook_threads"],
                "hooks": f"in-process for {self.moved_after_s:.1f} s ({self.reason}), then in worker processes "
                         f"(the hooks took {100 * self.last_share:.0f}% of this process's CPU)",
                "hook_cpu_share": _round(self.last_share)}


def _round(share: float | None) -> float | None:
    return None if share is None else round(share, 3)
