"""The ledger's storage: append-only journals, one per instance and run, compacted at the end.

Each committed group of objects is one JSON line ``{"entries": [...]}``. Locally a journal
is one file appended to (and fsynced) per group; S3 cannot append, so there each group is
its own small object (``...-<seq>.jsonl``). At the end of a job every journal is
concatenated into one compacted file and the journals are deleted, so resuming a job of
any size lists a handful of files.

File names sort in commit order: ``<run>`` is a zero-padded hex timestamp of the run's
start, and a compacted file sorts after the journals of its own run (``<run>-j...`` <
``<run>-z...``), so a crash between writing a compacted file and deleting the journals it
absorbed only makes those entries be read twice, which changes nothing.

A line that does not end in a newline or does not parse is a group whose commit was cut
off by a kill: it is ignored, and its objects are redone.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Iterator

from tfbatch.storage import ObjectRef, atomic_write, delete, is_local, join, list_prefix, open_read
from tfbatch.storage.io import make_dirs


def new_run_id() -> str:
    return f"{time.time_ns():016x}{secrets.token_hex(2)}"


def journal_name(run: str, instance: int) -> str:
    return f"{run}-j{instance:05d}"


def compact_name(run: str) -> str:
    return f"{run}-z.jsonl"


class JournalWriter:
    """Appends group records for one instance of one run; thread-safe."""

    def __init__(self, folder: str, run: str, instance: int):
        self.folder = folder
        self.base = journal_name(run, instance)
        self.local = is_local(folder)
        self._fd: int | None = None
        self._seq = 0
        self._lock = threading.Lock()
        self.uri = join(folder, self.base + ".jsonl")

    def append(self, line: bytes) -> None:
        """Durably add one record; returns once it would survive a power cut."""
        assert line.endswith(b"\n")
        with self._lock:
            if self.local:
                self._append_local(line)
            else:
                self._seq += 1
                atomic_write(join(self.folder, f"{self.base}-{self._seq:08d}.jsonl"), line)

    def _append_local(self, line: bytes) -> None:
        if self._fd is None:
            make_dirs(self.folder)
            try:
                self._fd = os.open(self.uri, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
            except FileNotFoundError:
                # make_dirs remembers folders per process: a long-lived one (a pooled Ray actor,
                # a Python session) whose earlier job's output was deleted makes it again.
                os.makedirs(self.folder, exist_ok=True)
                self._fd = os.open(self.uri, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
            os.fsync(self._fd)
            dir_fd = os.open(self.folder, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # the new file's name, once
            finally:
                os.close(dir_fd)
        view = memoryview(line)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def journal_files(folder: str) -> list[ObjectRef]:
    """Every journal and compacted file, in commit order (sizes from the listing save requests)."""
    refs = [ref for ref in list_prefix(folder) if ref.key.endswith(".jsonl") and "/" not in ref.key]
    return sorted(refs, key=lambda r: r.key)


def read_lines(ref: ObjectRef) -> Iterator[bytes]:
    """Each whole line (a torn final append has no newline and is left out)."""
    with open_read(ref.uri, size=ref.size) as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                return
            yield raw


def parse_record(raw: bytes) -> dict | None:
    """A line's record, or None if it is not one (cut off, or not ours)."""
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    if isinstance(record, dict) and isinstance(record.get("entries"), list):
        return record
    return None


def read_records(ref: ObjectRef) -> Iterator[dict]:
    for raw in read_lines(ref):
        record = parse_record(raw)
        if record is not None:
            yield record


def iter_lines(files: list[ObjectRef]) -> Iterator[bytes]:
    for ref in files:
        yield from read_lines(ref)


def iter_records(files: list[ObjectRef]) -> Iterator[dict]:
    for ref in files:
        yield from read_records(ref)


def iter_entries(files: list[ObjectRef]) -> Iterator[dict]:
    for record in iter_records(files):
        for entry in record["entries"]:
            if isinstance(entry, dict) and isinstance(entry.get("k"), str):
                yield entry


def compact(folder: str, run: str, *, min_files: int = 2) -> list[ObjectRef]:
    """Fold every journal into one file named for ``run``, once there are ``min_files`` of
    them; delete what it absorbed. Returns the journal files left (one listing in all)."""
    files = journal_files(folder)
    if len(files) < max(2, min_files):
        return files
    written = 0

    def lines() -> Iterator[bytes]:
        nonlocal written
        for ref in files:
            with open_read(ref.uri, size=ref.size) as f:
                for raw in f:
                    if raw.endswith(b"\n"):
                        written += len(raw)
                        yield raw

    target = join(folder, compact_name(run))
    atomic_write(target, lines())
    for ref in files:
        if ref.uri != target:
            delete(ref.uri)
    return [ObjectRef(target, compact_name(run), written)]
