"""Pooled (warm) instance actors: a loaded model kept on the cluster between jobs.

A Ray job pays a start-up the local engine does not: a worker process for each actor, and
in it TensorFlow's import and the model load, all after the job started (several seconds
on a small machine, most of a short job's time). With ``RayOptions.keep_warm_s`` > 0
(``TFBATCH_RAY_KEEP_WARM_S``) each instance actor is a *named, detached* actor that outlives
its job: the next job with the same model and settings finds it by name, leases it and
starts at once.

What makes two jobs "the same" (``pool_key``): every spec field except where the job reads
and writes and how it resumes (``JOB_FIELDS``), the model artifact's identity (its files'
sizes and modification times, or its S3 ETag: a re-exported model at the same path is a new
key), the forwarded environment, the actor's resources, the instance index and count, and
the tfbatch version. A job whose key cannot be computed (the artifact cannot be inspected)
runs on fresh actors as before.

Lifetime and guarantees:

- one job at a time: ``lease`` is refused while another job holds the actor (or its run is
  not over); the driver then starts a fresh, unpooled actor for that instance;
- a pooled actor exits for good after ``keep_warm_s`` idle, and at once when the driver
  that leased it is gone (its Ray job is dead): a killed job leaves nothing running its
  objects, as a local worker exits with its parent;
- Ray restarts a pooled actor that dies mid-job as any instance actor (``max_restarts``),
  and the driver leases the new process and feeds it the objects the dead one held;
- a run that failed marks the actor unusable; the driver kills it rather than release it;
- while idle, a pooled actor still holds its resources (``cpus_per_instance``, GPUs) on
  the cluster: that is what keeping it warm means. A tfbatch job that finds too few free
  resources for its actors first evicts idle pooled actors of other keys (``make_room``),
  so a pool never makes another tfbatch job wait; other Ray work on the cluster may wait
  up to ``keep_warm_s``. ``drop_warm_actors()`` ends them all.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from tfbatch.storage import is_local
from tfbatch.transform.spec import TransformSpec

NAMESPACE = "tfbatch"
PREFIX = "tfbatch-warm-"
# Where a job reads and writes, and how it resumes and stops: a pooled actor rebinds to these
# per job (InstanceRunner.rebind). Every other field is part of the pool key.
JOB_FIELDS = frozenset({
    "input", "manifest", "output", "resume", "retry_failed", "max_error_rate", "error_rate_after",
    "wait_lock", "follow_symlinks", "engine",
})


def artifact_identity(uri: str) -> list | None:
    """What changes when the model at ``uri`` changes: (name, size, mtime) of its files, or
    its ETag/size/modified time on an object store. None when it cannot be read."""
    try:
        if is_local(uri):
            path = uri.removeprefix("file://")
            if os.path.isdir(path):
                found = []
                for folder, _dirs, files in os.walk(path):
                    for name in files:
                        st = os.stat(os.path.join(folder, name))
                        found.append([os.path.relpath(os.path.join(folder, name), path), st.st_size, st.st_mtime_ns])
                return [os.path.abspath(path), sorted(found)]
            st = os.stat(path)
            return [os.path.abspath(path), st.st_size, st.st_mtime_ns]
        import fsspec

        fs, path = fsspec.core.url_to_fs(uri)
        info = fs.info(path)
        return [uri, str(info.get("ETag") or info.get("etag") or ""), info.get("size"),
                str(info.get("LastModified") or info.get("mtime") or "")]
    except Exception:  # noqa: BLE001 - no key: the job runs on fresh actors
        return None


def pool_key(spec: TransformSpec, resources: dict[str, Any], env: dict[str, str]) -> str | None:
    """The key pooled actors of this job share with every job that may reuse them, or None."""
    identity = artifact_identity(spec.model)
    if identity is None:
        return None
    from tfbatch import __version__

    settings = {k: v for k, v in spec.model_dump(mode="json").items() if k not in JOB_FIELDS}
    blob = json.dumps({"settings": settings, "artifact": identity, "resources": resources, "env": env,
                       "version": __version__}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def actor_name(key: str, instance: int, count: int) -> str:
    return f"{PREFIX}{key}-{instance}of{count}"


def _pooled(exclude_key: str | None = None) -> list[str]:
    import ray

    names = []
    for entry in ray.util.list_named_actors(all_namespaces=True):
        name = entry.get("name", "")
        if entry.get("namespace") == NAMESPACE and name.startswith(PREFIX):
            if exclude_key is None or not name.startswith(PREFIX + exclude_key + "-"):
                names.append(name)
    return names


def make_room(cpus: float, gpus: float, keep_key: str | None = None) -> int:
    """Evict idle pooled actors of other keys while the cluster has less free than ``cpus``/``gpus``.

    An idle pooled actor holds its CPUs and GPUs; a job that needs them (pooled or not) must
    not wait for the pool's idle timeout. Busy ones are left alone. Returns how many were asked."""
    import ray

    free = ray.available_resources()
    if free.get("CPU", 0.0) >= cpus and free.get("GPU", 0.0) >= gpus:
        return 0
    asked = []
    for name in _pooled(exclude_key=keep_key):
        try:
            asked.append(ray.get_actor(name, namespace=NAMESPACE).evict.remote())
        except Exception:  # noqa: BLE001 - gone meanwhile
            pass
    evicted = 0
    for ref in asked:
        try:
            evicted += bool(ray.get(ref, timeout=30))
        except Exception:  # noqa: BLE001 - dead or restarting: nothing to evict
            pass
    return evicted


def drop_warm_actors() -> int:
    """Kill every pooled instance actor on the connected cluster (idle or not); how many."""
    import ray

    killed = 0
    for name in _pooled():
        try:
            ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
            killed += 1
        except Exception:  # noqa: BLE001 - gone meanwhile
            pass
    return killed
