"""What runs inside the Ray cluster: the instance actor and the reader task.

``InstanceActor`` hosts one ``InstanceRunner`` — the model is loaded once per actor (and
again only if Ray restarts the actor after its process died). The driver hands it a chunk
of objects per call (``process_chunk``), a couple of chunks at a time: every object of
every chunk in hand goes to one pool of ``concurrency`` object threads, so the next chunk's
objects start as the current one's finish (no drain between calls), the batcher coalesces
requests from several objects into one model batch as the local engine's object threads
do, and a call's cost (a round trip, a task record in Ray) is paid once per chunk.

``read_objects`` is the CPU/IO-side stage that may run on any node: it fetches a chunk's
bytes so the model actor does not spend its own host's CPUs and network on them.
The bytes travel through Ray's object store and are handed to the unchanged per-object
pipeline as in-process ``memory://`` objects (fsspec's memory filesystem is a store
local to the actor process), so reading, gunzip and splitting code stays in one place; an
object the reader could not fetch is read by the actor itself, so its failure is reported
exactly as the local engine reports it.

This module imports ray at import time; ``tfbatch.engines.ray`` imports it lazily.
"""

from __future__ import annotations

import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import fsspec
import ray

from tfbatch.storage import ObjectRef, read_bytes
from tfbatch.transform.report import ObjectResult
from tfbatch.transform.spec import TransformSpec

# Inputs handed over from reader tasks live here, in the actor process's memory filesystem.
STAGING = "memory://tfbatch-ray-staging"


# (uri, key, size, had an error file): one object of a chunk, as the driver sends it.
Item = tuple[str, str, "int | None", bool]


@ray.remote
def read_objects(uris: list[str]) -> list[bytes | None]:
    """Each object's bytes, or None where reading failed (the actor then reads it and reports why)."""
    found: list[bytes | None] = []
    for uri in uris:
        try:
            found.append(read_bytes(uri))
        except Exception:  # noqa: BLE001 - the actor's own read reports this object's failure
            found.append(None)
    return found


class InstanceActor:
    """One instance of the job. ``process_chunk`` never raises: failures are results."""

    def __init__(self, spec_fields: dict, instance: int, instance_count: int):
        from tfbatch.transform.instance import InstanceRunner

        self.instance = instance
        self.fatal: str | None = None
        spec = TransformSpec(**spec_fields)
        self.runner = InstanceRunner(spec, instance, instance_count)
        self._lock = threading.Lock()
        # One pool for all chunks in hand: at most ``concurrency`` objects run, as in a local instance.
        self.objects = ThreadPoolExecutor(max(1, spec.concurrency), thread_name_prefix=f"object-{instance}")
        self.received = {"calls": 0, "objects": 0}
        try:
            self.runner.open()
        except Exception as exc:  # reported once by ready(); the engine skips this partition
            self.runner.close()
            self.fatal = f"{type(exc).__name__}: {exc}"

    def ready(self) -> str | None:
        """None once the model is loaded, else why it could not be."""
        return self.fatal

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def process_chunk(self, items: list[Item], data: list[bytes | None] | None = None
                      ) -> list[ObjectResult] | None:
        """Every object of ``items`` once, its result at the same position; never raises."""
        if self.fatal is not None:
            return None  # the engine learns why from ready() and skips this partition
        with self._lock:
            self.received["calls"] += 1
            self.received["objects"] += len(items)
        blobs = data if data is not None else [None] * len(items)
        running = [self.objects.submit(self._one, *item, blob) for item, blob in zip(items, blobs)]
        results = [r.result() for r in running]
        # The driver counts the chunk's objects finished once this call returns, so their ledger
        # entries are committed first: an actor killed after returning must not take queued
        # entries with it. Chunks that finish together share one commit.
        self.runner.ledger.flush()
        return results

    def calls_received(self) -> dict[str, int]:
        """Chunk calls and objects this actor process was handed (since its last restart)."""
        with self._lock:
            return dict(self.received)

    def _one(self, uri: str, key: str, size: int | None, had_error_file: bool,
             data: bytes | None) -> ObjectResult:
        if data is None:
            result = self.runner.process(ObjectRef(uri, key, size), had_error_file=had_error_file)
        else:
            # Pre-read bytes (a reader task fetched them): same pipeline, an in-process source.
            staged = f"{STAGING}/{uuid.uuid4().hex}"
            memory = fsspec.filesystem("memory")
            memory.pipe_file(staged, data)
            try:
                result = self.runner.process(ObjectRef(staged, key, len(data)), had_error_file=had_error_file)
            finally:
                memory.rm_file(staged)
        return result

    def flush_ledger(self) -> int:
        return self.runner.ledger.flush()

    def batch_stats(self) -> dict:
        """The batcher's figures per signature, as a local instance on the per-object path reports them."""
        stack = self.runner.stack
        if stack is None:
            return {}
        pool = {} if self.runner.pool is None else self.runner.pool.stats
        return {name: {**stats, "lane": "per-object", "precision": self.runner.spec.precision, **pool}
                for name, stats in stack.model_server.batcher_stats().items()}

    def close(self) -> None:
        self.objects.shutdown(wait=True)
        with self._lock:
            self.runner.close()


def actor_class():
    return ray.remote(InstanceActor)
