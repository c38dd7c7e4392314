"""Waiting for a condition another process makes true (a file committed, a job running)."""

from __future__ import annotations

import time


def poll(condition, what: str, limit_s: float = 180.0):
    """``condition()``'s first truthy value; the limit is a failure guard, not a timing."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
