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
- a test that takes a module-, class- or package-scoped fixture runs on one worker with the
  rest of its module, so that fixture is set up once, not once per worker (done here).
Session fixtures are set up once per worker that needs them; keep them cheap, or cache what
they build on disk.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tfbatch.testing.s3_server import S3Server

if TYPE_CHECKING:
    from tfbatch.testing.ray_cluster import LocalRayCluster

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# Fixtures whose users share one worker (see the module docstring), by group name.
GROUPED_FIXTURES = {"ray_cluster": "ray"}
GROUPED_MARKERS = {"ray": "ray"}


def _xdist_group(item: pytest.Item) -> str | None:
    """The one group ``item`` belongs to (xdist would join several names into a new group)."""
    if item.get_closest_marker("xdist_group"):
        return None  # named by the test itself
    names = getattr(item, "fixturenames", ())
    for fixture, group in GROUPED_FIXTURES.items():
        if fixture in names:
            return group
    for marker, group in GROUPED_MARKERS.items():
        if item.get_closest_marker(marker):
            return group
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        if defs and defs[-1].scope in ("module", "class", "package"):
            return f"module:{item.nodeid.split('::', 1)[0]}"
    return None


def _tag_with_group(item: pytest.Item) -> None:
    """Append ``@group`` to the node id, which is how a worker tells xdist's loadgroup scheduler.

    xdist 3.8 does this by writing ``item._nodeid``, which pytest 9.2 no longer reads (its
    node ids are structured: pytest-xdist issue #1386), so every test would be scheduled
    alone. Where the structured id exists it is set here; on older pytest xdist does it.
    """
    if not hasattr(item, "_id"):
        return
    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")})
    if names and "@" not in item.nodeid.rsplit("]", 1)[-1]:
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # tryfirst: xdist's own hook, which reads these marks on each worker, runs after this one.
    loadgroup = getattr(config.option, "loadgroup", False)  # set on xdist workers only
    rank = {}
    for item in items:
        group = _xdist_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
        if loadgroup:
            _tag_with_group(item)
        rank[id(item)] = 0 if group == "ray" else 1 if item.get_closest_marker("slow") else 2
    # The longest chains first (pyproject turns xdist's reorder-by-size off): the Ray group is
    # minutes of one worker's time, and the other worker should not wait for it at the end.
    items.sort(key=lambda item: rank[id(item)])


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[LocalRayCluster]:
    """A real two-node Ray cluster (head + one extra node, one CPU each), always stopped.

    Every test that takes it runs on the same xdist worker (group "ray"), so one cluster
    serves them all; each test connects its own driver and disconnects before the next.
    """
    from tfbatch.testing.ray_cluster import LocalRayCluster

    cluster = LocalRayCluster(nodes=2, num_cpus=1)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


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
