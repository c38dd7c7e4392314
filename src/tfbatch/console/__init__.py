"""The console: jobs and endpoints in a browser, and the static HTML report of one job.

``tfbatch api`` mounts it (``mount_console(app, source, token=...)``) over a
``ConsoleSource`` (``source.py``: the questions the pages ask); ``tfbatch transform`` writes
``<output>/_tfbatch/report.html`` through ``StaticReport`` with no server. Progress over
time comes from ``ProgressAggregator`` (bounded memory), fed by the job's progress callback.

The names below load on first use: the static report does not need Starlette.
"""

from __future__ import annotations

from tfbatch.lazy import lazy_names

_LAZY = {
    "ConsoleSource": "tfbatch.console.source",
    "JobRow": "tfbatch.console.source",
    "JobPage": "tfbatch.console.source",
    "JobDetail": "tfbatch.console.source",
    "Setting": "tfbatch.console.source",
    "Failure": "tfbatch.console.source",
    "Point": "tfbatch.console.source",
    "InstanceCounts": "tfbatch.console.source",
    "EndpointRow": "tfbatch.console.source",
    "WorkerStats": "tfbatch.console.source",
    "ModelRow": "tfbatch.console.source",
    "settings_from_report": "tfbatch.console.source",
    "read_failures": "tfbatch.console.source",
    "ProgressAggregator": "tfbatch.console.aggregate",
    "RecordingProgress": "tfbatch.console.aggregate",
    "JobBoard": "tfbatch.console.board",
    "TrackedJob": "tfbatch.console.board",
    "StaticReport": "tfbatch.console.static",
    "console_app": "tfbatch.console.app",
    "console_routes": "tfbatch.console.app",
    "mount_console": "tfbatch.console.app",
}
__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
