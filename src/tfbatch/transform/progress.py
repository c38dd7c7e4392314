"""Progress of a running job: a one-line bar on a terminal, plain log lines elsewhere.

The bar is redrawn in place with ``\\r`` at most a few times a second; when stderr is a
file or a pipe (CI logs, ``nohup``), a plain line every few seconds is easier to read than
a stream of carriage returns.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from tfbatch.transform.report import ObjectResult


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    """Counts finished objects; ``total`` (objects to run) may arrive later from a counting pass."""

    def __init__(self, mode: str = "auto", stream: TextIO | None = None, *, interval_s: float | None = None):
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if getattr(self.stream, "isatty", lambda: False)() else "log"
        self.mode = mode  # bar | log | off
        self.interval_s = interval_s if interval_s is not None else (0.2 if mode == "bar" else 5.0)
        self.total: int | None = None
        self.objects = 0
        self.failed = 0
        self.records = 0
        self.started = time.monotonic()
        self._last = 0.0
        self._lock = threading.Lock()
        self._drawn = False

    def set_total(self, total: int) -> None:
        self.total = total

    def update(self, result: ObjectResult) -> None:
        with self._lock:
            self.objects += 1
            self.records += result.records
            self.failed += 0 if result.ok else 1
            now = time.monotonic()
            if now - self._last >= self.interval_s:
                self._last = now
                self._draw(now)

    def line(self, now: float | None = None) -> str:
        elapsed = (now or time.monotonic()) - self.started
        rate = self.records / elapsed if elapsed > 0 else 0.0
        parts = []
        if self.total:
            frac = min(self.objects / self.total, 1.0)
            filled = int(frac * 24)
            parts.append(f"[{'#' * filled}{'.' * (24 - filled)}] {self.objects}/{self.total} objects")
        else:
            parts.append(f"{self.objects} objects")
        parts.append(f"{self.records} records")
        if self.failed:
            parts.append(f"{self.failed} failed")
        parts.append(f"{rate:.1f} records/s")
        if self.total and self.objects:
            remaining = elapsed / self.objects * (self.total - self.objects)
            parts.append(f"ETA {_clock(remaining)}")
        parts.append(f"elapsed {_clock(elapsed)}")
        return "  ".join(parts)

    def _draw(self, now: float) -> None:
        if self.mode == "bar":
            self.stream.write("\r" + self.line(now) + "\x1b[K")
            self._drawn = True
        elif self.mode == "log":
            self.stream.write(f"[tfbatch transform] {self.line(now)}\n")
        else:
            return
        self.stream.flush()

    def close(self) -> None:
        with self._lock:
            if self.mode == "off":
                return
            if self.mode == "bar":
                self.stream.write("\r" + self.line() + "\x1b[K\n")
            elif self.objects:
                self.stream.write(f"[tfbatch transform] {self.line()}\n")
            self.stream.flush()
