"""Data-parallel training on Ray Train, on the session's real two-node local Ray cluster."""

from __future__ import annotations

import json

from tfbatch.train.config import TrainConfig
from tfbatch.train.data import write_digits
from tfbatch.train.pipeline import Augment
from tfbatch.train.ray_train import train_on_ray


def test_two_ray_train_workers_train_and_export(ray_cluster, tmp_path):
    data = tmp_path / "digits"
    write_digits(data)
    config = TrainConfig(data_dir=data, out_dir=tmp_path / "run", epochs=2, batch_size=16, steps_per_epoch=5,
                         learning_rate=2e-3, augment=Augment(pad=1, flip=False), threads_per_worker=1)
    # One CPU per worker on one-CPU nodes: the two replicas run on different nodes.
    result = train_on_ray(config, address=ray_cluster.address, num_workers=2, cpus_per_worker=1)

    assert result.workers == 2 and result.global_batch_size == 32  # TF_CONFIG named both workers
    assert result.steps == 10 and result.steps_per_epoch == 5
    assert result.export_path is not None and (result.export_path / "saved_model.pb").exists()
    logged = [json.loads(line) for line in (tmp_path / "run" / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in logged] == [1, 2]
    assert all(r["loss"] == r["loss"] for r in logged)  # finite, not NaN
