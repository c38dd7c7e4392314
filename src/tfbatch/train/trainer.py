"""One training worker: a custom loop under ``tf.distribute.MultiWorkerMirroredStrategy``.

Run by :mod:`tfbatch.train.launcher` as ``python -m tfbatch.train.trainer CONFIG.json``,
one process per worker, each with its own ``TF_CONFIG``. A custom loop (rather than
``model.fit``) keeps three things explicit: the step-exact resume point, which
process writes (the chief, ``task index 0``), and the learning-rate schedule.

Resume: the checkpoint holds the model, the optimizer (whose ``iterations`` is the
global step) and nothing else; the input order is a function of (seed, epoch), so a
restarted run skips the steps of the current epoch that were already taken.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from tfbatch.train.config import TrainConfig, TrainResult
from tfbatch.train.dataset_info import read_info
from tfbatch.train.export import export_servable
from tfbatch.train.models import build_model
from tfbatch.train.pipeline import split_dataset


@keras.saving.register_keras_serializable("tfbatch")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from the one-worker rate to ``base x workers`` (Goyal et al., 2017):
    a large global batch started at the full scaled rate tends to diverge early."""

    def __init__(self, base_rate: float, workers: int, warmup_steps: int):
        self.base_rate = float(base_rate)
        self.workers = int(workers)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step):
        target = self.base_rate * self.workers
        if self.warmup_steps <= 0 or self.workers == 1:
            return tf.constant(target, tf.float32)
        fraction = tf.minimum(tf.cast(step, tf.float32) / float(self.warmup_steps), 1.0)
        return self.base_rate + (target - self.base_rate) * fraction

    def get_config(self):
        return {"base_rate": self.base_rate, "workers": self.workers, "warmup_steps": self.warmup_steps}


def _task() -> tuple[int, int]:
    """(worker count, this worker's index) from TF_CONFIG; (1, 0) without it."""
    spec = json.loads(os.environ.get("TF_CONFIG", "{}"))
    workers = len(spec.get("cluster", {}).get("worker", [])) or 1
    return workers, int(spec.get("task", {}).get("index", 0))


def _log(path: Path, record: dict) -> None:
    with path.open("a") as handle:
        handle.write(json.dumps(record) + "\n")


def run_worker(config: TrainConfig) -> TrainResult | None:
    """Train as this process's worker; the chief returns (and writes) the result."""
    if config.threads_per_worker:
        tf.config.threading.set_intra_op_parallelism_threads(config.threads_per_worker)
        tf.config.threading.set_inter_op_parallelism_threads(config.threads_per_worker)
    workers, index = _task()
    chief = index == 0
    strategy = (
        tf.distribute.MultiWorkerMirroredStrategy()
        if workers > 1
        else tf.distribute.get_strategy()
    )
    info = read_info(config.data_dir)
    global_batch = config.batch_size * workers
    steps_per_epoch = config.steps_per_epoch or max(1, info.counts["train"] // global_batch)
    total_steps = steps_per_epoch * config.epochs
    model_name = config.resolved_model(info.image_shape)
    keras.utils.set_random_seed(config.seed)  # same initial weights on every worker

    with strategy.scope():
        model = build_model(model_name, tuple(info.image_shape), info.num_classes)
        schedule = WarmupSchedule(
            config.learning_rate, workers, round(config.warmup_epochs * steps_per_epoch)
        )
        optimizer = keras.optimizers.Adam(learning_rate=schedule)
        optimizer.build(model.trainable_variables)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)

    # Every worker saves (saving may run collectives); only the chief's copy is kept.
    save_dir = config.checkpoint_dir if chief else Path(tempfile.mkdtemp(prefix=f"ckpt-w{index}-"))
    manager = tf.train.CheckpointManager(checkpoint, str(save_dir), max_to_keep=2)
    latest = tf.train.latest_checkpoint(str(config.checkpoint_dir))
    if latest:
        checkpoint.restore(latest).expect_partial()
    start_step = int(optimizer.iterations.numpy())

    loss_fn = keras.losses.SparseCategoricalCrossentropy(reduction="none")

    def replica_step(images, labels):
        with tf.GradientTape() as tape:
            probabilities = model(images, training=True)
            per_example = loss_fn(labels, probabilities)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        correct = tf.reduce_sum(
            tf.cast(tf.equal(tf.argmax(probabilities, -1), labels), tf.float32)
        )
        return loss, correct

    @tf.function
    def train_step(iterator):
        loss, correct = strategy.run(replica_step, args=next(iterator))
        return (
            strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None),
            strategy.reduce(tf.distribute.ReduceOp.SUM, correct, axis=None),
        )

    def epoch_dataset(epoch: int, skip: int):
        def make(context: tf.distribute.InputContext):
            dataset = split_dataset(
                config.data_dir, "train", info,
                batch_size=context.get_per_replica_batch_size(global_batch),
                augment=config.augment,
                shuffle_seed=config.seed * 1_000_003 + epoch,
                shard=(context.num_input_pipelines, context.input_pipeline_id),
                drop_remainder=True,
            )
            # repeat: a shard may hold fewer than steps_per_epoch batches when set by hand
            return dataset.repeat().take(steps_per_epoch).skip(skip)

        return iter(strategy.distribute_datasets_from_function(make))

    @tf.function
    def predict(images):
        return model(images, training=False)

    def validation_accuracy() -> float | None:
        if not info.counts.get("validation"):
            return None
        correct = total = 0
        for images, labels in split_dataset(config.data_dir, "validation", info, batch_size=256):
            correct += int(np.sum(np.argmax(predict(images).numpy(), -1) == labels.numpy()))
            total += len(labels)
        return correct / max(1, total)

    if chief:
        config.log_dir.mkdir(parents=True, exist_ok=True)
    log_path = config.log_dir / "metrics.jsonl"
    step = start_step
    run_started = time.perf_counter()
    loss_sum = correct_sum = seen = 0.0
    val_accuracy: float | None = None
    while step < total_steps:
        epoch, skip = divmod(step, steps_per_epoch)
        iterator = epoch_dataset(epoch, skip)
        epoch_started = time.perf_counter()
        loss_sum = correct_sum = seen = 0.0
        for _ in range(steps_per_epoch - skip):
            loss, correct = train_step(iterator)
            step += 1
            loss_sum += float(loss)
            correct_sum += float(correct)
            seen += global_batch
            if config.checkpoint_every_steps and step % config.checkpoint_every_steps == 0:
                manager.save(checkpoint_number=step)
        if not config.checkpoint_every_steps or step % config.checkpoint_every_steps:
            manager.save(checkpoint_number=step)
        if chief:
            val_accuracy = validation_accuracy()
            elapsed = time.perf_counter() - epoch_started
            _log(log_path, {
                "epoch": epoch + 1, "step": step,
                "loss": loss_sum / max(1, steps_per_epoch - skip),
                "accuracy": correct_sum / max(1.0, seen),
                "validation_accuracy": val_accuracy,
                "learning_rate": float(schedule(step)),
                "images_per_second": seen / max(elapsed, 1e-9),
                "seconds": elapsed,
            })
    train_seconds = time.perf_counter() - run_started
    if not chief:
        shutil.rmtree(save_dir, ignore_errors=True)
        return None

    export_path = None
    if start_step < total_steps or not (config.export_dir / str(config.export_version)).exists():
        # Export a plain (non-distributed) copy: distributed variables are this process's
        # business, the SavedModel must not depend on a strategy.
        plain = build_model(model_name, tuple(info.image_shape), info.num_classes)
        plain.set_weights(model.get_weights())
        shutil.rmtree(config.export_dir / str(config.export_version), ignore_errors=True)
        export_path = export_servable(
            plain, config.export_dir, version=config.export_version,
            image_size=tuple(info.image_shape[:2]), channels=info.image_shape[2],
            class_names=info.class_names, include_classes=config.export_include_classes,
        )
    else:
        export_path = config.export_dir / str(config.export_version)
    run_steps = step - start_step
    result = TrainResult(
        workers=workers, model=model_name, epochs=config.epochs, steps=step,
        steps_per_epoch=steps_per_epoch, global_batch_size=global_batch,
        resumed_from_step=start_step, final_learning_rate=float(schedule(step)),
        train_loss=loss_sum / max(1.0, seen / global_batch),
        train_accuracy=correct_sum / max(1.0, seen),
        validation_accuracy=val_accuracy if val_accuracy is not None else validation_accuracy(),
        images_per_second=run_steps * global_batch / max(train_seconds, 1e-9),
        train_seconds=train_seconds, export_path=export_path,
        checkpoint_dir=config.checkpoint_dir,
    )
    config.result_path.write_text(result.model_dump_json(indent=2))
    return result


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tfbatch.train.trainer CONFIG.json", file=sys.stderr)
        return 2
    config = TrainConfig.model_validate_json(Path(args[0]).read_text())
    run_worker(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
