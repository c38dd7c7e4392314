"""A Ray worker killed mid-job: Ray restarts the actor, the job still writes each output once."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

from tests.integration.transform.ledger_files import done_keys
from tfbatch import run_transform
from tfbatch.engines.ray import RayEngine, RayOptions
from tfbatch.testing.ray_cluster import wait_until
from tfbatch.transform import TransformSpec

OBJECTS = 24


def _markers(out: Path) -> set[str]:
    """Keys the ledger records as done (a set: the journal may hold a re-run object twice)."""
    return set(done_keys(out))


def test_killed_instance_worker_is_restarted_and_every_output_written_once(ray_cluster, tmp_path, read_outputs,
                                                                          slow_job):
    model, inputs, out = slow_job(tmp_path, OBJECTS)
    # One object at a time per instance, a quarter second each: the job is still running when killed.
    spec = TransformSpec.build(model=str(model), input=str(inputs), output=str(out), content_type="application/json",
                               instance_count=2, max_batch_size=1, max_concurrent_transforms=1)
    box: dict = {}

    def job() -> None:
        try:
            engine = RayEngine(RayOptions.from_env(address=ray_cluster.address, cpus_per_instance=0.5))
            box["report"] = run_transform(spec, engine=engine)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            box["error"] = exc

    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    assert wait_until(lambda: len(_markers(out)) >= 3 or not thread.is_alive(), timeout=120)
    victims = ray_cluster.worker_pids("InstanceActor")
    assert victims, "no instance actor process found in the cluster"
    done_at_kill = len(_markers(out))
    os.kill(victims[0], signal.SIGKILL)
    thread.join(timeout=150)
    assert not thread.is_alive(), "the job did not finish after its worker was killed"
    if "error" in box:
        raise box["error"]
    report = box["report"]

    assert done_at_kill < OBJECTS, "the kill came after the job had finished: it proves nothing"
    assert report.ok, report.summary()
    assert report.objects == OBJECTS  # each object reported exactly once
    assert len(_markers(out)) == OBJECTS  # and recorded once in the ledger
    got = read_outputs(out)
    assert sorted(got) == [f"x{n:03d}.json.out" for n in range(OBJECTS)]
    for n in range(OBJECTS):
        assert json.loads(got[f"x{n:03d}.json.out"]) == {"predictions": [[2.0 * n, 2.0 * (n + 1)]]}
    # The killed process is gone for good: the instance finished in a restarted actor.
    assert victims[0] not in ray_cluster.worker_pids("InstanceActor")
