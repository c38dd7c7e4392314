"""The dataflow's image batch predict (transform/predict.py): image jobs with no script run
whole batches reader -> model -> writer, and answer exactly what the per-request path answers."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tfbatch.artifact import package
from tfbatch.testing.models import make_image_bytes_model
from tests.integration.transform.ledger_files import done_keys
from tests.support.outputs import agree
from tfbatch import run_transform
from tfbatch.transform.progress import Progress

PAIR = """
import base64, json

def input_handler(data, context):
    return json.dumps({"instances": [{"b64": base64.b64encode(data.read()).decode("utf-8")}]})

def output_handler(response, context):
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8"))
    return response.content, context.accept_header
"""


def _png(value: int, size: int = 8) -> bytes:
    buf = io.BytesIO()
    rng = np.random.default_rng(value)
    Image.fromarray(rng.integers(0, 256, (size, size), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _outs(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.out"))
            if "_tfbatch" not in p.parts}


def _lane_stats(report) -> dict:
    (stats,) = report.to_dict()["batches"].values()
    return stats


@pytest.fixture(scope="module")
def savedmodel(tmp_path_factory):
    return make_image_bytes_model(tmp_path_factory.mktemp("img") / "1")


@pytest.fixture
def images(tmp_path):
    root = tmp_path / "in"
    (root / "sub").mkdir(parents=True)
    for i in range(11):
        (root / ("sub" if i % 4 == 0 else "") / f"i{i:02d}.png").write_bytes(_png(i))
    return root


def test_lane_gives_the_per_request_bytes_in_whole_batches(tmp_path, savedmodel, images):
    scripted = package([savedmodel], tmp_path / "pair.tar.gz", code_dir=_code(tmp_path, PAIR))
    common = dict(input=str(images), content_type="application/x-image", max_batch_size=4)
    lane = run_transform(model=str(savedmodel.parent), output=str(tmp_path / "lane"), **common)
    # handler_workers=0: the script's hooks in this process, on the pool's hops (worker
    # processes are compared with this in test_handler_pool.py).
    per_request = run_transform(model=str(scripted), output=str(tmp_path / "pair"), handler_workers=0, **common)
    assert lane.ok and per_request.ok
    stats = _lane_stats(lane)
    assert stats["predict"] == "image-batch" and _lane_stats(per_request)["hooks"] == "in-process (--handler-workers 0)"
    # 11 objects in batches of the explicit size 4: no probing, 4 + 4 + 3.
    assert stats["batch_sizes"] == {"3": 1, "4": 2} or stats["batch_sizes"] == {3: 1, 4: 2}
    assert stats["autotune"] is None and stats["precision"] == "fp32"
    assert "set by flags" in lane.summary()
    lane_outs, pair_outs = _outs(tmp_path / "lane"), _outs(tmp_path / "pair")
    assert len(lane_outs) == 11 and set(lane_outs) == set(pair_outs)
    for key, body in lane_outs.items():
        # Same document; floats agree to float32 rounding (a matmul's last bit depends on the
        # batch's size, and both paths form batches of whatever is in flight).
        ours, theirs = json.loads(body), json.loads(pair_outs[key])
        assert ours["predictions"][0]["classes"] == theirs["predictions"][0]["classes"]
        np.testing.assert_allclose(ours["predictions"][0]["probabilities"],
                                   theirs["predictions"][0]["probabilities"], rtol=1e-5, atol=1e-7)
        assert body.startswith(b'{"predictions":[{"classes":') and body.endswith(b"]}]}")


@pytest.mark.parametrize("name, body, failed_batches, run_alone", [
    # A PNG whose header is sound (so it passes the header check) and that ends with its IEND
    # chunk, but whose data is gone: only the model's decode finds out. The model refused the
    # batch of 4 holding it, then the half holding it; that half's two images ran alone,
    # unbatched, and the other half again as a batch (all four had run alone).
    ("bad.png", _png(99)[:40] + b"\x00" * 16 + _png(99)[-12:], 2, 2),
    # Cut off before its IEND chunk (an interrupted copy): it would fail its batch's model call,
    # so it runs alone from the start, with the error it would have had there.
    ("cut.png", _png(99)[:60], 0, 1),
])
def test_a_bad_image_fails_alone_and_its_batch_mates_are_written(tmp_path, savedmodel, images, name, body,
                                                                 failed_batches, run_alone):
    (images / name).write_bytes(body)
    out = tmp_path / "out"
    report = run_transform(model=str(savedmodel.parent), input=str(images), output=str(out),
                           content_type="application/x-image", max_batch_size=4)
    assert not report.ok and report.failed == 1 and report.succeeded == 11
    stats = _lane_stats(report)
    assert stats["failed_batches"] == failed_batches and stats["objects_run_alone"] == run_alone
    assert f"{name}.out" not in _outs(out) and len(_outs(out)) == 11
    (error,) = [json.loads(line) for line in (out / "_tfbatch" / "errors.jsonl").read_text().splitlines()]
    assert error["object"] == name and error["status"] >= 400
    # Re-run: with on_error=continue a bad input is a finished object too, as on the general path.
    again = run_transform(model=str(savedmodel.parent), input=str(images), output=str(out),
                          content_type="application/x-image", max_batch_size=4)
    assert again.skipped == 12 and again.objects == 0


def test_a_scripted_jobs_image_cut_short_runs_alone_and_fails_no_joint_call(tmp_path, savedmodel, images):
    # The same image job through an input_handler/output_handler pair: the script passes each
    # image as b64 and the model decodes it. A PNG cut off before its IEND chunk would fail the
    # joint model call of every request with it; its request runs alone from the start.
    (images / "cut.png").write_bytes(_png(99)[:60])
    scripted = package([savedmodel], tmp_path / "pair.tar.gz", code_dir=_code(tmp_path, PAIR))
    common = dict(model=str(scripted), content_type="application/x-image", max_batch_size=4)
    report = run_transform(input=str(images), output=str(tmp_path / "out"), **common)
    assert not report.ok and report.failed == 1 and report.succeeded == 11
    stats = _lane_stats(report)
    assert stats["failed_joint_calls"] == 0 and stats["requests_run_alone"] == 1, stats
    (error,) = [json.loads(line) for line in (tmp_path / "out" / "_tfbatch" / "errors.jsonl").read_text().splitlines()]
    assert error["object"] == "cut.png"
    (images / "cut.png").unlink()
    clean = run_transform(input=str(images), output=str(tmp_path / "clean"), **common)
    assert clean.ok
    agree(_outs(tmp_path / "out"), _outs(tmp_path / "clean"))


def test_without_max_batch_size_the_lane_probes_and_reports_its_choice(tmp_path, savedmodel):
    root = tmp_path / "in"
    root.mkdir()
    # The probe may spend 10 % of the job's 600 objects: 60 rows, fewer than it takes to time
    # a second size, so it keeps the default 16 and says why.
    for i in range(600):
        (root / f"{i:03d}.png").write_bytes(_png(i))
    report = run_transform(model=str(savedmodel.parent), input=str(root), output=str(tmp_path / "out"),
                           content_type="application/x-image")
    stats = _lane_stats(report)
    auto = stats["autotune"]
    assert report.ok and report.succeeded == 600
    assert auto["chosen"] == 16 and stats["max_batch_size"] == auto["chosen"] and auto["settled"]
    assert auto["probe_budget_rows"] == 60 and auto["probe_rows"] <= 60 and "budget" in auto["why"]
    assert auto["choices"] == [auto["chosen"]] and stats["workers"] >= 2
    assert stats["in_flight_objects"] == auto["chosen"] * (stats["workers"] + 2)
    assert stats["chosen_by"]["max_batch_size"] == "tuner" and "tuner: 16" in report.summary()
    # Probe batches are real work: every object was answered exactly once.
    assert sum(int(k) * v for k, v in stats["batch_sizes"].items()) == 600


def test_other_jobs_take_the_dataflow_and_refusals_are_reported_once(tmp_path, savedmodel, images):
    report = run_transform(model=str(savedmodel.parent), input=str(images), output=str(tmp_path / "o"),
                           content_type="application/octet-stream")
    assert report.failed == 11  # the service refuses that type, as before
    (stats,) = report.to_dict()["batches"].values()
    # Refused by the service, each answer reported through the pipeline; none ran twice.
    assert stats["lane"] == "dataflow" and stats["objects_run_alone"] == 0 and stats["objects"] == 11


def _code(tmp_path: Path, script: str) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    (code / "inference.py").write_text(textwrap.dedent(script))
    return code


SLOW_IMAGE_MODEL = """
import sys
import tensorflow as tf
from tensorflow.python.data.experimental.ops import testing as data_testing

class Slow(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
    def serve(self, image_bytes):
        # 0.2 s per batch (a tf.data sleep, kept in the graph), then one row per image.
        lengths = tf.cast(tf.strings.length(image_bytes), tf.float32)
        ds = tf.data.Dataset.from_tensors(lengths).apply(data_testing.sleep(200000))
        return {"length": ds.get_single_element()}

m = Slow()
tf.saved_model.save(m, sys.argv[1], signatures={"serving_default": m.serve})
"""


def test_sigkill_mid_lane_then_resume_gives_identical_outputs(tmp_path):
    model = tmp_path / "slow" / "1"
    subprocess.run([sys.executable, "-c", SLOW_IMAGE_MODEL, str(model)], check=True, timeout=300,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    inp = tmp_path / "in"
    inp.mkdir()
    for i in range(40):
        (inp / f"{i:02d}.png").write_bytes(_png(i, size=4 + i))
    args = [sys.executable, "-m", "tfbatch", "transform", "--model", str(model.parent), "--input", str(inp),
            "--content-type", "application/x-image", "--max-batch-size", "2", "--progress", "off"]
    killed = tmp_path / "killed"
    proc = subprocess.Popen([*args, "--output", str(killed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if len(done_keys(killed)) >= 4:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    recorded = done_keys(killed)
    finished = len(recorded)
    assert 4 <= finished < 40
    # The ledger only says "done" once its group's outputs are durable: every one has its .out.
    for key in recorded:
        assert (killed / (key + ".out")).exists(), key
    resumed = subprocess.run([*args, "--output", str(killed)], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert f"({finished} already done, skipped)" in resumed.stdout, resumed.stdout
    reference = tmp_path / "reference"
    subprocess.run([*args, "--output", str(reference)], check=True, capture_output=True, timeout=300)
    assert _outs(killed) == _outs(reference) and len(_outs(reference)) == 40
    assert json.loads(_outs(reference)["05.png.out"]) == {"predictions": [float(len(_png(5, size=9)))]}
    assert not [p for p in killed.rglob("*") if ".tmp-" in p.name]


def test_an_image_refused_by_its_header_never_enters_a_batch(tmp_path, savedmodel, images):
    (images / "text.png").write_bytes(b"not an image")
    out = tmp_path / "out"
    report = run_transform(model=str(savedmodel.parent), input=str(images), output=str(out),
                           content_type="application/x-image", max_batch_size=4)
    assert not report.ok and report.failed == 1 and report.succeeded == 11
    stats = _lane_stats(report)
    assert stats["failed_batches"] == 0 and stats["objects_run_alone"] == 1
    assert "text.png" in (out / "_tfbatch" / "errors.jsonl").read_text()


def test_flags_set_the_lanes_workers_and_cap_objects_in_flight(tmp_path, savedmodel, images):
    report = run_transform(model=str(savedmodel.parent), input=str(images), output=str(tmp_path / "o"),
                           content_type="application/x-image", max_batch_size=4, lane_workers=3,
                           max_concurrent_transforms=6)
    stats = _lane_stats(report)
    assert report.ok and report.succeeded == 11
    # 6 objects in flight at most: one batch of 4 at a time, never the 20 that 3 workers + 2 allow.
    assert stats["workers"] == 3 and stats["in_flight_objects"] == 6 and stats["autotune"] is None
    assert _outs(tmp_path / "o") == _outs_of_default(tmp_path, savedmodel, images)


def _outs_of_default(tmp_path: Path, savedmodel: Path, images: Path) -> dict[str, bytes]:
    run_transform(model=str(savedmodel.parent), input=str(images), output=str(tmp_path / "d"),
                  content_type="application/x-image", max_batch_size=4)
    return _outs(tmp_path / "d")


class _Threads(Progress):
    """Which threads finish objects (``update``) and end the listing (``set_total``)."""

    def __init__(self):
        super().__init__("log", io.StringIO())  # "off" would not be told the total
        self.finishers: set[str] = set()
        self.listers: set[str] = set()

    def set_total(self, total: int) -> None:
        self.listers.add(threading.current_thread().name)
        super().set_total(total)

    def update(self, result) -> None:
        self.finishers.add(threading.current_thread().name)
        super().update(result)


def test_local_outputs_have_one_writer_and_the_listing_a_thread_of_its_own(tmp_path, savedmodel, images):
    """Six model threads, chunks of 2, so several chunks are written at about the same time
    (on the tree before the change, by four writer threads); now one thread writes every
    local output (many threads creating small files in one folder are slower in sum,
    benchmarks/transform/profile/sixteen-cores.md), and the listing is iterated on its own
    thread, not in turns with the driver's chunk submissions. Outputs as the default job's."""
    threads = _Threads()
    report = run_transform(model=str(savedmodel.parent), input=str(images), output=str(tmp_path / "o"),
                           content_type="application/x-image", max_batch_size=2, lane_workers=6,
                           progress=threads)
    assert report.ok and report.succeeded == 11
    assert _lane_stats(report)["workers"] == 6
    assert threads.finishers == {"dataflow-write_0"}
    assert threads.listers == {"listing"}
    agree(_outs(tmp_path / "o"), _outs_of_default(tmp_path, savedmodel, images))  # batches of 2, not 4
