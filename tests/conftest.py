"""Shared fixtures. Subsystem fixtures live in tests/<subsystem>/conftest.py.

The suite runs on every core with pytest-xdist (``bash scripts/test.sh``: ``-n auto``, and
``--dist loadgroup`` from pyproject). Each worker is its own process with its own session
fixtures and tmp dirs, so a test must not rely on a fixed port (bind 0 or use
``tfbatch.ports.free_ports``) or a fixed file outside ``tmp_path``. A test that shares an
expensive, machine-wide resource with others says so and is sent to one worker with them:

- a test that needs Ray takes the session ``ray_cluster`` fixture, or, if it must start a
  cluster of its own, is marked ``@pytest.mark.ray``. Either puts it in xdist group "ray", so
  every Ray test runs on one worker, one after the other, beside one cluster at a time.
- ``@pytest.mark.xdist_group("name")`` does the same for any other resource.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tfbatch.testing.s3_server import S3Server

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# Fixtures whose users share one worker (see the module docstring), by group name.
GROUPED_FIXTURES = {"ray_cluster": "ray"}
GROUPED_MARKERS = {"ray": "ray"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # tryfirst: xdist's own hook reads the xdist_group marks added here on each worker.
    for item in items:
        names = getattr(item, "fixturenames", ())
        groups = {group for fixture, group in GROUPED_FIXTURES.items() if fixture in names}
        groups |= {group for marker, group in GROUPED_MARKERS.items() if item.get_closest_marker(marker)}
        for group in sorted(groups):
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A running S3Server; its env vars are set for this process while the session lasts.

    fsspec filesystems are cached per endpoint/credentials, so the cache is cleared on both
    sides of the session: no client made before or after talks to this server by mistake.
    """
    from tfbatch.storage.uri import clear_cache

    with S3Server() as server:
        saved = {name: os.environ.get(name) for name in server.env()}
        os.environ.update(server.env())
        clear_cache()
        try:
            yield server
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            clear_cache()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    """The name of a new, empty bucket on ``s3_server``."""
    name = f"test-{uuid.uuid4().hex[:16]}"
    s3_server.client().create_bucket(Bucket=name)
    return name
