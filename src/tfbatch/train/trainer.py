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
from dataclasses import dataclass
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


@dataclass
class _Totals:
    """What the training loop has done so far in this run (the last epoch's sums)."""

    step: int
    loss_sum: float = 0.0
    correct_sum: float = 0.0
    seen: float = 0.0
    validation_accuracy: float | None = None
    seconds: float = 0.0


class _Worker:
    """One worker's run, as the steps ``run_worker`` takes in order.

    Why not ``model.fit`` with ``keras.callbacks.BackupAndRestore`` and ``CSVLogger``: with
    Keras 3, BackupAndRestore resumes at an epoch boundary only (the batch it records is
    not used on restore) and every worker writes the same backup files, while a run here
    resumes at the exact step it was checkpointed at and only the chief's files are kept.
    The per-epoch log stays ``logs/metrics.jsonl``, one JSON object per epoch with typed
    values (``null`` for a missing validation split), rather than CSVLogger's text columns.
    """

    def __init__(self, config: TrainConfig):
        self.config = config
        self.workers, self.index = _task()
        self.chief = self.index == 0
        self.strategy = (
            tf.distribute.MultiWorkerMirroredStrategy() if self.workers > 1 else tf.distribute.get_strategy()
        )
        self.info = read_info(config.data_dir)
        self.global_batch = config.batch_size * self.workers
        self.steps_per_epoch = config.steps_per_epoch or max(1, self.info.counts["train"] // self.global_batch)
        self.total_steps = self.steps_per_epoch * config.epochs
        self.model_name = config.resolved_model(self.info.image_shape)

    # ---- set-up ------------------------------------------------------------------------

    def build(self) -> None:
        """Model, optimizer and learning-rate schedule, created under the strategy."""
        config, info = self.config, self.info
        keras.utils.set_random_seed(config.seed)  # same initial weights on every worker
        with self.strategy.scope():
            self.model = build_model(self.model_name, tuple(info.image_shape), info.num_classes)
            self.schedule = WarmupSchedule(
                config.learning_rate, self.workers, round(config.warmup_epochs * self.steps_per_epoch)
            )
            self.optimizer = keras.optimizers.Adam(learning_rate=self.schedule)
            self.optimizer.build(self.model.trainable_variables)
            self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer)

    def restore(self) -> int:
        """Load the latest checkpoint, if any; the step it holds (the optimizer's iterations)."""
        config = self.config
        # Every worker saves (saving may run collectives); only the chief's copy is kept.
        self.save_dir = (
            config.checkpoint_dir if self.chief else Path(tempfile.mkdtemp(prefix=f"ckpt-w{self.index}-"))
        )
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(self.save_dir), max_to_keep=2)
        latest = tf.train.latest_checkpoint(str(config.checkpoint_dir))
        if latest:
            self.checkpoint.restore(latest).expect_partial()
        return int(self.optimizer.iterations.numpy())

    def compile_steps(self) -> None:
        """The distributed training step and the prediction function, as tf.functions."""
        model, optimizer, strategy, global_batch = self.model, self.optimizer, self.strategy, self.global_batch
        loss_fn = keras.losses.SparseCategoricalCrossentropy(reduction="none")

        def replica_step(images, labels):
            with tf.GradientTape() as tape:
                probabilities = model(images, training=True)
                per_example = loss_fn(labels, probabilities)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(probabilities, -1), labels), tf.float32))
            return loss, correct

        @tf.function
        def train_step(iterator):
            loss, correct = strategy.run(replica_step, args=next(iterator))
            return (
                strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None),
                strategy.reduce(tf.distribute.ReduceOp.SUM, correct, axis=None),
            )

        @tf.function
        def predict(images):
            return model(images, training=False)

        self.train_step, self.predict = train_step, predict

    # ---- the loop ----------------------------------------------------------------------

    def epoch_batches(self, epoch: int, skip: int):
        """This epoch's batches, in the order fixed by (seed, epoch), less the first ``skip``."""
        config, info = self.config, self.info

        def make(context: tf.distribute.InputContext):
            dataset = split_dataset(
                config.data_dir, "train", info,
                batch_size=context.get_per_replica_batch_size(self.global_batch),
                augment=config.augment,
                shuffle_seed=config.seed * 1_000_003 + epoch,
                shard=(context.num_input_pipelines, context.input_pipeline_id),
                drop_remainder=True,
            )
            # repeat: a shard may hold fewer than steps_per_epoch batches when set by hand
            return dataset.repeat().take(self.steps_per_epoch).skip(skip)

        return iter(self.strategy.distribute_datasets_from_function(make))

    def validation_accuracy(self) -> float | None:
        if not self.info.counts.get("validation"):
            return None
        correct = total = 0
        for images, labels in split_dataset(self.config.data_dir, "validation", self.info, batch_size=256):
            correct += int(np.sum(np.argmax(self.predict(images).numpy(), -1) == labels.numpy()))
            total += len(labels)
        return correct / max(1, total)

    def train_epochs(self, start_step: int) -> _Totals:
        """Steps from ``start_step`` to the end, checkpointing and (chief) logging each epoch."""
        config = self.config
        if self.chief:
            config.log_dir.mkdir(parents=True, exist_ok=True)
        totals = _Totals(step=start_step)
        run_started = time.perf_counter()
        while totals.step < self.total_steps:
            epoch, skip = divmod(totals.step, self.steps_per_epoch)
            self.train_one_epoch(epoch, skip, totals)
        totals.seconds = time.perf_counter() - run_started
        return totals

    def train_one_epoch(self, epoch: int, skip: int, totals: _Totals) -> None:
        every = self.config.checkpoint_every_steps
        iterator = self.epoch_batches(epoch, skip)
        started = time.perf_counter()
        totals.loss_sum = totals.correct_sum = totals.seen = 0.0
        for _ in range(self.steps_per_epoch - skip):
            loss, correct = self.train_step(iterator)
            totals.step += 1
            totals.loss_sum += float(loss)
            totals.correct_sum += float(correct)
            totals.seen += self.global_batch
            if every and totals.step % every == 0:
                self.manager.save(checkpoint_number=totals.step)
        if not every or totals.step % every:
            self.manager.save(checkpoint_number=totals.step)
        if self.chief:
            totals.validation_accuracy = self.validation_accuracy()
            elapsed = time.perf_counter() - started
            _log(self.config.log_dir / "metrics.jsonl", {
                "epoch": epoch + 1, "step": totals.step,
                "loss": totals.loss_sum / max(1, self.steps_per_epoch - skip),
                "accuracy": totals.correct_sum / max(1.0, totals.seen),
                "validation_accuracy": totals.validation_accuracy,
                "learning_rate": float(self.schedule(totals.step)),
                "images_per_second": totals.seen / max(elapsed, 1e-9),
                "seconds": elapsed,
            })

    # ---- the chief's outputs -----------------------------------------------------------

    def export(self, start_step: int) -> Path:
        """The SavedModel of this run (exported again only if it trained, or none exists yet)."""
        config, info = self.config, self.info
        target = config.export_dir / str(config.export_version)
        if start_step >= self.total_steps and target.exists():
            return target
        # Export a plain (non-distributed) copy: distributed variables are this process's
        # business, the SavedModel must not depend on a strategy.
        plain = build_model(self.model_name, tuple(info.image_shape), info.num_classes)
        plain.set_weights(self.model.get_weights())
        shutil.rmtree(target, ignore_errors=True)
        return export_servable(
            plain, config.export_dir, version=config.export_version,
            image_size=tuple(info.image_shape[:2]), channels=info.image_shape[2],
            class_names=info.class_names, include_classes=config.export_include_classes,
        )

    def result(self, start_step: int, totals: _Totals, export_path: Path) -> TrainResult:
        config, global_batch = self.config, self.global_batch
        validation = totals.validation_accuracy
        return TrainResult(
            workers=self.workers, model=self.model_name, epochs=config.epochs, steps=totals.step,
            steps_per_epoch=self.steps_per_epoch, global_batch_size=global_batch,
            resumed_from_step=start_step, final_learning_rate=float(self.schedule(totals.step)),
            train_loss=totals.loss_sum / max(1.0, totals.seen / global_batch),
            train_accuracy=totals.correct_sum / max(1.0, totals.seen),
            validation_accuracy=validation if validation is not None else self.validation_accuracy(),
            images_per_second=(totals.step - start_step) * global_batch / max(totals.seconds, 1e-9),
            train_seconds=totals.seconds, export_path=export_path,
            checkpoint_dir=config.checkpoint_dir,
        )


def run_worker(config: TrainConfig) -> TrainResult | None:
    """Train as this process's worker; the chief returns (and writes) the result."""
    if config.threads_per_worker:
        tf.config.threading.set_intra_op_parallelism_threads(config.threads_per_worker)
        tf.config.threading.set_inter_op_parallelism_threads(config.threads_per_worker)
    worker = _Worker(config)
    worker.build()
    start_step = worker.restore()
    worker.compile_steps()
    totals = worker.train_epochs(start_step)
    if not worker.chief:
        shutil.rmtree(worker.save_dir, ignore_errors=True)
        return None
    result = worker.result(start_step, totals, worker.export(start_step))
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
