"""An fsspec filesystem that wraps the memory filesystem and fails chosen calls.

Registered as ``faulty://``: the job reads its input through it exactly as through any
remote store, and the faults happen at the storage boundary, not inside tfbatch.
"""

from __future__ import annotations

import threading

import fsspec
from fsspec.implementations.memory import MemoryFileSystem


class FaultyFileSystem(MemoryFileSystem):
    protocol = ("faulty",)
    root_marker = "/"
    # path -> exception to raise on every open (a permanent storage failure)
    faults: dict[str, BaseException] = {}
    opens: dict[str, int] = {}
    _lock = threading.Lock()

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, str) and path.startswith("faulty://"):
            path = path[len("faulty://"):]
        return super()._strip_protocol(path)

    def _check_read(self, path) -> str:
        path = self._strip_protocol(path)
        with self._lock:
            self.opens[path] = self.opens.get(path, 0) + 1
        fault = self.faults.get(path)
        if fault is not None:
            raise fault
        return path

    def _open(self, path, mode="rb", **kwargs):
        if "r" in mode:
            path = self._check_read(path)
        return super()._open(path, mode, **kwargs)

    def cat_file(self, path, start=None, end=None, **kwargs):
        # Whole-object reads (small objects are fetched in one call) fail like opens.
        return super().cat_file(self._check_read(path), start=start, end=end, **kwargs)


fsspec.register_implementation("faulty", FaultyFileSystem, clobber=True)
