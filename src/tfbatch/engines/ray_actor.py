"""What runs inside the Ray cluster: the instance actor and the reader task.

``InstanceActor`` hosts one ``InstanceRunner`` — the model is loaded once per actor (and
again only if Ray restarts the actor after its process died). It is a threaded actor: up
to ``max_concurrency`` ``process`` calls run at once, which is what lets the model
server's batcher coalesce requests from several objects into one model batch, exactly as
the local engine's object thread pool does.

``read_object`` is the CPU/IO-side stage that may run on any node: it fetches an input
object's bytes so the model actor does not spend its own host's CPUs and network on it.
The bytes travel through Ray's object store and are handed to the unchanged per-object
pipeline as an in-process ``memory://`` object (fsspec's memory filesystem is a store
local to the actor process), so reading, gunzip and splitting code stays in one place.

This module imports ray at import time; ``tfbatch.engines.ray`` imports it lazily.
"""

from __future__ import annotations

import os
import threading
import uuid

import fsspec
import ray

from tfbatch.storage import ObjectRef, read_bytes
from tfbatch.transform.report import ObjectResult
from tfbatch.transform.spec import TransformSpec

# Inputs handed over from reader tasks live here, in the actor process's memory filesystem.
STAGING = "memory://tfbatch-ray-staging"


@ray.remote
def read_object(uri: str) -> bytes:
    return read_bytes(uri)


class InstanceActor:
    """One instance of the job. ``process`` never raises: failures are results."""

    def __init__(self, spec_fields: dict, instance: int, instance_count: int):
        from tfbatch.transform.instance import InstanceRunner

        self.instance = instance
        self.fatal: str | None = None
        self.runner = InstanceRunner(TransformSpec(**spec_fields), instance, instance_count)
        self._lock = threading.Lock()
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

    def process(self, uri: str, key: str, size: int | None, had_error_file: bool,
                data: bytes | None = None) -> ObjectResult | None:
        if self.fatal is not None:
            return None  # the engine learns why from ready() and skips this partition
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
        # The driver counts an object finished once this call returns, so its ledger entry is
        # committed first: an actor killed after returning must not take queued entries with it.
        # Calls that finish together share one commit (the ledger groups what is queued).
        self.runner.ledger.flush()
        return result

    def flush_ledger(self) -> int:
        return self.runner.ledger.flush()

    def batch_stats(self) -> dict:
        stack = self.runner.stack
        return stack.model_server.batcher_stats() if stack is not None else {}

    def close(self) -> None:
        with self._lock:
            self.runner.close()


def actor_class():
    return ray.remote(InstanceActor)
