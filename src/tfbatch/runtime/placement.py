"""Which GPUs each instance of a job sees, decided before TensorFlow is imported.

TensorFlow reads ``CUDA_VISIBLE_DEVICES`` once, when it first initialises CUDA, and by
default grabs nearly all memory of every GPU it sees. So instances must be given disjoint
device lists in their environment before they start, and memory growth must be switched on
before the model loads. The functions here are pure (no TensorFlow, no CUDA), so the
partitioning can be tested anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tfbatch.errors import ConfigError


def visible_gpus(env: Mapping[str, str], detected: int) -> list[str]:
    """The GPU ids this process may hand out: ``CUDA_VISIBLE_DEVICES`` if set, else 0..detected-1.

    An empty or ``-1`` value means no GPU, as CUDA itself reads it.
    """
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return [str(i) for i in range(max(0, detected))]
    ids = [part.strip() for part in value.split(",") if part.strip()]
    if not ids or ids[0] == "-1":
        return []
    # CUDA stops at the first invalid entry; "-1" anywhere hides the rest.
    return ids[: ids.index("-1")] if "-1" in ids else ids


def partition_gpus(gpus: list[str], instance_count: int, gpus_per_instance: float | None) -> list[list[str]]:
    """One device list per instance.

    ``gpus_per_instance`` None spreads the GPUs evenly (each instance gets ``len // count``;
    with fewer GPUs than instances, instances share them round-robin, which memory growth
    makes workable). A whole number k gives each instance k GPUs of its own and refuses a
    job that needs more than there are. 0 means CPU only. Fractions are for Ray, which
    shares a GPU between actors itself; here they round up to one shared device.
    """
    if instance_count < 1:
        raise ConfigError(f"instance_count must be >= 1, got {instance_count}")
    if gpus_per_instance is not None and gpus_per_instance < 0:
        raise ConfigError(f"--gpus-per-instance must be >= 0, got {gpus_per_instance:g}")
    if gpus_per_instance == 0 or not gpus:
        if gpus_per_instance and not gpus:
            raise ConfigError(
                f"--gpus-per-instance {gpus_per_instance:g} asks for GPUs but none is visible "
                "(CUDA_VISIBLE_DEVICES is empty or no GPU was found)"
            )
        return [[] for _ in range(instance_count)]
    if gpus_per_instance is None:
        if len(gpus) < instance_count:
            return [[gpus[i % len(gpus)]] for i in range(instance_count)]
        share = len(gpus) // instance_count
        return [gpus[i * share:(i + 1) * share] for i in range(instance_count)]
    if gpus_per_instance < 1:
        return [[gpus[i % len(gpus)]] for i in range(instance_count)]
    k = int(math.ceil(gpus_per_instance))
    if k != gpus_per_instance:
        raise ConfigError(f"--gpus-per-instance above 1 must be a whole number, got {gpus_per_instance:g}")
    if k * instance_count > len(gpus):
        raise ConfigError(
            f"{instance_count} instance(s) x {k} GPU(s) each needs {k * instance_count} GPUs; "
            f"{len(gpus)} visible ({','.join(gpus)})"
        )
    return [gpus[i * k:(i + 1) * k] for i in range(instance_count)]


def instance_env(devices: list[str]) -> dict[str, str]:
    """The environment entries that confine one instance process to ``devices``."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(devices) if devices else "-1"}


def replica_devices(visible_in_process: int) -> list[str]:
    """TensorFlow device names for one model replica per GPU the process sees (CPU if none)."""
    if visible_in_process <= 0:
        return ["/CPU:0"]
    return [f"/GPU:{i}" for i in range(visible_in_process)]


def count_nvidia_gpus(dev_root: str = "/dev") -> int:
    """GPUs present, without importing TensorFlow or CUDA: the ``/dev/nvidiaN`` nodes."""
    import os
    import re

    try:
        names = os.listdir(dev_root)
    except OSError:
        return 0
    return sum(1 for n in names if re.fullmatch(r"nvidia\d+", n))


def usable_cores(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """Cores this process may run on: its CPU affinity, lowered to a cgroup v2 CPU quota
    (``cpu.max``, a container's ``--cpus``) where one is set; at least 1."""
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        with open(os.path.join(cgroup_root, "cpu.max")) as f:
            quota, period = f.read().split()[:2]
        if quota != "max" and int(period) > 0:
            cores = min(cores, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return max(1, cores)
