"""tfbatch.ray_data.Predictor in ``ds.map_batches`` on the real two-node Ray cluster."""

from __future__ import annotations

import json
import textwrap

import numpy as np

from tfbatch.artifact import package
from tfbatch.testing.models import linear_expected

ROWS = [[1.0, 2.0, 3.0], [0.5, -1.0, 4.0], [2.0, 0.0, -3.0], [7.0, 1.0, 1.0], [0.0, 0.0, 1.0]]

CSV_SCRIPT = """
import json

def input_handler(data, context):
    assert context.request_content_type == "text/csv", context
    row = [float(v) for v in data.read().decode().split(",")]
    return json.dumps({"instances": [row]})

def output_handler(response, context):
    if response.status_code != 200:
        raise ValueError(response.content.decode())
    y = response.json()["predictions"][0]
    return ",".join(f"{v:.4f}" for v in y), "text/csv"
"""


def _run(ray_cluster, items, **kwargs):
    import ray

    from tfbatch.ray_data import Predictor

    ray.init(address=ray_cluster.address)
    ds = ray.data.from_items(items).map_batches(
        Predictor, fn_constructor_kwargs=kwargs, concurrency=1, batch_size=8, num_cpus=0.5)
    return ds.take_all()


def test_json_rows_through_the_default_handling(ray_cluster, linear_model):
    items = [{"id": i, "data": json.dumps({"instances": [r]})} for i, r in enumerate(ROWS)]
    rows = sorted(_run(ray_cluster, items, model_data=str(linear_model)), key=lambda r: r["id"])
    assert [r["error"] for r in rows] == [None] * len(ROWS)
    got = [json.loads(r["output"])["predictions"][0] for r in rows]
    np.testing.assert_allclose(got, linear_expected(np.array(ROWS, np.float32)), rtol=1e-5)


def test_an_artifacts_handlers_run_and_a_bad_row_costs_only_its_own_output(ray_cluster, linear_model, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "inference.py").write_text(textwrap.dedent(CSV_SCRIPT))
    archive = package([linear_model / "1"], tmp_path / "model.tar.gz", code_dir=code)
    items = [{"id": i, "bytes": ",".join(map(str, r)).encode()} for i, r in enumerate(ROWS)]
    items.append({"id": len(ROWS), "bytes": b"not,a,number"})
    rows = sorted(_run(ray_cluster, items, model_data=str(archive), content_type="text/csv"),
                  key=lambda r: r["id"])
    expected = linear_expected(np.array(ROWS, np.float32))
    for row, want in zip(rows, expected):
        assert row["error"] is None
        np.testing.assert_allclose([float(v) for v in row["output"].split(",")], want, rtol=1e-3)
    assert rows[-1]["output"] is None and "could not convert" in rows[-1]["error"]
