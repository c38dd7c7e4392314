"""Version policies, hot reload of new version folders, version states, allowed batch sizes."""

from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest

from tfbatch import errors
from tfbatch.runtime import ModelServer, RuntimeSettings
from tfbatch.testing import models
from tfbatch.tfs.api import TfsApi

X = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], dtype=np.float32)
WAIT_S = 120  # only bounds a failing test; passing tests never wait on it


def _add_version(base, version, seed, scratch):
    """Write a SavedModel elsewhere, then move it in whole, as a careful deployer does."""
    staged = models.make_linear_model(scratch / f"stage-{version}", seed=seed)
    shutil.move(str(staged), str(base / str(version)))
    return base / str(version)


def _which(y):
    for seed in (0, 1, 2):
        if np.allclose(y, models.linear_expected(X, seed=seed), atol=1e-5):
            return seed + 1  # the tests give version v the seed v - 1
    raise AssertionError(f"output from no known version: {y}")


def _states(server, name="m"):
    return {v: state for v, (state, _err) in server.model_status(name).items()}


def test_policy_picks_versions_at_start(linear_v1, linear_v2):
    both = {"linear": {1: linear_v1, 2: linear_v2}}
    with ModelServer(both, RuntimeSettings(model_version_policy="latest")) as srv:
        assert srv.versions("linear") == [2]
        with pytest.raises(errors.NotFound, match="no version 1; available versions: 2"):
            srv.resolve("linear", 1)
    with ModelServer(both, RuntimeSettings(model_version_policy="specific:1")) as srv:
        assert srv.versions("linear") == [1] and _states(srv, "linear") == {1: "AVAILABLE"}
    with ModelServer(both) as srv:  # no policy: every version the artifact holds (COMPAT.md §1)
        assert srv.versions("linear") == [1, 2]
    with pytest.raises(errors.ArtifactError, match=r"version policy specific:7 selects \(found \[1, 2\]\)"):
        ModelServer(both, RuntimeSettings(model_version_policy="specific:7"))


@pytest.mark.parametrize("batching", [True, False])
def test_hot_reload_swaps_versions_without_failing_a_request(tmp_path, batching):
    base = tmp_path / "m"
    base.mkdir()
    _add_version(base, 1, 0, tmp_path)
    settings = RuntimeSettings(enable_batching=batching, model_version_policy="latest", batch_idle_dispatch=True)
    server = ModelServer({"m": {1: base / "1"}}, settings, base_paths={"m": base})
    failures, served = [], []
    stop, warmed, swapped, saw_new = (threading.Event() for _ in range(4))

    def client():
        n = 0
        while not stop.is_set():
            after_swap = swapped.is_set()
            try:
                version = _which(server.run({"x": X}, "m")["y"])
            except Exception as exc:  # noqa: BLE001 - every failure is the test's finding
                failures.append(repr(exc))
                continue
            served.append((after_swap, version))
            n += 1
            if n >= 5:
                warmed.set()
            if version == 2:
                saw_new.set()

    threads = [threading.Thread(target=client) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        assert warmed.wait(WAIT_S)
        _add_version(base, 2, 1, tmp_path)
        shutil.rmtree(base / "1")
        server.poll_versions()
        swapped.set()
        assert saw_new.wait(WAIT_S)
        assert _states(server) == {1: "END", 2: "AVAILABLE"}
        assert server.versions("m") == [2]
    finally:
        stop.set()
        for t in threads:
            t.join()
        server.close()
    assert failures == []
    assert {v for after, v in served if after} == {2}
    assert {v for after, v in served if not after} >= {1}


def test_states_while_loading_and_after_a_failed_version(tmp_path):
    base = tmp_path / "m"
    base.mkdir()
    _add_version(base, 1, 0, tmp_path)
    in_warmup, release = threading.Event(), threading.Event()

    def warmup(servable, replays):
        # The hook runs before a version is published: hold the new one there.
        if servable.version == 2:
            in_warmup.set()
            assert release.wait(WAIT_S)

    settings = RuntimeSettings(model_version_policy="latest")
    with ModelServer({"m": {1: base / "1"}}, settings, base_paths={"m": base}, warmup=warmup) as server:
        api = TfsApi(server)
        _add_version(base, 2, 1, tmp_path)
        poll = threading.Thread(target=server.poll_versions)
        poll.start()
        assert in_warmup.wait(WAIT_S)
        assert _states(server) == {1: "AVAILABLE", 2: "LOADING"}
        assert server.ready
        assert _which(server.run({"x": X}, "m")["y"]) == 1  # still answered by version 1
        release.set()
        poll.join()
        assert api.status("m") == {"model_version_status": [
            {"version": "2", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}},
            {"version": "1", "state": "END", "status": {"error_code": "OK", "error_message": ""}},
        ]}
        # a broken version 3 fails to load, is reported, and version 2 keeps serving
        (base / "3").mkdir()
        (base / "3" / "saved_model.pb").write_bytes(b"not a proto")
        server.poll_versions()
        server.poll_versions()  # not retried
        (row,) = api.status("m", 3)["model_version_status"]
        assert row["state"] == "END" and row["status"]["error_code"] == "UNKNOWN"
        assert "saved_model.pb" in row["status"]["error_message"]
        assert _which(server.run({"x": X}, "m")["y"]) == 2
        assert _which(server.unbatched().run({"x": X}, "m")["y"]) == 2
        with pytest.raises(errors.NotFound, match="no version 9"):
            api.status("m", 9)
    assert not server.ready


def test_polling_thread_picks_up_a_new_version(tmp_path):
    base = tmp_path / "m"
    base.mkdir()
    _add_version(base, 1, 0, tmp_path)
    loaded = threading.Event()

    def warmup(servable, replays):
        if servable.version == 2:
            loaded.set()

    settings = RuntimeSettings(model_version_policy="latest", model_poll_interval_s=0.05)
    with ModelServer({"m": {1: base / "1"}}, settings, base_paths={"m": base}, warmup=warmup) as server:
        _add_version(base, 2, 1, tmp_path)
        assert loaded.wait(WAIT_S)
    # close() joins the polling thread, which finishes the scan it is in first
    assert server.versions("m") == [2]
    assert _states(server) == {1: "END", 2: "AVAILABLE"}


def _make_rows_model(path):
    import tensorflow as tf

    class Rows(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32, name="x")])
        def serve(self, x):
            return {"rows": x * 0 + tf.cast(tf.shape(x)[0], tf.float32)}

    module = Rows()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


@pytest.mark.parametrize("allowed, rows, seen", [((4, 8), 3, 4), ((4, 8), 5, 8), ((4, 8), 8, 8), ((), 3, 3)])
def test_batches_are_padded_to_an_allowed_size(tmp_path_factory, allowed, rows, seen):
    path = tmp_path_factory.getbasetemp() / "rows" / "1"
    if not path.exists():
        _make_rows_model(path)
    settings = RuntimeSettings(enable_batching=True, max_batch_size=8, allowed_batch_sizes=allowed)
    with ModelServer({"rows": {1: path}}, settings) as server:
        out = server.run({"x": np.ones((rows, 1), np.float32)})["rows"]
    assert out.shape == (rows, 1)
    assert set(out.ravel()) == {float(seen)}


def test_from_artifact_watches_numeric_version_folders_only(tmp_path):
    from tfbatch.artifact import open_artifact

    root = tmp_path / "art"
    models.make_linear_model(root / "1", seed=0)
    settings = RuntimeSettings(model_version_policy="latest")
    with ModelServer.from_artifact(open_artifact(root), settings) as server:
        _add_version(root, 2, 1, tmp_path)
        server.poll_versions()
        assert server.versions() == [2]
    # A SavedModel at the artifact root: its parent folder is not a model folder to scan.
    single = tmp_path / "single"
    models.make_linear_model(single, seed=0)
    _add_version(tmp_path, 7, 1, tmp_path)
    with ModelServer.from_artifact(open_artifact(single), settings) as server:
        server.poll_versions()
        assert server.versions() == [1]
