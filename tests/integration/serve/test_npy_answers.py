"""``Accept: application/x-npy`` against a real ``tfbatch serve``, read by a real ``requests`` client."""

from __future__ import annotations

import io

import numpy as np
import pytest
import requests

from .conftest import ServerProcess

X = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0], [0.1, 0.2, 0.3]], dtype=np.float32)
NPY = {"Accept": "application/x-npy"}


@pytest.fixture(scope="module")
def server(linear_dir, tmp_path_factory):
    srv = ServerProcess(linear_dir, tmp_path_factory.mktemp("npy")).wait_ready()
    yield srv
    assert srv.stop() == 0, srv.output()


@pytest.mark.parametrize("path", ["/invocations", "/v1/models/model:predict", "/endpoints/e/invocations"])
@pytest.mark.parametrize("body", [{"instances": X.tolist()}, {"inputs": X.tolist()}])
def test_npy_answer_is_the_json_answer_exactly(server, path, body):
    as_json = requests.post(f"{server.url}{path}", json=body, timeout=30)
    as_npy = requests.post(f"{server.url}{path}", json=body, headers=NPY, timeout=30)
    assert as_json.status_code == 200 and as_npy.status_code == 200, as_npy.text
    assert as_json.headers["content-type"] == "application/json"
    assert as_npy.headers["content-type"] == "application/x-npy"
    arr = np.load(io.BytesIO(as_npy.content), allow_pickle=False)
    want = np.asarray(next(iter(as_json.json().values())), dtype=np.float32)
    assert arr.dtype == np.float32 and arr.shape == (3, 2)
    np.testing.assert_array_equal(arr, want)  # the JSON's shortest float32 digits read back to the same bits


def test_other_accept_values_still_get_json(server):
    for accept in ("application/json", "*/*", "text/csv", "application/x-npy;q=0"):
        r = requests.post(f"{server.url}/invocations", json={"instances": X.tolist()}, headers={"Accept": accept},
                          timeout=30)
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert len(r.json()["predictions"]) == 3


def test_npy_is_refused_with_406_where_it_cannot_answer(server):
    r = requests.post(f"{server.url}/invocations", json={"examples": [{"x": 1.0}]}, timeout=30,
                      headers={**NPY, "X-Amzn-SageMaker-Custom-Attributes": "tfs-method=classify"})
    assert r.status_code == 406 and "only answered by predict" in r.json()["error"]
    r = requests.post(f"{server.url}/v1/models/model:regress", json={"examples": [{"x": 1.0}]}, headers=NPY,
                      timeout=30)
    assert r.status_code == 406 and "not regress" in r.json()["error"]
    # Bad input is still a 400, whatever the Accept.
    r = requests.post(f"{server.url}/invocations", json={"instances": [[1.0]]}, headers=NPY, timeout=30)
    assert r.status_code == 400


@pytest.mark.parametrize("path", ["/invocations", "/v1/models/model:predict", "/v1/models/model/versions/1:predict"])
@pytest.mark.parametrize("headers", [{}, NPY])
def test_numbers_alone_answer_as_the_general_way(server, path, headers):
    """A body of numbers alone is read from its bytes (TfsApi.numeric_predict); the same numbers
    with a signature_name go the general way. Both answers are the same bytes."""
    for key in ("instances", "inputs"):
        fast = requests.post(f"{server.url}{path}", json={key: X.tolist()}, headers=headers, timeout=30)
        general = requests.post(f"{server.url}{path}", json={"signature_name": "serving_default", key: X.tolist()},
                                headers=headers, timeout=30)
        assert fast.status_code == general.status_code == 200, fast.text
        assert fast.content == general.content
    narrow = [requests.post(f"{server.url}{path}", json=body, headers=headers, timeout=30)
              for body in ({"instances": [[1.0]]}, {"signature_name": "serving_default", "instances": [[1.0]]})]
    assert narrow[0].status_code == narrow[1].status_code == 400
    assert narrow[0].json() == narrow[1].json()
