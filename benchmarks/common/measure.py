"""Measuring one contender: wall time, output timing, peak memory of a process tree.

Every contender runs as fresh subprocesses, so each pays its own Python/TensorFlow start-up
and none inherits another's warm state. Throughput is read from the outputs themselves:
each contender writes one ``<name>.out`` per image, and the files' modification times give
a steady-state rate that is measured the same way for all of them, whatever their internals.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of a process and its live descendants, read now."""
    total = 0.0
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


class TreeMonitor:
    """Polls a process tree: peak summed RSS, and CPU seconds over time.

    Shared pages (e.g. the TensorFlow library mapped by two processes) count once per
    process, as ``ps`` reports them: an upper bound, the same way for every contender.
    The CPU samples let :func:`cpu_between` charge a time window (the steady state) with
    the CPU it used, leaving start-up out.
    """

    def __init__(self, interval_s: float = 0.05):
        self.interval_s = interval_s
        self.pids: list[int] = []
        self.peak_bytes = 0
        self.cpu_samples: list[tuple[float, float]] = []  # (time.time(), CPU seconds so far)
        self._cpu_gone = 0.0  # CPU of descendants that exited, last seen alive
        self._last_cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="tree-monitor", daemon=True)

    def watch(self, pid: int) -> None:
        self.pids.append(pid)

    def __enter__(self) -> "TreeMonitor":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> tuple[int, float]:
        rss, seen = 0, {}
        for pid in list(self.pids):
            try:
                root = psutil.Process(pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
            for proc in procs:
                try:
                    with proc.oneshot():
                        rss += proc.memory_info().rss
                        times = proc.cpu_times()
                        seen[proc.pid] = times.user + times.system
                except psutil.Error:
                    pass
        for pid, cpu in self._last_cpu.items():
            if pid not in seen:
                self._cpu_gone += cpu
        self._last_cpu = seen
        return rss, self._cpu_gone + sum(seen.values())

    def _poll(self) -> None:
        while not self._stop.is_set():
            rss, cpu = self.sample()
            self.peak_bytes = max(self.peak_bytes, rss)
            self.cpu_samples.append((time.time(), cpu))
            self._stop.wait(self.interval_s)

    def cpu_at(self, t: float) -> float | None:
        """CPU seconds used by ``t``, interpolated between samples."""
        samples = self.cpu_samples
        if not samples or t < samples[0][0] or t > samples[-1][0]:
            return None
        for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
            if t0 <= t <= t1:
                return c0 if t1 == t0 else c0 + (c1 - c0) * (t - t0) / (t1 - t0)
        return samples[-1][1]


@dataclass
class Timing:
    outputs: int
    first_output: float | None  # time.time() of the first/last output written
    last_output: float | None
    steady_images_per_s: float | None
    steady_start: float | None = None  # the window the steady rate was measured over
    steady_images: int = 0


def output_timing(output_dir: str | Path, *, skip_fraction: float = 0.1) -> Timing:
    """Rate over the outputs after the first ``skip_fraction`` (warm-up and first batch)."""
    times = sorted(p.stat().st_mtime for p in Path(output_dir).rglob("*.out"))
    if not times:
        return Timing(0, None, None, None)
    # Count the images finished strictly after the start mark: batch-at-a-time writers put
    # a whole batch at one instant, which must not be credited to the interval.
    t0 = times[min(int(len(times) * skip_fraction), len(times) - 1)]
    done_after = sum(1 for t in times if t > t0)
    span = times[-1] - t0
    rate = done_after / span if span > 0 and done_after else None
    return Timing(len(times), times[0], times[-1], rate, t0, done_after)


@dataclass
class Run:
    """One contender on one model."""

    contender: str
    model: str
    images: int
    ok: bool
    outputs: int = 0
    wall_s: float = 0.0
    startup_s: float | None = None  # launch -> first output written
    shutdown_s: float | None = None  # last output written -> last process exited
    steady_images_per_s: float | None = None
    end_to_end_images_per_s: float | None = None
    peak_rss_mb: float = 0.0
    cpu_s: float = 0.0  # user + system CPU seconds of every process, start-up included
    command: list[str] = field(default_factory=list)
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def finish(run: Run, launched: float, ended: float, output_dir: Path, rss: TreeMonitor) -> Run:
    timing = output_timing(output_dir)
    run.outputs = timing.outputs
    run.wall_s = ended - launched
    run.startup_s = None if timing.first_output is None else timing.first_output - launched
    run.shutdown_s = None if timing.last_output is None else ended - timing.last_output
    run.steady_images_per_s = timing.steady_images_per_s
    run.end_to_end_images_per_s = timing.outputs / run.wall_s if run.wall_s > 0 else None
    run.peak_rss_mb = rss.peak_bytes / 2**20
    run.extra["cpu_ms_per_image"] = 1000 * run.cpu_s / timing.outputs if timing.outputs else None
    if timing.steady_images and timing.steady_start is not None and timing.last_output is not None:
        c0, c1 = rss.cpu_at(timing.steady_start), rss.cpu_at(timing.last_output)
        if c0 is not None and c1 is not None:
            run.extra["steady_cpu_ms_per_image"] = 1000 * (c1 - c0) / timing.steady_images
    run.ok = run.ok and timing.outputs == run.images
    if timing.outputs != run.images and run.error is None:
        run.error = f"expected {run.images} outputs, found {timing.outputs}"
    return run


def wait_logged(proc: subprocess.Popen, log: Path, timeout_s: float) -> tuple[str | None, float]:
    """Wait for ``proc``; return (error or None, CPU seconds it and its reaped children used).

    CPU seconds come from ``wait4``'s rusage: unlike wall time they barely move when other
    work shares the cores, so they compare contenders fairly on a busy machine.
    """
    if proc.returncode is not None:  # already reaped (poll() saw it exit): no rusage left
        return (None if proc.returncode == 0 else f"exit code {proc.returncode}"), 0.0
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            cpu = usage.ru_utime + usage.ru_stime
            break
        if time.monotonic() > deadline:
            proc.kill()
            _, _, usage = os.wait4(proc.pid, 0)
            proc.returncode = -9
            return f"timed out after {timeout_s:.0f}s", usage.ru_utime + usage.ru_stime
        time.sleep(0.02)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
        return f"exit code {proc.returncode}: " + " | ".join(tail), cpu
    return None, cpu


def read_predictions(output_dir: str | Path) -> dict[str, tuple[int, list[float]]]:
    """``{file name: (class, probabilities)}`` from TFS row-format outputs."""
    result = {}
    for path in Path(output_dir).rglob("*.out"):
        row = json.loads(path.read_bytes())["predictions"][0]
        result[path.name] = (int(row["classes"]), row["probabilities"])
    return result


def agreement(reference: dict, other: dict) -> dict[str, Any]:
    """How closely two contenders' predictions match on the files both wrote."""
    import numpy as np

    common = sorted(set(reference) & set(other))
    if not common:
        return {"files": 0}
    same_class = sum(reference[k][0] == other[k][0] for k in common)
    diff = max(float(np.max(np.abs(np.asarray(reference[k][1]) - np.asarray(other[k][1])))) for k in common)
    return {"files": len(common), "same_class": same_class, "max_abs_prob_diff": diff}


def now() -> float:
    return time.time()
