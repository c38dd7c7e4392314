"""Typed training settings and result, shared by the launcher and the worker processes."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from tfbatch.train.pipeline import Augment


class TrainConfig(BaseModel):
    data_dir: Path = Field(description="a dataset written by 'tfbatch data' (has dataset.json)")
    out_dir: Path = Field(description="checkpoints/, logs/, export/ and result.json go here")
    model: Literal["auto", "cifar", "digits"] = "auto"
    workers: int = Field(1, ge=1, description="data-parallel worker processes")
    epochs: int = Field(10, ge=1)
    batch_size: int = Field(64, ge=1, description="per worker; the global batch is workers x this")
    learning_rate: float = Field(1e-3, gt=0, description="for one worker; scaled by worker count")
    warmup_epochs: float = Field(1.0, ge=0, description="linear ramp to the scaled rate")
    steps_per_epoch: int | None = Field(None, ge=1, description="default: train records // global batch")
    augment: Augment = Field(default_factory=Augment)
    checkpoint_every_steps: int = Field(0, ge=0, description="0: at the end of each epoch only")
    export_version: int = Field(1, ge=0)
    export_include_classes: bool = True
    seed: int = 0
    threads_per_worker: int | None = Field(None, ge=1, description="TF intra-op threads per worker")
    timeout_s: float = Field(3600, gt=0, description="the launcher kills workers after this")

    def resolved_model(self, image_shape: tuple[int, int, int]) -> str:
        if self.model != "auto":
            return self.model
        return "digits" if tuple(image_shape[:2]) == (8, 8) else "cifar"

    @property
    def checkpoint_dir(self) -> Path:
        return self.out_dir / "checkpoints"

    @property
    def log_dir(self) -> Path:
        return self.out_dir / "logs"

    @property
    def export_dir(self) -> Path:
        return self.out_dir / "export"

    @property
    def result_path(self) -> Path:
        return self.out_dir / "result.json"


class TrainResult(BaseModel):
    workers: int
    model: str
    epochs: int
    steps: int = Field(description="optimizer steps in total, including any before a resume")
    steps_per_epoch: int
    global_batch_size: int
    resumed_from_step: int = 0
    final_learning_rate: float
    train_loss: float
    train_accuracy: float
    validation_accuracy: float | None
    images_per_second: float = Field(description="training images per second over this run's steps")
    train_seconds: float
    export_path: Path | None
    checkpoint_dir: Path
