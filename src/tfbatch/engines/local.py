"""The local engine: a job's instances as worker processes on this machine.

One instance runs in the calling process (no start-up cost beyond loading the model).
``instance_count`` N > 1 starts N processes with the *spawn* context — TensorFlow's
threads do not survive ``fork`` — and each loads the model once and runs its partition.
Workers send typed, picklable messages back over one queue: an ``ObjectResult`` per object
and an ``InstanceSummary`` at the end (a failure to even start becomes a summary with
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
from dataclasses import dataclass
from typing import ClassVar

from tfbatch.runtime.placement import count_nvidia_gpus, instance_env, partition_gpus, visible_gpus
from tfbatch.transform.engine import Emit
from tfbatch.transform.report import InstanceSummary, ObjectResult
from tfbatch.transform.spec import TransformSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalEngine:
    """Implements ``tfbatch.transform.Engine``; the spec's ``instance_count`` is all it needs."""

    name: ClassVar[str] = "local"

    def run(self, spec: TransformSpec, emit: Emit, stop=None) -> list[InstanceSummary]:
        devices = gpu_plan(spec)
        if spec.instance_count == 1:
            if spec.gpus_per_instance is not None and "tensorflow" not in sys.modules:
                os.environ.update(instance_env(devices[0]))
            return [_run_instance(spec, 0, 1, emit, stop)]
        return self._run_processes(spec, emit, devices, stop)

    def _run_processes(self, spec: TransformSpec, emit: Emit, devices: list[list[str]], stop=None) -> list[InstanceSummary]:
        ctx = mp.get_context("spawn")
        messages = ctx.Queue()
        shared_stop = ctx.Event()
        procs = [
            ctx.Process(
                target=_worker_main,
                args=(spec.model_dump(), i, spec.instance_count, messages, os.getpid(), instance_env(devices[i]),
                      shared_stop),
                name=f"tfbatch-instance-{i}",
                daemon=True,
            )
            for i in range(spec.instance_count)
        ]
        for p in procs:
            p.start()
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
                if isinstance(message, ObjectResult):
                    emit(message)
                elif isinstance(message, InstanceSummary):
                    summaries[message.instance] = message
        finally:
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


def _run_instance(spec: TransformSpec, instance: int, count: int, emit: Emit, stop=None) -> InstanceSummary:
    from tfbatch.transform.instance import InstanceRunner

    runner = InstanceRunner(spec, instance, count)
    try:
        runner.open()
    except Exception as exc:
        runner.close()
        return InstanceSummary(instance=instance, fatal=f"{type(exc).__name__}: {exc}")
    try:
        return runner.run(emit, stop=stop)
    finally:
        runner.close()


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(3)


def gpu_plan(spec: TransformSpec) -> list[list[str]]:
    """Each instance's GPUs: disjoint CUDA_VISIBLE_DEVICES lists (runtime/placement.py)."""
    return partition_gpus(visible_gpus(os.environ, count_nvidia_gpus()), spec.instance_count, spec.gpus_per_instance)


def _worker_main(spec_fields: dict, instance: int, count: int, messages, parent_pid: int,
                 env: dict[str, str] | None = None, stop=None) -> None:
    # Spawned, so TensorFlow is not imported yet: it reads CUDA_VISIBLE_DEVICES on first use.
    os.environ.update(env or {})
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="parent-watch").start()
    try:
        spec = TransformSpec(**spec_fields)
        summary = _run_instance(spec, instance, count, messages.put, stop)
    except BaseException as exc:  # noqa: BLE001 - reported as the instance's failure
        summary = InstanceSummary(instance=instance, fatal=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    messages.put(summary)
    messages.close()
    messages.join_thread()
