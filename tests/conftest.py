"""Shared fixtures. Subsystem fixtures live in tests/<subsystem>/conftest.py."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tfbatch.testing.s3_server import S3Server

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


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
