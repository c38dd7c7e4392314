"""Shared fixtures. Subsystem fixtures live in tests/<subsystem>/conftest.py."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
