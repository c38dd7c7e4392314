"""ModelServer: TFS REST bodies, version resolution, status/metadata, batching."""

from __future__ import annotations

import base64
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest

from tfbatch import errors
from tfbatch.runtime import ModelServer, RuntimeSettings
from tfbatch.testing import models
from tfbatch.tfs.api import TfsApi

from .conftest import png_bytes


def test_default_model_and_latest_version(server):
    assert server.model_names() == ["cr", "failing", "image", "linear", "multi"]
    s = server.resolve()
    assert (s.name, s.version) == ("linear", 2)
    assert server.resolve("linear", "1").version == 1
    assert server.resolve("linear", 1).version == 1


def test_version_selection_changes_numbers(server):
    x = [[1.0, 2.0, 3.0]]
    v1 = TfsApi(server).predict({"instances": x}, "linear", 1)["predictions"]
    latest = TfsApi(server).predict({"instances": x}, "linear")["predictions"]
    np.testing.assert_allclose(v1, models.linear_expected(np.array(x), seed=0), rtol=1e-5)
    np.testing.assert_allclose(latest, models.linear_expected(np.array(x), seed=1), rtol=1e-5)


def test_unknown_model_and_version_messages(server):
    with pytest.raises(errors.NotFound, match=r"model 'nope' not found; available models: cr, failing, image, linear, multi"):
        TfsApi(server).predict({"instances": [[1, 2, 3]]}, "nope")
    with pytest.raises(errors.NotFound, match=r"model 'linear' has no version 7; available versions: 1, 2"):
        server.resolve("linear", 7)
    with pytest.raises(errors.NotFound, match=r"has no version 'abc'"):
        server.resolve("linear", "abc")


def test_predict_row_and_columnar(server):
    x = [[1.0, 2.0, 3.0], [0.0, -1.0, 0.5]]
    row = TfsApi(server).predict({"instances": x}, "linear", 1)
    col = TfsApi(server).predict({"inputs": x}, "linear", 1)
    assert set(row) == {"predictions"} and set(col) == {"outputs"}
    assert row["predictions"] == col["outputs"]
    assert len(row["predictions"]) == 2 and len(row["predictions"][0]) == 2


def test_predict_multiple_outputs_and_signature_name(server):
    body = {"instances": [{"a": [1, 2], "b": 10}, {"a": [3, 4], "b": 20}]}
    out = TfsApi(server).predict(body, "multi")
    assert out == {"predictions": [{"prod": [10.0, 20.0], "sum": 13.0}, {"prod": [60.0, 80.0], "sum": 27.0}]}
    scaled = TfsApi(server).predict({**body, "signature_name": "scaled"}, "multi")
    assert scaled == {"predictions": [[20.0, 30.0], [50.0, 60.0]]}
    col = TfsApi(server).predict({"inputs": {"a": [[1, 2]], "b": [1]}}, "multi")
    assert col == {"outputs": {"prod": [[1.0, 2.0]], "sum": [4.0]}}
    with pytest.raises(errors.NotFound, match="available signatures: scaled, serving_default"):
        TfsApi(server).predict({**body, "signature_name": "missing"}, "multi")
    with pytest.raises(errors.InvalidInput, match="'signature_name' must be a string"):
        TfsApi(server).predict({**body, "signature_name": 3}, "multi")


def test_predict_b64_png_through_json(server):
    pngs = [png_bytes(12, 9), png_bytes(40, 33, "RGB", seed=1)]
    body = {"instances": [{"b64": base64.b64encode(p).decode()} for p in pngs]}
    body = json.loads(json.dumps(body))  # exactly what arrives over HTTP
    out = TfsApi(server).predict(body, "image")
    preds = out["predictions"]
    assert len(preds) == 2 and set(preds[0]) == {"classes", "probabilities"}
    assert abs(sum(preds[0]["probabilities"]) - 1.0) < 1e-5
    assert preds[0]["classes"] == int(np.argmax(preds[0]["probabilities"]))
    json.dumps(out)  # the result is JSON-serializable


def test_predict_error_paths(server):
    with pytest.raises(errors.InvalidInput, match="Unknown image file format"):
        TfsApi(server).predict({"instances": [{"b64": base64.b64encode(b"garbage").decode()}]}, "image")
    with pytest.raises(errors.InvalidInput, match=r"input 'x' of signature 'serving_default': expected dtype float32 with shape \[-1, 3\], got int64 with shape \[1, 2\]"):
        TfsApi(server).predict({"instances": [[1, 2]]}, "linear")
    with pytest.raises(errors.InvalidInput, match=r"keys \['z'\] must be equal to the inputs of signature 'serving_default': \['x'\]"):
        TfsApi(server).predict({"instances": [{"z": [1, 2, 3]}]}, "linear")
    with pytest.raises(errors.InvalidInput, match="negative input"):
        TfsApi(server).predict({"instances": [[-1.0, 0.0]]}, "failing")


def test_classify_and_regress(server):
    body = {"examples": [{"x": [1.0, 2.0]}, {"x": [-1.0, -2.0], "w": 0.5}]}
    cls = TfsApi(server).classify(body, "cr")
    res = cls["results"]
    assert [lab for lab, _ in res[0]] == ["negative", "positive"]
    assert res[0][1][1] == pytest.approx(1 / (1 + np.exp(-3.0)), rel=1e-5)
    assert res[1][1][1] == pytest.approx(1 / (1 + np.exp(1.5)), rel=1e-5)
    reg = TfsApi(server).regress({**body, "context": {"w": 2.0}}, "cr")
    # the second example's own w=0.5 overrides the context's 2.0
    assert reg["results"] == pytest.approx([6.0, -1.5])
    with pytest.raises(errors.InvalidInput, match="signature 'serving_default' of model 'cr' cannot classify"):
        TfsApi(server).classify({**body, "signature_name": "serving_default"}, "cr")
    with pytest.raises(errors.InvalidInput, match="has no regress signatures"):
        TfsApi(server).regress(body, "multi")


def test_run_tensor_path(server):
    out = server.run({"a": np.ones((2, 2), np.float32), "b": np.array([1, 2])}, "multi", signature_name="scaled")
    assert out["scaled"].tolist() == [[11.0, 11.0], [12.0, 12.0]]


def test_status_and_metadata(server):
    st = TfsApi(server).status("linear")
    assert st == {
        "model_version_status": [
            {"version": "2", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}},
            {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}},
        ]
    }
    assert [v["version"] for v in TfsApi(server).status("linear", 1)["model_version_status"]] == ["1"]
    with pytest.raises(errors.NotFound):
        TfsApi(server).status("nope")
    md = TfsApi(server).metadata("multi")
    assert md["model_spec"] == {"name": "multi", "signature_name": "", "version": "1"}
    sigs = md["metadata"]["signature_def"]["signature_def"]
    a = sigs["serving_default"]["inputs"]["a"]
    assert a["dtype"] == "DT_FLOAT"
    assert [d["size"] for d in a["tensor_shape"]["dim"]] == ["-1", "2"]
    assert a["tensor_shape"]["unknown_rank"] is False
    assert sigs["serving_default"]["inputs"]["b"]["dtype"] == "DT_INT64"
    assert sigs["serving_default"]["method_name"] == "tensorflow/serving/predict"
    assert TfsApi(server).metadata("cr")["metadata"]["signature_def"]["signature_def"]["classify"]["method_name"] == (
        "tensorflow/serving/classify"
    )
    json.dumps(md)


def test_from_artifact_duck_typing(linear_v1, multi_io):
    artifact = SimpleNamespace(
        models={
            "linear": SimpleNamespace(versions={1: linear_v1}),
            "multi": SimpleNamespace(versions={1: multi_io}),
        },
        default_model_name="multi",
    )
    with ModelServer.from_artifact(artifact) as srv:
        assert srv.default_model == "multi"
        assert srv.resolve().name == "multi"
    with pytest.raises(errors.NotFound, match="default model 'zzz' not found"):
        ModelServer({"linear": {1: linear_v1}}, default_model="zzz")


def test_concurrent_predict_without_batching(server):
    xs = [np.random.default_rng(i).random((1, 3)).astype(np.float32) for i in range(40)]
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda x: TfsApi(server).predict({"instances": x.tolist()}, "linear", 1), xs))
    for x, out in zip(xs, outs):
        np.testing.assert_allclose(out["predictions"], models.linear_expected(x, seed=0), rtol=1e-5)


@pytest.fixture(scope="module")
def batching_server(linear_v1, multi_io):
    settings = RuntimeSettings(
        enable_batching=True, max_batch_size=8, batch_timeout_micros=20_000, num_batch_threads=2, max_enqueued_batches=64
    )
    srv = ModelServer({"linear": {1: linear_v1}, "multi": {1: multi_io}}, settings=settings)
    yield srv
    srv.close()


def test_batching_coalesces_concurrent_requests(batching_server):
    xs = [np.random.default_rng(i).random((1, 3)).astype(np.float32) for i in range(48)]
    barrier = threading.Barrier(16)

    def call(x):
        try:
            barrier.wait(timeout=5)
        except threading.BrokenBarrierError:
            pass
        return TfsApi(batching_server).predict({"instances": x.tolist()}, "linear")

    with ThreadPoolExecutor(16) as pool:
        outs = list(pool.map(call, xs))
    for x, out in zip(xs, outs):
        np.testing.assert_allclose(out["predictions"], models.linear_expected(x, seed=0), rtol=1e-5)
    stats = batching_server.batcher_stats()["linear/1/serving_default"]
    assert stats["rows"] >= 48
    assert stats["batches"] < 48  # rows were coalesced
    assert max(stats["batch_sizes"]) > 1


def test_batching_splits_oversized_request_in_order(batching_server):
    before = batching_server.batcher_stats().get("multi/1/serving_default", {}).get("batches", 0)
    n = 21  # > max_batch_size 8: TF Serving would refuse it
    a = np.arange(2 * n, dtype=np.float32).reshape(n, 2)
    b = np.arange(n)
    out = batching_server.run({"a": a, "b": b}, "multi")
    np.testing.assert_allclose(out["sum"], a.sum(axis=1) + b)
    np.testing.assert_allclose(out["prod"], a * b[:, None])
    stats = batching_server.batcher_stats()["multi/1/serving_default"]
    assert stats["batches"] - before >= 3
    assert max(stats["batch_sizes"]) <= 8


def test_batching_errors_stay_in_their_request(batching_server):
    with pytest.raises(errors.InvalidInput, match="expected dtype float32"):
        TfsApi(batching_server).predict({"instances": [["x", "y", "z"]]}, "linear")
    out = TfsApi(batching_server).predict({"instances": [[1.0, 1.0, 1.0]]}, "linear")
    assert len(out["predictions"]) == 1


def _wait_for(predicate, what: str) -> None:
    """Poll a counter until it holds; the limit only turns a hang into a failure."""
    for _ in range(6000):
        if predicate():
            return
        time.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


def test_batch_timeout_holds_a_lone_request_for_companions(linear_v1):
    # A deadline far away: the first request can only leave with a second one, in one batch.
    settings = RuntimeSettings(enable_batching=True, max_batch_size=2, batch_timeout_micros=600_000_000,
                               num_batch_threads=1)
    with ModelServer({"linear": {1: linear_v1}}, settings=settings) as srv, ThreadPoolExecutor(1) as pool:
        first = pool.submit(TfsApi(srv).predict, {"instances": [[0.0, 0.0, 0.0]]})
        name = "linear/1/serving_default"
        _wait_for(lambda: srv.batcher_stats().get(name, {}).get("queue_depth") == 1, "first request queued")
        assert not first.done()
        second = TfsApi(srv).predict({"instances": [[1.0, 2.0, 3.0]]})
        assert len(first.result(timeout=60)["predictions"]) == 1 and len(second["predictions"]) == 1
        assert srv.batcher_stats()[name]["batch_sizes"] == {2: 1}


def test_batch_timeout_bounds_latency(linear_v1):
    # With no companion ever coming, the deadline alone lets a lone request run.
    settings = RuntimeSettings(enable_batching=True, max_batch_size=64, batch_timeout_micros=100_000, num_batch_threads=1)
    with ModelServer({"linear": {1: linear_v1}}, settings=settings) as srv:
        out = TfsApi(srv).predict({"instances": [[1.0, 2.0, 3.0]]})
        assert srv.batcher_stats()["linear/1/serving_default"]["batch_sizes"] == {1: 1}
    np.testing.assert_allclose(out["predictions"], models.linear_expected(np.array([[1.0, 2.0, 3.0]]), seed=0),
                               rtol=1e-5)


def test_closed_server_refuses_batched_requests(linear_v1):
    srv = ModelServer({"linear": {1: linear_v1}}, settings=RuntimeSettings(enable_batching=True, batch_timeout_micros=0))
    TfsApi(srv).predict({"instances": [[1.0, 2.0, 3.0]]})
    srv.close()
    with pytest.raises(errors.Unavailable):
        TfsApi(srv).predict({"instances": [[1.0, 2.0, 3.0]]})


def test_unbatched_view_shares_models_and_skips_the_batcher(tmp_path):
    import numpy as np

    from tfbatch.runtime import ModelServer, RuntimeSettings
    from tfbatch.testing.models import linear_expected, make_linear_model

    make_linear_model(tmp_path / "1")
    server = ModelServer({"m": {1: tmp_path / "1"}}, RuntimeSettings(enable_batching=True, max_batch_size=2))
    try:
        view = server.unbatched()
        x = np.ones((5, 3), np.float32)
        np.testing.assert_allclose(view.run({"x": x})["y"], linear_expected(x), rtol=1e-5)
        assert view.resolve() is server.resolve()  # same loaded servable, not a reload
        assert server.batcher_stats() == {} or all(s["batches"] == 0 for s in server.batcher_stats().values())
        server.run({"x": x})
        assert sum(s["batches"] for s in server.batcher_stats().values()) == 3  # 5 rows, max 2
    finally:
        server.close()
