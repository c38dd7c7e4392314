"""A version unloaded between a request's lookup and its submit (a hot reload's ``_unload`` in the
window) still answers: its batcher is closed, the servable is retired but in memory, and the
request runs unbatched (``model_server._submit``), alone or as a hop's gathered calls
(``_submit_together``). A batcher closed for another reason still refuses."""

from __future__ import annotations

import numpy as np
import pytest

from tfbatch import errors
from tfbatch.runtime import ModelServer, RuntimeSettings
from tfbatch.runtime.model_server import _submit, _submit_together


@pytest.fixture()
def two_versions(linear_v1, linear_v2):
    """A server of its own over the session's two linear versions: a test unloads one."""
    with ModelServer({"m": {1: linear_v1, 2: linear_v2}},
                     RuntimeSettings(enable_batching=True, max_batch_size=8)) as srv:
        yield srv


def _looked_up(server: ModelServer, version: int):
    servable = server.resolve("m", version)
    sig = servable.signature(None)
    return servable, sig, server._batcher(servable, sig)


def test_a_request_on_a_version_unloaded_after_its_lookup_runs_unbatched(two_versions):
    server = two_versions
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    servable, sig, batcher = _looked_up(server, 1)
    expected = servable.run_prepared(sig.name, {"x": x})["y"]
    server._unload("m", 1)
    assert servable.retired and batcher.closed
    assert np.array_equal(_submit(batcher, servable, sig.name, {"x": x}).result(timeout=60)["y"], expected)
    # A hop's gathered calls: one unbatched run, each call its own rows back.
    parts = _submit_together(batcher, servable, sig.name, [{"x": x[:1]}, {"x": x[1:]}]).result(timeout=60)
    assert [p["y"].tolist() for p in parts] == [expected[:1].tolist(), expected[1:].tolist()]
    # Its error, too, comes in the future.
    bad = _submit(batcher, servable, sig.name, {"z": np.zeros((1, 3), np.float32)})  # not its input
    with pytest.raises(Exception):
        bad.result(timeout=60)


def test_a_closed_batcher_of_a_version_still_served_refuses(two_versions):
    server = two_versions
    servable, sig, batcher = _looked_up(server, 2)
    batcher.close(wait=True)
    assert not servable.retired
    with pytest.raises(errors.Unavailable):
        _submit(batcher, servable, sig.name, {"x": np.ones((1, 3), np.float32)})
