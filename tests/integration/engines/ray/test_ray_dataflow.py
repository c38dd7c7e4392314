"""Ray actors run the local engine's dataflow: the batch lanes, batches across objects, same outputs.

Each job runs on the local engine and on the two-node cluster at the same instance count. The
report's per-instance batch figures say which lane ran and how large the model's batches
were, so a Ray instance that fell back to one object at a time shows. A worker killed while
its batch lane is mid-job still leaves every output written and recorded.
"""

from __future__ import annotations

import io
import json
import os
import signal
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmarks.common.models import INFERENCE_SCRIPT
from tests.integration.transform.ledger_files import done_keys
from tfbatch import run_transform
from tfbatch.artifact import package
from tfbatch.engines.ray import RayEngine, RayOptions
from tfbatch.testing.models import make_image_bytes_model
from tfbatch.testing.ray_cluster import wait_until

OBJECTS = 40


def _png(value: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8), value % 256, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _inputs(root: Path, objects: int = OBJECTS) -> Path:
    root.mkdir(parents=True)
    for n in range(objects):
        (root / f"img-{n:03d}.png").write_bytes(_png(n * 7))
    return root


def _outputs(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.glob("*.out"))}


def _same_predictions(got: dict[str, bytes], expected: dict[str, bytes]) -> None:
    """Same objects; same answers within float rounding (batches may be cut differently)."""
    assert sorted(got) == sorted(expected)
    for name, body in expected.items():
        want, have = json.loads(body), json.loads(got[name])
        np.testing.assert_allclose(np.asarray(have["predictions"][0]["probabilities"], np.float64),
                                   np.asarray(want["predictions"][0]["probabilities"], np.float64), rtol=1e-5,
                                   err_msg=name)
        assert have["predictions"][0]["classes"] == want["predictions"][0]["classes"], name


def _lanes(report) -> list[tuple[str, str | None, float]]:
    """(lane, predict stage, mean rows per model call) per instance, from the report's batch figures."""
    found = []
    for stats in report.batches.values():
        calls = stats.get("batches") or 0
        found.append((stats.get("lane"), stats.get("predict"), (stats.get("rows") or 0) / calls if calls else 0.0))
    return sorted(found)


def _same_dataflow(on_ray, local) -> None:
    """Each Ray instance ran what each local instance ran, in batches across objects, not per object."""
    ray_lanes, local_lanes = _lanes(on_ray), _lanes(local)
    assert [(lane, predict) for lane, predict, _ in ray_lanes] == [(lane, predict) for lane, predict, _ in local_lanes]
    assert len(ray_lanes) == 2 and all(lane != "per-object" for lane, _, _ in ray_lanes), on_ray.batches
    assert all(rows > 1 for _, _, rows in ray_lanes + local_lanes), (on_ray.batches, local.batches)


def _engine(cluster) -> RayEngine:
    return RayEngine(RayOptions(address=cluster.address, cpus_per_instance=0.5))


@pytest.fixture(scope="module")
def plain_model(tmp_path_factory) -> Path:
    return make_image_bytes_model(tmp_path_factory.mktemp("lane") / "sm" / "1").parent


def test_batch_lane_job_runs_the_lane_on_ray_with_the_local_outputs(ray_cluster, plain_model, tmp_path):
    inputs = _inputs(tmp_path / "in")
    common = dict(model=str(plain_model), input=str(inputs), content_type="application/x-image",
                  instance_count=2, max_batch_size=8)
    local = run_transform(output=str(tmp_path / "local"), **common)
    on_ray = run_transform(output=str(tmp_path / "ray"), engine=_engine(ray_cluster), **common)

    assert on_ray.ok and local.ok, on_ray.summary()
    assert on_ray.objects == local.objects == OBJECTS
    _same_predictions(_outputs(tmp_path / "ray"), _outputs(tmp_path / "local"))
    _same_dataflow(on_ray, local)
    assert set(done_keys(tmp_path / "ray")) == set(done_keys(tmp_path / "local"))


def test_scripted_job_runs_the_script_lane_on_ray_with_the_local_outputs(ray_cluster, plain_model, tmp_path):
    root = tmp_path / "art"
    (root / "code").mkdir(parents=True)
    (root / "code" / "inference.py").write_text(INFERENCE_SCRIPT)
    archive = package([plain_model / "1"], root / "model.tar.gz", code_dir=root / "code")
    inputs = _inputs(tmp_path / "in", 24)
    (inputs / "img-005.png").write_bytes(b"not an image")  # one bad object: one error line on both
    common = dict(model=str(archive), input=str(inputs), content_type="application/x-image",
                  instance_count=2, handler_workers=1, max_batch_size=4)
    local = run_transform(output=str(tmp_path / "local"), **common)
    on_ray = run_transform(output=str(tmp_path / "ray"), engine=_engine(ray_cluster), **common)

    assert not on_ray.fatal, on_ray.fatal
    assert (on_ray.objects, on_ray.succeeded, on_ray.failed) == (local.objects, local.succeeded, local.failed) \
        == (24, 23, 1)
    assert [e["object"] for e in on_ray.errors] == [e["object"] for e in local.errors] == ["img-005.png"]
    _same_predictions(_outputs(tmp_path / "ray"), _outputs(tmp_path / "local"))
    _same_dataflow(on_ray, local)


def test_killed_actor_mid_lane_job_still_yields_complete_output(ray_cluster, plain_model, tmp_path):
    slow = make_image_bytes_model(tmp_path / "slow" / "1", delay_s=0.5).parent
    objects = 60
    inputs = _inputs(tmp_path / "in", objects)
    out = tmp_path / "out"
    # Batches of two, one lane worker, half a second each: 15 batches per instance, still
    # running when one instance's process is killed.
    common = dict(input=str(inputs), content_type="application/x-image", instance_count=2,
                  max_batch_size=2, lane_workers=1)
    box: dict = {}

    def job() -> None:
        try:
            box["report"] = run_transform(model=str(slow), output=str(out), engine=_engine(ray_cluster), **common)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            box["error"] = exc

    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    assert wait_until(lambda: len(set(done_keys(out))) >= 2 or not thread.is_alive(), timeout=180)
    victims = ray_cluster.worker_pids("InstanceActor")
    assert victims, "no instance actor process found in the cluster"
    done_at_kill = len(set(done_keys(out)))
    os.kill(victims[0], signal.SIGKILL)
    thread.join(timeout=300)
    assert not thread.is_alive(), "the job did not finish after its worker was killed"
    if "error" in box:
        raise box["error"]
    report = box["report"]

    assert done_at_kill < objects, "the kill came after the job had finished: it proves nothing"
    assert report.ok, report.summary()
    assert report.objects == objects  # each object reported exactly once
    assert len(set(done_keys(out))) == objects  # and recorded in the ledger
    assert victims[0] not in ray_cluster.worker_pids("InstanceActor")
    # Complete and right: the same answers as the fast model's on the local engine.
    run_transform(model=str(plain_model), output=str(tmp_path / "ref"), **common)
    _same_predictions(_outputs(out), _outputs(tmp_path / "ref"))
