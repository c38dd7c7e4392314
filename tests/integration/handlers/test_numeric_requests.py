"""A request body of numbers alone, read from its bytes (``TfsApi.numeric_predict``), answers
exactly as the general way answers the same numbers: /invocations, the in-process
``requests.post`` of a script, and the TF Serving API. The general way is reached with the
same numbers and a ``signature_name`` key, which ``codec.decode_numeric`` does not read."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tfbatch.handlers.service import InferenceService, InvocationRequest
from tfbatch.handlers.user_code import load_handlers
from tfbatch.tfs.api import TfsApi

ROWS = [[1.0, 2.0, 3.0], [0.5, 0.0, -1.0], [1e-3, -2.5e2, 7.0]]

# Each body, and the same request for the general way.
BODIES = [
    ({"instances": ROWS}, {"signature_name": "serving_default", "instances": ROWS}),
    ({"inputs": ROWS}, {"signature_name": "serving_default", "inputs": ROWS}),
    ({"instances": [[1, 2, 3]]}, {"signature_name": "serving_default", "instances": [[1, 2, 3]]}),  # ints
    ({"instances": [[1.0]]}, {"signature_name": "serving_default", "instances": [[1.0]]}),  # too narrow: a 400
]


def _raw(body: dict) -> bytes:
    return json.dumps(body).encode()


def test_numbers_alone_are_read_from_the_bytes_and_other_bodies_are_not(linear_server):
    api = TfsApi(linear_server)
    found = api.numeric_predict(_raw({"instances": ROWS}))
    assert found is not None
    outputs, fmt, sig = found
    general, general_fmt, _ = api.predict_arrays({"instances": ROWS})
    assert fmt == general_fmt == "row" and sig.name == "serving_default"
    for name in general:
        np.testing.assert_array_equal(outputs[name], general[name])
    assert api.numeric_predict(_raw({"instances": ROWS}), "model", 1) is not None
    for raw, name, version in [
        (_raw({"signature_name": "serving_default", "instances": ROWS}), None, None),
        (_raw({"instances": [[1.0, 2.0, 3.0], [1.0, 2.0]]}), None, None),  # ragged
        (_raw({"instances": [["a", "b", "c"]]}), None, None),
        (b"[[1, 2, 3]]", None, None),  # a bare list: /invocations wraps it after parsing
        (_raw({"instances": ROWS}), "other", None),  # no such model: the general way names it
        (_raw({"instances": ROWS}), "model", 9),
    ]:
        assert api.numeric_predict(raw, name, version) is None, raw


@pytest.mark.parametrize("attributes", [None, "tfs-model-version=1"])
@pytest.mark.parametrize("fast, general", BODIES)
def test_invocations_answer_numbers_alone_as_the_general_way(linear_server, fast, general, attributes):
    service = InferenceService(linear_server)
    answers = [service.invoke(InvocationRequest(body=_raw(body), content_type="application/json",
                                                custom_attributes=attributes))
               for body in (fast, general)]
    assert answers[0].status == answers[1].status
    assert answers[0].body == answers[1].body
    assert answers[0].status == (400 if fast.get("instances") == [[1.0]] else 200), answers[0].body


NUMBERS_SCRIPT = '''
import json

def input_handler(data, context):
    return data.read().decode("utf-8")  # the client's JSON, sent on as it came

def output_handler(response, context):
    return json.dumps({"status": response.status_code, "body": response.json()}), "application/json"
'''


@pytest.mark.parametrize("fast, general", BODIES)
def test_a_scripts_in_process_post_answers_numbers_alone_as_the_general_way(write_script, tmp_path, linear_server,
                                                                           fast, general):
    handlers = load_handlers(write_script(tmp_path / "code", NUMBERS_SCRIPT))
    service = InferenceService(linear_server, handlers)
    answers = [service.invoke(InvocationRequest(body=_raw(body), content_type="application/json"))
               for body in (fast, general)]
    assert answers[0].status == answers[1].status == 200, answers[0].body
    assert answers[0].body == answers[1].body
