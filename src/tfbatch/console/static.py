"""``<output>/_tfbatch/report.html``: one finished job's console page as a file, for people who
never start a server.

``tfbatch transform`` runs the job with a ``StaticReport``'s progress, then calls ``write``
with the job's report: the same sections and the same SVG charts as the live page (drawn
by the same functions), with the style inline and no script, so the file opens from disk,
from an S3 download or as a CI artefact.
"""

from __future__ import annotations

import logging
from typing import Any

from tfbatch.console.board import TrackedJob
from tfbatch.console.pages import static_report_page
from tfbatch.storage import join, normalize, write_text

log = logging.getLogger(__name__)

REPORT_NAME = "report.html"


def report_uri(output: str) -> str:
    return join(join(normalize(output), "_tfbatch"), REPORT_NAME)


class StaticReport:
    """Records one job while it runs (progress and log tail) and writes its HTML report after."""

    def __init__(self, *, name: str, instances: int, output: str, details: list[tuple[str, str]] | None = None,
                 progress: str = "off"):
        self.job = TrackedJob(name, instances=instances, output=output, details=details, progress=progress)
        self._undo_logs = None

    @property
    def progress(self):
        """What to pass as ``run_transform(progress=...)``: it draws what ``progress`` asked for too."""
        return self.job.progress

    def __enter__(self) -> "StaticReport":
        self._undo_logs = self.job.capture_logs()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._undo_logs:
            self._undo_logs()
            self._undo_logs = None

    def render(self, report: Any) -> str:
        self.job.finish(report)
        return static_report_page(self.job.detail(), self.job.aggregator.series(), self.job.failures(),
                                  self.job.log_tail())

    def write(self, report: Any) -> str | None:
        """Write the report file; a failure to write it is logged, never the job's failure."""
        uri = report_uri(self.job.output)
        try:
            write_text(uri, self.render(report), durable=False)
        except Exception as exc:  # the job's outputs and report.json are already written
            log.warning("could not write the HTML report %s: %s", uri, exc)
            return None
        return uri


def spec_details(spec: Any) -> list[tuple[str, str]]:
    """The lines of a job page that describe a TransformSpec: what ran, on what, how."""
    pairs = [("Model", spec.model), ("Input", spec.input or spec.manifest), ("Content type", spec.content_type),
             ("Split type", spec.split_type), ("Batch strategy", spec.batch_strategy),
             ("Engine", spec.engine), ("Precision", spec.precision)]
    return [(k, str(v)) for k, v in pairs if v not in (None, "")]
