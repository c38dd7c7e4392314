from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
import pytest
import tensorflow as tf

from tfbatch.errors import ModelError
from tfbatch.train.config import TrainConfig
from tfbatch.train.data import write_digits
from tfbatch.train.launcher import LocalWorkers, train
from tfbatch.train.pipeline import Augment
from tfbatch.train.trainer import WarmupSchedule


@pytest.fixture(scope="module")
def digits_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    write_digits(root)
    return root


def _config(data_dir, out_dir, **overrides):
    settings = dict(
        data_dir=data_dir, out_dir=out_dir, epochs=2, batch_size=32, learning_rate=2e-3,
        steps_per_epoch=10, augment=Augment(pad=1, flip=False), threads_per_worker=1,
        timeout_s=300,
    )
    settings.update(overrides)
    return TrainConfig(**settings)


def test_warmup_schedule_scales_with_workers():
    schedule = WarmupSchedule(1e-3, workers=4, warmup_steps=100)
    assert float(schedule(0)) == pytest.approx(1e-3)
    assert float(schedule(50)) == pytest.approx(2.5e-3)
    assert float(schedule(100)) == pytest.approx(4e-3)
    assert float(schedule(10_000)) == pytest.approx(4e-3)
    assert float(WarmupSchedule(1e-3, workers=1, warmup_steps=100)(0)) == pytest.approx(1e-3)


def test_one_worker_trains_exports_and_continues(digits_dir, tmp_path):
    config = _config(digits_dir, tmp_path)
    result = train(config)
    assert result.steps == 20 and result.resumed_from_step == 0 and result.workers == 1
    assert result.images_per_second > 0
    lines = [json.loads(l) for l in (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [l["epoch"] for l in lines] == [1, 2]
    assert lines[-1]["loss"] < lines[0]["loss"]
    loaded = tf.saved_model.load(str(result.export_path))
    out = loaded.signatures["serving_tensor"](images=tf.zeros((2, 8, 8, 1)))
    assert out["probabilities"].shape == (2, 10)

    # more epochs on the same out_dir: continues from step 20, not from scratch
    longer = train(config.model_copy(update={"epochs": 3}))
    assert longer.resumed_from_step == 20 and longer.steps == 30


def test_a_failing_worker_is_reported(tmp_path):
    config = _config(tmp_path / "no-data", tmp_path / "out")
    with pytest.raises(ModelError, match="worker 0 exited with status 1"):
        train(config)


@pytest.mark.slow
def test_two_workers_reach_good_accuracy(digits_dir, tmp_path):
    config = _config(digits_dir, tmp_path, workers=2, batch_size=16, epochs=8,
                     steps_per_epoch=None, warmup_epochs=1)
    result = train(config)
    assert result.workers == 2 and result.global_batch_size == 32
    assert result.final_learning_rate == pytest.approx(4e-3)
    assert result.validation_accuracy >= 0.93
    # only the chief writes: one checkpoint directory, one metrics log
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoints", "export", "logs", "result.json", "train-config.json"]


@pytest.mark.slow
def test_sigkilled_run_resumes_from_its_checkpoint(digits_dir, tmp_path):
    config = _config(digits_dir, tmp_path, workers=2, batch_size=16, epochs=40,
                     steps_per_epoch=20, checkpoint_every_steps=10)
    workers = LocalWorkers(config).start()
    index = tmp_path / "checkpoints" / "checkpoint"
    deadline = time.monotonic() + 120
    while not index.exists() and time.monotonic() < deadline:
        assert all(p.poll() is None for p in workers.processes), "a worker died early"
        time.sleep(0.1)
    assert index.exists(), "no checkpoint within 120 s"
    for pid in workers.pids:
        os.kill(pid, signal.SIGKILL)
    codes = [p.wait() for p in workers.processes]
    assert codes == [-signal.SIGKILL] * 2
    assert not (tmp_path / "result.json").exists()
    saved_step = int(tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).rsplit("-", 1)[1])
    assert 10 <= saved_step < 800

    result = train(config.model_copy(update={"epochs": saved_step // 20 + 2}))
    assert result.resumed_from_step == saved_step
    assert result.steps == (saved_step // 20 + 2) * 20
    assert np.isfinite(result.train_loss)
