"""The job's bookkeeping in its output location: what finished, what failed, the report.

Layout under ``<output>/_tfbatch/``::

    ledger/<fingerprint>/<key>        one small marker per finished object
    errors/<fingerprint>/<key>.jsonl  that object's record failures (only if it had any)
    errors.jsonl                      every failure of the job, gathered at the end
    report.json                       the job report

A marker is written only after the object's ``.out`` is in place (and its error file
before the marker), each with an atomic write, so "marker exists" always means "output
complete". Markers are separate objects rather than lines in one file because S3 cannot
append and several instances finish objects at the same time. The fingerprint of the
job's output-shaping settings is part of the path: a changed job never mistakes another
job's markers for its own.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator

from tfbatch.storage import atomic_write, delete, is_local, join, list_prefix, open_read, write_text
from tfbatch.transform.report import ObjectResult
from tfbatch.transform.spec import TransformSpec

FOLDER = "_tfbatch"
_TEMP = re.compile(r"^\..+\.tmp-[0-9a-f]{12}$")


class Ledger:
    def __init__(self, output: str, fingerprint: str):
        self.root = join(output, FOLDER)
        self.fingerprint = fingerprint
        self.markers = join(self.root, f"ledger/{fingerprint}/")
        self.error_files = join(self.root, f"errors/{fingerprint}/")
        self.report_uri = join(self.root, "report.json")
        self.error_report_uri = join(self.root, "errors.jsonl")

    @classmethod
    def for_spec(cls, spec: TransformSpec) -> "Ledger":
        return cls(spec.output, spec.fingerprint())

    # ---- reading --------------------------------------------------------------------

    def done_keys(self) -> set[str]:
        """Keys of finished objects (one listing; a few bytes per finished object)."""
        return {ref.key for ref in list_prefix(self.markers)}

    def keys_with_errors(self) -> set[str]:
        return {ref.key[: -len(".jsonl")] for ref in list_prefix(self.error_files) if ref.key.endswith(".jsonl")}

    def iter_error_lines(self) -> Iterator[bytes]:
        for ref in list_prefix(self.error_files):
            with open_read(ref.uri) as f:
                data = f.read()
            if data:
                yield data if data.endswith(b"\n") else data + b"\n"

    # ---- writing --------------------------------------------------------------------

    def save_failures(self, result: ObjectResult, *, had_error_file: bool = False) -> None:
        """Keep an object's failures for the error report (finished or not)."""
        error_uri = join(self.error_files, result.key + ".jsonl")
        if result.failures:
            atomic_write(error_uri, "".join(f.to_json() + "\n" for f in result.failures).encode())
        elif had_error_file:
            delete(error_uri)  # a previous run's failures no longer hold

    def mark_done(self, result: ObjectResult) -> None:
        """Record a finished object; call only once its ``.out`` is in place."""
        marker = {
            "records": result.records,
            "failed_records": result.failed_records,
            "output_bytes": result.output_bytes,
            "written": result.written,
        }
        # No fsync: the .out was made durable before this marker was written, so a marker
        # lost to a power cut only means the object is redone; one found always has its .out.
        write_text(join(self.markers, result.key), json.dumps(marker), durable=False)

    def write_error_report(self) -> str | None:
        """Gather every object's failures into ``errors.jsonl``; None when there were none."""
        lines = self.iter_error_lines()
        first = next(lines, None)
        if first is None:
            delete(self.error_report_uri)
            return None

        def chunks() -> Iterator[bytes]:
            yield first
            yield from lines

        atomic_write(self.error_report_uri, chunks())
        return self.error_report_uri

    def remove_stale_temp_files(self, output: str) -> int:
        """Delete temporary files a killed run left in a local output folder.

        Local atomic writes go through ``.<name>.tmp-<hex>`` next to the target; SIGKILL
        can strand one. On S3 an unfinished upload is never visible, so nothing is needed.
        """
        if not is_local(output) or not os.path.isdir(output):
            return 0
        removed = 0
        for folder, _dirs, files in os.walk(output):
            for name in files:
                if _TEMP.match(name):
                    try:
                        os.unlink(os.path.join(folder, name))
                        removed += 1
                    except FileNotFoundError:
                        pass
        return removed

    def write_report(self, report: dict) -> str:
        write_text(self.report_uri, json.dumps(report, indent=2, sort_keys=True) + "\n")
        return self.report_uri
