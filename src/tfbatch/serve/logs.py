"""Endpoint logging: plain or one JSON object per line, and the per-request access log.

Access lines go to the ``tfbatch.access`` logger at INFO with the request id, method, path,
status, response bytes and latency as record attributes, so the JSON format carries them as
fields a log pipeline can index, and the plain format prints them in one line.
"""

from __future__ import annotations

import json
import logging
import time

ACCESS_LOGGER = "tfbatch.access"
ACCESS_FIELDS = ("request_id", "method", "path", "status", "bytes", "latency_ms")
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in ACCESS_FIELDS:
            if hasattr(record, field):
                entry[field] = getattr(record, field)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str, fmt: str = "plain") -> None:
    """Root handler for the serve process (a no-op for a second call, e.g. in tests)."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(PLAIN_FORMAT))
    root.addHandler(handler)
    root.setLevel(level.upper())


_access = logging.getLogger(ACCESS_LOGGER)


def log_access(request_id: str, method: str, path: str, status: int, nbytes: int, seconds: float) -> None:
    if not _access.isEnabledFor(logging.INFO):
        return
    latency_ms = round(seconds * 1000, 3)
    _access.info(
        "%s %s %s %d %dB %.1fms", request_id, method, path, status, nbytes, latency_ms,
        extra={"request_id": request_id, "method": method, "path": path, "status": status,
               "bytes": nbytes, "latency_ms": latency_ms},
    )
