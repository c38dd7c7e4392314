"""The fast tier's rules, enforced: no TensorFlow import and no child process.

A test that needs either belongs in tests/integration (real TF, servers, moto, Ray) or
tests/e2e (the CLI as a user runs it). The guard wraps the standard library's process
creation for this tier only, so a unit test that starts one fails with the reason.
"""

from __future__ import annotations

import multiprocessing.process
import subprocess
import sys

import pytest


class TierViolation(AssertionError):
    pass


@pytest.fixture(autouse=True)
def _unit_tier_rules(monkeypatch):
    def refuse(*args, **kwargs):
        raise TierViolation("unit tests must not start processes; move this test to tests/integration")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
    had_tf = "tensorflow" in sys.modules
    yield
    if not had_tf and "tensorflow" in sys.modules:
        raise TierViolation("unit tests must not import TensorFlow; move this test to tests/integration")
