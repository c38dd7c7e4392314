"""Pooled (warm) instance actors on a real two-node cluster (engines/ray_warm.py).

A job with ``keep_warm_s`` leaves its actors, model loaded, for the next job with the same
model and settings; everything a job guarantees still holds on a reused actor.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.transform.ledger_files import done_keys
from tfbatch import run_transform
from tfbatch.engines.ray import RayEngine, RayOptions
from tfbatch.testing.models import make_slow_model
from tfbatch.testing.ray_cluster import wait_until
from tfbatch.transform import TransformSpec


def _spec(model: Path, inputs: Path, out: Path, **extra) -> TransformSpec:
    fields = dict(content_type="application/jsonlines", split_type="Line", batch_strategy="MultiRecord",
                  assemble_with="Line", instance_count=2, max_batch_size=4, max_concurrent_transforms=2)
    fields.update(extra)
    return TransformSpec.build(model=str(model), input=str(inputs), output=str(out), **fields)


def _engine(cluster, keep_warm_s: float = 60) -> RayEngine:
    return RayEngine(RayOptions.from_env(address=cluster.address, cpus_per_instance=0.5, keep_warm_s=keep_warm_s))


@pytest.fixture
def drop_pool(ray_cluster) -> Iterator[None]:
    """No pooled actor outlives the test (they hold cluster CPUs while idle)."""
    yield
    import ray

    from tfbatch.engines.ray_warm import drop_warm_actors

    if not ray.is_initialized():
        ray.init(address=ray_cluster.address, namespace="tfbatch", logging_level="ERROR", log_to_driver=False)
    try:
        drop_warm_actors()
    finally:
        ray.shutdown()


def test_second_job_reuses_the_pooled_actors_with_the_same_outputs(ray_cluster, linear_model, tmp_path,
                                                                   write_inputs, read_outputs, drop_pool):
    inputs = write_inputs(tmp_path / "in", objects=10)
    cold = run_transform(_spec(linear_model, inputs, tmp_path / "cold"),
                         engine=_engine(ray_cluster, keep_warm_s=0))
    assert cold.ok, cold.summary()

    first_engine = _engine(ray_cluster)
    first = run_transform(_spec(linear_model, inputs, tmp_path / "first"), engine=first_engine)
    second_engine = _engine(ray_cluster)
    second = run_transform(_spec(linear_model, inputs, tmp_path / "second"), engine=second_engine)
    assert first.ok and second.ok, (first.summary(), second.summary())
    assert first.objects == second.objects == 10

    # Same processes, model already loaded: the second job started no actor of its own.
    assert first_engine.timeline.actor_pids == second_engine.timeline.actor_pids
    assert first_engine.timeline.reused == {0: False, 1: False}
    assert second_engine.timeline.reused == {0: True, 1: True}
    # Each job wrote its own outputs and its own ledger, with the same bytes as fresh actors.
    expected = read_outputs(tmp_path / "cold")
    assert read_outputs(tmp_path / "first") == expected == read_outputs(tmp_path / "second")
    assert sorted(set(done_keys(tmp_path / "second"))) == sorted(set(done_keys(tmp_path / "cold")))
    # Counts are per job, not per process.
    assert sum(c["objects"] for c in second_engine.timeline.actor_calls.values()) == 10
    # The same job again after its output was deleted: the reused processes make the folders again.
    import shutil

    shutil.rmtree(tmp_path / "second")
    third_engine = _engine(ray_cluster)
    third = run_transform(_spec(linear_model, inputs, tmp_path / "second"), engine=third_engine)
    assert third.ok, third.summary()
    assert third_engine.timeline.reused == {0: True, 1: True}
    assert read_outputs(tmp_path / "second") == expected


def test_another_model_or_setting_gets_other_actors(ray_cluster, linear_model, tmp_path, write_inputs, drop_pool):
    inputs = write_inputs(tmp_path / "in", objects=4)
    a = _engine(ray_cluster)
    assert run_transform(_spec(linear_model, inputs, tmp_path / "a"), engine=a).ok
    b = _engine(ray_cluster)  # a setting the loaded runner depends on: not the same pool
    assert run_transform(_spec(linear_model, inputs, tmp_path / "b", max_batch_size=2), engine=b).ok
    assert set(a.timeline.actor_pids.values()).isdisjoint(b.timeline.actor_pids.values())
    assert b.timeline.reused == {0: False, 1: False}


def test_concurrent_job_runs_on_fresh_actors_while_the_pool_is_busy(ray_cluster, tmp_path, drop_pool):
    model = make_slow_model(tmp_path / "model" / "1", 0.2).parent
    inputs = tmp_path / "in"
    inputs.mkdir()
    for n in range(8):
        (inputs / f"x{n}.json").write_text(json.dumps({"instances": [[n, n]]}))

    def spec(out: str) -> TransformSpec:
        return TransformSpec.build(model=str(model), input=str(inputs), output=str(tmp_path / out),
                                   content_type="application/json", instance_count=1, max_batch_size=1,
                                   max_concurrent_transforms=1)

    import ray

    # Both jobs run from this process at once: one driver connection for both (an engine that
    # connected by itself would disconnect at its end, under the other job's feet).
    ray.init(address=ray_cluster.address, namespace="tfbatch", logging_level="ERROR", log_to_driver=False)
    warm_up = _engine(ray_cluster)
    assert run_transform(spec("warm"), engine=warm_up).ok  # the pool now holds this job's actor
    box: dict = {}
    holder = _engine(ray_cluster)
    thread = threading.Thread(target=lambda: box.setdefault("report", run_transform(spec("holder"), engine=holder)))
    thread.start()
    assert wait_until(lambda: len(set(done_keys(tmp_path / "holder"))) >= 1, timeout=120)
    other = _engine(ray_cluster)
    report = run_transform(spec("other"), engine=other)
    thread.join(timeout=120)
    assert report.ok and box["report"].ok
    assert holder.timeline.reused == {0: True}
    assert other.timeline.reused == {0: False}
    assert other.timeline.actor_pids[0] != holder.timeline.actor_pids[0]


def test_idle_pooled_actor_exits_on_its_own(ray_cluster, linear_model, tmp_path, write_inputs, drop_pool):
    inputs = write_inputs(tmp_path / "in", objects=2)
    engine = _engine(ray_cluster, keep_warm_s=1)
    spec = _spec(linear_model, inputs, tmp_path / "out", instance_count=1)
    assert run_transform(spec, engine=engine).ok
    pid = engine.timeline.actor_pids[0]
    assert wait_until(lambda: pid not in ray_cluster.worker_pids("InstanceActor"), timeout=60)


DRIVER = textwrap.dedent("""
    import sys
    from tfbatch import run_transform
    from tfbatch.engines.ray import RayEngine, RayOptions
    from tfbatch.transform import TransformSpec

    address, model, inputs, out = sys.argv[1:5]
    spec = TransformSpec.build(model=model, input=inputs, output=out, content_type="application/json",
                               instance_count=1, max_batch_size=1, max_concurrent_transforms=1)
    run_transform(spec, engine=RayEngine(RayOptions.from_env(address=address, cpus_per_instance=0.5,
                                                             keep_warm_s=600)))
""")


def test_killed_driver_takes_its_pooled_actor_with_it_and_resume_finishes(ray_cluster, tmp_path, read_outputs,
                                                                          drop_pool, slow_job):
    objects = 30
    model, inputs, out = slow_job(tmp_path, objects)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    before = set(ray_cluster.worker_pids("InstanceActor"))
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, ray_cluster.address, str(model), str(inputs), str(out)],
                            env=env)
    try:
        assert wait_until(lambda: len(set(done_keys(out))) >= 3 or proc.poll() is not None, timeout=180)
        assert proc.poll() is None, "the driver ended before it could be killed"
        actors = set(ray_cluster.worker_pids("InstanceActor")) - before
        assert actors, "no pooled actor process found"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    # The pooled actor does not go on with the dead job's objects (even with 600 s to stay warm).
    assert wait_until(lambda: not actors & set(ray_cluster.worker_pids("InstanceActor")), timeout=60)
    at_kill = set(done_keys(out))
    assert len(at_kill) < objects

    engine = RayEngine(RayOptions.from_env(address=ray_cluster.address, cpus_per_instance=0.5, keep_warm_s=60))
    spec = TransformSpec.build(model=str(model), input=str(inputs), output=str(out), content_type="application/json",
                               instance_count=1, max_batch_size=1, max_concurrent_transforms=1)
    report = run_transform(spec, engine=engine)
    assert report.ok, report.summary()
    assert report.objects + report.skipped == objects and report.skipped >= len(at_kill)
    got = read_outputs(out)
    assert sorted(got) == [f"x{n:03d}.json.out" for n in range(objects)]
    for n in range(objects):
        assert json.loads(got[f"x{n:03d}.json.out"]) == {"predictions": [[2.0 * n, 2.0 * (n + 1)]]}


def test_killed_pooled_actor_is_restarted_and_every_output_written_once(ray_cluster, tmp_path, read_outputs,
                                                                        drop_pool, slow_job):
    objects = 24
    model, inputs, out = slow_job(tmp_path, objects)
    spec = TransformSpec.build(model=str(model), input=str(inputs), output=str(out), content_type="application/json",
                               instance_count=2, max_batch_size=1, max_concurrent_transforms=1)
    before = set(ray_cluster.worker_pids("InstanceActor"))
    box: dict = {}
    engine = _engine(ray_cluster)
    thread = threading.Thread(target=lambda: box.setdefault("report", run_transform(spec, engine=engine)),
                              daemon=True)
    thread.start()
    assert wait_until(lambda: len(set(done_keys(out))) >= 3 or not thread.is_alive(), timeout=120)
    victims = sorted(set(ray_cluster.worker_pids("InstanceActor")) - before)
    assert victims, "no pooled actor process found"
    os.kill(victims[0], signal.SIGKILL)
    thread.join(timeout=150)
    assert not thread.is_alive(), "the job did not finish after its pooled actor was killed"
    report = box["report"]
    assert report.ok, report.summary()
    assert report.objects == objects
    assert len(set(done_keys(out))) == objects
    got = read_outputs(out)
    for n in range(objects):
        assert json.loads(got[f"x{n:03d}.json.out"]) == {"predictions": [[2.0 * n, 2.0 * (n + 1)]]}
    assert victims[0] not in engine.timeline.actor_pids.values()


def test_idle_pool_makes_room_for_another_job(ray_cluster, linear_model, tmp_path, write_inputs, drop_pool):
    inputs = write_inputs(tmp_path / "in", objects=4)
    # Two pooled actors of one CPU each: every CPU of the two-node cluster, held while idle.
    pooled = RayEngine(RayOptions.from_env(address=ray_cluster.address, cpus_per_instance=1, keep_warm_s=600))
    assert run_transform(_spec(linear_model, inputs, tmp_path / "a"), engine=pooled).ok
    # Another job needing both CPUs runs now, not after the pool's idle time: it evicts the idle pool.
    other = RayEngine(RayOptions.from_env(address=ray_cluster.address, cpus_per_instance=1))
    report = run_transform(_spec(linear_model, inputs, tmp_path / "b", max_batch_size=2), engine=other)
    assert report.ok, report.summary()
    assert set(pooled.timeline.actor_pids.values()).isdisjoint(other.timeline.actor_pids.values())


def test_pool_key_follows_settings_and_artifact_not_job_location(linear_model, tmp_path, write_inputs):
    import shutil

    from tfbatch.engines.ray_warm import pool_key

    linear_model = shutil.copytree(linear_model, tmp_path / "model")  # touched below
    inputs = write_inputs(tmp_path / "in", objects=1)
    res, env = {"cpus": 1}, {}
    key = pool_key(_spec(linear_model, inputs, tmp_path / "a"), res, env)
    assert key is not None
    same_model_other_place = _spec(linear_model, tmp_path / "other-in", tmp_path / "b", resume=False,
                                   retry_failed=True, max_error_rate=0.1)
    assert pool_key(same_model_other_place, res, env) == key
    assert pool_key(_spec(linear_model, inputs, tmp_path / "a", max_batch_size=8), res, env) != key
    assert pool_key(_spec(linear_model, inputs, tmp_path / "a", instance_count=3), res, env) != key
    assert pool_key(_spec(linear_model, inputs, tmp_path / "a"), {"cpus": 2}, env) != key
    assert pool_key(_spec(linear_model, inputs, tmp_path / "a"), res, {"AWS_REGION": "x"}) != key
    # The same path with a re-exported model is another key.
    model_file = next(p for p in Path(linear_model).rglob("*") if p.is_file())
    stat = model_file.stat()
    os.utime(model_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert pool_key(_spec(linear_model, inputs, tmp_path / "a"), res, env) != key
    # No key when the artifact cannot be inspected: such a job runs on fresh actors.
    assert pool_key(_spec(tmp_path / "missing", inputs, tmp_path / "a"), res, env) is None


def test_actor_sizes_its_handler_pool_by_the_instances_on_its_machine(ray_cluster):
    """Both raylets of the test cluster run on this one machine: two instances share its cores,
    one alone has them all (on a cluster of machines, one instance per node has its node's)."""
    import ray

    from tfbatch.engines.ray_actor import _host_instances

    ray.init(address=ray_cluster.address, logging_level="ERROR", log_to_driver=False)
    probe = ray.remote(num_cpus=0)(_host_instances)
    assert ray.get(probe.remote(1)) == 1
    assert ray.get(probe.remote(2)) == 2
    assert ray.get(probe.remote(4)) == 4


HANDLER = """
import requests


def handler(data, context):
    response = requests.post(context.rest_uri, data=data.read())
    return response.content, context.accept_header
"""


def test_actors_chosen_by_the_default_rule_are_the_same_for_the_next_job_and_reused(
        ray_cluster, linear_model, tmp_path, write_inputs, read_outputs, drop_pool, monkeypatch):
    # The rule counts the cluster's CPUs, not the free ones: the first job's warm actors hold
    # CPUs while idle, and the next job must still ask for the same actors to find them.
    import shutil

    from tfbatch.engines import local

    monkeypatch.setattr(local, "MIN_OBJECTS_PER_PROCESS", 4)  # eight objects pay for two actors
    model = tmp_path / "model"
    shutil.copytree(linear_model, model)
    (model / "code").mkdir()
    (model / "code" / "inference.py").write_text(HANDLER)
    inputs = write_inputs(tmp_path / "in", objects=8)
    spec = lambda out: TransformSpec.build(  # noqa: E731
        model=str(model), input=str(inputs), output=str(out), content_type="application/jsonlines")
    engines = [_engine(ray_cluster), _engine(ray_cluster)]
    first = run_transform(spec(tmp_path / "first"), engine=engines[0])
    second = run_transform(spec(tmp_path / "second"), engine=engines[1])
    assert first.ok and second.ok and first.processes == second.processes == 2, (first.summary(), second.summary())
    assert engines[1].timeline.reused == {0: True, 1: True}
    assert engines[0].timeline.actor_pids == engines[1].timeline.actor_pids
    assert read_outputs(tmp_path / "first") == read_outputs(tmp_path / "second")
