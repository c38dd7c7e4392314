"""A script's request of numbers, noted by its ``json.dumps`` look-alike as it is written
(``jsonenc.written_numbers``), reaches the model as the same numbers as its text, in worker
processes and in the job's process, whatever the script does with its lists afterwards; and
with the standard library's ``json`` (``TFBATCH_STDLIB_JSON=1``), read back from the text, the
outputs are the same bytes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tfbatch import run_transform
from tfbatch.runtime.jsonenc import NOTE_AT
from tfbatch.testing.models import linear_expected

# Each file holds a seed; the script sends 300 rows of 3 floats (~20 KB of JSON, noted), one of
# them below 1e-4 (which orjson spells otherwise), a whole-number request for every third seed,
# and changes its lists after json.dumps returned for every fourth.
SCRIPT = """
import json

import numpy as np


def rows_for(seed):
    rows = np.random.default_rng(seed).normal(size=(300, 3))
    rows[0, 0] = 3e-5 * (seed + 1)
    if seed % 3 == 2:
        rows = np.round(rows * 100)
        return rows.astype(int).tolist()
    return rows.tolist()


def input_handler(data, context):
    seed = int(data.read().decode())
    rows = rows_for(seed)
    text = json.dumps({"instances": rows})
    if seed % 4 == 3:
        rows[0][0] = 1e6  # after the text was written: the model must not see it
    return text


def output_handler(response, context):
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8"))
    return response.content, context.accept_header
"""


def _rows(seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(300, 3))
    rows[0, 0] = 3e-5 * (seed + 1)
    return np.round(rows * 100) if seed % 3 == 2 else rows


def _outs(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.glob("*.out"))}


def test_noted_requests_reach_the_model_as_their_text_reads(tmp_path, linear_model, with_script, monkeypatch):
    assert len(json.dumps({"instances": _rows(0).tolist()})) > NOTE_AT  # the requests are noted
    inp = tmp_path / "in"
    inp.mkdir()
    for seed in range(12):
        (inp / f"s{seed:02d}.txt").write_text(str(seed))
    archive = with_script(tmp_path, linear_model, SCRIPT)
    common = dict(model=str(archive), input=str(inp), content_type="text/plain", max_batch_size=4)
    monkeypatch.delenv("TFBATCH_STDLIB_JSON", raising=False)
    workers = run_transform(output=str(tmp_path / "workers"), handler_workers=2, **common)
    inline = run_transform(output=str(tmp_path / "inline"), handler_workers=0, **common)
    monkeypatch.setenv("TFBATCH_STDLIB_JSON", "1")
    stdlib = run_transform(output=str(tmp_path / "stdlib"), handler_workers=2, **common)
    assert workers.ok and inline.ok and stdlib.ok and workers.records == 12
    a, b, c = _outs(tmp_path / "workers"), _outs(tmp_path / "inline"), _outs(tmp_path / "stdlib")
    assert len(a) == 12 and a == b == c
    for seed in range(12):
        got = np.array(json.loads(a[f"s{seed:02d}.txt.out"])["predictions"], np.float32)
        np.testing.assert_allclose(got, linear_expected(_rows(seed)), rtol=1e-5, atol=1e-5)


# The request of the script below: it names serving_default, doubled or a missing signature.
_NAMED_REQUEST = """
    seed = int(data.read().decode())
    rows = (np.random.default_rng(seed).normal(size=(300, 3))).tolist()
    named = ["serving_default", "doubled", "missing"][seed % 3]
    text = json.dumps({"signature_name": named, "instances": rows})
"""

# A request naming its signature, and a script returning its text's bytes: both still noted.
NAMED_SCRIPT = """
import json

import numpy as np


def input_handler(data, context):""" + _NAMED_REQUEST + """\
    return text.encode("utf-8") if seed % 2 else text


def output_handler(response, context):
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8"))
    return response.content, context.accept_header
"""


def _two_signatures(path: Path) -> Path:
    """serving_default: y = x; doubled: y = 2x (x float32 [None, 3])."""
    import tensorflow as tf

    class Two(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def same(self, x):
            return {"y": x}

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def doubled(self, x):
            return {"y": x * 2.0}

    module = Two()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.same, "doubled": module.doubled})
    return path


def _named_job(tmp_path: Path, with_script, script: str, seeds: int = 9) -> dict:
    """run_transform's arguments for ``script`` over ``seeds`` seeds and the two-signature model."""
    inp = tmp_path / "in"
    inp.mkdir()
    for seed in range(seeds):
        (inp / f"s{seed}.txt").write_text(str(seed))
    _two_signatures(tmp_path / "model" / "1")
    archive = with_script(tmp_path, tmp_path / "model", script)
    return dict(model=str(archive), input=str(inp), content_type="text/plain", max_batch_size=4)


def test_a_noted_request_runs_the_signature_it_names(tmp_path, with_script, monkeypatch):
    common = _named_job(tmp_path, with_script, NAMED_SCRIPT)
    monkeypatch.delenv("TFBATCH_STDLIB_JSON", raising=False)
    runs = {"workers": run_transform(output=str(tmp_path / "workers"), handler_workers=2, **common),
            "inline": run_transform(output=str(tmp_path / "inline"), handler_workers=0, **common)}
    monkeypatch.setenv("TFBATCH_STDLIB_JSON", "1")
    runs["stdlib"] = run_transform(output=str(tmp_path / "stdlib"), handler_workers=2, **common)
    outs = {name: _outs(tmp_path / name) for name in runs}
    for name, result in runs.items():
        assert result.records == 9 and result.failed_records == 3, name  # the three naming "missing"
    assert outs["workers"] == outs["inline"] == outs["stdlib"]
    for seed in range(9):
        rows = np.random.default_rng(seed).normal(size=(300, 3)).astype(np.float32)
        out = outs["workers"].get(f"s{seed}.txt.out")
        if seed % 3 == 2:
            assert out is None
            continue
        got = np.array(json.loads(out)["predictions"], np.float32)
        np.testing.assert_array_equal(got, rows * (2.0 if seed % 3 == 1 else 1.0))
    errors = (tmp_path / "workers" / "_tfbatch").rglob("*")
    assert any(b"missing" in p.read_bytes() for p in errors if p.is_file())  # the error names the signature


# A single handler POSTing its noted request to context.rest_uri (the text, or its bytes), and
# writing back whatever the endpoint answered: its predictions, or its status and error (a
# missing signature; rows one number too wide for the signature's [None, 3]).
HANDLER_SCRIPT = """
import json

import numpy as np
import requests

from tfbatch.runtime.jsonenc import written_numbers


def handler(data, context):
    seed = int(data.read().decode())
    width = 4 if seed % 4 == 3 else 3
    rows = (np.random.default_rng(seed).normal(size=(300, width))).tolist()
    named = ["serving_default", "doubled", "missing"][seed % 3]
    text = json.dumps({"signature_name": named, "instances": rows})
    rows[0][0] = 1e6  # after the text was written: the model must not see it
    response = requests.post(context.rest_uri, data=text.encode("utf-8") if seed % 2 else text)
    left = written_numbers(text) is not None  # the note is still there unless the answer took it
    return json.dumps({"note_left": left, "status": response.status_code,
                       "answer": response.content.decode("utf-8")}), "application/json"
"""


def test_a_handlers_noted_post_reaches_the_model_as_its_array(tmp_path, with_script, monkeypatch):
    common = _named_job(tmp_path, with_script, HANDLER_SCRIPT, seeds=12)
    monkeypatch.delenv("TFBATCH_STDLIB_JSON", raising=False)
    noted = run_transform(output=str(tmp_path / "noted"), **common)
    monkeypatch.setenv("TFBATCH_STDLIB_JSON", "1")  # nothing noted: every text read back
    stdlib = run_transform(output=str(tmp_path / "stdlib"), **common)
    assert noted.ok and stdlib.ok and noted.records == 12
    outs = _outs(tmp_path / "noted")
    # the same bytes, errors included, whether the answer took the array or read the text
    assert outs == _outs(tmp_path / "stdlib") and len(outs) == 12
    for seed in range(12):
        out = json.loads(outs[f"s{seed}.txt.out"])
        assert out["note_left"] is False  # the in-process answer took the note (or nothing was noted)
        if seed % 3 == 2:
            assert out["status"] == 404 and "missing" in out["answer"]
        elif seed % 4 == 3:
            # the general way's words, whichever way the body was read
            assert out["status"] == 400 and "got float64 with shape [300, 4]" in out["answer"]
        else:
            rows = np.random.default_rng(seed).normal(size=(300, 3)).astype(np.float32)
            got = np.array(json.loads(out["answer"])["predictions"], np.float32)
            np.testing.assert_array_equal(got, rows * (2.0 if seed % 3 == 1 else 1.0))
