"""The Ray engine on a real two-node cluster: same bytes as the local engine, GPU-free."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.transform.ledger_files import done_keys
from tfbatch import run_transform
from tfbatch.engines.ray import TASK_EVENTS_VAR, RayEngine, RayOptions
from tfbatch.testing.models import linear_expected
from tfbatch.transform import TransformSpec


def _spec(model: Path, inputs: Path, out: Path, **extra) -> TransformSpec:
    return TransformSpec.build(
        model=str(model), input=str(inputs), output=str(out), content_type="application/jsonlines",
        split_type="Line", batch_strategy="MultiRecord", assemble_with="Line", instance_count=2,
        max_batch_size=4, max_concurrent_transforms=2, **extra,
    )


def test_outputs_byte_identical_to_local_engine(ray_cluster, linear_model, tmp_path, write_inputs, read_outputs,
                                               monkeypatch):
    import os

    import numpy as np

    # The engine turns the driver's task events off around ray.init only: nothing is left set.
    monkeypatch.delenv(TASK_EVENTS_VAR, raising=False)
    inputs = write_inputs(tmp_path / "in", objects=14)
    local = run_transform(_spec(linear_model, inputs, tmp_path / "local"))
    assert local.ok and local.objects == 14

    on_ray = run_transform(_spec(linear_model, inputs, tmp_path / "ray"),
                           engine=RayEngine(RayOptions.from_env(address=ray_cluster.address, cpus_per_instance=0.5)))
    assert on_ray.ok, on_ray.summary()
    assert (on_ray.objects, on_ray.records, on_ray.instances) == (14, 42, 2)
    assert TASK_EVENTS_VAR not in os.environ

    expected = read_outputs(tmp_path / "local")
    assert len(expected) == 14 and "part1/obj0001.jsonl.out" in expected
    assert read_outputs(tmp_path / "ray") == expected
    # The outputs are right, not just equal: row i of the object answers input row i.
    first = json.loads(expected["obj0000.jsonl.out"].splitlines()[1])
    got = np.ravel(first["predictions"] if isinstance(first, dict) else first)
    np.testing.assert_allclose(got, linear_expected(np.array([[0, 1, 1.0]], np.float32))[0], rtol=1e-5)
    # Same ledger: a re-run on either engine would skip the same objects.
    markers = lambda root: sorted(set(done_keys(root)))  # noqa: E731
    assert markers(tmp_path / "ray") == markers(tmp_path / "local")
    report = json.loads((tmp_path / "ray" / "_tfbatch" / "report.json").read_text())
    assert report["ok"] and report["objects"] == 14


def test_remote_reads_and_resume(ray_cluster, linear_model, tmp_path, write_inputs, read_outputs, monkeypatch):
    import os

    monkeypatch.setenv(TASK_EVENTS_VAR, "1000")  # a user's own setting is left as it is
    inputs = write_inputs(tmp_path / "in", objects=8)
    spec = _spec(linear_model, inputs, tmp_path / "out")
    # The reference in-process (one instance): outputs do not depend on the instance count.
    run_transform(spec.model_copy(update={"output": str(tmp_path / "local"), "instance_count": 1}))

    engine = RayEngine(RayOptions(address=ray_cluster.address, cpus_per_instance=0.5, remote_read=True))
    results = []
    summaries = engine.run(spec.model_copy(update={"engine": "ray"}), results.append)
    assert sorted(r.key + ".out" for r in results) == sorted(read_outputs(tmp_path / "local"))
    assert all(r.ok for r in results)
    assert sum(s.objects for s in summaries) == 8 and not any(s.fatal for s in summaries)
    assert read_outputs(tmp_path / "out") == read_outputs(tmp_path / "local")

    # Resume: the ledger marks everything done, so a second run processes nothing.
    again = run_transform(spec, engine=RayEngine(RayOptions.from_env(address=ray_cluster.address, cpus_per_instance=0.5)))
    assert again.ok and again.objects == 0 and again.skipped == 8
    assert os.environ[TASK_EVENTS_VAR] == "1000"


def test_model_that_cannot_load_is_an_instance_failure(ray_cluster, tmp_path, write_inputs, read_outputs):
    inputs = write_inputs(tmp_path / "in", objects=3)
    broken = tmp_path / "model"
    (broken / "1").mkdir(parents=True)
    (broken / "1" / "saved_model.pb").write_bytes(b"not a SavedModel")
    report = run_transform(_spec(broken, inputs, tmp_path / "out"),
                           engine=RayEngine(RayOptions.from_env(address=ray_cluster.address, cpus_per_instance=0.5)))
    assert not report.ok
    assert len(report.fatal) == 2 and all("instance" in f for f in report.fatal)
    assert read_outputs(tmp_path / "out") == {}


def test_command_line_engine_ray(ray_cluster, linear_model, tmp_path, write_inputs, read_outputs):
    """``tfbatch transform --engine ray --ray-address ...`` gives the local engine's bytes."""
    import os
    import subprocess
    import sys

    inputs = write_inputs(tmp_path / "in", objects=6)
    common = ["--model", str(linear_model), "--input", str(inputs), "--content-type", "application/jsonlines",
              "--split-type", "Line", "--assemble-with", "Line", "--instance-count", "2", "--progress", "off"]
    env = {**os.environ, "TFBATCH_RAY_CPUS_PER_INSTANCE": "0.5"}
    for engine in ("local", "ray"):
        proc = subprocess.run(
            [sys.executable, "-m", "tfbatch", "transform", *common, "--output", str(tmp_path / engine),
             "--engine", engine, "--ray-address", ray_cluster.address],
            capture_output=True, text=True, timeout=240, env=env,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(read_outputs(tmp_path / "ray")) == 6
    assert read_outputs(tmp_path / "ray") == read_outputs(tmp_path / "local")


HANDLER = """
import requests


def handler(data, context):
    response = requests.post(context.rest_uri, data=data.read())
    return response.content, context.accept_header
"""


def test_an_instance_runs_as_several_actors_as_the_local_engine_runs_several_processes(
        ray_cluster, linear_model, tmp_path, write_inputs, read_outputs, monkeypatch):
    import shutil

    from tfbatch.engines import local

    inputs = write_inputs(tmp_path / "in", objects=8)
    engine = lambda: RayEngine(RayOptions.from_env(address=ray_cluster.address, cpus_per_instance=0.5))  # noqa: E731
    one = run_transform(_spec(linear_model, inputs, tmp_path / "one").model_copy(update={"instance_count": 1}))
    two = run_transform(_spec(linear_model, inputs, tmp_path / "two").model_copy(
        update={"instance_count": 1, "processes": 2}), engine=engine())
    assert one.ok and two.ok and (two.instances, two.processes, two.objects) == (1, 2, 8), two.summary()
    assert read_outputs(tmp_path / "two") == read_outputs(tmp_path / "one") and len(read_outputs(tmp_path / "one")) == 8

    # By default the local engine's rule: a single handler gets 2 from 2 CPUs (the test
    # cluster's), each extra one only for MIN_OBJECTS_PER_PROCESS objects.
    model = tmp_path / "model"
    shutil.copytree(linear_model, model)
    (model / "code").mkdir()
    (model / "code" / "inference.py").write_text(HANDLER)
    handler_spec = lambda out: TransformSpec.build(  # noqa: E731
        model=str(model), input=str(inputs), output=str(out), content_type="application/jsonlines")
    small = run_transform(handler_spec(tmp_path / "small"), engine=engine())
    assert small.ok and small.processes == 1, small.summary()
    monkeypatch.setattr(local, "MIN_OBJECTS_PER_PROCESS", 4)  # eight objects now pay for two actors
    big = run_transform(handler_spec(tmp_path / "big"), engine=engine())
    assert big.ok and (big.instances, big.processes) == (1, 2), big.summary()
    assert read_outputs(tmp_path / "big") == read_outputs(tmp_path / "small") and len(read_outputs(tmp_path / "big")) == 8
