"""The driver's forwarded environment (AWS_*, TF_CPP_*, TFBATCH_*, FSSPEC_* ...) inside the Ray actors.

It travels as an actor argument applied first thing in the actor (not as a Ray runtime_env,
which made every actor wait for a worker process started for it). The job's own handler
script reports what its process sees: in the actor itself and in a handler worker process
the actor starts. The session cluster's raylets were started before these variables were
set, so only the forwarding can bring them.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from tfbatch import run_transform
from tfbatch.testing.models import scripted_archive
from tfbatch.engines.ray import RayEngine, RayOptions

REPORT_SCRIPT = """
import json
import os

def input_handler(data, context):
    row = [float(v) for v in data.read().decode().split(",")]
    return json.dumps({"instances": [row]})

def output_handler(response, context):
    from fsspec.config import conf
    seen = {"probe": os.environ.get("TFBATCH_TEST_PROBE"), "tf": os.environ.get("TF_CPP_MIN_LOG_LEVEL"),
            "fsspec": conf.get("tfbatchprobe"), "pid": os.getpid()}
    return json.dumps(seen), "application/json"
"""


@pytest.fixture(scope="module")
def archive(tmp_path_factory, linear_model):
    return scripted_archive([linear_model / "1"], REPORT_SCRIPT, tmp_path_factory.mktemp("ray-env"))


def _inputs(root):
    root.mkdir()
    for n in range(4):
        (root / f"row{n}.csv").write_text(f"{n},1,2")
    return root


def _seen(archive, inputs, out, options: RayOptions, **extra) -> list[dict]:
    report = run_transform(model=str(archive), input=str(inputs), output=str(out), content_type="text/csv",
                           instance_count=2, engine=RayEngine(options), **extra)
    assert report.ok and report.objects == 4, report.summary()
    return [json.loads(p.read_text()) for p in sorted(out.glob("*.out"))]


@pytest.mark.parametrize("handler_workers", [0, 1], ids=["in-the-actor", "in-a-handler-worker"])
def test_forwarded_env_reaches_the_actors_and_their_handler_workers(ray_cluster, archive, tmp_path, monkeypatch,
                                                                    handler_workers):
    probe = uuid.uuid4().hex
    monkeypatch.setenv("TFBATCH_TEST_PROBE", probe)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    monkeypatch.setenv("FSSPEC_TFBATCHPROBE_COLOUR", "blue")  # fsspec reads these when it is imported
    seen = _seen(archive, _inputs(tmp_path / "in"), tmp_path / "out",
                 RayOptions(address=ray_cluster.address, cpus_per_instance=0.5), handler_workers=handler_workers)
    assert [s["probe"] for s in seen] == [probe] * 4
    assert {s["tf"] for s in seen} == {"3"}
    assert [s["fsspec"] for s in seen] == [{"colour": "blue"}] * 4
    assert os.getpid() not in {s["pid"] for s in seen}  # the hooks ran on the cluster, not here


def test_a_later_job_sees_only_its_own_forwarded_env(ray_cluster, archive, tmp_path, monkeypatch):
    """Two jobs of one driver (Ray may hand the second job's actor a worker process of the first
    job's Ray job): a variable forwarded by the first and unset for the second is gone, and a job
    with forwarding off sees none of it."""
    import ray

    ray.init(address=ray_cluster.address, namespace="tfbatch", logging_level="ERROR", log_to_driver=False)
    inputs = _inputs(tmp_path / "in")
    options = RayOptions(address=ray_cluster.address, cpus_per_instance=0.5)
    monkeypatch.setenv("TFBATCH_TEST_PROBE", "first")
    monkeypatch.setenv("FSSPEC_TFBATCHPROBE_COLOUR", "blue")
    assert {s["probe"] for s in _seen(archive, inputs, tmp_path / "first", options)} == {"first"}
    monkeypatch.delenv("TFBATCH_TEST_PROBE")
    monkeypatch.delenv("FSSPEC_TFBATCHPROBE_COLOUR")
    second = _seen(archive, inputs, tmp_path / "second", options)
    assert [(s["probe"], s["fsspec"]) for s in second] == [(None, None)] * 4
    monkeypatch.setenv("TFBATCH_TEST_PROBE", "not forwarded")
    off = _seen(archive, inputs, tmp_path / "off", RayOptions(address=ray_cluster.address, cpus_per_instance=0.5,
                                                              forward_env=False))
    assert {s["probe"] for s in off} == {None}
